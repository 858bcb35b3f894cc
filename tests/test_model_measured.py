"""Measured-table CSV -> Characterization, and the characterize CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _model_fixtures import ga102_spec, small_trace

from joulebound.cli import main
from joulebound.clocks import ClockConfig
from joulebound.dvfs.characterization import Characterization
from joulebound.dvfs.model import characterize
from joulebound.dvfs.model.measured import from_measured
from joulebound.errors import JouleboundError, SchemaError

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
    assert doc["params_calibration"] == "transfer"
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
