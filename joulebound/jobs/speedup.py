"""Runtime speedup laws over GPU count, fitted with ``scipy.optimize.curve_fit``.

Speedup is **work-normalized**: the same amount of work (tokens summed over all ranks, same number
of epochs) done on N GPUs versus 1 GPU,

    S(N) = (time_1 / tokens_1) / (time_N / tokens_N)       [dimensionless]

(:func:`work_normalized_speedup`), and the parallel efficiency is η(N) = S(N) / N.

Exact forms (S(1) = 1 for both):

* **Tensor parallelism** — saturating exponential (:class:`TPSpeedup`):
  ``S(N) = S_inf − (S_inf − 1)·exp(−k·(N − 1))``, with S_inf ≥ 1 the asymptotic speedup and
  k > 0 [1/GPU] how fast it saturates (TP's per-layer all-reduces grow with N while the per-GPU
  matmuls shrink, so S flattens early).
* **FSDP / DDP** — generalized Amdahl law (:class:`AmdahlSpeedup`):
  ``S(N) = 1 / ((1 − p) + p/N + c·(N − 1)^γ)``, with p ∈ [0, 1] the parallel fraction,
  c ≥ 0 the communication overhead per unit of (N−1)^γ (as a fraction of the 1-GPU step time) and
  γ ∈ [0, 2] how the overhead grows with N (γ ≈ 0 for a ring all-reduce of fixed size whose
  per-GPU volume 2(N−1)/N saturates; γ ≈ 1 for a latency- or tree-bound collective).

With fewer points than parameters a law is fitted with its extra parameters pinned (Amdahl: γ = 1,
then p = 1; TP with a single GPU count above 1: k = :data:`TP_K_PIN`) and ``pinned`` names them;
one point (N = 1 only) cannot be fitted and raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from joulebound.core.errors import JouleboundError
from joulebound.jobs.strategy import STRATEGIES, check_gpus, normalize_strategy

__all__ = ["STRATEGIES", "TP_K_PIN", "AmdahlSpeedup", "SpeedupFit", "TPSpeedup", "amdahl_speedup",
           "check_gpus", "fit_speedup", "law_for", "normalize_strategy", "tp_speedup",
           "work_normalized_speedup"]

#: k [1/GPU] of the TP law pinned when the data has one GPU count above 1 (each added GPU leaves
#: e^-0.5 ≈ 61 % of the gap to S_inf; also the free fit's starting value). A modeling assumption.
TP_K_PIN = 0.5

def work_normalized_speedup(time_1: ArrayLike, tokens_1: ArrayLike, time_n: ArrayLike,
                            tokens_n: ArrayLike) -> np.ndarray:
    """S = (time_1/tokens_1) / (time_N/tokens_N): seconds per token on 1 GPU over that on N GPUs.

    ``tokens_*`` are summed over all ranks for the measured window (s and tokens)."""
    t1, k1, tn, kn = (np.asarray(x, dtype=float) for x in (time_1, tokens_1, time_n, tokens_n))
    return (t1 / k1) / (tn / kn)


def tp_speedup(n: ArrayLike, s_inf: float, k: float) -> np.ndarray:
    """S(N) = S_inf − (S_inf − 1)·exp(−k·(N − 1))."""
    n = np.asarray(n, dtype=float)
    return s_inf - (s_inf - 1.0) * np.exp(-k * (n - 1.0))


def amdahl_speedup(n: ArrayLike, p: float, c: float, gamma: float) -> np.ndarray:
    """S(N) = 1 / ((1 − p) + p/N + c·(N − 1)^γ)."""
    n = np.asarray(n, dtype=float)
    return 1.0 / ((1.0 - p) + p / n + c * np.power(np.maximum(n - 1.0, 0.0), gamma))


@dataclass
class SpeedupFit:
    """A fitted speedup law. ``params``/``stderr`` by name; ``rmse`` of S on the fitted points."""

    law: str
    params: dict[str, float]
    stderr: dict[str, float] = field(default_factory=dict)
    pinned: dict[str, float] = field(default_factory=dict)
    n_points: int = 0
    rmse: float = float("nan")
    max_gpus_seen: int = 1

    def speedup(self, n: ArrayLike) -> np.ndarray:
        n = check_gpus(n)
        if self.law == "tp_saturating_exp":
            return tp_speedup(n, **self.params)
        return amdahl_speedup(n, **self.params)

    def efficiency(self, n: ArrayLike) -> np.ndarray:
        """η(N) = S(N)/N."""
        return self.speedup(n) / check_gpus(n)

    def to_json(self) -> dict:
        return {"law": self.law, "params": self.params, "stderr": self.stderr,
                "pinned": self.pinned, "n_points": self.n_points, "rmse": self.rmse,
                "max_gpus_seen": self.max_gpus_seen}

    @classmethod
    def from_json(cls, d: dict) -> SpeedupFit:
        return cls(**d)


class _SpeedupLaw(RegressorMixin, BaseEstimator):
    """A speedup law as a scikit-learn regressor: ``fit(n, s)`` on GPU counts ``n`` and measured
    speedups ``s``, ``predict(n)`` → S(N). No hyper-parameters (``clone`` gives a fresh law);
    the fit is ``fit_`` (:class:`SpeedupFit`)."""

    law = "base"

    def predict(self, n: ArrayLike) -> np.ndarray:
        """Modeled speedup S(N) at GPU counts ``n`` (dimensionless)."""
        check_is_fitted(self)
        return self.fit_.speedup(n)


class TPSpeedup(_SpeedupLaw):
    """Tensor-parallel speedup law (saturating exponential)."""

    law = "tp_saturating_exp"

    def fit(self, n: ArrayLike, s: ArrayLike) -> TPSpeedup:
        n, s = _points(n, s)
        s_max = float(max(s.max(), 1.0))
        if len(np.unique(n)) >= 3:
            f, names, pinned = tp_speedup, ("s_inf", "k"), {}
            p0, lo, hi = [max(s_max * 1.2, 1.01), TP_K_PIN], [1.0, 1e-6], [1e3, 50.0]
        else:  # one GPU count above 1: only S_inf is identifiable
            def f(n, s_inf):
                return tp_speedup(n, s_inf, TP_K_PIN)
            names, pinned = ("s_inf",), {"k": TP_K_PIN}
            p0, lo, hi = [max(s_max * 1.2, 1.01)], [1.0], [1e3]
        self.fit_ = _curve_fit(self.law, f, names, p0, lo, hi, pinned, n, s)
        return self


class AmdahlSpeedup(_SpeedupLaw):
    """FSDP/DDP speedup law (generalized Amdahl)."""

    law = "generalized_amdahl"

    def fit(self, n: ArrayLike, s: ArrayLike) -> AmdahlSpeedup:
        n, s = _points(n, s)
        n_distinct = len(np.unique(n))
        if n_distinct >= 4:
            f = amdahl_speedup
            names, p0, lo, hi, pinned = ("p", "c", "gamma"), [0.95, 0.01, 1.0], [0, 0, 0], [1, 10, 2], {}
        elif n_distinct == 3:
            def f(n, p, c):
                return amdahl_speedup(n, p, c, 1.0)
            names, p0, lo, hi, pinned = ("p", "c"), [0.95, 0.01], [0, 0], [1, 10], {"gamma": 1.0}
        else:
            def f(n, c):
                return amdahl_speedup(n, 1.0, c, 1.0)
            names, p0, lo, hi, pinned = ("c",), [0.01], [0], [10], {"p": 1.0, "gamma": 1.0}
        self.fit_ = _curve_fit(self.law, f, names, p0, lo, hi, pinned, n, s)
        return self


def law_for(strategy: str) -> TPSpeedup | AmdahlSpeedup:
    """The speedup-law estimator used for ``strategy`` (TP → saturating exp, else Amdahl)."""
    return TPSpeedup() if normalize_strategy(strategy) == "tp" else AmdahlSpeedup()


def fit_speedup(strategy: str, n: ArrayLike, s: ArrayLike) -> SpeedupFit:
    """Fit the strategy's law to speedups ``s`` measured at GPU counts ``n``."""
    return law_for(strategy).fit(n, s).fit_


def _points(n: ArrayLike, s: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    n = check_gpus(n).ravel()
    s = np.asarray(s, dtype=float).ravel()
    ok = np.isfinite(s) & (s > 0)
    n, s = n[ok], s[ok]
    if len(np.unique(n[n > 1])) < 1:
        raise JouleboundError("a speedup law needs runtimes at >= 1 GPU count above 1 "
                              f"(got GPU counts {sorted(set(n.tolist()))}).")
    if not np.any(n == 1):  # anchor S(1) = 1 by definition
        n, s = np.append(n, 1.0), np.append(s, 1.0)
    return n, s


def _curve_fit(law, f, names, p0, lo, hi, pinned, n, s) -> SpeedupFit:
    """Least-squares fit of ``f(n, *free)`` (free parameters ``names``, start ``p0``, bounds
    ``lo``/``hi``) to the speedups ``s`` at GPU counts ``n``; ``pinned`` holds the fixed ones."""
    from scipy.optimize import curve_fit

    popt, pcov = curve_fit(f, n, s, p0=p0, bounds=(lo, hi), maxfev=20000)
    return _result(law, names, popt, pcov, n, s, f, pinned)


def _result(law, names, popt, pcov, n, s, f, pinned) -> SpeedupFit:
    err = np.sqrt(np.clip(np.diag(pcov), 0, None)) if np.all(np.isfinite(pcov)) else [np.nan] * len(popt)
    params = {k: float(v) for k, v in zip(names, popt, strict=True)}
    params.update(pinned)
    resid = f(n, *popt) - s
    return SpeedupFit(law=law, params={k: params[k] for k in _order(law)},
                      stderr={k: float(e) for k, e in zip(names, err, strict=True)},
                      pinned=pinned, n_points=int(len(n)), rmse=float(np.sqrt(np.mean(resid**2))),
                      max_gpus_seen=int(n.max()))


def _order(law: str) -> tuple[str, ...]:
    return ("s_inf", "k") if law == "tp_saturating_exp" else ("p", "c", "gamma")
