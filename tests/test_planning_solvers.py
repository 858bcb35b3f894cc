"""Global and local planners: optimality against HiGHS, budgets, granularities, objectives."""

from __future__ import annotations

import numpy as np
import pytest
from _plan_synth import synth_char, synth_trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joulebound.core.errors import JouleboundError
from joulebound.gpumodel.characterization import Characterization
from joulebound.planning.solve import (
    FastMCKP,
    align,
    baseline_totals,
    granularity_groups,
    pareto_frontier,
    pareto_options,
    solve,
    solve_local,
    solve_milp,
)

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def _brute_hull(t: np.ndarray, e: np.ndarray) -> set[int]:
    """Vertices of the lower-left convex hull of points (t, e), by definition (slow)."""
    pareto = [i for i in range(len(t))
              if not any((t[j] <= t[i] and e[j] <= e[i]) and (t[j] < t[i] or e[j] < e[i])
                         for j in range(len(t)))]
    # keep one of exact duplicates
    seen, uniq = set(), []
    for i in sorted(pareto, key=lambda i: (t[i], e[i])):
        if (t[i], e[i]) not in seen:
            seen.add((t[i], e[i]))
            uniq.append(i)
    out = set()
    for i in uniq:
        left = [(e[i] - e[j]) / (t[i] - t[j]) for j in uniq if t[j] < t[i]]
        right = [(e[j] - e[i]) / (t[j] - t[i]) for j in uniq if t[j] > t[i]]
        if (max(left) if left else -np.inf) < (min(right) if right else np.inf):
            out.add(i)
    return out


@SETTINGS
@given(st.integers(0, 10_000), st.integers(2, 30))
def test_hull_matches_definition(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    t = rng.random((5, n)).round(2) + 0.1          # rounding creates ties in time
    e = 1.0 / t + rng.random((5, n)) * 0.5
    o = pareto_options(t, e)
    for g in range(5):
        pts = range(o.ptr[g], o.ptr[g + 1])
        got = {(o.t[i], o.e[i]) for i in pts if o.hull[i]}
        want = {(t[g, i], e[g, i]) for i in _brute_hull(t[g], e[g])}
        assert got == want
        # Pareto points: time strictly up, energy strictly down
        assert np.all(np.diff(o.t[o.ptr[g]:o.ptr[g + 1]]) > 0)
        assert np.all(np.diff(o.e[o.ptr[g]:o.ptr[g + 1]]) < 0)


@SETTINGS
@given(seed=st.integers(0, 10_000), k=st.integers(200, 320), eps=st.floats(0.0, 0.08),
       n_core=st.integers(3, 6))
def test_fast_within_0p1_percent_of_milp_and_within_budget(seed: int, k: int, eps: float,
                                                          n_core: int) -> None:
    ch = synth_char(k, n_core=n_core, n_mem=2, seed=seed, noise=0.02)
    tb, _ = baseline_totals(ch)
    fast = solve(ch, objective="relaxed", slowdown=eps)
    exact = solve(ch, objective="relaxed", slowdown=eps, method="milp", time_limit_s=30)
    budget = (1 + eps) * tb
    assert fast.predicted_time_s <= budget * (1 + 1e-9)
    assert fast.predicted_energy_j <= exact.predicted_energy_j * (1 + 1e-3)
    # the certified bound really is a lower bound on the optimum
    assert fast.meta["lower_bound_j"] <= exact.predicted_energy_j * (1 + 1e-6)


def test_fast_solver_on_raw_arrays_matches_milp_exactly_on_tiny_instances() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        t = rng.random((6, 5)) + 0.2
        e = 1.0 / t + rng.random((6, 5))
        budget = float(t.min(1).sum() + rng.random() * (t.max(1).sum() - t.min(1).sum()))
        fast = FastMCKP(t, e).solve(budget)
        exact = solve_milp(t, e, budget)
        # brute force over all 5**6 choices
        idx = np.indices((5,) * 6).reshape(6, -1)
        tt, ee = t[np.arange(6)[:, None], idx].sum(0), e[np.arange(6)[:, None], idx].sum(0)
        best = ee[tt <= budget].min()
        assert exact.energy == pytest.approx(best, rel=1e-6)
        assert fast.energy == pytest.approx(best, rel=1e-6)   # small: core solved exactly
        assert fast.time <= budget


def test_budget_below_fastest_names_smallest_feasible_slowdown() -> None:
    ch = synth_char(50, seed=1, noise=0.05)     # some pairs are faster than auto
    with pytest.raises(JouleboundError, match="smallest feasible --slowdown is") as err:
        solve(ch, objective="relaxed", slowdown=-0.5)
    msg = str(err.value)
    eps = float(msg.split("smallest feasible --slowdown is ")[1].split("%")[0]) / 100
    assert -0.5 < eps < 0
    plan = solve(ch, objective="relaxed", slowdown=eps + 1e-5)      # it really is feasible
    assert plan.time_delta <= eps + 1e-5 + 1e-9
    with pytest.raises(JouleboundError, match="smallest feasible"):
        solve(ch, objective="relaxed", slowdown=eps - 1e-3)


def test_waste_never_slower_and_saves_when_memory_clock_is_free() -> None:
    # p large: a hard roofline, so compute-bound kernels lose nothing at a lower memory clock
    ch = synth_char(300, seed=2, p=40.0)
    plan = solve(ch)                      # objective waste: eps = 0
    assert plan.time_delta <= 1e-12
    assert plan.energy_delta < -0.01
    local = solve_local(ch)
    assert local.time_delta <= 1e-12
    # the global plan can trade slack between kernels: never worse than the local one
    assert plan.predicted_energy_j <= local.predicted_energy_j * (1 + 1e-12)


def test_local_respects_every_kernels_own_bound() -> None:
    ch = synth_char(200, seed=4)
    plan = solve_local(ch, slowdown=0.02)
    rows = np.arange(ch.n_kernels)
    assert np.all(ch.time_s[rows, plan.choice] <= 1.02 * ch.time_s[:, 0] * (1 + 1e-12))
    # and each kernel is at its least energy among the options within that bound
    ok = ch.time_s <= 1.02 * ch.time_s[:, :1] * (1 + 1e-12)
    assert np.allclose(ch.energy_j[rows, plan.choice], np.where(ok, ch.energy_j, np.inf).min(1))


def test_granularities_share_configs_as_documented() -> None:
    tr = synth_trace(n_layers=3)
    ch = synth_char(trace=tr, seed=5)
    phases = np.array(tr.phases())
    for gran in ("iteration", "pass", "layer", "kernel"):
        plan = solve(ch, objective="relaxed", slowdown=0.03, granularity=gran, trace=tr)
        assert plan.time_delta <= 0.03 + 1e-9
        if gran == "iteration":
            assert len(set(plan.choice)) == 1
        if gran == "pass":
            for ph in set(phases):
                assert len(set(plan.choice[phases == ph])) == 1
    # finer granularity never costs more energy (its feasible set is larger)
    e = [solve(ch, objective="relaxed", slowdown=0.03, granularity=g, trace=tr,
               method="milp").predicted_energy_j for g in ("iteration", "pass", "layer", "kernel")]
    assert all(a >= b * (1 - 1e-6) for a, b in zip(e, e[1:], strict=False))


def test_tie_gives_identical_invocations_one_config() -> None:
    tr = synth_trace(n_layers=4)
    ch = synth_char(trace=tr, seed=6)
    plan = solve(ch, objective="relaxed", slowdown=0.02, trace=tr, tie=True)
    sig = tr.signature_groups()
    for s in np.unique(sig):
        assert len(set(plan.choice[sig == s])) == 1
    g = granularity_groups("kernel", len(tr), tr, tie=True)
    assert g.max() + 1 == len(np.unique(sig))


def test_edp_and_ed2p_beat_every_frontier_point() -> None:
    ch = synth_char(250, seed=7)
    fr = pareto_frontier(ch, np.linspace(0, 0.3, 31))
    for obj, n in (("edp", 1), ("ed2p", 2)):
        plan = solve(ch, objective=obj)
        score = plan.predicted_energy_j * plan.predicted_time_s**n
        assert score <= np.min(fr.energy_j * fr.time_s**n) * (1 + 1e-9)
    capped = solve(ch, objective="edp", slowdown=0.0)
    assert capped.time_delta <= 1e-9


def test_least_time_under_energy_cap() -> None:
    ch = synth_char(220, seed=8)
    plan = solve(ch, objective="time", energy_cap=0.9)
    assert plan.energy_delta <= -0.1 + 1e-9
    # MILP with the roles swapped is the exact reference
    ref = solve(ch, objective="time", energy_cap=0.9, method="milp")
    assert plan.predicted_time_s <= ref.predicted_time_s * (1 + 1e-3)
    with pytest.raises(JouleboundError, match="energy cap"):
        solve(ch, objective="time", energy_cap=0.01)


def test_frontier_is_monotone() -> None:
    ch = synth_char(300, seed=9)
    fr = pareto_frontier(ch, np.linspace(-0.02, 0.2, 23))
    assert np.all(np.diff(fr.energy_j) <= 1e-12 * fr.energy_j[0])
    assert np.all(fr.time_s <= (1 + fr.slowdown) * fr.baseline_time_s * (1 + 1e-9))


def test_missing_kernels_are_named() -> None:
    tr = synth_trace(n_layers=2)
    ch = synth_char(trace=tr, seed=0)
    keep = [i for i, n in enumerate(ch.kernel_names) if "softmax" not in n]
    sub = Characterization([ch.kernel_names[i] for i in keep], ch.configs, ch.time_s[keep],
                           ch.energy_j[keep], ch.measured[keep], device="synthetic")
    with pytest.raises(JouleboundError, match="f_k4_softmax") as err:
        align(sub, tr)
    assert "b_k4_softmax" in str(err.value)
    # one row per distinct name serves every invocation
    uniq = {n: i for i, n in enumerate(ch.kernel_names)}
    rows = sorted(uniq.values())
    small = Characterization([ch.kernel_names[i] for i in rows], ch.configs, ch.time_s[rows],
                             ch.energy_j[rows], ch.measured[rows])
    full = align(small, tr)
    assert full.n_kernels == len(tr)
    assert np.allclose(full.time_s, ch.time_s)


def test_without_auto_column_baseline_is_top_clocks() -> None:
    ch = synth_char(100, seed=10, with_auto=False)
    tb, eb = baseline_totals(ch)
    assert tb == pytest.approx(ch.time_s[:, 0].sum())
    plan = solve(ch)
    assert plan.meta["baseline_config"] == ch.configs[0].label
    assert plan.time_delta <= 1e-12
