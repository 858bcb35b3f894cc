"""Import of torch.profiler / Kineto Chrome traces: a recorded CPU step and a GPU fixture."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from joulebound.core.errors import JouleboundError, SchemaError
from joulebound.workload import load_trace
from joulebound.workload.kineto import categorize, load_chrome_trace, op_cost

FIXTURE = Path(__file__).parent / "fixtures" / "kineto_gpu_step.json"


# -- a step recorded by the test itself -----------------------------------------------------------
@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), foreach=False)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    path = tmp_path_factory.mktemp("prof") / "cpu_step.json"
    warnings.filterwarnings("ignore", message="Profiler clears events")
    # the usual recipe: a schedule, ProfilerStep#N markers, export when the cycle is ready
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=torch.profiler.schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(3):
            step()
            prof.step()
    return path


def test_several_iterations_without_profiler_steps_keep_every_forward(tmp_path) -> None:
    """A plain ``with profile():`` around 3 iterations (no ProfilerStep#N markers): every
    iteration's forward ops are ``forward``, not only the first one's."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), foreach=False)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    path = tmp_path / "three.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # after backward: other
            opt.step()
    prof.export_chrome_trace(str(path))
    tr = load_chrome_trace(path)
    assert tr.meta["steps"] == 0
    fwd_gemm = [k for k in tr if k.phase == "forward" and k.category == "gemm"]
    assert len(fwd_gemm) == 3 * 2                    # 2 Linear layers x 3 iterations
    assert not any(k.category == "gemm" for k in tr if k.phase == "other")
    assert tr.count_by("phase").get("other", 0) > 0  # the clipping ops stay "other"


def test_recorded_cpu_step_imports_with_phases_and_gemm_flops(recorded: Path) -> None:
    tr = load_trace(recorded)
    assert tr.meta["source"] == "kineto" and tr.meta["kind"] == "cpu"
    phases = tr.count_by("phase")
    assert phases["forward"] > 0 and phases["backward"] > 0 and phases["optimizer"] > 0
    # first forward linear: x[8,16]·W[32,16]ᵀ + b -> 2·8·32·16 + 8·32 FLOP
    lin = [k for k in tr if k.phase == "forward" and k.category == "gemm"]
    assert lin, tr.names()
    first = next(k for k in lin if k.meta["input_dims"][1] == [32, 16])
    assert first.flops == 2 * 8 * 32 * 16 + 8 * 32
    assert first.bytes == (8 * 16 + 32 * 16 + 8 * 32 + 32) * 4
    # backward has the weight-gradient / input-gradient GEMMs of both layers
    bwd_mm = [k for k in tr if k.phase == "backward" and k.category == "gemm"]
    assert len(bwd_mm) >= 3 * 2  # >= 3 per step (dW1, dW2, dX2; dX1 is not needed) x 2 steps
    assert {(8 * 4 * 32 * 2.0)} <= {k.flops for k in bwd_mm}  # dX2 = dY[8,4]·W2[4,32]
    cats = tr.count_by("category")
    assert cats["norm"] >= 2 and cats["softmax"] >= 2 and cats["optimizer"] > 0
    assert all(k.category == "optimizer" for k in tr if k.phase == "optimizer"
               and k.category not in ("gemm", "communication"))
    # no view / allocation / autograd-node events are counted as kernels
    names = set(tr.names())
    assert not names & {"aten::t", "aten::view", "aten::empty", "aten::as_strided",
                        "AddmmBackward0", "aten::detach"}
    assert not any(n.startswith("autograd::") for n in names)
    assert all(k.duration_s is not None and k.duration_s >= 0 for k in tr)
    assert tr.meta["steps"] == 2


# -- the hand-made GPU fixture -------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpu_trace():
    return load_chrome_trace(FIXTURE)


def test_gpu_fixture_kernels_categories_and_phases(gpu_trace) -> None:
    tr = gpu_trace
    doc = json.loads(FIXTURE.read_text())
    n_gpu = sum(1 for e in doc["traceEvents"]
                if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert len(tr) == n_gpu == 15  # the gpu_user_annotation event is not a kernel
    assert tr.meta["kind"] == "gpu" and tr.meta["devices"] == ["NVIDIA GeForce RTX 3080 Ti"]
    by_cat = tr.count_by("category")
    assert by_cat == {"gemm": 4, "attention": 3, "elementwise": 1, "norm": 1, "softmax": 1,
                      "reduction": 1, "communication": 1, "optimizer": 1, "memcpy": 2}
    assert [k.phase for k in tr] == ["forward"] * 6 + ["backward"] * 7 + ["optimizer"] * 2
    # kernels are in GPU start order, durations in seconds
    assert tr[1].name.startswith("ampere_bf16_s16816gemm") and tr[1].duration_s == \
        pytest.approx(21.5e-6)
    assert tr[-3].meta["stream"] == 20 and tr[-3].category == "communication"
    assert tr[-3].meta["op"] == "record_param_comms"
    assert tr[-3].meta["comm"]["Collective name"] == "allreduce"
    assert tr[-3].meta["comm"]["Group size"] == 2


def test_gpu_fixture_launching_ops_and_shapes(gpu_trace) -> None:
    tr = gpu_trace
    ops = [k.meta.get("op") for k in tr]
    # runtime-launch link, flow-only link (layer norm) and External-id-only link (softmax)
    assert ops[1] == "aten::addmm"
    assert ops[4] == "aten::native_layer_norm"
    assert ops[5] == "aten::_log_softmax"
    addmm = tr[1]
    assert addmm.meta["input_dims"][1] == [256, 256]
    assert addmm.flops == 2 * 256 * 768 * 256 + 256 * 768
    assert addmm.bytes == (256 * 256 + 256 * 768 + 256 * 768 + 768) * 2
    assert addmm.dtype == "bf16"
    # one op, two kernels: the cost goes to the longer GEMM, the split-K reduce shares it
    split = next(k for k in tr if "splitKreduce" in k.name)
    assert split.flops == 0 and split.meta["cost"] == "shared" and split.category == "gemm"
    flash_bwd = [k for k in tr if "flash_bwd" in k.name]
    assert sum(k.flops for k in flash_bwd) == pytest.approx(2.5 * 4 * 8 * 128 * 128 * 64)
    memcpy = tr[0]
    assert memcpy.category == "memcpy" and memcpy.bytes == 2048 and memcpy.meta["cost"] == "bytes"
    adam = next(k for k in tr if k.category == "optimizer")
    assert adam.flops == 12 * (768 * 256 + 768)


def test_gpu_fixture_round_trips_as_joulebound_trace(gpu_trace, tmp_path) -> None:
    back = load_trace(gpu_trace.save(tmp_path / "imported.json"))
    assert back.names() == gpu_trace.names()
    assert list(back.durations()) == pytest.approx(list(gpu_trace.durations()))


# -- rules ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "category"), [
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "gemm"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>",
     "gemm"),
    ("aten::addmm", "gemm"), ("aten::mm", "gemm"), ("aten::bmm", "gemm"),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", "attention"),
    ("void pytorch_flash::flash_fwd_kernel<...>", "attention"),
    ("aten::_scaled_dot_product_efficient_attention", "attention"),
    ("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, float, 10>", "softmax"),
    ("aten::_log_softmax", "softmax"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>", "norm"),
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>", "norm"),
    ("void apex::RMSNormKernel", "norm"),
    ("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
    ("gloo:all_reduce", "communication"),
    ("Memcpy DtoD (Device -> Device)", "memcpy"), ("Memset (Device)", "memcpy"),
    ("void at::native::reduce_kernel<512, 1, ReduceOp<float, sum>>", "reduction"),
    ("aten::sum", "reduction"),
    ("void at::native::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>",
     "embedding"),
    # a lambda in a GELU kernel name is not the LAMB optimizer
    ("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl::{lambda(float)#1}>",
     "elementwise"),
    ("aten::gelu", "elementwise"),
    # torch.compile / Inductor kernels
    ("triton_poi_fused_add_gelu_0", "elementwise"),
    ("triton_red_fused_sum_3", "reduction"),
    ("triton_per_fused_native_layer_norm_1", "norm"),
    ("triton_per_fused__softmax_2", "softmax"),
    ("triton_tem_fused_mm_4", "gemm"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3", "attention"),
    # "mm" inside another word is not a GEMM
    ("ncclDevKernel_Broadcast_RING_LL", "communication"), ("aten::comm_op", "elementwise"),
])
def test_category_rules(name: str, category: str) -> None:
    assert categorize(name) == category


def test_optimizer_phase_turns_elementwise_into_optimizer() -> None:
    assert categorize("aten::mul_", "optimizer") == "optimizer"
    assert categorize("aten::mm", "optimizer") == "gemm"
    assert categorize("aten::mul_", "forward") == "elementwise"


def test_op_cost_shapes() -> None:
    assert op_cost("aten::mm", [[4, 8], [8, 16]], ["float", "float"]) == \
        (2 * 4 * 16 * 8, (32 + 128 + 64) * 4, "fp32")
    f, b, dt = op_cost("aten::bmm", [[3, 4, 8], [3, 8, 16]], ["c10::BFloat16"] * 2)
    assert f == 3 * 2 * 4 * 16 * 8 and dt == "bf16" and b == 3 * (32 + 128 + 64) * 2
    f, _, _ = op_cost("aten::linear", [[2, 5, 8], [16, 8], [16]], ["float"] * 3)
    assert f == 2 * 10 * 16 * 8 + 10 * 16
    f, _, _ = op_cost("aten::matmul", [[2, 4, 5, 8], [2, 4, 8, 5]], ["float"] * 2)
    assert f == 2 * 8 * 5 * 5 * 8
    assert op_cost("aten::mm", [[], []], ["float"]) is None
    assert op_cost("aten::gelu", [[10, 10], []], ["float", ""])[0] == 800


def test_not_a_chrome_trace_names_the_file(tmp_path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(JouleboundError, match="x.json") as err:
        load_trace(bad)
    assert "traceEvents" in str(err.value)
    with pytest.raises(SchemaError, match="traceEvents"):
        load_chrome_trace(bad)
    empty = tmp_path / "empty.json"
    empty.write_text('{"traceEvents": []}')
    with pytest.raises(JouleboundError, match="no GPU kernels and no CPU ops"):
        load_trace(empty)
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [')
    with pytest.raises(SchemaError, match="broken.json.*not valid JSON"):
        load_trace(broken)
