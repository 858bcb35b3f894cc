"""The kernel-level GPU model grounded in real data: per-kernel fits, memory clocks, the governor.

Real-data checks (``shared_data``) pin the calibrated model's errors with stated tolerances, and
*mutation* checks show that each piece of physics the issue asked to ground is needed: a test
below fails when the core/memory time split, the GEMM DRAM-traffic model or the governor model
is changed back to what the model used before (each was run against those mutations).
"""

from __future__ import annotations

import numpy as np
import pytest

from joulebound.core.clocks import ClockConfig
from joulebound.gpumodel import characterize, load_shipped, params_for
from joulebound.gpumodel.characterize import dram_bytes, governor_core_mhz, resolve_clocks
from joulebound.gpumodel.params import DeviceParams
from joulebound.hw.catalog import get_device
from joulebound.hw.memory import tested_clocks as clocks_measured
from joulebound.workload.analytic import build_trace

# --- plumbing without data ------------------------------------------------------------------


def test_memory_clocks_tested_per_technology():
    ti = get_device("rtx3080ti")
    assert ti.memory_type == "GDDR6X"
    p = params_for(ti)
    assert clocks_measured(ti.mem_clocks_mhz, ti.max_mem_mhz, p.tested_mem_fracs) == [9501, 9251,
                                                                                    5001]
    # another GDDR6X card: the same clock fractions count as tested
    r90 = get_device("rtx3090")
    assert clocks_measured(r90.mem_clocks_mhz, r90.max_mem_mhz,
                         params_for(r90).tested_mem_fracs) == [9751, 9501, 5001]
    # GDDR6 (A10G): only the top clock was ever measured
    a10 = get_device("a10g")
    assert clocks_measured(a10.mem_clocks_mhz, a10.max_mem_mhz,
                         params_for(a10).tested_mem_fracs) == [a10.max_mem_mhz]


def test_governor_ceiling_and_pairing_rules():
    spec = get_device("rtx3080ti")
    p = params_for(spec)
    assert p.auto_core_mhz is not None and p.auto_core_mhz < spec.max_core_mhz
    rc = resolve_clocks(spec, [ClockConfig(), ClockConfig(None, 5001), ClockConfig(1050, None)], p)
    assert rc.core_mhz[0] == pytest.approx(p.auto_core_mhz)
    assert list(rc.core_auto) == [True, True, False] and list(rc.mem_auto) == [True, False, True]
    # the 405 MHz memory clock pairs only with core clocks up to 420 MHz: the governor stays there
    assert governor_core_mhz(spec, p, 405) <= 420
    with pytest.raises(Exception, match="not supported"):
        resolve_clocks(spec, [ClockConfig(1500, 405)], p)


def test_gemm_dram_traffic_includes_tile_rereads():
    tr = build_trace("gpt2-small", batch=2)
    p = params_for(get_device("rtx3080ti"))
    b = dram_bytes(tr, p)
    for i, k in enumerate(tr.kernels):
        if k.category in ("gemm", "attention"):
            assert b[i] == pytest.approx(k.bytes + 2 * k.flops / p.gemm_tile)
        else:
            assert b[i] == k.bytes
    zero = p.set({"gemm_tile": 0.0})
    np.testing.assert_array_equal(dram_bytes(tr, zero), tr.bytes())


def test_params_paths_round_trip_and_v1_files_load():
    p = load_shipped("rtx3080ti")
    q = p.set({"compute_eff.gemm": 0.5, "vf.knee_mhz": 1000.0, "mem_v.0": 0.7, "bw_eff.*": 0.6})
    assert q.get("compute_eff.gemm") == 0.5 and q.vf.knee_mhz == 1000.0
    assert q.get("mem_v.0") == 0.7 and all(v == 0.6 for v in q.bw_eff.values())
    assert DeviceParams.from_json(p.to_json()) == p
    v1 = {k: v for k, v in p.to_json().items() if k not in ("mem_v", "tested_mem_fracs", "draws",
                                                             "auto_core_mhz", "auto_mem_eff",
                                                             "auto_power_frac", "memory_type",
                                                             "gemm_tile")}
    v1.update(version=1, bw_eff=0.8, core_mem_frac=0.2, mem_low_v=0.5, mem_low_frac=0.35)
    old = DeviceParams.from_json(v1)
    assert old.lam("gemm") == 0.2 and old.gemm_tile == 0.0
    newer = dict(p.to_json(), version=99)
    with pytest.raises(Exception, match="newer"):
        DeviceParams.from_json(newer)


def test_every_shipped_parameter_is_sourced_or_listed_as_default():
    for name in ("a100-sxm4-80gb", "a40", "a100-pcie-80gb", "rtx3080ti"):
        p = load_shipped(name)
        assert p.draws and len(p.draws) >= 10, name
        assert p.heldout.get("time_mape") is not None, name
        named = set(p.sources)
        for d in p.defaulted():
            assert d not in named
    ti = load_shipped("rtx3080ti")
    assert ti.calibration == "published"
    assert "Spaan" in ti.sources["auto_core_mhz"] and "Table 1" in ti.sources["gemm_tile"]
    # the RTX 3080 Ti no longer borrows the A40's stage-level error as its held-out figure
    assert ti.heldout["check"] == "spaan-table1"


def test_plan_intervals_come_from_draws():
    from joulebound.planning.study import run_study
    from joulebound.planning.uncertainty import study_intervals

    spec = get_device("rtx3080ti")
    tr = build_trace("gpt2-small", batch=2, layers=2)
    ch = characterize(tr, spec)
    st = run_study(tr, ch, granularities=["pass", "kernel"], slowdowns=[0.0], frontier=False)
    ivs = study_intervals(st, tr, spec, params_for(spec), n_draws=6)
    for r in st.rows:
        iv = ivs[r.label]
        assert iv.n_draws == 6 and iv.energy_lo <= iv.energy_hi
        assert iv.replan_energy_lo is not None and iv.replan_energy_lo <= iv.replan_energy_hi
    # a draw-free parameter set yields no interval (defaults are not calibrated)
    from joulebound.gpumodel import default_params

    assert study_intervals(st, tr, spec, default_params(spec), n_draws=6) == {}


# --- real data --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spaan_setup(shared_data):
    from research import spaan

    return spaan.setup(shared_data)


def _table_errors(su, params) -> tuple[float, float]:
    from research import spaan

    dt, de = spaan.row_deltas(su, params)
    mt = np.array([r.time_delta_pct for r in su.rows])
    me = np.array([r.energy_delta_pct for r in su.rows])
    return float(np.mean(np.abs(dt - mt))), float(np.mean(np.abs(de - me)))


#: in-sample tolerance on Spaan et al.'s Table 1: mean |modeled - published| Δ per row, in
#: percentage points (shipped: 1.46 / 2.96; validate's leave-one-row-out row is the held-out one)
TABLE_TOL_T, TABLE_TOL_E = 1.8, 3.3


def test_rtx3080ti_reproduces_table1_rows(spaan_setup):
    t, e = _table_errors(spaan_setup, load_shipped("rtx3080ti"))
    assert t <= TABLE_TOL_T and e <= TABLE_TOL_E


def test_streaming_kernels_ignore_the_core_clock(spaan_setup):
    """GELU at 630 MHz core: +0.03 % time measured. The old uniform 20 % core share of memory
    time predicts over +10 %; the calibrated model stays within 3 points (+2.3 %: its GELU
    feels its 8 FLOP per element and the memory-level-parallelism knee's smooth corner at 630
    MHz; the paper's choice, 630 MHz, is one step from the model's, 840)."""
    from research import spaan

    p = load_shipped("rtx3080ti")
    gelu = next(i for i, r in enumerate(spaan_setup.rows) if r.kernel == "GELU")
    dt, _ = spaan.row_deltas(spaan_setup, p)
    assert abs(dt[gelu] - 0.03) < 3.0
    old = p.set({"core_mem_frac.*": 0.2})
    dt_old, _ = spaan.row_deltas(spaan_setup, old)
    assert dt_old[gelu] > 10.0
    assert _table_errors(spaan_setup, old)[0] > TABLE_TOL_T


def test_the_governors_inefficiency_is_needed(spaan_setup):
    """Modeling auto as locked clocks (no governor inefficiency: the memory governor's speed and
    extra memory power, the core governor's extra power) misses the rows: locking the memory at
    9251 MHz alone saved 5-8 % of a kernel's energy in the paper's table."""
    p = load_shipped("rtx3080ti")
    plain = p.set({"auto_mem_eff": 1.0, "auto_power_frac": 0.0, "auto_mem_power_frac": 0.0})
    t, e = _table_errors(spaan_setup, plain)
    assert t > TABLE_TOL_T or e > TABLE_TOL_E


def test_low_memory_clocks_are_never_best_for_the_forward_pass(spaan_setup):
    """Spaan et al.: 405 and 810 MHz 'never yield the best score' at pass level; the calibrated
    model (planning them anyway, --allow-untested-clocks) agrees for the forward pass."""
    spec = spaan_setup.spec
    tr = spaan_setup.pass_trace
    w = spaan_setup.pass_counts * np.array([k.phase == "forward" for k in tr.kernels])
    ch = characterize(tr, spec, params=load_shipped("rtx3080ti"), allow_untested=True)
    assert any(c.mem_mhz == 810 for c in ch.configs)
    T, E = w @ ch.time_s, w @ ch.energy_j
    ok = T <= 1.01 * T[ch.auto_index]
    j = int(np.flatnonzero(ok)[np.argmin(E[ok])])
    assert (ch.configs[j].mem_mhz or spec.max_mem_mhz) >= 5001


#: the shipped kernel-level fits on the stage profiles' held-out clocks, time / energy MAPE %
#: (shipped: A100-SXM 1.00 / 1.66, A40 2.88 / 2.88)
PERSEUS_TOL = {"a100_sxm": (1.5, 2.5), "a40": (3.2, 3.2)}


def _perseus_errors(shared_data, gpu: str, params) -> tuple[float, float]:
    from research import perseus_kernel as pk
    from research.result import mape

    ss = pk.stage_set(shared_data, gpu)
    rows, t, e = pk.predict_heldout(ss, params, pk.MODELS)
    return mape(t, ss.sd.time[rows]), mape(e, ss.sd.energy[rows])


def test_perseus_kernel_model_held_out_clocks(shared_data):
    """Series scaled on their 3 calibration clocks, every other clock predicted; validate's
    held-out-*model* figures are in docs/validation.md."""
    for gpu, dev in (("a100_sxm", "a100-sxm4-80gb"), ("a40", "a40")):
        t, e = _perseus_errors(shared_data, gpu, load_shipped(dev))
        assert t <= PERSEUS_TOL[gpu][0] and e <= PERSEUS_TOL[gpu][1], gpu


def test_gemm_dram_traffic_is_needed(shared_data):
    """GEMM DRAM traffic as compulsory bytes only (the old model) breaks the A40 stage shape
    (time 2.9 -> 5.8 %, energy 2.9 -> 5.5 %) and the A100-SXM energy (1.7 -> 3.5 %)."""
    p = load_shipped("a40").set({"gemm_tile": 0.0})
    t, e = _perseus_errors(shared_data, "a40", p)
    assert t > PERSEUS_TOL["a40"][0] and e > PERSEUS_TOL["a40"][1]
    q = load_shipped("a100-sxm4-80gb").set({"gemm_tile": 0.0})
    assert _perseus_errors(shared_data, "a100_sxm", q)[1] > PERSEUS_TOL["a100_sxm"][1]


def test_perseus_held_out_model_a100(shared_data):
    """Fit the kernel model on BLOOM's stages only, predict GPT-3's held-out clocks."""
    from research import perseus_kernel as pk
    from research.result import mape

    ss = pk.stage_set(shared_data, "a100_sxm")
    fit = pk.fit(ss, ["bloom"])
    rows, t, e = pk.predict_heldout(ss, fit.params, ["gpt3-175b"])
    assert mape(t, ss.sd.time[rows]) <= 2.0 and mape(e, ss.sd.energy[rows]) <= 3.0


def test_gpuptx_memory_clock_dimension(shared_data):
    """GTX Titan X (GDDR5): device parameters fitted on every other microbenchmark, each
    application calibrated on 3 pairs and predicted at the other 29 — time and power MAPE
    within 5 %; the same protocol with the memory-time share of the core clock forced to the old
    0.2 for all kernels... is worse."""
    from research import gpuptx
    from research.result import mape

    root = shared_data / "gpuptxmodel"
    micro = gpuptx.load(root / "micro_gtxtitanx.csv")
    apps = gpuptx.load(root / "real_gtxtitanx.csv")
    sub = gpuptx.Blocks(micro.names[::2], micro.mem[::2], micro.core[::2], micro.time[::2],
                        micro.power[::2])
    prm, _ = gpuptx.fit_device(sub)
    ho = gpuptx.heldout_mask(apps)
    t, p = gpuptx.predict_apps(prm, apps, gpuptx.fit_apps(prm, apps))
    assert mape(t[ho], apps.time[ho]) <= 5.0 and mape(p[ho], apps.power[ho]) <= 5.0
    # mutate the core/memory time split: all memory time on the DRAM clock's *core* side
    bad = prm.set({"core_mem_frac.other": 0.6})
    tb, _ = gpuptx.predict_apps(bad, apps, gpuptx.fit_apps(bad, apps))
    assert mape(tb[ho], apps.time[ho]) > mape(t[ho], apps.time[ho]) + 1.0


# --- CLI ------------------------------------------------------------------------------------


def test_characterize_csv_json_interval_and_sensitivity(tmp_path, capsys):
    import csv
    import json

    from joulebound.cli import main

    out = tmp_path / "c.csv"
    assert main(["characterize", "gpt2-small", "--device", "rtx3080ti", "--batch", "1",
                 "--csv", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["untested_mem_mhz_excluded"] == [810, 405]
    assert doc["best_energy_delta_lo"] <= doc["best_energy_delta"] + 1e-9 or \
        doc["best_energy_delta_lo"] <= doc["best_energy_delta_hi"]
    assert set(doc["bytes_sensitivity"]) == {"0.5", "1", "2"}
    assert doc["bytes_sensitivity"]["1"] == pytest.approx(doc["best_energy_delta"], abs=1e-9)
    assert doc["model_heldout_error"]["check"] == "spaan-table1"
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == ["kernel_index", "name", "category", "phase", "layer", "core_mhz",
                             "mem_mhz", "time_s", "energy_j", "provenance"]
    assert len(rows) == doc["n_kernels"] * doc["n_configs"]
    assert rows[0]["core_mhz"] == "auto" and rows[0]["provenance"] == "modeled"
    assert any(r["mem_mhz"] == "5001" and r["core_mhz"] == "auto" for r in rows)
    assert main(["characterize", "gpt2-small", "--device", "rtx3080ti", "--csv",
                 str(tmp_path)]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_devices_show_lists_default_parameters(capsys):
    import json

    from joulebound.cli import main

    assert main(["devices", "show", "a40", "--json"]) == 0
    mp = json.loads(capsys.readouterr().out)["model_params"]
    assert mp["calibration"] == "fit" and mp["n_draws"] >= 10
    assert "compute_eff" in mp["defaulted"] and "vf" not in mp["defaulted"]
    assert mp["params"]["compute_eff"]["source"] == "default"
    assert "Perseus" in mp["params"]["vf"]["source"]
    assert main(["devices", "show", "h100"]) == 0
    text = capsys.readouterr().out
    assert "GPU model parameters (none" in text and "not fitted on any data" in text


def test_memory_warnings_for_steps_that_do_not_fit(capsys):
    import json

    from joulebound.cli import main

    # GPT-3-XL with AdamW on a 12 GB card: ~23 GiB as one step (the old demo's setting)
    assert main(["characterize", "gpt3-xl", "--device", "rtx3080ti", "--json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert "needs about" in doc["memory_warning"] and "rtx3080ti has 12.0 GiB" in doc["memory_warning"]
    assert "warning" in out.err
    # a GPT-2 step at batch 4 fits: no warning
    assert main(["trace", "gpt2-small", "--batch", "4", "--device", "rtx3080ti", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_warning"] is None


def test_one_memory_model_for_the_cli_and_the_job_predictor():
    """The job predictor's per-GPU memory for a single-GPU job equals the CLI's estimate (with
    the attention the analytic trace runs: the S² scores stored, no FlashAttention)."""
    from joulebound.jobs.job import Job, memory, resolve
    from joulebound.workload.analytic import ModelConfig
    from joulebound.workload.memory import training_memory

    job = Job(arch="gpt", layers=12, hidden=768, heads=12, seq=1024, batch=4, vocab=50257,
              dtype="bf16", device="rtx3080ti", flash_attention=False)
    r = resolve(job)
    cfg = ModelConfig("gpt", 12, 768, 12, seq=1024, batch=4, vocab=50257, dtype="bf16")
    a, b = memory(r, 0.0), training_memory(cfg)
    assert a.activations == pytest.approx(b.activations, rel=1e-9)
    assert a.optimizer == pytest.approx(b.optimizer, rel=0.02)   # parameter counts: same shape
