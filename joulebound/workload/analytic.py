"""Analytic kernel trace of one transformer training iteration (GPT decoder or BERT encoder).

The kernel sequence follows Karpathy's llm.c (``train_gpt2.cu``) for the decoder and Hugging Face
``BertForMaskedLM`` for the encoder, kernel for kernel, with FLOPs and DRAM bytes from closed-form
formulas. Nothing here runs a model; a GPT-3-XL iteration (~940 kernels) builds in about a
millisecond.

Formulas (``T = B·S`` tokens, ``s`` = bytes per stored element of ``dtype``: 2 for bf16/fp16,
4 for fp32/tf32; optimizer states are always fp32; the per-op constants, shared with the
profiler-trace importer, are in :mod:`~joulebound.workload.opcost`):

* GEMM ``C[M,N] = A[M,K]·B[K,N]`` (+ bias): ``2·M·N·K`` FLOP (+ ``M·N`` for the bias epilogue),
  bytes ``(M·K + K·N + M·N)·s`` (+ ``N·s`` bias). Batched GEMMs multiply both by the batch count.
  Weight-gradient GEMMs write the gradient (β = 0; gradient accumulation is not modeled).
* Elementwise over ``n`` elements with ``r`` input and ``w`` output tensors: ``(r + w)·n·s``
  bytes and ``c·n`` FLOP, ``c`` per kernel: residual add 1, GELU (tanh form) 8, GELU backward 16,
  permute / unpermute: in the GPT (llm.c) layout their integer index arithmetic (24 / 70
  operations per element: llm.c splits each flat index with three divisions by runtime sizes),
  counted with the FLOPs; 0 for BERT and the modern (Hugging Face) layouts.
* LayerNorm forward over ``(T, d)``: 8 FLOP per element; reads ``x`` and γ, β; writes ``y`` and the
  fp32 mean and 1/σ (``2·T·4`` bytes). Backward: 13 FLOP per element; reads ``dy``, ``x``, γ,
  mean, 1/σ; writes ``dx`` and fp32 ``dγ``, ``dβ``.
* Softmax over the ``B·h·S·S`` score tensor: 5 FLOP per element, read + write; backward 4 FLOP
  per element, reads ``p`` and ``dp``, writes ``dscores``. The full ``S×S`` square is counted
  (llm.c computes the full score GEMM and masks).
* Bias gradient (``matmul_backward_bias``): column sums of ``dout[T,N]``: ``T·N`` FLOP, reads
  ``T·N·s``, writes ``N·4`` bytes.
* Embedding: a gather of ``T`` rows plus the position rows (unique rows counted once), add;
  backward is a scatter-add (read-modify-write) into the embedding gradients.
* AdamW: 12 FLOP per parameter; bytes per parameter ``2·s + 24`` when ``s < 4`` (reads the grad,
  fp32 master weight, m, v; writes the master, m, v and the low-precision weight), else 28.
  One kernel per layer plus one for the embeddings / head, after one global grad-norm reduction.

Categories: the four weight GEMMs and the logits / MLM-decoder GEMMs are ``gemm``; the four
batched attention GEMMs (scores, values and their gradients) are ``attention``; permute /
unpermute / residual / GELU are ``elementwise``; the score softmax and the loss (softmax +
cross-entropy) are ``softmax``; bias gradients and the grad norm are ``reduction``. The
math dtype of a kernel (``Kernel.dtype``, which picks the peak FLOP/s) is the configured dtype for
the GEMMs (tensor cores) and ``fp32`` for everything else (CUDA cores compute in fp32).

Not modeled: dropout (llm.c has none; HF BERT adds ~3 elementwise kernels per layer), the
fused-kernel variants of newer llm.c (fused residual+layernorm, GELU in the GEMM epilogue),
vocabulary padding (llm.c pads 50257 to 50304), gradient accumulation, communication.

Scale: ``build_trace(..., iterations=n)`` concatenates ``n`` iterations (the planner's large
cases: ``iterations=100`` of gpt3-xl gives ~94 000 kernels in well under a second), as does a
config with many layers.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import numpy as np

from joulebound.core.errors import JouleboundError, did_you_mean
from joulebound.workload.config import (
    ARCHS,
    DEFAULT_DTYPE,
    DTYPE_BYTES,
    TrainingConfig,
    config_from_hf,
)
from joulebound.workload.opcost import (
    ADAMW_FLOP_PER_PARAM,
    ELEMENTWISE_FLOP,
    GELU_BACKWARD_FLOP,
    GELU_FLOP,
    LAYERNORM_BACKWARD_FLOP,
    LAYERNORM_FLOP,
    PERMUTE_INDEX_OPS,
    ROPE_FLOP,
    SILU_BACKWARD_FLOP,
    SILU_FLOP,
    SOFTMAX_BACKWARD_FLOP,
    SOFTMAX_BACKWARD_PASSES,
    SOFTMAX_FLOP,
    SOFTMAX_PASSES,
    UNPERMUTE_INDEX_OPS,
    gemm_flops,
)
from joulebound.workload.trace import Kernel, Trace


class ModelConfig:
    """The analytic traces' former configuration type, kept as a constructor: it makes the one
    :class:`~joulebound.workload.config.TrainingConfig` from the old positional order
    ``(arch, layers, hidden, heads, ff, vocab, seq, batch, dtype, recompute, name,
    max_positions)``, where ``batch`` is the micro-batch (sequences per GPU per iteration,
    default 1); ``ff`` defaults to ``4·hidden``, ``vocab`` to the arch's, ``dtype`` to
    :data:`~joulebound.workload.config.DEFAULT_DTYPE`."""

    def __new__(cls, arch: str, layers: int, hidden: int, heads: int, ff: int | None = None,  # type: ignore[misc]
                vocab: int | None = None, seq: int = 1024, batch: int = 1,
                dtype: str = DEFAULT_DTYPE, recompute: bool = False, name: str = "custom",
                max_positions: int | None = None) -> TrainingConfig:
        return TrainingConfig(arch, layers, hidden, heads, ff, vocab, seq, micro_batch=batch,
                              dtype=dtype, recompute=recompute, name=name,
                              max_positions=max_positions).filled()

    @staticmethod
    def from_hf(config: Any, *, seq: int | None = None, batch: int = 1, dtype: str = "bf16",
                recompute: bool = False, name: str | None = None) -> TrainingConfig:
        """:func:`config_from_hf` (``batch``: the micro-batch)."""
        return config_from_hf(config, seq=seq, micro_batch=batch, dtype=dtype,
                              recompute=recompute, name=name)


#: Presets. GPT-2 shapes from Radford et al. 2019 (context 1024, vocab 50257); GPT-3-XL from
#: Brown et al. 2020 Table 2.1 (L=24, d=2048, 16 heads) at S=1024 as in the kernel-level DVFS
#: study (Spaan et al.); micro-batch B=1 per GPU is joulebound's choice (llm.c-style single-GPU
#: step). BERT-base/large from Devlin et al. 2019 (vocab 30522); bert-huge is the Perseus
#: artifact's "bert-huge-uncased" (Merak model loader: bert-large-uncased with hidden 2048 and
#: intermediate 8192 -> 24 layers, 16 heads, 1276.40 M parameters as BertForMaskedLM). BERT
#: presets use S=512 (BERT's maximum positions) and B=8 (Perseus' micro-batch size). All train in bf16.
PRESETS: dict[str, TrainingConfig] = {
    "gpt2-small": TrainingConfig("gpt", 12, 768, 12, 3072, 50257, 1024, micro_batch=1, dtype="bf16",
                                name="gpt2-small"),
    "gpt2-medium": TrainingConfig("gpt", 24, 1024, 16, 4096, 50257, 1024, micro_batch=1, dtype="bf16",
                                 name="gpt2-medium"),
    "gpt2-large": TrainingConfig("gpt", 36, 1280, 20, 5120, 50257, 1024, micro_batch=1, dtype="bf16",
                                name="gpt2-large"),
    "gpt2-xl": TrainingConfig("gpt", 48, 1600, 25, 6400, 50257, 1024, micro_batch=1, dtype="bf16",
                             name="gpt2-xl"),
    "gpt3-xl": TrainingConfig("gpt", 24, 2048, 16, 8192, 50257, 1024, micro_batch=1, dtype="bf16",
                             name="gpt3-xl"),
    "bert-base": TrainingConfig("bert", 12, 768, 12, 3072, 30522, 512, micro_batch=8, dtype="bf16",
                               name="bert-base"),
    "bert-large": TrainingConfig("bert", 24, 1024, 16, 4096, 30522, 512, micro_batch=8, dtype="bf16",
                                name="bert-large"),
    "bert-huge": TrainingConfig("bert", 24, 2048, 16, 8192, 30522, 512, micro_batch=8, dtype="bf16",
                               name="bert-huge"),
}


def _modern(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ff: int, vocab: int,
            seq: int, max_positions: int, *, tied: bool = False, bias: str = "none"
            ) -> TrainingConfig:
    """A Llama-style decoder preset: SwiGLU, RMSNorm, RoPE, GQA; micro-batch 1, bf16."""
    return TrainingConfig("gpt", layers, hidden, heads, ff, vocab, seq, micro_batch=1,
                          dtype="bf16", name=name, max_positions=max_positions,
                          kv_heads=kv_heads, mlp="swiglu", norm="rmsnorm", rope=True,
                          tied=tied, bias=bias)


#: Modern decoders, shapes from the models' published Hugging Face ``config.json`` (parameter
#: counts equal ``sum(p.numel())`` of the transformers models built from them): Llama 2
#: (Touvron et al. 2023), Llama 3 (Meta 2024), Mistral 7B v0.1 (Jiang et al. 2023; sliding
#: window 4096 = the preset's S, so full attention), Qwen2 (Yang et al. 2024; q/k/v biases,
#: 0.5B ties its head), TinyLlama 1.1B (Zhang et al. 2024). S is the pre-training context (Llama 3:
#: 8192; Qwen2: 4096 before its long-context stage); micro-batch 1; bf16.
PRESETS.update({
    "llama2-7b": _modern("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 4096),
    "llama2-13b": _modern("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, 4096),
    "llama2-70b": _modern("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 4096),
    "llama3-8b": _modern("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 8192),
    "llama3-70b": _modern("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 8192),
    "mistral-7b": _modern("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 4096, 32768),
    "qwen2-0.5b": _modern("qwen2-0.5b", 24, 896, 14, 2, 4864, 151936, 4096, 32768, tied=True,
                          bias="qkv"),
    "qwen2-7b": _modern("qwen2-7b", 28, 3584, 28, 4, 18944, 152064, 4096, 131072, bias="qkv"),
    "tinyllama-1.1b": _modern("tinyllama-1.1b", 22, 2048, 32, 4, 5632, 32000, 2048, 2048),
})


def get_preset(name: str) -> TrainingConfig:
    """The preset called ``name`` (case-insensitive); unknown names list the choices."""
    key = name.strip().lower()
    if key not in PRESETS:
        raise JouleboundError(f"unknown model preset {name!r}.{did_you_mean(key, tuple(PRESETS))}")
    return PRESETS[key]


# -- the builder ---------------------------------------------------------------------------------
#: which tensors of a block need a gradient (see :meth:`_Builder.grads`); all of them unless
#: LoRA freezes the block's input (its first block)
_ALL_GRADS = {"x": True, "q": True, "k": True, "v": True, "p": True, "att": True, "h1": True,
              "up": True, "gate": True, "prod": True}


class _Builder:
    """Appends kernels with the formulas of the module docstring."""

    def __init__(self, cfg: TrainingConfig) -> None:
        self.cfg = cfg
        self.s = DTYPE_BYTES[cfg.dtype]
        self.mm_dtype = cfg.dtype
        self.kernels: list[Kernel] = []
        self.phase = "forward"
        self.layer: int | None = None
        self.recomputing = False
        self.frozen = bool(cfg.lora_rank)  # LoRA: base weights get no gradients
        #: llm.c's GPT layout (its permute kernels' index arithmetic is counted)
        self.llmc = cfg.arch == "gpt" and not cfg.modern
        self.targets = tuple(cfg.lora_targets) if cfg.lora_rank else ()
        self.req = _ALL_GRADS
        # grouped-query attention (Hugging Face's repeat_kv); one answer for all shapes of a table
        self.gqa = bool(cfg.modern and np.all(np.asarray(cfg.kv) != np.asarray(cfg.heads)))

    def add(self, name: str, category: str, flops: float, nbytes: float, math: str = "fp32",
            **meta: Any) -> None:
        if self.recomputing:
            meta["recompute"] = True
        self.kernels.append(Kernel(name, category, self.phase, self.layer, float(flops),
                                   float(nbytes), math, None, meta))

    # primitives --------------------------------------------------------------------------------
    def gemm(self, name: str, m: int, n: int, k: int, bias: bool = False, batch: int = 1,
             category: str = "gemm") -> None:
        flops = gemm_flops(m, n, k, batch, bias)
        nbytes = (batch * (m * k + k * n + m * n) + (n if bias else 0)) * self.s
        self.add(name, category, flops, nbytes, self.mm_dtype, shape=[batch, m, n, k], bias=bias)

    def elementwise(self, name: str, n: int, reads: int, writes: int, flop_per: float) -> None:
        self.add(name, "elementwise", flop_per * n, (reads + writes) * n * self.s)

    def layernorm(self, name: str) -> None:
        t, d = self.cfg.tokens, self.cfg.hidden
        if self.cfg.norm == "rmsnorm":  # weight only; one fp32 statistic (1/rms) per token
            self.add(name, "norm", LAYERNORM_FLOP * t * d, (2 * t * d + d) * self.s + t * 4)
            return
        self.add(name, "norm", LAYERNORM_FLOP * t * d, (2 * t * d + 2 * d) * self.s + 2 * t * 4)

    def layernorm_backward(self, name: str) -> None:
        t, d = self.cfg.tokens, self.cfg.hidden
        if self.cfg.norm == "rmsnorm":
            self.add(name, "norm", LAYERNORM_BACKWARD_FLOP * t * d,
                     (3 * t * d + d) * self.s + t * 4 + d * 4)
            return
        self.add(name, "norm", LAYERNORM_BACKWARD_FLOP * t * d,
                 (3 * t * d + d) * self.s + 2 * t * 4 + 2 * d * 4)

    def bias_grad(self, name: str, n: int) -> None:
        t = self.cfg.tokens
        self.add(name, "reduction", t * n, t * n * self.s + n * 4)

    def linear(self, tag: str, d_in: int, d_out: int, bias: bool = True,
               lora: tuple[tuple[str, Any], ...] = ()) -> None:
        """Forward ``y[T, d_out] = x[T, d_in]·Wᵀ + b``, plus the LoRA adapters of the targets in
        ``lora`` (``(target, its output width)``; the fused q/k/v GEMM has three)."""
        self.gemm(f"{tag}_gemm", self.cfg.tokens, d_out, d_in, bias)
        for t, n_out in self._adapted(lora):
            self.lora_forward(t, d_in, n_out)

    def linear_backward(self, tag: str, d_in: int, d_out: int, bias: bool = True,
                        lora: tuple[tuple[str, Any], ...] = (), dx: bool = True) -> None:
        """``dx = dy·W`` ([T,d_out]x[d_out,d_in]), ``dW = dyᵀ·x`` ([d_out,T]x[T,d_in]), ``db``;
        ``dx`` only when the input needs a gradient, ``dW`` and ``db`` only for trainable
        weights (not under LoRA), the adapters' gradients first."""
        t = self.cfg.tokens
        for tgt, n_out in reversed(self._adapted(lora)):
            self.lora_backward(tgt, d_in, n_out, dx)
        if dx:
            self.gemm(f"{tag}_gemm_dinp", t, d_in, d_out)
        if not self.frozen:
            self.gemm(f"{tag}_gemm_dweight", d_out, d_in, t)
            if bias:
                self.bias_grad(f"{tag}_bias_grad", d_out)

    def _adapted(self, lora: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
        return tuple((t, n) for t, n in lora if t in self.targets)

    def lora_forward(self, t: str, d_in: Any, d_out: Any) -> None:
        """PEFT's ``y += B(A(x))·scale``: ``A[r, d_in]``, ``B[d_out, r]`` (no dropout)."""
        c, r = self.cfg, self.cfg.lora_rank
        self.gemm(f"lora_{t}_a_gemm", c.tokens, r, d_in)
        self.gemm(f"lora_{t}_b_gemm", c.tokens, d_out, r)
        self.elementwise(f"lora_{t}_scale", c.tokens * d_out, 1, 1, ELEMENTWISE_FLOP)
        self.elementwise(f"lora_{t}_add", c.tokens * d_out, 2, 1, ELEMENTWISE_FLOP)

    def lora_backward(self, t: str, d_in: Any, d_out: Any, dx: bool) -> None:
        """The adapters' gradients (``dB``, ``dA``) and their share of ``dx``."""
        c, r = self.cfg, self.cfg.lora_rank
        self.elementwise(f"lora_{t}_scale_backward", c.tokens * d_out, 1, 1, ELEMENTWISE_FLOP)
        self.gemm(f"lora_{t}_b_gemm_dinp", c.tokens, r, d_out)
        self.gemm(f"lora_{t}_b_gemm_dweight", d_out, r, c.tokens)
        self.gemm(f"lora_{t}_a_gemm_dweight", r, d_in, c.tokens)
        if dx:
            self.gemm(f"lora_{t}_a_gemm_dinp", c.tokens, d_in, r)
            self.elementwise(f"lora_{t}_grad_add", c.tokens * d_in, 2, 1, ELEMENTWISE_FLOP)

    # which tensors need gradients ----------------------------------------------------------------
    def grads(self, first: bool) -> dict[str, bool]:
        """Which tensors of a block need a gradient: all of them, except in the first block
        under LoRA, whose input comes from the frozen embedding: there a tensor needs one only
        downstream of an adapter (``x`` the block input, ``q``/``k``/``v`` the projections,
        ``p`` the attention probabilities, ``att`` the attention output, ``h1`` the residual
        stream after attention, ``up``/``gate``/``prod`` the MLP's inner tensors)."""
        if not (self.frozen and first):
            return _ALL_GRADS
        t = set(self.targets)
        if self.cfg.modern:
            q, k, v = "q" in t, "k" in t, "v" in t
        else:  # llm.c's fused q/k/v GEMM: one output tensor
            q = k = v = bool(t & {"q", "k", "v"})
        att = q or k or v
        h1 = att or "o" in t
        up, gate = h1 or "up" in t, h1 or "gate" in t
        return {"x": False, "q": q, "k": k, "v": v, "p": q or k, "att": att, "h1": h1,
                "up": up, "gate": gate, "prod": up or gate}

    # blocks ------------------------------------------------------------------------------------
    def attention(self) -> None:
        c = self.cfg
        t, d, h, s, dh = c.tokens, c.hidden, c.heads, c.seq, c.head_dim
        bh = c.micro_batch * h
        qkv = 3 * t * d if not c.modern else t * (d + 2 * c.kv_dim)
        # qkv [B,S,3,h,dh] -> q,k,v [B,h,S,dh]; llm.c's index arithmetic (the GPT layout;
        # PyTorch's copy kernels, BERT and the modern layouts, divide by precomputed magic
        # numbers: cheap, not counted)
        self.elementwise("permute", qkv, 1, 1, PERMUTE_INDEX_OPS if self.llmc else 0)
        if c.modern and c.rope:
            self.elementwise("rope", t * (d + c.kv_dim), 1, 1, ROPE_FLOP)  # q and k
        if self.gqa:  # Hugging Face's repeat_kv: k, v copied to every query head
            self.add("repeat_kv", "elementwise", 0, 2 * t * (c.kv_dim + d) * self.s)
        self.gemm("attn_scores_gemm", s, s, dh, batch=bh, category="attention")
        self.add("softmax", "softmax", SOFTMAX_FLOP * bh * s * s,
                 SOFTMAX_PASSES * bh * s * s * self.s)
        self.gemm("attn_value_gemm", s, dh, s, batch=bh, category="attention")
        self.elementwise("unpermute", t * d, 1, 1, UNPERMUTE_INDEX_OPS if self.llmc else 0)

    def attention_backward(self) -> None:
        c, g = self.cfg, self.req
        t, d, h, s, dh = c.tokens, c.hidden, c.heads, c.seq, c.head_dim
        bh = c.micro_batch * h
        if g["att"]:
            self.elementwise("unpermute_backward", t * d, 1, 1,
                             UNPERMUTE_INDEX_OPS if self.llmc else 0)
        if g["p"]:
            self.gemm("attn_value_gemm_datt", s, s, dh, batch=bh, category="attention")  # dY·Vᵀ
        if g["v"]:
            self.gemm("attn_value_gemm_dv", s, dh, s, batch=bh, category="attention")  # Pᵀ·dY
        if g["p"]:
            self.add("softmax_backward", "softmax", SOFTMAX_BACKWARD_FLOP * bh * s * s,
                     SOFTMAX_BACKWARD_PASSES * bh * s * s * self.s)
        if g["q"]:
            self.gemm("attn_scores_gemm_dq", s, dh, s, batch=bh, category="attention")  # dP·K
        if g["k"]:
            self.gemm("attn_scores_gemm_dk", s, dh, s, batch=bh, category="attention")  # dPᵀ·Q
        if not c.modern:
            if g["att"]:
                self.elementwise("permute_backward", 3 * t * d, 1, 1,
                                 PERMUTE_INDEX_OPS if self.llmc else 0)
            return
        n_kv = int(g["k"]) + int(g["v"])
        if self.gqa and n_kv:  # the gradients of the repeated k, v summed per key/value head
            self.add("repeat_kv_backward", "reduction", n_kv * t * d,
                     n_kv * t * (d + c.kv_dim) * self.s)
        if c.rope and (g["q"] or g["k"]):
            n = t * ((d if g["q"] else 0) + (c.kv_dim if g["k"] else 0))
            self.elementwise("rope_backward", n, 1, 1, ROPE_FLOP)
        if g["att"]:
            self.elementwise("permute_backward", t * (d + 2 * c.kv_dim), 1, 1, 0)

    def mlp(self) -> None:
        c = self.cfg
        b = c.bias == "all"
        if c.mlp == "swiglu":
            self.linear("gate_proj", c.hidden, c.ff, b, (("gate", c.ff),))
            self.linear("up_proj", c.hidden, c.ff, b, (("up", c.ff),))
            self.elementwise("silu", c.tokens * c.ff, 1, 1, SILU_FLOP)
            self.elementwise("silu_mul", c.tokens * c.ff, 2, 1, ELEMENTWISE_FLOP)
            self.linear("down_proj", c.ff, c.hidden, b, (("down", c.hidden),))
            return
        self.linear("fc", c.hidden, c.ff, b, (("up", c.ff),))
        self.elementwise("gelu", c.tokens * c.ff, 1, 1, GELU_FLOP)
        self.linear("fcproj", c.ff, c.hidden, b, (("down", c.hidden),))

    def mlp_backward(self) -> None:
        c, g = self.cfg, self.req
        b = c.bias == "all"
        if c.mlp == "swiglu":
            self.linear_backward("down_proj", c.ff, c.hidden, b, (("down", c.hidden),),
                                 dx=g["prod"])
            if g["prod"]:  # d(gate act) = dy·up, d(up) = dy·act
                n = int(g["gate"]) + int(g["up"])
                self.elementwise("silu_mul_backward", n * c.tokens * c.ff, 2, 1,
                                 ELEMENTWISE_FLOP)
            if g["gate"]:
                self.elementwise("silu_backward", c.tokens * c.ff, 2, 1, SILU_BACKWARD_FLOP)
            self.linear_backward("up_proj", c.hidden, c.ff, b, (("up", c.ff),), dx=g["h1"])
            self.linear_backward("gate_proj", c.hidden, c.ff, b, (("gate", c.ff),), dx=g["h1"])
            if g["h1"]:  # autograd sums the two input gradients
                self.residual("mlp_grad_add")
            return
        self.linear_backward("fcproj", c.ff, c.hidden, b, (("down", c.hidden),), dx=g["up"])
        if g["up"]:
            self.elementwise("gelu_backward", c.tokens * c.ff, 2, 1, GELU_BACKWARD_FLOP)
        self.linear_backward("fc", c.hidden, c.ff, b, (("up", c.ff),), dx=g["h1"])

    def residual(self, name: str) -> None:
        self.elementwise(name, self.cfg.tokens * self.cfg.hidden, 2, 1, ELEMENTWISE_FLOP)

    def qkv(self) -> None:
        c = self.cfg
        d = c.hidden
        if not c.modern:
            self.linear("qkv", d, 3 * d, True, (("q", d), ("k", d), ("v", d)))
            return
        b = c.bias != "none"
        self.linear("q_proj", d, d, b, (("q", d),))
        self.linear("k_proj", d, c.kv_dim, b, (("k", c.kv_dim),))
        self.linear("v_proj", d, c.kv_dim, b, (("v", c.kv_dim),))

    def qkv_backward(self) -> None:
        c, g = self.cfg, self.req
        d = c.hidden
        if not c.modern:
            self.linear_backward("qkv", d, 3 * d, True, (("q", d), ("k", d), ("v", d)), dx=g["x"])
            return
        b = c.bias != "none"
        self.linear_backward("q_proj", d, d, b, (("q", d),), dx=g["x"])
        self.linear_backward("k_proj", d, c.kv_dim, b, (("k", c.kv_dim),), dx=g["x"])
        self.linear_backward("v_proj", d, c.kv_dim, b, (("v", c.kv_dim),), dx=g["x"])
        if g["x"]:  # the three input gradients summed
            self.elementwise("qkv_grad_add", c.tokens * d, 3, 1, 2 * ELEMENTWISE_FLOP)

    def layer_forward(self) -> None:
        c = self.cfg
        d = c.hidden
        o_bias = c.bias == "all"
        n1, n2 = ("rmsnorm1", "rmsnorm2") if c.norm == "rmsnorm" else ("ln1", "ln2")
        if c.arch == "gpt":  # pre-LN: x + attn(ln1(x)); then + mlp(ln2(.))
            self.layernorm(n1)
            self.qkv()
            self.attention()
            self.linear("o_proj" if c.modern else "attproj", d, d, o_bias, (("o", d),))
            self.residual("residual1")
            self.layernorm(n2)
            self.mlp()
            self.residual("residual2")
        else:  # post-LN: ln1(x + attn(x)); then ln2(. + mlp(.))
            self.qkv()
            self.attention()
            self.linear("attproj", d, d, True, (("o", d),))
            self.residual("residual1")
            self.layernorm("ln1")
            self.mlp()
            self.residual("residual2")
            self.layernorm("ln2")

    def layer_backward(self) -> None:
        c = self.cfg
        d = c.hidden
        if c.recompute:
            self.recomputing = True
            self.layer_forward()
            self.recomputing = False
        self.req = g = self.grads(self.layer == 0)
        o_tag = "o_proj" if c.modern else "attproj"
        n1, n2 = ("rmsnorm1", "rmsnorm2") if c.norm == "rmsnorm" else ("ln1", "ln2")
        if c.arch == "gpt":
            self.mlp_backward()
            if g["h1"]:
                self.layernorm_backward(f"{n2}_backward")
                self.residual("residual2_grad_add")  # autograd sums the two gradients of x1
            self.linear_backward(o_tag, d, d, c.bias == "all", (("o", d),), dx=g["att"])
            self.attention_backward()
            self.qkv_backward()
            if g["x"]:
                self.layernorm_backward(f"{n1}_backward")
                self.residual("residual1_grad_add")
        else:
            if g["prod"]:
                self.layernorm_backward("ln2_backward")
            self.mlp_backward()
            if g["h1"]:
                self.residual("residual2_grad_add")
                self.layernorm_backward("ln1_backward")
            self.linear_backward("attproj", d, d, True, (("o", d),), dx=g["att"])
            self.attention_backward()
            self.qkv_backward()
            if g["x"]:
                self.residual("residual1_grad_add")
        self.req = _ALL_GRADS

    def embedding(self) -> None:
        c = self.cfg
        t, d = c.tokens, c.hidden
        if c.modern:
            learned = not c.rope
            rows = t * d + (c.seq * d if learned else 0)
            # the rotary cos / sin tables (an outer product of S·dh/2, once) are not counted
            self.add("embedding_forward", "embedding", t * d if learned else 0,
                     t * 4 + (rows + t * d) * self.s)
            return
        ids = t * 4 * (2 if c.arch == "bert" else 1)  # int32 token (+ token-type) ids
        rows = t * d + c.seq * d + (2 * d if c.arch == "bert" else 0)
        adds = 2 if c.arch == "bert" else 1
        self.add("embedding_forward", "embedding", adds * t * d, ids + (rows + t * d) * self.s)
        if c.arch == "bert":
            self.layernorm("embedding_ln")

    def embedding_backward(self) -> None:
        c = self.cfg
        if self.frozen:  # LoRA: the embedding is frozen and the token ids need no gradient
            return
        t, d = c.tokens, c.hidden
        if c.arch == "bert":
            self.layernorm_backward("embedding_ln_backward")
        ids = t * 4 * (2 if c.arch == "bert" else 1)
        rope = c.modern and c.rope  # no position table
        pos = 0 if rope else 2 * c.seq * d
        # read dout, read-modify-write the gathered rows of dwte and the position rows of dwpe
        nbytes = ids + (t * d + 2 * t * d + pos) * self.s
        self.add("embedding_backward", "embedding", (1 if rope else 2) * t * d, nbytes)

    def head(self) -> None:
        c = self.cfg
        t, d, v = c.tokens, c.hidden, c.vocab
        if c.arch == "gpt":
            self.layernorm("rmsnormf" if c.norm == "rmsnorm" else "lnf")
            self.gemm("logits_gemm", t, v, d)
            # llm.c fused_classifier: softmax + cross-entropy + dlogits in one pass (in place)
            self.add("fused_classifier", "softmax", SOFTMAX_FLOP * t * v,
                     (2 * t * v) * self.s + 3 * t * 4)
        else:
            self.linear("mlm_transform", d, d)
            self.elementwise("mlm_gelu", t * d, 1, 1, GELU_FLOP)
            self.layernorm("mlm_ln")
            self.gemm("mlm_decoder_gemm", t, v, d, bias=True)
            self.add("cross_entropy", "softmax", SOFTMAX_FLOP * t * v, t * v * self.s + 3 * t * 4)

    def head_backward(self) -> None:
        c = self.cfg
        t, d, v = c.tokens, c.hidden, c.vocab
        if c.arch == "gpt":
            self.gemm("logits_gemm_dinp", t, d, v)
            if not self.frozen:
                self.gemm("logits_gemm_dweight", v, d, t)
            self.layernorm_backward("rmsnormf_backward" if c.norm == "rmsnorm" else "lnf_backward")
        else:
            self.add("cross_entropy_backward", "softmax", 3 * t * v, 2 * t * v * self.s + 2 * t * 4)
            self.linear_backward("mlm_decoder", d, v)
            self.layernorm_backward("mlm_ln_backward")
            self.elementwise("mlm_gelu_backward", t * d, 2, 1, GELU_BACKWARD_FLOP)
            self.linear_backward("mlm_transform", d, d)

    def optimizer(self) -> None:
        c = self.cfg
        if self.frozen:  # LoRA: the adapters only
            p_layer, p_rest = c.lora_layer_params(), 0
        else:
            p_layer, p_rest = c.layer_params(), c.embedding_head_params()
        p_all = c.trainable_params()
        per_param = (2 * self.s + 24) if self.s < 4 else 28
        self.layer = None
        self.add("grad_norm", "reduction", 2 * p_all, p_all * self.s + 4)
        for layer in range(c.layers):
            self.layer = layer
            self.add("adamw", "optimizer", ADAMW_FLOP_PER_PARAM * p_layer, per_param * p_layer,
                     params=p_layer)
        self.layer = None
        if not self.frozen:
            self.add("adamw", "optimizer", ADAMW_FLOP_PER_PARAM * p_rest, per_param * p_rest,
                     params=p_rest)

    def build(self) -> list[Kernel]:
        c = self.cfg
        self.phase, self.layer = "forward", None
        self.embedding()
        for layer in range(c.layers):
            self.layer = layer
            self.layer_forward()
        self.layer = None
        self.head()
        self.phase = "backward"
        # cudaMemset of the gradients
        self.add("zero_grad", "memcpy", 0, c.trainable_params() * self.s)
        self.head_backward()
        for layer in reversed(range(c.layers)):
            self.layer = layer
            self.layer_backward()
        self.layer = None
        self.embedding_backward()
        self.phase = "optimizer"
        self.optimizer()
        return self.kernels


class _TableBuilder(_Builder):
    """:class:`_Builder` over a :class:`TrainingConfig` whose sizes are float arrays over ``n``
    shapes (same arch, dtype, recompute and layer count): the builder's formulas then give every
    shape's FLOPs and bytes at once (exact while the products stay below 2⁵³); one row of FLOPs
    and bytes per kernel."""

    def __init__(self, cfg: TrainingConfig, n: int) -> None:
        super().__init__(cfg)
        self.n = n
        self.flops: list[Any] = []  # per kernel: a scalar or an (n,) array
        self.nbytes: list[Any] = []

    def add(self, name: str, category: str, flops: Any, nbytes: Any, math: str = "fp32",
            **meta: Any) -> None:
        self.kernels.append(Kernel(name, category, self.phase, self.layer, 0.0, 0.0, math, None,
                                   {"recompute": True} if self.recomputing else {}))
        self.flops.append(flops)
        self.nbytes.append(nbytes)

    def table(self) -> tuple[np.ndarray, np.ndarray]:
        """FLOPs and bytes of every kernel (rows) of every shape (columns)."""
        f, b = np.empty((len(self.kernels), self.n)), np.empty((len(self.kernels), self.n))
        for i, (x, y) in enumerate(zip(self.flops, self.nbytes, strict=True)):
            f[i], b[i] = x, y
        return f, b


def build_table(arch: str, layers: int, dtype: str, recompute: bool, *, hidden: Any, heads: Any,
                ff: Any, vocab: Any, seq: Any, batch: Any, components: Any = (),
                llmc_kernels: bool = True
                ) -> tuple[list[Kernel], np.ndarray, np.ndarray, np.ndarray]:
    """The kernels of one training iteration of ``n`` shapes at once (arrays of length ``n``
    for the sizes, ``batch`` the micro-batch; one arch, layer count, dtype and recompute setting), as :func:`build_trace`
    would give them one shape at a time. ``components``: the modern-decoder / LoRA fields the
    shapes share (:meth:`TrainingConfig.components`, e.g. ``(("kv_heads", 8), ("mlp",
    "swiglu"))``); with ``kv_heads`` given, either every shape has fewer key/value heads than
    heads or none has. ``llmc_kernels=False``: the GPT layout's permutes as PyTorch copies (no
    llm.c index arithmetic), for jobs run by a framework rather than llm.c.

    Returns ``(template, flops, bytes, params)``: the kernel sequence (names, categories, phases,
    layers, math dtypes; its FLOPs and bytes are 0), FLOPs and DRAM bytes of every kernel of
    every shape, shape ``(K, n)``, and each shape's parameter count ``(n,)``. The shapes are not
    validated: check them with :meth:`TrainingConfig.validate` (or :func:`joulebound.jobs.job.resolve`).
    """
    arr = {k: np.asarray(v, float).reshape(-1) for k, v in
           dict(hidden=hidden, heads=heads, ff=ff, vocab=vocab, seq=seq, batch=batch).items()}
    n = len(arr["hidden"])
    arr["micro_batch"] = arr.pop("batch")
    cfg = TrainingConfig(arch, layers, dtype=dtype, recompute=recompute, name="table",
                         **{k: np.broadcast_to(v, (n,)) for k, v in arr.items()},
                         **dict(components))
    b = _TableBuilder(cfg, n)
    b.llmc = b.llmc and llmc_kernels
    b.build()
    flops, nbytes = b.table()
    return b.kernels, flops, nbytes, np.broadcast_to(np.asarray(cfg.params(), float), (n,))


def _make_config(config_or_preset: TrainingConfig | str,
                 overrides: dict[str, Any]) -> TrainingConfig:
    cfg = get_preset(config_or_preset) if isinstance(config_or_preset, str) else config_or_preset
    if not isinstance(cfg, TrainingConfig):
        raise JouleboundError(f"expected a TrainingConfig or a preset name, got {cfg!r:.60}")
    if "batch" in overrides:  # the old spelling: the micro-batch
        overrides = dict(overrides)
        b = overrides.pop("batch")
        overrides.setdefault("micro_batch", b)
    known = {f.name for f in fields(TrainingConfig)} | {"batch"}
    unknown = [k for k in overrides if k not in known]
    if unknown:
        raise JouleboundError(f"unknown model field(s) {', '.join(unknown)}; "
                              f"fields: {', '.join(sorted(known))}")
    clean = {k: v for k, v in overrides.items() if v is not None}
    cfg = cfg.filled()
    if "hidden" in clean and "ff" not in clean and cfg.ff == 4 * cfg.hidden:
        clean["ff"] = 4 * clean["hidden"] if isinstance(clean["hidden"], int) else None
    if cfg.micro_batch is None and "micro_batch" not in clean:
        clean["micro_batch"] = 1  # one sequence per iteration unless given
    return replace(cfg, **clean).filled().validate() if clean else cfg.validate()


def build_trace(config_or_preset: TrainingConfig | str, *, iterations: int = 1,
                optimizer: bool = True, llmc_kernels: bool = True, **overrides: Any) -> Trace:
    """Kernel trace of one (or ``iterations``) training iteration(s).

    Args:
        config_or_preset: a :class:`~joulebound.workload.config.TrainingConfig` or a name in
            :data:`PRESETS`.
        iterations: number of iterations to concatenate (for large planning problems).
        optimizer: include the optimizer phase (grad norm + AdamW); ``False`` gives the
            forward + backward kernels only, the setting of per-kernel DVFS studies such as
            Spaan et al. (arXiv 2601.08539).
        llmc_kernels: the GPT layout's permutes as llm.c runs them (with their integer index
            arithmetic); ``False``: as PyTorch copies (a framework job, as the job predictor
            prices it).
        **overrides: :class:`~joulebound.workload.config.TrainingConfig` fields to change
            (``micro_batch=4``, ``seq=2048``, ...; ``batch`` is read as ``micro_batch``);
            ``None`` values are ignored.

    Returns:
        A :class:`Trace` with ``meta`` holding the config (:meth:`TrainingConfig.trace_meta`),
        ``source="analytic"``,
        ``params`` (the base model's), ``tokens`` and ``iterations``; with LoRA also
        ``trainable_params`` (the adapters').

    Raises:
        JouleboundError: unknown preset or field, impossible shape.
    """
    cfg = _make_config(config_or_preset, overrides)
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise JouleboundError(f"iterations must be a positive integer, got {iterations!r}")
    b = _Builder(cfg)
    b.llmc = b.llmc and llmc_kernels
    one = b.build()
    if not optimizer:
        one = [k for k in one if k.phase != "optimizer"]
    kernels = one if iterations == 1 else _repeat(one, iterations)
    meta = {"source": "analytic", **cfg.trace_meta(), "params": cfg.params(),
            "tokens": cfg.tokens, "iterations": iterations, "optimizer": optimizer}
    if cfg.lora_rank:
        meta["trainable_params"] = cfg.trainable_params()
    return Trace(kernels=kernels, name=cfg.name, meta=meta)


def _repeat(one: list[Kernel], n: int) -> list[Kernel]:
    out = list(one)
    for it in range(1, n):
        out += [Kernel(k.name, k.category, k.phase, k.layer, k.flops, k.bytes, k.dtype, None,
                       {**k.meta, "iteration": it}) for k in one]
    return out


def model_flops_estimate(cfg: TrainingConfig) -> float:
    """The textbook estimate ``6·N·T + 12·L·S·d·T`` FLOP per iteration (Kaplan et al. 2020).

    ``N`` counts the weights that take part in matrix multiplies, the tied embedding / output
    matrix included (``L·(4d² + 2·d·ff) + V·d``, plus the ``d²`` MLM transform for BERT):
    the logits GEMM costs ``6·V·d`` FLOP per token, which the classic non-embedding ``N`` leaves
    out (45 % of GPT-2-small's compute).
    """
    d = cfg.hidden
    cfg = cfg.filled()
    n = cfg.layers * matmul_weights(cfg) + cfg.vocab * d + (d * d if cfg.arch == "bert" else 0)
    return 6.0 * n * cfg.tokens + 12.0 * cfg.layers * cfg.seq * d * cfg.tokens


def matmul_weights(cfg: TrainingConfig) -> int:
    """Weights of one block that take part in matrix multiplies: ``4d² + 2·d·ff`` for GPT-2 /
    BERT; ``2d² + 2·d·d_kv + 3·d·ff`` for a GQA (``d_kv = kv_heads·head_dim``) SwiGLU block."""
    return sum(a * b for a, b in cfg.filled().linears().values())


__all__: list[str] = ["ARCHS", "DTYPE_BYTES", "ModelConfig", "PRESETS", "TrainingConfig",
                      "build_trace", "config_from_hf",
                      "get_preset", "matmul_weights", "model_flops_estimate"]
