"""Controller, lookahead schedule, hooks (dispatch mode, periodic schedule, event aligner)."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from joulebound.core.clocks import AUTO, ClockConfig
from joulebound.planning.plan import Plan
from joulebound.runtime import Controller, DryRunActuator, lookahead_commands
from joulebound.runtime.controller import trace_from_ops
from joulebound.runtime.hooks import EventAligner, PeriodicSchedule, key_str
from joulebound.runtime.nextop import NextKernelPredictor

A, B = ClockConfig(1410, 1593), ClockConfig(1005, 1593)


def test_lookahead_zero_latency_is_the_plan():
    choice = np.array([0, 0, 1, 1, 0])
    assert lookahead_commands(choice, np.ones(5), 0.0).tolist() == choice.tolist()


def test_lookahead_switches_latency_early_and_wraps():
    choice = np.array([0, 0, 0, 1, 1, 0])
    t = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    # a switch issued at j is in effect from the first op starting >= 1.5 s later
    cmd = lookahead_commands(choice, t, 1.5)
    assert cmd.tolist() == [0, 1, 1, 0, 0, 0]
    # latency longer than a whole iteration: still well defined (cyclic)
    assert len(lookahead_commands(choice, t, 13.0)) == 6
    # a phase shorter than the latency is skipped over (switches are serial)
    t = np.array([1.0, 0.1, 1.0, 1.0])
    assert lookahead_commands(np.array([0, 1, 0, 0]), t, 1.05).tolist() == [0, 0, 0, 0]
    # ... but one just long enough keeps its own clocks, switched one latency early
    t = np.array([1.0, 1.0, 1.0, 1.0])
    assert lookahead_commands(np.array([0, 1, 2, 0]), t, 1.0).tolist() == [1, 2, 0, 0]


def test_lookahead_keeps_a_phase_that_lasts_the_latency():
    """Phase 1 (ops 2-3, 2.5 s) lasts the 2.4 s latency. Its switch is issued at op 5 of the
    iteration before (5.5 s: the last op that starts 2.4 s before op 2 at 8.5 s), the switch
    back at op 2 (8.5 s: the last op 2.4 s before op 4 at 11 s), 3 s later: both land on time,
    so ops 2 and 3 run at their clocks. (The rule that commanded the clocks of the first op a
    switch could reach issued the switch back at op 1, 7.5 s, only 2 s after the first, and
    dropped the phase.)"""
    choice = np.array([0, 0, 1, 1, 0, 0])
    t = np.array([1.0, 1.0, 0.5, 2.0, 1.0, 1.0])
    assert lookahead_commands(choice, t, 2.4).tolist() == [1, 1, 0, 0, 0, 1]
    # the same phase 0.2 s shorter than the latency is skipped over
    t2 = np.array([1.0, 1.0, 0.3, 1.9, 1.0, 1.0])
    assert lookahead_commands(choice, t2, 2.4).tolist() == [0] * 6


def test_serialize_keeps_a_phase_that_lasts_the_latency_when_its_run_comes_out_a_hair_short():
    """The guard against float rounding of the start times: a commanded run a hair shorter than
    the latency is kept when its planned phase lasts the latency (the next switch waits for it
    to land) and dropped when the phase is shorter."""
    from joulebound.runtime.lookahead import _serialize

    starts = np.arange(16.0)                  # four iterations of four 1 s ops
    lat = 1.0 + 1e-12
    cmd = np.array([0, 1, 0, 0])
    assert _serialize(cmd, np.array([2.0, lat, 2.0, 2.0]), starts, lat).tolist() == [0, 1, 1, 0]
    assert _serialize(cmd, np.array([2.0, 0.5, 2.0, 2.0]), starts, lat).tolist() == [0, 0, 0, 0]


def test_lookahead_switches_into_a_one_op_phase_that_follows_a_short_op():
    """The switch for a phase is issued at the last op that starts at least L before the phase:
    here op 0 (0 s) for phase 1 (op 3 alone, 2 s, from 1.125 s; L = 1 s). The rule that
    commanded, at each op, the clocks of the first op a switch issued then could reach never
    commanded phase 1: only a dispatch within op 2's 0.125 s before 0.125 s could reach op 3
    first, and none falls there (op 0 reaches op 2, op 1 reaches op 4), so op 3 ran at the
    clocks of phase 0 ([0, 2, 2, 2, 2, 0]). A one-op phase after a short op (a long matmul after
    a tiny elementwise op) is how the shipped GPT-2 plans at 1 ms lost a switch."""
    choice = np.array([0, 0, 0, 1, 2, 2])
    t = np.array([0.5, 0.5, 0.125, 2.0, 1.0, 1.0])
    assert lookahead_commands(choice, t, 1.0).tolist() == [1, 1, 1, 2, 2, 0]


def _run_configs(cmd: np.ndarray) -> list[int]:
    """Configs of the cyclic runs of ``cmd``, starting at its first change (rotation-free)."""
    cuts = np.flatnonzero(cmd != np.roll(cmd, 1))
    return [int(cmd[c]) for c in cuts]


def test_lookahead_commands_every_switch_of_random_plans_whose_phases_last_the_latency():
    """Random op times (tiny elementwise ops among long matmuls) and plans whose phases, the
    cyclic wrap included, all last >= L: the commands switch into every phase, in the plan's
    order (the rule that commanded the first reachable op's clocks lost phases here)."""
    rng = np.random.default_rng(26)
    for _ in range(300):
        k = int(rng.integers(8, 60))
        t = np.where(rng.random(k) < 0.4, rng.uniform(1e-5, 1e-4, k), rng.uniform(1e-4, 5e-3, k))
        lat = float(rng.uniform(1e-4, 8e-3))
        choice = np.empty(k, np.int64)
        cfg, acc = 0, 0.0
        for j in range(k):
            if acc >= lat:                       # the phase lasts L: start the next one
                cfg, acc = (cfg + int(rng.integers(1, 3))) % 3, 0.0
            choice[j] = cfg
            acc += t[j]
        last = np.flatnonzero(choice != choice[-1])
        if acc < lat and len(last):              # a short last phase joins the one before
            choice[last[-1] + 1:] = choice[last[-1]]
        phases = _run_configs(choice)
        if len(phases) < 2:
            continue
        cmd = lookahead_commands(choice, t, lat)
        got = _run_configs(cmd)
        assert len(got) == len(phases), (t.tolist(), choice.tolist(), lat)
        assert any(got[i:] + got[:i] == phases for i in range(len(got))), (got, phases)

def _plan(names, choice):
    return Plan(device="test", kernel_names=names, configs=[AUTO, A, B], choice=choice)


def test_controller_follows_plan_goes_safe_and_returns():
    names = [f"op{i}" for i in range(20)]
    choice = np.array([1] * 10 + [2] * 10)
    act = DryRunActuator()
    ctl = Controller(_plan(names, choice), act, min_confidence=0.75)
    ids = [ctl.interner.intern(n) for n in names]
    stray = ctl.interner.intern("eval-op")
    for _ in range(3):
        for k in ids:
            ctl.on_op(k)
    steady = [r for r in ctl.log if r["op"] >= 20]
    assert [(r["label"], r["config"]) for r in steady] == [(0, A.label), (10, B.label),
                                                           (0, A.label), (10, B.label)]
    for _ in range(15):                       # an evaluation step on unknown ops
        ctl.on_op(stray)
    assert ctl.commanded == AUTO and ctl.log[-1]["reason"] == "unknown-op"
    for _ in range(2):
        for k in ids:
            ctl.on_op(k)
    assert ctl.commanded == B and ctl.log[-1]["reason"] == "plan"
    assert ctl.stats.safe_ops >= 15
    ctl.close()
    assert act.current == AUTO and ctl.log[-1]["reason"] == "close"


def _earned_confidence(stream, keys, warm=8):
    """Confidence a stream has earned at each op, from the stream alone (not from any
    predictor): the run of consecutive ops that follow the plan's order, over ``warm``."""
    pos = {k: i for i, k in enumerate(keys)}
    out, run, prev = [], 0, None
    for k in stream:
        i = pos.get(k)
        run = 0 if i is None else run + 1 if prev is not None and i == (prev + 1) % len(keys) else 1
        prev = i
        out.append(min(1.0, run / warm))
    return out


class _Overconfident(NextKernelPredictor):
    """A broken predictor: right labels, but always sure (confidence 1)."""

    def observe(self, key):
        hit = super().observe(key)
        self._nc = 1.0
        return hit


def _gate_violations(predictor, min_confidence):
    """Ops at which the controller's command disagrees with the gate: the plan's config is
    commanded exactly where the stream has earned ``min_confidence``, the safe pair elsewhere.
    The stream: two iterations from a cold start, an evaluation step of 10 unknown ops, then
    the loop resumes mid-iteration (op 4), where labels come back before the lock is trusted."""
    names = [f"op{i}" for i in range(20)]
    choice = np.array([1] * 10 + [2] * 10)
    plan = _plan(names, choice)
    ctl = Controller(plan, DryRunActuator(), min_confidence=min_confidence, predictor=predictor)
    ids = [ctl.interner.intern(n) for n in names]
    stray = ctl.interner.intern("eval-op")
    stream = ids * 2 + [stray] * 10 + ids[4:] + ids * 2
    earned = _earned_confidence(stream, ids)
    bad, gated = [], 0
    for i, k in enumerate(stream):
        ctl.on_op(k)
        label = ctl.predictor.last_label
        want = plan.configs[choice[label]] if earned[i] >= min_confidence else AUTO
        gated += label >= 0 and want is AUTO  # a known label that the gate must not follow
        if ctl.commanded != want:
            bad.append((i, label, ctl.commanded.label, want.label))
    return bad, gated, ctl


@pytest.mark.parametrize("min_confidence", [0.5, 0.75])
def test_the_confidence_gate_holds_the_safe_pair_until_the_lock_is_earned(min_confidence):
    """With labels known but the lock young (a cold start, the resume after an evaluation step)
    the controller runs the safe pair, and follows the plan from the op at which the predictor's
    run of matches reaches ``min_confidence`` (warm = 8: the 4th / 6th op in order)."""
    bad, gated, ctl = _gate_violations(NextKernelPredictor(), min_confidence)
    assert bad == []
    wait = round(min_confidence * 8) - 1  # ops in order before the run reaches the gate
    assert gated >= wait + 1  # the cold start's and at least one at the resume
    first = next(r for r in ctl.log if r["reason"] == "plan")
    assert first["op"] == wait and first["label"] == wait
    resumed = [r for r in ctl.log if r["reason"] == "plan" and 50 <= r["op"] < 70]
    assert resumed[0]["op"] == 50 + wait  # op 4 resumes the loop at stream op 50
    assert ctl.stats.safe_ops == 2 * wait + 10
    # a predictor that is always sure follows the plan from the first labelled op: caught
    over, _, _ = _gate_violations(_Overconfident(), min_confidence)
    assert over and over[0][0] == 0 and over[0][2] == A.label


def test_controller_with_latency_switches_early():
    names = [f"op{i}" for i in range(10)]
    choice = np.array([1] * 5 + [2] * 5)
    act = DryRunActuator()
    ctl = Controller(_plan(names, choice), act, kernel_time_s=np.ones(10), switch_latency_s=2.0)
    ids = [ctl.interner.intern(n) for n in names]
    for _ in range(4):
        for k in ids:
            ctl.on_op(k)
    plan_sw = [r["label"] for r in ctl.log if r["reason"] == "plan" and r["op"] >= 20]
    assert plan_sw == [3, 8, 3, 8]          # 2 ops (2 s) before the phase starts at 5 and 0
    with pytest.raises(ValueError, match="kernel_time_s"):
        Controller(_plan(names, choice), act, switch_latency_s=1.0)


def test_periodic_schedule_fires_in_order_at_offsets():
    got = []
    sched = PeriodicSchedule([(0.04, B), (0.0, A), (0.08, AUTO)], got.append)
    t0 = time.monotonic()
    sched.step_begin()
    sched.wait()
    assert got == [A, B, AUTO] and time.monotonic() - t0 >= 0.075
    offs = [t for t, _ in sched.fired]
    assert offs[1] >= 0.035 and offs == sorted(offs)
    plan = _plan(["a", "b", "c"], np.array([1, 2, 2]))
    # B from 0.5 s: issued at the step start (lands at 0.2); A for the next step's first kernel:
    # issued when the last kernel starts (1.5 s), lands at 1.7 s, before the step ends (2.5 s)
    s2 = PeriodicSchedule.from_plan(plan, [0.5, 1.0, 1.0], 0.2, got.append)
    assert [(round(t, 6), c) for t, c in s2.switches] == [(0.0, B), (1.5, A)]
    s3 = PeriodicSchedule.from_plan(plan, [0.5, 1.0, 1.0], 0.0, got.append)
    assert [(round(t, 6), c) for t, c in s3.switches] == [(0.0, A), (0.5, B)]


def test_event_aligner_waits_for_device_progress():
    gates = []

    class FakeEvent:
        def __init__(self):
            self.done = threading.Event()
            gates.append(self.done)

        def record(self):
            pass

        def synchronize(self):
            self.done.wait(5)

    applied = []
    al = EventAligner(applied.append, event_factory=FakeEvent)
    al.submit(A)
    al.submit(B)
    time.sleep(0.05)
    assert applied == []                      # the "device" has not reached the ops yet
    gates[0].set()
    time.sleep(0.05)
    assert applied == [A]
    gates[1].set()
    al.close()
    assert applied == [A, B]


def test_key_text_and_trace_from_ops():
    k = key_str(("aten.mm.default", ((8, 64), (64, 192)), "float32"))
    assert k == "aten.mm.default[8x64,64x192]float32"
    tr = trace_from_ops([k, "aten.add.Tensor[8x192,8x192]float32", "aten.cat.default[(2x3,2x3)]float32"])
    assert tr[0].category == "gemm" and tr[0].flops == 2 * 8 * 64 * 192
    assert tr[1].category == "elementwise" and tr[1].bytes == 4 * 8 * 192 * 3
    assert tr.names()[0] == k


def test_trace_from_ops_keeps_the_keys_dtype():
    """A bf16 op is modeled at the bf16 (tensor-core) rate with 2-byte elements, not as fp32."""
    tr = trace_from_ops(["aten.mm.default[8x64,64x192]bfloat16",
                         "aten.mm.default[8x64,64x192]float32", "aten.ones.default[]-"])
    assert [k.dtype for k in tr] == ["bf16", "fp32", "fp32"]
    assert tr[0].flops == tr[1].flops and tr[0].bytes * 2 == tr[1].bytes


def test_opstream_sees_forward_backward_and_optimizer_ops():
    torch = pytest.importorskip("torch")
    from joulebound.runtime.hooks import OpStream

    lin = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    seen = []
    with OpStream(on_op=seen.append, record=True) as ops:
        loss = lin(torch.ones(2, 8)).sum()
        loss.backward()
        opt.step()
    names = [ops.name(k) for k in ops.keys]
    assert seen == ops.keys
    assert any(n.startswith("aten.addmm") and "[4,2x8,8x4]float32" in n for n in names)
    assert any(n.startswith("aten.mm") for n in names)              # backward
    assert any("_foreach_add" in n or "add_" in n for n in names)   # optimizer


def test_controlled_context_manager_in_a_script(tmp_path):
    torch = pytest.importorskip("torch")
    from joulebound.runtime import controlled
    from joulebound.runtime.hooks import OpStream

    lin = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(lin.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        lin(torch.ones(4, 8)).pow(2).mean().backward()
        opt.step()

    with OpStream(record=True) as ops:
        for _ in range(3):
            a = len(ops.keys)
            step()
    names = [ops.name(k) for k in ops.keys[a:]]
    choice = np.arange(len(names)) * 2 // len(names) + 1          # two halves: A then B
    _plan(names, choice).save(tmp_path / "plan.json")
    log = tmp_path / "sw.jsonl"
    with controlled(tmp_path / "plan.json", "dry-run", switch_log=str(log)) as ctl:
        for _ in range(6):
            step()
    assert ctl.stats.ops == 6 * len(names)
    plan_sw = [r for r in ctl.log if r["reason"] == "plan"]
    assert len(plan_sw) >= 6 and {r["config"] for r in plan_sw} == {A.label, B.label}
    assert ctl.actuator.current == AUTO and log.read_text().count("\n") == len(ctl.log)


def test_controller_through_event_aligner_switches_in_order():
    class DoneEvent:           # a device that is always caught up
        def record(self):
            pass

        def synchronize(self):
            pass

    names = [f"op{i}" for i in range(10)]
    act = DryRunActuator()
    al = EventAligner(act.set_clocks, event_factory=DoneEvent)
    ctl = Controller(_plan(names, np.array([1] * 5 + [2] * 5)), act, aligner=al)
    ids = [ctl.interner.intern(n) for n in names]
    for _ in range(4):
        for k in ids:
            ctl.on_op(k)
    ctl.close()                # drains the aligner, then resets
    assert [s.config.label for s in act.switches] == [r["config"] for r in ctl.log]
    assert len(act.switches) >= 7
    assert act.current == AUTO


def test_periodic_schedule_drives_controller_command():
    names = ["a", "b", "c"]
    act = DryRunActuator()
    ctl = Controller(_plan(names, np.array([1, 2, 2])), act)
    sched = PeriodicSchedule.from_plan(ctl.plan, [0.02, 0.02, 0.02], 0.0, ctl.command)
    for _ in range(2):
        sched.step_begin()
        sched.wait()
    assert [r["config"] for r in ctl.log] == [A.label, B.label, A.label, B.label]
    ctl.close()
    assert act.current == AUTO


def test_forked_child_does_not_drive_the_parent_controller():
    torch = pytest.importorskip("torch")
    import os

    from joulebound.runtime.hooks import OpStream

    x = torch.ones(3)
    with OpStream(record=True) as ops:
        torch.neg(x)
    names = [ops.name(k) for k in ops.keys]
    act = DryRunActuator()
    ctl = Controller(_plan(names, np.array([1])), act)
    act.set_clocks(A)
    with ctl.hook():
        torch.neg(x)
        n = ctl.stats.ops
        pid = os.fork()
        if pid == 0:             # like a DataLoader worker: inherits the dispatch mode
            torch.neg(x)         # not seen by the (copied) controller
            ok = ctl.stats.ops == n and act.set_clocks(B) is False
            act.close()          # must not reset the parent's clocks
            os._exit(0 if ok and act.current == A else 1)
        _, status = os.waitpid(pid, 0)
        torch.neg(x)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ctl.stats.ops == n + 1
    ctl.close()


def test_lookahead_of_a_latency_of_many_iterations_is_bounded_and_cyclic():
    """A plan JSON with ``switch_latency_s`` 1e9 (fuzzed, or `plan --switch-latency 1e9`) made
    `run --plan` allocate 1.16 PiB (issue 30 item 13): the timeline was tiled once per
    iteration the latency spans. Whole iterations do not change what is commanded."""
    choice = np.array([0, 0, 1, 1, 2, 0])
    t = np.array([1.0, 2.0, 1.0, 3.0, 2.0, 1.0])       # period 10 s, exact in floats
    for rem in (0.5, 1.5, 4.0, 7.5):
        near = lookahead_commands(choice, t, rem + 10.0 * 5)
        assert lookahead_commands(choice, t, rem + 10.0 * 10**9).tolist() == near.tolist()
    assert len(lookahead_commands(choice, t, 1e308)) == 6       # finite, however large


@pytest.mark.parametrize("lat", [float("inf"), -0.5, "1ms"])
def test_a_plan_file_with_an_impossible_switch_latency_is_refused_naming_it(tmp_path, lat):
    from joulebound.core.errors import SchemaError

    p = Plan(device="test", kernel_names=["a", "b"], configs=[AUTO, ClockConfig(1005, 9501)],
             choice=np.array([0, 1])).save(tmp_path / "plan.json")
    doc = json.loads(p.read_text())
    doc["switch_latency_s"] = lat
    p.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match="switch_latency_s"):
        Plan.load(p)


@pytest.mark.parametrize("key", ["[-5, 0]", "aten.mm.default[-5x3,3x4]float32",
                                 "aten.add.Tensor[4x-1,4x-1]float32"])
def test_an_op_key_with_a_negative_size_is_priced_as_unknown_never_negative(key):
    """A plan's kernel name `[-5, 0]` (fuzzed plan JSON) gave a kernel of -5 FLOPs and -40
    bytes; the GPU model indexed its tables with them and segfaulted the process (issue 30
    item 13 follow-up). A negative size is not a shape: the op costs are unknown (0)."""
    from joulebound.runtime.opkeys import parse_key

    _, inputs, _ = parse_key(key)
    assert all(s is None or all(d >= 0 for d in s) for s in inputs if not isinstance(s, list))
    (k,) = trace_from_ops([key]).kernels
    assert k.flops >= 0 and k.bytes >= 0
