"""Simulator: agreement with the planner, latency semantics, baseline, noise."""

from __future__ import annotations

import numpy as np
import pytest
from _plan_synth import synth_char, synth_trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joulebound.core.clocks import ClockConfig
from joulebound.core.errors import JouleboundError
from joulebound.gpumodel.characterization import Characterization
from joulebound.planning.plan import Plan
from joulebound.planning.simulate import simulate
from joulebound.planning.solve import solve
from joulebound.planning.solve.switching import plan_switch_aware

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(seed=st.integers(0, 10_000), k=st.integers(5, 400), eps=st.floats(0.0, 0.1),
       gran=st.sampled_from(["kernel", "layer", "pass", "iteration"]))
def test_simulator_equals_planner_at_zero_latency(seed, k, eps, gran) -> None:
    tr = synth_trace(n_layers=max(1, k // 12), seed=seed)
    ch = synth_char(trace=tr, seed=seed, noise=0.01)
    plan = solve(ch, objective="relaxed", slowdown=eps, granularity=gran, trace=tr)
    sim = simulate(ch, plan, switch_latency_s=0.0)
    assert sim.time_s == pytest.approx(plan.predicted_time_s, rel=1e-12)
    assert sim.energy_j == pytest.approx(plan.predicted_energy_j, rel=1e-12)
    assert sim.switches == plan.n_switches
    assert sim.late_kernels == 0
    reactive = simulate(ch, plan, switch_latency_s=0.0, lookahead=False)
    assert reactive.energy_j == pytest.approx(plan.predicted_energy_j, rel=1e-12)


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), lat=st.sampled_from([1e-5, 1e-4, 5e-4, 3e-3]))
def test_switch_aware_plans_replay_exactly_at_their_latency(seed, lat) -> None:
    tr = synth_trace(n_layers=6, seed=seed)
    ch = synth_char(trace=tr, seed=seed)
    plan = plan_switch_aware(ch, slowdown=0.02, switch_latency_s=lat)
    sim = simulate(ch, plan, switch_latency_s=lat)
    assert sim.late_kernels == 0
    assert sim.switches == plan.n_switches
    assert sim.energy_j == pytest.approx(plan.predicted_energy_j, rel=1e-12)
    assert sim.time_s == pytest.approx(plan.predicted_time_s, rel=1e-12)


def _two_config_char(times, fast=1.0, slow=2.0):
    k = len(times)
    t = np.stack([np.array(times) * fast, np.array(times) * slow], axis=1)
    e = np.stack([np.array(times) * 10.0, np.array(times) * 4.0], axis=1)
    return Characterization([f"k{i}" for i in range(k)], [ClockConfig(1000, 5000), ClockConfig(500, 5000)],
                            t, e, np.zeros((k, 2), bool))


def _plan(ch, choice):
    return Plan(device="x", kernel_names=ch.kernel_names, configs=ch.configs, choice=np.array(choice))


def test_latency_semantics_by_hand() -> None:
    ch = _two_config_char([1.0, 1.0, 1.0, 1.0])
    plan = _plan(ch, [0, 0, 1, 1])
    # reactive, L = 1.5: request at t=2 (kernel 2 starts), effect at 3.5: kernel 2 and 3 start
    # at 2 and 3 (< 3.5) -> both run at the old clocks, no switch ever takes effect in time
    r = simulate(ch, plan, 1.5, lookahead=False)
    assert r.timeline.config.tolist() == [0, 0, 0, 0]
    assert r.late_kernels == 2 and r.switches == 0
    # reactive, L = 0.5: effect at 2.5 -> kernel 2 old clocks (running), kernel 3 new clocks
    r = simulate(ch, plan, 0.5, lookahead=False)
    assert r.timeline.config.tolist() == [0, 0, 0, 1]
    assert r.time_s == pytest.approx(1 + 1 + 1 + 2)
    assert r.energy_j == pytest.approx(10 + 10 + 10 + 4)
    # look-ahead, L = 1.5: request at 0.5, effect at 2.0 = kernel 2's start -> on time
    r = simulate(ch, plan, 1.5, lookahead=True)
    assert r.timeline.config.tolist() == [0, 0, 1, 1] and r.late_kernels == 0
    # one request at a time: phases shorter than L delay the later switches
    ch = _two_config_char([1.0] * 6)
    plan = _plan(ch, [0, 1, 0, 1, 0, 1])
    r = simulate(ch, plan, 1.5, lookahead=True)
    assert r.late_kernels > 0
    assert np.all(np.diff(r.timeline.start_s[np.flatnonzero(np.diff(r.timeline.config)) + 1]) >= 1.5)


def test_baseline_and_stall_costs() -> None:
    ch = synth_char(50, seed=3)
    base = simulate(ch)
    assert base.switches == 0
    assert base.time_s == pytest.approx(ch.time_s[:, 0].sum())
    assert base.energy_j == pytest.approx(ch.energy_j[:, 0].sum())
    ch2 = _two_config_char([1.0] * 4)
    r = simulate(ch2, _plan(ch2, [0, 0, 1, 1]), 0.0, switch_energy_j=3.0, switch_time_s=0.25)
    assert r.switches == 1
    assert r.time_s == pytest.approx(2 + 0.25 + 4)
    assert r.energy_j == pytest.approx(20 + 3 + 8)


def test_sensor_noise_changes_reading_not_truth() -> None:
    ch = synth_char(400, seed=4)
    a = simulate(ch, sensor_noise=0.05, seed=1, sensor_period_s=1e-4)
    b = simulate(ch)
    assert a.energy_j == b.energy_j
    assert a.sensor_energy_j != a.energy_j
    assert a.sensor_energy_j == pytest.approx(a.energy_j, rel=0.05)


def test_mismatched_plan_is_rejected() -> None:
    ch = synth_char(10, seed=5)
    other = synth_char(11, seed=5)
    plan = solve(other)
    with pytest.raises(JouleboundError, match="kernels"):
        simulate(ch, plan)
    odd = Plan(device="x", kernel_names=ch.kernel_names, configs=[ClockConfig(1, 1)],
               choice=np.zeros(10, np.int64))
    with pytest.raises(JouleboundError, match="lacks: 1/1"):
        simulate(ch, odd)
