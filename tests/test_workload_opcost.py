"""The one aten cost model (joulebound.workload.opcost) against torch's own FLOP counter.

``torch.utils.flop_counter.FlopCounterMode`` counts the matrix-multiply and attention FLOPs of the
ops it sees; the cost model must give the same count (plus the bias add it leaves out) whether the
shapes come from a runtime op stream (``OpStream`` keys -> ``trace_from_ops``) or from a
``torch.profiler`` trace (``record_shapes=True`` -> the Kineto importer): one model, two inputs.
"""

from __future__ import annotations

import math

import pytest

from joulebound.runtime.controller import trace_from_ops
from joulebound.runtime.opkeys import key_str, parse_key
from joulebound.workload.opcost import aten_cost, attention_flops, element_type, op_base

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _cases():
    """(label, fn) pairs: each fn runs real ops on CPU (forward, some with backward)."""
    g = torch.Generator().manual_seed(0)

    def r(*s, grad=False):
        return torch.randn(*s, generator=g).requires_grad_(grad)

    lin = torch.nn.Linear(24, 40)
    lin_nobias = torch.nn.Linear(24, 40, bias=False)
    return [
        ("mm", lambda: r(16, 24) @ r(24, 40)),
        ("addmm (linear, 2-D input)", lambda: lin(r(16, 24))),
        ("linear on 3-D input + backward", lambda: lin(r(3, 5, 24, grad=True)).sum().backward()),
        ("linear without bias + backward",
         lambda: lin_nobias(r(7, 24, grad=True)).sum().backward()),
        ("bmm", lambda: torch.bmm(r(6, 16, 24), r(6, 24, 8))),
        ("baddbmm", lambda: torch.baddbmm(r(6, 16, 8), r(6, 16, 24), r(6, 24, 8))),
        ("broadcast matmul", lambda: r(2, 3, 16, 24) @ r(24, 8)),
        ("math-path attention + backward (d_v != d)",
         lambda: F.scaled_dot_product_attention(r(2, 4, 16, 8, grad=True), r(2, 4, 24, 8),
                                                r(2, 4, 24, 12)).sum().backward()),
    ]


def _counted(fn) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as c:
        fn()
    return c.get_total_flops()


def _bias_adds(keys: list[str]) -> float:
    """FLOPs of the bias epilogues (FlopCounterMode does not count them): ``M·N`` per addmm."""
    out = 0.0
    for k in keys:
        op, inputs, _ = parse_key(k)
        if op_base(op) in ("addmm", "baddbmm"):
            a, b = inputs[1], inputs[2]
            out += math.prod(a[:-1]) * b[-1]
    return out


@pytest.mark.parametrize("label,fn", _cases(), ids=[c[0] for c in _cases()])
def test_op_stream_flops_match_flop_counter(label, fn) -> None:
    from joulebound.runtime.hooks import OpStream

    expected = _counted(fn)
    with OpStream(record=True) as ops:
        fn()
    keys = [ops.name(k) for k in ops.keys]
    tr = trace_from_ops(keys)
    mat = sum(k.flops for k in tr if k.category in ("gemm", "attention"))
    assert expected > 0
    assert mat - _bias_adds(keys) == expected, label


@pytest.mark.parametrize("label,fn", _cases(), ids=[c[0] for c in _cases()])
def test_profiler_trace_flops_match_flop_counter(label, fn, tmp_path) -> None:
    """The same ops recorded by torch.profiler and imported: FLOPs of the GEMM / attention ops
    equal FlopCounterMode's (plus the bias adds of addmm / linear-with-bias)."""
    import warnings

    from torch.profiler import ProfilerActivity, profile

    from joulebound.workload import load_trace

    expected = _counted(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            fn()
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    tr = load_trace(path)
    mat = [k for k in tr if k.category in ("gemm", "attention")]
    bias = 0.0
    for k in mat:
        op, dims = k.name.rsplit("::", 1)[-1], k.meta.get("input_dims") or []
        if op in ("addmm", "baddbmm"):
            bias += math.prod(dims[1][:-1]) * dims[2][-1]
        elif op == "linear" and len(dims) > 2 and dims[2]:
            bias += math.prod(dims[0][:-1]) * dims[1][0]
    assert sum(k.flops for k in mat) - bias == expected, label


@pytest.mark.parametrize("op,shapes", [
    ("_scaled_dot_product_flash_attention", [(2, 4, 16, 8), (2, 4, 24, 8), (2, 4, 24, 8)]),
    ("_scaled_dot_product_efficient_attention", [(2, 8, 16, 8), (2, 2, 24, 8), (2, 2, 24, 12)]),
    ("_scaled_dot_product_flash_attention_backward",
     [(2, 4, 16, 8), (2, 4, 16, 8), (2, 4, 24, 8), (2, 4, 24, 8), (2, 4, 16, 8), (2, 4, 16)]),
    ("_scaled_dot_product_efficient_attention_backward",
     [(2, 4, 16, 12), (2, 4, 16, 8), (2, 4, 24, 8), (2, 4, 24, 12), (2, 4, 16, 12)]),
])
def test_fused_attention_matches_flop_counter_formulas(op, shapes) -> None:
    """The fused attention ops run only on GPUs; their FLOPs are FlopCounterMode's registered
    formulas for those ops (including grouped-query heads, S_q != S_k, D_v != D)."""
    from torch.utils.flop_counter import flop_registry

    formula = flop_registry[getattr(torch.ops.aten, op)]
    n_in = 4 if "backward" in op else 3
    expected = formula(*(torch.empty(s, device="meta") for s in shapes[:n_in]))
    cost = aten_cost(f"aten::{op}", shapes, "bf16", 2)
    assert cost is not None and cost.flops == expected


def test_flash_kernel_entry_points_use_their_own_layout() -> None:
    """``_flash_attention_forward`` (the op a GPU trace ties the flash kernel to) takes
    [B, S, H, D]; costed as [B, H, S, D] it would count B·S·H²·D instead of B·H·S²·D."""
    b, h, s, d = 2, 16, 1024, 64
    bhsd = aten_cost("aten::_scaled_dot_product_flash_attention", [(b, h, s, d)] * 3)
    bshd = aten_cost("aten::_flash_attention_forward", [(b, s, h, d)] * 3)
    assert bshd.flops == bhsd.flops == attention_flops((b, h, s, d), (b, h, s, d), (b, h, s, d))
    bwd = aten_cost("aten::_flash_attention_backward", [(b, s, h, d)] * 5)
    assert bwd.flops == 2.5 * bhsd.flops


def test_both_inputs_give_the_same_cost_for_a_training_step(tmp_path) -> None:
    """A real training step of the demo GPT recorded both ways: the runtime's op stream and a
    profiler trace give the same GEMM and attention FLOPs and the same GEMM bytes (one model)."""
    import warnings

    from torch.profiler import ProfilerActivity, profile

    from joulebound.runtime.hooks import OpStream
    from joulebound.testing.demo_gpt import TinyGPTConfig, make_step
    from joulebound.workload import load_trace

    train, _ = make_step(TinyGPTConfig(dropout=0.0))
    train()
    with OpStream(record=True) as ops:
        train()
    rt = trace_from_ops([ops.name(k) for k in ops.keys])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            train()
    path = tmp_path / "step.json"
    prof.export_chrome_trace(str(path))
    kt = load_trace(path)
    for cat in ("gemm", "attention"):
        a = sum(k.flops for k in rt if k.category == cat)
        b = sum(k.flops for k in kt if k.category == cat)
        assert a > 0 and a == b, cat
    assert sum(k.bytes for k in rt if k.category == "gemm") == \
        sum(k.bytes for k in kt if k.category == "gemm")


def test_gemm_bytes_are_operands_plus_output() -> None:
    """``mm`` reads A and B and writes C once: (MK + KN + MN)·size — the runtime used to count
    (MK + KN + max)·size, the importer counted a 3-D ``linear`` input once per batch row."""
    m, k, n = 128, 64, 256
    rt = trace_from_ops([f"aten.mm.default[{m}x{k},{k}x{n}]bfloat16"])[0]
    assert rt.bytes == (m * k + k * n + m * n) * 2
    lin = aten_cost("aten::linear", [(4, 32, 64), (192, 64), (192,)], "fp32", 4)
    assert lin.bytes == (128 * 64 + 64 * 192 + 128 * 192 + 192) * 4
    assert lin.flops == 2 * 128 * 192 * 64 + 128 * 192


def test_keys_round_trip_and_elementwise_rules() -> None:
    key = ("aten.cat.default", (((2, 3), (2, 3)),), "float32")
    assert parse_key(key_str(key)) == ("aten.cat.default", [[(2, 3), (2, 3)]], "float32")
    assert parse_key("aten.nll_loss_backward.default[scalar,128x256,128,scalar]float32")[1] == \
        [(), (128, 256), (128,), ()]
    gelu = aten_cost("aten.gelu.default", [(4, 32, 256)])
    assert gelu.flops == 8 * 4 * 32 * 256 and gelu.bytes == 2 * 4 * 32 * 256 * 4
    emb = aten_cost("aten.embedding.default", [(50_000, 64), (4, 32)], "fp32", 4)
    assert emb.bytes == 128 * 8 + 2 * 128 * 64 * 4  # rows looked up, not the whole table
    assert aten_cost("aten.convolution.default", [(1, 3, 8, 8), (4, 3, 3, 3)]) is None
    assert element_type(["long int"]) == ("fp32", 8)
    assert element_type(["Scalar", "c10::BFloat16"]) == ("bf16", 2)
