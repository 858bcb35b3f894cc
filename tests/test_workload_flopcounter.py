"""Cross-check of the analytic traces against PyTorch's own FLOP counter on Hugging Face models.

``torch.utils.flop_counter.FlopCounterMode`` counts the matrix-multiply FLOPs (mm, addmm, bmm)
that a real forward + backward of ``GPT2LMHeadModel`` / ``BertForMaskedLM`` executes. The
analytic trace's GEMM and attention kernels must give the same number: every weight GEMM, its
two gradient GEMMs, the batched attention GEMMs, the tied LM / MLM head.
"""

from __future__ import annotations

import pytest

from joulebound.workload.analytic import ModelConfig, build_trace

L, D, H, S, V, B = 2, 128, 4, 64, 1000, 2


def hf_matmul_flops(model, ids) -> int:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    with FlopCounterMode(display=False) as counter:
        model(ids, labels=ids).loss.backward()
    return counter.get_total_flops()


def analytic_matmul_flops(arch: str) -> float:
    tr = build_trace(ModelConfig(arch, L, D, H, 4 * D, V, S, B, "fp32"))
    total = 0.0
    for k in tr:
        if k.category in ("gemm", "attention"):
            b, m, n, kk = k.meta["shape"]
            assert k.flops == 2 * b * m * n * kk + (b * m * n if k.meta["bias"] else 0)
            total += 2 * b * m * n * kk  # FlopCounterMode does not count the bias epilogue
    return total


@pytest.fixture(scope="module")
def hf():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    transformers.logging.set_verbosity_error()
    return transformers, torch


def test_gpt2_matches_torch_flop_counter(hf) -> None:
    transformers, torch = hf
    cfg = transformers.GPT2Config(n_layer=L, n_embd=D, n_head=H, n_positions=S, vocab_size=V,
                                  bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, V, (B, S))
    assert analytic_matmul_flops("gpt") == hf_matmul_flops(model, ids)


def test_bert_mlm_matches_torch_flop_counter(hf) -> None:
    transformers, torch = hf
    cfg = transformers.BertConfig(num_hidden_layers=L, hidden_size=D, num_attention_heads=H,
                                  intermediate_size=4 * D, vocab_size=V,
                                  max_position_embeddings=S, attn_implementation="eager")
    model = transformers.BertForMaskedLM(cfg)
    ids = torch.randint(0, V, (B, S))
    assert analytic_matmul_flops("bert") == hf_matmul_flops(model, ids)


def test_profiled_gpt2_step_import_matches_analytic(hf, tmp_path) -> None:
    """Record a real HF GPT-2 training step with torch.profiler (CPU, record_shapes), import
    the Chrome trace, and compare its GEMM + attention FLOPs with the analytic trace."""
    import warnings

    transformers, torch = hf
    from torch.profiler import ProfilerActivity, profile, schedule

    from joulebound.workload import load_trace

    warnings.filterwarnings("ignore", message="Profiler clears events")
    cfg = transformers.GPT2Config(n_layer=L, n_embd=D, n_head=H, n_positions=S, vocab_size=V,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters())
    ids = torch.randint(0, V, (B, S))
    path = tmp_path / "gpt2_step.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(2):
            model(ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    imported = load_trace(path)
    analytic = build_trace(ModelConfig("gpt", L, D, H, 4 * D, V, S, B, "fp32"))

    def mm(tr, phase):
        return sum(k.flops for k in tr if k.category in ("gemm", "attention") and k.phase == phase)

    for phase in ("forward", "backward"):  # biases included on both sides
        assert mm(imported, phase) == pytest.approx(mm(analytic, phase), rel=1e-9), phase
    assert all(k.meta["cost"] == "shapes" for k in imported)
    assert imported.count_by("category")["optimizer"] > 0


def test_model_config_from_hf_configs(hf) -> None:
    transformers, _ = hf
    from joulebound.core.errors import JouleboundError
    from joulebound.workload.analytic import PRESETS

    gpt2 = transformers.GPT2Config()  # the library's GPT-2 small defaults, no download
    cfg = ModelConfig.from_hf(gpt2, batch=1, dtype="bf16")
    p = PRESETS["gpt2-small"]
    assert (cfg.layers, cfg.hidden, cfg.heads, cfg.ff, cfg.vocab, cfg.seq) == \
        (p.layers, p.hidden, p.heads, p.ff, p.vocab, p.seq)
    bert = transformers.BertConfig(hidden_size=2048, intermediate_size=8192,
                                   num_hidden_layers=24, num_attention_heads=16)
    cfg = ModelConfig.from_hf(bert.to_dict(), seq=512, batch=8)
    assert cfg.params() == PRESETS["bert-huge"].params()  # Perseus' bert-huge recipe
    # parameter counts (the optimizer kernels' sizes) equal the real models'
    for hf_cfg, cls in ((transformers.GPT2Config(n_layer=L, n_embd=D, n_head=H, n_positions=S,
                                                 vocab_size=V), transformers.GPT2LMHeadModel),
                        (transformers.BertConfig(num_hidden_layers=L, hidden_size=D,
                                                 num_attention_heads=H, intermediate_size=4 * D,
                                                 vocab_size=V, max_position_embeddings=S),
                         transformers.BertForMaskedLM)):
        model = cls(hf_cfg)
        assert ModelConfig.from_hf(hf_cfg).params() == sum(p.numel() for p in model.parameters())
    with pytest.raises(JouleboundError, match="model_type 't5' is not modeled"):
        ModelConfig.from_hf(transformers.T5Config())
