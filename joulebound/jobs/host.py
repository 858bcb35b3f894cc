"""Host (CPU package + DRAM) power while a training job runs: a separate, labeled term.

No open data set in ../shared/data meters host power. The only host figures are the Mayaki ECAI
2025 runs' CodeCarbon CPU and RAM energies (``total_cpu_energy_kWh``, ``total_ram_energy_kWh``),
which CodeCarbon itself estimates (RAPL when readable, else a share of the CPU's TDP; RAM at
3 W per 8 GB). :func:`mayaki_host_watts` turns their shares of the total into watts per GPU
(one GPU per machine there); the predictor charges that per GPU of a job, **modeled**, labeled
"host", never mixed into the GPU energy. Users with a metered host (RAPL, a wall meter) replace it
with ``HostPower(cpu_w, dram_w)``.

This is the one place of the predictor's host-power assumption (the energy meters' own modeled
CPU/DRAM estimate lives with ``joulebound measure``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostPower:
    """CPU and DRAM power (W) charged per GPU of a job for its whole wall time."""

    cpu_w: float
    dram_w: float
    source: str = "assumption"

    @property
    def total_w(self) -> float:
        return self.cpu_w + self.dram_w

    def to_json(self) -> dict:
        return asdict(self)


#: used when no calibration file says otherwise (the Mayaki medians, rounded)
DEFAULT_HOST = HostPower(17.0, 10.0, "Mayaki ECAI 2025 CodeCarbon CPU/RAM shares (CodeCarbon "
                                     "estimates), per GPU")


def mayaki_host_watts(path: str | Path) -> HostPower:
    """Median CPU and RAM power (W) of the Mayaki runs, from CodeCarbon's energy shares × the
    rows' average power (``energy_joules / duration``)."""
    import numpy as np
    import pandas as pd

    p = Path(path)
    if p.is_dir():
        p = p / "SubsetDataForTransformer_energyModel.csv"
    raw = pd.read_csv(p)
    tot = raw["total_energy_kWh"].to_numpy(float)
    watts = (raw["energy_joules"] / raw["duration"]).to_numpy(float)
    cpu = float(np.median(raw["total_cpu_energy_kWh"].to_numpy(float) / tot * watts))
    ram = float(np.median(raw["total_ram_energy_kWh"].to_numpy(float) / tot * watts))
    return HostPower(round(cpu, 2), round(ram, 2),
                     f"median CodeCarbon CPU/RAM share x average power of {len(raw)} Mayaki ECAI 2025 "
                     "runs (CodeCarbon estimates), per GPU")
