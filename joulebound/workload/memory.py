"""Device memory of one training step on one GPU: weights, gradients, optimizer state,
activations and a runtime reserve — the one memory model the CLI (trace / characterize / plan
warnings, the demo) and the job predictor (:func:`joulebound.jobs.job.memory`, which adds
sharding and parallelism) share.

Bytes, per GPU:

* weights ``P·s`` and gradients ``P·s`` (``P`` parameters held on this GPU, ``s`` bytes per
  element: 2 for fp16/bf16, 4 otherwise), divided by the sharding degree (FSDP / ZeRO-3);
* optimizer state: AdamW two fp32 moments (8 B per parameter), SGD one momentum (4 B), plus an
  fp32 master copy (4 B) in mixed precision; sharded like the weights;
* activations (Korthikanti et al., *Reducing Activation Recomputation in Large Transformer
  Models*, 2022, eq. 1–2): per layer ``S·b·d·(10 + 24/t + 5·h·S/(d·t))`` bytes in 16-bit (×2 in
  fp32) for sequence ``S``, micro-batch ``b``, width ``d``, heads ``h``, tensor parallelism ``t``;
  with full recomputation only the layer inputs (``2·S·b·d``) plus one layer's full set; times the
  micro-batches in flight (pipeline); plus the logits ``S·b·V/t`` in fp32;
* a runtime reserve (CUDA context, allocator, library workspaces; estimate).
"""

from __future__ import annotations

from dataclasses import dataclass

from joulebound.core.provenance import MODELED
from joulebound.workload.config import TrainingConfig

#: CUDA context, allocator reserve and workspaces per GPU (bytes; estimate)
RUNTIME_RESERVE_BYTES = 1.5 * 2**30


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes on the most loaded GPU (modeled) and the device's memory (0 = unknown)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    reserve: float
    device_bytes: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.reserve

    @property
    def fits(self) -> bool:
        return not self.device_bytes or self.total <= self.device_bytes

    def to_json(self) -> dict:
        d = dict(vars(self))
        d.update(total=self.total, fits=self.fits, provenance=MODELED)
        return d

    def describe(self) -> str:
        """``"22.9 GiB (weights 2.4, gradients 2.4, optimizer 14.7, activations 2.0, reserve 1.5)"``."""
        g = 2.0 ** 30
        return (f"{self.total / g:.1f} GiB (weights {self.weights / g:.1f}, gradients "
                f"{self.gradients / g:.1f}, optimizer {self.optimizer / g:.1f}, activations "
                f"{self.activations / g:.1f}, reserve {self.reserve / g:.1f})")


def step_memory(*, params: float, layers: int, hidden: int, heads: int, seq: int,
                micro_batch: int, vocab: int, dtype_bytes: int, optimizer: str | None = "adamw",
                tp: int = 1, shard: int = 1, recompute: bool = False, in_flight: int = 1,
                device_bytes: float = 0.0, reserve: float = RUNTIME_RESERVE_BYTES
                ) -> MemoryEstimate:
    """The memory of one GPU holding ``params`` parameters (already divided by tensor/pipeline
    parallelism) and ``layers`` layers' activations (see the module docstring).

    ``optimizer``: ``"adamw"``, ``"sgd"`` or ``None`` (no optimizer state: forward/backward only).
    """
    s = dtype_bytes
    weights = params * s / shard
    opt_b = {"adamw": 8, "sgd": 4, None: 0}[optimizer]
    opt = params * (opt_b + (4 if s == 2 and optimizer else 0)) / shard
    S, b, d, h, t = seq, micro_batch, hidden, heads, tp
    full = S * b * d * (10 + 24 / t + 5 * h * S / (d * t)) * s / 2
    act = (layers * 2 * S * b * d * s / 2 + full) if recompute else layers * full
    act = act * max(in_flight, 1) + S * b * vocab / t * 4
    return MemoryEstimate(weights, weights, opt, act, reserve, float(device_bytes or 0))


def training_memory(cfg: TrainingConfig, optimizer: bool = True, device_bytes: float = 0.0
                    ) -> MemoryEstimate:
    """One training step of a :class:`~joulebound.workload.config.TrainingConfig` (its
    ``micro_batch`` on one GPU; AdamW, or no optimizer state with ``optimizer=False``)."""
    cfg = cfg.filled()
    return step_memory(params=float(cfg.params()), layers=cfg.layers, hidden=cfg.hidden,
                       heads=cfg.heads, seq=cfg.seq, micro_batch=cfg.micro_batch, vocab=cfg.vocab,
                       dtype_bytes=cfg.dtype_bytes, optimizer="adamw" if optimizer else None,
                       recompute=cfg.recompute, device_bytes=device_bytes)


def trace_memory_warning(trace, spec) -> str | None:
    """A warning when an analytic trace's training step needs more than ``spec``'s memory
    (``None`` when it fits, or for a trace that is not analytic)."""
    m = trace.meta
    if m.get("source") != "analytic" or not spec.memory_bytes:
        return None
    try:
        cfg = TrainingConfig.from_trace_meta(m)
    except (KeyError, TypeError):
        return None
    est = training_memory(cfg, optimizer=m.get("optimizer", True) is not False,
                          device_bytes=spec.memory_bytes)
    if est.fits:
        return None
    return (f"{cfg.name} at batch {cfg.micro_batch} x seq {cfg.seq} needs about {est.describe()} "
            f"(modeled) but {spec.name} has {spec.memory_bytes / 2**30:.1f} GiB: as one step it "
            "cannot run on this GPU (lower --batch, use activation recompute, or shard it); the "
            "per-kernel figures are still computed, as if each kernel ran alone")
