"""``joulebound demo``: kernel-level DVFS on the RTX 3080 Ti model, end to end, in two settings.

A. **The paper's setting** (Spaan et al., arXiv 2601.08539): one GPT-3-XL iteration at batch 40
   without optimizer kernels, every kernel planned as if measured alone (no switching cost) at
   iteration / pass / kernel granularity, beside the published figures, and — with the data
   folder — the per-kernel comparison for Table 1's calibration rows.
B. **A training step that fits the card**: GPT-2 (124 M) at batch 4 with AdamW (about 8.1 GiB of
   the 12 GiB, modeled), planned switch-free and switch-aware at latencies 0, 1, 6, 20, 150 ms and
   replayed in the latency-aware simulator.

Every saving is modeled, printed with its 5–95 % range over the calibration's parameter draws
and the model's held-out error. Needs no GPU; the data folder only for the per-kernel table.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from joulebound.core.errors import JouleboundError
from joulebound.core.fmt import fmt_pct, fmt_range
from joulebound.report.conclusion import find_row as _find
from joulebound.report.conclusion import fmt_ms as _ms
from joulebound.report.conclusion import focus_slowdown, takeaway

HELP = """Run the main joulebound demo on the RTX 3080 Ti model, in two parts.

A. The paper's setting: GPT-3-XL (1.3 B) at batch 40, one iteration without optimizer kernels
(Spaan et al., arXiv 2601.08539, measured each kernel alone): one clock pair per iteration, per
pass and per kernel at 0 % and 1 % allowed slowdown, each energy change with its 5-95 % range
over the calibration's parameter draws; then the published figures as a separate cited
reference table, and (when the data folder is found: --data or $JOULEBOUND_DATA) the
per-kernel table of the paper's Table 1 rows: the published change at the paper's clock pair,
ours at the paper's pair and ours at our own pair.

B. A training step that fits the card: GPT-2 (124 M) at batch 4, seq 1024, bf16, AdamW. The
switch-free plans, then the switch-aware plans at clock-switch latencies 0, 1, 6, 20 and
150 ms (published latencies span 6 ms on H200 to 150 ms on Turing; NVML set-calls take
10-20 ms), each replayed in the latency-aware simulator beside the latency-blind kernel plan
replayed at the same latency; the savings per kernel category and a one-line take-away. An
HTML report goes to joulebound-report/ (part B in index.html, part A in paper/index.html).

All numbers are modeled by joulebound except the tables labeled published.

--json prints {"paper": <part A as `joulebound plan --json`>, "training": <part B, same keys,
with the switch-aware plan at 6 ms and 0 % slowdown as "plan">, "per_kernel": [{row, kernel,
paper_clock, published_time_delta, published_energy_delta, model_time_delta_at_paper_clock,
model_energy_delta_at_paper_clock, model_clock, model_time_delta, model_energy_delta,
provenance}] or null, "memory": {paper, training: {weights, gradients, optimizer, activations,
reserve, device_bytes, total, fits, provenance} in bytes (modeled)}}; deltas are fractions."""

LATENCIES_S = (0.0, 1e-3, 6e-3, 20e-3, 150e-3)
PAPER_BATCH = 40
TRAIN_MODEL, TRAIN_BATCH = "gpt2-small", 4


def demo_command(
    device: Annotated[str, typer.Option(help="Device catalog name.")] = "rtx3080ti",
    report: Annotated[Path, typer.Option(help="Report folder.")] = Path("joulebound-report"),
    data: Annotated[Path | None, typer.Option(
        "--data", help="Shared data folder for the per-kernel table (default: $JOULEBOUND_DATA "
        "or ../shared/data; skipped when absent).")] = None,
    allow_untested_clocks: Annotated[bool, typer.Option(
        "--allow-untested-clocks", help="Also plan memory clocks never measured on this GPU's "
        "memory technology.")] = False,
    draws: Annotated[int, typer.Option(help="Parameter draws for the ranges (0 = none).",
                                       min=0)] = 24,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    import time
    from contextlib import nullcontext

    from joulebound.cli._common import console, json_text
    from joulebound.gpumodel import characterize, params_for, resolve_device
    from joulebound.planning.study import run_study
    from joulebound.planning.uncertainty import study_intervals
    from joulebound.planning.workflow import study_json
    from joulebound.report.html import write_report
    from joulebound.workload.analytic import build_trace

    t0 = time.perf_counter()
    spec = resolve_device(device)
    prm = params_for(spec)
    paper = build_trace("gpt3-xl", batch=PAPER_BATCH, optimizer=False)
    train = build_trace(TRAIN_MODEL, batch=TRAIN_BATCH)
    spinner = console.status("planning ...", spinner="dots") if not as_json else nullcontext()
    with spinner as status:
        def say(m: str) -> None:
            if status:
                status.update(f"planning: {m}")

        say("A. paper setting")
        char_a = characterize(paper, spec, allow_untested=allow_untested_clocks)
        study_a = run_study(paper, char_a, granularities=["iteration", "pass", "kernel"],
                            slowdowns=[0.0, 0.01], frontier=False)
        say("B. training step")
        char_b = characterize(train, spec, allow_untested=allow_untested_clocks)
        study_b = run_study(train, char_b, granularities=["iteration", "pass", "kernel"],
                            slowdowns=[0.0, 0.01], latencies=list(LATENCIES_S),
                            latency_slowdown=[0.0, 0.01], replay_latency_s=0.0, frontier=True,
                            progress=say)
        for st, tr in ((study_a, paper), (study_b, train)):
            st.meta["heldout"] = prm.heldout
            if draws:
                say(f"ranges over parameter draws ({tr.name})")
                st.meta["intervals"] = study_intervals(st, tr, spec, prm, draws)
        per_kernel = per_kernel_rows(study_a, spec, data)
        eps = focus_slowdown(study_b)
        shown = [_find(study_b, "kernel", eps, 0.0, 0.0)] + [
            _find(study_b, "phase", eps, lat, lat) for lat in (6e-3, 150e-3)]
        labels = [r.label for r in shown if r is not None]
        index = write_report(study_b, report, title=f"joulebound demo: {TRAIN_MODEL} training "
                             f"step on {device}", clock_rows=labels,
                             category_row=labels[0] if labels else None,
                             conclusion=takeaway(study_b),
                             links=[(f"Part A: GPT-3-XL batch {PAPER_BATCH}, the paper's "
                                     "setting, beside Spaan et al.'s published figures",
                                     "paper/index.html")])
        write_report(study_a, report / "paper", title=f"joulebound demo: GPT-3-XL batch "
                     f"{PAPER_BATCH}, the paper's setting, on {device}",
                     category_row=_find(study_a, "kernel", 0.0, 0.0, 0.0).label)
    mem = {"paper": _memory(paper, spec, optimizer=False), "training": _memory(train, spec)}
    doc = {"paper": study_json(study_a, "gpt3-xl", "waste", 0.0, None,
                               _find(study_a, "kernel", 0.0, 0.0, 0.0).label),
           "training": study_json(study_b, TRAIN_MODEL, "waste", 0.0, 6e-3, "phase L=6ms @+0%"),
           "per_kernel": per_kernel, "memory": mem}
    text = json_text(doc)
    try:                                     # the --json object, beside the HTML report
        (report / "demo.json").write_text(text, encoding="utf-8")
    except OSError as exc:
        raise JouleboundError(f"{report / 'demo.json'}: cannot write ({exc.strerror or exc}); "
                              "choose another --report folder") from exc
    if as_json:
        sys.stdout.write(text)
        return
    render_demo(study_a, study_b, per_kernel, mem, spec, index, time.perf_counter() - t0)


def _memory(trace, spec, optimizer: bool = True) -> dict:
    from joulebound.workload.config import TrainingConfig
    from joulebound.workload.memory import training_memory

    cfg = TrainingConfig.from_trace_meta(trace.meta)
    return training_memory(cfg, optimizer=optimizer, device_bytes=spec.memory_bytes).to_json()


def per_kernel_rows(study_a, spec, data: Path | None) -> list[dict] | None:
    """Spaan et al.'s Table 1 rows beside our model: the published change at the paper's pair,
    ours at the paper's pair, ours at the pair our kernel plan (ε = 0) chose. ``None`` when the
    data folder is absent (the table is third-party data, not shipped)."""
    from joulebound.core.datapath import find_data
    from joulebound.gpumodel import characterize
    from joulebound.gpumodel import published as spaan

    root = find_data(data, required=False)
    if root is None:
        return None
    rows = spaan.load_table(root)
    k = _find(study_a, "kernel", 0.0, 0.0, 0.0)
    tr = study_a.trace
    idx = {}
    for i, kern in enumerate(tr.kernels):
        idx.setdefault(kern.name, i)
    cfgs = [r.config for r in rows]
    char = characterize(tr, spec, configs=cfgs, include_auto=True)
    auto = char.auto_index
    out = []
    for j, r in enumerate(rows):
        i = idx[spaan.ROW_KERNELS[r.row]]
        ours = study_a.char.configs[int(k.plan.choice[i])]
        ci = study_a.char.configs.index(ours)
        ca = study_a.char.auto_index
        out.append({
            "row": r.row, "kernel": r.kernel, "paper_clock": r.config.label,
            "published_time_delta": r.time_delta_pct / 100,
            "published_energy_delta": r.energy_delta_pct / 100,
            "model_time_delta_at_paper_clock": float(char.time_s[i, j + 1] / char.time_s[i, auto] - 1),
            "model_energy_delta_at_paper_clock": float(
                char.energy_j[i, j + 1] / char.energy_j[i, auto] - 1),
            "model_clock": ours.label,
            "model_time_delta": float(study_a.char.time_s[i, ci] / study_a.char.time_s[i, ca] - 1),
            "model_energy_delta": float(
                study_a.char.energy_j[i, ci] / study_a.char.energy_j[i, ca] - 1),
            "provenance": "published (paper) / modeled (model_*)"})
    return out


def header_text(study, spec, part: str, what: str) -> str:
    """What was planned: model, shape, device, kernels × clock configs, the baseline (modeled)."""
    m = study.trace.meta
    shape = ", ".join(x for x in (
        f"{m['params'] / 1e9:.2f} B params" if m.get("params") else "",
        f"batch {m['batch']} × seq {m['seq']}" if m.get("batch") and m.get("seq") else "",
        str(m.get("dtype") or ""),
        "no optimizer kernels" if m.get("optimizer") is False else "AdamW") if x)
    return (f"[bold]{part}[/] one [bold]{study.trace.name}[/] iteration ({shape}) on the "
            f"[bold]{spec.product_name or spec.name}[/] model — {what}.\n"
            f"{study.char.n_kernels} kernels × {study.char.n_configs} clock configurations. "
            f"Baseline, auto governor: {study.baseline_time_s * 1e3:.2f} ms and "
            f"{study.baseline_energy_j:.2f} J per iteration (modeled). Δ = change vs this "
            "baseline; ε = allowed slowdown.")


def switch_free_table(study, title: str = "1. Switch-free plans"):
    """Granularity rows × ε column groups (energy Δ with its 5–95 % range, time Δ,
    switches), modeled."""
    from rich.table import Table

    from joulebound.cli._plan_tables import provenance_of

    rows = [r for r in study.rows if r.granularity != "phase" and r.plan_latency_s == 0.0
            and r.replay_latency_s == 0.0]
    grans = list(dict.fromkeys(r.granularity for r in rows))
    epss = sorted({r.slowdown for r in rows})
    ivs = study.meta.get("intervals") or {}
    t = Table(title=f"{title} ({provenance_of(rows)}): one clock pair per "
              f"{', '.join(grans[:-1])} or {grans[-1]}" if len(grans) > 1 else
              f"{title} ({provenance_of(rows)})", title_justify="left",
              caption="Clock switches cost nothing here. range: 5-95 % over parameter draws.",
              caption_justify="left")
    t.add_column("plan")
    t.add_column("ε", justify="right")
    t.add_column("energy Δ", justify="right")
    t.add_column("range", justify="right", no_wrap=True)
    t.add_column("time Δ", justify="right")
    t.add_column("switches", justify="right")
    for i, e in enumerate(epss):
        if i:
            t.add_section()
        for g in grans:
            r = next((r for r in rows if r.granularity == g and r.slowdown == e), None)
            if r is None:
                continue
            iv = ivs.get(r.label)
            t.add_row(g, f"{e:.0%}", fmt_pct(r.plan.energy_delta),
                      fmt_range(iv.energy_lo, iv.energy_hi) if iv else "–",
                      fmt_pct(r.plan.time_delta), str(r.plan.n_switches))
    return t


#: printed instead of table 3 when the data folder is absent (Spaan et al.'s table is
#: third-party data, not shipped)
PER_KERNEL_NEEDS_DATA = ("3. (per-kernel comparison with Spaan et al. Table 1 left out: it needs "
                         "the data folder; give --data PATH or set JOULEBOUND_DATA)")


def per_kernel_table(rows: list[dict]):
    """Spaan et al.'s Table 1 rows beside ours (published vs modeled columns)."""
    from rich.table import Table

    t = Table(title="3. Per kernel: Spaan et al. Table 1 (published) vs ours (modeled)",
              title_justify="left", caption="Δ vs auto of each kernel measured alone. The "
              "RTX 3080 Ti parameters are calibrated on these rows (in-sample).",
              caption_justify="left")
    for col in ("row", "kernel", "paper\nclock", "paper\nΔt / ΔE", "ours @paper\nΔt / ΔE",
                "our\nclock", "ours\nΔt / ΔE"):
        t.add_column(col, justify="left" if col in ("kernel",) else "right", no_wrap=True)

    def pair(a: float, b: float) -> str:
        return f"{a * 100:+.1f}/{b * 100:+.0f}"

    for r in rows:
        t.add_row(str(r["row"]), r["kernel"], r["paper_clock"],
                  pair(r["published_time_delta"], r["published_energy_delta"]),
                  pair(r["model_time_delta_at_paper_clock"], r["model_energy_delta_at_paper_clock"]),
                  r["model_clock"], pair(r["model_time_delta"], r["model_energy_delta"]))
    return t


def latency_table(study):
    """Table 2: per ε and switch latency L, the switch-aware plan (replayed at L) beside the
    latency-blind kernel plan replayed at the same L (modeled)."""
    from rich.table import Table

    from joulebound.cli._plan_tables import provenance_of

    phase = [r for r in study.rows if r.granularity == "phase"]
    t = Table(title=f"5. Switch-aware plans vs clock-switch latency L ({provenance_of(phase)})",
              title_justify="left",
              caption="aware: planned for L (every switch charged), replayed at L. L-blind: the "
              "switch-free kernel plan of table 4 replayed at L (look-ahead requests); its "
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
            blind = _find(study, "kernel", eps, 0.0, lat)
            b = ["–", "–"] if blind is None else [fmt_pct(blind.replay_energy_delta),
                                                 fmt_pct(blind.replay_time_delta)]
            t.add_row(f"{eps:.0%}" if j == 0 else "", _ms(lat), fmt_pct(e_aw), fmt_pct(t_aw),
                      str(r.replay.switches), *b)
    return t


def render_demo(study_a, study_b, per_kernel, mem, spec, index, seconds: float
                ) -> None:
    """Print the demo for an 80–100 column terminal: part A (the paper's setting, the published
    reference, the per-kernel table), part B (a training step that fits: switch-free and
    switch-aware plans, savings per category, the take-away), then the report path."""
    from joulebound.cli._common import console
    from joulebound.cli._plan_tables import (
        category_table,
        interval_note,
        published_misses,
        published_table,
    )

    gib = 2.0 ** 30
    console.print(header_text(study_a, spec, "A. The paper's setting:", "every kernel as if "
                              "measured alone (Spaan et al.)"), highlight=False)
    if not mem["paper"]["fits"]:
        console.print(f"[yellow]note[/]: as one step this needs "
                      f"{mem['paper']['total'] / gib:.0f} GiB of the card's "
                      f"{spec.memory_bytes / gib:.0f} GiB (modeled): the paper measured each "
                      "kernel alone, not a whole step.", highlight=False)
    console.print()
    console.print(switch_free_table(study_a, "1. Switch-free plans, paper setting"))
    note = interval_note(study_a)
    if note:
        console.print(note, highlight=False)
    pub = published_table(study_a, title="2. Published reference, not joulebound output")
    if pub is not None:
        console.print()
        console.print(pub)
        misses = published_misses(study_a)
        if misses:
            why = (" The pass-level plan saves more than measured: in the model the backward "
                   "pass gains from locking the memory clock, which the paper did not see."
                   if any(m.startswith("pass") for m in misses) else "")
            console.print("[yellow]where the model still misses[/]: " + "; ".join(misses)
                          + "." + why + " See docs/validation.md.", highlight=False)
    if per_kernel:
        console.print()
        console.print(per_kernel_table(per_kernel))
    else:
        console.print()
        console.print(PER_KERNEL_NEEDS_DATA, highlight=False)
    console.print()
    console.print(header_text(study_b, spec, "B. A training step that fits the card:",
                              f"{mem['training']['total'] / gib:.1f} GiB of "
                              f"{spec.memory_bytes / gib:.0f} GiB (modeled)"), highlight=False)
    console.print()
    console.print(switch_free_table(study_b, "4. Switch-free plans, training step"))
    console.print()
    console.print(latency_table(study_b))
    eps = focus_slowdown(study_b)
    k = _find(study_b, "kernel", eps, 0.0, 0.0)
    if k is not None:
        console.print()
        console.print(category_table(study_b, k.label, title="6. Savings by kernel category, "
                                     f"kernel plan at ε={eps:.0%} ({k.plan.provenance})"))
    line = takeaway(study_b)
    if line:
        console.print()
        console.print(line.replace("What this means", "[bold]What this means[/]", 1),
                      highlight=False)
    console.print(f"report: {index}  ({seconds:.1f} s)", highlight=False)
    console.print(f"the figures as JSON (as --json prints them): {Path(index).parent / 'demo.json'}",
                  highlight=False)


def register(app: typer.Typer) -> None:
    from joulebound.cli._common import reflow

    app.command("demo", help=reflow(HELP), short_help="RTX 3080 Ti: the paper's GPT-3-XL setting "
                "and a GPT-2 training step, kernel-level and switch-aware clock plans (modeled), "
                "tables + HTML report.")(demo_command)
