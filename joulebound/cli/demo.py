"""``joulebound demo``: kernel-level DVFS for GPT-3-XL on the RTX 3080 Ti model, end to end.

Trace (analytic GPT-3-XL iteration) → characterization (joulebound's GPU model at every clock
pair) → plans at iteration / pass / kernel granularity at 0 % and 1 % slowdown → switch-aware
plans at L = 0, 1, 6, 20, 150 ms → replay in the simulator → table + HTML report. Needs no data
folder and no GPU; every figure is labeled modeled or published.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

HELP = """Run the main joulebound demo: GPT-3-XL (1.3 B) training iteration on the RTX 3080 Ti
model. Plans one clock pair per iteration, per pass (forward/backward/optimizer) and per kernel
at 0 % and 1 % allowed slowdown; then the switch-aware plan at 0 % and 1 % slowdown for clock-switch latencies 0, 1,
6, 20 and 150 ms (published latencies span 6 ms on H200 to 150 ms on Turing; NVML set-calls take
10-20 ms), each replayed in the latency-aware simulator, beside the kernel plan that ignored
switching replayed at the same latency. Prints the table and writes an HTML report
(joulebound-report/index.html by default). All numbers are modeled by joulebound except the
column of Spaan et al.'s figures (arXiv 2601.08539), which is published and cited.

--json prints the same object as `joulebound plan --json` (keys documented there) with the
switch-aware plan at 6 ms and 0 % slowdown as "plan"."""

LATENCIES_S = (0.0, 1e-3, 6e-3, 20e-3, 150e-3)


def demo_command(
    model: Annotated[str, typer.Option(help="Model preset.")] = "gpt3-xl",
    device: Annotated[str, typer.Option(help="Device catalog name.")] = "rtx3080ti",
    report: Annotated[Path, typer.Option(help="Report folder.")] = Path("joulebound-report"),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    import time

    from ..dvfs.model import characterize
    from ..dvfs.solve.study import run_study
    from ..report.html import write_report
    from ..workload.analytic import build_trace
    from ._common import console, print_json
    from .plan import render, study_json

    t0 = time.perf_counter()
    trace = build_trace(model)
    char = characterize(trace, device)
    status = console.status("planning ...", spinner="dots") if not as_json else None
    if status is not None:
        status.start()
    try:
        study = run_study(trace, char, granularities=["iteration", "pass", "kernel"],
                          slowdowns=[0.0, 0.01], latencies=list(LATENCIES_S),
                          latency_slowdown=[0.0, 0.01], replay_latency_s=0.0, frontier=True,
                          progress=(lambda m: status.update(f"planning: {m}")) if status else None)
        index = write_report(study, report, title=f"joulebound demo: {model} on {device}",
                             clock_rows=["kernel @+0%", "phase L=6ms @+0%", "phase L=150ms @+0%"],
                             category_row="kernel @+0%")
    finally:
        if status is not None:
            status.stop()
    if as_json:
        print_json(study_json(study, model, "waste", 0.0, 6e-3, "phase L=6ms @+0%"))
        return
    console.print(f"[bold]{model}[/] on [bold]{device}[/]: {len(trace)} kernels × "
                  f"{char.n_configs} clock configurations (modeled by joulebound's GPU model).")
    render(study, "kernel @+0%", 0.0,
           title=f"Clock plans vs auto (baseline {study.baseline_config}: "
                 f"{study.baseline_time_s * 1e3:.2f} ms, {study.baseline_energy_j:.2f} J per "
                 "iteration). Rows @ε: switch-free plans (replayed at L=0); 'phase L': "
                 "switch-aware plans replayed at L; 'L-blind': the switch-free kernel plan replayed at L. "
                 "All modeled.")
    console.print(f"report: {index}  ({time.perf_counter() - t0:.1f} s)")


def register(app: typer.Typer) -> None:
    app.command("demo", help=HELP, short_help="GPT-3-XL on the RTX 3080 Ti: kernel-level and "
                "switch-aware clock plans (modeled), table + HTML report.")(demo_command)
