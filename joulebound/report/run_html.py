"""An HTML report of one *measured* run from a store (``joulebound report runs.db RUN``).

Contents: a conclusion (the same paragraph ``joulebound report`` prints), a summary (command,
status and exit code, carbon setting, duration, GPU and CPU+DRAM energy, each with its
provenance; gCO2e with a carbon intensity), host vs GPU energy, the power timeline per device
(the average power between samples, from the stored energy), energy per step beside the loss
(when the run has a training log), the windows drawn as they nest and a table of windows with
their flags, and the sensor notes. Measured and modeled figures are never summed: a share of the
total is shown only when both parts share a provenance.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joulebound.core.errors import JouleboundError
from joulebound.core.provenance import MEASURED
from joulebound.energy.results import WindowResult
from joulebound.energy.store import Store
from joulebound.report.runs import UNKNOWN_NO_SENSOR, exit_text, main_window, meta_of

MAX_WINDOW_ROWS = 200


@dataclass
class RunData:
    """What the report shows of one run (plain data, read from the store)."""

    run: dict[str, Any]
    windows: list[WindowResult]
    #: (t_s, uuid, kind, power_w, cumulative energy_j)
    samples: list[tuple[float, str, str, float | None, float | None]]
    notes: list[str] = field(default_factory=list)

    @property
    def main(self) -> WindowResult | None:
        """The run's longest window (``command``/``train`` for measure and the callbacks)."""
        return main_window(self.windows)


def find_run(store: Store, run: str | None) -> dict[str, Any]:
    """The run row for a run id, a unique prefix of one, or ``None`` / ``"last"`` (the newest)."""
    runs = store.runs()
    if not runs:
        raise JouleboundError(f"store {store.path} holds no runs")
    if run in (None, "", "last"):
        return runs[-1]
    hits = [r for r in runs if r["run_id"].startswith(str(run))]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        recent = ", ".join(r["run_id"][:8] for r in runs[-5:])
        raise JouleboundError(f"no run {run!r} in {store.path} (recent: {recent}; "
                              f"`joulebound runs {store.path}` lists them)")
    raise JouleboundError(f"run prefix {run!r} matches {len(hits)} runs; give more characters")


def load_run(store: Store, run: str | None) -> RunData:
    """Read one run's row, windows and power samples."""
    row = find_run(store, run)
    rid = row["run_id"]
    samples = [(float(t), u, k, p, e) for t, u, k, p, e in store.query(
        "SELECT t_s, uuid, kind, power_w, energy_j FROM samples WHERE run_id=? ORDER BY t_s",
        (rid,))]
    windows = store.windows(rid)
    return RunData(run=row, windows=windows, samples=samples,
                   notes=[*json.loads(row.get("notes_json") or "[]"),
                          *getattr(store, "skipped_rows", [])])


def _f(x: float | None, d: int = 1) -> str:
    return "–" if x is None else f"{x:,.{d}f}"


def conclusion(data: RunData, carbon: Any = None) -> str:
    """One paragraph: how the run ended, how long, GPU and CPU+DRAM energy, each figure with its
    one label (clauses split by semicolons)."""
    r, w = data.run, data.main
    code = r.get("exit_code")
    head = (f"Run {r['run_id'][:8]} ({r.get('command') or 'no command recorded'}) "
            f"{r.get('status')}" + (f" with exit code {code}" if code is not None else ""))
    if w is None:
        return head + "; it recorded no window."
    parts = [f"{head}; its longest window '{w.name}' lasted {w.duration_s:,.3f} s ({MEASURED})"]
    gpu = any(d.kind == "gpu" for d in w.devices)
    if w.energy_j is not None:
        avg = f", {w.avg_power_w:,.1f} W average" if w.avg_power_w is not None else ""
        parts.append(f"GPU energy {w.energy_j:,.1f} J = {w.energy_j / 3600:,.4f} Wh{avg} "
                     f"({w.gpu_provenance})")
    else:
        parts.append("GPU energy unknown (no GPU sensor)" if not gpu else
                     "GPU energy unavailable (read errors)")
    if w.cpu_energy_j is not None:
        parts.append(f"CPU+DRAM {w.cpu_energy_j:,.1f} J ({w.cpu_provenance})")
    text = "; ".join(parts)
    carbon = carbon if carbon is not None else stored_carbon(data.run)
    if carbon is not None:
        g = [(x, lab) for x, lab in ((carbon.grams(w.energy_j), w.gpu_provenance),
                                     (carbon.grams(w.cpu_energy_j), w.cpu_provenance))
             if x is not None]
        labs = {lab for _, lab in g}
        if g and len(labs) == 1:        # measured and modeled grams are never summed
            text += (f"; {sum(x for x, _ in g):,.3f} gCO2e at {carbon.g_per_kwh:g} gCO2e/kWh "
                     f"({labs.pop()})")
    return text + "."


def stored_carbon(run: dict[str, Any]) -> Any:
    """The carbon-intensity setting stored with the run (``meta_json["carbon"]``, e.g. by the
    training callbacks' ``carbon_intensity=``), parsed; ``None`` when none was stored."""
    from joulebound.energy.carbon import CarbonIntensity

    c = meta_of(run).get("carbon")
    if not isinstance(c, dict) or not isinstance(c.get("g_per_kwh"), int | float):
        return None
    return CarbonIntensity(float(c["g_per_kwh"]), str(c.get("region") or ""),
                           str(c.get("source") or ""))


def power_series(data: RunData) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """Each device's power over time, ``{(kind, uuid): [(t_s, W), ...]}``: between consecutive
    samples, the energy counter's difference over the time (the average power of that interval,
    as the energy figures are computed) where the samples carry cumulative energy; else the
    sampled power. The first sample of a counter has no interval before it and is not drawn (it
    read 0 W for a model with no utilisation yet, which drew every timeline from 0 W)."""
    by: dict[tuple[str, str], list[tuple[float, float | None, float | None]]] = {}
    for t, uuid, kind, p, e in data.samples:
        by.setdefault((kind, uuid), []).append((t, p, e))
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for key, pts in by.items():
        pts.sort(key=lambda x: x[0])
        ser: list[tuple[float, float]] = []
        counter = sum(e is not None for _, _, e in pts) >= 2
        prev: tuple[float, float] | None = None
        for t, p, e in pts:
            if counter:
                if e is None:
                    continue
                if prev is not None and t - prev[0] > 1e-6:
                    ser.append((t, (e - prev[1]) / (t - prev[0])))
                prev = (t, e)
            elif p is not None:
                ser.append((t, p))
        if counter and len(ser) > 2:
            # edge reads a moment apart at the start (a window opened right after the
            # sampler's first read) give an interval too short to average over: left out
            ts = [t for t, _, e in pts if e is not None]
            gaps = sorted(b - a for a, b in zip(ts, ts[1:], strict=False) if b > a)
            med = gaps[len(gaps) // 2] if gaps else 0.0
            k, last_t = 0, ts[0]
            while k < len(ser) - 1 and ser[k][0] - last_t < 0.5 * med:
                last_t = ser[k][0]
                k += 1
            ser = ser[k:]
        if ser:
            out[key] = ser
    return out


def device_labels(data: RunData) -> dict[str, str]:
    """Each metered device's provenance, by uuid (from the main window)."""
    w = data.main
    return {} if w is None else {d.uuid: d.provenance or (w.provenance or "")
                                 for d in w.devices}


def _timeline_png(data: RunData, path: Path) -> Path | None:
    series = power_series(data)
    if not series:
        return None
    from joulebound.report.plots import plain, pyplot

    plt = pyplot()
    labs = device_labels(data)
    t0 = min(pts[0][0] for pts in series.values())
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for (kind, uuid), pts in sorted(series.items()):
        lab = labs.get(uuid, "")
        ax.step([t - t0 for t, _ in pts], [p for _, p in pts], where="pre", lw=1.2,
                label=plain(f"{kind} {uuid}" + (f" ({lab})" if lab else "")))
    ax.set_xlabel("time since the first sample (s)")
    ax.set_ylabel("power (W)")
    ax.set_title("Power per device (average between samples; provenance in the legend)")
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def window_depths(windows: list[WindowResult]) -> list[int]:
    """The row each window is drawn on, outer windows above the windows inside them: one row
    below the deepest window that contains it, and further down while it would overlap a window
    already on that row (an interval that straddles an epoch's start is neither inside nor
    around it: it gets a row of its own, never the epoch's). Nested windows are never drawn
    side by side as if their energies added up."""
    eps = 1e-9
    order = sorted(range(len(windows)), key=lambda i: (windows[i].start_s,
                                                       -windows[i].duration_s, i))
    depth: dict[int, int] = {}
    for i in order:
        w = windows[i]
        inside = [depth[j] for j in depth if windows[j].start_s <= w.start_s + eps
                  and w.end_s <= windows[j].end_s + eps]
        d = max(inside, default=-1) + 1
        while any(depth[j] == d and windows[j].start_s < w.end_s - eps
                  and w.start_s < windows[j].end_s - eps for j in depth):
            d += 1
        depth[i] = d
    return [depth[i] for i in range(len(windows))]


def _windows_png(data: RunData, path: Path, limit: int = 60) -> Path | None:
    ws = data.windows[:limit]
    if not ws:
        return None
    from joulebound.report.plots import plain, pyplot

    plt = pyplot()
    depth = window_depths(ws)
    t0 = min(w.start_s for w in ws)
    rows = max(depth) + 1
    fig, ax = plt.subplots(figsize=(9, 1.0 + 0.45 * rows))
    for w, d in zip(ws, depth, strict=True):
        color = "tab:green" if w.energy_j is not None else "tab:gray"
        ax.barh(d, max(w.duration_s, 1e-9), left=w.start_s - t0, height=0.8, color=color,
                alpha=0.55, edgecolor="black", lw=0.5)
        if w.duration_s >= 0.08 * max(x.duration_s for x in ws):
            ax.text(w.start_s - t0 + w.duration_s / 2, d, plain(w.name), ha="center",
                    va="center", fontsize=7, clip_on=True)
    ax.set_yticks(range(rows), [f"depth {k}" for k in range(rows)], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time since the first window (s, measured)")
    ax.set_title("Windows as they nest (outer above inner; nested energies are parts of the "
                 "outer one, never added)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def step_energy(data: RunData) -> list[dict[str, Any]]:
    """Energy per optimizer step beside the loss, from the training log a callback stored with
    the run (``meta_json["train_log"]``: the step and loss of each Trainer log, and the interval
    window that ended there): ``[{step, loss, j_per_step, label, part}]``, the GPU energy where
    there is one, else CPU+DRAM; empty without a training log."""
    log = meta_of(data.run).get("train_log")
    if not isinstance(log, list):
        return []
    by_name = {w.name: w for w in data.windows}
    out, prev = [], 0
    for entry in log:
        if not isinstance(entry, dict) or entry.get("window") not in by_name:
            continue
        w = by_name[entry["window"]]
        step, n = int(entry.get("step", 0)), int(entry.get("step", 0)) - prev
        prev = step
        if w.energy_j is not None:
            e, lab, part = w.energy_j, w.gpu_provenance, "GPU"
        elif w.cpu_energy_j is not None:
            e, lab, part = w.cpu_energy_j, w.cpu_provenance, "CPU+DRAM"
        else:
            continue
        if n > 0:
            out.append({"step": step, "loss": entry.get("loss"), "j_per_step": e / n,
                        "label": lab, "part": part})
    return out


def _loss_png(data: RunData, path: Path) -> Path | None:
    rows = step_energy(data)
    if not rows:
        return None
    from joulebound.report.plots import pyplot

    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.0))
    steps = [r["step"] for r in rows]
    a1.plot(steps, [r["loss"] for r in rows], marker="o", lw=1.2)
    a1.set_xlabel("optimizer step")
    a1.set_ylabel("training loss")
    a1.set_title("Loss (the Trainer's log)", fontsize=9)
    labs = sorted({f"{r['part']}, {r['label']}" for r in rows})
    a2.plot(steps, [r["j_per_step"] for r in rows], marker="o", lw=1.2, color="tab:green")
    a2.set_xlabel("optimizer step")
    a2.set_ylabel("energy per step (J)")
    a2.set_title(f"Energy per step over each logging interval ({'; '.join(labs)})", fontsize=9)
    for ax in (a1, a2):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


CSS = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;
padding:3px 8px;text-align:right;white-space:nowrap}th{background:#f3f3f3}
td:first-child,td.text{text-align:left}td.text{white-space:normal}img{max-width:100%}
small{color:#666}p.conclusion{font-size:15px;border-left:4px solid #236;padding:.4em .8em;
background:#f4f7fb}.mod{color:#236}"""


def write_run_report(data: RunData, out_dir: str | Path, carbon: Any = None) -> Path:
    """Write ``out_dir/index.html`` (+ PNGs) for one measured run; returns the index path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    e = html.escape
    title = f"joulebound run report: {data.run['run_id'][:8]}"
    p = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
         f"<style>{CSS}</style></head><body><h1>{e(title)}</h1>",
         f"<p class=conclusion>{e(conclusion(data, carbon))}</p>",
         *_summary_table(data, carbon), *_devices_table(data.main),
         *_figure_sections(data, out), *_windows_table(data)]
    if data.notes:
        p.append("<h2>Sensor notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in data.notes)
                 + "</ul>")
    p.append("<p><small>Generated by joulebound from the measurement store. Measured = a sensor; "
             "modeled = joulebound's models (simulated GPU, TDP-based CPU); see "
             "docs/measurement.md.</small></p></body></html>")
    index = out / "index.html"
    index.write_text("\n".join(p), encoding="utf-8")
    return index


def _summary_table(data: RunData, carbon: Any) -> list[str]:
    """The run's command, status and the main window's figures, each with its provenance."""
    e = html.escape
    r, w = data.run, data.main
    p = ["<h2>Summary</h2><table><tr><th>quantity</th><th>value</th><th>provenance</th></tr>"]

    def row(q: str, v: str, prov: str = "") -> None:
        cls = "" if any(ch.isdigit() for ch in v) and len(v) < 40 else " class=text"
        p.append(f"<tr><td>{e(q)}</td><td{cls}>{e(v)}</td><td class=text>{e(prov)}</td></tr>")

    row("command", r.get("command") or "–")
    row("status", exit_text(r))
    row("backend", r.get("backend") or "–")
    row("host / rank", f"{r.get('host')} / {r.get('rank')}")
    stored = stored_carbon(r)
    row("carbon intensity", f"{carbon.describe()} (given to joulebound report)"
        if carbon is not None else stored.describe() + " (stored with the run)"
        if stored is not None else "not set")
    carbon = carbon if carbon is not None else stored
    if w is not None:
        row(f"duration ({w.name})", f"{w.duration_s:,.3f} s", MEASURED)
        row("GPU energy", UNKNOWN_NO_SENSOR if w.energy_j is None else f"{w.energy_j:,.1f} J",
            w.gpu_provenance or "")
        if w.avg_power_w is not None:
            row("GPU average power", f"{w.avg_power_w:,.1f} W", w.gpu_provenance or "")
        if w.cpu_energy_j is not None:
            row("CPU+DRAM energy", f"{w.cpu_energy_j:,.1f} J", w.cpu_provenance or "")
        if carbon is not None:
            for name, x in (("GPU", w.energy_j), ("CPU+DRAM", w.cpu_energy_j)):
                if x is not None:
                    row(f"{name} emissions", f"{carbon.grams(x):,.3f} gCO2e",
                        (w.gpu_provenance if name == "GPU" else w.cpu_provenance) or "")
    p.append("</table>")
    return p


def _devices_table(w: WindowResult | None) -> list[str]:
    """Host vs GPU: each metered device's energy (a share of the total only when every device
    has the same provenance)."""
    if w is None or not w.devices:
        return []
    e = html.escape
    p = ["<h2>Host vs GPU</h2><table><tr><th>device</th><th>kind</th><th>energy J</th>"
         "<th>share</th><th>avg W</th><th>peak W</th><th>provenance</th><th>source</th>"
         "</tr>"]
    provs = {d.provenance or w.provenance for d in w.devices}
    total = sum(d.energy_j or 0.0 for d in w.devices) if len(provs) == 1 else None
    for d in w.devices:
        share = (f"{100 * (d.energy_j or 0) / total:.1f} %" if total else "–")
        p.append(f"<tr><td>{e(d.uuid)}</td><td>{e(d.kind)}</td><td>{_f(d.energy_j)}</td>"
                 f"<td>{share}</td><td>{_f(d.avg_power_w)}</td><td>{_f(d.peak_power_w)}</td>"
                 f"<td>{e(d.provenance or w.provenance)}</td><td>{e(d.source)}</td></tr>")
    p.append("</table>")
    if total is None:
        p.append("<p><small>No share of a total: the devices' figures have different "
                 "provenance (measured and modeled are never summed).</small></p>")
    return p


def _figure_sections(data: RunData, out: Path) -> list[str]:
    """Draw the power timeline and the energy per window into ``out``; their sections."""
    e = html.escape
    figs = [("Power timeline per device", _timeline_png(data, out / "power.png"),
             "Power of each metered device (W) against time: the average between consecutive "
             "samples. The provenance of each device's figures is in the legend."),
            ("Energy per step beside the loss", _loss_png(data, out / "loss.png"),
             "From the training log stored with the run (Hugging Face callback): the loss at "
             "each log, and the energy of the logging interval that ended there divided by its "
             "optimizer steps."),
            ("Windows and their nesting", _windows_png(data, out / "windows.png"),
             "Each recorded window (first 60) as a bar from its start to its end; a window "
             "inside another is drawn below it. Green: the window has a GPU energy figure. "
             "The energies are in the table below: an outer window's includes its inner ones'.")]
    return [f"<h2>{e(name)}</h2><figure><img src='{e(path.name)}' alt='{e(name)}'>"
            f"<figcaption><small>{e(cap)}</small></figcaption></figure>"
            for name, path, cap in figs if path is not None]


def _windows_table(data: RunData) -> list[str]:
    """The first :data:`MAX_WINDOW_ROWS` windows (start relative to the first), flags verbatim."""
    e = html.escape
    p = [f"<h2>Windows ({len(data.windows)})</h2><table><tr><th>window (indented: "
         "inside the one above)</th><th>start s</th><th>duration s (measured)</th>"
         "<th>GPU J</th><th>CPU+DRAM J</th><th>flags</th></tr>"]
    t0 = min((x.start_s for x in data.windows), default=0.0)
    shown = data.windows[:MAX_WINDOW_ROWS]
    order = sorted(zip(shown, window_depths(shown), strict=True),
                   key=lambda xd: (xd[0].start_s, xd[1], -xd[0].duration_s))
    for x, depth in order:
        gpu = "–" if x.energy_j is None else f"{x.energy_j:,.1f} {x.gpu_provenance or ''}"
        cpu = ("–" if x.cpu_energy_j is None else
               f"{x.cpu_energy_j:,.1f} {x.cpu_provenance or ''}")
        pad = "&nbsp;" * (3 * depth)
        p.append(f"<tr><td>{pad}{e(x.name)}</td><td>{x.start_s - t0:,.3f}</td>"
                 f"<td>{x.duration_s:,.3f}</td><td>{e(gpu)}</td>"
                 f"<td>{e(cpu)}</td>"
                 f"<td class=text>{e(', '.join(x.flags))}</td></tr>")
    p.append("</table>")
    if len(data.windows) > MAX_WINDOW_ROWS:
        p.append(f"<p><small>{len(data.windows) - MAX_WINDOW_ROWS} more windows in the store "
                 "(joulebound runs --export).</small></p>")
    return p
