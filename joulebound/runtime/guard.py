"""Clocks restored on every catchable signal — with no lock taken in a signal handler.

One :class:`SignalGuard` per process (:func:`guard`). While it is installed:

* **INT, TERM, HUP and QUIT** are caught. The moment one arrives, the C-level signal handler writes
  its number to a pipe (``signal.set_wakeup_fd``); a dedicated *restorer* thread blocked on that
  pipe wakes and restores the default clocks of every registered actuator
  (:meth:`~joulebound.runtime.actuators.Actuator.emergency_close`: mark it closed, so it makes
  no further NVML calls, wait at most ``timeout_s`` for an NVML call in flight, reset). This works
  even while the main thread is stuck in C code (a CUDA or NCCL wait), which a Python-level handler
  would not.
* The Python-level handler then only raises — ``KeyboardInterrupt`` for INT,
  :class:`SignalExit` (a ``SystemExit`` with code ``128 + signal``) for the others — so the
  program unwinds through its ``finally`` blocks (``joulebound run`` prints its summary and closes
  the switch log). A handler the program had installed before is called instead. A second signal
  after the clocks were restored ends the process with the signal's default action.
* A signal the process **inherited as ignored** (``nohup``, ``cmd &`` in a script: SIGINT is
  ``SIG_IGN``) stays ignored: the caller asked for it not to stop the job.
* In a **forked child** (DataLoader workers) the guard is off: the previous handlers are back and
  the child never touches the parent's clocks.

Signal handlers can only be installed from the main thread; elsewhere the guard is not installed
and the clocks are restored on normal exit (``atexit``) and by ``joulebound reset-clocks``.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any, Protocol

log = logging.getLogger(__name__)

#: the signals that stop a run (all catchable terminating signals a user or scheduler sends)
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                                            signal.SIGQUIT)


class SignalExit(SystemExit):
    """Raised in the main thread when a stop signal other than SIGINT arrives; ``code`` is
    ``128 + signum`` (what a shell reports), ``signum`` the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + int(signum))
        self.signum = int(signum)


class Restorable(Protocol):
    def emergency_close(self, timeout_s: float = ...) -> None: ...


class SignalGuard:
    """The process-wide guard (see the module docs). Use :func:`guard`."""

    def __init__(self, timeout_s: float = 5.0) -> None:
        self.timeout_s = timeout_s
        self._acts: list[Restorable] = []
        self._prev: dict[int, Any] = {}
        self._installed = False
        self._pid = os.getpid()
        self._r = self._w = -1
        self._prev_wakeup = -1
        self._thread: threading.Thread | None = None
        self._mu = threading.Lock()          # never taken in a signal handler
        #: signals received (appended by the handler: a plain list append takes no lock)
        self.received: list[int] = []
        #: set by the restorer once every registered actuator was restored after a signal
        self.restored = threading.Event()
        self._raised = False
        #: set by the restorer thread *before* it restores (and so unregisters) the actuators for
        #: a stop signal: the Python handler, which may run after that, must still raise
        self._signalled = False
        self._users = 0
        self.notes: list[str] = []

    # -- registration -----------------------------------------------------------------------
    def register(self, act: Restorable) -> bool:
        """Restore ``act``'s clocks on a stop signal; installs the guard when needed. Returns
        False when signal handlers cannot be installed (not the main thread)."""
        with self._mu:
            if act in self._acts:
                return self.installed
            self._acts.append(act)
        return self.acquire()

    def unregister(self, act: Restorable) -> None:
        """Stop watching ``act`` (closed); uninstalls the guard when nobody needs it."""
        with self._mu:
            if act not in self._acts:
                return
            self._acts.remove(act)
        self.release()

    def acquire(self) -> bool:
        """One more user of the guard; installs it when needed (see :meth:`install`)."""
        ok = self.install()
        if ok:
            if self._users == 0:      # a fresh start (the guard may have stayed installed)
                self._raised = False
                self._signalled = False
                self.restored.clear()
                self.received.clear()
            self._users += 1
        return ok

    def release(self) -> None:
        """One user less; the guard is uninstalled when the last one goes."""
        if self._users > 0:
            self._users -= 1
        if self._users == 0:
            self.uninstall()

    # -- install ----------------------------------------------------------------------------
    def install(self) -> bool:
        """Install the handlers (idempotent). False when not in the main thread."""
        if self._installed and self._pid == os.getpid():
            return True
        if threading.current_thread() is not threading.main_thread():
            note = ("signal handlers not installed (the actuator was created outside the main "
                    "thread): clocks are restored at exit; after a kill run "
                    "`joulebound reset-clocks`")
            if note not in self.notes:
                self.notes.append(note)
            return False
        self._pid = os.getpid()
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        os.set_inheritable(self._r, False)
        os.set_inheritable(self._w, False)
        self._prev_wakeup = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        self._prev = {}
        for sig in STOP_SIGNALS:
            prev = signal.getsignal(sig)
            if prev is signal.SIG_IGN:       # inherited as ignored: the caller's wish
                continue
            self._prev[sig] = prev
            signal.signal(sig, self._handler)
        self.received.clear()
        self.restored.clear()
        self._raised = False
        self._signalled = False
        self._thread = threading.Thread(target=self._restorer, name="joulebound-clock-restorer",
                                        daemon=True)
        self._thread.start()
        self._installed = True
        return True

    def uninstall(self) -> None:
        """Put the previous handlers back and stop the restorer (main thread only)."""
        if not self._installed or self._pid != os.getpid():
            return
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, prev in self._prev.items():
            with contextlib.suppress(ValueError, TypeError, OSError):
                if signal.getsignal(sig) == self._handler:
                    signal.signal(sig, prev)
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(self._prev_wakeup)
        self._installed = False
        with contextlib.suppress(OSError):
            os.write(self._w, b"\0")          # wakes the restorer: it exits on 0
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._r = self._w = -1

    @property
    def installed(self) -> bool:
        return self._installed and self._pid == os.getpid()

    def hold(self) -> None:
        """From now on a stop signal restores the clocks but raises nothing (the program is
        winding up: e.g. ``joulebound run`` printing its summary); a second one after the
        restore ends the process."""
        self._raised = True

    # -- the handler (main thread, Python level): no locks, no I/O beyond os.kill ----------
    def _handler(self, signum: int, frame: Any) -> None:
        self.received.append(signum)
        prev = self._prev.get(signum, signal.SIG_DFL)
        if callable(prev) and prev is not signal.default_int_handler:
            prev(signum, frame)              # the program's own handler decides
            return
        # nobody needs the guard: behave as before it -- unless the restorer already took this
        # signal and restored (so unregistered) the actuators: then the users are gone because
        # of this very signal, and it must unwind the program like any other (issue 30, item 9)
        if self._users == 0 and not self._signalled:
            if signum == signal.SIGINT and prev is signal.default_int_handler:
                raise KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self._raised:
            if self.restored.is_set():       # the clocks are safe: a second signal ends it now
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            return
        self._raised = True
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SignalExit(signum)

    # -- the restorer thread ----------------------------------------------------------------
    def _restorer(self) -> None:
        r = self._r
        while True:
            try:
                data = os.read(r, 512)
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                continue
            except OSError:
                return
            if not data:
                return
            stop = [b for b in data if b in {int(s) for s in STOP_SIGNALS}]
            forward = bytes(b for b in data if b != 0)
            if self._prev_wakeup >= 0 and forward:
                with contextlib.suppress(OSError):
                    os.write(self._prev_wakeup, forward)
            if stop:
                self._signalled = True
                self.restore_all(reason=f"signal {signal.Signals(stop[0]).name}")
            if 0 in data and not self._installed:
                return

    def restore_all(self, reason: str = "") -> None:
        """Emergency-close every registered actuator (restores their clocks)."""
        with self._mu:
            acts = list(self._acts)
        for act in acts:
            try:
                act.emergency_close(self.timeout_s)
            except Exception:
                log.exception("restoring clocks after %s failed", reason)
        self.restored.set()

    def _after_fork_in_child(self) -> None:
        if not self._installed:
            return
        self._installed = False
        self._acts = []
        self._users = 0
        self._mu = threading.Lock()
        self._thread = None
        if threading.current_thread() is threading.main_thread():
            for sig, prev in self._prev.items():
                with contextlib.suppress(ValueError, TypeError, OSError):
                    signal.signal(sig, prev)
            with contextlib.suppress(ValueError, OSError):
                signal.set_wakeup_fd(-1)
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._r = self._w = -1


_GUARD = SignalGuard()


def guard() -> SignalGuard:
    """The process's :class:`SignalGuard`."""
    return _GUARD


def _at_exit() -> None:
    _GUARD.restore_all(reason="exit")


atexit.register(_at_exit)
os.register_at_fork(after_in_child=lambda: _GUARD._after_fork_in_child())


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[SignalGuard]:
    """The guard installed for a block (``joulebound run``): INT/TERM/HUP/QUIT unwind the block
    with an exception even when the actuator changes nothing."""
    g = guard()
    ok = g.acquire()
    try:
        yield g
    finally:
        if ok:
            g.release()
