"""Size, compute and memory proxies of a transformer training step (pure functions).

All functions are vectorised (numpy arrays or scalars in, same shape out). Notation:
``L`` layers, ``d`` hidden size, ``ff`` feed-forward width, ``h`` attention heads, ``S`` sequence
length (tokens), ``B`` global batch (sequences per optimizer step), ``V`` vocabulary size.

The paper's proxies (Zoubeirou a Mayaki, arXiv 2606.23546):

* :func:`paper_params` — N ≈ L·(12·d² + 2·d·ff)  [parameters]. As printed in the paper; note that
  a standard block has 4·d² attention weights + 2·d·ff MLP weights, so with ff = 4d the paper's
  form double-counts (it equals 20·L·d², the standard count is 12·L·d²).
* :func:`paper_compute_per_token` — C_tok ≈ 12·L·d² + 3·L·S·d  [FLOP-like units per token].
* :func:`paper_memory` — M ≈ B·S·d·L  [activation elements per step].

Standard ones (Kaplan et al. 2020; Narayanan et al. 2021):

* :func:`nonembedding_params` — 12·L·d² (ff = 4d) or L·(4·d² + 2·d·ff)  [parameters].
* :func:`training_flops` — 6·N·T + 12·L·S·d·T for T = B·S tokens  [FLOP per step]: forward
  2·N·T, backward 4·N·T, attention scores and context 4·L·S·d per token forward, ×3 with backward.
  N should include the embedding / LM-head matrices when the vocabulary projection is computed.
* :func:`attention_matrix_elements` — B·h·S²·L  [elements of the S×S score matrices per step];
  these are read and written several times (softmax, dropout, backward) and dominate memory
  traffic at long sequence lengths.
* :func:`activation_bytes` — B·S·d·L·(34 + 5·h·S/d)·bytes/2  [bytes of stored activations per
  step for a standard block without recomputation; Korthikanti et al. 2022, eq. 1].
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from joulebound.core.errors import JouleboundError
from joulebound.workload.analytic import DTYPE_BYTES as _TRAINING_DTYPE_BYTES

#: bytes per element of each training dtype: the analytic traces' table, plus fp8.
DTYPE_BYTES: dict[str, int] = {**_TRAINING_DTYPE_BYTES, "fp8": 1}


def _f(x: ArrayLike) -> np.ndarray:
    return np.asarray(x, dtype=float)


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype`` (``fp32``, ``tf32``, ``fp16``, ``bf16``, ``fp8``)."""
    try:
        return DTYPE_BYTES[dtype.lower()]
    except KeyError:
        from joulebound.core.errors import did_you_mean

        raise JouleboundError(f"unknown dtype {dtype!r}." + did_you_mean(dtype, list(DTYPE_BYTES))) from None


def paper_params(L: ArrayLike, d: ArrayLike, ff: ArrayLike) -> np.ndarray:
    """The paper's parameter proxy N ≈ L·(12·d² + 2·d·ff)  [parameters]."""
    L, d, ff = _f(L), _f(d), _f(ff)
    return L * (12 * d * d + 2 * d * ff)


def paper_compute_per_token(L: ArrayLike, d: ArrayLike, S: ArrayLike) -> np.ndarray:
    """The paper's compute proxy C_tok ≈ 12·L·d² + 3·L·S·d  [FLOP-like units per token]."""
    L, d, S = _f(L), _f(d), _f(S)
    return 12 * L * d * d + 3 * L * S * d


def paper_memory(B: ArrayLike, S: ArrayLike, d: ArrayLike, L: ArrayLike) -> np.ndarray:
    """The paper's memory proxy M ≈ B·S·d·L  [activation elements per step]."""
    return _f(B) * _f(S) * _f(d) * _f(L)


def nonembedding_params(L: ArrayLike, d: ArrayLike, ff: ArrayLike | None = None) -> np.ndarray:
    """Weights of the transformer blocks: L·(4·d² + 2·d·ff); 12·L·d² when ``ff`` is None (4d)."""
    L, d = _f(L), _f(d)
    ff_ = 4 * d if ff is None else _f(ff)
    return L * (4 * d * d + 2 * d * ff_)


def total_params(L: ArrayLike, d: ArrayLike, ff: ArrayLike | None = None,
                 vocab: ArrayLike = 30522, seq: ArrayLike = 512) -> np.ndarray:
    """Block weights plus token and position embeddings (tied LM head)  [parameters]."""
    return nonembedding_params(L, d, ff) + (_f(vocab) + _f(seq)) * _f(d)


def attention_flops(L: ArrayLike, S: ArrayLike, d: ArrayLike, B: ArrayLike) -> np.ndarray:
    """Training FLOPs of the S×S attention products: 12·L·S²·d·B  [FLOP per step]."""
    return 12 * _f(L) * _f(S) ** 2 * _f(d) * _f(B)


def dense_flops(params: ArrayLike, S: ArrayLike, B: ArrayLike) -> np.ndarray:
    """Training FLOPs of the weight matmuls: 6·N·B·S  [FLOP per step]."""
    return 6 * _f(params) * _f(S) * _f(B)


def training_flops(params: ArrayLike, L: ArrayLike, S: ArrayLike, d: ArrayLike,
                   B: ArrayLike) -> np.ndarray:
    """Forward + backward FLOPs of one step: 6·N·B·S + 12·L·S²·d·B  [FLOP]."""
    return dense_flops(params, S, B) + attention_flops(L, S, d, B)


def attention_matrix_elements(B: ArrayLike, h: ArrayLike, S: ArrayLike, L: ArrayLike) -> np.ndarray:
    """Elements of all attention score matrices in one step: B·h·S²·L."""
    return _f(B) * _f(h) * _f(S) ** 2 * _f(L)


def activation_bytes(B: ArrayLike, S: ArrayLike, d: ArrayLike, L: ArrayLike, h: ArrayLike,
                     dtype: str = "fp16") -> np.ndarray:
    """Stored activations of one step without recomputation  [bytes].

    Korthikanti et al. 2022 give S·B·d·(34 + 5·h·S/d) bytes per layer for 16-bit training; we
    scale by ``dtype_bytes(dtype) / 2``.
    """
    B, S, d, L, h = _f(B), _f(S), _f(d), _f(L), _f(h)
    return S * B * d * L * (34 + 5 * h * S / d) * dtype_bytes(dtype) / 2


def add_proxies(df):
    """Return a copy of a common-schema DataFrame with every proxy as a column.

    Adds ``N_paper``, ``C_tok`` (paper), ``M`` (paper), ``tokens`` (B·S), ``F_dense``, ``F_attn``,
    ``F_train`` (FLOP per step), ``A_elems`` (attention-matrix elements per step), ``act_bytes``.
    Uses ``params`` when present (total weights incl. embeddings), else :func:`total_params`.
    """
    out = df.copy()
    L, d, S, B = out["layers"], out["hidden"], out["seq"], out["batch"]
    ff = out["ff"] if "ff" in out else 4 * d
    h = out["heads"]
    if "params" not in out or out["params"].isna().any():
        est = total_params(L, d, ff, out.get("vocab", 30522), S)
        out["params"] = out["params"].fillna(pd_series(est, out.index)) if "params" in out else est
    out["N_paper"] = paper_params(L, d, ff)
    out["C_tok"] = paper_compute_per_token(L, d, S)
    out["M"] = paper_memory(B, S, d, L)
    out["tokens"] = _f(B) * _f(S)
    out["F_dense"] = dense_flops(out["params"], S, B)
    out["F_attn"] = attention_flops(L, S, d, B)
    out["F_train"] = out["F_dense"] + out["F_attn"]
    out["A_elems"] = attention_matrix_elements(B, h, S, L)
    dt = out["dtype"] if "dtype" in out else "fp32"
    nbytes = np.array([dtype_bytes(x) for x in (dt if not isinstance(dt, str) else [dt] * len(out))],
                      dtype=float)
    out["act_bytes"] = activation_bytes(B, S, d, L, h, "fp16") * nbytes / 2
    return out


def pd_series(values: np.ndarray, index):
    import pandas as pd

    return pd.Series(np.asarray(values, dtype=float), index=index)
