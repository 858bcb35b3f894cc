"""Results of the energy meter: one device's energy in a window, and one finished window.

Plain data (no behaviour beyond derived properties), shared by the meter
(:mod:`~joulebound.energy.meter`), the store (:mod:`~joulebound.energy.store`), the multi-rank
aggregation (:mod:`~joulebound.energy.distributed`) and the exporters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..provenance import MODELED


@dataclass
class DeviceEnergy:
    """Energy of one device in one window.

    Attributes:
        uuid: physical device identity (counts each GPU once across ranks).
        index: device index as the user names it (CUDA-visible index for GPUs).
        energy_j: energy (J), ``None`` when it could not be measured.
        avg_power_w: ``energy_j / duration_s`` (W), ``None`` for zero-length windows.
        peak_power_w: highest sampled power in the window (W), ``None`` without power reads.
        source: e.g. ``"nvml.energy_counter"``, ``"nvml.power_integration"``, ``"simulated"``.
        kind: ``"gpu"``, ``"cpu"`` or ``"dram"``.
        n_samples: power samples that fell in the window.
        provenance: ``"measured"`` or ``"modeled"`` for this device ("" in stores written
            before the field existed: then the window's).
        uncertainty_j: bound of the error of ``energy_j`` (J) from the sensor's update period and
            any unmeasured gap; ``None`` when ``energy_j`` is.
    """

    uuid: str
    index: int
    energy_j: float | None
    avg_power_w: float | None
    peak_power_w: float | None
    source: str
    kind: str = "gpu"
    n_samples: int = 0
    provenance: str = ""
    uncertainty_j: float | None = None


@dataclass
class WindowResult:
    """One finished window.

    Attributes:
        name: the window name.
        start_s / end_s: edges (s, Unix epoch, from a monotonic clock).
        duration_s: ``end_s - start_s`` (s), always measured.
        energy_j: total GPU energy (J) over ``devices`` of kind ``"gpu"``; ``None`` when there is
            no GPU sensor (never 0 for "unknown").
        devices: per-device results.
        provenance: of the GPU energy ``energy_j``: ``"measured"`` (sensor), ``"modeled"``
            (simulated backend) or what a replayed log says. Without a sensor only the duration
            exists, which is measured. The CPU/DRAM figure has its own
            :attr:`cpu_provenance`.
        flags: see the module docstring.
        cpu_energy_j: CPU + DRAM energy (J): from RAPL (measured) or the TDP model
            (modeled, see :mod:`~joulebound.energy.cpu_model`), ``None`` when neither.
        rank / host: where it was measured (for :func:`~joulebound.energy.distributed.aggregate`).
        backend: backend name.
        energy_uncertainty_j: bound of the error of ``energy_j`` (J), the sum over GPUs of
            :attr:`DeviceEnergy.uncertainty_j`; ``None`` when ``energy_j`` is.
    """

    name: str
    start_s: float
    end_s: float
    duration_s: float
    energy_j: float | None
    devices: list[DeviceEnergy]
    provenance: str
    flags: list[str] = field(default_factory=list)
    cpu_energy_j: float | None = None
    rank: int = 0
    host: str = ""
    backend: str = ""
    energy_uncertainty_j: float | None = None

    @property
    def avg_power_w(self) -> float | None:
        """Average GPU power over the window (W)."""
        if self.energy_j is None or self.duration_s <= 0:
            return None
        return self.energy_j / self.duration_s

    @property
    def cpu_provenance(self) -> str | None:
        """Provenance of :attr:`cpu_energy_j` (``None`` without CPU/DRAM channels)."""
        provs = {d.provenance or self.provenance for d in self.devices if d.kind != "gpu"}
        if not provs:
            return None
        return provs.pop() if len(provs) == 1 else MODELED

    @property
    def peak_power_w(self) -> float | None:
        """Sum over GPUs of each GPU's peak power (W) — an upper bound of the job's peak."""
        peaks = [d.peak_power_w for d in self.devices if d.kind == "gpu"]
        if not peaks or any(p is None for p in peaks):
            return None
        return float(sum(peaks))  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WindowResult:
        d = dict(d)
        d["devices"] = [DeviceEnergy(**x) for x in d.get("devices", [])]
        return cls(**d)
