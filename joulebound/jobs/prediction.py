"""The one result of every job predictor: time and energy of a whole training job.

:class:`JobPrediction` is what :meth:`~joulebound.jobs.predictor.JobPredictor.predict_jobs`
returns for each job, whichever predictor made it — the mechanistic predictor (every field) or an
energy law of the seed paper (the fields a law can give; the others are ``None``). Units: s, J,
sequences, tokens; ``step``/``memory`` hold the predictor's breakdown of one optimizer step and
its per-GPU memory (bytes). Everything is **modeled**.
"""

from __future__ import annotations

from dataclasses import dataclass

from joulebound.core.provenance import MODELED


@dataclass
class JobPrediction:
    """A whole job (or one step when the job gives no ``tokens``), modeled, with 90 % intervals.

    Attributes:
        name, strategy, gpus, nodes, device: the job as priced (``strategy`` a label such as
            ``fsdp4`` or ``dp2·tp2·pp4``).
        micro_batch, grad_accum, global_batch: sequences per GPU per micro-batch, micro-batches
            per step, sequences per optimizer step.
        tokens_per_step, steps: tokens per optimizer step and steps of the job.
        time_s, time_lo_s, time_hi_s: wall time and its 90 % interval (s).
        gpu_energy_j, host_energy_j, total_energy_j (+ ``_lo_j`` / ``_hi_j``): GPU boards, host CPU
            + DRAM and their total (J) with 90 % intervals. A law predicts only the total of what
            its training data metered (``covers`` says what).
        energy_per_token_j: total energy per training token (J).
        step: the predictor's breakdown of one optimizer step (s, J).
        memory: per-GPU memory estimate (bytes) and ``fits``.
        fits_memory: the job fits in GPU memory (``None``: the predictor does not say).
        interval_why: what widens the interval, largest first.
        warnings: what the prediction assumes beyond its calibration.
        covers: what the figures include.
        params: the predictor's parameters used.
        provenance: ``"modeled"``.
        predictor: which predictor (``"mechanistic"`` or a law with what it was fitted on).
    """

    name: str
    strategy: str
    gpus: int
    nodes: int | None
    device: str
    micro_batch: int | None
    grad_accum: int | None
    global_batch: int
    tokens_per_step: float
    steps: float
    time_s: float | None
    time_lo_s: float | None
    time_hi_s: float | None
    gpu_energy_j: float | None
    gpu_energy_lo_j: float | None
    gpu_energy_hi_j: float | None
    host_energy_j: float | None
    host_energy_lo_j: float | None
    host_energy_hi_j: float | None
    total_energy_j: float
    total_energy_lo_j: float | None
    total_energy_hi_j: float | None
    energy_per_token_j: float
    step: dict
    memory: dict
    fits_memory: bool | None
    interval_why: list[str]
    warnings: list[str]
    covers: str
    params: dict
    provenance: str = MODELED
    predictor: str = "mechanistic"

    def to_json(self) -> dict:
        return {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
                for k, v in vars(self).items()}
