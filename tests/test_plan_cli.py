"""``joulebound plan`` and ``joulebound demo``: JSON keys, files, errors (GPT-3-XL model)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from joulebound.cli import main
from joulebound.dvfs.characterization import Characterization
from joulebound.dvfs.plan import Plan


def _run_json(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_plan_json_keys_and_saved_plan(tmp_path, capsys):
    out = tmp_path / "plan.json"
    doc = _run_json(capsys, ["plan", "gpt3-xl", "--device", "rtx3080ti", "--granularity", "pass",
                             "--slowdown", "0.01", "--switch-latency", "20ms", "-o", str(out),
                             "--json"])
    assert {"target", "device", "baseline", "rows", "published", "plan"} <= doc.keys()
    labels = [r["label"] for r in doc["rows"]]
    assert labels == ["pass", "phase L=20ms"]
    for r in doc["rows"]:
        assert {"granularity", "energy_delta", "time_delta", "switches", "provenance",
                "replay"} <= r.keys()
        assert r["provenance"] == "modeled"
        assert r["time_delta"] <= 0.01 + 1e-9
    # the switch-aware plan replays on time at its latency
    phase = doc["rows"][1]
    assert phase["replay"]["late_kernels"] == 0
    assert phase["replay"]["energy_delta"] == pytest.approx(phase["energy_delta"], abs=1e-9)
    # published figures only as a cited reference, labeled
    assert doc["published"] and all(p["provenance"] == "published" for p in doc["published"])
    assert "2601.08539" in doc["published"][0]["source"]
    k = doc["plan"]["kernels"]
    assert {"index", "name", "category", "clock", "core_mhz", "mem_mhz"} <= k[0].keys()
    cats = doc["plan"]["per_category"]
    assert sum(c["saved_j"] for c in cats) == pytest.approx(
        doc["baseline"]["energy_j"] * -phase["energy_delta"], rel=1e-6)
    plan = Plan.load(out)
    assert plan.granularity == "phase" and plan.n_switches == phase["switches"]
    assert [c["clock"] for c in k] == [plan.configs[int(i)].label for i in plan.choice]


def test_plan_errors_name_the_problem(tmp_path, capsys):
    assert main(["plan", "gpt3-xl", "--device", "rtx3080ti", "--slowdown", "-0.5",
                 "--granularity", "iteration"]) == 2
    assert "smallest feasible --slowdown" in capsys.readouterr().err
    # a measured characterization that lacks some of the trace's kernels
    ch = Characterization(["qkv_gemm"], [], np.zeros((1, 0)), np.zeros((1, 0)), np.zeros((1, 0), bool))
    path = ch.save(tmp_path / "c.npz")
    assert main(["plan", "gpt3-xl", "--device", "rtx3080ti", "--characterization", str(path)]) == 2
    err = capsys.readouterr().err
    assert "lacks" in err and "kernel name" in err
    assert main(["plan", "gpt3-xl", "--device", "rtx3080ti", "--switch-latency", "soon"]) == 2
    assert "cannot parse duration" in capsys.readouterr().err


def test_demo_writes_report_and_labels_every_figure(tmp_path, capsys):
    rep = tmp_path / "rep"
    doc = _run_json(capsys, ["demo", "--report", str(rep), "--json"])
    labels = [r["label"] for r in doc["rows"]]
    for eps in ("+0%", "+1%"):
        for want in (f"iteration @{eps}", f"pass @{eps}", f"kernel @{eps}", f"phase L=0ms @{eps}",
                     f"phase L=1ms @{eps}", f"phase L=6ms @{eps}", f"phase L=20ms @{eps}",
                     f"phase L=150ms @{eps}"):
            assert want in labels
    rows = {r["label"]: r for r in doc["rows"]}
    for eps, cap in (("+0%", 0.0), ("+1%", 0.01)):
        # L = 0: the switch-aware plan is the kernel-level plan
        assert rows[f"phase L=0ms @{eps}"]["energy_delta"] == pytest.approx(
            rows[f"kernel @{eps}"]["energy_delta"])
        # switches fall as the latency grows, never over the time budget
        sw = [rows[f"phase L={v}ms @{eps}"]["switches"] for v in (0, 1, 6, 20, 150)]
        assert sw == sorted(sw, reverse=True) and sw[-1] <= 2
        assert all(rows[f"phase L={v}ms @{eps}"]["time_delta"] <= cap + 1e-9
                   for v in (0, 1, 6, 20, 150))
    # the latency-blind kernel plan runs late when replayed at a real latency
    assert rows["kernel L-blind @L=6ms @+1%"]["replay"]["late_kernels"] > 0
    html = (rep / "index.html").read_text()
    assert "modeled" in html and "published" in html and "2601.08539" in html
    for png in ("pareto.png", "clocks.png", "categories.png", "latency.png"):
        assert (rep / png).stat().st_size > 1000
