"""The status words of a measurement run (``runs.status`` in the store), one vocabulary for
``joulebound measure``, :class:`~joulebound.energy.meter.EnergyMeter` and the training callbacks.

- ``running``: the run is open;
- ``finished``: it ended normally (exit code 0, ``with`` block left, ``close()``, train end, or
  closed at interpreter exit);
- ``failed``: the command exited non-zero, could not start, or an exception ended the run;
- ``killed``: a signal ended it (``exit_code`` = 128 + the signal number, 130 for Ctrl-C, 143 for
  SIGTERM);
- ``lost``: its owner process is gone without closing it (SIGKILL, a crash, power loss): marked
  so by the next open of the store (:meth:`joulebound.energy.store.Store.mark_lost`), samples and
  windows kept.
"""

from __future__ import annotations

import signal

RUNNING = "running"
FINISHED = "finished"
FAILED = "failed"
KILLED = "killed"
LOST = "lost"
STATUSES = (RUNNING, FINISHED, FAILED, KILLED, LOST)


def from_returncode(returncode: int) -> tuple[str, int]:
    """``(status, exit_code)`` of a child process from ``Popen.returncode`` (negative = signal);
    ``exit_code`` as a shell reports it (``128 + N`` for signal N)."""
    if returncode < 0:
        return KILLED, 128 - returncode
    return (FINISHED if returncode == 0 else FAILED), returncode


def from_exception(exc: BaseException | None) -> tuple[str, int | None]:
    """``(status, exit_code)`` for a block or process ended by ``exc`` (``None``: normally)."""
    if exc is None:
        return FINISHED, None
    if isinstance(exc, KeyboardInterrupt):
        return KILLED, 128 + int(signal.SIGINT)
    signum = getattr(exc, "signum", None)     # a SystemExit raised by a stop signal's handler
    if isinstance(exc, SystemExit) and isinstance(signum, int) and signum > 0:
        return KILLED, 128 + signum
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None or code == 0:
            return FINISHED, 0
        return FAILED, code if isinstance(code, int) else 1
    return FAILED, None
