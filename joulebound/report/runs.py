"""What a measured run is, as every output shows it: one place that gives each stored figure its
one provenance label (``joulebound runs``, ``runs --json``, ``joulebound report``, the comparison
page).

The labels (:mod:`joulebound.core.provenance`):

- a window's duration is ``measured`` (a clock);
- its GPU energy carries the label its meter recorded (``measured`` from NVML, ``modeled`` from
  the simulated GPU) and *no* label when there is no GPU figure (``energy_j`` null: "unknown",
  never 0);
- its CPU+DRAM energy carries its own (``measured`` from RAPL, ``modeled`` from the TDP model).

A run's ``provenance`` is the GPU energy label of its main window (its longest), so that a run
without a GPU figure has none (stores written before this rule said ``modeled`` for a CPU-only
run: they are read by the same rule, from the windows).
"""

from __future__ import annotations

import json
from typing import Any

from joulebound.core.provenance import MEASURED
from joulebound.energy.results import WindowResult

#: what a missing energy figure reads as (no label: there is no figure to label)
UNKNOWN_NO_SENSOR = "unknown (no sensor)"


def main_window(windows: list[WindowResult]) -> WindowResult | None:
    """A run's main window: its longest (``command`` for ``measure``, ``train`` for the
    callbacks)."""
    return max(windows, key=lambda w: w.duration_s, default=None)


def window_doc(w: WindowResult) -> dict[str, Any]:
    """One window as ``runs --json`` lists it: each figure beside its one label."""
    return {"name": w.name, "start_s": w.start_s, "end_s": w.end_s,
            "duration_s": w.duration_s, "duration_provenance": MEASURED,
            "energy_j": w.energy_j, "provenance": w.gpu_provenance,
            "cpu_energy_j": w.cpu_energy_j, "cpu_provenance":
                w.cpu_provenance if w.cpu_energy_j is not None else None,
            "flags": list(w.flags)}


def meta_of(row: dict[str, Any]) -> dict[str, Any]:
    """The run's stored metadata (``runs.meta_json``) without the owner record."""
    try:
        meta = json.loads(row.get("meta_json") or "{}")
    except ValueError:
        return {}
    return {k: v for k, v in meta.items() if k != "owner"} if isinstance(meta, dict) else {}


def run_doc(row: dict[str, Any], windows: list[WindowResult]) -> dict[str, Any]:
    """One run as ``runs --json`` prints it (the ``runs`` row, its metadata, its windows)."""
    main = main_window(windows)
    meta = meta_of(row)
    return {**{k: row.get(k) for k in ("run_id", "started_at", "ended_at", "status", "command",
                                        "exit_code", "backend")},
            "provenance": None if main is None else main.gpu_provenance,
            "cpu_provenance": None if main is None or main.cpu_energy_j is None
            else main.cpu_provenance,
            "rank": row.get("rank"), "host": row.get("host"),
            "carbon": meta.get("carbon"),
            "parent_run": meta.get("parent_run"),
            "notes": json.loads(row.get("notes_json") or "[]"),
            "windows": [window_doc(w) for w in windows]}


def energy_text(value: float | None, label: str | None, digits: int = 1) -> str:
    """An energy figure (J) with its one label, e.g. ``"12.1 J modeled"``; a missing figure reads
    ``"unknown (no sensor)"`` (no label)."""
    if value is None:
        return UNKNOWN_NO_SENSOR
    return f"{value:,.{digits}f} J {label}" if label else f"{value:,.{digits}f} J"


def energy_cell(value: float | None, label: str | None) -> str:
    """An energy figure in a table whose header gives the unit (J): ``"12.1 modeled"``;
    ``"no sensor"`` when missing (no label, never 0)."""
    if value is None:
        return "no sensor"
    return f"{value:,.1f} {label}" if label else f"{value:,.1f}"


def exit_text(row: dict[str, Any]) -> str:
    """The run's status with its exit code, in words: ``finished, exit code 0``; a run that was
    a block of a Python process (EnergyMeter, the callbacks) has no exit code of its own."""
    status = row.get("status") or "unknown"
    code = row.get("exit_code")
    if code is None:
        return f"{status} (no exit code: metered inside a Python process, not a command)"
    return f"{status}, exit code {code}"
