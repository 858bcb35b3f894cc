"""matplotlib figures of a planning study (Agg backend, PNG files).

Every figure states its provenance in its title and legend: joulebound's numbers are "modeled",
paper figures "published" (with the citation in the report). Axes carry units (% vs the auto
baseline, ms, MHz, J per iteration).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from joulebound.planning.study import Study, StudyRow, category_savings

#: published clock-switch latencies marked on the latency plot (see joulebound.planning.solve.switching)
_PUBLISHED_L_MS = {"H200": 6.0, "Turing": 150.0}
_GRAN_COLOR = {"iteration": "tab:blue", "pass": "tab:orange", "layer": "tab:brown",
               "kernel": "tab:green"}
_PHASE_SHORT = {"forward": "forward", "backward": "backward", "optimizer": "opt."}


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (reports are files)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plain(text: object) -> str:
    """``text`` to be drawn as it is written. matplotlib reads ``$…$`` in any label as mathtext,
    so a name such as ``$\\undefinedcmd$`` (a window, trace, device or GPU name) failed the whole
    report at ``savefig``; every ``$`` is escaped. Use it on every text a figure draws that is
    not a fixed string of this package."""
    return str(text).replace("$", r"\$")


def _pct(x: float) -> float:
    """Fraction → percent, with -0.00 shown as 0."""
    v = x * 100.0
    return 0.0 if abs(v) < 5e-3 else v


def describe(r: StudyRow) -> str:
    """A reader's name for a study row, e.g. ``switch-aware plan for L = 6 ms, ε = 0 %``."""
    eps = f"ε = {r.slowdown:.0%}"
    if r.granularity == "phase":
        return f"switch-aware plan for L = {r.plan_latency_s * 1e3:g} ms, {eps}"
    if r.replay_latency_s > 0 and r.plan_latency_s == 0:
        return (f"{r.granularity}-level plan ignoring L, replayed at L = "
                f"{r.replay_latency_s * 1e3:g} ms, {eps}")
    return f"{r.granularity}-level plan, {eps}"


def pareto_plot(study: Study, path: Path) -> Path:
    """Energy Δ vs time Δ (% vs auto, per iteration): the Pareto frontier per granularity, the
    study's plans, the latency-blind kernel plan replayed at each L, and published points."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 5.2))
    for g, fr in study.frontiers.items():
        pt = fr.path_time_s / fr.baseline_time_s - 1
        pe = fr.path_energy_j / fr.baseline_energy_j - 1
        keep = pt <= 0.1
        ax.plot(pt[keep] * 100, pe[keep] * 100, "-", lw=1.4, color=_GRAN_COLOR.get(g),
                label=f"{g}-level frontier (modeled)")
    markers = {"iteration": "s", "pass": "^", "layer": "D", "kernel": "o", "phase": "P"}
    seen: set[str] = set()
    for r in study.rows:
        blind = r.replay_latency_s > 0 and r.plan_latency_s == 0
        if blind:
            x, y = _pct(r.replay_time_delta), _pct(r.replay_energy_delta)
            key, style, lab = "blind", dict(marker="x", color="tab:purple", ms=7), (
                "kernel plan ignoring L, replayed at L (modeled)")
        else:
            x, y = _pct(r.plan.time_delta), _pct(r.plan.energy_delta)
            key = r.granularity
            style = dict(marker=markers.get(r.granularity, "x"), color="k", mfc="none", ms=7)
            lab = ("switch-aware plans, L > 0 (modeled)" if key == "phase"
                   else f"{key}-level plans at the study's ε (modeled)")
        if key == "phase" and r.plan_latency_s == 0:
            continue  # identical to the kernel-level plan at the same ε
        ax.plot(x, y, ls="none", label=None if key in seen else lab, **style)
        seen.add(key)
        if blind and r.slowdown == min(x.slowdown for x in study.rows):
            ax.annotate(f"L={r.replay_latency_s * 1e3:g} ms", (x, y), fontsize=6.5,
                        xytext=(4, -9), textcoords="offset points", color="tab:purple")
    for i, p in enumerate(study.published):
        ax.plot(p["time_delta"] * 100, p["energy_delta"] * 100, "*", ms=13, color="tab:red",
                label="Spaan et al. (published)" if i == 0 else None)
        ax.annotate(plain(f"{p['granularity']}, {p['what'].split(' (')[0]}"),
                    (p["time_delta"] * 100, p["energy_delta"] * 100), fontsize=7,
                    xytext=(6, 3), textcoords="offset points", color="tab:red")
    ax.axhline(0, color="0.75", lw=0.8)
    ax.axvline(0, color="0.75", lw=0.8)
    ax.set_xlabel(f"iteration time vs auto (%)   [auto = {study.baseline_time_s * 1e3:.1f} ms]")
    ax.set_ylabel(f"iteration energy vs auto (%)   [auto = {study.baseline_energy_j:.1f} J]")
    ax.set_title(f"Time–energy trade-off per iteration, {plain(study.trace.name)} on "
                 f"{plain(study.char.device)}\nlines and markers modeled by joulebound"
                 + ("; ★ published (Spaan et al.)" if study.published else ""), fontsize=9)
    ax.grid(alpha=0.25)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) index ranges where ``mask`` is True."""
    d = np.diff(np.concatenate([[0], mask.astype(int), [0]]))
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1), strict=True))


def clocks_plot(study: Study, labels: list[str], path: Path) -> Path:
    """Core and memory clock (MHz) of every kernel against time into the iteration (ms), one
    panel per named row; kernels left to the auto governor are shaded gray."""
    plt = pyplot()
    from matplotlib.patches import Patch

    rows = [study.row(lab) for lab in labels]
    fig, axes = plt.subplots(len(rows), 1, figsize=(9.5, 2.1 * len(rows) + 1.0), sharex=True,
                             squeeze=False)
    series = []
    for r in rows:
        cfgs = [r.plan.configs[int(c)] for c in r.plan.choice]
        core = np.array([np.nan if c.core_mhz is None else c.core_mhz for c in cfgs], float)
        mem = np.array([np.nan if c.mem_mhz is None else c.mem_mhz for c in cfgs], float)
        tl = r.replay.timeline
        series.append((core, mem, tl.start_s * 1e3, tl.end_s * 1e3))

    def lims(vals):
        v = np.concatenate([s[~np.isnan(s)] for s in vals]) if vals else np.array([])
        if not v.size:
            return None
        pad = max(50.0, 0.08 * (v.max() - v.min()))
        return v.min() - pad, v.max() + pad

    core_lim = lims([s[0] for s in series])
    mem_lim = lims([s[1] for s in series])
    phases = np.array(study.trace.phases())
    bounds = np.flatnonzero(phases[1:] != phases[:-1]) + 1
    for i, (ax, r, (core, mem, t0, t1)) in enumerate(zip(axes[:, 0], rows, series, strict=True)):
        ax.hlines(core, t0, t1, color="tab:blue", lw=2.2).set_capstyle("projecting")
        ax2 = ax.twinx()
        ax2.hlines(mem, t0, t1, color="tab:orange", lw=1.4).set_capstyle("projecting")
        for a, b in _runs(np.isnan(core) | np.isnan(mem)):
            ax.axvspan(t0[a], t1[b - 1], color="0.85", lw=0, zorder=0)
        if core_lim:
            ax.set_ylim(*core_lim)
        if mem_lim:
            ax2.set_ylim(*mem_lim)
        if np.isnan(core).all() and np.isnan(mem).all():
            ax.text(0.5, 0.5, "every kernel left to the auto governor (no clock lock)",
                    transform=ax.transAxes, ha="center", va="center", fontsize=8, color="0.3")
            ax.set_yticks([])
            ax2.set_yticks([])
        ax.set_ylabel("core (MHz)", color="tab:blue", fontsize=8)
        ax2.set_ylabel("memory (MHz)", color="tab:orange", fontsize=8)
        ax.tick_params(labelsize=7)
        ax2.tick_params(labelsize=7)
        n = r.plan.n_switches
        ax.set_title(f"{plain(r.label)}: {describe(r)} — {n} switch{'es' if n != 1 else ''}, energy "
                     f"{_pct(r.plan.energy_delta):+.2f} %, time {_pct(r.plan.time_delta):+.2f} % "
                     "(modeled)", fontsize=8, loc="left", pad=13 if i == 0 else 6)
        for b in bounds:
            ax.axvline(t0[b], color="0.45", lw=0.7, ls="--")
        if i == 0:
            starts = np.concatenate([[0], bounds])
            for s, e in zip(starts, np.concatenate([bounds, [len(phases)]]), strict=True):
                ax.text((t0[s] + t1[e - 1]) / 2, 1.0,
                        plain(_PHASE_SHORT.get(phases[s], phases[s])),
                        transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                        fontsize=7, color="0.3")
    handles = [plt.Line2D([], [], color="tab:blue", lw=2.2, label="core clock"),
               plt.Line2D([], [], color="tab:orange", lw=1.4, label="memory clock"),
               plt.Line2D([], [], color="0.45", lw=0.7, ls="--", label="pass boundary")]
    if any(np.isnan(c).any() or np.isnan(m).any() for c, m, _, _ in series):
        handles.append(Patch(color="0.85", label="auto governor (no lock)"))
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=7, frameon=False)
    axes[-1, 0].set_xlabel("time into the iteration (ms; each plan replayed at its own "
                           "switch latency)", fontsize=8)
    fig.suptitle(f"Clock pair per kernel along one iteration, {plain(study.trace.name)} on "
                 f"{plain(study.char.device)} (modeled)", fontsize=9)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def category_plot(study: Study, label: str, path: Path) -> Path:
    """Energy saved per kernel category (J per iteration) for one plan, bars labeled with the
    category's own energy change (%)."""
    plt = pyplot()
    r = study.row(label)
    cats = category_savings(study.trace, study.char, r.plan)
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    names = [plain(c["category"]) for c in cats]
    saved = [c["saved_j"] for c in cats]
    bars = ax.bar(names, saved, color="tab:green")
    for b, c in zip(bars, cats, strict=True):
        ax.annotate(f"{_pct(c['energy_delta']):+.1f} %", (b.get_x() + b.get_width() / 2,
                    b.get_height()), ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("energy saved per iteration (J)")
    ax.set_xlabel("kernel category (bar label: the category's energy change vs auto)", fontsize=8)
    total = sum(saved)
    ax.set_title(f"Savings by kernel category, {plain(label)} ({describe(r)}): {total:.2f} J of "
                 f"{study.baseline_energy_j:.2f} J per iteration (modeled)", fontsize=8.5)
    ax.tick_params(axis="x", labelsize=8, rotation=20)
    ax.margins(y=0.12)
    ax.grid(axis="y", alpha=0.25)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_plot(study: Study, path: Path) -> Path | None:
    """Energy Δ (left) and time Δ (right) against the switch latency L: the switch-aware plan
    and the latency-blind kernel plan replayed at L, per allowed slowdown ε."""
    phase = [r for r in study.rows if r.granularity == "phase"]
    if not phase:
        return None
    plt = pyplot()
    fig, (ax_e, ax_t) = plt.subplots(1, 2, figsize=(9.5, 4.2), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lats = sorted({r.plan_latency_s * 1e3 for r in phase})
    for i, eps in enumerate(sorted({r.slowdown for r in phase})):
        col = colors[i % len(colors)]
        rows = sorted((r for r in phase if r.slowdown == eps), key=lambda r: r.plan_latency_s)
        x = np.array([r.plan_latency_s for r in rows]) * 1e3
        e = [_pct(r.replay_energy_delta) for r in rows]
        t = [_pct(r.replay_time_delta) for r in rows]
        ax_e.plot(x, e, "o-", color=col, label=f"switch-aware plan, ε = {eps:.0%}")
        ax_t.plot(x, t, "o-", color=col)
        blind = [r for r in study.rows if r.plan_latency_s == 0 and r.granularity == "kernel"
                 and r.slowdown == eps]
        blind = sorted({r.replay_latency_s: r for r in blind}.values(),
                       key=lambda r: r.replay_latency_s)
        if len(blind) > 1:
            bx = np.array([r.replay_latency_s for r in blind]) * 1e3
            ax_e.plot(bx, [_pct(r.replay_energy_delta) for r in blind],
                      "x:", color=col, label=f"kernel plan ignoring L, ε = {eps:.0%}")
            ax_t.plot(bx, [_pct(r.replay_time_delta) for r in blind],
                      "x:", color=col)
    named = {ms: name for name, ms in _PUBLISHED_L_MS.items()}
    for ax in (ax_e, ax_t):
        ax.set_xscale("symlog", linthresh=1.0, linscale=0.6)
        ax.set_xticks(lats)
        ax.set_xticklabels([f"{v:g}\n{named[v]}" if v in named else f"{v:g}" for v in lats],
                           fontsize=8)
        ax.axhline(0, color="0.75", lw=0.8)
        ax.grid(alpha=0.25)
        ax.set_xlabel("clock-switch latency L (ms); red: published latency of that GPU",
                      fontsize=8)
        for ms in named:
            if lats and min(lats) <= ms <= max(lats):
                ax.axvline(ms, color="tab:red", lw=0.7, ls="--", alpha=0.6)
        for lab in ax.get_xticklabels():
            if "\n" in lab.get_text():
                lab.set_color("tab:red")
    ax_e.set_ylabel("energy vs auto (%)")
    ax_t.set_ylabel("time vs auto (%)")
    ax_e.set_title("energy per iteration", fontsize=9)
    ax_t.set_title("time per iteration", fontsize=9)
    handles, names = ax_e.get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(4, len(names)), fontsize=7,
               frameon=False)
    fig.suptitle(f"What clock-switch latency costs, {plain(study.trace.name)} on "
                 f"{plain(study.char.device)} "
                 "(modeled; plans replayed in the simulator at L)", fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
