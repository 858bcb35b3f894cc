"""The GPU catalog: built-in entries (package data) plus the user's own (``joulebound devices import``).

Every entry is one TOML file (schema below). Built-in files live in ``joulebound/hw/data/``;
user files in :func:`user_catalog_dir` (``$JOULEBOUND_HOME/devices`` or
``~/.config/joulebound/devices``). Lookup by :func:`get_device` is case-insensitive and ignores
punctuation and the vendor words "nvidia", "geforce", "tesla", so ``"A100-SXM4-80GB"``,
``"a100_sxm4_80gb"``, ``"NVIDIA A100-SXM4-80GB"`` (the ``nvidia-smi`` product name) and the alias
``"a100"`` all find the same entry.

Entry schema (units: MHz, FLOP/s, bytes/s, bytes, W, s)::

    schema = "joulebound-device"
    version = 1
    name = "a100-sxm4-80gb"           # catalog key (lower case)
    aliases = ["a100", "a100-sxm4"]   # optional
    product_name = "NVIDIA A100-SXM4-80GB"
    architecture = "Ampere"
    default_core_mhz = 1275           # base clock / default application clock
    max_core_mhz = 1410
    boost_core_mhz = 1410             # optional: rated (datasheet) boost clock
    default_mem_mhz = 1593
    max_mem_mhz = 1593
    mem_bandwidth_bps = 2.039e12
    memory_bytes = 8.589934592e10
    memory_type = "HBM2e"             # optional: GDDR5, GDDR6, GDDR6X, HBM2, HBM2e, HBM3, HBM3e
    sm_count = 108
    power_limit_default_w = 500.0
    power_limit_min_w = 100.0
    power_limit_max_w = 500.0
    idle_power_w = 67.0
    switch_latency_s = 0.006          # optional
    sensor_period_s = 0.1             # optional
    interconnect = "nvlink3"          # optional: GPU-to-GPU link (joulebound.hw.links)
    tables_constructed = false
    [peak_flops]                      # dense FP/s at max_core_mhz
    fp32 = 1.95e13
    bf16 = 3.12e14
    [supported_clocks]                # memory MHz -> core MHz list (a real nvidia-smi table) ...
    1593 = [1410, 1395, ...]
    [clock_ranges]                    # ... or ranges (constructed tables): min, max, step
    1593 = { min = 210, max = 1410, step = 15 }
    [sources]                         # field -> where the value came from, or "estimate ..."
    peak_flops = "NVIDIA A100 datasheet ..."
"""

from __future__ import annotations

import copy
import difflib
import math
import os
import re
import tomllib
from dataclasses import fields as dc_fields
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from joulebound.core.errors import JouleboundError, SchemaError, did_you_mean
from joulebound.core.jsonio import Fields
from joulebound.hw.spec import DTYPES, DeviceSpec

SCHEMA = "joulebound-device"
VERSION = 1
HOME_ENV = "JOULEBOUND_HOME"

#: Fields every entry must carry a source for (``sources[field]``).
SOURCED_FIELDS = (
    "supported_clocks", "default_core_mhz", "max_core_mhz", "default_mem_mhz", "max_mem_mhz",
    "peak_flops", "mem_bandwidth_bps", "memory_bytes", "sm_count", "power_limit_default_w",
    "power_limit_min_w", "power_limit_max_w", "idle_power_w", "switch_latency_s",
    "sensor_period_s",
)

_VENDOR_WORDS = ("nvidia", "geforce", "tesla", "quadro")


def normalize(name: str) -> str:
    """Lookup key: lower case, vendor words and every non-alphanumeric character removed."""
    s = name.lower()
    for w in _VENDOR_WORDS:
        s = s.replace(w, "")
    return re.sub(r"[^a-z0-9]", "", s)


def user_catalog_dir() -> Path:
    """Where ``joulebound devices import`` stores entries.

    ``$JOULEBOUND_HOME/devices`` when ``JOULEBOUND_HOME`` is set, else
    ``~/.config/joulebound/devices``.
    """
    home = os.environ.get(HOME_ENV)
    if home:
        return Path(home).expanduser() / "devices"
    return Path("~/.config/joulebound/devices").expanduser()


def builtin_dir() -> Path:
    """The folder of built-in entries (package data)."""
    return Path(str(resources.files("joulebound.hw") / "data"))


# -- reading entries ------------------------------------------------------------------------------

def _expand_ranges(ranges: Any, path: str) -> dict[int, list[int]]:
    f = Fields(ranges, path, "clock_ranges")
    out: dict[int, list[int]] = {}
    for key in f.obj:
        mem = _mem_key(key, path, "clock_ranges")
        r = Fields(f.obj[key], path, f"clock_ranges.{key}")
        lo = r.get("min", int, nonneg=True)
        hi = r.get("max", int, nonneg=True)
        step = r.get("step", int, 15)
        if step <= 0 or lo > hi or lo <= 0:
            raise SchemaError(path, f"clock_ranges.{key}",
                              f"need 0 < min <= max and step > 0, got min={lo} max={hi} step={step}")
        out[mem] = list(range(hi, lo - 1, -step))
        if out[mem][-1] != lo:
            raise SchemaError(path, f"clock_ranges.{key}",
                              f"max - min ({hi - lo}) is not a multiple of step {step}")
    return out


def _mem_key(key: str, path: str, section: str) -> int:
    try:
        mem = int(key)
    except ValueError:
        raise SchemaError(path, f"{section}.{key}",
                          "keys must be memory clocks in MHz (integers), e.g. 1593") from None
    if mem <= 0:
        raise SchemaError(path, f"{section}.{key}", "memory clock must be positive MHz")
    return mem


def _table(obj: Any, path: str) -> dict[int, list[int]]:
    f = Fields(obj, path, "supported_clocks")
    out: dict[int, list[int]] = {}
    for key, cores in f.obj.items():
        mem = _mem_key(key, path, "supported_clocks")
        if not isinstance(cores, list) or not cores or not all(
                isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in cores):
            raise SchemaError(path, f"supported_clocks.{key}",
                              "expected a non-empty list of core clocks in MHz (positive integers)")
        out[mem] = sorted(set(cores), reverse=True)
    return out


def _pos_int(f: Fields, p: str, key: str, default: Any = ...) -> int:
    v = f.get(key, int, default, nonneg=True)
    if v is not None and v <= 0:
        raise SchemaError(p, key, f"must be > 0, got {v}")
    return v


def _num(f: Fields, p: str, key: str, default: Any = ..., positive: bool = True) -> float:
    v = f.get(key, (int, float), default, nonneg=True)
    if v is not None:
        v = float(v)
        if not math.isfinite(v) or (positive and v <= 0):
            raise SchemaError(p, key, f"must be a finite number > 0, got {v}")
    return v


def _identity(f: Fields, p: str) -> tuple[str, list[str]]:
    """Schema, version, name and aliases of an entry."""
    schema = f.get("schema", str, SCHEMA)
    if schema != SCHEMA:
        raise SchemaError(p, "schema", f"expected {SCHEMA!r}, got {schema!r}")
    version = f.get("version", int, VERSION)
    if version != VERSION:
        raise SchemaError(p, "version", f"version {version} is not supported (this joulebound "
                          f"reads version {VERSION})")
    name = f.get("name", str).strip().lower()
    if not name or not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
        raise SchemaError(p, "name", f"{name!r} is not a valid name (use lower-case letters, "
                          "digits, '-', '.', '_', e.g. 'rtx4090')")
    aliases = f.get("aliases", list, [])
    if not all(isinstance(a, str) and a.strip() for a in aliases):
        raise SchemaError(p, "aliases", "expected a list of non-empty strings")
    return name, aliases


def _clock_table(f: Fields, p: str) -> tuple[dict[int, list[int]], bool]:
    """The clock table (memory MHz -> core MHz, descending) and whether it came from ranges."""
    has_table = "supported_clocks" in f.obj
    has_ranges = "clock_ranges" in f.obj
    if has_table == has_ranges:
        raise SchemaError(p, "supported_clocks",
                          "give exactly one of the tables supported_clocks (memory MHz -> list of "
                          "core MHz) or clock_ranges (memory MHz -> {min, max, step})")
    table = _table(f.obj["supported_clocks"], p) if has_table else \
        _expand_ranges(f.obj["clock_ranges"], p)
    if not table:
        raise SchemaError(p, "supported_clocks", "empty clock table")
    return table, has_ranges


def _clock_limits(f: Fields, p: str, table: dict[int, list[int]]) -> tuple[int, int, int, int]:
    """``(max_mem, default_mem, max_core, default_core)`` MHz, checked against the table."""
    max_mem = _pos_int(f, p, "max_mem_mhz", max(table))
    if max_mem not in table:
        raise SchemaError(p, "max_mem_mhz", f"{max_mem} MHz is not a memory clock of the table "
                          f"({sorted(table, reverse=True)})")
    default_mem = _pos_int(f, p, "default_mem_mhz", max_mem)
    if default_mem not in table:
        raise SchemaError(p, "default_mem_mhz", f"{default_mem} MHz is not a memory clock of the "
                          f"table ({sorted(table, reverse=True)})")
    top_core = max(max(v) for v in table.values())
    max_core = _pos_int(f, p, "max_core_mhz", top_core)
    if max_core != top_core:
        raise SchemaError(p, "max_core_mhz", f"{max_core} MHz differs from the top of the clock "
                          f"table ({top_core} MHz)")
    default_core = _pos_int(f, p, "default_core_mhz", max_core)
    if default_core > max_core:
        raise SchemaError(p, "default_core_mhz", f"{default_core} MHz is above max_core_mhz "
                          f"{max_core}")
    return max_mem, default_mem, max_core, default_core


def _peak_flops(f: Fields, p: str) -> dict[str, float]:
    """Dense FLOP/s per dtype (``fp32`` required)."""
    peaks_obj = Fields(f.get("peak_flops", dict), p, "peak_flops")
    peaks: dict[str, float] = {}
    for k in peaks_obj.obj:
        if k not in DTYPES:
            raise SchemaError(p, f"peak_flops.{k}", f"unknown dtype; use {', '.join(DTYPES)}")
        peaks[k] = float(peaks_obj.get(k, (int, float), nonneg=True))
        if not math.isfinite(peaks[k]) or peaks[k] <= 0:
            raise SchemaError(p, f"peak_flops.{k}", f"must be a finite number > 0 FLOP/s, got {peaks[k]}")
    if "fp32" not in peaks:
        raise SchemaError(p, "peak_flops.fp32", "missing (dense FP32 FLOP/s at max_core_mhz)")
    return peaks


def _power_limits(f: Fields, p: str) -> tuple[float, float, float]:
    """``(min, max, default)`` power limits (W), ordered min <= default <= max."""
    pl_min = _num(f, p, "power_limit_min_w")
    pl_max = _num(f, p, "power_limit_max_w")
    pl_def = _num(f, p, "power_limit_default_w")
    if not pl_min <= pl_def <= pl_max:
        raise SchemaError(p, "power_limit_default_w",
                          f"need power_limit_min_w <= default <= max, got {pl_min} <= {pl_def} "
                          f"<= {pl_max}")
    return pl_min, pl_max, pl_def


def _vf_curve(f: Fields, p: str) -> list[tuple[int, float]] | None:
    vf = f.get("vf_curve", list, None)
    if vf is None:
        return None
    try:
        return [(int(a), float(b)) for a, b in vf]
    except (TypeError, ValueError):
        raise SchemaError(p, "vf_curve", "expected [[core_mhz, relative_voltage], ...]") from None


def _memory_type(f: Fields, p: str) -> str:
    """The memory technology in :data:`~joulebound.hw.memory.TECHS`' spelling, or ``""``."""
    mem_type = f.get("memory_type", str, "").strip()
    if not mem_type:
        return mem_type
    from joulebound.hw.memory import TECHS

    match = [k for k in TECHS if k.lower() == mem_type.lower()]
    if not match:
        raise SchemaError(p, "memory_type", f"unknown memory type {mem_type!r}; use one of "
                          f"{', '.join(TECHS)}")
    return match[0]


def _interconnect(f: Fields, p: str) -> str | None:
    """The GPU-to-GPU link's canonical name (:mod:`joulebound.hw.links`), or ``None``."""
    link = f.get("interconnect", str, None)
    if link is None:
        return None
    from joulebound.hw.links import get_link

    try:
        return get_link(link, scope="intra").name
    except JouleboundError as exc:
        raise SchemaError(p, "interconnect", str(exc)) from None


def spec_from_dict(doc: Any, path: str | Path) -> tuple[DeviceSpec, list[str]]:
    """Validate one entry (a parsed TOML document); returns the spec and its aliases.

    Fields are checked in a fixed order (identity, clock table, clock limits, peak FLOP/s, power
    limits, the optional fields, then the rest); the first error found is raised.

    Raises :class:`SchemaError` naming ``path`` and the offending field.
    """
    p = str(path)
    f = Fields(doc, p)
    name, aliases = _identity(f, p)
    table, has_ranges = _clock_table(f, p)
    max_mem, default_mem, max_core, default_core = _clock_limits(f, p, table)
    peaks = _peak_flops(f, p)
    pl_min, pl_max, pl_def = _power_limits(f, p)
    vf = _vf_curve(f, p)
    sources = f.get("sources", dict, {})
    if not all(isinstance(v, str) for v in sources.values()):
        raise SchemaError(p, "sources", "every source must be a string")
    sm = f.get("sm_count", int, 0, nonneg=True)
    boost = f.get("boost_core_mhz", int, None, nonneg=True)
    mem_type = _memory_type(f, p)
    link = _interconnect(f, p)

    spec = DeviceSpec(
        name=name,
        product_name=f.get("product_name", str),
        architecture=f.get("architecture", str, "unknown"),
        supported_clocks=table,
        default_core_mhz=default_core,
        max_core_mhz=max_core,
        default_mem_mhz=default_mem,
        max_mem_mhz=max_mem,
        peak_flops=peaks,
        mem_bandwidth_bps=_num(f, p, "mem_bandwidth_bps"),
        power_limit_default_w=pl_def,
        power_limit_min_w=pl_min,
        power_limit_max_w=pl_max,
        idle_power_w=_num(f, p, "idle_power_w"),
        memory_bytes=_num(f, p, "memory_bytes", 0.0, positive=False),
        sm_count=sm,
        switch_latency_s=_num(f, p, "switch_latency_s", None),
        sensor_period_s=_num(f, p, "sensor_period_s", None),
        vf_curve=vf,
        tables_constructed=f.get("tables_constructed", bool, has_ranges),
        boost_core_mhz=boost,
        memory_type=mem_type,
        sources=dict(sources),
        interconnect=link,
    )
    return spec, [a.strip() for a in aliases]


def load_entry(path: str | Path) -> tuple[DeviceSpec, list[str]]:
    """Read one TOML entry file; errors name the file and the field."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise JouleboundError(f"{p}: cannot read ({exc.strerror}).") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SchemaError(p, f"line {line}, column {col}",
                          f"byte 0x{data[exc.start]:02x} is not UTF-8 (TOML files must be UTF-8); "
                          "re-save the file as UTF-8") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SchemaError(p, "<file>", f"not valid TOML ({exc}); fix that line") from None
    except (RecursionError, ValueError) as exc:
        raise SchemaError(p, "<file>", f"not valid TOML ({exc}); fix the file") from None
    return spec_from_dict(doc, p)


# -- writing entries ------------------------------------------------------------------------------

def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isfinite(v):
            return repr(v)
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")  # TOML spellings
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _key(k: Any) -> str:
    k = str(k)
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_value(k)


def spec_to_toml(spec: DeviceSpec, aliases: list[str] | tuple[str, ...] = (),
                 header: str = "", ranges: bool | None = None) -> str:
    """The TOML text of an entry (readable by :func:`load_entry`).

    ``ranges``: write the table as ``[clock_ranges]`` (only possible when every list is a
    contiguous range with one step); default: ranges for constructed tables, lists otherwise.
    """
    lines = [f"# {line}".rstrip() for line in header.splitlines()] if header else []
    lines += [f'schema = "{SCHEMA}"', f"version = {VERSION}"]
    top: dict[str, Any] = {
        "name": spec.name, "aliases": list(aliases), "product_name": spec.product_name,
        "architecture": spec.architecture, "default_core_mhz": spec.default_core_mhz,
        "max_core_mhz": spec.max_core_mhz,
        "boost_core_mhz": spec.boost_core_mhz,
        "default_mem_mhz": spec.default_mem_mhz,
        "max_mem_mhz": spec.max_mem_mhz, "mem_bandwidth_bps": float(spec.mem_bandwidth_bps),
        "memory_bytes": float(spec.memory_bytes), "memory_type": spec.memory_type or None,
        "sm_count": spec.sm_count,
        "power_limit_default_w": float(spec.power_limit_default_w),
        "power_limit_min_w": float(spec.power_limit_min_w),
        "power_limit_max_w": float(spec.power_limit_max_w),
        "idle_power_w": float(spec.idle_power_w),
        "switch_latency_s": spec.switch_latency_s, "sensor_period_s": spec.sensor_period_s,
        "tables_constructed": spec.tables_constructed, "interconnect": spec.interconnect,
    }
    if spec.vf_curve is not None:
        top["vf_curve"] = [[int(a), float(b)] for a, b in spec.vf_curve]
    for k, v in top.items():
        if v is not None:
            lines.append(f"{k} = {_toml_value(v)}")
    lines += ["", "[peak_flops]  # dense FLOP/s at max_core_mhz"]
    lines += [f"{k} = {_toml_value(float(v))}" for k, v in spec.peak_flops.items()]
    use_ranges = spec.tables_constructed if ranges is None else ranges
    if use_ranges:
        rng = {}
        for mem in spec.mem_clocks_mhz:
            cores = sorted(spec.supported_clocks[mem])
            step = cores[1] - cores[0] if len(cores) > 1 else 15
            if cores != list(range(cores[0], cores[-1] + 1, step)):
                use_ranges = False
                break
            rng[mem] = {"min": cores[0], "max": cores[-1], "step": step}
    if use_ranges:
        lines += ["", "[clock_ranges]  # memory MHz -> core clocks min..max in steps (MHz)"]
        lines += [f"{m} = {_toml_value(r)}" for m, r in rng.items()]
    else:
        lines += ["", "[supported_clocks]  # memory MHz -> supported core clocks (MHz)"]
        lines += [f"{m} = {_toml_value(spec.core_clocks_mhz(m))}" for m in spec.mem_clocks_mhz]
    lines += ["", "[sources]"]
    lines += [f"{_key(k)} = {_toml_value(v)}" for k, v in spec.sources.items()]
    return "\n".join(lines) + "\n"


# -- the catalog ----------------------------------------------------------------------------------

class _Catalog:
    def __init__(self) -> None:
        self.specs: dict[str, DeviceSpec] = {}
        self.aliases: dict[str, list[str]] = {}
        self.origin: dict[str, str] = {}
        self.keys: dict[str, str] = {}  # normalized key -> name
        self.broken: list[str] = []  # errors of user files that were skipped

    def add(self, spec: DeviceSpec, aliases: list[str], origin: str) -> None:
        self.specs[spec.name] = spec
        self.aliases[spec.name] = list(aliases)
        self.origin[spec.name] = origin
        for key in (spec.name, spec.product_name, *aliases):
            self.keys.setdefault(normalize(key), spec.name)
        self.keys[normalize(spec.name)] = spec.name


@lru_cache(maxsize=1)
def _builtins() -> _Catalog:
    cat = _Catalog()
    for path in sorted(builtin_dir().glob("*.toml")):
        spec, aliases = load_entry(path)
        cat.add(spec, aliases, f"built-in ({path.name})")
    return cat


_registered: dict[str, tuple[DeviceSpec, list[str]]] = {}
_registered_version = 0  # bumped by register/unregister: part of the cache key

# The merged catalog, kept until its key changes: (resolved user dir, (file name, mtime_ns, size)
# of each of its *.toml, registration version). Computing the key costs one directory scan; a
# rebuild parses every user file. `import`, `remove`, an edit of a user file, another
# $JOULEBOUND_HOME and register/unregister all change the key.
_cache: tuple[tuple[Any, ...], _Catalog] | None = None


def clear_cache() -> None:
    """Forget the merged catalog; the next lookup rereads the user folder."""
    global _cache
    _cache = None


def _user_files(udir: Path) -> list[tuple[Path, int, int]]:
    """The user folder's ``*.toml`` files with their mtime (ns) and size, sorted by path."""
    out = []
    try:
        paths = sorted(udir.glob("*.toml")) if udir.is_dir() else []
    except OSError:
        paths = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:  # vanished between glob and stat, or unreadable: load_entry reports it
            out.append((path, -1, -1))
            continue
        out.append((path, st.st_mtime_ns, st.st_size))
    return out


def _catalog() -> _Catalog:
    """The merged catalog (cached; rebuilt when the user folder or registrations change)."""
    global _cache
    udir = user_catalog_dir()
    try:
        where = udir.resolve()
    except OSError:
        where = udir
    files = _user_files(udir)
    key = (str(where), tuple((p.name, m, n) for p, m, n in files), _registered_version)
    if _cache is not None and _cache[0] == key:
        return _cache[1]
    cat = _build_catalog([p for p, _, _ in files])
    _cache = (key, cat)
    return cat


def _build_catalog(user_files: list[Path]) -> _Catalog:
    base = _builtins()
    cat = _Catalog()
    # user entries and registered specs first: they win alias clashes
    for spec, aliases in _registered.values():
        cat.add(spec, aliases, "registered in this process")
    for path in user_files:
        try:
            spec, aliases = load_entry(path)
        except JouleboundError as exc:  # one bad user file must not break every lookup
            cat.broken.append(str(exc))
            continue
        if spec.name not in cat.specs:
            cat.add(spec, aliases, f"user ({path})")
    for name, spec in base.specs.items():
        if name not in cat.specs:
            cat.add(spec, base.aliases[name], base.origin[name])
    return cat


def broken_user_entries() -> list[str]:
    """Error messages of user catalog files that could not be read (they are skipped)."""
    return list(_catalog().broken)


def device_names() -> list[str]:
    """Catalog keys, sorted."""
    return sorted(_catalog().specs)


def list_devices() -> list[DeviceSpec]:
    """Every entry (built-in, user, registered), sorted by name. Copies: safe to modify."""
    cat = _catalog()
    return [copy.deepcopy(cat.specs[n]) for n in sorted(cat.specs)]


def device_aliases(name: str) -> list[str]:
    """Aliases of the entry ``name`` (as written in its file)."""
    cat = _catalog()
    return list(cat.aliases.get(_resolve(cat, name), []))


def device_origin(name: str) -> str:
    """Where the entry came from: ``built-in (file)``, ``user (path)`` or ``registered``."""
    cat = _catalog()
    return cat.origin[_resolve(cat, name)]


def resolve_name(name: str) -> str:
    """The catalog key for ``name`` (an entry name, alias or product name)."""
    return _resolve(_catalog(), name)


def _resolve(cat: _Catalog, name: str) -> str:
    key = normalize(name)
    if key in cat.keys:
        return cat.keys[key]
    names = sorted(cat.specs)
    by_key = {n: n for n in names}
    by_key.update({a.lower(): n for n, al in cat.aliases.items() for a in al if a.lower() not in
                   by_key})
    close = difflib.get_close_matches(name.lower(), list(by_key), n=6)
    hint = list(dict.fromkeys(by_key[c] for c in close))[:3]
    suffix = did_you_mean(name.lower(), names)
    if hint:  # aliases (e.g. 'a100') often match better than full names
        suffix = f" Did you mean {', '.join(repr(h) for h in hint)}?" + \
            suffix[suffix.index(" Choices:"):]
    if cat.broken:
        suffix += " (Skipped unreadable user entries: " + "; ".join(cat.broken) + ")"
    raise JouleboundError(f"unknown GPU {name!r}.{suffix} Aliases and product names also work "
                          "(see `joulebound devices`); add a GPU with `joulebound devices import "
                          "FILE` (TOML or `nvidia-smi -q -x` output).")


def get_device(name: str | DeviceSpec) -> DeviceSpec:
    """The catalog entry for ``name`` (case-insensitive; aliases and product names work).

    A :class:`DeviceSpec` is returned unchanged. Unknown names raise :class:`JouleboundError`
    listing the choices. The result is a copy: modifying it does not change the catalog.
    """
    if isinstance(name, DeviceSpec):
        return name
    if not isinstance(name, str):
        raise JouleboundError(f"device must be a name or a DeviceSpec, got {type(name).__name__}")
    cat = _catalog()
    return copy.deepcopy(cat.specs[_resolve(cat, name)])


def register_device(spec: DeviceSpec, aliases: list[str] | tuple[str, ...] = ()) -> DeviceSpec:
    """Make ``spec`` findable by :func:`get_device` for the rest of this process (not saved).

    Use :func:`save_user_device` to store it in the user catalog instead.
    """
    global _registered_version
    _check_spec(spec, "<registered spec>")
    _registered[spec.name] = (copy.deepcopy(spec), list(aliases))
    _registered_version += 1
    return spec


def unregister_device(name: str) -> None:
    """Forget a :func:`register_device` entry (no error when absent)."""
    global _registered_version
    if _registered.pop(name, None) is not None:
        _registered_version += 1


def _check_spec(spec: DeviceSpec, where: str) -> None:
    """Round-trip through the TOML validator, so registered specs obey the same rules."""
    spec_from_dict(tomllib.loads(spec_to_toml(spec, ranges=False)), where)


def save_user_device(spec: DeviceSpec, aliases: list[str] | tuple[str, ...] = (),
                     header: str = "", overwrite: bool = False) -> Path:
    """Write ``spec`` to the user catalog; returns the file path."""
    if spec.name in _builtins().specs:
        raise JouleboundError(f"{spec.name!r} is a built-in GPU; choose another name with --name "
                              f"(e.g. {spec.name}-mine).")
    text = spec_to_toml(spec, aliases, header=header)
    spec_from_dict(tomllib.loads(text), f"<entry {spec.name}>")
    path = user_catalog_dir() / f"{spec.name}.toml"
    if path.exists() and not overwrite:
        raise JouleboundError(f"{path} already exists; pass --force to replace it, or choose "
                              "another name with --name.")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    clear_cache()  # an overwrite within the mtime granularity would keep the key unchanged
    return path


def slug(product_name: str) -> str:
    """A catalog name from an ``nvidia-smi`` product name, e.g. ``"rtx-a5000"``."""
    s = product_name.lower()
    for w in _VENDOR_WORDS:
        s = s.replace(w, " ")
    s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    return s or "gpu"


def import_device(path: str | Path, name: str | None = None, like: str | None = None,
                  gpu_index: int = 0, overwrite: bool = False) -> tuple[DeviceSpec, Path]:
    """Add a GPU to the user catalog from a TOML entry or ``nvidia-smi -q -x`` output.

    For XML: clock tables, clocks, power limits, product name and architecture come from the file;
    peak rates and bandwidth from the catalog entry ``like`` (default: the entry whose product name
    matches). Returns the stored spec and the file written.
    """
    p = Path(path)
    if not p.exists():
        raise JouleboundError(f"{p}: file not found")
    if not p.is_file():
        raise JouleboundError(f"{p}: not a file; pass a TOML entry or the output of "
                              "`nvidia-smi -q -x > gpu.xml`")
    try:
        head = p.read_text(encoding="utf-8", errors="replace")[:4096].lstrip()
    except OSError as exc:
        raise JouleboundError(f"{p}: cannot be read ({exc.strerror})") from None
    if p.suffix.lower() == ".xml" or head.startswith("<"):
        from joulebound.hw.nvsmi import parse_nvsmi

        gpus = parse_nvsmi(p)
        if not 0 <= gpu_index < len(gpus):
            raise JouleboundError(f"{p}: has {len(gpus)} GPU(s); --gpu {gpu_index} is out of range "
                                  f"(use 0..{len(gpus) - 1}).")
        g = gpus[gpu_index]
        if g.product_name == "unknown" and not name:
            raise JouleboundError(f"{p}: the nvidia-smi output has no product name; pass --name "
                                  "NAME (and --like NAME for peak rates and bandwidth).")
        base = None
        if like is not None:
            base = get_device(like)
        else:
            try:
                base = get_device(g.product_name)
            except JouleboundError:
                base = None
        spec = g.to_spec(name=(name or slug(g.product_name)).lower(), base=base)
        spec.sources["imported_from"] = f"{p.resolve()} (gpu {gpu_index} of {len(gpus)})"
        header = (f"Imported by `joulebound devices import` from {p.name} (gpu {gpu_index}, "
                  f"driver {g.driver_version}).")
        aliases: list[str] = []
    else:
        spec, aliases = load_entry(p)
        if name:
            spec.name = name.lower()
        header = f"Imported by `joulebound devices import` from {p.name}."
    missing = [k for k in SOURCED_FIELDS if k not in spec.sources]
    for k in missing:
        spec.sources[k] = "not given in the imported file"
    out = save_user_device(spec, aliases, header=header, overwrite=overwrite)
    return get_device(spec.name), out


def spec_fields() -> list[str]:
    """Names of the DeviceSpec fields, in declaration order."""
    return [f.name for f in dc_fields(DeviceSpec)]
