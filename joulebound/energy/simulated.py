"""A simulated GPU whose power follows a function of time (for tests, demos, multi-rank checks).

Every number it produces is **modeled**. Two ways to drive it:

- ``SimulatedBackend(power=lambda t: 250.0)`` — any callable ``power(t) -> W`` of the time ``t``
  (s) since the backend was created (or since ``t0`` when given);
- ``SimulatedBackend.from_spec(spec, load=0.7)`` — a :class:`~joulebound.hw.spec.DeviceSpec`
  load profile: ``P(t) = idle_power_w + load(t) * (power_limit_default_w - idle_power_w)``, where
  ``load`` is a constant in [0, 1] or a callable of ``t``.

The energy counter is the integral of ``power`` (trapezoid rule on a fixed step, default 1 ms),
advanced incrementally, so reads at increasing times cost O(elapsed / step).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from joulebound.core.provenance import MODELED
from joulebound.energy.base import Backend, Channel

if TYPE_CHECKING:  # pragma: no cover
    from joulebound.hw.spec import DeviceSpec

PowerFn = Callable[[float], float]


class SimulatedBackend(Backend):
    """Simulated GPUs with UUIDs ``SIM-GPU-<index>`` (the same in every process on one host).

    Args:
        power: one callable ``power(t) -> W`` for all devices, or one per device.
        n_devices: number of simulated GPUs (when ``power`` is a single callable).
        t0: the time origin (s, same clock as the meter's); default: set on the first read.
        step_s: integration step (s) of the energy counter.
        sensor_period_s: the update period to flag short windows with (s); 0 = continuous.
        quantum_s: when > 0, the counter and power only change every ``quantum_s`` seconds, like a
            real sensor (for testing short-window handling).
        uuid_prefix: prefix of the device UUIDs.
    """

    name = "simulated"
    provenance = MODELED

    def __init__(self, power: PowerFn | Sequence[PowerFn] = lambda t: 100.0, n_devices: int = 1,
                 t0: float | None = None, step_s: float = 1e-3, sensor_period_s: float = 0.0,
                 quantum_s: float = 0.0, uuid_prefix: str = "SIM-GPU-",
                 device_name: str = "simulated GPU") -> None:
        super().__init__()
        fns = list(power) if isinstance(power, Sequence) else [power] * n_devices
        if not fns:
            raise ValueError("SimulatedBackend needs at least one device")
        if step_s <= 0:
            raise ValueError(f"step_s must be > 0 s, got {step_s}")
        self._power = fns
        self.t0 = t0
        self.step_s = float(step_s)
        self.quantum_s = float(quantum_s)
        self.channels = [Channel(uuid=f"{uuid_prefix}{i}", index=i, kind="gpu", name=device_name,
                                 source="simulated", sensor_period_s=sensor_period_s or None)
                         for i in range(len(fns))]
        self._tcur = [0.0] * len(fns)     # integrated up to this relative time (s)
        self._ecur = [0.0] * len(fns)     # energy integrated so far (J)
        self.notes.append(f"simulated backend: {len(fns)} modeled GPU(s), no real sensor")

    @classmethod
    def from_spec(cls, spec: DeviceSpec | str, load: float | PowerFn = 1.0, n_devices: int = 1,
                  **kwargs) -> SimulatedBackend:
        """Simulated GPUs of a catalog device under a load profile (0 = idle, 1 = default limit)."""
        if isinstance(spec, str):
            from joulebound.hw.catalog import get_device  # issue 2; optional at import time

            spec = get_device(spec)
        idle, top = float(spec.idle_power_w), float(spec.power_limit_default_w)
        load_fn: PowerFn = (lambda t, c=float(load): c) if not callable(load) else load

        def power(t: float) -> float:
            u = min(max(float(load_fn(t)), 0.0), 1.0)
            return idle + u * (top - idle)

        kwargs.setdefault("sensor_period_s", spec.sensor_period_s or 0.0)
        kwargs.setdefault("device_name", spec.product_name)
        return cls(power=power, n_devices=n_devices, **kwargs)

    # -- reads --------------------------------------------------------------------------------
    def _rel(self, t: float) -> float:
        if self.t0 is None:
            self.t0 = t
        rel = t - self.t0
        if self.quantum_s > 0:
            rel = math.floor(rel / self.quantum_s) * self.quantum_s
        return max(rel, 0.0)

    def has_counter(self, i: int) -> bool:
        return True

    def read_power_w(self, i: int, t: float) -> float | None:
        return float(self._power[i](self._rel(t)))

    def read_energy_j(self, i: int, t: float) -> float | None:
        rel = self._rel(t)
        if rel < self._tcur[i]:  # a read in the past: integrate from 0 (rare; keeps it correct)
            return self._integrate(i, 0.0, rel)
        self._ecur[i] += self._integrate(i, self._tcur[i], rel)
        self._tcur[i] = rel
        return self._ecur[i]

    def _integrate(self, i: int, a: float, b: float) -> float:
        if b <= a:
            return 0.0
        n = max(1, math.ceil((b - a) / self.step_s))
        ts = np.linspace(a, b, n + 1)
        fn = self._power[i]
        ps = np.fromiter((fn(float(x)) for x in ts), float, len(ts))
        return float(np.trapezoid(ps, ts))
