"""The communication model against hand-computed message sizes and times (2- and 8-GPU cases),
and the sign of "more GPUs -> more energy per token" for a communication-bound job.

The per-GPU compute is a hand-made :class:`Parts` (1 ms per layer forward, 2 ms backward, no
optimizer), so every expected time below is arithmetic on the link figures of PCIe 4.0 x16
(31.5 GB/s per direction × NCCL efficiency 0.8, 8 µs per step: a datasheet link, which the
measured NCCL tables do not cover) written out in the test, plus the launch cost of each
collective ``LAUNCH`` (the median launch cost fitted on the measured tables, 4–8 µs). FSDP's and
DDP's hooks are host work, measured, in the predictor's host bound (tests/test_jobs_frameworks.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from joulebound.hw.nccl import default_launch_s
from joulebound.jobs.collectives import (
    Fabric,
    allgather,
    allreduce,
    reduce_scatter,
    sendrecv,
)
from joulebound.jobs.job import Job, resolve
from joulebound.jobs.mechanistic import MechParams, compose, predict_jobs
from joulebound.jobs.stepcost import Parts, WorkKey

B = 31.5e9 * 0.8  # PCIe 4.0 effective bandwidth, bytes/s
A = 8e-6  # PCIe 4.0 per-step latency, s
LAUNCH = default_launch_s()  # host + launch cost per collective, s (fitted)
L, D, FF, V, S, MB = 12, 1024, 4096, 30522, 512, 8
P_LAYER = 4 * D * D + 2 * D * FF + 9 * D + FF  # 12,596,224 weights + biases + LayerNorms
P_EMB = V * D + 512 * D + D * D + 7 * D + V  # BERT embeddings, type/LN, MLM transform, decoder bias
P = L * P_LAYER + P_EMB  # 184,019,770


def _parts(lf=1e-3, lb=2e-3, pre=(0.0, 0.0), post=(0.0, 0.0)) -> Parts:
    one = lambda x: np.array([x])  # noqa: E731
    t = {"layer_f": one(lf), "layer_b": one(lb), "pre_f": one(pre[0]), "pre_b": one(pre[1]),
         "post_f": one(post[0]), "post_b": one(post[1])}
    key = WorkKey("bert", D, 16, FF, V, S, MB, "bf16", False, 1, "a100-pcie-80gb", "auto", None)
    return Parts(key, t, {k: v * 100.0 for k, v in t.items()}, (0.0, 0.0), (0.0, 0.0), idle_w=50.0,
                 power_limit_w=300.0, device_memory=80 * 2**30)


#: the ideal framework (no host bound, no overlap slowdown): the arithmetic below is the links'
PRM = MechParams(kappa=1.0, launch_s=1e-12, step_s=0.0, wait_ratio=1.0, overlap_slowdown=0.0)
FAB = Fabric.make("pcie4", "ib-hdr", gpus_per_node=8)


def _step(strategy: str, gpus: int, fabric: Fabric = FAB, parts: Parts | None = None, **kw):
    r = resolve(Job(layers=L, hidden=D, heads=16, seq=S, ff=FF, vocab=V, batch=MB, dtype="bf16",
                    gpus=gpus, strategy=strategy, **kw))
    return r, compose(r, parts or _parts(), PRM, fabric)


def test_parameter_count_is_the_hand_count():
    r, _ = _step("single", 1)
    assert P == 184_019_770 and r.params == P


def test_launch_cost_is_the_fitted_few_microseconds():
    assert 4e-6 <= LAUNCH <= 8e-6
    fab = Fabric.make("pcie4", "ib-hdr")
    assert not fab.fitted() and fab.collective("all_reduce", 1e8, 8) == pytest.approx(
        LAUNCH + allreduce(1e8, 8, B, A))


def test_collective_formulas_by_hand():
    s = 1e8
    assert allreduce(s, 2, B, A) == pytest.approx(s / B + 2 * A)  # ring: 2·(1/2)·S/B + 2α
    assert allreduce(s, 8, B, A) == pytest.approx(2 * 7 / 8 * s / B + 14 * A)  # ring beats tree
    small = 1e3  # tree (2·S/B + 2·log2(8)·α) beats ring (… + 14α) for tiny messages
    assert allreduce(small, 8, B, A) == pytest.approx(2 * small / B + 6 * A)
    assert allgather(s, 8, B, A) == pytest.approx(7 / 8 * s / B + 7 * A)
    assert reduce_scatter(s, 2, B, A) == pytest.approx(0.5 * s / B + A)
    assert sendrecv(s, B, A) == pytest.approx(s / B + A)
    assert allreduce(s, 1, B, A) == 0.0


@pytest.mark.parametrize("gpus", [2, 8])
def test_ddp_bucketed_allreduce_overlapped_with_backward(gpus):
    _, st = _step("ddp", gpus)
    g = P * 4  # AMP + DDP reduce fp32 gradients
    nb = math.ceil(g / (25 * 2**20))
    assert nb == 29  # 736,079,080 B / 26,214,400 B = 28.1
    bucket = g / nb
    c = LAUNCH + 2 * (gpus - 1) / gpus * bucket / B + 2 * (gpus - 1) * A
    t_ar = nb * c
    b_last = L * 2e-3  # backward of the last micro-batch
    # the embeddings' fp32 gradients (their own bucket, ready last) cannot overlap the backward
    last = LAUNCH + allreduce(P_EMB * 4, gpus, B, A)
    exposed = max(c, t_ar - b_last * (nb - 1) / nb, max(t_ar - last - b_last, 0.0) + last)
    old = max(c, t_ar - b_last * (nb - 1) / nb)  # buckets evenly ready (the old rule)
    assert exposed >= max(last, old)  # the embeddings' all-reduce waits for the backward
    assert st.comm_detail["dp_grad_bytes"] == pytest.approx(g)
    assert st.comm_detail["dp_allreduce_s"] == pytest.approx(t_ar, rel=1e-9)
    assert st.comm_s == pytest.approx(exposed, rel=1e-9)
    assert st.time_s == pytest.approx(L * 3e-3 + exposed, rel=1e-9)
    assert c <= st.comm_s < t_ar  # the backward hides part of the all-reduce


def test_ddp_across_two_nodes_uses_the_node_nic():
    fab = Fabric.make("pcie4", "ib-hdr", gpus_per_node=4)
    bw, lat, spans = fab.group(8, 1)
    assert spans and bw == pytest.approx(min(B, 200e9 / 8 * 0.9)) and lat == pytest.approx(A)
    bw_tp, _, spans_tp = fab.group(4, 1)
    assert not spans_tp and bw_tp == pytest.approx(B)
    # tensor parallel 4 inside the node, data parallel 2 across: 4 rings share one NIC
    bw_dp, _, _ = fab.group(2, 4)
    assert bw_dp == pytest.approx(200e9 / 8 * 0.9 / 4)


@pytest.mark.parametrize("gpus", [2, 8])
def test_fsdp_allgather_reduce_scatter_per_layer_with_prefetch(gpus):
    _, st = _step("fsdp", gpus)
    n = gpus
    lay, emb = P_LAYER * 2, P_EMB * 2  # bf16 parameters and gradients
    ag = LAUNCH + (n - 1) / n * lay / B + (n - 1) * A
    rs = ag
    ag_r = rs_r = LAUNCH + (n - 1) / n * emb / B + (n - 1) * A
    fwd = ag_r + ag + (L - 1) * max(0.0, ag - 1e-3)  # layer i+1's gather hides behind layer i
    bwd = (L - 1) * max(0.0, ag + rs - 2e-3) + rs + rs_r
    assert st.comm_detail["fsdp_layer_bytes"] == pytest.approx(lay)
    assert st.comm_detail["fsdp_allgather_layer_s"] == pytest.approx(ag, rel=1e-9)
    assert st.comm_s == pytest.approx(fwd + bwd, rel=1e-9)


@pytest.mark.parametrize("gpus", [2, 8])
def test_megatron_tp_two_allreduces_per_layer_on_the_critical_path(gpus):
    _, st = _step("tp", gpus)
    act = MB * S * D * 2  # b·S·d bf16 activations
    ar = LAUNCH + 2 * (gpus - 1) / gpus * act / B + 2 * (gpus - 1) * A
    small = LAUNCH + min(2 * (gpus - 1) / gpus * MB * S * 4 / B + 2 * (gpus - 1) * A,
                         2 * MB * S * 4 / B + 2 * math.ceil(math.log2(gpus)) * A)
    expect = L * 4 * ar + ar + (ar + 3 * small)  # 2 fwd + 2 bwd per layer, embedding, head + loss
    assert st.comm_detail["tp_allreduce_bytes"] == act
    assert st.comm_detail["tp_allreduce_s"] == pytest.approx(ar, rel=1e-9)
    assert st.comm_s == pytest.approx(expect, rel=1e-9)
    assert st.time_s == pytest.approx(L * 3e-3 + expect, rel=1e-9)  # compute as given (not split)


def test_tp_recompute_adds_two_allreduces_per_layer():
    _, a = _step("tp", 2)
    _, b = _step("tp", 2, recompute=True)
    assert b.comm_s - a.comm_s == pytest.approx(L * 2 * a.comm_detail["tp_allreduce_s"], rel=1e-9)


@pytest.mark.parametrize("gpus, m", [(2, 8), (8, 32)])
def test_pipeline_1f1b_bubble_and_point_to_point(gpus, m):
    parts = _parts(post=(1e-3, 2e-3))
    r, st = _step("pp", gpus, parts=parts)
    assert r.grad_accum == m  # 4·pp micro-batches assumed (and said in the warnings)
    assert any("micro-batches per step assumed" in w for w in r.warnings)
    p2p = LAUNCH + MB * S * D * 2 / B + A
    stages = r.stages
    assert sum(stages) == L and len(stages) == gpus
    fb = [ell * 3e-3 + (3e-3 if s == gpus - 1 else 0.0) for s, ell in enumerate(stages)]
    bott = max(fb) + 2 * p2p
    pipe = sum(fb) + (m - 1) * bott + 2 * (gpus - 1) * p2p
    assert st.comm_detail["pp_p2p_s"] == pytest.approx(p2p, rel=1e-9)
    assert st.time_s == pytest.approx(pipe, rel=1e-9)
    assert st.bubble_s == pytest.approx(pipe - m * bott, rel=1e-9)
    # waiting stages draw the waiting power: energy = busy + P_wait·(T − busy) per GPU
    busy_t = [m * x for x in fb]
    busy_e = sum(m * 100.0 * x for x in fb)
    wait_e = sum(50.0 * (st.time_s - b) for b in busy_t)
    assert st.gpu_energy_j == pytest.approx(busy_e + wait_e, rel=1e-9)


def test_more_gpus_cost_more_energy_per_token_when_communication_bound():
    """BERT-large, 1 sequence of 128 tokens per GPU, fp32, RTX 3090s on PCIe without P2P: the
    1.3 GB gradient all-reduce dwarfs the compute, so every added GPU adds energy per token."""
    base = dict(layers=24, hidden=1024, heads=16, seq=128, batch=1, dtype="fp32", device="rtx3090",
                tokens=1e8)
    jobs = [Job(**base)] + [Job(**base, gpus=n, strategy="ddp") for n in (2, 4, 8)]
    preds = predict_jobs(jobs)
    ept = [p.energy_per_token_j for p in preds]
    assert np.all(np.diff(ept) > 0), ept
    assert preds[-1].step["comm_s"] > 0.5 * preds[-1].step["time_s"]
    assert any("communication-bound" in w for w in preds[-1].warnings)



def test_tensor_parallelism_over_pcie_without_p2p_is_a_slowdown_for_a_narrow_model():
    """d = 256, 2k tokens per step: the 4 activation all-reduces per layer (∝ T·d) outweigh the
    split compute (∝ T·d²), and TP does not shorten the host-bound launches of small kernels."""
    base = dict(layers=12, hidden=256, heads=8, seq=128, batch=16, vocab=8000, dtype="bf16",
                device="rtx3090", tokens=1e8)
    one, tp = predict_jobs([Job(**base), Job(**base, gpus=4, strategy="tp")])
    assert tp.time_s > one.time_s
    assert tp.energy_per_token_j > 2 * one.energy_per_token_j
    nv = predict_jobs([Job(**base, gpus=4, strategy="tp", interconnect="nvlink3")])[0]
    assert nv.step["comm_s"] < tp.step["comm_s"] / 5  # the link, not the model, is the cost


def test_compute_bound_job_scales_nearly_linearly_on_nvlink():
    base = dict(layers=24, hidden=2048, heads=16, seq=1024, batch=8, dtype="bf16",
                device="a100-sxm4-80gb", tokens=1e9)
    one, eight = predict_jobs([Job(**base), Job(**base, gpus=8, strategy="ddp")])
    assert 7.0 < one.time_s / eight.time_s <= 8.0
    assert eight.energy_per_token_j < 1.1 * one.energy_per_token_j


def test_fsdp_per_unit_host_cost_weighs_most_on_a_small_model():
    """FSDP's hooks cost the same host time per layer whatever the layer's size (measured,
    workload.dispatch): on a narrow model (short layers) the host bounds the layer and the hooks
    are a visible share of the step; on a wide one the GPU's work hides them."""
    base = dict(layers=12, heads=8, seq=256, batch=8, vocab=8000, dtype="bf16", device="rtx3090",
                tokens=1e8, gpus=4, strategy="fsdp")
    small, wide = predict_jobs([Job(hidden=256, **base), Job(hidden=2048, **base)])
    share = [p.step["wrapper_s"] / p.step["time_s"] for p in (small, wide)]
    assert share[0] > 0.2 and share[0] > 3 * share[1]
