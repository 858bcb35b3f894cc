"""Device memory of one training step on one GPU: weights, gradients, optimizer state,
activations and a runtime reserve — the one memory model the CLI (trace / characterize / plan
warnings, the demo) and the job predictor (:func:`joulebound.jobs.job.memory`, which adds
sharding and parallelism) share.

Bytes, per GPU:

* weights ``P·s`` and gradients ``P·s`` (``P`` parameters held on this GPU, ``s`` bytes per
  element: 2 for fp16/bf16, 4 otherwise), divided by the sharding degree (FSDP / ZeRO-3);
* optimizer state: AdamW two fp32 moments (8 B per parameter), SGD one momentum (4 B), plus an
  fp32 master copy (4 B) in mixed precision; sharded like the weights, or alone over the
  data-parallel ranks by a distributed optimizer (Megatron ``--use-distributed-optimizer``,
  ZeRO-1);
* activations (Korthikanti et al., *Reducing Activation Recomputation in Large Transformer
  Models*, 2022, sec. 4 and Table 2), counted tensor by tensor (:class:`LayerActivations`) in
  four groups per layer, ``T = S·b`` tokens of sequence ``S`` and micro-batch ``b``, width
  ``d``, heads ``h``, tensor parallelism ``t``, in 16-bit bytes (×2 in fp32):

  - *replicated* under tensor parallelism: LayerNorm inputs, the QKV and MLP inputs (LayerNorm
    outputs), two dropout masks, ``10·T·d``; sequence parallelism divides them by ``t``;
  - *split* by ``t``: q, k, v, the attention output, the MLP's GELU input and output,
    ``(8·d + 4·ff)·T`` (``24·T·d`` at ``ff = 4·d``);
  - the attention core's ``S²`` tensors (softmax output, dropout mask and output)
    ``5·h·S²·b``, split by ``t``: FlashAttention stores its fp32 softmax statistics
    ``4·h·S·b`` instead, selective recompute (Megatron's: the attention core again in
    backward) stores none;
  - FP8 training (Transformer Engine) keeps the GEMM inputs (QKV, output projection, the two
    MLP inputs) in FP8, 1 byte instead of 2;

  so per layer ``S·b·d·(10 + 24/t + 5·h·S/(d·t))`` (eq. 2), ``S·b·d·34/t`` with sequence
  parallelism and selective recompute; with full recompute each layer's input (``2·S·b·d``,
  ``/t`` with sequence parallelism) per micro-batch plus one layer's full set once; times the
  micro-batches in flight (a pipeline's first stage); plus the logits ``S·b·V/t`` in fp32;
* modern decoders (:attr:`TrainingConfig.modern <joulebound.workload.config.TrainingConfig.modern>`:
  GQA, SwiGLU, RMSNorm, no dropout) count their own tensors in the same groups
  (:func:`layer_activations`): replicated the two norms' inputs and outputs ``4·T·d``; split
  ``q`` ``T·d``, ``k`` and ``v`` ``T·d_kv`` each (``d_kv = kv_heads·head_dim``: grouped-query
  attention stores ``kv_heads`` heads, as FlashAttention / SDPA with GQA and Megatron do;
  Hugging Face's eager ``repeat_kv`` copies are not counted), the attention output ``T·d``, the
  MLP's inner tensors ``4·T·ff`` (SwiGLU: gate, up, SiLU, product; GELU ``2·T·ff``); the
  attention probabilities ``h·S²·b``; plus ``T·r`` per LoRA adapter (also on a GPT-2 / BERT
  block); ``s`` bytes each;
* LoRA / PEFT: the frozen base weights are held (``P·s``) but get no gradients and no optimizer
  state: gradients and optimizer state are those of the ``trainable`` adapter parameters only;
* FP8 training also holds the weights' FP8 casts (the job predictor: 2 B per parameter, the
  weight and its transpose);
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
    """Bytes on the most loaded GPU (modeled) and the device's memory (0 = unknown);
    ``assumes``: the memory-saving techniques the figure assumes, in words (e.g.
    ``"FlashAttention, selective recompute"``; empty: none)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    reserve: float
    device_bytes: float
    assumes: str = ""

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


def step_memory(*, params: float, dtype_bytes: int, activation_bytes: float,
                optimizer: str | None = "adamw", shard: int = 1,
                optimizer_shard: int | None = None, trainable: float | None = None,
                weight_copy_bytes: float = 0.0, device_bytes: float = 0.0,
                reserve: float = RUNTIME_RESERVE_BYTES) -> MemoryEstimate:
    """The memory of one GPU holding ``params`` parameters (already divided by tensor/pipeline
    parallelism) and ``activation_bytes`` of activations (:func:`stored_activations`), see the
    module docstring.

    ``optimizer``: ``"adamw"``, ``"sgd"`` or ``None`` (no optimizer state: forward/backward only).
    ``shard``: the ranks weights, gradients and optimizer state are sharded over (FSDP /
    ZeRO-3). ``optimizer_shard``: the ranks the optimizer state (moments and fp32 master
    weights) is sharded over (default ``shard``; a distributed optimizer / ZeRO-1 shards it over
    the data-parallel ranks while weights and gradients stay whole). ``trainable``: the
    parameters of ``params`` that get gradients and optimizer state (default all; LoRA: the
    adapters). ``weight_copy_bytes``: further per-GPU copies of the weights (bytes; FP8 casts,
    FSDP's gathered units), counted with the weights.
    """
    s = dtype_bytes
    train = params if trainable is None else trainable
    weights = params * s / shard + weight_copy_bytes
    grads = train * s / shard
    opt_b = {"adamw": 8, "sgd": 4, None: 0}[optimizer]
    opt = train * (opt_b + (4 if s == 2 and optimizer else 0)) / (optimizer_shard or shard)
    return MemoryEstimate(weights, grads, opt, activation_bytes, reserve, float(device_bytes or 0))


#: what each full-recompute mode keeps: ``none`` every activation, ``selective`` all but the
#: attention core's ``S²`` tensors (recomputed in backward), ``full`` only each layer's input
RECOMPUTE_MODES: tuple[str, ...] = ("none", "selective", "full")


@dataclass(frozen=True)
class LayerActivations:
    """The tensors one transformer layer keeps for its backward pass, per micro-batch, in bytes
    on one GPU before tensor parallelism (``tp = 1``), in four groups (Korthikanti et al. 2022,
    sec. 4; module docstring):

    Attributes:
        replicated: tensors Megatron's tensor parallelism replicates on every rank (LayerNorm /
            RMSNorm inputs and outputs, dropout masks): divided by ``tp`` only with sequence
            parallelism (GPT block: ``10·T·d`` 16-bit bytes).
        split: tensors split over the tensor-parallel ranks (q, k, v, the attention output, the
            MLP's inner tensors) (GPT block: ``(8·d + 4·ff)·T``).
        scores: the attention core's ``S²`` tensors (softmax output, its dropout mask and
            output: ``5·h·S²·b`` in 16-bit bytes; a modern decoder without dropout ``2·h·S²·b``):
            not stored by FlashAttention, recomputed by selective recompute; split by ``tp``.
        gemm_inputs: the part of ``replicated`` + ``split`` that feeds a GEMM (QKV, output
            projection, the MLP's two inputs): stored in FP8 (1 byte) by FP8 training.
        gemm_replicated: the part of ``gemm_inputs`` that is in ``replicated``.
        flash_stats: FlashAttention's per-row softmax statistics (fp32 log-sum-exp,
            ``4·h·S·b`` bytes), stored instead of ``scores``; split by ``tp``.
        layer_input: the layer's input ``T·d·s`` (what full recompute keeps); divided by ``tp``
            with sequence parallelism.
        adapters: LoRA adapters' inner tensors ``T·r·s`` per target (not split).
    """

    replicated: float
    split: float
    scores: float
    gemm_inputs: float
    gemm_replicated: float
    flash_stats: float
    layer_input: float
    adapters: float = 0.0

    def per_gpu(self, tp: int = 1, *, sequence_parallel: bool = False, flash: bool = False,
                selective: bool = False, fp8: bool = False) -> float:
        """Bytes one layer keeps per micro-batch on one of ``tp`` tensor-parallel GPUs (without
        full recompute): sequence parallelism divides the replicated tensors by ``tp``,
        FlashAttention replaces the ``S²`` tensors by its softmax statistics, selective
        recompute drops them, FP8 stores the GEMM inputs in 1 byte instead of 2."""
        rep, split = self.replicated, self.split
        if fp8:  # Transformer Engine keeps the FP8 casts of the GEMM inputs (half of 16-bit)
            rep -= self.gemm_replicated / 2
            split -= (self.gemm_inputs - self.gemm_replicated) / 2
        attn = 0.0 if selective and not flash else self.flash_stats if flash else self.scores
        return rep / (tp if sequence_parallel else 1) + (split + attn) / tp + self.adapters


def layer_activations(cfg: TrainingConfig) -> LayerActivations:
    """The stored tensors of one layer of ``cfg`` at its micro-batch (:class:`LayerActivations`;
    bytes at ``cfg.dtype``). A GPT-2 / BERT block is Korthikanti et al.'s count (16-bit bytes,
    scaled by ``s/2`` for 32-bit dtypes as :func:`step_memory`); a modern decoder counts its
    tensors (module docstring)."""
    c = cfg.filled()
    s = c.dtype_bytes
    T, d, ff, S, h, b = c.seq * c.micro_batch, c.hidden, c.ff, c.seq, c.heads, c.micro_batch
    adapters = T * c.lora_rank * len(c.lora_targets) * s if c.lora_rank else 0.0
    stats = 4.0 * h * S * b
    if not c.modern:  # Korthikanti's GPT block, in 16-bit bytes, times s/2
        u = s / 2
        return LayerActivations(replicated=10 * T * d * u, split=(8 * d + 4 * ff) * T * u,
                                scores=5 * h * S * S * b * u, gemm_inputs=(6 * d + 2 * ff) * T * u,
                                gemm_replicated=4 * T * d * u, flash_stats=stats,
                                layer_input=2 * T * d * u, adapters=adapters)
    inner = (4 if c.mlp == "swiglu" else 2) * T * ff
    return LayerActivations(replicated=4 * T * d * s, split=(2 * T * d + 2 * T * c.kv_dim + inner) * s,
                            scores=h * S * S * b * s, gemm_inputs=(3 * T * d + T * ff) * s,
                            gemm_replicated=2 * T * d * s, flash_stats=stats,
                            layer_input=T * d * s, adapters=adapters)


def stored_activations(cfg: TrainingConfig, layers: int, *, tp: int = 1, in_flight: int = 1,
                       recompute: str = "none", sequence_parallel: bool = False,
                       flash: bool = False, fp8: bool = False) -> float:
    """Activation bytes of one training step on one GPU holding ``layers`` layers of ``cfg``
    (its micro-batch) with ``in_flight`` micro-batches alive (a pipeline's first stage: ``pp``):

    * ``recompute="none"`` / ``"selective"``: every layer's :meth:`LayerActivations.per_gpu`;
    * ``"full"``: each layer's input (divided by ``tp`` with sequence parallelism) plus one
      layer's full set while it is recomputed (counted once, not per micro-batch);

    plus the logits ``S·b·V/tp`` in fp32. Korthikanti et al. 2022, Table 2: per layer
    ``S·b·d·(34/t)`` with sequence parallelism and selective recompute, ``S·b·d·(10 + 24/t)``
    selective without it, ``2·S·b·d`` full recompute (16-bit bytes)."""
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {RECOMPUTE_MODES}, got {recompute!r}")
    c = cfg.filled()
    la = layer_activations(c)
    one = la.per_gpu(tp, sequence_parallel=sequence_parallel, flash=flash,
                     selective=recompute == "selective", fp8=fp8)
    if recompute == "full":
        kept = la.layer_input / (tp if sequence_parallel else 1)
        act = layers * kept * max(in_flight, 1) + one
    else:
        act = layers * one * max(in_flight, 1)
    return act + c.seq * c.micro_batch * c.vocab / tp * 4


def training_memory(cfg: TrainingConfig, optimizer: bool = True, device_bytes: float = 0.0
                    ) -> MemoryEstimate:
    """One training step of a :class:`~joulebound.workload.config.TrainingConfig` (its
    ``micro_batch`` on one GPU, attention as the analytic trace runs it: the ``S²`` scores
    stored; AdamW, or no optimizer state with ``optimizer=False``; LoRA: gradients and
    optimizer state of the adapters only)."""
    cfg = cfg.filled()
    train = float(cfg.trainable_params())
    held = float(cfg.params()) + (train if cfg.lora_rank else 0.0)
    act = stored_activations(cfg, cfg.layers, recompute="full" if cfg.recompute else "none")
    return step_memory(params=held, dtype_bytes=cfg.dtype_bytes, activation_bytes=act,
                       optimizer="adamw" if optimizer else None, trainable=train,
                       device_bytes=device_bytes)


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
