"""``joulebound calibrate`` on the simulated GPU: GPU-seconds of few-clock calibration vs a full
sweep, and the energy of the resulting kernel plan vs the full-sweep plan.

Workload: the op stream of one training step of the demo GPT (2 layers, d=512, batch 8, seq 256,
fp32; ``joulebound.testing.demo_gpt``) recorded on this CPU as ``joulebound run --record`` does.
Each device is the simulated GPU of :mod:`joulebound.calibrate.simulated` (device model as the
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


def record_step(hidden: int = 512, batch: int = 8, seq: int = 256):  # noqa: ANN201
    """The demo GPT's op stream of one step (argument specs kept), after two warm-up steps."""
    from joulebound.dvfs.control.controller import trace_from_ops
    from joulebound.dvfs.control.hooks import OpStream
    from joulebound.testing.demo_gpt import TinyGPTConfig, make_step

    step, _ = make_step(TinyGPTConfig(hidden=hidden, batch=batch, seq=seq, layers=2))
    step()
    step()
    with OpStream(record=True, capture_args=True) as s:
        step()
    specs = {s.name(k): v for k, v in s.arg_specs.items()}
    return trace_from_ops([s.name(k) for k in s.keys], f"demo-gpt-d{hidden}-b{batch}-s{seq}",
                          specs)


def run() -> str:
    from joulebound.calibrate.backends import SimulatedBackend
    from joulebound.calibrate.calibration import calibrate

    trace = record_step()
    rows = []
    ro = []
    for dev in DEVICES:
        for seed in SEEDS:
            be = SimulatedBackend(trace, dev, seed=seed)
            t0 = time.perf_counter()
            d = calibrate(trace, dev, be, clocks="3").to_json()
            wall = time.perf_counter() - t0
            rows.append((dev, seed, d, wall))
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
        "| wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dev, seed, d, wall in rows:
        out.append(
            f"| {dev} | {seed} | {d['measured_cells']} | {d['gpu_seconds']:.0f} | "
            f"{d['full_sweep_gpu_seconds']:.0f} | "
            f"{100 * d['gpu_seconds_fraction_of_full_sweep']:.2f} % | "
            f"{100 * d['plan_energy_delta']:+.2f} % | {100 * d['plan_time_delta']:+.2f} % | "
            f"{100 * d['full_sweep_plan_energy_delta']:+.2f} % | "
            f"{100 * d['full_sweep_plan_energy_delta_same_time']:+.2f} % | "
            f"{100 * d['plan_energy_gap_vs_full_sweep']:+.2f} % | {wall:.1f} |")
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
