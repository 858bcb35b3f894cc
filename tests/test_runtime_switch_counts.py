"""``joulebound run`` reports switches requested, realized and skipped, consistently (issue 30,
item 14: ``run --json`` said 607 switches when 5 reached NVML).

* ``switches_requested``: switches the controller asked for (the switch log's lines);
* ``switches_realized``: switches the actuator made (each reached NVML / the helper and succeeded)
  — checked here against the calls a fake NVML saw;
* ``switches_skipped``: switches not made because another client held the GPU or the helper was
  away; ``switches_not_made``: the rest (already at that pair, deferred then replaced, or
  requested after the actuator was closed);
* requested = realized + skipped + not made, in ``--json`` and in the summary table.
"""

from __future__ import annotations

import json

import tests.test_runtime_clock_trust as trust
from joulebound.core.clocks import AUTO, ClockConfig
from joulebound.testing.fakenvml import FakeNvml
from tests.test_runtime_clock_trust import _plan

# the clock-trust tests' fixtures: its recorded op stream and the in-process fake-NVML CLI
recorded = trust.recorded
cli_nvml = trust.cli_nvml

HI, LO = ClockConfig(1410, 1593), ClockConfig(1005, 1593)
SET = "nvmlDeviceSetGpuLockedClocks"
RESET = "nvmlDeviceResetGpuLockedClocks"


def _consistent(out: dict) -> None:
    req, real = out["switches_requested"], out["switches_realized"]
    skip, other = out["switches_skipped"], out["switches_not_made"]
    assert min(req, real, skip, other) >= 0
    assert req == real + skip + other, out


def test_nvml_run_reports_the_switches_that_reached_nvml(recorded, cli_nvml, tmp_path, capsys):
    from joulebound.cli import main

    d, names = recorded
    plan = _plan(tmp_path, names, [AUTO, HI, LO], "hl")
    log = tmp_path / "sw.jsonl"
    rc = main(["run", "--plan", str(plan), "--actuator", "nvml", "--switch-log", str(log),
               "--json", "--", "python", str(d / "train.py"), "40", str(tmp_path / "m")])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    _consistent(out)
    assert out["switches_requested"] == len(log.read_text().splitlines()) > 10
    # every realized switch is one NVML lock (to HI/LO) or one reset (back to auto); the
    # actuator's own reset on close (always issued) comes on top
    assert out["switches_realized"] == cli_nvml.count(SET) + cli_nvml.count(RESET) - 1
    assert out["switches_skipped"] == 0
    assert cli_nvml.is_default()


def test_busy_gpu_reports_requested_realized_and_skipped_apart(recorded, tmp_path, monkeypatch,
                                                               capsys):
    from joulebound.cli import main
    from joulebound.runtime.helper import ClockHelper, HelperActuator

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    d, names = recorded
    plan = _plan(tmp_path, names, [AUTO, HI, LO], "busy")
    nv = FakeNvml()
    h = ClockHelper(tmp_path / "c.sock", nvml=nv, check_privileges=False).start()
    other = HelperActuator(h.path, gpu=0)
    try:
        assert other.set_clocks(LO)                  # another client owns GPU 0 all along
        rc = main(["run", "--plan", str(plan), "--actuator", "helper", "--socket", str(h.path),
                   "--json", "--", "python", str(d / "train.py"), "40", str(tmp_path / "m")])
        out = json.loads(capsys.readouterr().out)
        sets = nv.count(SET)
    finally:
        other.close()
        h.close()
    assert rc == 0
    _consistent(out)
    assert sets == 1                                 # only the other client's switch
    assert out["switches_realized"] == 0             # none of this run's reached NVML
    assert out["switches_requested"] > out["switches_skipped"] > 0
    assert out["skipped_switches"] == out["switches_skipped"]   # the older name, same figure


def test_the_summary_table_shows_the_same_three_figures(recorded, cli_nvml, tmp_path, capsys,
                                                        monkeypatch):
    from joulebound.cli import main
    from joulebound.cli._common import console

    monkeypatch.setattr(console, "width", 200)       # one line per row

    d, names = recorded
    plan = _plan(tmp_path, names, [AUTO, HI, LO], "table")
    rc = main(["run", "--plan", str(plan), "--actuator", "nvml", "--", "python",
               str(d / "train.py"), "40", str(tmp_path / "m")])
    text = capsys.readouterr().out
    assert rc == 0
    real = cli_nvml.count(SET) + cli_nvml.count(RESET) - 1
    rows = {cells[1].strip(): cells[2].strip() for cells in
            (line.split("│") for line in text.splitlines()) if len(cells) >= 4}
    assert rows.get("clock switches made (reached the GPU)") == f"{real:,}", text
    assert int(rows["clock switches requested (by the controller)"].replace(",", "")) >= real
