"""Sweep store: one row per (sweep, config), upserts, speedup against the single run, loader."""

from __future__ import annotations

import json
import sqlite3

import pytest

from joulebound.core.errors import JouleboundError
from joulebound.jobs.runstore import COLUMNS, SweepStore, load_results
from joulebound.workload.grid import preset


@pytest.fixture()
def cfgs():
    return preset("tiny").expand(["single", "ddp", "tp"], [1, 2])


def test_schema_matches_the_contract(tmp_path):
    SweepStore(tmp_path / "r.db")
    con = sqlite3.connect(tmp_path / "r.db")
    cols = [r[1] for r in con.execute("PRAGMA table_info(sweep_results)")]
    assert tuple(cols) == COLUMNS
    assert {"config_id", "sweep", "time_s", "energy_j", "speedup", "env_json"} <= set(cols)


def test_rerecording_keeps_exactly_one_row_and_fills_speedup_both_ways(tmp_path, cfgs):
    st = SweepStore(tmp_path / "r.db")
    single = next(c for c in cfgs if c.strategy == "single" and c.layers == 1)
    ddp = next(c for c in cfgs if c.strategy == "ddp" and c.layers == 1)
    # multi-rank row first: no baseline yet -> speedup NULL
    st.record("s", ddp, status="ok", time_s=2.0, tokens=400, padded_tokens=400, env={"a": 1})
    assert st.rows("s")[0]["speedup"] is None
    # the single run lands: ddp's speedup is filled (work-normalized = throughput ratio)
    st.record("s", single, status="ok", time_s=1.0, tokens=400, padded_tokens=400)
    rows = {r["strategy"]: r for r in st.rows("s")}
    assert rows["single"]["speedup"] == 1.0
    assert rows["ddp"]["speedup"] == pytest.approx((400 / 2.0) / (400 / 1.0))
    assert rows["ddp"]["throughput_tok_s"] == pytest.approx(200.0)
    # a re-run overwrites in place: still one row per config, newest figures
    st.record("s", ddp, status="ok", time_s=0.5, tokens=400, padded_tokens=400)
    st.record("s", ddp, status="ok", time_s=0.5, tokens=400, padded_tokens=400)
    rows = st.rows("s")
    assert len(rows) == 2
    assert {r["strategy"]: r for r in rows}["ddp"]["speedup"] == pytest.approx(2.0)
    # another sweep with the same configs is separate
    st.record("other", ddp, status="ok", time_s=1.0, tokens=400, padded_tokens=400)
    assert len(st.rows("s")) == 2 and len(st.rows()) == 3
    assert st.done_ids("s") == {single.config_id, ddp.config_id}


def test_failed_rows_keep_the_error_and_are_skipped_only_when_asked(tmp_path, cfgs):
    st = SweepStore(tmp_path / "r.db")
    st.save_plan("s", cfgs)
    tp = next(c for c in cfgs if c.strategy == "tp")
    st.record("s", tp, status="failed", error="out of memory: CUDA out of memory")
    assert tp.config_id in st.done_ids("s")
    assert tp.config_id not in st.done_ids("s", include_failed=False)
    status = st.status()[0]
    assert status["planned"] == len(cfgs) and status["failed"] == 1
    assert status["pending"] == len(cfgs) - 1
    assert [c.config_id for c in st.plan("s")] == [c.config_id for c in cfgs]
    with pytest.raises(ValueError):
        st.record("s", tp, status="weird")


def test_load_results_dataframe(tmp_path, cfgs):
    path = tmp_path / "r.db"
    st = SweepStore(path)
    for i, c in enumerate(cfgs):
        st.record("s", c, status="ok", time_s=1.0 + i, tokens=100, padded_tokens=128,
                  energy_j=None, env={"device_type": "cpu"})
    df = load_results(path)
    assert list(df.columns) == list(COLUMNS) and len(df) == len(cfgs)
    assert df["energy_j"].isna().all() and (df["padded_tokens"] > df["tokens"]).all()
    assert json.loads(df["env_json"].iloc[0])["device_type"] == "cpu"
    assert len(load_results(path, sweep="nope")) == 0
    with pytest.raises(JouleboundError, match="no such sweep database"):
        load_results(tmp_path / "missing.db")
    sqlite3.connect(tmp_path / "empty.db").execute("CREATE TABLE x (a)").connection.commit()
    with pytest.raises(JouleboundError, match="no 'sweep_results' table"):
        load_results(tmp_path / "empty.db")


def test_status_is_read_only_and_names_a_wrong_file(tmp_path, capsys):
    from joulebound.cli import main

    other = tmp_path / "energy.db"
    sqlite3.connect(other).execute("CREATE TABLE runs (a)").connection.commit()
    assert main(["sweep", "status", "--db", str(other)]) == 2
    assert "holds no sweep tables" in capsys.readouterr().err
    names = {r[0] for r in sqlite3.connect(other).execute("SELECT name FROM sqlite_master")}
    assert names == {"runs"}  # nothing created
    assert main(["sweep", "status", "--db", str(tmp_path / "missing.db")]) == 2
    assert not (tmp_path / "missing.db").exists()


def test_a_file_that_is_not_sqlite_is_named_not_a_traceback(tmp_path, capsys):
    from joulebound.cli import main

    junk = tmp_path / "notes.db"
    junk.write_text("not a database\n" * 100)
    with pytest.raises(JouleboundError, match="not an SQLite database"):
        load_results(junk)
    with pytest.raises(JouleboundError, match="not an SQLite database"):
        SweepStore(junk)
    for argv in (["sweep", "status", "--db", str(junk)], ["fit", "--data", str(junk)]):
        assert main(argv) == 2
        assert "not an SQLite database" in capsys.readouterr().err
    assert junk.read_text() == "not a database\n" * 100  # left untouched


def test_results_table_fits_narrow_terminals_and_shows_errors_verbatim():
    from rich.console import Console

    from joulebound.cli.sweep import _table_rows

    ok = {"config_id": "bert-L12-d768-h12-ff3072-S128-B32-fp32-fsdp-w8-0123abcd", "status": "ok",
          "error": None, "time_s": 1.5, "tokens": 40960, "padded_tokens": 40960,
          "throughput_tok_s": 27306.7, "speedup": 6.1, "energy_j": None, "energy_provenance": None,
          "peak_mem_bytes": 3 * 2**30}
    bad = {**ok, "config_id": "bert-L1-tp-w2-x", "status": "failed",
           "error": "RuntimeError: tensor [bold] mismatch\ntraceback ..."}
    for width in (80, 140):
        con = Console(width=width, record=True, file=open("/dev/null", "w"))
        con.print(_table_rows([ok, bad], width))
        text = con.export_text()
        assert max(len(line) for line in text.splitlines()) <= width
        flat = "".join(text.split())
        assert "bert-L12-d768" in flat and "0123abcd" in flat  # the id folds but is never cut
        assert "3072" in flat and "—" in text  # peak MiB; no sensor -> em dash, never 0
        assert "tensor [bold] mismatch" in " ".join(text.split())  # error text is not markup
        assert ("real/pad" in text) == (width >= 120)


def test_results_table_keeps_tiny_config_ids_whole_at_100_columns():
    from rich.console import Console

    from joulebound.cli.sweep import _table_rows

    cid = "bert-L2-d64-h2-ff256-S32-B4-fp32-single-w1-9a0c0ce1"  # a `--grid tiny` id, 50 chars
    row = {"config_id": cid, "status": "ok", "error": None, "time_s": 0.015, "tokens": 128,
           "padded_tokens": 128, "throughput_tok_s": 25865.0, "speedup": 1.0, "energy_j": 12.3,
           "energy_provenance": "measured", "peak_mem_bytes": 396 * 2**20}
    con = Console(width=100, record=True, file=open("/dev/null", "w"))
    con.print(_table_rows([row], 100))
    text = con.export_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert cid in text  # on one line, not folded
    assert "12.3" in text and "25865" in text
    head = text.splitlines()[1:3]  # one provenance for all rows: in the energy header
    assert "energy J" in head[0] and head[1].split()[-2:] == ["measured", "MiB"]


def test_a_sweep_table_missing_columns_is_named(tmp_path, capsys):
    from joulebound.cli import main
    from joulebound.core.errors import SchemaError

    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE sweep_results (config_id TEXT, sweep TEXT, status TEXT, time_s REAL)")
    con.execute("INSERT INTO sweep_results VALUES ('a', 's', 'ok', 1.0)")
    con.commit()
    con.close()
    with pytest.raises(SchemaError, match=r"sweep_results\.arch.*missing: arch, layers"):
        load_results(db)
    assert main(["fit", "--data", str(db)]) == 2  # issue 7: a dataset missing columns
    err = capsys.readouterr().err
    assert "old.db" in err and "sweep_results.arch" in err and "energy_j" in err


def test_folder_given_for_a_file_is_a_user_error(tmp_path, capsys):
    from joulebound.cli import main

    folder = tmp_path / "runs"
    folder.mkdir()
    for argv, needle in ((["sweep", "status", "--db", str(folder)], "is a folder"),
                         (["sweep", "--db", str(folder), "--strategies", "single", "--gpus", "1"],
                          "is a folder"),
                         (["sweep", "--grid", str(folder), "--dry-run"], "is not a file")):
        assert main(argv) == 2, argv
        assert needle in capsys.readouterr().err, argv
    with pytest.raises(JouleboundError, match="is a folder"):
        load_results(folder)
    assert list(folder.iterdir()) == []  # nothing written into it
