"""``joulebound run`` (record, dry-run, simulated) and ``joulebound reset-clocks`` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")

from joulebound.cli import main
from joulebound.core.clocks import AUTO, ClockConfig
from joulebound.gpumodel.characterization import Characterization
from joulebound.planning.plan import Plan
from joulebound.workload.trace import Trace

SCRIPT = """
import sys
from joulebound.testing.demo_gpt import main
main(sys.argv[1:])
"""


def _char(trace, configs):
    """Roofline stand-in characterization (the CLI path does not depend on the GPU model)."""
    f, b = trace.flops()[:, None], trace.bytes()[:, None]
    core = np.array([c.core_mhz or 1400 for c in configs], float)[None, :]
    mem = np.array([c.mem_mhz or 9500 for c in configs], float)[None, :]
    t = np.maximum(f / (core * 1e7), b / (mem * 1e5)) + 2e-6
    p = 60 + 200 * (core / 1400) ** 2.5 + 40 * (mem / 9500)
    return Characterization(trace.names(), list(configs), t, t * p, np.zeros(t.shape, bool))


def test_record_then_run_with_dry_run_and_simulated(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT)
    args = ["python", "train.py", "--steps", "7", "--layers", "1", "--hidden", "32"]
    assert main(["run", "--record", "ops.json", "--json", "--", *args]) == 0
    rec = json.loads(capsys.readouterr().out)   # the script's prints went to stderr
    trace = Trace.load(tmp_path / "ops.json")
    assert rec["recorded_ops"] == len(trace) > 100
    assert any(k.name.startswith("aten.addmm") for k in trace)

    configs = [AUTO, ClockConfig(1005, 9501), ClockConfig(1665, 5001)]
    char = _char(trace, configs)
    char.save(tmp_path / "char.npz")
    choice = np.where(np.array(trace.categories()) == "gemm", 2, 1)
    Plan(device="test", kernel_names=trace.names(), configs=configs, choice=choice,
         switch_latency_s=0.0).save(tmp_path / "plan.json")

    assert main(["run", "--plan", "plan.json", "--actuator", "dry-run", "--switch-log",
                 "sw.jsonl", "--json", "--", *args]) == 0
    out = json.loads(capsys.readouterr().out)
    log = [json.loads(x) for x in (tmp_path / "sw.jsonl").read_text().splitlines()]
    assert out["switches"] == len(log) > 10 and out["planned_ops"] > 0.5 * out["ops"]
    assert log[-1]["config"] == "auto" and log[-1]["reason"] == "close"
    plan_sw = [r for r in log if r["reason"] == "plan"]
    assert all(r["config"] == configs[choice[r["label"]]].label for r in plan_sw)

    assert main(["run", "--plan", "plan.json", "--actuator", "simulated", "--characterization",
                 "char.npz", "--json", "--", *args]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["modeled_provenance"] == "modeled"
    e_plan = float(char.energy_j[np.arange(len(choice)), choice].sum())
    assert sim["modeled_iteration_energy_j"] == pytest.approx(e_plan, rel=1e-6)


def test_run_table_labels_the_prediction_accuracy(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "100")
    (tmp_path / "train.py").write_text(SCRIPT)
    args = ["python", "train.py", "--steps", "4", "--layers", "1", "--hidden", "32"]
    assert main(["run", "--record", "ops.json", "--", *args]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if "accuracy" in ln]
    assert len(rows) == 1 and "%" in rows[0] and "measured" in rows[0]


def test_run_errors_are_clear(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--plan", "nope.json", "--", "python", "x.py"]) == 2
    assert main(["run", "--actuator", "nvm", "--", "python", "x.py"]) == 2
    assert "Did you mean 'nvml'" in capsys.readouterr().err.replace("\n", "")
    assert main(["run", "--record", "o.json", "--", "torchrun", "train.py"]) == 2
    assert "not a Python script" in capsys.readouterr().err.replace("\n", " ")
    # a plan over analytic kernel names can never match dispatched ops: refused up front
    (tmp_path / "t.py").write_text("print('hi')\n")
    Plan(device="rtx3080ti", kernel_names=["qkv_gemm", "softmax"], configs=[AUTO],
         choice=[0, 0]).save(tmp_path / "analytic.json")
    assert main(["run", "--plan", "analytic.json", "--", "python", "t.py"]) == 2
    assert "not op keys" in capsys.readouterr().err.replace("\n", " ")


def test_reset_clocks_uses_nvml_reset(monkeypatch, capsys):
    import sys

    from joulebound.testing.fakenvml import FakeNvml

    nv = FakeNvml(n_gpus=2)
    nv.nvmlDeviceSetGpuLockedClocks(1, 810, 810)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert main(["reset-clocks", "--gpus", "1", "--json"]) == 0
    rep, = json.loads(capsys.readouterr().out)["reset"]
    assert (rep["gpu"], rep["uuid"], rep["ok"]) == ("1", "GPU-fake-1", True)
    assert nv.is_default()


def test_a_recording_is_refused_unless_its_iteration_is_one_training_step():
    from joulebound.core.errors import JouleboundError
    from joulebound.runtime.session import MIN_RECORD_STEPS, _check_recorded_iteration

    steps = [100 * (i + 1) for i in range(MIN_RECORD_STEPS)]   # 100 ops per optimizer step
    _check_recorded_iteration(steps, end=steps[-1], period=100)
    _check_recorded_iteration(steps, end=steps[-1], period=200)   # two steps whole: accepted
    _check_recorded_iteration([], end=500, period=100)           # no optimizer: not checked
    with pytest.raises(JouleboundError, match=f"recording needs at least {MIN_RECORD_STEPS}"):
        _check_recorded_iteration(steps[:MIN_RECORD_STEPS - 1], end=steps[-2], period=100)
    with pytest.raises(JouleboundError, match="no repeating iteration"):
        _check_recorded_iteration(steps, end=50, period=100)
    with pytest.raises(JouleboundError, match=r"\(70 ops\) is not one training step \(100 ops"):
        _check_recorded_iteration(steps, end=steps[-1], period=70)
