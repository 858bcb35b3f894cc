"""The few hardware numbers the scaling model needs: peak FLOP/s, DRAM bandwidth, board power and
the GPU-to-GPU link.

Values come from the device catalog (``joulebound.devices.catalog.get_device``) when it knows the
device; the table below is the fallback (vendor datasheet figures, dense, no sparsity) so that
``joulebound predict`` works on a bare install. Interconnects are not part of ``DeviceSpec`` and
always come from :data:`DEFAULT_LINK`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import JouleboundError, did_you_mean


@dataclass(frozen=True)
class HW:
    """Per-GPU figures: ``peak`` FLOP/s by dtype, ``mem_bw`` bytes/s, ``tdp_w`` W, ``link`` name,
    ``mem_bytes`` DRAM size (bytes; NaN when unknown)."""

    name: str
    peak: dict[str, float]
    mem_bw: float
    tdp_w: float
    link: str
    source: str = "vendor datasheet (fallback table in joulebound/scaling/hardware.py)"
    mem_bytes: float = float("nan")

    def peak_for(self, dtype: str = "fp32") -> float:
        """Dense peak FLOP/s for training in ``dtype``.

        ``fp32`` uses the TF32 tensor-core rate where the GPU has one (Ampere and later), as the
        Mayaki ECAI data does for the A100 (156 TFLOP/s)."""
        dtype = dtype.lower()
        order = {"fp32": ("tf32", "fp32"), "tf32": ("tf32", "fp32"), "fp16": ("fp16", "bf16", "fp32"),
                 "bf16": ("bf16", "fp16", "fp32"), "fp8": ("fp8", "fp16", "bf16")}.get(dtype, (dtype,))
        for k in order:
            if self.peak.get(k):
                return float(self.peak[k])
        raise JouleboundError(f"{self.name}: no peak FLOP/s for dtype {dtype!r}; use one of "
                              f"{', '.join(k for k in ('fp32', 'tf32', 'fp16', 'bf16', 'fp8') if self.peak.get(k))}")


T = 1e12
G = 2**30
_TABLE: dict[str, HW] = {h.name: h for h in [
    HW("rtx2080ti", {"fp32": 13.45 * T, "fp16": 53.8 * T}, 616e9, 250, "pcie3", mem_bytes=11 * G),
    HW("rtx3080", {"fp32": 29.8 * T, "fp16": 59.5 * T, "bf16": 59.5 * T}, 760e9, 320, "pcie4", mem_bytes=10 * G),
    HW("rtx3080ti", {"fp32": 34.1 * T, "fp16": 68.2 * T, "bf16": 68.2 * T}, 912e9, 350, "pcie4", mem_bytes=12 * G),
    HW("rtx3090", {"fp32": 35.6 * T, "fp16": 71.0 * T, "bf16": 71.0 * T}, 936e9, 350, "pcie4", mem_bytes=24 * G),
    HW("rtxa5000", {"fp32": 27.8 * T, "fp16": 55.6 * T, "bf16": 55.6 * T}, 768e9, 230, "pcie4", mem_bytes=24 * G),
    HW("t4", {"fp32": 8.1 * T, "fp16": 65.0 * T}, 320e9, 70, "pcie3", mem_bytes=16 * G),
    HW("a10g", {"fp32": 31.2 * T, "tf32": 35.0 * T, "fp16": 70.0 * T, "bf16": 70.0 * T}, 600e9, 300, "pcie4", mem_bytes=24 * G),
    HW("a40", {"fp32": 37.4 * T, "tf32": 74.8 * T, "fp16": 149.7 * T, "bf16": 149.7 * T}, 696e9, 300, "pcie4", mem_bytes=48 * G),
    HW("v100-sxm2", {"fp32": 15.7 * T, "fp16": 125.0 * T}, 900e9, 300, "nvlink2", mem_bytes=32 * G),
    HW("a100-pcie-80gb", {"fp32": 19.5 * T, "tf32": 156 * T, "fp16": 312 * T, "bf16": 312 * T}, 1.935e12, 300, "pcie4", mem_bytes=80 * G),
    HW("a100-sxm4-80gb", {"fp32": 19.5 * T, "tf32": 156 * T, "fp16": 312 * T, "bf16": 312 * T}, 2.039e12, 400, "nvlink3", mem_bytes=80 * G),
    HW("h100-sxm", {"fp32": 67 * T, "tf32": 494.7 * T, "fp16": 989.4 * T, "bf16": 989.4 * T, "fp8": 1978.9 * T}, 3.35e12, 700, "nvlink4", mem_bytes=80 * G),
    HW("h200-sxm", {"fp32": 67 * T, "tf32": 494.7 * T, "fp16": 989.4 * T, "bf16": 989.4 * T, "fp8": 1978.9 * T}, 4.8e12, 700, "nvlink4", mem_bytes=141 * G),
    HW("b200", {"fp32": 80 * T, "tf32": 1100 * T, "fp16": 2250 * T, "bf16": 2250 * T, "fp8": 4500 * T}, 8e12, 1000, "nvlink5", mem_bytes=192 * G),
]}
_ALIAS = {"2080ti": "rtx2080ti", "3080ti": "rtx3080ti", "3080": "rtx3080", "3090": "rtx3090",
          "a5000": "rtxa5000", "a100": "a100-pcie-80gb", "a100-pcie": "a100-pcie-80gb",
          "a100-sxm": "a100-sxm4-80gb", "a100-sxm4": "a100-sxm4-80gb", "v100": "v100-sxm2",
          "h100": "h100-sxm", "h200": "h200-sxm", "grid": "rtx2080ti"}


def device_names() -> list[str]:
    """Devices the scaling model can price."""
    return sorted(_TABLE)


def get_hw(name: str) -> HW:
    """Hardware figures for ``name`` (case-insensitive, aliases like ``a100``, ``2080ti``).

    Peak, bandwidth and TDP come from the device catalog when it has the device."""
    key = str(name).strip().lower()
    key = _ALIAS.get(key, key)
    try:
        from ..devices.catalog import get_device  # written by the devices helper

        spec = get_device(key)
        key = spec.name
        base = _TABLE.get(key)
        return HW(spec.name, {k: float(v) for k, v in spec.peak_flops.items() if v},
                  float(spec.mem_bandwidth_bps), float(spec.power_limit_default_w),
                  base.link if base else "pcie4", source="joulebound.devices.catalog",
                  mem_bytes=float(spec.memory_bytes) if spec.memory_bytes else
                  (base.mem_bytes if base else float("nan")))
    except (ImportError, AttributeError):
        pass
    except JouleboundError:
        if key not in _TABLE:
            raise
    if key not in _TABLE:
        raise JouleboundError(f"unknown device {name!r}." + did_you_mean(key, list(_TABLE)))
    return _TABLE[key]

# GPUs that appear only in the open data (Zeus NSDI'23): PCIe cards, datasheet figures.
_TABLE.update({h.name: h for h in [
    HW("v100-pcie", {"fp32": 14.0 * T, "fp16": 112.0 * T}, 900e9, 250, "pcie3", mem_bytes=32 * G),
    HW("rtx6000", {"fp32": 16.3 * T, "fp16": 65.2 * T}, 672e9, 260, "pcie3", mem_bytes=24 * G),
    HW("p100-pcie", {"fp32": 9.3 * T, "fp16": 18.7 * T}, 732e9, 250, "pcie3", mem_bytes=16 * G),
]})
