"""Honest evaluation of the energy laws: one table per dataset.

For each law: in-sample adjusted R² (log E); grouped K-fold held-out R² of log E, RMSE of log E
and MAPE of E with scikit-learn's ``GroupKFold`` by configuration ``family`` (no family is both
fitted and scored); a scale-shift test (fit on the smaller half of the models by parameter count,
predict the larger half); split-conformal 90 % intervals — inside each fold a fifth of the training families is held
out to calibrate |log residual|, the interval exp(log Ê ± q) is scored on the test fold — with their
empirical coverage. All figures are "modeled" (a model's error against "measured" energy).

The paper's own figures (Zoubeirou a Mayaki, arXiv 2606.23546, 410 BERT configurations on
8× RTX 2080 Ti) are kept in :data:`PUBLISHED`, labeled published, and only shown beside ours.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from joulebound.core import provenance
from joulebound.jobs.laws import EnergyLaw, make_law, prepare
from joulebound.jobs.metrics import adjusted_r2, conformal_quantile, mape, r2, rmse

__all__ = ["DEFAULT_LAWS", "PUBLISHED", "adjusted_r2", "conformal_quantile", "cross_validate",
           "evaluate", "mape", "r2", "rmse", "scale_shift"]

PUBLISHED = {
    "citation": "Zoubeirou a Mayaki, The Energy Consumption of Transformer Fine-Tuning: A "
                "Roofline-Inspired Scaling Model, arXiv 2606.23546",
    "provenance": provenance.PUBLISHED,
    "adj_r2_with_eta": 0.853, "adj_r2_without_eta": 0.777, "alpha_C": 0.20, "alpha_eta": -1.06,
    "setting": "410 BERT configurations, 8x RTX 2080 Ti, eta measured from the same runs",
}

DEFAULT_LAWS = ("roofline", "powerlaw", "paper-no-eta", "paper", "prerun", "device-seconds",
                "config-only", "hgb")


def cross_validate(df: pd.DataFrame, law: str | EnergyLaw, k: int = 5, alpha: float = 0.1,
                   seed: int = 0) -> dict:
    """Grouped K-fold held-out metrics of ``law`` (a ``--law`` name or an unfitted estimator)
    plus split-conformal coverage.

    Folds are scikit-learn's :class:`~sklearn.model_selection.GroupKFold` over ``family`` (whole
    families, balanced by size), run by :func:`sklearn.model_selection.cross_validate` on clones
    of the law. Inside each fold a fifth of the training families
    (:class:`~sklearn.model_selection.GroupShuffleSplit`, seeded by ``seed``) is held out to
    calibrate the conformal quantile of |log residual| (:func:`~joulebound.jobs.metrics.
    conformal_quantile` at level 1 − ``alpha``) of a law fitted on the rest."""
    from sklearn.base import clone
    from sklearn.model_selection import GroupKFold, GroupShuffleSplit
    from sklearn.model_selection import cross_validate as sk_cross_validate

    name = law if isinstance(law, str) else law.name
    d = df.reset_index(drop=True)
    groups = d["family"].astype(str).to_numpy()
    k = min(k, len(np.unique(groups)))
    if k < 2:
        return {"law": name, "k": k, "note": "fewer than 2 families: no held-out evaluation"}
    est = make_law(law) if isinstance(law, str) else law
    energy = d["energy_j"].to_numpy(float)
    y = np.log(energy)
    cv = sk_cross_validate(est, d, energy, groups=groups, cv=GroupKFold(n_splits=k),
                           return_estimator=True, return_indices=True, error_score="raise")
    pred = np.full(len(d), np.nan)
    lo, hi = np.full(len(d), np.nan), np.full(len(d), np.nan)
    rng = np.random.RandomState(seed)
    for fitted, tr, te in zip(cv["estimator"], cv["indices"]["train"], cv["indices"]["test"],
                              strict=True):
        pred[te] = fitted.predict_log(d.iloc[te])
        fams = np.unique(groups[tr])
        if len(fams) >= 5:
            split = GroupShuffleSplit(n_splits=1, test_size=max(1, len(fams) // 5),
                                      random_state=rng)
            fit_i, cal_i = next(split.split(tr, groups=groups[tr]))
            m = clone(est).fit(d.iloc[tr[fit_i]])
            cal = tr[cal_i]
            q = conformal_quantile(np.abs(y[cal] - m.predict_log(d.iloc[cal])), alpha)
            p_te = m.predict_log(d.iloc[te])
            lo[te], hi[te] = p_te - q, p_te + q
    cov = np.isfinite(lo)
    return {"law": name, "k": k, "r2_log": r2(y, pred), "rmse_log": rmse(y, pred),
            "mape": mape(np.exp(y), np.exp(pred)),
            "conformal_coverage": float(np.mean((y[cov] >= lo[cov]) & (y[cov] <= hi[cov]))) if cov.any() else None,
            "conformal_median_width_factor": float(np.exp(np.median(hi[cov] - lo[cov]) / 2)) if cov.any() else None,
            "oof_log_pred": pred}


def scale_shift(df: pd.DataFrame, law: str) -> dict:
    """Fit on configurations with params ≤ median, predict those above (extrapolation test)."""
    d = prepare(df)
    small = d["params"] <= d["params"].median()
    if small.all() or (~small).all() or small.sum() < 5:
        return {"law": law, "note": "not enough size spread for a scale-shift test"}
    m = make_law(law).fit(d[small])
    big = d[~small]
    y, p = np.log(big["energy_j"].to_numpy(float)), m.predict_log(big)
    return {"law": law, "r2_log": r2(y, p), "rmse_log": rmse(y, p), "mape": mape(np.exp(y), np.exp(p)),
            "n_fit": int(small.sum()), "n_pred": int((~small).sum())}


def evaluate(df: pd.DataFrame, laws: tuple[str, ...] = DEFAULT_LAWS, k: int = 5,
             progress=None) -> pd.DataFrame:
    """The evaluation table for one dataset: one row per law (see module docstring)."""
    d = prepare(df)
    rows = []
    for name in laws:
        law = make_law(name)
        try:
            law.fit(d)
        except Exception as exc:  # a law that cannot be fitted on this data is reported, not fatal
            rows.append({"law": name, "note": str(exc)})
            continue
        p = len(law.terms_) - 1 if law.terms_ and law.terms_[0] == "const" else len(law.terms_)
        y = np.log(d["energy_j"].to_numpy(float))
        r2_in = r2(y, law.predict_log(d))
        row = {"law": name, "post_run": bool(law.post_run), "n": len(d),
               "families": int(d["family"].nunique()), "adj_r2_in_sample":
               adjusted_r2(r2_in, len(d), p) if name != "hgb" else np.nan}
        cv = cross_validate(d, name, k)
        row.update({f"cv_{kk}": v for kk, v in cv.items() if kk not in ("law", "oof_log_pred")})
        ss = scale_shift(d, name)
        row.update({f"shift_{kk}": v for kk, v in ss.items() if kk != "law"})
        rows.append(row)
        if progress:
            progress(name)
    return pd.DataFrame(rows)
