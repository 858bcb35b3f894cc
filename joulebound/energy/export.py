"""Energy figures out to monitoring and tracking systems: Prometheus text, MLflow.

- :func:`prometheus_text`: windows as Prometheus gauges in the text exposition format
  (``prometheus_client``; for node_exporter's textfile collector or a push gateway):
  ``joulebound_window_duration_seconds{run,window}`` and
  ``joulebound_window_energy_joules{run,window,device,kind,provenance}``, one series per device
  with a figure and per window total (``device="gpu_total"`` / ``"cpu_dram_total"``).
  ``joulebound runs runs.db --export DIR --format prometheus`` writes ``DIR/metrics.prom``.
- :func:`log_to_mlflow`: flat metrics (e.g. a window's, keys as in
  :mod:`joulebound.energy.interval`) to the active MLflow run (``mlflow``, the ``[mlflow]``
  extra). The Hugging Face callback needs none of this: with ``report_to=["mlflow"]`` its
  figures reach MLflow through the Trainer's own MLflow callback.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


def prometheus_text(windows: Iterable[WindowResult] | Mapping[str, Iterable[WindowResult]],
                    run_id: str = "") -> str:
    """The windows as Prometheus gauges (text exposition format); see the module docstring.

    ``windows``: one run's windows (labeled ``run=run_id``) or ``{run_id: windows}``."""
    runs = windows if isinstance(windows, Mapping) else {run_id: windows}
    pc = _require("prometheus_client", "prometheus")
    reg = pc.CollectorRegistry()
    dur = pc.Gauge("joulebound_window_duration_seconds", "Duration of a measured window (s, "
                   "measured).", ["run", "window"], registry=reg)
    energy = pc.Gauge("joulebound_window_energy_joules", "Energy of a measured window (J); the "
                      "provenance label says measured or modeled.",
                      ["run", "window", "device", "kind", "provenance"], registry=reg)
    for run_id, ws in runs.items():
        _add(ws, run_id, dur, energy)
    return pc.generate_latest(reg).decode()


def _add(windows: Iterable[WindowResult], run_id: str, dur: Any, energy: Any) -> None:
    for w in windows:
        dur.labels(run_id, w.name).set(w.duration_s)
        for d in w.devices:
            if d.energy_j is not None:
                energy.labels(run_id, w.name, d.uuid, d.kind,
                              d.provenance or w.provenance).set(d.energy_j)
        if w.energy_j is not None:
            energy.labels(run_id, w.name, "gpu_total", "gpu", w.provenance).set(w.energy_j)
        if w.cpu_energy_j is not None:
            energy.labels(run_id, w.name, "cpu_dram_total", "cpu", w.cpu_provenance or "").set(
                w.cpu_energy_j)


def log_to_mlflow(metrics: Mapping[str, float] | WindowResult, step: int | None = None,
                  carbon: Any = None) -> dict[str, float]:
    """Log ``metrics`` (or a window's metrics) to the active MLflow run (one is started when
    none is active, as ``mlflow.log_metrics`` does); returns what was logged."""
    mlflow = _require("mlflow", "mlflow")
    m = window_metrics(metrics, carbon=carbon) if isinstance(metrics, WindowResult) \
        else {k: float(v) for k, v in metrics.items()}
    mlflow.log_metrics(m, step=step)
    return m
