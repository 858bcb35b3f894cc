"""Actuators: what a clock switch decided by the controller actually does.

* :class:`DryRunActuator` — records each intended switch with a timestamp; touches nothing.
* :class:`SimulatedActuator` — drives the device model: every op the controller reports is
  charged the modeled time and energy of that kernel at the clocks *in effect* (a switch takes
  effect ``switch_latency_s`` of modeled device time after it was issued), so a run reports the
  time and energy the plan would have had (provenance "modeled").
* :class:`NvmlActuator` — real clock locking through NVML (``nvmlDeviceSetGpuLockedClocks`` /
  ``nvmlDeviceSetMemoryLockedClocks``, the latter on Ampere and newer), issued only when the
  target changes; needs root or CAP_SYS_ADMIN (otherwise a clear error); restores the defaults
  (``nvmlDeviceResetGpuLockedClocks`` / ``nvmlDeviceResetMemoryLockedClocks``) on normal exit,
  exceptions, SIGINT and SIGTERM. **Never run it on a shared or lent GPU.**
* :class:`~joulebound.dvfs.control.helper.HelperActuator` — asks the privileged clock helper
  over a Unix socket (training itself needs no root).

Every actuator has ``set_clocks(config)``, ``reset()``, ``on_op(label)`` (simulation hook) and
``close()``, and is a context manager. ``ClockConfig()`` ("auto") means the GPU's default
governor: reset the locks.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...clocks import AUTO, ClockConfig
from ...errors import JouleboundError
from ..characterization import Characterization


@dataclass(slots=True)
class SwitchRecord:
    """One switch as an actuator saw it. ``t_s``: seconds since the actuator was created."""

    t_s: float
    config: ClockConfig
    op_index: int = -1


class Actuator:
    """Base class: keeps the current target, skips no-op switches, restores on close."""

    name = "base"

    def __init__(self) -> None:
        self.current: ClockConfig = AUTO
        # bounded: a long run can switch millions of times
        self.switches: deque[SwitchRecord] = deque(maxlen=100_000)
        self._t0 = time.monotonic()
        self._closed = False
        self.n_ops = 0
        self._pid = os.getpid()

    @property
    def in_owner_process(self) -> bool:
        """False in a forked child (e.g. a DataLoader worker), which must not touch the clocks."""
        return os.getpid() == self._pid

    def set_clocks(self, config: ClockConfig) -> bool:
        """Switch to ``config``; returns False (and does nothing) when it is already current,
        or when called from a forked child process."""
        if config == self.current or not self.in_owner_process:
            return False
        self._apply(config)
        self.current = config
        self.switches.append(SwitchRecord(time.monotonic() - self._t0, config, self.n_ops))
        return True

    def _apply(self, config: ClockConfig) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def on_op(self, label: int) -> None:
        """An op ran (``label``: plan position or -1). Only the simulator uses it."""
        self.n_ops += 1

    def reset(self) -> None:
        """Back to the GPU's default clocks."""
        self.set_clocks(AUTO)

    def close(self) -> None:
        if not self._closed and self.in_owner_process:
            self._closed = True
            self.reset()

    def __enter__(self) -> Actuator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DryRunActuator(Actuator):
    """Logs intended switches (``switches``: time, config, op index); changes nothing."""

    name = "dry-run"

    def _apply(self, config: ClockConfig) -> None:
        pass


@dataclass
class SimTotals:
    """Modeled totals of a simulated run (s, J).

    ``baseline_time_s`` / ``baseline_energy_j``: the same known ops at the safe (default, auto)
    clocks, so ``energy_j / baseline_energy_j - 1`` is the plan's modeled saving on this run."""

    time_s: float = 0.0
    energy_j: float = 0.0
    baseline_time_s: float = 0.0
    baseline_energy_j: float = 0.0
    ops: int = 0
    unknown_ops: int = 0
    switches: int = 0
    per_iteration: list[tuple[float, float]] = field(default_factory=list)


class SimulatedActuator(Actuator):
    """Charge each op the modeled time and energy at the clocks in effect.

    Args:
        char: characterization of the plan's kernels (rows = plan positions) over configs that
            include every config the controller may command (the plan's configs and the safe
            pair, normally ``auto``).
        switch_latency_s: modeled time from issuing a switch until the new clocks are in effect
            (s). Until then ops run at the old clocks; the switch completes at an op boundary
            (the first op that starts after the latency has elapsed). Switches are serial: one
            issued while another is in flight starts when that one completes.
        iteration_start: plan position that starts an iteration (for per-iteration totals).
        timeline_capacity: ops kept in :attr:`timeline` (modeled end time, label, config column).

    Ops with label -1 (not in the plan: an evaluation step, a new shape) have no modeled cost;
    they are counted in ``totals.unknown_ops`` and add no time or energy.
    """

    name = "simulated"

    def __init__(self, char: Characterization, switch_latency_s: float = 0.0,
                 iteration_start: int = 0, timeline_capacity: int = 100_000) -> None:
        super().__init__()
        self.char = char
        self.latency = float(switch_latency_s)
        self._col = {c: i for i, c in enumerate(char.configs)}
        if AUTO not in self._col:
            raise JouleboundError("SimulatedActuator: the characterization has no 'auto' column "
                                  "(the safe/default clocks); characterize with include_auto=True")
        self._auto = self._col[AUTO]
        self._in_effect = self._auto
        self._pending: deque[tuple[int, float]] = deque()   # (column, time it takes effect)
        self._last_done = 0.0
        self._time = char.time_s
        self._energy = char.energy_j
        self.iteration_start = iteration_start
        self.totals = SimTotals()
        self._iter_mark = (0.0, 0.0)
        self._iter_open = False
        # (modeled end time s, label, column in effect) of the most recent ops
        self.timeline: deque[tuple[float, int, int]] = deque(maxlen=timeline_capacity)

    def _apply(self, config: ClockConfig) -> None:
        col = self._col.get(config)
        if col is None:
            raise JouleboundError(f"SimulatedActuator: config {config} is not in the "
                                  "characterization; characterize the plan's configs")
        done = max(self.totals.time_s, self._last_done) + self.latency
        self._last_done = done
        self._pending.append((col, done))

    def finish_iteration(self) -> None:
        """Close the running iteration's totals (called at each iteration start)."""
        tot = self.totals
        if self._iter_open:
            t0, e0 = self._iter_mark
            tot.per_iteration.append((tot.time_s - t0, tot.energy_j - e0))
        self._iter_mark = (tot.time_s, tot.energy_j)
        self._iter_open = True

    def on_op(self, label: int) -> None:
        self.n_ops += 1
        tot = self.totals
        pend = self._pending
        while pend and tot.time_s >= pend[0][1] - 1e-15:
            self._in_effect = pend.popleft()[0]
            tot.switches += 1
        tot.ops += 1
        if label < 0:
            tot.unknown_ops += 1
            return
        if label == self.iteration_start:
            self.finish_iteration()
        c = self._in_effect
        tot.time_s += float(self._time[label, c])
        tot.energy_j += float(self._energy[label, c])
        tot.baseline_time_s += float(self._time[label, self._auto])
        tot.baseline_energy_j += float(self._energy[label, self._auto])
        self.timeline.append((tot.time_s, label, c))


def replay_plan(char: Characterization, plan: Any, commands: np.ndarray, iterations: int,
                switch_latency_s: float) -> SimTotals:
    """Offline replay: run ``iterations`` of the plan through a :class:`SimulatedActuator`.

    ``commands[j]`` is the config index (into ``plan.configs``) commanded when op ``j`` is
    dispatched (see :attr:`Controller.commands`). The steady-state (cyclic) reference a run
    under the controller is checked against; :func:`joulebound.dvfs.simulate.simulate` replays
    one iteration from the plan itself (look-ahead issued from the schedule, not per op)."""
    act = SimulatedActuator(char, switch_latency_s)
    cfgs = plan.configs
    for _ in range(iterations):
        for j in range(len(commands)):
            act.set_clocks(cfgs[int(commands[j])])
            act.on_op(j)
    act.finish_iteration()
    return act.totals


# -- NVML ------------------------------------------------------------------------------------------
def _has_cap_sys_admin() -> bool:
    """True when running as root or with CAP_SYS_ADMIN in the effective capability set."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return True
    try:
        for line in open("/proc/self/status", encoding="ascii"):
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) & (1 << 21))
    except OSError:
        pass
    return False


PERMISSION_HELP = (
    "changing GPU clocks needs root or CAP_SYS_ADMIN. Either run the privileged helper once "
    "(`sudo joulebound clock-helper --socket /run/joulebound/clocks.sock --group $(id -gn)`) and "
    "use `--actuator helper`, or run this process with privileges (e.g. `sudo -E`). To try a plan "
    "without changing clocks use `--actuator dry-run` or `--actuator simulated`."
)


def load_nvml(nvml: Any = None) -> Any:
    """The ``pynvml`` module (nvidia-ml-py) or the given stand-in, initialised."""
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except ImportError as exc:
            raise JouleboundError("NVML is not available: install nvidia-ml-py "
                                  "(pip install nvidia-ml-py)") from exc
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError subclasses vary
        raise JouleboundError(f"NVML could not start ({exc}); is an NVIDIA driver installed "
                              "and a GPU visible?") from exc
    return nvml


def _is_not_supported(nvml: Any, exc: BaseException | None) -> bool:
    cls = getattr(nvml, "NVMLError_NotSupported", None)
    return exc is not None and ((cls is not None and isinstance(exc, cls))
                                or "not supported" in str(exc).lower())


def reset_locks(nvml: Any, handle: Any) -> None:
    """Best effort: unlock the core and memory clocks of ``handle`` (never raises; the memory
    reset is unsupported before Ampere)."""
    for fn in ("nvmlDeviceResetGpuLockedClocks", "nvmlDeviceResetMemoryLockedClocks"):
        try:
            getattr(nvml, fn)(handle)
        except Exception:  # noqa: BLE001 - best effort
            pass


def _is_no_permission(nvml: Any, exc: Exception) -> bool:
    cls = getattr(nvml, "NVMLError_NoPermission", None)
    return (cls is not None and isinstance(exc, cls)) or "permission" in str(exc).lower()


class NvmlActuator(Actuator):
    """Lock GPU clocks through NVML; restores the defaults on every way out.

    Args:
        gpu: NVML device index.
        nvml: NVML module (default ``pynvml``); tests pass a fake.
        check_privileges: fail at construction when not root / CAP_SYS_ADMIN.
        lock_memory: also lock the memory clock (Ampere and newer; silently core-only before).
        install_signal_handlers: restore defaults on SIGINT / SIGTERM (then re-raise the
            previous handler's behaviour).

    Never run this on a GPU you share or were lent: it changes device settings for every user.
    """

    name = "nvml"

    def __init__(self, gpu: int = 0, nvml: Any = None, check_privileges: bool = True,
                 lock_memory: bool = True, install_signal_handlers: bool = True) -> None:
        super().__init__()
        if check_privileges and not _has_cap_sys_admin():
            raise JouleboundError(PERMISSION_HELP)
        self.nvml = load_nvml(nvml)
        self.gpu = gpu
        try:
            self.handle = self.nvml.nvmlDeviceGetHandleByIndex(gpu)
        except Exception as exc:  # noqa: BLE001 - NVMLError subclasses
            raise JouleboundError(f"GPU index {gpu} not found by NVML ({exc}); use --gpu with "
                                  "an index from `nvidia-smi -L`") from exc
        self.lock_memory = lock_memory
        self.notes: list[str] = []
        self._core_locked = False
        self._mem_locked = False
        self._lock = threading.Lock()
        self._prev_handlers: dict[int, Any] = {}
        atexit.register(self.close)
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._prev_handlers[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        """Reset the clocks, then behave as the previous handler would have."""
        prev = self._prev_handlers.get(signum, signal.SIG_DFL)
        self.close()            # resets the clocks (owner process only), restores handlers
        if callable(prev):      # e.g. Python's default SIGINT handler -> KeyboardInterrupt
            prev(signum, frame)
        elif prev != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _call(self, fn: str, *args: Any) -> None:
        try:
            getattr(self.nvml, fn)(self.handle, *args)
        except Exception as exc:  # noqa: BLE001 - NVMLError subclasses
            if _is_no_permission(self.nvml, exc):
                raise JouleboundError(f"{fn} was refused: {PERMISSION_HELP}") from exc
            raise JouleboundError(f"{fn}{args} failed on GPU {self.gpu}: {exc}") from exc

    def _apply(self, config: ClockConfig) -> None:
        with self._lock:
            if config.core_mhz is None:
                if self._core_locked:
                    self._call("nvmlDeviceResetGpuLockedClocks")
                    self._core_locked = False
            else:
                self._call("nvmlDeviceSetGpuLockedClocks", config.core_mhz, config.core_mhz)
                self._core_locked = True
            if not self.lock_memory:
                return
            if config.mem_mhz is None:
                if self._mem_locked:
                    self._call("nvmlDeviceResetMemoryLockedClocks")
                    self._mem_locked = False
                return
            try:
                self._call("nvmlDeviceSetMemoryLockedClocks", config.mem_mhz, config.mem_mhz)
                self._mem_locked = True
            except JouleboundError as exc:
                if not _is_not_supported(self.nvml, exc.__cause__):
                    raise
                # before Ampere memory clocks cannot be locked: keep going with core clocks
                self.lock_memory = False
                self.notes.append(f"GPU {self.gpu} does not support memory-clock locking "
                                  "(pre-Ampere); only core clocks are applied")

    def reset(self) -> None:
        """Unlock both clocks (always issues the reset calls; never from a forked child)."""
        if not self.in_owner_process:
            return
        with self._lock:
            reset_locks(self.nvml, self.handle)
            self._core_locked = self._mem_locked = False
        if self.current != AUTO:
            self.switches.append(SwitchRecord(time.monotonic() - self._t0, AUTO, self.n_ops))
        self.current = AUTO

    def close(self) -> None:
        if self._closed or not self.in_owner_process:
            return
        self._closed = True
        self.reset()
        for sig, prev in self._prev_handlers.items():
            try:
                if signal.getsignal(sig) == self._on_signal:
                    signal.signal(sig, prev)
            except (ValueError, TypeError):
                pass
        self._prev_handlers.clear()
        atexit.unregister(self.close)


def reset_all_clocks(nvml: Any = None, gpus: list[int] | None = None) -> list[int]:
    """Reset locked core and memory clocks on ``gpus`` (default: all); returns the indices."""
    nv = load_nvml(nvml)
    if gpus is None:
        gpus = list(range(nv.nvmlDeviceGetCount()))
    for i in gpus:
        h = nv.nvmlDeviceGetHandleByIndex(i)
        try:
            nv.nvmlDeviceResetGpuLockedClocks(h)
        except Exception as exc:  # noqa: BLE001
            if _is_no_permission(nv, exc):
                raise JouleboundError(f"resetting clocks of GPU {i} was refused: needs root or "
                                      "CAP_SYS_ADMIN (run with sudo)") from exc
            raise JouleboundError(f"resetting clocks of GPU {i} failed: {exc}") from exc
        try:
            nv.nvmlDeviceResetMemoryLockedClocks(h)
        except Exception:  # noqa: BLE001 - not supported before Ampere
            pass
    return gpus
