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
* modern decoders (:attr:`TrainingConfig.modern <joulebound.workload.config.TrainingConfig.modern>`:
  GQA, SwiGLU, RMSNorm, no dropout) count their stored tensors instead
  (:func:`layer_activation_elements`): per layer the two norms' inputs and outputs ``4·T·d``
  (replicated under tensor parallelism), and split by ``t``: ``q`` ``T·d``, ``k`` and ``v``
  ``T·d_kv`` each (``d_kv = kv_heads·head_dim``: grouped-query attention stores ``kv_heads``
  heads, as FlashAttention / SDPA with GQA and Megatron do; Hugging Face's eager ``repeat_kv``
  copies are not counted), the attention probabilities ``h·S²·b``, the attention output
  ``T·d``, the MLP's inner tensors ``4·T·ff`` (SwiGLU: gate, up, SiLU, product; GELU
  ``2·T·ff``), plus ``T·r`` per LoRA adapter (also on a GPT-2 / BERT block); ``T = S·b``
  tokens, ``s`` bytes each;
* LoRA / PEFT: the frozen base weights are held (``P·s``) but get no gradients and no optimizer
  state: gradients and optimizer state are those of the ``trainable`` adapter parameters only;
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
                device_bytes: float = 0.0, reserve: float = RUNTIME_RESERVE_BYTES,
                trainable: float | None = None, layer_activation_bytes: float | None = None
                ) -> MemoryEstimate:
    """The memory of one GPU holding ``params`` parameters (already divided by tensor/pipeline
    parallelism) and ``layers`` layers' activations (see the module docstring).

    ``optimizer``: ``"adamw"``, ``"sgd"`` or ``None`` (no optimizer state: forward/backward only).
    ``trainable``: the parameters of ``params`` that get gradients and optimizer state (default
    all; LoRA: the adapters). ``layer_activation_bytes``: one layer's stored activations per
    micro-batch on this GPU (bytes; default Korthikanti et al.'s GPT block, see the module
    docstring).
    """
    s = dtype_bytes
    train = params if trainable is None else trainable
    weights = params * s / shard
    grads = train * s / shard
    opt_b = {"adamw": 8, "sgd": 4, None: 0}[optimizer]
    opt = train * (opt_b + (4 if s == 2 and optimizer else 0)) / shard
    S, b, d, h, t = seq, micro_batch, hidden, heads, tp
    if layer_activation_bytes is None:
        full = S * b * d * (10 + 24 / t + 5 * h * S / (d * t)) * s / 2
    else:
        full = layer_activation_bytes
    act = (layers * 2 * S * b * d * s / 2 + full) if recompute else layers * full
    act = act * max(in_flight, 1) + S * b * vocab / t * 4
    return MemoryEstimate(weights, grads, opt, act, reserve, float(device_bytes or 0))


def layer_activation_elements(cfg: TrainingConfig, tp: int = 1) -> float | None:
    """Elements one layer stores for its backward pass per micro-batch on one GPU of ``tp``
    tensor-parallel ranks, for a modern decoder or a LoRA run (module docstring); ``None`` for a
    GPT-2 / BERT block under full fine-tuning (:func:`step_memory`'s Korthikanti formula)."""
    if not (cfg.modern or cfg.lora_rank):
        return None
    c = cfg.filled()
    T, d, ff, S, h = c.seq * c.micro_batch, c.hidden, c.ff, c.seq, c.heads
    adapters = T * c.lora_rank * len(c.lora_targets) if c.lora_rank else 0
    if not c.modern:  # Korthikanti's block (16-bit bytes / 2) plus the adapters
        return T * d * (10 + 24 / tp + 5 * h * S / (d * tp)) / 2 + adapters
    inner = (4 if c.mlp == "swiglu" else 2) * T * ff
    split = T * d + 2 * T * c.kv_dim + T * d + inner + h * S * S * c.micro_batch
    return 4 * T * d + split / tp + adapters


def training_memory(cfg: TrainingConfig, optimizer: bool = True, device_bytes: float = 0.0
                    ) -> MemoryEstimate:
    """One training step of a :class:`~joulebound.workload.config.TrainingConfig` (its
    ``micro_batch`` on one GPU; AdamW, or no optimizer state with ``optimizer=False``; LoRA:
    gradients and optimizer state of the adapters only)."""
    cfg = cfg.filled()
    act = layer_activation_elements(cfg)
    train = float(cfg.trainable_params())
    held = float(cfg.params()) + (train if cfg.lora_rank else 0.0)
    return step_memory(params=held, layers=cfg.layers, hidden=cfg.hidden,
                       heads=cfg.heads, seq=cfg.seq, micro_batch=cfg.micro_batch, vocab=cfg.vocab,
                       dtype_bytes=cfg.dtype_bytes, optimizer="adamw" if optimizer else None,
                       recompute=cfg.recompute, device_bytes=device_bytes, trainable=train,
                       layer_activation_bytes=None if act is None else act * cfg.dtype_bytes)


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
