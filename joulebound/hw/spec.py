"""``DeviceSpec``: what joulebound knows about one GPU model (clocks, peak rates, power, sources)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from joulebound.core.clocks import ClockConfig, is_supported
from joulebound.core.vocab import ALL_DTYPES

#: dtypes that have a peak rate entry; "fp16" and "bf16" are tensor-core dense rates.
DTYPES = ALL_DTYPES


@dataclass
class DeviceSpec:
    """One GPU model.

    Units: clocks in MHz, rates in FLOP/s, bandwidth in bytes/s, power in W, times in s.

    Attributes:
        name: catalog key, lower case, e.g. ``"rtx3080ti"``.
        product_name: the marketing name as ``nvidia-smi`` prints it.
        architecture: e.g. ``"Ampere"``.
        supported_clocks: memory clock (MHz) -> supported core clocks (MHz), as in
            ``nvidia-smi -q -d SUPPORTED_CLOCKS``.
        default_core_mhz / max_core_mhz: base and top (boost) core clocks.
        default_mem_mhz / max_mem_mhz: default and top memory clocks.
        peak_flops: dtype -> dense peak FLOP/s at ``max_core_mhz``.
        mem_bandwidth_bps: DRAM bandwidth at ``max_mem_mhz`` in bytes/s.
        memory_bytes: DRAM size in bytes.
        sm_count: number of streaming multiprocessors.
        power_limit_default_w / power_limit_min_w / power_limit_max_w: board power limits.
        idle_power_w: board power when idle at default clocks.
        switch_latency_s: published clock-switch latency, ``None`` where none is published.
        sensor_period_s: power/energy sensor update period, ``None`` where unknown.
        vf_curve: optional ``[(core_mhz, relative_voltage), ...]`` (1.0 at the default clock).
        tables_constructed: True when ``supported_clocks`` was built from datasheet ranges with a
            15 MHz step rather than read from a real ``nvidia-smi`` table.
        memory_type: DRAM technology (``"GDDR6X"``, ``"HBM2e"``, ...; ``""`` = unknown): picks
            the memory voltage curve and the memory clocks measured on that technology
            (:mod:`joulebound.hw.memory`).
        boost_core_mhz: the rated (datasheet) boost clock, ``None`` where unknown. GeForce and
            workstation tables reach above it (e.g. 2100 vs 1710 MHz on the RTX 3080); their
            ``peak_flops`` are the datasheet figures scaled from this clock to ``max_core_mhz``.
        interconnect: the GPU-to-GPU link of the usual multi-GPU server for this GPU, a name of
            :data:`joulebound.hw.links.LINKS` (e.g. ``"nvlink3"``, ``"pcie4"``,
            ``"pcie4-nop2p"``); ``None`` where the entry names none (then PCIe 4.0 is assumed).
        sources: field name -> where the value came from (datasheet URL/name, nvidia-smi file,
            paper) or ``"estimate"``.
    """

    name: str
    product_name: str
    architecture: str
    supported_clocks: dict[int, list[int]]
    default_core_mhz: int
    max_core_mhz: int
    default_mem_mhz: int
    max_mem_mhz: int
    peak_flops: dict[str, float]
    mem_bandwidth_bps: float
    power_limit_default_w: float
    power_limit_min_w: float
    power_limit_max_w: float
    idle_power_w: float
    memory_bytes: float = 0.0
    sm_count: int = 0
    switch_latency_s: float | None = None
    sensor_period_s: float | None = None
    vf_curve: list[tuple[int, float]] | None = None
    tables_constructed: bool = False
    boost_core_mhz: int | None = None
    memory_type: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    interconnect: str | None = None

    # -- clock tables -------------------------------------------------------------------------
    @property
    def mem_clocks_mhz(self) -> list[int]:
        """Supported memory clocks, highest first (MHz)."""
        return sorted(self.supported_clocks, reverse=True)

    def core_clocks_mhz(self, mem_mhz: int | None = None) -> list[int]:
        """Supported core clocks at ``mem_mhz`` (default: the top memory clock), highest first."""
        mem = self.max_mem_mhz if mem_mhz is None else mem_mhz
        if mem not in self.supported_clocks:
            raise KeyError(f"{self.name}: memory clock {mem} MHz is not supported "
                           f"(supported: {self.mem_clocks_mhz})")
        return sorted(self.supported_clocks[mem], reverse=True)

    def clock_pairs(self, include_auto: bool = False) -> list[ClockConfig]:
        """Every supported (core, memory) pair, memory clock major, highest first."""
        pairs = [ClockConfig(c, m) for m in self.mem_clocks_mhz for c in self.core_clocks_mhz(m)]
        return ([ClockConfig()] if include_auto else []) + pairs

    def supports(self, config: ClockConfig) -> bool:
        """True when ``config`` is auto or a supported pair (auto in one domain is allowed):
        :func:`joulebound.core.clocks.is_supported` on this card's table."""
        return is_supported(config, self.supported_clocks)

    @property
    def ridge_point(self) -> float:
        """Roofline ridge point for tensor math (bf16, else fp16; FLOP per byte) at top clocks."""
        peak = self.peak_flops.get("bf16") or self.peak_flops.get("fp16") or self.peak_flops["fp32"]
        return peak / self.mem_bandwidth_bps

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype`` at ``max_core_mhz``. A dtype the GPU has no units for
        runs at the rate it falls back to: bf16 without bf16 tensor cores (Volta, Turing, Pascal)
        at the fp32 rate (emulated — not at the fp16 rate, which is another number format),
        tf32 at fp32, fp16 on a card listing only bf16 at bf16."""
        for key in (dtype, {"bf16": "fp32", "fp16": "bf16", "tf32": "fp32"}.get(dtype, ""), "fp32"):
            if key in self.peak_flops:
                return self.peak_flops[key]
        raise KeyError(f"{self.name}: no peak rate for dtype {dtype!r}")

    # -- serialisation ------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["supported_clocks"] = {str(k): v for k, v in self.supported_clocks.items()}
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DeviceSpec:
        d = dict(d)
        d["supported_clocks"] = {int(k): [int(x) for x in v]
                                 for k, v in d["supported_clocks"].items()}
        if d.get("vf_curve") is not None:
            d["vf_curve"] = [(int(a), float(b)) for a, b in d["vf_curve"]]
        return cls(**d)
