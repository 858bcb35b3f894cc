"""Every job predictor by name, the mechanistic one as the default, and what ``predict`` does.

:data:`PREDICTORS` maps a name to a fresh (unfitted) :class:`~joulebound.jobs.predictor.
JobPredictor`: ``mechanistic`` (:class:`MechanisticPredictor`, the default) and every energy law
of :data:`joulebound.jobs.laws.LAWS` (``paper``, ``paper-no-eta``, ``prerun``, …).
:func:`fitted_predictor` gives the fitted predictor of a name (the shipped calibration, a saved
file, the built-in pre-run law, or a law fitted on the open data); what ``joulebound predict``
computes is :func:`joulebound.jobs.predict.predict_job`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from joulebound.core.errors import JouleboundError, did_you_mean
from joulebound.jobs.host import HostPower
from joulebound.jobs.job import Job
from joulebound.jobs.mechanistic import MechParams, load_params, predict_jobs, predict_many
from joulebound.jobs.prediction import JobPrediction
from joulebound.jobs.predictor import JobPredictor

MECHANISTIC = "mechanistic"


class MechanisticPredictor(JobPredictor):
    """The mechanistic predictor (:mod:`joulebound.jobs.mechanistic`) on the predictor contract.

    Args:
        framework_known: the calibration data comes from the user's own framework (a sweep
            store), so the framework factor's spread across frameworks is not added to the
            interval (:func:`joulebound.jobs.calibrate.fit`).
        host: host CPU + DRAM power per GPU to calibrate with (default: the built-in prior).

    ``fit(X)`` calibrates on measured steps ``X`` (a list of
    :class:`~joulebound.jobs.calibrate.Obs` or a :class:`~joulebound.jobs.calibrate.Prepared`;
    they carry their measured time and energy, ``y`` is unused). Fitted: ``params_``
    (:class:`~joulebound.jobs.mechanistic.MechParams`). ``predict(jobs)`` gives each job's total
    (GPU + host) energy in J; :meth:`predict_jobs` the whole :class:`JobPrediction`.
    :meth:`shipped` is the predictor with the calibration shipped in the package."""

    name = MECHANISTIC

    def __init__(self, framework_known: bool = False, host: HostPower | None = None) -> None:
        self.framework_known = framework_known
        self.host = host

    def fit(self, X: Any, y: Any = None) -> MechanisticPredictor:
        from joulebound.jobs.calibrate import Prepared, fit, prepare

        prep = X if isinstance(X, Prepared) else prepare(list(X))
        base = MechParams() if self.host is None else replace(MechParams(), host=self.host)
        self.params_ = fit(prep, base, framework_known=self.framework_known)
        return self

    def predict(self, X: Sequence[Job]) -> np.ndarray:
        """Total (GPU + host) energy of each job (J)."""
        return np.array([p.total_energy_j for p in self.predict_jobs(X)], dtype=float)

    def predict_jobs(self, jobs: Sequence[Job], allow_oom: bool = True) -> list[JobPrediction]:
        """Each job's :class:`JobPrediction`; ``allow_oom=False`` refuses a job that does not fit
        in GPU memory."""
        check_is_fitted(self)
        return predict_jobs(jobs, self.params_, allow_oom)

    def predict_many(self, jobs: Sequence[Job | None]) -> list[JobPrediction | str]:
        """Like :meth:`predict_jobs` for a table: a job that cannot be priced gives its error
        message instead of stopping the others."""
        check_is_fitted(self)
        return predict_many(jobs, self.params_)

    def to_record(self) -> dict:
        check_is_fitted(self)
        return self.params_.to_json()

    @classmethod
    def from_record(cls, doc: dict, path: str | Path | None = None) -> MechanisticPredictor:
        pred = cls()
        pred.params_ = MechParams.from_json(doc)
        return pred

    @classmethod
    def shipped(cls, path: str | Path | None = None) -> MechanisticPredictor:
        """The shipped calibration (``joulebound/jobs/data/mechanistic.json``), or the one saved
        at ``path`` (:func:`~joulebound.jobs.mechanistic.load_params`)."""
        pred = cls()
        pred.params_ = load_params(path)
        return pred


def _law_factories() -> dict[str, Callable[[], JobPredictor]]:
    from joulebound.jobs.laws import LAWS

    return dict(LAWS)


def predictor_names() -> list[str]:
    """``mechanistic`` and every law name."""
    return [MECHANISTIC, *_law_factories()]


def make_predictor(name: str = MECHANISTIC) -> JobPredictor:
    """A fresh (unfitted) predictor by name; unknown names raise listing the choices."""
    key = str(name).strip().lower()
    if key == MECHANISTIC:
        return MechanisticPredictor()
    laws = _law_factories()
    if key not in laws:
        raise JouleboundError(f"unknown energy law {name!r}." + did_you_mean(key, list(laws)))
    return laws[key]()


def fitted_predictor(law: str | None = None, coefficients: str | Path | None = None,
                     data: str | Path | None = None) -> JobPredictor:
    """The fitted predictor for ``joulebound predict [--law NAME] [--coefficients FILE]``.

    * no ``law`` (or ``mechanistic``): the mechanistic predictor with the shipped calibration or
      the one saved at ``coefficients``; a pre-run law file there selects ``prerun``;
    * ``prerun``: the built-in pre-run law, or the one saved at ``coefficients``;
    * any other law: fitted on the Mayaki data of the shared data folder ``data``
      (default ``$JOULEBOUND_DATA``), labeled with that folder."""
    from joulebound.jobs.defaults import is_law_file

    if law is None and is_law_file(coefficients):
        law = "prerun"
    key = MECHANISTIC if law is None else str(law).strip().lower()
    est = make_predictor(key)  # unknown names fail before any file is read
    if key == MECHANISTIC:
        return MechanisticPredictor.shipped(coefficients)
    if key == "prerun":
        from joulebound.jobs.defaults import load_default

        return load_default(coefficients)[0]
    from joulebound.core.datapath import find_data
    from joulebound.jobs.datasets import load

    root = find_data(data, required=True)
    df = load(root / "mayaki_ecai2025" if (root / "mayaki_ecai2025").exists() else root)
    est.fit(df)
    est.source_ = f"fitted on {root}"
    return est
