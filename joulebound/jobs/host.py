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

from joulebound.hw.nodes import DGX_H100, node_of


@dataclass(frozen=True)
class HostPower:
    """Power of the node around a GPU (W per GPU), charged for the job's whole wall time: CPU,
    DRAM and — for integrated GPU nodes — the rest of the node (``other_w``: fans, NVSwitches,
    NICs, power-supply losses)."""

    cpu_w: float
    dram_w: float
    source: str = "assumption"
    other_w: float = 0.0

    @property
    def total_w(self) -> float:
        return self.cpu_w + self.dram_w + self.other_w

    def to_json(self) -> dict:
        return asdict(self)


#: used when no calibration file says otherwise (the Mayaki medians, rounded)
DEFAULT_HOST = HostPower(17.0, 10.0, "Mayaki ECAI 2025 CodeCarbon CPU/RAM shares (CodeCarbon "
                                     "estimates), per GPU")


#: an 8-GPU HGX H100 node measured at 8.4 kW peak while training Llama2-13b with its GPUs near
#: full utilization (Latif et al., IEEE Access 13:61740, 2025; arXiv 2412.08602), published; minus
#: 8 × 700 W GPU boards = 2.8 kW of CPUs, DRAM, fans, NVSwitches, NICs and power supplies: 350 W
#: per GPU at full load (an upper figure: the GPUs' share at the peak is their board limit)
HGX_H100_PEAK_KW = 8.4
HGX_H100_REST_W = (HGX_H100_PEAK_KW * 1e3 - 8 * DGX_H100.gpu_board_w) / 8
def node_host(device: str, default: HostPower) -> HostPower:
    """The host power per GPU of ``device``'s node: an HGX / DGX node's non-GPU power (H100:
    published measurement; other generations scaled by their datasheets' non-GPU rating,
    :mod:`joulebound.hw.nodes`; estimate), else ``default`` (the workstation / PCIe-server CPU +
    DRAM figure of the calibration)."""
    node = node_of(device)
    if node is None:
        return default
    rest = HGX_H100_REST_W * node.rest_rated_kw / DGX_H100.rest_rated_kw
    cpu = min(node.cpu_tdp_w / 8, rest)  # the CPUs' TDP per GPU; the rest: DRAM, fans, switches
    how = ("published: 8×H100 HGX node at 8.4 kW training Llama2-13b (Latif et al. 2025) minus "
           "the GPU boards" if node is DGX_H100 else
           f"estimate: the H100 HGX figure scaled by the {node.name} datasheet's non-GPU rating")
    return HostPower(round(cpu, 1), 0.0, f"{how}; CPUs, DRAM, fans, NVSwitches, NICs, power supplies "
                     "per GPU of an HGX node", round(rest - cpu, 1))


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
