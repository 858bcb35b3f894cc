"""One training-config type: every former type's construction path (analytic ModelConfig, the job
predictor's Job, the sweep's SweepConfig) gives the same TrainingConfig and the parameter count
the former types gave (the literals below were computed by the three former implementations at
commit 4fb82ad), and the old spellings map to the one spelling."""

from __future__ import annotations

import json

import pytest

from joulebound.core.errors import JouleboundError
from joulebound.jobs.job import Job, job_from_options, layer_params, model_params, resolve
from joulebound.workload.analytic import PRESETS, ModelConfig, build_trace
from joulebound.workload.config import DEFAULT_DTYPE, TrainingConfig, canonical_arch
from joulebound.workload.grid import Grid, SweepConfig, load_grid

#: parameter counts of the former ModelConfig.params() and jobs.job.model_params (equal)
OLD_PARAMS = {"gpt2-small": 124_439_808, "bert-base": 109_514_298, "gpt3-xl": 1_313_626_112}
#: the former presets: (arch, layers, hidden, heads, ff, vocab, seq, micro-batch), all bf16
OLD_PRESETS = {"gpt2-small": ("gpt", 12, 768, 12, 3072, 50257, 1024, 1),
               "bert-base": ("bert", 12, 768, 12, 3072, 30522, 512, 8),
               "gpt3-xl": ("gpt", 24, 2048, 16, 8192, 50257, 1024, 1)}


def _old_formula(arch: str, L: int, d: int, ff: int, V: int, S: int) -> int:
    """The oracle: the parameter count as the former jobs.job.model_params wrote it."""
    layer = 4 * d * d + 2 * d * ff + 9 * d + ff
    emb = V * d + max(S, 512 if arch == "bert" else S) * d
    extra = (4 * d + d * d + 3 * d + V) if arch == "bert" else 2 * d
    return L * layer + emb + extra


@pytest.mark.parametrize("name", sorted(OLD_PARAMS))
def test_the_analytic_path_gives_the_same_config_and_count(name: str) -> None:
    arch, L, d, h, ff, V, S, B = OLD_PRESETS[name]
    old_style = ModelConfig(arch, L, d, h, ff, V, S, B, "bf16", name=name)
    assert isinstance(old_style, TrainingConfig)
    assert old_style == PRESETS[name]
    assert (old_style.micro_batch, old_style.global_batch, old_style.dtype) == (B, None, "bf16")
    assert old_style.params() == OLD_PARAMS[name] == _old_formula(arch, L, d, ff, V, S)
    tr = build_trace(name)
    assert tr.meta["params"] == OLD_PARAMS[name]
    assert TrainingConfig.from_trace_meta(tr.meta) == PRESETS[name]
    # the saved-trace meta keeps its keys: batch there is the micro-batch
    assert [k for k in tr.meta if k in old_style.trace_meta()] == list(old_style.trace_meta())
    assert tr.meta["batch"] == B and "micro_batch" not in tr.meta
    assert build_trace(name, batch=4).meta["batch"] == 4 == build_trace(name, micro_batch=4).meta["batch"]


@pytest.mark.parametrize("name", sorted(OLD_PARAMS))
def test_the_job_path_gives_the_same_config_and_count(name: str) -> None:
    arch, L, d, h, ff, V, S, B = OLD_PRESETS[name]
    job = job_from_options(preset=name)
    r = resolve(job)
    assert job.config == TrainingConfig(arch, L, d, h, ff, V, S, micro_batch=B, name=name)
    assert r.params == float(OLD_PARAMS[name]) == model_params(arch, L, d, ff, V, S)
    assert r.config == TrainingConfig(arch, L, d, h, ff, V, S, micro_batch=B, global_batch=B,
                                      grad_accum=1, name=name)
    # a job from a preset keeps the one default dtype (fp32), as the former Job did
    assert (r.dtype, job.batch, r.micro_batch) == (DEFAULT_DTYPE, B, B) == ("fp32", B, B)
    flat = Job(layers=L, hidden=d, heads=h, seq=S, arch=arch, ff=ff, vocab=V, batch=B, name=name)
    assert flat == job and flat.to_json()["batch"] == B


def test_job_replace_and_defaults_behave_as_before() -> None:
    from dataclasses import replace

    job = Job(layers=2, hidden=64, heads=2, seq=32, batch=4)
    assert (job.arch, job.ff, job.vocab, job.dtype) == ("bert", None, None, "fp32")
    r = resolve(replace(job, hidden=128, heads=4))
    assert (r.ff, r.vocab) == (512, 30522)  # ff follows the new hidden, as it did
    assert r.params == _old_formula("bert", 2, 128, 512, 30522, 32)
    r2 = resolve(replace(job, batch=None, global_batch=16, gpus=2, strategy="ddp"))
    assert (r2.micro_batch, r2.grad_accum, r2.global_batch) == (8, 1, 16)
    assert layer_params(64, 256) == 4 * 64 * 64 + 2 * 64 * 256 + 9 * 64 + 256


@pytest.mark.parametrize("spelling", ["gpt2", "GPT2", "gpt", "decoder", "llama"])
def test_old_arch_spellings_map_to_gpt(spelling: str) -> None:
    assert canonical_arch(spelling) == "gpt"
    assert TrainingConfig(spelling, 2, 64, 2).arch == "gpt"
    r = resolve(Job(layers=2, hidden=64, heads=2, seq=32, arch=spelling, batch=4))
    assert r.arch == "gpt" and r.params == 3_318_592.0  # the former Job's count


def test_unknown_archs_are_still_named() -> None:
    assert canonical_arch("t5") == "t5"
    with pytest.raises(JouleboundError, match="encoder-decoder"):
        resolve(Job(layers=2, hidden=64, heads=2, seq=32, arch="t5", batch=4))
    with pytest.raises(JouleboundError, match="unknown --model 'mamba'"):
        resolve(Job(layers=2, hidden=64, heads=2, seq=32, arch="mamba", batch=4))


def test_the_sweep_path_gives_the_same_config_and_ids() -> None:
    c = SweepConfig(arch="gpt2", layers=2, hidden=64, heads=2, ff=256, seq=32, batch=8,
                    strategy="ddp", world_size=2)
    assert c.model == TrainingConfig("gpt", 2, 64, 2, 256, 30522, 32, micro_batch=4,
                                     global_batch=8, grad_accum=1, dtype="fp32")
    assert (c.arch, c.global_batch, c.micro_batch) == ("gpt", 8, 4)
    # ids and saved dicts as the former SweepConfig wrote them (stores resume, plans reload)
    assert c.config_id == "gpt2-L2-d64-h2-ff256-S32-B8-fp32-ddp-w2-1b47296d"
    assert c.to_dict() == {"arch": "gpt2", "layers": 2, "hidden": 64, "heads": 2, "ff": 256,
                           "seq": 32, "batch": 8, "dtype": "fp32", "steps": 10, "warmup": 2,
                           "strategy": "ddp", "world_size": 2, "vocab": 30522, "dropout": 0.1,
                           "min_fill": 1.0, "seed": 0, "lr": 5e-05}
    assert list(c.to_dict()) == list(json.loads(json.dumps(c.to_dict())))
    assert SweepConfig.from_dict(c.to_dict()) == c
    assert SweepConfig.from_dict({**c.to_dict(), "arch": "gpt"}) == c
    assert c.baseline.micro_batch == 8 and c.baseline.world_size == 1
    tp = SweepConfig(arch="bert", layers=1, hidden=64, heads=2, ff=256, seq=32, batch=4,
                     vocab=1000, steps=3, warmup=1, dropout=0.0)
    assert tp.config_id == "bert-L1-d64-h2-ff256-S32-B4-fp32-single-w1-9a0c0ce1"
    assert tp.model.params() == _old_formula("bert", 1, 64, 256, 1000, 32)


def test_grids_accept_both_gpt_spellings(tmp_path) -> None:
    for spelling in ("gpt2", "gpt"):
        p = tmp_path / f"g_{spelling}.toml"
        p.write_text(f'arch = ["{spelling}"]\nlayers = [1]\nhidden = [64]\nheads = [2]\n'
                     'seq = [32]\nbatch = [4]\n')
        (cfg,) = load_grid(p).expand(["single"], [1])
        assert cfg.arch == "gpt" and cfg.config_id.startswith("gpt2-")
    with pytest.raises(JouleboundError, match="unknown arch 'gtp'"):
        Grid(name="g", arch=["gtp"]).expand(["single"], [1])
