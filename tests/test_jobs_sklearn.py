"""The energy laws keep the scikit-learn estimator contract.

``sklearn.utils.estimator_checks`` runs every check that does not need to fit: the constructor
takes only hyper-parameters, ``get_params`` / ``set_params`` / ``clone`` round-trip them, ``fit``
is the only place fitted state appears, an unfitted law raises ``NotFittedError``. The checks that
fit or predict on generated anonymous numeric arrays do not apply: a law reads named columns of a
common-schema frame (layers, hidden, seq, batch, device, ...), so they are listed below as
expected failures with that reason, and the same properties (fit returns self, is idempotent, does
not change the parameters, predict does not change the law, subset and order invariance, pickling)
are checked on schema rows instead.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from _law_synth import synth
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GroupKFold
from sklearn.model_selection import cross_validate as sk_cross_validate
from sklearn.utils.estimator_checks import check_estimator

from joulebound.jobs.laws import LAWS, EfficiencyModel, make_law, prepare

NEEDS_SCHEMA_FRAME = "fits or predicts on anonymous numeric arrays; a law reads a common-schema frame"
#: estimator checks that fit or predict on generated numeric arrays (not a common-schema frame)
ARRAY_DATA_CHECKS = (
    "check_complex_data", "check_dict_unchanged", "check_dont_overwrite_parameters",
    "check_dtype_object", "check_estimator_sparse_array", "check_estimator_sparse_matrix",
    "check_estimator_sparse_tag", "check_estimators_dtypes", "check_estimators_empty_data_messages",
    "check_estimators_fit_returns_self", "check_estimators_nan_inf",
    "check_estimators_overwrite_params", "check_estimators_pickle",
    "check_f_contiguous_array_estimator", "check_fit1d", "check_fit2d_1feature",
    "check_fit2d_1sample", "check_fit2d_predict1d", "check_fit_check_is_fitted",
    "check_fit_idempotent", "check_fit_score_takes_y", "check_methods_sample_order_invariance",
    "check_methods_subset_invariance", "check_n_features_in", "check_n_features_in_after_fitting",
    "check_pipeline_consistency", "check_positive_only_tag_during_fit",
    "check_readonly_memmap_input", "check_regressor_data_not_an_array", "check_regressors_int",
    "check_regressors_no_decision_function", "check_regressors_train", "check_requires_y_none",
    "check_supervised_y_2d", "check_supervised_y_no_nan",
    # HGBLaw has max_iter: the check fits on arrays to look for n_iter_
    "check_non_transformer_estimators_n_iter",
)
#: checks that must pass for every law (they need no data)
MUST_PASS = {"check_estimator_cloneable", "check_get_params_invariance", "check_set_params",
             "check_no_attributes_set_in_init", "check_parameters_default_constructible",
             "check_estimators_unfitted", "check_mixin_order", "check_estimator_repr"}


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
@pytest.mark.parametrize("name", list(LAWS))
def test_laws_pass_the_sklearn_checks_that_apply(name) -> None:
    results = check_estimator(make_law(name), on_fail=None, on_skip=None,
                              expected_failed_checks=dict.fromkeys(ARRAY_DATA_CHECKS,
                                                                   NEEDS_SCHEMA_FRAME))
    failed = [r["check_name"] for r in results if r["status"] == "failed"]
    passed = {r["check_name"] for r in results if r["status"] == "passed"}
    assert failed == []
    assert MUST_PASS <= passed


def _frame(n: int = 300, seed: int = 0):
    d = prepare(synth(n, seed=seed), need_energy=False)
    rng = np.random.default_rng(seed + 1)
    d["time_s"] = EfficiencyModel._X(d) @ np.array([1.5, 10, 5, 0.02, 0.05])
    d["energy_j"] = 90 * d["time_s"] * np.exp(rng.normal(0, 0.05, len(d)))
    return d.drop(columns=["F_train", "F_dense", "F_attn", "C_tok", "M", "A_elems"],
                  errors="ignore")


@pytest.fixture(scope="module")
def frame():
    return _frame()


@pytest.mark.parametrize("name", list(LAWS))
def test_estimator_invariants_on_schema_rows(name, frame) -> None:
    if name == "paper-speedup":
        frame = frame.assign(speedup=np.nan)  # single-GPU rows: η = 1, the column must exist
    law = make_law(name)
    params = law.get_params(deep=True)
    with pytest.raises(NotFittedError):
        law.predict(frame)
    X, y = frame.drop(columns=["energy_j"]), frame["energy_j"].to_numpy()
    assert law.fit(X, y) is law
    assert law.get_params(deep=True).keys() == params.keys()
    assert all(law.get_params()[k] is v or law.get_params()[k] == v for k, v in params.items())
    p = law.predict(X)
    state = {k: v for k, v in vars(law).items()}
    law.predict(X.iloc[:10])
    law.prediction_warnings(X)
    assert vars(law).keys() == state.keys() and all(vars(law)[k] is v for k, v in state.items())
    assert np.allclose(law.predict(X.iloc[::-1]), p[::-1])        # row order
    assert np.allclose(law.predict(X.iloc[50:80]), p[50:80])      # subsets
    assert np.allclose(clone(law).fit(X, y).predict(X), p)        # idempotent, from a clone
    assert np.allclose(pickle.loads(pickle.dumps(law)).predict(X), p)
    assert law.score(X, y) == pytest.approx(law.score(frame))     # y or X["energy_j"]
    with pytest.raises(NotFittedError):
        clone(law).predict(X)


def test_sklearn_cross_validate_with_group_kfold(frame) -> None:
    """A law goes straight into sklearn's model selection: no family is in both halves of a
    fold, and the fold scores are the law's own R² of log E."""
    groups = frame["family"].to_numpy()
    res = sk_cross_validate(make_law("prerun"), frame, frame["energy_j"], groups=groups,
                            cv=GroupKFold(n_splits=5), return_estimator=True,
                            return_indices=True)
    for tr, te in zip(res["indices"]["train"], res["indices"]["test"], strict=True):
        assert not set(groups[tr]) & set(groups[te])
    for est, te, score in zip(res["estimator"], res["indices"]["test"], res["test_score"],
                              strict=True):
        assert score == pytest.approx(est.score(frame.iloc[te]))
    assert np.min(res["test_score"]) > 0.9  # 5 % noise around a law of the fitted form


def test_fit_leaves_the_warning_filters_alone(frame) -> None:
    """Fitting silences statsmodels' rank-deficiency warning for that call only."""
    import warnings

    before = list(warnings.filters)
    make_law("paper-no-eta").fit(frame)
    assert warnings.filters == before
