"""Time of NCCL-style collectives on a GPU fabric (latency + size / bandwidth), pure functions.

The α–β model, per collective over ``n`` GPUs with per-GPU effective bandwidth ``B`` (bytes/s,
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
crosses the node's NICs, which every group with members on that node shares: the bandwidth is
``min(B_intra, nics·B_nic·eff / groups sharing the NIC)`` and the latency the larger of the two.
Ranks are placed Megatron-style: tensor-parallel ranks adjacent (stride 1), then data-parallel,
then pipeline stages (outermost).

Everything here is **modeled**; the link figures and their sources are in
:mod:`joulebound.hw.links` (NCCL efficiencies are estimates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from joulebound.core.errors import JouleboundError
from joulebound.hw.links import DEFAULT_INTER, DEFAULT_INTRA, Link, get_link

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
        """(bandwidth B/s, latency s, spans nodes) of a group of ``n`` ranks ``stride`` apart."""
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

    def to_json(self) -> dict:
        return {"intra": self.intra.name, "inter": self.inter.name,
                "gpus_per_node": self.gpus_per_node, "nics_per_node": self.nics_per_node,
                "eff_scale": self.eff_scale}


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
        bw, lat, _ = fabric.group(r.tp, 1)
        ar = allreduce(tokens_mb * j.hidden * b, r.tp, bw, lat)
        small = allreduce(tokens_mb * 4, r.tp, bw, lat)
        kw.update(tp_allreduce_s=ar, tp_allreduce_bytes=tokens_mb * j.hidden * b,
                  tp_layer_f_s=2 * ar, tp_layer_b_s=(4 if j.recompute else 2) * ar, tp_pre_s=ar,
                  tp_post_s=ar + 3 * small)
    if r.sharded and r.dp > 1:  # ZeRO-3 over the dp group
        if r.pp > 1:
            raise JouleboundError("FSDP (ZeRO-3) combined with pipeline parallelism is not modeled; "
                                  "use --strategy ddp with --pp for dp × pp")
        bw, lat, _ = fabric.group(r.dp, r.tp)
        kw.update(fsdp_allgather_layer_s=allgather(per_layer / r.tp * b, r.dp, bw, lat),
                  fsdp_reduce_scatter_layer_s=reduce_scatter(per_layer / r.tp * b, r.dp, bw, lat),
                  fsdp_allgather_rest_s=allgather(emb_params / r.tp * b, r.dp, bw, lat),
                  fsdp_reduce_scatter_rest_s=reduce_scatter(emb_params / r.tp * b, r.dp, bw, lat),
                  fsdp_layer_bytes=per_layer / r.tp * b)
    if r.pp > 1:  # stage boundaries, outermost ranks
        bw, lat, _ = fabric.group(r.pp, r.tp * r.dp)
        kw["pp_p2p_s"] = sendrecv(r.micro_batch * j.seq * j.hidden * b / r.tp, bw, lat)
    if r.dp > 1 and not r.sharded:
        bw, lat, _ = fabric.group(r.dp, r.tp)
        # PyTorch AMP + DDP reduces fp32 gradients; Megatron-style tp/pp frameworks half ones
        g = max(stage_params) / r.tp * (4 if (r.tp, r.pp) == (1, 1) else b)
        if r.config.lora_rank:  # DDP buckets hold the parameters that get gradients: the adapters
            g = max(r.stages) * float(r.config.lora_layer_params()) / r.tp * (4 if (r.tp, r.pp) == (1, 1) else b)
        nb = max(1, math.ceil(g / DDP_BUCKET_BYTES))
        c = allreduce(g / nb, r.dp, bw, lat)
        kw.update(dp_bucket_s=c, dp_buckets=nb, dp_allreduce_s=nb * c, dp_grad_bytes=g)
    return JobComm(**kw)
