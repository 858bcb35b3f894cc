"""Job totals across ranks count each physical GPU once (torchrun, gloo, 2 ranks, CPU)."""

from __future__ import annotations

import json

import pytest

from joulebound.energy.distributed import combine, default_gpus, visible_device_ids
from joulebound.energy.meter import DeviceEnergy, WindowResult

pytest.importorskip("torch")


def test_torchrun_two_ranks_count_each_gpu_once(torchrun_cpu):
    """The cases of tests/_dist_meter_worker.py in a real torchrun launch (shared with
    test_runtime_ddp.py: tests/_torchrun_worker.py)."""
    proc, out = torchrun_cpu
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((out / "agg.json").read_text())
    for case in ("own", "all", "rank0"):
        r = res[case]
        assert r["energy_j"] == pytest.approx(300.0), case  # 100 W + 200 W over 1 s
        assert r["uuids"] == ["SIM-GPU-0", "SIM-GPU-1"], case
        assert r["provenance"] == "modeled"
        assert r["n_windows"] == 1
    assert res["own"]["duplicates"] == 0 and res["own"]["ranks"] == [0, 1]
    # every rank metering every GPU: the naive sum double counts, aggregate() does not
    assert res["all"]["naive_sum_j"] == pytest.approx(600.0)
    assert res["all"]["duplicates"] == 2
    assert res["rank0"]["ranks"] == [0]


def _w(name, rank, dur, devs, start=0.0):
    return WindowResult(name=name, start_s=start, end_s=start + dur, duration_s=dur,
                        energy_j=sum(e for _, e in devs),
                        devices=[DeviceEnergy(u, 0, e, e / dur, None, "simulated") for u, e in devs],
                        provenance="measured", rank=rank)


def test_combine_matches_occurrences_and_keeps_longest_reading():
    r0 = [_w("step", 0, 1.0, [("A", 10.0)]), _w("step", 0, 1.0, [("A", 11.0)], start=1.0)]
    r1 = [_w("step", 1, 1.2, [("A", 12.0), ("B", 5.0)]), _w("step", 1, 1.0, [("B", 6.0)], 1.0)]
    job = combine([r0, r1])
    assert [j.name for j in job] == ["step", "step"]
    # first step: A reported by both ranks -> rank 1's longer window kept; B once
    assert job[0].energy_j == pytest.approx(12.0 + 5.0) and job[0].duplicates == 1
    assert job[0].duration_s == pytest.approx(1.2)
    assert job[1].energy_j == pytest.approx(11.0 + 6.0) and job[1].duplicates == 0


def test_combine_without_sensor_keeps_none():
    w = WindowResult("x", 0.0, 1.0, 1.0, None, [], "measured", ["no_energy_sensor"])
    job = combine([[w], [w]])
    assert job[0].energy_j is None and "no_energy_sensor" in job[0].flags


def test_default_gpus_and_visible_devices():
    assert default_gpus([0, 1, 2, 3], {}) == [0, 1, 2, 3]
    assert default_gpus([0, 1, 2, 3], {"LOCAL_RANK": "2", "WORLD_SIZE": "4"}) == [2]
    assert default_gpus([0], {"LOCAL_RANK": "3", "WORLD_SIZE": "4"}) == [0]
    assert visible_device_ids({"CUDA_VISIBLE_DEVICES": "3,GPU-ab,-1,2"}) == ["3", "GPU-ab"]
    assert visible_device_ids({}) is None
