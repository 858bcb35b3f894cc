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

Old spellings map to one: architectures ``gpt2``, ``decoder``, ``llama``, ``bloom`` are ``gpt``;
``encoder`` is ``bert`` (:func:`canonical_arch`). The former types' ``batch`` field (a micro-batch
in the analytic traces and the job predictor, the global batch in sweeps) is read by their own
constructors (:func:`joulebound.workload.analytic.ModelConfig`, :class:`~joulebound.jobs.job.Job`,
:class:`~joulebound.workload.grid.SweepConfig`), never by this type.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
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
            longer, GPT ``seq``); only changes the parameter count.
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "arch", canonical_arch(self.arch))

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
        return self

    # -- derived sizes --------------------------------------------------------------------------
    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch on one GPU, ``T = micro_batch·S``."""
        return self.micro_batch * self.seq  # type: ignore[operator]

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def dtype_bytes(self) -> int:
        """Bytes per stored element of :attr:`dtype`."""
        return DTYPE_BYTES[self.dtype]

    @property
    def positions(self) -> Any:
        """Rows of the position-embedding table (default BERT: 512, or S when longer; GPT: S)."""
        return position_rows(self.arch, self.seq, self.max_positions)

    def layer_params(self) -> Any:
        """Parameters of one block: 4 weight matrices, their biases and 2 LayerNorms."""
        return block_params(self.hidden, self.filled().ff)

    def embedding_head_params(self) -> Any:
        """Parameters outside the blocks (embeddings, final / embedding LN, MLM transform)."""
        return embedding_head_params(self.arch, self.hidden, self.filled().vocab, self.positions)

    def params(self) -> Any:
        """All trainable parameters (tied input / output embedding counted once)."""
        return self.layers * self.layer_params() + self.embedding_head_params()

    # -- old spellings --------------------------------------------------------------------------
    def trace_meta(self) -> dict[str, Any]:
        """The configuration as an analytic trace's ``meta`` stores it (:data:`TRACE_META_KEYS`;
        ``batch`` there is the micro-batch), unchanged since saved trace files use it."""
        return {"arch": self.arch, "layers": self.layers, "hidden": self.hidden,
                "heads": self.heads, "ff": self.ff, "vocab": self.vocab, "seq": self.seq,
                "batch": self.micro_batch, "dtype": self.dtype, "recompute": self.recompute,
                "name": self.name, "max_positions": self.max_positions}

    @classmethod
    def from_trace_meta(cls, meta: dict[str, Any]) -> TrainingConfig:
        """Inverse of :meth:`trace_meta` (raises ``KeyError`` for a missing key)."""
        m = {k: meta[k] for k in TRACE_META_KEYS}
        m["micro_batch"] = m.pop("batch")
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


def divisors(n: int) -> list[int]:
    """Divisors of ``n`` up to 128 (to suggest head counts)."""
    return [k for k in range(1, min(n, 128) + 1) if n % k == 0]


__all__: list[str] = ["ARCHS", "ARCH_ALIASES", "DEFAULT_DTYPE", "DEFAULT_VOCAB", "DTYPE_BYTES",
                      "TrainingConfig", "block_params", "canonical_arch",
                      "embedding_head_params", "position_rows"]
