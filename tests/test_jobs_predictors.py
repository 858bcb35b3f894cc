"""Every job predictor keeps the one contract (joulebound.jobs.predictor.JobPredictor).

``sklearn.base.clone`` / ``get_params`` / ``set_params`` for every predictor and the speedup laws;
fit → predict → save → load → the same predictions; ``predict_jobs`` gives the one result type.
scikit-learn's ``check_estimator`` runs on the mechanistic predictor with the checks that need no
data (its inputs are measured training steps and jobs, not numeric arrays: the array checks are
expected failures with that reason); the laws' own ``check_estimator`` run is in
test_jobs_sklearn.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from _law_synth import synth
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import check_estimator
from test_jobs_sklearn import ARRAY_DATA_CHECKS

from joulebound.jobs.calibrate import Obs
from joulebound.jobs.design import EfficiencyModel, prepare
from joulebound.jobs.job import Job
from joulebound.jobs.prediction import JobPrediction
from joulebound.jobs.predictor import JobPredictor, load_predictor
from joulebound.jobs.predictors import MechanisticPredictor, make_predictor, predictor_names
from joulebound.jobs.speedup import AmdahlSpeedup, TPSpeedup

NOT_ARRAYS = "fits or predicts on generated numeric arrays, not this estimator's inputs (see the test)"

JOBS = [Job(layers=L, hidden=d, heads=d // 64, seq=s, batch=b, device="a100-pcie-80gb",
            dtype="fp16", tokens=1e8, name=f"j{i}")
        for i, (L, d, s, b) in enumerate((L, d, s, b) for L in (2, 6, 12) for d in (256, 768)
                                         for s in (128, 512) for b in (4, 16))]


@pytest.mark.parametrize("name", predictor_names())
def test_every_predictor_is_cloneable_and_unfitted_until_fit(name) -> None:
    p = make_predictor(name)
    assert isinstance(p, JobPredictor) and p.name == name
    c = clone(p)
    assert type(c) is type(p) and c.get_params() == p.get_params()
    assert c.set_params(**p.get_params()) is c
    with pytest.raises(NotFittedError):
        p.predict_jobs(JOBS[:1])
    with pytest.raises(NotFittedError):
        p.save("unused.json")


def test_speedup_laws_are_cloneable_estimators() -> None:
    for law in (TPSpeedup(), AmdahlSpeedup()):
        fitted = clone(law).fit([1, 2, 4, 8], [1.0, 1.8, 3.1, 4.9])
        assert clone(fitted).get_params() == {} and not hasattr(clone(fitted), "fit_")
        with pytest.raises(NotFittedError):
            clone(fitted).predict([2])
        assert fitted.predict([1])[0] == pytest.approx(1.0)


def _law_frame(n: int = 300, seed: int = 0):
    d = prepare(synth(n, seed=seed), need_energy=False)
    rng = np.random.default_rng(seed + 1)
    d["time_s"] = EfficiencyModel._X(d) @ np.array([1.5, 10, 5, 0.02, 0.05])
    d["energy_j"] = 90 * d["time_s"] * np.exp(rng.normal(0, 0.05, len(d)))
    d["speedup"] = np.nan
    return d.drop(columns=["F_train", "F_dense", "F_attn", "C_tok", "M", "A_elems"], errors="ignore")


@pytest.mark.parametrize("name", [n for n in predictor_names() if n != "mechanistic"])
def test_law_fit_predict_save_load_round_trip(name, tmp_path) -> None:
    X = _law_frame()
    law = make_predictor(name).fit(X.drop(columns=["energy_j"]), X["energy_j"].to_numpy())
    e = law.predict(X)
    jobs = [j for j in JOBS if j.seq <= 512][:4]
    if name in ("device-seconds", "paper", "paper-speedup"):  # post-run: need the run's own time
        with pytest.raises(Exception, match="time_s|speedup"):
            law.predict_jobs(jobs)
        whole = None
    else:
        whole = law.predict_jobs(jobs)
        assert all(isinstance(p, JobPrediction) and p.total_energy_j > 0 for p in whole)
        assert [p.name for p in whole] == [j.name for j in jobs]
    path = law.save(tmp_path / f"{name}.law")
    back = load_predictor(path)
    assert type(back) is type(law) and back.get_params() == law.get_params()
    assert np.allclose(back.predict(X), e, rtol=1e-12)
    if whole is not None:
        assert [p.total_energy_j for p in back.predict_jobs(jobs)] == pytest.approx(
            [p.total_energy_j for p in whole], rel=1e-12)


def test_mechanistic_fit_predict_save_load_round_trip(tmp_path) -> None:
    """Calibrated on steps measured 1.3× slower (and costlier) than the shipped calibration
    predicts, the refitted predictor predicts about 1.3× the energy; saved and loaded, it
    predicts exactly the same."""
    shipped = MechanisticPredictor.shipped()
    base = shipped.predict_jobs([Job(**{**vars(j), "tokens": None}) for j in JOBS])
    obs = [Obs("synthetic", f"f{i % 6}", j, 1.3 * p.time_s, 1.3 * p.gpu_energy_j, "nvml")
           for i, (j, p) in enumerate(zip(JOBS, base, strict=True))]
    m = MechanisticPredictor().fit(obs)
    assert m.params_.kappa > shipped.params_.kappa
    ratio = np.median(m.predict(JOBS) / shipped.predict(JOBS))
    assert ratio == pytest.approx(1.3, rel=0.05)
    path = m.save(tmp_path / "mech.json")
    back = MechanisticPredictor.load(path)
    assert isinstance(back, MechanisticPredictor)
    assert back.params_ == m.params_
    assert [p.to_json() for p in back.predict_jobs(JOBS)] == [p.to_json() for p in m.predict_jobs(JOBS)]
    assert clone(m).get_params() == m.get_params() and not hasattr(clone(m), "params_")


MUST_PASS = {"check_estimator_cloneable", "check_get_params_invariance", "check_set_params",
             "check_no_attributes_set_in_init", "check_parameters_default_constructible",
             "check_estimators_unfitted", "check_estimator_repr", "check_mixin_order"}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("est", [MechanisticPredictor(), TPSpeedup(), AmdahlSpeedup()],
                         ids=lambda e: type(e).__name__)
def test_the_sklearn_checks_that_apply(est) -> None:
    """The same expected failures as the laws (test_jobs_sklearn.ARRAY_DATA_CHECKS): the
    checks that fit or predict on generated numeric arrays. The mechanistic predictor fits on
    measured training steps and predicts jobs; a speedup law fits S(N) on 1-D GPU counts and
    refuses counts below 1 (generated data has them)."""
    results = check_estimator(est, on_fail=None, on_skip=None,
                              expected_failed_checks=dict.fromkeys(ARRAY_DATA_CHECKS, NOT_ARRAYS))
    failed = [r["check_name"] for r in results if r["status"] == "failed"]
    passed = {r["check_name"] for r in results if r["status"] == "passed"}
    assert failed == []
    assert MUST_PASS <= passed


def test_load_refuses_the_wrong_kind_and_foreign_files(tmp_path) -> None:
    from joulebound.core.errors import JouleboundError
    from joulebound.jobs.defaults import default_path

    law = JobPredictor.load(default_path())  # the shipped pre-run law file
    assert law.name == "prerun" and law.predict_jobs(JOBS[:1])[0].time_s > 0
    with pytest.raises(JouleboundError, match="not a MechanisticPredictor"):
        MechanisticPredictor.load(default_path())
    (tmp_path / "x.json").write_text('{"schema": "something/else"}')
    with pytest.raises(JouleboundError, match="not a joulebound predictor file"):
        load_predictor(tmp_path / "x.json")
    with pytest.raises(JouleboundError, match="not found"):
        load_predictor(tmp_path / "missing.json")
