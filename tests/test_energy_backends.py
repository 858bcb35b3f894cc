"""Replay and RAPL backends (fake powercap tree; recorded logs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from joulebound.core.errors import JouleboundError
from joulebound.energy.meter import EnergyMeter
from joulebound.energy.rapl import RaplBackend
from joulebound.energy.replay import ReplayBackend
from joulebound.energy.simulated import SimulatedBackend


class Clock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_replay_csv_integrates_power_and_keeps_log_provenance(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("t_s,uuid,power_w,provenance\n"
                   "10,GPU-a,100,measured\n11,GPU-a,300,measured\n12,GPU-a,300,measured\n"
                   "10,GPU-b,50,measured\n12,GPU-b,50,measured\n")
    clock = Clock(500.0)
    m = EnergyMeter("replay", path=log, gpus="all", interval_s=0, clock=clock)
    assert m.backend.provenance == "measured"
    m.begin_window("w")          # maps to log t=10
    clock.t += 2.0
    r = m.end_window("w")        # log t=12
    e = {d.uuid: d.energy_j for d in r.devices}
    assert e["GPU-a"] == pytest.approx(200.0 + 300.0)
    assert e["GPU-b"] == pytest.approx(100.0)
    assert r.provenance == "measured"


def test_replay_needs_provenance(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"t_s": 0, "uuid": "g", "power_w": 1}\n{"t_s": 1, "uuid": "g", "power_w": 1}\n')
    with pytest.raises(JouleboundError, match="provenance"):
        ReplayBackend.open(log)
    b = ReplayBackend.open(log, provenance="modeled")
    assert b.provenance == "modeled"
    bad = tmp_path / "bad.csv"
    bad.write_text("time,watts\n0,1\n")
    with pytest.raises(JouleboundError, match="missing column 't_s'"):
        ReplayBackend.open(bad, provenance="measured")


def test_replay_of_a_store_run_reproduces_its_energy(tmp_path):
    """Record a simulated run into a store, replay it: same energy, provenance 'modeled'."""
    import time

    db = tmp_path / "runs.db"
    rec = EnergyMeter(SimulatedBackend(power=lambda t: 120.0 + 80.0 * (t > 0.15)), gpus="all",
                      interval_s=0.01, store=db)
    rec.begin_window("w")
    time.sleep(0.3)
    orig = rec.end_window("w")
    rec.close()
    clock = Clock(0.0)
    b = ReplayBackend.open(db)
    assert b.provenance == "modeled" and b.channels[0].uuid == "SIM-GPU-0"
    m = EnergyMeter(b, gpus="all", interval_s=0, clock=clock)
    m.begin_window("all")
    clock.t = b.t_end - b.t_log0
    r = m.end_window("all")
    # the replayed log spans (almost) the recorded window: energy agrees within 10 %
    assert r.energy_j == pytest.approx(orig.energy_j, rel=0.1)
    assert r.devices[0].peak_power_w is None or r.devices[0].peak_power_w <= 200.0 + 1e-9


def _fake_rapl(root, readable=True):
    for z, name, e in [("intel-rapl:0", "package-0", 1000), ("intel-rapl:0:0", "core", 5),
                       ("intel-rapl:0:1", "dram", 200)]:
        d = root / z if z.count(":") == 1 else root / "intel-rapl:0" / z
        d.mkdir(parents=True, exist_ok=True)
        (d / "name").write_text(name + "\n")
        (d / "energy_uj").write_text(f"{e}\n")
        (d / "max_energy_range_uj").write_text("1000000\n")
        if not readable:
            os.chmod(d / "energy_uj", 0)
    return root


def test_rapl_package_and_dram_with_wraparound(tmp_path):
    root = _fake_rapl(tmp_path / "powercap")
    b = RaplBackend(root=root)
    assert [(c.kind, c.name) for c in b.channels] == [("cpu", "package-0"), ("dram", "dram")]
    clock = Clock()
    m = EnergyMeter(b, interval_s=0, clock=clock)
    m.begin_window("w")
    (root / "intel-rapl:0" / "energy_uj").write_text("3001000\n")  # +3 J
    (root / "intel-rapl:0" / "intel-rapl:0:1" / "energy_uj").write_text("100\n")  # wrapped
    clock.t = 1.0
    r = m.end_window("w")
    assert r.energy_j is None                      # no GPU channel
    # within one 1 ms RAPL update (counter steps are apportioned by time)
    assert r.cpu_energy_j == pytest.approx(3.0 + (1_000_000 - 200 + 100) / 1e6, abs=0.01)
    assert "counter_wraparound" in r.flags
    assert any("whole CPU package" in n for n in b.notes)   # not the command alone: says so


def test_rapl_missing_or_unreadable_is_explained(tmp_path, monkeypatch):
    with pytest.raises(JouleboundError, match="RAPL not available"):
        RaplBackend(root=tmp_path / "nothing")
    root = _fake_rapl(tmp_path / "pc")
    real = Path.read_text

    def denied(self, *a, **kw):  # root can read mode-000 files, so deny like Linux >= 5.10 does
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", denied)
    with pytest.raises(JouleboundError, match="not readable.*CVE-2020-8694"):
        RaplBackend(root=root)
