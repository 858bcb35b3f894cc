"""Trace building, summarizing, saving and Kineto import: wall time on this machine.

Targets: an analytic GPT-3-XL iteration builds in well under 0.1 s; the planner's largest cases
(~10^5 kernels, ``build_trace(..., iterations=100)``) build, summarize and round-trip in seconds.
The Kineto rows import a synthetic export made by repeating the hand-made GPU fixture
(``tests/fixtures/kineto_gpu_step.json``, 15 GPU kernels per step) with shifted times and ids.
"""

from __future__ import annotations

import copy
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "kineto_gpu_step.json"


def _time(fn: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """(median, min, max) CPU s of ``repeat`` runs (figures over 50 ms: each run once)."""
    out = []
    for _ in range(repeat):
        c0 = time.process_time()
        fn()
        out.append(time.process_time() - c0)
    return statistics.median(out), min(out), max(out)


def _s(t: tuple[float, float, float], scale: float = 1.0, nd: int = 3) -> str:
    m, lo, hi = (x * scale for x in t)
    return f"{m:.{nd}f}" if lo == hi else f"{m:.{nd}f} ({lo:.{nd}f}–{hi:.{nd}f})"


def _synthetic_kineto(steps: int) -> dict:
    base = json.loads(FIXTURE.read_text())
    events = []
    for s in range(steps):
        for e in base["traceEvents"]:
            e = copy.deepcopy(e)
            if "ts" in e:
                e["ts"] += s * 5000.0
            if e.get("ph") in ("s", "f"):
                e["id"] += s * 1000
            args = e.get("args") or {}
            for key in ("correlation", "External id"):
                if isinstance(args.get(key), int) and args[key]:
                    args[key] += s * 1000
            if e.get("name", "").startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{s}"
            events.append(e)
    return {**{k: v for k, v in base.items() if k != "traceEvents"}, "traceEvents": events}


def run() -> str:
    from joulebound.workload.analytic import PRESETS, build_trace, model_flops_estimate
    from joulebound.workload.kineto import from_chrome_trace
    from joulebound.workload.roofline import summarize
    from joulebound.workload.trace import Trace

    from .timing import cpu_runs

    lines = ["## Traces (`bench_traces`)", "",
             "CPU time, median (min–max) of repeated runs: 7 for the builds of one iteration, 3 "
             "for the large trace and the Kineto imports, one run for save / load (seconds "
             "each).", "",
             "| preset | kernels | build, CPU ms | FLOP / (6NT + 12LSdT) |", "|---|---:|---:|---:|"]
    for name in PRESETS:
        n = len(build_trace(name))
        t = cpu_runs(lambda name=name: build_trace(name))
        ratio = build_trace(name).total_flops / model_flops_estimate(PRESETS[name])
        lines.append(f"| {name} | {n} | {_s(t, 1e3, 2)} | {ratio:.4f} |")

    big = build_trace("gpt3-xl", iterations=100)
    t_big = _time(lambda: build_trace("gpt3-xl", iterations=100), 3)
    t_sum = _time(lambda: summarize(big), 3)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.json.gz"
        t_save = _time(lambda: big.save(path), 1)
        size = path.stat().st_size
        t_load = _time(lambda: Trace.load(path), 1)
    lines += ["", "| large trace (gpt3-xl x 100 iterations) | value |", "|---|---:|",
              f"| kernels | {len(big)} |", f"| build (CPU s) | {_s(t_big)} |",
              f"| summarize, no device (CPU s) | {_s(t_sum)} |",
              f"| save .json.gz (CPU s) / size (MB) | {_s(t_save, nd=2)} / {size / 1e6:.1f} |",
              f"| load .json.gz (CPU s) | {_s(t_load, nd=2)} |"]

    lines += ["", "| Kineto import (synthetic, repeated fixture) | GPU kernels | events | "
              "import (CPU s) | µs per GPU kernel |", "|---|---:|---:|---:|---:|"]
    for steps in (10, 200, 400):
        doc = _synthetic_kineto(steps)
        tr = from_chrome_trace(doc)
        t_imp = _time(lambda doc=doc: from_chrome_trace(doc), 3)
        lines.append(f"| {steps} steps | {len(tr)} | {len(doc['traceEvents'])} | {_s(t_imp)} | "
                     f"{t_imp[0] / max(1, len(tr)) * 1e6:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(run())
