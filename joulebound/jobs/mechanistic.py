"""The mechanistic (physics-based) predictor of a training job's time and energy.

One optimizer step of a job on ``N = dp·tp·pp`` GPUs is composed from parts that are each either
**modeled from physics** or one of a few **calibrated** constants (:class:`MechParams`,
fitted by :mod:`joulebound.jobs.calibrate` on the open measured data):

1. **Per-GPU kernels** — the analytic kernel trace of the job's shape at the *per-GPU* micro-batch
   (tensor-parallel shards when tp > 1) characterized by the GPU model at ``auto`` clocks (or the
   given clocks / power limit): time ``t_k`` and energy ``E_k`` of every kernel
   (:mod:`joulebound.jobs.stepcost`).
2. **Framework factor** ``κ`` (calibrated): real frameworks run the same step ``κ`` times longer
   than the kernel model's ideal kernels (unfused elementwise ops, dropout, masking, allocator
   and stream gaps) at the kernels' modeled power, so kernel time is ``κ·t_k`` and its energy
   ``κ·E_k``.
3. **Host launch floor** ``τ`` and **per-step overhead** ``t_step`` (calibrated): a kernel never
   takes less than ``τ`` (the CPU launches it; the GPU waits otherwise), and every optimizer step
   costs ``t_step`` of host work (optimizer bookkeeping, data loading, logging). The GPU waits
   through both.
4. **Communication** (:mod:`joulebound.jobs.collectives`; link table
   :mod:`joulebound.hw.links`, latency + size/bandwidth with ring/tree all-reduce):

   * DDP: gradients all-reduced in 25 MiB buckets, overlapped with the backward pass of the last
     micro-batch (no sync on the others); exposed = ``max(one bucket, t_allreduce − t_bwd·(n_b−1)/n_b)``;
   * FSDP (ZeRO-3): per layer an all-gather of its parameters in forward and again in backward, a
     reduce-scatter of its gradients, prefetched so that layer ``i+1``'s all-gather overlaps layer
     ``i``'s compute: exposed = the part of each that exceeds the layer's compute, plus the first;
   * Megatron TP: two all-reduces of the ``b·S·d`` activations per layer in forward and two in
     backward (two more with recomputation), one for the vocabulary-parallel embedding and head,
     all on the critical path;
   * pipeline (1F1B, ``m`` micro-batches): ``Σ_s (f_s+b_s) + (m−1)·max_s(f_s+b_s+2·t_p2p)
     + 2(p−1)·t_p2p``, then the data-parallel all-reduce of each stage's gradients after the flush.
5. **Waiting power** ``P_wait = ρ·P_idle`` (``ρ`` calibrated): the power of a GPU that waits —
   on communication, in pipeline bubbles, in launch gaps and host overhead.
6. **Host** CPU + DRAM power per GPU (:mod:`joulebound.jobs.host`), a separate labeled term;
   for HGX / DGX nodes the whole node but its GPUs (published for H100, scaled for the others).

Energy per step: ``Σ_GPUs [κ·ΣE_k + P_wait·(t_step − busy)]`` (GPU boards, what NVML counts) plus
host power × GPUs × step time. Everything returned is **modeled** and carries a 90 % interval
(see :func:`interval`) whose width grows with the parts the calibration data could not pin down.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import numpy as np

from joulebound.core.errors import JouleboundError
from joulebound.jobs.collectives import DDP_BUCKET_BYTES, Fabric, JobComm, job_collectives
from joulebound.jobs.host import DEFAULT_HOST, HostPower
from joulebound.jobs.job import Job, MemoryEstimate, Resolved, memory, resolve
from joulebound.jobs.prediction import JobPrediction
from joulebound.jobs.stepcost import Parts, WorkKey, characterize_parts, prime_part_sums
from joulebound.workload.dispatch import WRAPPER_UNIT_KERNELS, get_framework

PARAMS_FILE = "mechanistic.json"
Z90 = 1.6449
__all__ = ["DDP_BUCKET_BYTES", "MechParams", "Step", "compose", "fabric_for", "interval",
           "interval_terms", "kinds",
           "load_params", "params_path", "predict_jobs", "predict_many", "predict_resolved",
           "predict_steps", "to_prediction", "work_keys"]


@dataclass
class MechParams:
    """The predictor's free parameters (calibrated) and its interval widths.

    Attributes:
        kappa: framework factor on kernel time and busy energy (dimensionless, >= 0.3).
        launch_s: per-kernel host launch floor (s).
        step_s: host overhead per optimizer step (s).
        wait_ratio: power of a waiting GPU as a multiple of the GPU model's idle power.
        host: host CPU/DRAM power per GPU.
        comm_eff_scale: multiplier on the link table's NCCL efficiencies (1 = table estimates).
        sigma: log-space standard deviations: ``compute`` (κ across frameworks/data sets),
            ``overhead`` (launch floor and per-step overhead), ``comm`` (uncalibrated collectives),
            ``pipeline`` (1F1B schedule, calibrated on Perseus), ``power`` (busy power), ``device``
            (a GPU the calibration never saw), ``size`` (per decade of step size outside the
            calibrated range), ``scale`` (per doubling of GPUs beyond the largest calibrated job),
            ``strategy`` (a parallelism the calibration data has no measured run of).
        devices_seen: GPUs in the calibration data.
        strategies_seen: parallelism kinds in the calibration data (``single``, ``ddp``,
            ``fsdp``, ``tp``, ``pp``).
        tokens_range: (min, max) tokens per micro-batch per GPU in the calibration data.
        max_gpus_seen: largest GPU count in the calibration data.
        provenance: what the parameters were fitted on (data, rows, which data constrains which
            parameter, fit residuals).
    """

    kappa: float = 1.7
    launch_s: float = 10e-6
    step_s: float = 0.005
    wait_ratio: float = 2.0
    host: HostPower = DEFAULT_HOST
    comm_eff_scale: float = 1.0
    sigma: dict[str, float] = field(default_factory=lambda: {
        "compute": 0.60, "overhead": 0.70, "comm": 0.70, "pipeline": 0.15, "power": 0.12,
        "device": 0.25, "size": 0.10, "scale": 0.10, "strategy": 0.20})
    devices_seen: tuple[str, ...] = ()
    strategies_seen: tuple[str, ...] = ()
    tokens_range: tuple[float, float] = (1e3, 5e5)
    max_gpus_seen: int = 16
    provenance: dict = field(default_factory=lambda: {"calibration": "none (built-in priors)"})
    #: compute slowdown while a collective overlaps it (fraction of the overlapped time): NCCL's
    #: kernels take SMs and memory bandwidth from the compute kernels. Published: 18.9 % mean
    #: slowdown of overlapped computation on A100/H100/MI250 (Lee et al., arXiv 2507.03114, 2025)
    overlap_slowdown: float = 0.189
    #: per ``--framework`` (:data:`~joulebound.workload.dispatch.FRAMEWORKS`): ``kappa`` (its
    #: residual factor on kernel time and busy energy), ``host_s`` (host dispatch time per
    #: analytic-trace kernel, s) and where each comes from; empty: κ = :attr:`kappa` and no
    #: host bound for every framework (the ideal kernel model, used by tests)
    frameworks: dict[str, dict] = field(default_factory=dict)

    def kappa_for(self, framework: str) -> float:
        """Residual framework factor κ of ``framework`` (dimensionless)."""
        f = self.frameworks.get(framework)
        return float(f["kappa"]) if f else self.kappa

    def host_for(self, framework: str) -> float:
        """Host dispatch time per analytic-trace kernel of ``framework`` (s; 0 = no host bound)."""
        f = self.frameworks.get(framework)
        return float(f["host_s"]) if f else 0.0

    def to_json(self) -> dict:
        d = asdict(self)
        d["schema"] = "joulebound.scaling.mechanistic/1"
        d["devices_seen"] = list(self.devices_seen)
        d["strategies_seen"] = list(self.strategies_seen)
        d["tokens_range"] = list(self.tokens_range)
        return d

    @classmethod
    def from_json(cls, d: dict) -> MechParams:
        if d.get("schema") != "joulebound.scaling.mechanistic/1":
            raise JouleboundError(f"not a joulebound mechanistic-predictor file (schema {d.get('schema')!r})")
        d = {k: v for k, v in d.items() if k != "schema"}
        d["host"] = HostPower(**d["host"])
        d["devices_seen"] = tuple(d.get("devices_seen", ()))
        d["strategies_seen"] = tuple(d.get("strategies_seen", ()))
        d["tokens_range"] = tuple(d.get("tokens_range", (1e3, 5e5)))
        d["frameworks"] = dict(d.get("frameworks", {}))
        sig = cls().sigma
        sig.update(d.get("sigma", {}))
        d["sigma"] = sig
        return cls(**d)


def params_path() -> Path:
    return Path(str(resources.files("joulebound.jobs") / "data" / PARAMS_FILE))


def load_params(path: str | Path | None = None) -> MechParams:
    """The shipped calibration (``joulebound/jobs/data/mechanistic.json``) or a saved one."""
    p = Path(path) if path else params_path()
    if not p.exists():
        if path:
            raise JouleboundError(f"calibration file not found: {p}")
        return MechParams()
    if not p.is_file():
        raise JouleboundError(f"{p} is not a file; pass the JSON written by `joulebound fit --save FILE`")
    try:
        return MechParams.from_json(json.loads(p.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise JouleboundError(f"{p}: not a joulebound calibration file ({exc})") from None


# ---------------------------------------------------------------------------------------------
# results


@dataclass
class Step:
    """One optimizer step, modeled (s, J; energies summed over the job's GPUs)."""

    time_s: float
    compute_s: float      # κ-scaled kernel time on the critical path
    overhead_s: float     # launch-floor gaps + per-step host overhead on the critical path
    comm_s: float         # exposed communication on the critical path
    bubble_s: float       # pipeline fill/drain beyond the bottleneck stage's own work
    gpu_energy_j: float
    busy_energy_j: float  # κ·ΣE_k of all GPUs
    wait_energy_j: float  # waiting GPUs (communication, bubbles, launch gaps, overhead)
    host_energy_j: float
    comm_energy_j: float  # the part of wait_energy_j spent in exposed communication
    wait_power_w: float
    comm_detail: dict = field(default_factory=dict)
    wrapper_s: float = 0.0  # DDP/FSDP/DTensor host work + overlap slowdown on the critical path


COVERS = ("time: wall time of the job's optimizer steps (no data loading stalls beyond the "
          "calibrated per-step overhead, no evaluation, checkpoints or start-up); gpu energy: the "
          "GPU boards of all GPUs, what NVML's energy counter measures; host energy: CPU package + "
          "DRAM of the hosts, modeled per GPU (HGX / DGX nodes: the whole node but its GPUs — CPUs, "
          "DRAM, fans, NVSwitches, NICs, power supplies); total = gpu + host (no network switches "
          "between nodes, cooling or PUE)")


# ---------------------------------------------------------------------------------------------
# composition


def work_keys(r: Resolved) -> WorkKey:
    """The per-GPU workload of a resolved job (what one characterization covers)."""
    j = r.job
    stack = tuple((k, True) for k, on in (("flash", r.flash_attention), ("fp8", r.fp8),
                                          ("selective", r.recompute == "selective"),
                                          ("sp", r.sequence_parallel),
                                          ("fsdp", r.sharded and r.dp > 1
                                           and get_framework(r.framework).torch_wrappers)) if on)
    return WorkKey(r.arch, j.hidden, j.heads, r.ff, r.vocab, j.seq, r.micro_batch, r.dtype,
                   bool(j.recompute), r.tp, _device_name(j.device), (j.clocks or "auto"),
                   None if j.power_limit_w is None else float(j.power_limit_w),
                   r.config.components(), stack)


@lru_cache(maxsize=512)
def _device_name(device: str) -> str:
    from joulebound.hw.catalog import resolve_name

    return resolve_name(device)


@lru_cache(maxsize=512)
def _fabric(device: str, intra: str | None, inter: str | None, gpn: int, nics: int,
            scale: float) -> Fabric:
    from joulebound.hw.catalog import get_device
    from joulebound.hw.nodes import node_of

    node = node_of(device)
    if inter is None and node is not None:  # an HGX / DGX node: its compute-fabric NICs
        inter, nics = node.nic, (node.nics if nics == 1 else nics)
    return Fabric.make(intra or get_device(device).interconnect, inter, gpn, nics, scale)


def _host(r: Resolved, prm: MechParams) -> HostPower:
    """The host power per GPU of the job's node (:func:`~joulebound.jobs.host.node_host`)."""
    from joulebound.jobs.host import node_host

    return node_host(_device_name(r.job.device), prm.host)


def fabric_for(r: Resolved, comm_eff_scale: float = 1.0) -> Fabric:
    """The job's fabric: ``--interconnect`` or the catalog's link for the GPU inside a node,
    ``--inter-node`` between nodes of ``--gpus-per-node`` (default 8). Without ``--inter-node``:
    an SXM GPU's HGX / DGX node's compute fabric (:mod:`joulebound.hw.nodes`: e.g. 8 × NDR 400
    Gb/s for H100), else one InfiniBand HDR NIC per node."""
    j = r.job
    return _fabric(j.device, j.interconnect, j.inter_node, j.gpus_per_node or 8, j.nics_per_node,
                   comm_eff_scale)


class _Part:
    """Sums of one part under (κ, τ): time s, busy energy J, launch-gap time s."""

    __slots__ = ("t", "e", "gap")

    def __init__(self, t: float = 0.0, e: float = 0.0, gap: float = 0.0) -> None:
        self.t, self.e, self.gap = t, e, gap

    def __add__(self, o: _Part) -> _Part:
        return _Part(self.t + o.t, self.e + o.e, self.gap + o.gap)

    def __mul__(self, k: float) -> _Part:
        return _Part(self.t * k, self.e * k, self.gap * k)


class _Cost(NamedTuple):
    """How a framework runs the kernels: residual factor κ, per-kernel floor τ (s), host
    dispatch time per analytic-trace kernel (s), and the data-parallel wrapper's host time per
    layer and micro-batch in the forward / backward (s; DDP hooks, FSDP unit hooks)."""

    kappa: float
    tau: float
    host: float = 0.0
    unit_f: float = 0.0
    unit_b: float = 0.0


def _cost(r: Resolved, prm: MechParams) -> _Cost:
    fw = get_framework(r.framework)
    h = prm.host_for(fw.name)
    uf = ub = 0.0
    if fw.torch_wrappers:  # PyTorch DDP / FSDP / DTensor hooks (Megatron has its own)
        keys = []
        if r.dp > 1:  # Hugging Face's Trainer finds unused parameters unless checkpointing
            keys.append("fsdp" if r.sharded else
                        "ddp-find-unused" if fw.name == "hf" and not r.job.recompute else "ddp")
        if r.tp > 1:  # tensor parallelism through DTensor (tp_plan)
            keys.append("dtensor-tp")
        for key in keys:
            f, b = WRAPPER_UNIT_KERNELS[key]
            uf, ub = uf + f * h, ub + b * h
    return _Cost(prm.kappa_for(fw.name), prm.launch_s, h, uf, ub)


def _part(parts: Parts, name: str, k: _Cost) -> _Part:
    key = (name, *k)
    hit = parts.cache.get(key)
    if hit is None:  # jobs that share a per-GPU workload share this sum (one formula)
        prime_part_sums([parts], *k)
        hit = parts.cache[key]
    return _Part(*hit)


def _stage_work(r: Resolved, parts: Parts, k: _Cost,
                cm: JobComm) -> tuple[list[_Part], list[float]]:
    """Per pipeline stage, per micro-batch: its compute parts and its tp communication (s)."""
    lf, lb = _part(parts, "layer_f", k), _part(parts, "layer_b", k)
    pre_f, pre_b = _part(parts, "pre_f", k), _part(parts, "pre_b", k)
    post_f, post_b = _part(parts, "post_f", k), _part(parts, "post_b", k)
    n_st = len(r.stages)
    stage_fb: list[_Part] = []
    stage_comm: list[float] = []
    for s, ell in enumerate(r.stages):
        part = (lf + lb) * ell
        comm = (cm.tp_layer_f_s + cm.tp_layer_b_s) * ell
        if s == 0:
            part = part + pre_f + pre_b
            comm += cm.tp_pre_s
        if s == n_st - 1:
            part = part + post_f + post_b
            comm += cm.tp_post_s
        stage_fb.append(part)
        stage_comm.append(comm)
    return stage_fb, stage_comm


def _stage_params(r: Resolved) -> tuple[float, float, list[float]]:
    """``(params per layer, embedding params, params per stage)``; with pp > 1 the last stage
    holds its own copy of the tied output embedding."""
    j = r.job
    per_layer = float(r.config.layer_params())
    emb_params = r.params - j.layers * per_layer
    stage_params = [ell * per_layer + (emb_params if s == 0 else 0.0) for s, ell in enumerate(r.stages)]
    if r.pp > 1:
        stage_params[-1] += r.vocab * j.hidden
    return per_layer, emb_params, stage_params


def _fsdp_exposed(r: Resolved, parts: Parts, k: _Cost, cm: JobComm,
                  detail: dict) -> tuple[float, float]:
    """FSDP all-gathers / reduce-scatters per micro-batch (s): ``(not hidden behind the layers'
    compute, hidden)``; 0 unless sharded over dp > 1. Layer ``i+1``'s all-gather is prefetched
    under layer ``i``'s compute."""
    if not (r.sharded and r.dp > 1):
        return 0.0, 0.0
    lf, lb = _part(parts, "layer_f", k), _part(parts, "layer_b", k)
    ag_l, rs_l = cm.fsdp_allgather_layer_s, cm.fsdp_reduce_scatter_layer_s
    ag_r, rs_r = cm.fsdp_allgather_rest_s, cm.fsdp_reduce_scatter_rest_s
    L = r.job.layers
    f_exp = ag_r + ag_l + (L - 1) * max(0.0, ag_l - (lf.t + cm.tp_layer_f_s))
    b_exp = (L - 1) * max(0.0, ag_l + rs_l - (lb.t + cm.tp_layer_b_s)) + rs_l + rs_r
    fsdp_mb = f_exp + b_exp  # (the hooks' host time is in the layers' host bound: _Cost)
    hidden = (L - 1) * (min(ag_l, lf.t + cm.tp_layer_f_s) + min(ag_l + rs_l, lb.t + cm.tp_layer_b_s))
    detail.update(fsdp_allgather_layer_s=ag_l, fsdp_reduce_scatter_layer_s=rs_l,
                  fsdp_exposed_per_microbatch_s=fsdp_mb,
                  fsdp_layer_bytes=cm.fsdp_layer_bytes)
    return fsdp_mb, hidden


def _pipeline(r: Resolved, cm: JobComm, fb: list[float], stage_comm: list[float],
              fsdp_mb: float, detail: dict) -> tuple[float, float, float]:
    """``(pipeline time, bubble, exposed communication)`` of the step's micro-batches (s): one
    stage runs them back to back; a 1F1B pipeline waits for its bottleneck stage."""
    m, p = r.grad_accum, r.pp
    if p == 1:
        return m * (fb[0] + fsdp_mb), 0.0, m * (stage_comm[0] + fsdp_mb)
    p2p = cm.pp_p2p_s
    detail["pp_p2p_s"] = p2p
    bott = max(x + 2 * p2p for x in fb)
    pipe = sum(fb) + (m - 1) * bott + 2 * (p - 1) * p2p
    bubble = pipe - m * bott
    comm = m * stage_comm[int(np.argmax(fb))] + 2 * (p - 1) * p2p + (m - 1) * 2 * p2p
    return pipe, bubble, comm


def _dp_exposed(r: Resolved, parts: Parts, k: _Cost, cm: JobComm,
                detail: dict) -> tuple[float, float]:
    """The data-parallel gradient all-reduce (DDP, or dp across tp/pp groups) not hidden behind
    the backward pass (s): bucketed, the last bucket always exposed; 0 without it. Megatron
    without the distributed optimizer (as vTrain's runs: ``use_gradient_bucket`` false)
    all-reduces after the backward pass: all of it exposed; with it (Megatron-core's recipes
    overlap the reduce-scatter and the all-gather) it hides behind a micro-batch's backward.
    Returns ``(exposed, hidden behind the backward)``."""
    if not (r.dp > 1 and not r.sharded):
        return 0.0, 0.0
    j = r.job
    c, nb, t_ar = cm.dp_bucket_s, cm.dp_buckets, cm.dp_allreduce_s
    megatron = get_framework(r.framework).megatron_dp
    if megatron and r.distributed_optimizer:
        # Megatron-core's distributed optimizer with --overlap-grad-reduce / --overlap-param-gather
        # (its standard recipes): the gradients' reduce-scatter rides the last micro-batch's
        # backward of the stage, the parameters' all-gather the next forward — what is left is
        # the part longer than that backward, and at least one bucket
        lb = _part(parts, "layer_b", k)
        b_last = (lb.t + cm.tp_layer_b_s) * max(r.stages)
        dp_exposed = max(c, t_ar - b_last)
    elif r.pp == 1 and not megatron:
        lb = _part(parts, "layer_b", k)
        pre_b, post_b = _part(parts, "pre_b", k), _part(parts, "post_b", k)
        b_last = (lb.t + cm.tp_layer_b_s) * j.layers + pre_b.t + post_b.t
        # the buckets before the embeddings' queue behind the backward pass; the embeddings'
        # all-reduce starts when it ends (their gradients are the last to be complete)
        rest = max(t_ar - cm.dp_last_s, 0.0)
        dp_exposed = max(c, t_ar - b_last * (nb - 1) / nb, max(rest - b_last, 0.0) + cm.dp_last_s)
    else:
        return _dp_detail(detail, cm, t_ar), 0.0
    return _dp_detail(detail, cm, dp_exposed), max(t_ar - dp_exposed, 0.0)


def _dp_detail(detail: dict, cm: JobComm, exposed: float) -> float:
    detail.update(dp_allreduce_s=cm.dp_allreduce_s, dp_buckets=cm.dp_buckets, dp_exposed_s=exposed,
                  dp_grad_bytes=cm.dp_grad_bytes)
    return exposed


def _optimizer_steps(r: Resolved, parts: Parts, k: _Cost,
                     stage_params: list[float]) -> list[tuple[float, float, float]]:
    """The optimizer step on each stage's GPU: (time incl. launch floor s, busy J, gap s)."""
    j = r.job
    shard = r.dp if (r.sharded or r.distributed_optimizer) else 1  # ZeRO-3 / ZeRO-1
    opt = []
    for s, ps in enumerate(stage_params):
        P = ps / r.tp / shard
        ovh = parts.kernel_overhead_s * (r.stages[s] - 1)  # further layers' AdamW kernels
        base_t = parts.opt_t[0] + parts.opt_t[1] * P
        base_e = parts.opt_e[0] + parts.opt_e[1] * P
        tk = max(k.kappa * (base_t + ovh), 0.0)
        ek = max(k.kappa * (base_e + ovh * base_e / max(base_t, 1e-30)), 0.0)
        if j.optimizer == "sgd":  # momentum SGD moves 20 of AdamW's 28 bytes per parameter
            tk, ek = tk * 20 / 28, ek * 20 / 28
        t_opt = max(tk, max(k.tau, k.host) * (r.stages[s] + 3))  # per-layer AdamW + 3 kernels
        opt.append((t_opt, ek, t_opt - tk))
    return opt


def compose(r: Resolved, parts: Parts, prm: MechParams, fabric: Fabric,
            comm: JobComm | None = None) -> Step:
    """One optimizer step of the resolved job ``r`` from its per-GPU step cost ``parts`` and its
    collectives ``comm`` (default: :func:`~joulebound.jobs.collectives.job_collectives` on
    ``fabric``), see the module docstring."""
    k = _cost(r, prm)
    p_wait = prm.wait_ratio * parts.idle_w
    m, p, tp, dp = r.grad_accum, r.pp, r.tp, r.dp
    per_layer, emb_params, stage_params = _stage_params(r)
    # job -> step cost (parts) -> communication (cm) -> this step: data flows one way
    cm = comm if comm is not None else job_collectives(r, fabric, per_layer, emb_params, stage_params)
    detail: dict = ({"tp_allreduce_s": cm.tp_allreduce_s, "tp_allreduce_bytes": cm.tp_allreduce_bytes}
                    if r.tp > 1 else {})
    stage_fb, stage_comm = _stage_work(r, parts, k, cm)
    fsdp_mb, fsdp_hidden = _fsdp_exposed(r, parts, k, cm, detail)
    fb = [sp.t + sc for sp, sc in zip(stage_fb, stage_comm, strict=True)]
    pipe, bubble, comm_exposed = _pipeline(r, cm, fb, stage_comm, fsdp_mb, detail)
    dp_exposed, dp_hidden = _dp_exposed(r, parts, k, cm, detail)
    comm_exposed += dp_exposed
    opt = _optimizer_steps(r, parts, k, stage_params)
    t_opt_max = max(o[0] for o in opt)
    # collectives hidden under compute still slow it (NCCL kernels share SMs and memory)
    hidden = m * fsdp_hidden + dp_hidden
    slow_t = prm.overlap_slowdown * hidden
    if slow_t > 0:
        detail.update(overlap_hidden_s=hidden, overlap_slowdown_s=slow_t)
    lb = _part(parts, "layer_b", k)
    p_busy = lb.e / lb.t if lb.t > 0 else 0.0  # the slowed kernels' power (W per GPU)
    step_t = pipe + dp_exposed + t_opt_max + prm.step_s + slow_t
    # energy of each stage's GPUs: busy (κ·ΣE_k) + waiting (launch gaps and the rest of the step)
    busy_e = wait_e = 0.0
    for s in range(len(r.stages)):
        in_kernels = m * stage_fb[s].t + opt[s][0] + slow_t
        busy_e += tp * dp * (m * stage_fb[s].e + opt[s][1] + slow_t * p_busy)
        wait_e += tp * dp * p_wait * (m * stage_fb[s].gap + opt[s][2] + max(step_t - in_kernels, 0.0))
    n = r.gpus
    crit = int(np.argmax(fb)) if p > 1 else 0
    wrapper = slow_t
    if k.unit_f or k.unit_b:  # the layers' time the wrappers' hooks add (where the host bounds it)
        bare = k._replace(unit_f=0.0, unit_b=0.0)
        extra = sum(_part(parts, nm, k).t - _part(parts, nm, bare).t for nm in ("layer_f", "layer_b"))
        wrapper += m * r.stages[crit] * extra
    gaps = m * stage_fb[crit].gap + opt[crit][2]
    compute = m * stage_fb[crit].t + opt[crit][0] - gaps
    return Step(time_s=step_t, compute_s=max(compute, 0.0), overhead_s=gaps + prm.step_s,
                comm_s=comm_exposed, bubble_s=bubble, gpu_energy_j=busy_e + wait_e,
                busy_energy_j=busy_e, wait_energy_j=wait_e,
                host_energy_j=_host(r, prm).total_w * n * step_t, comm_energy_j=p_wait * n * comm_exposed,
                wait_power_w=p_wait, comm_detail=detail, wrapper_s=wrapper)


# ---------------------------------------------------------------------------------------------
# intervals


def kinds(r: Resolved) -> list[str]:
    """The parallelism kinds a resolved job uses: ``single``, ``ddp``, ``fsdp``, ``tp``, ``pp``."""
    out = []
    if r.dp > 1:
        out.append("fsdp" if r.sharded else "ddp")
    if r.tp > 1:
        out.append("tp")
    if r.pp > 1:
        out.append("pp")
    return out or ["single"]


def interval_terms(r: Resolved, step: Step | dict, prm: MechParams, device: str
                   ) -> tuple[dict[str, tuple[float, str]], dict[str, tuple[float, str]]]:
    """The interval's terms, one home for :func:`interval` and ``advise``'s correlated draws:
    ``({term: (σ, why)} for time, {term: (σ, why)} for energy)`` in log units — compute (the
    framework's κ), overhead, communication (``comm``; a pipeline without dp / tp:
    ``pipeline``), the 1F1B ``bubble``, the data-parallel wrappers' host time and overlap
    slowdown (``wrapper``), a parallelism kind without a measured run (``strategy:<kinds>``), a
    GPU outside the calibration (``device``), the micro-batch beyond the calibrated range
    (``size``), GPU counts beyond the largest calibrated job (``scale``) and, for energy, the
    busy ``power``. ``step``: a :class:`Step` or its ``vars`` (a prediction's ``step``)."""
    def get(k: str) -> float:
        return float(step.get(k, 0.0) if isinstance(step, dict) else getattr(step, k))

    sg = prm.sigma
    fw = r.framework
    s_compute = float(prm.frameworks.get(fw, {}).get("sigma_compute", sg["compute"]))
    T = max(get("time_s"), 1e-30)
    sh_c, sh_o, sh_x = get("compute_s") / T, get("overhead_s") / T, get("comm_s") / T
    sh_b = get("bubble_s") / T
    sh_w = get("wrapper_s") / T
    t: dict[str, tuple[float, str]] = {
        "compute": (s_compute * sh_c, f"{fw} framework factor κ (spread across the calibration data "
                                      f"sets), {sh_c:.0%} of the step"),
        "overhead": (sg["overhead"] * sh_o, f"host dispatch and per-step overhead, {sh_o:.0%} of the step"),
    }
    pp_only = r.pp > 1 and r.dp == 1 and r.tp == 1
    if sh_x > 0:
        why = ("pipeline point-to-point (calibrated on Perseus)" if pp_only else
               "collectives: NCCL fitted on measured tables where the link has them, datasheet "
               "estimates otherwise; no multi-GPU DDP/FSDP run in the calibration data")
        t["pipeline" if pp_only else "comm"] = ((sg["pipeline"] if pp_only else sg["comm"]) * sh_x,
                                                f"communication {sh_x:.0%} of the step — {why}")
    if sh_b > 0:
        t["bubble"] = (sg["pipeline"] * sh_b, f"1F1B pipeline bubble {sh_b:.0%} of the step")
    if sh_w > 0:
        t["wrapper"] = (sg.get("wrapper", SIGMA_WRAPPER) * sh_w,
                        f"DDP/FSDP/DTensor host work and overlap slowdown {sh_w:.0%} of the step (hooks "
                        "timed at world size 1 on one host; slowdown a literature mean)")
    missing = sorted(set(kinds(r)) - set(prm.strategies_seen))
    if missing:
        t["strategy:" + "/".join(missing)] = (
            sg.get("strategy", 0.2), f"no {'/'.join(missing).upper()} run in the calibration "
                                     "data (the collectives' overlap and efficiency are modeled only)")
    if device not in prm.devices_seen:
        t["device"] = (sg["device"], f"GPU {device} is not in the calibration data "
                                     f"({', '.join(prm.devices_seen) or 'none'})")
    tok = r.micro_batch * r.job.seq
    lo, hi = prm.tokens_range
    dec = max(0.0, math.log10(lo / tok), math.log10(tok / hi))
    if dec > 0:
        t["size"] = (sg["size"] * dec, f"{tok:,.0f} tokens per micro-batch is {dec:.1f} decades "
                                       f"outside the calibrated {lo:,.0f}–{hi:,.0f}")
    if r.gpus > prm.max_gpus_seen:
        dbl = math.log2(r.gpus / prm.max_gpus_seen)
        t["scale"] = (sg["scale"] * dbl, f"{r.gpus} GPUs, {dbl:.1f} doublings beyond the largest "
                                         f"calibrated job ({prm.max_gpus_seen})")
    e = dict(t)
    sh_be = get("busy_energy_j") / max(get("gpu_energy_j"), 1e-30)
    e["compute"] = (s_compute * sh_be, t["compute"][1])
    e["power"] = (sg["power"], "busy power of the GPU model")
    return t, e


#: prior spread (log units) of the data-parallel wrappers' host time and overlap slowdown: the
#: hooks were measured at world size 1 on one host, whose speed varied ×/÷1.4 between sessions
SIGMA_WRAPPER = 0.4


def interval(r: Resolved, st: Step, prm: MechParams, device: str) -> tuple[float, float, list[str]]:
    """Log-space standard deviations (time, energy) of a step and the reasons, largest first:
    the root-sum-square of :func:`interval_terms`."""
    t, e = interval_terms(r, st, prm, device)
    var_t = sum(v * v for v, _ in t.values())
    var_e = sum(v * v for v, _ in e.values())
    ranked = sorted(list(e.values()) + list(t.values()), key=lambda x: -x[0])
    why, seen = [], set()
    for v, w in ranked:
        if v >= 0.02 and w not in seen:
            seen.add(w)
            why.append(f"{w}: ×/÷{math.exp(Z90 * v):.2f}")
    return math.sqrt(var_t), math.sqrt(var_e), why


# ---------------------------------------------------------------------------------------------
# the predictor


def predict_steps(jobs: Sequence[Job], prm: MechParams | None = None
                  ) -> list[tuple[Resolved, Step, MemoryEstimate, Parts]]:
    """Resolve, characterize (batched) and compose one optimizer step of every job."""
    return _steps([resolve(j) for j in jobs], prm or load_params())


def predict_resolved(rs: Sequence[Resolved], prm: MechParams | None = None,
                     allow_oom: bool = True) -> list[JobPrediction]:
    """Predictions of jobs already resolved (:func:`~joulebound.jobs.job.resolve`): the data
    flows one way, job description → step cost → communication → prediction, each job
    resolved once by its caller."""
    prm = prm or load_params()
    return [to_prediction(r, st, mem, prm, allow_oom) for r, st, mem, _pa in _steps(list(rs), prm)]


def _steps(rs: list[Resolved], prm: MechParams) -> list[tuple[Resolved, Step, MemoryEstimate, Parts]]:
    keys = [work_keys(r) for r in rs]
    parts = characterize_parts(keys)
    costs = {_cost(r, prm) for r in rs}
    costs |= {c._replace(unit_f=0.0, unit_b=0.0) for c in costs if c.unit_f or c.unit_b}
    for c in costs:  # one vectorized pass per cost (and its wrapper-free twin, for wrapper_s)
        prime_part_sums(list(parts.values()), *c)
    out = []
    for r, k in zip(rs, keys, strict=True):
        pa = parts[k]
        st = compose(r, pa, prm, fabric_for(r, prm.comm_eff_scale))
        out.append((r, st, memory(r, pa.device_memory), pa))
    return out


def predict_many(jobs: Sequence[Job | None], prm: MechParams | None = None
                 ) -> list[JobPrediction | str]:
    """Like :func:`predict_jobs` for a table: a job that cannot be priced (or ``None``) gives its
    error message instead of stopping the others; jobs that do not fit in memory are predicted
    with a warning and ``fits_memory = False``."""
    prm = prm or load_params()
    out: list[JobPrediction | str] = []
    ok: list[tuple[int, Resolved]] = []
    for i, j in enumerate(jobs):
        if j is None:
            out.append("")
            continue
        try:
            ok.append((i, resolve(j)))
            out.append("")
        except JouleboundError as exc:
            out.append(str(exc))
    try:  # all at once (one GPU-model call per device); row by group only when something fails
        groups = [ok]
        results = [_steps([r for _, r in ok], prm)] if ok else []
    except JouleboundError:
        by_dev: dict[tuple, list[tuple[int, Resolved]]] = {}
        for i, r in ok:  # as characterize_parts groups them: device, clocks, power limit
            by_dev.setdefault((str(r.job.device), r.job.clocks, r.job.power_limit_w), []).append((i, r))
        groups, results = list(by_dev.values()), []
    for gi, items in enumerate(groups):
        if gi < len(results):
            for (i, _), (r, st, mem, _pa) in zip(items, results[gi], strict=True):
                out[i] = to_prediction(r, st, mem, prm, True)
            continue
        try:
            res = _steps([r for _, r in items], prm)
        except JouleboundError as exc:  # an unknown GPU, clock or power limit: those rows only
            for i, _ in items:
                out[i] = str(exc)
            continue
        for (i, _), (r, st, mem, _pa) in zip(items, res, strict=True):
            out[i] = to_prediction(r, st, mem, prm, True)
    return out


def predict_jobs(jobs: Sequence[Job], prm: MechParams | None = None,
                 allow_oom: bool = True) -> list[JobPrediction]:
    """Predictions of whole jobs (``job.tokens`` tokens; one step when ``tokens`` is None)."""
    return predict_resolved([resolve(j) for j in jobs], prm, allow_oom)


def to_prediction(r: Resolved, st: Step, mem: MemoryEstimate, prm: MechParams,
                allow_oom: bool) -> JobPrediction:
    j = r.job
    host = _host(r, prm)
    warn = list(r.warnings)
    if not mem.fits:
        msg = (f"needs ~{mem.total / 2**30:.1f} GiB per GPU (weights {mem.weights / 2**30:.1f}, "
               f"gradients {mem.gradients / 2**30:.1f}, optimizer {mem.optimizer / 2**30:.1f}, "
               f"activations {mem.activations / 2**30:.1f}) but the {_device_name(j.device)} has "
               f"{mem.device_bytes / 2**30:.0f} GiB: use --recompute, a smaller --batch with "
               "--grad-accum, FSDP, or more GPUs")
        if not allow_oom:
            raise JouleboundError(msg)
        warn.append("does not fit in GPU memory: " + msg)
    elif mem.device_bytes and mem.total > 0.9 * mem.device_bytes:
        warn.append(f"uses ~{mem.total / mem.device_bytes:.0%} of GPU memory (estimate); "
                    "fragmentation may make it fail")
    if st.comm_s > 0.5 * st.time_s:
        warn.append(f"communication-bound: {st.comm_s / st.time_s:.0%} of every step is exposed "
                    "communication; fewer GPUs or a faster interconnect cost less energy per token")
    if prm.provenance.get("calibration", "").startswith("none"):
        warn.append("uncalibrated: no calibration file found (run python -m "
                    "joulebound.jobs.calibrate --data ../shared/data)")
    s_t, s_e, why = interval(r, st, prm, _device_name(j.device))
    steps = (float(j.tokens) / r.tokens_per_step) if j.tokens else 1.0
    ft, fe = math.exp(Z90 * s_t), math.exp(Z90 * s_e)
    T, Eg, Eh = st.time_s * steps, st.gpu_energy_j * steps, st.host_energy_j * steps
    Etot = Eg + Eh
    fab = fabric_for(r, prm.comm_eff_scale)
    step = dict(vars(st))  # shallow: asdict's deep copies cost more than the whole prediction
    step["interconnect"] = fab.to_json()
    return JobPrediction(
        name=j.name, strategy=r.label(), gpus=r.gpus, nodes=fab.nodes(r.gpus),
        device=_device_name(j.device), micro_batch=r.micro_batch, grad_accum=r.grad_accum,
        global_batch=r.global_batch, tokens_per_step=r.tokens_per_step, steps=steps,
        time_s=T, time_lo_s=T / ft, time_hi_s=T * ft, gpu_energy_j=Eg, gpu_energy_lo_j=Eg / fe,
        gpu_energy_hi_j=Eg * fe, host_energy_j=Eh, host_energy_lo_j=Eh / ft, host_energy_hi_j=Eh * ft,
        total_energy_j=Etot, total_energy_lo_j=Etot / fe,
        total_energy_hi_j=Etot * fe, energy_per_token_j=Etot / (r.tokens_per_step * steps),
        step=step, memory=mem.to_json(), fits_memory=mem.fits, interval_why=why, warnings=warn,
        covers=COVERS, params={"framework": r.framework, "kappa": prm.kappa_for(r.framework),
                               "host_s_per_kernel": prm.host_for(r.framework), "step_s": prm.step_s,
                               "wait_ratio": prm.wait_ratio, "host_w_per_gpu": host.total_w, "host_source": host.source,
                               "calibration": prm.provenance.get("calibration")})
