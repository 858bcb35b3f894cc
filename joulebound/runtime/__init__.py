"""Runtime clock control: apply a plan while PyTorch trains.

* :mod:`.controller` — :class:`Controller` (plan + predictor + actuator), :func:`lookahead_commands`.
* :mod:`.hooks` — :class:`OpStream` (TorchDispatchMode), :class:`PeriodicSchedule` (CUDA graphs /
  compiled steps), :class:`EventAligner` (GPU device-progress alignment).
* :mod:`.actuators` — dry-run, simulated, NVML actuators; :func:`reset_all_clocks`.
* :mod:`.helper` — privileged clock helper (Unix socket) and :class:`HelperActuator`.
* :mod:`.session` — ``joulebound run`` (in-process runpy) and :func:`controlled` (in-script use).

See ``docs/runtime.md``.
"""

from joulebound.runtime.actuators import (
    Actuator,
    DryRunActuator,
    NvmlActuator,
    SimulatedActuator,
    reset_all_clocks,
)
from joulebound.runtime.controller import Controller, lookahead_commands, trace_from_ops
from joulebound.runtime.session import build_controller, controlled

__all__ = ["Actuator", "Controller", "DryRunActuator", "NvmlActuator", "SimulatedActuator",
           "build_controller", "controlled", "lookahead_commands", "reset_all_clocks",
           "trace_from_ops"]
