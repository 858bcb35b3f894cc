"""GPU interconnects: the links between GPUs in a node and between nodes.

One table (:data:`LINKS`) for every joulebound model that prices communication. Each entry has the
link's nominal per-direction bandwidth **per GPU** (bytes/s), a per-message latency (s) and the
fraction of the nominal bandwidth NCCL collectives typically reach on it (``nccl_eff``). Catalog
GPUs name their intra-node link in the ``interconnect`` field of their TOML entry
(:mod:`joulebound.hw.catalog`); jobs can override it (``joulebound predict --interconnect``,
``--inter-node``).

Sources of the figures:

* bandwidths are the published link rates: PCIe 3.0/4.0/5.0 x16 = 8/16/32 GT/s × 16 lanes ×
  128/130 encoding (15.75/31.5/63 GB/s per direction); NVLink 1–5 per-GPU totals from NVIDIA's
  P100/V100/A100/H100/B200 datasheets (80/150/300/450/900 GB/s per direction); the NVLink bridges
  of GeForce/workstation pairs (RTX 2080 Ti 50 GB/s, RTX 3090/A40/A6000 112.5 GB/s bidirectional);
  InfiniBand EDR/HDR/NDR 100/200/400 Gb/s and Ethernet 10/25/100/400 Gb/s per NIC;
* **fitted** links (``nvlink4``, ``pcie3-nop2p``, ``eth-10g``; ``pcie4-nop2p`` / ``pcie5-nop2p``
  scaled from ``pcie3-nop2p`` by the link rate): their collectives are priced by the two-protocol
  model of :mod:`joulebound.hw.nccl`, calibrated on measured NCCL tables (H100 / H200 NVSwitch
  nodes, a V100 PCIe cluster; ``joulebound/hw/data/nccl_fit.json``). Their ``nccl_eff`` and
  ``latency_s`` here are read from that fit (:func:`_fitted`): ``nccl_eff`` = the fitted
  large-message all-reduce bus bandwidth / the nominal rate, ``latency_s`` = the fitted
  small-message (LL protocol) latency per ring step. The measured V100 PCIe node reaches 3–4.5
  GB/s of bus bandwidth (~30 % of PCIe 3.0 x16), as when NCCL stages through host memory, so
  its fit prices the ``-nop2p`` links; the measured cluster network (~1.2 GB/s over NCCL
  sockets) prices ``eth-10g``.
* every other link (``nvlink1``–``nvlink3``, ``nvlink5``, bridges, PCIe with peer-to-peer,
  InfiniBand, faster Ethernet): the data does not cover it; ``nccl_eff`` and ``latency_s`` are
  **datasheet-based estimates**: nccl-tests bus bandwidths reported for these links are
  typically 75–85 % of the nominal rate within a node and ~90 % on InfiniBand; per-step
  latencies of a few µs (NVLink) to tens of µs (PCIe, TCP). Their collectives are the α–β
  formulas of :mod:`joulebound.jobs.collectives` plus the fitted launch cost per collective.
  They carry the interval of every communication-bound prediction (see
  :mod:`joulebound.jobs.mechanistic`).
* ``-nop2p`` variants: PCIe without peer-to-peer (GeForce cards on most drivers, GPUs under
  different CPU sockets): NCCL stages through host memory (SHM transport).

Units: bytes/s, s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from joulebound.core.errors import JouleboundError, did_you_mean
from joulebound.hw.nccl import CollectiveFit, NetFit, shipped_fits


@dataclass(frozen=True)
class Link:
    """One interconnect.

    Attributes:
        name: table key, e.g. ``"nvlink3"``, ``"pcie4-nop2p"``, ``"ib-hdr"``.
        kind: ``"pcie"`` | ``"nvlink"`` | ``"infiniband"`` | ``"ethernet"``.
        bandwidth_bps: nominal bandwidth per direction per GPU (intra-node) or per NIC
            (inter-node), bytes/s.
        latency_s: per-message (per ring step) latency, s.
        nccl_eff: fraction of ``bandwidth_bps`` NCCL collectives reach (estimate).
        scope: ``"intra"`` (GPUs of one node) or ``"inter"`` (between nodes).
        p2p: False when GPUs cannot reach each other directly (staged through host memory).
        max_gpus: largest group the link joins directly (NVLink bridges join 2), None = any.
        note: where the figures come from.
    """

    name: str
    kind: str
    bandwidth_bps: float
    latency_s: float
    nccl_eff: float
    scope: str
    p2p: bool = True
    max_gpus: int | None = None
    note: str = ""

    @property
    def effective_bps(self) -> float:
        """Bandwidth a collective reaches on this link (bytes/s): nominal × ``nccl_eff``."""
        return self.bandwidth_bps * self.nccl_eff

    def to_json(self) -> dict:
        return asdict(self)


_GB = 1e9
_Gb = 1e9 / 8
_EST = "nccl_eff and latency: estimate (typical nccl-tests bus bandwidth)"

LINKS: dict[str, Link] = {k.name: k for k in [
    Link("pcie3", "pcie", 15.75 * _GB, 10e-6, 0.80, "intra",
         note=f"PCIe 3.0 x16, 8 GT/s x 16 lanes x 128/130 = 15.75 GB/s per direction; {_EST}"),
    Link("pcie4", "pcie", 31.5 * _GB, 8e-6, 0.80, "intra",
         note=f"PCIe 4.0 x16, 31.5 GB/s per direction; {_EST}"),
    Link("pcie5", "pcie", 63.0 * _GB, 6e-6, 0.80, "intra",
         note=f"PCIe 5.0 x16, 63 GB/s per direction; {_EST}"),
    Link("pcie3-nop2p", "pcie", 15.75 * _GB, 20e-6, 0.40, "intra", p2p=False,
         note="PCIe 3.0 x16 without peer-to-peer: NCCL stages through host memory"),
    Link("pcie4-nop2p", "pcie", 31.5 * _GB, 16e-6, 0.40, "intra", p2p=False,
         note="PCIe 4.0 x16 without peer-to-peer (GeForce drivers, GPUs under different CPU "
              "sockets): staged through host memory"),
    Link("pcie5-nop2p", "pcie", 63.0 * _GB, 12e-6, 0.40, "intra", p2p=False,
         note="PCIe 5.0 x16 without peer-to-peer: staged through host memory"),
    Link("nvlink1", "nvlink", 80 * _GB, 5e-6, 0.80, "intra",
         note=f"NVLink 1 (P100 SXM2), 4 links x 20 GB/s per direction; {_EST}"),
    Link("nvlink2", "nvlink", 150 * _GB, 3e-6, 0.80, "intra",
         note=f"NVLink 2 (V100 SXM2), 300 GB/s bidirectional; {_EST}"),
    Link("nvlink3", "nvlink", 300 * _GB, 3e-6, 0.80, "intra",
         note=f"NVLink 3 + NVSwitch (A100 SXM4), 600 GB/s bidirectional; {_EST}"),
    Link("nvlink4", "nvlink", 450 * _GB, 2e-6, 0.80, "intra",
         note="NVLink 4 + NVSwitch (H100/H200 SXM), 900 GB/s bidirectional"),
    Link("nvlink5", "nvlink", 900 * _GB, 2e-6, 0.80, "intra",
         note=f"NVLink 5 (B200), 1.8 TB/s bidirectional; {_EST}"),
    Link("nvlink2-bridge", "nvlink", 25 * _GB, 4e-6, 0.80, "intra", max_gpus=2,
         note=f"NVLink bridge of an RTX 2080 Ti pair, 50 GB/s bidirectional; {_EST}"),
    Link("nvlink3-bridge", "nvlink", 56.25 * _GB, 4e-6, 0.80, "intra", max_gpus=2,
         note=f"NVLink bridge of an RTX 3090 / A40 / A6000 pair, 112.5 GB/s bidirectional; {_EST}"),
    Link("ib-edr", "infiniband", 100 * _Gb, 5e-6, 0.90, "inter",
         note=f"InfiniBand EDR, 100 Gb/s per NIC; {_EST}"),
    Link("ib-hdr", "infiniband", 200 * _Gb, 5e-6, 0.90, "inter",
         note=f"InfiniBand HDR, 200 Gb/s per NIC; {_EST}"),
    Link("ib-ndr", "infiniband", 400 * _Gb, 5e-6, 0.90, "inter",
         note=f"InfiniBand NDR, 400 Gb/s per NIC; {_EST}"),
    Link("eth-10g", "ethernet", 10 * _Gb, 50e-6, 0.60, "inter",
         note="10 Gb Ethernet, NCCL over TCP sockets"),
    Link("eth-25g", "ethernet", 25 * _Gb, 40e-6, 0.60, "inter",
         note="25 Gb Ethernet, NCCL over TCP sockets (estimate)"),
    Link("eth-100g", "ethernet", 100 * _Gb, 10e-6, 0.85, "inter",
         note=f"100 Gb Ethernet with RoCE; {_EST}"),
    Link("eth-400g", "ethernet", 400 * _Gb, 8e-6, 0.85, "inter",
         note=f"400 Gb Ethernet with RoCE; {_EST}"),
]}


def _fitted(link: Link) -> Link:
    """``link`` with ``nccl_eff`` and ``latency_s`` read from its shipped collective fit (the
    all-reduce's Simple bus bandwidth / nominal, its LL latency per step), or unchanged (its
    note then says the figures are estimates) when the measured tables do not cover it."""
    fit = shipped_fits().get(link.name)
    ar = fit.collectives.get("all_reduce") if fit else None
    if not isinstance(ar, (CollectiveFit, NetFit)):
        return link if _EST in link.note or "estimate" in link.note else replace(
            link, note=f"{link.note}; nccl_eff and latency: estimate")
    src = ("scaled from the PCIe 3.0 host-staged fit by the link rate" if ar.source == "scaled"
           else "calibrated on measured NCCL tables (microsoft/apex_plus @ 8769096)")
    return replace(link, nccl_eff=round(ar.simple.bw_bps / link.bandwidth_bps, 4),
                   latency_s=float(f"{ar.ll.alpha_s:.3g}"),
                   note=f"{link.note}; collectives from the fit in joulebound/hw/data/nccl_fit.json "
                        f"({fit.system if fit else ''}; {src}): nccl_eff = all-reduce bus "
                        "bandwidth / nominal, latency_s = LL latency per ring step")


LINKS = {k: _fitted(v) for k, v in LINKS.items()}

#: intra-node link assumed for a GPU whose catalog entry names none
DEFAULT_INTRA = "pcie4"
#: inter-node link assumed when a job spans nodes and none is given
DEFAULT_INTER = "ib-hdr"

_ALIASES = {"pcie": "pcie4", "nvlink": "nvlink3", "ib": "ib-hdr", "infiniband": "ib-hdr",
            "ethernet": "eth-25g", "eth": "eth-25g", "roce": "eth-100g", "hdr": "ib-hdr",
            "ndr": "ib-ndr", "edr": "ib-edr"}


def get_link(name: str, scope: str | None = None) -> Link:
    """The link called ``name`` (case-insensitive; ``pcie-gen4`` / ``PCIe 4.0`` spellings work).

    ``scope`` (``"intra"`` / ``"inter"``) refuses a link used where it cannot be, e.g. NVLink
    between nodes. Unknown names raise :class:`JouleboundError` listing the choices."""
    key = str(name).strip().lower().replace(" ", "").replace("_", "-").replace(".0", "")
    key = key.replace("gen", "").replace("pcie-", "pcie").replace("pcie-3", "pcie3")
    key = _ALIASES.get(key, key)
    if key not in LINKS:
        raise JouleboundError(f"unknown interconnect {name!r}." + did_you_mean(key, list(LINKS)))
    link = LINKS[key]
    if scope is not None and link.scope != scope:
        where = "between nodes" if scope == "inter" else "between the GPUs of one node"
        choices = sorted(k for k, v in LINKS.items() if v.scope == scope)
        raise JouleboundError(f"interconnect {link.name!r} ({link.kind}) cannot be used {where}; "
                              f"choose one of {', '.join(choices)}")
    return link


def link_names(scope: str | None = None) -> list[str]:
    """Names in :data:`LINKS` (optionally only ``"intra"`` or ``"inter"`` links)."""
    return sorted(k for k, v in LINKS.items() if scope is None or v.scope == scope)
