"""Repeated CPU-time measurement: every sub-50 ms figure in docs/benchmarks.md is a median with its
spread, so a rerun can be compared with it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def cpu_runs(fn: Callable[[], object], repeats: int = 7, min_total_s: float = 0.05
             ) -> tuple[float, float, float]:
    """(median, min, max) CPU seconds of ``fn()`` over ``repeats`` runs; a run faster than
    ``min_total_s`` is looped until that long and divided, so a figure is never one timer tick."""
    fn()                                               # warm-up (imports, caches)
    c0 = time.process_time()
    fn()
    one = max(time.process_time() - c0, 1e-7)
    loops = max(1, int(min_total_s / one))
    out = []
    for _ in range(repeats):
        c0 = time.process_time()
        for _ in range(loops):
            fn()
        out.append((time.process_time() - c0) / loops)
    return statistics.median(out), min(out), max(out)


def fmt(m: float, lo: float, hi: float, scale: float = 1e3, unit: str = "ms") -> str:
    """``median (min–max) unit``."""
    return f"{m * scale:.3g} ({lo * scale:.3g}–{hi * scale:.3g}) {unit}"
