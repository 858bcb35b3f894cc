"""GPU model benchmark: characterize a GPT-3-XL iteration over every RTX 3080 Ti clock pair.

Target (issue 3): < 1 s and < 1 GiB on one core. Time is the median (min–max) CPU time of 7 runs (after one warm-up);
memory is the peak of Python/numpy allocations during one run (tracemalloc), plus the size of the
result arrays. Run with ``OMP_NUM_THREADS=1`` semantics: the model is plain numpy (no BLAS calls).
"""

from __future__ import annotations

import tracemalloc


def _measure(trace, spec) -> tuple[tuple[float, float, float], float, object]:
    """((median, min, max) CPU s of 7 runs, tracemalloc peak of one run (B), the result)."""
    from joulebound.dvfs.model import characterize

    from .timing import cpu_runs

    times = cpu_runs(lambda: characterize(trace, spec))
    tracemalloc.start()
    ch = characterize(trace, spec)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return times, peak, ch


def _ms(t: tuple[float, float, float]) -> str:
    return f"{t[0] * 1e3:.1f} ({t[1] * 1e3:.1f}–{t[2] * 1e3:.1f})"


def _ok(t: tuple[float, float, float], peak: float) -> str:
    return "yes" if t[0] < 1.0 and peak < 2**30 else "NO"


def run() -> str:
    from joulebound.devices.catalog import get_device
    from joulebound.workload.analytic import build_trace

    rows = []
    spec = get_device("rtx3080ti")
    for preset, overrides in (("gpt3-xl", {}), ("gpt3-xl", {"batch": 8}), ("bert-large", {})):
        tr = build_trace(preset, **overrides)
        t, peak, ch = _measure(tr, spec)
        label = preset + "".join(f", {k}={v}" for k, v in overrides.items())
        cells = ch.n_kernels * ch.n_configs
        rows.append(f"| {label} | {ch.n_kernels} | {ch.meta['n_unique_kernels']} | "
                    f"{ch.n_configs} | {cells:,} | {_ms(t)} | {peak / 2**20:.1f} | {_ok(t, peak)} |")
    # worst case: every invocation distinct (e.g. an imported trace with measured durations)
    import dataclasses

    tr = build_trace("gpt3-xl")
    tr = dataclasses.replace(tr, kernels=[dataclasses.replace(k, duration_s=1e-4 * (1 + i * 1e-3))
                                          for i, k in enumerate(tr.kernels)])
    t, peak, ch = _measure(tr, spec)
    rows.append(f"| gpt3-xl, all {ch.n_kernels} invocations distinct (measured durations) | "
                f"{ch.n_kernels} | {ch.meta['n_unique_kernels']} | {ch.n_configs} | "
                f"{ch.n_kernels * ch.n_configs:,} | {_ms(t)} | {peak / 2**20:.1f} | {_ok(t, peak)} |")
    a100 = get_device("a100-sxm4-80gb")
    tr = build_trace("gpt3-xl")
    t, peak, ch = _measure(tr, a100)
    rows.append(f"| gpt3-xl on a100-sxm4-80gb | {ch.n_kernels} | {ch.meta['n_unique_kernels']} | "
                f"{ch.n_configs} | {ch.n_kernels * ch.n_configs:,} | {_ms(t)} | "
                f"{peak / 2**20:.1f} | {_ok(t, peak)} |")
    return "\n".join([
        "## GPU model: `characterize` (issue 3)",
        "",
        "`joulebound.dvfs.model.characterize(trace, device)` over every supported (core, memory) "
        "clock pair plus `auto`, RTX 3080 Ti unless named. Target: GPT-3-XL iteration in "
        "< 1 s and < 1 GiB on one core. Time: CPU ms, median (min–max) of 7 runs; memory: tracemalloc peak of one "
        "run (numpy arrays included). Identical invocations are computed once "
        "(unique kernels) and expanded.",
        "",
        "| trace | kernels | unique | configs | cells | CPU ms | peak memory (MiB) | "
        "meets target |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ])


if __name__ == "__main__":
    print(run())
