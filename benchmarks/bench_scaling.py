"""Scaling-model speed: fitting the laws, grouped cross-validation, and pricing a job.

Targets (interactive use): `joulebound predict` under 50 ms of model time; an `advise` grid of
10 candidates under 1 s; fitting the pre-run law on the 1,576 Mayaki rows under 2 s;
`joulebound predict --jobs` on 10^4 jobs under 10 s (CSV in, mechanistic predictor, CSV out).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

PROCESSES = 5
"""Fresh processes per interactive figure and per fit (:func:`benchmarks.timing.fresh_cpu_runs`)."""
PROCESSES_LONG = 3
"""... per 10^4-job table and for the cross-validation (seconds each)."""
_CFG = dict(model="bert", layers=12, hidden=768, heads=12, seq=128, batch=32, device="rtx2080ti")


def _jobs_csv(path, n: int, shapes: int, seed: int = 0) -> None:
    """``n`` jobs over ``shapes`` distinct (shape, micro-batch) pairs × GPU counts × strategies."""
    import numpy as np

    rng = np.random.default_rng(seed)
    shp = [(int(rng.integers(4, 48)), 64 * int(rng.integers(4, 40)), 8, int(rng.choice([128, 256, 512, 1024])),
            int(rng.integers(1, 32)), str(rng.choice(["bert", "gpt"]))) for _ in range(shapes)]
    lines = ["model,layers,hidden,heads,seq,batch,gpus,strategy,device,tokens"]
    for i in range(n):
        L, d, h, S, b, arch = shp[i % shapes]
        g = int(rng.choice([1, 2, 4, 8]))
        st = "single" if g == 1 else str(rng.choice(["ddp", "fsdp", "tp", "pp"]))
        dev = str(rng.choice(["a100-sxm4-80gb", "h100-sxm", "a40", "rtx3090"]))
        lines.append(f"{arch},{L},{d},{h},{S},{b},{g},{st},{dev},{10 ** rng.uniform(8, 10):.3g}")
    path.write_text("\n".join(lines) + "\n")


def case(name: str, *args: object) -> Callable[[], object]:
    """The timed call of one row, its inputs built here (in a fresh process, by
    :func:`benchmarks.timing.fresh_cpu_runs`; the first call is the warm-up)."""
    from joulebound.jobs import advisor, stepcost
    from joulebound.jobs.job import Job

    if name == "predict-law":
        from joulebound.jobs.defaults import load_default, predict_job

        law, _ = load_default()
        return lambda: predict_job(1e8, law=law, q90_log=0.1, gpus=4, strategy="fsdp", **_CFG)
    if name == "advise-law":
        return lambda: advisor.advise_law(1e8, 7200, 8, **_CFG)
    if name == "predict-mechanistic":
        from joulebound.jobs.mechanistic import predict_jobs

        one = Job(layers=12, hidden=768, heads=12, seq=128, batch=32, gpus=4, strategy="fsdp",
                  device="a40", tokens=1e8)

        def cold() -> None:  # no cached trace: the analytic trace and the GPU model run every time
            stepcost._TRACES.clear()
            predict_jobs([one])
        return cold
    if name == "advise-mechanistic":
        job = Job(layers=12, hidden=768, heads=12, seq=128, global_batch=256, tokens=1e9,
                  device="a40")
        return lambda: advisor.advise(job, 7200, 8)
    if name == "predict-jobs":
        return _predict_table(*args)
    from joulebound.jobs.datasets import load
    from joulebound.jobs.evaluate import cross_validate
    from joulebound.jobs.laws import make_law

    df = load(Path(str(args[0])) / "mayaki_ecai2025")
    make_law("paper").fit(df)  # imports statsmodels once
    if name == "fit":
        law = str(args[1])
        return lambda: make_law(law).fit(df)
    if name == "cv":
        return lambda: cross_validate(df, "prerun", k=5)
    raise ValueError(f"no scaling benchmark case {name!r}")


def _predict_table(n: int, shapes: int) -> Callable[[], object]:
    """``joulebound predict --jobs`` on a CSV of ``n`` jobs, cold every call (no per-shape
    kernels cached from an earlier call), the CSV written once outside the clock."""
    import atexit
    import contextlib
    import io
    import shutil
    import tempfile

    from joulebound.cli import main
    from joulebound.jobs import stepcost

    d = Path(tempfile.mkdtemp(prefix="jb-bench-jobs-"))
    atexit.register(shutil.rmtree, d, True)
    src, out = d / "jobs.csv", d / "out.csv"
    _jobs_csv(src, n, shapes)

    def call() -> None:
        stepcost._TRACES.clear()
        with contextlib.redirect_stdout(io.StringIO()):
            rc = main(["predict", "--jobs", str(src), "-o", str(out)])
        assert rc in (0, 1)          # 1: some rows refused (every row is still written)
        assert out.read_text().count("\n") - 1 == n
    return call


def run() -> str:
    from joulebound.core.datapath import find_data

    from .timing import fmt, fresh_cpu_runs

    short = {"predict one job (built-in law)": ("predict-law", (), "< 0.05 s"),
             "advise (legacy law): 10 candidates": ("advise-law", (), "< 1 s"),
             "predict one job (mechanistic, trace + GPU model included)":
                 ("predict-mechanistic", (), "< 0.05 s"),
             "advise (mechanistic): 1 GPU + 4 strategies × 2/4/8 GPUs":
                 ("advise-mechanistic", (), "< 1 s")}
    long = {f"predict --jobs: {n:,} jobs, {shapes:,} distinct shapes (CSV in/out, {n:,} rows)":
            ("predict-jobs", (n, shapes), "< 10 s") for n, shapes in ((10_000, 500), (10_000, 10_000))}
    data = find_data(required=False)
    extra = ""
    if data is not None:
        for name in ("powerlaw", "paper", "prerun", "roofline", "hgb"):
            short[f"fit `{name}` on Mayaki (1,576 rows)"] = ("fit", (str(data), name),
                                                             "< 2 s" if name == "prerun" else "")
        long["grouped 5-fold CV + conformal, `prerun`"] = ("cv", (str(data),), "")
    times = fresh_cpu_runs({k: ("benchmarks.bench_scaling:case", (v[0], *v[1]))
                            for k, v in short.items()}, processes=PROCESSES)
    times |= fresh_cpu_runs({k: ("benchmarks.bench_scaling:case", (v[0], *v[1]))
                             for k, v in long.items()}, processes=PROCESSES_LONG, repeats=1)
    if data is not None:
        from joulebound.jobs.datasets import load
        from joulebound.jobs.evaluate import cross_validate

        cv = cross_validate(load(data / "mayaki_ecai2025"), "prerun", k=5)
        extra = (f"\n\nHeld-out (grouped 5-fold by (L, d)) R² of log E of the pre-run law in the same run: "
                 f"{cv['r2_log']:.3f}, MAPE {cv['mape'] * 100:.1f} % (modeled vs measured).")
    lines = ["## Scaling model", "", "CPU seconds: each row timed in fresh processes "
             f"({PROCESSES} for the interactive figures and the fits, {PROCESSES_LONG} for the "
             "10^4-job tables and the cross-validation; rounds interleaved across the rows), "
             "in each 5 runs (the interactive figures and fits, each looped to >= 50 ms) or one "
             "run (the rest) after a warm-up call; the figure is the median (min–max) of all the "
             "runs pooled. The mechanistic rows and the 10^4-job "
             "tables start from a cold trace cache at every call.", "",
             "| operation | CPU s | target |", "|---|---|---|"]
    lines += [f"| {label} | {fmt(times[label], '.4f', collapse='equal')} | {spec[2]} |"
              for label, spec in (short | long).items()]
    extra = ("\n\n`predict --jobs` characterizes each distinct per-GPU workload (shape × micro-batch × "
             "tensor-parallel degree × GPU) once with the GPU model; with 10,000 distinct shapes on "
             "4 GPUs that is ~9,000 workloads (~7,000 per-GPU shapes). The 1-layer op tables of all "
             "shapes of one (arch, dtype, recompute) are built at once (`workload.analytic.build_table`, "
             "vectorized over shapes), kernels equal in every shape characterized once; "
             "`dvfs.model.characterize` and composing the steps (`mechanistic.compose`) then take about "
             "a fifth of the time each, reading and writing the CSVs about a tenth." + extra)
    return "\n".join(lines) + extra
