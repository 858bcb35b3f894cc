"""Native solver output never reaches the user's terminal or --json stream, and the solver does not
redirect the process's stdout to achieve that (HiGHS is silenced through its own options)."""

from __future__ import annotations

import os

from _plan_synth import synth_char

from joulebound.planning.solve import solve


def test_exact_milp_prints_nothing_and_leaves_stdout_alone(capfd, monkeypatch) -> None:
    ch = synth_char(300, seed=11)
    redirected: list[int] = []
    real_dup2 = os.dup2

    def dup2(fd: int, fd2: int, *args, **kwargs):   # a native thread's or a library's fd 1
        redirected.append(fd2)                      # would be lost while fd 1 points elsewhere
        return real_dup2(fd, fd2, *args, **kwargs)

    monkeypatch.setattr(os, "dup2", dup2)
    plan = solve(ch, objective="relaxed", slowdown=0.02, method="milp")
    out, err = capfd.readouterr()
    assert plan.predicted_time_s <= 1.02 * plan.baseline_time_s * (1 + 1e-9)
    assert plan.meta["solver"] == "milp"
    assert out == ""                                 # HiGHS said nothing on stdout
    assert "HiGHS" not in err and "Unrecognized options" not in err
    assert 1 not in redirected and 2 not in redirected
