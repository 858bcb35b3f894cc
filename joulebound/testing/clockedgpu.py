"""A fake GPU whose time and energy depend on the clocks locked through the fake NVML.

For ``joulebound run --plan P --verify`` tests (the measured A/B saving): the clocks the
:class:`~joulebound.runtime.actuators.NvmlActuator` locks through :class:`FakeNvml` change how
long each op takes on the fake device and how much power it draws, and its energy counter
(``nvmlDeviceGetTotalEnergyConsumption``) integrates that power over a **virtual device clock**
(nothing sleeps, so a test is fast and deterministic for a seed).

Two devices, one interface (``run_op(name)``, ``clock()``, ``counter_mj()``):

* :class:`ClockedDevice` — analytic: each op takes ``op_time_s × time_scale(core, mem)`` and
  draws ``power_w(core, mem)``; with the same scale for every op, a plan that locks one pair for
  the whole step saves exactly :meth:`ClockedDevice.true_saving` of the energy per step.
* :class:`SimulatedDevice` — the project's simulated GPU
  (:class:`~joulebound.measure.calibrate.simulated.SimulatedGpu`, the device model with per-kernel
  truth) behind :class:`~joulebound.testing.simnvml.SimFakeNvml`: each op runs as the recorded
  kernel of the same key.

Both add seeded noise — per op (``noise_sd``), a slow wander of the power (an Ornstein–Uhlenbeck
factor, ``wander_sd`` with time constant ``wander_tau_s``: temperature, fans, the board's power
management) and a drift (warming up, ``drift``) that the ABBA order must cancel — and update the
counter once per ``sensor_period_s`` of device time, like NVML.

:func:`drive` is a ``TorchDispatchMode`` the test's training script enters: every kernel op the
script runs is executed on the current device (:func:`install`) *after* the controller's hook has
seen it and switched, i.e. at the clocks in effect for that op.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from joulebound.core.clocks import ClockConfig
from joulebound.testing.fakenvml import FakeGPU, FakeNvml

#: the device the current test's script drives (:func:`install`)
_CURRENT: list[Any] = [None]


def install(device: Any) -> Any:
    """Make ``device`` the one :func:`drive` runs ops on; returns it."""
    _CURRENT[0] = device
    return device


def current() -> Any:
    """The installed device (``None`` when none is)."""
    return _CURRENT[0]


def locked(nv: FakeNvml, h: int = 0) -> tuple[int | None, int | None]:
    """GPU ``h``'s locked (core MHz, memory MHz) in ``nv``; ``None`` = left to the governor."""
    core, mem = nv.core_lock[h], nv.mem_lock[h]
    return (None if core is None else int(core[1]), None if mem is None else int(mem[1]))


class _Wander:
    """A slowly wandering power factor around 1 (Ornstein–Uhlenbeck in device time) times a
    warm-up drift ``1 + drift · (1 - exp(-t / drift_tau_s))``."""

    def __init__(self, rng: np.random.Generator, sd: float, tau_s: float, drift: float,
                 drift_tau_s: float) -> None:
        self.rng, self.sd, self.tau = rng, float(sd), float(tau_s)
        self.drift, self.drift_tau = float(drift), float(drift_tau_s)
        self.x = 0.0

    def factor(self, t: float, dt: float) -> float:
        """The factor for an op of ``dt`` s starting at device time ``t`` (s)."""
        if self.sd > 0 and self.tau > 0:
            a = math.exp(-dt / self.tau)
            self.x = a * self.x + self.sd * math.sqrt(1.0 - a * a) * float(self.rng.normal())
        d = 1.0 + self.drift * (1.0 - math.exp(-t / self.drift_tau)) if self.drift_tau > 0 \
            else 1.0
        return (1.0 + self.x) * d


class _Counter:
    """Virtual time, true energy and an NVML-like counter updated once per sensor period."""

    def __init__(self, sensor_period_s: float) -> None:
        self.t = 0.0
        self.energy_j = 0.0
        self.period = float(sensor_period_s)
        self._upd_t = 0.0
        self._upd_e = 0.0

    def advance(self, dt: float, power_w: float) -> None:
        if dt <= 0:
            return
        t0, e0 = self.t, self.energy_j
        self.t = t0 + dt
        self.energy_j = e0 + power_w * dt
        last = math.floor(self.t / self.period) * self.period if self.period > 0 else self.t
        if last > self._upd_t:
            self._upd_e = e0 + power_w * max(last - t0, 0.0)
            self._upd_t = last

    def counter_mj(self) -> int:
        return int((self._upd_e if self.period > 0 else self.energy_j) * 1000.0)


class ClockedDevice:
    """Analytic fake device (see the module docs).

    Args:
        nv: the fake NVML whose locks are this device's clocks (GPU ``h``).
        power_w: ``(core MHz, memory MHz) -> W`` while running ops.
        time_scale: ``(core MHz, memory MHz) -> factor`` on every op's time (1 at the top clocks).
        op_time_s: one op's time at the top clocks (s).
        noise_sd: relative standard deviation of each op's time and power.
        wander_sd, wander_tau_s: the slow power wander's relative size and time constant (s).
        drift: relative power rise of the warm-up drift; ``drift_tau_s`` its time constant (s).
        sensor_period_s: energy-counter update period (s of device time).
        seed: random seed.
    """

    def __init__(self, nv: FakeNvml, power_w: Callable[[int, int], float],
                 time_scale: Callable[[int, int], float], *, h: int = 0,
                 op_time_s: float = 1e-3, noise_sd: float = 0.02, wander_sd: float = 0.01,
                 wander_tau_s: float = 0.5, drift: float = 0.03, drift_tau_s: float = 20.0,
                 sensor_period_s: float = 0.02, seed: int = 0) -> None:
        self.nv, self.h = nv, h
        self.power_w, self.time_scale = power_w, time_scale
        self.op_time_s = float(op_time_s)
        self.noise_sd = float(noise_sd)
        self.rng = np.random.default_rng(seed)
        self.wander = _Wander(self.rng, wander_sd, wander_tau_s, drift, drift_tau_s)
        self.c = _Counter(sensor_period_s)
        self.ops = 0

    def top(self) -> tuple[int, int]:
        """The default (governed) clocks: the top of the supported table (MHz)."""
        mem = max(self.nv.supported)
        return max(self.nv.supported[mem]), mem

    def clocks(self) -> tuple[int, int]:
        """(core, memory) MHz in effect: the locked ones, else the top of the table."""
        core, mem = locked(self.nv, self.h)
        top_core, top_mem = self.top()
        return core or top_core, mem or top_mem

    def run_op(self, name: str) -> None:
        """Run one op at the clocks in effect (advances the virtual clock and the counter)."""
        core, mem = self.clocks()
        f_t, f_p = np.exp(self.rng.normal(0.0, self.noise_sd, 2))
        dt = self.op_time_s * self.time_scale(core, mem) * f_t
        self.c.advance(dt, self.power_w(core, mem) * f_p * self.wander.factor(self.c.t, dt))
        self.ops += 1

    def clock(self) -> float:
        """Virtual device time (s): the meter's clock in these tests."""
        return self.c.t

    def counter_mj(self) -> int:
        return self.c.counter_mj()

    def true_saving(self, core: int, mem: int) -> tuple[float, float]:
        """``(energy, time)`` change per step of running every op at ``(core, mem)`` instead of
        the top clocks (fractions; the noise and the drift are the same in both)."""
        tc, tm = self.top()
        ts = self.time_scale(core, mem) / self.time_scale(tc, tm)
        return ts * self.power_w(core, mem) / self.power_w(tc, tm) - 1.0, ts - 1.0


class SimulatedDevice:
    """The simulated GPU behind the fake NVML (see the module docs).

    Args:
        sim: a :class:`~joulebound.measure.calibrate.simulated.SimulatedGpu` over the recorded
            trace (its kernel names are the op keys); its clock source is pointed at ``nv``.
        nv: its :class:`~joulebound.testing.simnvml.SimFakeNvml`.
        noise_sd, wander_sd, wander_tau_s, drift, drift_tau_s: as :class:`ClockedDevice`'s.
        seed: random seed of the noise.
    """

    def __init__(self, sim: Any, nv: Any, *, noise_sd: float = 0.02, wander_sd: float = 0.01,
                 wander_tau_s: float = 0.5, drift: float = 0.03, drift_tau_s: float = 20.0,
                 seed: int = 0) -> None:
        self.sim, self.nv = sim, nv
        self.noise_sd = float(noise_sd)
        self.rng = np.random.default_rng(seed)
        self.wander = _Wander(self.rng, wander_sd, wander_tau_s, drift, drift_tau_s)
        self.ops = self.unknown = 0

    def run_op(self, name: str) -> None:
        """Run the op as the recorded kernel of key ``name`` (an unknown op: 20 µs idle)."""
        if name not in self.sim.truth:
            self.unknown += 1
            self.sim.idle(20e-6)
            return
        f_t, f_p = np.exp(self.rng.normal(0.0, self.noise_sd, 2))
        t1, _ = self.sim.true_cell(name, self.sim.clocks())
        w = self.wander.factor(float(self.sim.t), t1 * float(f_t))
        self.sim.run(name, 1, (float(f_t), float(f_p * w)))
        self.ops += 1

    def clock(self) -> float:
        """Virtual device time (s)."""
        return float(self.sim.t)

    def counter_mj(self) -> int:
        return int(self.sim.counter_mj())

    def true_saving(self, names: list[str], configs: list[ClockConfig]) -> tuple[float, float]:
        """``(energy, time)`` change of one iteration (kernel ``names[k]`` at ``configs[k]``)
        against the same kernels at the default clocks (fractions, noise-free)."""
        uniq = list(dict.fromkeys(configs))
        cols = [ClockConfig(), *uniq]
        t, e = self.sim.true_table(names, cols)
        k = np.arange(len(names))
        j = np.array([1 + uniq.index(c) for c in configs])
        return float(e[k, j].sum() / e[:, 0].sum() - 1.0), float(t[k, j].sum() / t[:, 0].sum()
                                                                 - 1.0)


class DeviceGPU(FakeGPU):
    """A :class:`FakeGPU` whose energy counter is a device's (``device.counter_mj()``)."""

    device: Any = None

    def counter_mj(self) -> int:
        return int(self.device.counter_mj())


def clocked_nvml(power_w: Callable[[int, int], float], time_scale: Callable[[int, int], float],
                 supported: dict[int, list[int]] | None = None, name: str = "Fake clocked GPU",
                 uuid: str = "GPU-clocked-0", **device_kw: Any) -> tuple[FakeNvml, ClockedDevice]:
    """A one-GPU :class:`FakeNvml` and its :class:`ClockedDevice` (installed for :func:`drive`);
    ``device_kw`` go to :class:`ClockedDevice`."""
    gpu = DeviceGPU(uuid, energy_mj=0, name=name)
    nv = FakeNvml(gpus=[gpu], supported=supported)
    dev = ClockedDevice(nv, power_w, time_scale, **device_kw)
    gpu.device = dev
    return nv, install(dev)


def simulated_nvml(sim: Any, **device_kw: Any) -> tuple[Any, SimulatedDevice]:
    """The simulated GPU ``sim`` behind a :class:`~joulebound.testing.simnvml.SimFakeNvml` and
    its :class:`SimulatedDevice` (installed for :func:`drive`)."""
    from joulebound.testing.simnvml import fake_nvml_for

    nv = fake_nvml_for(sim)
    dev = SimulatedDevice(sim, nv, **device_kw)
    return nv, install(dev)


@contextmanager
def drive(device: Any = None) -> Iterator[Any]:
    """Run every kernel op of the ``with`` block also on ``device`` (default: :func:`current`),
    after the ops the outer dispatch modes (the controller's hook) have seen; yields the device.

    Ops that launch no kernel (views, allocations; the hook's own rule) are not run."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from joulebound.runtime.hooks import launches_no_kernel, op_key
    from joulebound.runtime.opkeys import key_str

    dev = device if device is not None else current()
    if dev is None:
        raise RuntimeError("no fake device installed (joulebound.testing.clockedgpu.install)")
    names: dict[Any, str] = {}

    class _Drive(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            if not launches_no_kernel(func):
                k = op_key(func, args)
                name = names.get(k)
                if name is None:
                    name = names[k] = key_str(k)
                dev.run_op(name)
            return out

    with _Drive():
        yield dev
