"""A fake NVML (:mod:`.fakenvml`) in front of a simulated GPU
(:class:`~joulebound.measure.calibrate.simulated.SimulatedGpu`).

The fake's locked clocks *are* the simulated GPU's clocks (``nvmlDeviceSetGpuLockedClocks`` /
``nvmlDeviceSetMemoryLockedClocks`` through the real :class:`NvmlActuator` change what the
simulated kernels run at), and its energy counter, power and temperature readings are the
simulated GPU's. So ``joulebound calibrate --backend nvml`` code runs unchanged on CPU.
"""

from __future__ import annotations

from typing import Any

from joulebound.core.clocks import ClockConfig
from joulebound.testing.fakenvml import FakeGPU, FakeNvml


class SimFakeGPU(FakeGPU):
    """A :class:`FakeGPU` whose readings come from a simulated GPU."""

    sim: Any = None

    def counter_mj(self) -> int:
        return int(self.sim.counter_mj())


class SimFakeNvml(FakeNvml):
    """:class:`FakeNvml` whose readings follow a simulated GPU (see the module docs)."""

    def __init__(self, sim: Any, **kw: Any) -> None:
        gpu = SimFakeGPU(sim.uuid, energy_mj=0, name=sim.name)
        gpu.sim = sim
        supported = {int(m): sorted(map(int, c), reverse=True)
                     for m, c in sim.spec.supported_clocks.items()}
        super().__init__(gpus=[gpu], supported=supported, **kw)
        self.sim = sim
        sim.clock_source = self.locked_config

    def locked_config(self) -> ClockConfig:
        """GPU 0's locked clocks as a :class:`ClockConfig` (``None`` = governed)."""
        core, mem = self.core_lock[0], self.mem_lock[0]
        return ClockConfig(None if core is None else int(core[1]),
                           None if mem is None else int(mem[1]))

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self.gpus[h].power_mw = self.sim.power_mw()
        return super().nvmlDeviceGetPowerUsage(h)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int = 0) -> int:
        self.gpus[h].temperature_c = self.sim.temperature()
        return super().nvmlDeviceGetTemperature(h, sensor)

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        sm, mem = self.sim.clocks_mhz()
        self.gpus[h].default_clocks = (sm, mem)
        return super().nvmlDeviceGetClockInfo(h, kind)


def fake_nvml_for(sim: Any, **kw: Any) -> SimFakeNvml:
    """A :class:`SimFakeNvml` for ``sim`` (keyword arguments go to :class:`FakeNvml`)."""
    return SimFakeNvml(sim, **kw)
