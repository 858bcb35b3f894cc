"""THE GPU kernel time/power model across core and memory clocks — the one model ``plan``,
``characterize``, ``calibrate`` and the job predictor use.

* :func:`evaluate` (:mod:`.characterize`) — the one entry point: time and energy of every kernel
  at every clock config, by one of two implementations of the same formulas:
  ``method="reference"`` (the specification: :func:`~.kernel.kernel_time_energy`, numpy, formula
  by formula — :mod:`.kernel` documents the model) or ``method="fast"`` (the default: the
  table method of :mod:`.kernel_table` with the compiled loops of :mod:`.cells_kernel`, numba,
  within 1e-8 relative of the reference; tests pin them equal on real traces);
* :func:`characterize` — a trace × clock pairs → :class:`~.characterization.Characterization`
  (through :func:`evaluate`); :func:`trace_work` — a trace's per-kernel work on a device;
* :mod:`.params` — :class:`DeviceParams`: defaults from a DeviceSpec, or the shipped calibrated
  files in ``params/`` (written by ``research/write_params.py`` from the validation fits, each
  with its held-out error and bootstrap draws); :mod:`.vf` — the voltage–frequency curve;
  :mod:`.fit` — fitting parameters by least squares with bootstrap draws;
* :mod:`.fit_measured` — a measured kernel's work and activity fitted to its measured cells;
  :mod:`.measured` — a Characterization from a user's measured CSV table;
* :mod:`.published` — Spaan et al.'s published per-kernel table (a cited reference).

Models that only validation uses (the stage model, the plan and power side models) live in
``research/``, outside the wheel.
"""

from joulebound.gpumodel.characterize import (
    METHODS,
    ModelTable,
    ResolvedClocks,
    characterize,
    evaluate,
    planning_configs,
    resolve_clocks,
    resolve_device,
    trace_work,
)
from joulebound.gpumodel.kernel import KernelWork, kernel_power, kernel_time, kernel_time_energy
from joulebound.gpumodel.params import (
    DeviceParams,
    default_params,
    load_shipped,
    params_for,
    shipped_names,
)
from joulebound.gpumodel.vf import VFCurve

__all__ = [
    "METHODS", "DeviceParams", "KernelWork", "ModelTable", "ResolvedClocks", "VFCurve",
    "characterize", "default_params", "evaluate", "kernel_power", "kernel_time",
    "kernel_time_energy", "load_shipped", "params_for", "planning_configs", "resolve_clocks",
    "resolve_device", "shipped_names", "trace_work",
]
