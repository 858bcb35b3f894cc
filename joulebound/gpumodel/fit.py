"""Fitting device parameters on measurements: maximum a posteriori least squares and a bootstrap
ensemble (the parameter uncertainty every modeled saving carries).

A fit names the *free* parameters (:class:`FreeParam`: a :class:`~.params.DeviceParams` path,
bounds and a prior) and a residual function ``resid(params) -> (r, unit)``: relative errors of
the model against measurements, and for each residual the resampling *unit* it belongs to (a
stage series, a kernel, an application). :func:`fit_params` minimises
``Σ r² + Σ ((x - x_prior)/σ)²`` over the transformed parameters ``x`` (log for positive scales,
logit for fractions, linear for clocks) with scipy's trust-region least squares;
:func:`bootstrap` refits on units resampled with replacement (each residual weighted by
√count) and returns one ``{path: value}`` dict per draw, the form stored in
``DeviceParams.draws``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from joulebound.gpumodel.params import DeviceParams

log = logging.getLogger(__name__)

Residuals = Callable[[DeviceParams], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class FreeParam:
    """One fitted parameter.

    Attributes:
        path: the :class:`DeviceParams` path (``"compute_eff.gemm"``, ``"vf.knee_mhz"``, ...).
        lo, hi: bounds in natural units.
        prior: prior mean in natural units (``None``: the starting parameters' value).
        prior_sd: prior standard deviation in the transformed space (``inf``: flat).
        transform: ``"log"`` (positive scale), ``"logit"`` (fraction in (lo, hi)) or ``"lin"``
            (linear, normalised to [0, 1] over (lo, hi) so that every fitted variable is of order
            one and the optimizer's step tolerances mean the same for all).
    """

    path: str
    lo: float
    hi: float
    prior: float | None = None
    prior_sd: float = float("inf")
    transform: str = "log"

    def to_x(self, v: float) -> float:
        v = float(np.clip(v, self.lo + 1e-12 * abs(self.hi - self.lo),
                          self.hi - 1e-12 * abs(self.hi - self.lo)))
        if self.transform == "log":
            return float(np.log(v))
        if self.transform == "logit":
            u = (v - self.lo) / (self.hi - self.lo)
            return float(np.log(u / (1 - u)))
        return (v - self.lo) / (self.hi - self.lo)

    def from_x(self, x: float) -> float:
        if self.transform == "log":
            return float(np.exp(x))
        if self.transform == "logit":
            return float(self.lo + (self.hi - self.lo) / (1 + np.exp(-x)))
        return float(self.lo + (self.hi - self.lo) * x)

    def x_bounds(self) -> tuple[float, float]:
        if self.transform == "log":
            return float(np.log(self.lo)), float(np.log(self.hi))
        if self.transform == "logit":
            return -12.0, 12.0
        return 0.0, 1.0


@dataclass
class FitResult:
    """Outcome of :func:`fit_params`.

    Attributes:
        params: the fitted parameters.
        values: ``{path: value}`` of the free parameters.
        rms: root mean square of the data residuals (relative).
        n: number of data residuals.
        success: the optimizer's convergence flag.
    """

    params: DeviceParams
    values: dict[str, float]
    rms: float
    n: int
    success: bool


def _apply(base: DeviceParams, free: list[FreeParam], x: np.ndarray) -> DeviceParams:
    return base.set({p.path: p.from_x(v) for p, v in zip(free, x, strict=True)})


def fit_params(base: DeviceParams, free: list[FreeParam], resid: Residuals,
               weights: np.ndarray | None = None, x0: np.ndarray | None = None,
               max_nfev: int = 400) -> FitResult:
    """MAP least-squares fit of the ``free`` parameters of ``base``.

    Args:
        base: starting parameters (also the prior mean where a :class:`FreeParam` names none).
        free: the parameters to fit.
        resid: the residual function (see module docstring).
        weights: optional per-unit weights (bootstrap counts); a residual of unit ``u`` is
            multiplied by ``sqrt(weights[u])``.
        x0: optional start in the transformed space.
        max_nfev: evaluation budget of the optimizer.
    """
    from scipy.optimize import least_squares

    prior = np.array([p.to_x(p.prior if p.prior is not None else base.get(p.path)) for p in free])
    sd = np.array([p.prior_sd for p in free])
    has_prior = np.isfinite(sd)
    lo, hi = (np.array(b) for b in zip(*(p.x_bounds() for p in free), strict=True))
    start = np.clip(prior if x0 is None else np.asarray(x0, float), lo + 1e-9, hi - 1e-9)

    def f(x: np.ndarray) -> np.ndarray:
        r, unit = resid(_apply(base, free, x))
        r = np.where(np.isfinite(r), r, 10.0)
        if weights is not None:
            r = r * np.sqrt(weights[unit])
        return np.r_[r, (x[has_prior] - prior[has_prior]) / sd[has_prior]]

    sol = least_squares(f, start, bounds=(lo, hi), x_scale=1.0, max_nfev=max_nfev,
                        diff_step=1e-4, xtol=1e-10, ftol=1e-10)
    params = _apply(base, free, sol.x)
    r, _ = resid(params)
    values = {p.path: p.from_x(v) for p, v in zip(free, sol.x, strict=True)}
    log.debug("fit %s: rms %.4f over %d residuals (%s)", base.device,
              float(np.sqrt(np.mean(r ** 2))), r.size, values)
    return FitResult(params, values, float(np.sqrt(np.mean(r ** 2))), int(r.size),
                     bool(sol.success))


def bootstrap(base: DeviceParams, free: list[FreeParam], resid: Residuals, n_units: int,
              n_draws: int = 24, seed: int = 0, start: FitResult | None = None,
              max_nfev: int = 200, progress: Callable[[int, int], None] | None = None
              ) -> list[dict[str, float]]:
    """Refits on ``n_draws`` resamples (with replacement) of the ``n_units`` units.

    Returns one ``{path: value}`` per draw. ``start``: a full-data fit to start each refit from
    (faster, and the draws then describe the spread around it)."""
    rng = np.random.default_rng(seed)
    x0 = None
    if start is not None:
        x0 = np.array([p.to_x(start.values[p.path]) for p in free])
    out = []
    for i in range(n_draws):
        counts = np.bincount(rng.integers(0, n_units, n_units), minlength=n_units).astype(float)
        res = fit_params(base, free, resid, weights=counts, x0=x0, max_nfev=max_nfev)
        out.append(res.values)
        if progress:
            progress(i + 1, n_draws)
    return out
