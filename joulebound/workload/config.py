"""The one training-configuration type: a transformer's shape, its batch and its dtype.

:class:`TrainingConfig` is what the analytic kernel traces (:mod:`~joulebound.workload.analytic`),
the job predictor (:class:`joulebound.jobs.job.Job` holds one next to its parallel layout) and the
measured sweeps (:class:`joulebound.workload.grid.SweepConfig` holds one next to its strategy and
world size) describe a training run with. The parameter count is written here once.

Batch fields (units: sequences):

* ``micro_batch``: sequences **one GPU** runs through one forward/backward pass (Hugging Face's
  ``per_device_train_batch_size``);
* ``global_batch``: sequences of **one optimizer step over all GPUs**;
* ``grad_accum``: micro-batches per optimizer step on one data-parallel rank (for pipeline
  parallelism: the micro-batches in flight).

Any of them may be ``None`` (not given); :func:`joulebound.jobs.job.resolve` derives the missing
one from the other two and the data-parallel degree.

Modern decoders (Llama, Mistral, Qwen2 and their kin) are ``arch="gpt"`` with the component
fields set: ``kv_heads`` (grouped-query attention), ``mlp="swiglu"`` (gate, up and down
projections), ``norm="rmsnorm"``, ``rope=True`` (no position-embedding table), ``tied=False``
(a separate LM head), ``bias`` (which linears carry biases: ``"all"`` GPT-2, ``"none"`` Llama /
Mistral, ``"qkv"`` Qwen2). LoRA / PEFT fine-tuning is ``lora_rank`` > 0 with ``lora_targets``
(:data:`LORA_TARGETS`): the base weights are frozen, only the adapters train.
:func:`config_from_hf` reads a Hugging Face ``config.json`` (llama, mistral, qwen2, gpt2, bert);
:func:`load_hf_config` reads it from a file. The defaults of the component fields are the
GPT-2 / BERT layout, so every configuration written before these fields existed means what it
meant.

Old spellings map to one: architectures ``gpt2``, ``decoder``, ``llama``, ``bloom`` are ``gpt``;
``encoder`` is ``bert`` (:func:`canonical_arch`). The former types' ``batch`` field (a micro-batch
in the analytic traces and the job predictor, the global batch in sweeps) is read by their own
constructors (:func:`joulebound.workload.analytic.ModelConfig`, :class:`~joulebound.jobs.job.Job`,
:class:`~joulebound.workload.grid.SweepConfig`), never by this type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from joulebound.core.errors import JouleboundError, did_you_mean

#: architectures whose kernel sequence is modeled: GPT-2-style decoder, BERT encoder
ARCHS: tuple[str, ...] = ("gpt", "bert")
#: accepted spellings (lower case) -> the one spelling
ARCH_ALIASES: dict[str, str] = {"bert": "bert", "gpt": "gpt", "gpt2": "gpt", "bloom": "gpt",
                                "llama": "gpt", "encoder": "bert", "decoder": "gpt"}
#: vocabulary when none is given: BERT's WordPiece, GPT-2's BPE
DEFAULT_VOCAB: dict[str, int] = {"bert": 30522, "gpt": 50257}
#: bytes per stored element for the supported training dtypes
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4}
#: the dtype when none is given
DEFAULT_DTYPE = "fp32"
#: the keys of an analytic trace's ``meta`` that hold its configuration (saved trace files)
TRACE_META_KEYS: tuple[str, ...] = ("arch", "layers", "hidden", "heads", "ff", "vocab", "seq",
                                    "batch", "dtype", "recompute", "name", "max_positions")
#: the component fields of modern decoders and LoRA and their defaults (the GPT-2 / BERT
#: layout, full fine-tuning); a trace's ``meta`` holds those that differ from the default
SHAPE_DEFAULTS: dict[str, Any] = {"kv_heads": None, "mlp": "gelu", "norm": "layernorm",
                                  "rope": False, "tied": True, "bias": "all", "lora_rank": 0,
                                  "lora_targets": ("q", "v")}
#: MLP kinds: ``gelu`` (two matrices, d -> ff -> d), ``swiglu`` (three: gate, up, down)
MLPS: tuple[str, ...] = ("gelu", "swiglu")
#: normalization layers: LayerNorm (weight + bias), RMSNorm (weight only)
NORMS: tuple[str, ...] = ("layernorm", "rmsnorm")
#: which linears have biases: all (GPT-2, BERT), none (Llama, Mistral), q/k/v only (Qwen2)
BIASES: tuple[str, ...] = ("all", "none", "qkv")
#: LoRA target modules (PEFT's names without ``_proj``): attention q, k, v, o; MLP gate, up,
#: down (for a GELU MLP, up = the first and down = the second matrix)
LORA_TARGETS: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
#: the default LoRA targets (PEFT's for Llama-style models)
DEFAULT_LORA_TARGETS: tuple[str, ...] = ("q", "v")
#: the canonical spellings (subsets of LORA_TARGETS in its order), for a fast check
_CANONICAL_TARGETS: frozenset[tuple[str, ...]] = frozenset(
    tuple(t for i, t in enumerate(LORA_TARGETS) if m >> i & 1) for m in range(1, 1 << 7))


def canonical_arch(arch: Any) -> Any:
    """The one spelling of ``arch`` (``"GPT2"`` -> ``"gpt"``); an unknown name is returned as
    given, for the checks to name it."""
    key = str(arch).strip().lower()
    return ARCH_ALIASES.get(key, arch)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class TrainingConfig:
    """Shape of a transformer, its batch and its training dtype.

    Attributes:
        arch: ``"gpt"`` (pre-LN decoder, llm.c layout, tied LM head) or ``"bert"`` (post-LN
            encoder, Hugging Face ``BertForMaskedLM``: word + position + token-type embeddings,
            embedding LayerNorm, MLM head over every position; no pooler). Old spellings map
            (:data:`ARCH_ALIASES`).
        layers: transformer blocks ``L``.
        hidden: model width ``d``.
        heads: attention heads ``h`` (must divide ``d``).
        ff: MLP inner width (``None``: ``4·d``, see :meth:`filled`).
        vocab: vocabulary size ``V`` (``None``: :data:`DEFAULT_VOCAB` of the arch).
        seq: sequence length ``S`` (tokens per sequence).
        micro_batch: sequences per GPU per forward/backward pass (``None``: not given).
        global_batch: sequences per optimizer step over all GPUs (``None``: not given).
        grad_accum: micro-batches per optimizer step per data-parallel rank (``None``: not
            given).
        dtype: training dtype: ``"bf16"``, ``"fp16"``, ``"tf32"`` or ``"fp32"``
            (default :data:`DEFAULT_DTYPE`).
        recompute: full activation recompute.
        name: label (model name).
        max_positions: rows of the position-embedding table (``None``: BERT 512 or ``seq`` when
            longer, GPT ``seq``); only changes the parameter count (none with ``rope``).
        kv_heads: key/value heads of grouped-query attention (``None``: ``heads``, multi-head
            attention; must divide ``heads``). Multi-query attention is ``kv_heads=1``.
        mlp: ``"gelu"`` (two matrices) or ``"swiglu"`` (gate, up, down: three matrices of
            ``d × ff``).
        norm: ``"layernorm"`` or ``"rmsnorm"`` (no bias, no mean subtraction).
        rope: rotary position embeddings (no learned position table).
        tied: the LM head shares the token-embedding matrix (``False``: its own ``V × d``).
        bias: which linears have biases: ``"all"``, ``"none"`` or ``"qkv"`` (:data:`BIASES`).
        lora_rank: LoRA rank ``r`` (0: full fine-tuning). With ``r > 0`` every base weight is
            frozen; each target linear ``W[d_out, d_in]`` gets adapters ``A[r, d_in]`` and
            ``B[d_out, r]``, the only trainable parameters.
        lora_targets: the adapted linears of every layer (:data:`LORA_TARGETS`).
    """

    arch: str
    layers: int
    hidden: int
    heads: int
    ff: int | None = None
    vocab: int | None = None
    seq: int = 1024
    micro_batch: int | None = None
    global_batch: int | None = None
    grad_accum: int | None = None
    dtype: str = DEFAULT_DTYPE
    recompute: bool = False
    name: str = "custom"
    max_positions: int | None = None
    kv_heads: int | None = None
    mlp: str = "gelu"
    norm: str = "layernorm"
    rope: bool = False
    tied: bool = True
    bias: str = "all"
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = DEFAULT_LORA_TARGETS

    def __post_init__(self) -> None:
        object.__setattr__(self, "arch", canonical_arch(self.arch))
        t = self.lora_targets
        if t is not DEFAULT_LORA_TARGETS and not (isinstance(t, tuple) and t in _CANONICAL_TARGETS):
            object.__setattr__(self, "lora_targets", parse_lora_targets(t, self.mlp))

    @property
    def modern(self) -> bool:
        """Whether the shape leaves the GPT-2 / BERT layout (``kv_heads`` given, SwiGLU,
        RMSNorm, RoPE, an untied head or other biases): the analytic trace then follows Hugging
        Face's Llama layout (separate q / k / v projections) instead of llm.c's. The parameter
        count of a GPT-2 shape is the same either way."""
        return (self.mlp != "gelu" or self.norm != "layernorm" or bool(self.rope)
                or not self.tied or self.bias != "all" or self.kv_heads is not None)

    @property
    def lora(self) -> bool:
        """LoRA fine-tuning (frozen base, trainable adapters)."""
        return bool(self.lora_rank)

    def filled(self) -> TrainingConfig:
        """A copy with the defaults of ``ff`` (``4·hidden``) and ``vocab`` (the arch's) filled
        in where they were not given (left ``None`` when the hidden size or arch is invalid)."""
        ff = self.ff
        if ff is None and _is_int(self.hidden):
            ff = 4 * self.hidden
        vocab = self.vocab
        if vocab is None and self.arch in DEFAULT_VOCAB:
            vocab = DEFAULT_VOCAB[self.arch]
        return self if ff is self.ff and vocab is self.vocab else replace(self, ff=ff, vocab=vocab)

    # -- checks ---------------------------------------------------------------------------------
    def validate(self) -> TrainingConfig:
        """Raise :class:`JouleboundError` naming the field when the shape or the micro-batch is
        impossible (the checks of one analytic iteration: ``micro_batch`` must be given)."""
        if self.arch not in ARCHS:
            raise JouleboundError(f"model config '{self.name}': arch {self.arch!r} is not "
                                  f"supported.{did_you_mean(str(self.arch), ARCHS)}")
        for f in ("layers", "hidden", "heads", "ff", "vocab", "seq", "micro_batch",
                  "max_positions"):
            v = getattr(self, f)
            if f == "max_positions" and v is None:
                continue
            if not _is_int(v) or v <= 0:
                raise JouleboundError(f"model config '{self.name}': {f} must be a positive "
                                      f"integer, got {v!r}")
        if self.hidden % self.heads:
            raise JouleboundError(
                f"model config '{self.name}': heads={self.heads} does not divide "
                f"hidden={self.hidden} (head size must be an integer); pick heads among "
                f"{divisors(self.hidden)}")
        if self.dtype not in DTYPE_BYTES:
            raise JouleboundError(f"model config '{self.name}': dtype {self.dtype!r} is not "
                                  f"supported.{did_you_mean(str(self.dtype), tuple(DTYPE_BYTES))}")
        self.validate_components()
        return self

    def validate_components(self) -> None:
        """Raise :class:`JouleboundError` naming the field when a modern-decoder or LoRA field
        is impossible (the job predictor checks the rest of the shape itself)."""
        who = f"model config '{self.name}'"
        for f, allowed in (("mlp", MLPS), ("norm", NORMS), ("bias", BIASES)):
            v = getattr(self, f)
            if v not in allowed:
                raise JouleboundError(f"{who}: {f} {v!r} is not supported (choose "
                                      f"{', '.join(allowed)}).{did_you_mean(str(v), allowed)}")
        kv = self.kv_heads
        if kv is not None:
            if not _is_int(kv) or kv <= 0:
                raise JouleboundError(f"{who}: kv_heads must be a positive integer, got {kv!r}")
            if self.heads % kv:
                raise JouleboundError(
                    f"{who}: kv_heads={kv} does not divide heads={self.heads} (grouped-query "
                    f"attention shares each key/value head among heads/kv_heads query heads); "
                    f"pick kv_heads among {[k for k in divisors(self.heads) if k <= self.heads]}")
        if self.arch == "bert" and self.modern:
            raise JouleboundError(
                f"{who}: the BERT encoder is modeled with its own layout only (LayerNorm, GELU, "
                "learned positions, tied MLM decoder, biases, multi-head attention); use "
                "arch 'gpt' for Llama / Mistral / Qwen-style decoders")
        r = self.lora_rank
        if not _is_int(r) or r < 0:
            raise JouleboundError(f"{who}: lora_rank must be an integer >= 0 (0 = full "
                                  f"fine-tuning), got {r!r}")
        if r:
            parse_lora_targets(self.lora_targets, self.mlp)
            if "gate" in self.lora_targets and self.mlp != "swiglu":
                raise JouleboundError(f"{who}: LoRA target 'gate' needs a gated MLP "
                                      "(mlp='swiglu'); a GELU MLP has the targets up and down")

    # -- derived sizes --------------------------------------------------------------------------
    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch on one GPU, ``T = micro_batch·S``."""
        return self.micro_batch * self.seq  # type: ignore[operator]

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv(self) -> Any:
        """Key/value heads (``heads`` without grouped-query attention)."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def kv_dim(self) -> Any:
        """Width of the key (and of the value) projection, ``kv_heads·head_dim``."""
        return self.kv * (self.hidden // self.heads)

    def linears(self) -> dict[str, tuple[Any, Any]]:
        """The linears of one block as ``{target: (d_in, d_out)}`` in LoRA's names
        (:data:`LORA_TARGETS`; ``gate`` only for a SwiGLU MLP)."""
        d, ff, kvd = self.hidden, self.filled().ff, self.kv_dim
        out = {"q": (d, d), "k": (d, kvd), "v": (d, kvd), "o": (d, d)}
        if self.mlp == "swiglu":
            out["gate"] = (d, ff)
        out.update(up=(d, ff), down=(ff, d))
        return out

    @property
    def dtype_bytes(self) -> int:
        """Bytes per stored element of :attr:`dtype`."""
        return DTYPE_BYTES[self.dtype]

    @property
    def positions(self) -> Any:
        """Rows of the position-embedding table (default BERT: 512, or S when longer; GPT: S)."""
        return position_rows(self.arch, self.seq, self.max_positions)

    def components(self) -> tuple[tuple[str, Any], ...]:
        """The component fields (:data:`SHAPE_DEFAULTS`) that differ from their defaults, as
        ``((field, value), ...)`` (hashable; ``lora_targets`` whenever LoRA is on)."""
        out = []
        for k, default in SHAPE_DEFAULTS.items():
            v = getattr(self, k)
            if k == "lora_targets":
                if self.lora_rank:
                    out.append((k, v))
            elif v != default:
                out.append((k, v))
        return tuple(out)

    def layer_params(self) -> Any:
        """Parameters of one block (weights of the base model; LoRA adapters not included):
        the attention and MLP matrices, their biases and 2 norms."""
        if not self.modern:
            return block_params(self.hidden, self.filled().ff)
        lin = self.linears()
        weights = sum(a * b for a, b in lin.values())
        d, ff, kvd = self.hidden, self.filled().ff, self.kv_dim
        biases = {"all": d + 2 * kvd + d + (2 if self.mlp == "swiglu" else 1) * ff + d,
                  "qkv": d + 2 * kvd, "none": 0}[self.bias]
        norms = 2 * (2 * d if self.norm == "layernorm" else d)
        return weights + biases + norms

    def embedding_head_params(self) -> Any:
        """Parameters outside the blocks (embeddings, final / embedding LN, MLM transform,
        an untied LM head)."""
        if not self.modern:
            return embedding_head_params(self.arch, self.hidden, self.filled().vocab,
                                         self.positions)
        d, v = self.hidden, self.filled().vocab
        pos = 0 if self.rope else self.positions * d
        final = 2 * d if self.norm == "layernorm" else d
        return v * d + pos + final + (0 if self.tied else v * d)

    def params(self) -> Any:
        """All parameters of the base model (a tied input / output embedding counted once;
        LoRA adapters not included: :meth:`trainable_params`)."""
        return self.layers * self.layer_params() + self.embedding_head_params()

    def lora_layer_params(self) -> Any:
        """LoRA adapter parameters of one block: ``r·(d_in + d_out)`` per target linear (0
        without LoRA)."""
        if not self.lora_rank:
            return 0
        lin = self.linears()
        return sum(self.lora_rank * (lin[t][0] + lin[t][1]) for t in self.lora_targets)

    def trainable_params(self) -> Any:
        """Parameters that get gradients and optimizer state: all of :meth:`params`, or with
        LoRA the adapters only (PEFT's ``print_trainable_parameters``)."""
        if not self.lora_rank:
            return self.params()
        return self.layers * self.lora_layer_params()

    # -- old spellings --------------------------------------------------------------------------
    def trace_meta(self) -> dict[str, Any]:
        """The configuration as an analytic trace's ``meta`` stores it (:data:`TRACE_META_KEYS`;
        ``batch`` there is the micro-batch), unchanged since saved trace files use it; the
        component fields (:data:`SHAPE_DEFAULTS`) follow only where they differ from their
        defaults (``lora_targets`` as a list, only with LoRA)."""
        meta = {"arch": self.arch, "layers": self.layers, "hidden": self.hidden,
                "heads": self.heads, "ff": self.ff, "vocab": self.vocab, "seq": self.seq,
                "batch": self.micro_batch, "dtype": self.dtype, "recompute": self.recompute,
                "name": self.name, "max_positions": self.max_positions}
        for k, v in self.components():
            meta[k] = list(v) if k == "lora_targets" else v
        return meta

    @classmethod
    def from_trace_meta(cls, meta: dict[str, Any]) -> TrainingConfig:
        """Inverse of :meth:`trace_meta` (raises ``KeyError`` for a missing key; the component
        fields are optional, as in files saved before they existed)."""
        m = {k: meta[k] for k in TRACE_META_KEYS}
        m["micro_batch"] = m.pop("batch")
        for k in SHAPE_DEFAULTS:
            if k in meta:
                m[k] = tuple(meta[k]) if k == "lora_targets" else meta[k]
        return cls(**m)

    def with_fields(self, **kw: Any) -> TrainingConfig:
        """A copy with fields replaced (``None`` values ignored)."""
        return replace(self, **{k: v for k, v in kw.items() if v is not None})


def block_params(hidden: Any, ff: Any) -> Any:
    """Weights of one transformer block incl. biases and LayerNorms: ``4d² + 2·d·ff`` weights,
    ``3d + d + ff + d`` biases, two LayerNorms ``4d`` (scalars or numpy arrays)."""
    d, f = hidden, ff
    return 4 * d * d + 2 * d * f + (3 * d + d + f + d) + 4 * d


def position_rows(arch: str, seq: Any, max_positions: Any = None) -> Any:
    """Rows of the position-embedding table (scalars or numpy arrays)."""
    import numpy as np

    if max_positions is not None:
        return np.maximum(max_positions, seq) if not _is_int(seq) else max(max_positions, seq)
    if arch != "bert":
        return seq
    return max(seq, 512) if _is_int(seq) else np.maximum(seq, 512)


def embedding_head_params(arch: str, hidden: Any, vocab: Any, positions: Any) -> Any:
    """Parameters outside the blocks: word + position embeddings and the final LayerNorm (GPT);
    plus token-type embeddings, embedding LayerNorm, MLM transform and decoder bias (BERT)."""
    d, v = hidden, vocab
    if arch == "gpt":
        return v * d + positions * d + 2 * d
    return (v * d + positions * d + 2 * d + 2 * d  # word, position, type, emb LN
            + d * d + d + 2 * d + v)  # MLM transform dense + LN, decoder bias (tied weight)


def parse_lora_targets(spec: Any, mlp: str = "swiglu") -> tuple[str, ...]:
    """LoRA target modules from ``"q,v"`` (or ``"q;v"``), ``"q_proj,v_proj"``, a list of names, ``"attn"``
    (q, k, v, o) or ``"all"`` (every linear of a block: q, k, v, o, gate, up, down; no gate for
    a GELU ``mlp``), in :data:`LORA_TARGETS` order; unknown names are an error that lists the
    choices."""
    items = spec.replace(";", ",").split(",") if isinstance(spec, str) else list(spec)
    out: set[str] = set()
    for raw in items:
        key = str(raw).strip().lower()
        if not key:
            continue
        if key in ("all", "all-linear", "all_linear"):
            out.update(t for t in LORA_TARGETS if mlp == "swiglu" or t != "gate")
            continue
        if key in ("attn", "attention"):
            out.update(("q", "k", "v", "o"))
            continue
        base = key[:-5] if key.endswith("_proj") else key
        if base not in LORA_TARGETS:
            raise JouleboundError(
                f"unknown LoRA target {raw!r} (PEFT's names such as q_proj work too, as do "
                f"'attn' for q,k,v,o and 'all').{did_you_mean(base, LORA_TARGETS)}")
        out.add(base)
    if not out:
        raise JouleboundError("no LoRA target given: name the adapted linears, e.g. q,v "
                              f"(choices {', '.join(LORA_TARGETS)}, 'attn', 'all')")
    return tuple(t for t in LORA_TARGETS if t in out)


# -- Hugging Face config.json ------------------------------------------------------------------
#: Hugging Face ``model_type`` values read as Llama-style decoders (RoPE, RMSNorm, SwiGLU, GQA)
HF_LLAMA_TYPES: tuple[str, ...] = ("llama", "mistral", "qwen2")
#: every ``model_type`` :func:`config_from_hf` reads
HF_MODEL_TYPES: tuple[str, ...] = ("gpt2", "bert", *HF_LLAMA_TYPES)
#: the default sequence length of a modern decoder read from its config: the maximum positions,
#: at most this (Llama 3.1's 131 072 positions are no training sequence length)
HF_DEFAULT_SEQ_CAP = 4096


def _hf_int(d: dict, key: str, where: str, default: Any = ...) -> int:
    """``d[key]`` as a positive integer, or an error naming ``key`` and ``where``."""
    v = d.get(key, default)
    if v is ...:
        raise JouleboundError(f"{where}: key '{key}' is missing (the Hugging Face "
                              f"{d.get('model_type')} config needs it); add it to the config")
    if not _is_int(v) or v <= 0:
        raise JouleboundError(f"{where}: key '{key}' must be a positive integer, got {v!r}")
    return v


def config_from_hf(config: Any, *, seq: int | None = None, micro_batch: int = 1,
                   dtype: str = "bf16", recompute: bool = False, name: str | None = None,
                   source: str = "Hugging Face config") -> TrainingConfig:
    """The shape of a Hugging Face config (a ``PretrainedConfig`` or its ``dict``, e.g. a parsed
    ``config.json``) at ``micro_batch`` sequences per GPU, trained in ``dtype`` (bf16 unless
    given: the mixed precision Hugging Face models are trained in).

    ``model_type`` ``gpt2`` and ``bert`` keep their layouts; ``llama``, ``mistral`` and
    ``qwen2`` are modern decoders (SwiGLU with ``intermediate_size``, RMSNorm, RoPE, grouped-
    query attention with ``num_key_value_heads``, an LM head tied only with
    ``tie_word_embeddings``; biases: none for Llama / Mistral unless ``attention_bias`` and
    ``mlp_bias``, q / k / v for Qwen2). ``seq`` defaults to the config's maximum positions
    (for the modern decoders at most :data:`HF_DEFAULT_SEQ_CAP`). ``source`` names the config
    in errors (a file path).

    Raises:
        JouleboundError: an unsupported ``model_type`` (the message lists the supported ones)
            or a missing / odd key (named).
    """
    d = config if isinstance(config, dict) else config.to_dict()
    kind = d.get("model_type")
    label = name or d.get("_name_or_path") or kind
    if kind == "gpt2":
        hidden = _hf_int(d, "n_embd", source)
        npos = _hf_int(d, "n_positions", source)
        cfg = TrainingConfig("gpt", _hf_int(d, "n_layer", source), hidden,
                             _hf_int(d, "n_head", source),
                             d.get("n_inner") or 4 * hidden, _hf_int(d, "vocab_size", source),
                             seq or npos, micro_batch, dtype=dtype,
                             recompute=recompute, name=label or "gpt2", max_positions=npos)
    elif kind == "bert":
        npos = _hf_int(d, "max_position_embeddings", source)
        cfg = TrainingConfig("bert", _hf_int(d, "num_hidden_layers", source),
                             _hf_int(d, "hidden_size", source),
                             _hf_int(d, "num_attention_heads", source),
                             _hf_int(d, "intermediate_size", source),
                             _hf_int(d, "vocab_size", source), seq or npos, micro_batch,
                             dtype=dtype, recompute=recompute, name=label or "bert",
                             max_positions=npos)
    elif kind in HF_LLAMA_TYPES:
        cfg = _modern_from_hf(d, kind, seq=seq, micro_batch=micro_batch, dtype=dtype,
                              recompute=recompute, name=label, source=source)
    else:
        raise JouleboundError(
            f"{source}: model_type {kind!r} is not modeled analytically "
            f"(supported: {', '.join(repr(k) for k in HF_MODEL_TYPES)}); profile a training "
            "step with torch.profiler and import it with load_trace() instead")
    try:
        return cfg.validate()
    except JouleboundError as exc:
        raise JouleboundError(f"{source}: {exc}") from None


def _modern_from_hf(d: dict, kind: str, *, seq: int | None, micro_batch: int, dtype: str,
                    recompute: bool, name: str, source: str) -> TrainingConfig:
    """A Llama / Mistral / Qwen2 config (see :func:`config_from_hf`)."""
    hidden = _hf_int(d, "hidden_size", source)
    heads = _hf_int(d, "num_attention_heads", source)
    kv = d.get("num_key_value_heads")
    kv = heads if kv is None else _hf_int(d, "num_key_value_heads", source)
    act = d.get("hidden_act", "silu")
    if act != "silu":
        raise JouleboundError(f"{source}: key 'hidden_act' is {act!r}; only the SwiGLU MLP "
                              "('silu') of Llama-style models is modeled")
    hd = d.get("head_dim")
    if hd is not None and hidden % heads == 0 and hd != hidden // heads:
        raise JouleboundError(f"{source}: key 'head_dim' = {hd!r} differs from hidden_size / "
                              f"num_attention_heads = {hidden // heads}; attention heads wider "
                              "or narrower than hidden/heads are not modeled")
    if kind == "qwen2":
        bias = "qkv"
    else:
        attn_b, mlp_b = bool(d.get("attention_bias", False)), bool(d.get("mlp_bias", False))
        if attn_b != mlp_b:
            raise JouleboundError(f"{source}: keys 'attention_bias' = {attn_b} and 'mlp_bias' = "
                                  f"{mlp_b}: biases on only one of them are not modeled (both "
                                  "or neither)")
        bias = "all" if attn_b else "none"
    tied = d.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise JouleboundError(f"{source}: key 'tie_word_embeddings' must be true or false, got "
                              f"{tied!r}")
    npos = _hf_int(d, "max_position_embeddings", source)
    return TrainingConfig("gpt", _hf_int(d, "num_hidden_layers", source), hidden, heads,
                          _hf_int(d, "intermediate_size", source),
                          _hf_int(d, "vocab_size", source), seq or min(npos, HF_DEFAULT_SEQ_CAP),
                          micro_batch, dtype=dtype, recompute=recompute, name=name,
                          max_positions=npos, kv_heads=kv, mlp="swiglu", norm="rmsnorm",
                          rope=True, tied=tied, bias=bias)


def load_hf_config(path: str | Path, **kw: Any) -> TrainingConfig:
    """:func:`config_from_hf` of a Hugging Face ``config.json`` file (``kw``: its keywords;
    the name defaults to the config's ``_name_or_path`` or the folder holding the file).

    Raises:
        JouleboundError: no such file, not JSON, not a JSON object, no ``model_type``, or what
            :func:`config_from_hf` refuses (each message names the file).
    """
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise JouleboundError(f"--hf-config {path}: no such file (pass a Hugging Face "
                              "config.json, or the model folder holding one)")
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise JouleboundError(f"{p}: not a JSON file ({exc})") from None
    if not isinstance(d, dict):
        raise JouleboundError(f"{p}: a Hugging Face config.json is a JSON object, got "
                              f"{type(d).__name__}")
    if "model_type" not in d:
        raise JouleboundError(f"{p}: key 'model_type' is missing; not a Hugging Face "
                              f"config.json (supported model types: {', '.join(HF_MODEL_TYPES)})")
    if kw.get("name") is None:
        kw["name"] = d.get("_name_or_path") or (p.parent.name if p.name == "config.json"
                                                else p.stem) or str(d["model_type"])
    return config_from_hf(d, source=str(p), **kw)


def is_hf_config(doc: Any) -> bool:
    """Whether a parsed JSON document looks like a Hugging Face ``config.json`` (an object with
    ``model_type`` that is no joulebound file)."""
    return isinstance(doc, dict) and "model_type" in doc and "schema" not in doc \
        and "traceEvents" not in doc


def divisors(n: int) -> list[int]:
    """Divisors of ``n`` up to 128 (to suggest head counts)."""
    return [k for k in range(1, min(n, 128) + 1) if n % k == 0]


__all__: list[str] = ["ARCHS", "ARCH_ALIASES", "BIASES", "DEFAULT_DTYPE", "DEFAULT_LORA_TARGETS",
                      "DEFAULT_VOCAB", "DTYPE_BYTES", "HF_MODEL_TYPES", "LORA_TARGETS", "MLPS",
                      "NORMS", "SHAPE_DEFAULTS", "TrainingConfig", "block_params",
                      "canonical_arch", "config_from_hf", "embedding_head_params",
                      "is_hf_config", "load_hf_config", "parse_lora_targets", "position_rows"]
