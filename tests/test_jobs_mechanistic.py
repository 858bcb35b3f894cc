"""The mechanistic predictor: its parts against the GPU model, its free parameters' effects, its
intervals, host term and batch API."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from joulebound.core.clocks import ClockConfig
from joulebound.gpumodel import characterize
from joulebound.jobs.job import Job, resolve
from joulebound.jobs.mechanistic import (
    MechParams,
    compose,
    fabric_for,
    interval,
    load_params,
    predict_jobs,
    predict_many,
    work_keys,
)
from joulebound.jobs.stepcost import characterize_parts
from joulebound.workload.analytic import ModelConfig, build_trace

IDEAL = MechParams(kappa=1.0, launch_s=1e-12, step_s=0.0, wait_ratio=1.0)


@pytest.mark.parametrize("arch, L, d, h, dtype, rec", [("bert", 12, 768, 12, "tf32", False),
                                                       ("gpt", 6, 512, 8, "bf16", True)])
def test_one_layer_parts_reproduce_the_full_trace_on_the_gpu_model(arch, L, d, h, dtype, rec):
    job = Job(arch=arch, layers=L, hidden=d, heads=h, seq=256, batch=4, dtype=dtype, recompute=rec,
              device="a40", flash_attention=False)  # the full trace is the eager attention
    r = resolve(job)
    parts = characterize_parts([work_keys(r)])[work_keys(r)]
    st = compose(r, parts, IDEAL, fabric_for(r))
    cfg = ModelConfig(arch, L, d, h, 4 * d, r.vocab, 256, 4, dtype, rec)
    ch = characterize(build_trace(cfg, llmc_kernels=False), "a40", configs=[ClockConfig()],
                      include_auto=False)
    assert st.time_s == pytest.approx(ch.time_s.sum(), rel=1e-9)
    # energy: the further layers' AdamW kernel overheads are charged at the step's average power
    assert st.gpu_energy_j == pytest.approx(ch.energy_j.sum(), rel=1e-3)
    assert r.params == cfg.params()


def test_framework_factor_launch_floor_and_step_overhead_act_as_documented():
    job = Job(layers=12, hidden=768, heads=12, seq=512, batch=8, dtype="bf16", device="a40")
    r = resolve(job)
    pa = characterize_parts([work_keys(r)])[work_keys(r)]
    fb = fabric_for(r)
    a = compose(r, pa, IDEAL, fb)
    b = compose(r, pa, replace(IDEAL, kappa=2.0), fb)
    assert b.time_s == pytest.approx(2 * a.time_s, rel=1e-9)
    assert b.busy_energy_j == pytest.approx(2 * a.busy_energy_j, rel=1e-9)
    c = compose(r, pa, replace(IDEAL, step_s=0.05, wait_ratio=2.0), fb)
    assert c.time_s == pytest.approx(a.time_s + 0.05, rel=1e-9)
    assert c.gpu_energy_j - a.gpu_energy_j == pytest.approx(0.05 * 2.0 * pa.idle_w, rel=1e-6)
    # a launch floor longer than every kernel: each kernel costs exactly the floor
    n_k = sum(len(pa.t[p]) * (12 if p.startswith("layer") else 1) for p in pa.t)
    d = compose(r, pa, replace(IDEAL, launch_s=1.0), fb)
    assert d.time_s == pytest.approx(n_k * 1.0 + 12 + 3, rel=1e-6)  # + optimizer: L + 3 kernels
    assert d.overhead_s > 0.99 * d.time_s


def test_tensor_parallel_shards_split_gemms_but_not_layernorms():
    base = Job(layers=12, hidden=1024, heads=16, seq=512, batch=8, dtype="bf16", device="a100-sxm4-80gb")
    k1 = work_keys(resolve(base))
    k4 = work_keys(resolve(replace(base, gpus=4, strategy="tp")))
    parts = characterize_parts([k1, k4])
    t1 = parts[k1].sum_t("layer_f") + parts[k1].sum_t("layer_b")
    t4 = parts[k4].sum_t("layer_f") + parts[k4].sum_t("layer_b")
    assert t1 / 4 < t4 < t1 / 2


def test_power_limit_and_locked_clocks_slow_the_step_and_cut_power():
    job = Job(layers=24, hidden=1024, heads=16, seq=512, batch=16, dtype="bf16", device="a40",
              tokens=1e8)
    top, low, slow = predict_jobs([job, replace(job, power_limit_w=150.0), replace(job, clocks="900")])
    assert low.time_s > top.time_s and slow.time_s > top.time_s
    assert low.gpu_energy_j / low.time_s < top.gpu_energy_j / top.time_s
    with pytest.raises(Exception, match="outside a40's range"):
        predict_jobs([replace(job, power_limit_w=50.0)])


def test_host_energy_is_a_separate_labeled_term():
    prm = load_params()
    p = predict_jobs([Job(layers=12, hidden=768, heads=12, seq=512, batch=8, gpus=4, strategy="ddp",
                          device="a40", dtype="bf16", tokens=1e8)])[0]
    assert p.host_energy_j == pytest.approx(prm.host.total_w * 4 * p.time_s, rel=1e-9)
    assert p.total_energy_j == pytest.approx(p.gpu_energy_j + p.host_energy_j)
    assert "NVML" in p.covers and "CPU package + DRAM" in p.covers
    assert p.provenance == "modeled"
    assert p.time_lo_s < p.time_s < p.time_hi_s and p.gpu_energy_lo_j < p.gpu_energy_j < p.gpu_energy_hi_j


def test_interval_widens_with_distance_from_the_calibration_domain_and_says_why():
    prm = load_params()
    seen = prm.devices_seen[0]
    unseen = next(d for d in ("h100-sxm", "b200", "t4") if d not in prm.devices_seen)

    def width(job: Job, p=prm) -> tuple[float, list[str]]:
        r = resolve(job)
        pa = characterize_parts([work_keys(r)])[work_keys(r)]
        st = compose(r, pa, p, fabric_for(r))
        s_t, _, why = interval(r, st, p, pa.key.device)
        return s_t, why

    base = Job(layers=12, hidden=768, heads=12, seq=512, batch=8, dtype="bf16", device=seen)
    w0, _ = width(base)
    w_dev, why_dev = width(replace(base, device=unseen))
    assert w_dev > w0 and any(unseen in w and "not in the calibration data" in w for w in why_dev)
    small = replace(base, seq=16, batch=1)               # 16 tokens: far below the data
    w_small, why_small = width(small)
    # the same step, had the calibration data reached down to it: the distance term is what widens
    w_covered, why_covered = width(small, replace(prm, tokens_range=(16, prm.tokens_range[1])))
    assert w_small > w_covered and any("decades" in w for w in why_small)
    assert not any("decades" in w for w in why_covered)
    tp_job = replace(base, gpus=8, strategy="tp", heads=12, hidden=768, batch=8,
                     interconnect="pcie3-nop2p", tp=4)
    w_comm, why_comm = width(tp_job)
    # a mixed step's parts have independent errors, so compare the same step without the
    # communication uncertainty (not another job): the collectives' term widens it, and says so
    w_nocomm, _ = width(tp_job, replace(prm, sigma={**prm.sigma, "comm": 0.0}))
    assert w_comm > w_nocomm and any("communication" in w for w in why_comm)
    w_far, why_far = width(replace(base, gpus=4 * prm.max_gpus_seen, strategy="ddp"))
    assert any("doublings beyond" in w for w in why_far)


def test_predict_many_reports_bad_rows_and_prices_the_rest():
    good = Job(layers=12, hidden=768, heads=12, seq=128, batch=8, device="a40", tokens=1e7)
    out = predict_many([good, replace(good, heads=7), None, replace(good, device="rtx9090"),
                        replace(good, power_limit_w=9999.0), replace(good, gpus=2, strategy="ddp")])
    assert not isinstance(out[0], str) and not isinstance(out[5], str)
    assert "does not divide" in out[1] and out[2] == ""
    assert "unknown GPU 'rtx9090'" in out[3] and "outside a40's range" in out[4]


def test_oom_job_is_refused_unless_allowed():
    big = Job(arch="gpt", layers=24, hidden=2048, heads=16, seq=1024, batch=8, dtype="bf16",
              device="rtx2080ti")
    with pytest.raises(Exception, match="needs ~.* GiB per GPU .* use --recompute"):
        predict_jobs([big], allow_oom=False)
    p = predict_jobs([big], allow_oom=True)[0]
    assert not p.fits_memory and any("does not fit in GPU memory" in w for w in p.warnings)
    ok = predict_jobs([replace(big, gpus=8, strategy="fsdp", batch=1, recompute=True)], allow_oom=False)[0]
    assert ok.fits_memory


def test_shipped_calibration_is_labelled_and_complete():
    prm = load_params()
    assert prm.provenance["calibration"] == "fit"
    for k in ("kappa", "launch_s", "step_s", "wait_ratio", "host", "comm_eff_scale"):
        assert k in prm.provenance["constrains"]
    assert 0.3 < prm.kappa < 10 and 1.0 <= prm.wait_ratio < 6
    assert set(prm.provenance["rows"]) == {"mayaki_ecai2025", "zeus_nsdi23", "perseus", "vtrain"}
    assert np.isfinite(list(prm.sigma.values())).all()


def test_user_calibration_from_a_sweep_store_round_trips(tmp_path, capsys):
    """fit --law mechanistic --save on the user's own GPU sweep: κ fitted on their framework, no
    between-framework term in the interval, and predict --coefficients uses it."""
    import json

    from joulebound.cli import main
    from tests.test_jobs_data import _sweep_db

    db = tmp_path / "runs.db"
    _sweep_db(db, energy=True)
    cal = tmp_path / "cal.json"
    assert main(["fit", "--data", str(db), "--law", "mechanistic", "--save", str(cal), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    mech = out["mechanistic"]
    assert mech["rows"] == 5 and out["datasets"] == []  # --law mechanistic: no legacy tables
    assert len(mech["skipped"]) == 1 and "must divide the 2 attention heads" in mech["skipped"][0]
    saved = json.loads(cal.read_text())
    assert saved["sigma"]["framework_between"] == 0.0 and saved["provenance"]["data"] == str(db)
    assert saved["devices_seen"] == ["rtx2080ti"] and "ddp" in saved["strategies_seen"]
    args = ["predict", "--layers", "2", "--hidden", "128", "--heads", "2", "--seq", "64", "--batch", "16",
            "--device", "rtx2080ti", "--json"]
    assert main([*args, "--coefficients", str(cal)]) == 0
    own = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    builtin = json.loads(capsys.readouterr().out)
    assert own["params"]["kappa"] == pytest.approx(saved["kappa"])
    assert builtin["params"]["kappa"] != own["params"]["kappa"] and builtin["params"]["framework"] == "hf"
    # no between-framework spread in the user's own κ (the synthetic steps — 1 s for a 2-layer,
    # 128-wide model — pin κ and the host at their bounds, so the total width is not compared)
    assert saved["frameworks"]["hf"]["sigma_compute"] < load_params().frameworks["hf"]["sigma_compute"]
    assert saved["frameworks"]["hf"]["host_source"] == "fitted on sweep"  # their host, not ours
