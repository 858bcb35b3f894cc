"""Nothing lost silently (issue 15): store failures and damaged stores are reported, `measure`
stops the whole command (its process group, SIGKILL after --kill-after) and exits 127/126 like a
shell. Real child processes; a full disk is a real RLIMIT_FSIZE."""

from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from joulebound.core.errors import JouleboundError
from joulebound.energy.command import run_command
from joulebound.energy.store import Store

PY = sys.executable
JB = str(Path(PY).with_name("joulebound"))


def _jb(*args: str, **kw) -> subprocess.Popen:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.Popen([JB, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _wait_file(p: Path, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not p.exists() or not p.read_text():
        if time.monotonic() > end:
            raise TimeoutError(p)
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text() if Path(f"/proc/{pid}/stat").exists() else ""
    return " Z " not in stat


GRANDCHILD = ("import os, sys, time, pathlib; pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))"
              "; time.sleep(60)")


@pytest.mark.parametrize("own_group", [False, True], ids=["from-a-script", "shell-job"])
def test_sigterm_reaches_the_whole_command_not_only_its_first_process(tmp_path, own_group):
    pidf = tmp_path / "train.pid"
    script = f"{PY} -c '{GRANDCHILD}' {pidf} & wait"
    p = _jb("measure", "--backend", "none", "--json", "--", "bash", "-c", script,
            start_new_session=own_group)
    try:
        _wait_file(pidf)
        train = int(pidf.read_text())
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        deadline = time.monotonic() + 10
        while _alive(train) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(train), "the training was left running, unmetered"
        res = json.loads(out)
        assert res["stopped_by"] == "SIGTERM" and res["exit_code"] == 143, err
    finally:
        if pidf.exists() and pidf.read_text() and _alive(int(pidf.read_text())):
            os.kill(int(pidf.read_text()), signal.SIGKILL)
        if p.poll() is None:
            p.kill()


def test_a_command_ignoring_sigterm_is_killed_after_kill_after(tmp_path):
    ready = tmp_path / "ready"
    child = (f"import signal, time, pathlib; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             f"pathlib.Path({str(ready)!r}).write_text('1'); time.sleep(60)")
    p = _jb("measure", "--backend", "none", "--json", "--kill-after", "1", "--", PY, "-c", child)
    try:
        _wait_file(ready)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        assert time.monotonic() - t0 < 15
        res = json.loads(out)
        assert p.returncode == 137 and res["killed"] is True, err
        assert any("SIGKILL" in n for n in res["notes"])
    finally:
        if p.poll() is None:
            p.kill()


def test_missing_or_not_executable_commands_exit_127_and_126_like_a_shell(tmp_path):
    r = subprocess.run([JB, "measure", "--backend", "none", "--", "no-such-command-xyz"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 127 and "command not found" in r.stderr
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    r = subprocess.run([JB, "measure", "--backend", "none", "--", str(script)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 126 and "not executable" in r.stderr


def test_a_full_disk_is_reported_and_fails_strict_runs(tmp_path):
    """RLIMIT_FSIZE makes every write past 64 KiB fail, as a full disk would (Python ignores
    SIGXFSZ, so SQLite sees EFBIG)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))

    for strict in (False, True):
        db = tmp_path / f"full{strict}.db"
        args = ["measure", "--db", str(db), "--backend", "simulated", "--interval", "0.002",
                "--json", *(["--strict"] if strict else []), "--", PY, "-c",
                "import time; time.sleep(1.5)"]
        r = subprocess.run([JB, *args], capture_output=True, text=True, timeout=120,
                           preexec_fn=limit)
        res = json.loads(r.stdout)
        assert res["losses"]["samples_not_stored"] > 100, res
        assert any("could not be written to the store" in n for n in res["notes"])
        assert res["energy_j"] == pytest.approx(100.0 * res["duration_s"], rel=0.02)
        assert r.returncode == (3 if strict else 0)     # was: rc 0, no note, 90 % dropped


def _damaged_store(tmp_path: Path) -> Path:
    db = tmp_path / "runs.db"
    for _ in range(3):
        run_command([PY, "-c", "pass"], backend="simulated", db=db, interval_s=0.005)
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    data = bytearray(db.read_bytes())
    page = 4096
    assert len(data) >= 4 * page
    data[2 * page + 8: 2 * page + 2000] = os.urandom(1992)     # scribble over a b-tree page
    db.write_bytes(bytes(data))
    return db


def test_a_damaged_store_is_refused_with_a_message_never_written_or_a_traceback(tmp_path,
                                                                                capsys):
    from joulebound.cli import main

    db = _damaged_store(tmp_path)
    before = db.read_bytes()
    with pytest.raises(JouleboundError, match="damaged|not an SQLite"):
        Store(db)
    assert main(["runs", str(db)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and ("damaged" in err or "not an SQLite" in err)
    marker = tmp_path / "ran"
    assert main(["measure", "--db", str(db), "--backend", "none", "--", PY, "-c",
                 f"open({str(marker)!r}, 'w')"]) == 2
    assert not marker.exists() and db.read_bytes() == before


def test_a_store_from_a_newer_joulebound_is_refused(tmp_path):
    from joulebound.energy.store import SCHEMA_VERSION

    db = tmp_path / "new.db"
    Store(db).close()
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.close()
    for ro in (False, True):
        with pytest.raises(JouleboundError, match="newer joulebound"):
            Store(db, readonly=ro)


def test_a_large_store_is_opened_without_reading_every_page_and_checked_on_demand(
        tmp_path, capsys, monkeypatch):
    """`PRAGMA quick_check` on every open read the whole file: 1.8-30 s for a 1.5 GB store
    (issue 30 item 14; docs/benchmarks.md, bench_store_open). A file over
    FULL_CHECK_MAX_BYTES is opened after its header and schema are checked; `runs DB --check`
    runs the full check; a damaged page met later is one line, never a traceback."""
    from joulebound.cli import main
    from joulebound.core import sqlitedb

    db = _damaged_store(tmp_path)
    full: list[str] = []
    real = sqlitedb.check_integrity

    def spy(con, path, *a, **kw):
        full.append(str(path))
        return real(con, path, *a, **kw)

    monkeypatch.setattr(sqlitedb, "check_integrity", spy)
    monkeypatch.setattr(sqlitedb, "FULL_CHECK_MAX_BYTES", db.stat().st_size - 1)
    Store(db, readonly=True).close()                 # header and schema only: opens
    assert full == []
    assert main(["runs", str(db), "--check"]) == 2
    err = capsys.readouterr().err
    assert full == [str(db)] and "damaged" in err and "Traceback" not in err
    assert main(["runs", str(db), "--json"]) in (0, 2)   # the damaged page may be met, or not
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if err:
        assert "--check" in err and str(db) in err
    monkeypatch.setattr(sqlitedb, "FULL_CHECK_MAX_BYTES", db.stat().st_size)
    with pytest.raises(JouleboundError, match="damaged"):
        Store(db, readonly=True)                     # a small file: every page, every open


def test_a_file_that_does_not_start_as_sqlite_is_refused_by_its_header(tmp_path, monkeypatch):
    from joulebound.core import sqlitedb

    monkeypatch.setattr(sqlitedb, "FULL_CHECK_MAX_BYTES", 0)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"PK\x03\x04" + os.urandom(8192))
    with pytest.raises(JouleboundError, match="not an SQLite database"):
        Store(junk, readonly=True)
    with pytest.raises(JouleboundError, match="not an SQLite database"):
        Store(junk)
    assert junk.read_bytes()[:4] == b"PK\x03\x04"


@pytest.mark.parametrize("argv", [["runs"], ["report", "-o", "rep"]])
def test_a_bad_page_met_while_reading_is_one_line_never_a_traceback(tmp_path, capsys,
                                                                    monkeypatch, argv):
    """A large store is not read page by page when opened, so a damaged page can be met later:
    `runs` names the store and --check; any other command says the same without the name."""
    from joulebound.cli import main

    db = tmp_path / "runs.db"
    run_command([PY, "-c", "pass"], backend="simulated", db=db, interval_s=0.005)

    def bad(*a, **kw):
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(Store, "runs", bad)
    monkeypatch.chdir(tmp_path)
    assert main([argv[0], str(db), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "malformed" in err and "--check" in err
