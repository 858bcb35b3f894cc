"""The one device layer for NVIDIA GPUs: which physical GPU, its readings, its clocks.

Every part of joulebound that touches NVML goes through this module: the energy meter
(:mod:`joulebound.energy.nvml`), the clock actuators and the privileged clock helper
(:mod:`joulebound.runtime`), ``joulebound reset-clocks`` and ``benchmarks/gpu_check.py``.

* **Which GPU.** A user or rank names a GPU as CUDA does: an index into ``CUDA_VISIBLE_DEVICES``
  (whose entries may be NVML indices, ``GPU-`` UUIDs or their unique prefixes, or ``MIG-`` UUIDs)
  — or directly by UUID. :func:`resolve` turns that into one :class:`PhysicalGpu`, identified by
  its UUID. So ``CUDA_VISIBLE_DEVICES=4,5,6,7`` with ``gpu=LOCAL_RANK`` (0..3) reaches physical
  GPUs 4..7, never another user's GPU 0. A MIG device resolves to its parent GPU (clocks and
  NVML energy are per physical GPU).
* **NVML lifetime.** :class:`Nvml` calls ``nvmlInit`` once when opened and ``nvmlShutdown`` once
  when closed (NVML counts them, so several open sessions in one process are fine).
* **Units.** :class:`GpuDevice` reads energy in mJ (:meth:`~GpuDevice.energy_mj`, NVML's raw
  counter) and power in W (:meth:`~GpuDevice.power_w`), and sets clocks in MHz.
* **One owner per GPU.** :class:`GpuLock` is an exclusive lock keyed on the GPU's UUID (an
  ``flock`` on ``<lock dir>/<UUID>.lock``), taken by every in-process clock actuator and by the
  clock helper for each GPU a client controls; a second owner — another ``joulebound run``, the
  helper, or a second actuator in the same process — is refused with a message naming the holder.
  There is **one lock folder per machine**, :data:`LOCK_DIR` (``/run/joulebound/locks``),
  whatever the caller's environment (``TMPDIR``, ``HOME``, any variable) and privileges (root or
  ``CAP_SYS_ADMIN``): two owners can never use two folders. Nobody outside the folder's owner
  and group can open, and so ``flock``, a lock file (folder 0700, or 0770 for a group of
  privileged users; files 0600/0660), and every file is opened with ``O_NOFOLLOW`` in a folder
  held open by descriptor, created with ``O_EXCL`` and checked (a regular file with one link,
  owned by root, this user or the folder's owner) before anything is written to it
  (:func:`open_lock_folder`, :func:`open_lock_file`). See docs/runtime.md, *Threat model*.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from joulebound.core.errors import (
    GpuBusy,
    JouleboundError,
    NoPermission,
    SetupError,
    UnsupportedGPU,
)


# -- NVML module and errors -------------------------------------------------------------------
def load_pynvml(nvml: Any = None) -> Any:
    """The ``pynvml`` module (nvidia-ml-py), or ``nvml`` when given (tests pass a fake)."""
    if nvml is not None:
        return nvml
    try:
        import pynvml
    except ImportError as exc:
        raise SetupError("NVML is not available: install nvidia-ml-py "
                         "(pip install nvidia-ml-py)") from exc
    return pynvml


def nvml_error_is(nv: Any, exc: BaseException | None, const: str) -> bool:
    """True when ``exc`` is an ``NVMLError`` whose code is ``nv.<const>`` (e.g.
    ``"NVML_ERROR_NOT_SUPPORTED"``)."""
    if exc is None:
        return False
    err = getattr(nv, "NVMLError", None)
    code = getattr(nv, const, None)
    return (err is not None and isinstance(exc, err) and code is not None
            and getattr(exc, "value", None) == code)


def is_not_supported(nv: Any, exc: BaseException | None) -> bool:
    """The call is not supported by this GPU (e.g. memory-clock locks before Ampere): NVML's
    ``NVML_ERROR_NOT_SUPPORTED`` code (or its ``NVMLError_NotSupported`` class)."""
    cls = getattr(nv, "NVMLError_NotSupported", None)
    return exc is not None and (nvml_error_is(nv, exc, "NVML_ERROR_NOT_SUPPORTED")
                                or (cls is not None and isinstance(exc, cls)))


def is_no_permission(nv: Any, exc: BaseException | None) -> bool:
    """The call needs privileges this process lacks: ``NVML_ERROR_NO_PERMISSION`` (or its
    ``NVMLError_NoPermission`` class)."""
    cls = getattr(nv, "NVMLError_NoPermission", None)
    return exc is not None and (nvml_error_is(nv, exc, "NVML_ERROR_NO_PERMISSION")
                                or (cls is not None and isinstance(exc, cls)))


#: NVML return codes -> the typed error a user gets (anything else: JouleboundError)
_NVML_KINDS: tuple[tuple[str, type[JouleboundError]], ...] = (
    ("NVML_ERROR_NOT_SUPPORTED", UnsupportedGPU),
    ("NVML_ERROR_NO_PERMISSION", NoPermission),
    ("NVML_ERROR_IN_USE", GpuBusy),
    ("NVML_ERROR_UNINITIALIZED", SetupError),
    ("NVML_ERROR_LIBRARY_NOT_FOUND", SetupError),
    ("NVML_ERROR_DRIVER_NOT_LOADED", SetupError),
    ("NVML_ERROR_FUNCTION_NOT_FOUND", SetupError),
)


def nvml_error_kind(nv: Any, exc: BaseException | None) -> type[JouleboundError]:
    """The :mod:`joulebound.core.errors` kind for an ``NVMLError`` by its return code (its
    ``.value``), :class:`JouleboundError` for any other code or exception."""
    for const, kind in _NVML_KINDS:
        if nvml_error_is(nv, exc, const):
            return kind
    if is_not_supported(nv, exc):
        return UnsupportedGPU
    if is_no_permission(nv, exc):
        return NoPermission
    return JouleboundError


def driver_version(nvml: Any = None) -> str | None:
    """The NVIDIA driver's version (e.g. ``"550.54.15"``), ``None`` where NVML cannot be read
    (no GPU, no driver, no nvidia-ml-py). Opens and closes its own NVML session."""
    try:
        nv = load_pynvml(nvml)
        nv.nvmlInit()
    except Exception:
        return None
    try:
        return _text(nv.nvmlSystemGetDriverVersion())
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()


def has_clock_privileges() -> bool:
    """True when this process may change GPU clocks: root, or CAP_SYS_ADMIN in effect."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return True
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) & (1 << 21))
    except (OSError, ValueError, IndexError):
        pass
    return False


def _text(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


# -- which GPU --------------------------------------------------------------------------------
@dataclass(frozen=True)
class PhysicalGpu:
    """One physical GPU as NVML numbers it.

    Attributes:
        nvml_index: NVML (PCI bus) index, as ``nvidia-smi`` numbers GPUs.
        uuid: ``GPU-...`` UUID, the identity used everywhere else.
        name: NVML product name.
        mig_uuids: UUIDs of its MIG devices (MIG enabled), else empty.
    """

    nvml_index: int
    uuid: str
    name: str = "GPU"
    mig_uuids: tuple[str, ...] = ()

    @property
    def mig(self) -> bool:
        return bool(self.mig_uuids)

    def describe(self) -> str:
        return f"GPU {self.nvml_index} ({self.name}, {self.uuid})"


def visible_device_ids(env: Mapping[str, str] | None = None) -> list[str] | None:
    """Entries of ``CUDA_VISIBLE_DEVICES`` (indices, ``GPU-``/``MIG-`` UUIDs); ``None`` if unset.

    CUDA stops at the first invalid entry (e.g. ``-1``): so does this."""
    env = os.environ if env is None else env
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    out = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("-"):
            break
        out.append(item)
    return out


def _match_entry(entry: str, gpus: Sequence[PhysicalGpu]) -> PhysicalGpu:
    """The physical GPU a ``CUDA_VISIBLE_DEVICES`` entry (or a UUID the user gave) names."""
    if entry.isdigit():
        i = int(entry)
        for g in gpus:
            if g.nvml_index == i:
                return g
        raise JouleboundError(f"GPU {i} does not exist: NVML sees {len(gpus)} GPU(s) "
                              f"(indices 0..{len(gpus) - 1}; see `nvidia-smi -L`)")
    if entry.startswith("MIG-"):
        for g in gpus:
            if entry in g.mig_uuids:
                return g
        raise JouleboundError(f"MIG device {entry!r} is not on any GPU with MIG enabled (see "
                              "`nvidia-smi -L`); NVML meters and clocks whole GPUs, so you may "
                              "also name the parent GPU's UUID")
    wanted = entry if entry.startswith("GPU-") else "GPU-" + entry
    matches = [g for g in gpus if g.uuid.startswith(wanted) or g.uuid.startswith(entry)]
    if len(matches) != 1:
        raise JouleboundError(f"{entry!r} matches {len(matches)} GPU(s) (UUIDs: "
                              f"{', '.join(g.uuid for g in gpus) or 'none'}); give a UUID from "
                              "`nvidia-smi -L`, or an index")
    return matches[0]


def visible_gpus(gpus: Sequence[PhysicalGpu], env: Mapping[str, str] | None = None
                 ) -> tuple[list[PhysicalGpu], list[str]]:
    """The CUDA-visible GPUs in CUDA's numbering, and notes (e.g. the device-order caveat).

    Without ``CUDA_VISIBLE_DEVICES`` every GPU is visible in NVML order."""
    env = os.environ if env is None else env
    entries = visible_device_ids(env)
    notes: list[str] = []
    if entries is None:
        return list(gpus), notes
    phys = [_match_entry(e, gpus) for e in entries]
    if len(phys) > 1 and any(e.isdigit() for e in entries) and \
            env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        notes.append("CUDA_VISIBLE_DEVICES uses numbers but CUDA_DEVICE_ORDER is not PCI_BUS_ID: "
                     "CUDA may number GPUs differently from NVML; set CUDA_DEVICE_ORDER=PCI_BUS_ID "
                     "to be sure which GPU is used")
    return phys, notes


def resolve(gpu: int | str, gpus: Sequence[PhysicalGpu], env: Mapping[str, str] | None = None
            ) -> PhysicalGpu:
    """The physical GPU a user or rank means by ``gpu``.

    Args:
        gpu: a CUDA-visible index (``int`` or digit string; index into ``CUDA_VISIBLE_DEVICES``
            when it is set, else the NVML index) or a ``GPU-``/``MIG-`` UUID.
        gpus: every GPU NVML sees (:meth:`Nvml.gpus`).
        env: environment to read ``CUDA_VISIBLE_DEVICES`` from (default ``os.environ``).
    """
    if isinstance(gpu, bool) or not isinstance(gpu, int | str):
        raise JouleboundError(f"a GPU is an index or a UUID, got {gpu!r}")
    if isinstance(gpu, str) and not gpu.strip().isdigit():
        return _match_entry(gpu.strip(), gpus)
    index = int(gpu)
    if index < 0:
        raise JouleboundError(f"GPU index {index} is negative; use 0, 1, ...")
    env = os.environ if env is None else env
    vis, _ = visible_gpus(gpus, env)
    if index >= len(vis):
        cvd = env.get("CUDA_VISIBLE_DEVICES")
        where = (f"CUDA_VISIBLE_DEVICES={cvd!r} makes {len(vis)} GPU(s) visible"
                 if cvd is not None else f"NVML sees {len(vis)} GPU(s)")
        raise JouleboundError(f"GPU index {index} is not visible: {where} (indices "
                              f"0..{len(vis) - 1}); use an index from that list or a UUID "
                              "from `nvidia-smi -L`")
    return vis[index]


# -- NVML session -------------------------------------------------------------------------------
class Nvml:
    """An open NVML session: ``nvmlInit`` now, ``nvmlShutdown`` at :meth:`close` (once).

    Args:
        nvml: the NVML module (default ``pynvml``; tests pass
            :class:`~joulebound.testing.fakenvml.FakeNvml`).
    """

    def __init__(self, nvml: Any = None) -> None:
        self.nv = nv = load_pynvml(nvml)
        try:
            nv.nvmlInit()
        except Exception as exc:
            if nvml_error_is(nv, exc, "NVML_ERROR_NO_PERMISSION"):
                raise NoPermission("NVML refused access (NVML_ERROR_NO_PERMISSION): this user "
                                   "may not open the NVIDIA driver; run in a container with "
                                   "GPU access (--gpus) or ask an admin") from exc
            raise SetupError(f"NVML could not start ({exc}); is an NVIDIA driver installed "
                             "and a GPU visible?") from exc
        self._open = True
        self._gpus: list[PhysicalGpu] | None = None

    def gpus(self) -> list[PhysicalGpu]:
        """Every GPU NVML sees, in NVML order (cached)."""
        if self._gpus is None:
            nv = self.nv
            out = []
            for i in range(int(nv.nvmlDeviceGetCount())):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                name = _text(nv.nvmlDeviceGetName(h)) if hasattr(nv, "nvmlDeviceGetName") \
                    else "GPU"
                out.append(PhysicalGpu(i, _text(nv.nvmlDeviceGetUUID(h)), name,
                                       self._mig_uuids(h)))
            self._gpus = out
        return list(self._gpus)

    def _mig_uuids(self, h: Any) -> tuple[str, ...]:
        nv = self.nv
        if not hasattr(nv, "nvmlDeviceGetMigMode"):
            return ()
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(h)
            if current != getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
                return ()
            out = []
            for k in range(int(nv.nvmlDeviceGetMaxMigDeviceCount(h))):
                try:
                    out.append(_text(nv.nvmlDeviceGetUUID(
                        nv.nvmlDeviceGetMigDeviceHandleByIndex(h, k))))
                except Exception:
                    continue
            return tuple(out) or ("MIG-enabled",)
        except Exception:
            return ()

    def resolve(self, gpu: int | str, env: Mapping[str, str] | None = None) -> PhysicalGpu:
        """:func:`resolve` against this session's GPUs."""
        return resolve(gpu, self.gpus(), env)

    def open(self, gpu: int | str | PhysicalGpu, env: Mapping[str, str] | None = None
             ) -> GpuDevice:
        """A :class:`GpuDevice` for ``gpu`` (resolved as :func:`resolve` does)."""
        phys = gpu if isinstance(gpu, PhysicalGpu) else self.resolve(gpu, env)
        return GpuDevice(self, phys)

    def close(self) -> None:
        """``nvmlShutdown`` (once; never raises)."""
        if self._open:
            self._open = False
            with contextlib.suppress(Exception):
                self.nv.nvmlShutdown()

    def __enter__(self) -> Nvml:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_gpu(nvml: Any, gpu: int | str, env: Mapping[str, str] | None = None
             ) -> tuple[Nvml, GpuDevice]:
    """Start an NVML session and open ``gpu`` (an index as CUDA numbers it, or a UUID); on any
    failure the session is shut down again and the error names the GPU and how to pick one.

    Raises:
        JouleboundError: NVML cannot start, or does not know ``gpu``.
    """
    session = Nvml(nvml)
    try:
        return session, session.open(gpu, env)
    except JouleboundError:
        session.close()
        raise
    except Exception as exc:
        session.close()
        raise JouleboundError(f"GPU {gpu!r} not found by NVML ({exc}); use --gpu with an index "
                              "or UUID from `nvidia-smi -L`") from exc


class GpuDevice:
    """One physical GPU: reads with units, clock sets in MHz. Made by :meth:`Nvml.open`.

    Every call goes to NVML as it is (errors propagate as ``NVMLError``), except
    :meth:`reset_clocks`, which tries both resets and returns what failed.
    """

    def __init__(self, session: Nvml, phys: PhysicalGpu) -> None:
        self.session = session
        self.nv = session.nv
        self.phys = phys
        self.uuid = phys.uuid
        self.name = phys.name
        self.nvml_index = phys.nvml_index
        self.handle = self.nv.nvmlDeviceGetHandleByIndex(phys.nvml_index)
        got = _text(self.nv.nvmlDeviceGetUUID(self.handle))
        if got != phys.uuid:  # pragma: no cover - GPUs renumbered under us (hot-plug)
            raise JouleboundError(f"NVML index {phys.nvml_index} is now {got}, not {phys.uuid}; "
                                  "GPUs were renumbered, start again")

    def describe(self) -> str:
        return self.phys.describe()

    # -- reads ------------------------------------------------------------------------------
    def energy_mj(self) -> int:
        """Total-energy counter (mJ since the driver loaded; Volta and newer)."""
        return int(self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    @staticmethod
    def energy_counter_call(devices: Sequence[GpuDevice]) -> tuple[Callable[[Any], int],
                                                                    list[Any]]:
        """The NVML total-energy counter call and the handles of ``devices`` (in order): the
        energy meter's window-edge path calls ``fn(handle)`` per device itself (mJ, a Python
        int as ``pynvml`` returns it; it raises ``NVMLError``), with no per-device Python call on
        top of NVML's; prepared once. ``(None, [])`` for no device."""
        if not devices:
            return None, []  # type: ignore[return-value]
        return devices[0].nv.nvmlDeviceGetTotalEnergyConsumption, [d.handle for d in devices]

    def power_w(self) -> float:
        """Power draw (W; NVML reports mW)."""
        return float(self.nv.nvmlDeviceGetPowerUsage(self.handle)) / 1000.0

    def supported_clocks(self) -> dict[int, list[int]]:
        """Memory MHz -> supported core (graphics) MHz, as NVML lists them."""
        nv = self.nv
        return {int(m): [int(c) for c in nv.nvmlDeviceGetSupportedGraphicsClocks(self.handle, m)]
                for m in nv.nvmlDeviceGetSupportedMemoryClocks(self.handle)}

    # -- clocks -----------------------------------------------------------------------------
    def lock_core(self, mhz: int) -> None:
        """Lock the core clock at ``mhz`` (MHz)."""
        self.nv.nvmlDeviceSetGpuLockedClocks(self.handle, int(mhz), int(mhz))

    def lock_memory(self, mhz: int) -> None:
        """Lock the memory clock at ``mhz`` (MHz; Ampere and newer)."""
        self.nv.nvmlDeviceSetMemoryLockedClocks(self.handle, int(mhz), int(mhz))

    def reset_core(self) -> None:
        self.nv.nvmlDeviceResetGpuLockedClocks(self.handle)

    def reset_memory(self) -> None:
        self.nv.nvmlDeviceResetMemoryLockedClocks(self.handle)

    def reset_clocks(self) -> list[str]:
        """Unlock core and memory clocks; tries both, never raises. Returns the failures
        (a memory reset the GPU does not support, before Ampere, is not a failure)."""
        failed = []
        try:
            self.reset_core()
        except Exception as exc:
            failed.append(f"core clock reset failed: {exc}")
        try:
            self.reset_memory()
        except Exception as exc:
            if not is_not_supported(self.nv, exc):
                failed.append(f"memory clock reset failed: {exc}")
        return failed


# -- one owner per GPU --------------------------------------------------------------------------
#: THE folder of the per-GPU lock files on every machine (see the module docs). No environment
#: variable moves it; the test suite points it at a private folder in-process (its fake GPUs
#: share UUIDs across tests).
LOCK_DIR = Path("/run/joulebound/locks")

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FOLDER_HELP = ("create it once as root: `sudo install -d -m 0700 {d}` (or `-m 0770 -g GROUP` "
                "for non-root processes with CAP_SYS_ADMIN in GROUP), or let training use the "
                "clock helper (`--actuator helper`)")


def lock_dir() -> Path:
    """The machine's GPU lock folder, :data:`LOCK_DIR` (checked and created as
    :func:`open_lock_folder` does)."""
    fd = open_lock_folder()
    os.close(fd)
    return LOCK_DIR


def _owner_ok(uid: int, *extra: int) -> bool:
    return uid in (0, os.geteuid(), *extra)


def open_lock_folder(folder: Path | None = None) -> int:
    """Open the lock folder (default :data:`LOCK_DIR`) as a directory descriptor, creating it
    (mode 0700) when missing; file names are then opened relative to the descriptor, so the
    folder cannot be swapped between the check and the use.

    The folder must be a real directory (``O_NOFOLLOW``: not a symlink), owned by root or this
    user, and not writable by others; its parent not writable by others (unless sticky). A
    folder that others may enter (0755, as earlier versions made it) is tightened to 0700 when
    this process owns it (or is root), else refused.

    Raises:
        JouleboundError: what is wrong with the folder and how to fix it.
    """
    d = Path(LOCK_DIR if folder is None else folder)
    try:
        parent = os.stat(d.parent)
    except FileNotFoundError:
        parent = None
    if parent is not None and parent.st_mode & stat.S_IWOTH and not parent.st_mode & stat.S_ISVTX:
        raise JouleboundError(f"GPU lock folder {d}: its parent {d.parent} is writable by every "
                              "user (not sticky), so anyone could replace the lock folder; "
                              + _FOLDER_HELP.format(d=d))
    try:
        if parent is None:
            os.makedirs(d.parent, mode=0o755, exist_ok=True)
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise JouleboundError(f"GPU lock folder {d} does not exist and this process (uid "
                              f"{os.geteuid()}) cannot create it ({exc.strerror}). Clock control "
                              "takes a per-GPU lock there, one folder per machine: "
                              + _FOLDER_HELP.format(d=d)) from None
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except OSError as exc:
        why = ("is a symbolic link" if exc.errno == errno.ELOOP or os.path.islink(d) else
               "is not a directory" if exc.errno == errno.ENOTDIR else f"({exc.strerror})")
        raise JouleboundError(f"GPU lock folder {d} {why}: refusing to use it; "
                              + _FOLDER_HELP.format(d=d)) from None
    try:
        st = os.fstat(fd)
        if not _owner_ok(st.st_uid):
            raise JouleboundError(f"GPU lock folder {d} belongs to uid {st.st_uid}, not to root "
                                  "or this user: refusing to use it; " + _FOLDER_HELP.format(d=d))
        if st.st_mode & stat.S_IWOTH:
            raise JouleboundError(f"GPU lock folder {d} is writable by every user (mode "
                                  f"{stat.S_IMODE(st.st_mode):o}): refusing to use it; "
                                  + _FOLDER_HELP.format(d=d))
        if st.st_mode & 0o007:
            # others could enter it and open (so flock) a lock file: close it to them
            try:
                os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~0o007)
            except OSError:
                raise JouleboundError(f"GPU lock folder {d} is open to every user (mode "
                                      f"{stat.S_IMODE(st.st_mode):o}), who could block clock "
                                      "control by locking a file in it; "
                                      + _FOLDER_HELP.format(d=d)) from None
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_lock_file(dir_fd: int, name: str, what: str) -> int:
    """Open (create) lock file ``name`` in the folder ``dir_fd`` read-write, safely.

    ``O_NOFOLLOW`` (a planted symlink is refused, never followed), ``O_EXCL`` when creating
    (mode 0600; 0660 and the folder's group when the folder is group-writable), and before
    anything is written: a regular file with one link, owned by root, this user or the folder's
    owner (or, in a group-writable folder, of the folder's group), not open to others. ``what``
    names the file in messages.

    Raises:
        JouleboundError: a symlink, a hard link, someone else's file, an unopenable file.
    """
    dst = os.fstat(dir_fd)
    shared = bool(dst.st_mode & stat.S_IWGRP)
    want = 0o660 if shared else 0o600
    rw = os.O_RDWR | _NOFOLLOW | _CLOEXEC
    created = False
    try:
        fd = os.open(name, rw | os.O_CREAT | os.O_EXCL, want, dir_fd=dir_fd)
        created = True
    except FileExistsError:
        try:
            fd = os.open(name, rw, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise JouleboundError(f"{what} is a symbolic link: refusing to follow it (someone "
                                      "may be trying to make this process overwrite the file it "
                                      "points to); remove it and make sure only root or the "
                                      "clock group can write its folder") from None
            raise JouleboundError(f"cannot open {what} ({exc.strerror}): it belongs to another "
                                  "user; remove it, or run as that user or root") from None
    try:
        st = os.fstat(fd)
        if created:
            os.fchmod(fd, want)
            if shared and st.st_gid != dst.st_gid:
                with contextlib.suppress(OSError):
                    os.fchown(fd, -1, dst.st_gid)
            return fd
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise JouleboundError(f"{what} is not a plain file with one link (a hard link or a "
                                  "device planted there?): refusing to write to it; remove it")
        if not (_owner_ok(st.st_uid, dst.st_uid) or (shared and st.st_gid == dst.st_gid)):
            raise JouleboundError(f"{what} belongs to uid {st.st_uid}, not to root, this user or "
                                  "the folder's owner or group: refusing to use it; remove it")
        if st.st_mode & 0o007 or (st.st_mode & 0o070 and not shared):
            try:
                os.fchmod(fd, want)
            except OSError:
                raise JouleboundError(f"{what} can be opened by other users (mode "
                                      f"{stat.S_IMODE(st.st_mode):o}), who could block it with a "
                                      "lock of their own; remove it (it is recreated 0600)") \
                    from None
        return fd
    except BaseException:
        os.close(fd)
        raise


#: every GpuLock held by this process (closed in forked children; they must not keep it)
_HELD: weakref.WeakSet[GpuLock] = weakref.WeakSet()


class GpuLock:
    """Exclusive lock on one GPU's clocks, keyed on its UUID (see the module docs).

    Args:
        uuid: the GPU's UUID.
        owner: who holds it, in words (shown to whoever is refused), e.g. ``"joulebound run"``.
    """

    def __init__(self, uuid: str, owner: str = "joulebound") -> None:
        self.uuid = uuid
        self.owner = owner
        self.name = f"{uuid.replace('/', '_').replace(chr(0), '_')}.lock"
        if self.name.startswith("."):
            self.name = "_" + self.name
        self.path = LOCK_DIR / self.name
        self._fd: int | None = None
        self._mu = threading.Lock()

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder(self) -> str:
        """Who holds the lock, as the holder wrote it (best effort; never follows a link)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
        except OSError:
            return "another process"
        try:
            return self._holder_of(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _holder_of(fd: int) -> str:
        try:
            info = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace") or "{}")
            return f"{str(info.get('owner', '?'))[:80]} (pid {int(info.get('pid', -1))})"
        except (OSError, ValueError, TypeError, AttributeError):
            return "another process"

    def acquire(self) -> GpuLock:
        """Take the lock now or raise :class:`GpuBusy` (never waits).

        The lock file is ``<LOCK_DIR>/<UUID>.lock``, opened as :func:`open_lock_file` does
        (never through a symlink, only a plain file of root, this user or the folder's
        owner/group), in the folder :func:`open_lock_folder` checked.

        Raises:
            GpuBusy: another owner holds it.
            JouleboundError: the folder or the file is not safe to use (what and how to fix).
        """
        with self._mu:
            if self._fd is not None:
                return self
            dfd = open_lock_folder(self.path.parent)
            try:
                fd = open_lock_file(dfd, self.name, f"GPU lock file {self.path}")
            finally:
                os.close(dfd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                who = self._holder_of(fd)
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise GpuBusy(f"GPU {self.uuid} is already controlled by {who}: one "
                                  "owner per GPU. Wait for it to finish (or stop it), use another "
                                  "GPU, or `--actuator dry-run` to try a plan without "
                                  "changing clocks") from None
                raise
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps({"owner": self.owner, "pid": os.getpid(),
                                          "since": time.time()}).encode(), 0)
            self._fd = fd
            _HELD.add(self)
            return self

    def release(self) -> None:
        """Give the lock up (idempotent)."""
        with self._mu:
            fd, self._fd = self._fd, None
            _HELD.discard(self)
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            with contextlib.suppress(OSError):
                os.close(fd)

    def _forget_in_child(self) -> None:
        # a forked child shares the lock's open file description: closing its copy of the fd keeps
        # the parent's lock, and the child (a DataLoader worker) never holds it on its own
        fd, self._fd = self._fd, None
        self._mu = threading.Lock()
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> GpuLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _after_fork_in_child() -> None:
    for lk in list(_HELD):
        lk._forget_in_child()
    _HELD.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
