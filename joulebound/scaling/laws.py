"""Energy laws as scikit-learn-style estimators: ``fit(df)``, ``predict(df)`` (J), ``score(df)``.

``df`` is a common-schema frame (:mod:`joulebound.scaling.datasets`); proxies are added inside.
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
reference level and ``predict`` records it in ``self.warnings_``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..errors import JouleboundError, did_you_mean
from .proxies import add_proxies, dtype_bytes
from .speedup import check_gpus, normalize_strategy

# --------------------------------------------------------------------------------------------
# helpers


def prepare(df: pd.DataFrame, need_energy: bool = True) -> pd.DataFrame:
    """Validate, normalise strategies, add proxies. Raises naming the missing column."""
    from .datasets import validate

    need = ("layers", "hidden", "heads", "seq", "batch", "device", "peak_flops", "strategy", "gpus")
    validate(df, df.attrs.get("source", "dataset"), need + (("energy_j",) if need_energy else ()))
    out = df.copy()
    out["strategy"] = [normalize_strategy(s) for s in out["strategy"]]
    check_gpus(out["gpus"])
    if "dtype" not in out:
        out["dtype"] = "fp32"
    if "tdp_w" not in out or "mem_bw" not in out:
        from .hardware import get_hw

        hws = {d: get_hw(d) for d in out["device"].unique()}
        out["tdp_w"] = out["device"].map(lambda d: hws[d].tdp_w)
        out["mem_bw"] = out["device"].map(lambda d: hws[d].mem_bw)
    if "family" not in out:
        out["family"] = "all"
    return add_proxies(out)


def measured_eta(df: pd.DataFrame) -> np.ndarray:
    """Post-run efficiency η = F_train / (N · peak · t): the model-FLOPs utilization (MFU).

    On one GPU this is the hardware efficiency (the ECAI paper's HEF of the whole step); on N GPUs
    it is hardware efficiency × parallel efficiency S(N)/N."""
    return (df["F_train"] / (df["gpus"] * df["peak_flops"] * df["time_s"])).to_numpy(float)


def _dummies(values: pd.Series, levels: list[str], prefix: str) -> tuple[np.ndarray, list[str]]:
    cols = [np.asarray(values == lv, dtype=float) for lv in levels[1:]]
    names = [f"{prefix}[{lv}]" for lv in levels[1:]]
    return (np.column_stack(cols) if cols else np.empty((len(values), 0))), names


# --------------------------------------------------------------------------------------------
# hardware-efficiency model (pre-run)


class EfficiencyModel:
    """Pre-run step time on one GPU, hence hardware efficiency η̂_hw = F_train/(peak·t̂).

    ``t̂ = θ1·F_dense/peak + θ2·F_attn/peak + θ3·A·b/BW + θ4·L + θ5``  (s), θ ≥ 0 by NNLS with
    relative-error weights, pooled over devices (peak and bandwidth normalise them), where A is
    the attention-matrix elements per step and b bytes per element. Physically: 1/θ1 is the
    achieved fraction of peak on the weight matmuls, 1/θ2 on the attention products, θ3 the
    passes over the score matrices, θ4 the per-layer launch/overhead time and θ5 the per-step
    overhead. Fitted on single-GPU-equivalent time t·N·η̂_par of the training rows only.
    """

    names = ("theta_dense", "theta_attn", "theta_attn_mem", "t_layer_s", "t_step_s")

    @staticmethod
    def _X(df: pd.DataFrame) -> np.ndarray:
        nb = np.array([dtype_bytes(x) for x in df["dtype"]], dtype=float)
        return np.column_stack([df["F_dense"] / df["peak_flops"], df["F_attn"] / df["peak_flops"],
                                df["A_elems"] * nb / df["mem_bw"], df["layers"].astype(float),
                                np.ones(len(df))])

    def fit(self, df: pd.DataFrame, t1: np.ndarray) -> EfficiencyModel:
        """NNLS on the training rows (relative-error weights).

        Terms that the training rows cannot tell apart (e.g. the per-layer term when every row has
        the same L, or the attention terms when S and h never vary) are left out — greedily, in
        the order θ1, θ5, θ2, θ3, θ4 — so that an unidentifiable split cannot explode when the law
        extrapolates; ``self.active_`` lists the terms kept."""
        from scipy.optimize import nnls

        X = self._X(df)
        sc = np.maximum(np.abs(X).max(axis=0), 1e-300)
        w = 1.0 / t1
        Xw = X / sc * w[:, None]
        active: list[int] = []
        for j in (0, 4, 1, 2, 3):
            trial = active + [j]
            sv = np.linalg.svd(Xw[:, trial], compute_uv=False)
            if sv[-1] > 1e-7 * sv[0]:
                active = trial
        c = np.zeros(X.shape[1])
        c[active], _ = nnls(Xw[:, active], t1 * w)
        self.active_ = [self.names[j] for j in sorted(active)]
        self.theta_ = c / sc
        return self

    def time(self, df: pd.DataFrame) -> np.ndarray:
        """Predicted 1-GPU time of one unit of work (s)."""
        return np.maximum(self._X(df) @ self.theta_, 1e-12)

    def eta(self, df: pd.DataFrame) -> np.ndarray:
        return (df["F_train"] / (df["peak_flops"] * self.time(df))).to_numpy(float)

    def to_json(self) -> dict[str, float]:
        return dict(zip(self.names, map(float, self.theta_), strict=True))

    @classmethod
    def from_json(cls, d: dict[str, float]) -> EfficiencyModel:
        m = cls()
        m.theta_ = np.array([d[k] for k in cls.names], dtype=float)
        return m


def parallel_eta(df: pd.DataFrame, t1: np.ndarray, speedup_fits: dict | None = None) -> np.ndarray:
    """Pre-run η̂_par per row: a fitted speedup law for the row's strategy when given, else the
    communication model (:func:`~joulebound.scaling.comm.predicted_efficiency`) with the row's
    predicted 1-GPU time ``t1`` as compute time. 1 for single-GPU rows."""
    from .comm import predicted_efficiency

    out = np.ones(len(df))
    for i, (_, r) in enumerate(df.iterrows()):
        n = float(r["gpus"])
        if n <= 1 or r["strategy"] == "single":
            continue
        fit = (speedup_fits or {}).get(r["strategy"])
        if fit is not None:
            out[i] = float(fit.efficiency(n))
            continue
        flops = float(r["F_train"])
        eff = flops / (float(r["peak_flops"]) * float(t1[i]))
        out[i] = float(predicted_efficiency(
            r["strategy"], n, flops=flops, params=float(r["params"]), B=float(r["batch"]),
            S=float(r["seq"]), d=float(r["hidden"]), L=float(r["layers"]), device=r["device"],
            dtype=str(r["dtype"]), compute_eff=eff))
    return np.clip(out, 1e-3, 1.0)


# --------------------------------------------------------------------------------------------
# estimators


class EnergyLaw:
    """Base class: log-linear OLS on a design built by :meth:`design`."""

    name = "base"
    post_run = False
    description = ""

    def __init__(self) -> None:
        self.warnings_: list[str] = []

    # subclasses build their columns
    def columns(self, df: pd.DataFrame, fitting: bool) -> tuple[list[np.ndarray], list[str]]:
        raise NotImplementedError

    def _cats(self, df: pd.DataFrame, fitting: bool, which: tuple[str, ...] = ("device",)
              ) -> tuple[list[np.ndarray], list[str]]:
        cols, names = [], []
        for col in which:
            if fitting:
                lv = sorted(df[col].astype(str).unique())
                if "single" in lv:  # one GPU is the reference level of Ψ
                    lv.remove("single")
                    lv.insert(0, "single")
                setattr(self, f"{col}_levels_", lv)
            levels = getattr(self, f"{col}_levels_")
            unseen = sorted(set(df[col].astype(str)) - set(levels))
            if unseen and not fitting:
                self.warnings_.append(f"{col} {unseen} not in the training data: reference level "
                                      f"{levels[0]!r} used")
            X, n = _dummies(df[col].astype(str), levels, col)
            cols += list(X.T)
            names += n
        return cols, names

    def design(self, df: pd.DataFrame, fitting: bool = False) -> np.ndarray:
        cols, names = self.columns(df, fitting)
        X = np.column_stack([np.ones(len(df))] + [np.asarray(c, float) for c in cols])
        if fitting:
            self.terms_ = ["const"] + names
        return X

    def fit(self, df: pd.DataFrame) -> EnergyLaw:
        import statsmodels.api as sm

        d = prepare(df)
        y = np.log(d["energy_j"].to_numpy(float))
        X = self.design(d, fitting=True)
        keep = np.ones(X.shape[1], bool)
        # drop (near-)constant columns, e.g. log η on 1-GPU data; < 1 % spread in a log term
        # carries no information and only makes the fit ill-conditioned
        keep[1:] = X[:, 1:].std(axis=0) > 1e-2
        self.keep_ = keep
        self.terms_ = [t for t, k in zip(self.terms_, keep, strict=True) if k]
        fam = d["family"].astype(str)
        import warnings

        model = sm.OLS(y, X[:, keep])
        warnings.filterwarnings("ignore", message=".*rank-deficient.*")
        if fam.nunique() >= 10:
            codes = pd.factorize(fam)[0]
            self.cov_type_ = "cluster(family)"
            self.res_ = model.fit(cov_type="cluster", cov_kwds={"groups": codes})
        else:
            self.cov_type_ = "HC3"
            self.res_ = model.fit(cov_type="HC3")
        self.coef_ = np.asarray(self.res_.params)
        self.n_ = len(y)
        self.rsquared_adj_ = float(self.res_.rsquared_adj)
        return self

    def predict_log(self, df: pd.DataFrame) -> np.ndarray:
        self.warnings_ = []
        d = prepare(df, need_energy=False)
        return self.design(d)[:, self.keep_] @ self.coef_

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        """Predicted energy per unit of work, summed over GPUs (J)."""
        return np.exp(self.predict_log(df))

    def score(self, df: pd.DataFrame) -> float:
        """R² of log E."""
        from .evaluate import r2

        return r2(np.log(df["energy_j"].to_numpy(float)), self.predict_log(df))

    def coef_table(self) -> pd.DataFrame:
        ci = np.asarray(self.res_.conf_int(0.05))
        return pd.DataFrame({"term": self.terms_, "coef": self.coef_, "se": np.asarray(self.res_.bse),
                             "ci95_lo": ci[:, 0], "ci95_hi": ci[:, 1], "p": np.asarray(self.res_.pvalues)})


class PowerLaw(EnergyLaw):
    name = "powerlaw"
    description = "log E on log C_tok, log M (+ device terms)"

    def columns(self, df, fitting):  # noqa: ANN001, ANN201
        c, n = self._cats(df, fitting)
        return [np.log(df["C_tok"]), np.log(df["M"])] + c, ["log C", "log M"] + n


class PaperLaw(EnergyLaw):
    """The paper's law E = κ·C^αC·M^αM·η^αη·Ψ with measured η (post-run)."""

    name = "paper"
    post_run = True
    description = "log E on log C_tok, log M, log η (measured MFU), Ψ(strategy) (+ device terms)"

    def __init__(self, with_eta: bool = True, eta: str = "mfu") -> None:
        super().__init__()
        self.with_eta, self.eta = with_eta, eta
        if not with_eta:
            self.name, self.post_run = "paper-no-eta", False
            self.description = "the paper's law without η"
        elif eta == "speedup":
            self.name = "paper-speedup"
            self.description = "the paper's law with η = S(N)/N from the measured work-normalized speedup"

    def columns(self, df, fitting):  # noqa: ANN001, ANN201
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
        c, n = self._cats(df, fitting, ("strategy", "device"))
        return cols + c, names + n


class PreRunLaw(EnergyLaw):
    """The paper's law with η predicted before the run (see module docstring)."""

    name = "prerun"
    description = ("log E on log F_train, log C_tok, log M, log η̂ (η̂_hw from a time model fitted on "
                   "other configurations × η̂_par from the comm model or a speedup law), "
                   "log(TDP/peak), Ψ(strategy)")

    def __init__(self, speedup_fits: dict | None = None) -> None:
        super().__init__()
        self.speedup_fits = speedup_fits

    def eta_hat(self, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(η̂ = η̂_hw·η̂_par, η̂_hw, η̂_par) for the prepared rows ``df``."""
        t1 = self.eff_.time(df)
        hw = self.eff_.eta(df)
        par = parallel_eta(df, t1, self.speedup_fits)
        return hw * par, hw, par

    def columns(self, df, fitting):  # noqa: ANN001, ANN201
        if fitting:
            if "time_s" not in df or df["time_s"].isna().all():
                raise JouleboundError("the pre-run law is fitted on measured times of the training "
                                      "runs (time_s); the dataset has none")
            # single-GPU-equivalent time: t·N·η̂_par, with η̂_par from a first pass (1 GPU: exact)
            t = df["time_s"].to_numpy(float)
            n = df["gpus"].to_numpy(float)
            eff = EfficiencyModel().fit(df[n == 1] if (n == 1).sum() >= 5 else df, (t * n)[n == 1]
                                        if (n == 1).sum() >= 5 else t * n)
            par = parallel_eta(df, eff.time(df), self.speedup_fits)
            self.eff_ = EfficiencyModel().fit(df, t * n * par)
            self.multi_device_ = df["device"].nunique() > 1
            # few families: keep the physics core (log F, log η̂) to avoid fitting noise
            self.reduced_ = df["family"].nunique() < 10
        eta, _, _ = self.eta_hat(df)
        if getattr(self, "reduced_", False):
            cols, names = [np.log(df["F_train"]), np.log(eta)], ["log F", "log eta_hat"]
        else:
            cols = [np.log(df["F_train"]), np.log(df["C_tok"]), np.log(df["M"]), np.log(eta)]
            names = ["log F", "log C", "log M", "log eta_hat"]
        if self.multi_device_:
            cols.append(np.log(df["tdp_w"] / df["peak_flops"]))
            names.append("log TDP/peak")
        c, n = self._cats(df, fitting, ("strategy",))
        return cols + c, names + n

    def to_json(self) -> dict[str, Any]:
        return {"law": self.name, "terms": self.terms_, "coef": [float(c) for c in self.coef_],
                "se": [float(s) for s in np.asarray(self.res_.bse)], "keep": [bool(k) for k in self.keep_],
                "strategy_levels": self.strategy_levels_, "multi_device": bool(self.multi_device_),
                "efficiency_model": self.eff_.to_json(), "cov_type": self.cov_type_,
                "n": self.n_, "rsquared_adj": self.rsquared_adj_,
                "reduced": bool(getattr(self, "reduced_", False))}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PreRunLaw:
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

    def columns(self, df, fitting):  # noqa: ANN001, ANN201
        if "time_s" not in df or df["time_s"].isna().any():
            raise JouleboundError("device-seconds needs each run's measured time_s")
        c, n = self._cats(df, fitting)
        return [np.log(df["gpus"] * df["time_s"])] + c, ["log GPU-seconds"] + n


class ConfigOnly(EnergyLaw):
    name = "config-only"
    description = "log E on log L, d, S, B, h, N (+ device and strategy terms)"

    def columns(self, df, fitting):  # noqa: ANN001, ANN201
        cols = [np.log(df[c].astype(float)) for c in ("layers", "hidden", "seq", "batch", "heads", "gpus")]
        c, n = self._cats(df, fitting, ("strategy", "device"))
        return cols + c, ["log L", "log d", "log S", "log B", "log h", "log N"] + n


class AdditiveRoofline(EnergyLaw):
    """E = ε_C·C + ε_M·M + E0 per device by NNLS (C = F_train FLOP, M = B·S·d·L elements)."""

    name = "roofline"
    description = "E = eps_C*C + eps_M*M + E0 per device (NNLS, relative-error weights)"

    @staticmethod
    def _X(d: pd.DataFrame) -> np.ndarray:
        return np.column_stack([d["F_train"], d["M"], np.ones(len(d))]).astype(float)

    def fit(self, df: pd.DataFrame) -> AdditiveRoofline:
        from scipy.optimize import nnls

        d = prepare(df)
        self.coefs_: dict[str, np.ndarray] = {}
        for dev, g in d.groupby("device"):
            X, e = self._X(g), g["energy_j"].to_numpy(float)
            sc = np.maximum(X.max(axis=0), 1e-300)
            c, _ = nnls(X / sc / e[:, None], np.ones(len(e)))
            self.coefs_[str(dev)] = c / sc
        self.terms_ = ["eps_C (J/FLOP)", "eps_M (J/element)", "E0 (J)"]
        self.n_ = len(d)
        from .evaluate import adjusted_r2, r2

        y = np.log(d["energy_j"].to_numpy(float))
        self.rsquared_adj_ = adjusted_r2(r2(y, self.predict_log(d)), self.n_, len(self.coefs_) * 3)
        return self

    def predict_log(self, df: pd.DataFrame) -> np.ndarray:
        self.warnings_ = []
        d = prepare(df, need_energy=False) if "F_train" not in df else df
        pooled = np.mean(list(self.coefs_.values()), axis=0)
        C = np.empty((len(d), 3))
        for i, dev in enumerate(d["device"].astype(str)):
            c = self.coefs_.get(dev)
            if c is None:
                self.warnings_.append(f"device {dev!r} not in the training data: mean coefficients used")
                c = pooled
            C[i] = c
        out = np.sum(self._X(d) * C, axis=1)
        return np.log(np.maximum(out, 1e-9))

    def coef_table(self) -> pd.DataFrame:
        rows = [{"term": f"{t} [{dev}]", "coef": v, "se": np.nan, "ci95_lo": np.nan, "ci95_hi": np.nan,
                 "p": np.nan} for dev, c in self.coefs_.items() for t, v in zip(self.terms_, c, strict=True)]
        return pd.DataFrame(rows)


class HGBLaw(EnergyLaw):
    name = "hgb"
    description = "HistGradientBoostingRegressor on L, d, S, B, h, ff, params, N, strategy, peak, TDP → log E"

    def _F(self, d: pd.DataFrame) -> np.ndarray:
        strat = pd.Categorical(d["strategy"], categories=["single", "ddp", "fsdp", "tp", "pp"]).codes
        return np.column_stack([d["layers"], d["hidden"], d["seq"], d["batch"], d["heads"], d["ff"],
                                d["params"], d["gpus"], strat, np.log(d["peak_flops"]), d["tdp_w"]]).astype(float)

    def fit(self, df: pd.DataFrame) -> HGBLaw:
        from sklearn.ensemble import HistGradientBoostingRegressor

        d = prepare(df)
        from threadpoolctl import threadpool_limits

        self.model_ = HistGradientBoostingRegressor(max_iter=100, learning_rate=0.1, random_state=0)
        with threadpool_limits(1):  # OpenMP threads thrash on small data and busy machines
            self.model_.fit(self._F(d), np.log(d["energy_j"].to_numpy(float)))
        self.terms_, self.n_, self.rsquared_adj_ = [], len(d), float("nan")
        return self

    def predict_log(self, df: pd.DataFrame) -> np.ndarray:
        from threadpoolctl import threadpool_limits

        self.warnings_ = []
        with threadpool_limits(1):
            return self.model_.predict(self._F(prepare(df, need_energy=False)))

    def coef_table(self) -> pd.DataFrame:
        return pd.DataFrame(columns=["term", "coef", "se", "ci95_lo", "ci95_hi", "p"])


LAWS: dict[str, Any] = {
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
