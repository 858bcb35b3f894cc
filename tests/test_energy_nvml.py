"""NVML backend against a FAKE ``pynvml`` module (never the real library): counter path, resets,
wraparound, power-integration fallback, permission errors, MIG, device selection."""

from __future__ import annotations

import pytest

from joulebound.core.errors import JouleboundError
from joulebound.energy.meter import EnergyMeter
from joulebound.energy.nvml import NvmlBackend
from joulebound.testing.clock import ManualClock as Clock
from joulebound.testing.fakenvml import FakeGPU


def meter(clock: Clock, **kw) -> EnergyMeter:
    return EnergyMeter("nvml", interval_s=0, clock=clock, **kw)


def test_counter_path_measures_delta(fake):
    g = FakeGPU("GPU-aaaa", energy_mj=5_000_000)
    nv = fake([g])
    clock = Clock()
    m = meter(clock)
    m.begin_window("w")
    g.energy_mj += 250_000          # 250 J
    clock.t = 1.0
    r = m.end_window("w")
    assert r.energy_j == pytest.approx(250.0)
    assert r.provenance == "measured" and r.flags == []
    d = r.devices[0]
    assert (d.uuid, d.index, d.source) == ("GPU-aaaa", 0, "nvml.energy_counter")
    assert d.avg_power_w == pytest.approx(250.0)
    m.close()
    assert "nvmlShutdown" in nv.calls
    assert not [c for c in nv.calls if "Set" in c]  # read-only


def test_counter_reset_is_flagged_and_counts_energy_since_reset(fake):
    g = FakeGPU("GPU-aaaa", energy_mj=9_000_000, power_mw=2_000)
    fake([g])
    clock = Clock()
    m = meter(clock)
    m.begin_window("w")
    g.energy_mj = 1_500             # driver reloaded: counter restarted at 0, now 1.5 J
    clock.t = 1.0
    r = m.end_window("w")
    assert r.energy_j == pytest.approx(1.5)
    assert "counter_reset" in r.flags
    assert m.backend.events[0].kind == "reset"
    # the following window is clean again
    m.begin_window("next")
    g.energy_mj += 2_000
    clock.t = 2.0
    r2 = m.end_window("next")
    assert r2.energy_j == pytest.approx(2.0) and "counter_reset" not in r2.flags


def test_counter_wraparound_adds_the_range(fake):
    g = FakeGPU("GPU-aaaa", energy_mj=(1 << 64) - 500)
    fake([g])
    clock = Clock()
    m = meter(clock)
    m.begin_window("w")
    g.energy_mj = 1_500             # wrapped: 500 mJ to the top + 1500 mJ after
    clock.t = 1.0
    r = m.end_window("w")
    assert r.energy_j == pytest.approx(2.0)
    assert "counter_wraparound" in r.flags and "counter_reset" not in r.flags


def test_unsupported_counter_falls_back_to_power_integration(fake):
    g = FakeGPU("GPU-old", counter="unsupported", power_mw=100_000)
    fake([g])
    clock = Clock()
    m = meter(clock)
    assert any("no total-energy counter" in n for n in m.notes)
    m.begin_window("w")              # edge read: 100 W
    clock.t = 1.0
    g.power_mw = 300_000
    m.sampler.sample_now()           # 300 W at t=1
    clock.t = 2.0
    r = m.end_window("w")            # edge read: 300 W at t=2
    d = r.devices[0]
    assert d.source == "nvml.power_integration"
    # trapezoid: (100+300)/2 * 1 + 300 * 1
    assert d.energy_j == pytest.approx(500.0)
    assert d.peak_power_w == pytest.approx(300.0)
    assert r.energy_j == pytest.approx(500.0) and r.provenance == "measured"


def test_counter_permission_denied_falls_back_with_note(fake):
    fake([FakeGPU("GPU-a", counter="noperm", power_mw=50_000)])
    clock = Clock()
    m = meter(clock)
    assert any("NVML_ERROR_NO_PERMISSION" in n for n in m.notes)
    m.begin_window("w")
    clock.t = 2.0
    assert m.end_window("w").energy_j == pytest.approx(100.0)


def test_all_readings_denied_is_a_clear_error(fake):
    nv = fake([FakeGPU("GPU-a", counter="noperm", power="noperm")])
    with pytest.raises(JouleboundError, match="denied both.*NO_PERMISSION.*--backend none"):
        meter(Clock())
    assert "nvmlShutdown" in nv.calls


def test_no_driver_auto_falls_back_to_time_only(fake):
    fake([], init_error=12)
    with pytest.raises(JouleboundError, match="no NVIDIA driver"):
        meter(Clock())
    m = EnergyMeter("auto", interval_s=0)
    assert m.backend.name in ("none", "rapl", "cpu-model")   # CPU: RAPL, else modeled
    assert any("NVML could not start" in n for n in m.notes)
    assert not any(c.kind == "gpu" for c in m.backend.channels)
    with m.window("w") as w:
        pass
    assert w.result.energy_j is None and "no_energy_sensor" in w.result.flags


def test_mig_enabled_gpu_is_noted_and_flagged(fake, monkeypatch):
    g = FakeGPU("GPU-big", mig=True, mig_uuids=("MIG-1111", "MIG-2222"))
    fake([FakeGPU("GPU-other"), g])
    clock = Clock()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-2222")
    m = meter(clock)
    assert [c.uuid for c in m.backend.channels] == ["GPU-big"]
    assert any("MIG is enabled" in n and "whole physical GPU" in n for n in m.notes)
    m.begin_window("w")
    clock.t = 1
    assert "mig" in m.end_window("w").flags
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-9999")
    with pytest.raises(JouleboundError, match="MIG device 'MIG-9999'.*parent GPU"):
        meter(clock)


def test_cuda_visible_devices_maps_to_physical_uuids(fake, monkeypatch):
    fake([FakeGPU("GPU-0000"), FakeGPU("GPU-1111"), FakeGPU("GPU-2222")])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-11")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    b = NvmlBackend()
    assert [(c.index, c.uuid) for c in b.channels] == [(0, "GPU-2222"), (1, "GPU-1111")]
    with pytest.raises(JouleboundError, match=r"GPU index \[5\] is not visible"):
        NvmlBackend(gpus=[5])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("CUDA_DEVICE_ORDER")
    assert any("PCI_BUS_ID" in n for n in NvmlBackend().notes)


def test_local_rank_selects_the_rank_gpu(fake, monkeypatch):
    fake([FakeGPU("GPU-0000"), FakeGPU("GPU-1111")])
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    m = meter(Clock())
    assert [m.backend.channels[i].uuid for i in m.channels] == ["GPU-1111"]
    m2 = meter(Clock(), gpus="all")
    assert len(m2.channels) == 2


def test_short_counter_window_uses_power_not_zero(fake):
    g = FakeGPU("GPU-a", energy_mj=10_000, power_mw=250_000)
    fake([g])
    clock = Clock()
    m = meter(clock)
    m.begin_window("tiny")
    clock.t = 0.02                   # 20 ms < 100 ms update period; counter has not moved
    r = m.end_window("tiny")
    assert r.energy_j == pytest.approx(250.0 * 0.02)     # its time share at the power read
    assert "short_window" in r.flags
    assert r.energy_uncertainty_j == pytest.approx(250.0 * 0.02)   # no step inside: +-100 %


def test_auto_combines_nvml_gpus_and_rapl_cpu(fake, monkeypatch, tmp_path):
    import joulebound.energy.rapl as rapl

    pkg = tmp_path / "intel-rapl:0"
    pkg.mkdir()
    (pkg / "name").write_text("package-0\n")
    (pkg / "energy_uj").write_text("1000000\n")
    (pkg / "max_energy_range_uj").write_text("262143328850\n")
    monkeypatch.setattr(rapl, "POWERCAP", tmp_path)
    g = FakeGPU("GPU-a", energy_mj=0)
    fake([g])
    clock = Clock()
    m = EnergyMeter("auto", interval_s=0, clock=clock)
    assert m.backend.name == "nvml+rapl" and m.backend.provenance == "measured"
    m.begin_window("w")
    g.energy_mj = 300_000
    (pkg / "energy_uj").write_text("51000000\n")
    clock.t = 1.0
    r = m.end_window("w")
    assert r.energy_j == pytest.approx(300.0)       # GPU only
    assert r.cpu_energy_j == pytest.approx(50.0, abs=0.05)  # CPU package (1 ms RAPL steps)
    assert [d.kind for d in r.devices] == ["gpu", "cpu"]


def test_counter_lost_mid_window_falls_back_to_sampled_power(fake):
    g = FakeGPU("GPU-a", energy_mj=1_000, power_mw=100_000)
    fake([g])
    clock = Clock()
    m = meter(clock)
    m.begin_window("w")              # counter read OK at t=0
    clock.t = 0.5
    m.sampler.sample_now()           # 100 W (and counter) at t=0.5
    g.counter = "lost"
    clock.t = 1.5
    m.sampler.sample_now()           # counter fails, power still read
    clock.t = 2.0
    r = m.end_window("w")            # counter fails again: edge power read at t=2
    d = r.devices[0]
    assert "read_error" in r.flags
    assert d.source == "nvml.energy_counter->power_integration"
    assert d.energy_j == pytest.approx(100.0 * 1.5)   # integral over the readings 0.5..2.0 s
    assert any("energy counter read failed" in n for n in m.notes)


def test_sensor_period_comes_from_the_catalog(fake, monkeypatch):
    import joulebound.energy.nvml as nvml
    from joulebound.hw.catalog import get_device

    assert nvml.catalog_sensor_period(get_device("h100-sxm").product_name) == pytest.approx(
        get_device("h100-sxm").sensor_period_s)
    assert nvml.catalog_sensor_period("NVIDIA GeForce GTX 1080") is None
    # the catalog's name resolution: case, punctuation and vendor words do not matter
    assert nvml.catalog_sensor_period("nvidia h100-80GB-hbm3") == pytest.approx(
        get_device("h100-sxm").sensor_period_s)
    monkeypatch.setattr(nvml, "catalog_sensor_period", lambda name: 0.5)
    g = FakeGPU("GPU-a", energy_mj=0)
    fake([g])
    clock = Clock()
    m = meter(clock)
    assert m.backend.channels[0].sensor_period_s == 0.5
    m.begin_window("w")
    g.energy_mj += 30_000
    clock.t = 0.3
    r = m.end_window("w")
    assert "short_window" in r.flags
    assert abs(r.energy_j - 30.0) <= r.energy_uncertainty_j
