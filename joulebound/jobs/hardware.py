"""The few hardware numbers the scaling model needs: peak FLOP/s, DRAM bandwidth, board power and
the GPU-to-GPU link.

Peak, bandwidth, board power and memory size come from the device catalog
(``joulebound.hw.catalog.get_device``, one table of GPUs for all of joulebound, including the
three PCIe GPUs of the Zeus NSDI'23 traces: ``v100-pcie``, ``rtx6000``, ``p100-pcie``).
:data:`LINKS` keeps the interconnect the *legacy* energy laws' communication model
(:mod:`joulebound.jobs.comm`) assumes for each GPU, so that their reproductions do not move;
the mechanistic predictor uses the catalog's own ``interconnect`` field
(:mod:`joulebound.hw.links`).
"""

from __future__ import annotations

from dataclasses import dataclass

from joulebound.core.errors import JouleboundError


@dataclass(frozen=True)
class HW:
    """Per-GPU figures: ``peak`` FLOP/s by dtype, ``mem_bw`` bytes/s, ``tdp_w`` W, ``link`` name,
    ``mem_bytes`` DRAM size (bytes; NaN when unknown)."""

    name: str
    peak: dict[str, float]
    mem_bw: float
    tdp_w: float
    link: str
    source: str = "vendor datasheet (fallback table in joulebound/jobs/hardware.py)"
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



#: GPU-to-GPU link the legacy laws assume for each catalog GPU (default ``pcie4``).
LINKS: dict[str, str] = {
    "rtx2080ti": "pcie3", "rtx3080": "pcie4", "rtx3080ti": "pcie4", "rtx3090": "pcie4",
    "rtxa5000": "pcie4", "t4": "pcie3", "a10g": "pcie4", "a40": "pcie4", "v100-sxm2": "nvlink2",
    "a100-pcie-80gb": "pcie4", "a100-sxm4-80gb": "nvlink3", "h100-sxm": "nvlink4",
    "h200-sxm": "nvlink4", "b200": "nvlink5", "v100-pcie": "pcie3", "rtx6000": "pcie3",
    "p100-pcie": "pcie3",
}
DEFAULT_LINK = "pcie4"
#: names that only the open data uses (Mayaki ECAI's "grid" machine is an RTX 2080 Ti); every
#: other name and alias (``a100``, ``3080ti``, product names) is the device catalog's.
_ALIAS = {"grid": "rtx2080ti"}


def device_names() -> list[str]:
    """Devices the scaling model can price: the device catalog's."""
    from joulebound.hw.catalog import device_names as catalog_names

    return sorted(catalog_names())


def get_hw(name: str) -> HW:
    """Hardware figures for ``name`` (case-insensitive; the catalog's aliases like ``a100``,
    ``2080ti`` and product names).

    Peak, bandwidth, TDP and memory come from the device catalog."""
    from joulebound.hw.catalog import get_device

    key = str(name).strip().lower()
    key = _ALIAS.get(key, key)
    spec = get_device(key)  # unknown names: the catalog's error, listing its GPUs
    return HW(spec.name, {k: float(v) for k, v in spec.peak_flops.items() if v},
              float(spec.mem_bandwidth_bps), float(spec.power_limit_default_w),
              LINKS.get(spec.name, DEFAULT_LINK), source="joulebound.hw.catalog",
              mem_bytes=float(spec.memory_bytes) if spec.memory_bytes else float("nan"))
