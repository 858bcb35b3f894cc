"""Energy figures out to monitoring and tracking systems: Prometheus text, MLflow.

- :func:`prometheus_text`: windows as Prometheus gauges in the text exposition format
  (``prometheus_client``; for node_exporter's textfile collector or a push gateway). Three
  metrics, none of which double counts when summed over its own labels:

  - ``joulebound_window_energy_joules{run,window,seq,rank,depth,parent,device,kind,provenance}``:
    one series per device with a figure (GPUs, CPU package, DRAM), never a total;
  - ``joulebound_window_energy_total_joules{run,window,seq,rank,depth,parent,scope,provenance}``:
    the window's totals, ``scope="gpu"`` (all GPUs) and ``scope="cpu_dram"`` (CPU + DRAM), each
    with its own provenance (a measured GPU total is never added to a modeled CPU one here);
  - ``joulebound_window_duration_seconds{run,window,seq,rank,depth,parent}`` (measured).

  Windows nest (``train`` holds the ``epoch`` windows, which hold the ``interval`` ones):
  ``depth`` is how many windows of the same run and rank hold this one in time (``"0"``: a
  top-level window) and ``parent`` the name of the innermost one (``""`` at depth 0); ``seq`` is
  the window's position in the run (as stored), so repeated names keep one series each. Sum one
  depth only: ``sum by (run, device) (joulebound_window_energy_joules{depth="0"})`` is each
  device's energy over each run; windows of one depth that overlap in time without one holding
  the other (two windows a user opened so) would still be counted twice.
  ``joulebound runs runs.db --export DIR --format prometheus`` writes ``DIR/metrics.prom``.
- :func:`log_to_mlflow`: flat metrics (e.g. a window's, keys as in
  :mod:`joulebound.energy.interval`) to the active MLflow run (``mlflow``, the ``[mlflow]``
  extra). The Hugging Face callback needs none of this: with ``report_to=["mlflow"]`` its
  figures reach MLflow through the Trainer's own MLflow callback.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from joulebound.core.errors import JouleboundError
from joulebound.energy.interval import window_metrics
from joulebound.energy.results import WindowResult


def _require(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise JouleboundError(f"{module} is not installed: pip install 'joulebound[{extra}]'"
                              ) from exc


#: labels that place a window: run, name, position in the run, rank, nesting
WINDOW_LABELS = ["run", "window", "seq", "rank", "depth", "parent"]
#: two window edges closer than this (s) are the same instant (a window opened with its parent)
_EPS_S = 1e-9


def nesting(windows: Sequence[WindowResult]) -> list[tuple[int, str]]:
    """``(depth, parent name)`` of each window of one run, in the order given: ``depth`` counts
    the windows of the same rank and host that hold it in time (``[start, end]`` within
    theirs), ``parent`` is the innermost of them (``""`` at depth 0). A window equal in time to
    another is held by the one listed first."""
    out: list[tuple[int, str]] = [(0, "")] * len(windows)
    groups: dict[tuple[int, str], list[int]] = {}
    for i, w in enumerate(windows):
        groups.setdefault((w.rank, w.host), []).append(i)
    for idx in groups.values():
        # outer first: earlier start, then later end, then listed first
        order = sorted(idx, key=lambda i: (windows[i].start_s, -windows[i].end_s, i))
        stack: list[int] = []
        for i in order:
            w = windows[i]
            while stack and not (windows[stack[-1]].start_s <= w.start_s + _EPS_S
                                 and w.end_s <= windows[stack[-1]].end_s + _EPS_S):
                stack.pop()
            out[i] = (len(stack), windows[stack[-1]].name if stack else "")
            stack.append(i)
    return out


def prometheus_text(windows: Iterable[WindowResult] | Mapping[str, Iterable[WindowResult]],
                    run_id: str = "") -> str:
    """The windows as Prometheus gauges (text exposition format); see the module docstring.

    ``windows``: one run's windows (labeled ``run=run_id``) or ``{run_id: windows}``."""
    runs = windows if isinstance(windows, Mapping) else {run_id: windows}
    pc = _require("prometheus_client", "prometheus")
    reg = pc.CollectorRegistry()
    dur = pc.Gauge("joulebound_window_duration_seconds", "Duration of a window (s, measured). "
                   "depth 0: top-level windows; sum one depth only.", WINDOW_LABELS,
                   registry=reg)
    energy = pc.Gauge("joulebound_window_energy_joules", "Energy of one device in a window (J); "
                      "per device, never a total; provenance says measured or modeled. Sum one "
                      "depth only (depth 0: top-level windows).",
                      WINDOW_LABELS + ["device", "kind", "provenance"], registry=reg)
    total = pc.Gauge("joulebound_window_energy_total_joules", "Total energy of a window (J) per "
                     "scope: gpu (all GPUs) or cpu_dram (CPU package + DRAM), each with its "
                     "provenance. Sum one depth only.", WINDOW_LABELS + ["scope", "provenance"],
                     registry=reg)
    for rid, ws in runs.items():
        ws = list(ws)
        for seq, (w, (depth, parent)) in enumerate(zip(ws, nesting(ws), strict=True)):
            where = [rid, w.name, str(seq), str(w.rank), str(depth), parent]
            dur.labels(*where).set(w.duration_s)
            for d in w.devices:
                if d.energy_j is not None:
                    energy.labels(*where, d.uuid, d.kind, d.provenance or w.provenance).set(
                        d.energy_j)
            if w.energy_j is not None:
                total.labels(*where, "gpu", w.provenance).set(w.energy_j)
            if w.cpu_energy_j is not None:
                total.labels(*where, "cpu_dram", w.cpu_provenance or "").set(w.cpu_energy_j)
    return pc.generate_latest(reg).decode()


def log_to_mlflow(metrics: Mapping[str, float] | WindowResult, step: int | None = None,
                  carbon: Any = None) -> dict[str, float]:
    """Log ``metrics`` (or a window's metrics) to the active MLflow run (one is started when
    none is active, as ``mlflow.log_metrics`` does); returns what was logged."""
    mlflow = _require("mlflow", "mlflow")
    m = window_metrics(metrics, carbon=carbon) if isinstance(metrics, WindowResult) \
        else {k: float(v) for k, v in metrics.items()}
    mlflow.log_metrics(m, step=step)
    return m
