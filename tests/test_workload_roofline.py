"""Roofline summary: per-phase / per-category totals and compute- vs memory-bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulebound.hw.spec import DeviceSpec
from joulebound.workload.analytic import build_trace
from joulebound.workload.kineto import load_chrome_trace
from joulebound.workload.roofline import summarize
from joulebound.workload.trace import Kernel, Trace

FIXTURE = Path(__file__).parent / "fixtures" / "kineto_gpu_step.json"


def toy_device() -> DeviceSpec:
    """100 TFLOP/s bf16, 10 TFLOP/s fp32, 1 TB/s: ridge 100 (bf16) and 10 (fp32) FLOP/B."""
    return DeviceSpec(
        name="toy", product_name="Toy GPU", architecture="Test",
        supported_clocks={1000: [1500, 1000]}, default_core_mhz=1000, max_core_mhz=1500,
        default_mem_mhz=1000, max_mem_mhz=1000,
        peak_flops={"bf16": 100e12, "fp32": 10e12}, mem_bandwidth_bps=1e12,
        power_limit_default_w=300, power_limit_min_w=100, power_limit_max_w=300,
        idle_power_w=30)


def test_bounds_follow_the_ridge_point() -> None:
    dev = toy_device()
    tr = Trace([
        Kernel("big_gemm", "gemm", "forward", 0, 2e12, 1e9, "bf16"),       # I = 2000 > 100
        Kernel("skinny_gemm", "gemm", "forward", 0, 5e10, 1e9, "bf16"),    # I = 50 < 100
        Kernel("gelu", "elementwise", "forward", 0, 8e8, 2e9, "fp32"),     # I = 0.4 < 10
        Kernel("adamw", "optimizer", "optimizer", None, 1e9, 4e9, "fp32"),
    ], name="toy")
    s = summarize(tr, dev)
    rows = {c.category: c for c in s.categories}
    gemm = rows["gemm"]
    assert gemm.kernels == 2 and gemm.flops == 2.05e12 and gemm.bytes == 2e9
    assert gemm.ridge == pytest.approx(100.0) and gemm.bound == "compute"
    assert gemm.compute_bound_kernels == 1  # the skinny one is memory-bound on its own
    # roofline time: max(F/P, Q/W) per kernel: 20 ms + max(0.5, 1) ms
    assert gemm.roofline_time_s == pytest.approx(0.020 + 0.001)
    assert rows["elementwise"].bound == "memory" and rows["elementwise"].ridge == pytest.approx(10)
    assert rows["elementwise"].roofline_time_s == pytest.approx(2e-3)
    assert s.roofline_time_s == pytest.approx(0.021 + 0.002 + 0.004)
    phases = {p.phase: p for p in s.phases}
    assert phases["forward"].kernels == 3 and phases["forward"].by_category == {
        "gemm": 2, "elementwise": 1}
    assert [p.phase for p in s.phases] == ["forward", "optimizer"]
    assert s.measured_time_s is None


def test_without_device_bounds_are_unknown() -> None:
    s = summarize(build_trace("gpt2-small"))
    assert all(c.bound == "unknown" and c.ridge is None for c in s.categories)
    assert s.flops == pytest.approx(build_trace("gpt2-small").total_flops)
    assert s.to_json()["intensity"] == pytest.approx(s.flops / s.bytes)


def test_analytic_gpt3_xl_gemms_compute_bound_rest_memory_bound() -> None:
    s = summarize(build_trace("gpt3-xl"), toy_device())
    rows = {c.category: c.bound for c in s.categories}
    assert rows["gemm"] == "compute"
    for cat in ("elementwise", "norm", "softmax", "reduction", "optimizer", "memcpy"):
        assert rows[cat] == "memory", cat
    assert sum(p.kernels for p in s.phases) == s.kernels


def test_imported_trace_sums_measured_time() -> None:
    tr = load_chrome_trace(FIXTURE)
    s = summarize(tr, toy_device())
    assert s.measured_time_s == pytest.approx(sum(k.duration_s for k in tr))
    comm = next(c for c in s.categories if c.category == "communication")
    assert comm.bound == "unknown"  # no shapes for the all-reduce: no roofline claim
    assert comm.measured_time_s == pytest.approx(240e-6)


def test_top_kernels_rank_by_measured_then_roofline_time() -> None:
    from joulebound.workload.roofline import top_kernels

    dev = toy_device()
    tr = Trace([Kernel("a", "gemm", "forward", 0, 1e12, 1e9, "bf16"),       # 10 ms roofline
                Kernel("b", "elementwise", "forward", 0, 1e6, 3e10, "fp32"),  # 30 ms roofline
                Kernel("a", "gemm", "backward", 0, 1e12, 1e9, "bf16")])
    rows = top_kernels(tr, dev, 5)
    assert [(r.name, r.count) for r in rows] == [("b", 1), ("a", 2)]
    assert rows[0].bound == "memory" and rows[1].bound == "compute"
    assert rows[1].roofline_time_s == pytest.approx(0.020)
    assert [r.name for r in top_kernels(tr, None, 1)] == ["a"]  # by FLOPs without a device
    imported = top_kernels(load_chrome_trace(FIXTURE), None, 2)
    assert imported[0].name.startswith("ncclDevKernel")  # the longest measured kernel
    assert imported[0].measured_time_s == pytest.approx(240e-6)
