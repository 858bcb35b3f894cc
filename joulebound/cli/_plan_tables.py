"""The terminal tables of a planning study (rich), shared by ``joulebound plan`` and
``joulebound demo``: presentation only; what they show is computed by
:mod:`joulebound.planning.workflow` and :mod:`joulebound.planning.study`."""

from __future__ import annotations

from joulebound.core.fmt import fmt_pct, fmt_range
from joulebound.core.provenance import MODELED, PUBLISHED


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


def limit_note(study) -> str:
    """One line naming the plans whose exact core step (HiGHS) stopped at its time limit, with
    their certified gap bound; empty when none did."""
    hit = [r for r in study.rows if r.plan.meta.get("time_limit_hit")]
    if not hit:
        return ""
    parts = []
    for r in hit:
        gap = r.plan.meta.get("gap_bound")
        lim = r.plan.meta.get("solver_time_limit_s")
        parts.append(f"'{r.label}'" + (f" (limit {lim:.2g} s" if lim is not None else " (")
                     + (f"; within {gap * 100:.2g} % of optimal, certified)" if gap is not None
                        and gap == gap else ")"))
    return ("note: the exact core step stopped at its time limit for plan " + ", ".join(parts)
            + "; that plan is the best found by then, not proven optimal")


def provenance_of(rows) -> str:
    """One provenance word for a set of study rows (``modeled`` unless rows differ)."""
    return " / ".join(sorted({r.plan.provenance for r in rows})) or MODELED


def baseline_line(study) -> str:
    """``baseline auto: 274.25 ms, 93.39 J per iteration`` (modeled or measured)."""
    return (f"baseline {study.baseline_config}: {study.baseline_time_s * 1e3:.2f} ms, "
            f"{study.baseline_energy_j:.2f} J per iteration ({study.char.provenance()})")


def _beside_published(study):
    """Per published figure: ``(figure, our ε = 0 plan row of the same granularity or None, its
    draw interval or None)``."""
    ivs = study.meta.get("intervals") or {}
    for p in study.published:
        ours = next((r for r in study.rows if r.granularity == p["granularity"]
                     and r.slowdown == 0.0 and r.plan_latency_s == 0.0), None)
        yield p, ours, (ivs.get(ours.label) if ours is not None else None)


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
    t.add_column("plan")
    t.add_column(PUBLISHED, justify="right", style="red", no_wrap=True)
    t.add_column("what (time Δ)")
    t.add_column("ours", justify="right", no_wrap=True)
    t.add_column("our range", justify="right", no_wrap=True)
    t.add_column("gap", justify="right", no_wrap=True)
    for p, ours, iv in _beside_published(study):
        inside = "" if iv is None else (
            " in" if iv.energy_lo <= p["energy_delta"] <= iv.energy_hi else " OUT")
        t.add_row(p["granularity"], fmt_pct(p["energy_delta"]),
                  f"{p['what'].split(' (')[0]} ({p['time_delta'] * 100:+.1f} %)",
                  fmt_pct(ours.plan.energy_delta) if ours is not None else "–",
                  (fmt_range(iv.energy_lo, iv.energy_hi) + inside) if iv is not None else "–",
                  f"{(ours.plan.energy_delta - p['energy_delta']) * 100:+.1f} pp"
                  if ours is not None else "–")
    t.caption += (" published (red): energy Δ, its time Δ in brackets; ours: joulebound's plan at ε = 0 in "
                  "the same setting (modeled energy Δ), the published figure held out (never "
                  "fitted); gap = ours - published; in / OUT: the published figure inside / "
                  "outside our 5-95 % range.")
    return t


def published_misses(study) -> list[str]:
    """One plain sentence per published figure our plan (ε = 0, same setting) misses: outside our
    5–95 % range, or off by more than 1.5 pp where there is no range."""
    out = []
    for p, ours, iv in _beside_published(study):
        if ours is None:
            continue
        gap = (ours.plan.energy_delta - p["energy_delta"]) * 100
        outside = (not iv.energy_lo <= p["energy_delta"] <= iv.energy_hi) if iv is not None \
            else abs(gap) > 1.5
        if outside:
            out.append(f"{p['granularity']} level: ours {fmt_pct(ours.plan.energy_delta)} vs "
                       f"{fmt_pct(p['energy_delta'])} {p['what'].split(' (')[0]} "
                       f"({gap:+.1f} pp)")
    return out


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


def ranges_table(study, title: str | None = None):
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
    note = limit_note(study)
    if note:
        console.print(note, style="yellow", highlight=False)
    pub = published_table(study)
    if pub is not None:
        console.print()
        console.print(pub)
    console.print()
    console.print(category_table(study, label))
