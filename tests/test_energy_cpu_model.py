"""Modeled CPU/DRAM energy where no RAPL counter is readable, labeled modeled, never mixed with
measured GPU energy; carbon from an intensity or a region code."""

from __future__ import annotations

import json

import pytest

from joulebound.cli import main
from joulebound.core.errors import JouleboundError
from joulebound.energy.base import Backend, Channel, CompositeBackend
from joulebound.energy.carbon import carbon_intensity
from joulebound.energy.cpu_model import (
    DRAM_W_PER_GB,
    CpuInfo,
    CpuModelBackend,
    cpu_energy_interval_j,
    cpu_info,
    read_proc_stat,
)
from joulebound.energy.meter import EnergyMeter


class Stat:
    """/proc/stat stand-in: busy and total jiffies advanced by the test."""

    def __init__(self) -> None:
        self.busy, self.total = 0, 0

    def __call__(self) -> tuple[int, int]:
        return self.busy, self.total

    def run(self, total: int, busy_share: float) -> None:
        self.busy += int(total * busy_share)
        self.total += total


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


INFO = CpuInfo("Test CPU", 1, 8, 100.0, "test", 16.0)


def test_window_energy_is_tdp_times_utilization_plus_dram():
    stat, clock = Stat(), Clock()
    m = EnergyMeter(CpuModelBackend(stat=stat, info=INFO), interval_s=0, clock=clock)
    m.begin_window("w")
    stat.run(1000, 0.25)      # 25 % busy for 2 s
    clock.t += 2.0
    stat.run(1000, 0.75)      # then 75 % for 2 s (the window sees the mean: 50 %)
    clock.t += 2.0
    r = m.end_window("w")
    cpu = next(d for d in r.devices if d.kind == "cpu")
    dram = next(d for d in r.devices if d.kind == "dram")
    assert cpu.energy_j == pytest.approx(100.0 * 0.5 * 4.0)
    assert dram.energy_j == pytest.approx(DRAM_W_PER_GB * 16.0 * 4.0)
    assert r.cpu_energy_j == pytest.approx(cpu.energy_j + dram.energy_j)
    assert r.cpu_provenance == "modeled" and {d.provenance for d in r.devices} == {"modeled"}
    assert r.energy_j is None and "no_energy_sensor" in r.flags   # no GPU figure, never 0
    lo, hi = cpu_energy_interval_j(cpu.energy_j, 4.0, 100.0)
    assert lo == cpu.energy_j and hi == pytest.approx(0.5 * 100 * 4 + 0.5 * 200)


class MeasuredGpu(Backend):
    name, provenance = "fake-gpu", "measured"

    def __init__(self) -> None:
        super().__init__()
        self.channels = [Channel("GPU-x", 0, "gpu", source="counter")]

    def has_counter(self, i: int) -> bool:
        return True

    def read_energy_j(self, i: int, t: float) -> float:
        return 300.0 * t


def test_measured_gpu_and_modeled_cpu_keep_their_own_labels():
    stat, clock = Stat(), Clock()
    both = CompositeBackend([MeasuredGpu(), CpuModelBackend(stat=stat, info=INFO)])
    m = EnergyMeter(both, gpus="all", interval_s=0, clock=clock)
    m.begin_window("w")
    stat.run(100, 1.0)
    clock.t += 1.0
    r = m.end_window("w")
    assert r.energy_j == pytest.approx(300.0) and r.provenance == "measured"
    assert r.cpu_provenance == "modeled" and r.cpu_energy_j == pytest.approx(100 + 6.0)
    assert [d.provenance for d in r.devices] == ["measured", "modeled", "modeled"]


def test_cpu_lookup_scales_the_tdp_to_the_visible_threads():
    text = "model name\t: AMD EPYC 7763 64-Core Processor\nphysical id\t: 0\n"
    info = cpu_info(cpuinfo=text, meminfo="MemTotal: 1000000 kB\n", threads=32)
    assert info.tdp_w == pytest.approx(280 * 32 / 128) and "AMD EPYC 7763" in info.tdp_source
    unknown = cpu_info(cpuinfo="model name\t: Mystery CPU\n", meminfo="", threads=4)
    assert unknown.tdp_w == 85.0 and "not in joulebound's table" in unknown.tdp_source
    assert cpu_info(tdp_w=42.0, cpuinfo="", meminfo="").tdp_w == 42.0
    with pytest.raises(JouleboundError):
        cpu_info(tdp_w=0.0, cpuinfo="", meminfo="")
    busy, total = read_proc_stat("cpu  10 0 5 80 5 0 0 0 0 0\ncpu0 1 2 3 4\n")
    assert (busy, total) == (15, 100)


def test_measure_here_prints_a_modeled_cpu_energy_and_says_so(capsys, monkeypatch, tmp_path):
    import sys

    monkeypatch.setenv("COLUMNS", "100")
    code = main(["measure", "--carbon-intensity", "FR", "--db", str(tmp_path / "r.db"), "--",
                 sys.executable, "-c", "import time; time.sleep(0.3)"])
    assert code == 0
    out = " ".join(capsys.readouterr().out.split())
    # one label per figure (issue 28 item 3): "modeled", not "modeled, not measured"
    assert "CPU+DRAM total" in out and "J = " in out and "(modeled" in out and "gCO2e" in out
    assert "not measured;" not in out
    assert main(["measure", "--json", "--carbon-intensity", "350", "--", sys.executable, "-c",
                 "pass"]) == 0
    doc = json.loads(capsys.readouterr().out)
    if doc["backend"] == "cpu-model":   # this machine: no NVML, no readable RAPL
        assert doc["cpu_provenance"] == "modeled" and doc["cpu_energy_j"] > 0
        lo, hi = doc["cpu_energy_interval_j"]
        assert lo <= doc["cpu_energy_j"] + 1e-9 and hi >= lo
        assert doc["energy_j"] is None and doc["provenance"] is None
    if doc["cpu_energy_j"] is not None:
        assert doc["cpu_gco2e"] == pytest.approx(doc["cpu_energy_j"] / 3.6e6 * 350)


def test_carbon_intensity_from_a_number_or_a_region():
    fr = carbon_intensity("fr")
    assert fr.region == "FR" and 0 < fr.g_per_kwh < 100 and "published" in fr.source
    assert carbon_intensity("350").grams(3.6e6) == pytest.approx(350.0)
    assert carbon_intensity(None) is None
    with pytest.raises(JouleboundError, match="Choices: .*FR"):
        carbon_intensity("FX")
    with pytest.raises(JouleboundError):
        carbon_intensity("-5")
