"""Issue 28 item 1: ``fit --save`` writes the file it says it wrote (or fails with a clear
error), and the printed hint is a ``predict --coefficients`` command line that works."""
from __future__ import annotations

import json
import re
import sqlite3

from joulebound.cli import main
from tests.test_jobs_data import _sweep_db

_JOB = ["--layers", "2", "--hidden", "128", "--heads", "2", "--seq", "64", "--batch", "16",
        "--device", "rtx2080ti"]


def test_mechanistic_save_without_cuts_writes_and_round_trips(tmp_path, capsys):
    """--law mechanistic --no-cuts --save printed "saved" and wrote nothing; predict then failed."""
    db = tmp_path / "runs.db"
    _sweep_db(db, energy=True)
    cal = tmp_path / "cal.json"
    assert main(["fit", "--data", str(db), "--law", "mechanistic", "--no-cuts", "--save", str(cal)]) == 0
    out = capsys.readouterr().out
    assert cal.exists(), out
    assert "saved the mechanistic calibration" in out
    assert main(["predict", *_JOB, "--coefficients", str(cal), "--json"]) == 0
    pred = json.loads(capsys.readouterr().out)
    assert pred["params"]["kappa"] == json.loads(cal.read_text())["kappa"]


def test_prerun_save_hint_is_a_working_command(tmp_path, capsys):
    """The pre-run law prices whole jobs: the hint names --tokens, and that command runs."""
    db = tmp_path / "runs.db"
    _sweep_db(db, energy=True)
    law = tmp_path / "law.json"
    assert main(["fit", "--data", str(db), "--save", str(law)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert law.exists() and "saved the pre-run law" in out
    hint = re.search(r"use (predict[^)]*)\)", out)
    assert hint and "--tokens" in hint.group(1), out
    assert main(["predict", *_JOB, "--coefficients", str(law), "--tokens", "1e6", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total_energy_j"] > 0


def test_mechanistic_save_with_no_gpu_rows_is_a_clear_error(tmp_path, capsys):
    """A CPU-only sweep store has nothing for the mechanistic predictor: --save says so, exits 2,
    writes nothing, and does not claim it saved."""
    db = tmp_path / "runs.db"
    _sweep_db(db, energy=False)
    with sqlite3.connect(db) as con:
        con.execute("UPDATE sweep_results SET env_json = ?", (json.dumps({"device": "cpu"}),))
    cal = tmp_path / "cal.json"
    rc = main(["fit", "--data", str(db), "--law", "mechanistic", "--save", str(cal)])
    cap = capsys.readouterr()
    assert rc == 2 and not cal.exists()
    assert "saved" not in cap.out and "--save" in cap.err and "nothing" in cap.err
