"""The README's record -> plan -> run walkthrough, run literally through the CLI (tiny GPT, CPU).

Checks what the walkthrough promises: the recording refuses too few steps and says how many;
`plan` without --switch-latency plans for the device's catalog latency, so every phase of a plan
that switches lasts at least that long; `run --actuator simulated` prints baseline, plan and
the modeled saving; a real actuator refuses a plan whose phases are shorter than the latency.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("torch")

from joulebound.cli import main
from joulebound.hw.latency import device_switch_latency
from joulebound.planning.plan import Plan

SCRIPT = "import sys\nfrom joulebound.testing.demo_gpt import main\nmain(sys.argv[1:])\n"
TINY = ["--layers", "1", "--hidden", "32"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("walk")
    (d / "train.py").write_text(SCRIPT)
    return d


def test_record_refuses_too_few_steps_and_says_how_many(recorded, monkeypatch, capsys):
    monkeypatch.chdir(recorded)
    assert main(["run", "--record", "one.json", "--", "python", "train.py", "--steps", "1",
                 *TINY]) == 2
    err = capsys.readouterr().err.replace("\n", " ")
    assert "1 optimizer step(s)" in err and "at least 3" in err
    assert not (recorded / "one.json").exists()


def test_walkthrough_plan_respects_latency_and_simulated_run_prints_saving(recorded, monkeypatch,
                                                                         capsys):
    monkeypatch.chdir(recorded)
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["run", "--record", "ops.json", "--json", "--", "python", "train.py", "--steps",
                 "3", *TINY]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["recorded_steps"] == 3 and rec["recorded_ops"] > 100

    assert main(["plan", "ops.json", "--device", "rtx3080ti", "--slowdown", "1%", "-o",
                 "ops_plan.json", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    lat = device_switch_latency("rtx3080ti")
    assert lat is not None and lat.seconds > 0 and lat.provenance == "modeled"
    assert lat.kind == "estimate"
    assert doc["switch_latency_s"] == lat.seconds and doc["slowdown"] == 0.01
    plan = Plan.load(recorded / "ops_plan.json")
    assert plan.switch_latency_s == lat.seconds and plan.granularity == "phase"
    # phases of the saved plan (modeled kernel times) all last >= the latency, or it never
    # switches; the switch-free kernel row of the same study switches far faster than that
    from joulebound.runtime.session import model_characterization, plan_kernel_times

    kt = plan_kernel_times(plan, model_characterization(plan))
    phases = plan.phases()
    assert len(phases) == 1 or min(kt[p.start:p.stop].sum() for p in phases) >= lat.seconds
    # this tiny model's ops all wait for the host (eager dispatch): the clocks change only the
    # idle power between them, so no plan trades time for energy per kernel
    kernel = next(r for r in doc["rows"] if r["granularity"] == "kernel")
    assert kernel["time_delta"] <= 0.01 + 1e-9 and kernel["energy_delta"] < 0

    assert main(["run", "--plan", "ops_plan.json", "--actuator", "simulated", "--", "python",
                 "train.py", "--steps", "40", *TINY]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "same ops at default clocks" in out and "plan: energy / time change" in out
    m = re.search(r"Modeled saving on this run: (-?[\d.]+) % of the GPU energy of the ops under "
                  r"the plan \(([\d.]+) J instead of ([\d.]+) J at the default clocks\)", out)
    assert m, out
    saved, e_plan, e_base = (float(x) for x in m.groups())
    assert saved == pytest.approx((1 - e_plan / e_base) * 100, abs=0.02)
    if plan.energy_delta < -0.01:   # the plan saves: once its clocks land, the run saves too
        assert saved > 0


def test_real_actuator_refuses_a_plan_faster_than_the_switch_latency(recorded, monkeypatch,
                                                                    capsys):
    monkeypatch.chdir(recorded)
    if not (recorded / "ops.json").exists():
        assert main(["run", "--record", "ops.json", "--", "python", "train.py", "--steps", "3",
                     *TINY]) == 0
    # a kernel plan with hundreds of switches per ~2 ms iteration: the planned kernel plan,
    # its choice alternated between two supported pairs
    assert main(["plan", "ops.json", "--device", "rtx3080ti", "--granularity", "kernel",
                 "--switch-latency", "0", "--slowdown", "1%", "-o", "kernel_plan.json"]) == 0
    kp = Plan.load(recorded / "kernel_plan.json")
    other = next(j for j, c in enumerate(kp.configs) if j != kp.choice[0]
                 and c.core_mhz is not None)
    kp.choice = np.where(np.arange(len(kp.choice)) % 2 == 0, kp.choice[0], other)
    kp.save(recorded / "kernel_plan.json")
    assert Plan.load(recorded / "kernel_plan.json").n_switches > 10
    capsys.readouterr()
    cmd = ["--", "python", "train.py", "--steps", "2", *TINY]
    assert main(["run", "--plan", "kernel_plan.json", "--actuator", "nvml", *cmd]) == 2
    err = capsys.readouterr().err.replace("\n", " ")
    assert "shorter than the rtx3080ti clock-switch latency 20 ms (modeled: an estimate" in err
    assert "--force" in err
    # --force passes the check; what stops it then is the missing GPU (no NVML here)
    assert main(["run", "--plan", "kernel_plan.json", "--actuator", "nvml", "--force", *cmd]) == 2
    assert "shorter than" not in capsys.readouterr().err
    # the simulated actuator is not refused (it models what the latency does)
    assert main(["run", "--plan", "kernel_plan.json", "--actuator", "simulated", *cmd]) == 0
    assert np.isfinite(Plan.load(recorded / "kernel_plan.json").energy_delta)
