"""The optimized stack in the job description and its memory: distributed optimizer (ZeRO-1),
sequence parallelism, selective / full recompute, FlashAttention, FP8 (Korthikanti et al. 2022,
hand computations), and ``--tp/--pp`` without a ``--strategy``."""

from __future__ import annotations

import pytest

from joulebound.cli import main
from joulebound.core.errors import JouleboundError
from joulebound.jobs.job import Job, memory, resolve

GIB = 2**30
# GPT-3 175B (Brown et al. 2020): 96 layers, d 12288, 96 heads, S 2048, GPT-2 vocabulary
GPT3 = dict(arch="gpt", layers=96, hidden=12288, heads=96, seq=2048, vocab=50257, dtype="bf16")


def test_tp_and_pp_without_a_strategy_are_data_parallel_across_the_groups():
    """Before, --tp/--pp on several GPUs needed a dummy --strategy ddp (strategy 'single'
    refused them)."""
    r = resolve(Job(**GPT3, batch=1, gpus=512, tp=4, pp=8, global_batch=1536))
    assert (r.dp, r.tp, r.pp, r.label()) == (16, 4, 8, "dp16·tp4·pp8") and not r.sharded
    assert resolve(Job(**GPT3, batch=1, gpus=8, tp=8)).label() == "tp8"
    assert resolve(Job(**GPT3, batch=1, gpus=8, pp=8)).label() == "pp8"
    with pytest.raises(JouleboundError, match="multiple of tp·pp"):
        resolve(Job(**GPT3, batch=1, gpus=12, tp=8))


def test_cli_predict_takes_tp_and_pp_alone(capsys):
    assert main(["predict", "--model", "gpt", "--layers", "8", "--hidden", "1024", "--heads", "16",
                 "--seq", "512", "--batch", "2", "--gpus", "16", "--tp", "2", "--pp", "2",
                 "--device", "a100-sxm4-80gb", "--json"]) == 0, capsys.readouterr().err
    import json

    assert json.loads(capsys.readouterr().out)["strategy"] == "dp4·tp2·pp2"


def _gpt3(**kw) -> tuple:
    """GPT-3 175B on 512 A100-80GB, TP4·PP8·DP16, global batch 1536, micro-batch 1 (Narayanan
    et al. 2021's layout class), resolved, with its per-GPU memory."""
    r = resolve(Job(**GPT3, batch=1, global_batch=1536, gpus=512, tp=4, pp=8,
                    device="a100-sxm4-80gb", **kw))
    return r, memory(r, 80 * GIB)


def _hand_states(r, opt_shard: int) -> tuple[float, float, float]:
    """Weights, gradients, optimizer bytes of the first pipeline stage by hand: a GPT-2 block
    has 12·d² + 13·d parameters; the first stage holds 96/8 = 12 blocks plus the token and
    position embeddings (V·d + S·d) and the final LayerNorm (2·d), over tp = 4; bf16 weights and
    gradients (2 B each), fp32 Adam moments + master copy (12 B) over ``opt_shard`` ranks."""
    d, V, S = 12288, 50257, 2048
    p = (12 * (12 * d * d + 13 * d) + V * d + S * d + 2 * d) / 4
    assert r.params == pytest.approx(96 * (12 * d * d + 13 * d) + V * d + S * d + 2 * d)
    return 2 * p, 2 * p, 12 * p / opt_shard


def test_gpt3_175b_on_512_gpus_fits_with_the_optimized_stack():
    """Refused before (the optimizer state unsharded: > 100 GiB per GPU); fits with Megatron's
    distributed optimizer, sequence parallelism and selective recompute, each figure by hand
    (Korthikanti et al. 2022, Table 2: 34·S·b·d/t bytes per layer)."""
    r0, m0 = _gpt3(flash_attention=False)
    assert not m0.fits and m0.total > 100 * GIB
    r, m = _gpt3(distributed_optimizer=True, sequence_parallel=True, recompute="selective",
                 flash_attention=False)
    assert (r.recompute, r.sequence_parallel, r.distributed_optimizer) == ("selective", True, True)
    assert not r.config.recompute  # the kernel trace has no full recompute
    w, g, o = _hand_states(r, 16)
    assert (m.weights, m.gradients, m.optimizer) == pytest.approx((w, g, o))
    S, b, d, t, V = 2048, 1, 12288, 4, 50257
    act = 12 * (34 * S * b * d / t) * 8 + S * b * V / t * 4  # 12 layers, 8 micro-batches in flight
    assert m.activations == pytest.approx(act)
    assert m.fits and m.total < 60 * GIB
    assert m.assumes == "selective recompute, sequence parallelism, distributed optimizer"
    assert m0.assumes == ""
    # each switch alone: the optimizer state shrinks 16x, the activations as Table 2 says
    _, md = _gpt3(distributed_optimizer=True, flash_attention=False)
    assert md.optimizer == pytest.approx(o) and md.activations == pytest.approx(m0.activations)
    assert md.weights == pytest.approx(m0.weights) and md.gradients == pytest.approx(m0.gradients)


@pytest.mark.parametrize("sp,mode,flash,per_layer", [
    # Korthikanti et al. 2022 eq. 2 and Table 2 (h = 96 heads, s/(d/h) etc.), 16-bit bytes / (S·b·d)
    (False, "none", False, lambda t, h, S, d: 10 + 24 / t + 5 * h * S / (d * t)),
    (True, "none", False, lambda t, h, S, d: 34 / t + 5 * h * S / (d * t)),
    (False, "selective", False, lambda t, h, S, d: 10 + 24 / t),
    (True, "selective", False, lambda t, h, S, d: 34 / t),
    # FlashAttention: no S² tensors, its fp32 softmax statistics (4·h·S·b bytes) instead
    (False, "none", True, lambda t, h, S, d: 10 + 24 / t + 4 * h / (d * t)),
    (True, "selective", True, lambda t, h, S, d: 34 / t + 4 * h / (d * t)),
])
def test_activations_per_layer_follow_korthikanti(sp, mode, flash, per_layer):
    cfg = dict(arch="gpt", layers=8, hidden=2048, heads=16, seq=1024, vocab=50257, dtype="bf16")
    r = resolve(Job(**cfg, batch=2, gpus=8, tp=4, strategy="ddp", sequence_parallel=sp,
                    recompute=mode, flash_attention=flash, device="a100-sxm4-80gb"))
    S, b, d, h, t = 1024, 2, 2048, 16, 4
    want = 8 * S * b * d * per_layer(t, h, S, d) + S * b * 50257 / t * 4
    assert memory(r, 0).activations == pytest.approx(want)


def test_full_recompute_keeps_each_layers_input_and_one_layer():
    """Full recompute: 2·S·b·d per layer (/t with sequence parallelism) per micro-batch in
    flight, plus one layer's full set while it is recomputed (once)."""
    cfg = dict(arch="gpt", layers=8, hidden=2048, heads=16, seq=1024, vocab=50257, dtype="bf16")
    S, b, d, h, t = 1024, 2, 2048, 16, 2
    for sp in (False, True):
        r = resolve(Job(**cfg, batch=b, gpus=4, tp=t, pp=2, grad_accum=8, recompute="full",
                        sequence_parallel=sp, flash_attention=False, device="a100-sxm4-80gb"))
        assert r.recompute == "full" and r.config.recompute and r.job.recompute
        one = S * b * d * ((34 / t if sp else 10 + 24 / t) + 5 * h * S / (d * t))
        kept = 2 * S * b * d / (t if sp else 1)
        want = 4 * kept * 2 + one + S * b * 50257 / t * 4  # 4 layers/stage, 2 in flight
        assert memory(r, 0).activations == pytest.approx(want)


def test_a_7b_llama_at_seq_4096_on_64_h100_fits_with_flash_attention_by_default():
    """Refused before unless --recompute (the S² probabilities of 32 heads stored); on an H100
    in bf16 FlashAttention is the default and stores none."""
    from joulebound.jobs.job import job_from_options

    base = dict(preset="llama2-7b", seq=4096, batch=2, gpus=64, strategy="fsdp",
                device="h100-sxm", dtype="bf16")
    eager = resolve(job_from_options(**base, flash_attention=False))
    assert not memory(eager, 80 * GIB).fits
    r = resolve(job_from_options(**base))
    assert r.flash_attention and r.recompute == "none"
    assert memory(r, 0).assumes == "FlashAttention"  # said in predict's memory line
    m, me = memory(r, 80 * GIB), memory(eager, 80 * GIB)
    assert m.fits
    T, h, S = 4096 * 2, 32, 4096
    # the difference is exactly the probabilities (h·S²·b, 2 B) less the statistics, per layer
    assert me.activations - m.activations == pytest.approx(32 * (2 * h * S * S * 2 - 4 * h * S * 2))
    assert T == 8192


def test_flash_attention_default_follows_the_gpu_and_dtype():
    cfg = dict(arch="gpt", layers=4, hidden=512, heads=8, seq=256, batch=2)
    assert resolve(Job(**cfg, dtype="bf16", device="a100-sxm4-80gb")).flash_attention
    assert not resolve(Job(**cfg, dtype="fp32", device="a100-sxm4-80gb")).flash_attention
    assert not resolve(Job(**cfg, dtype="fp16", device="v100-sxm2")).flash_attention
    assert resolve(Job(**cfg, dtype="fp16", device="v100-sxm2", flash_attention=True)).flash_attention


def test_fp8_needs_fp8_tensor_cores_and_halves_the_gemm_inputs():
    cfg = dict(arch="gpt", layers=4, hidden=1024, heads=16, seq=512, batch=4, vocab=50257)
    with pytest.raises(JouleboundError, match="fp8 needs FP8 tensor cores .*a100.*--dtype bf16"):
        resolve(Job(**cfg, dtype="fp8", device="a100-sxm4-80gb"))
    r8 = resolve(Job(**cfg, dtype="fp8", device="h100-sxm", flash_attention=False))
    r16 = resolve(Job(**cfg, dtype="bf16", device="h100-sxm", flash_attention=False))
    assert r8.fp8 and r8.dtype == "bf16" and r8.job.dtype == "fp8"
    m8, m16 = memory(r8, 0), memory(r16, 0)
    S, b, d = 512, 4, 1024
    # GEMM inputs (QKV, output projection, MLP in: 2 B each; MLP second input 8 B) in 1 byte:
    # 7·S·b·d saved per layer of Korthikanti's 34
    assert m16.activations - m8.activations == pytest.approx(4 * 7 * S * b * d)
    # the FP8 casts of the weights (and their transposes): 2 B per parameter more
    assert m8.weights - m16.weights == pytest.approx(2 * r8.params)
    assert m8.optimizer == pytest.approx(m16.optimizer)


def test_switches_without_effect_are_said_and_bad_values_refused():
    cfg = dict(arch="gpt", layers=4, hidden=512, heads=8, seq=256, batch=2, dtype="bf16")
    r = resolve(Job(**cfg, sequence_parallel=True, distributed_optimizer=True))
    assert not (r.sequence_parallel or r.distributed_optimizer)
    assert any("--sequence-parallel has no effect" in w for w in r.warnings)
    assert any("--distributed-optimizer has no effect" in w for w in r.warnings)
    rf = resolve(Job(**cfg, gpus=4, strategy="fsdp", distributed_optimizer=True))
    assert any("FSDP (ZeRO-3) shards the optimizer state already" in w for w in rf.warnings)
    with pytest.raises(JouleboundError, match="--recompute 'partial': use none, selective"):
        resolve(Job(**cfg, recompute="partial"))
    assert Job(**cfg, recompute="selective").to_json()["recompute"] == "selective"
    assert resolve(Job(**Job(**cfg, recompute="selective").to_json())).recompute == "selective"


def test_cli_flags_reach_the_memory(capsys):
    import json

    args = ["predict", "--model", "gpt", "--layers", "96", "--hidden", "12288", "--heads", "96",
            "--seq", "2048", "--vocab", "50257", "--batch", "1", "--global-batch", "1536",
            "--gpus", "512", "--tp", "4", "--pp", "8", "--device", "a100-sxm4-80gb", "--json"]
    assert main(args) == 2
    assert "GiB per GPU" in capsys.readouterr().err
    assert main([*args, "--distributed-optimizer", "--sequence-parallel", "--recompute-mode",
                 "selective"]) == 0, capsys.readouterr().err
    doc = json.loads(capsys.readouterr().out)
    assert doc["fits_memory"] and doc["strategy"] == "dp16·tp4·pp8"
    assert main([*args, "--recompute", "--recompute-mode", "selective"]) == 2
    assert "contradicts" in capsys.readouterr().err
    assert main([*args[:-1], "--dtype", "fp8"]) == 2
    assert "FP8 tensor cores" in capsys.readouterr().err


def test_job_tables_take_the_stack_columns(tmp_path):
    from joulebound.jobs import jobtable

    src = tmp_path / "jobs.csv"
    src.write_text("model,layers,hidden,heads,seq,batch,gpus,tp,recompute,sequence_parallel,"
                   "distributed_optimizer,flash_attention,device,dtype\n"
                   "gpt,8,1024,16,512,2,8,2,selective,true,yes,auto,a100-sxm4-80gb,bf16\n"
                   "gpt,8,1024,16,512,2,8,2,true,false,no,false,a100-sxm4-80gb,bf16\n"
                   "gpt,8,1024,16,512,2,8,2,partial,,,,a100-sxm4-80gb,bf16\n"
                   "gpt,8,1024,16,512,2,8,2,none,maybe,,,a100-sxm4-80gb,bf16\n")
    rows = jobtable.read_jobs(src, {})
    a, b = resolve(rows[0][0]), resolve(rows[1][0])
    assert (a.recompute, a.sequence_parallel, a.distributed_optimizer, a.flash_attention) == \
        ("selective", True, True, True)
    assert (b.recompute, b.sequence_parallel, b.distributed_optimizer, b.flash_attention) == \
        ("full", False, False, False)
    assert rows[2][0] is None and "--recompute 'partial'" in rows[2][2]
    assert rows[3][0] is None and "'sequence_parallel' must be true/false" in rows[3][2]
