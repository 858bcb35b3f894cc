"""Per-op FLOP and DRAM-traffic constants shared by the analytic trace builder
(:mod:`~joulebound.workload.analytic`) and the profiler-trace importer
(:mod:`~joulebound.workload.kineto`), so both count an op the same way.

FLOP counts are per output element (FLOP/element) unless named otherwise; "passes" are full
reads or writes of the op's main tensor (bytes = passes · elements · bytes per element).
"""

from __future__ import annotations

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
#: GELU (tanh form) forward, FLOP/element
GELU_FLOP = 8
#: GELU backward, FLOP/element
GELU_BACKWARD_FLOP = 16
#: AdamW update, FLOP per parameter
ADAMW_FLOP_PER_PARAM = 12


def gemm_flops(m: int, n: int, k: int, batch: int = 1, bias: bool = False) -> int:
    """FLOP of ``batch`` GEMMs ``C[M,N] = A[M,K]·B[K,N]``: ``2·M·N·K`` each, plus ``M·N`` for a
    bias epilogue."""
    return batch * (GEMM_FLOP_PER_MAC * m * n * k + (ELEMENTWISE_FLOP * m * n if bias else 0))
