"""GPU time and power model across core and memory clocks.

* :mod:`.vf` — voltage–frequency curve; :mod:`.params` — :class:`DeviceParams` (defaults from a
  DeviceSpec, shipped calibrated files in ``params/``);
* :mod:`.kernel` — vectorized kernel time / power / energy with power-limit capping;
* :mod:`.characterize` — :func:`characterize` (trace × clock pairs → Characterization);
* :mod:`.calibrate` — scikit-learn-style :class:`StageModel` fitted on a few measured clocks;
* :mod:`.measured` — a Characterization from a user's measured CSV table.
"""

from joulebound.gpumodel.characterize import (
    ResolvedClocks,
    characterize,
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
    "DeviceParams", "KernelWork", "ResolvedClocks", "VFCurve", "characterize", "default_params",
    "kernel_power", "kernel_time", "kernel_time_energy", "load_shipped", "params_for", "planning_configs",
    "resolve_clocks",
    "resolve_device", "shipped_names", "trace_work",
]
