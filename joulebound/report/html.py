"""A self-contained HTML report of a planning study (``index.html`` + PNG figures).

Every number carries its provenance: "modeled" (joulebound's device model and planners) or
"published" (Spaan et al.'s figures, cited, only in their own column).
"""

from __future__ import annotations

import html
from pathlib import Path

from joulebound.core.fmt import fmt_pct
from joulebound.core.provenance import MODELED
from joulebound.planning.study import PUBLISHED_CITATION, Study, category_savings
from joulebound.report import plots

CSS = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;
padding:3px 6px;text-align:right;white-space:nowrap}th{background:#f3f3f3;white-space:normal}
td:first-child{text-align:left}td.text{text-align:left;white-space:normal;min-width:14em}
.pub{color:#b00}.mod{color:#236}img{max-width:100%}small{color:#666}
figure{margin:0 0 2em 0}figcaption{max-width:850px}
p.conclusion{font-size:15px;border-left:4px solid #236;padding:.4em .8em;background:#f4f7fb}"""



#: what each figure shows, printed under it (provenance included)
CAPTIONS = {
    "pareto": "Energy against time per iteration, both relative to the auto governor. Lines: the "
              "least energy reachable at each allowed slowdown ε for one clock pair per "
              "iteration, per pass, per layer or per kernel (switching free). Black markers: the "
              "plans in the table. Modeled by joulebound.",
    "pareto_blind": " Purple ×: the kernel plan replayed with a real switch latency L, which "
                    "moves it to the right (slower); modeled.",
    "pareto_published": " Red stars: Spaan et al.'s published figures (a real RTX 3080 Ti, "
                        "kernels measured alone, no switch cost).",
    "clocks": "The core (blue, left axis) and memory (orange, right axis) clock each plan sets "
              "for every kernel, against time into the iteration; gray: kernels left to the auto "
              "governor. With a large switch latency the plan keeps long phases. Modeled.",
    "categories": "Energy saved per iteration by kernel category (J), labeled with the "
                  "category's own energy change. Modeled.",
    "latency": "Left: energy, right: time per iteration against the clock-switch latency L. "
               "Solid: the switch-aware plan (every switch charged, time stays within ε). "
               "Dotted: the kernel plan that ignored L, replayed at L: its switches land late "
               "and the iteration runs slower. Modeled; 6 ms (H200) and 150 ms (Turing) are "
               "published switch latencies.",
}

GLOSSARY = ("<p><small><b>Row labels.</b> <code>iteration / pass / layer / kernel @ε</code>: one "
            "clock pair per iteration, per pass (forward / backward / optimizer), per layer and "
            "pass, or per kernel, with an allowed slowdown ε vs auto, clock switches assumed free. "
            "<code>phase L=…</code>: the switch-aware plan for switch latency L (every switch "
            "charged, phases at least L long). <code>kernel L-blind @L=…</code>: the switch-free "
            "kernel plan replayed at latency L. <i>Replayed</i>: run through joulebound's "
            "simulator at L with look-ahead switch requests; <i>late kernels</i> ran at other "
            "clocks than planned.</small></p>")


def write_report(study: Study, out_dir: str | Path, *, title: str | None = None,
                 clock_rows: list[str] | None = None, category_row: str | None = None,
                 conclusion: str | None = None,
                 links: list[tuple[str, str]] | None = None) -> Path:
    """Write ``out_dir/index.html`` and its figures; returns the path of ``index.html``.

    ``conclusion``: the paragraph the terminal printed (the page opens with it). ``links``:
    ``(text, relative href)`` of related pages, listed under the plans table (the demo's main
    page links its part A page). Table cells holding numbers never wrap; every section title is
    unique."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = title or f"joulebound plan: {study.trace.name} on {study.char.device}"
    labels = [r.label for r in study.rows]
    kernel_like = [r.label for r in study.rows if r.granularity in ("kernel", "phase")
                   and "blind" not in r.label]
    kernel_rows = [r.label for r in study.rows if r.granularity == "kernel"
                   and "blind" not in r.label]
    phase_rows = [r.label for r in study.rows if r.granularity == "phase"]
    clock_rows = clock_rows or (kernel_rows[-1:] + phase_rows[-2:])
    clock_rows = [c for c in dict.fromkeys(clock_rows) if c in labels]
    category_row = category_row or (kernel_like[-1] if kernel_like else labels[-1])
    figs = _figures(study, out, clock_rows, category_row)
    related = (["<h2>Related pages</h2><ul>" + "".join(
        f"<li><a href='{html.escape(href)}'>{html.escape(text)}</a></li>"
        for text, href in links) + "</ul>"] if links else [])
    parts = [*_head(study, title, conclusion), *_plans_table(study), *related,
             *_published_table(study), *_category_table(study, category_row),
             *_figure_sections(study, figs),
             "<p><small>Generated by joulebound. Modeled = joulebound's GPU time/power model "
             "and planners; see docs/planner.md for the method and its limits.</small></p>"
             "</body></html>"]
    index = out / "index.html"
    index.write_text("\n".join(parts), encoding="utf-8")
    return index


def _figures(study: Study, out: Path, clock_rows: list[str],
             category_row: str) -> list[tuple[str, Path]]:
    """Draw the report's figures into ``out``: ``(section title, PNG path)`` in page order."""
    figs = []
    if study.frontiers:
        figs.append(("Figure: time–energy trade-off (Pareto frontier)",
                     plots.pareto_plot(study, out / "pareto.png")))
    if clock_rows:
        figs.append(("Figure: clock pair per kernel along the iteration",
                     plots.clocks_plot(study, clock_rows, out / "clocks.png")))
    figs.append((f"Figure: energy saved per kernel category ({category_row})",
                 plots.category_plot(study, category_row, out / "categories.png")))
    lat = plots.latency_plot(study, out / "latency.png")
    if lat is not None:
        figs.append(("Figure: what clock-switch latency costs", lat))
    return figs


def _head(study: Study, title: str, conclusion: str | None) -> list[str]:
    """The page head, the conclusion, the baseline paragraph and the plans table's header."""
    e = html.escape
    provs = " / ".join(sorted({r.plan.provenance for r in study.rows})) or MODELED
    return [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{e(title)}</h1>",
            f"<p class=conclusion>{e(conclusion)}</p>" if conclusion else "",
            f"<p>Baseline: every kernel at <b>{e(study.baseline_config)}</b>: "
            f"{study.baseline_time_s * 1e3:.2f} ms and {study.baseline_energy_j:.2f} J per "
            f"iteration (<span class=mod>modeled</span>, {study.char.n_kernels} kernels × "
            f"{study.char.n_configs} clock configurations). Deltas are against this baseline. "
            "All numbers are <span class=mod>modeled</span> by joulebound's GPU time/power "
            "model, except the table and markers labeled <span class=pub>published</span>.</p>",
            f"<h2>Plans ({e(provs)})</h2>", GLOSSARY,
            "<table><tr><th>plan</th><th>what it is</th><th>energy Δ</th><th>time Δ</th>"
            "<th>switches</th><th>replayed at L</th><th>replay energy Δ</th>"
            "<th>replay time Δ</th><th>late kernels</th></tr>"]


def _plans_table(study: Study) -> list[str]:
    """One row per plan (modeled and replayed deltas), then the table's end."""
    e = html.escape
    parts = []
    for r in study.rows:
        rep = r.replay
        parts.append(
            f"<tr><td>{e(r.label)}</td><td class=text>{e(plots.describe(r))}</td>"
            f"<td>{fmt_pct(r.plan.energy_delta)}</td>"
            f"<td>{fmt_pct(r.plan.time_delta)}</td><td>{r.plan.n_switches}</td>"
            f"<td>{r.replay_latency_s * 1e3:g} ms</td>"
            f"<td>{fmt_pct(r.replay_energy_delta)}</td>"
            f"<td>{fmt_pct(r.replay_time_delta)}</td><td>{rep.late_kernels}</td></tr>")
    parts.append("</table>")
    return parts


def _published_table(study: Study) -> list[str]:
    """The paper's figures as a cited reference table (none when the study has none)."""
    if not study.published:
        return []
    e = html.escape
    parts = ["<h3 class=pub>Published reference (not our output)</h3><table><tr>"
             "<th>granularity</th><th>energy Δ</th><th>time Δ</th><th>what</th>"
             "<th>provenance</th></tr>"]
    for p in study.published:
        parts.append(f"<tr><td>{e(p['granularity'])}</td><td>{fmt_pct(p['energy_delta'])}</td>"
                     f"<td>{fmt_pct(p['time_delta'])}</td><td class=text>{e(p['what'])}</td>"
                     f"<td class=pub>published</td></tr>")
    parts.append(f"</table><p><small>Source: {e(PUBLISHED_CITATION)}. Their savings are sums "
                 "of kernels measured alone with no clock-switch cost.</small></p>")
    return parts


def _category_table(study: Study, category_row: str) -> list[str]:
    """Savings per kernel category of the plan ``category_row`` (modeled)."""
    e = html.escape
    cats = category_savings(study.trace, study.char, study.row(category_row).plan)
    parts = [f"<h2>Savings by kernel category ({e(category_row)}, modeled)</h2>"
             "<table><tr>"
             "<th>category</th><th>kernels</th><th>baseline J</th><th>saved J</th>"
             "<th>energy Δ</th><th>time Δ</th><th>share of saving</th></tr>"]
    for c in cats:
        parts.append(f"<tr><td>{e(c['category'])}</td><td>{c['kernels']}</td>"
                     f"<td>{c['baseline_energy_j']:.3f}</td><td>{c['saved_j']:.3f}</td>"
                     f"<td>{fmt_pct(c['energy_delta'])}</td><td>{fmt_pct(c['time_delta'])}</td>"
                     f"<td>{c['share_of_saving'] * 100:.1f} %</td></tr>")
    parts.append("</table>")
    return parts


def _figure_sections(study: Study, figs: list[tuple[str, Path]]) -> list[str]:
    """Each figure with its caption (the Pareto one notes blind plans and published markers)."""
    e = html.escape
    parts = []
    for name, path in figs:
        cap = CAPTIONS.get(path.stem, "")
        if path.stem == "pareto":
            if any(r.plan_latency_s == 0 and r.replay_latency_s > 0 for r in study.rows):
                cap += CAPTIONS["pareto_blind"]
            if study.published:
                cap += CAPTIONS["pareto_published"]
        parts.append(f"<h2>{e(name)}</h2><figure><img src='{e(path.name)}' alt='{e(name)}'>"
                     f"<figcaption><small>{e(cap)}</small></figcaption></figure>")
    return parts
