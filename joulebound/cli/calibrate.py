"""``joulebound calibrate``: measure a kernel-level characterization on your own GPU (or the
simulated one) by replaying the recorded iteration's distinct ops at a few clock pairs."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from joulebound.cli._common import console, print_json

JSON_HELP = ("Print JSON (keys in docs/calibrate.md): device, gpu, backend, clocks, "
             "distinct_kernels, replayable_kernels, measured_kernels, measured_cells, "
             "pairs_per_kernel_max, gpu_seconds (device time measuring), full_sweep_gpu_seconds "
             "(every supported pair at the same window length), full_sweep_cells, "
             "gpu_seconds_fraction_of_full_sweep, wall_s, clock_switches, not_replayable, "
             "not_measured_budget, model_error_at_auto (time_mape, energy_mape, worst, "
             "per_kernel), cells (each measurement: time_s, energy_j, power_w, temperature_c, "
             "sm_mhz, mem_mhz, ...), notes, provenance, output; simulated backend also "
             "plan_energy_delta, plan_time_delta, full_sweep_plan_energy_delta, "
             "full_sweep_plan_time_delta, full_sweep_plan_energy_delta_same_time, "
             "plan_energy_gap_vs_full_sweep.")


HELP = """Measure the recorded iteration's distinct kernels on the GPU and write a characterization
whose measured cells are labeled measured (the rest modeled from each kernel's fit).

Each distinct op is rebuilt on fresh tensors of its recorded shapes, strides and dtypes and
run back to back for at least K energy-counter updates, with warm-up and repeats; time from
CUDA events, energy from the NVML counter (power integration without one); temperature and
clocks are kept beside each measurement. Clock pairs are locked one at a time (validated
against the card's table) and the defaults are restored on every way out. Then:
`joulebound plan ops.json -d DEVICE --characterization char.npz`.
"""


def calibrate_cmd(
    trace: Path = typer.Argument(..., help="The recorded iteration: `joulebound run --record "
                                 "ops.json -- python train.py` output (a profiled Kineto trace "
                                 "names CUDA kernels, not ops: its kernels are listed as not "
                                 "replayable)."),
    device: str = typer.Option(..., "--device", "-d", help="GPU catalog name (the model's clock "
                               "table and parameters), e.g. h200-sxm, a100-sxm4-80gb."),
    gpu: str = typer.Option("0", "--gpu", help="The GPU as CUDA numbers it (index into "
                            "CUDA_VISIBLE_DEVICES) or a UUID (nvml backend)."),
    backend: str = typer.Option("nvml", "--backend", help="nvml (a real NVIDIA GPU) or simulated "
                                "(joulebound's device model as the ground truth, with sensor "
                                "period, mJ quantization and noise; no GPU needed)."),
    clocks: str = typer.Option("3", "--clocks", help="auto: read-only, the default clocks only "
                               "(changes no GPU setting; reports the model's error); 3: up to 3 "
                               "pairs per kernel chosen from the model; full: every supported "
                               "pair (slow)."),
    budget: str = typer.Option(None, "--budget", help="Device time allowed, e.g. 10min, 90s. "
                               "Kernels are measured by their share of the iteration's time; the "
                               "rest keep the model."),
    helper: str = typer.Option(None, "--helper", help="Socket of the privileged clock helper "
                               "(`sudo joulebound clock-helper --socket ...`); without it, clocks "
                               "are set in-process through NVML (needs root)."),
    sensor_period: str = typer.Option(None, "--sensor-period", help="Energy-counter update "
                                      "period, e.g. 100ms (default: the catalog's, else 100 ms)."),
    periods: int = typer.Option(5, "--periods", min=1, help="Counter updates per measurement "
                                "window (K)."),
    repeats: int = typer.Option(2, "--repeats", min=1, help="Windows per measurement."),
    warmup: str = typer.Option("200ms", "--warmup", help="Warm-up before each measurement."),
    seed: int = typer.Option(0, "--seed", help="Simulated backend: seed of the truth and noise."),
    output: Path = typer.Option(..., "-o", "--output", help="Write the Characterization (.npz) "
                                "for `joulebound plan --characterization`."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """``joulebound calibrate`` (help: :data:`HELP`)."""
    from joulebound.core.errors import JouleboundError
    from joulebound.core.units import parse_duration
    from joulebound.hw.catalog import get_device
    from joulebound.measure.calibrate.measure import WindowSettings
    from joulebound.workload import load_trace

    if backend not in ("nvml", "simulated"):
        raise JouleboundError(f"--backend {backend!r}: use nvml or simulated")
    spec = get_device(device)            # unknown device: a clear error before anything else
    tr = load_trace(trace)
    budget_s = None if budget is None else parse_duration(budget)
    if budget_s is not None and budget_s <= 0:
        raise JouleboundError("--budget must be positive, e.g. 10min")
    g: int | str = int(gpu) if gpu.isdigit() else gpu
    if backend == "simulated":
        from joulebound.measure.calibrate.backends import SimulatedBackend

        be = SimulatedBackend(tr, spec.name, seed=seed,
                              sensor_period_s=None if sensor_period is None
                              else parse_duration(sensor_period))
    else:
        from joulebound.measure.calibrate.backends import NvmlBackend

        be = NvmlBackend(g, helper=helper, sensor_period_s=None if sensor_period is None
                         else parse_duration(sensor_period))
    ws = WindowSettings(sensor_period_s=be.sensor_period_s, k_periods=periods,
                        warmup_s=parse_duration(warmup), repeats=repeats)
    try:
        res = _run(tr, spec.name, be, clocks, budget_s, ws, quiet=json_out)
    finally:
        be.close()
    res.char.save(output)
    d = res.to_json()
    d["output"] = str(output)
    if json_out:
        print_json(d)
        return
    _summary(d, output)


def _run(tr, device, be, clocks, budget_s, ws, quiet):  # type: ignore[no-untyped-def]
    from joulebound.core.progress import progress_bar
    from joulebound.measure.calibrate.calibration import calibrate

    show = sys.stderr.isatty() and not quiet
    with progress_bar("calibrate", enabled=show, transient=True) as prog:
        task = prog.add_task("", total=None)

        def progress(done: int, total: int, label: str) -> None:
            prog.update(task, completed=done, total=total, description=label[:50])

        return calibrate(tr, device, be, clocks=clocks, budget_s=budget_s, window=ws,
                         progress=progress)


def _summary(d: dict, output: Path) -> None:
    c = console
    prov = d["provenance"]["cells"]   # "measured", or modeled on the simulated GPU
    c.print(f"[bold]{d['gpu']}[/] ({d['backend']} backend), model {d['device']}, clocks "
            f"{d['clocks']}")
    c.print(f"distinct kernels {d['distinct_kernels']}: replayed {d['replayable_kernels']}, "
            f"measured {d['measured_kernels']} ({d['measured_cells']} cells, at most "
            f"{d['pairs_per_kernel_max']} pairs each; {prov})")
    frac = d["gpu_seconds_fraction_of_full_sweep"]
    c.print(f"GPU time {d['gpu_seconds']:.1f} s "
            f"({'simulated device time' if d['backend'] == 'simulated' else 'measured'}); a full sweep "
            f"of every supported pair: {d['full_sweep_gpu_seconds']:.0f} s "
            f"({d['full_sweep_cells']} cells; this run {100 * frac:.2f} % of it)"
            if frac is not None else f"GPU time {d['gpu_seconds']:.1f} s")
    err = d["model_error_at_auto"]
    if err:
        c.print(f"model error at the default clocks over {err['kernels']} kernels (prior model "
                f"vs {prov}): time MAPE {100 * err['time_mape']:.1f} %, energy MAPE "
                f"{100 * err['energy_mape']:.1f} %")
        for w in err["worst"][:3]:
            c.print(f"  worst: {w['name'][:70]}  time {100 * w['time_error']:+.0f} %, energy "
                    f"{100 * w['energy_error']:+.0f} %")
    if "plan_energy_delta" in d:
        c.print(f"kernel plan at 0 % slowdown, on the simulated truth: energy "
                f"{100 * d['plan_energy_delta']:+.2f} % (time {100 * d['plan_time_delta']:+.2f} %)"
                f"; from a full sweep {100 * d['full_sweep_plan_energy_delta']:+.2f} %, at the "
                f"same true time {100 * d['full_sweep_plan_energy_delta_same_time']:+.2f} % "
                f"(gap {100 * d['plan_energy_gap_vs_full_sweep']:+.2f} %)")
    if d["not_replayable"]:
        c.print(f"not replayable ({len(d['not_replayable'])}, modeled):")
        for u in d["not_replayable"][:5]:
            c.print(f"  {u['name'][:70]}: {u['reason']}")
    for n in d["notes"]:
        c.print(f"note: {n}")
    c.print(f"wrote {output}; next: joulebound plan TRACE -d {d['device']} --characterization "
            f"{output}")


def register(app: typer.Typer) -> None:
    from joulebound.cli._common import reflow

    app.command("calibrate", help=reflow(HELP))(calibrate_cmd)
