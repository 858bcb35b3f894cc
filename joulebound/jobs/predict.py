"""What ``joulebound predict`` computes for one job or a table of jobs (the command only parses
and prints).

The mechanistic predictor is the default; ``law`` selects an energy law of the seed paper
(:func:`joulebound.jobs.predictors.fitted_predictor`). Both return the one result type,
:class:`~joulebound.jobs.prediction.JobPrediction`. The mechanistic path imports no
scikit-learn (it calls :mod:`joulebound.jobs.mechanistic` directly, as
:class:`~joulebound.jobs.predictors.MechanisticPredictor` does), so the command stays quick.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from joulebound.core.errors import JouleboundError
from joulebound.jobs.defaults import is_law_file
from joulebound.jobs.job import Job, resolve
from joulebound.jobs.prediction import JobPrediction

MECHANISTIC = "mechanistic"
__all__ = ["CHUNK_ROWS", "is_law_file", "law_name", "predict_job", "predict_rows", "predict_table"]

#: jobs of a table predicted together by :func:`predict_rows`: memory stays bounded however
#: long the table (100,000 rows held at once took 1-3 GB), and each chunk keeps the model's
#: one call per device
CHUNK_ROWS = 2048


def law_name(law: str | None, coefficients: str | Path | None = None) -> str | None:
    """The energy law a request names (``prerun`` for a law coefficients file), or ``None`` for
    the mechanistic predictor; unknown names raise listing the choices."""
    if law is None and is_law_file(coefficients):
        law = "prerun"
    if law is None or str(law).strip().lower() == MECHANISTIC:
        return None
    from joulebound.jobs.predictors import make_predictor

    return make_predictor(law).name


def predict_job(job: Job, law: str | None = None, coefficients: str | Path | None = None,
                data: str | Path | None = None, allow_oom: bool = False) -> JobPrediction:
    """One job's prediction: the mechanistic predictor (calibration: shipped or
    ``coefficients``; a job that does not fit in GPU memory is refused unless ``allow_oom``), or
    the energy law ``law`` (built-in / saved pre-run law, or fitted on the Mayaki data at
    ``data``), which prices whole jobs and so needs ``job.tokens``."""
    name = law_name(law, coefficients)
    if name is None:
        from joulebound.jobs.mechanistic import load_params, predict_jobs

        return predict_jobs([job], load_params(coefficients), allow_oom)[0]
    from joulebound.jobs.predictors import fitted_predictor

    r = resolve(job)  # an impossible job is refused before anything is fitted
    if r.config.modern or r.config.lora_rank:
        raise JouleboundError(f"--law {name}: the legacy laws price the GPT-2 / BERT layout under "
                              "full fine-tuning only; drop --law to price a Llama-style shape or "
                              "LoRA with the mechanistic predictor")
    if not job.tokens:
        raise JouleboundError("--law needs --tokens (the legacy laws price whole jobs)")
    return fitted_predictor(name, coefficients, data).predict_jobs([job])[0]


def predict_table(jobs: Sequence[Job | None], coefficients: str | Path | None = None
                  ) -> list[JobPrediction | str]:
    """``predict --jobs``: every job of a table by the mechanistic predictor; a job that cannot
    be priced (or ``None``) gives its error message instead of stopping the others."""
    from joulebound.jobs.mechanistic import load_params, predict_many

    return predict_many(jobs, load_params(coefficients))


def predict_rows(rows: Iterable[tuple[Job | None, dict, str]],
                 coefficients: str | Path | None = None, chunk_rows: int | None = None
                 ) -> Iterator[tuple[tuple[Job | None, dict, str], JobPrediction | str]]:
    """``predict --jobs`` on a stream of rows (:func:`joulebound.jobs.jobtable.iter_jobs`):
    ``(row, prediction or error message)`` per row, in order, predicted ``chunk_rows`` at a time
    (default :data:`CHUNK_ROWS`) by the mechanistic predictor, so at most one chunk of jobs and
    predictions is held. A row that came with an error keeps it."""
    from joulebound.jobs.mechanistic import load_params

    prm = load_params(coefficients)
    size = max(1, CHUNK_ROWS if chunk_rows is None else chunk_rows)
    chunk: list[tuple[Job | None, dict, str]] = []

    def flush() -> Iterator[tuple[tuple[Job | None, dict, str], JobPrediction | str]]:
        from joulebound.jobs.mechanistic import predict_many

        preds = predict_many([j for j, _, _ in chunk], prm)
        for row, p in zip(chunk, preds, strict=True):
            yield row, (row[2] or p or "not priced") if isinstance(p, str) else p
        chunk.clear()

    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield from flush()
    if chunk:
        yield from flush()
