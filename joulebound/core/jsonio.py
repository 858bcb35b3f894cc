"""Versioned JSON files shared by all stages (traces, plans, characterization metadata).

Every file written by joulebound is an object ``{"schema": KIND, "version": N, ...}``. Loading a
file of the wrong kind, a newer version, or with a missing / mistyped field raises
:class:`~joulebound.core.errors.SchemaError` that names the file and the field, never a bare traceback.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

from joulebound.core.errors import JouleboundError, SchemaError


def read_json(path: str | Path) -> Any:
    """Read a JSON (or ``.json.gz``) file; errors name the file and the line."""
    p = Path(path)
    if not p.exists():
        raise JouleboundError(f"{p}: file not found")
    try:
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rt", encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise SchemaError(p, "<file>", f"not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaError(p, "<file>", f"cannot be read: {exc}") from exc


def write_json(path: str | Path, obj: Any, indent: int | None = 1) -> Path:
    """Write ``obj`` as JSON (gzip when the name ends in ``.gz``); returns the path.

    ``indent=None`` writes compact JSON with the C encoder (large files: traces); the default
    indents for people reading the file."""
    p = Path(path)
    text = json.dumps(obj, indent=indent, default=json_default) + "\n"  # serialise first: no half file
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.suffix == ".gz":
            fh = gzip.open(p, "wt", encoding="utf-8", compresslevel=6)
        else:
            fh = open(p, "w", encoding="utf-8")
        with fh:
            fh.write(text)
    except IsADirectoryError as exc:
        raise JouleboundError(f"{p}: is a folder; give a file name to write to") from exc
    except OSError as exc:
        raise JouleboundError(f"{p}: cannot write ({exc.strerror or exc}); choose another path") from exc
    return p


def json_default(o: Any) -> Any:
    """``json.dump(default=...)`` hook: numpy scalars and arrays as numbers and lists, objects
    with ``to_json()`` through it."""
    try:
        import numpy as np

        if isinstance(o, np.integer):
            return int(o)
        if isinstance(o, np.floating):
            return float(o)
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if hasattr(o, "to_json"):
        return o.to_json()
    raise TypeError(f"cannot serialise {type(o).__name__}")


def check_header(doc: Any, path: str | Path, kind: str, version: int) -> dict[str, Any]:
    """Check ``{"schema": kind, "version": version}``; return the document."""
    if not isinstance(doc, dict):
        raise SchemaError(path, "<root>", f"expected a JSON object, got {type(doc).__name__}")
    if doc.get("schema") != kind:
        raise SchemaError(
            path, "schema", f"expected {kind!r}, got {doc.get('schema')!r} (is this a {kind} file?)"
        )
    got = doc.get("version")
    if not isinstance(got, int):
        raise SchemaError(path, "version", f"missing or not an integer: {got!r}")
    if got != version:
        raise SchemaError(
            path,
            "version",
            f"version {got} is not supported (this joulebound reads version {version}); "
            "regenerate the file with this version of joulebound",
        )
    return doc


class Fields:
    """Typed access to one JSON object's fields with errors naming ``path`` and the field."""

    def __init__(self, obj: Any, path: str | Path, prefix: str = "") -> None:
        if not isinstance(obj, dict):
            raise SchemaError(path, prefix or "<root>", f"expected an object, got {obj!r:.60}")
        self.obj = obj
        self.path = path
        self.prefix = prefix

    def _name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def get(self, key: str, types: type | tuple[type, ...], default: Any = ..., *,
            nonneg: bool = False) -> Any:
        if key not in self.obj or self.obj[key] is None:
            if default is ...:
                raise SchemaError(self.path, self._name(key), "missing")
            return default
        value = self.obj[key]
        if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
            raise SchemaError(self.path, self._name(key), f"expected a number, got {value!r}")
        if float in (types if isinstance(types, tuple) else (types,)) and isinstance(value, int):
            value = float(value)
        if not isinstance(value, types):
            tname = types.__name__ if isinstance(types, type) else "/".join(t.__name__ for t in types)
            raise SchemaError(self.path, self._name(key), f"expected {tname}, got {value!r:.60}")
        if nonneg and isinstance(value, int | float) and not math.isfinite(value):
            raise SchemaError(self.path, self._name(key), f"must be a finite number, got "
                              f"{value!r}; fix the value or regenerate the file")
        if nonneg and isinstance(value, int | float) and value < 0:
            raise SchemaError(self.path, self._name(key), f"must be >= 0, got {value!r}")
        return value
