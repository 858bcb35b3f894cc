"""A simulated GPU: joulebound's device model as the ground truth of every replayed kernel.

Used by ``joulebound calibrate --backend simulated``, its tests and ``benchmarks/bench_calibrate.py``
to exercise the whole measurement path — kernel replay, clock locking one pair at a time through an
:class:`~joulebound.runtime.actuators.Actuator`, energy-counter windows — without a GPU. Its
clocks are set through :class:`SimulatedGpuActuator` (the actuator interface of the real path); the
tests also drive it through the real :class:`~joulebound.runtime.actuators.NvmlActuator` on
the project's fake NVML (:func:`joulebound.testing.simnvml.fake_nvml_for`: the fake's locked clocks
are the simulated GPU's clocks, its energy counter the simulated counter).

What is simulated:

* **Ground truth per kernel.** Each kernel name has a true compute time, memory time (s, at the
  top clocks) and power activity (:class:`~joulebound.gpumodel.kernel.KernelWork`): the model's
  roofline estimate (:func:`~joulebound.gpumodel.characterize.trace_work`) multiplied by random
  log-normal factors (``work_sd``, ``activity_sd``), so the model's prior is wrong by a known,
  per-kernel amount that calibration has to find. Device-level parameters (V–f curve, idle and
  static power, power limit) are the model's own: the simulation checks the per-kernel fit, not
  the device calibration.
* **Clocks.** The simulated GPU runs at the clocks its clock source reports (locked core/memory
  MHz, ``None`` = left to the governor, "auto"). A locked pair outside the card's supported table
  raises (the code under test must have validated it).
* **Device time.** A virtual clock (s) advances by each replayed call's true time × a per-window
  time noise factor (``time_noise``); nothing sleeps.
* **Energy counter.** :meth:`SimulatedGpu.counter_mj` (NVML's total-energy counter) returns the
  integrated true power (× a per-window power noise factor, ``power_noise``) as of the last sensor
  update (every ``sensor_period_s`` of device time), in whole mJ (quantization);
  :meth:`SimulatedGpu.power_mw` the power of the last update period in whole mW.
* **Temperature.** First-order thermal model: ``T → ambient + θ·P`` with a time constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from joulebound.core.clocks import ClockConfig
from joulebound.core.errors import JouleboundError
from joulebound.energy.nvml import DEFAULT_SENSOR_PERIOD_S
from joulebound.hw.spec import DeviceSpec
from joulebound.runtime.actuators import Actuator
from joulebound.workload.trace import Trace


@dataclass(frozen=True)
class SimTruth:
    """The simulated kernels' true parameters, per kernel name.

    Attributes:
        tc_s, tm_s: compute and memory time (s) at the top clocks.
        activity: dynamic-power multiplier (1 = the device's average).
        lam: share of the memory time that follows the core clock.
        knee: memory-level-parallelism knee κ (fraction of the top core clock).
    """

    tc_s: float
    tm_s: float
    activity: float
    lam: float
    knee: float = 0.0


class SimulatedGpu:
    """A GPU driven by the device model (see the module docs).

    Args:
        trace: the kernels the GPU will be asked to run (their names are the replay keys).
        device: catalog name or spec (clock table, model parameters).
        params: model parameters (default: the device's shipped calibration / defaults).
        sensor_period_s: energy-counter and power-reading update period (s of device time;
            default: the catalog's ``sensor_period_s``, else 0.1 s).
        work_sd, activity_sd: log-normal spread of the true per-kernel work and activity around
            the model's estimate (0: the model is exact).
        time_noise, power_noise: relative standard deviation of a measurement window's time and
            power (run-to-run variation).
        seed: random seed (truth and noise).
        ambient_c, theta_c_per_w, tau_s: thermal model (°C, °C/W, s).
    """

    def __init__(self, trace: Trace, device: str | DeviceSpec, params: Any = None,
                 sensor_period_s: float | None = None, work_sd: float = 0.3,
                 activity_sd: float = 0.2, time_noise: float = 0.003, power_noise: float = 0.005,
                 seed: int = 0, ambient_c: float = 35.0, theta_c_per_w: float = 0.08,
                 tau_s: float = 30.0) -> None:
        from joulebound.gpumodel.characterize import resolve_device, trace_work
        from joulebound.gpumodel.params import params_for

        self.spec = resolve_device(device)
        self.params = params if params is not None else params_for(self.spec)
        self.sensor_period_s = float(sensor_period_s or self.spec.sensor_period_s
                                     or DEFAULT_SENSOR_PERIOD_S)
        self.time_noise = float(time_noise)
        self.power_noise = float(power_noise)
        self.rng = np.random.default_rng(seed)
        distinct, _ = trace.distinct()
        work = trace_work(distinct, self.spec, self.params)
        n = len(distinct)
        f_tc = np.exp(self.rng.normal(0.0, work_sd, n))
        f_tm = np.exp(self.rng.normal(0.0, work_sd, n))
        act = np.exp(self.rng.normal(0.0, activity_sd, n))
        lam = work.lam if work.lam is not None else np.full(n, self.params.lam("other"))
        knee = work.knee if work.knee is not None else np.zeros(n)
        self.truth: dict[str, SimTruth] = {}
        for i, k in enumerate(distinct.kernels):
            tc, tm = float(work.tc_max[i]), float(work.tm_max[i])
            if tc + tm <= 0:                  # an op the cost model does not know: 20 µs of memory
                tm = 20e-6
            self.truth.setdefault(k.name, SimTruth(tc * f_tc[i], tm * f_tm[i], float(act[i]),
                                                   float(lam[i]), float(knee[i])))
        self._cell: dict[tuple[str, ClockConfig], tuple[float, float]] = {}
        # device time, energy (true, J), last sensor update (time, counter J, power W)
        self.t = 0.0
        self.energy_j = 0.0
        self._upd_t = 0.0
        self._upd_e = 0.0
        self._upd_p = self.params.idle_w
        self.ambient_c, self.theta, self.tau = ambient_c, theta_c_per_w, tau_s
        self.temp_c = ambient_c + theta_c_per_w * self.params.idle_w
        self.device_seconds = 0.0     # device time spent running kernels (s)
        self.locked = ClockConfig()   # clocks set by SimulatedGpuActuator
        #: where the clocks in effect come from (default: :attr:`locked`); a test points it at a
        #: fake NVML's locks
        self.clock_source: Any = lambda: self.locked
        self.name = f"{self.spec.name} (simulated)"
        self.uuid = f"GPU-sim-{self.spec.name}"

    # -- clocks -----------------------------------------------------------------------------
    def clocks(self) -> ClockConfig:
        """The clock configuration in effect (from :attr:`clock_source`)."""
        cfg = self.clock_source()
        if not self.spec.supports(cfg):
            raise JouleboundError(f"simulated {self.spec.name}: locked clocks {cfg.label} are not "
                                  "in the supported table (the caller must validate pairs)")
        return cfg

    def true_cell(self, name: str, cfg: ClockConfig) -> tuple[float, float]:
        """True ``(time s, energy J)`` of one call of kernel ``name`` at ``cfg``."""
        key = (name, cfg)
        hit = self._cell.get(key)
        if hit is None:
            t, e = self.true_table([name], [cfg])
            hit = self._cell[key] = (float(t[0, 0]), float(e[0, 0]))
        return hit

    def true_table(self, names: list[str], configs: list[ClockConfig],
                   host_s: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """True time (s) and energy (J) per call, shape ``(len(names), len(configs))``; with
        ``host_s`` (per name, s) as in a training step whose host launches each kernel in that
        time (default: back to back, as replayed)."""
        from joulebound.gpumodel.characterize import evaluate, resolve_clocks
        from joulebound.gpumodel.kernel import KernelWork

        try:
            tr = [self.truth[n] for n in names]
        except KeyError as exc:
            raise JouleboundError(f"simulated GPU: unknown kernel {exc.args[0]!r}") from None
        col = lambda a: np.array(a, float)  # noqa: E731
        w = KernelWork(col([x.tc_s for x in tr]), col([x.tm_s for x in tr]),
                       col([x.activity for x in tr]), col([x.lam for x in tr]),
                       col([x.knee for x in tr]), host_s)
        rc = resolve_clocks(self.spec, configs, self.params)
        out = evaluate(w, rc, self.spec, self.params, method="reference")   # the spec's truth
        return out.time_s, out.energy_j

    # -- running ----------------------------------------------------------------------------
    def window_noise(self) -> tuple[float, float]:
        """A new measurement window's (time, power) factors."""
        return (float(np.exp(self.rng.normal(0.0, self.time_noise))),
                float(np.exp(self.rng.normal(0.0, self.power_noise))))

    def run(self, name: str, calls: int, noise: tuple[float, float] = (1.0, 1.0)) -> float:
        """Run ``calls`` back-to-back calls of kernel ``name`` at the clocks in effect; returns the
        device time they took (s)."""
        t1, e1 = self.true_cell(name, self.clocks())
        dt = t1 * calls * noise[0]
        self._advance(dt, e1 / t1 * noise[1] if t1 > 0 else self.params.idle_w)
        self.device_seconds += dt
        return dt

    def idle(self, seconds: float) -> None:
        """The GPU idles for ``seconds`` (s)."""
        self._advance(float(seconds), self.params.idle_w)

    def _advance(self, dt: float, power_w: float) -> None:
        if dt <= 0:
            return
        t0, e0 = self.t, self.energy_j
        self.t = t0 + dt
        self.energy_j = e0 + power_w * dt
        per = self.sensor_period_s
        last = math.floor(self.t / per) * per
        if last > self._upd_t:     # a sensor update happened in (t0, t]: counter as of `last`
            self._upd_e = e0 + power_w * max(last - t0, 0.0)
            self._upd_t = last
            self._upd_p = power_w
        a = math.exp(-dt / self.tau)
        self.temp_c = a * self.temp_c + (1 - a) * (self.ambient_c + self.theta * power_w)

    # -- readings (NVML units) --------------------------------------------------------------
    def counter_mj(self) -> int:
        """The energy counter (mJ, whole): the true energy at the last sensor update."""
        return int(self._upd_e * 1000.0)

    def power_mw(self) -> int:
        """Power over the last sensor update period (mW, whole)."""
        return int(self._upd_p * 1000.0)

    def temperature(self) -> int:
        """GPU temperature (°C, whole)."""
        return int(round(self.temp_c))

    def clocks_mhz(self) -> tuple[int, int]:
        """Current (SM, memory) clocks (MHz); governed domains report the model's auto clocks."""
        from joulebound.gpumodel.characterize import resolve_clocks

        rc = resolve_clocks(self.spec, [self.clocks()], self.params)
        return int(rc.core_mhz[0]), int(rc.mem_mhz[0])


class SimulatedGpuActuator(Actuator):
    """Sets a :class:`SimulatedGpu`'s clocks (the actuator interface the real path uses: the
    calibration's clock session drives it exactly like an NVML or helper actuator)."""

    name = "simulated-gpu"

    def __init__(self, sim: SimulatedGpu) -> None:
        super().__init__()
        self.sim = sim

    def _apply(self, config: ClockConfig) -> None:
        if not self.sim.spec.supports(config):
            raise JouleboundError(f"simulated {self.sim.spec.name}: {config.label} is not a "
                                  "supported clock pair")
        self.sim.locked = config
