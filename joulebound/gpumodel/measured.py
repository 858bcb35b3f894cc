"""A :class:`Characterization` from a user's measured clock-sweep table (CSV).

Columns (header required, any order, extra columns ignored):

``kernel``
    kernel name (matches ``Kernel.name`` of the trace; one row applies to every invocation of it)
``core``, ``mem``
    core and memory clock (MHz), or ``auto``
``time``
    mean duration of one invocation (s), > 0
``energy``
    mean energy of one invocation (J), >= 0
``repeats``
    how many invocations the mean is over (integer >= 1); duplicate (kernel, core, mem) rows are
    combined weighted by repeats, and their spread kept

Every error names the file, the data row (1-based, header excluded), the column and the file line,
and says how to fix it. NaN and infinite values are refused.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from joulebound.core.clocks import ClockConfig
from joulebound.core.errors import JouleboundError, SchemaError
from joulebound.core.provenance import MEASURED
from joulebound.gpumodel.characterization import Characterization
from joulebound.hw.spec import DeviceSpec

COLUMNS = ("kernel", "core", "mem", "time", "energy", "repeats")


def _where(at: tuple[int, int], field: str) -> str:
    """``row R.field (line L)``: data row R (header excluded) on file line L."""
    return f"row {at[0]}.{field} (line {at[1]})"


def _clock(text: str, path: Path, row: tuple[int, int], field: str) -> int | None:
    t = text.strip().lower()
    if t in ("auto", ""):
        return None
    try:
        v = float(t)
    except ValueError:
        raise SchemaError(path, _where(row, field), f"not a clock in MHz or 'auto': {text!r}") from None
    if not np.isfinite(v) or v <= 0 or v != int(v):
        raise SchemaError(path, _where(row, field), f"clock must be a positive integer MHz (or "
                                                    f"'auto'), got {text!r}")
    return int(v)


def _number(text: str, path: Path, row: tuple[int, int], field: str, positive: bool) -> float:
    try:
        v = float(text)
    except ValueError:
        raise SchemaError(path, _where(row, field), f"not a number: {text!r}") from None
    if not np.isfinite(v) or (v <= 0 if positive else v < 0):
        rule = "> 0" if positive else ">= 0"
        raise SchemaError(path, _where(row, field), f"must be {rule} and finite, got {text!r}")
    return v


def _csv_text(p: Path) -> str:
    """The file as text (UTF-8, BOM allowed); a bad byte is named by line."""
    data = p.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SchemaError(p, f"line {line}", f"byte 0x{data[exc.start]:02x} is not UTF-8; save "
                                             "the table as UTF-8 CSV") from None


def read_table(path: str | Path, device: DeviceSpec | None = None
               ) -> dict[tuple[str, ClockConfig], tuple[float, float, float, float, int]]:
    """Parse and check the CSV: ``(kernel, config) -> (time, energy, time_sd, energy_sd, n)``."""
    import io

    p = Path(path)
    if not p.exists():
        raise JouleboundError(f"{p}: measured table not found")
    reader = csv.DictReader(io.StringIO(_csv_text(p), newline=""))
    try:
        header = [h.strip().lower() for h in (reader.fieldnames or [])]
    except csv.Error as exc:
        raise SchemaError(p, "line 1", f"not a CSV header ({exc})") from None
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise SchemaError(p, ", ".join(missing),
                          f"missing column(s); the header must name {', '.join(COLUMNS)} "
                          f"(found: {', '.join(header) or 'nothing'})")
    reader.fieldnames = header
    acc: dict[tuple[str, ClockConfig], list[tuple[float, float, int]]] = {}
    row = 0
    while True:
        try:
            rec = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise SchemaError(p, f"line {reader.line_num}", f"not valid CSV ({exc})") from None
        row += 1
        at = (row, reader.line_num)
        if rec.get(None):
            raise SchemaError(p, f"row {row} (line {at[1]})",
                              f"{len(header) + len(rec[None])} fields but the header names "
                              f"{len(header)}: a misaligned row (an unquoted comma?); quote the "
                              "field or fix the row")
        if rec.get("kernel") is None or any(rec.get(c) is None for c in COLUMNS):
            raise SchemaError(p, f"row {row} (line {at[1]})",
                              f"too few fields (the header names {len(header)})")
        name = rec["kernel"].strip()
        if not name:
            raise SchemaError(p, _where(at, "kernel"), "empty kernel name")
        cfg = ClockConfig(_clock(rec["core"], p, at, "core"), _clock(rec["mem"], p, at, "mem"))
        if device is not None and not device.supports(cfg):
            raise SchemaError(p, _where(at, "core/mem"),
                              f"clock {cfg.label} is not supported by {device.name} (memory "
                              f"clocks {device.mem_clocks_mhz} MHz; core clocks "
                              f"{min(device.core_clocks_mhz())}-{device.max_core_mhz} MHz in "
                              f"15 MHz steps)")
        t = _number(rec["time"], p, at, "time", positive=True)
        e = _number(rec["energy"], p, at, "energy", positive=False)
        try:
            n = int(float(rec["repeats"]))
        except (ValueError, OverflowError):
            raise SchemaError(p, _where(at, "repeats"),
                              f"not an integer: {rec['repeats']!r}") from None
        if n < 1:
            raise SchemaError(p, _where(at, "repeats"), f"must be >= 1, got {rec['repeats']!r}")
        acc.setdefault((name, cfg), []).append((t, e, n))
    if not acc:
        raise SchemaError(p, "<rows>", "no data rows")
    out = {}
    for key, vals in acc.items():
        a = np.array(vals, float)
        w = a[:, 2] / a[:, 2].sum()
        tm, em = float(w @ a[:, 0]), float(w @ a[:, 1])
        tsd = float(np.sqrt(w @ (a[:, 0] - tm) ** 2)) if len(a) > 1 else float("nan")
        esd = float(np.sqrt(w @ (a[:, 1] - em) ** 2)) if len(a) > 1 else float("nan")
        out[key] = (tm, em, tsd, esd, int(a[:, 2].sum()))
    return out


def from_measured(path: str | Path, device: DeviceSpec | None = None,
                  base: Characterization | None = None) -> Characterization:
    """Build a Characterization from a measured table.

    Without ``base`` the table must be a complete kernel × config grid (missing cells are named
    in the error). With ``base`` (e.g. a modeled characterization of the trace), measured cells
    replace the modeled ones for every invocation whose kernel name matches; the rest stay
    modeled.
    """
    table = read_table(path, device)
    p = Path(path)
    if base is None:
        kernels = list(dict.fromkeys(k for k, _ in table))
        configs = list(dict.fromkeys(c for _, c in table))
        missing = [(k, c.label) for k in kernels for c in configs if (k, c) not in table]
        if missing:
            shown = ", ".join(f"{k}@{c}" for k, c in missing[:5])
            raise SchemaError(p, "<grid>", f"{len(missing)} kernel x clock cell(s) missing "
                                           f"(e.g. {shown}); measure every kernel at every clock, "
                                           "or pass a trace so missing cells are modeled")
        K, C = len(kernels), len(configs)
        arr = np.array([[table[(k, c)][:4] for c in configs] for k in kernels]).reshape(K, C, 4)
        return Characterization(kernels, configs, arr[..., 0], arr[..., 1], np.ones((K, C), bool),
                                device=device.name if device else "", time_spread_s=arr[..., 2],
                                energy_spread_j=arr[..., 3],
                                meta={"source": str(p), "provenance": MEASURED})
    return _overlay(table, p, base)


def _check_kernels(table: dict, path: Path, names: list[str]) -> None:
    """Every measured kernel must be a trace kernel (error names the unknown ones)."""
    unknown = sorted({k for k, _ in table} - set(names))
    if unknown:
        raise SchemaError(path, "kernel", f"kernel(s) not in the trace: {', '.join(unknown[:5])}; "
                                          f"trace kernels include {', '.join(sorted(set(names))[:8])}")


def _overlay(table: dict, p: Path, base: Characterization) -> Characterization:
    """``base`` with the measured cells of ``table`` (parsed by :func:`read_table`) in place of
    the modeled ones, for every invocation of each measured kernel."""
    _check_kernels(table, p, base.kernel_names)
    names = np.array(base.kernel_names)
    col = {c: j for j, c in enumerate(base.configs)}
    t, e, meas = base.time_s.copy(), base.energy_j.copy(), base.measured.copy()
    for (k, c), (tm, em, _, _, _) in table.items():
        if c not in col:
            raise SchemaError(p, "core/mem", f"clock {c.label} (kernel {k}) is not among the "
                                             "characterized configs")
        rows = names == k
        t[rows, col[c]] = tm
        e[rows, col[c]] = em
        meas[rows, col[c]] = True
    meta = dict(base.meta)
    meta["measured_source"] = str(p)
    return Characterization(base.kernel_names, base.configs, t, e, meas, device=base.device,
                            meta=meta)


def characterize_with_measurements(trace, device, path: str | Path,  # type: ignore[no-untyped-def]
                                   params=None) -> Characterization:
    """Characterize ``trace`` on ``device`` with a measured table: each measured kernel's work
    and power activity are fitted to its measured cells (:func:`~joulebound.gpumodel.fit_measured.
    fit_trace_work`), every cell is then modeled from the fitted work, and measured cells replace
    the modeled ones (``measured = True``)."""
    from joulebound.gpumodel.characterize import resolve_device

    spec = resolve_device(device)
    table = read_table(path, spec)
    # characterize_from_table checks the table's kernels against the trace before fitting
    return characterize_from_table(trace, spec, table, params=params, source=Path(path))


def characterize_from_table(trace, device, table: dict,  # type: ignore[no-untyped-def]
                            params=None, source: str | Path = "<measured>") -> Characterization:
    """:func:`characterize_with_measurements` on a table already in memory
    (``(kernel, config) -> (time s, energy J, time sd, energy sd, repeats)``, the form of
    :func:`read_table`; ``joulebound calibrate`` measures it): every measured kernel's work and
    activity are fitted to its cells, every cell is modeled from the fitted work, and the measured
    cells replace the modeled ones (``measured = True``)."""
    from joulebound.gpumodel.characterize import (
        apply_host_gaps,
        characterize,
        planning_configs,
        resolve_clocks,
        resolve_device,
    )
    from joulebound.gpumodel.fit_measured import fit_trace_work
    from joulebound.gpumodel.params import params_for

    spec = resolve_device(device)
    prm = params if params is not None else params_for(spec)
    _check_kernels(table, Path(source), trace.names())
    work, fitted = fit_trace_work(trace, spec, prm, table)
    # the planning configs plus every measured clock (measured there: tested by definition)
    cfgs, _ = planning_configs(spec, prm)
    have = set(cfgs)
    cfgs += [c for c in dict.fromkeys(c for _, c in table) if c not in have]
    base = characterize(trace, spec, params=prm, work=work, configs=cfgs)
    base.meta["calibrated_kernels"] = fitted
    names = trace.names()
    first = {n: i for i, n in reversed(list(enumerate(names)))}
    act = work.activity if work.activity is not None else np.ones(len(names))
    base.meta["fitted_work"] = {k: {"tc_max_s": float(work.tc_max[first[k]]),
                                    "tm_max_s": float(work.tm_max[first[k]]),
                                    "activity": float(act[first[k]])} for k in fitted}
    char = _overlay(table, Path(source), base)
    # measured cells come from kernels replayed back to back: give them the step's host gaps
    rc = resolve_clocks(spec, char.configs, prm)
    char.time_s, char.energy_j = apply_host_gaps(char.time_s, char.energy_j, work.host_s, rc,
                                                 spec, prm)
    return char
