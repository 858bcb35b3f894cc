"""The one aten cost model: FLOPs and DRAM bytes of an op from its name, input shapes and dtype.

Used by every place that costs real ops: the profiler-trace importer
(:mod:`~joulebound.workload.kineto`, shapes from ``record_shapes=True``) and the runtime's
recorded op streams (:func:`~joulebound.runtime.controller.trace_from_ops`, shapes from the
op keys). The per-op constants are shared with the analytic trace builder
(:mod:`~joulebound.workload.analytic`), so all three count an op the same way.

Rules of :func:`aten_cost` (``s`` = bytes per element; every figure is modeled):

* GEMMs (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``, ``_scaled_mm``):
  ``2·M·N·K`` FLOP per batch (+ ``M·N`` for a bias epilogue), ``(MK + KN + MN + bias)·s`` bytes;
  the FLOPs are those of ``torch.utils.flop_counter.FlopCounterMode`` plus the bias add.
* Scaled-dot-product attention (``_scaled_dot_product_*``, ``_flash_attention_*``,
  ``_efficient_attention_*``): FlopCounterMode's count — ``Q·Kᵀ`` and ``P·V`` forward, 2.5× that
  backward (``Q·Kᵀ`` recomputed); bytes: Q, K, V read and O written (twice that backward).
* Softmax, LayerNorm / RMSNorm (forward and backward), reductions and losses: FLOP per element
  and tensor passes from the constants below.
* Embedding lookups: the indices and one table row per index read, the rows written.
* ``_foreach_*`` / fused optimizer updates, ``cat`` / ``stack``: per element of the tensor lists.
* Everything else with tensor inputs is elementwise: FLOP per output element
  (:data:`ELEMENTWISE_FLOP_PER_OP`, default 1), every input read and one output written.
* Convolutions (their cost needs strides and padding) and ops without tensor inputs (collectives
  record tensor lists only) are not modeled: ``None``.

FLOP counts are per output element (FLOP/element) unless named otherwise; "passes" are full
reads or writes of the op's main tensor (bytes = passes · elements · bytes per element).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

#: FLOP per multiply-accumulate of a GEMM (one multiply + one add)
GEMM_FLOP_PER_MAC = 2
#: FLOP per element of a plain elementwise op (add, mul, ...); also the bias-epilogue add
ELEMENTWISE_FLOP = 1
#: softmax forward, FLOP/element (max, subtract, exp, sum, divide)
SOFTMAX_FLOP = 5
#: softmax backward, FLOP/element
SOFTMAX_BACKWARD_FLOP = 4
#: softmax forward tensor passes: reads the scores, writes the probabilities
SOFTMAX_PASSES = 2
#: softmax backward tensor passes: reads ``p`` and ``dp``, writes ``dscores``
SOFTMAX_BACKWARD_PASSES = 3
#: LayerNorm (and RMSNorm) forward, FLOP/element
LAYERNORM_FLOP = 8
#: LayerNorm backward, FLOP/element
LAYERNORM_BACKWARD_FLOP = 13
#: llm.c ``permute_kernel`` (qkv -> q, k, v): integer index arithmetic per element moved. Each
#: thread splits its flat index into (batch, head, position, channel) with three divisions by
#: runtime sizes and their remainders (~20 instructions per 32-bit division on NVIDIA GPUs) and
#: moves 3 elements: ~70 operations a thread, ~24 an element. Counted as CUDA-core operations:
#: they make the kernel's time follow the core clock below some clock, as measured (Spaan et
#: al. chose 1680 MHz for it where GELU went to 630 MHz).
PERMUTE_INDEX_OPS = 24
#: llm.c ``unpermute_kernel``: the same index arithmetic for one element per thread
UNPERMUTE_INDEX_OPS = 70
#: GELU (tanh form) forward, FLOP/element
GELU_FLOP = 8
#: GELU backward, FLOP/element
GELU_BACKWARD_FLOP = 16
#: SiLU forward ``x·σ(x)``, FLOP/element
SILU_FLOP = 4
#: SiLU backward, FLOP/element
SILU_BACKWARD_FLOP = 8
#: rotary position embedding ``x·cos + rotate_half(x)·sin``, FLOP/element
ROPE_FLOP = 3
#: AdamW update, FLOP per parameter
ADAMW_FLOP_PER_PARAM = 12


def gemm_flops(m: int, n: int, k: int, batch: int = 1, bias: bool = False) -> int:
    """FLOP of ``batch`` GEMMs ``C[M,N] = A[M,K]·B[K,N]``: ``2·M·N·K`` each, plus ``M·N`` for a
    bias epilogue."""
    return batch * (GEMM_FLOP_PER_MAC * m * n * k + (ELEMENTWISE_FLOP * m * n if bias else 0))


# -- the aten cost model ------------------------------------------------------------------------
Shape = tuple[int, ...]
#: one tensor input: its shape (``()`` for a 0-d tensor), or a tensor list (``_foreach_*``, ``cat``)
Arg = Shape | list[Shape]


class OpCost(NamedTuple):
    """Modeled work of one aten op invocation.

    Attributes:
        flops: floating-point operations (FLOP).
        bytes: DRAM traffic (B): every tensor input read once, the output written once, unless
            the op's rule says otherwise (module docs).
        dtype: math dtype of the data (``"fp32"``, ``"bf16"``, ...).
    """

    flops: float
    bytes: float
    dtype: str


#: element dtype names -> (math dtype of the device model, bytes per element, floating point).
#: Keys are torch's names (``torch.bfloat16`` -> ``"bfloat16"``, as in a runtime op key) and the
#: profiler's ``Input type`` strings (lower case: ``"c10::bfloat16"``, ``"long int"``).
ELEMENT_TYPES: dict[str, tuple[str, int, bool]] = {
    "float32": ("fp32", 4, True), "float": ("fp32", 4, True),
    "float64": ("fp32", 8, True), "double": ("fp32", 8, True),
    "float16": ("fp16", 2, True), "half": ("fp16", 2, True), "c10::half": ("fp16", 2, True),
    "bfloat16": ("bf16", 2, True), "c10::bfloat16": ("bf16", 2, True),
    "float8_e4m3fn": ("fp8", 1, True), "float8_e5m2": ("fp8", 1, True),
    "c10::float8_e4m3fn": ("fp8", 1, True), "c10::float8_e5m2": ("fp8", 1, True),
    "int64": ("fp32", 8, False), "long int": ("fp32", 8, False),
    "int32": ("fp32", 4, False), "int": ("fp32", 4, False),
    "int16": ("fp32", 2, False), "short int": ("fp32", 2, False),
    "int8": ("fp32", 1, False), "signed char": ("fp32", 1, False),
    "uint8": ("fp32", 1, False), "unsigned char": ("fp32", 1, False),
    "bool": ("fp32", 1, False),
}


def element_type(names: Sequence[Any] | str | None) -> tuple[str, int]:
    """``(math dtype, bytes per element)`` of an op's data: the first floating-point element
    type among ``names`` (a dtype name or a list of them, unknown names skipped), else the first
    integer one, else ``("fp32", 4)``."""
    if isinstance(names, str):
        names = [names]
    elif not isinstance(names, list | tuple):
        names = []
    found = [ELEMENT_TYPES[n.lower()] for n in names if isinstance(n, str)
             and n.lower() in ELEMENT_TYPES]
    for math_dtype, size, floating in found:
        if floating:
            return math_dtype, size
    return (found[0][0], found[0][1]) if found else ("fp32", 4)


def op_base(op: str) -> str:
    """Bare lower-case aten name: ``"aten::addmm"``, ``"aten.addmm.default"`` -> ``"addmm"``."""
    if "::" in op:
        return op.rsplit("::", 1)[-1].lower()
    if op.startswith("aten."):
        return op.split(".")[1].lower()
    return op.lower()


def _numel(a: Arg) -> int:
    if isinstance(a, list):
        return sum(math.prod(s) for s in a)
    return math.prod(a)


#: FLOP per output element of elementwise ops that are not one FLOP (GELU, activations, ...);
#: copies, fills and gathers do no arithmetic
ELEMENTWISE_FLOP_PER_OP: dict[str, int] = {
    "gelu": GELU_FLOP, "gelu_backward": GELU_BACKWARD_FLOP, "tanh": 4, "silu": SILU_FLOP,
    "silu_backward": SILU_BACKWARD_FLOP, "sigmoid": 4,
    "exp": 2, "addcmul_": 2, "addcdiv_": 2, "lerp_": 2, "sqrt": 1, "rsqrt": 1, "pow": 1,
    "dropout": 2, "native_dropout": 2, "fill_": 0, "zero_": 0, "copy_": 0, "_to_copy": 0,
    "clone": 0, "embedding": 0, "embedding_dense_backward": 1, "embedding_backward": 1,
}
#: reductions and losses: one FLOP per input element, one read of the input
REDUCTION_OPS = frozenset({"sum", "mean", "norm", "linalg_vector_norm", "amax", "max", "min",
                           "var", "std", "nll_loss_forward", "nll_loss", "nll_loss_nd",
                           "nll_loss_backward"})
GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_scaled_mm"})
#: ops whose cost depends on arguments that are not tensor shapes (strides, padding): not modeled
UNMODELED_OPS = frozenset({"convolution", "_convolution", "cudnn_convolution",
                           "convolution_backward", "_slow_conv2d_forward",
                           "convolution_overrideable"})
#: the flash / memory-efficient kernels' own entry points take [batch, seq, heads, head_dim]
#: inputs (the ``_scaled_dot_product_*`` ops above them take [batch, heads, seq, head_dim])
_BSHD_ATTENTION = ("_flash_attention_", "_efficient_attention_")


def aten_cost(op: str, inputs: Sequence[Arg | None], dtype: str = "fp32",
              elem_bytes: int = 4) -> OpCost | None:
    """FLOPs and DRAM bytes of one aten op from its tensor inputs' shapes.

    Args:
        op: op name in any spelling (``"aten::addmm"``, ``"aten.addmm.default"``, ``"addmm"``).
        inputs: the op's tensor arguments in call order: a shape per tensor (``()`` for a 0-d
            tensor), a list of shapes per tensor list, ``None`` for an argument whose shape is
            unknown. Non-tensor arguments (scalars, int lists, ``None``) are left out.
        dtype: math dtype of the data (:func:`element_type`).
        elem_bytes: bytes per element (B).

    Returns:
        The :class:`OpCost`, or ``None`` when the op is not modeled (convolutions, collectives,
        ops without tensor inputs) or its shapes do not fit the op.
    """
    base = op_base(op)
    if base in UNMODELED_OPS:
        return None
    try:
        for rule in _RULES:
            cost = rule(base, inputs, dtype, elem_bytes)
            if cost is not NotImplemented:
                return cost
    except (IndexError, ValueError, TypeError):
        return None
    return None


def _tensors(inputs: Sequence[Arg | None]) -> list[Shape]:
    """The plain-tensor inputs (not tensor lists, not unknown)."""
    return [a for a in inputs if isinstance(a, tuple)]


def _lists(inputs: Sequence[Arg | None]) -> list[list[Shape]]:
    return [a for a in inputs if isinstance(a, list) and a]


def _optimizer_cost(base: str, inputs: Sequence[Arg | None], dtype: str,
                    s: int) -> OpCost | None:
    if base.startswith(("_fused_adam", "_fused_sgd")):
        lists = _lists(inputs)
        p = _numel(lists[0]) if lists else 0
        if p == 0:
            return None
        # reads param, grad, m, v; writes param, m, v (AdamW: 12 FLOP per parameter)
        return OpCost(float(ADAMW_FLOP_PER_PARAM) * p, 7.0 * p * s, "fp32")
    if base.startswith("_foreach_"):
        sizes = [_numel(x) for x in _lists(inputs)]
        if not sizes:
            return None
        return OpCost(float(sizes[0]), float((sum(sizes) + sizes[0]) * s), "fp32")
    return NotImplemented


def _concat_cost(base: str, inputs: Sequence[Arg | None], dtype: str, s: int) -> OpCost | None:
    if base not in ("cat", "stack", "_cat"):
        return NotImplemented
    first = inputs[0] if inputs else None
    total = _numel(first) if isinstance(first, list) else 0
    return OpCost(0.0, 2.0 * total * s, dtype) if total else None  # read the list, write one


def gemm_cost(base: str, tensors: Sequence[Shape], s: int) -> tuple[float, float] | None:
    """``(FLOP, bytes)`` of a GEMM op (:data:`GEMM_OPS`) from its tensor inputs' shapes.

    ``C[M,N] = A[M,K]·B[K,N]`` per batch: ``2·M·N·K`` FLOP (+ ``M·N`` for a bias epilogue),
    ``A + B + C (+ bias)`` elements of traffic. ``linear(x, W[N,K], b)`` flattens ``x`` to rows;
    batched operands broadcast their leading dimensions; 1-D ``matmul`` operands are vectors."""
    if base in ("addmm", "baddbmm"):
        bias, a, b = tensors[0], tensors[1], tensors[2]
    elif base == "linear":
        a, w = tensors[0], tensors[1]
        bias = tensors[2] if len(tensors) > 2 else None
        if len(w) != 2 or not a:
            return None
        b = (w[1], w[0])  # weight [N, K] used transposed
    else:
        a, b = tensors[0], tensors[1]
        bias = tensors[4] if base == "_scaled_mm" and len(tensors) > 4 else None
    if not a or not b:
        return None
    k = a[-1]
    if len(b) == 1:  # matrix (or vector) times vector
        if b[0] != k:
            return None
        n, batch_b = 1, 1
    else:
        if b[-2] != k:
            return None
        n, batch_b = b[-1], math.prod(b[:-2])
    m = a[-2] if len(a) >= 2 else 1
    batch_a = math.prod(a[:-2])
    if base == "linear":  # [..., K] input flattened to rows
        m, batch_a = math.prod(a[:-1]), 1
    batch = max(batch_a, batch_b)
    flops = float(gemm_flops(m, n, k, batch, bias is not None))
    nbytes = (batch_a * m * k + batch_b * k * n + batch * m * n
              + (math.prod(bias) if bias is not None else 0)) * s
    return flops, float(nbytes)


def _gemm_rule(base: str, inputs: Sequence[Arg | None], dtype: str, s: int) -> OpCost | None:
    if base not in GEMM_OPS:
        return NotImplemented
    r = gemm_cost(base, _tensors(inputs), s)
    return None if r is None else OpCost(r[0], r[1], dtype)


def attention_flops(q: Shape, k: Shape, v: Shape, backward: bool = False) -> float:
    """FLOP of scaled-dot-product attention on ``[B, H, S, D]`` operands (grouped-query
    attention: ``k`` / ``v`` with fewer heads, broadcast to ``q``'s).

    Forward: ``Q·Kᵀ`` and ``P·V``, ``2·B·H·S_q·S_k·(D + D_v)``. Backward (the fused kernels):
    ``Q·Kᵀ`` recomputed, then ``dV``, ``dP``, ``dQ``, ``dK``: ``2·B·H·S_q·S_k·(3·D + 2·D_v)``
    — 2.5× forward for ``D_v = D``. Causal masking is not discounted (as FlopCounterMode)."""
    bh = math.prod(q[:-2])
    s_q, d = q[-2], q[-1]
    s_k, d_v = k[-2], v[-1]
    if k[-1] != d or v[-2] != s_k:
        raise ValueError("attention shapes do not fit")
    per = 3 * d + 2 * d_v if backward else d + d_v
    return float(2 * bh * s_q * s_k * per)


def _attention_rule(base: str, inputs: Sequence[Arg | None], dtype: str,
                    s: int) -> OpCost | None:
    if not ("scaled_dot_product" in base or "flash_attention" in base
            or "efficient_attention" in base):
        return NotImplemented
    tensors = _tensors(inputs)
    backward = "backward" in base
    q, k, v = tensors[1:4] if backward else tensors[0:3]  # backward: grad_out comes first
    if base.startswith(_BSHD_ATTENTION):
        if any(len(x) != 4 for x in (q, k, v)):
            return None
        q, k, v = ((x[0], x[2], x[1], x[3]) for x in (q, k, v))  # [B,S,H,D] -> [B,H,S,D]
    if min(len(q), len(k), len(v)) < 2:
        return None
    f = attention_flops(q, k, v, backward)
    out = math.prod(q[:-1]) * v[-1]
    nbytes = float((_numel(q) + _numel(k) + _numel(v) + out) * s)  # read Q, K, V; write O
    # backward reads dO, Q, K, V, O and writes dQ, dK, dV: twice the forward traffic
    return OpCost(f, 2 * nbytes if backward else nbytes, dtype)


def _normalization_rule(base: str, inputs: Sequence[Arg | None], dtype: str,
                        s: int) -> OpCost | None:
    tensors = [t for t in _tensors(inputs) if t]
    n = _numel(tensors[0]) if tensors else 0
    if base.endswith(("_backward", "_backward_data")):
        if "softmax" in base:
            return OpCost(float(SOFTMAX_BACKWARD_FLOP) * n, float(SOFTMAX_BACKWARD_PASSES) * n * s,
                          dtype)
        if "layer_norm" in base:
            return OpCost(float(LAYERNORM_BACKWARD_FLOP) * n, 3.0 * n * s, dtype)
    if "softmax" in base:
        return OpCost(float(SOFTMAX_FLOP) * n, float(SOFTMAX_PASSES) * n * s, dtype)
    if "layer_norm" in base or "rms_norm" in base:
        return OpCost(float(LAYERNORM_FLOP) * n, 2.0 * n * s, dtype)
    if base in REDUCTION_OPS:
        return OpCost(float(n), float(n * s), dtype)
    return NotImplemented


def _embedding_rule(base: str, inputs: Sequence[Arg | None], dtype: str,
                    s: int) -> OpCost | None:
    if base != "embedding":
        return NotImplemented
    tensors = _tensors(inputs)
    if not tensors:
        return None
    w = tensors[0]
    rows = _numel(tensors[1]) if len(tensors) > 1 else 0
    width = w[-1] if w else 0
    # read the int64 indices, gather one row of the table per index, write it out
    return OpCost(0.0, float(rows * 8 + 2 * rows * width * s), dtype)


def _elementwise_rule(base: str, inputs: Sequence[Arg | None], dtype: str,
                      s: int) -> OpCost | None:
    """Reads every tensor input, writes one output the size of the first (fills only write)."""
    tensors = _tensors(inputs)
    if not tensors:
        return None
    n = _numel(tensors[0]) if tensors[0] else max(_numel(t) for t in tensors)
    flop_per = ELEMENTWISE_FLOP_PER_OP.get(base, ELEMENTWISE_FLOP)
    reads = 0 if base in ("fill_", "zero_") else sum(_numel(t) for t in tensors)
    return OpCost(float(flop_per * n), float((reads + n) * s), dtype)


_RULES = (_optimizer_cost, _concat_cost, _gemm_rule, _attention_rule, _normalization_rule,
          _embedding_rule, _elementwise_rule)
