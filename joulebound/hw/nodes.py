"""The integrated GPU nodes (NVIDIA HGX / DGX) that the catalog's SXM GPUs come in: what a node
adds around its GPUs, from the DGX datasheets (cited per field). One home for these facts: the
job predictor's host power (:func:`joulebound.jobs.host.node_host`) and its default network
between nodes (:func:`joulebound.jobs.mechanistic.fabric_for`) read them.

A PCIe GPU goes into servers of every kind: no node is assumed for it (the calibration's CPU +
DRAM figure, one HDR NIC per node unless ``--inter-node`` / ``--nics-per-node`` say otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    """An 8-GPU HGX / DGX node generation.

    Attributes:
        name: e.g. ``"DGX H100"``.
        rated_kw: the system's rated maximum power (kW, DGX datasheet).
        gpu_board_w: one GPU's board power (W, its datasheet TDP).
        cpu_tdp_w: the node's CPUs' TDP (W, sum over sockets).
        nic: the compute-fabric link of each NIC (a :mod:`joulebound.hw.links` name).
        nics: compute-fabric NICs per node.
        source: the datasheet figures used.
    """

    name: str
    rated_kw: float
    gpu_board_w: float
    cpu_tdp_w: float
    nic: str
    nics: int
    source: str

    @property
    def rest_rated_kw(self) -> float:
        """Rated power of everything but the 8 GPU boards (kW)."""
        return self.rated_kw - 8 * self.gpu_board_w / 1e3


DGX_H100 = Node("DGX H100", 10.2, 700.0, 2 * 350.0, "ib-ndr", 8,
                "NVIDIA DGX H100 datasheet: 10.2 kW max, 2× Xeon Platinum 8480C, 8× ConnectX-7 "
                "400 Gb/s (compute fabric)")
DGX_A100 = Node("DGX A100", 6.5, 400.0, 2 * 225.0, "ib-hdr", 8,
                "NVIDIA DGX A100 datasheet: 6.5 kW max, 2× EPYC 7742, 8× ConnectX-6 200 Gb/s")
DGX_B200 = Node("DGX B200", 14.3, 1000.0, 2 * 350.0, "ib-ndr", 8,
                "NVIDIA DGX B200 datasheet: ~14.3 kW max, 2× Xeon Platinum 8570, 8× ConnectX-7 "
                "400 Gb/s")
DGX1_V100 = Node("DGX-1 V100", 3.5, 300.0, 2 * 135.0, "ib-edr", 4,
                 "NVIDIA DGX-1 datasheet: 3.5 kW max, 2× Xeon E5-2698 v4, 4× EDR 100 Gb/s")

#: the catalog's SXM GPUs and the node they come in
NODES: dict[str, Node] = {"h100-sxm": DGX_H100, "h200-sxm": DGX_H100, "a100-sxm4-80gb": DGX_A100,
                          "a100-sxm4-40gb": DGX_A100, "b200": DGX_B200, "v100-sxm2": DGX1_V100}


def node_of(device: str) -> Node | None:
    """The HGX / DGX node a catalog GPU (canonical name) comes in, or ``None`` (PCIe cards)."""
    return NODES.get(device)
