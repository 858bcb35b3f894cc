"""Where calibration runs: a real NVIDIA GPU (NVML + CUDA) or the simulated GPU.

A backend rebuilds the replayable ops for its device (:meth:`build`), gives the runner and probe
of :mod:`.measure`, the card's supported clock table, the energy sensor's update period, and opens
the clock session (:mod:`.clocks`) when a calibration changes clocks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from joulebound.core.errors import JouleboundError
from joulebound.measure.calibrate.clocks import ClockSession, open_actuator
from joulebound.measure.calibrate.measure import NvmlProbe, SimProbe, SimRunner, TorchRunner
from joulebound.measure.calibrate.replay import ReplayOp, check_call
from joulebound.workload.trace import Trace

log = logging.getLogger(__name__)

class SimulatedBackend:
    """The simulated GPU (:class:`~.simulated.SimulatedGpu`): ops are rebuilt on torch's
    ``meta`` device (arguments and schema checked, nothing computed) and run on the model.

    Args:
        trace: the trace to calibrate (the simulated kernels' truth is drawn for its kernels).
        device: catalog name.
        seed, **sim_kw: :class:`~.simulated.SimulatedGpu` arguments.
    """

    name = "simulated"

    def __init__(self, trace: Trace, device: str, seed: int = 0, **sim_kw: Any) -> None:
        from joulebound.measure.calibrate.simulated import SimulatedGpu

        self.sim = SimulatedGpu(trace, device, seed=seed, **sim_kw)
        self.spec = self.sim.spec
        self.supported = {int(m): [int(c) for c in v]
                          for m, v in self.spec.supported_clocks.items()}
        self.sensor_period_s = self.sim.sensor_period_s
        self.probe = SimProbe(self.sim)
        self.runner: SimRunner | None = None
        self.gpu_name = self.sim.name

    def build(self, op: ReplayOp) -> Callable[[], Any]:
        return check_call(op, device="meta")

    def set_ops(self, ops: Sequence[ReplayOp], calls: Sequence[Callable[[], Any]]) -> None:
        self.runner = SimRunner(self.sim, [o.name for o in ops])

    def open_clocks(self) -> ClockSession:
        return ClockSession(open_actuator("simulated", sim=self.sim), self.supported)

    def close(self) -> None:
        pass


class NvmlBackend:
    """A real GPU: ops rebuilt on CUDA, timed with CUDA events, energy from NVML through the
    device layer (:class:`~joulebound.hw.gpu.Nvml`).

    Args:
        gpu: the GPU as CUDA numbers it (index into ``CUDA_VISIBLE_DEVICES``) or a UUID.
        helper: the clock helper's socket (clock changes through it), else in-process NVML.
        nvml: an NVML module (default ``pynvml``; tests and rehearsals pass a fake).
        sensor_period_s: the energy counter's update period (default: the catalog's for this
            GPU, else 0.1 s).
        torch_device: where ops run (default ``cuda:<gpu>`` for an integer ``gpu``).
    """

    name = "nvml"

    def __init__(self, gpu: int | str = 0, helper: str | None = None, nvml: Any = None,
                 sensor_period_s: float | None = None, torch_device: str | None = None) -> None:
        from joulebound.energy.nvml import DEFAULT_SENSOR_PERIOD_S, catalog_sensor_period
        from joulebound.hw import gpu as gpu_layer

        self.gpu, self.helper, self.nvml = gpu, helper, nvml
        self.session, self.device = gpu_layer.open_gpu(nvml, gpu)
        try:
            self.supported = self.device.supported_clocks()
        except Exception as exc:
            self.session.close()
            raise JouleboundError(f"GPU {gpu!r}: NVML cannot read its clock table ({exc})") from exc
        self.gpu_name = self.device.name
        self.sensor_period_s = float(sensor_period_s or catalog_sensor_period(self.gpu_name)
                                     or DEFAULT_SENSOR_PERIOD_S)
        self.probe = NvmlProbe(self.device)
        self.torch_device = torch_device or (f"cuda:{gpu}" if isinstance(gpu, int) else "cuda")
        self.runner: TorchRunner | None = None

    def build(self, op: ReplayOp) -> Callable[[], Any]:
        return check_call(op, device=self.torch_device)

    def set_ops(self, ops: Sequence[ReplayOp], calls: Sequence[Callable[[], Any]]) -> None:
        self.runner = TorchRunner(calls, self.torch_device)

    def open_clocks(self) -> ClockSession:
        act = open_actuator("nvml", gpu=self.gpu, helper=self.helper, nvml=self.nvml)
        return ClockSession(act, self.supported)

    def close(self) -> None:
        self.session.close()
