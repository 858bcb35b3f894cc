"""Actuators: what a clock switch decided by the controller actually does.

* :class:`DryRunActuator` — records each intended switch with a timestamp; touches nothing.
* :class:`SimulatedActuator` — drives the device model: every op the controller reports is
  charged the modeled time and energy of that kernel at the clocks *in effect* (a switch takes
  effect ``switch_latency_s`` of modeled device time after it was issued), so a run reports the
  time and energy the plan would have had (provenance "modeled").
* :class:`NvmlActuator` — real clock locking through NVML (``nvmlDeviceSetGpuLockedClocks`` /
  ``nvmlDeviceSetMemoryLockedClocks``, the latter on Ampere and newer), issued only when the
  target changes; needs root or CAP_SYS_ADMIN (otherwise a clear error); holds the GPU
  exclusively (a lock keyed on its UUID); restores the defaults
  (``nvmlDeviceResetGpuLockedClocks`` / ``nvmlDeviceResetMemoryLockedClocks``) on normal exit,
  exceptions and SIGINT/SIGTERM/SIGHUP/SIGQUIT (:mod:`~joulebound.runtime.guard`), and — through a
  forked guardian (:mod:`~joulebound.runtime.guardian`) — when the process dies without unwinding
  (``os._exit``, ``abort()``, SIGSEGV, SIGBUS, SIGKILL).
  **Never run it on a shared or lent GPU.**
* :class:`~joulebound.runtime.helper.HelperActuator` — asks the privileged clock helper
  over a Unix socket (training itself needs no root).

Every actuator has ``set_clocks(config)``, ``reset()``, ``on_op(label)`` (simulation hook) and
``close()``, and is a context manager. A closed actuator changes nothing any more. ``ClockConfig()`` ("auto") means the GPU's default
governor: reset the locks.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from joulebound.core.clocks import AUTO, ClockConfig
from joulebound.core.errors import JouleboundError, NoPermission, UnsupportedGPU
from joulebound.gpumodel.characterization import Characterization
from joulebound.hw import gpu as gpu_layer
from joulebound.runtime import guardian as clock_guardian
from joulebound.runtime.guard import guard


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
        #: switches asked for but not made because another owner held the GPU or the clock
        #: helper was unreachable (:class:`~joulebound.runtime.helper.HelperActuator`)
        self.skipped = 0
        #: switches made: :meth:`set_clocks` calls that changed the target and whose calls (NVML,
        #: the helper) succeeded; the resets of :meth:`reset` / :meth:`close` are not counted
        self.realized = 0

    @property
    def in_owner_process(self) -> bool:
        """False in a forked child (e.g. a DataLoader worker), which must not touch the clocks."""
        return os.getpid() == self._pid

    @property
    def closed(self) -> bool:
        return self._closed

    def set_clocks(self, config: ClockConfig) -> bool:
        """Switch to ``config``; returns False (and does nothing) when it is already current,
        when the actuator is closed, or when called from a forked child process. A switch made
        counts in :attr:`realized`."""
        if self._closed or config == self.current or not self.in_owner_process:
            return False
        self._apply(config)
        self.current = config
        self.switches.append(SwitchRecord(time.monotonic() - self._t0, config, self.n_ops))
        self.realized += 1
        return True

    def _apply(self, config: ClockConfig) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def supported_clocks(self) -> dict[int, list[int]] | None:
        """The live GPU's clock table (memory MHz -> core MHz), ``None`` for actuators with no
        GPU (dry-run, simulated) or when it cannot be read."""
        return None

    def describe_gpu(self) -> str:
        """The GPU this actuator drives, in words."""
        return "the GPU"

    def on_op(self, label: int) -> None:
        """An op ran (``label``: plan position or -1). Only the simulator uses it."""
        self.n_ops += 1

    def reset(self) -> None:
        """Back to the GPU's default clocks (through :meth:`set_clocks`, so a subclass's checks
        apply; not counted in :attr:`realized`: it is no switch the controller asked for)."""
        if self.set_clocks(AUTO):
            self.realized -= 1

    def close(self) -> None:
        if not self._closed and self.in_owner_process:
            self.reset()
            self._closed = True

    def emergency_close(self, timeout_s: float = 5.0) -> None:
        """Close from any thread (after a signal): base actuators change no clocks."""
        self.close()

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
    under the controller is checked against; :func:`joulebound.planning.simulate.simulate` replays
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
PERMISSION_HELP = (
    "changing GPU clocks needs root or CAP_SYS_ADMIN. Either run the privileged helper once "
    "(`sudo joulebound clock-helper --socket /run/joulebound/clocks.sock --group $(id -gn)`) and "
    "use `--actuator helper`, or run this process with privileges (e.g. `sudo -E`). To try a plan "
    "without changing clocks use `--actuator dry-run` or `--actuator simulated`."
)


class ChannelClosed(Exception):
    """The actuator was closed while a switch was on its way: nothing more is done."""


class NvmlActuator(Actuator):
    """Lock GPU clocks through NVML; restores the defaults on every way out.

    Args:
        gpu: the GPU as CUDA numbers it — an index into ``CUDA_VISIBLE_DEVICES`` when that is set
            (else the NVML index), or a ``GPU-``/``MIG-`` UUID; resolved to one physical GPU by
            UUID (:func:`joulebound.hw.gpu.resolve`).
        nvml: NVML module (default ``pynvml``); tests pass a fake.
        check_privileges: fail at construction when not root / CAP_SYS_ADMIN.
        lock_memory: also lock the memory clock (Ampere and newer; core-only before, with a note).
        install_signal_handlers: restore the defaults on SIGINT/SIGTERM/SIGHUP/SIGQUIT through
            the process's :mod:`~joulebound.runtime.guard` (main thread only).
        env: environment for ``CUDA_VISIBLE_DEVICES`` (default ``os.environ``).
        owner: who holds the GPU, in words, for the message another owner gets.
        restore_timeout_s: how long a restore waits for an NVML call in flight before it resets
            anyway (and again once that call returns).
        guardian: fork a :mod:`~joulebound.runtime.guardian` that resets the clocks if this
            process dies without unwinding (``os._exit``, ``abort()``, a segfault, SIGKILL).

    The GPU is held exclusively (:class:`~joulebound.hw.gpu.GpuLock`, keyed on its UUID)
    from construction to :meth:`close`: a second actuator, ``joulebound run`` or the clock helper
    on the same GPU is refused. Once closed the actuator makes no NVML call at all.

    Never run this on a GPU you share or were lent: it changes device settings for every user.
    """

    name = "nvml"

    def __init__(self, gpu: int | str = 0, nvml: Any = None, check_privileges: bool = True,
                 lock_memory: bool = True, install_signal_handlers: bool = True,
                 env: dict[str, str] | None = None, owner: str = "joulebound",
                 restore_timeout_s: float = 5.0, guardian: bool = True) -> None:
        super().__init__()
        self._closed = True           # until fully open: close() does nothing
        if check_privileges and not gpu_layer.has_clock_privileges():
            raise NoPermission(PERMISSION_HELP)
        self._session, self.device = gpu_layer.open_gpu(nvml, gpu, env)
        self.nvml = self._session.nv
        self.gpu = gpu
        self.uuid = self.device.uuid
        self.handle = self.device.handle
        try:
            self.gpu_lock = gpu_layer.GpuLock(self.uuid, owner=f"{owner} (NVML actuator)")
            self.gpu_lock.acquire()
        except BaseException:
            self._session.close()
            raise
        self.lock_memory = lock_memory
        self.restore_timeout_s = float(restore_timeout_s)
        self.notes: list[str] = []
        #: resets the clocks if this process vanishes without doing it (``None``: none)
        self.guardian = (clock_guardian.start_or_note(self.device, self.gpu_lock, self.notes)
                         if guardian else None)
        self._core_locked = False
        self._mem_locked = False
        self._mu = threading.Lock()
        self._close_mu = threading.Lock()
        self._restored = threading.Event()
        self._closed = False
        atexit.register(self.close)
        self._guarded = False
        if install_signal_handlers:
            g = guard()
            self._guarded = g.register(self)
            for n in g.notes:
                if n not in self.notes:
                    self.notes.append(n)

    def set_clocks(self, config: ClockConfig) -> bool:
        if self._closed:
            return False
        try:
            return super().set_clocks(config)
        except ChannelClosed:
            return False

    def supported_clocks(self) -> dict[int, list[int]] | None:
        """The GPU's clock table as NVML lists it now (``None`` when it cannot be read)."""
        try:
            return self.device.supported_clocks() or None
        except Exception as exc:
            self.notes.append(f"the supported clocks of {self.device.describe()} could not be "
                              f"read ({exc})")
            return None

    def describe_gpu(self) -> str:
        return self.device.describe()

    def _call(self, what: str, call: Any, *args: Any) -> None:
        """``call(*args)`` (a :class:`~joulebound.hw.gpu.GpuDevice` clock method), its NVML
        error turned into the typed error of its return code (``what`` says what was tried)."""
        if self._closed:
            raise ChannelClosed
        try:
            call(*args)
        except Exception as exc:
            kind = gpu_layer.nvml_error_kind(self.nvml, exc)
            if kind is NoPermission:
                raise NoPermission(f"{what} was refused: {PERMISSION_HELP}") from exc
            raise kind(f"{what} failed on {self.device.describe()}: {exc}") from exc

    def _apply(self, config: ClockConfig) -> None:
        dev = self.device
        with self._mu:
            if config.core_mhz is None:
                if self._core_locked:
                    self._call("resetting the core clock", dev.reset_core)
                    self._core_locked = False
            else:
                self._call(f"locking the core clock at {config.core_mhz} MHz", dev.lock_core,
                           config.core_mhz)
                self._core_locked = True
            if not self.lock_memory:
                return
            if config.mem_mhz is None:
                if self._mem_locked:
                    self._call("resetting the memory clock", dev.reset_memory)
                    self._mem_locked = False
                return
            try:
                self._call(f"locking the memory clock at {config.mem_mhz} MHz", dev.lock_memory,
                           config.mem_mhz)
                self._mem_locked = True
            except UnsupportedGPU:
                # before Ampere memory clocks cannot be locked: keep going with core clocks
                self.lock_memory = False
                self.notes.append(f"{self.device.describe()} does not support memory-clock "
                                  "locking (pre-Ampere); only core clocks are applied")

    def reset(self) -> None:
        """Unlock both clocks (always issues the reset calls; never from a forked child, never
        once closed)."""
        if not self.in_owner_process or self._closed:
            return
        with self._mu:
            if self._closed:
                return
            self._reset_now()
        if self.current != AUTO:
            self.switches.append(SwitchRecord(time.monotonic() - self._t0, AUTO, self.n_ops))
        self.current = AUTO

    def _reset_now(self) -> None:
        for err in self.device.reset_clocks():
            note = f"{self.device.describe()}: {err}"
            if note not in self.notes:
                self.notes.append(note)
        self._core_locked = self._mem_locked = False

    def emergency_close(self, timeout_s: float | None = None) -> None:
        """Close from any thread (the guard's restorer, ``atexit``, :meth:`close`): no NVML call
        is made after this, except the reset; an NVML call in flight is waited for at most
        ``timeout_s`` (then the reset is issued anyway, and again once that call returns)."""
        if not self.in_owner_process:
            return
        timeout = self.restore_timeout_s if timeout_s is None else float(timeout_s)
        with self._close_mu:
            first = not self._closed
            self._closed = True       # from now on _call refuses: the reset is the last call
        if not first:                 # another thread is restoring: wait for it to finish
            self._restored.wait(timeout + 1.0)
            return
        got = self._mu.acquire(timeout=timeout)
        try:
            self._reset_now()
            if not got:
                self.notes.append(f"an NVML call was still in flight after {timeout:g} s; clocks "
                                  "reset anyway")
                if self._mu.acquire(timeout=60.0):   # that call has returned: reset once more
                    got = True
                    self._reset_now()
        finally:
            if got:
                self._mu.release()
        if self.current != AUTO:
            self.switches.append(SwitchRecord(time.monotonic() - self._t0, AUTO, self.n_ops))
        self.current = AUTO
        if self.guardian is not None:     # before the lock goes: the guardian must not reset
            self.guardian.done()          # clocks a later owner set
        self.gpu_lock.release()
        if got:
            self._session.close()
        guard().unregister(self)
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        self._restored.set()

    def close(self) -> None:
        self.emergency_close()


@dataclass
class ResetReport:
    """What ``reset-clocks`` did to one GPU.

    Attributes:
        gpu: what the user named (index or UUID), or the NVML index.
        uuid: the physical GPU (``None`` when ``gpu`` named no GPU).
        name: product name.
        errors: what failed (empty: both clocks are back at the defaults).
        note: e.g. who held the GPU.
    """

    gpu: str
    uuid: str | None
    name: str = ""
    errors: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.errors


def reset_all_clocks(nvml: Any = None, gpus: Sequence[int | str] | None = None,
                     env: dict[str, str] | None = None) -> list[ResetReport]:
    """Reset locked core and memory clocks; tries every GPU and reports each one.

    Args:
        gpus: CUDA-visible indices or UUIDs (:func:`joulebound.hw.gpu.resolve`); ``None``:
            every GPU NVML sees (``CUDA_VISIBLE_DEVICES`` ignored: after a hard kill every locked
            GPU should come back).
    """
    with gpu_layer.Nvml(nvml) as nv:
        reports: list[ResetReport] = []
        targets: list[tuple[str, gpu_layer.PhysicalGpu | None, str]] = []
        if gpus is None:
            targets = [(str(g.nvml_index), g, "") for g in nv.gpus()]
        else:
            for g in gpus:
                try:
                    targets.append((str(g), nv.resolve(g, env), ""))
                except JouleboundError as exc:
                    targets.append((str(g), None, str(exc)))
        seen: set[str] = set()
        for label, phys, err in targets:
            if phys is None:
                reports.append(ResetReport(label, None, errors=[err]))
                continue
            if phys.uuid in seen:
                continue
            seen.add(phys.uuid)
            rep = ResetReport(label, phys.uuid, phys.name)
            try:
                dev = nv.open(phys)
            except Exception as exc:
                rep.errors.append(f"cannot open {phys.describe()}: {exc}")
                reports.append(rep)
                continue
            for e in dev.reset_clocks():
                if "permission" in e.lower():
                    e += " (needs root or CAP_SYS_ADMIN: run with sudo)"
                rep.errors.append(e)
            lk = gpu_layer.GpuLock(phys.uuid)
            try:
                lk.acquire()
                lk.release()
            except gpu_layer.GpuBusy:
                rep.note = (f"controlled by {lk.holder()}: its clocks were reset, but that owner "
                            "may lock them again")
            except (OSError, JouleboundError):
                pass      # no usable lock folder: nobody can hold the GPU through it
            reports.append(rep)
    return reports
