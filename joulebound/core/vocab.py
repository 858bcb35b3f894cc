"""The vocabulary: every word the tool uses for a kind of thing, defined once.

Each is an :class:`enum.StrEnum` (a member *is* its string: ``Granularity.KERNEL == "kernel"``,
JSON and printed output carry the plain word). Modules that list allowed values derive their
tuples from here, so a new word is added in one place.
"""

from __future__ import annotations

from enum import StrEnum


class Granularity(StrEnum):
    """How finely a clock plan varies: one pair per iteration, per pass (forward / backward /
    optimizer), per layer and pass, per kernel — or per phase (switch-aware: runs of kernels at
    least one switch latency long)."""

    ITERATION = "iteration"
    PASS = "pass"
    LAYER = "layer"
    KERNEL = "kernel"
    PHASE = "phase"


class Objective(StrEnum):
    """What a clock plan minimises: ``waste`` (energy within a time budget), ``relaxed`` (its
    LP relaxation), ``edp`` / ``ed2p`` (energy × time^n), ``time``."""

    WASTE = "waste"
    RELAXED = "relaxed"
    EDP = "edp"
    ED2P = "ed2p"
    TIME = "time"


class Strategy(StrEnum):
    """How a training job uses several GPUs: ``single`` (one GPU), ``ddp`` (data parallel),
    ``fsdp`` (ZeRO-3 sharded data parallel), ``tp`` (Megatron tensor parallel), ``pp`` (1F1B
    pipeline)."""

    SINGLE = "single"
    DDP = "ddp"
    FSDP = "fsdp"
    TP = "tp"
    PP = "pp"


class Dtype(StrEnum):
    """Number formats of the math (tensor-core rates in the catalog are per dtype)."""

    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"


class Provenance(StrEnum):
    """Where a number comes from: ``measured`` (a sensor on real hardware), ``modeled`` (our
    models), ``published`` (a paper's figure, cited, never our output)."""

    MEASURED = "measured"
    MODELED = "modeled"
    PUBLISHED = "published"


def words(*members: StrEnum) -> tuple[str, ...]:
    """The plain strings of ``members`` (for tuples of allowed values)."""
    return tuple(m.value for m in members)


#: the granularities a planning study is asked for, coarsest first (phase plans come from the
#: switch-aware search, not from this list)
PLAN_GRANULARITIES = words(Granularity.ITERATION, Granularity.PASS, Granularity.LAYER,
                           Granularity.KERNEL)
#: the objectives a user plans with (``time`` is internal: the fastest plan)
PLAN_OBJECTIVES = words(Objective.WASTE, Objective.RELAXED, Objective.EDP, Objective.ED2P)
#: every objective the solvers know
SOLVER_OBJECTIVES = words(*Objective)
#: every strategy the job predictors price
JOB_STRATEGIES = words(*Strategy)
#: the strategies a measured sweep runs (pipelines are priced, not swept)
SWEEP_STRATEGIES = words(Strategy.SINGLE, Strategy.DDP, Strategy.FSDP, Strategy.TP)
#: every dtype of the catalog and of traces
ALL_DTYPES = words(*Dtype)
#: the dtypes a training job's math runs in (fp8 is a catalog rate, not a training dtype yet)
TRAINING_DTYPES = words(Dtype.FP32, Dtype.TF32, Dtype.FP16, Dtype.BF16)
#: the sweep's dtypes (bf16 autocast or fp32)
SWEEP_DTYPES = words(Dtype.FP32, Dtype.BF16)
#: the three provenance labels
PROVENANCES = words(*Provenance)
