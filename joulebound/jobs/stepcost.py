"""Per-GPU compute of one training micro-batch, from the analytic trace and the GPU model.

For each distinct per-GPU workload (shape, per-GPU micro-batch, dtype, recompute, tensor-parallel
degree, device, clocks / power limit) the analytic kernel trace of one layer (the op table of
:func:`joulebound.workload.analytic.build_table`, built for all shapes of one architecture, dtype
and recompute setting at once; kernel for kernel what ``build_trace`` gives) is characterized on
the device (:func:`joulebound.gpumodel.characterize`, at ``auto`` or the given clocks, under
the given power limit), together with a copy of its optimizer kernels at twice the parameters.
The layers of a trace are identical and the optimizer kernels' cost is linear in the parameters,
so this one small trace gives every part of an L-layer step:

* ``layer_f`` / ``layer_b`` — the kernels of one layer's forward / backward (backward includes
  the recomputed forward when ``recompute``);
* ``pre_f`` / ``pre_b`` — embedding (and BERT's embedding LayerNorm) forward / backward;
* ``post_f`` / ``post_b`` — the head (final LayerNorm, logits or MLM head, loss);
* the optimizer step (gradient norm, AdamW, zeroing the gradients) as ``c0 + c1·P`` in the
  parameters ``P`` the GPU updates (time s, energy J), plus the GPU model's per-kernel overhead
  for each further layer's AdamW kernel.

Tensor parallelism (Megatron) divides the FLOPs and bytes of the kernels it splits — the four
weight GEMMs, the attention products and softmax, GELU, the (vocabulary-parallel) logits and loss —
by ``tp``; LayerNorms, residual adds and embeddings stay replicated on every GPU.

Per-kernel times and energies are kept (not only sums) because the predictor applies a per-kernel
host launch floor. All figures are **modeled** (the GPU model's own provenance is recorded).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from joulebound.core.clocks import ClockConfig
from joulebound.core.errors import JouleboundError

#: kernel-name prefixes that Megatron tensor parallelism splits across the tp GPUs (the
#: Llama-layout projections, SiLU, RoPE and repeat_kv too; LoRA adapters stay whole)
TP_SPLIT = ("qkv", "attproj", "fc", "permute", "unpermute", "attn_", "softmax", "gelu",
            "logits_gemm", "fused_classifier", "mlm_decoder", "cross_entropy", "q_proj",
            "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "silu", "rope",
            "repeat_kv")
PARTS = ("layer_f", "layer_b", "pre_f", "pre_b", "post_f", "post_b")
#: the optimized-stack switches a :class:`WorkKey` carries (see :func:`_apply_stack`)
STACK_FIELDS = ("flash", "fp8", "selective", "sp", "fsdp")
#: the linear-layer GEMMs Transformer Engine runs in FP8 (forward, dgrad, wgrad); the attention
#: core, the LM head and LoRA adapters stay in bf16
FP8_GEMMS = ("qkv_gemm", "attproj_gemm", "fc_gemm", "fcproj_gemm", "q_proj_gemm", "k_proj_gemm",
             "v_proj_gemm", "o_proj_gemm", "gate_proj_gemm", "up_proj_gemm", "down_proj_gemm")
#: the attention core of a layer: forward kernels and, per forward kernel, the backward kernel
#: that a recomputation of it joins
ATTN_FWD = ("attn_scores_gemm", "softmax", "attn_value_gemm")
ATTN_BWD = {"attn_scores_gemm": "attn_scores_gemm_dq", "softmax": "softmax_backward",
            "attn_value_gemm": "attn_value_gemm_datt"}


@dataclass(frozen=True)
class WorkKey:
    """What decides one GPU's kernels (hashable; one characterization per key)."""

    arch: str
    hidden: int
    heads: int
    ff: int
    vocab: int
    seq: int
    micro_batch: int
    dtype: str
    recompute: bool
    tp: int
    device: str
    clocks: str
    power_limit_w: float | None
    #: the modern-decoder / LoRA fields (:meth:`TrainingConfig.components
    #: <joulebound.workload.config.TrainingConfig.components>`; empty for GPT-2 / BERT)
    components: tuple = ()
    #: the optimized-stack switches that change the kernels (:data:`STACK_FIELDS` that are on:
    #: ``flash``, ``fp8``, ``selective``, ``sp``); empty for the eager stack
    stack: tuple = ()


@dataclass
class Parts:
    """Modeled per-kernel time (s) and energy (J) of each part of one micro-batch on one GPU,
    plus the optimizer step as linear functions of the updated parameters."""

    key: WorkKey
    t: dict[str, np.ndarray]
    e: dict[str, np.ndarray]
    opt_t: tuple[float, float]  # (c0 s, c1 s/parameter)
    opt_e: tuple[float, float]  # (c0 J, c1 J/parameter)
    idle_w: float
    power_limit_w: float
    device_memory: float
    kernel_overhead_s: float = 0.0  # the GPU model's fixed time per kernel (per-layer AdamW kernels)
    model_meta: dict = field(default_factory=dict)
    cache: dict = field(default_factory=dict, repr=False)  # per-part sums by (part, κ, τ, host)

    def sum_t(self, part: str) -> float:
        return float(self.t[part].sum())


#: built 1-layer per-GPU kernel lists by shape (the GPU model is not cached: it may change)
_TRACES: dict[tuple, tuple] = {}
_STRUCTURES: dict[tuple, dict[str, np.ndarray]] = {}
_CACHE_MAX = 20_000


def _masks(kernels: list) -> dict[str, np.ndarray]:
    """Boolean masks of each part (and ``opt``: the optimizer step) over a 1-layer trace."""
    ph = np.array([k.phase for k in kernels], dtype=object)
    nm = np.array([k.name for k in kernels], dtype=object)
    in_layer = np.array([k.layer == 0 for k in kernels])
    idx = np.arange(len(kernels))
    opt = (ph == "optimizer") | (nm == "zero_grad")
    fwd, bwd = ph == "forward", (ph == "backward") & ~opt
    first_f = np.flatnonzero(fwd & in_layer)
    pre = fwd & ~in_layer & (idx < (first_f[0] if len(first_f) else 0))
    first_b = np.flatnonzero(bwd & in_layer)
    post_b = bwd & ~in_layer & (idx < (first_b[0] if len(first_b) else 0))
    return {"layer_f": fwd & in_layer, "layer_b": bwd & in_layer, "pre_f": pre,
            "pre_b": bwd & ~in_layer & ~post_b, "post_f": fwd & ~in_layer & ~pre, "post_b": post_b,
            "opt": opt}


def _device_setup(device: str, clocks: str, power_limit_w: float | None):
    from joulebound.gpumodel import params_for, resolve_device

    spec = resolve_device(device)
    prm = params_for(spec)
    if power_limit_w is not None:
        lo, hi = spec.power_limit_min_w, spec.power_limit_max_w
        if not lo <= power_limit_w <= hi:
            raise JouleboundError(f"--power-limit {power_limit_w:g} W is outside {spec.name}'s range "
                                  f"{lo:g}–{hi:g} W")
        prm = prm.with_limit(power_limit_w)
    try:
        cfg = ClockConfig.parse(clocks or "auto")
    except ValueError as exc:
        raise JouleboundError(f"--clocks: {exc}") from None
    return spec, prm, cfg


def _shape(k: WorkKey) -> tuple:
    return (k.arch, k.hidden, k.heads, k.ff, k.vocab, k.seq, k.micro_batch, k.dtype, k.recompute, k.tp,
            k.components, k.stack)


def _apply_stack(tpl: list, flops: np.ndarray, nbytes: np.ndarray, a: np.ndarray, stack: tuple,
                 split: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The optimized stack's effect on one layer's kernels (FLOPs and DRAM bytes, ``(K, n)``, after
    the tensor-parallel split ``split`` of shapes ``a`` = hidden, heads, ff, vocab, seq, batch,
    tp): returns each kernel's math dtype and the new FLOPs and bytes.

    * ``sp`` (sequence parallelism, Korthikanti et al. 2022): the LayerNorm, residual and
      elementwise kernels that tensor parallelism leaves replicated run on 1/tp of the sequence;
    * ``flash`` (FlashAttention): the attention core is fused — no S² scores or probabilities in
      DRAM (the two GEMMs read Q, K, V and write O; softmax traffic gone), and the backward
      recomputes the scores inside its kernel (one more score GEMM);
    * ``selective`` (selective recompute, without FlashAttention): the backward recomputes the
      attention core's forward (scores, softmax, values);
    * ``fp8`` (Transformer Engine): the linear layers' GEMMs at the FP8 rate, their inputs cast
      to FP8 first (read 2 B, write 1 B per element: folded into the GEMM's bytes);
    * ``fsdp`` (PyTorch FSDP, per unit = layer): the all-gathered parameters are copied out of the
      flat buffer before the forward and again before the backward, and the gradients copied into
      the reduce-scatter buffer (read + write of the layer's 16-bit weights each: the weights from
      the forward GEMMs' FLOPs), folded into the layer's first forward / backward kernel."""
    on = dict(stack)
    names = [k.name for k in tpl]
    dtypes = [k.dtype for k in tpl]
    flops, nbytes = flops.copy(), nbytes.copy()
    in_layer = np.array([k.layer == 0 and k.phase in ("forward", "backward") for k in tpl])
    tp = a[:, 6]
    if on.get("sp"):
        rep = in_layer & ~split[:, 0]
        flops[rep] /= tp
        nbytes[rep] /= tp
    idx: dict[str, list[int]] = {}
    for i, n in enumerate(names):
        if in_layer[i]:
            idx.setdefault(n, []).append(i)  # a recomputed forward repeats the forward's names
    tokens, d = a[:, 5] * a[:, 4], a[:, 0] / tp  # per micro-batch tokens, per-GPU width
    qkvo = 2.0 * tokens * d  # one bf16 activation tensor of the micro-batch (bytes)
    first = {n: v[0] for n, v in idx.items()}
    if on.get("flash") and all(n in idx for n in ATTN_FWD):
        for i in idx["attn_scores_gemm"] + idx["attn_value_gemm"]:
            nbytes[i] = 2 * qkvo  # read Q, K / read V, write O: no S² tensor in DRAM
        for i in idx["softmax"] + idx.get("softmax_backward", []):
            nbytes[i] = 0.0  # fused into the GEMMs' kernel
        for n in ("attn_scores_gemm_dq", "attn_scores_gemm_dk", "attn_value_gemm_datt",
                  "attn_value_gemm_dv"):
            for i in idx.get(n, []):
                nbytes[i] = 2 * qkvo  # Q, K, V, O, dO in; dQ, dK, dV out (over the four)
        for i in idx.get("attn_scores_gemm_dq", []):
            flops[i] += flops[first["attn_scores_gemm"]]  # the backward recomputes the scores
    elif on.get("selective") and all(n in idx for n in ATTN_FWD):
        for n in ATTN_FWD:
            for i in idx.get(ATTN_BWD[n], []):
                flops[i] += flops[first[n]]
                nbytes[i] += nbytes[first[n]]
    if on.get("fsdp"):
        w_f = np.zeros(len(tokens))
        for i, k in enumerate(tpl):
            if in_layer[i] and k.phase == "forward" and k.category == "gemm":
                w_f += flops[i] / (2.0 * tokens)  # weights of the layer's linears (per GPU)
        f0 = next(i for i, k in enumerate(tpl) if in_layer[i] and k.phase == "forward")
        b0 = next(i for i, k in enumerate(tpl) if in_layer[i] and k.phase == "backward")
        nbytes[f0] = nbytes[f0] + 2 * 2.0 * w_f  # copy-out of the gathered weights
        nbytes[b0] = nbytes[b0] + 4 * 2.0 * w_f  # copy-out again + gradients' copy-in
    if on.get("fp8"):
        for i, n in enumerate(names):
            if n.startswith(FP8_GEMMS) and tpl[i].category == "gemm":
                dtypes[i] = "fp8"
                # the GEMM's activation input cast to FP8 (read 2 B, write 1 B per element)
                nbytes[i] = nbytes[i] + 1.5 * qkvo
    return dtypes, flops, nbytes


def _gqa(sh: tuple) -> bool:
    """Whether a shape has fewer key/value heads than heads (a separate kernel sequence)."""
    kv = dict(sh[10]).get("kv_heads")
    return kv is not None and kv != sh[2]


def _build_shapes(shapes: Sequence[tuple]) -> None:
    """Put the 1-layer per-GPU kernels of every shape in the trace cache: the op table is built
    for all shapes of one (arch, dtype, recompute) at once (:func:`build_table`; jobs run on a
    framework, so permutes are PyTorch copies, not llm.c's index arithmetic), the kernels
    that tensor parallelism splits divided by each shape's ``tp``, and a copy of the optimizer
    kernels at twice the parameters appended (the optimizer cost's slope)."""
    from joulebound.workload.analytic import build_table
    from joulebound.workload.trace import Kernel

    groups: dict[tuple, list[tuple]] = {}
    for sh in shapes:
        groups.setdefault((sh[0], sh[7], sh[8], sh[10], _gqa(sh), sh[11]), []).append(sh)
    for (arch, dtype, rec, comp, _, stack), shs in groups.items():
        a = np.array([sh[1:7] + (sh[9],) for sh in shs], float)
        tpl, flops, nbytes, n_params = build_table(arch, 1, dtype, rec, hidden=a[:, 0], heads=a[:, 1],
                                                   ff=a[:, 2], vocab=a[:, 3], seq=a[:, 4], batch=a[:, 5],
                                                   components=comp, llmc_kernels=False)
        split = np.array([k.name.startswith(TP_SPLIT) for k in tpl])[:, None]
        flops = np.where(split, flops / a[:, 6], flops)
        nbytes = np.where(split, nbytes / a[:, 6], nbytes)
        dtypes = [k.dtype for k in tpl]
        if stack:
            dtypes, flops, nbytes = _apply_stack(tpl, flops, nbytes, a, stack, split)
            from dataclasses import replace as _replace

            tpl = [_replace(k, dtype=dt) if dt != k.dtype else k for k, dt in zip(tpl, dtypes, strict=True)]
        sig = (arch, rec, len(tpl), comp)
        if sig not in _STRUCTURES:  # same architecture: the same kernel sequence
            _STRUCTURES[sig] = _masks(tpl)
        opt = np.flatnonzero(_STRUCTURES[sig]["opt"])
        # kernels the same in every shape of the group (a recomputed forward, ln1 / ln2, the two
        # residual adds, ...) are characterized once: the GPU model prices each kernel alone
        kind = {(k.category, k.dtype): i for i, k in enumerate(tpl)}
        ids = np.array([kind[(k.category, k.dtype)] for k in tpl], float)[:, None]
        _, first, inv = np.unique(np.hstack([ids, flops, nbytes]), axis=0, return_index=True,
                                  return_inverse=True)
        order = np.argsort(first)  # distinct kernels in first-occurrence order
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        keep, inv = first[order], rank[inv.reshape(-1)]
        proto = [(tpl[i].name, tpl[i].category, tpl[i].phase, tpl[i].layer, tpl[i].dtype, tpl[i].meta)
                 for i in keep]
        o_proto = [(tpl[i].name, tpl[i].category, tpl[i].dtype) for i in opt]
        fk, bk = flops[keep], nbytes[keep]
        for j, sh in enumerate(shs):
            f, b = fk[:, j].tolist(), bk[:, j].tolist()
            ker = [Kernel(nm, cat, ph, ly, fi, bi, dt, None, me)
                   for (nm, cat, ph, ly, dt, me), fi, bi in zip(proto, f, b, strict=True)]
            double = [Kernel(nm, cat, "optimizer", None, 2 * flops[i, j], 2 * nbytes[i, j], dt, None, {})
                      for (nm, cat, dt), i in zip(o_proto, opt.tolist(), strict=True)]
            _TRACES[sh] = (ker, double, sig, float(n_params[j]), inv)


def characterize_parts(keys: Sequence[WorkKey]) -> dict[WorkKey, Parts]:
    """:class:`Parts` for every key, one GPU-model call per (device, clocks, power limit)."""
    from joulebound.gpumodel import characterize
    from joulebound.workload.trace import Trace

    out: dict[WorkKey, Parts] = {}
    traces = _TRACES
    structures = _STRUCTURES
    if len(traces) > _CACHE_MAX:
        traces.clear()
    groups: dict[tuple, list[WorkKey]] = {}
    for k in dict.fromkeys(keys):
        groups.setdefault((k.device, k.clocks, k.power_limit_w), []).append(k)
    for (device, clocks, plim), ks in groups.items():
        spec, prm, cfg = _device_setup(device, clocks, plim)
        kernels: list = []
        spans = []
        _build_shapes([sh for sh in dict.fromkeys(_shape(k) for k in ks) if sh not in traces])
        for k in ks:
            shape = _shape(k)
            ker, double, sig, n_params, inv = traces[shape]
            start = len(kernels)
            kernels += ker
            kernels += double
            spans.append((sig, start, start + len(ker), start + len(ker) + len(double), n_params, inv))
        ch = characterize(Trace(kernels, name=f"jobs@{spec.name}"), spec, configs=[cfg],
                          include_auto=False, params=prm)
        t_all, e_all = ch.time_s[:, 0], ch.energy_j[:, 0]
        meta = {"gpu_model": ch.meta.get("model"), "params_calibration": ch.meta.get("params_calibration"),
                "power_limit_w": float(prm.power_limit_w)}
        for k, (sig, a0, a1, a2, pa, inv) in zip(ks, spans, strict=True):
            masks = structures[sig]
            ta, ea = t_all[a0:a1][inv], e_all[a0:a1][inv]
            opt = masks["opt"]
            ta_opt, tb_opt = float(ta[opt].sum()), float(t_all[a1:a2].sum())
            ea_opt, eb_opt = float(ea[opt].sum()), float(e_all[a1:a2].sum())
            c1t, c1e = (tb_opt - ta_opt) / pa, (eb_opt - ea_opt) / pa
            out[k] = Parts(
                key=k, t={p: ta[masks[p]] for p in PARTS}, e={p: ea[masks[p]] for p in PARTS},
                opt_t=(ta_opt - c1t * pa, c1t), opt_e=(ea_opt - c1e * pa, c1e),
                idle_w=float(prm.idle_w), power_limit_w=float(prm.power_limit_w),
                device_memory=float(spec.memory_bytes or 0.0),
                kernel_overhead_s=float(prm.launch_overhead_s), model_meta=meta)
    return out


def prime_part_sums(parts: Sequence[Parts], kappa: float, tau: float, host: float = 0.0,
                    unit_f: float = 0.0, unit_b: float = 0.0) -> None:
    """Fill every :class:`Parts`' cache of per-part sums under framework factor ``kappa``,
    per-kernel floor ``tau`` s, host dispatch time ``host`` s per kernel and the data-parallel
    wrapper's host time per layer ``unit_f`` / ``unit_b`` s (forward / backward) in one vectorized
    pass (what the predictor's composition reads for each part: time ``max(Σ max(κ·t_k, τ),
    n·host + unit)`` s — the host launches the part's ``n`` kernels while the GPU runs them, so
    the slower of the two sets the pace; the GPU idles for the difference —, busy energy
    ``κ·ΣE_k`` J, and the GPU's idle time in the part, s)."""
    for name in PARTS:
        key = (name, kappa, tau, host, unit_f, unit_b)
        todo = [p for p in parts if key not in p.cache]
        if not todo:
            continue
        unit = unit_f if name == "layer_f" else (unit_b if name == "layer_b" else 0.0)
        lens = np.array([len(p.t[name]) for p in todo])
        seg = np.repeat(np.arange(len(todo)), lens)
        tk = np.concatenate([p.t[name] for p in todo]) * kappa
        t = np.maximum(tk, tau)
        e = np.concatenate([p.e[name] for p in todo])
        n = len(todo)
        sk = np.bincount(seg, tk, n)
        st = np.maximum(np.bincount(seg, t, n), lens * host + unit)
        se = (np.bincount(seg, e, n) * kappa).tolist()
        sg = (st - sk).tolist()
        for p, a, b, c in zip(todo, st.tolist(), se, sg, strict=True):
            p.cache[key] = (a, b, c)
