"""``joulebound advise --layouts``: the 3D layout search for a large model at large GPU counts.

Target (issue 27): ``advise`` for a 175 B model on 512 GPUs searching >= 10^4 layouts in <= 2 s
on one core. The case: GPT-3 175B (96 layers, d 12,288, 96 heads, S 2,048, global batch 1,536,
300 B tokens) on up to 512 A100-80GB, tp × pp × dp × micro-batch × recompute × sequence
parallelism × distributed optimizer (:func:`joulebound.jobs.advisor.search_layouts`), one
thread: the first call in a fresh process and later calls.
"""

from __future__ import annotations

from collections.abc import Callable

PROCESSES = 3
"""Fresh single-threaded processes per figure (:func:`benchmarks.timing.fresh_cpu_runs`)."""
REPEATS = 3
"""Timed calls per process (after a warm-up call)."""
GPT3 = dict(arch="gpt", layers=96, hidden=12288, heads=96, seq=2048, vocab=50257, dtype="bf16",
            global_batch=1536, device="a100-sxm4-80gb", tokens=300e9)
DEADLINE_S = 60 * 86400


def case(max_gpus: int) -> Callable[[], object]:
    """The timed call: the layout search of GPT-3 175B on up to ``max_gpus`` GPUs, the per-shape
    trace cache cleared first."""
    from joulebound.jobs import advisor, stepcost
    from joulebound.jobs.job import Job
    from joulebound.jobs.mechanistic import load_params

    job, prm = Job(**GPT3), load_params()

    def call() -> object:
        stepcost._TRACES.clear()
        return advisor.search_layouts(job, DEADLINE_S, max_gpus, prm)
    return call


def first_call(max_gpus: int) -> list[float]:
    """CPU s of the first search in this (fresh) process, as a fresh ``joulebound advise
    --layouts`` runs it: the GPU model's lazy imports and numba's cached kernels loaded inside
    the clock (this module's imports, the calibration file and the job are outside it)."""
    import time

    from joulebound.jobs import advisor
    from joulebound.jobs.job import Job
    from joulebound.jobs.mechanistic import load_params

    job, prm = Job(**GPT3), load_params()
    c0 = time.process_time()
    advisor.search_layouts(job, DEADLINE_S, max_gpus, prm)
    return [time.process_time() - c0]


def run() -> str:
    from joulebound.jobs import advisor
    from joulebound.jobs.job import Job

    from .timing import ONE_THREAD, fmt, fresh_cpu_runs, fresh_results, spread

    first = {f"GPT-3 175B on up to {n} GPUs, first call in a fresh process": n for n in (64, 512)}
    got = fresh_results({k: ("benchmarks.bench_advise:first_call", (n,)) for k, n in first.items()},
                        processes=PROCESSES + 2, env=ONE_THREAD)
    times = {k: spread([float(x) for r in v for x in r]) for k, v in got.items()}
    later = {f"GPT-3 175B on up to {n} GPUs, later calls": ("benchmarks.bench_advise:case", (n,))
             for n in (64, 512)}
    times |= fresh_cpu_runs(later, processes=PROCESSES, repeats=REPEATS, min_total_s=0.0,
                            env=ONE_THREAD)
    gpus = {**first, **{k: v[1][0] for k, v in later.items()}}
    lines = ["## Advise: 3D layout search", "",
             "`advisor.search_layouts` (`joulebound advise --layouts`): GPT-3 175B (global batch "
             "1,536, 300 B tokens) on A100-80GB, GPU counts 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, … "
             "up to the maximum; every layout's memory checked (recompute modes from the lightest, "
             "the memory-saving switches on, until one fits), the fitting ones priced in one "
             "batched prediction, the 64 cheapest compared by correlated draws. CPU seconds on one "
             f"thread, median (min–max): the first call in each of {PROCESSES + 2} fresh processes "
             "(the GPU model's lazy imports and numba's on-disk kernels loaded inside the clock; "
             f"interpreter start and `import joulebound` not), and {REPEATS} later calls in each "
             f"of {PROCESSES} fresh processes (after a warm-up call; the per-shape trace cache "
             "cleared before each).", "",
             "| search | layouts | memory estimates | priced | CPU s | target |",
             "|---|---|---|---|---|---|"]
    for label, n in gpus.items():
        _best, _shown, st = advisor.search_layouts(Job(**GPT3), DEADLINE_S, n)
        target = "<= 2 s, >= 10^4 layouts" if n == 512 else ""
        lines.append(f"| {label} | {st.layouts:,} | {st.checked:,} | {st.priced:,} | "
                     f"{fmt(times[label], '.2f')} | {target} |")
    best, _shown, st = advisor.search_layouts(Job(**GPT3), DEADLINE_S, 512)
    lines += ["", f"The advice on up to 512 GPUs within 60 days: {best.label} on {best.gpus} GPUs "
              f"(deadline: {best.deadline}; modeled by the predictor of this commit)."]
    return "\n".join(lines)
