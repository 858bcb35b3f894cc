"""A fake NVML module (``pynvml`` stand-in), for tests and rehearsals. Nothing here touches hardware.

One fake for every NVML subset joulebound uses:

* **clock locking** (the actuators and the clock helper): supported clock tables, locked-clock
  state per GPU, and a switchable permission check;
* **energy and power** (the energy meter): a total-energy counter (mJ) and a power reading (mW)
  per GPU, each of which can be made unsupported, forbidden or lost;
* **MIG**: MIG mode and MIG device handles with their UUIDs;
* **errors**: ``NVMLError(code)`` with ``.value`` and the ``NVML_ERROR_*`` constants, returning the
  matching subclass (``NVMLError_NoPermission`` ...) as ``pynvml`` does;
* a log of every call by name (``calls``, ``count(name)``);
* **cross-process mode** (``state_path``): the clock-lock state and the call log live in a JSON
  file (guarded by ``flock``) that every process opening a ``FakeNvml`` on the same path shares — a
  test installs it in a real ``joulebound`` child process and watches the locks from outside;
* **slow calls** (``delays``: call name -> seconds): a call sleeps that long before it takes effect,
  and is listed in ``inflight()`` meanwhile, so a test can send a signal while an NVML call is in
  flight.

Example::

    nv = FakeNvml(n_gpus=1, supported={1593: [1410, 1200, 1005]}, privileged=False)
    NvmlActuator(nvml=nv, check_privileges=False)   # set calls raise NVMLError_NoPermission

    g = FakeGPU("GPU-aaaa", energy_mj=5_000_000)     # the test moves g.energy_mj / g.power_mw
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpus=[g]))
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15

#: pynvml's error strings (``nvmlErrorString``)
_MESSAGES = {NVML_ERROR_UNINITIALIZED: "Uninitialized",
             NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
             NVML_ERROR_NOT_SUPPORTED: "Not Supported",
             NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
             NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
             NVML_ERROR_GPU_IS_LOST: "GPU is lost"}


class NVMLError(Exception):
    """Mirrors ``pynvml.NVMLError``: ``NVMLError(code)`` is an instance of the code's subclass,
    ``.value`` is the code and ``str()`` the NVML error string."""

    _by_value: dict[int, type[NVMLError]] = {}
    value: int

    def __new__(cls, value: int | None = None, *args: Any) -> NVMLError:
        if cls is NVMLError and value in NVMLError._by_value:
            cls = NVMLError._by_value[value]
        obj = Exception.__new__(cls)
        obj.value = getattr(cls, "_code", value) if value is None else value
        return obj

    def __init__(self, value: int | None = None, *args: Any) -> None:
        super().__init__(self.value)

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, str(self.value))

    def __init_subclass__(cls, code: int = 0, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._code = code
        NVMLError._by_value[code] = cls


class NVMLError_Uninitialized(NVMLError, code=NVML_ERROR_UNINITIALIZED):
    """NVML used before ``nvmlInit``."""


class NVMLError_InvalidArgument(NVMLError, code=NVML_ERROR_INVALID_ARGUMENT):
    """Raised for a GPU index or a clock the device does not have."""


class NVMLError_NotSupported(NVMLError, code=NVML_ERROR_NOT_SUPPORTED):
    """Raised for a call the device does not support (memory locks before Ampere, no counter)."""


class NVMLError_NoPermission(NVMLError, code=NVML_ERROR_NO_PERMISSION):
    """Raised by set/reset calls when not privileged, and by forbidden readings."""


class NVMLError_LibraryNotFound(NVMLError, code=NVML_ERROR_LIBRARY_NOT_FOUND):
    """Raised by ``nvmlInit`` when there is no driver."""


class NVMLError_GpuIsLost(NVMLError, code=NVML_ERROR_GPU_IS_LOST):
    """Raised by reads of a GPU that fell off the bus."""


@dataclass
class FakeGPU:
    """One fake GPU's readings; tests change the fields between reads.

    Attributes:
        uuid: ``nvmlDeviceGetUUID``.
        energy_mj: total-energy counter, mJ.
        power_mw: power reading, mW.
        counter: ``"ok"`` | ``"unsupported"`` | ``"noperm"`` | ``"lost"`` (energy counter).
        power: ``"ok"`` | ``"noperm"`` | ``"lost"`` (power reading).
        mig: MIG mode enabled.
        mig_uuids: UUIDs of the MIG devices.
        name: ``nvmlDeviceGetName``.
        temperature_c: ``nvmlDeviceGetTemperature`` (°C).
        default_clocks: ``(SM MHz, memory MHz)`` that ``nvmlDeviceGetClockInfo`` reports for an
            unlocked domain (0: the top of the supported table).
        clock: when given (e.g. ``time.perf_counter``, s), the counter also advances at
            ``power_mw`` with this clock from the GPU's creation: a GPU drawing constant power.
    """

    uuid: str = "GPU-fake"
    energy_mj: int = 1_000_000
    power_mw: int = 100_000
    counter: str = "ok"
    power: str = "ok"
    mig: bool = False
    mig_uuids: tuple[str, ...] = ()
    name: str = "NVIDIA H200"
    clock: Callable[[], float] | None = None
    temperature_c: int = 40
    default_clocks: tuple[int, int] = (0, 0)
    _t0: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.clock is not None:
            self._t0 = self.clock()

    def counter_mj(self) -> int:
        """The counter now, mJ."""
        if self.clock is None:
            return self.energy_mj
        return self.energy_mj + int((self.clock() - self._t0) * self.power_mw)


@dataclass(frozen=True)
class FakeMigHandle:
    """Handle of one MIG device."""

    uuid: str


def _api(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Log the call's name in ``self.calls``."""

    @functools.wraps(fn)
    def wrapped(self: FakeNvml, *args: Any) -> Any:
        name = fn.__name__
        with self._mu:
            self.calls.append(name)
        if self.state_path is not None:
            h = args[0] if args and isinstance(args[0], int) else None
            with self._shared() as st:
                st["calls"].append([name, os.getpid(), h, time.time()])
        delay = self.delays.get(name)
        if delay:
            self._inflight(name, True)
            try:
                time.sleep(delay)
            finally:
                self._inflight(name, False)
        return fn(self, *args)

    return wrapped


class FakeNvml(types.ModuleType):
    """Stand-in for the ``pynvml`` module (a module object, so it can sit in ``sys.modules``).

    Handles are GPU indices (``int``) and :class:`FakeMigHandle`.

    Args:
        n_gpus: number of devices (default GPUs ``GPU-fake-<i>``) when ``gpus`` is not given.
        supported: memory MHz -> supported core MHz list (same for every GPU).
        privileged: whether set/reset calls are allowed.
        memory_locks: whether memory-clock locking is supported (Ampere and newer).
        gpus: the devices' readings (see :class:`FakeGPU`).
        init_error: ``NVML_ERROR_*`` code ``nvmlInit`` raises (e.g. 12: no driver).
        state_path: share the clock locks and the call log with every process using this path
            (a JSON file, created when missing).
        delays: call name -> seconds the call takes (it takes effect at the end).
        failing_gpus: GPU indices whose clock set/reset calls fail (``NVMLError_GpuIsLost``).
    """

    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVML_ERROR_UNINITIALIZED = NVML_ERROR_UNINITIALIZED
    NVML_ERROR_INVALID_ARGUMENT = NVML_ERROR_INVALID_ARGUMENT
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = NVML_ERROR_NO_PERMISSION
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, n_gpus: int = 1, supported: dict[int, list[int]] | None = None,
                 privileged: bool = True, memory_locks: bool = True,
                 gpus: list[FakeGPU] | None = None, init_error: int | None = None,
                 state_path: str | os.PathLike | None = None,
                 delays: dict[str, float] | None = None,
                 failing_gpus: set[int] | frozenset[int] = frozenset()) -> None:
        super().__init__("pynvml")
        self.gpus = list(gpus) if gpus is not None else [FakeGPU(f"GPU-fake-{i}")
                                                         for i in range(n_gpus)]
        self.n_gpus = len(self.gpus)
        self.supported = supported or {1593: [1410, 1305, 1200, 1095, 1005, 900, 810],
                                       1215: [1410, 1200, 1005, 810]}
        self.privileged = privileged
        self.memory_locks = memory_locks
        self.init_error = init_error
        self.calls: list[str] = []
        self._core_lock: dict[int, tuple[int, int] | None] = {i: None for i in range(self.n_gpus)}
        self._mem_lock: dict[int, tuple[int, int] | None] = {i: None for i in range(self.n_gpus)}
        self._mu = threading.RLock()
        self.initialized = False
        self.delays = dict(delays or {})
        self.failing_gpus = set(failing_gpus)
        self._local_inflight: list[str] = []
        self.state_path = Path(state_path) if state_path is not None else None
        if self.state_path is not None:
            with self._shared():
                pass  # creates the file when missing

    # -- shared state -----------------------------------------------------------------------
    @contextlib.contextmanager
    def _shared(self) -> Any:
        """The cross-process state, locked for one read-modify-write."""
        assert self.state_path is not None
        with self._mu, open(self.state_path, "a+", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            text = f.read()
            st = json.loads(text) if text.strip() else {
                "core_lock": {str(i): None for i in range(self.n_gpus)},
                "mem_lock": {str(i): None for i in range(self.n_gpus)},
                "calls": [], "inflight": []}
            yield st
            f.seek(0)
            f.truncate()
            f.write(json.dumps(st))
            f.flush()

    def _inflight(self, name: str, on: bool) -> None:
        if self.state_path is None:
            with self._mu:
                (self._local_inflight.append if on else self._local_inflight.remove)(name)
            return
        with self._shared() as st:
            entry = [name, os.getpid()]
            if on:
                st["inflight"].append(entry)
            elif entry in st["inflight"]:
                st["inflight"].remove(entry)

    def inflight(self) -> list[str]:
        """Names of the calls in flight now (in every process sharing ``state_path``)."""
        if self.state_path is None:
            with self._mu:
                return list(self._local_inflight)
        with self._shared() as st:
            return [e[0] for e in st["inflight"]]

    def _locks(self, which: str) -> dict[int, tuple[int, int] | None]:
        if self.state_path is None:
            return getattr(self, "_" + which)
        with self._shared() as st:
            return {int(k): (tuple(v) if v is not None else None)  # type: ignore[misc]
                    for k, v in st[which].items()}

    def _set_lock(self, which: str, h: int, value: tuple[int, int] | None) -> None:
        if self.state_path is None:
            getattr(self, "_" + which)[h] = value
            return
        with self._shared() as st:
            st[which][str(h)] = list(value) if value is not None else None

    @property
    def core_lock(self) -> dict[int, tuple[int, int] | None]:
        """GPU -> locked core clocks (MHz, MHz), ``None`` when unlocked (a snapshot)."""
        return self._locks("core_lock")

    @property
    def mem_lock(self) -> dict[int, tuple[int, int] | None]:
        """GPU -> locked memory clocks (MHz, MHz), ``None`` when unlocked (a snapshot)."""
        return self._locks("mem_lock")

    def shared_calls(self) -> list[tuple[str, int, int | None, float]]:
        """``(name, pid, GPU index or None, time)`` of every call in the shared state file
        (cross-process mode only)."""
        if self.state_path is None:
            raise ValueError("shared_calls() needs state_path")
        with self._shared() as st:
            return [(c[0], int(c[1]), c[2], float(c[3])) for c in st["calls"]]

    # -- lifecycle and devices --------------------------------------------------------------
    @_api
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialized = True

    @_api
    def nvmlShutdown(self) -> None:
        self.initialized = False

    @_api
    def nvmlDeviceGetCount(self) -> int:
        return self.n_gpus

    @_api
    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    @_api
    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if not 0 <= i < self.n_gpus:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return i

    @_api
    def nvmlDeviceGetUUID(self, h: int | FakeMigHandle) -> str:
        return h.uuid if isinstance(h, FakeMigHandle) else self.gpus[h].uuid

    @_api
    def nvmlDeviceGetName(self, h: int) -> str:
        return self.gpus[h].name

    # -- energy and power -------------------------------------------------------------------
    @_api
    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        """Energy since the driver loaded, mJ."""
        g = self.gpus[h]
        code = {"unsupported": NVML_ERROR_NOT_SUPPORTED, "noperm": NVML_ERROR_NO_PERMISSION,
                "lost": NVML_ERROR_GPU_IS_LOST}.get(g.counter)
        if code is not None:
            raise NVMLError(code)
        return g.counter_mj()

    @_api
    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        """Power, mW."""
        g = self.gpus[h]
        if g.power == "noperm":
            raise NVMLError(NVML_ERROR_NO_PERMISSION)
        if g.power == "lost":
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return g.power_mw

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_GRAPHICS = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    @_api
    def nvmlDeviceGetTemperature(self, h: int, sensor: int = 0) -> int:
        """GPU temperature, °C."""
        return int(self.gpus[h].temperature_c)

    @_api
    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        """Current clock (MHz): the locked clock, else the GPU's default (top of the table)."""
        if kind == self.NVML_CLOCK_MEM:
            lock = self._locks("mem_lock")[h]
            return int(lock[1]) if lock else int(self.gpus[h].default_clocks[1]
                                                 or max(self.supported))
        lock = self._locks("core_lock")[h]
        if lock:
            return int(lock[1])
        mem = self._locks("mem_lock")[h]
        top = max(self.supported[mem[1]] if mem and mem[1] in self.supported
                  else self.supported[max(self.supported)])
        return int(self.gpus[h].default_clocks[0] or top)

    # -- MIG --------------------------------------------------------------------------------
    @_api
    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        """``[current, pending]``."""
        return [1, 1] if self.gpus[h].mig else [0, 0]

    @_api
    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        return len(self.gpus[h].mig_uuids)

    @_api
    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, k: int) -> FakeMigHandle:
        return FakeMigHandle(self.gpus[h].mig_uuids[k])

    # -- clock tables -----------------------------------------------------------------------
    @_api
    def nvmlDeviceGetSupportedMemoryClocks(self, h: int) -> list[int]:
        return sorted(self.supported, reverse=True)

    @_api
    def nvmlDeviceGetSupportedGraphicsClocks(self, h: int, mem: int) -> list[int]:
        if mem not in self.supported:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return list(self.supported[mem])

    # -- clock control ----------------------------------------------------------------------
    def _check_priv(self) -> None:
        if not self.privileged:
            raise NVMLError(NVML_ERROR_NO_PERMISSION)

    def _check_handle(self, h: Any) -> None:
        if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < self.n_gpus:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if h in self.failing_gpus:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)

    def _check_memory_locks(self) -> None:
        if not self.memory_locks:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    @_api
    def nvmlDeviceSetGpuLockedClocks(self, h: int, lo: int, hi: int) -> None:
        self._check_priv()
        self._check_handle(h)
        self._set_lock("core_lock", h, (lo, hi))

    @_api
    def nvmlDeviceResetGpuLockedClocks(self, h: int) -> None:
        self._check_priv()
        self._check_handle(h)
        self._set_lock("core_lock", h, None)

    @_api
    def nvmlDeviceSetMemoryLockedClocks(self, h: int, lo: int, hi: int) -> None:
        self._check_priv()
        self._check_memory_locks()
        self._check_handle(h)
        self._set_lock("mem_lock", h, (lo, hi))

    @_api
    def nvmlDeviceResetMemoryLockedClocks(self, h: int) -> None:
        self._check_priv()
        self._check_memory_locks()
        self._check_handle(h)
        self._set_lock("mem_lock", h, None)

    # -- test helpers -----------------------------------------------------------------------
    def is_default(self, h: int | None = None) -> bool:
        """True when no clock is locked (on ``h`` or on every GPU)."""
        gpus = range(self.n_gpus) if h is None else [h]
        core, mem = self.core_lock, self.mem_lock
        return all(core[g] is None and mem[g] is None for g in gpus)

    def count(self, name: str) -> int:
        """How many times ``name`` was called (refused calls included; in every process sharing
        ``state_path``)."""
        if self.state_path is not None:
            return sum(1 for c in self.shared_calls() if c[0] == name)
        return sum(1 for c in self.calls if c == name)
