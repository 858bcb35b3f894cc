"""Helpers shared by CLI commands: JSON output, provenance-labeled tables."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from typing import Any

from rich.console import Console

from joulebound.core.fmt import fmt_pct  # noqa: F401 - re-exported for CLI modules

console = Console()
err_console = Console(stderr=True)


def print_json(obj: Any) -> None:
    """Print ``obj`` as strict JSON on stdout (numpy values converted; NaN/inf, which JSON does
    not have, become ``null``: unknown)."""
    sys.stdout.write(json_text(obj))


class JsonListPrinter:
    """Prints a JSON list one item at a time (:meth:`add`, then :meth:`close`), the same text
    :func:`print_json` prints for the whole list: a long list is never held."""

    def __init__(self) -> None:
        self.n = 0

    def add(self, obj: Any) -> None:
        sys.stdout.write(("[\n " if self.n == 0 else ",\n ")
                         + json_text(obj).rstrip("\n").replace("\n", "\n "))
        self.n += 1

    def close(self) -> int:
        """End the list; returns how many items it has."""
        sys.stdout.write("\n]\n" if self.n else "[]\n")
        return self.n


def print_json_list(items: Iterable[Any]) -> int:
    """Print the JSON list of ``items`` as :func:`print_json` prints a list, one item at a time
    (:class:`JsonListPrinter`); returns how many."""
    jp = JsonListPrinter()
    for obj in items:
        jp.add(obj)
    return jp.close()


def json_text(obj: Any) -> str:
    """``obj`` as the strict JSON text :func:`print_json` prints (ends with a newline)."""
    from joulebound.core.jsonio import json_default

    def finite(o: Any) -> Any:
        if o is None or isinstance(o, str | bool | int):
            return o
        if isinstance(o, float):
            return o if math.isfinite(o) else None
        if isinstance(o, dict):
            return {k: finite(v) for k, v in o.items()}
        if isinstance(o, list | tuple):
            return [finite(v) for v in o]
        try:
            return finite(json_default(o))       # numpy values, objects with to_json()
        except TypeError:
            return o                          # json.dump reports what it cannot serialise

    return json.dumps(finite(obj), indent=1, default=json_default, allow_nan=False) + "\n"


def warn_memory(trace: Any, spec: Any) -> str | None:
    """Print (stderr) and return a warning when an analytic trace's training step needs more
    memory than the device has (:func:`joulebound.workload.memory.trace_memory_warning`)."""
    from joulebound.workload.memory import trace_memory_warning

    text = trace_memory_warning(trace, spec) if spec is not None else None
    if text:
        err_console.print(f"[yellow]warning[/]: {text}", highlight=False)
    return text


def reflow(text: str) -> str:
    """Join the lines of each paragraph of a ``--help`` text so the terminal, not the source,
    decides line breaks (paragraphs are separated by blank lines)."""
    return "\n\n".join(" ".join(par.split()) for par in text.strip().split("\n\n"))


def print_skipped_rows(store: Any) -> None:
    """One note on stderr per store row that could not be read and was skipped
    (:attr:`joulebound.energy.store.Store.skipped_rows`)."""
    from rich.markup import escape

    for n in store.skipped_rows:
        err_console.print(f"[yellow]note:[/] {escape(n)}", highlight=False)
