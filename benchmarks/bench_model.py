"""GPU model benchmark: characterize a GPT-3-XL iteration over every RTX 3080 Ti clock pair.

Target (issue 3): < 1 s and < 1 GiB on one core. Time: the median (min–max) of the runs of
several fresh processes pooled (``benchmarks.timing.fresh_cpu_runs``);
memory is the peak of Python/numpy allocations during one run (tracemalloc), plus the size of the
result arrays. Run with ``OMP_NUM_THREADS=1`` semantics: the model is plain numpy (no BLAS calls).
"""

from __future__ import annotations

import dataclasses
import tracemalloc
from collections.abc import Callable

PROCESSES = 5
#: (label, preset, build_trace overrides, device, every invocation distinct)
CASES = (("gpt3-xl", "gpt3-xl", {}, "rtx3080ti", False),
         ("gpt3-xl, batch=8", "gpt3-xl", {"batch": 8}, "rtx3080ti", False),
         ("bert-large", "bert-large", {}, "rtx3080ti", False),
         ("gpt3-xl, all 947 invocations distinct (measured durations)", "gpt3-xl", {}, "rtx3080ti",
          True),
         ("gpt3-xl on a100-sxm4-80gb", "gpt3-xl", {}, "a100-sxm4-80gb", False))


def _inputs(preset: str, overrides: dict, device: str, distinct: bool):
    from joulebound.hw.catalog import get_device
    from joulebound.workload.analytic import build_trace

    tr = build_trace(preset, **overrides)
    if distinct:   # worst case: every invocation distinct (an imported trace with durations)
        tr = dataclasses.replace(tr, kernels=[dataclasses.replace(k, duration_s=1e-4 * (1 + i * 1e-3))
                                              for i, k in enumerate(tr.kernels)])
    return tr, get_device(device)


def case(preset: str, overrides: dict, device: str, distinct: bool) -> Callable[[], object]:
    """The timed call of one row (built in a fresh process by :func:`benchmarks.timing.fresh_cpu_runs`)."""
    from joulebound.gpumodel import characterize

    tr, spec = _inputs(preset, overrides, device, distinct)
    return lambda: characterize(tr, spec)


def _peak(preset: str, overrides: dict, device: str, distinct: bool) -> tuple[float, object]:
    """(tracemalloc peak of one run (B), the result)."""
    from joulebound.gpumodel import characterize

    tr, spec = _inputs(preset, overrides, device, distinct)
    characterize(tr, spec)
    tracemalloc.start()
    ch = characterize(tr, spec)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, ch


def _ok(t: tuple[float, float, float], peak: float) -> str:
    return "yes" if t[0] < 1.0 and peak < 2**30 else "NO"


def run() -> str:
    from .timing import fmt, fresh_cpu_runs

    times = fresh_cpu_runs({c[0]: ("benchmarks.bench_model:case", c[1:]) for c in CASES},
                           processes=PROCESSES)
    rows = []
    for label, *args in CASES:
        peak, ch = _peak(*args)
        t = times[label]
        rows.append(f"| {label} | {ch.n_kernels} | {ch.meta['n_unique_kernels']} | "
                    f"{ch.n_configs} | {ch.n_kernels * ch.n_configs:,} | {fmt(t, '.1f', 1e3)} | "
                    f"{peak / 2**20:.1f} | {_ok(t, peak)} |")
    return "\n".join([
        "## GPU model: `characterize` (issue 3)",
        "",
        "`joulebound.gpumodel.characterize(trace, device)` over every supported (core, memory) "
        "clock pair plus `auto`, RTX 3080 Ti unless named. Target: GPT-3-XL iteration in "
        f"< 1 s and < 1 GiB on one core. Time: CPU ms, each row timed in {PROCESSES} fresh "
        "processes (rounds interleaved across the rows; in each, 5 runs after a warm-up), "
        "the median (min–max) of all the runs pooled; memory: "
        "tracemalloc peak of one run (numpy arrays included). Identical invocations are computed "
        "once (unique kernels) and expanded.",
        "",
        "| trace | kernels | unique | configs | cells | CPU ms | peak memory (MiB) | "
        "meets target |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ])


if __name__ == "__main__":
    print(run())
