"""The status words of a measurement run (``runs.status`` in the store), one vocabulary for
``joulebound measure``, :class:`~joulebound.energy.meter.EnergyMeter` and the training callbacks.

- ``running``: the run is open (or its process died without closing it: kill -9, power loss);
- ``finished``: it ended normally (exit code 0, ``with`` block left, ``close()``, train end, or
  closed at interpreter exit);
- ``failed``: the command exited non-zero, could not start, or an exception ended the run;
- ``killed``: a signal ended it (``exit_code`` = 128 + the signal number, 130 for Ctrl-C).
"""

from __future__ import annotations

import signal

RUNNING = "running"
FINISHED = "finished"
FAILED = "failed"
KILLED = "killed"
STATUSES = (RUNNING, FINISHED, FAILED, KILLED)


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
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None or code == 0:
            return FINISHED, 0
        return FAILED, code if isinstance(code, int) else 1
    return FAILED, None
