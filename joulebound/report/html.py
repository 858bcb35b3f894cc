"""A self-contained HTML report of a planning study (``index.html`` + PNG figures).

Every number carries its provenance: "modeled" (joulebound's device model and planners) or
"published" (Spaan et al.'s figures, cited, only in their own column).
"""

from __future__ import annotations

import html
from pathlib import Path

from ..dvfs.solve.study import PUBLISHED_CITATION, Study, category_savings
from . import plots

CSS = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;
padding:3px 8px;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}
.pub{color:#b00}.mod{color:#236}img{max-width:100%}small{color:#666}"""


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:+.2f} %"


def write_report(study: Study, out_dir: str | Path, *, title: str | None = None,
                 clock_rows: list[str] | None = None, category_row: str | None = None) -> Path:
    """Write ``out_dir/index.html`` and its figures; returns the path of ``index.html``."""
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
    figs = []
    if study.frontiers:
        figs.append(("Time–energy Pareto frontier", plots.pareto_plot(study, out / "pareto.png")))
    if clock_rows:
        figs.append(("Clock pair per kernel along the iteration",
                     plots.clocks_plot(study, clock_rows, out / "clocks.png")))
    figs.append((f"Savings by category ({category_row})",
                 plots.category_plot(study, category_row, out / "categories.png")))
    lat = plots.latency_plot(study, out / "latency.png")
    if lat is not None:
        figs.append(("Switch latency", lat))

    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
             f"<style>{CSS}</style></head><body><h1>{e(title)}</h1>",
             f"<p>Baseline: every kernel at <b>{e(study.baseline_config)}</b>: "
             f"{study.baseline_time_s * 1e3:.2f} ms and {study.baseline_energy_j:.2f} J per "
             f"iteration (<span class=mod>modeled</span>, {study.char.n_kernels} kernels × "
             f"{study.char.n_configs} clock configurations). Deltas are against this baseline.</p>",
             "<h2>Plans</h2><table><tr><th>plan</th><th>energy Δ</th><th>time Δ</th>"
             "<th>switches</th><th>replayed at L</th><th>replay energy Δ</th>"
             "<th>replay time Δ</th><th>late kernels</th><th>provenance</th></tr>"]
    for r in study.rows:
        rep = r.replay
        parts.append(
            f"<tr><td>{e(r.label)}</td><td>{_pct(r.plan.energy_delta)}</td>"
            f"<td>{_pct(r.plan.time_delta)}</td><td>{r.plan.n_switches}</td>"
            f"<td>{r.replay_latency_s * 1e3:g} ms</td>"
            f"<td>{_pct(rep.energy_j / study.baseline_energy_j - 1)}</td>"
            f"<td>{_pct(rep.time_s / study.baseline_time_s - 1)}</td><td>{rep.late_kernels}</td>"
            f"<td class=mod>{e(r.plan.provenance)}</td></tr>")
    parts.append("</table>")
    if study.published:
        parts.append("<h3 class=pub>Published reference (not our output)</h3><table><tr>"
                     "<th>granularity</th><th>energy Δ</th><th>time Δ</th><th>what</th>"
                     "<th>provenance</th></tr>")
        for p in study.published:
            parts.append(f"<tr><td>{e(p['granularity'])}</td><td>{_pct(p['energy_delta'])}</td>"
                         f"<td>{_pct(p['time_delta'])}</td><td>{e(p['what'])}</td>"
                         f"<td class=pub>published</td></tr>")
        parts.append(f"</table><p><small>Source: {e(PUBLISHED_CITATION)}. Their savings are sums "
                     "of kernels measured alone with no clock-switch cost.</small></p>")
    cats = category_savings(study.trace, study.char, study.row(category_row).plan)
    parts.append(f"<h2>Savings by kernel category ({e(category_row)}, modeled)</h2><table><tr>"
                 "<th>category</th><th>kernels</th><th>baseline J</th><th>saved J</th>"
                 "<th>energy Δ</th><th>time Δ</th><th>share of saving</th></tr>")
    for c in cats:
        parts.append(f"<tr><td>{e(c['category'])}</td><td>{c['kernels']}</td>"
                     f"<td>{c['baseline_energy_j']:.3f}</td><td>{c['saved_j']:.3f}</td>"
                     f"<td>{_pct(c['energy_delta'])}</td><td>{_pct(c['time_delta'])}</td>"
                     f"<td>{c['share_of_saving'] * 100:.1f} %</td></tr>")
    parts.append("</table>")
    for name, path in figs:
        parts.append(f"<h2>{e(name)}</h2><img src='{e(path.name)}' alt='{e(name)}'>")
    parts.append("<p><small>Generated by joulebound. Modeled = joulebound's GPU time/power model "
                 "and planners; see docs/planner.md for the method and its limits.</small></p>"
                 "</body></html>")
    index = out / "index.html"
    index.write_text("\n".join(parts), encoding="utf-8")
    return index
