"""``joulebound measure`` as a process among processes (issue 30 items 10-12): the terminal, a
SIGKILLed ``measure``, SIGTERM and Ctrl-C to a metered command."""

from __future__ import annotations

import json
import os
import select
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest

PY = sys.executable


def _pty_run(script: str, send: bytes | list[bytes],
             timeout: float = 60.0) -> tuple[int | None, str]:
    """Run ``bash -c script`` on a new pseudo-terminal (its session leader, in the foreground);
    type ``send`` (each item 0.5 s after the previous) once READY was printed; returns (wait
    status or None on timeout, output)."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execvp("bash", ["bash", "-c", script])
    out = b""
    sent = False
    status: int | None = None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                try:
                    d = os.read(fd, 4096)
                except OSError:
                    d = b""
                out += d
            if not sent and b"READY" in out:
                for i, keys in enumerate([send] if isinstance(send, bytes) else send):
                    if i:
                        time.sleep(0.5)
                    os.write(fd, keys)
                sent = True
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
                break
    finally:
        if status is None:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    return status, out.decode(errors="replace")


def test_measure_in_a_terminal_lets_the_command_read_it():
    """Item 10: measure not leading its process group (``bash -c '...; true'``) in the
    foreground of a terminal: the command reads the terminal as it would alone."""
    cmd = (f"{PY} -m joulebound measure --backend none -- {PY} -c "
           "'print(\"READY\", flush=True); print(\"got\", repr(input()))'; echo rc=$?")
    status, out = _pty_run(cmd, b"hello\n", timeout=30)
    assert status is not None, f"measure hung: the command could not read the terminal\n{out}"
    assert "got 'hello'" in out, out
    assert "rc=0" in out, out


def test_ctrl_z_at_the_terminal_never_leaves_measure_waiting_on_a_stopped_command():
    """Item 10: Ctrl-Z stops the command's group; measure takes its job's stop (here, a session
    with no job-control shell, the stop is discarded) and continues the command with the
    terminal: it still reads what is typed next."""
    cmd = (f"{PY} -m joulebound measure --backend none -- {PY} -c "
           "'print(\"READY\", flush=True); print(\"got\", repr(input()))'; echo rc=$?")
    status, out = _pty_run(cmd, [b"\x1a", b"again\n"], timeout=30)
    assert status is not None, f"measure hung on the stopped command\n{out}"
    assert "got 'again'" in out and "rc=0" in out, out


METERED = """
import sys, time
from joulebound.energy.meter import EnergyMeter
m = EnergyMeter("simulated", store=sys.argv[1], interval_s=0.05)
m.begin_window("train")
print("READY", flush=True)
time.sleep(120)
"""


def _store_run(db: Path) -> tuple[dict, list]:
    from joulebound.energy.store import Store

    with Store(db, readonly=True) as st:
        (run,) = st.runs()
        return run, st.windows(run["run_id"])


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130),
                                       (signal.SIGHUP, 129)])
def test_a_metered_script_stopped_by_a_signal_is_killed_and_keeps_its_open_window(
        tmp_path, sig, code):
    """Item 12: SIGTERM (torchrun teardown, preemption), SIGHUP and Ctrl-C to a metered script:
    the run is ``killed`` with 128 + the signal, the open ``train`` window kept, cut short."""
    import subprocess

    db = tmp_path / "runs.db"
    p = subprocess.Popen([PY, "-c", METERED, str(db)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL)
                                             for s in (signal.SIGINT, signal.SIGTERM,
                                                       signal.SIGHUP)])
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "READY"
        time.sleep(0.3)
        p.send_signal(sig)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode in (code, -sig), err
    run, windows = _store_run(db)
    assert (run["status"], run["exit_code"]) == ("killed", code), (run, err[-2000:])
    (train,) = [w for w in windows if w.name == "train"]
    assert "cut_short" in train.flags and train.duration_s > 0.2


def test_a_sigkilled_measure_takes_its_command_down_and_its_run_is_marked_lost(tmp_path):
    """Item 11: measure SIGKILLed: its command dies with it, the training ``bash`` started too
    (the watcher), and the next open of the store marks the run ``lost`` (pid and boot id
    recorded), keeping its samples."""
    import subprocess

    from joulebound.energy.store import Store

    db, pidf = tmp_path / "runs.db", tmp_path / "child.pid"
    child = (f"import os, time; open({str(pidf)!r}, 'w').write(str(os.getpid())); "
             "time.sleep(120)")
    # the training is a grandchild: `bash` starts it (`measure -- bash train.sh`)
    m = subprocess.Popen([PY, "-m", "joulebound", "measure", "--backend", "simulated",
                          "--interval", "0.02", "--db", str(db), "--", "bash", "-c",
                          f"{PY} -c {shlex.quote(child)}; echo after"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (pidf.exists() and pidf.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        cpid = int(pidf.read_text())
        time.sleep(1.5)                        # samples are committed about every second
        m.kill()
        m.wait(timeout=30)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{cpid}").exists() and time.monotonic() < deadline:
            st = Path(f"/proc/{cpid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if st == "Z":
                break
            time.sleep(0.05)
        gone = not Path(f"/proc/{cpid}").exists() or \
            Path(f"/proc/{cpid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        if not gone:
            os.kill(cpid, signal.SIGKILL)
        assert gone, "the training kept running, unmetered, after measure was SIGKILLed"
    finally:
        if m.poll() is None:
            m.kill()
    with Store(db, readonly=True) as ro:      # read-only: reported lost, not written
        (run,) = ro.runs()
        assert run["status"] == "lost"
    with Store(db) as st:                     # the next writable open marks it
        assert st.lost == [run["run_id"]]
    with Store(db, readonly=True) as ro:
        (run,) = ro.runs()
        n = ro.query("SELECT COUNT(*) FROM samples WHERE run_id=?", (run["run_id"],))[0][0]
        row = ro.query("SELECT status, ended_at FROM runs")[0]
    assert row[0] == "lost" and row[1] is not None and n > 0


def test_a_run_whose_process_lives_or_is_elsewhere_is_not_marked_lost(tmp_path):
    from joulebound.energy.store import Store, owner_gone, owner_record

    me = owner_record()
    assert not owner_gone(me)
    assert not owner_gone({**me, "host": me["host"] + "-elsewhere", "pid": 2**22 + 1})
    assert not owner_gone({**me, "pid_ns": "pid:[1]", "pid": 2**22 + 1})   # another container
    assert owner_gone({**me, "pid": 2**22 + 1}) == os.path.isdir("/proc")      # no such pid
    assert owner_gone({**me, "boot_id": "an-earlier-boot"}) == (me["boot_id"] is not None)
    assert not owner_gone(None) and not owner_gone({"pid": "x"})
    db = tmp_path / "runs.db"
    with Store(db) as st:
        st.begin_run("mine")
        st.begin_run("other-boot")
        st.query("UPDATE runs SET meta_json=? WHERE run_id='other-boot'",
                 (json.dumps({"owner": {**me, "boot_id": "an-earlier-boot"}}),))
        st._con.commit()
    with Store(db) as st:
        status = dict(st.query("SELECT run_id, status FROM runs"))
    assert status["mine"] == "running"
    if me["boot_id"] is not None:
        assert status["other-boot"] == "lost"


def test_the_stop_signal_handlers_are_there_only_while_a_meter_is_open(monkeypatch):
    """SIGTERM/SIGHUP at their default action get the meter's handler while a meter is open and
    get it back after; a handler of the program's own, or an ignored signal, is left alone."""
    from joulebound.energy import stopsignals
    from joulebound.energy.meter import EnergyMeter

    # meters other tests of this process left open do not count here
    monkeypatch.setattr(stopsignals, "_users", 0)
    monkeypatch.setattr(stopsignals, "_installed", {})

    def own(signum, frame):  # pragma: no cover - never called
        pass

    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        with EnergyMeter("none", interval_s=0), EnergyMeter("none", interval_s=0):
            assert signal.getsignal(signal.SIGTERM) is stopsignals._handler
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        signal.signal(signal.SIGTERM, own)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        with EnergyMeter("none", interval_s=0):
            assert signal.getsignal(signal.SIGTERM) is own
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is own
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@pytest.mark.parametrize("code", [130, 143])
def test_an_accelerate_loop_ended_by_a_signal_records_killed_and_its_exit_code(tmp_path, code):
    """The Accelerate hook closes its run as ``killed`` with ``128 + N`` (it kept the status but
    dropped the exit code)."""
    from joulebound.energy import stopsignals
    from joulebound.energy.accelerate import EnergyHook
    from joulebound.energy.store import Store

    class Acc:
        def log(self, metrics, step=None):
            pass

    exc = KeyboardInterrupt() if code == 130 else stopsignals.MeterSignalExit(signal.SIGTERM)
    db = tmp_path / "runs.db"
    with pytest.raises(type(exc)), EnergyHook(Acc(), backend="simulated", store=db):
        raise exc
    with Store(db, readonly=True) as st:
        (run,) = st.runs()
    assert (run["status"], run["exit_code"]) == ("killed", code)
