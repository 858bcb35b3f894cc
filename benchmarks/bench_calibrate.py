"""``joulebound calibrate`` on the simulated GPU: GPU-seconds of few-clock calibration vs a full
sweep, and the energy of the resulting kernel plan vs the full-sweep plan.

Workload: the op stream of one training step of the demo GPT (2 layers, d=512, batch 8, seq 256,
fp32; ``joulebound.testing.demo_gpt``) recorded on this CPU as ``joulebound run --record`` does.
Each device is the simulated GPU of :mod:`joulebound.measure.calibrate.simulated` (device model as the
per-kernel truth, the model's prior off by log-normal factors sd 0.3 on work and 0.2 on activity,
sensor period from the catalog or 0.1 s, whole-mJ counter, 0.3 % time and 0.5 % power noise per
window), measured with the default windows (5 counter periods, 2 repeats, 0.2 s warm-up).

Writes the table into docs/calibrate.md (between ``<!-- bench:calibrate -->`` markers) when run
as ``python -m benchmarks.bench_calibrate``; :func:`run` returns the same section for
``benchmarks/run_all.py`` (``make bench``).
"""

from __future__ import annotations

import datetime as dt
import re
import time
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "calibrate.md"
DEVICES = ("a100-sxm4-80gb", "h200-sxm", "rtx3080ti")
SEEDS = (0, 1)
PROCESSES = 3
"""Fresh processes per device (:func:`benchmarks.timing.fresh_results`)."""


def record_step(hidden: int = 512, batch: int = 8, seq: int = 256):
    """The demo GPT's op stream of one step (argument specs kept), after two warm-up steps."""
    from joulebound.runtime.controller import trace_from_ops
    from joulebound.runtime.hooks import OpStream
    from joulebound.testing.demo_gpt import TinyGPTConfig, make_step

    step, _ = make_step(TinyGPTConfig(hidden=hidden, batch=batch, seq=seq, layers=2))
    step()
    step()
    with OpStream(record=True, capture_args=True) as s:
        step()
    specs = {s.name(k): v for k, v in s.arg_specs.items()}
    return trace_from_ops([s.name(k) for k in s.keys], f"demo-gpt-d{hidden}-b{batch}-s{seq}",
                          specs)


KEYS = ("distinct_kernels", "replayable_kernels", "measured_cells", "gpu_seconds",
        "full_sweep_gpu_seconds", "gpu_seconds_fraction_of_full_sweep", "plan_energy_delta",
        "plan_time_delta", "full_sweep_plan_energy_delta", "full_sweep_plan_energy_delta_same_time",
        "plan_energy_gap_vs_full_sweep")


def calibrate_case(dev: str) -> dict[str, dict]:
    """In a fresh process: the step recorded, then the few-clock calibration of every seed on
    the simulated ``dev``: per seed the figures of :data:`KEYS` and the calibration's CPU s."""
    from joulebound.measure.calibrate.backends import SimulatedBackend
    from joulebound.measure.calibrate.calibration import calibrate

    trace = record_step()
    out = {}
    for seed in SEEDS:
        be = SimulatedBackend(trace, dev, seed=seed)
        c0 = time.process_time()
        d = calibrate(trace, dev, be, clocks="3").to_json()
        out[str(seed)] = {"cpu": time.process_time() - c0, **{k: d[k] for k in KEYS}}
    return out


def run() -> str:

    from joulebound.measure.calibrate.backends import SimulatedBackend
    from joulebound.measure.calibrate.calibration import calibrate

    from .timing import fresh_results, spread

    got = fresh_results({dev: ("benchmarks.bench_calibrate:calibrate_case", (dev,))
                         for dev in DEVICES}, processes=PROCESSES)
    rows = []
    for dev in DEVICES:
        for seed in SEEDS:
            runs = [r[str(seed)] for r in got[dev]]
            same = all({k: r[k] for k in KEYS} == {k: runs[0][k] for k in KEYS} for r in runs)
            cpu = [r["cpu"] for r in runs]
            rows.append((dev, seed, runs[0], spread(cpu), same))
    trace = record_step()
    ro = []
    for dev in DEVICES:
        be = SimulatedBackend(trace, dev, seed=0)
        ro.append((dev, calibrate(trace, dev, be, clocks="auto").to_json()))
    n_k = rows[0][2]["distinct_kernels"]
    out = [
        "## Few-clock calibration vs a full sweep (simulated GPU)",
        "",
        f"Workload: `{trace.name}`, {len(trace)} kernel ops per step, {n_k} distinct "
        f"({rows[0][2]['replayable_kernels']} replayable). GPU-seconds are simulated device time "
        "(measured by the calibration's own clock on the simulated GPU); the full sweep is every "
        "supported pair plus auto at the same window length. Plan energy: kernel plan at 0 % "
        "slowdown, evaluated on the simulated truth (modeled), against the default clocks; "
        "\"full sweep\" plans on the truth itself (a noise-free full sweep); \"same time\" is the "
        "full-sweep plan allowed the true time the calibrated plan takes.",
        "",
        "| device | seed | cells | GPU-s calibrate | GPU-s full sweep | ratio (target <= 5 %) | "
        "plan energy | plan time | full sweep @0 % | full sweep, same time | gap (target <= 1 %) "
        "| CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dev, seed, d, cpu, _ in rows:
        out.append(
            f"| {dev} | {seed} | {d['measured_cells']} | {d['gpu_seconds']:.0f} | "
            f"{d['full_sweep_gpu_seconds']:.0f} | "
            f"{100 * d['gpu_seconds_fraction_of_full_sweep']:.2f} % | "
            f"{100 * d['plan_energy_delta']:+.2f} % | {100 * d['plan_time_delta']:+.2f} % | "
            f"{100 * d['full_sweep_plan_energy_delta']:+.2f} % | "
            f"{100 * d['full_sweep_plan_energy_delta_same_time']:+.2f} % | "
            f"{100 * d['plan_energy_gap_vs_full_sweep']:+.2f} % | "
            f"{cpu[0]:.1f} ({cpu[1]:.1f}–{cpu[2]:.1f}) |")
    same = all(r[4] for r in rows)
    out += ["", f"Each device calibrated in {PROCESSES} fresh processes (the step recorded in "
            "each): CPU s of the calibration (simulated GPU included; seed 0 runs first in its "
            "process, so its figure includes the one-off start of the calibration code), "
            "median (min–max) over them; the other figures "
            + ("were identical in every process." if same else
               "**differed between the processes**; the first process's are shown.")]
    out += ["", "Read-only (`--clocks auto`): every distinct kernel at the default clocks, no "
            "clock changed; the prior model's error against the simulated measurement (the "
            "simulated truth differs from the prior by construction, so this checks the "
            "reporting, not the model):", "",
            "| device | cells | GPU-s | time MAPE | energy MAPE | worst kernel |",
            "|---|---|---|---|---|---|"]
    for dev, d in ro:
        e = d["model_error_at_auto"]
        w = e["worst"][0]
        out.append(f"| {dev} | {d['measured_cells']} | {d['gpu_seconds']:.0f} | "
                   f"{100 * e['time_mape']:.1f} % | {100 * e['energy_mape']:.1f} % | "
                   f"`{w['name'][:48]}` ({100 * w['time_error']:+.0f} % time, "
                   f"{100 * w['energy_error']:+.0f} % energy) |")
    return "\n".join(out)


def _write_doc(body: str) -> None:
    from benchmarks.run_all import machine

    stamp = f"_Measured {dt.date.today().isoformat()} on {machine()}._"
    block = f"<!-- bench:calibrate -->\n{body}\n\n{stamp}\n<!-- /bench:calibrate -->"
    text = DOC.read_text() if DOC.exists() else ""
    pat = re.compile(r"<!-- bench:calibrate -->.*?<!-- /bench:calibrate -->", re.S)
    text = pat.sub(lambda _m: block, text) if pat.search(text) else text + "\n" + block + "\n"
    DOC.write_text(text)


if __name__ == "__main__":
    section = run()
    _write_doc(section)
    print(section)
