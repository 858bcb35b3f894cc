"""Modeled CPU/DRAM energy where no RAPL counter is readable (the measured process tree's CPU
time and resident memory), labeled modeled, never mixed with measured GPU energy; carbon from an
intensity or a region code."""

from __future__ import annotations

import json

import pytest

from joulebound.cli import main
from joulebound.core.errors import JouleboundError
from joulebound.energy.base import Backend, Channel, CompositeBackend
from joulebound.energy.carbon import carbon_intensity
from joulebound.energy.cpu_model import (
    DEFAULT_W_PER_THREAD,
    DRAM_W_PER_GB,
    CpuInfo,
    CpuModelBackend,
    cpu_energy_interval_j,
    cpu_info,
)
from joulebound.energy.meter import EnergyMeter


class Stat:
    """Process-tree stand-in: CPU-seconds and resident bytes advanced by the test."""

    def __init__(self) -> None:
        self.cpu_s, self.rss = 0.0, 2e9

    def __call__(self) -> tuple[float, float]:
        return self.cpu_s, self.rss

    def run(self, seconds: float, busy_threads: float) -> None:
        self.cpu_s += seconds * busy_threads


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


INFO = CpuInfo("Test CPU", 1, 8, 100.0, "test", 16.0)


def test_window_energy_is_watts_per_thread_times_cpu_seconds_plus_resident_dram():
    stat, clock = Stat(), Clock()
    m = EnergyMeter(CpuModelBackend(usage=stat, info=INFO), interval_s=0, clock=clock)
    m.begin_window("w")
    stat.run(2.0, 1.0)        # one thread busy for 2 s
    clock.t += 2.0
    stat.run(2.0, 3.0)        # then three threads for 2 s: 8 CPU-seconds in all
    stat.rss = 4e9            # resident memory grows from 2 to 4 GB at the last read
    clock.t += 2.0
    r = m.end_window("w")
    cpu = next(d for d in r.devices if d.kind == "cpu")
    dram = next(d for d in r.devices if d.kind == "dram")
    assert INFO.w_per_thread == pytest.approx(100.0 / 8)
    assert cpu.energy_j == pytest.approx(100.0 / 8 * 8.0)
    # trapezoid between the window's two reads: mean of 2 and 4 GB over 4 s
    assert dram.energy_j == pytest.approx(DRAM_W_PER_GB * 3.0 * 4.0)
    assert r.cpu_energy_j == pytest.approx(cpu.energy_j + dram.energy_j)
    assert r.cpu_provenance == "modeled" and {d.provenance for d in r.devices} == {"modeled"}
    assert r.energy_j is None and "no_energy_sensor" in r.flags   # no GPU figure, never 0
    lo, hi = cpu_energy_interval_j(cpu.energy_j, 4.0, 100.0)
    assert lo == cpu.energy_j and hi == pytest.approx(cpu.energy_j + 0.1 * 100 * 4)


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
    both = CompositeBackend([MeasuredGpu(), CpuModelBackend(usage=stat, info=INFO)])
    m = EnergyMeter(both, gpus="all", interval_s=0, clock=clock)
    m.begin_window("w")
    stat.run(1.0, 8.0)        # all 8 threads busy for 1 s: the whole 100 W
    clock.t += 1.0
    r = m.end_window("w")
    assert r.energy_j == pytest.approx(300.0) and r.provenance == "measured"
    assert r.cpu_provenance == "modeled"
    assert r.cpu_energy_j == pytest.approx(100 + DRAM_W_PER_GB * 2.0)
    assert [d.provenance for d in r.devices] == ["measured", "modeled", "modeled"]


def test_cpu_lookup_gives_watts_per_thread_with_codecarbons_default():
    text = "model name\t: AMD EPYC 7763 64-Core Processor\nphysical id\t: 0\n"
    info = cpu_info(cpuinfo=text, meminfo="MemTotal: 1000000 kB\n", threads=32)
    assert info.w_per_thread == pytest.approx(280 / 128) and "AMD EPYC 7763" in info.tdp_source
    assert info.tdp_w == pytest.approx(280 * 32 / 128)
    # CodeCarbon 3.x: 4 W per thread for an unknown CPU (2 threads: 8 W, not 85 W)
    unknown = cpu_info(cpuinfo="model name\t: AMD EPYC\n", meminfo="", threads=2)
    assert unknown.tdp_w == pytest.approx(2 * DEFAULT_W_PER_THREAD) == 8.0
    assert "4 W per thread" in unknown.tdp_source and "not in joulebound's table" in \
        unknown.tdp_source
    user = cpu_info(tdp_w=42.0, cpuinfo="", meminfo="", threads=6)
    assert user.tdp_w == 42.0 and user.w_per_thread == pytest.approx(7.0)
    with pytest.raises(JouleboundError):
        cpu_info(tdp_w=0.0, cpuinfo="", meminfo="")


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
    with pytest.raises(JouleboundError, match="unknown carbon-intensity region 'FX'"):
        carbon_intensity("FX")
    with pytest.raises(JouleboundError):
        carbon_intensity("-5")


@pytest.mark.parametrize("model, w_per_thread", [
    ("Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", 210 / 48),
    ("AMD EPYC 7R13 Processor", 225 / 96),
    ("Intel(R) Xeon(R) Gold 6248R CPU @ 3.00GHz", 205 / 48),
    ("Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", 150 / 40),
    ("AMD EPYC 9654 96-Core Processor", 360 / 192),
    ("AMD EPYC", DEFAULT_W_PER_THREAD),
])
def test_cpu_table_rows_are_cited_and_match_the_right_model(model, w_per_thread):
    from joulebound.energy.cpu_model import tdp_table

    for row in tdp_table():
        assert row["tdp_w"] > 0 and row["threads"] > 0 and len(row["source"]) > 20
    info = cpu_info(cpuinfo=f"model name\t: {model}\nphysical id\t: 0\n", meminfo="",
                    threads=4)
    assert info.w_per_thread == pytest.approx(w_per_thread)
