"""``joulebound run --plan P --verify``: the measured A/B saving, on fake GPUs whose energy depends
on the clocks locked through the fake NVML (``joulebound.testing.clockedgpu``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from joulebound.core.errors import JouleboundError
from joulebound.measure.verify import (
    ORDER,
    block_steps_for,
    measured_block_arm,
    paired_relative_change,
    pairs_needed,
)

# -- the statistics (pure) ---------------------------------------------------------------------


def test_paired_change_is_the_mean_relative_difference_with_a_t_interval():
    auto = [10.0, 11.0, 10.5, 9.5]
    plan = [9.0, 9.9, 9.66, 8.55]          # -10 %, -10 %, -8 %, -10 %
    est = paired_relative_change(auto, plan)
    d = np.array(plan) / np.array(auto) - 1
    assert est.mean == pytest.approx(d.mean())
    from scipy import stats

    hw = stats.t.ppf(0.95, 3) * d.std(ddof=1) / 2
    assert est.half_width == pytest.approx(hw) and est.ci == pytest.approx((d.mean() - hw,
                                                                            d.mean() + hw))
    assert est.n == 4 and est.confidence == 0.90


def test_the_90_percent_interval_covers_the_truth_about_90_percent_of_the_time():
    """Calibration: 600 synthetic runs of 6 pairs (per-block noise 2 %, a linear drift that the
    ABBA order cancels), true change -7 %."""
    rng = np.random.default_rng(1)
    truth, cover = -0.07, 0
    n_runs, n_pairs = 600, 6
    for _ in range(n_runs):
        arms = [measured_block_arm(m) for m in range(2 * n_pairs)]
        drift = 1 + 0.004 * np.arange(2 * n_pairs)
        e = np.array([(1 + truth) if a == "plan" else 1.0 for a in arms]) * drift
        e *= np.exp(rng.normal(0, 0.02, e.size))
        auto = [e[i] if arms[i] == "auto" else e[i + 1] for i in range(0, e.size, 2)]
        plan = [e[i] if arms[i] == "plan" else e[i + 1] for i in range(0, e.size, 2)]
        lo, hi = paired_relative_change(auto, plan).ci
        cover += lo <= truth <= hi
    assert 0.85 * n_runs <= cover <= 0.95 * n_runs


def test_statistics_inputs_are_checked():
    with pytest.raises(JouleboundError, match="at least 2 pairs"):
        paired_relative_change([1.0], [0.9])
    with pytest.raises(JouleboundError, match="each pair needs one of each"):
        paired_relative_change([1.0, 1.0], [0.9])
    with pytest.raises(JouleboundError, match="auto ones > 0"):
        paired_relative_change([1.0, 0.0], [0.9, 0.9])


def test_block_length_rule_and_order():
    # a block spans >= 100 counter updates: 100 x 0.1 s / 0.25 s per step = 40 steps
    assert block_steps_for(0.25, 0.1) == 40
    assert block_steps_for(30.0, 0.1) == 2            # at least 2 steps
    assert block_steps_for(0.25, None) == 40          # NVML default period, 0.1 s
    assert [measured_block_arm(m) for m in range(8)] == list(ORDER) * 2 == \
        ["auto", "plan", "plan", "auto"] * 2
    assert pairs_needed(0.0, 0.01) == 2
    n = pairs_needed(0.02, 0.01)
    from scipy import stats

    assert stats.t.ppf(0.95, n - 1) * 0.02 / np.sqrt(n) < 0.01 <= \
        stats.t.ppf(0.95, n - 2) * 0.02 / np.sqrt(n - 1)


def test_a_held_controller_keeps_the_default_clocks_and_resumes_the_plan():
    from joulebound.core.clocks import AUTO, ClockConfig
    from joulebound.planning.plan import Plan
    from joulebound.runtime.actuators import DryRunActuator
    from joulebound.runtime.controller import Controller

    low = ClockConfig(1005, 1593)
    names = [f"op{i}" for i in range(10)]
    act = DryRunActuator()
    ctl = Controller(Plan(device="test", kernel_names=names, configs=[AUTO, low],
                          choice=np.ones(10, int)), act)
    ids = [ctl.interner.intern(n) for n in names]
    for _ in range(3):
        for k in ids:
            ctl.on_op(k)
    assert act.current == low
    ctl.hold()                                  # switched at once, not at the next op
    assert act.current == AUTO and ctl.log[-1]["reason"] == "hold" and ctl.held
    for _ in range(2):
        for k in ids:
            ctl.on_op(k)
    assert act.current == AUTO and ctl.stats.held_ops == 20
    ctl.hold(False)
    ctl.on_op(ids[0])                           # the predictor kept up: the plan resumes at once
    assert act.current == low and ctl.log[-1]["reason"] == "plan"
    ctl.close()


# -- end to end on the fakes ---------------------------------------------------------------------
torch = pytest.importorskip("torch")

SCRIPT = """
import sys
import torch
from joulebound.testing.clockedgpu import drive

steps = int(sys.argv[1])
torch.manual_seed(0)
with drive():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
"""

TOP = (1410, 1593)


def _power(core: int, mem: int) -> float:
    return 80.0 + 220.0 * (core / TOP[0]) ** 2.2 + 30.0 * mem / TOP[1]


def _scale(core: int, mem: int) -> float:
    return 0.7 + 0.3 * TOP[0] / core


@pytest.fixture
def clocked(tmp_path, monkeypatch):
    """A fake NVML GPU whose op time and power follow the locked clocks, the meter on its virtual
    clock, privileges granted, and a recorded trace of the test script (``ops.json``)."""
    import sys

    import joulebound.measure.verify as verify
    from joulebound.cli import main
    from joulebound.hw import gpu as gpu_layer
    from joulebound.testing.clockedgpu import clocked_nvml

    for var in ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT)
    nv, dev = clocked_nvml(_power, _scale, op_time_s=2e-3, sensor_period_s=0.02, seed=3)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.setattr(gpu_layer, "has_clock_privileges", lambda: True)
    monkeypatch.setattr(verify, "default_meter", lambda gpu: _meter(dev, 0.02))
    assert main(["run", "--record", "ops.json", "--", "python", "train.py", "5"]) == 0
    return nv, dev


def _meter(dev, period_s):
    """The NVML meter on the fake device's virtual clock, told the fake's counter period (the
    catalog does not know the fake's name); no sampler thread, so the run is deterministic."""
    from dataclasses import replace

    from joulebound.energy.meter import EnergyMeter, make_backend

    backend = make_backend("nvml")
    backend.channels[0] = replace(backend.channels[0], sensor_period_s=period_s)
    return EnergyMeter(backend=backend, gpus=[0], interval_s=0, clock=dev.clock)


def _plan(tmp_path, configs, choice, name="plan.json", modeled=-0.25):
    from joulebound.planning.plan import Plan
    from joulebound.workload.trace import Trace

    trace = Trace.load(tmp_path / "ops.json")
    Plan(device="test", kernel_names=trace.names(), configs=configs, choice=choice(len(trace)),
         switch_latency_s=0.0, baseline_time_s=1.0, baseline_energy_j=1.0,
         predicted_time_s=1.02, predicted_energy_j=1.0 + modeled).save(tmp_path / name)
    return trace


def _verify(capsys, *extra):
    """``run --verify --json`` with options ``extra[:-1]`` on ``train.py STEPS`` (``extra[-1]``)."""
    from joulebound.cli import main

    rc = main(["run", "--plan", "plan.json", "--actuator", "nvml", "--switch-latency", "0ms",
               "--verify", "--json", *extra[:-1], "--", "python", "train.py", extra[-1]])
    return rc, capsys.readouterr()


def test_a_plan_that_saves_x_percent_is_measured_at_x_within_its_interval(clocked, tmp_path,
                                                                           capsys):
    from joulebound.core.clocks import AUTO, ClockConfig

    nv, dev = clocked
    low = ClockConfig(1005, 1593)
    _plan(tmp_path, [AUTO, low], lambda k: np.ones(k, int))
    true_e, true_t = dev.true_saving(1005, 1593)
    assert true_e == pytest.approx(-0.27, abs=0.01) and true_t > 0.1
    rc, out = _verify(capsys, "--verify-block-steps", "30", "300")
    assert rc == 0, out.err
    v = json.loads(out.out)["verify"]
    m = v["measured"]
    lo, hi = m["energy_ci90_pct"]
    assert lo <= 100 * true_e <= hi, (m["energy_delta_pct"], 100 * true_e)
    assert abs(m["energy_delta_pct"] - 100 * true_e) < 1.0
    tlo, thi = m["time_ci90_pct"]
    assert tlo <= 100 * true_t <= thi
    # the +-1 pp target was reached and the alternation stopped early (the rest under the plan)
    assert m["target_reached"] and m["stopped_by"] == "target"
    assert m["energy_half_width_pp"] < 1.0 and m["pairs"] >= 4 and m["pairs"] % 2 == 0
    assert m["steps_per_block"] == 30 and m["settle_steps"] == 1 and m["order"] == "ABBA"
    assert m["provenance"] == "measured" and "ABBA" in m["method"]
    wins = m["windows"]
    assert [w["role"] for w in wins[:2]] == ["warmup", "warmup"]
    assert [w["arm"] for w in wins[2:10]] == ["auto", "plan", "plan", "auto"] * 2
    assert all(w["label"].startswith("verify ") for w in wins)
    # modeled beside measured
    assert v["modeled"]["energy_delta_pct"] == pytest.approx(-25.0)
    assert v["modeled"]["provenance"] == "modeled"
    assert nv.is_default()


def test_a_plan_that_saves_nothing_is_measured_with_an_interval_around_zero(clocked, tmp_path,
                                                                            capsys):
    from joulebound.core.clocks import AUTO, ClockConfig

    # every kernel at the top clocks, locked: the same power and time as the governor's
    _plan(tmp_path, [AUTO, ClockConfig(*TOP)], lambda k: np.ones(k, int), modeled=0.0)
    rc, out = _verify(capsys, "--verify-block-steps", "30", "--verify-max-blocks", "10", "200")
    assert rc == 0, out.err
    m = json.loads(out.out)["verify"]["measured"]
    lo, hi = m["energy_ci90_pct"]
    assert lo < 0 < hi and abs(m["energy_delta_pct"]) < 1.0
    assert m["time_ci90_pct"][0] < 0 < m["time_ci90_pct"][1]
    assert m["blocks"] <= 10


def test_the_block_length_follows_the_sensor_period_rule(clocked, tmp_path, capsys, monkeypatch):
    from joulebound.core.clocks import AUTO, ClockConfig

    nv, dev = clocked
    dev.op_time_s = 0.02        # slower steps: fewer steps per block
    _plan(tmp_path, [AUTO, ClockConfig(1005, 1593)], lambda k: np.ones(k, int))
    rc, out = _verify(capsys, "--verify-max-blocks", "6", "200")
    assert rc == 0, out.err
    m = json.loads(out.out)["verify"]["measured"]
    # the counter period the meter knows (0.02 s); the step time measured in the warm-up block
    assert m["sensor_period_s"] == pytest.approx(0.02)
    assert m["steps_per_block"] == block_steps_for(m["step_time_s"], 0.02) > 2
    w0 = m["windows"][0]
    assert m["step_time_s"] == pytest.approx(w0["duration_s"] / w0["steps"])
    assert m["blocks"] == 6 and m["stopped_by"] == "max-blocks"
    # not reached at 2 pairs: said, with the number of pairs the rule wants
    if not m["target_reached"]:
        assert "more pair" in " ".join(json.loads(out.out)["notes"])


def test_plan_with_phases_is_measured_on_the_simulated_gpu(tmp_path, monkeypatch, capsys):
    """The simulated GPU (the device model's per-kernel truth) behind the simulated NVML: a plan
    with two phases per step, measured against the simulator's noise-free truth."""
    import sys
    from dataclasses import replace

    import joulebound.measure.verify as verify
    from joulebound.cli import main
    from joulebound.core.clocks import AUTO
    from joulebound.hw import gpu as gpu_layer
    from joulebound.measure.calibrate.simulated import SimulatedGpu
    from joulebound.planning.plan import Plan
    from joulebound.testing.clockedgpu import install, simulated_nvml
    from joulebound.workload.trace import Trace

    for var in ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT.replace("Linear(16, 32)", "Linear(256, 512)")
                                       .replace("Linear(32, 4)", "Linear(512, 256)")
                                       .replace("randn(8, 16), torch.randn(8, 4)",
                                                "randn(64, 256), torch.randn(64, 256)"))

    class _Idle:
        def run_op(self, name: str) -> None:
            pass

    install(_Idle())
    assert main(["run", "--record", "ops.json", "--", "python", "train.py", "5"]) == 0
    capsys.readouterr()
    trace = Trace.load(tmp_path / "ops.json")
    sim = SimulatedGpu(trace, "a100-sxm4-80gb", sensor_period_s=1e-4, seed=2)
    # kernels 100 x the CPU model's work (a step of ~1 ms of device time, ~10 counter updates)
    sim.truth = {k: replace(v, tc_s=100 * v.tc_s, tm_s=100 * v.tm_s) for k, v in sim.truth.items()}
    nv, dev = simulated_nvml(sim, noise_sd=0.02, seed=5)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.setattr(gpu_layer, "has_clock_privileges", lambda: True)
    monkeypatch.setattr(verify, "default_meter", lambda gpu: _meter(dev, 1e-4))
    spec = sim.spec
    mem = max(spec.supported_clocks)
    cores = sorted(map(int, spec.supported_clocks[mem]))
    from joulebound.core.clocks import ClockConfig

    low, mid = ClockConfig(cores[len(cores) // 3], int(mem)), ClockConfig(cores[len(cores) // 2],
                                                                          int(mem))
    k = len(trace)
    choice = np.where(np.arange(k) < k // 2, 1, 2)
    Plan(device="a100-sxm4-80gb", kernel_names=trace.names(), configs=[AUTO, low, mid],
         choice=choice, switch_latency_s=0.0).save(tmp_path / "plan.json")
    true_e, true_t = dev.true_saving(trace.names(), [[AUTO, low, mid][c] for c in choice])
    assert true_e < -0.03
    rc, out = _verify(capsys, "300")        # the block-length rule: 100 updates of 0.1 ms
    assert rc == 0, out.err
    m = json.loads(out.out)["verify"]["measured"]
    lo, hi = m["energy_ci90_pct"]
    assert lo <= 100 * true_e <= hi, (m["energy_delta_pct"], 100 * true_e)
    assert m["time_ci90_pct"][0] <= 100 * true_t <= m["time_ci90_pct"][1]
    assert m["target_reached"]
    assert nv.is_default()


def test_verify_errors_are_clear(clocked, tmp_path, capsys):
    from joulebound.cli import main
    from joulebound.core.clocks import AUTO, ClockConfig

    def err(*args):
        assert main(["run", *args]) == 2
        return " ".join(capsys.readouterr().err.split())

    assert "give --plan PLAN.json" in err("--verify", "--", "python", "train.py", "3")
    _plan(tmp_path, [AUTO, ClockConfig(1005, 1593)], lambda k: np.ones(k, int))
    assert "only apply with --verify" in err("--plan", "plan.json", "--verify-max-blocks", "8",
                                             "--", "python", "train.py", "3")
    assert "must be >= 6" in err("--plan", "plan.json", "--verify", "--verify-max-blocks", "4",
                                 "--", "python", "train.py", "3")
    assert "changes no clock" in err("--plan", "plan.json", "--verify", "--actuator",
                                     "simulated", "--", "python", "train.py", "3")
    # too few steps for two pairs of blocks: says how many it needs
    msg = err("--plan", "plan.json", "--verify", "--actuator", "nvml", "--switch-latency", "0ms",
              "--verify-block-steps", "10", "--", "python", "train.py", "20")
    assert "made 20 optimizer steps" in msg and "needs at least 58" in msg, msg
    assert clocked[0].is_default()
