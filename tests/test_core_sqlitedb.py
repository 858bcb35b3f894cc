"""The two SQLite stores share one helper (joulebound.core.sqlitedb): a schema version table, a clear
refusal of a newer schema, databases from before the table still open, the same locking."""

from __future__ import annotations

import json
import sqlite3
import threading
import time

import pytest

from joulebound.core import sqlitedb
from joulebound.core.errors import JouleboundError
from joulebound.energy.store import Store
from joulebound.jobs.runstore import SweepStore, load_results
from joulebound.workload.grid import preset

# The tables exactly as the code before the schema table created them (joulebound 0d1b44f:
# energy/store.py SCHEMA with PRAGMA user_version = 1, sweep/store.py _SCHEMA with no version).
OLD_ENERGY_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY, started_at REAL, ended_at REAL, status TEXT, command TEXT,
  exit_code INTEGER, backend TEXT, provenance TEXT, rank INTEGER, host TEXT,
  devices_json TEXT, notes_json TEXT, meta_json TEXT);
CREATE TABLE IF NOT EXISTS windows (
  id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, name TEXT, rank INTEGER, host TEXT,
  start_s REAL, end_s REAL, duration_s REAL, energy_j REAL, cpu_energy_j REAL, provenance TEXT,
  flags_json TEXT, devices_json TEXT);
CREATE INDEX IF NOT EXISTS windows_run ON windows(run_id);
CREATE TABLE IF NOT EXISTS samples (
  run_id TEXT, t_s REAL, uuid TEXT, kind TEXT, power_w REAL, energy_j REAL);
CREATE INDEX IF NOT EXISTS samples_run ON samples(run_id, t_s);
"""
OLD_SWEEP_SCHEMA = """
CREATE TABLE IF NOT EXISTS sweep_results (
    config_id TEXT NOT NULL,
    sweep TEXT NOT NULL,
    arch TEXT, layers INTEGER, hidden INTEGER, heads INTEGER, ff INTEGER, seq INTEGER,
    batch INTEGER, dtype TEXT, strategy TEXT, world_size INTEGER, steps INTEGER,
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
    error TEXT,
    time_s REAL, energy_j REAL, energy_provenance TEXT,
    tokens INTEGER, padded_tokens INTEGER, throughput_tok_s REAL, speedup REAL,
    peak_mem_bytes INTEGER, env_json TEXT, created_at TEXT,
    UNIQUE (sweep, config_id)
);
CREATE TABLE IF NOT EXISTS sweep_plan (
    sweep TEXT NOT NULL,
    config_id TEXT NOT NULL,
    position INTEGER,
    config_json TEXT NOT NULL,
    UNIQUE (sweep, config_id)
);
"""


def _versions(db) -> dict[str, int]:
    con = sqlite3.connect(db)
    try:
        return dict(con.execute(f"SELECT component, version FROM {sqlitedb.SCHEMA_TABLE}"))
    finally:
        con.close()


def _old_energy_store(db, user_version: int) -> None:
    con = sqlite3.connect(db)
    con.executescript(OLD_ENERGY_SCHEMA)
    con.execute("INSERT INTO runs (run_id, status, backend, provenance) "
                "VALUES ('r1', 'finished', 'simulated', 'modeled')")
    con.execute("INSERT INTO windows (run_id, name, start_s, end_s, duration_s, energy_j, "
                "provenance, flags_json, devices_json) VALUES ('r1', 'step', 0, 1, 1, 42.5, "
                "'modeled', '[]', '[]')")
    con.execute(f"PRAGMA user_version = {user_version}")
    con.commit()
    con.close()


def _old_sweep_store(db) -> None:
    con = sqlite3.connect(db)
    con.executescript(OLD_SWEEP_SCHEMA)
    con.execute("INSERT INTO sweep_results (config_id, sweep, strategy, world_size, status, "
                "time_s, tokens, throughput_tok_s, created_at) "
                "VALUES ('c1', 's', 'single', 1, 'ok', 1.0, 100, 100.0, '2026-01-01T00:00:00')")
    con.commit()
    con.close()


@pytest.mark.parametrize("user_version", [1, 0])  # versioned by PRAGMA only / before versioning
def test_an_energy_store_from_before_the_schema_table_opens_and_is_stamped(tmp_path,
                                                                           user_version):
    db = tmp_path / "old.db"
    _old_energy_store(db, user_version)
    with Store(db, readonly=True) as st:  # read-only: read as it is, nothing written
        assert [w.energy_j for w in st.windows("r1")] == [42.5]
    con = sqlite3.connect(db)
    assert sqlitedb.SCHEMA_TABLE not in sqlitedb.table_names(con)
    con.close()
    with Store(db) as st:
        assert st.runs()[0]["run_id"] == "r1"
        assert [w.energy_j for w in st.windows("r1")] == [42.5]
    assert _versions(db) == {"energy": 1}
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == 1  # what older releases read
    con.close()


def test_a_sweep_store_from_before_the_schema_table_opens_and_is_stamped(tmp_path, capsys):
    from joulebound.cli import main

    db = tmp_path / "old.db"
    _old_sweep_store(db)
    assert list(load_results(db)["config_id"]) == ["c1"]  # read-only: nothing created
    assert main(["sweep", "status", "--db", str(db)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    con = sqlite3.connect(db)
    assert sqlitedb.SCHEMA_TABLE not in sqlitedb.table_names(con)
    con.close()
    st = SweepStore(db)
    assert [r["config_id"] for r in st.rows("s")] == ["c1"]
    assert _versions(db) == {"sweep": 1}


def test_both_stores_in_one_file_keep_their_own_versions(tmp_path):
    db = tmp_path / "both.db"
    Store(db).close()
    SweepStore(db)
    assert _versions(db) == {"energy": 1, "sweep": 1}
    with Store(db, readonly=True) as st:
        assert st.runs() == []
    assert len(load_results(db)) == 0


def _bump(db, component: str) -> None:
    con = sqlite3.connect(db)
    con.execute(f"UPDATE {sqlitedb.SCHEMA_TABLE} SET version = version + 1 WHERE component = ?",
                (component,))
    con.commit()
    con.close()


def test_a_newer_schema_is_refused_by_both_stores_with_a_message(tmp_path, capsys):
    from joulebound.cli import main

    energy, sweep = tmp_path / "energy.db", tmp_path / "sweep.db"
    Store(energy).close()
    SweepStore(sweep)
    _bump(energy, "energy")
    _bump(sweep, "sweep")
    before = energy.read_bytes(), sweep.read_bytes()
    for ro in (False, True):
        with pytest.raises(JouleboundError, match=r"newer joulebound \(schema version 2, this "
                                                  r"one reads up to 1\); upgrade"):
            Store(energy, readonly=ro)
    with pytest.raises(JouleboundError, match="newer joulebound"):
        SweepStore(sweep)
    with pytest.raises(JouleboundError, match="newer joulebound"):
        load_results(sweep)
    for argv in (["sweep", "status", "--db", str(sweep)], ["runs", str(energy)],
                 ["fit", "--data", str(sweep)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "newer joulebound" in err and "Traceback" not in err, argv
    assert (energy.read_bytes(), sweep.read_bytes()) == before  # never written into
    # the other component's version is not this store's business
    SweepStore(energy)
    Store(sweep, readonly=False).close()


def _hold_write_lock(db, seconds: float) -> threading.Thread:
    """Another process's writer: holds the file's write lock for ``seconds``."""
    ready = threading.Event()

    def hold() -> None:
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        ready.set()
        time.sleep(seconds)
        con.execute("COMMIT")
        con.close()

    t = threading.Thread(target=hold)
    t.start()
    ready.wait()
    return t


def test_both_stores_wait_for_another_writer_instead_of_failing(tmp_path):
    db = tmp_path / "both.db"
    store = Store(db)
    sweep = SweepStore(db)
    cfg = preset("tiny").expand(["single"], [1])[0]
    for write in (lambda: store.begin_run("r2", backend="none"),
                  lambda: sweep.record("s", cfg, status="ok", time_s=1.0, tokens=10,
                                       padded_tokens=10)):
        t0 = time.perf_counter()
        holder = _hold_write_lock(db, 0.4)
        write()  # queues behind the lock (busy timeout), then commits
        holder.join()
        assert time.perf_counter() - t0 >= 0.35
    assert [r["run_id"] for r in store.runs()] == ["r2"]
    assert [r["config_id"] for r in sweep.rows("s")] == [cfg.config_id]
    store.close()
    for make in (lambda p: Store(p).close(), SweepStore):  # each store leaves its file in WAL
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.db"
        make(path)
        con = sqlite3.connect(path)
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        con.close()


def _as_reader_without_write_access(fn):
    """Run ``fn()`` where the folder cannot be written: as an unprivileged user (a forked child
    that drops root, no exec needed) or, when not root, after ``chmod 555`` on the folder. Returns
    ``fn``'s result or the text of the exception it raised."""
    import os
    import pickle

    def call():
        try:
            return fn()
        except Exception as exc:
            return f"error: {exc}"

    if os.geteuid() != 0:
        return call()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop root, answer through the pipe, never return into pytest
        try:
            os.close(r)
            os.setgid(65534)
            os.setuid(65534)
            out = pickle.dumps(call())
        except BaseException as exc:
            out = pickle.dumps(f"error: child: {exc}")
        os.write(w, out)
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return pickle.loads(data)


@pytest.mark.parametrize("kind", ["energy", "sweep"])
def test_a_store_in_a_read_only_folder_can_still_be_read(tmp_path_factory, kind):
    """WAL mode needs a -shm file beside the database; in a folder the reader cannot write
    (a read-only mount, a colleague's results) a plain ``mode=ro`` open of a WAL store fails with
    'attempt to write a readonly database'. The read-only paths open it immutable instead."""
    import os
    import tempfile

    d = tempfile.mkdtemp(prefix="jb-ro-")   # not under pytest's 0700 base: the reader is 'nobody'
    db = os.path.join(d, "runs.db")
    if kind == "energy":
        with Store(db) as st:
            st.begin_run("r1", command="python train.py", backend="nvml")
            st.end_run("r1", status="ok", exit_code=0)
    else:
        SweepStore(db)
    assert not os.path.exists(db + "-wal")   # closed cleanly: nothing pending
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()
    assert sorted(os.listdir(d)) == ["runs.db"], os.listdir(d)
    os.chmod(db, 0o444)
    os.chmod(d, 0o555)
    try:
        def read() -> list:
            assert os.geteuid() != 0 or os.access(d, os.W_OK) is False, "reader can write"
            con = sqlitedb.connect(db, readonly=True)
            try:
                return sorted(sqlitedb.table_names(con))
            finally:
                con.close()
        got = _as_reader_without_write_access(read)
    finally:
        os.chmod(d, 0o755)
    assert isinstance(got, list), got
    assert "joulebound_schema" in got


def test_a_store_on_a_read_only_mount_is_read_not_refused(tmp_path_factory):
    """On a read-only mount SQLite cannot create a WAL store's -shm file and says 'unable to open
    database file' (not 'readonly'): ``runs`` refused a valid store as "not an SQLite database"
    (issue 30, item 13). Read-only opens now see the read-only file system and open it immutable.
    Needs root and a private mount namespace (``unshare -m``) for a real read-only bind mount."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a read-only bind mount needs root and unshare")
    src = tempfile.mkdtemp(prefix="jb-rw-")
    mnt = tempfile.mkdtemp(prefix="jb-rom-")
    db = os.path.join(src, "runs.db")
    with Store(db) as st:
        st.begin_run("r1", command="python train.py", backend="nvml")
        st.end_run("r1", status="finished", exit_code=0)
    assert sorted(os.listdir(src)) == ["runs.db"]
    script = (f"mount --bind {src} {mnt} && mount -o remount,ro,bind {mnt} && "
              f"! touch {mnt}/probe 2>/dev/null && "
              f"{sys.executable} -m joulebound runs --json {mnt}/runs.db")
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {src} {mnt}"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here ({probe.stderr!r})")
    p = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr           # was: rc 2 "not an SQLite database"
    runs = json.loads(p.stdout)
    assert [r["run_id"] for r in runs] == ["r1"] and runs[0]["status"] == "finished"
    assert sorted(os.listdir(src)) == ["runs.db"]   # nothing was written beside it
