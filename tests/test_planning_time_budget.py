"""Issue 28 item 4: the fast solver never waits on the exact one. Its core re-solve passes HiGHS a
small, size-proportional time budget by default, and a plan whose core step hit that limit says
so (plan meta, ``plan --json``, the printed table) while keeping its certified gap bound."""
from __future__ import annotations

import json

import numpy as np
import pytest

from joulebound.planning.solve import mckp, solve
from tests._plan_synth import synth_char


def _record_limits(monkeypatch) -> list[tuple[int, float | None, bool]]:
    calls: list[tuple[int, float | None, bool]] = []
    orig = mckp.milp_points_status

    def spy(group, t, e, budget, **kw):
        out = orig(group, t, e, budget, **kw)
        calls.append((len(t), kw.get("time_limit_s"), out[1]))
        return out

    monkeypatch.setattr(mckp, "milp_points_status", spy)
    return calls


def _core_instance():
    """A kernel-level instance; ``tol=0`` below makes the core step run whatever the greedy's gap
    (everything else is the default path)."""
    return synth_char(300, n_core=6, n_mem=2, seed=0, noise=0.02)


def test_default_core_step_runs_under_a_small_budget(monkeypatch):
    ch = _core_instance()
    calls = _record_limits(monkeypatch)
    plan = solve(ch, objective="relaxed", slowdown=0.02, tol=0.0)
    assert calls, "the core step did not run"
    for n_points, limit, _ in calls:
        assert limit is not None and 0 < limit <= mckp.CORE_TIME_CAP_S
        assert limit == pytest.approx(mckp.core_time_budget(n_points))
    assert plan.meta["solver_time_limit_s"] == pytest.approx(max(c[1] for c in calls))
    assert plan.meta["time_limit_hit"] is any(c[2] for c in calls)
    assert mckp.CORE_TIME_CAP_S <= 2.0


def test_a_hit_limit_is_reported_and_the_plan_stays_certified(monkeypatch):
    ch = _core_instance()
    free = solve(ch, objective="relaxed", slowdown=0.02, tol=0.0)
    monkeypatch.setattr(mckp, "CORE_TIME_CAP_S", 1e-9)   # HiGHS stops at once
    calls = _record_limits(monkeypatch)
    plan = solve(ch, objective="relaxed", slowdown=0.02, tol=0.0)
    assert calls and all(c[1] == 1e-9 and c[2] for c in calls)
    assert plan.meta["time_limit_hit"] is True and plan.meta["solver_time_limit_s"] == 1e-9
    assert plan.predicted_time_s <= plan.meta["budget_s"]
    gap = plan.meta["gap_bound"]
    assert np.isfinite(gap) and gap >= 0
    assert plan.predicted_energy_j == pytest.approx(plan.meta["lower_bound_j"] * (1 + gap))
    assert plan.predicted_energy_j >= free.predicted_energy_j * (1 - 1e-12)  # no better than HiGHS
    assert free.meta["time_limit_hit"] is False


def test_plan_cli_reports_a_hit_limit_in_json_and_table(monkeypatch, capsys):
    """Forced: the core step runs on every row (tol 0) and HiGHS gets no time."""
    from joulebound.cli import main

    monkeypatch.setattr(mckp, "CORE_TIME_CAP_S", 1e-9)
    orig = mckp.FastMCKP.solve
    monkeypatch.setattr(mckp.FastMCKP, "solve", lambda self, b, **kw: orig(self, b, **{**kw, "tol": 0.0}))
    args = ["plan", "gpt2-small", "--device", "rtx3080ti", "--slowdown", "1%", "--draws", "0",
            "--granularity", "iteration"]
    assert main([*args, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    hit = [r for r in rows if r["time_limit_hit"]]
    assert hit and all(r["solver_time_limit_s"] == 1e-9 and r["gap_bound"] is not None for r in hit)
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "stopped at its time limit for plan 'iteration'" in out and "certified" in out
