"""``CheckResult``: one row of the validation table (a check × GPU × workload)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


def mape(pred: np.ndarray, meas: np.ndarray) -> float:
    """Mean absolute percentage error, in percent."""
    pred, meas = np.asarray(pred, float), np.asarray(meas, float)
    return float(np.mean(np.abs(pred / meas - 1.0)) * 100.0)


def max_err(pred: np.ndarray, meas: np.ndarray) -> float:
    """Largest absolute percentage error, in percent."""
    pred, meas = np.asarray(pred, float), np.asarray(meas, float)
    return float(np.max(np.abs(pred / meas - 1.0)) * 100.0)


@dataclass
class CheckResult:
    """Held-out error of the model on one slice of real data.

    Attributes:
        check: ``"perseus-stage"``, ``"perseus-plans"``, ``"guerreiro"`` or ``"zeus-power-limit"``.
        gpu / workload: what was predicted.
        time_mape / energy_mape: MAPE (%) of predicted vs measured time and energy (or power where
            the check has no energy, see ``energy_quantity``); ``None`` when not applicable.
        time_max_err / energy_max_err: largest absolute percentage error (%).
        n_points: number of held-out points compared.
        provenance: of the compared numbers: measured (data) vs modeled (ours).
        energy_quantity: ``"energy"``, ``"power"`` (board power), ``"avg_power"``,
            ``"voltage"`` (relative supply voltage) or ``"bandwidth"`` (DRAM GB/s).
        published: a paper's own error on the same data, cited (``{"value": %, "source": ...}``).
        note: what was calibrated on what, assumptions.
        points: optional arrays for plots (``x``, ``t_meas``, ``t_pred``, ``e_meas``, ``e_pred``).
    """

    check: str
    gpu: str
    workload: str
    time_mape: float | None
    energy_mape: float | None
    time_max_err: float | None
    energy_max_err: float | None
    n_points: int
    provenance: str = "measured vs modeled (held-out)"
    energy_quantity: str = "energy"
    published: dict[str, Any] | None = None
    note: str = ""
    points: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @classmethod
    def from_arrays(cls, check: str, gpu: str, workload: str, t_pred: np.ndarray | None,
                    t_meas: np.ndarray | None, e_pred: np.ndarray | None,
                    e_meas: np.ndarray | None, **kw: Any) -> CheckResult:
        has_t = t_pred is not None and len(t_pred) > 0
        has_e = e_pred is not None and len(e_pred) > 0
        n = len(t_pred) if has_t else len(e_pred)  # type: ignore[arg-type]
        return cls(check, gpu, workload,
                   mape(t_pred, t_meas) if has_t else None,
                   mape(e_pred, e_meas) if has_e else None,
                   max_err(t_pred, t_meas) if has_t else None,
                   max_err(e_pred, e_meas) if has_e else None, int(n), **kw)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "check", "gpu", "workload", "time_mape", "energy_mape", "time_max_err",
            "energy_max_err", "n_points", "provenance", "energy_quantity", "published", "note")}
