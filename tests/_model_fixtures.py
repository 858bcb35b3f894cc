"""Hand-built DeviceSpec / Trace fixtures for the GPU-model tests (no catalog needed)."""

from __future__ import annotations

from joulebound.hw.spec import DeviceSpec
from joulebound.workload.trace import Kernel, Trace


def ga102_spec(name: str = "test-ga102") -> DeviceSpec:
    """An RTX 3080 Ti-like spec: 127 core clocks (210–2100 MHz) × 4 memory clocks, and the 405 MHz
    memory clock only with core clocks up to 420 MHz (as GA102 boards pair them)."""
    cores = list(range(210, 2101, 15))
    mems = [9501, 9251, 5001, 810, 405]
    return DeviceSpec(
        name=name, product_name="Test GA102", architecture="Ampere",
        supported_clocks={m: [c for c in cores if m != 405 or c <= 420] for m in mems},
        default_core_mhz=1365, max_core_mhz=2100, default_mem_mhz=9501, max_mem_mhz=9501,
        peak_flops={"fp32": 34.1e12, "bf16": 68.2e12, "fp16": 68.2e12, "tf32": 34.1e12},
        mem_bandwidth_bps=912e9, power_limit_default_w=350.0, power_limit_min_w=100.0,
        power_limit_max_w=400.0, idle_power_w=25.0, sm_count=80, memory_type="GDDR6X",
    )


def small_trace() -> Trace:
    """Forward + backward of one tiny layer: a compute-bound GEMM, memory-bound elementwise ops."""
    ks = [
        Kernel("qkv_gemm", "gemm", "forward", 0, flops=2 * 2048 * 2048 * 6144, bytes=3.4e7),
        Kernel("gelu", "elementwise", "forward", 0, flops=8 * 2048 * 8192, bytes=2 * 2 * 2048 * 8192),
        Kernel("layernorm", "norm", "forward", 0, flops=5 * 2048 * 2048, bytes=2 * 2 * 2048 * 2048),
        Kernel("qkv_gemm", "gemm", "forward", 1, flops=2 * 2048 * 2048 * 6144, bytes=3.4e7),
        Kernel("qkv_gemm_dgrad", "gemm", "backward", 0, flops=2 * 2048 * 2048 * 6144, bytes=3.4e7),
        Kernel("gelu_bwd", "elementwise", "backward", 0, flops=8 * 2048 * 8192,
               bytes=3 * 2 * 2048 * 8192),
    ]
    return Trace(ks, name="small")
