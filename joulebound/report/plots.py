"""matplotlib figures of a planning study (Agg backend, PNG files).

Every figure states its provenance in the title or legend: joulebound's numbers are "modeled",
paper figures "published" (with the citation in the report).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..dvfs.solve.study import Study, category_savings


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def pareto_plot(study: Study, path: Path) -> Path:
    """Energy Δ vs time Δ: frontiers per granularity, the study's plans, published points."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.6))
    for g, fr in study.frontiers.items():
        pt = fr.path_time_s / fr.baseline_time_s - 1
        pe = fr.path_energy_j / fr.baseline_energy_j - 1
        keep = pt <= 0.1
        ax.plot(pt[keep] * 100, pe[keep] * 100, "-", lw=1.2, label=f"{g} frontier (modeled)")
    markers = {"iteration": "s", "pass": "^", "layer": "D", "kernel": "o", "phase": "P"}
    for r in study.rows:
        if r.replay_latency_s and r.plan_latency_s == 0 and r.replay_latency_s > 0:
            continue
        ax.plot(r.plan.time_delta * 100, r.plan.energy_delta * 100, markers.get(r.granularity, "x"),
                ms=6, mfc="none", color="k")
    for p in study.published:
        ax.plot(p["time_delta"] * 100, p["energy_delta"] * 100, "*", ms=12, color="tab:red")
        ax.annotate(f"published: {p['granularity']} ({p['what'].split(' (')[0]})",
                    (p["time_delta"] * 100, p["energy_delta"] * 100), fontsize=7,
                    xytext=(4, 4), textcoords="offset points", color="tab:red")
    ax.axhline(0, color="0.8", lw=0.8)
    ax.axvline(0, color="0.8", lw=0.8)
    ax.set_xlabel("time vs auto (%)")
    ax.set_ylabel("energy vs auto (%)")
    ax.set_title(f"Time–energy Pareto frontier, {study.trace.name} on {study.char.device} "
                 "(modeled; ★ published)", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def clocks_plot(study: Study, labels: list[str], path: Path) -> Path:
    """Core and memory clock (MHz) per kernel along the iteration, for the named rows."""
    plt = _plt()
    rows = [study.row(lab) for lab in labels]
    fig, axes = plt.subplots(len(rows), 1, figsize=(9, 1.9 * len(rows) + 0.6), sharex=True,
                             squeeze=False)
    for ax, r in zip(axes[:, 0], rows, strict=True):
        cfgs = [r.plan.configs[int(c)] for c in r.plan.choice]
        core = np.array([np.nan if c.core_mhz is None else c.core_mhz for c in cfgs], float)
        mem = np.array([np.nan if c.mem_mhz is None else c.mem_mhz for c in cfgs], float)
        x = np.arange(len(cfgs))
        ax.step(x, core, where="post", lw=0.8, color="tab:blue", label="core MHz")
        ax2 = ax.twinx()
        ax2.step(x, mem, where="post", lw=0.8, color="tab:orange", label="memory MHz")
        ax.set_ylabel("core MHz", color="tab:blue", fontsize=8)
        ax2.set_ylabel("mem MHz", color="tab:orange", fontsize=8)
        auto = np.isnan(core)
        if auto.any():
            ax.plot(x[auto], np.full(auto.sum(), np.nanmax(core) if np.isfinite(core).any() else 0),
                    "|", color="0.5", ms=3)
        ax.set_title(f"{r.label}: {r.plan.n_switches} switches, energy {r.plan.energy_delta:+.2%}, "
                     f"time {r.plan.time_delta:+.2%} (modeled; gray = auto)", fontsize=8)
        phases = np.array(study.trace.phases())
        for b in np.flatnonzero(phases[1:] != phases[:-1]) + 1:
            ax.axvline(b, color="0.7", lw=0.6, ls="--")
    axes[-1, 0].set_xlabel("kernel index along the iteration (dashed: forward | backward | optimizer)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def category_plot(study: Study, label: str, path: Path) -> Path:
    """Energy saved per kernel category (J per iteration) for one plan."""
    plt = _plt()
    r = study.row(label)
    cats = category_savings(study.trace, study.char, r.plan)
    fig, ax = plt.subplots(figsize=(7, 3.4))
    names = [c["category"] for c in cats]
    saved = [c["saved_j"] for c in cats]
    bars = ax.bar(names, saved, color="tab:green")
    for b, c in zip(bars, cats, strict=True):
        ax.annotate(f"{c['energy_delta']:+.1%}", (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("energy saved per iteration (J)")
    ax.set_title(f"Savings by kernel category, {label} plan (modeled; label: Δ of the category)",
                 fontsize=9)
    ax.tick_params(axis="x", labelsize=8, rotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_plot(study: Study, path: Path) -> Path | None:
    """Energy Δ of switch-aware plans and time Δ of latency-blind replays against the latency."""
    phase = [r for r in study.rows if r.granularity == "phase"]
    if not phase:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for eps in sorted({r.slowdown for r in phase}):
        rows = [r for r in phase if r.slowdown == eps]
        x = np.maximum(np.array([r.plan_latency_s for r in rows]) * 1e3, 1e-2)
        ax.semilogx(x, [r.replay.energy_j / study.baseline_energy_j * 100 - 100 for r in rows],
                    "o-", label=f"switch-aware, ε={eps:.0%}: energy Δ (time ≤ ε)")
        blind = [r for r in study.rows if "blind" in r.label and r.slowdown == eps]
        if blind:
            bx = np.array([r.replay_latency_s for r in blind]) * 1e3
            ax.semilogx(bx, [r.replay.time_s / study.baseline_time_s * 100 - 100 for r in blind],
                        "x:", label=f"latency-blind kernel plan, ε={eps:.0%}: replayed time Δ")
    ax.axhline(0, color="0.8", lw=0.8)
    ax.set_xlabel("clock-switch latency L (ms; 0 drawn at 0.01)")
    ax.set_ylabel("% vs auto")
    ax.set_title("What switch latency costs (modeled)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
