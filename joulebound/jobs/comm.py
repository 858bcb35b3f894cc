"""Pre-run parallel efficiency η(N) from a communication model (no measured runtime needed).

Per optimizer step and per GPU (P parameters, b bytes per parameter/activation element,
B global batch, S sequence, d hidden, L layers, N GPUs):

* **DDP** — one ring all-reduce of the gradients: volume 2·(N−1)/N · P·b bytes, 2·(N−1) latency
  hops; overlapped with the backward pass (fraction ``overlap``, default 0.5).
* **FSDP** (ZeRO-3) — all-gather the parameters in forward and again in backward, reduce-scatter
  the gradients: volume 3·(N−1)/N · P·b, 3·(N−1) hops; same overlap as DDP.
* **TP** (Megatron) — per layer 2 all-reduces in forward and 2 in backward of the B·S·d
  activations: volume 4·L · 2·(N−1)/N · B·S·d·b, 4·L·2·(N−1) hops; on the critical path
  (no overlap).
* **PP** — point-to-point activations at each of the N−1 stage boundaries, forward and backward:
  2·B·S·d·b per boundary, plus the pipeline bubble (N−1)/(m+N−1) of the compute for m
  micro-batches (default m = 4·N).

Step time on N GPUs: ``t_N = t_comp/N + (1 − overlap)·t_comm`` with
``t_comm = volume/(link_bw·link_eff) + hops·latency`` and ``t_comp = FLOPs/(peak·eff)`` the 1-GPU
compute time. S(N) = t_1/t_N (same global batch, so work-normalized) and η = S/N.

Link figures (:data:`LINKS`) are nominal per-direction, per-GPU bandwidths; ``link_eff`` (default
0.7) is the fraction NCCL bus bandwidth typically reaches. This is a model: labeled "modeled".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from joulebound.core.errors import JouleboundError, did_you_mean
from joulebound.jobs.hardware import get_hw
from joulebound.jobs.speedup import check_gpus, normalize_strategy


@dataclass(frozen=True)
class Link:
    """A GPU-to-GPU interconnect: per-direction bandwidth (bytes/s) and per-hop latency (s)."""

    name: str
    bandwidth: float
    latency: float
    note: str


LINKS: dict[str, Link] = {k.name: k for k in [
    Link("pcie3", 15.75e9, 10e-6, "PCIe 3.0 x16, 15.75 GB/s per direction"),
    Link("pcie4", 31.5e9, 8e-6, "PCIe 4.0 x16, 31.5 GB/s per direction"),
    Link("pcie5", 63.0e9, 6e-6, "PCIe 5.0 x16, 63 GB/s per direction"),
    Link("nvlink2", 150e9, 3e-6, "NVLink 2 (V100 SXM2), 300 GB/s bidirectional"),
    Link("nvlink3", 300e9, 3e-6, "NVLink 3 (A100 SXM4), 600 GB/s bidirectional"),
    Link("nvlink4", 450e9, 2e-6, "NVLink 4 (H100/H200 SXM), 900 GB/s bidirectional"),
    Link("nvlink5", 900e9, 2e-6, "NVLink 5 (B200), 1.8 TB/s bidirectional"),
]}


def get_link(name: str) -> Link:
    key = str(name).strip().lower().replace(".", "").replace(" ", "")
    if key not in LINKS:
        raise JouleboundError(f"unknown interconnect {name!r}." + did_you_mean(key, list(LINKS)))
    return LINKS[key]


def comm_volume(strategy: str, n: np.ndarray, params: float, B: float, S: float, d: float,
                L: float, nbytes: float) -> tuple[np.ndarray, np.ndarray]:
    """Bytes each GPU sends per step and the number of latency hops, for each N in ``n``."""
    strategy = normalize_strategy(strategy)
    n = check_gpus(n)
    frac = (n - 1) / n
    if strategy == "single":
        return np.zeros_like(n), np.zeros_like(n)
    if strategy == "ddp":
        return 2 * frac * params * nbytes, 2 * (n - 1)
    if strategy == "fsdp":
        return 3 * frac * params * nbytes, 3 * (n - 1)
    if strategy == "tp":
        return 4 * L * 2 * frac * B * S * d * nbytes, 4 * L * 2 * (n - 1)
    # pp
    return 2 * (n - 1) * B * S * d * nbytes / np.maximum(n, 1), 2 * (n - 1)


def predicted_speedup(strategy: str, n, *, flops: float, params: float, B: float, S: float,  # noqa: ANN001
                      d: float, L: float, device: str = "rtx2080ti", dtype: str = "fp32",
                      compute_eff: float = 0.4, link: str | None = None, link_eff: float = 0.7,
                      overlap: float | None = None, microbatches: int | None = None) -> np.ndarray:
    """Modeled work-normalized speedup S(N) of one training step (see module docstring).

    ``flops`` is the step's training FLOPs (:func:`~joulebound.jobs.proxies.training_flops`),
    ``compute_eff`` the achieved fraction of peak on 1 GPU (the pre-run law supplies its own
    prediction)."""
    from joulebound.jobs.proxies import dtype_bytes

    strategy = normalize_strategy(strategy)
    n = check_gpus(n)
    hw = get_hw(device)
    ln = get_link(link or hw.link)
    t_comp = flops / (hw.peak_for(dtype) * compute_eff)
    vol, hops = comm_volume(strategy, n, params, B, S, d, L, dtype_bytes(dtype))
    t_comm = vol / (ln.bandwidth * link_eff) + hops * ln.latency
    if overlap is None:
        overlap = 0.5 if strategy in ("ddp", "fsdp") else 0.0
    t_n = t_comp / n + (1 - overlap) * t_comm
    if strategy == "pp":
        m = microbatches or 4 * n
        t_n = t_n / (1 - (n - 1) / (m + n - 1))
    return t_comp / t_n


def predicted_efficiency(strategy: str, n, **kw) -> np.ndarray:  # noqa: ANN001
    """Modeled η(N) = S(N)/N (see :func:`predicted_speedup` for the keywords)."""
    return predicted_speedup(strategy, n, **kw) / check_gpus(n)
