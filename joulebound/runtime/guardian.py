"""A clock guardian: a forked process that resets a GPU's clocks when the process that locked them
vanishes without doing it.

A process that locks clocks cannot be trusted to reset them: ``os._exit``, ``abort()`` (what the
NCCL watchdog does), a segfault, SIGBUS or SIGKILL end it without unwinding, and neither its
``finally`` blocks, ``atexit`` nor the signal :mod:`~joulebound.runtime.guard` run. So the
:class:`~joulebound.runtime.actuators.NvmlActuator` forks a guardian as soon as it holds the GPU:

* the guardian holds the read end of a pipe whose write end only the owner holds (closed in the
  owner's forked children, never inherited across ``exec``), and a duplicate of the owner's GPU
  lock (:class:`~joulebound.hw.gpu.GpuLock`: the same open file, so the GPU stays held, and no
  other owner can lock it, until the guardian is done);
* when the owner closes its actuator it resets the clocks itself, then writes ``done`` and closes
  the pipe (:meth:`ClockGuardian.done`), before it releases the lock: the guardian exits and
  touches nothing;
* when the pipe reaches end-of-file **without** ``done`` — the kernel closes it whatever way the
  owner died — the guardian checks it still holds the GPU lock (so it never resets clocks a later
  owner set), resets both clocks through the device layer (:meth:`~joulebound.hw.gpu.GpuDevice.
  reset_clocks`; once more on a fresh NVML session, then through ``joulebound reset-clocks`` in a
  new process, if that fails), says so on stderr, and exits, which releases the lock.

The guardian starts a new session and ignores INT/TERM/HUP/QUIT, so a Ctrl-C at the terminal, a
signal to the owner's process group or a group SIGKILL does not take it down with the owner. Only a
SIGKILL sent to the guardian itself (or the whole cgroup) defeats it; then ``joulebound
reset-clocks`` is the way back. The clock helper's clients need no guardian: the helper resets a
client's GPUs when its connection closes.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import sys
import time
import warnings
import weakref

from joulebound.hw import gpu as gpu_layer

log = logging.getLogger(__name__)

#: what the owner writes before closing the pipe on a clean close
DONE = b"done"

#: every guardian pipe this process writes to (closed in forked children: only the owner's death
#: or its ``done`` may end a guardian)
_LIVE: weakref.WeakSet[ClockGuardian] = weakref.WeakSet()


class ClockGuardian:
    """The owner's side of a running guardian (see the module docs). Use :func:`start`.

    Attributes:
        pid: the guardian's process id.
    """

    def __init__(self, pid: int, write_fd: int) -> None:
        self.pid = pid
        self._w: int | None = write_fd
        self._owner = os.getpid()

    @property
    def running(self) -> bool:
        """The pipe is still open (``done`` not yet sent)."""
        return self._w is not None

    def done(self, wait_s: float = 2.0) -> None:
        """The owner has reset the clocks itself: tell the guardian to exit without touching
        them, and reap it (waits at most ``wait_s`` seconds). Idempotent; nothing in a forked
        child."""
        w, self._w = self._w, None
        _LIVE.discard(self)
        if w is None or os.getpid() != self._owner:
            return
        with contextlib.suppress(OSError):
            os.write(w, DONE)
        with contextlib.suppress(OSError):
            os.close(w)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                pid, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return
            if pid or time.monotonic() >= deadline:
                return
            time.sleep(0.005)

    def _forget_in_child(self) -> None:
        w, self._w = self._w, None
        if w is not None:
            with contextlib.suppress(OSError):
                os.close(w)


def _after_fork_in_child() -> None:
    for g in list(_LIVE):
        g._forget_in_child()
    _LIVE.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def start(device: gpu_layer.GpuDevice, lock: gpu_layer.GpuLock | None) -> ClockGuardian:
    """Fork a guardian for ``device``'s clocks (see the module docs); ``lock``: the GPU lock
    the owner holds (its file is shared with the guardian).

    Raises:
        OSError: the guardian could not be started (no fork, no pipe).
    """
    lock_fd = getattr(lock, "_fd", None)
    r, w = os.pipe()
    dup: int | None = None
    try:
        if lock_fd is not None:
            dup = os.dup(lock_fd)
        owner = os.getpid()
        with warnings.catch_warnings():     # "multi-threaded fork": the child makes no thread
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except BaseException:
        for fd in (r, w, dup):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        raise
    if pid == 0:  # pragma: no cover - runs in the guardian (its effect is tested)
        code = 0
        try:
            os.close(w)
            code = _watch(r, device, dup, owner)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(r)
    if dup is not None:
        os.close(dup)
    g = ClockGuardian(pid, w)
    _LIVE.add(g)
    return g


def _detach() -> None:
    """The guardian's own process: its own session, stop signals ignored, no terminal input or
    output pipe of the owner's kept open (stderr stays for its one message)."""
    with contextlib.suppress(OSError):
        os.setsid()
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, signal.SIG_IGN)
    try:
        null = os.open(os.devnull, os.O_RDWR)
    except OSError:
        return
    for fd in (0, 1):
        with contextlib.suppress(OSError):
            os.dup2(null, fd)
    os.close(null)


def _watch(r: int, device: gpu_layer.GpuDevice, lock_fd: int | None,
           owner: int) -> int:  # pragma: no cover - runs in the guardian
    """The guardian's life: wait for ``done`` or end-of-file on ``r``; reset on the latter."""
    _detach()
    got = b""
    while True:
        try:
            data = os.read(r, 64)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            break
        got += data
        if DONE in got:
            return 0
    if lock_fd is not None:
        try:    # still ours (the owner died holding it): nobody else may have locked clocks since
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0
    errors = _reset(device)
    what = device.describe()
    msg = (f"joulebound clock guardian: the process that locked the clocks of {what} (pid "
           f"{owner}) ended without restoring them; ")
    msg += (f"resetting them failed: {'; '.join(errors)}. Run `joulebound reset-clocks`."
            if errors else "they were reset to the defaults.")
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()
    return 1 if errors else 0


def _reset(device: gpu_layer.GpuDevice) -> list[str]:  # pragma: no cover - in the guardian
    """Reset both clocks; on failure once more through a fresh NVML session. Returns errors."""
    try:
        errors = device.reset_clocks()
    except Exception as exc:
        errors = [f"{type(exc).__name__}: {exc}"]
    if not errors:
        return []
    try:
        session, dev = gpu_layer.open_gpu(device.nv, device.uuid)
    except Exception as exc:
        return [*errors, f"reopening NVML failed: {exc}"]
    try:
        errors = dev.reset_clocks()
    except Exception as exc:
        errors = [f"{type(exc).__name__}: {exc}"]
    finally:
        with contextlib.suppress(Exception):
            session.close()
    if errors:      # last: a fresh process with a fresh NVML (nothing inherited from the owner)
        errors = _reset_in_new_process(device.uuid) or errors
    return errors


def _reset_in_new_process(uuid: str) -> list[str]:  # pragma: no cover - in the guardian
    """``joulebound reset-clocks --gpus UUID`` in a new process; ``[]`` when it succeeded."""
    import subprocess

    try:
        r = subprocess.run([sys.executable, "-m", "joulebound", "reset-clocks", "--gpus", uuid],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return [f"joulebound reset-clocks could not run: {exc}"]
    return [] if r.returncode == 0 else [f"joulebound reset-clocks: {r.stderr.strip()[-500:]}"]


def start_or_note(device: gpu_layer.GpuDevice, lock: gpu_layer.GpuLock | None,
                  notes: list[str]) -> ClockGuardian | None:
    """:func:`start`, or ``None`` with a note in ``notes`` when no guardian can be forked."""
    try:
        return start(device, lock)
    except OSError as exc:
        notes.append(f"no clock guardian could be started ({exc}): if this process dies without "
                     "unwinding, run `joulebound reset-clocks`")
        return None

