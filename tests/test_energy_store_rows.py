"""Badly written store rows are skipped with a note naming each, never a traceback (issue 30,
item 13: ``joulebound runs`` printed a raw ``JSONDecodeError`` traceback)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from joulebound.energy.results import WindowResult
from joulebound.energy.store import Store

BAD = {   # run id -> the SQL that spoils its row
    "badnotes": "UPDATE runs SET notes_json='{not json' WHERE run_id='badnotes'",
    "notelist": "UPDATE runs SET notes_json='{\"a\": 1}' WHERE run_id='notelist'",
    "intcmd": "UPDATE runs SET command=x'00ff' WHERE run_id='intcmd'",   # a blob
    "baddev": "UPDATE windows SET devices_json='[1,2' WHERE run_id='baddev'",
    "badflags": "UPDATE windows SET flags_json='oops' WHERE run_id='badflags'",
    "nulldur": "UPDATE windows SET duration_s=NULL WHERE run_id='nulldur'",
    "devkeys": "UPDATE windows SET devices_json='[{\"bogus\": 1}]' WHERE run_id='devkeys'",
    "textnum": "UPDATE windows SET energy_j='abc', duration_s='x' WHERE run_id='textnum'",
}
RUN_ROWS = ("badnotes", "notelist", "intcmd")


@pytest.fixture
def spoiled(tmp_path):
    db = tmp_path / "runs.db"
    with Store(db) as st:
        for r in ("good", *BAD):
            st.begin_run(r, command="python train.py", backend="nvml")
            st.add_window(r, WindowResult(name="train", start_s=0.0, end_s=2.0, duration_s=2.0,
                                          energy_j=50.0, devices=[], provenance="measured",
                                          flags=[]))
            st.end_run(r, status="finished", exit_code=0)
    con = sqlite3.connect(db)
    for sql in BAD.values():
        con.execute(sql)
    con.commit()
    con.close()
    return db


def test_runs_skips_each_bad_row_with_a_note(spoiled, capsys):
    from joulebound.cli import main

    assert main(["runs", "--json", "--last", "100", str(spoiled)]) == 0   # was: a traceback
    cap = capsys.readouterr()
    runs = {r["run_id"]: r for r in json.loads(cap.out)}
    assert set(runs) == {"good", *BAD} - set(RUN_ROWS)
    assert runs["good"]["windows"][0]["energy_j"] == 50.0
    for r in set(BAD) - set(RUN_ROWS):
        assert runs[r]["windows"] == []              # its bad window skipped, the run kept
    err = " ".join(cap.err.split())
    assert "Traceback" not in err
    for r in BAD:
        assert f"'{r}'" in err, (r, err)             # every skipped row named
    assert err.count("that row was skipped") == len(BAD)
    assert "notes_json is not valid JSON" in err and "duration_s is NULL, not a number" in err
    # the table too
    assert main(["runs", str(spoiled)]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_report_of_a_run_with_a_bad_window_still_works(spoiled, tmp_path, capsys):
    from joulebound.cli import main

    assert main(["report", str(spoiled), "baddev", "-o", str(tmp_path / "rep")]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "window row" in err and "'baddev'" in err
    assert "that row was skipped" in (tmp_path / "rep" / "index.html").read_text()


def test_store_api_counts_skipped_rows_once(spoiled):
    with Store(spoiled, readonly=True) as st:
        st.runs()
        st.runs()
        assert len(st.windows()) == 1 + len(RUN_ROWS)    # good + the runs skipped for run rows
        st.windows()
        assert len(st.skipped_rows) == len(BAD)
