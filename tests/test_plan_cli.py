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
    # every figure has a caption that states its provenance; no "-0.00 %" noise
    import re

    figs = re.findall(r"<figure><img src='([^']+)'.*?<figcaption>(.*?)</figcaption>", html, re.S)
    assert sorted(f for f, _ in figs) == ["categories.png", "clocks.png", "latency.png",
                                          "pareto.png"]
    assert all("modeled" in cap.lower() for _, cap in figs)
    assert "-0.00 %" not in html


def _run_text(monkeypatch, argv, width=80):
    """Run a command with the shared console fixed at ``width`` columns; return its text."""
    import io

    from rich.console import Console

    import joulebound.cli._common as common

    con = Console(width=width, file=io.StringIO(), color_system=None, legacy_windows=False)
    monkeypatch.setattr(common, "console", con)
    assert main(argv) == 0
    return con.file.getvalue()


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("│").split("│")]


def _section(text: str, start: str, end: str | None) -> str:
    i = text.index(start)
    return text[i:text.index(end, i) if end else len(text)]


def test_demo_table_reads_at_80_columns(tmp_path, monkeypatch):
    text = _run_text(monkeypatch, ["demo", "--report", str(tmp_path / "rep")])
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    assert "…" not in text  # no cell or header truncated by rich
    # header: model, device, baseline per iteration, labeled modeled
    head = "\n".join(lines[:6])
    assert "gpt3-xl" in head and "RTX 3080 Ti" in head and "ms and" in head and "modeled" in head
    t1 = _section(text, "1. Switch-free plans", "2. Switch-aware")
    t2 = _section(text, "2. Switch-aware", "3. Published")
    t3 = _section(text, "3. Published", "4. Savings")
    t4 = _section(text, "4. Savings", "What this means")
    for t in (t1, t2, t4):
        assert "(modeled" in t.split("┏")[0]  # provenance in each of our tables' title
    # table 1: one row per granularity with energy Δ, time Δ, switches at ε = 0 and 1 %
    rows1 = {c[0]: c[1:] for c in map(_cells, t1.splitlines()) if c[0] in ("iteration", "pass",
                                                                            "kernel")}
    assert set(rows1) == {"iteration", "pass", "kernel"} and all(len(v) == 6 for v in rows1.values())
    assert int(rows1["kernel"][2]) > 100 and rows1["iteration"][2] == "0"
    assert float(rows1["kernel"][0].split()[0]) < float(rows1["pass"][0].split()[0]) <= 0
    # table 2: five latencies per ε; switch-aware time within ε, L-blind replay late at L > 0
    rows2 = [c for c in map(_cells, t2.splitlines()) if len(c) == 7 and c[1].endswith(" ms")]
    assert [c[1] for c in rows2] == ["0 ms", "1 ms", "6 ms", "20 ms", "150 ms"] * 2
    for c in rows2[:5]:
        assert float(c[3].split()[0]) <= 0.005  # aware time Δ at ε = 0
        if c[1] != "0 ms":
            assert float(c[6].split()[0]) > 1.0  # latency-blind kernel plan runs late
    sw = [int(c[4]) for c in rows2[:5]]
    assert sw == sorted(sw, reverse=True)
    # published figures only in their own cited table, never among our rows
    assert "published" in t3 and "2601.08539" in t3.replace("\n", " ") and "-14.60 %" in t3
    assert "-14.60 %" not in t1 + t2 + t4 and "published" not in t1 + t2
    # the take-away quotes the tables' own numbers
    end = text[text.index("What this means"):]
    assert "(modeled)" in end and rows1["kernel"][0].lstrip("-") in end.replace("\n", " ")
    assert "report:" in end and (tmp_path / "rep" / "index.html").exists()
    assert "-0.00 %" not in text


def test_plan_table_reads_at_80_columns(monkeypatch):
    text = _run_text(monkeypatch, ["plan", "gpt3-xl", "--device", "rtx3080ti", "--granularity",
                                   "all", "--switch-latency", "10ms"])
    assert max(map(len, text.splitlines())) <= 80 and "…" not in text
    plans = _section(text, "Clock plans vs auto (modeled)", "Published reference")
    rows = {c[0]: c for c in map(_cells, plans.splitlines()) if len(c) == 7}
    assert {"iteration", "pass", "layer", "kernel"} <= rows.keys()
    assert int(rows["kernel"][6]) > 0  # the kernel plan's switches land late at L = 10 ms
    assert rows["phase L=10ms"][6] == "0"  # the switch-aware plan's do not
    assert "-14.60 %" not in plans and "-14.60 %" in _section(text, "Published reference",
                                                              "Savings by kernel category")
