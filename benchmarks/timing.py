"""Repeated CPU-time measurement: every sub-50 ms figure in docs/benchmarks.md is a median with its
spread, so a rerun can be compared with it.

Two levels:

* :func:`cpu_runs` — repeated runs inside this process. Its spread is narrow (±5–10 %) but it
  misses the variance *between* processes: the same call measured in six fresh interpreters
  back to back gave medians 1.6–2.6 ms (`characterize`, GPT-3-XL on the A100 model) while each
  process's own min–max spanned 0.2–0.3 ms. A figure whose spread comes from one process alone
  does not reproduce on a rerun.
* :func:`fresh_cpu_runs` — the figure a section reports: each case timed in several fresh
  interpreters (a factory function builds the inputs there, outside the clock), the rounds
  interleaved across the cases so that drift in the machine's load over the section reaches every
  case's spread; the figure is the median of the processes' medians and its spread their
  min–max.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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


def fresh_cpu_runs(cases: Mapping[str, tuple[str, Sequence[object]]], processes: int = 5,
                   repeats: int = 5, min_total_s: float = 0.05,
                   env: Mapping[str, str] | None = None) -> dict[str, tuple[float, float, float]]:
    """CPU seconds per call of each case, measured in ``processes`` fresh interpreters.

    Args:
        cases: label -> (``"module:function"``, JSON-able positional args). In the child,
            ``function(*args)`` builds the inputs (not timed) and returns the zero-argument
            callable to time; the child reports the median of :func:`cpu_runs` (``repeats``
            runs, warm-up first, each looped to ``min_total_s``).
        processes: fresh interpreters per case; round ``r`` runs every case once before round
            ``r + 1`` starts.
        env: the children's environment (default: this process's).

    Returns:
        label -> (median, min, max) over the processes' medians (CPU s per call).
    """
    got = fresh_results({label: ("benchmarks.timing:timed_case", (factory, list(args), repeats,
                                                                   min_total_s))
                         for label, (factory, args) in cases.items()}, processes, env)
    return {label: spread([float(x) for x in v]) for label, v in got.items()}


def fresh_results(cases: Mapping[str, tuple[str, Sequence[object]]], processes: int = 5,
                  env: Mapping[str, str] | None = None) -> dict[str, list[object]]:
    """``function(*args)`` of each case run in ``processes`` fresh interpreters (round ``r``
    runs every case once before round ``r + 1``): label -> the JSON-able results, one per
    process. The primitive under :func:`fresh_cpu_runs`, for benchmarks that measure more than
    one figure per process (paired runs of two meters, a sampler's CPU share and rate)."""
    got: dict[str, list[object]] = {label: [] for label in cases}
    for _ in range(processes):
        for label, (func, args) in cases.items():
            got[label].append(in_fresh_process(func, args, env))
    return got


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)


def timed_case(factory: str, args: Sequence[object], repeats: int, min_total_s: float) -> float:
    """Median CPU s of :func:`cpu_runs` on the callable ``factory(*args)`` returns."""
    return cpu_runs(resolve(factory)(*args), repeats, min_total_s)[0]


def in_fresh_process(func: str, args: Sequence[object] = (),
                     env: Mapping[str, str] | None = None) -> object:
    """``func(*args)`` (``"module:function"``, JSON-able args and result) in a fresh interpreter
    started from the repository root."""
    cmd = [sys.executable, "-m", "benchmarks.timing", func, json.dumps(list(args))]
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(env if env is not None else os.environ),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child {func}{tuple(args)} failed "
                           f"(rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def resolve(factory: str) -> Callable[..., object]:
    """The function named ``"module:function"``."""
    module, _, name = factory.partition(":")
    return getattr(importlib.import_module(module), name)


def fmt(m: float, lo: float, hi: float, scale: float = 1e3, unit: str = "ms") -> str:
    """``median (min–max) unit``."""
    return f"{m * scale:.3g} ({lo * scale:.3g}–{hi * scale:.3g}) {unit}"


if __name__ == "__main__":  # the child of in_fresh_process: FUNC ARGS_JSON
    print(json.dumps(resolve(sys.argv[1])(*json.loads(sys.argv[2]))))
