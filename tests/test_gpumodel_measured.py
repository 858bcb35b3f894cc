"""Measured-table CSV -> Characterization, and the characterize CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _model_fixtures import ga102_spec, small_trace

from joulebound.cli import main
from joulebound.core.clocks import ClockConfig
from joulebound.core.errors import JouleboundError, SchemaError
from joulebound.gpumodel import characterize
from joulebound.gpumodel.characterization import Characterization
from joulebound.gpumodel.measured import from_measured

HEADER = "kernel,core,mem,time,energy,repeats\n"


def write(tmp_path, body, header=HEADER):
    p = tmp_path / "m.csv"
    p.write_text(header + body)
    return p


def test_complete_grid_becomes_measured_characterization(tmp_path):
    p = write(tmp_path, "a,1500,9501,0.002,0.5,10\na,2100,9501,0.0015,0.6,10\n"
                        "b,1500,9501,0.001,0.2,5\nb,2100,9501,0.0009,0.25,5\n"
                        "a,1500,9501,0.004,0.7,10\n")
    ch = from_measured(p, ga102_spec())
    assert ch.kernel_names == ["a", "b"] and ch.provenance() == "measured"
    j = ch.config_index(ClockConfig(1500, 9501))
    assert ch.time_s[0, j] == pytest.approx(0.003)          # repeats-weighted mean of duplicates
    assert ch.time_spread_s[0, j] == pytest.approx(0.001)


def test_measured_cells_override_modeled(tmp_path):
    spec = ga102_spec()
    base = characterize(small_trace(), spec)
    p = write(tmp_path, "qkv_gemm,1500,9501,0.123,45.6,3\n")
    ch = from_measured(p, spec, base=base)
    j = ch.config_index(ClockConfig(1500, 9501))
    rows = np.array(ch.kernel_names) == "qkv_gemm"
    assert np.all(ch.time_s[rows, j] == 0.123) and ch.measured[rows, j].all()
    assert ch.measured.sum() == rows.sum() and ch.provenance() == "measured+modeled"


@pytest.mark.parametrize("body,header,match", [
    ("a,1500,9501,0.002,0.5\n", "kernel,core,mem,time,energy\n", "repeats"),
    ("a,1500,9501,0.002,0.5,1\na,2100,9501,-0.1,0.5,1\n", HEADER, r"row 2\.time"),
    ("a,1500,9501,0.002,-3,1\n", HEADER, r"row 1\.energy"),
    ("a,1234,9501,0.002,0.5,1\n", HEADER, r"row 1\.core/mem.*1234/9501"),
    ("a,1500,7000,0.002,0.5,1\n", HEADER, r"row 1\.core/mem"),
    ("a,fast,9501,0.002,0.5,1\n", HEADER, r"row 1\.core"),
    ("a,1500,9501,0.002,0.5,0\n", HEADER, r"row 1\.repeats"),
])
def test_bad_rows_are_named(tmp_path, body, header, match):
    with pytest.raises(SchemaError, match=match):
        from_measured(write(tmp_path, body, header), ga102_spec())


def test_incomplete_grid_without_trace_names_missing_cells(tmp_path):
    p = write(tmp_path, "a,1500,9501,0.002,0.5,1\nb,2100,9501,0.001,0.2,1\n")
    with pytest.raises(SchemaError, match="missing"):
        from_measured(p, ga102_spec())


def test_cli_characterize_preset_json_and_npz(tmp_path, capsys):
    out = tmp_path / "c.npz"
    rc = main(["characterize", "gpt3-xl", "--device", "rtx3080ti", "-o", str(out), "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["provenance"] == "modeled" and doc["n_configs"] > 500
    assert doc["params_calibration"] == "published"  # RTX 3080 Ti: calibrated on Spaan et al.
    ch = Characterization.load(out)
    assert ch.device == "rtx3080ti" and ch.configs[0] == ClockConfig()
    # least-energy iteration config is slower than the governor but cheaper
    best = doc["iteration"][doc["best_energy_config"]]
    assert best["energy_j"] < doc["iteration"]["auto"]["energy_j"]


def test_cli_characterize_bad_table_exit_2(tmp_path, capsys):
    p = write(tmp_path, "qkv_gemm,1500,9501,-1,0.5,1\n")
    assert main(["characterize", "gpt3-xl", "--device", "rtx3080ti", "--measured", str(p)]) == 2
    assert "row 1.time" in capsys.readouterr().err


def test_unknown_device_is_user_error():
    with pytest.raises(JouleboundError):
        characterize(small_trace(), "no-such-gpu")


def test_three_measured_clocks_calibrate_the_rest(tmp_path):
    """Ground truth = the model with perturbed work/activity; 3 measured clocks per kernel recover
    every other cell far better than the uncalibrated roofline."""
    from joulebound.gpumodel import default_params
    from joulebound.gpumodel.characterize import trace_work
    from joulebound.gpumodel.kernel import KernelWork
    from joulebound.gpumodel.measured import characterize_with_measurements

    spec, tr = ga102_spec(), small_trace()
    prm = default_params(spec)
    w = trace_work(tr, spec, prm)
    truth = characterize(tr, spec, params=prm, work=KernelWork(
        w.tc_max * np.array([1.3, 0.9, 1.0, 1.3, 1.2, 1.1]),
        w.tm_max * np.array([0.8, 1.4, 1.2, 0.8, 1.0, 0.7]),
        np.array([0.8, 1.2, 1.0, 0.8, 1.1, 0.9]), w.lam, w.knee))
    lines, seen = [HEADER.strip()], set()
    for k, name in enumerate(tr.names()):
        if name in seen:
            continue
        seen.add(name)
        for c in (ClockConfig(900, 9501), ClockConfig(1500, 5001), ClockConfig(2100, 9501)):
            j = truth.config_index(c)
            lines.append(f"{name},{c.core_mhz},{c.mem_mhz},{truth.time_s[k, j]},"
                         f"{truth.energy_j[k, j]},5")
    p = tmp_path / "m.csv"
    p.write_text("\n".join(lines) + "\n")
    ch = characterize_with_measurements(tr, spec, p, params=prm)
    mod = ~ch.measured
    assert ch.measured.sum() == 6 * 3
    err_t = np.abs(ch.time_s[mod] / truth.time_s[mod] - 1)
    err_e = np.abs(ch.energy_j[mod] / truth.energy_j[mod] - 1)
    assert err_t.mean() < 0.01 and err_e.mean() < 0.01
    base = characterize(tr, spec, params=prm)
    assert np.abs(base.time_s / truth.time_s - 1).mean() > 0.1


def test_fit_kernel_without_counts_matches_measurements():
    from joulebound.gpumodel import default_params
    from joulebound.gpumodel.fit_measured import fit_kernel
    from joulebound.gpumodel.kernel import KernelWork, kernel_time_energy

    spec = ga102_spec()
    prm = default_params(spec)
    f = np.array([900.0, 1500.0, 2100.0])
    m = np.array([9501.0, 5001.0, 9501.0])
    truth = kernel_time_energy(KernelWork(np.array([2e-4]), np.array([1e-4]), np.array([0.9])),
                               f, m, 2100, 9501, prm)
    tc, tm, act = fit_kernel(0.0, 0.0, f, m, truth["time_s"], truth["energy_j"], 2100, 9501, prm)
    out = kernel_time_energy(KernelWork(np.array([tc]), np.array([tm]), np.array([act])),
                             f, m, 2100, 9501, prm)
    np.testing.assert_allclose(out["time_s"], truth["time_s"], rtol=0.02)
    np.testing.assert_allclose(out["energy_j"], truth["energy_j"], rtol=0.02)
