"""Error metrics of the energy laws (pure functions on arrays): R², RMSE, MAPE, adjusted R² and the
split-conformal quantile. Every figure they compute from a model is modeled-vs-measured error."""

from __future__ import annotations

import math

import numpy as np


def r2(y: np.ndarray, p: np.ndarray) -> float:
    """Coefficient of determination of predictions ``p`` for ``y`` (same units)."""
    y, p = np.asarray(y, float), np.asarray(p, float)
    return float(1 - np.sum((y - p) ** 2) / np.sum((y - y.mean()) ** 2))


def rmse(y: np.ndarray, p: np.ndarray) -> float:
    """Root-mean-square error (units of ``y``)."""
    return float(np.sqrt(np.mean((np.asarray(y, float) - np.asarray(p, float)) ** 2)))


def mape(e: np.ndarray, e_hat: np.ndarray) -> float:
    """Mean absolute percentage error as a fraction (0.1 = 10 %)."""
    e = np.asarray(e, float)
    return float(np.mean(np.abs(np.asarray(e_hat, float) - e) / e))


def adjusted_r2(r2_value: float, n: int, p: int) -> float:
    """1 − (1 − R²)(n − 1)/(n − p − 1) for ``p`` regressors (without the intercept)."""
    return float(1 - (1 - r2_value) * (n - 1) / max(n - p - 1, 1))


def conformal_quantile(abs_resid: np.ndarray, alpha: float = 0.1) -> float:
    """Split-conformal quantile: the ⌈(n+1)(1−α)⌉-th smallest of ``n`` |residuals|, so that a new
    residual exceeds it with probability at most α; ``inf`` when ``n`` is too small for that."""
    r = np.sort(np.asarray(abs_resid, float))
    k = math.ceil((len(r) + 1) * (1 - alpha) - 1e-9)
    return float(r[k - 1]) if 1 <= k <= len(r) else float("inf")
