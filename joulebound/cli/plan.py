"""``joulebound plan``: choose GPU clocks per kernel / layer / pass / iteration for a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from joulebound.core.fmt import fmt_pct, fmt_range
from joulebound.core.provenance import MODELED

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

--json prints an object with keys: target, device, objective, slowdown, switch_latency_s,
baseline {config, time_s, energy_j, provenance}, rows [{label, granularity, objective, slowdown,
plan_switch_latency_s, energy_delta, time_delta, switches, predicted_energy_j, predicted_time_s,
provenance, solver, gap_bound, replay {switch_latency_s, energy_delta, time_delta, switches,
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
    from joulebound.core.errors import JouleboundError
    from joulebound.core.units import parse_fraction

    slowdown_f = parse_fraction(slowdown, "--slowdown", force=force)

    if objective not in ("waste", "relaxed", "edp", "ed2p"):
        raise JouleboundError(f"unknown --objective {objective!r}; one of waste, relaxed, edp, ed2p")
    grans = ["iteration", "pass", "layer", "kernel"] if granularity == "all" else [granularity]
    if any(g not in ("iteration", "pass", "layer", "kernel") for g in grans):
        raise JouleboundError(f"unknown --granularity {granularity!r}; one of kernel, layer, pass, "
                              "iteration, all")
    lat, lat_note, lat_src = plan_latency(switch_latency, device)
    if lat_note:
        from joulebound.cli._common import err_console

        err_console.print(f"[yellow]note:[/] {lat_note}", highlight=False)
    slowdown = slowdown_f
    study, label = _run(target, device, slowdown, objective, grans, lat, characterization, tie,
                        quiet=as_json, frontier=report is not None,
                        allow_untested=allow_untested_clocks, n_draws=draws)
    main = study.row(label)
    if output is not None:
        main.plan.meta["label"] = label
        main.plan.save(output)
    from joulebound.report.conclusion import plan_conclusion

    conclusion = plan_conclusion(study, label, lat, lat_src)
    index = None
    if report is not None:
        from joulebound.report.html import write_report

        index = write_report(study, report, category_row=label, conclusion=conclusion)
    if as_json:
        from joulebound.cli._common import print_json

        print_json(study_json(study, target, objective, slowdown, lat, label))
        return
    render(study, label, lat)
    from joulebound.cli._common import console

    console.print()
    console.print(conclusion.replace("Conclusion", "[bold]Conclusion[/]", 1), highlight=False)
    if output is not None:
        console.print(f"plan ({label}) written to {output}")
    if index is not None:
        console.print(f"report written to {index}")


def plan_latency(text: str | None, device: str) -> tuple[float | None, str | None, str]:
    """The switch latency to plan with (s), a note for the user (or ``None``) and where the
    latency comes from (a few words, for the conclusion)."""
    lat, note = _plan_latency(text, device)
    if text is not None:
        return lat, note, "given with --switch-latency"
    from joulebound.hw.latency import device_switch_latency

    dl = device_switch_latency(device)
    return lat, note, (f"the catalog's {dl.provenance} for {dl.device}" if dl else "")


def _plan_latency(text: str | None, device: str) -> tuple[float | None, str | None]:
    """The switch latency to plan with (s) and a note for the user (or ``None``).

    ``text`` from ``--switch-latency``; without it the device's catalog latency (published or a
    labeled estimate), or ``None`` (switching free) when the entry has none. ``0`` = free."""
    from joulebound.core.units import duration_warning, parse_duration

    if text is not None:
        return parse_duration(text), duration_warning(text, "--switch-latency")
    from joulebound.hw.latency import device_switch_latency

    dl = device_switch_latency(device)
    if dl is None:
        return None, (f"{device} has no clock-switch latency in the catalog: planning as if "
                      "switching were free; pass --switch-latency (e.g. 20ms)")
    return dl.seconds, (f"planning for the {device} clock-switch latency {dl.describe()}; "
                        "--switch-latency L overrides it, --switch-latency 0 plans as if "
                        "switching were free")


def _run(target, device, slowdown, objective, grans, lat, characterization, tie, quiet,
         frontier=True, allow_untested=False, n_draws=24):
    """Load the trace, characterize (or load and align), run the study; the Pareto frontiers
    (seconds of solver work) only when ``frontier`` (the HTML report plots them); intervals
    from ``n_draws`` parameter draws (modeled characterizations only)."""
    from contextlib import nullcontext

    from joulebound.cli._common import console
    from joulebound.gpumodel import characterize, params_for, resolve_device
    from joulebound.gpumodel.characterization import Characterization
    from joulebound.planning.solve import align
    from joulebound.planning.study import run_study
    from joulebound.planning.uncertainty import study_intervals
    from joulebound.workload import load_trace

    trace = load_trace(target)
    spec = resolve_device(device)
    from joulebound.cli._common import warn_memory

    mem_warning = warn_memory(trace, spec)
    if characterization is not None:
        char = align(Characterization.load(characterization), trace)
    else:
        char = characterize(trace, spec, allow_untested=allow_untested)
    with console.status("planning ...", spinner="dots") if not quiet else nullcontext() as st:
        study = run_study(trace, char, granularities=grans, slowdowns=[slowdown],
                          objective=objective, latencies=[lat] if lat is not None else None,
                          replay_latency_s=lat or 0.0, frontier=frontier, tie=tie)
        if characterization is None and n_draws:
            if st is not None:
                st.update("intervals over parameter draws ...")
            study.meta["intervals"] = study_intervals(study, trace, spec, params_for(spec),
                                                      n_draws)
        study.meta["heldout"] = params_for(spec).heldout if characterization is None else {}
    study.meta["memory_warning"] = mem_warning
    label = next((r.label for r in study.rows if r.granularity == "phase"), None) or study.rows[
        [r.granularity for r in study.rows].index(grans[-1])].label
    return study, label


def study_json(study, target, objective, slowdown, lat, label) -> dict:
    from joulebound.planning.study import category_savings, kernel_clocks

    main = study.row(label)
    return {
        "target": target, "device": study.char.device, "objective": objective,
        "slowdown": slowdown, "switch_latency_s": lat,
        "baseline": {"config": study.baseline_config, "time_s": study.baseline_time_s,
                     "energy_j": study.baseline_energy_j, "provenance": study.char.provenance()},
        "rows": [dict(r.to_json(), **_interval_json(study, r.label)) for r in study.rows],
        "model_heldout_error": study.meta.get("heldout") or None,
        "memory_warning": study.meta.get("memory_warning"),
        "untested_mem_mhz_excluded": study.char.meta.get("untested_mem_mhz_excluded", []),
        "published": study.published,
        "plan": {"label": label,
                 "per_category": category_savings(study.trace, study.char, main.plan),
                 "kernels": kernel_clocks(study.trace, main.plan)},
    }


def _interval_json(study, label: str) -> dict:
    """``energy_delta_lo/hi`` etc. of a row (None when the parameters carry no draws)."""
    iv = study.meta.get("intervals", {}).get(label)
    if iv is None:
        return {"energy_delta_lo": None, "energy_delta_hi": None, "time_delta_lo": None,
                "time_delta_hi": None, "replan_energy_delta_lo": None,
                "replan_energy_delta_hi": None}
    return iv.to_json()


def interval_note(study) -> str:
    """One line saying what the ranges cover and the model's held-out error."""
    ivs = study.meta.get("intervals") or {}
    h = study.meta.get("heldout") or {}
    err = ""
    if h.get("time_mape") is not None:
        err = (f"; the model's held-out error on real data: {h['time_mape']:.1f} % time, "
               f"{h['energy_mape']:.1f} % energy MAPE ({h.get('check', '')})")
    if not ivs:
        return ("No range: these device parameters carry no calibration draws (defaults)" + err
                if study.char.meta.get("params_calibration") == "none" else err.lstrip("; "))
    n = next(iter(ivs.values())).n_draws
    return (f"range = 5-95 % of the plan's energy Δ over {n} refits of the device parameters "
            f"on resampled calibration data (parameter uncertainty only)" + err)


def provenance_of(rows) -> str:
    """One provenance word for a set of study rows (``modeled`` unless rows differ)."""
    return " / ".join(sorted({r.plan.provenance for r in rows})) or MODELED


def baseline_line(study) -> str:
    """``baseline auto: 274.25 ms, 93.39 J per iteration`` (modeled or measured)."""
    return (f"baseline {study.baseline_config}: {study.baseline_time_s * 1e3:.2f} ms, "
            f"{study.baseline_energy_j:.2f} J per iteration ({study.char.provenance()})")


def published_table(study, title: str | None = None):
    """Spaan et al.'s figures as their own small table, labeled published and cited (or None).

    Never mixed into joulebound's rows: the paper measured kernels alone on a real GPU, with no
    clock-switch cost, so its numbers are a reference, not a prediction of ours.
    """
    from rich.table import Table

    from joulebound.planning.study import PUBLISHED_CITATION

    if not study.published:
        return None
    t = Table(title=title or "Published reference, not joulebound output", title_justify="left",
              title_style="bold red", caption=f"GPT-3-XL on a real RTX 3080 Ti; savings are sums "
              f"of kernels measured alone, with no clock-switch cost. Source: {PUBLISHED_CITATION}.",
              caption_justify="left")
    t.add_column("granularity")
    t.add_column("energy Δ", justify="right")
    t.add_column("time Δ", justify="right")
    t.add_column("what")
    t.add_column("provenance", style="red")
    for p in study.published:
        t.add_row(p["granularity"], fmt_pct(p["energy_delta"]), f"{p['time_delta'] * 100:+.1f} %",
                  p["what"].split(" (")[0], p["provenance"])
    return t


def category_table(study, label: str, title: str | None = None):
    """Energy saved per kernel category for one plan of the study (provenance in the title)."""
    from rich.table import Table

    from joulebound.planning.study import category_savings

    r = study.row(label)
    cats = category_savings(study.trace, study.char, r.plan)
    c = Table(title=title or f"Savings by kernel category, plan '{label}' ({r.plan.provenance})",
              title_justify="left")
    for col in ("category", "kernels", "baseline J", "saved J", "energy Δ", "time Δ", "share"):
        c.add_column(col, justify="left" if col == "category" else "right")
    for row in cats:
        c.add_row(row["category"], str(row["kernels"]), f"{row['baseline_energy_j']:.3f}",
                  f"{row['saved_j']:.3f}", fmt_pct(row["energy_delta"]), fmt_pct(row["time_delta"]),
                  f"{row['share_of_saving'] * 100:.1f} %")
    return c


def plans_table(study, lat: float | None, title: str | None = None):
    """One row per plan: energy Δ, time Δ, switches; with a latency, the replay at that L.

    Fits an 80-column terminal: labels are the study's short row names, the provenance is in
    the title, the published figures go in :func:`published_table`.
    """
    from rich.table import Table

    t = Table(title=title or f"Clock plans vs auto ({provenance_of(study.rows)})",
              title_justify="left")
    t.add_column("plan", no_wrap=True)
    t.add_column("energy Δ", justify="right")
    t.add_column("time Δ", justify="right")
    t.add_column("switches", justify="right")
    show_replay = any(r.replay_latency_s > 0 for r in study.rows)
    if show_replay:
        t.add_column("at L\nenergy Δ", justify="right")
        t.add_column("at L\ntime Δ", justify="right")
        t.add_column("late\nkernels", justify="right")
    for r in study.rows:
        cells = [r.label, fmt_pct(r.plan.energy_delta), fmt_pct(r.plan.time_delta),
                 str(r.plan.n_switches)]
        if show_replay:
            cells += [fmt_pct(r.replay_energy_delta), fmt_pct(r.replay_time_delta),
                      str(r.replay.late_kernels)]
        t.add_row(*cells)
    if show_replay:
        lats = sorted({r.replay_latency_s for r in study.rows})
        t.caption = (f"'at L': each plan replayed in the simulator at switch latency L = "
                     f"{' / '.join(f'{x * 1e3:g} ms' for x in lats)} with look-ahead requests; "
                     "late kernels ran at other clocks than planned."
                     + (" phase: the switch-aware plan (every switch charged L)."
                        if any(r.granularity == "phase" for r in study.rows) else ""))
        t.caption_justify = "left"
    return t


def ranges_table(study, title: str | None = None):  # noqa: ANN001, ANN201 - rich Table
    """Each plan's energy Δ with its 5-95 % range over parameter draws: the plan re-evaluated
    under each draw, and (switch-free plans) re-planned under each draw; ``None`` without
    draws."""
    from rich.table import Table

    ivs = study.meta.get("intervals") or {}
    if not ivs:
        return None
    t = Table(title=title or f"Parameter uncertainty of the plans ({provenance_of(study.rows)})",
              title_justify="left")
    for col in ("plan", "energy Δ", "energy Δ 5-95 %\nthis plan", "energy Δ 5-95 %\nre-planned",
                "time Δ 5-95 %\nthis plan"):
        t.add_column(col, justify="left" if col == "plan" else "right", no_wrap=True)
    seen = set()
    for r in study.rows:
        iv = ivs.get(r.label)
        if iv is None or "blind" in r.label or r.label in seen:
            continue
        seen.add(r.label)
        t.add_row(r.label, fmt_pct(r.plan.energy_delta), fmt_range(iv.energy_lo, iv.energy_hi),
                  fmt_range(iv.replan_energy_lo, iv.replan_energy_hi),
                  fmt_range(iv.time_lo, iv.time_hi))
    return t


def render(study, label: str, lat: float | None, title: str | None = None) -> None:
    """Print a header line, the plans table, the published reference table and per-category
    savings (each table labeled with its provenance)."""
    from joulebound.cli._common import console

    console.print(f"[bold]{study.trace.name}[/] on [bold]{study.char.device}[/]: "
                  f"{study.char.n_kernels} kernels × {study.char.n_configs} clock configurations; "
                  f"{baseline_line(study)}. Δ = change vs this baseline.", highlight=False)
    console.print()
    console.print(plans_table(study, lat, title))
    rt = ranges_table(study)
    if rt is not None:
        console.print()
        console.print(rt)
    note = interval_note(study)
    if note:
        console.print(note, highlight=False)
    pub = published_table(study)
    if pub is not None:
        console.print()
        console.print(pub)
    console.print()
    console.print(category_table(study, label))


def register(app: typer.Typer) -> None:
    from joulebound.cli._common import reflow

    app.command("plan", help=reflow(HELP))(plan_command)
