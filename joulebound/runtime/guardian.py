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

The fork, the pipe and the guardian's detachment (own session, stop signals ignored: a Ctrl-C at
the terminal, a signal to the owner's process group or a group SIGKILL does not take it down with
the owner) are :mod:`joulebound.core.deathwatch`'s. Only a
SIGKILL sent to the guardian itself (or the whole cgroup) defeats it; then ``joulebound
reset-clocks`` is the way back. The clock helper's clients need no guardian: the helper resets a
client's GPUs when its connection closes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys

from joulebound.core import deathwatch
from joulebound.core.deathwatch import DeathWatch
from joulebound.hw import gpu as gpu_layer

#: the owner's side of a guardian (``done()`` on a clean close)
ClockGuardian = DeathWatch


def start(device: gpu_layer.GpuDevice, lock: gpu_layer.GpuLock | None) -> DeathWatch:
    """Fork a guardian for ``device``'s clocks (see the module docs); ``lock``: the GPU lock
    the owner holds (its open file is shared with the guardian).

    Raises:
        OSError: the guardian could not be started (no fork, no pipe).
    """
    lock_fd = getattr(lock, "_fd", None)
    dup = os.dup(lock_fd) if lock_fd is not None else None
    owner = os.getpid()

    def on_death(_told: bytes) -> int:  # pragma: no cover - runs in the guardian
        return _reset_after(device, dup, owner)

    try:
        return deathwatch.start(on_death)
    finally:
        if dup is not None:      # the guardian has its copy
            os.close(dup)


def _reset_after(device: gpu_layer.GpuDevice, lock_fd: int | None,
                 owner: int) -> int:  # pragma: no cover - runs in the guardian
    """The owner is gone: reset ``device``'s clocks if the GPU lock is still ours."""
    if lock_fd is not None:
        try:    # still ours (the owner died holding it): nobody else may have locked clocks since
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0
    errors = _reset(device)
    msg = (f"joulebound clock guardian: the process that locked the clocks of "
           f"{device.describe()} (pid {owner}) ended without restoring them; ")
    msg += (f"resetting them failed: {'; '.join(errors)}. Run `joulebound reset-clocks`."
            if errors else "they were reset to the defaults.")
    deathwatch.say(msg)
    return 1 if errors else 0


def _reset(device: gpu_layer.GpuDevice) -> list[str]:  # pragma: no cover - in the guardian
    """Reset both clocks; on failure once more through a fresh NVML session, then in a new
    process. Returns what failed."""
    try:
        errors = device.reset_clocks()
    except Exception as exc:
        errors = [f"{type(exc).__name__}: {exc}"]
    if not errors:
        return []
    try:
        session, dev = gpu_layer.open_gpu(device.nv, device.uuid)
    except Exception as exc:
        errors = [*errors, f"reopening NVML failed: {exc}"]
    else:
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
    try:
        r = subprocess.run([sys.executable, "-m", "joulebound", "reset-clocks", "--gpus", uuid],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return [f"joulebound reset-clocks could not run: {exc}"]
    return [] if r.returncode == 0 else [f"joulebound reset-clocks: {r.stderr.strip()[-500:]}"]


def start_or_note(device: gpu_layer.GpuDevice, lock: gpu_layer.GpuLock | None,
                  notes: list[str]) -> DeathWatch | None:
    """:func:`start`, or ``None`` with a note in ``notes`` when no guardian can be forked."""
    try:
        return start(device, lock)
    except OSError as exc:
        notes.append(f"no clock guardian could be started ({exc}): if this process dies without "
                     "unwinding, run `joulebound reset-clocks`")
        return None
