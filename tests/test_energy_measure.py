"""``joulebound measure``: exit codes, signal forwarding, no-sensor output, store durability."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from joulebound.core.errors import JouleboundError
from joulebound.energy.command import run_command

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
MAIN = "import sys; from joulebound.cli import main; sys.exit(main(sys.argv[1:]))"


def _default_stop_signals() -> None:
    """The child starts with INT/TERM/HUP/QUIT at their defaults, whatever this test run
    inherited (a background job ignores INT, ``nohup`` HUP; ``measure`` rightly keeps inherited
    ignores, so the forwarding tests would test the environment instead)."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(s, signal.SIG_DFL)


def cli(*args: str, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    kw.setdefault("preexec_fn", _default_stop_signals)
    return subprocess.Popen([PY, "-c", MAIN, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def wait_for(path: Path, timeout: float = 20.0) -> None:
    end = time.time() + timeout
    while not path.exists():
        if time.time() > end:
            raise TimeoutError(path)
        time.sleep(0.05)


def test_exit_code_passes_through_and_no_sensor_is_plain(tmp_path):
    db = tmp_path / "runs.db"
    p = cli("measure", "--db", str(db), "--backend", "none", "--",
            PY, "-c", "import time; time.sleep(0.2); raise SystemExit(3)")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 3, err
    assert "No energy sensor" in out and "duration" in out and "(measured)" in out
    row = sqlite3.connect(db).execute("SELECT exit_code, status FROM runs").fetchone()
    assert row == (3, "failed")
    dur, energy = sqlite3.connect(db).execute("SELECT duration_s, energy_j FROM windows").fetchone()
    assert dur >= 0.2 and energy is None


def test_run_command_json_fields_and_killed_child(tmp_path):
    db = tmp_path / "runs.db"
    res = run_command([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                      backend="simulated", db=db, interval_s=0.02)
    assert res.exit_code == 128 + signal.SIGKILL and res.signal == signal.SIGKILL
    doc = res.to_json()
    assert doc["provenance"] == "modeled" and doc["energy_j"] > 0
    assert {"command", "exit_code", "duration_s", "devices", "notes", "run_id"} <= set(doc)
    con = sqlite3.connect(db)
    assert con.execute("SELECT exit_code, status FROM runs").fetchone() == (137, "killed")
    notes = con.execute("SELECT notes_json FROM runs").fetchone()[0]
    assert "killed by SIGKILL" in notes
    assert con.execute("SELECT COUNT(*) FROM windows").fetchone()[0] == 1


def test_missing_command_is_a_clear_error():
    with pytest.raises(JouleboundError, match="no-such-binary-xyz: command not found") as ei:
        run_command(["no-such-binary-xyz"], backend="none")
    assert ei.value.code == 127
    with pytest.raises(JouleboundError, match="no command given"):
        run_command([], backend="none")


def test_sigterm_is_forwarded_to_the_child(tmp_path):
    ready, got = tmp_path / "ready", tmp_path / "got"
    child = (f"import signal, sys, time, pathlib\n"
             f"def h(s, f):\n    pathlib.Path({str(got)!r}).write_text(str(s)); sys.exit(7)\n"
             f"signal.signal(signal.SIGTERM, h)\n"
             f"pathlib.Path({str(ready)!r}).write_text('1')\n"
             f"time.sleep(30)\n")
    p = cli("measure", "--json", "--backend", "none", "--", PY, "-c", child)
    wait_for(ready)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 7, err
    assert got.read_text() == str(int(signal.SIGTERM))
    assert json.loads(out)["exit_code"] == 7


def test_store_survives_joulebound_being_killed(tmp_path):
    db, ready, pidf = tmp_path / "runs.db", tmp_path / "ready", tmp_path / "pid"
    child = (f"import os, time, pathlib\npathlib.Path({str(pidf)!r}).write_text(str(os.getpid()))\n"
             f"pathlib.Path({str(ready)!r}).write_text('1')\ntime.sleep(30)\n")
    p = cli("measure", "--db", str(db), "--backend", "simulated", "--interval", "0.02", "--",
            PY, "-c", child)
    try:
        wait_for(ready)
        time.sleep(1.5)                # > one sample flush (1 s)
        p.kill()                       # joulebound dies hard, no cleanup
        p.wait(timeout=30)
    finally:
        if pidf.exists():              # the orphaned child still holds the pipes
            os.kill(int(pidf.read_text()), signal.SIGKILL)
    p.communicate(timeout=30)
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM runs").fetchone()[0] == "running"
    n, tmin, tmax = con.execute("SELECT COUNT(*), MIN(t_s), MAX(t_s) FROM samples").fetchone()
    assert n >= 10 and tmax - tmin > 0.5
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_runs_command_lists_and_exports(tmp_path, capsys):
    from joulebound.cli import main

    db = tmp_path / "runs.db"
    run_command([PY, "-c", "pass"], backend="simulated", db=db, interval_s=0.02)
    run_command([PY, "-c", "pass"], backend="none", db=db)
    capsys.readouterr()
    assert main(["runs", str(db), "--json"]) == 0
    docs = json.loads(capsys.readouterr().out)
    assert [d["backend"] for d in docs] == ["simulated", "none"]
    assert docs[0]["windows"][0]["provenance"] == "modeled" and docs[0]["windows"][0]["energy_j"] > 0
    assert docs[1]["windows"][0]["energy_j"] is None and docs[1]["exit_code"] == 0
    assert main(["runs", str(db), "--export", str(tmp_path / "x"), "--format", "parquet"]) == 0
    import pandas as pd

    assert len(pd.read_parquet(tmp_path / "x" / "windows.parquet")) == 2
    assert main(["runs", str(tmp_path / "missing.db")]) == 2


def test_sigint_from_kill_is_forwarded_once(tmp_path):
    """Not the terminal's foreground job (no tty here): SIGINT is forwarded, exactly once."""
    ready, got = tmp_path / "ready", tmp_path / "got"
    child = (f"import signal, sys, time, pathlib\n"
             f"n = []\n"
             f"def h(s, f):\n    n.append(s)\n"
             f"signal.signal(signal.SIGINT, h)\n"
             f"pathlib.Path({str(ready)!r}).write_text('1')\n"
             f"t = time.time()\n"
             f"while not n and time.time() - t < 20: time.sleep(0.01)\n"
             f"time.sleep(0.3)\n"
             f"pathlib.Path({str(got)!r}).write_text(str(len(n)))\n"
             f"sys.exit(5)\n")
    p = cli("measure", "--backend", "none", "--", PY, "-c", child, stdin=subprocess.DEVNULL)
    wait_for(ready)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 5, err
    assert got.read_text() == "1"


def test_json_stdout_is_one_document_when_the_child_prints(tmp_path):
    """With --json the child's own stdout goes to stderr, so stdout parses as JSON."""
    p = cli("measure", "--json", "--backend", "none", "--", PY, "-c",
            "print('hello from the child')")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert json.loads(out)["exit_code"] == 0
    assert "hello from the child" in err


def test_measure_records_into_runs_db_by_default_and_says_so(tmp_path, monkeypatch, capsys):
    """`measure` without --db recorded nothing, so `joulebound runs` then found nothing (issue
    28 item 11): it records into ./runs.db ($JOULEBOUND_DB) and says where; --no-db does not."""
    import json

    from joulebound.cli import main

    monkeypatch.delenv("JOULEBOUND_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["measure", "--backend", "none", "--", PY, "-c", "pass"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (tmp_path / "runs.db").exists()
    assert "recorded in runs.db" in out and "--no-db" in out
    assert main(["runs", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1
    other = tmp_path / "elsewhere.db"
    monkeypatch.setenv("JOULEBOUND_DB", str(other))
    assert main(["measure", "--backend", "none", "--json", "--", PY, "-c", "pass"]) == 0
    assert json.loads(capsys.readouterr().out)["db"] == str(other) and other.exists()
    assert main(["measure", "--no-db", "--backend", "none", "--json", "--", PY, "-c", "pass"]) == 0
    assert json.loads(capsys.readouterr().out)["db"] is None
    assert main(["runs", "--json"]) == 0                 # `runs` reads the same default
    assert len(json.loads(capsys.readouterr().out)) == 1
    assert main(["measure", "--no-db", "--db", "x.db", "--", PY, "-c", "pass"]) == 2


def test_a_meter_inside_a_measured_command_links_its_run_to_the_command_run(tmp_path,
                                                                           monkeypatch, capsys):
    """`measure -- python train.py` whose script meters itself (the HF callback, an
    EnergyMeter) wrote two unlinked runs (issue 28 item 11): the inner run records the outer
    one as its parent_run."""
    import json

    from joulebound.cli import main

    db = tmp_path / "runs.db"
    script = ("from joulebound.energy.meter import EnergyMeter\n"
              f"m = EnergyMeter('none', store={str(db)!r})\n"
              "m.begin_window('train'); m.end_window('train'); m.close()\n")
    assert main(["measure", "--db", str(db), "--backend", "none", "--json", "--", PY, "-c",
                 script]) == 0
    outer = json.loads(capsys.readouterr().out)["run_id"]
    assert main(["runs", str(db), "--json"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert len(runs) == 2 and runs[outer]["parent_run"] is None
    (inner,) = set(runs) - {outer}
    assert runs[inner]["parent_run"] == outer
    # a meter outside any measured command has no parent
    monkeypatch.delenv("JOULEBOUND_PARENT_RUN", raising=False)
    from joulebound.energy.meter import EnergyMeter
    from joulebound.energy.store import Store

    m = EnergyMeter("none", store=db)
    m.close()
    st = Store(db, readonly=True)
    row = next(r for r in st.runs() if r["run_id"] == m.run_id)
    assert "parent_run" not in json.loads(row["meta_json"])


def test_a_default_store_where_nothing_can_be_written_leaves_the_run_unrecorded_with_a_note(
        tmp_path, monkeypatch, capsys):
    import json

    from joulebound.cli import main

    monkeypatch.setenv("JOULEBOUND_DB", str(tmp_path / "ro" / "runs.db"))
    (tmp_path / "ro").mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m, **kw: False if str(p).endswith("ro")
                        else real(p, m, **kw))
    assert main(["measure", "--backend", "none", "--json", "--", PY, "-c", "pass"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["db"] is None and "not recorded" in out.err
    assert not (tmp_path / "ro" / "runs.db").exists()
