"""The optimized stack's effect on the modeled step time (issue 27 item 3): each switch changes
the kernels the way the technique does, checked against hand arithmetic on the kernels' FLOPs
and bytes and by the direction of the step time. (Before, each switch changed memory only.)"""

from __future__ import annotations

import numpy as np
import pytest

from joulebound.jobs.job import Job, resolve
from joulebound.jobs.mechanistic import MechParams, predict_jobs, work_keys
from joulebound.jobs.stepcost import characterize_parts

PRM = MechParams(kappa=1.0, launch_s=0.0, step_s=0.0, wait_ratio=1.0, overlap_slowdown=0.0)
BASE = dict(arch="gpt", layers=4, hidden=2048, heads=16, seq=4096, vocab=50257, batch=2,
            dtype="bf16", device="h100-sxm", flash_attention=False)


def _parts(**kw):
    r = resolve(Job(**{**BASE, **kw}))
    k = work_keys(r)
    return r, characterize_parts([k])[k]


def _time(**kw) -> float:
    return predict_jobs([Job(**{**BASE, **kw})], PRM)[0].time_s


def test_flash_attention_removes_the_s2_traffic_and_is_faster_at_long_sequences():
    _, eager = _parts()
    _, flash = _parts(flash_attention=True)
    # same forward math, fewer bytes: the fused attention is faster at S = 4096
    assert flash.t["layer_f"].sum() < 0.8 * eager.t["layer_f"].sum()
    assert _time(flash_attention=True) < _time()


def test_selective_recompute_adds_the_attention_core_forward_to_the_backward():
    _, none = _parts()
    _, sel = _parts(recompute="selective")
    _, full = _parts(recompute="full")
    b0, b1, b2 = (p.t["layer_b"].sum() for p in (none, sel, full))
    assert b0 < b1 < b2  # cheaper than recomputing everything, dearer than nothing
    assert b1 - b0 < none.t["layer_f"].sum()  # only part of the forward is recomputed
    assert _time() < _time(recompute="selective") < _time(recompute="full")


def test_fp8_runs_the_linear_gemms_at_the_fp8_rate():
    r16, p16 = _parts()
    r8, p8 = _parts(dtype="fp8")
    assert work_keys(r8).stack == (("fp8", True),) and work_keys(r16).stack == ()
    ratio = _time(dtype="fp8") / _time()
    # H100: FP8 dense peak twice bf16's; only the linear GEMMs move, casts cost bytes
    assert 0.45 < ratio < 0.95


def test_fp8_is_refused_where_there_are_no_fp8_tensor_cores():
    from joulebound.core.errors import JouleboundError

    with pytest.raises(JouleboundError, match="FP8"):
        resolve(Job(**{**BASE, "dtype": "fp8", "device": "a100-sxm4-80gb"}))


def test_sequence_parallelism_splits_the_replicated_kernels_over_tp():
    _, tp = _parts(gpus=4, tp=4, strategy="tp")
    _, sp = _parts(gpus=4, tp=4, strategy="tp", sequence_parallel=True)
    # the LayerNorm / residual / elementwise work is now 1/tp of it: the layer gets cheaper
    assert sp.t["layer_f"].sum() < tp.t["layer_f"].sum()
    assert sp.t["layer_f"][0] < tp.t["layer_f"][0]  # ln1, the GPT layer's first kernel


def test_distributed_optimizer_updates_one_dp_shard():
    kw = dict(gpus=8, strategy="ddp", global_batch=16, batch=None)
    full = predict_jobs([Job(**{**BASE, **kw})], PRM)[0]
    dist = predict_jobs([Job(**{**BASE, **kw, "distributed_optimizer": True})], PRM)[0]
    assert dist.time_s < full.time_s
    assert np.isfinite(dist.time_s)


def test_fsdp_copies_the_gathered_weights_and_the_gradients():
    """FSDP (hf / eager) reads and writes each layer's 16-bit weights twice more in the forward
    (copy-out of the gathered weights) and four times more in the backward (copy-out again,
    gradients into the reduce-scatter buffer); Megatron (ZeRO-1 / no FSDP) does not."""
    kw = dict(gpus=4, strategy="fsdp", batch=2)
    r, fsdp = _parts(**kw)
    _, ddp = _parts(gpus=4, strategy="ddp", batch=2)
    assert dict(work_keys(r).stack).get("fsdp") and fsdp.t["layer_b"].sum() > ddp.t["layer_b"].sum()
    rm = resolve(Job(**{**BASE, **kw, "framework": "megatron"}))
    assert "fsdp" not in dict(work_keys(rm).stack)
