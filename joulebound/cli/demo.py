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

from ..fmt import fmt_pct
from ..report.conclusion import find_row, fmt_ms, focus_slowdown, takeaway

HELP = """Run the main joulebound demo: GPT-3-XL (1.3 B) training iteration on the RTX 3080 Ti
model. Plans one clock pair per iteration, per pass (forward/backward/optimizer) and per kernel
at 0 % and 1 % allowed slowdown; then the switch-aware plan at 0 % and 1 % slowdown for clock-switch latencies 0, 1,
6, 20 and 150 ms (published latencies span 6 ms on H200 to 150 ms on Turing; NVML set-calls take
10-20 ms), each replayed in the latency-aware simulator, beside the kernel plan that ignored
switching replayed at the same latency. Prints, for an 80-column terminal: a header (model,
device, baseline time and energy per iteration), 1. the switch-free plans (granularity × ε),
2. the switch-aware plans against the latency L beside the latency-blind kernel plan replayed
at L, 3. Spaan et al.'s published figures (arXiv 2601.08539) as a separate cited reference
table, 4. the savings per kernel category, a one-line take-away and the path of the HTML
report (joulebound-report/index.html by default). All numbers are modeled by joulebound
except that published table.

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
    from contextlib import nullcontext

    from ..dvfs.model import characterize
    from ..dvfs.solve.study import run_study
    from ..report.html import write_report
    from ..workload.analytic import build_trace
    from ._common import console, print_json
    from .plan import study_json

    t0 = time.perf_counter()
    trace = build_trace(model)
    char = characterize(trace, device)
    spinner = console.status("planning ...", spinner="dots") if not as_json else nullcontext()
    with spinner as status:
        study = run_study(trace, char, granularities=["iteration", "pass", "kernel"],
                          slowdowns=[0.0, 0.01], latencies=list(LATENCIES_S),
                          latency_slowdown=[0.0, 0.01], replay_latency_s=0.0, frontier=True,
                          progress=(lambda m: status.update(f"planning: {m}")) if status else None)
        eps = focus_slowdown(study)
        shown = [find_row(study, "kernel", eps, 0.0, 0.0)] + [
            find_row(study, "phase", eps, lat, lat) for lat in (6e-3, 150e-3)]
        labels = [r.label for r in shown if r is not None]
        index = write_report(study, report, title=f"joulebound demo: {model} on {device}",
                             clock_rows=labels, category_row=labels[0] if labels else None,
                             conclusion=takeaway(study))
    if as_json:
        print_json(study_json(study, model, "waste", 0.0, 6e-3, "phase L=6ms @+0%"))
        return
    render_demo(study, device, index, time.perf_counter() - t0)


def header_text(study, device: str) -> str:
    """What was planned: model, device, kernels × clock configs, the baseline (modeled)."""
    m = study.trace.meta
    shape = ", ".join(x for x in (
        f"{m['params'] / 1e9:.1f} B params" if m.get("params") else "",
        f"batch {m['batch']} × seq {m['seq']}" if m.get("batch") and m.get("seq") else "",
        str(m.get("dtype") or "")) if x)
    try:
        from ..devices.catalog import get_device

        product = get_device(device).product_name or device
    except Exception:  # noqa: BLE001 - the name is decoration; the study already ran
        product = device
    return (f"[bold]joulebound demo[/]: one [bold]{study.trace.name}[/] training iteration"
            f"{f' ({shape})' if shape else ''} on the [bold]{product}[/] model.\n"
            f"{study.char.n_kernels} kernels × {study.char.n_configs} clock configurations. "
            f"Baseline, auto governor: {study.baseline_time_s * 1e3:.2f} ms and "
            f"{study.baseline_energy_j:.2f} J per iteration. Δ = change vs this baseline; "
            "ε = allowed slowdown.\nAll numbers are [bold]modeled[/] by joulebound's GPU "
            "time/power model, except the table labeled [red]published[/].")


def switch_free_table(study):
    """Table 1: granularity rows × ε column groups (energy Δ, time Δ, switches), modeled."""
    from rich.table import Table

    from .plan import provenance_of

    rows = [r for r in study.rows if r.granularity != "phase" and r.plan_latency_s == 0.0
            and r.replay_latency_s == 0.0]
    grans = list(dict.fromkeys(r.granularity for r in rows))
    epss = sorted({r.slowdown for r in rows})
    t = Table(title=f"1. Switch-free plans ({provenance_of(rows)}): one clock pair per "
              f"{', '.join(grans[:-1])} or {grans[-1]}" if len(grans) > 1 else
              f"1. Switch-free plans ({provenance_of(rows)})", title_justify="left",
              caption="Clock switches cost nothing here; table 2 charges them.",
              caption_justify="left")
    t.add_column("plan")
    for e in epss:
        tag = f"ε={e:.0%}"
        t.add_column(f"{tag}\nenergy Δ", justify="right")
        t.add_column(f"{tag}\ntime Δ", justify="right")
        t.add_column(f"{tag}\nswitches", justify="right")
    for g in grans:
        cells = [g]
        for e in epss:
            r = next((r for r in rows if r.granularity == g and r.slowdown == e), None)
            cells += (["–"] * 3 if r is None else
                      [fmt_pct(r.plan.energy_delta), fmt_pct(r.plan.time_delta),
                       str(r.plan.n_switches)])
        t.add_row(*cells)
    return t


def latency_table(study):
    """Table 2: per ε and switch latency L, the switch-aware plan (replayed at L) beside the
    latency-blind kernel plan replayed at the same L (modeled)."""
    from rich.table import Table

    from .plan import provenance_of

    phase = [r for r in study.rows if r.granularity == "phase"]
    t = Table(title=f"2. Switch-aware plans vs clock-switch latency L ({provenance_of(phase)})",
              title_justify="left",
              caption="aware: planned for L (every switch charged), replayed at L. L-blind: the "
              "switch-free kernel plan of table 1 replayed at L (look-ahead requests); its "
              "switches land late, so it runs slow.", caption_justify="left")
    t.add_column("ε")
    t.add_column("L", justify="right")
    for col in ("aware\nenergy Δ", "aware\ntime Δ", "aware\nswitches", "L-blind\nenergy Δ",
                "L-blind\ntime Δ"):
        t.add_column(col, justify="right")
    for i, eps in enumerate(sorted({r.slowdown for r in phase})):
        if i:
            t.add_section()
        for j, r in enumerate(sorted((r for r in phase if r.slowdown == eps),
                                     key=lambda r: r.plan_latency_s)):
            lat = r.plan_latency_s
            e_aw, t_aw = r.replay_energy_delta, r.replay_time_delta
            blind = find_row(study, "kernel", eps, 0.0, lat)
            b = ["–", "–"] if blind is None else [fmt_pct(blind.replay_energy_delta),
                                                 fmt_pct(blind.replay_time_delta)]
            t.add_row(f"{eps:.0%}" if j == 0 else "", fmt_ms(lat), fmt_pct(e_aw), fmt_pct(t_aw),
                      str(r.replay.switches), *b)
    return t


def render_demo(study, device: str, index, seconds: float) -> None:
    """Print the demo for an 80–100 column terminal: header, the two plan tables, the published
    reference, per-category savings of the kernel plan, the take-away and the report path."""
    from ._common import console
    from .plan import category_table, published_table

    console.print(header_text(study, device), highlight=False)
    console.print()
    console.print(switch_free_table(study))
    console.print()
    console.print(latency_table(study))
    pub = published_table(study, title="3. Published reference, not joulebound output")
    if pub is not None:
        console.print()
        console.print(pub)
    eps = focus_slowdown(study)
    k = find_row(study, "kernel", eps, 0.0, 0.0)
    if k is not None:
        console.print()
        console.print(category_table(study, k.label, title="4. Savings by kernel category, "
                                     f"kernel plan at ε={eps:.0%} ({k.plan.provenance})"))
    line = takeaway(study)
    if line:
        console.print()
        console.print(line.replace("What this means", "[bold]What this means[/]", 1),
                      highlight=False)
    console.print(f"report: {index}  ({seconds:.1f} s)", highlight=False)


def register(app: typer.Typer) -> None:
    from ._common import reflow

    app.command("demo", help=reflow(HELP), short_help="GPT-3-XL on the RTX 3080 Ti: kernel-level and "
                "switch-aware clock plans (modeled), table + HTML report.")(demo_command)
