"""A death watch: a forked process that acts when its owner vanishes without saying it is done.

A process cannot clean up after ``os._exit``, ``abort()``, a segfault, SIGBUS or SIGKILL: no
``finally`` block, ``atexit`` handler or signal handler runs. :func:`start` forks a small watcher
that does it instead:

* the watcher holds the read end of a pipe whose write end only the owner holds (closed at fork in
  the owner's other children, never inherited across ``exec``);
* a clean end calls :meth:`DeathWatch.done`: ``done`` is written, the pipe closed, the watcher
  exits without acting and is reaped;
* end-of-file **without** ``done`` — the kernel closes the pipe whatever way the owner died — runs
  the watcher's ``on_death()`` (in the watcher), then it exits.

The watcher starts a new session and ignores INT/TERM/HUP/QUIT/PIPE, so a Ctrl-C at the terminal,
a signal to the owner's process group or a group SIGKILL does not take it down with the owner;
its stdin and stdout are ``/dev/null`` (it keeps no pipe of the owner's reader open), stderr is
kept for its message. It is a fork, not a new program: ``on_death`` may use anything the owner had
set up (an NVML session, a test double); it runs no thread and never returns into the owner's
code (it ends with ``os._exit``). Users: :mod:`joulebound.runtime.guardian` (clocks) and
``joulebound measure`` (the command's processes).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import warnings
import weakref
from collections.abc import Callable

#: what the owner writes before closing the pipe on a clean end
DONE = b"done"

#: every watch this process owns (their pipes are closed in forked children: only the owner's
#: death or its ``done`` may end a watcher)
_LIVE: weakref.WeakSet[DeathWatch] = weakref.WeakSet()


class DeathWatch:
    """The owner's side of a running watcher. Use :func:`start`.

    Attributes:
        pid: the watcher's process id.
    """

    def __init__(self, pid: int, write_fd: int) -> None:
        self.pid = pid
        self._w: int | None = write_fd
        self._owner = os.getpid()

    @property
    def running(self) -> bool:
        """The pipe is still open (``done`` not yet sent)."""
        return self._w is not None

    def tell(self, data: bytes) -> None:
        """Send ``data`` to the watcher (``on_death`` gets everything sent, ``done`` excluded):
        what it needs to know that was not known at the fork, e.g. a child's pid."""
        if self._w is not None and os.getpid() == self._owner:
            with contextlib.suppress(OSError):
                os.write(self._w, data)

    def done(self, wait_s: float = 2.0) -> None:
        """The owner ended cleanly: the watcher exits without acting; reaped within ``wait_s``
        seconds (else left to exit on its own). Idempotent; nothing in a forked child."""
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
    for d in list(_LIVE):
        d._forget_in_child()
    _LIVE.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def start(on_death: Callable[[bytes], int]) -> DeathWatch:
    """Fork a watcher that runs ``on_death(told)`` (``told``: what :meth:`DeathWatch.tell`
    sent; its return value: the watcher's exit code) if this process ends without
    :meth:`DeathWatch.done` (see the module docs).

    Raises:
        OSError: no pipe or no fork.
    """
    r, w = os.pipe()
    try:
        with warnings.catch_warnings():     # "multi-threaded fork": the child makes no thread
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except BaseException:
        os.close(r)
        os.close(w)
        raise
    if pid == 0:  # pragma: no cover - runs in the watcher (its effect is tested)
        code = 0
        try:
            os.close(w)
            code = _watch(r, on_death)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(r)
    d = DeathWatch(pid, w)
    _LIVE.add(d)
    return d


def _detach() -> None:  # pragma: no cover - runs in the watcher
    """Own session, stop signals ignored, no input or output pipe of the owner's kept open."""
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


def _watch(r: int, on_death: Callable[[bytes], int]) -> int:  # pragma: no cover - in the watcher
    """Wait for ``done`` or end-of-file on ``r``; run ``on_death`` on the latter."""
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
    return on_death(got)


def say(message: str) -> None:  # pragma: no cover - in the watcher
    """One line on the watcher's stderr (best effort)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
