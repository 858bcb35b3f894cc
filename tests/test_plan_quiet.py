"""Native solver output never reaches the user's terminal or --json stream."""

from __future__ import annotations

import ctypes

from joulebound.dvfs.solve.milp import _native_stdout_silenced


def test_native_printf_inside_the_solver_guard_is_discarded(capfd) -> None:
    libc = ctypes.CDLL(None)
    print("before", flush=True)
    with _native_stdout_silenced():
        libc.printf(b"HighsMipSolverData::noise\n")
    libc.printf(b"after-native\n")
    libc.fflush(None)
    print("after", flush=True)
    out = capfd.readouterr().out
    assert "HighsMipSolverData" not in out
    assert "before" in out and "after-native" in out and "after" in out
