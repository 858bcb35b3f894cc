"""EnergyMeter windows on the simulated and no-sensor backends (deterministic, injected clock)."""

from __future__ import annotations

import pytest

from joulebound.core.errors import JouleboundError
from joulebound.energy.meter import EnergyMeter, WindowResult
from joulebound.energy.simulated import SimulatedBackend
from joulebound.energy.store import Store


class Clock:
    """A manual clock (s)."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def sim_meter(power=lambda t: 150.0, n=1, clock=None, **kw) -> tuple[EnergyMeter, Clock]:
    clock = clock or Clock()
    backend = SimulatedBackend(power=power, n_devices=n, t0=clock.t, **kw)
    return EnergyMeter(backend, gpus="all", interval_s=0, clock=clock), clock


def test_no_sensor_records_time_and_no_energy():
    clock = Clock()
    m = EnergyMeter("none", interval_s=0, clock=clock)
    m.begin_window("w")
    clock.t += 2.5
    r = m.end_window("w")
    assert r.duration_s == pytest.approx(2.5)
    assert r.energy_j is None  # never a silent 0
    assert "no_energy_sensor" in r.flags
    assert r.devices == []
    assert any("no energy sensor" in n for n in m.notes)


def test_constant_power_energy_is_power_times_time():
    m, clock = sim_meter(power=lambda t: 150.0, n=2)
    m.begin_window("w")
    clock.t += 2.0
    r = m.end_window("w")
    assert r.provenance == "modeled"
    assert [d.uuid for d in r.devices] == ["SIM-GPU-0", "SIM-GPU-1"]
    assert r.devices[0].energy_j == pytest.approx(300.0, rel=1e-9)
    assert r.energy_j == pytest.approx(600.0, rel=1e-9)
    assert r.devices[0].avg_power_w == pytest.approx(150.0)
    assert r.avg_power_w == pytest.approx(300.0)


def test_nested_and_overlapping_windows_integrate_their_own_interval():
    # P(t) = 100 + 50 t  ->  E(a, b) = 100 (b - a) + 25 (b^2 - a^2)
    m, clock = sim_meter(power=lambda t: 100.0 + 50.0 * t)
    t0 = clock.t

    def exact(a: float, b: float) -> float:
        return 100 * (b - a) + 25 * (b * b - a * a)

    m.begin_window("outer")            # 0
    clock.t = t0 + 1.0
    m.begin_window("inner")            # 1
    clock.t = t0 + 2.0
    m.begin_window("overlap")          # 2
    assert set(m.open_windows) == {"outer", "inner", "overlap"}
    clock.t = t0 + 3.0
    inner = m.end_window("inner")      # 1..3
    clock.t = t0 + 4.0
    outer = m.end_window("outer")      # 0..4
    clock.t = t0 + 5.0
    over = m.end_window("overlap")     # 2..5
    assert inner.energy_j == pytest.approx(exact(1, 3), rel=1e-6)
    assert outer.energy_j == pytest.approx(exact(0, 4), rel=1e-6)
    assert over.energy_j == pytest.approx(exact(2, 5), rel=1e-6)
    assert [r.name for r in m.results] == ["inner", "outer", "overlap"]


def test_zero_length_window_is_flagged():
    m, clock = sim_meter()
    m.begin_window("z")
    r = m.end_window("z")
    assert r.duration_s == 0.0
    assert r.energy_j == 0.0
    assert "zero_length" in r.flags
    assert r.devices[0].avg_power_w is None


def test_short_window_is_flagged_and_apportioned_not_zero():
    # the sensor only updates every 100 ms: a 30 ms window inside one period sees no change
    m, clock = sim_meter(power=lambda t: 200.0, sensor_period_s=0.1, quantum_s=0.1)
    t0 = clock.t
    clock.t = t0 + 0.12
    m.begin_window("short")
    clock.t = t0 + 0.15
    r = m.end_window("short")
    assert "short_window" in r.flags
    assert r.energy_j == pytest.approx(200.0 * 0.03, rel=1e-6)
    # no counter step inside: the power could have been 0..2x the rate, so +-100 %
    assert r.energy_uncertainty_j == pytest.approx(200.0 * 0.03, rel=1e-6)
    # a long window with the same sensor is not flagged short, and is within a sensor step
    m.begin_window("long")
    clock.t += 1.0
    r2 = m.end_window("long")
    assert "short_window" not in r2.flags
    assert abs(r2.energy_j - 200.0) <= 200.0 * 0.1
    assert abs(r2.energy_j - 200.0) <= r2.energy_uncertainty_j <= 3 * 200.0 * 0.1


def test_window_name_errors_are_clear():
    m, clock = sim_meter()
    m.begin_window("train")
    with pytest.raises(JouleboundError, match="already open"):
        m.begin_window("train")
    with pytest.raises(JouleboundError, match="Did you mean 'train'"):
        m.end_window("trian")
    m.end_window("train")
    with pytest.raises(JouleboundError, match="No window is open"):
        m.end_window("train")


def test_context_manager_and_decorator():
    m, clock = sim_meter(power=lambda t: 50.0)

    with m.window("ctx") as w:
        clock.t += 1.0
    assert w.result is not None and w.result.energy_j == pytest.approx(50.0)

    @m.window("fn")
    def work(dt: float) -> str:
        clock.t += dt
        return "done"

    assert work(2.0) == "done"
    assert m.results[-1].name == "fn"
    assert m.results[-1].energy_j == pytest.approx(100.0)
    # an exception inside still closes the window
    with pytest.raises(RuntimeError), m.window("boom"):
        clock.t += 1.0
        raise RuntimeError("x")
    assert m.results[-1].name == "boom" and m.open_windows == []


def test_from_spec_load_profile():
    from joulebound.hw.spec import DeviceSpec

    spec = DeviceSpec(name="x", product_name="X", architecture="A", supported_clocks={1000: [500]},
                      default_core_mhz=500, max_core_mhz=500, default_mem_mhz=1000,
                      max_mem_mhz=1000, peak_flops={"fp32": 1e12}, mem_bandwidth_bps=1e11,
                      power_limit_default_w=300.0, power_limit_min_w=100.0,
                      power_limit_max_w=300.0, idle_power_w=60.0)
    b = SimulatedBackend.from_spec(spec, load=lambda t: 0.0 if t < 1 else 1.0, t0=0.0)
    assert b.read_power_w(0, 0.5) == pytest.approx(60.0)
    assert b.read_power_w(0, 1.5) == pytest.approx(300.0)
    assert b.read_energy_j(0, 2.0) == pytest.approx(60.0 + 300.0, rel=1e-3)


def test_window_result_roundtrip():
    m, clock = sim_meter()
    m.begin_window("a")
    clock.t += 1
    r = m.end_window("a")
    assert WindowResult.from_dict(r.to_dict()) == r


def test_sampler_thread_records_peak_power():
    import time

    b = SimulatedBackend(power=lambda t: 100.0 if t < 0.1 else 400.0)
    m = EnergyMeter(b, gpus="all", interval_s=0.01)
    try:
        m.begin_window("w")
        time.sleep(0.3)
        r = m.end_window("w")
    finally:
        m.close()
    d = r.devices[0]
    assert d.n_samples >= 5
    assert d.peak_power_w == pytest.approx(400.0)
    assert 100.0 < d.avg_power_w < 400.0


def test_store_commits_each_window_and_exports(tmp_path):
    db = tmp_path / "runs.db"
    clock = Clock()
    b = SimulatedBackend(power=lambda t: 100.0, t0=clock.t)
    m = EnergyMeter(b, gpus="all", interval_s=0, clock=clock, store=db, command="demo")
    m.begin_window("a")
    clock.t += 1
    m.end_window("a")
    # visible to another connection before the run ends (committed as it ended)
    other = Store(db)
    ws = other.windows(m.run_id)
    assert len(ws) == 1 and ws[0].energy_j == pytest.approx(100.0)
    assert ws[0].devices[0].uuid == "SIM-GPU-0"
    assert other.runs()[0]["status"] == "running"
    m.close()
    assert other.runs()[0]["status"] == "finished"
    assert other.query("PRAGMA journal_mode")[0][0] == "wal"
    paths = other.export(tmp_path / "csv", "csv") + other.export(tmp_path / "pq", "parquet")
    import pandas as pd

    w = pd.read_parquet(tmp_path / "pq" / "windows.parquet")
    assert list(w["name"]) == ["a"] and w["energy_j"].iloc[0] == pytest.approx(100.0)
    assert len(paths) == 6 and all(p.exists() for p in paths)
    with pytest.raises(JouleboundError, match="csv' or 'parquet"):
        other.export(tmp_path, "xlsx")


def test_unknown_backend_suggests():
    with pytest.raises(JouleboundError, match="simulated"):
        EnergyMeter("simulate")


def test_window_edges_synchronise_each_metered_cuda_device(monkeypatch):
    """With torch+CUDA in use, both edges call torch.cuda.synchronize(i) for every metered GPU."""
    import sys
    import types

    calls: list[int] = []
    cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                 device_count=lambda: 4, synchronize=calls.append)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    clock = Clock()
    m = EnergyMeter(SimulatedBackend(n_devices=4, t0=clock.t), gpus=[1, 3], interval_s=0,
                    clock=clock)
    m.begin_window("w")
    assert calls == [1, 3]
    m.end_window("w")
    assert calls == [1, 3, 1, 3]
    m.begin_window("nosync", sync=False)
    m.end_window("nosync", sync=False)
    assert len(calls) == 4


def test_requested_gpus_without_any_gpu_sensor_still_record_time():
    m = EnergyMeter("none", gpus="0,1", interval_s=0)
    assert any("GPU(s) [0, 1] requested" in n for n in m.notes)
    m.begin_window("w")
    assert m.end_window("w").energy_j is None
    sim = SimulatedBackend(n_devices=2)
    with pytest.raises(JouleboundError, match=r"GPU index \[5\] not found.*visible GPU indices"):
        EnergyMeter(sim, gpus=[5], interval_s=0)


def test_from_catalog_device_name():
    from joulebound.hw.catalog import get_device

    spec = get_device("h200")
    b = SimulatedBackend.from_spec("h200", load=0.5, t0=0.0)
    expect = spec.idle_power_w + 0.5 * (spec.power_limit_default_w - spec.idle_power_w)
    assert b.read_power_w(0, 1.0) == pytest.approx(expect)
    assert b.channels[0].name == spec.product_name


def test_results_keep_the_most_recent_windows_and_the_store_keeps_all(tmp_path):
    from joulebound.energy.distributed import aggregate

    clock = Clock()
    store = Store(tmp_path / "e.db")
    m = EnergyMeter(SimulatedBackend(power=lambda t: 100.0, n_devices=1, t0=clock.t), gpus="all",
                    interval_s=0, clock=clock, store=store, keep_results=3)
    for i in range(5):
        with m.window(f"step{i}"):
            clock.t += 1.0
    assert [r.name for r in m.results] == ["step2", "step3", "step4"]
    assert m.results_dropped == 2
    assert all(r.energy_j == pytest.approx(100.0) for r in m.results)
    with pytest.warns(UserWarning, match="2 older ones are only in its store"):
        assert [w.name for w in aggregate(m)] == ["step2", "step3", "step4"]
    m.close()
    assert len(store.windows(m.run_id)) == 5      # the store holds every window


def test_results_default_keeps_ordinary_runs_whole():
    m, clock = sim_meter()
    assert m.keep_results == 10000
    for i in range(50):
        m.begin_window(f"w{i}")
        clock.t += 0.5
        m.end_window(f"w{i}")
    assert len(m.results) == 50 and m.results_dropped == 0
    unbounded = EnergyMeter("none", interval_s=0, clock=clock, keep_results=None)
    for _ in range(3):
        with unbounded.window("w"):
            clock.t += 1.0
    assert len(unbounded.results) == 3 and unbounded.results_dropped == 0
    for bad in (-1, 1.5, True):
        with pytest.raises(JouleboundError, match="keep_results"):
            EnergyMeter("none", interval_s=0, keep_results=bad)


def test_results_bound_keeps_the_last_n_and_counts_every_dropped_one():
    """Past ``keep_results`` each new window drops the oldest (the last N kept, in order, every
    dropped one counted), also after the user clears the list and with a bound of 0; cancelled
    windows are neither kept nor counted."""
    clock = Clock()
    m = EnergyMeter("none", interval_s=0, clock=clock, keep_results=4)
    for i in range(23):
        with m.window(f"w{i}"):
            clock.t += 0.1
    assert [r.name for r in m.results] == ["w19", "w20", "w21", "w22"]
    assert m.results[-1].name == "w22" and m.results[0].name == "w19"
    assert m.results_dropped == 19
    m.results.clear()
    for i in range(6):
        m.begin_window(f"v{i}")
        clock.t += 0.1
        m.end_window(f"v{i}", cancel=i == 5)
    assert [r.name for r in m.results] == ["v1", "v2", "v3", "v4"] and m.results_dropped == 20
    none_kept = EnergyMeter("none", interval_s=0, clock=clock, keep_results=0)
    for _ in range(3):
        with none_kept.window("w"):
            clock.t += 0.1
    assert len(none_kept.results) == 0 and none_kept.results_dropped == 3


def test_cuda_sync_is_looked_up_until_cuda_is_initialised_then_reused(monkeypatch):
    import sys
    import types

    calls: list[int] = []
    looked: list[int] = []
    state = {"init": False}

    def device_count() -> int:
        looked.append(1)
        return 2

    cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: state["init"],
                                 device_count=device_count, synchronize=calls.append)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    clock = Clock()
    m = EnergyMeter(SimulatedBackend(n_devices=2, t0=clock.t), gpus="all", interval_s=0,
                    clock=clock)
    with m.window("before-cuda"):
        pass
    assert calls == [] and looked == []      # CUDA not initialised: nothing to wait for
    state["init"] = True
    for _ in range(3):
        with m.window("step"):
            pass
    assert calls == [0, 1] * 6               # every edge synchronises both GPUs ...
    assert len(looked) == 1                  # ... with the function built once



def test_a_process_without_cuda_is_asked_once_not_at_every_edge(monkeypatch):
    """torch imported but no CUDA in the process: ``is_available()`` is asked at the first edge
    only (the answer cannot change), not at every edge as while CUDA is not yet initialised."""
    import sys
    import types

    asked: list[int] = []

    def is_available() -> bool:
        asked.append(1)
        return False

    cuda = types.SimpleNamespace(is_available=is_available, is_initialized=lambda: False,
                                 device_count=lambda: 0, synchronize=lambda d: None)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    clock = Clock()
    m = EnergyMeter(SimulatedBackend(n_devices=1, t0=clock.t), gpus="all", interval_s=0,
                    clock=clock)
    for _ in range(5):
        with m.window("step"):
            clock.t += 0.1
    assert len(asked) == 1 and len(m.results) == 5

# -- closing: atexit, with, one status vocabulary ------------------------------------------------

def _status(db):
    import sqlite3

    return sqlite3.connect(db).execute("SELECT status, exit_code, notes_json FROM runs").fetchall()


@pytest.mark.parametrize("body, status", [
    ("pass", "finished"),
    ("raise RuntimeError('boom')", "failed"),
])
def test_meter_left_open_is_closed_at_interpreter_exit(tmp_path, body, status):
    import subprocess
    import sys

    db = tmp_path / "runs.db"
    code = ("from joulebound.energy import EnergyMeter\n"
            f"m = EnergyMeter('simulated', store={str(db)!r}, interval_s=0)\n"
            "m.begin_window('w')\n"
            f"{body}\n")
    subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    (st, _code, notes), = _status(db)
    assert st == status and "interpreter exit" in notes


def test_with_block_closes_with_the_status_of_how_it_ended(tmp_path):
    from joulebound.energy.status import STATUSES

    db = tmp_path / "runs.db"
    with EnergyMeter("simulated", store=db, interval_s=0) as m:
        with m.window("a"):
            pass
    with pytest.raises(ValueError), EnergyMeter("simulated", store=db, interval_s=0):
        raise ValueError("x")
    with pytest.raises(KeyboardInterrupt), EnergyMeter("simulated", store=db, interval_s=0):
        raise KeyboardInterrupt
    rows = _status(db)
    assert [(r[0], r[1]) for r in rows] == [("finished", None), ("failed", None), ("killed", 130)]
    assert {r[0] for r in rows} <= set(STATUSES)
