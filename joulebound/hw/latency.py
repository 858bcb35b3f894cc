"""The clock-switch latency of a catalog GPU, with where it comes from.

Every built-in catalog entry carries ``switch_latency_s`` and a ``sources.switch_latency_s`` text.
A source that says "estimate" marks a value nobody measured on that GPU (e.g. the NVML set-call
time, or a sibling chip's figure); otherwise the value is published (the H200's 6 ms is a GH200
measurement cited for Hopper by Spaan et al.; the source text says so).
"""

from __future__ import annotations

from dataclasses import dataclass

from joulebound.core.provenance import MODELED, PUBLISHED
from joulebound.hw.spec import DeviceSpec

#: what a latency nobody measured on that GPU is (its provenance is ``modeled``: one vocabulary)
ESTIMATE = "estimate"


@dataclass(frozen=True)
class SwitchLatency:
    """A device's clock-switch latency.

    Attributes:
        seconds: the latency (s).
        provenance: ``"published"``, or ``"modeled"`` for an estimate (the one vocabulary of
            :mod:`joulebound.core.provenance`; :attr:`kind` says "estimate").
        source: the catalog's source text (citation or how the estimate was made).
        device: the catalog name.
    """

    seconds: float
    provenance: str
    source: str
    device: str

    @property
    def kind(self) -> str:
        """``"published"`` or ``"estimate"`` (a modeled figure nobody measured on this GPU)."""
        return ESTIMATE if self.provenance == MODELED else PUBLISHED

    def describe(self) -> str:
        """``"20 ms (modeled: an estimate for rtx3080ti)"``, ``"6 ms (published for h200-sxm)"``."""
        if self.provenance == MODELED:
            return f"{self.seconds * 1e3:g} ms ({MODELED}: an estimate for {self.device})"
        return f"{self.seconds * 1e3:g} ms ({self.provenance} for {self.device})"


def device_switch_latency(device: str | DeviceSpec) -> SwitchLatency | None:
    """The catalog's switch latency of ``device`` (a name or a spec); ``None`` when the entry has
    none (user-imported entries may lack it). Unknown names raise the catalog's error."""
    if isinstance(device, DeviceSpec):
        spec = device
    else:
        from joulebound.hw.catalog import get_device

        spec = get_device(device)
    if spec.switch_latency_s is None:
        return None
    src = spec.sources.get("switch_latency_s", "")
    prov = MODELED if (not src or "estimate" in src.lower()) else PUBLISHED
    return SwitchLatency(float(spec.switch_latency_s), prov, src, spec.name)
