"""Prometheus export: per-device series and totals cannot be summed together, nested windows
are marked, repeated window names (epochs, intervals) each keep their own series."""

from __future__ import annotations

from collections import defaultdict

import pytest

from joulebound.energy.results import DeviceEnergy, WindowResult

parser = pytest.importorskip("prometheus_client.parser")


def _w(name: str, t0: float, t1: float, gpu_w: float = 100.0, cpu_w: float = 10.0
       ) -> WindowResult:
    d = t1 - t0
    devs = [DeviceEnergy("GPU-a", 0, gpu_w * d, gpu_w, gpu_w, "counter", "gpu", 3, "measured"),
            DeviceEnergy("GPU-b", 1, gpu_w * d, gpu_w, gpu_w, "counter", "gpu", 3, "measured"),
            DeviceEnergy("model:h:cpu", 0, cpu_w * d, cpu_w, cpu_w, "cpu_time", "cpu", 3,
                         "modeled")]
    return WindowResult(name, t0, t1, d, 2 * gpu_w * d, devs, "measured", [], cpu_w * d,
                        0, "h", "nvml+cpu-model")


def _run() -> list[WindowResult]:
    """train [0, 10] ⊃ epoch [0, 5], epoch [5, 10] ⊃ interval windows of 2.5 s."""
    return [_w("interval", 0, 2.5), _w("interval", 2.5, 5), _w("epoch", 0, 5),
            _w("interval", 5, 7.5), _w("interval", 7.5, 10), _w("epoch", 5, 10),
            _w("train", 0, 10)]


def _samples(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in parser.text_string_to_metric_families(text)}


def test_summing_a_metric_by_its_natural_label_never_double_counts():
    from joulebound.energy.export import prometheus_text

    fams = _samples(prometheus_text(_run(), "r1"))
    per_device = fams["joulebound_window_energy_joules"]
    # per-device series only: no totals mixed into the metric
    assert {s.labels["device"] for s in per_device} == {"GPU-a", "GPU-b", "model:h:cpu"}
    # PromQL `sum by (device) (joulebound_window_energy_joules{depth="0"})`: each device's
    # energy over the run, once (train holds every other window)
    by_device: dict[str, float] = defaultdict(float)
    for s in per_device:
        if s.labels["depth"] == "0":
            by_device[s.labels["device"]] += s.value
    assert by_device == pytest.approx({"GPU-a": 1000.0, "GPU-b": 1000.0, "model:h:cpu": 100.0})
    # the windows of one depth tile the run: each depth sums to the same energy
    by_depth: dict[str, float] = defaultdict(float)
    for s in per_device:
        by_depth[s.labels["depth"]] += s.value
    assert by_depth == pytest.approx({"0": 2100.0, "1": 2100.0, "2": 2100.0})
    parents = {(s.labels["window"], s.labels["seq"]): s.labels["parent"] for s in per_device}
    assert parents[("train", "6")] == "" and parents[("epoch", "2")] == "train"
    assert parents[("interval", "0")] == "epoch"
    # every repeated window keeps its own series (4 intervals, 2 epochs, 1 train; 3 devices)
    assert len(per_device) == 7 * 3
    # totals: their own metric, one series per window and scope; per scope one provenance
    totals = fams["joulebound_window_energy_total_joules"]
    top = {s.labels["scope"]: s for s in totals if s.labels["depth"] == "0"}
    assert top["gpu"].value == pytest.approx(2000.0) and top["gpu"].labels["provenance"] == \
        "measured"
    assert top["cpu_dram"].value == pytest.approx(100.0) and \
        top["cpu_dram"].labels["provenance"] == "modeled"
    assert sum(s.value for s in totals if s.labels["depth"] == "0") == pytest.approx(2100.0)
    durations = fams["joulebound_window_duration_seconds"]
    assert sum(s.value for s in durations if s.labels["depth"] == "0") == pytest.approx(10.0)


def test_runs_and_ranks_are_nested_separately():
    from joulebound.energy.export import prometheus_text

    a, b = _run(), _run()
    for w in b:
        w.rank = 1                      # rank 1's windows overlap rank 0's in time, not nested
    fams = _samples(prometheus_text({"r1": a + b, "r2": _run()}))
    per_device = fams["joulebound_window_energy_joules"]
    top = [s for s in per_device if s.labels["depth"] == "0"]
    assert {(s.labels["run"], s.labels["rank"]) for s in top} == {("r1", "0"), ("r1", "1"),
                                                                  ("r2", "0")}
    assert all(s.labels["window"] == "train" for s in top)
