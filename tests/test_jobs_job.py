"""Job sanity checks (messages say what is wrong and how to fix it), batch semantics, memory."""

from __future__ import annotations

import pytest

from joulebound.core.errors import JouleboundError
from joulebound.jobs.job import Job, job_from_options, memory, resolve

BASE = dict(layers=12, hidden=768, heads=12, seq=512, batch=8)


@pytest.mark.parametrize("kw, needle", [
    (dict(gpus=8, strategy="tp"), "tp=8 must divide the 12 attention heads"),
    (dict(gpus=16, strategy="tp"), "must divide the 12 attention heads"),
    (dict(gpus=16, strategy="pp"), "pp=16 exceed the 12 layers"),
    (dict(gpus=6, strategy="ddp", tp=4), "not a multiple of tp·pp"),
    (dict(gpus=4, strategy="ddp", batch=None, global_batch=2), "smaller than the 4 data-parallel ranks"),
    (dict(gpus=4, strategy="ddp", global_batch=36), "not a multiple of dp·batch"),
    (dict(layers=10**6), "--layers 1,000,000 is absurd"),
    (dict(tokens=1e30), "--tokens 1e+30 is absurd"),
    (dict(tokens=float("nan")), "--tokens must be a finite number > 0"),
    (dict(heads=7), "--heads 7 does not divide --hidden 768"),
    (dict(seq=0), "--seq must be an integer >= 1"),
    (dict(batch=2.5), "--batch must be an integer >= 1"),
    (dict(arch="t5"), "encoder-decoder models are not modeled"),
    (dict(arch="mamba"), "unknown --model 'mamba'"),
    (dict(dtype="int8"), "unknown --dtype 'int8'"),
    (dict(gpus=2, strategy="single"), "strategy 'single' needs --gpus 1"),
    (dict(gpus=2, strategy="fsd"), "fsdp"),
    (dict(batch=None), "give --batch"),
    (dict(hidden=10**7), "is absurd"),
])
def test_impossible_and_absurd_jobs_are_refused(kw, needle):
    with pytest.raises(JouleboundError) as e:
        resolve(Job(**{**BASE, **kw}))
    assert needle in str(e.value)


def test_batch_is_per_gpu_and_global_batch_the_alternative():
    r = resolve(Job(**BASE, gpus=4, strategy="ddp"))
    assert (r.micro_batch, r.grad_accum, r.global_batch, r.dp) == (8, 1, 32, 4)
    r = resolve(Job(**{**BASE, "batch": None}, global_batch=64, gpus=4, strategy="fsdp"))
    assert (r.micro_batch, r.grad_accum, r.global_batch) == (16, 1, 64) and r.sharded
    r = resolve(Job(**BASE, global_batch=64, gpus=4, strategy="ddp"))  # both: accumulation
    assert (r.micro_batch, r.grad_accum) == (8, 2)
    r = resolve(Job(**{**BASE, "heads": 16, "hidden": 1024}, gpus=8, strategy="ddp", tp=2, pp=2))
    assert (r.dp, r.tp, r.pp, r.label()) == (2, 2, 2, "dp2·tp2·pp2")
    assert r.tokens_per_step == 2 * 8 * 8 * 512  # dp · micro-batch · (4·pp = 8 micro-batches) · S
    with pytest.raises(JouleboundError, match="contradicts"):
        resolve(Job(**BASE, global_batch=64, grad_accum=3, gpus=4, strategy="ddp"))


def test_memory_per_gpu_by_strategy():
    big = dict(layers=24, hidden=2048, heads=16, seq=1024, batch=1, arch="gpt", dtype="bf16")
    r1 = resolve(Job(**big))
    rf = resolve(Job(**big, gpus=8, strategy="fsdp"))
    rt = resolve(Job(**big, gpus=8, strategy="tp"))
    m1, mf, mt = memory(r1, 11 * 2**30), memory(rf, 11 * 2**30), memory(rt, 11 * 2**30)
    # 1.3 B parameters: bf16 weights + bf16 grads + fp32 Adam moments + fp32 master = 16 B/param
    assert (m1.weights + m1.gradients + m1.optimizer) / r1.params == pytest.approx(16)
    assert mf.optimizer == pytest.approx(m1.optimizer / 8)
    # FSDP shards weights and gradients but holds its gathered units whole: the root unit
    # (token + position embeddings, final LayerNorm) and two layers (computing, prefetched) of
    # bf16 weights, one layer's bf16 gradients before its reduce-scatter
    d, per_layer = 2048, 12 * 2048**2 + 13 * 2048
    root = 50257 * d + 1024 * d + 2 * d
    assert rf.params == pytest.approx(24 * per_layer + root)
    assert mf.weights == pytest.approx(m1.weights / 8 + (root + 2 * per_layer) * 2)
    assert mf.gradients == pytest.approx(m1.gradients / 8 + per_layer * 2)
    assert mt.activations < m1.activations
    assert not m1.fits and mf.fits  # 1.3 B on an 11 GB card: only sharded
    rec = memory(resolve(Job(**big, recompute=True)), 0)
    assert rec.activations < m1.activations / 5


def test_presets_fill_the_shape_and_options_override():
    j = job_from_options(preset="gpt3-xl", device="a100-sxm4-80gb")
    assert (j.arch, j.layers, j.hidden, j.heads, j.seq, j.batch) == ("gpt", 24, 2048, 16, 1024, 1)
    j = job_from_options(preset="bert-base", seq=128, batch=32)
    assert (j.seq, j.batch, j.layers) == (128, 32, 12)
    with pytest.raises(JouleboundError, match="--hidden, --heads missing"):
        job_from_options(layers=12, seq=128, batch=8)
    with pytest.raises(JouleboundError, match="unknown model preset"):
        job_from_options(preset="gpt5")


def test_the_parameter_count_is_written_once():
    """The job predictor counts parameters with the training config's formula (issue 29: it was
    written three times); checked against the closed form on every preset."""
    from joulebound.jobs.job import model_params
    from joulebound.workload.analytic import PRESETS

    for name, cfg in PRESETS.items():
        if cfg.modern:  # Llama-style presets: tests/test_workload_modern.py (real models' counts)
            continue
        d, ff, V, S, L = cfg.hidden, cfg.ff, cfg.vocab, cfg.seq, cfg.layers
        block = 4 * d * d + 2 * d * ff + 9 * d + ff
        emb = V * d + max(S, 512 if cfg.arch == "bert" else S) * d
        head = (d * d + 7 * d + V) if cfg.arch == "bert" else 2 * d
        assert model_params(cfg.arch, L, d, ff, V, S) == cfg.params() == L * block + emb + head, name
