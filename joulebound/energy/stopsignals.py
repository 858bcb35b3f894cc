"""SIGTERM and SIGHUP end a metered process through its ``finally`` blocks, not by the default
action (which skips them): the run is closed ``killed`` with ``128 + signal`` and its open windows
are kept, flagged ``cut_short`` — the path Ctrl-C (``KeyboardInterrupt``) already takes.

While at least one :class:`~joulebound.energy.meter.EnergyMeter` is open in the main thread, a
SIGTERM or SIGHUP whose handler is the default one raises :class:`MeterSignalExit` (a
``SystemExit`` with code ``128 + signal``) in the main thread. A signal the program handles itself
or inherited as ignored is left alone; a second one while the first unwinds ends the process by
the default action; in a forked child (a DataLoader worker) the default action applies.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any

#: the signals turned into an exception while a meter is open
SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGHUP)


class MeterSignalExit(SystemExit):
    """Raised in the main thread by a stop signal while a meter is open; ``code`` is
    ``128 + signum`` (what a shell reports), ``signum`` the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + int(signum))
        self.signum = int(signum)


_users = 0
_pid = os.getpid()
_installed: dict[int, Any] = {}
#: the first stop signal this process received while a meter was open (``None``: none)
received: int | None = None


def _handler(signum: int, _frame: Any) -> None:
    global received
    if os.getpid() != _pid or received is not None or _users == 0:
        signal.signal(signum, signal.SIG_DFL)     # a second signal, a child, nobody metering
        os.kill(os.getpid(), signum)
        return
    received = signum
    raise MeterSignalExit(signum)


def acquire() -> bool:
    """One more open meter; installs the handlers where the signal has its default action.
    Returns False (and counts nothing) outside the main thread: pass the result to
    :func:`release`."""
    global _users, _pid
    if threading.current_thread() is not threading.main_thread():
        return False
    if _users == 0 or _pid != os.getpid():
        _pid = os.getpid()
        _users = 0
        _installed.clear()
        for sig in SIGNALS:
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(sig) in (signal.SIG_DFL, _handler):  # ours: left by a thread
                    signal.signal(sig, _handler)
                    _installed[sig] = signal.SIG_DFL
    _users += 1
    return True


def release(acquired: bool = True) -> None:
    """One open meter less (``acquired``: what its :func:`acquire` returned); the last one puts
    the default actions back when in the main thread (elsewhere the handler, finding no open
    meter, acts as the default would)."""
    global _users
    if not acquired or _users == 0 or _pid != os.getpid():
        return
    _users -= 1
    if _users == 0 and threading.current_thread() is threading.main_thread():
        for sig, prev in _installed.items():
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(sig) is _handler:
                    signal.signal(sig, prev)
        _installed.clear()
