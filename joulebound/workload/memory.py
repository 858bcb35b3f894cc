"""Device memory of one training step: weights, gradients, optimizer state and activations.

Closed forms for the analytic GPT (llm.c) and BERT layouts of :mod:`.analytic` (bytes):

* weights ``N·s`` and gradients ``N·s`` (``s`` bytes per element of the training dtype);
* AdamW state: ``m`` and ``v`` in fp32 (8 B per parameter), plus an fp32 master copy (4 B) when
  the weights are stored in 16 bits;
* activations kept for the backward pass, per token: for every layer the LayerNorm outputs and
  statistics, Q/K/V, the attention output, the pre- and post-softmax scores
  (``2·h·S`` per token), the attention projection, both residual streams, the MLP input and
  its GELU output (``2·ff``) — about ``(10·d + 2·ff + 2·h·S)`` elements (llm.c's
  ``ActivationTensors``) — plus the final LayerNorm and the logits (``V``). With full activation
  recompute only each layer's input stream (``d``) is kept, plus one layer's worth.

Not counted: the CUDA context and library workspaces (~0.5–1 GiB), allocator fragmentation,
communication buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

from .analytic import DTYPE_BYTES, ModelConfig


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of device memory one training step needs (modeled).

    Attributes:
        weights_b, grads_b, optimizer_b, activations_b: the parts (bytes).
    """

    weights_b: float
    grads_b: float
    optimizer_b: float
    activations_b: float

    @property
    def total_b(self) -> float:
        return self.weights_b + self.grads_b + self.optimizer_b + self.activations_b

    def to_json(self) -> dict[str, float]:
        return {"weights_bytes": self.weights_b, "grads_bytes": self.grads_b,
                "optimizer_bytes": self.optimizer_b, "activations_bytes": self.activations_b,
                "total_bytes": self.total_b, "provenance": "modeled"}


def training_memory(cfg: ModelConfig, optimizer: bool = True) -> MemoryEstimate:
    """The memory of one training step of ``cfg`` on one GPU (no sharding)."""
    s = DTYPE_BYTES[cfg.dtype]
    n = float(cfg.params())
    opt = (8.0 + (4.0 if s < 4 else 0.0)) * n if optimizer else 0.0
    d, ff, h, S, L = cfg.hidden, int(cfg.ff or 4 * cfg.hidden), cfg.heads, cfg.seq, cfg.layers
    per_layer = 10 * d + 2 * ff + 2 * h * S
    if cfg.recompute:
        per_token = L * d + per_layer + 2 * d + cfg.vocab
    else:
        per_token = L * per_layer + 2 * d + cfg.vocab
    acts = float(per_token) * s * cfg.tokens
    return MemoryEstimate(n * s, n * s, opt, acts)


def memory_warning(cfg: ModelConfig, memory_bytes: float, device: str,
                   optimizer: bool = True) -> str | None:
    """A one-line warning when the step needs more than the device's memory (else ``None``)."""
    if not memory_bytes:
        return None
    m = training_memory(cfg, optimizer)
    if m.total_b <= memory_bytes:
        return None
    gib = 2.0 ** 30
    return (f"{cfg.name} at batch {cfg.batch} x seq {cfg.seq} needs about "
            f"{m.total_b / gib:.1f} GiB (weights {m.weights_b / gib:.1f}, gradients "
            f"{m.grads_b / gib:.1f}, optimizer {m.optimizer_b / gib:.1f}, activations "
            f"{m.activations_b / gib:.1f}; modeled) but {device} has "
            f"{memory_bytes / gib:.1f} GiB: it cannot run as one step on this GPU (lower the "
            f"batch, use activation recompute, or shard it); the plan is still computed")
