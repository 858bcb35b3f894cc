"""``joulebound plan``: choose GPU clocks per kernel / layer / pass / iteration for a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

HELP = """Plan GPU clocks for one training iteration and compare with the auto governor.

TARGET is a model preset (gpt3-xl, gpt2-small, bert-base, ...) or a trace file (joulebound
trace JSON or a torch.profiler/Kineto export). Each kernel's time and energy at every supported
(core, memory) clock pair — plus the per-domain governed configs (auto/MEM: memory locked, core
left to the governor; CORE/auto: the reverse) — come from joulebound's GPU model (modeled), or
from a measured characterization given with --characterization (.npz; trace kernels it lacks
are named in the error). Memory clocks never measured on the GPU's memory technology (810 and
405 MHz on GDDR6X) are left out unless --allow-untested-clocks.

Every modeled energy change is printed with its 5-95 % range over refits of the device
parameters on resampled calibration data (--draws) and the model's held-out error on real
data.

The table has one row per granularity (iteration: one clock pair for everything; pass: one per
forward / backward / optimizer; layer: one per layer and pass; kernel: one per kernel) with
energy and time change against auto and the number of clock switches per iteration, all
modeled. It adds the switch-aware plan for the clock-switch latency L (phases lasting at least
L, every switch landing on time) and replays every plan through the simulator at L with
look-ahead requests: a kernel-level plan that ignored switching then shows its real cost. L is
the device's catalog latency (published, or an estimate labeled as such) unless --switch-latency
gives one (--switch-latency 0: switching taken as free). A closing "Conclusion" line (also the
first paragraph of the --report page) sums up the saved plan. For GPT-3-XL on
the RTX 3080 Ti a separate table shows Spaan et al.'s published figures (arXiv 2601.08539) —
a cited reference, not our output. Then the savings per kernel category of the plan saved
with -o. The tables fit an 80-column terminal.

Each granularity's plan comes from a Lagrangian solver with a certified gap bound (gap_bound:
its energy is within that fraction of the optimum); when that bound exceeds 0.01 %, the groups
nearest the critical trade-off are re-solved exactly by HiGHS under a small time budget (0.25
s + 2 ms per option, at most 1.5 s). A plan whose exact step stopped at that limit says so
(time_limit_hit, and a note under the table). The current step is shown on stderr.

--json prints an object with keys: target, device, objective, slowdown, switch_latency_s,
baseline {config, time_s, energy_j, provenance}, rows [{label, granularity, objective, slowdown,
plan_switch_latency_s, energy_delta, time_delta, switches, predicted_energy_j, predicted_time_s,
provenance, solver, gap_bound, solver_time_limit_s (HiGHS's limit, s; null when it did not
run), time_limit_hit, replay {switch_latency_s, energy_delta, time_delta, switches,
late_kernels, provenance}, energy_delta_lo, energy_delta_hi, time_delta_lo, time_delta_hi (the
plan re-evaluated under each parameter draw, 5-95 %), replan_energy_delta_lo/hi (re-planned
under each draw; switch-free plans), n_draws, quantiles, covers (null ranges: no draws)}],
model_heldout_error {check, time_mape, energy_mape, ...}, memory_warning (text when the
step does not fit the device's memory, else null), untested_mem_mhz_excluded, published [{granularity, energy_delta, time_delta, what,
provenance, source}], plan {label, per_category [{category, kernels, baseline_energy_j,
plan_energy_j, saved_j, energy_delta, time_delta, share_of_saving, provenance}], kernels
[{index, name, category, phase, layer, clock, core_mhz, mem_mhz}]} (the plan saved with -o:
the switch-aware plan when --switch-latency is given, else the finest granularity).
Deltas are fractions (-0.05 = 5 % less)."""


def plan_command(
    target: Annotated[str, typer.Argument(help="Model preset or trace file.")],
    device: Annotated[str, typer.Option("--device", "-d", help="GPU catalog name, e.g. rtx3080ti.")],
    slowdown: Annotated[str, typer.Option(
        help="Allowed slowdown vs auto: 1% or 0.01 (a bare number >= 1 is refused without "
        "--force: 5 would be +500 %).")] = "0",
    objective: Annotated[str, typer.Option(
        help="waste (least energy within the time budget) or edp / ed2p (least energy·time^n; "
        "a nonzero --slowdown caps the slowdown).")] = "waste",
    granularity: Annotated[str, typer.Option(help="kernel, layer, pass, iteration or all.")] = "all",
    switch_latency: Annotated[str | None, typer.Option(
        "--switch-latency", help="Clock-switch latency with a unit, e.g. 10ms (a bare number is "
        "seconds). Default: the device's catalog latency (published or a labeled estimate); 0 "
        "plans as if switching were free.")] = None,
    characterization: Annotated[Path | None, typer.Option(
        help="Measured characterization (.npz) instead of the model.")] = None,
    allow_untested_clocks: Annotated[bool, typer.Option(
        "--allow-untested-clocks", help="Also plan memory clocks never measured on this GPU's "
        "memory technology (e.g. 810/405 MHz on GDDR6X); nothing checks the model there.")] = False,
    draws: Annotated[int, typer.Option(
        help="Parameter draws for the 5-95 % intervals (0 = none; default: all shipped).",
        min=0)] = 24,
    tie: Annotated[bool, typer.Option(help="One clock pair for identical kernel invocations.")] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the plan JSON here.")] = None,
    report: Annotated[Path | None, typer.Option(help="Write an HTML report into this folder.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (keys in --help).")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Accept a --slowdown of 1 or more (+100 % or more).")] = False,
) -> None:
    from joulebound.cli._common import console, err_console
    from joulebound.core.progress import StepProgress
    from joulebound.core.units import parse_fraction
    from joulebound.planning.workflow import plan_clocks

    slowdown_f = parse_fraction(slowdown, "--slowdown", force=force)
    with StepProgress("plan") as step:
        res = plan_clocks(target, device, slowdown=slowdown_f, objective=objective,
                          granularity=granularity, switch_latency=switch_latency,
                          characterization=characterization, tie=tie,
                          frontier=report is not None, allow_untested=allow_untested_clocks,
                          n_draws=draws, progress=step)
    for note in res.notes:
        if note == res.memory_warning:
            err_console.print(f"[yellow]warning[/]: {note}", highlight=False)
        else:
            err_console.print(f"[yellow]note:[/] {note}", highlight=False)
    study, label, lat = res.study, res.label, res.switch_latency_s
    if output is not None:
        res.plan.meta["label"] = label
        res.plan.save(output)
    from joulebound.report.conclusion import plan_conclusion

    conclusion = plan_conclusion(study, label, lat, res.latency_source)
    index = None
    if report is not None:
        from joulebound.report.html import write_report

        index = write_report(study, report, category_row=label, conclusion=conclusion)
    if as_json:
        from joulebound.cli._common import print_json

        print_json(res.to_json())
        return
    from joulebound.cli._plan_tables import render

    render(study, label, lat)
    console.print()
    console.print(conclusion.replace("Conclusion", "[bold]Conclusion[/]", 1), highlight=False)
    if output is not None:
        console.print(f"plan ({label}) written to {output}")
    if index is not None:
        console.print(f"report written to {index}")


def register(app: typer.Typer) -> None:
    from joulebound.cli._common import reflow

    app.command("plan", help=reflow(HELP))(plan_command)
