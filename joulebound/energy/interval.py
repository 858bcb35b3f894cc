"""Energy per logging interval, as flat scalar metrics for training loggers (one place for the
Hugging Face callback, the Lightning callback and the Accelerate hook).

An :class:`IntervalEnergy` keeps two windows open on a meter: ``train`` (from :meth:`start` to
:meth:`finish`) and ``interval:<k>`` (from the previous report to this one). :meth:`report`
closes the interval, opens the next and returns its metrics:

=====================================  ===========================================================
key                                    value
=====================================  ===========================================================
``energy/interval_s``                  the interval's duration (s, measured)
``energy/<prov>/gpu_j``, ``gpu_wh``    GPU energy over the interval (J, Wh)
``energy/<prov>/gpu_avg_w``            its average power (W)
``energy/<prov>/gpu_total_j``          GPU energy since :meth:`start` (J)
``energy/<prov>/cpu_dram_j`` ...       the same for CPU package + DRAM (RAPL or modeled)
``energy/<prov>/gpu_gco2e`` ...        grams CO2e of those, with a carbon intensity
=====================================  ===========================================================

``<prov>`` is the figure's provenance (``measured`` or ``modeled``), part of the key so that a
measured and a modeled series never share a plot line. Every value is a float, so every logger
(TensorBoard, MLflow, W&B, CSV) takes it. A part without a figure (no GPU sensor) has no keys.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from joulebound.core.provenance import MEASURED
from joulebound.energy.meter import EnergyMeter
from joulebound.energy.results import WindowResult

J_PER_WH = 3600.0
log = logging.getLogger(__name__)


@dataclass
class _Totals:
    gpu_j: float | None = 0.0
    cpu_j: float | None = 0.0


def _parts(w: WindowResult) -> list[tuple[str, float | None, str | None]]:
    """``(part, energy J, provenance)`` of a window's GPU and CPU+DRAM figures."""
    out = []
    if any(d.kind == "gpu" for d in w.devices):
        out.append(("gpu", w.energy_j, w.provenance))
    if any(d.kind != "gpu" for d in w.devices):
        out.append(("cpu_dram", w.cpu_energy_j, w.cpu_provenance))
    return out


def window_metrics(w: WindowResult, prefix: str = "energy", carbon: Any = None,
                   totals: dict[str, float | None] | None = None) -> dict[str, float]:
    """Flat float metrics of one window (keys in the module docstring): the interval's length,
    then ``<prefix>/<prov>/<part>_{j,wh,avg_w,gco2e}`` and, with ``totals``, ``_total_j``."""
    return _part_metrics(w, f"{prefix}/interval_s", lambda prov, part: f"{prefix}/{prov}/{part}",
                         carbon, totals)


def _part_metrics(w: WindowResult, duration_key: str, key_of: Any, carbon: Any,
                  totals: dict[str, float | None] | None = None) -> dict[str, float]:
    """``duration_key`` (s) and, per measured part of ``w``, its energy (J, Wh), average power
    (W), carbon (gCO2e) and running total (J) under ``key_of(provenance, part)``."""
    m: dict[str, float] = {duration_key: float(w.duration_s)}
    for part, e, prov in _parts(w):
        if e is None or prov is None:
            continue
        key = key_of(prov, part)
        m[f"{key}_j"] = float(e)
        m[f"{key}_wh"] = float(e) / J_PER_WH
        if w.duration_s > 0:
            m[f"{key}_avg_w"] = float(e) / w.duration_s
        if totals is not None and totals.get(part) is not None:
            m[f"{key}_total_j"] = float(totals[part])  # type: ignore[arg-type]
        if carbon is not None:
            m[f"{key}_gco2e"] = float(carbon.grams(e))
    return m


def summary(w: WindowResult, carbon: Any = None, **extra: Any) -> dict[str, Any]:
    """A plain summary of a whole run's window (for ``trainer.state`` and JSON)."""
    d: dict[str, Any] = {"duration_s": w.duration_s, "duration_provenance": MEASURED,
                         "gpu_energy_j": w.energy_j, "gpu_provenance":
                             w.provenance if any(x.kind == "gpu" for x in w.devices) else None,
                         "gpu_avg_power_w": w.avg_power_w,
                         "cpu_dram_energy_j": w.cpu_energy_j, "cpu_dram_provenance":
                             w.cpu_provenance, "flags": list(w.flags), "backend": w.backend}
    for k in ("gpu", "cpu_dram"):
        e = d[f"{k}_energy_j"]
        d[f"{k}_energy_wh"] = None if e is None else e / J_PER_WH
        if carbon is not None:
            d[f"{k}_gco2e"] = carbon.grams(e)
    if carbon is not None:
        d["carbon_intensity"] = carbon.describe()
    d.update(extra)
    return d


def summary_metrics(w: WindowResult, prefix: str = "energy", carbon: Any = None
                    ) -> dict[str, float]:
    """Float metrics of the whole training window: ``<prefix>/<prov>/train_gpu_j`` etc."""
    return _part_metrics(w, f"{prefix}/train_s",
                         lambda prov, part: f"{prefix}/{prov}/train_{part}", carbon)


@dataclass
class IntervalEnergy:
    """Energy per reporting interval on ``meter`` (see the module docstring).

    Args:
        meter: the meter to open windows on.
        prefix: metric key prefix.
        carbon: a :class:`~joulebound.energy.carbon.CarbonIntensity` for gCO2e keys, or None.
    """

    meter: EnergyMeter
    prefix: str = "energy"
    carbon: Any = None
    intervals: int = 0
    last: WindowResult | None = None
    train: WindowResult | None = None
    _totals: dict[str, float | None] = field(default_factory=lambda: {"gpu": 0.0,
                                                                       "cpu_dram": 0.0})

    @property
    def running(self) -> bool:
        return "train" in self.meter.open_windows

    def start(self) -> None:
        """Open the ``train`` window and the first interval. Without a GPU energy sensor, says
        so once (a ``logging`` warning naming the reason the meter gives): the training
        loggers then get no GPU energy keys, and a user should not read silence as zero."""
        if not self.meter.has_sensor:
            why = "; ".join(self.meter.notes) or "no GPU was found"
            log.warning("joulebound: no GPU energy sensor, so GPU energy is not measured in this "
                        "run (%s); CPU/DRAM energy is still recorded, labeled measured (RAPL) or "
                        "modeled", why)
        self.meter.begin_window("train")
        self.meter.begin_window(self._name())

    def _name(self) -> str:
        return f"interval:{self.intervals}"

    def _close_interval(self) -> WindowResult | None:
        name = self._name()
        if name not in self.meter.open_windows:
            return None
        w = self.meter.end_window(name)
        self.intervals += 1
        for part, e, _prov in _parts(w):
            t = self._totals.get(part)
            self._totals[part] = None if (t is None or e is None) else t + e
        self.last = w
        return w

    def report(self) -> dict[str, float]:
        """Close the running interval, open the next; the closed interval's metrics."""
        if not self.running:
            return {}
        w = self._close_interval()
        self.meter.begin_window(self._name())
        if w is None:
            return {}
        return window_metrics(w, self.prefix, self.carbon, self._totals)

    def finish(self) -> tuple[dict[str, float], dict[str, Any]]:
        """Close the last interval and the ``train`` window: ``(last interval's metrics + the
        train totals as metrics, summary)``; ``({}, {})`` when not running."""
        if not self.running:
            return {}, {}
        w = self._close_interval()
        metrics = window_metrics(w, self.prefix, self.carbon, self._totals) if w else {}
        self.train = self.meter.end_window("train")
        metrics.update(summary_metrics(self.train, self.prefix, self.carbon))
        return metrics, summary(self.train, self.carbon, intervals=self.intervals,
                                run_id=self.meter.run_id)
