"""The hardware and communication inputs of the energy laws, read from the shared tables.

The laws (:mod:`joulebound.jobs.laws`) need, per GPU, the dense peak FLOP/s of the training
dtype, the DRAM bandwidth, the board power and the GPU-to-GPU link, and — for the pre-run law's
predicted parallel efficiency η̂_par — the time of one step's collectives. All of them come from
the one device catalog (:mod:`joulebound.hw.catalog`), the one link table
(:mod:`joulebound.hw.links`) and the mechanistic predictor's collective formulas
(:mod:`joulebound.jobs.collectives`). Two conventions are the laws' own **calibrated inputs**
(their coefficients, shipped in ``data/prerun_default.json``, were fitted with them), kept so that
no law figure moves:

* **peak of fp32 training** is the TF32 tensor-core rate where the GPU has one (Ampere and later),
  as the Mayaki ECAI data does for the A100 (156 TFLOP/s) — :func:`law_peak`. The kernel model's
  :meth:`~joulebound.hw.spec.DeviceSpec.peak` keeps fp32 for fp32.
* **the link** is the catalog's ``interconnect`` *with* peer-to-peer: the laws predate the
  ``-nop2p`` variants (GeForce cards, staged through host memory), so ``pcie3-nop2p`` prices as
  ``pcie3`` — :func:`law_link`; and the collectives reach ``link_eff`` (default 0.7) of the
  nominal bandwidth instead of the table's per-link NCCL efficiency.

The communication model of η̂_par (per optimizer step, P parameters, b bytes per element, B global
batch, S sequence, d hidden, L layers, N GPUs; ring collectives of
:mod:`~joulebound.jobs.collectives` over bandwidth ``link.bandwidth_bps·link_eff`` and latency
``link.latency_s``):

* **DDP** — one ring all-reduce of the P·b gradient bytes, overlapped with the backward pass
  (fraction ``overlap``, default 0.5);
* **FSDP** (ZeRO-3) — two all-gathers of the parameters and one reduce-scatter of the gradients,
  P·b bytes each; same overlap as DDP;
* **TP** (Megatron) — 4·L ring all-reduces of the B·S·d·b activations, on the critical path;
* **PP** — 2·(N−1) point-to-point transfers of B·S·d·b/N bytes, plus the pipeline bubble
  (N−1)/(m+N−1) of the compute for m micro-batches (default m = 4·N).

Step time on N GPUs: ``t_N = t_comp/N + (1 − overlap)·t_comm`` with ``t_comp = FLOPs/(peak·eff)``
the 1-GPU compute time; S(N) = t_1/t_N (same global batch, so work-normalized) and η = S/N.
Everything here is modeled.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from joulebound.core.errors import JouleboundError
from joulebound.hw.links import Link, get_link
from joulebound.hw.spec import DeviceSpec
from joulebound.jobs.collectives import allgather, allreduce_ring, reduce_scatter, sendrecv
from joulebound.jobs.strategy import check_gpus, normalize_strategy

#: the link a catalog entry without an ``interconnect`` is priced on
DEFAULT_LAW_LINK = "pcie4"
#: fraction of the nominal link bandwidth the laws' collectives reach (their calibrated input)
LAW_LINK_EFF = 0.7
#: names only the open data uses (Mayaki ECAI's "grid" machine is an RTX 2080 Ti); every other
#: name and alias (``a100``, ``3080ti``, product names) is the device catalog's
_DATA_ALIASES = {"grid": "rtx2080ti"}
_PEAK_ORDER = {"fp32": ("tf32", "fp32"), "tf32": ("tf32", "fp32"), "fp16": ("fp16", "bf16", "fp32"),
               "bf16": ("bf16", "fp16", "fp32"), "fp8": ("fp8", "fp16", "bf16")}


def law_device(name: str) -> DeviceSpec:
    """The catalog entry of ``name`` (case-insensitive; the catalog's aliases and the open data's
    ``grid``); unknown names raise the catalog's error, listing its GPUs."""
    from joulebound.hw.catalog import get_device

    key = str(name).strip().lower()
    return get_device(_DATA_ALIASES.get(key, key))


def law_peak(peak_flops: Mapping[str, float], dtype: str = "fp32", device: str = "") -> float:
    """Dense peak FLOP/s the laws use for training in ``dtype`` (see the module docstring: fp32
    training runs at the TF32 rate where there is one)."""
    dtype = dtype.lower()
    for k in _PEAK_ORDER.get(dtype, (dtype,)):
        if peak_flops.get(k):
            return float(peak_flops[k])
    have = ", ".join(k for k in ("fp32", "tf32", "fp16", "bf16", "fp8") if peak_flops.get(k))
    raise JouleboundError(f"{device}: no peak FLOP/s for dtype {dtype!r}; use one of {have}")


def law_link(spec: DeviceSpec) -> Link:
    """The link the laws price ``spec``'s collectives on (the catalog's, with peer-to-peer)."""
    return get_link((spec.interconnect or DEFAULT_LAW_LINK).removesuffix("-nop2p"))


def comm_time(strategy: str, n: float, params: float, B: float, S: float, d: float, L: float,
               nbytes: float, bw: float, lat: float) -> float:
    """Seconds of one step's collectives per GPU (see the module docstring)."""
    n_ = int(n)
    if strategy == "single" or n_ <= 1:
        return 0.0
    if strategy == "ddp":
        return allreduce_ring(params * nbytes, n_, bw, lat)
    if strategy == "fsdp":
        size = params * nbytes
        return 2 * allgather(size, n_, bw, lat) + reduce_scatter(size, n_, bw, lat)
    if strategy == "tp":
        return 4 * L * allreduce_ring(B * S * d * nbytes, n_, bw, lat)
    return 2 * (n_ - 1) * sendrecv(B * S * d * nbytes / n_, bw, lat)  # pp


def predicted_speedup(strategy: str, n: ArrayLike, *, flops: float, params: float, B: float,
                      S: float, d: float, L: float, device: str = "rtx2080ti", dtype: str = "fp32",
                      compute_eff: float = 0.4, link: str | None = None,
                      link_eff: float = LAW_LINK_EFF, overlap: float | None = None,
                      microbatches: int | None = None) -> np.ndarray:
    """Modeled work-normalized speedup S(N) of one training step (see the module docstring).

    ``flops`` is the step's training FLOPs (:func:`~joulebound.jobs.proxies.training_flops`),
    ``compute_eff`` the achieved fraction of peak on 1 GPU (the pre-run law supplies its own
    prediction), ``link`` a name of :mod:`joulebound.hw.links` (default :func:`law_link`)."""
    from joulebound.jobs.proxies import dtype_bytes

    strategy = normalize_strategy(strategy)
    n = check_gpus(n)
    spec = law_device(device)
    ln = get_link(link) if link else law_link(spec)
    t_comp = flops / (law_peak(spec.peak_flops, dtype, spec.name) * compute_eff)
    nbytes = dtype_bytes(dtype)
    bw = ln.bandwidth_bps * link_eff
    t_comm = np.array([comm_time(strategy, float(k), params, B, S, d, L, nbytes, bw, ln.latency_s)
                       for k in n.ravel()], dtype=float).reshape(n.shape)
    if overlap is None:
        overlap = 0.5 if strategy in ("ddp", "fsdp") else 0.0
    t_n = t_comp / n + (1 - overlap) * t_comm
    if strategy == "pp":
        m = microbatches or 4 * n
        t_n = t_n / (1 - (n - 1) / (m + n - 1))
    return t_comp / t_n


def predicted_efficiency(strategy: str, n: ArrayLike, **kw: object) -> np.ndarray:
    """Modeled η(N) = S(N)/N (see :func:`predicted_speedup` for the keywords)."""
    return predicted_speedup(strategy, n, **kw) / check_gpus(n)  # type: ignore[arg-type]
