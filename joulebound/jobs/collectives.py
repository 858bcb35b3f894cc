"""Time of NCCL collectives on a GPU fabric, and every collective of a job's step; pure functions.

A job prices its collectives with :meth:`Fabric.collective`: on links the measured NCCL tables
cover (``nvlink4``, ``pcie3/4/5-nop2p``, ``eth-10g``, see :mod:`joulebound.hw.links`) by the fitted
two-protocol model of :mod:`joulebound.hw.nccl` (launch cost + the faster of NCCL's LL and Simple
protocols, per-step latency, bus bandwidth, the local share, the node crossing through the NIC);
on every other link by the α–β model below plus the fitted launch cost per collective.

The α–β model (datasheet links inside one node; the public functions below, which the energy laws
also use), per collective over ``n`` GPUs with per-GPU effective bandwidth ``B`` (bytes/s,
nominal × NCCL efficiency, :class:`~joulebound.hw.links.Link`) and per-step latency ``α``:

==================  ============================================================================
collective           time (s) for a buffer of ``S`` bytes
==================  ============================================================================
all-reduce (ring)    2·(n−1)/n · S/B + 2·(n−1)·α
all-reduce (tree)    2 · S/B + 2·⌈log₂ n⌉·α       (double binary tree; wins for small S, large n)
all-reduce           min(ring, tree) — NCCL picks the faster algorithm per size
all-gather           (n−1)/n · S/B + (n−1)·α      (S = the gathered, full-size buffer)
reduce-scatter       (n−1)/n · S/B + (n−1)·α      (S = the full-size input buffer)
send / recv          S/B + α                      (pipeline stage boundary)
==================  ============================================================================

A group of GPUs lies inside one node when it fits (:meth:`Fabric.group`); otherwise its ring
crosses the node's NICs, which every group with members on that node shares: the ring's steps
that cross nodes pay the network's latency, the others the node link's, and the bytes through the
NIC run at ``nics·B_nic / groups sharing the NIC`` (:func:`joulebound.hw.nccl.collective_time`,
with the datasheet figures of a link the tables do not cover). :meth:`Fabric.group` gives the
plain α–β view of a group: ``min(B_intra, nics·B_nic·eff / groups sharing the NIC)`` and the larger
latency. Ranks are placed Megatron-style: tensor-parallel ranks adjacent (stride 1), then
data-parallel, then pipeline stages (outermost).

FSDP's and DDP's host work (hooks, unshard / reshard bookkeeping) is not here: it is measured
per layer in :data:`joulebound.workload.dispatch.WRAPPER_UNIT_KERNELS` and enters the layers'
host bound in the predictor.

Everything here is **modeled**; the link figures and their sources are in
:mod:`joulebound.hw.links` and :mod:`joulebound.hw.nccl`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from joulebound.core.errors import JouleboundError
from joulebound.hw.links import DEFAULT_INTER, DEFAULT_INTRA, Link, get_link
from joulebound.hw.nccl import (
    CollectiveFit,
    NetFit,
    Protocol,
    collective_time,
    default_launch_s,
    link_fit,
    scale_bandwidth,
)

if TYPE_CHECKING:  # pragma: no cover - the job description comes first; only its type here
    from joulebound.jobs.job import Resolved

#: PyTorch DDP's gradient bucket (bytes)
DDP_BUCKET_BYTES = 25 * 2**20


def allreduce_ring(size: float, n: int, bw: float, lat: float) -> float:
    """Ring all-reduce time (s) of ``size`` bytes over ``n`` GPUs."""
    if n <= 1 or size <= 0:
        return 0.0
    return 2.0 * (n - 1) / n * size / bw + 2.0 * (n - 1) * lat


def allreduce_tree(size: float, n: int, bw: float, lat: float) -> float:
    """Double-binary-tree all-reduce time (s)."""
    if n <= 1 or size <= 0:
        return 0.0
    return 2.0 * size / bw + 2.0 * math.ceil(math.log2(n)) * lat


def allreduce(size: float, n: int, bw: float, lat: float) -> float:
    """All-reduce time (s): the faster of ring and tree (as NCCL's tuner picks)."""
    return min(allreduce_ring(size, n, bw, lat), allreduce_tree(size, n, bw, lat))


def allgather(size: float, n: int, bw: float, lat: float) -> float:
    """Ring all-gather time (s); ``size`` is the full gathered buffer (bytes)."""
    if n <= 1 or size <= 0:
        return 0.0
    return (n - 1) / n * size / bw + (n - 1) * lat


def reduce_scatter(size: float, n: int, bw: float, lat: float) -> float:
    """Ring reduce-scatter time (s); ``size`` is the full input buffer (bytes)."""
    return allgather(size, n, bw, lat)


def sendrecv(size: float, bw: float, lat: float) -> float:
    """Point-to-point transfer time (s) of ``size`` bytes."""
    return 0.0 if size <= 0 else size / bw + lat


@dataclass(frozen=True)
class Fabric:
    """The links a job's GPUs talk over.

    Attributes:
        intra: link between the GPUs of one node.
        inter: link between nodes (NIC), used when a group spans nodes.
        gpus_per_node: GPUs per node (the job's GPUs fill nodes in order).
        nics_per_node: NICs of ``inter`` per node.
        eff_scale: multiplier on every link's NCCL efficiency (1 = the table's estimate).
    """

    intra: Link
    inter: Link
    gpus_per_node: int = 8
    nics_per_node: int = 1
    eff_scale: float = 1.0

    @classmethod
    def make(cls, intra: str | None = None, inter: str | None = None, gpus_per_node: int = 8,
             nics_per_node: int = 1, eff_scale: float = 1.0) -> Fabric:
        """A fabric from link names (defaults: PCIe 4.0 inside a node, InfiniBand HDR between)."""
        if gpus_per_node < 1 or nics_per_node < 1:
            raise JouleboundError(f"--gpus-per-node and NICs per node must be >= 1 (got "
                                  f"{gpus_per_node}, {nics_per_node})")
        return cls(get_link(intra or DEFAULT_INTRA, "intra"), get_link(inter or DEFAULT_INTER, "inter"),
                   int(gpus_per_node), int(nics_per_node), float(eff_scale))

    def nodes(self, gpus: int) -> int:
        """Nodes a job of ``gpus`` GPUs occupies."""
        return max(1, math.ceil(gpus / self.gpus_per_node))

    def group(self, n: int, stride: int = 1) -> tuple[float, float, bool]:
        """(bandwidth B/s, latency s, spans nodes) of a group of ``n`` ranks ``stride`` apart: the
        α–β view (the link table's effective bandwidth and per-step latency); jobs price their
        collectives with :meth:`collective`."""
        intra_bw = self.intra.effective_bps * self.eff_scale
        if n <= 1:
            return intra_bw, self.intra.latency_s, False
        g = self.gpus_per_node
        if n * stride <= g:
            if self.intra.max_gpus is not None and n > self.intra.max_gpus:
                raise JouleboundError(f"interconnect {self.intra.name!r} joins at most "
                                      f"{self.intra.max_gpus} GPUs, the job has groups of {n} "
                                      "in a node; pass --interconnect pcie3/pcie4 or fewer GPUs")
            return intra_bw, self.intra.latency_s, False
        members = max(1, min(n, g // stride)) if stride < g else 1
        sharing = max(1, g // members)
        nic_bw = self.nics_per_node * self.inter.effective_bps * self.eff_scale / sharing
        return min(intra_bw, nic_bw), max(self.intra.latency_s, self.inter.latency_s), True

    def _span(self, n: int, stride: int) -> tuple[int, float]:
        """(nodes a group of ``n`` ranks ``stride`` apart spans, groups sharing each NIC per NIC)."""
        g = self.gpus_per_node
        if n * stride <= g:
            return 1, 1.0
        members = max(1, min(n, g // stride)) if stride < g else 1
        return math.ceil(n / members), max(1, g // members) / self.nics_per_node

    def _intra_fit(self, coll: str) -> CollectiveFit:
        return _intra_fit(self.intra, coll, self.eff_scale)

    def _net_fit(self, coll: str) -> NetFit:
        return _net_fit(self.inter, coll, self.eff_scale)

    def fitted(self, coll: str = "all_reduce") -> bool:
        """Whether the fabric's intra-node link has a fit on measured NCCL tables for ``coll``."""
        return isinstance(link_fit(self.intra.name, coll), CollectiveFit)

    def launch_s(self, coll: str) -> float:
        """Host + launch cost of one ``coll`` (s): the fitted one, else the fitted systems'
        median."""
        return self._intra_fit(coll).launch_s

    def collective(self, coll: str, size: float, n: int, stride: int = 1) -> float:
        """Modeled time (s) of one ``coll`` (``all_reduce``, ``all_gather``, ``reduce_scatter``,
        ``alltoall``, ``sendrecv``) of a ``size``-byte buffer over a group of ``n`` ranks
        ``stride`` apart: the fitted model where the tables cover the links, else the α–β
        formulas of this module plus the launch cost. 0 for one rank or an empty buffer."""
        if n <= 1 or size <= 0:
            return 0.0
        bw, lat, _ = self.group(n, stride)  # validates the group (bridges join 2 GPUs)
        nodes, share = self._span(n, stride)
        fi = self._intra_fit(coll)
        if nodes > 1 or fi.source != "datasheet":
            return collective_time(coll, size, n, fi, nodes, self._net_fit(coll) if nodes > 1
                                   else None, share)
        # a datasheet link inside one node: today's α–β (ring/tree all-reduce) + launch
        if coll == "all_reduce":
            t = allreduce(size, n, bw, lat)
        elif coll == "sendrecv":
            t = sendrecv(size, bw, lat)
        else:
            t = allgather(size, n, bw, lat)
        return fi.launch_s + t

    def to_json(self) -> dict:
        return {"intra": self.intra.name, "inter": self.inter.name,
                "gpus_per_node": self.gpus_per_node, "nics_per_node": self.nics_per_node,
                "eff_scale": self.eff_scale}


@lru_cache(maxsize=1024)
def _intra_fit(link: Link, coll: str, eff_scale: float) -> CollectiveFit:
    """The fitted parameters of ``coll`` on the intra-node ``link`` (bandwidths × ``eff_scale``),
    or the link's datasheet α–β as a one-protocol fit with the fitted launch cost."""
    f = link_fit(link.name, coll)
    if isinstance(f, CollectiveFit):
        return scale_bandwidth(f, eff_scale)  # type: ignore[return-value]
    p = Protocol(link.latency_s, link.effective_bps * eff_scale)
    return CollectiveFit(default_launch_s(), p, p, "datasheet")


@lru_cache(maxsize=1024)
def _net_fit(link: Link, coll: str, eff_scale: float) -> NetFit:
    """The node-crossing parameters of ``coll`` on the inter-node ``link`` (fitted or datasheet)."""
    f = link_fit(link.name, coll)
    if isinstance(f, NetFit):
        return scale_bandwidth(f, eff_scale)  # type: ignore[return-value]
    p = Protocol(link.latency_s, link.effective_bps * eff_scale)
    return NetFit(p, p, "datasheet")


def dtype_bytes(dtype: str) -> int:
    """Bytes of one activation / gradient element of a job's (resolved) dtype."""
    return 2 if dtype in ("fp16", "bf16") else 4


@dataclass(frozen=True)
class JobComm:
    """Every collective of one optimizer step of a job, in s (bytes where named); what the
    mechanistic predictor overlaps with compute (:func:`joulebound.jobs.mechanistic.compose`).

    Attributes:
        tp_allreduce_s / tp_allreduce_bytes: one tensor-parallel all-reduce of the micro-batch's
            activations (0 without tp).
        tp_layer_f_s, tp_layer_b_s, tp_pre_s, tp_post_s: the tp all-reduces per micro-batch of a
            layer's forward / backward (two more with recomputation), of the embedding stage and
            of the head (the vocabulary-parallel loss adds three small ones).
        fsdp_allgather_layer_s, fsdp_reduce_scatter_layer_s, fsdp_allgather_rest_s,
        fsdp_reduce_scatter_rest_s, fsdp_layer_bytes: ZeRO-3 collectives of one layer's and of
            the embedding's parameters / gradients (0 unless sharded over dp > 1).
        pp_p2p_s: one pipeline send/recv of a micro-batch's activations (0 without pp).
        dp_bucket_s, dp_buckets, dp_allreduce_s, dp_grad_bytes: the data-parallel gradient
            all-reduce (DDP or dp across tp/pp groups) per bucket, buckets, total (0 without).
        dp_last_s: DDP's all-reduce of the gradients ready last (the embeddings), which no
            backward compute can hide (0 without DDP, or with tp/pp or LoRA).
    """

    tp_allreduce_s: float = 0.0
    tp_allreduce_bytes: float = 0.0
    tp_layer_f_s: float = 0.0
    tp_layer_b_s: float = 0.0
    tp_pre_s: float = 0.0
    tp_post_s: float = 0.0
    fsdp_allgather_layer_s: float = 0.0
    fsdp_reduce_scatter_layer_s: float = 0.0
    fsdp_allgather_rest_s: float = 0.0
    fsdp_reduce_scatter_rest_s: float = 0.0
    fsdp_layer_bytes: float = 0.0
    pp_p2p_s: float = 0.0
    dp_bucket_s: float = 0.0
    dp_buckets: int = 0
    dp_allreduce_s: float = 0.0
    dp_grad_bytes: float = 0.0
    dp_last_s: float = 0.0


def job_collectives(r: Resolved, fabric: Fabric, per_layer: float, emb_params: float,
                    stage_params: list[float]) -> JobComm:
    """The collectives of the resolved job ``r`` on ``fabric`` (see :class:`JobComm`):
    ``per_layer`` / ``emb_params`` parameters of one layer and of the embeddings,
    ``stage_params`` parameters per pipeline stage."""
    j = r.job
    b = dtype_bytes(r.dtype)
    kw: dict = {}
    if r.tp > 1:  # Megatron: activations all-reduced within the tp group (adjacent ranks)
        tokens_mb = r.micro_batch * j.seq
        ar = fabric.collective("all_reduce", tokens_mb * j.hidden * b, r.tp, 1)
        small = fabric.collective("all_reduce", tokens_mb * 4, r.tp, 1)
        kw.update(tp_allreduce_s=ar, tp_allreduce_bytes=tokens_mb * j.hidden * b,
                  tp_layer_f_s=2 * ar, tp_layer_b_s=(4 if j.recompute else 2) * ar, tp_pre_s=ar,
                  tp_post_s=ar + 3 * small)
    if r.sharded and r.dp > 1:  # ZeRO-3 over the dp group
        if r.pp > 1:
            raise JouleboundError("FSDP (ZeRO-3) combined with pipeline parallelism is not modeled; "
                                  "use --strategy ddp with --pp for dp × pp")
        lay, emb = per_layer / r.tp * b, emb_params / r.tp * b
        kw.update(fsdp_allgather_layer_s=fabric.collective("all_gather", lay, r.dp, r.tp),
                  fsdp_reduce_scatter_layer_s=fabric.collective("reduce_scatter", lay, r.dp, r.tp),
                  fsdp_allgather_rest_s=fabric.collective("all_gather", emb, r.dp, r.tp),
                  fsdp_reduce_scatter_rest_s=fabric.collective("reduce_scatter", emb, r.dp, r.tp),
                  fsdp_layer_bytes=lay)
    if r.pp > 1:  # stage boundaries, outermost ranks
        kw["pp_p2p_s"] = fabric.collective("sendrecv", r.micro_batch * j.seq * j.hidden * b / r.tp,
                                           2, r.tp * r.dp)
    if r.dp > 1 and not r.sharded:
        # PyTorch AMP + DDP reduces fp32 gradients; Megatron-style tp/pp frameworks half ones
        g = max(stage_params) / r.tp * (4 if (r.tp, r.pp) == (1, 1) else b)
        if r.config.lora_rank:  # DDP buckets hold the parameters that get gradients: the adapters
            g = max(r.stages) * float(r.config.lora_layer_params()) / r.tp * (4 if (r.tp, r.pp) == (1, 1) else b)
        nb = max(1, math.ceil(g / DDP_BUCKET_BYTES))
        c = fabric.collective("all_reduce", g / nb, r.dp, r.tp)
        # DDP fills buckets in reverse parameter order: the embeddings' gradients (the first
        # parameters, their own bucket when larger than the cap) are complete only when the
        # backward pass ends, so their all-reduce cannot overlap anything
        last = 0.0
        if (r.tp, r.pp) == (1, 1) and not r.config.lora_rank and emb_params > 0:
            last = fabric.collective("all_reduce", min(emb_params * 4, g), r.dp, r.tp)
        kw.update(dp_bucket_s=c, dp_buckets=nb, dp_allreduce_s=nb * c, dp_grad_bytes=g, dp_last_s=last)
    return JobComm(**kw)
