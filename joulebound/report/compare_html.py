"""A page comparing measured runs side by side (``joulebound report A.db B.db``,
``joulebound report runs.db RUN1 RUN2``).

Each run's duration, GPU energy and CPU+DRAM energy with its one label; a run's change against
the first run is given only between figures of the same label (measured against measured,
modeled against modeled): a measured and a modeled figure are never compared, and the page says
so where it does not. The power of every run is drawn against the time since its own start.
"""

from __future__ import annotations

import html
from pathlib import Path

from joulebound.core.provenance import MEASURED
from joulebound.report.run_html import CSS, RunData, device_labels, power_series
from joulebound.report.runs import UNKNOWN_NO_SENSOR, exit_text


def _name(data: RunData, store: str) -> str:
    return f"{data.run['run_id'][:8]} ({Path(store).name})"


def figures_of(data: RunData) -> dict[str, tuple[float | None, str | None]]:
    """The compared figures of a run's main window: ``{quantity: (value, label)}``."""
    w = data.main
    if w is None:
        return {}
    return {"duration s": (w.duration_s, MEASURED),
            "GPU energy J": (w.energy_j, w.gpu_provenance),
            "GPU average power W": (w.avg_power_w, w.gpu_provenance),
            "CPU+DRAM energy J": (w.cpu_energy_j,
                                  w.cpu_provenance if w.cpu_energy_j is not None else None)}


def change(a: tuple[float | None, str | None], b: tuple[float | None, str | None]
           ) -> str:
    """``b`` against ``a`` in percent, with the label they share; why not, when they do not."""
    (va, la), (vb, lb) = a, b
    if va is None or vb is None:
        return "– (no such figure in one of the runs)"
    if la != lb:
        return f"not compared ({lb} vs {la})"
    if va == 0:
        return "– (first run's figure is 0)"
    return f"{100.0 * (vb - va) / va:+.1f} % {la}"


def compare_conclusion(runs: list[tuple[RunData, str]]) -> str:
    """One paragraph: the runs, then each later run's duration and energy against the first's,
    each change with its label (clauses split by semicolons)."""
    first, first_store = runs[0]
    base = figures_of(first)
    parts = [f"Comparing {len(runs)} runs against run {_name(first, first_store)}"]
    for data, store in runs[1:]:
        figs = figures_of(data)
        bits = []
        for q in ("duration s", "GPU energy J", "CPU+DRAM energy J"):
            if q in base and q in figs:
                bits.append(f"{q.rsplit(' ', 1)[0]} {change(base[q], figs[q])}")
        parts.append(f"run {_name(data, store)}: " + ", ".join(bits) if bits else
                     f"run {_name(data, store)} recorded no window")
    return "; ".join(parts) + "."


def _power_png(runs: list[tuple[RunData, str]], path: Path) -> Path | None:
    from joulebound.report.plots import plain, pyplot

    curves = []
    for data, store in runs:
        labs = device_labels(data)
        for (kind, uuid), pts in sorted(power_series(data).items()):
            lab = f" ({labs[uuid]})" if labs.get(uuid) else ""
            curves.append((f"{_name(data, store)} {kind} {uuid}{lab}", pts, data))
    if not curves:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for label, pts, data in curves:
        t0 = min(w.start_s for w in data.windows) if data.windows else pts[0][0]
        ax.step([t - t0 for t, _ in pts], [p for _, p in pts], where="pre", lw=1.1,
                label=plain(label))
    ax.set_xlabel("time since the run's first window (s)")
    ax.set_ylabel("power (W)")
    ax.set_title("Power per device of each run (average between samples; provenance in the legend)")
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_compare_report(runs: list[tuple[RunData, str]], out_dir: str | Path) -> Path:
    """Write ``out_dir/index.html`` (+ a PNG) comparing ``runs`` (``(data, store path)``, the
    first is the reference); returns the index path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    e = html.escape
    title = "joulebound run comparison: " + ", ".join(_name(d, s) for d, s in runs)
    p = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
         f"<style>{CSS}</style></head><body><h1>{e(title)}</h1>",
         f"<p class=conclusion>{e(compare_conclusion(runs))}</p>", "<h2>Runs side by side</h2>",
         "<table><tr><th>quantity</th>" + "".join(f"<th>{e(_name(d, s))}</th>" for d, s in runs)
         + "</tr>"]

    def text_row(q: str, vals: list[str]) -> None:
        p.append(f"<tr><td>{e(q)}</td>" + "".join(f"<td class=text>{e(v)}</td>" for v in vals)
                 + "</tr>")

    text_row("command", [d.run.get("command") or "–" for d, _ in runs])
    text_row("status", [exit_text(d.run) for d, _ in runs])
    text_row("backend", [d.run.get("backend") or "–" for d, _ in runs])
    text_row("window compared (the longest)", [d.main.name if d.main else "–" for d, _ in runs])
    figs = [figures_of(d) for d, _ in runs]
    for q in ("duration s", "GPU energy J", "GPU average power W", "CPU+DRAM energy J"):
        cells = []
        for f in figs:
            v, lab = f.get(q, (None, None))
            if v is None:
                cells.append(UNKNOWN_NO_SENSOR if "GPU" in q else "–")
            else:
                cells.append(f"{v:,.3f} {lab}" if q == "duration s" else f"{v:,.1f} {lab}")
        p.append(f"<tr><td>{e(q)}</td>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>")
    p.append("</table>")
    if len(runs) > 1:
        p.append("<h2>Change against the first run</h2><table><tr><th>quantity</th>"
                 + "".join(f"<th>{e(_name(d, s))}</th>" for d, s in runs[1:]) + "</tr>")
        for q in ("duration s", "GPU energy J", "GPU average power W", "CPU+DRAM energy J"):
            p.append(f"<tr><td>{e(q)}</td>" + "".join(
                f"<td class=text>{e(change(figs[0].get(q, (None, None)), f.get(q, (None, None))))}"
                "</td>" for f in figs[1:]) + "</tr>")
        p.append("</table><p><small>Changes are given only between figures of the same label: "
                 "a measured and a modeled figure are never compared.</small></p>")
    png = _power_png(runs, out / "power.png")
    if png is not None:
        p.append("<h2>Power of each run</h2><figure><img src='power.png' alt='power'>"
                 "<figcaption><small>Each device's power against the time since its run's first "
                 "window; provenance per run in the table above.</small></figcaption></figure>")
    p.append("<p><small>Generated by joulebound from the measurement stores; each run's own "
             "report: joulebound report DB RUN.</small></p></body></html>")
    index = out / "index.html"
    index.write_text("\n".join(p), encoding="utf-8")
    return index
