"""Measuring one replayed kernel at the clocks in effect: time per call and energy per call.

One measurement (:func:`measure_cell`) of op ``i``:

1. **Chunk size**: the number of back-to-back calls that lasts at least ``chunk_s`` (doubling
   from 1); every read of the energy counter happens between chunks, so ``chunk_s`` bounds how
   late a counter update is seen.
2. **Warm-up**: chunks for ``warmup_s`` (clocks, caches, the power limiter settle).
3. **Windows** (``repeats`` of them): chunks until the energy counter has changed ``k_periods + 1``
   times; the energy between the first and the last change seen, over the device time between
   them, is the average power (counter updates are the sensor's own sampling instants, so no
   partial update period enters the window). Time per call is the device time of all the window's
   calls over their number (CUDA events on a GPU). Energy per call = power × time per call.
   Without an energy counter (pre-Volta, or refused) power readings after each chunk are
   integrated (trapezoid) over at least ``k_periods`` sensor periods instead.
4. Temperature and the SM / memory clocks are read after each window and kept beside it.

The device is reached through two small interfaces: a :class:`Runner` (runs calls, keeps time)
and a :class:`Probe` (NVML readings). :class:`TorchRunner` / :class:`NvmlProbe` are the real
ones; :class:`SimRunner` / :class:`SimProbe` drive :class:`~.simulated.SimulatedGpu`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from joulebound.core.clocks import ClockConfig
from joulebound.core.errors import JouleboundError


@dataclass
class CellMeasurement:
    """One kernel measured at one clock configuration (all figures measured).

    Attributes:
        name: kernel name; config: the clocks requested.
        time_s / energy_j: mean per call (s, J) over the repeats; time_sd_s / energy_sd_j: their
            spread across repeats (NaN with one repeat).
        power_w: mean power over the windows (W).
        calls: calls in the windows; window_s: device time of the windows (s).
        gpu_seconds: device time the whole measurement took, warm-up included (s).
        energy_source: ``"counter"`` or ``"power-integration"``.
        temperature_c, sm_mhz, mem_mhz: read after the last window (``None`` when unreadable).
        repeats: windows measured.
    """

    name: str
    config: ClockConfig
    time_s: float
    energy_j: float
    time_sd_s: float
    energy_sd_j: float
    power_w: float
    calls: int
    window_s: float
    gpu_seconds: float
    energy_source: str
    temperature_c: float | None
    sm_mhz: int | None
    mem_mhz: int | None
    repeats: int

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["config"] = self.config.label
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in d.items()}


class Runner(Protocol):
    """Runs replayed calls on the device."""

    def run(self, i: int, calls: int) -> float:
        """Run op ``i`` ``calls`` times back to back; device time they took (s), synchronised."""

    def now(self) -> float:
        """A clock (s) that advances with device time (wall time on a GPU)."""

    def begin_window(self) -> None:
        """A new measurement window starts (the simulation draws its noise here)."""


class Probe(Protocol):
    """The GPU's readings (NVML units)."""

    def energy_mj(self) -> int | None:
        """Total-energy counter (mJ), ``None`` without one."""

    def power_w(self) -> float | None:
        """Power (W)."""

    def temperature_c(self) -> float | None:
        """GPU temperature (°C)."""

    def clocks_mhz(self) -> tuple[int | None, int | None]:
        """Current SM and memory clocks (MHz)."""


# -- real device ---------------------------------------------------------------------------------
class TorchRunner:
    """Runs replayed callables; on CUDA timed with CUDA events (else ``perf_counter``)."""

    def __init__(self, calls: Sequence[Callable[[], Any]], device: str = "cuda") -> None:
        self.calls = list(calls)
        self.device = device
        self.cuda = str(device).startswith("cuda")

    def run(self, i: int, calls: int) -> float:
        import torch

        fn = self.calls[i]
        with torch.no_grad():
            if self.cuda:
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(calls):
                    fn()
                b.record()
                b.synchronize()
                return a.elapsed_time(b) / 1000.0
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            return time.perf_counter() - t0

    def now(self) -> float:
        return time.perf_counter()

    def begin_window(self) -> None:
        pass


class NvmlProbe:
    """Readings of one GPU through joulebound's device layer (a
    :class:`~joulebound.hw.gpu.GpuDevice`); a reading that fails gives ``None``."""

    def __init__(self, device: Any) -> None:
        self.dev = device
        self.nv = device.nv
        self.has_counter = True
        try:
            device.energy_mj()
        except Exception:
            self.has_counter = False

    def energy_mj(self) -> int | None:
        if not self.has_counter:
            return None
        return self.dev.energy_mj()

    def power_w(self) -> float | None:
        try:
            return self.dev.power_w()
        except Exception:
            return None

    def temperature_c(self) -> float | None:
        try:
            return float(self.nv.nvmlDeviceGetTemperature(
                self.dev.handle, getattr(self.nv, "NVML_TEMPERATURE_GPU", 0)))
        except Exception:
            return None

    def clocks_mhz(self) -> tuple[int | None, int | None]:
        out: list[int | None] = []
        for kind in ("NVML_CLOCK_SM", "NVML_CLOCK_MEM"):
            try:
                out.append(int(self.nv.nvmlDeviceGetClockInfo(self.dev.handle,
                                                              getattr(self.nv, kind))))
            except Exception:
                out.append(None)
        return out[0], out[1]


# -- simulated device ----------------------------------------------------------------------------
class SimRunner:
    """Runs kernels ``names[i]`` on a :class:`~.simulated.SimulatedGpu` (virtual device time)."""

    def __init__(self, sim: Any, names: Sequence[str]) -> None:
        self.sim = sim
        self.names = list(names)
        self._noise = (1.0, 1.0)

    def run(self, i: int, calls: int) -> float:
        return self.sim.run(self.names[i], calls, self._noise)

    def now(self) -> float:
        return self.sim.t

    def begin_window(self) -> None:
        self._noise = self.sim.window_noise()


class SimProbe:
    """Readings of a :class:`~.simulated.SimulatedGpu`."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim

    def energy_mj(self) -> int | None:
        return self.sim.counter_mj()

    def power_w(self) -> float | None:
        return self.sim.power_mw() / 1000.0

    def temperature_c(self) -> float | None:
        return float(self.sim.temperature())

    def clocks_mhz(self) -> tuple[int | None, int | None]:
        return self.sim.clocks_mhz()


# -- one measurement -----------------------------------------------------------------------------
@dataclass(frozen=True)
class WindowSettings:
    """How long one measurement runs.

    Attributes:
        sensor_period_s: the energy counter's update period (s; catalog or measured).
        k_periods: counter updates per window (the window is at least ``k_periods`` periods).
        warmup_s: warm-up before the windows (s).
        repeats: windows per measurement.
        chunk_s: calls between counter reads last at least this long (s).
    """

    sensor_period_s: float = 0.1
    k_periods: int = 5
    warmup_s: float = 0.2
    repeats: int = 2
    chunk_s: float = 0.002

    def estimate_s(self) -> float:
        """Expected device time of one measurement (s): warm-up, then per window ``k + 1``
        periods (the first counter change is waited for) plus one for the edges."""
        return self.warmup_s + self.repeats * (self.k_periods + 1.5) * self.sensor_period_s


def _chunk_calls(runner: Runner, i: int, chunk_s: float) -> int:
    n = 1
    while n < 1 << 22:
        if runner.run(i, n) >= chunk_s:
            return n
        n *= 2
    return n


def measure_cell(runner: Runner, probe: Probe, i: int, name: str, config: ClockConfig,
                 ws: WindowSettings) -> CellMeasurement:
    """Measure op ``i`` (kernel ``name``) at the clocks in effect (see the module docs)."""
    t_start = runner.now()
    n = _chunk_calls(runner, i, ws.chunk_s)
    warm = 0.0
    while warm < ws.warmup_s:
        warm += runner.run(i, n)
    per = ws.sensor_period_s
    limit = max(30.0 * ws.k_periods * per, 10.0)
    times, energies, powers, calls_tot, window_tot = [], [], [], 0, 0.0
    source = "counter" if probe.energy_mj() is not None else "power-integration"
    for _ in range(ws.repeats):
        runner.begin_window()
        dev_t, calls = 0.0, 0
        if source == "counter":
            prev = probe.energy_mj()
            edges: list[tuple[float, int]] = []
            while len(edges) < ws.k_periods + 1:
                dev_t += runner.run(i, n)
                calls += n
                e = probe.energy_mj()
                if e != prev:
                    edges.append((runner.now(), int(e)))      # type: ignore[arg-type]
                    prev = e
                if dev_t > limit:
                    raise JouleboundError(
                        f"the energy counter changed {len(edges)} time(s) in {dev_t:.1f} s of "
                        f"device time (expected every {per:g} s): give the sensor period with "
                        "--sensor-period, or check the GPU")
            span = edges[-1][0] - edges[0][0]
            power = (edges[-1][1] - edges[0][1]) / 1000.0 / span if span > 0 else float("nan")
        else:
            t_prev, p_prev = runner.now(), probe.power_w()
            if p_prev is None:
                raise JouleboundError("the GPU has neither an energy counter nor a power "
                                      "reading: nothing to measure energy with")
            e_int, t_int = 0.0, 0.0
            while t_int < ws.k_periods * per:
                dev_t += runner.run(i, n)
                calls += n
                t_now, p_now = runner.now(), probe.power_w() or p_prev
                e_int += 0.5 * (p_prev + p_now) * (t_now - t_prev)
                t_int += t_now - t_prev
                t_prev, p_prev = t_now, p_now
            power = e_int / t_int
        t_call = dev_t / calls
        times.append(t_call)
        powers.append(power)
        energies.append(power * t_call)
        calls_tot += calls
        window_tot += dev_t
    sm, mem = probe.clocks_mhz()
    t_arr, e_arr = np.array(times), np.array(energies)
    sd = (lambda a: float(a.std(ddof=1)) if len(a) > 1 else float("nan"))  # noqa: E731
    return CellMeasurement(
        name=name, config=config, time_s=float(t_arr.mean()), energy_j=float(e_arr.mean()),
        time_sd_s=sd(t_arr), energy_sd_j=sd(e_arr), power_w=float(np.mean(powers)),
        calls=calls_tot, window_s=window_tot, gpu_seconds=runner.now() - t_start,
        energy_source=source, temperature_c=probe.temperature_c(), sm_mhz=sm, mem_mhz=mem,
        repeats=ws.repeats)
