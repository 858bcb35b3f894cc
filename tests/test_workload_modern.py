"""Modern decoders (Llama / Mistral / Qwen2: GQA, SwiGLU, RMSNorm, RoPE, untied head) and LoRA
fine-tuning in the one training config, the analytic traces, the memory model and the job
predictor; Hugging Face ``config.json`` input and its errors.

The analytic traces are checked as the GPT-2 / BERT ones are (tests/test_workload_flopcounter.py):
a real forward + backward of the transformers model, built from a config on CPU at tiny sizes,
under ``torch.utils.flop_counter.FlopCounterMode`` counts exactly the trace's GEMM + attention
FLOPs (bias epilogues excluded), and the parameter count equals ``sum(p.numel())``.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from joulebound.core.errors import JouleboundError
from joulebound.workload.analytic import PRESETS, build_table, build_trace
from joulebound.workload.config import (
    TrainingConfig,
    config_from_hf,
    load_hf_config,
    parse_lora_targets,
)
from joulebound.workload.memory import training_memory

L, D, H, KV, FF, S, V, B, R = 2, 128, 4, 2, 352, 64, 1000, 2, 8


@pytest.fixture(scope="module")
def hf():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    transformers.logging.set_verbosity_error()
    return transformers, torch


def matmul_flops(tr) -> int:
    """GEMM + attention FLOPs of a trace without the bias epilogues (what FlopCounterMode counts)."""
    total = 0
    for k in tr:
        if k.category in ("gemm", "attention"):
            b, m, n, kk = k.meta["shape"]
            assert k.flops == 2 * b * m * n * kk + (b * m * n if k.meta["bias"] else 0), k.name
            total += 2 * b * m * n * kk
    return total


def counted_flops(torch, model, ids) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        model(ids, labels=ids).loss.backward()
    return counter.get_total_flops()


def tiny(transformers, kind: str, **kw):
    """A tiny Llama / Qwen2 / Mistral config and its causal-LM class (eager attention)."""
    cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
           "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
           "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM)}[kind]
    cfg = cls[0](num_hidden_layers=L, hidden_size=D, num_attention_heads=H, num_key_value_heads=KV,
                 intermediate_size=FF, vocab_size=V, max_position_embeddings=S,
                 attn_implementation="eager", **kw)
    return cfg, cls[1]


# -- the analytic trace against PyTorch's FLOP counter ---------------------------------------
@pytest.mark.parametrize("kind,kw", [("llama", {}), ("qwen2", {"tie_word_embeddings": False}),
                                     ("qwen2", {"tie_word_embeddings": True}), ("mistral", {})])
def test_modern_decoders_match_torch_flop_counter_and_parameter_count(hf, kind, kw) -> None:
    transformers, torch = hf
    torch.manual_seed(0)
    cfg, cls = tiny(transformers, kind, **kw)
    model = cls(cfg)
    ours = config_from_hf(cfg, micro_batch=B, dtype="fp32")
    assert (ours.kv_heads, ours.mlp, ours.norm, ours.rope) == (KV, "swiglu", "rmsnorm", True)
    assert ours.bias == ("qkv" if kind == "qwen2" else "none")
    assert ours.tied is bool(kw.get("tie_word_embeddings", False))
    ids = torch.randint(0, V, (B, S))
    assert matmul_flops(build_trace(ours)) == counted_flops(torch, model, ids)
    assert ours.params() == sum(p.numel() for p in model.parameters())


def test_multi_head_llama_matches_too(hf) -> None:
    """kv_heads = heads: no repeat_kv kernels, the same FLOPs as the counter."""
    transformers, torch = hf
    cfg, cls = tiny(transformers, "llama")
    cfg.num_key_value_heads = H
    model = cls(cfg)
    ours = config_from_hf(cfg, micro_batch=B, dtype="fp32")
    tr = build_trace(ours)
    assert "repeat_kv" not in tr.names()
    assert matmul_flops(tr) == counted_flops(torch, model, torch.randint(0, V, (B, S)))
    assert ours.params() == sum(p.numel() for p in model.parameters())


# -- LoRA ------------------------------------------------------------------------------------
def add_lora(torch, model, targets: list[str], r: int) -> None:
    """PEFT's LoRA by its definition (``y = W·x + B(A(x))·α/r``, no dropout, frozen base), for
    when peft is not installed: every parameter frozen, adapters on the target linears."""
    nn = torch.nn

    class LoraLinear(nn.Module):
        def __init__(self, base: nn.Linear) -> None:
            super().__init__()
            self.base = base
            self.lora_A = nn.Linear(base.in_features, r, bias=False)
            self.lora_B = nn.Linear(r, base.out_features, bias=False)
            self.scaling = 2.0

        def forward(self, x):
            return self.base(x) + self.lora_B(self.lora_A(x)) * self.scaling

    for p in model.parameters():
        p.requires_grad_(False)
    for mod in list(model.modules()):
        for t in targets:
            child = getattr(mod, f"{t}_proj", None)
            if isinstance(child, nn.Linear):
                setattr(mod, f"{t}_proj", LoraLinear(child))


TARGET_SETS = [["q", "v"], ["o"], ["k"], ["up", "down"], ["gate"],
               ["q", "k", "v", "o", "gate", "up", "down"]]


@pytest.mark.parametrize("targets", TARGET_SETS, ids=lambda t: ",".join(t))
def test_lora_step_matches_torch_flop_counter_and_trainable_count(hf, targets) -> None:
    """Frozen base: no weight-gradient GEMMs; the first block, whose input comes from the frozen
    embedding, computes input gradients only downstream of an adapter."""
    transformers, torch = hf
    torch.manual_seed(0)
    cfg, cls = tiny(transformers, "llama")
    model = cls(cfg)
    add_lora(torch, model, targets, R)
    ours = replace(config_from_hf(cfg, micro_batch=B, dtype="fp32"), lora_rank=R,
                   lora_targets=",".join(targets)).validate()
    tr = build_trace(ours)
    assert matmul_flops(tr) == counted_flops(torch, model, torch.randint(0, V, (B, S)))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert ours.trainable_params() == trainable == tr.meta["trainable_params"]
    assert ours.params() == sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    assert not any(k.name.endswith("_dweight") and not k.name.startswith("lora_") for k in tr)
    assert sum(k.meta.get("params", 0) for k in tr if k.name == "adamw") == trainable


def test_lora_trainable_count_equals_peft(hf) -> None:
    transformers, torch = hf
    peft = pytest.importorskip("peft")
    cfg, cls = tiny(transformers, "qwen2", tie_word_embeddings=False)
    for targets in (["q_proj", "v_proj"], ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                           "up_proj", "down_proj"]):
        model = peft.get_peft_model(cls(cfg), peft.LoraConfig(r=R, target_modules=targets,
                                                               lora_dropout=0.0))
        ours = replace(config_from_hf(cfg, micro_batch=B, dtype="fp32"), lora_rank=R,
                       lora_targets=targets)
        assert ours.trainable_params() == sum(p.numel() for p in model.parameters()
                                              if p.requires_grad)
        assert matmul_flops(build_trace(ours)) == counted_flops(torch, model,
                                                                torch.randint(0, V, (B, S)))


def test_lora_removes_the_weight_gradient_share() -> None:
    """Per block (past the first) a LoRA step runs the full step's GEMMs minus its weight-gradient
    GEMMs, plus the adapters'; over a 7 B model the step is ~2/3 of full fine-tuning's FLOPs."""
    full = build_trace("llama2-7b")
    lora = build_trace("llama2-7b", lora_rank=16)

    def gemms(tr, layer, keep):
        return sum(k.flops for k in tr if k.layer == layer and k.category in ("gemm", "attention")
                   and keep(k.name))

    layer = 5
    dweight = gemms(full, layer, lambda n: n.endswith(("_dweight",)))
    base = gemms(lora, layer, lambda n: not n.startswith("lora_"))
    assert base == gemms(full, layer, lambda n: True) - dweight
    adapters = gemms(lora, layer, lambda n: n.startswith("lora_"))
    assert 0 < adapters < 0.01 * base
    wg_share = sum(k.flops for k in full if k.name.endswith("_dweight")) / full.total_flops
    saved = 1 - lora.total_flops / full.total_flops
    # under a third (forward, input gradients, weight gradients: the attention products have
    # no weights and at S = 4096 are a seventh of the step)
    assert 0.25 < wg_share < 0.34
    assert saved == pytest.approx(wg_share, abs=0.01)  # + optimizer, − adapters, − first block


def test_lora_memory_holds_the_base_but_trains_the_adapters() -> None:
    c = PRESETS["llama2-7b"]
    full, lora = training_memory(c), training_memory(replace(c, lora_rank=16))
    n_train = replace(c, lora_rank=16).trainable_params()
    assert n_train == 32 * 16 * (4096 + 4096) * 2  # q and v: r·(d_in + d_out) each
    assert lora.weights == pytest.approx((c.params() + n_train) * 2)
    assert lora.gradients == pytest.approx(n_train * 2)
    assert lora.optimizer == pytest.approx(n_train * 12)  # two fp32 moments + fp32 master
    assert full.optimizer == pytest.approx(c.params() * 12)
    assert lora.activations > full.activations  # the adapters' T·r intermediates
    assert lora.total < 0.5 * full.total


def test_gqa_stores_smaller_keys_and_values() -> None:
    c = PRESETS["llama3-8b"]  # 8 key/value heads of 32
    mha = replace(c, kv_heads=c.heads)
    gap = training_memory(mha).activations - training_memory(c).activations
    t, d, dkv = c.seq * c.micro_batch, c.hidden, c.kv_dim
    assert dkv == 1024
    assert gap == pytest.approx(c.layers * 2 * t * (d - dkv) * 2)
    # and the GPT-2 / BERT formula is untouched
    g = PRESETS["gpt2-small"]
    t, d, h = g.seq, g.hidden, g.heads
    assert training_memory(g).activations == pytest.approx(
        g.layers * t * d * (34 + 5 * h * t / d) + t * g.vocab * 4)


# -- presets --------------------------------------------------------------------------------
#: published parameter counts (the models' Hugging Face checkpoints)
PUBLISHED = {"llama2-7b": 6_738_415_616, "llama2-13b": 13_015_864_320,
             "llama2-70b": 68_976_648_192, "llama3-8b": 8_030_261_248,
             "llama3-70b": 70_553_706_496, "mistral-7b": 7_241_732_096,
             "qwen2-0.5b": 494_032_768, "qwen2-7b": 7_615_616_512,
             "tinyllama-1.1b": 1_100_048_384}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_modern_presets_have_the_published_parameter_counts(name) -> None:
    cfg = PRESETS[name]
    assert cfg.modern and cfg.params() == PUBLISHED[name]
    assert build_trace(name).meta["params"] == PUBLISHED[name]


@pytest.mark.parametrize("name", ["qwen2-0.5b", "llama3-8b", "mistral-7b"])
def test_modern_presets_equal_the_transformers_models(hf, name) -> None:
    """The preset's shape built as the transformers model (on the meta device: no memory)."""
    transformers, torch = hf
    c = PRESETS[name]
    kind = name.split("-")[0].rstrip("0123456789") if not name.startswith("qwen") else "qwen2"
    kind = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2"}[kind]
    cfg_cls, model_cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                          "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
                          "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}[kind]
    hf_cfg = cfg_cls(hidden_size=c.hidden, intermediate_size=c.ff, num_attention_heads=c.heads,
                     num_key_value_heads=c.kv, num_hidden_layers=c.layers, vocab_size=c.vocab,
                     max_position_embeddings=c.max_positions, tie_word_embeddings=c.tied)
    with torch.device("meta"):
        model = model_cls(hf_cfg)
    assert c.params() == sum(p.numel() for p in model.parameters())
    back = config_from_hf(hf_cfg, micro_batch=1, name=name)
    assert replace(back, seq=c.seq) == c


def test_build_table_gives_the_trace_of_each_modern_shape() -> None:
    """The job predictor's vectorized op table equals build_trace kernel for kernel."""
    comp = (("kv_heads", 4), ("mlp", "swiglu"), ("norm", "rmsnorm"), ("rope", True),
            ("tied", False), ("bias", "qkv"), ("lora_rank", 8), ("lora_targets", ("q", "v", "down")))
    shapes = [(512, 8, 1536, 1000, 128, 2), (1024, 16, 2816, 3200, 256, 1)]
    a = np.array(shapes, float)
    tpl, flops, nbytes, n_params = build_table("gpt", 1, "bf16", False, hidden=a[:, 0],
                                               heads=a[:, 1], ff=a[:, 2], vocab=a[:, 3],
                                               seq=a[:, 4], batch=a[:, 5], components=comp)
    for j, (d, h, ff, v, s, b) in enumerate(shapes):
        cfg = TrainingConfig("gpt", 1, d, h, ff, v, s, micro_batch=b, dtype="bf16", **dict(comp))
        tr = build_trace(cfg)
        assert [k.name for k in tr] == [k.name for k in tpl]
        assert [k.flops for k in tr] == flops[:, j].tolist()
        assert [k.bytes for k in tr] == nbytes[:, j].tolist()
        assert n_params[j] == cfg.params()


def test_trace_meta_round_trips_and_old_files_load() -> None:
    cfg = replace(PRESETS["qwen2-0.5b"], lora_rank=4, lora_targets=("q", "k", "v"))
    tr = build_trace(cfg)
    assert TrainingConfig.from_trace_meta(json.loads(json.dumps(tr.meta))) == cfg
    assert tr.meta["kv_heads"] == 2 and tr.meta["lora_targets"] == ["q", "k", "v"]
    old = build_trace("gpt2-small").meta  # no component keys: the GPT-2 layout
    assert not {"kv_heads", "mlp", "lora_rank"} & set(old)
    assert TrainingConfig.from_trace_meta(old) == PRESETS["gpt2-small"]


# -- Hugging Face config.json ---------------------------------------------------------------
QWEN = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
        "num_attention_heads": 14, "num_key_value_heads": 2, "num_hidden_layers": 24,
        "vocab_size": 151936, "max_position_embeddings": 32768, "tie_word_embeddings": True,
        "hidden_act": "silu", "_name_or_path": "Qwen/Qwen2-0.5B"}


def write(tmp_path, doc, name="config.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return p


def test_load_hf_config_reads_a_file_or_its_folder(tmp_path) -> None:
    p = write(tmp_path, QWEN)
    cfg = load_hf_config(p)
    assert cfg.params() == PUBLISHED["qwen2-0.5b"]
    assert (cfg.name, cfg.seq, cfg.micro_batch, cfg.dtype) == ("Qwen/Qwen2-0.5B", 4096, 1, "bf16")
    assert load_hf_config(tmp_path, seq=1024).seq == 1024
    gpt2 = load_hf_config(write(tmp_path, {"model_type": "gpt2", "n_embd": 768, "n_layer": 12,
                                           "n_head": 12, "n_positions": 1024,
                                           "vocab_size": 50257}, "g.json"))
    assert gpt2.params() == PRESETS["gpt2-small"].params() and not gpt2.modern


@pytest.mark.parametrize("change,match", [
    ({"num_key_value_heads": None, "hidden_size": None}, "key 'hidden_size' is missing"),
    ({"intermediate_size": "big"}, "key 'intermediate_size' must be a positive integer"),
    ({"num_hidden_layers": 0}, "key 'num_hidden_layers' must be a positive integer"),
    ({"num_key_value_heads": 4}, "kv_heads=4 does not divide heads=14"),
    ({"model_type": "mixtral"}, r"model_type 'mixtral' is not modeled.*'llama', 'mistral', 'qwen2'"),
    ({"hidden_act": "gelu"}, "key 'hidden_act' is 'gelu'"),
    ({"head_dim": 128}, "key 'head_dim' = 128 differs"),
    ({"tie_word_embeddings": "yes"}, "key 'tie_word_embeddings' must be true or false"),
])
def test_hf_config_errors_name_the_key(tmp_path, change, match) -> None:
    doc = {k: v for k, v in {**QWEN, **change}.items() if v is not None}
    p = write(tmp_path, doc)
    with pytest.raises(JouleboundError, match=match) as exc:
        load_hf_config(p)
    assert str(p) in str(exc.value)


def test_hf_config_file_errors(tmp_path) -> None:
    with pytest.raises(JouleboundError, match="no such file"):
        load_hf_config(tmp_path / "nope.json")
    with pytest.raises(JouleboundError, match="not a JSON file"):
        load_hf_config(write(tmp_path, "{not json"))
    with pytest.raises(JouleboundError, match="key 'model_type' is missing"):
        load_hf_config(write(tmp_path, {"hidden_size": 8}))
    with pytest.raises(JouleboundError, match="JSON object"):
        load_hf_config(write(tmp_path, [1, 2]))
    llama = {**QWEN, "model_type": "llama", "attention_bias": True}
    with pytest.raises(JouleboundError, match="'attention_bias' = True and 'mlp_bias' = False"):
        load_hf_config(write(tmp_path, llama))


def test_component_and_lora_errors() -> None:
    with pytest.raises(JouleboundError, match="unknown LoRA target 'qq'.*Did you mean 'q'"):
        parse_lora_targets("q,qq")
    assert parse_lora_targets("v_proj;q") == ("q", "v")
    assert parse_lora_targets("all", "gelu") == ("q", "k", "v", "o", "up", "down")
    with pytest.raises(JouleboundError, match="target 'gate' needs a gated MLP"):
        build_trace("gpt2-small", lora_rank=4, lora_targets="gate")
    with pytest.raises(JouleboundError, match="mlp 'geglu' is not supported"):
        build_trace("llama2-7b", mlp="geglu")
    with pytest.raises(JouleboundError, match="BERT encoder is modeled with its own layout"):
        build_trace("bert-base", norm="rmsnorm")
    with pytest.raises(JouleboundError, match="lora_rank must be an integer >= 0"):
        build_trace("llama2-7b", lora_rank=-1)


def test_gpt2_with_lora_keeps_the_llm_c_layout() -> None:
    tr = build_trace("gpt2-small", lora_rank=8, lora_targets="q,v")
    assert "qkv_gemm" in tr.names() and "lora_q_a_gemm" in tr.names()
    assert "embedding_backward" not in tr.names()
    assert tr.meta["trainable_params"] == 12 * 8 * (768 + 768) * 2


# -- the job predictor and the CLI ---------------------------------------------------------
def test_jobs_carry_the_modern_shape_and_lora(tmp_path) -> None:
    from joulebound.jobs.job import job_from_options, memory, resolve
    from joulebound.jobs.mechanistic import work_keys

    r = resolve(job_from_options(preset="llama3-8b", device="h100-sxm", dtype="bf16"))
    assert r.params == PUBLISHED["llama3-8b"] and r.config.kv_heads == 8
    assert dict(work_keys(r).components)["mlp"] == "swiglu"
    lora = resolve(job_from_options(preset="llama3-8b", device="h100-sxm", dtype="bf16",
                                    lora_rank=16, lora_targets="all"))
    m_full, m_lora = memory(r, 80 * 2**30), memory(lora, 80 * 2**30)
    assert m_lora.gradients == pytest.approx(lora.config.trainable_params() * 2)
    assert m_lora.optimizer < 0.01 * m_full.optimizer
    job = job_from_options(hf_config=str(write(tmp_path, QWEN)), batch=2)
    assert resolve(job).params == PUBLISHED["qwen2-0.5b"] and job.batch == 2
    assert job.to_json()["kv_heads"] == 2
    with pytest.raises(JouleboundError, match="tp=4 must divide the 2 key/value heads"):
        resolve(job_from_options(hf_config=str(tmp_path / "config.json"), gpus=4, strategy="tp",
                                 heads=16, hidden=1024))
    with pytest.raises(JouleboundError, match="give --preset or --hf-config, not both"):
        job_from_options(preset="gpt2-small", hf_config=str(tmp_path / "config.json"))


def test_ddp_all_reduces_only_the_adapters_gradients() -> None:
    from joulebound.jobs.mechanistic import predict_steps

    job = dict(preset="llama2-7b", device="h100-sxm", dtype="bf16", gpus=4, strategy="ddp")
    from joulebound.jobs.job import job_from_options

    (_, full, _, _), (r, lora, _, _) = predict_steps([job_from_options(**job),
                                                      job_from_options(**job, lora_rank=16)])
    assert full.comm_detail["dp_grad_bytes"] == pytest.approx(PUBLISHED["llama2-7b"] * 4)
    assert lora.comm_detail["dp_grad_bytes"] == pytest.approx(r.config.trainable_params() * 4)
    assert lora.comm_s < full.comm_s


def test_cli_predict_and_trace_take_hf_config_and_lora(tmp_path, capsys) -> None:
    from joulebound.cli import main

    p = write(tmp_path, QWEN)
    assert main(["predict", "--hf-config", str(p), "--device", "h100-sxm", "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert main(["predict", "--hf-config", str(p), "--device", "h100-sxm", "--lora-rank", "8",
                 "--json"]) == 0
    lora = json.loads(capsys.readouterr().out)
    assert lora["time_s"] < full["time_s"] and lora["gpu_energy_j"] < full["gpu_energy_j"]
    assert lora["memory"]["optimizer"] < 0.01 * full["memory"]["optimizer"]
    assert main(["trace", str(p), "--lora-rank", "8", "--lora-targets", "all", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["meta"]["lora_targets"] == ["q", "k", "v", "o", "gate", "up", "down"]
    assert main(["trace", "llama2-7b", "--seq", "512"]) == 0
    assert "kv_heads=32" in capsys.readouterr().out
    assert main(["predict", "--preset", "llama2-7b", "--lora-targets", "q"]) == 2
    assert "--lora-targets needs --lora-rank" in capsys.readouterr().err
    assert main(["predict", "--preset", "llama2-7b", "--lora-rank", "8", "--law", "prerun",
                 "--tokens", "1e9"]) == 2
    assert "legacy laws price the GPT-2 / BERT layout" in capsys.readouterr().err
    bad = write(tmp_path, {**QWEN, "model_type": "t5"}, "t5.json")
    assert main(["predict", "--hf-config", str(bad)]) == 2
    assert "model_type 't5' is not modeled" in capsys.readouterr().err


def test_load_trace_reads_a_config_json_or_its_folder(tmp_path) -> None:
    """Wherever a preset is accepted as PRESET|FILE (trace, characterize, plan) a Hugging Face
    config.json is too."""
    from joulebound.workload import load_trace, model_config

    p = write(tmp_path, QWEN)
    tr = load_trace(p, batch=2, seq=256)
    assert tr.meta["source"] == "analytic" and tr.meta["params"] == PUBLISHED["qwen2-0.5b"]
    assert (tr.meta["batch"], tr.meta["seq"]) == (2, 256)
    assert load_trace(tmp_path).meta["seq"] == 4096
    assert model_config(p) == model_config(tmp_path) == load_hf_config(p)
    assert model_config("LLaMA3-8B") is PRESETS["llama3-8b"]
    assert model_config(tmp_path / "absent.json") is None
    with pytest.raises(JouleboundError, match="model_type 'mixtral' is not modeled"):
        load_trace(write(tmp_path, {**QWEN, "model_type": "mixtral"}, "m.json"))
