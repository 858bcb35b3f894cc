"""Names drawn in the report figures are drawn as written: matplotlib reads ``$…$`` as mathtext,
and a window named ``$\\undefinedcmd$`` made ``joulebound report`` crash at ``savefig`` (issue 30,
item 13). Every text a figure draws from the user's data goes through
:func:`joulebound.report.plots.plain`."""

from __future__ import annotations

import dataclasses

import pytest

from joulebound.energy.results import DeviceEnergy, WindowResult
from joulebound.energy.store import Store

HOSTILE = r"$\undefinedcmd$"


def test_report_draws_a_window_named_as_invalid_mathtext(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from joulebound.cli import main

    db = tmp_path / "runs.db"
    with Store(db) as st:
        st.begin_run("r1", command="python train.py", backend="nvml", provenance=HOSTILE)
        dev = DeviceEnergy(uuid=f"GPU-{HOSTILE}", index=0, energy_j=5.0, avg_power_w=50.0,
                           peak_power_w=60.0, source="nvml.energy_counter")
        for i, name in enumerate((HOSTILE, "cost $5 and $x^$", "train")):
            st.add_window("r1", WindowResult(name=name, start_s=float(i), end_s=i + 1.0,
                                             duration_s=1.0, energy_j=5.0, devices=[dev],
                                             provenance=HOSTILE, flags=[]))
        st.add_samples("r1", [(t * 0.1, f"GPU-{HOSTILE}", f"gpu{HOSTILE}", 50.0, None)
                              for t in range(30)])
        st.end_run("r1", status="finished", exit_code=0)
    out = tmp_path / "rep"
    assert main(["report", str(db), "r1", "-o", str(out)]) == 0     # was: ValueError, mathtext
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == 2, pngs                                      # timeline and windows
    assert "Traceback" not in capsys.readouterr().err


def test_planning_report_draws_hostile_trace_and_device_names(tmp_path):
    pytest.importorskip("matplotlib")
    from joulebound.gpumodel import characterize
    from joulebound.hw.catalog import get_device
    from joulebound.planning.study import run_study
    from joulebound.report.html import write_report
    from joulebound.workload.analytic import build_trace

    tr = build_trace("gpt2-small", batch=2, layers=1)
    tr.name = HOSTILE
    ch = characterize(tr, get_device("rtx3080ti"))
    ch = dataclasses.replace(ch, device=f"rtx {HOSTILE}") if dataclasses.is_dataclass(ch) else ch
    st = run_study(tr, ch, granularities=["pass"], slowdowns=[0.0])
    label = st.rows[0].label
    index = write_report(st, tmp_path / "plan", clock_rows=[label],  # was: ValueError, mathtext
                         category_row=label)
    pngs = sorted(p.name for p in (tmp_path / "plan").glob("*.png"))
    assert index.exists() and {"pareto.png", "clocks.png", "categories.png"} <= set(pngs), pngs


def test_plain_escapes_every_dollar():
    from joulebound.report.plots import plain

    assert plain(HOSTILE) == r"\$\undefinedcmd\$"
    assert plain("no money") == "no money" and plain(3) == "3"
