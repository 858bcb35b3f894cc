"""``joulebound plan``: choose GPU clocks per kernel / layer / pass / iteration for a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

HELP = """Plan GPU clocks for one training iteration and compare with the auto governor.

TARGET is a model preset (gpt3-xl, gpt2-small, bert-base, ...) or a trace file (joulebound
trace JSON or a torch.profiler/Kineto export). Each kernel's time and energy at every supported
(core, memory) clock pair come from joulebound's GPU model (modeled), or from a measured
characterization given with --characterization (.npz; trace kernels it lacks are named in the
error).

The table has one row per granularity (iteration: one clock pair for everything; pass: one per
forward / backward / optimizer; layer: one per layer and pass; kernel: one per kernel) with
energy and time change against auto and the number of clock switches per iteration, all
modeled. With --switch-latency L it adds the switch-aware plan (phases lasting at least L, every
switch landing on time) and replays every plan through the simulator at L with look-ahead
requests: a kernel-level plan that ignored switching then shows its real cost. For GPT-3-XL on
the RTX 3080 Ti a separate column shows Spaan et al.'s published figures (arXiv 2601.08539) —
a cited reference, not our output.

--json prints an object with keys: target, device, objective, slowdown, switch_latency_s,
baseline {config, time_s, energy_j, provenance}, rows [{label, granularity, objective, slowdown,
plan_switch_latency_s, energy_delta, time_delta, switches, predicted_energy_j, predicted_time_s,
provenance, solver, gap_bound, replay {switch_latency_s, energy_delta, time_delta, switches,
late_kernels, provenance}}], published [{granularity, energy_delta, time_delta, what,
provenance, source}], plan {label, per_category [{category, kernels, baseline_energy_j,
plan_energy_j, saved_j, energy_delta, time_delta, share_of_saving, provenance}], kernels
[{index, name, category, phase, layer, clock, core_mhz, mem_mhz}]} (the plan saved with -o:
the switch-aware plan when --switch-latency is given, else the finest granularity).
Deltas are fractions (-0.05 = 5 % less)."""


def plan_command(
    target: Annotated[str, typer.Argument(help="Model preset or trace file.")],
    device: Annotated[str, typer.Option("--device", "-d", help="GPU catalog name, e.g. rtx3080ti.")],
    slowdown: Annotated[float, typer.Option(help="Allowed slowdown vs auto (0.01 = 1 %).")] = 0.0,
    objective: Annotated[str, typer.Option(
        help="waste (least energy within the time budget) or edp / ed2p (least energy·time^n; "
        "a nonzero --slowdown caps the slowdown).")] = "waste",
    granularity: Annotated[str, typer.Option(help="kernel, layer, pass, iteration or all.")] = "all",
    switch_latency: Annotated[str | None, typer.Option(
        "--switch-latency", help="Clock-switch latency, e.g. 10ms (adds the switch-aware plan "
        "and replays plans at this latency).")] = None,
    characterization: Annotated[Path | None, typer.Option(
        help="Measured characterization (.npz) instead of the model.")] = None,
    tie: Annotated[bool, typer.Option(help="One clock pair for identical kernel invocations.")] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the plan JSON here.")] = None,
    report: Annotated[Path | None, typer.Option(help="Write an HTML report into this folder.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (keys in --help).")] = False,
) -> None:
    from ..errors import JouleboundError

    if objective not in ("waste", "relaxed", "edp", "ed2p"):
        raise JouleboundError(f"unknown --objective {objective!r}; one of waste, edp, ed2p")
    grans = ["iteration", "pass", "layer", "kernel"] if granularity == "all" else [granularity]
    if any(g not in ("iteration", "pass", "layer", "kernel") for g in grans):
        raise JouleboundError(f"unknown --granularity {granularity!r}; one of kernel, layer, pass, "
                              "iteration, all")
    from ..dvfs.switching import parse_duration

    lat = None if switch_latency is None else parse_duration(switch_latency)
    study, label = _run(target, device, slowdown, objective, grans, lat, characterization, tie,
                        quiet=as_json)
    main = study.row(label)
    if output is not None:
        main.plan.meta["label"] = label
        main.plan.save(output)
    index = None
    if report is not None:
        from ..report.html import write_report

        index = write_report(study, report, category_row=label)
    if as_json:
        from ..cli._common import print_json

        print_json(study_json(study, target, objective, slowdown, lat, label))
        return
    render(study, label, lat)
    from ._common import console

    if output is not None:
        console.print(f"plan ({label}) written to {output}")
    if index is not None:
        console.print(f"report written to {index}")


def _run(target, device, slowdown, objective, grans, lat, characterization, tie, quiet):
    from ..dvfs.characterization import Characterization
    from ..dvfs.model import characterize
    from ..dvfs.solve import align
    from ..dvfs.solve.study import run_study
    from ..workload import load_trace
    from ._common import console

    trace = load_trace(target)
    if characterization is not None:
        char = align(Characterization.load(characterization), trace)
    else:
        char = characterize(trace, device)
    with console.status("planning ...", spinner="dots") if not quiet else _null():
        study = run_study(trace, char, granularities=grans, slowdowns=[slowdown],
                          objective=objective, latencies=[lat] if lat is not None else None,
                          replay_latency_s=lat or 0.0, frontier=True, tie=tie)
    label = next((r.label for r in study.rows if r.granularity == "phase"), None) or study.rows[
        [r.granularity for r in study.rows].index(grans[-1])].label
    return study, label


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def study_json(study, target, objective, slowdown, lat, label) -> dict:
    from ..dvfs.solve.study import category_savings, kernel_clocks

    main = study.row(label)
    return {
        "target": target, "device": study.char.device, "objective": objective,
        "slowdown": slowdown, "switch_latency_s": lat,
        "baseline": {"config": study.baseline_config, "time_s": study.baseline_time_s,
                     "energy_j": study.baseline_energy_j, "provenance": study.char.provenance()},
        "rows": [r.to_json(study.baseline_energy_j, study.baseline_time_s) for r in study.rows],
        "published": study.published,
        "plan": {"label": label,
                 "per_category": category_savings(study.trace, study.char, main.plan),
                 "kernels": kernel_clocks(study.trace, main.plan)},
    }


def _published_cell(study, granularity: str) -> str:
    cells = [f"{p['energy_delta'] * 100:+.2f} % @ {p['time_delta'] * 100:+.1f} % ({p['what'].split(' (')[0]})"
             for p in study.published if p["granularity"] == granularity]
    return "\n".join(cells) if cells else ""


def render(study, label: str, lat: float | None, title: str | None = None) -> None:
    """Print the plans table, the published column and per-category savings."""
    from rich.table import Table

    from ..dvfs.solve.study import PUBLISHED_CITATION, category_savings
    from ._common import console, fmt_pct

    t = Table(title=title or f"{study.trace.name} on {study.char.device}: clock plans vs auto "
              f"(baseline {study.baseline_config}: {study.baseline_time_s * 1e3:.2f} ms, "
              f"{study.baseline_energy_j:.2f} J per iteration, modeled)", title_justify="left")
    t.add_column("plan")
    t.add_column("energy Δ", justify="right")
    t.add_column("time Δ", justify="right")
    t.add_column("switches", justify="right")
    show_replay = any(r.replay_latency_s > 0 for r in study.rows)
    if show_replay:
        t.add_column("replay L", justify="right")
        t.add_column("replayed E Δ", justify="right")
        t.add_column("replayed t Δ", justify="right")
        t.add_column("late", justify="right")
    t.add_column("provenance")
    if study.published:
        t.add_column("published (Spaan et al.)", style="red")
    shown: set[str] = set()

    def pct(x: float) -> str:
        return fmt_pct(0.0 if abs(x) < 5e-5 else x)

    for r in study.rows:
        cells = [r.label, pct(r.plan.energy_delta), pct(r.plan.time_delta),
                 str(r.plan.n_switches)]
        if show_replay:
            rep = r.replay
            cells += [f"{r.replay_latency_s * 1e3:g} ms", pct(rep.energy_j / study.baseline_energy_j - 1),
                      pct(rep.time_s / study.baseline_time_s - 1), str(rep.late_kernels)]
        cells.append(r.plan.provenance)
        if study.published:
            first = r.granularity not in shown and r.granularity != "phase" and "blind" not in r.label
            shown.add(r.granularity)
            cells.append(_published_cell(study, r.granularity) if first else "")
        t.add_row(*cells)
    console.print(t)
    if study.published:
        console.print(f"[red]published[/]: {PUBLISHED_CITATION} — a cited reference column, "
                      "kernels measured alone, no switch cost; not joulebound output.")
    cats = category_savings(study.trace, study.char, study.row(label).plan)
    c = Table(title=f"Savings by kernel category, plan '{label}' (modeled)", title_justify="left")
    for col in ("category", "kernels", "baseline J", "saved J", "energy Δ", "time Δ", "share"):
        c.add_column(col, justify="left" if col == "category" else "right")
    for row in cats:
        c.add_row(row["category"], str(row["kernels"]), f"{row['baseline_energy_j']:.3f}",
                  f"{row['saved_j']:.3f}", pct(row["energy_delta"]), pct(row["time_delta"]),
                  f"{row['share_of_saving'] * 100:.1f} %")
    console.print(c)


def register(app: typer.Typer) -> None:
    app.command("plan", help=HELP)(plan_command)
