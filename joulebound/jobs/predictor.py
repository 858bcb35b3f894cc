"""The one job-predictor contract, scikit-learn style.

Every predictor of a training job's time and energy — the mechanistic predictor (the default,
:class:`~joulebound.jobs.predictors.MechanisticPredictor`) and the seed paper's energy laws
(:mod:`joulebound.jobs.laws`: ``paper``, ``paper-no-eta``, ``prerun``, ``powerlaw``,
``roofline``, …) — is a :class:`JobPredictor`:

* ``__init__`` only stores hyper-parameters; ``get_params`` / ``set_params`` /
  :func:`sklearn.base.clone` work (scikit-learn's ``BaseEstimator``);
* ``fit(X, y=None)`` learns from measured data and returns ``self``; everything it learns is an
  attribute ending in ``_``; an unfitted predictor raises ``NotFittedError``
  (:func:`sklearn.utils.validation.check_is_fitted`);
* ``predict(X)`` → an array of energies (J) of the rows of ``X``;
* ``predict_jobs(jobs)`` → one :class:`~joulebound.jobs.prediction.JobPrediction` per
  :class:`~joulebound.jobs.job.Job` (the one result type: time, energy, intervals, warnings);
* ``save(path)`` / ``JobPredictor.load(path)`` round-trip a fitted predictor. Predictors with a
  JSON schema (the mechanistic calibration ``joulebound.scaling.mechanistic/1`` and the pre-run
  law ``joulebound.scaling.default/1``: what ``joulebound fit --save`` writes and
  ``--coefficients`` reads) are saved as that JSON; the others (statsmodels / gradient-boosting
  fits) with :mod:`pickle`, as scikit-learn persists estimators — load only files you trust.

What ``X`` is depends on the predictor's inputs: the mechanistic predictor is fitted on measured
steps (:class:`~joulebound.jobs.calibrate.Obs`) and predicts jobs; a law is fitted on and predicts
rows of the common-schema frame (:mod:`joulebound.jobs.datasets`).
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from joulebound.core.errors import JouleboundError
from joulebound.jobs.job import Job
from joulebound.jobs.prediction import JobPrediction

#: JSON schema id -> the predictor class that reads it ("module:class", imported when a file of
#: that schema is loaded: the laws import scikit-learn and statsmodels only then)
SCHEMAS: dict[str, str] = {
    "joulebound.scaling.mechanistic/1": "joulebound.jobs.predictors:MechanisticPredictor",
    "joulebound.scaling.default/1": "joulebound.jobs.laws:PreRunLaw",
}
_PICKLE_TAG = b"joulebound.jobs.predictor/pickle/1\n"


class JobPredictor(BaseEstimator):
    """Base class of every job predictor (see the module docstring)."""

    #: the predictor's name (``--law`` value; ``"mechanistic"`` for the default)
    name: ClassVar[str] = "base"

    def fit(self, X: Any, y: Any = None) -> JobPredictor:
        """Learn from measured data ``X`` (energy ``y`` in J where the rows do not carry it)."""
        raise NotImplementedError

    def predict(self, X: Any) -> np.ndarray:
        """Energies (J) of the rows of ``X``."""
        raise NotImplementedError

    def predict_jobs(self, jobs: Sequence[Job]) -> list[JobPrediction]:
        """One :class:`JobPrediction` per job."""
        raise NotImplementedError

    # -- persistence ------------------------------------------------------------------------------
    def to_record(self) -> dict | None:
        """The JSON document :meth:`save` writes (with its ``schema``), or ``None`` when the
        predictor has no JSON form (then :meth:`save` pickles it)."""
        return None

    @classmethod
    def from_record(cls, doc: dict, path: str | Path | None = None) -> JobPredictor:
        """A fitted predictor from :meth:`to_record`'s document (``path`` names its file)."""
        raise NotImplementedError

    def save(self, path: str | Path) -> Path:
        """Write the fitted predictor to ``path`` (JSON when it has a schema, else pickle)."""
        check_is_fitted(self)
        p = Path(path)
        doc = self.to_record()
        try:
            if doc is not None:
                p.write_text(json.dumps(doc, indent=1) + "\n")
            else:
                p.write_bytes(_PICKLE_TAG + pickle.dumps(self))
        except OSError as exc:
            raise JouleboundError(f"{p}: cannot write ({exc.strerror})") from None
        return p

    @classmethod
    def load(cls, path: str | Path) -> JobPredictor:
        """A fitted predictor saved by :meth:`save` (or by ``joulebound fit --save``); called on
        a subclass, the file must hold that kind of predictor."""
        obj = load_predictor(path)
        if not isinstance(obj, cls):
            raise JouleboundError(f"{path} holds a {type(obj).__name__} ({obj.name}), not a "
                                  f"{cls.__name__}")
        return obj


def _class(ref: str) -> type[JobPredictor]:
    import importlib

    mod, name = ref.split(":")
    return getattr(importlib.import_module(mod), name)


def load_predictor(path: str | Path) -> JobPredictor:
    """Read a predictor file (see :meth:`JobPredictor.save`); a JSON file is recognised by its
    ``schema`` (:data:`SCHEMAS`)."""
    p = Path(path)
    if not p.exists():
        raise JouleboundError(f"predictor file not found: {p}")
    if not p.is_file():
        raise JouleboundError(f"{p} is not a file; pass the file written by `joulebound fit --save`")
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise JouleboundError(f"{p}: cannot be read ({exc.strerror})") from None
    if raw.startswith(_PICKLE_TAG):
        obj = pickle.loads(raw[len(_PICKLE_TAG):])  # files the user saved (see the docstring)
        if not isinstance(obj, JobPredictor):
            raise JouleboundError(f"{p}: not a joulebound predictor")
        return obj
    try:
        doc = json.loads(raw)
        ref = SCHEMAS[doc["schema"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise JouleboundError(f"{p}: not a joulebound predictor file ({exc})") from None
    return _class(ref).from_record(doc, p)

