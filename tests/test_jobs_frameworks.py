"""The job predictor's framework modes: host dispatch instead of one framework factor (issue 27
item 1), checked on data the fit never saw.

* vTrain (Megatron-DeepSpeed, A100, 2–512 GPUs): one model size held out, fit on everything else.
  The old predictor (one κ = 2.12 fitted on eager Hugging Face runs, no host model) was 91 %
  too slow at median on the multi-node rows and 47 % off on the single-node ones; vTrain's own
  simulator reports 8.37 % / 14.73 % mean error (published).
* The project's own H200 measurement of eager Hugging Face steps (GPU outside the calibration
  data): a host-bound plateau of ~40 ms from batch 1×128 to 4×1024, then GPU-bound. Without the
  host bound the old model priced batch 1×128 at ~17 ms (2.6× too fast).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from joulebound.core.errors import JouleboundError
from joulebound.jobs import calibrate as cal
from joulebound.jobs import heldout
from joulebound.jobs.job import Job, resolve
from joulebound.jobs.mechanistic import (
    MechParams,
    compose,
    fabric_for,
    load_params,
    predict_jobs,
    work_keys,
)
from joulebound.jobs.stepcost import characterize_parts

#: vTrain (median |time error|): single-node in-sample ≤ 10 % (issue 27's held-out target is 8 %;
#: all sizes held out in turn give 8.4 %, docs/scaling.md); 175 B held out ≤ 20 % (17.8 %: the GPU
#: model's large GEMMs run ~10 % slower than Megatron's, every 175 B layout is over-predicted)
VTRAIN_SINGLE_MAX, VTRAIN_175B_MAX = 0.10, 0.20


@pytest.fixture(scope="module")
def prep(shared_data):
    return cal.prepare(cal.load_observations(shared_data))


@pytest.fixture(scope="module")
def fitted(prep):
    return cal.fit(prep)


def test_unknown_framework_is_refused_with_the_known_ones():
    with pytest.raises(JouleboundError, match="megatron"):
        resolve(Job(layers=2, hidden=64, heads=2, seq=16, batch=1, framework="jax"))


def test_host_bound_part_is_the_slower_of_host_and_gpu():
    """A part of n kernels takes max(κ·Σt, n·host): the GPU idles for the difference."""
    j = Job(layers=2, hidden=256, heads=4, seq=64, arch="gpt", vocab=1000, batch=1, dtype="bf16",
            device="h200-sxm")
    r = resolve(j)
    k = work_keys(r)
    pa = characterize_parts([k])[k]
    ideal = MechParams(kappa=1.0, launch_s=0.0, step_s=0.0, wait_ratio=1.0)
    slow_host = replace(ideal, frameworks={"hf": {"kappa": 1.0, "host_s": 1e-3}})
    a = compose(r, pa, ideal, fabric_for(r))
    b = compose(r, pa, slow_host, fabric_for(r))
    n_fb = 2 * (len(pa.t["layer_f"]) + len(pa.t["layer_b"])) + sum(
        len(pa.t[p]) for p in ("pre_f", "pre_b", "post_f", "post_b"))
    assert b.time_s >= n_fb * 1e-3  # every kernel waits for its 1 ms launch
    assert b.busy_energy_j == pytest.approx(a.busy_energy_j)  # same kernels, same busy energy
    assert b.wait_energy_j > a.wait_energy_j  # the idle GPU draws wait power meanwhile


def test_frameworks_are_calibrated_where_data_exists(fitted):
    fw = fitted.frameworks
    assert set(fw) == {"hf", "megatron", "eager", "compiled"}
    # Megatron's fused kernels run close to the GPU model's kernel times (κ near 1), not 2.1
    assert 0.8 < fw["megatron"]["kappa"] < 1.3 < fw["hf"]["kappa"]
    # vTrain's single-node runs pin a host time per kernel of tens of µs
    assert 20e-6 < fw["megatron"]["host_s"] < 150e-6
    assert fw["megatron"]["sigma_compute"] < fw["hf"]["sigma_compute"]
    # torch.compile: Hugging Face's κ over TorchInductor's published 1.41× training speedup
    assert fw["compiled"]["kappa"] == pytest.approx(fw["hf"]["kappa"] / 1.41)
    assert "published" in fw["compiled"]["kappa_source"] and 0 < fw["compiled"]["host_s"] < fw["hf"]["host_s"]


def test_vtrain_held_out_by_model_size(prep, shared_data):
    """The largest model (175 B, 512 GPUs) held out: fit on the rest."""
    ds = prep.col("dataset")
    fam = np.array([o.family for o in prep.obs])
    test = np.flatnonzero((ds == "vtrain") & (fam == "h12288-L96"))
    train = np.setdiff1d(np.arange(len(prep)), test)
    prm = cal.fit(prep.subset(train))
    pr = cal.predicted(prep.subset(test), prm)
    meas = prep.subset(test).col("time_s").astype(float)
    err = np.abs(pr["time"] / meas - 1)
    assert np.median(err) <= VTRAIN_175B_MAX, f"175 B held out: median |err| {np.median(err):.1%}"
    old = MechParams(kappa=2.12, launch_s=4.3e-6, step_s=0.01, wait_ratio=2.1)  # the old model
    pr_old = cal.predicted(prep.subset(test), old)
    assert np.median(np.abs(pr_old["time"] / meas - 1)) > 0.5  # the old one was ~2× too slow


def test_vtrain_single_node_in_sample_and_layout_ranking(prep, fitted):
    ds = prep.col("dataset")
    node = np.array([o.meta.get("node", "") for o in prep.obs])
    m = (ds == "vtrain") & (node == "single-node")
    pr = cal.predicted(prep.subset(np.flatnonzero(m)), fitted)
    meas = prep.col("time_s").astype(float)[m]
    assert np.median(np.abs(pr["time"] / meas - 1)) <= VTRAIN_SINGLE_MAX
    pred = np.full(len(prep), np.nan)
    pred[m] = pr["time"]
    rk = heldout.layout_ranking(prep, pred)
    assert rk["pair_agreement"] >= 0.85  # the TP × PP × DP × micro-batch choice, ranked as measured
    assert rk["median_regret"] <= 0.05
    d = heldout.gpu_count_direction(prep, pred)
    assert d["pairs"] >= 40 and d["direction_right"] >= 0.9


def test_h200_hf_steps_held_out(fitted):
    """Our own measurement: eager HF GPT-2 / BERT-base steps on the H200 (not in the fit)."""
    h = heldout.h200_hf_steps(fitted)
    assert h["time_median_abs_err"] <= 0.25 and h["energy_median_abs_err"] <= 0.30
    assert h["time_coverage90"] >= 0.8
    t = {(x["model"], x["batch"], x["seq"]): x["time_pred_s"] for x in h["rows"]}
    # the host-bound plateau: 16 × 128 costs about what 1 × 128 does (measured: 43.5 vs 44.9 ms)
    assert t[("gpt2", 16, 128)] / t[("gpt2", 1, 128)] < 1.15
    old = MechParams(kappa=2.12, launch_s=4.3e-6, step_s=0.01, wait_ratio=2.1)  # no host model
    j = Job(layers=12, hidden=768, heads=12, seq=128, arch="gpt", vocab=50257, batch=1, dtype="bf16",
            device="h200-sxm")
    assert predict_jobs([j], old)[0].time_s < 0.5 * 0.0449  # the old model: far too fast


def test_wrapper_host_cost_reproduces_the_measured_gpu_bound_penalty():
    """DDP and FSDP2 hooks measured at world size 1 on the H200 (docs/measurements/
    h200-2026-12-04-wrappers.json): their per-layer host time is set from the host-bound rows
    (batch 1 × 128); the GPU-bound rows (8 × 1024) are held out. There the hooks cost time only
    where a layer's host work outgrows its GPU work: measured +1.5 ms (DDP, find-unused) and
    +15.1 ms (FSDP2) per step, predicted within ×/÷2 and in the right order; the whole wrapped
    step (61.5 / 75.1 ms measured) within 20 %."""
    import json

    from joulebound.jobs.heldout import HF_GRID

    data = json.loads(HF_GRID.with_name("h200-2026-12-04-wrappers.json").read_text())
    meas = {(r["kind"], r["batch"]): r["step_s"] for r in data["rows"] if "step_s" in r}
    prm = load_params()
    fw = {**prm.frameworks, "hf": {**prm.frameworks["hf"], "host_s": 47.4e-6}}  # that run's host
    prm = replace(prm, frameworks=fw)
    base = Job(layers=12, hidden=768, heads=12, seq=1024, arch="gpt", vocab=50257, batch=8,
               dtype="bf16", device="h200-sxm", interconnect="nvlink4")
    one = predict_jobs([base], prm)[0].time_s
    added = {}
    for kind, strategy in (("ddp-find-unused", "ddp"), ("fsdp2", "fsdp")):
        t = predict_jobs([replace(base, gpus=2, strategy=strategy)], prm)[0]
        added[kind] = t.time_s - one  # hooks + NVLink collectives (world size 1 had a 1-rank NCCL)
        m = meas[(kind, 8)] - meas[("bare", 8)]
        assert m / 2 <= added[kind] <= 2 * m, (kind, added[kind], m)
        assert abs(t.time_s / meas[(kind, 8)] - 1) <= 0.2, (kind, t.time_s, meas[(kind, 8)])
    assert added["fsdp2"] > 5 * added["ddp-find-unused"]


def test_megatron_only_switches_imply_the_megatron_framework_unless_told():
    kw = dict(arch="gpt", layers=4, hidden=1024, heads=16, seq=512, batch=2, gpus=4, tp=2,
              device="h100-sxm")
    assert resolve(Job(**kw)).framework == "hf"  # the default
    r = resolve(Job(**kw, sequence_parallel=True))
    assert r.framework == "megatron" and any("framework megatron assumed" in w for w in r.warnings)
    told = resolve(Job(**kw, sequence_parallel=True, framework="hf"))
    assert told.framework == "hf" and not any("assumed" in w for w in told.warnings)
    assert resolve(Job(**{**kw, "dtype": "fp8"})).framework == "megatron"
