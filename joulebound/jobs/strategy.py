"""Parallelism strategies and GPU counts: the vocabulary every job predictor shares.

``single`` is one GPU; ``ddp`` data parallelism; ``fsdp`` ZeRO-3 sharded data parallelism;
``tp`` Megatron tensor parallelism; ``pp`` a 1F1B pipeline. Kept apart from the predictors so
that the job description (:mod:`joulebound.jobs.job`), the mechanistic predictor and the energy
laws read the same names without importing one another.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from joulebound.core.errors import JouleboundError, did_you_mean
from joulebound.core.vocab import JOB_STRATEGIES

#: strategies understood by the job predictors; "single" is one GPU, no parallelism.
STRATEGIES = JOB_STRATEGIES
_ALIASES = {"dp": "ddp", "data": "ddp", "zero3": "fsdp", "megatron": "tp", "tensor": "tp",
            "pipeline": "pp", "none": "single", "1gpu": "single"}


def alias_note(name: str) -> str | None:
    """A note when ``name`` is an alias of a strategy (``zero3`` -> ``fsdp``), else ``None``: an
    alias is read, never silently."""
    key = str(name).strip().lower()
    if key in _ALIASES and _ALIASES[key] != key:
        return f"strategy {name!r} read as {_ALIASES[key]!r}"
    return None


def normalize_strategy(name: str) -> str:
    """Canonical strategy name; unknown names raise :class:`JouleboundError` listing choices."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in STRATEGIES:
        raise JouleboundError(f"unknown parallelism strategy {name!r}." + did_you_mean(key, STRATEGIES))
    return key


def check_gpus(n: ArrayLike) -> np.ndarray:
    """GPU counts as a float array; raises when any is < 1 or not finite."""
    arr = np.asarray(n, dtype=float)
    if arr.size and (not np.all(np.isfinite(arr)) or np.any(arr < 1)):
        bad = arr[~np.isfinite(arr) | (arr < 1)].ravel()[0]
        raise JouleboundError(f"GPU count must be an integer >= 1, got {bad:g}.")
    return arr
