"""Repeated CPU-time measurement: every sub-50 ms figure in docs/benchmarks.md is a median with its
spread, so a rerun can be compared with it.

* :func:`cpu_runs` — repeated runs inside this process. Its spread is narrow (±5–10 %) but it
  misses the variance *between* processes and over time: the same call measured in six fresh
  interpreters back to back gave medians 1.6–2.6 ms (`characterize`, GPT-3-XL on the A100 model)
  while each process's own min–max spanned 0.2–0.3 ms.
* :func:`fresh_cpu_runs` — the figure a section reports: each case timed in several fresh
  interpreters (a factory function builds the inputs there, outside the clock), the rounds
  interleaved across the cases so that the machine's changes over the section reach every
  case; the figure is the median of all the runs of all the processes pooled, its spread their
  min–max. (The median over the processes' medians, with their min–max, was tried first: a
  rerun minutes later fell outside 8 of 18 trace figures.)
* The machine's speed: this VM's CPU runs at one of two speeds about 2x apart, switching every
  0.1 s to minutes, and drifts by 1.5–3x over an hour. Every fresh child times a fixed
  pure-Python loop (:func:`reference_s`) when it starts and when it ends, and sections that time
  in-process call :func:`sample_speed`; :func:`speed_line` reports the samples under the
  section, so a rerun on another day can be compared at the machine's speed
  (``benchmarks/compare.py --speed`` scales by the fastest samples: which level a section's
  median lands on depends on how long it ran at each, while the fast level held within 7 %
  between two runs of one day).
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
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "MKL_NUM_THREADS": "1"}
"""The environment of a single-threaded benchmark child (BLAS and OpenMP pools of one)."""


def cpu_runs(fn: Callable[[], object], repeats: int = 7, min_total_s: float = 0.05
             ) -> tuple[float, float, float]:
    """(median, min, max) CPU seconds of ``fn()`` over ``repeats`` runs; a run faster than
    ``min_total_s`` is looped until that long and divided, so a figure is never one timer tick."""
    return spread(run_times(fn, repeats, min_total_s))


def run_times(fn: Callable[[], object], repeats: int = 7, min_total_s: float = 0.05
              ) -> list[float]:
    """CPU seconds of ``fn()`` in each of ``repeats`` runs after a warm-up call, each run looped
    to >= ``min_total_s`` and divided."""
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
    return out


REFERENCE_OPS = 100_000
SPEED: list[float] = []
"""Reference-loop samples (CPU s) taken in this process or reported by its children."""


def reference_loop() -> int:
    """The machine-speed reference: 10^5 multiply-adds in pure Python."""
    s = 0
    for i in range(REFERENCE_OPS):
        s += i * i
    return s


def reference_s(repeats: int = 3) -> float:
    """CPU s of a fixed pure-Python loop of 10^5 multiply-adds, the fastest of ``repeats``: the
    machine's speed now (a trace build's time over this loop's stayed within 0.42–0.52 while
    both moved 2x with the VM's speed)."""
    out = []
    for _ in range(repeats):
        c0 = time.process_time()
        reference_loop()
        out.append(time.process_time() - c0)
    return min(out)


def sample_speed() -> float:
    """Take one reference sample into :data:`SPEED` (sections that time in this process call it
    between their cases) and return it."""
    SPEED.append(reference_s())
    return SPEED[-1]


def speed_line() -> str | None:
    """The machine's speed over the section: the reference samples' median (min–max), or None."""
    if not SPEED:
        return None
    m, lo, hi = spread(SPEED)
    return (f"Machine speed during this section: a fixed pure-Python loop of 10^5 multiply-adds "
            f"took {m * 1e3:.2f} ({lo * 1e3:.2f}–{hi * 1e3:.2f}) CPU ms over {len(SPEED)} samples "
            "taken through it (`benchmarks/timing.py`); a rerun at another speed compares after "
            "scaling by the ratio of the two fastest samples (`python -m benchmarks.compare "
            "--speed`).")


def fresh_cpu_runs(cases: Mapping[str, tuple[str, Sequence[object]]], processes: int = 5,
                   repeats: int = 5, min_total_s: float = 0.05,
                   env: Mapping[str, str] | None = None) -> dict[str, tuple[float, float, float]]:
    """CPU seconds per call of each case, measured in ``processes`` fresh interpreters.

    Args:
        cases: label -> (``"module:function"``, JSON-able positional args). In the child,
            ``function(*args)`` builds the inputs (not timed) and returns the zero-argument
            callable to time; the child reports the CPU s of its ``repeats`` runs (warm-up
            first, each looped to ``min_total_s``: :func:`run_times`).
        processes: fresh interpreters per case; round ``r`` runs every case once before round
            ``r + 1`` starts.
        env: the children's environment (default: this process's).

    Returns:
        label -> (median, min, max) of all the runs of all the processes (CPU s per call).
    """
    got = fresh_results({label: ("benchmarks.timing:timed_case", (factory, list(args), repeats,
                                                                   min_total_s))
                         for label, (factory, args) in cases.items()}, processes, env)
    return {label: spread([float(x) for r in v for x in r]) for label, v in got.items()}


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


def timed_case(factory: str, args: Sequence[object], repeats: int, min_total_s: float
               ) -> list[float]:
    """:func:`run_times` of the callable ``factory(*args)`` returns (CPU s of each run)."""
    return run_times(resolve(factory)(*args), repeats, min_total_s)


def in_fresh_process(func: str, args: Sequence[object] = (),
                     env: Mapping[str, str] | None = None) -> object:
    """``func(*args)`` (``"module:function"``, JSON-able args and result) in a fresh interpreter
    started from the repository root. The child's two machine-speed samples (before and after
    the call) go into :data:`SPEED`."""
    cmd = [sys.executable, "-m", "benchmarks.timing", func, json.dumps(list(args))]
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(env if env is not None else os.environ),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child {func}{tuple(args)} failed "
                           f"(rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    SPEED.extend(out["speed"])
    return out["result"]


def _child_main(func: str, args_json: str) -> None:
    before = reference_s()
    result = resolve(func)(*json.loads(args_json))
    print(json.dumps({"result": result, "speed": [before, reference_s()]}))


def resolve(factory: str) -> Callable[..., object]:
    """The function named ``"module:function"``."""
    module, _, name = factory.partition(":")
    return getattr(importlib.import_module(module), name)


def fmt(t: tuple[float, float, float], spec: str = ".1f", scale: float = 1.0,
        collapse: str = "never") -> str:
    """``median (min–max)`` of a :func:`spread` triple, each times ``scale``, in format ``spec``.

    ``collapse``: ``"never"``; ``"equal"`` — just the median when min == max (one run);
    ``"formatted"`` — just the median when min and max print the same."""
    m, lo, hi = (format(x * scale, spec) for x in t)
    if (collapse == "equal" and t[1] == t[2]) or (collapse == "formatted" and lo == hi):
        return m
    return f"{m} ({lo}–{hi})"


if __name__ == "__main__":  # the child of in_fresh_process: FUNC ARGS_JSON
    _child_main(sys.argv[1], sys.argv[2])
