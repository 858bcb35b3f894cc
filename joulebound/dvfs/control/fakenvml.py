"""A fake NVML module (the subset the clock actuators use), for tests and rehearsals.

Behaves like ``pynvml`` for clock locking: supported clock tables, locked-clock state per GPU, a
call log, and a switchable permission check. Nothing here touches hardware. Example::

    nv = FakeNvml(n_gpus=1, supported={1593: [1410, 1200, 1005]}, privileged=False)
    NvmlActuator(nvml=nv, check_privileges=False)   # set calls raise NVMLError_NoPermission
"""

from __future__ import annotations

import threading
from typing import Any


class NVMLError(Exception):
    """Base error (mirrors ``pynvml.NVMLError``)."""


class NVMLError_NoPermission(NVMLError):  # noqa: N801 - pynvml's name
    """Raised by set/reset calls when not privileged."""


class NVMLError_InvalidArgument(NVMLError):  # noqa: N801 - pynvml's name
    """Raised for a clock the device does not support."""


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's name
    """Raised for a call the device does not support (memory locks before Ampere)."""


class FakeNvml:
    """Stand-in for the ``pynvml`` module.

    Args:
        n_gpus: number of devices.
        supported: memory MHz -> supported core MHz list (same for every GPU).
        privileged: whether set/reset calls are allowed.
        memory_locks: whether memory-clock locking is supported (Ampere and newer).
    """

    NVMLError = NVMLError
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported

    def __init__(self, n_gpus: int = 1, supported: dict[int, list[int]] | None = None,
                 privileged: bool = True, memory_locks: bool = True) -> None:
        self.n_gpus = n_gpus
        self.supported = supported or {1593: [1410, 1305, 1200, 1095, 1005, 900, 810],
                                       1215: [1410, 1200, 1005, 810]}
        self.privileged = privileged
        self.memory_locks = memory_locks
        self.calls: list[tuple[str, int, tuple[Any, ...]]] = []
        self.core_lock: dict[int, tuple[int, int] | None] = {i: None for i in range(n_gpus)}
        self.mem_lock: dict[int, tuple[int, int] | None] = {i: None for i in range(n_gpus)}
        self._mu = threading.Lock()
        self.initialized = False

    # -- lifecycle --------------------------------------------------------------------------
    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's name
        self.initialized = True

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.initialized = False

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return self.n_gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        if not 0 <= i < self.n_gpus:
            raise NVMLError_InvalidArgument(f"no GPU {i}")
        return i

    def nvmlDeviceGetSupportedMemoryClocks(self, h: int) -> list[int]:  # noqa: N802
        return sorted(self.supported, reverse=True)

    def nvmlDeviceGetSupportedGraphicsClocks(self, h: int, mem: int) -> list[int]:  # noqa: N802
        if mem not in self.supported:
            raise NVMLError_InvalidArgument(f"memory clock {mem} not supported")
        return list(self.supported[mem])

    # -- clock control ----------------------------------------------------------------------
    def _priv(self, name: str, h: int, args: tuple[Any, ...]) -> None:
        with self._mu:
            self.calls.append((name, h, args))
        if not self.privileged:
            raise NVMLError_NoPermission("Insufficient Permissions")

    def nvmlDeviceSetGpuLockedClocks(self, h: int, lo: int, hi: int) -> None:  # noqa: N802
        self._priv("nvmlDeviceSetGpuLockedClocks", h, (lo, hi))
        self.core_lock[h] = (lo, hi)

    def nvmlDeviceResetGpuLockedClocks(self, h: int) -> None:  # noqa: N802
        self._priv("nvmlDeviceResetGpuLockedClocks", h, ())
        self.core_lock[h] = None

    def nvmlDeviceSetMemoryLockedClocks(self, h: int, lo: int, hi: int) -> None:  # noqa: N802
        self._priv("nvmlDeviceSetMemoryLockedClocks", h, (lo, hi))
        if not self.memory_locks:
            raise NVMLError_NotSupported("Not Supported")
        self.mem_lock[h] = (lo, hi)

    def nvmlDeviceResetMemoryLockedClocks(self, h: int) -> None:  # noqa: N802
        self._priv("nvmlDeviceResetMemoryLockedClocks", h, ())
        if not self.memory_locks:
            raise NVMLError_NotSupported("Not Supported")
        self.mem_lock[h] = None

    # -- test helpers -----------------------------------------------------------------------
    def is_default(self, h: int | None = None) -> bool:
        """True when no clock is locked (on ``h`` or on every GPU)."""
        gpus = range(self.n_gpus) if h is None else [h]
        return all(self.core_lock[g] is None and self.mem_lock[g] is None for g in gpus)

    def count(self, name: str) -> int:
        return sum(1 for c in self.calls if c[0] == name)
