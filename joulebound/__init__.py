"""joulebound: predict, measure and cut the energy of transformer training on GPUs.

The public Python API (what the CLI calls; units in every docstring):

- :func:`load_trace` — one training iteration's kernels from a preset (``"gpt2-small"``), a
  joulebound trace file or a torch.profiler export;
- :func:`get_device` / :func:`list_devices` — the GPU catalog (:class:`DeviceSpec`);
- :func:`characterize` — time and energy of every kernel at every clock pair (modeled);
- :func:`plan` — GPU clocks per kernel / layer / pass / iteration at a switch latency, a
  :class:`PlanResult` with ``.plan`` and ``.to_json()``;
- :func:`job`, :func:`predict_job`, :func:`advise` — a training job's time and energy before it
  runs, and the least-energy strategy × GPU count within a deadline;
- :class:`EnergyMeter` — measured energy of code windows (NVML, RAPL), into a SQLite store.

Names load on first use, so ``import joulebound`` stays light (no torch, numba or solvers).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: public name -> (module, attribute)
_LAZY: dict[str, tuple[str, str]] = {
    "load_trace": ("joulebound.workload", "load_trace"),
    "Trace": ("joulebound.workload.trace", "Trace"),
    "get_device": ("joulebound.hw.catalog", "get_device"),
    "list_devices": ("joulebound.hw.catalog", "list_devices"),
    "DeviceSpec": ("joulebound.hw.spec", "DeviceSpec"),
    "ClockConfig": ("joulebound.core.clocks", "ClockConfig"),
    "characterize": ("joulebound.gpumodel", "characterize"),
    "Characterization": ("joulebound.gpumodel.characterization", "Characterization"),
    "plan": ("joulebound.planning.workflow", "plan_clocks"),
    "PlanResult": ("joulebound.planning.workflow", "PlanResult"),
    "Plan": ("joulebound.planning.plan", "Plan"),
    "job": ("joulebound.jobs.job", "job_from_options"),
    "Job": ("joulebound.jobs.job", "Job"),
    "predict_job": ("joulebound.jobs.predict", "predict_job"),
    "JobPrediction": ("joulebound.jobs.prediction", "JobPrediction"),
    "EnergyMeter": ("joulebound.energy.meter", "EnergyMeter"),
    "JouleboundError": ("joulebound.core.errors", "JouleboundError"),
}

__all__ = sorted([*_LAZY, "advise", "__version__"])


def advise(job: Any, deadline: str | float, max_gpus: int = 8,
           strategies: tuple[str, ...] = ("ddp", "fsdp", "tp", "pp"),
           coefficients: str | None = None) -> tuple[Any, list[Any]]:
    """The least-energy (strategy × GPU count) for ``job`` (a :class:`Job`, e.g. from
    :func:`job`) that meets ``deadline`` (duration text such as ``"6h"``, or seconds), searching
    1 GPU and ``strategies`` up to ``max_gpus``: ``(best, every option)``, each an option with
    ``strategy``, ``gpus``, ``time_s`` and its 90 % interval, ``energy_j`` (GPU + host, J) and
    its interval, ``meets_deadline`` (the upper bound of the time interval meets it; ``deadline``
    ``"ok"`` / ``"may miss"`` / ``"miss"``), ``energy_ratio`` to the advice with its 90 % interval
    and ``indistinguishable`` (docs/advise.md) — modeled by the mechanistic predictor (its shipped
    calibration, or the one saved at ``coefficients``)."""
    from joulebound.core.units import parse_duration
    from joulebound.jobs.advisor import advise_job

    return advise_job(job, parse_duration(deadline), max_gpus, tuple(strategies),
                      coefficients=coefficients)  # type: ignore[return-value]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'joulebound' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
