"""A training job as the mechanistic predictor sees it: a
:class:`~joulebound.workload.config.TrainingConfig` (model shape, batch, dtype; the one
training-config type, with the one parameter count) plus its parallelism and hardware.

Batch semantics (as Hugging Face's ``per_device_train_batch_size``): ``batch`` (the job keyword
and CSV column; ``config.micro_batch``) is the **per-GPU micro-batch** (sequences one GPU runs through one forward/backward); ``global_batch`` the
sequences of one optimizer step over all data-parallel ranks; ``grad_accum`` the micro-batches per
step (for pipeline parallelism: the micro-batches in flight, Megatron's ``num_microbatches``).
Give either ``batch`` (then ``global_batch = dp·batch·grad_accum``) or ``global_batch`` (then
``batch = global_batch/(dp·grad_accum)``) or both (then ``grad_accum`` follows).

Parallelism: ``gpus = dp·tp·pp``. ``strategy`` sets the default degrees — ``single`` (1 GPU),
``ddp`` (dp = N), ``fsdp`` (dp = N, parameters/gradients/optimizer state sharded, ZeRO-3),
``tp`` (Megatron tensor parallelism, tp = N), ``pp`` (1F1B pipeline, pp = N); explicit ``tp`` /
``pp`` make hybrids (e.g. ``strategy="ddp", tp=2, pp=4`` on 16 GPUs is dp = 2).

:func:`check` refuses impossible and absurd jobs with messages that say what is wrong and how to
fix it, and returns :class:`MemoryEstimate` (bytes per GPU of weights, gradients, optimizer state
and activations, Korthikanti et al. 2022 eq. 1–2) against the device memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from joulebound.core.errors import JouleboundError, did_you_mean
from joulebound.core.vocab import TRAINING_DTYPES
from joulebound.jobs.strategy import alias_note, normalize_strategy
from joulebound.workload.config import (
    ARCH_ALIASES,
    DEFAULT_VOCAB,
    SHAPE_DEFAULTS,
    TrainingConfig,
    block_params,
    load_hf_config,
)
from joulebound.workload.dispatch import DEFAULT_FRAMEWORK, get_framework
from joulebound.workload.memory import (
    RECOMPUTE_MODES,
    MemoryEstimate,
    step_memory,
    stored_activations,
)

#: architectures the analytic trace builder models, and their accepted spellings
ARCHS = ARCH_ALIASES
DTYPES = TRAINING_DTYPES + ("fp8",)
#: architectures whose GPUs run FlashAttention-2 (the ``--flash-attention`` default in 16-bit)
FLASH_ARCHITECTURES = ("Ampere", "Ada", "Ada Lovelace", "Hopper", "Blackwell")
#: the note on a job whose stack switches change its memory but not (yet) its modeled step time
#: bytes per parameter of FP8 training's weight casts (Transformer Engine keeps the FP8 weight
#: and its transpose for the wgrad/dgrad GEMMs)
FP8_WEIGHT_COPY_BYTES = 2
OPTIMIZERS = ("adamw", "sgd")
#: limits beyond which a figure is refused as absurd (largest published runs are far below)
LIMITS = {"layers": 4096, "hidden": 131072, "heads": 4096, "seq": 4_194_304, "batch": 1_000_000,
          "global_batch": 100_000_000, "gpus": 1_000_000, "ff": 1_048_576, "vocab": 10_000_000}
MAX_TOKENS = 1e16
MAX_PARAMS = 1e14

#: the job's fields that live in its :class:`TrainingConfig` (``batch`` = ``micro_batch``)
CONFIG_FIELDS = ("layers", "hidden", "heads", "seq", "arch", "ff", "vocab", "batch",
                 "global_batch", "grad_accum", "dtype", "recompute", "name")
#: the fields of the parallel layout and the run
LAYOUT_FIELDS = ("optimizer", "device", "gpus", "strategy", "tp", "pp", "pp_stages", "clocks",
                 "power_limit_w", "interconnect", "inter_node", "gpus_per_node", "nics_per_node",
                 "tokens", "distributed_optimizer", "sequence_parallel", "flash_attention",
                 "framework")
#: every keyword a :class:`Job` accepts (the columns of a job table), in the old field order
JOB_FIELDS = CONFIG_FIELDS[:-1] + LAYOUT_FIELDS + ("name",)
#: the config's modern-decoder and LoRA fields (:data:`~joulebound.workload.config.SHAPE_DEFAULTS`),
#: also :class:`Job` keywords; :meth:`Job.to_json` lists those that differ from their defaults
MODEL_FIELDS = tuple(SHAPE_DEFAULTS)
_UNSET: Any = object()


@dataclass(frozen=True, init=False)
class Job:
    """One training job: a :class:`~joulebound.workload.config.TrainingConfig` (:attr:`config`:
    shape, batch, dtype) and its parallel layout and hardware (units: sequences, tokens, W, MHz;
    see module docstring).

    Built from keywords as before (``Job(layers=12, hidden=768, heads=12, seq=128, batch=32,
    gpus=4, strategy="fsdp")``: ``batch`` is the per-GPU micro-batch, ``arch`` defaults to
    ``"bert"``), or from a config (``Job(config=cfg, gpus=4)``); shape keywords given with
    ``config`` replace its fields (so :func:`dataclasses.replace` works with either). The shape
    fields read through to the config (``job.hidden``, ``job.batch`` = ``config.micro_batch``).

    The optimized-stack switches: ``recompute`` ``"none"`` / ``"selective"`` (Megatron's: the
    attention core is recomputed) / ``"full"`` (``True`` = full, as before; the config keeps
    full recompute, :attr:`selective_recompute` the selective one); ``distributed_optimizer``
    (Megatron's ``--use-distributed-optimizer`` / ZeRO-1: optimizer state and fp32 master
    weights sharded over the data-parallel ranks); ``sequence_parallel`` (Korthikanti et al.
    2022: the LayerNorm / dropout activations split over the tensor-parallel ranks);
    ``flash_attention`` (``None``: on for 16-bit / FP8 training on Ampere or newer GPUs, as
    FlashAttention-2, PyTorch SDPA and Megatron / Transformer Engine run it); ``dtype="fp8"``
    (FP8 GEMMs over bf16, Transformer Engine; H100 / H200 / B200 only).
    """

    config: TrainingConfig
    optimizer: str = "adamw"
    device: str = "a100-pcie-80gb"
    gpus: int = 1
    strategy: str = "single"
    tp: int | None = None
    pp: int | None = None
    pp_stages: tuple[int, ...] | None = None
    clocks: str | None = None
    power_limit_w: float | None = None
    interconnect: str | None = None
    inter_node: str | None = None
    gpus_per_node: int | None = None
    nics_per_node: int = 1
    tokens: float | None = None
    distributed_optimizer: bool = False
    sequence_parallel: bool = False
    flash_attention: bool | None = None
    selective_recompute: bool = False
    framework: str | None = None

    def __init__(self, layers: Any = _UNSET, hidden: Any = _UNSET, heads: Any = _UNSET,
                 seq: Any = _UNSET, arch: Any = _UNSET, ff: Any = _UNSET, vocab: Any = _UNSET,
                 batch: Any = _UNSET, global_batch: Any = _UNSET, grad_accum: Any = _UNSET,
                 dtype: Any = _UNSET, recompute: Any = _UNSET, optimizer: str = "adamw",
                 device: str = "a100-pcie-80gb", gpus: int = 1, strategy: str = "single",
                 tp: int | None = None, pp: int | None = None,
                 pp_stages: tuple[int, ...] | None = None, clocks: str | None = None,
                 power_limit_w: float | None = None, interconnect: str | None = None,
                 inter_node: str | None = None, gpus_per_node: int | None = None,
                 nics_per_node: int = 1, tokens: float | None = None, name: Any = _UNSET, *,
                 config: TrainingConfig | None = None, distributed_optimizer: Any = False,
                 sequence_parallel: Any = False, flash_attention: Any = None,
                 selective_recompute: Any = False, framework: str | None = None,
                 **model: Any) -> None:
        unknown = sorted(set(model) - set(MODEL_FIELDS))
        if unknown:
            raise TypeError(f"Job() got unexpected keyword(s) {', '.join(unknown)}")
        if recompute is not _UNSET and recompute is not None and not isinstance(recompute, bool):
            mode = recompute_mode(recompute)  # a mode by name sets both switches
            recompute, selective_recompute = mode == "full", mode == "selective"
        given = {k: v for k, v in dict(layers=layers, hidden=hidden, heads=heads, seq=seq,
                                       arch=arch, ff=ff, vocab=vocab, micro_batch=batch,
                                       global_batch=global_batch, grad_accum=grad_accum,
                                       dtype=dtype, recompute=recompute, name=name,
                                       **model).items()
                 if v is not _UNSET}
        if config is None:
            missing = [k for k in ("layers", "hidden", "heads", "seq") if k not in given]
            if missing:
                raise TypeError(f"Job() missing the shape field(s) {', '.join(missing)}")
            given.setdefault("arch", "bert")
            given.setdefault("name", "")
            config = TrainingConfig(**given)
        elif given:
            config = replace(config, **given)
        put = object.__setattr__
        put(self, "config", config)
        for k, v in dict(optimizer=optimizer, device=device, gpus=gpus, strategy=strategy, tp=tp,
                         pp=pp, pp_stages=pp_stages, clocks=clocks, power_limit_w=power_limit_w,
                         interconnect=interconnect, inter_node=inter_node,
                         gpus_per_node=gpus_per_node, nics_per_node=nics_per_node,
                         tokens=tokens, distributed_optimizer=distributed_optimizer,
                         sequence_parallel=sequence_parallel, flash_attention=flash_attention,
                         selective_recompute=selective_recompute, framework=framework).items():
            put(self, k, v)

    # the shape, batch and dtype: read through to the config
    layers = property(lambda self: self.config.layers)
    hidden = property(lambda self: self.config.hidden)
    heads = property(lambda self: self.config.heads)
    seq = property(lambda self: self.config.seq)
    arch = property(lambda self: self.config.arch)
    ff = property(lambda self: self.config.ff)
    vocab = property(lambda self: self.config.vocab)
    batch = property(lambda self: self.config.micro_batch,
                     doc="Per-GPU micro-batch (``config.micro_batch``; sequences).")
    global_batch = property(lambda self: self.config.global_batch)
    grad_accum = property(lambda self: self.config.grad_accum)
    dtype = property(lambda self: self.config.dtype)
    recompute = property(lambda self: self.config.recompute,
                         doc="Full activation recompute (``config.recompute``; bool).")
    name = property(lambda self: self.config.name)

    @property
    def recompute_mode(self) -> str:
        """``"full"``, ``"selective"`` or ``"none"`` (the switches as given, unchecked)."""
        return "full" if self.config.recompute else "selective" if self.selective_recompute else "none"

    def to_json(self) -> dict:
        """The job as flat keywords (:data:`JOB_FIELDS`; ``batch`` = the micro-batch), then the
        model fields (:data:`MODEL_FIELDS`) that differ from their defaults."""
        d = {k: getattr(self, k) for k in JOB_FIELDS}
        d["pp_stages"] = list(self.pp_stages) if self.pp_stages else None
        if self.recompute_mode == "selective":
            d["recompute"] = "selective"
        for k, v in self.config.components():
            d[k] = list(v) if k == "lora_targets" else v
        return d


_TRUE = ("1", "true", "yes", "y", "on")
_FALSE = ("0", "false", "no", "n", "off")


def recompute_mode(v: object) -> str:
    """``"none"``, ``"selective"`` or ``"full"`` from a bool (``True`` = full) or a name
    (``none``/``selective``/``full``, or a true/false word); raises :class:`JouleboundError`."""
    if isinstance(v, bool) or v is None:
        return "full" if v else "none"
    key = str(v).strip().lower()
    if key in RECOMPUTE_MODES:
        return key
    if key in _TRUE:
        return "full"
    if key in _FALSE or key == "":
        return "none"
    raise JouleboundError(f"--recompute {v!r}: use none, selective (Megatron's: only the attention "
                          "core is recomputed) or full (every layer's forward again in backward)"
                          + did_you_mean(key, RECOMPUTE_MODES))


def _flag(name: str, v: object) -> bool:
    """A yes/no switch given as a bool or a true/false word."""
    if isinstance(v, bool):
        return v
    key = str(v).strip().lower()
    if key in _TRUE:
        return True
    if key in _FALSE:
        return False
    raise JouleboundError(f"--{name.replace('_', '-')} must be true or false (got {v!r})")


@lru_cache(maxsize=64)
def _gpu_features(device: str) -> tuple[str, str, bool] | None:
    """``(catalog name, architecture, has FP8 tensor cores)`` of ``device``; ``None`` when the
    catalog does not know it (the GPU model names the error later)."""
    from joulebound.hw.catalog import get_device

    try:
        spec = get_device(str(device))
    except JouleboundError:
        return None
    return spec.name, spec.architecture, "fp8" in spec.peak_flops


@dataclass(frozen=True)
class Resolved:
    """A checked job with every derived figure filled in: :attr:`config` is the job's
    :class:`TrainingConfig` with the arch and dtype in their one spelling, ``ff`` and ``vocab``
    filled and the three batch figures derived.

    The optimized stack, resolved: :attr:`recompute` (``"none"``/``"selective"``/``"full"``;
    ``config.recompute`` is ``True`` for full only), :attr:`flash_attention` (the default
    filled in), :attr:`sequence_parallel` (only with tp > 1), :attr:`distributed_optimizer`
    (only with dp > 1 and not FSDP, which shards the optimizer state already) and :attr:`fp8`
    (``dtype="fp8"``: the config's dtype is ``bf16``, the precision of everything but the FP8
    GEMMs). Memory (:func:`memory`) and the step time model all of them (see docs/advise.md).
    :attr:`framework`: the job's ``--framework``, or the one its switches imply (Megatron-only
    ones: sequence parallelism, the distributed optimizer, selective recompute, FP8) — else
    ``hf``."""

    job: Job
    config: TrainingConfig
    strategy: str
    dp: int
    tp: int
    pp: int
    sharded: bool
    stages: tuple[int, ...]
    params: float
    tokens_per_step: float
    warnings: tuple[str, ...] = field(default_factory=tuple)
    recompute: str = "none"
    flash_attention: bool = False
    sequence_parallel: bool = False
    distributed_optimizer: bool = False
    fp8: bool = False
    framework: str = DEFAULT_FRAMEWORK

    arch = property(lambda self: self.config.arch)
    ff = property(lambda self: self.config.ff)
    vocab = property(lambda self: self.config.vocab)
    dtype = property(lambda self: self.config.dtype)
    micro_batch = property(lambda self: self.config.micro_batch)
    grad_accum = property(lambda self: self.config.grad_accum)
    global_batch = property(lambda self: self.config.global_batch)

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    def label(self) -> str:
        """Short strategy label, e.g. ``fsdp×4``, ``dp2·tp2·pp4``."""
        if self.gpus == 1:
            return "single"
        parts = [(f"{'fsdp' if self.sharded else 'dp'}{self.dp}" if self.dp > 1 else ""),
                 f"tp{self.tp}" if self.tp > 1 else "", f"pp{self.pp}" if self.pp > 1 else ""]
        parts = [p for p in parts if p]
        return parts[0] if len(parts) == 1 else "·".join(parts)


def _int(name: str, v: object, lo: int = 1) -> int:
    if isinstance(v, bool) or v is None:
        raise JouleboundError(f"--{name.replace('_', '-')} must be an integer >= {lo} (got {v!r})")
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise JouleboundError(f"--{name.replace('_', '-')} must be an integer >= {lo} (got {v!r})") from None
    if not math.isfinite(f) or f != int(f) or f < lo:
        raise JouleboundError(f"--{name.replace('_', '-')} must be an integer >= {lo} (got {v!r})")
    i = int(f)
    lim = LIMITS.get(name)
    if lim is not None and i > lim:
        raise JouleboundError(f"--{name.replace('_', '-')} {i:,} is absurd (limit {lim:,}); check the units "
                              "(e.g. --seq is tokens per sequence, --batch sequences per GPU)")
    return i


def layer_params(hidden: int, ff: int) -> float:
    """Weights of one transformer block incl. biases and LayerNorms
    (:func:`joulebound.workload.config.block_params`)."""
    return block_params(hidden, ff)


def model_params(arch: str, layers: int, hidden: int, ff: int, vocab: int, seq: int) -> float:
    """All trainable parameters (tied input/output embedding), as the analytic trace counts:
    :meth:`joulebound.workload.config.TrainingConfig.params`."""
    return TrainingConfig(arch, layers, hidden, 1, ff, vocab, seq).params()


def resolve(job: Job) -> Resolved:
    """Check ``job`` and derive its degrees, batch and stages; raises :class:`JouleboundError`
    (the checks run in a fixed order: shape, parallelism, batch, then the totals)."""
    warn: list[str] = []
    arch, L, d, h, S, ff, V, dtype = _shape(job)
    n = _int("gpus", job.gpus)
    strategy, dp, tp, pp = _degrees(job, n, L, d, h, ff, warn)
    sharded = strategy == "fsdp"
    stages = _stages(job.pp_stages, L, pp)
    b, ga, gb = _batch(job, dp, pp, warn)
    if b > LIMITS["batch"]:
        raise JouleboundError(f"per-GPU micro-batch {b:,} is absurd (limit {LIMITS['batch']:,})")
    stack = _stack(job, dtype, dp, tp, sharded, warn)
    cfg = replace(job.config, arch=arch, layers=L, hidden=d, heads=h, seq=S, ff=ff, vocab=V,
                  dtype="bf16" if stack["fp8"] else dtype, micro_batch=b, global_batch=gb,
                  grad_accum=ga, recompute=stack["recompute"] == "full")
    params = cfg.params()
    _check_totals(job, params)
    if dp > 1 and gb // dp < 1:
        raise JouleboundError("global batch smaller than the data-parallel ranks")
    framework = _framework(job, stack, warn)
    return Resolved(job, cfg, strategy if n > 1 else "single", dp, tp, pp, sharded, stages,
                    float(params), float(gb * S), tuple(warn), **stack, framework=framework)


def _framework(job: Job, stack: dict, warn: list[str]) -> str:
    """The job's framework: the one it names (unknown names refused), else ``megatron`` when it
    uses switches only Megatron-class frameworks have (said in ``warn``), else ``hf``."""
    if job.framework is not None:
        return get_framework(job.framework).name
    megatron_only = [w for w, on in (("--sequence-parallel", stack["sequence_parallel"]),
                                     ("--distributed-optimizer", stack["distributed_optimizer"]),
                                     ("--recompute-mode selective", stack["recompute"] == "selective"),
                                     ("--dtype fp8", stack["fp8"])) if on]
    if megatron_only:
        warn.append(f"framework megatron assumed ({', '.join(megatron_only)} are Megatron / "
                    "Transformer Engine features); pass --framework to say which runs the job")
        return "megatron"
    return DEFAULT_FRAMEWORK


def _stack(job: Job, dtype: str, dp: int, tp: int, sharded: bool, warn: list[str]) -> dict:
    """The optimized-stack switches of ``job`` checked and defaulted (:class:`Resolved`'s
    ``recompute``, ``flash_attention``, ``sequence_parallel``, ``distributed_optimizer``,
    ``fp8``); notes go to ``warn``."""
    mode = "full" if job.config.recompute is True else recompute_mode(job.config.recompute)
    if mode == "none" and _flag("selective_recompute", job.selective_recompute):
        mode = "selective"
    feats = _gpu_features(str(job.device))
    fp8 = dtype == "fp8"
    if fp8 and feats is not None and not feats[2]:
        raise JouleboundError(f"--dtype fp8 needs FP8 tensor cores (H100, H200, B200); the "
                              f"{feats[0]} ({feats[1]}) has none: train in bf16 (--dtype bf16)")
    fa = job.flash_attention
    if fa is None or (isinstance(fa, str) and fa.strip().lower() in ("", "auto")):
        flash = (feats is not None and feats[1] in FLASH_ARCHITECTURES
                 and dtype in ("fp16", "bf16", "fp8"))
    else:
        flash = _flag("flash_attention", fa)
    sp = _flag("sequence_parallel", job.sequence_parallel)
    if sp and tp == 1:
        warn.append("--sequence-parallel has no effect without tensor parallelism (--tp > 1)")
        sp = False
    dist = _flag("distributed_optimizer", job.distributed_optimizer)
    if dist and sharded:
        warn.append("--distributed-optimizer: FSDP (ZeRO-3) shards the optimizer state already")
        dist = False
    elif dist and dp == 1:
        warn.append("--distributed-optimizer has no effect without data parallelism (dp = 1)")
        dist = False
    if mode == "selective" and flash:
        warn.append("selective recompute with FlashAttention: FlashAttention stores no S² "
                    "attention tensors already, so selective recompute saves no memory")
    return {"recompute": mode, "flash_attention": flash, "sequence_parallel": sp,
            "distributed_optimizer": dist, "fp8": fp8}


def _shape(job: Job) -> tuple[str, int, int, int, int, int, int, str]:
    """``(arch, layers, hidden, heads, seq, ff, vocab, dtype)`` checked; the optimizer too."""
    arch_key = str(job.arch).strip().lower()  # known spellings are canonical already
    if arch_key in ("t5", "encoder-decoder", "bart"):
        raise JouleboundError(f"--model {job.arch}: encoder-decoder models are not modeled by the "
                              "analytic kernel traces (bert = encoder, gpt = decoder); price the encoder "
                              "and decoder as two jobs, or use --law prerun")
    if arch_key not in ARCHS:
        raise JouleboundError(f"unknown --model {job.arch!r}." + did_you_mean(arch_key, list(ARCHS)))
    arch = ARCHS[arch_key]
    L = _int("layers", job.layers)
    d = _int("hidden", job.hidden)
    h = _int("heads", job.heads)
    S = _int("seq", job.seq)
    ff = _int("ff", job.ff) if job.ff is not None else 4 * d
    V = _int("vocab", job.vocab) if job.vocab is not None else DEFAULT_VOCAB[arch]
    if d % h:
        raise JouleboundError(f"--heads {h} does not divide --hidden {d} (head size must be an "
                              f"integer); pick heads among {[k for k in range(1, min(d, 128) + 1) if d % k == 0][:12]}")
    replace(job.config, arch=arch, heads=h).validate_components()
    dtype = str(job.dtype).strip().lower()
    if dtype not in DTYPES:
        raise JouleboundError(f"unknown --dtype {job.dtype!r}." + did_you_mean(dtype, DTYPES))
    if job.optimizer not in OPTIMIZERS:
        raise JouleboundError(f"unknown --optimizer {job.optimizer!r}." + did_you_mean(str(job.optimizer), OPTIMIZERS))
    return arch, L, d, h, S, ff, V, dtype


def _degrees(job: Job, n: int, L: int, d: int, h: int, ff: int,
             warn: list[str]) -> tuple[str, int, int, int]:
    """``(strategy, dp, tp, pp)`` of ``n`` GPUs, checked against the shape (layers ``L``, hidden
    ``d``, heads ``h``, ``ff``); notes go to ``warn``."""
    strategy = normalize_strategy(job.strategy)
    note = alias_note(job.strategy)
    if note:
        warn.append(note)
    tp = _int("tp", job.tp) if job.tp is not None else (n if strategy == "tp" else 1)
    pp = _int("pp", job.pp) if job.pp is not None else (n if strategy == "pp" else 1)
    if n == 1 and strategy != "single" and (tp, pp) == (1, 1):
        strategy = "single"
    if strategy == "single" and n > 1 and (tp > 1 or pp > 1):
        # --tp/--pp alone: Megatron's layout, data parallel (DDP) across the tp·pp groups
        strategy = "tp" if n == tp else "pp" if n == pp else "ddp"
    if strategy == "single" and n > 1:
        raise JouleboundError(f"strategy 'single' needs --gpus 1 (got {n}); choose ddp, fsdp, tp or pp")
    if n % (tp * pp):
        raise JouleboundError(f"--gpus {n} is not a multiple of tp·pp = {tp}·{pp}; the data-parallel "
                              "degree dp = gpus/(tp·pp) must be an integer")
    dp = n // (tp * pp)
    if strategy == "fsdp" and pp > 1:
        raise JouleboundError("FSDP (ZeRO-3) combined with pipeline parallelism is not modeled; use "
                              "--strategy ddp with --pp for data × pipeline parallelism")
    if tp > 1:
        if tp > h or h % tp:
            raise JouleboundError(f"tensor parallelism tp={tp} must divide the {h} attention heads "
                                  f"(Megatron splits heads across GPUs); use tp in "
                                  f"{[k for k in range(1, h + 1) if h % k == 0 and k <= 64]}")
        if ff % tp or d % tp:
            raise JouleboundError(f"tp={tp} must divide --hidden {d} and --ff {ff}")
        kv = job.config.kv_heads
        if kv is not None and kv % tp:
            raise JouleboundError(f"tensor parallelism tp={tp} must divide the {kv} key/value heads "
                                  f"(grouped-query attention splits them across GPUs); use tp in "
                                  f"{[k for k in range(1, kv + 1) if kv % k == 0]}")
        if tp > 8:
            warn.append(f"tp={tp} beyond one 8-GPU node: every layer's all-reduces cross nodes")
    if pp > L:
        raise JouleboundError(f"pipeline stages pp={pp} exceed the {L} layers; each stage needs at "
                              "least one layer (use pp <= --layers)")
    return strategy, dp, tp, pp


def _batch(job: Job, dp: int, pp: int, warn: list[str]) -> tuple[int, int, int]:
    """``(micro_batch, grad_accum, global_batch)`` from the two of them the job gives (see the
    module docstring); notes go to ``warn``."""
    ga = _int("grad_accum", job.grad_accum) if job.grad_accum is not None else None
    if job.batch is None and job.global_batch is None:
        raise JouleboundError("give --batch (sequences per GPU per micro-batch, as Hugging Face's "
                              "per_device_train_batch_size) or --global-batch (sequences per optimizer "
                              "step over all GPUs)")
    if job.batch is None:
        gb = _int("global_batch", job.global_batch)
        if gb < dp:
            raise JouleboundError(f"--global-batch {gb} is smaller than the {dp} data-parallel ranks; "
                                  "every rank needs at least one sequence per step")
        if ga is None:
            ga = min(4 * pp, max(1, gb // dp)) if pp > 1 else 1
        if gb % (dp * ga):
            raise JouleboundError(f"--global-batch {gb} is not divisible by dp·grad_accum = {dp}·{ga}; "
                                  "give --batch (per GPU) as well")
        return gb // (dp * ga), ga, gb
    b = _int("batch", job.batch)
    if job.global_batch is not None:
        gb = _int("global_batch", job.global_batch)
        if gb < dp:
            raise JouleboundError(f"--global-batch {gb} is smaller than the {dp} data-parallel "
                                  "ranks; every rank needs at least one sequence per step")
        if gb % (dp * b):
            raise JouleboundError(f"--global-batch {gb} is not a multiple of dp·batch = {dp}·{b}; "
                                  f"gradient accumulation needs an integer number of micro-batches")
        ga2 = gb // (dp * b)
        if ga is not None and ga != ga2:
            raise JouleboundError(f"--grad-accum {ga} contradicts --global-batch {gb} = dp {dp} × "
                                  f"batch {b} × {ga2}; give two of the three")
        ga = ga2
    ga = ga or (4 * pp if pp > 1 else 1)
    if pp > 1 and job.grad_accum is None and job.global_batch is None:
        warn.append(f"pipeline with {ga} micro-batches per step assumed (4·pp); give --grad-accum "
                    "or --global-batch")
    return b, ga, dp * b * ga


def _check_totals(job: Job, params: float) -> None:
    """Refuse an absurd parameter count, token budget or power limit."""
    if params > MAX_PARAMS:
        raise JouleboundError(f"{params:.3g} parameters is absurd (limit {MAX_PARAMS:.0e}); check "
                              "--layers / --hidden")
    if job.tokens is not None:
        t = float(job.tokens)
        if not math.isfinite(t) or t <= 0:
            raise JouleboundError(f"--tokens must be a finite number > 0 (got {job.tokens})")
        if t > MAX_TOKENS:
            raise JouleboundError(f"--tokens {t:.3g} is absurd (limit {MAX_TOKENS:.0e}; the largest "
                                  "published training runs use ~1e13 tokens)")
    if job.power_limit_w is not None and not (math.isfinite(float(job.power_limit_w))
                                              and float(job.power_limit_w) > 0):
        raise JouleboundError(f"--power-limit must be > 0 W (got {job.power_limit_w})")


def _stages(given: tuple[int, ...] | None, layers: int, pp: int) -> tuple[int, ...]:
    if given:
        st = tuple(int(x) for x in given)
        if len(st) != pp or sum(st) != layers or min(st) < 1:
            raise JouleboundError(f"pipeline stages {list(st)} must be {pp} positive layer counts "
                                  f"summing to the {layers} layers")
        return st
    base, extra = divmod(layers, pp)
    return tuple(base + (1 if i < extra else 0) for i in range(pp))


def memory(r: Resolved, device_bytes: float) -> MemoryEstimate:
    """Per-GPU memory of a resolved job (most loaded rank; bytes), by
    :func:`joulebound.workload.memory.step_memory`: DDP / 1 GPU hold everything, FSDP shards
    weights, gradients and optimizer state over dp, a distributed optimizer (ZeRO-1) the
    optimizer state only, TP splits by tp, PP keeps one stage (the first, with the embedding)
    and min(pp, micro-batches) micro-batches in flight. Activations by
    :func:`~joulebound.workload.memory.stored_activations` (recompute mode, sequence
    parallelism, FlashAttention, FP8); FP8 adds the weights' FP8 casts
    (:data:`FP8_WEIGHT_COPY_BYTES` per parameter held). FSDP also holds its gathered units
    whole: the root unit (embeddings, final norm, head; not resharded after forward) and two
    layers (the one computing and the one prefetched) with their weights, and one layer's
    unsharded gradients before its reduce-scatter."""
    j, c = r.job, r.config
    s = c.dtype_bytes
    per_layer = float(c.layer_params())
    emb = r.params - j.layers * per_layer
    p_gpu = (r.stages[0] * per_layer + emb) / r.tp  # the first stage (all layers when pp = 1)
    train = None
    if c.lora_rank:  # frozen base: gradients and optimizer state of the adapters only
        train = r.stages[0] * float(c.lora_layer_params()) / r.tp
        p_gpu += train
    layers = r.stages[0] if r.pp > 1 else j.layers
    in_flight = min(r.pp, r.grad_accum) if r.pp > 1 else 1
    act = stored_activations(c, layers, tp=r.tp, in_flight=in_flight, recompute=r.recompute,
                             sequence_parallel=r.sequence_parallel, flash=r.flash_attention,
                             fp8=r.fp8)
    shard = r.dp if r.sharded else 1
    copies = FP8_WEIGHT_COPY_BYTES * p_gpu / shard if r.fp8 else 0.0
    unit_grads = 0.0
    if shard > 1:  # FSDP's gathered units: the root (embeddings, head) and two layers (prefetch)
        copies += (emb + 2 * per_layer) / r.tp * s
        unit_grads = (per_layer if train is None else float(c.lora_layer_params())) / r.tp * s
    est = step_memory(params=p_gpu, dtype_bytes=s, activation_bytes=act, optimizer=j.optimizer,
                      shard=shard,
                      optimizer_shard=r.dp if (r.sharded or r.distributed_optimizer) else 1,
                      trainable=train, weight_copy_bytes=copies, device_bytes=device_bytes)
    assumes = [w for w, on in (("FlashAttention", r.flash_attention),
                               (f"{r.recompute} recompute", r.recompute != "none"),
                               ("sequence parallelism", r.sequence_parallel),
                               ("distributed optimizer", r.distributed_optimizer),
                               ("FP8 GEMM inputs", r.fp8)) if on]
    return replace(est, gradients=est.gradients + unit_grads, assumes=", ".join(assumes))


def with_overrides(job: Job, **kw: object) -> Job:
    """A copy of ``job`` with fields replaced (``None`` values ignored)."""
    return replace(job, **{k: v for k, v in kw.items() if v is not None})


#: shape fields a preset provides
_SHAPE = ("arch", "layers", "hidden", "heads", "ff", "vocab", "seq")
DEFAULT_PRESET = "bert-base"


def job_from_options(preset: str | None = None, hf_config: Any = None, **opts: object) -> Job:
    """A :class:`Job` from command-line style options (``None`` = not given).

    ``preset`` (a name of :data:`joulebound.workload.analytic.PRESETS`) or ``hf_config`` (the
    path of a Hugging Face ``config.json``, read by
    :func:`~joulebound.workload.config.load_hf_config`) fills the shape (and a preset the
    per-GPU micro-batch); explicit options override it. Without either, ``layers``, ``hidden``,
    ``heads`` and ``seq`` must all be given. ``lora_rank`` / ``lora_targets`` (and the other
    :data:`MODEL_FIELDS`) are options too."""
    from joulebound.workload.analytic import get_preset

    known = set(JOB_FIELDS) | set(MODEL_FIELDS)
    unknown = sorted(k for k in opts if k not in known)
    if unknown:
        raise JouleboundError(f"unknown job field(s) {', '.join(unknown)}; fields: {', '.join(sorted(known))}")
    given = {k: v for k, v in opts.items() if v is not None and v != ""}
    base: dict = {}
    if preset and hf_config:
        raise JouleboundError("give --preset or --hf-config, not both (both describe the model)")
    if preset or hf_config:
        if hf_config:
            cfg = load_hf_config(str(hf_config))
        else:
            try:
                cfg = get_preset(str(preset))
            except JouleboundError as exc:
                raise JouleboundError(f"--preset: {exc}") from None
        base = {"arch": cfg.arch, "layers": cfg.layers, "hidden": cfg.hidden, "heads": cfg.heads,
                "ff": cfg.ff, "vocab": cfg.vocab, "seq": cfg.seq, "name": cfg.name,
                **dict(cfg.components())}
        if "global_batch" not in given:
            base["batch"] = cfg.micro_batch  # a Hugging Face config: 1
    else:
        missing = [k for k in ("layers", "hidden", "heads", "seq") if k not in given]
        if missing:
            raise JouleboundError(f"give the model shape: {', '.join('--' + m for m in missing)} missing "
                                  "(or --preset NAME, e.g. bert-base, gpt2-small, llama3-8b, or "
                                  "--hf-config config.json)")
    base.update(given)
    if "batch" not in base and "global_batch" not in base:
        raise JouleboundError("give --batch (sequences per GPU per micro-batch, as Hugging Face's "
                              "per_device_train_batch_size) or --global-batch (sequences per optimizer "
                              "step over all GPUs)")
    return Job(**base)  # type: ignore[arg-type]
