"""Energy laws as scikit-learn estimators: ``fit(X, y)``, ``predict(X)`` (J), ``score(X, y)``.

``X`` is a common-schema frame (:mod:`joulebound.jobs.datasets`), one row per configuration;
proxies are added inside. ``y`` is the measured energy per unit of work (J); without it ``fit``
and ``score`` read ``X["energy_j"]``. Each law is a ``BaseEstimator`` + ``RegressorMixin``: its
constructor takes only hyper-parameters, everything learned is set by ``fit`` (names ending in
``_``), so ``sklearn.clone``, ``GroupKFold`` and ``cross_validate`` work on it.
All log laws regress ``log E`` (E in J per unit of work, summed over GPUs) with statsmodels OLS and
robust standard errors (cluster-robust by ``family`` when there are ≥ 10 families, else HC3).

======================  =====================================================================  ========
law (``--law``)          form                                                                   needs
======================  =====================================================================  ========
``roofline``             E = ε_C·C + ε_M·M + E0 per device, non-negative least squares;         config
                         C = training FLOPs per step, M = B·S·d·L (relative-error weights)
``powerlaw``             log E = κ + α_C·log C_tok + α_M·log M (+ device terms)                 config
``paper``                log E = κ + α_C·log C_tok + α_M·log M + α_η·log η + Ψ(strategy)         post-run
                         (+ device terms), η measured = F_train/(N·peak·t) (MFU) — uses the
                         run's own runtime, as the paper's η = S(N)/N does
``paper-speedup``        the paper's law with η = S(N)/N from the measured speedup (sweeps)     post-run
``paper-no-eta``         the paper's law without η                                              config
``prerun``               log E = κ + α_F·log F + α_C·log C_tok + α_M·log M + α_η·log η̂           config
                         (with < 10 families only log F and log η̂, the physics core)
                         + α_D·log(TDP/peak) + Ψ; η̂ = η̂_hw·η̂_par predicted before the run:
                         η̂_hw from :class:`EfficiencyModel` (fitted on the *training* rows'
                         times), η̂_par from the communication model or a fitted speedup law
``device-seconds``       log E = κ + log(N·t) + device terms (baseline, post-run)                post-run
``config-only``          log E on log L, d, S, B, h, N + device and strategy terms               config
``hgb``                  HistGradientBoostingRegressor on the raw configuration → log E          config
======================  =====================================================================  ========

"Device terms" are indicator columns per GPU model (first one is the reference) when the
training data has more than one; Ψ likewise per strategy. A category unseen in training gets the
reference level; :meth:`EnergyLaw.prediction_warnings` says so (``predict`` changes nothing).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from sklearn.base import RegressorMixin
from sklearn.utils.validation import check_is_fitted

from joulebound.core.errors import JouleboundError, did_you_mean
from joulebound.jobs.design import (
    EfficiencyModel,
    config_frame,
    dummies,
    law_config,
    measured_eta,
    parallel_eta,
    prepare,
)
from joulebound.jobs.job import Job
from joulebound.jobs.metrics import adjusted_r2, r2
from joulebound.jobs.prediction import JobPrediction
from joulebound.jobs.predictor import JobPredictor

__all__ = ["LAWS", "AdditiveRoofline", "ConfigOnly", "DeviceSeconds", "EfficiencyModel",
           "EnergyLaw", "HGBLaw", "PaperLaw", "PowerLaw", "PreRunLaw", "make_law",
           "measured_eta", "parallel_eta", "prepare"]

# --------------------------------------------------------------------------------------------
# estimators


def _with_energy(X: pd.DataFrame, y: Any) -> pd.DataFrame:
    """``X`` with ``energy_j`` taken from ``y`` when given (J per unit of work)."""
    if y is None:
        return X
    out = X.copy()
    out["energy_j"] = np.asarray(y, dtype=float)
    return out


def _levels(values: pd.Series) -> list[str]:
    """Category levels of a column, sorted; one GPU (``single``) is the reference of Ψ."""
    lv = sorted(values.astype(str).unique())
    if "single" in lv:
        lv.remove("single")
        lv.insert(0, "single")
    return lv


#: what a law's energy covers: what its training data metered
LAW_COVERS = "what the law's training data metered (Mayaki: CodeCarbon GPU+CPU+RAM)"
#: what the shipped pre-run law was fitted on (``source_`` of the built-in coefficients)
BUILTIN_SOURCE = "built-in, fitted on mayaki_ecai2025"


def _check_tokens(tokens: float) -> float:
    t = float(tokens)
    if not np.isfinite(t) or t <= 0:
        raise JouleboundError(f"--tokens must be a finite number > 0 (got {tokens})")
    return t


def _law_prediction(row: pd.DataFrame, tokens: float, e_step: float, label: str,
                    warnings_: list[str], t_step: float | None = None, q: float | None = None,
                    step: dict | None = None, params: dict | None = None) -> JobPrediction:
    """A law's :class:`JobPrediction` of one configuration row (energy per step ``e_step`` J,
    time per step ``t_step`` s when the law predicts time, 90 % half-width ``q`` of log E)."""
    r = row.iloc[0]
    tok_step = float(r["batch"] * r["seq"])
    steps = tokens / tok_step
    e = e_step * steps
    return JobPrediction(
        name="", strategy=str(r["strategy"]), gpus=int(r["gpus"]), nodes=None, device=str(r["device"]),
        micro_batch=None, grad_accum=None, global_batch=int(r["batch"]), tokens_per_step=tok_step,
        steps=steps, time_s=None if t_step is None else t_step * steps, time_lo_s=None,
        time_hi_s=None, gpu_energy_j=None, gpu_energy_lo_j=None, gpu_energy_hi_j=None,
        host_energy_j=None, host_energy_lo_j=None, host_energy_hi_j=None, total_energy_j=e,
        total_energy_lo_j=None if q is None else e * np.exp(-q),
        total_energy_hi_j=None if q is None else e * np.exp(q), energy_per_token_j=e_step / tok_step,
        step={"energy_j": e_step, **({} if t_step is None else {"time_s": t_step}), **(step or {})},
        memory={}, fits_memory=None, interval_why=[], warnings=warnings_, covers=LAW_COVERS,
        params=params or {}, predictor=label)


class EnergyLaw(RegressorMixin, JobPredictor):
    """Base class: log-linear OLS of ``log E`` on the columns a law builds (:meth:`_columns`).

    A :class:`~joulebound.jobs.predictor.JobPredictor`: ``predict`` gives J per unit of work of
    common-schema rows, :meth:`predict_jobs` whole jobs. Fitted attributes: ``terms_`` (kept
    design columns, ``"const"`` first), ``coef_``, ``keep_`` (mask of the design columns kept),
    ``res_`` (statsmodels results), ``cov_type_``, ``n_``, ``rsquared_adj_`` and
    ``<column>_levels_`` per categorical column; ``source_`` (what it was fitted on, for the
    label) when the caller sets it."""

    name: ClassVar[str] = "base"
    post_run: ClassVar[bool] = False
    description: ClassVar[str] = ""
    #: categorical columns that get indicator terms (first level = reference)
    categoricals: ClassVar[tuple[str, ...]] = ("device",)

    # -- design ---------------------------------------------------------------------------------
    def _fit_state(self, df: pd.DataFrame) -> None:
        """Learn what the columns need besides the category levels (prepared training rows)."""

    def _columns(self, df: pd.DataFrame) -> tuple[list[np.ndarray], list[str]]:
        """The law's own regressors of the prepared rows ``df`` (from fitted state only)."""
        raise NotImplementedError

    def _dummies(self, df: pd.DataFrame) -> tuple[list[np.ndarray], list[str]]:
        cols: list[np.ndarray] = []
        names: list[str] = []
        for col in self.categoricals:
            X, n = dummies(df[col].astype(str), getattr(self, f"{col}_levels_"), col)
            cols += list(X.T)
            names += n
        return cols, names

    def _design(self, df: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
        cols, names = self._columns(df)
        cat, cat_names = self._dummies(df)
        X = np.column_stack([np.ones(len(df))] + [np.asarray(c, float) for c in cols + cat])
        return X, ["const"] + names + cat_names

    # -- estimator API --------------------------------------------------------------------------
    def fit(self, X: pd.DataFrame, y: Any = None) -> EnergyLaw:
        """Fit on the rows of ``X`` with energy ``y`` (J; default ``X["energy_j"]``)."""
        import statsmodels.api as sm

        d = prepare(_with_energy(X, y))
        logy = np.log(d["energy_j"].to_numpy(float))
        self._fit_state(d)
        for col in self.categoricals:
            setattr(self, f"{col}_levels_", _levels(d[col]))
        A, terms = self._design(d)
        keep = np.ones(A.shape[1], bool)
        # drop (near-)constant columns, e.g. log η on 1-GPU data; < 1 % spread in a log term
        # carries no information and only makes the fit ill-conditioned
        keep[1:] = A[:, 1:].std(axis=0) > 1e-2
        fam = d["family"].astype(str)
        with warnings.catch_warnings():  # this call only: statsmodels on collinear designs
            warnings.filterwarnings("ignore", message=".*rank-deficient.*")
            model = sm.OLS(logy, A[:, keep])
            if fam.nunique() >= 10:
                cov_type = "cluster(family)"
                res = model.fit(cov_type="cluster",
                                cov_kwds={"groups": pd.factorize(fam)[0]})
            else:
                cov_type = "HC3"
                res = model.fit(cov_type="HC3")
        self.keep_ = keep
        self.terms_ = [t for t, k in zip(terms, keep, strict=True) if k]
        self.cov_type_ = cov_type
        self.res_ = res
        self.coef_ = np.asarray(res.params)
        self.n_ = len(logy)
        self.rsquared_adj_ = float(res.rsquared_adj)
        return self

    def predict_log(self, X: pd.DataFrame) -> np.ndarray:
        """Predicted ``log E`` (E in J per unit of work, summed over GPUs)."""
        check_is_fitted(self)
        d = prepare(X, need_energy=False)
        return self._design(d)[0][:, self.keep_] @ self.coef_

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Predicted energy per unit of work, summed over GPUs (J)."""
        return np.exp(self.predict_log(X))

    def score(self, X: pd.DataFrame, y: Any = None, sample_weight: Any = None) -> float:
        """R² of ``log E`` (``y`` in J; default ``X["energy_j"]``)."""
        e = X["energy_j"] if y is None else y
        return r2(np.log(np.asarray(e, dtype=float)), self.predict_log(X))

    def prediction_warnings(self, X: pd.DataFrame) -> list[str]:
        """What :meth:`predict` assumes for rows of ``X`` unlike the training data: a category
        level never seen in training gets the reference level."""
        check_is_fitted(self)
        d = prepare(X, need_energy=False) if self.categoricals else X
        out = []
        for col in self.categoricals:
            levels = getattr(self, f"{col}_levels_")
            unseen = sorted(set(d[col].astype(str)) - set(levels))
            if unseen:
                out.append(f"{col} {unseen} not in the training data: reference level "
                           f"{levels[0]!r} used")
        return out

    # -- whole jobs ---------------------------------------------------------------------------
    def label(self) -> str:
        """The law's name and what it was fitted on, e.g. ``paper-no-eta (fitted on DATA)``."""
        src = getattr(self, "source_", None)
        return f"{self.name} ({src})" if src else self.name

    def predict_jobs(self, jobs: Sequence[Job]) -> list[JobPrediction]:
        """Energy of each whole job (``job.tokens`` tokens; the job's global batch is the law's
        ``batch``, :func:`~joulebound.jobs.design.law_config`)."""
        out = []
        for job in jobs:
            if not job.tokens:
                raise JouleboundError("--law needs --tokens (the legacy laws price whole jobs)")
            p = self.predict_config(float(job.tokens), **law_config(job))
            p.name = job.name
            out.append(p)
        return out

    def predict_config(self, tokens: float, **config: Any) -> JobPrediction:
        """Energy to train on ``tokens`` tokens with one configuration (keywords of
        :func:`~joulebound.jobs.design.config_frame`; ``batch`` = global batch)."""
        check_is_fitted(self)
        tokens = _check_tokens(tokens)
        row = config_frame(**config)
        e_step = float(np.exp(self.predict_log(row))[0])
        return _law_prediction(row, tokens, e_step, self.label(), self.prediction_warnings(row),
                               params={"law": self.name})

    def coef_table(self) -> pd.DataFrame:
        check_is_fitted(self)
        ci = np.asarray(self.res_.conf_int(0.05))
        return pd.DataFrame({"term": self.terms_, "coef": self.coef_, "se": np.asarray(self.res_.bse),
                             "ci95_lo": ci[:, 0], "ci95_hi": ci[:, 1], "p": np.asarray(self.res_.pvalues)})


class PowerLaw(EnergyLaw):
    name = "powerlaw"
    description = "log E on log C_tok, log M (+ device terms)"

    def _columns(self, df: pd.DataFrame) -> tuple[list[np.ndarray], list[str]]:
        return [np.log(df["C_tok"]), np.log(df["M"])], ["log C", "log M"]


class PaperLaw(EnergyLaw):
    """The paper's law E = κ·C^αC·M^αM·η^αη·Ψ with measured η (post-run).

    Args:
        with_eta: include the η term (``False``: ``paper-no-eta``, a pre-run law).
        eta: ``"mfu"`` (η = F/(N·peak·t), measured) or ``"speedup"`` (η = S(N)/N from the
            measured work-normalized speedup: ``paper-speedup``).
    """

    categoricals = ("strategy", "device")

    def __init__(self, with_eta: bool = True, eta: str = "mfu") -> None:
        self.with_eta = with_eta
        self.eta = eta

    @property
    def name(self) -> str:  # type: ignore[override]
        if not self.with_eta:
            return "paper-no-eta"
        return "paper-speedup" if self.eta == "speedup" else "paper"

    @property
    def post_run(self) -> bool:  # type: ignore[override]
        return bool(self.with_eta)

    @property
    def description(self) -> str:  # type: ignore[override]
        if not self.with_eta:
            return "the paper's law without η"
        if self.eta == "speedup":
            return "the paper's law with η = S(N)/N from the measured work-normalized speedup"
        return "log E on log C_tok, log M, log η (measured MFU), Ψ(strategy) (+ device terms)"

    def _columns(self, df: pd.DataFrame) -> tuple[list[np.ndarray], list[str]]:
        cols, names = [np.log(df["C_tok"]), np.log(df["M"])], ["log C", "log M"]
        if self.with_eta and self.eta == "speedup":
            sp = df["speedup"].astype(float).where(df["gpus"] > 1, 1.0) if "speedup" in df else None
            if sp is None or sp.isna().any() or (sp <= 0).any():
                raise JouleboundError("paper-speedup needs the work-normalized speedup of every "
                                      "multi-GPU run (sweep column 'speedup'); use --law paper (η = MFU)")
            cols.append(np.log(sp.to_numpy(float) / df["gpus"].to_numpy(float)))
            names.append("log eta")
        elif self.with_eta:
            if "time_s" not in df or df["time_s"].isna().any():
                raise JouleboundError("the paper's law needs each run's measured time_s (η = "
                                      "F/(N·peak·t)); use --law prerun for a pre-run prediction")
            cols.append(np.log(measured_eta(df)))
            names.append("log eta")
        return cols, names


class PreRunLaw(EnergyLaw):
    """The paper's law with η predicted before the run (see module docstring).

    Args:
        speedup_fits: fitted speedup laws by strategy (:class:`~joulebound.jobs.speedup.
            SpeedupFit`) for η̂_par; strategies without one use the communication model.
    """

    name = "prerun"
    description = ("log E on log F_train, log C_tok, log M, log η̂ (η̂_hw from a time model fitted on "
                   "other configurations × η̂_par from the comm model or a speedup law), "
                   "log(TDP/peak), Ψ(strategy)")
    categoricals = ("strategy",)

    def __init__(self, speedup_fits: dict | None = None) -> None:
        self.speedup_fits = speedup_fits

    def eta_hat(self, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(η̂ = η̂_hw·η̂_par, η̂_hw, η̂_par) for the prepared rows ``df``."""
        t1 = self.eff_.time(df)
        hw = self.eff_.eta(df)
        par = parallel_eta(df, t1, self.speedup_fits)
        return hw * par, hw, par

    def _fit_state(self, df: pd.DataFrame) -> None:
        if "time_s" not in df or df["time_s"].isna().all():
            raise JouleboundError("the pre-run law is fitted on measured times of the training "
                                  "runs (time_s); the dataset has none")
        # single-GPU-equivalent time: t·N·η̂_par, with η̂_par from a first pass (1 GPU: exact)
        t = df["time_s"].to_numpy(float)
        n = df["gpus"].to_numpy(float)
        one = n == 1
        first = (EfficiencyModel().fit(df[one], (t * n)[one]) if one.sum() >= 5
                 else EfficiencyModel().fit(df, t * n))
        par = parallel_eta(df, first.time(df), self.speedup_fits)
        self.eff_ = EfficiencyModel().fit(df, t * n * par)
        self.multi_device_ = df["device"].nunique() > 1
        # few families: keep the physics core (log F, log η̂) to avoid fitting noise
        self.reduced_ = df["family"].nunique() < 10

    def _columns(self, df: pd.DataFrame) -> tuple[list[np.ndarray], list[str]]:
        eta, _, _ = self.eta_hat(df)
        if self.reduced_:
            cols, names = [np.log(df["F_train"]), np.log(eta)], ["log F", "log eta_hat"]
        else:
            cols = [np.log(df["F_train"]), np.log(df["C_tok"]), np.log(df["M"]), np.log(eta)]
            names = ["log F", "log C", "log M", "log eta_hat"]
        if self.multi_device_:
            cols.append(np.log(df["tdp_w"] / df["peak_flops"]))
            names.append("log TDP/peak")
        return cols, names

    def predict_config(self, tokens: float, **config: Any) -> JobPrediction:
        """Energy (J) and time (s) to train on ``tokens`` tokens with one configuration
        (keywords of :func:`~joulebound.jobs.design.config_frame`), with the 90 % interval of
        the law's conformal half-width ``q90_log_`` (0 when the law has none)."""
        check_is_fitted(self)
        tokens = _check_tokens(tokens)
        df = config_frame(**config)
        d = prepare(df, need_energy=False)
        e_step = float(self.predict(df)[0])
        _, hw, par = self.eta_hat(d)
        t_step = float(self.eff_.time(d)[0] / (d["gpus"].iloc[0] * par[0]))
        q = float(getattr(self, "q90_log_", None) or 0.0)
        law_warnings = self.prediction_warnings(df)
        warn = [w for w in law_warnings if not w.startswith("strategy")]
        if len(warn) < len(law_warnings):
            warn.append("Ψ(strategy) = 0: this law was fitted without multi-GPU energy runs (none in "
                        "the open data); the strategy enters only through the predicted η̂_par")
        builtin = getattr(self, "source_", BUILTIN_SOURCE) == BUILTIN_SOURCE
        if builtin and (d["params"].iloc[0] > 1.5e8 or d["gpus"].iloc[0] > 1):
            warn.append("outside the fitted data (single-GPU models <= 144 M parameters): "
                        "the multi-GPU part comes from the communication model, not from measurements")
        return _law_prediction(df, tokens, e_step, f"{self.name} ({getattr(self, 'source_', BUILTIN_SOURCE)})",
                               warn, t_step=t_step, q=q,
                               step={"eta_hw": float(hw[0]), "eta_par": float(par[0])},
                               params={"law": self.name, "q90_log": q})

    def to_record(self) -> dict[str, Any]:
        """The coefficients file (schema ``joulebound.scaling.default/1``)."""
        return {"schema": "joulebound.scaling.default/1", "law": self.to_json(),
                "q90_log": getattr(self, "q90_log_", None), "provenance": getattr(self, "provenance_", {})}

    @classmethod
    def from_record(cls, doc: dict, path: str | Path | None = None) -> PreRunLaw:
        """The law of a coefficients file (``path`` None: the built-in one)."""
        law = cls.from_json(doc["law"])
        law.q90_log_ = doc.get("q90_log")
        law.provenance_ = dict(doc.get("provenance") or {})
        law.source_ = (BUILTIN_SOURCE if path is None
                       else f"{path}: {law.provenance_.get('data', '?')}")
        return law

    def to_json(self) -> dict[str, Any]:
        check_is_fitted(self)
        return {"law": self.name, "terms": self.terms_, "coef": [float(c) for c in self.coef_],
                "se": [float(s) for s in np.asarray(self.res_.bse if hasattr(self, "res_") else self.se_)],
                "keep": [bool(k) for k in self.keep_],
                "strategy_levels": self.strategy_levels_, "multi_device": bool(self.multi_device_),
                "efficiency_model": self.eff_.to_json(), "cov_type": self.cov_type_,
                "n": self.n_, "rsquared_adj": self.rsquared_adj_,
                "reduced": bool(self.reduced_)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PreRunLaw:
        """A fitted law from :meth:`to_json` (no statsmodels results: no :meth:`coef_table`)."""
        law = cls()
        law.terms_, law.coef_ = list(d["terms"]), np.array(d["coef"], dtype=float)
        law.keep_ = np.array(d["keep"], dtype=bool)
        law.strategy_levels_ = list(d["strategy_levels"])
        law.multi_device_ = bool(d["multi_device"])
        law.reduced_ = bool(d.get("reduced", False))
        law.eff_ = EfficiencyModel.from_json(d["efficiency_model"])
        law.se_ = np.array(d.get("se", [np.nan] * len(law.coef_)), dtype=float)
        law.n_, law.rsquared_adj_ = d.get("n"), d.get("rsquared_adj")
        return law


class DeviceSeconds(EnergyLaw):
    name = "device-seconds"
    post_run = True
    description = "log E on log(N·t) (+ device terms): average power × GPU-seconds, post-run"

    def _columns(self, df: pd.DataFrame) -> tuple[list[np.ndarray], list[str]]:
        if "time_s" not in df or df["time_s"].isna().any():
            raise JouleboundError("device-seconds needs each run's measured time_s")
        return [np.log(df["gpus"] * df["time_s"])], ["log GPU-seconds"]


class ConfigOnly(EnergyLaw):
    name = "config-only"
    description = "log E on log L, d, S, B, h, N (+ device and strategy terms)"
    categoricals = ("strategy", "device")

    def _columns(self, df: pd.DataFrame) -> tuple[list[np.ndarray], list[str]]:
        cols = [np.log(df[c].astype(float)) for c in ("layers", "hidden", "seq", "batch", "heads", "gpus")]
        return cols, ["log L", "log d", "log S", "log B", "log h", "log N"]


class AdditiveRoofline(EnergyLaw):
    """E = ε_C·C + ε_M·M + E0 per device by NNLS (C = F_train FLOP, M = B·S·d·L elements).

    Fitted: ``coefs_`` (device -> [ε_C J/FLOP, ε_M J/element, E0 J]), ``terms_``, ``n_``,
    ``rsquared_adj_``."""

    name = "roofline"
    description = "E = eps_C*C + eps_M*M + E0 per device (NNLS, relative-error weights)"

    @staticmethod
    def _X(d: pd.DataFrame) -> np.ndarray:
        return np.column_stack([d["F_train"], d["M"], np.ones(len(d))]).astype(float)

    def fit(self, X: pd.DataFrame, y: Any = None) -> AdditiveRoofline:
        from scipy.optimize import nnls

        d = prepare(_with_energy(X, y))
        coefs: dict[str, np.ndarray] = {}
        for dev, g in d.groupby("device"):
            A, e = self._X(g), g["energy_j"].to_numpy(float)
            sc = np.maximum(A.max(axis=0), 1e-300)
            c, _ = nnls(A / sc / e[:, None], np.ones(len(e)))
            coefs[str(dev)] = c / sc
        self.coefs_ = coefs
        self.terms_ = ["eps_C (J/FLOP)", "eps_M (J/element)", "E0 (J)"]
        self.n_ = len(d)
        logy = np.log(d["energy_j"].to_numpy(float))
        self.rsquared_adj_ = adjusted_r2(r2(logy, self.predict_log(d)), self.n_, len(coefs) * 3)
        return self

    def predict_log(self, X: pd.DataFrame) -> np.ndarray:
        check_is_fitted(self)
        d = prepare(X, need_energy=False) if "F_train" not in X else X
        pooled = np.mean(list(self.coefs_.values()), axis=0)
        C = np.array([self.coefs_.get(dev, pooled) for dev in d["device"].astype(str)],
                     dtype=float).reshape(len(d), 3)
        out = np.sum(self._X(d) * C, axis=1)
        return np.log(np.maximum(out, 1e-9))

    def prediction_warnings(self, X: pd.DataFrame) -> list[str]:
        check_is_fitted(self)
        return [f"device {dev!r} not in the training data: mean coefficients used"
                for dev in sorted(set(X["device"].astype(str))) if dev not in self.coefs_]

    def coef_table(self) -> pd.DataFrame:
        check_is_fitted(self)
        rows = [{"term": f"{t} [{dev}]", "coef": v, "se": np.nan, "ci95_lo": np.nan, "ci95_hi": np.nan,
                 "p": np.nan} for dev, c in self.coefs_.items() for t, v in zip(self.terms_, c, strict=True)]
        return pd.DataFrame(rows)


class HGBLaw(EnergyLaw):
    """Gradient-boosted trees on the raw configuration → ``log E`` (a flexible baseline).

    Args:
        max_iter, learning_rate, random_state: of the
            :class:`~sklearn.ensemble.HistGradientBoostingRegressor`."""

    name = "hgb"
    description = "HistGradientBoostingRegressor on L, d, S, B, h, ff, params, N, strategy, peak, TDP → log E"
    categoricals = ()

    def __init__(self, max_iter: int = 100, learning_rate: float = 0.1,
                 random_state: int | None = 0) -> None:
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.random_state = random_state

    def _F(self, d: pd.DataFrame) -> np.ndarray:
        strat = pd.Categorical(d["strategy"], categories=["single", "ddp", "fsdp", "tp", "pp"]).codes
        return np.column_stack([d["layers"], d["hidden"], d["seq"], d["batch"], d["heads"], d["ff"],
                                d["params"], d["gpus"], strat, np.log(d["peak_flops"]), d["tdp_w"]]).astype(float)

    def fit(self, X: pd.DataFrame, y: Any = None) -> HGBLaw:
        from sklearn.ensemble import HistGradientBoostingRegressor
        from threadpoolctl import threadpool_limits

        d = prepare(_with_energy(X, y))
        model = HistGradientBoostingRegressor(max_iter=self.max_iter,
                                              learning_rate=self.learning_rate,
                                              random_state=self.random_state)
        with threadpool_limits(1):  # OpenMP threads thrash on small data and busy machines
            model.fit(self._F(d), np.log(d["energy_j"].to_numpy(float)))
        self.model_ = model
        self.terms_, self.n_, self.rsquared_adj_ = [], len(d), float("nan")
        return self

    def predict_log(self, X: pd.DataFrame) -> np.ndarray:
        from threadpoolctl import threadpool_limits

        check_is_fitted(self)
        with threadpool_limits(1):
            return self.model_.predict(self._F(prepare(X, need_energy=False)))

    def coef_table(self) -> pd.DataFrame:
        return pd.DataFrame(columns=["term", "coef", "se", "ci95_lo", "ci95_hi", "p"])


#: ``--law`` name -> a factory of a fresh (unfitted) estimator
LAWS: dict[str, Callable[[], EnergyLaw]] = {
    "roofline": AdditiveRoofline, "powerlaw": PowerLaw, "paper": PaperLaw,
    "paper-no-eta": lambda: PaperLaw(with_eta=False),
    "paper-speedup": lambda: PaperLaw(eta="speedup"), "prerun": PreRunLaw,
    "device-seconds": DeviceSeconds, "config-only": ConfigOnly, "hgb": HGBLaw,
}


def make_law(name: str) -> EnergyLaw:
    """A fresh estimator by ``--law`` name; unknown names raise listing the choices."""
    key = str(name).strip().lower()
    if key not in LAWS:
        raise JouleboundError(f"unknown energy law {name!r}." + did_you_mean(key, list(LAWS)))
    return LAWS[key]()
