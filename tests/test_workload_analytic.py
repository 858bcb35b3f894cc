"""Analytic transformer traces: FLOP totals, kernel counts, shapes, bytes, errors."""

from __future__ import annotations

import pytest

from joulebound.core.errors import JouleboundError
from joulebound.workload import load_trace
from joulebound.workload.analytic import PRESETS, build_trace
from joulebound.workload.config import TrainingConfig
from joulebound.workload.trace import CATEGORIES, PHASES, Trace


def textbook_flops(c: TrainingConfig) -> float:
    """6·N·T + 12·L·S·d·T, with N = L·(4d² + 2d·ff) + V·d (tied embedding / LM head included);
    for modern blocks N = L·(2d² + 2d·d_kv + 3d·ff) + V·d (GQA, SwiGLU)."""
    d, t = c.hidden, c.micro_batch * c.seq
    if c.modern:
        dkv = c.kv * d // c.heads
        block = 2 * d * d + 2 * d * dkv + (3 if c.mlp == "swiglu" else 2) * d * c.ff
    else:
        block = 4 * d * d + 2 * d * c.ff
    n = c.layers * block + c.vocab * d
    return 6 * n * t + 12 * c.layers * c.seq * d * t


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_iteration_flops_match_textbook_formula(name: str) -> None:
    tr = build_trace(name)
    ratio = tr.total_flops / textbook_flops(PRESETS[name])
    assert 0.95 <= ratio <= 1.05, f"{name}: analytic / textbook = {ratio:.4f}"
    # GEMM + attention GEMMs alone carry nearly all the work: the rest is < 2 %
    mm = sum(k.flops for k in tr if k.category in ("gemm", "attention"))
    assert mm / tr.total_flops > 0.98


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_kernels_per_layer_between_35_and_45(name: str) -> None:
    """38 for the llm.c / BERT layouts; the Hugging Face Llama layout launches more (separate
    q / k / v projections and their gradient sum, RoPE, repeat_kv, SwiGLU's gate): 49–54."""
    tr = build_trace(name)
    cfg = PRESETS[name]
    lo, hi = (45, 56) if cfg.modern else (35, 45)
    for layer in (0, cfg.layers - 1):
        n = sum(1 for k in tr if k.layer == layer and k.phase in ("forward", "backward"))
        assert lo <= n <= hi, f"{name} layer {layer}: {n} kernels"
    assert {k.category for k in tr} <= set(CATEGORIES)
    assert {k.phase for k in tr} == {"forward", "backward", "optimizer"} <= set(PHASES)


def test_gpt_layer_kernel_sequence_follows_llm_c() -> None:
    tr = build_trace("gpt2-small")
    fwd = [k.name for k in tr if k.layer == 3 and k.phase == "forward"]
    assert fwd == ["ln1", "qkv_gemm", "permute", "attn_scores_gemm", "softmax",
                   "attn_value_gemm", "unpermute", "attproj_gemm", "residual1", "ln2",
                   "fc_gemm", "gelu", "fcproj_gemm", "residual2"]
    bwd = [k.name for k in tr if k.layer == 3 and k.phase == "backward"]
    assert bwd[:3] == ["fcproj_gemm_dinp", "fcproj_gemm_dweight", "fcproj_bias_grad"]
    assert bwd[-2:] == ["ln1_backward", "residual1_grad_add"]
    assert sum(n.endswith("_bias_grad") for n in bwd) == 4
    names = tr.names()
    assert names[0] == "embedding_forward"
    assert names.index("logits_gemm") < names.index("fused_classifier") < names.index("zero_grad")
    assert names[-1] == "adamw" and tr[-1].phase == "optimizer"
    # layers run 0..L-1 forward and L-1..0 backward
    layers_bwd = [k.layer for k in tr if k.phase == "backward" and k.layer is not None]
    assert layers_bwd[0] == 11 and layers_bwd[-1] == 0


def test_bert_is_post_ln_with_mlm_head() -> None:
    tr = build_trace("bert-base")
    fwd = [k.name for k in tr if k.layer == 0 and k.phase == "forward"]
    assert fwd[0] == "qkv_gemm" and fwd[-1] == "ln2" and fwd[-2] == "residual2"
    names = tr.names()
    assert names[:2] == ["embedding_forward", "embedding_ln"]
    assert "mlm_decoder_gemm" in names and "logits_gemm" not in names


def test_gemm_flops_and_bytes_formula() -> None:
    c = PRESETS["gpt3-xl"]
    tr = build_trace(c)
    t, d, s = c.tokens, c.hidden, 2  # bf16
    qkv = next(k for k in tr if k.name == "qkv_gemm")
    assert qkv.flops == 2 * t * 3 * d * d + t * 3 * d  # 2MNK + bias epilogue
    assert qkv.bytes == (t * d + d * 3 * d + t * 3 * d + 3 * d) * s
    assert qkv.dtype == "bf16" and qkv.category == "gemm"
    dw = next(k for k in tr if k.name == "fc_gemm_dweight")
    assert dw.flops == 2 * 4 * d * d * t
    scores = next(k for k in tr if k.name == "attn_scores_gemm")
    assert scores.category == "attention"
    assert scores.flops == 2 * c.micro_batch * c.heads * c.seq * c.seq * (d // c.heads)
    gelu = next(k for k in tr if k.name == "gelu")
    assert gelu.bytes == 2 * t * 4 * d * s and gelu.dtype == "fp32"
    # fp32 doubles every activation byte
    qkv32 = next(k for k in build_trace(c, dtype="fp32") if k.name == "qkv_gemm")
    assert qkv32.bytes == 2 * qkv.bytes and qkv32.flops == qkv.flops


def test_intensity_separates_gemms_from_elementwise() -> None:
    tr = build_trace("gpt3-xl")
    by = {k.name: k.intensity for k in tr}
    assert by["fc_gemm"] > 300 and by["gelu"] < 5 and by["ln1"] < 10


def test_batch_and_seq_scale_work() -> None:
    a = build_trace("gpt2-small")
    b = build_trace("gpt2-small", batch=4)
    gemm_a = sum(k.flops for k in a if k.category == "gemm" and k.phase == "forward")
    gemm_b = sum(k.flops for k in b if k.category == "gemm" and k.phase == "forward")
    assert gemm_b == pytest.approx(4 * gemm_a, rel=1e-3)
    assert len(a) == len(b)
    # attention work is quadratic in S per sequence
    att = lambda tr: sum(k.flops for k in tr if k.category == "attention")  # noqa: E731
    assert att(build_trace("gpt2-small", seq=512, batch=2)) == pytest.approx(att(a) / 2)
    assert load_trace("GPT2-Small", batch=4).total_flops == b.total_flops


def test_recompute_adds_forward_work_in_backward() -> None:
    base = build_trace("gpt2-small")
    rc = build_trace("gpt2-small", recompute=True)
    fwd_layers = sum(k.flops for k in base if k.phase == "forward" and k.layer is not None)
    assert rc.total_flops == pytest.approx(base.total_flops + fwd_layers)
    again = [k for k in rc if k.meta.get("recompute")]
    assert len(again) == 14 * 12 and all(k.phase == "backward" for k in again)


def test_optimizer_touches_every_parameter() -> None:
    c = PRESETS["gpt3-xl"]
    tr = build_trace(c)
    adam = [k for k in tr if k.category == "optimizer"]
    assert sum(k.meta["params"] for k in adam) == c.params()
    assert c.params() == pytest.approx(1313.63e6, rel=1e-5)  # Merak's gpt3-xl parameter count
    assert PRESETS["bert-huge"].params() == pytest.approx(1276.40e6, rel=1e-5)  # Perseus bert-huge


def test_iterations_repeat_for_large_traces() -> None:
    one = build_trace("gpt3-xl")
    many = build_trace("gpt3-xl", iterations=5)
    assert len(many) == 5 * len(one)
    assert many.total_flops == pytest.approx(5 * one.total_flops)
    assert many[len(one)].meta["iteration"] == 1
    assert len(set(many.signature_groups())) == len(set(one.signature_groups()))


def test_trace_round_trips_through_json(tmp_path) -> None:
    tr = build_trace("bert-base", recompute=True)
    back = Trace.load(tr.save(tmp_path / "t.json.gz"))
    assert back.names() == tr.names() and back.total_bytes == tr.total_bytes
    assert back.meta["arch"] == "bert" and back.kernels[0].layer is None
    assert load_trace(tmp_path / "t.json.gz").total_flops == tr.total_flops


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"heads": 7}, "heads=7 does not divide hidden=768"),
    ({"batch": 0}, "micro_batch must be a positive integer"),
    ({"seq": -5}, "seq must be a positive integer"),
    ({"layers": 2.5}, "layers must be a positive integer"),
    ({"dtype": "int8"}, "dtype 'int8' is not supported"),
    ({"arch": "t5"}, "arch 't5' is not supported"),
    ({"colour": 3}, "unknown model field(s) colour"),
])
def test_impossible_shapes_give_clear_errors(kwargs: dict, needle: str) -> None:
    with pytest.raises(JouleboundError) as err:
        build_trace("gpt2-small", **kwargs)
    assert needle in str(err.value)


def test_unknown_preset_lists_choices(tmp_path) -> None:
    with pytest.raises(JouleboundError) as err:
        build_trace("gpt3-xxl")
    assert "Did you mean 'gpt3-xl'" in str(err.value) and "bert-huge" in str(err.value)
    with pytest.raises(JouleboundError, match="neither a model preset nor an existing"):
        load_trace("nope-model")
    build_trace("gpt2-small").save(tmp_path / "t.json")
    with pytest.raises(JouleboundError, match="apply only to model presets"):
        load_trace(tmp_path / "t.json", batch=2)
