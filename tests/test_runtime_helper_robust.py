"""The clock helper under restarts, idle and flooding clients, and stop signals (issue 30, items
4, 7 and 9).

What docs/runtime.md (*Threat model*, *Helper robustness*) promises, each checked here against the
real helper (in this process, or as a real ``joulebound clock-helper`` process whose ``pynvml`` is
a cross-process :class:`FakeNvml`) and real clients:

* a helper restarted while ``joulebound run --actuator helper`` trains: the run goes on at the
  default clocks, reconnects with backoff and applies the plan again; a note and
  ``skipped_switches`` say what was skipped (item 4);
* a helper at its file-descriptor limit, held there by idle connections: the owner's session
  survives (its switches keep working, its GPU is never reset), idle connections are closed after
  the idle timeout and new clients are served again (item 7);
* idle connections are closed (an owner's never), a flooding client causes no NVML calls beyond
  the switches it is allowed (resets are coalesced) and is slowed to the per-connection request
  rate (item 9);
* a helper started with every stop signal inherited as ignored still stops on SIGTERM (and says
  truthfully which signals stop it) (item 9);
* TERM/QUIT to a calibration with ``--helper`` always unwind it (exit ``128 + N``), never the
  signal's default action: the guard's race between its restorer thread and the Python-level
  handler (item 9).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from joulebound.core.clocks import AUTO, ClockConfig
from joulebound.testing.fakenvml import FakeNvml
from tests.test_runtime_clock_safety import _env, _wait  # the cross-process fake NVML helpers

RUNNER = str(Path(__file__).with_name("_fake_nvml_cli.py"))
HI, LO = ClockConfig(1410, 1593), ClockConfig(1005, 1593)
SET = "nvmlDeviceSetGpuLockedClocks"
RESET = "nvmlDeviceResetGpuLockedClocks"
STOP = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _signals(ignore=(), nofile: int | None = None):
    """``preexec_fn``: every stop signal at its default, then ``ignore`` ignored; no core files;
    optionally an fd limit."""
    def pre() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        for s in STOP:
            signal.signal(s, signal.SIG_DFL)
        for s in ignore:
            signal.signal(s, signal.SIG_IGN)
    return pre


def _start_helper(env, sock: Path, *args: str, ignore=(), nofile=None) -> subprocess.Popen:
    h = subprocess.Popen([sys.executable, RUNNER, "clock-helper", "--socket", str(sock), *args],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_signals(ignore, nofile))
    _wait(lambda: sock.exists() or h.poll() is not None, timeout=60, what="the helper socket")
    assert h.poll() is None, h.communicate()
    return h


def _stop(h: subprocess.Popen) -> tuple[str, str]:
    if h.poll() is None:
        h.send_signal(signal.SIGTERM)
    try:
        return h.communicate(timeout=30)
    finally:
        if h.poll() is None:
            h.kill()
            h.communicate()


def _sets_by(nv: FakeNvml, pid: int) -> int:
    return sum(1 for c in nv.shared_calls() if c[0] == SET and c[1] == pid)


# -- item 4: a helper restart does not end training ----------------------------------------------
TRAIN = """
import sys
import time
from pathlib import Path
import torch
stop = Path(sys.argv[1]) if len(sys.argv) > 1 else None
x = torch.randn(8, 8)
w = torch.randn(8, 8)
i = 0
while True:
    y = torch.mm(x, w)
    y = torch.relu(y)
    x = torch.tanh(y)
    i += 1
    if stop is None and i >= 12 or stop is not None and stop.exists():
        break
    if stop is not None:
        time.sleep(0.01)
print("done", i, flush=True)
"""


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    """A training script that runs until a stop file appears, and a plan over its op stream with
    two phases per iteration (HI, then LO)."""
    pytest.importorskip("torch")
    from joulebound.cli import main
    from joulebound.planning.plan import Plan
    from joulebound.workload.trace import Trace

    d = tmp_path_factory.mktemp("restart")
    (d / "train.py").write_text(TRAIN)
    cwd = os.getcwd()
    os.chdir(d)
    try:
        assert main(["run", "--record", "ops.json", "--json", "--", "python", "train.py"]) == 0
    finally:
        os.chdir(cwd)
    names = Trace.load(d / "ops.json").names()
    choice = np.array([1 if i < len(names) // 2 else 2 for i in range(len(names))])
    Plan(device="test", kernel_names=names, configs=[AUTO, HI, LO], choice=choice,
         switch_latency_s=0.0).save(d / "plan.json")
    return d


def test_a_helper_restart_mid_run_does_not_end_training(plan_dir, tmp_path):
    """The attack of item 4: the helper is stopped (TERM) and started again while ``run
    --actuator helper`` trains. Before the fix the run ended with rc 2 "Broken pipe"."""
    env, nv = _env(tmp_path, "restart")
    sock = tmp_path / "c.sock"
    stop_file = tmp_path / "stop"
    h1 = _start_helper(env, sock, "--burst", "1000", "--min-interval", "0")
    run = subprocess.Popen([sys.executable, RUNNER, "run", "--plan", str(plan_dir / "plan.json"),
                            "--actuator", "helper", "--socket", str(sock), "--json", "--",
                            "python", str(plan_dir / "train.py"), str(stop_file)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=_signals())
    h2 = None
    try:
        _wait(lambda: _sets_by(nv, h1.pid) >= 3 or run.poll() is not None,
              what="the run switching through the first helper")
        assert run.poll() is None, run.communicate()
        _stop(h1)
        assert h1.returncode == 0 and nv.is_default()      # the stopping helper reset the GPU
        time.sleep(0.5)                                     # the run meets the dead connection
        assert run.poll() is None, run.communicate()        # was: rc 2, "Broken pipe"
        h2 = _start_helper(env, sock, "--burst", "1000", "--min-interval", "0")
        _wait(lambda: _sets_by(nv, h2.pid) >= 2 or run.poll() is not None, timeout=60,
              what="the run switching through the restarted helper")
        assert run.poll() is None, run.communicate()
        stop_file.write_text("")
        out, err = run.communicate(timeout=60)
    finally:
        stop_file.write_text("")
        if run.poll() is None:
            run.kill()
            run.communicate()
        _stop(h1)
        if h2 is not None:
            _stop(h2)
    assert run.returncode == 0, err[-3000:]
    res = json.loads(out)
    assert res["exit_code"] == 0 and res["skipped_switches"] >= 1
    note = next(n for n in res["notes"] if "connection" in n and "lost" in n)
    assert "reconnected" in note and f"{res['skipped_switches']:,} switch(es) skipped" in note
    assert nv.is_default()


def test_a_lost_helper_is_asked_for_again_with_backoff(tmp_path, monkeypatch):
    """Client side, in this process: a stopped helper answers nothing; switches are skipped (no
    error) and the connection is tried again after a backoff, then the plan is applied again."""
    from joulebound.runtime import helper as helper_mod
    from joulebound.runtime.helper import ClockHelper, HelperActuator

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(helper_mod, "RECONNECT_RETRY_S", 0.05, raising=False)
    nv = FakeNvml()
    h = ClockHelper(tmp_path / "c.sock", nvml=nv, check_privileges=False).start()
    a = HelperActuator(h.path, gpu=0, skip_when_busy=True, install_signal_handlers=False)
    assert a.set_clocks(LO)
    h.close()                                       # the helper stops: resets GPU 0
    assert nv.is_default()
    assert not a.set_clocks(HI)                     # was: JouleboundError (connection failed)
    assert a.current == AUTO and not a.set_clocks(HI) and a.skipped == 2
    h = ClockHelper(tmp_path / "c.sock", nvml=nv, check_privileges=False).start()
    try:
        time.sleep(0.06)
        assert a.set_clocks(HI) and nv.core_lock[0] == (1410, 1410)
        a.close()
    finally:
        h.close()
    assert any("reconnected 1 time" in n and "2 switch(es) skipped" in n for n in a.notes), a.notes
    assert nv.is_default()
    # calibration (no skipping) keeps the error: it must not measure at clocks it did not set
    h = ClockHelper(tmp_path / "c.sock", nvml=nv, check_privileges=False).start()
    b = HelperActuator(h.path, gpu=0, install_signal_handlers=False)
    h.close()
    with pytest.raises(Exception, match="clock helper"):
        b.set_clocks(LO)
    b.close()


# -- item 7: the fd limit and idle connections ---------------------------------------------------
def _connect_raw(path: Path, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(2)
        end = time.monotonic() + 0.5
        while True:
            try:
                c.connect(str(path))
                out.append(c)
                break
            except (BlockingIOError, ConnectionRefusedError):
                if time.monotonic() > end:
                    c.close()
                    break
                time.sleep(0.01)
    return out


def test_at_its_fd_limit_the_helper_keeps_the_owners_session_and_serves_new_clients(tmp_path):
    """The attack of item 7: a helper under ``RLIMIT_NOFILE=64``, 100 idle connections. Before
    the fix the owner's next switch failed (no fd left for NVML), its run died and its GPU was
    reset, and new clients were not served."""
    from joulebound.runtime.helper import HelperActuator

    env, nv = _env(tmp_path, "fd")
    sock = tmp_path / "c.sock"
    h = _start_helper(env, sock, "--idle-timeout", "1", nofile=64)
    owner = HelperActuator(sock, gpu=0, skip_when_busy=True, install_signal_handlers=False)
    idle: list[socket.socket] = []
    try:
        assert owner.set_clocks(LO)
        idle = _connect_raw(sock, 100)
        time.sleep(0.3)
        assert owner.set_clocks(HI) and owner.set_clocks(LO)   # was: "Too many open files"
        time.sleep(1.5)                              # the owner idles past the timeout too
        assert owner.set_clocks(HI) and nv.core_lock[0] == (1410, 1410)
        helper_resets = [c for c in nv.shared_calls() if c[0] == RESET and c[1] == h.pid]
        assert not helper_resets                     # the owner's GPU was never reset
        # the idle connections were told and closed, so a new client is served again
        told = 0
        for c in idle:
            try:
                data = c.recv(4096)
            except OSError:
                continue
            told += b'"idle"' in data
        assert told >= 1
        late = HelperActuator(sock, gpu=0, skip_when_busy=True, install_signal_handlers=False)
        assert "GPU-fake-0" in late.hello["gpus"]
        assert not late.set_clocks(LO) and late.skipped == 1    # busy: the owner has it
        late.close()
        owner.close()
        assert nv.is_default()
    finally:
        for c in idle:
            c.close()
        owner.close()
        _stop(h)
    assert h.returncode == 0


# -- item 9: idle timeout, flooding, ignored stop signals, the calibrate race ---------------------
def test_idle_connections_are_closed_and_their_slots_freed_but_an_owners_never(tmp_path,
                                                                              monkeypatch):
    from joulebound.core.errors import JouleboundError
    from joulebound.runtime.helper import ClockHelper, HelperActuator

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nv = FakeNvml()
    h = ClockHelper(tmp_path / "c.sock", nvml=nv, check_privileges=False, max_clients=3,
                    idle_timeout_s=0.3).start()
    try:
        owner = HelperActuator(h.path, gpu=0, install_signal_handlers=False)
        assert owner.set_clocks(LO)
        squatters = _connect_raw(h.path, 2)              # one member fills the other slots
        time.sleep(0.05)
        with pytest.raises(JouleboundError, match="at most 3 clients"):
            HelperActuator(h.path, gpu=0, install_signal_handlers=False)
        time.sleep(0.6)                                  # past the idle timeout
        for c in squatters:
            msg = json.loads(c.makefile("rb").readline())
            assert msg["code"] == "idle" and "idle" in msg["error"]
            assert c.recv(10) == b""                     # and closed
            c.close()
        other = HelperActuator(h.path, gpu=0, install_signal_handlers=False)   # served now
        assert nv.core_lock[0] == (1005, 1005) and owner.set_clocks(HI)        # owner kept
        # a client closed for idleness (it owned nothing) reconnects on its next request
        time.sleep(0.6)
        with pytest.raises(Exception, match="in use"):   # busy: a reply, not a lost connection
            other.set_clocks(LO)
        other.close()
        owner.close()
    finally:
        h.close()
    assert nv.is_default()


def test_a_flooding_client_causes_no_extra_nvml_calls_and_is_slowed(tmp_path, monkeypatch):
    """Item 9's flood: one client pipelining thousands of resets (was: 8,846 NVML reset calls) and
    set/reset pairs. Resets at the defaults are coalesced; sets are bounded by the per-GPU rate
    limit; every request is still answered, at most ``request_rate`` per second."""
    from joulebound.runtime.helper import ClockHelper

    nv = FakeNvml()
    h = ClockHelper(tmp_path / "c.sock", nvml=nv, check_privileges=False, burst=3,
                    min_interval_s=30.0, request_rate=2000.0, request_burst=2000).start()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(str(h.path))
    f = s.makefile("rb")
    try:
        def send(lines: list[bytes]) -> list[dict]:
            s.sendall(b"".join(lines))
            return [json.loads(f.readline()) for _ in lines]

        set_lo = b'{"op": "set", "gpu": 0, "core": 1005, "mem": 1593}\n'
        reset = b'{"op": "reset", "gpu": 0}\n'
        assert send([set_lo])[0]["ok"]
        replies = send([reset] * 1500)
        assert all(r["ok"] for r in replies)
        assert nv.count(RESET) == 1                      # was: 1,500
        replies = send([set_lo, reset] * 300)
        assert sum(1 for r in replies if r.get("code") == "rate_limited") >= 290
        assert nv.count(SET) <= 3 and nv.count(RESET) <= 3
        assert nv.is_default()
    finally:
        f.close()
        s.close()
        h.close()
    # the per-connection request rate: 60 requests at 100/s after a burst of 10 take >= 0.45 s
    h = ClockHelper(tmp_path / "d.sock", nvml=nv, check_privileges=False, request_rate=100.0,
                    request_burst=10).start()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(str(h.path))
    f = s.makefile("rb")
    try:
        t0 = time.monotonic()
        s.sendall(b'{"op": "hello"}\n' * 60)
        assert all(json.loads(f.readline())["ok"] for _ in range(60))
        assert time.monotonic() - t0 >= 0.45
    finally:
        f.close()
        s.close()
        h.close()


def test_a_helper_started_with_every_stop_signal_ignored_still_stops_on_sigterm(tmp_path):
    """``nohup``-style starts: INT, TERM, HUP and QUIT inherited as ignored. Before the fix the
    helper could only be SIGKILLed (its GPU left locked) while it printed "SIGTERM stops it"."""
    from joulebound.runtime.helper import HelperActuator

    env, nv = _env(tmp_path, "ign")
    sock = tmp_path / "c.sock"
    h = _start_helper(env, sock, ignore=STOP)
    try:
        a = HelperActuator(sock, gpu=0, install_signal_handlers=False)
        assert a.set_clocks(LO) and not nv.is_default()
        h.send_signal(signal.SIGINT)                 # inherited as ignored: stays ignored
        time.sleep(0.3)
        assert h.poll() is None
        h.send_signal(signal.SIGTERM)
        out, err = h.communicate(timeout=30)         # was: TimeoutExpired
        a.close()
    finally:
        _stop(h)
    assert h.returncode == 0, err[-2000:]
    assert nv.is_default() and not sock.exists()
    said = " ".join(out.split())
    assert "SIGTERM stops it" in said
    assert "SIGINT, SIGHUP and SIGQUIT were inherited as ignored" in said, said


CALIBRATE_CHILD = textwrap.dedent("""
    import sys, time
    from joulebound.core.clocks import ClockConfig
    from joulebound.core.errors import GpuBusy
    from joulebound.measure.calibrate.clocks import ClockSession, open_actuator
    from joulebound.runtime.guard import SignalExit

    sock, n = sys.argv[1], int(sys.argv[2])
    for i in range(n):
        try:
            # what `joulebound calibrate --helper` does (calibration.py): a session per run,
            # closed in a finally
            s = ClockSession(open_actuator("nvml", gpu=0, helper=sock), {1593: [1410, 1005]})
            try:
                while True:   # the helper may not have seen the last session's EOF yet
                    try:
                        s.set(ClockConfig(1005 if i % 2 else 1410, 1593))
                        break
                    except GpuBusy:
                        time.sleep(0.01)
                print("ready", i, flush=True)
                while True:
                    time.sleep(0.005)
            finally:
                s.close()
        except SignalExit as exc:
            print("stopped", i, exc.code, flush=True)
""")


def test_stop_signals_to_a_calibration_through_the_helper_always_unwind_it(tmp_path,
                                                                           monkeypatch):
    """TERM and QUIT, 16 times, to a process in a calibration's clock session through the helper.
    Before the fix the guard's restorer thread often restored (and unregistered) the helper
    client before the Python handler ran, which then took the signal's default action (the attack
    saw 8 of 13 trials die so)."""
    from joulebound.runtime.helper import ClockHelper

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nv = FakeNvml()
    h = ClockHelper(tmp_path / "c.sock", nvml=nv, check_privileges=False, burst=1000,
                    min_interval_s=0.0).start()
    n = 16
    p = subprocess.Popen([sys.executable, "-c", CALIBRATE_CHILD, str(h.path), str(n)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_signals())
    seen = []
    try:
        for i in range(n):
            line = p.stdout.readline().split()
            assert line == ["ready", str(i)], (line, p.poll())
            sig = (signal.SIGTERM, signal.SIGQUIT)[i % 2]
            p.send_signal(sig)
            line = p.stdout.readline().split()
            assert line, f"trial {i}: the process died by {p.wait(timeout=10)}"   # was: -15/-3
            assert line == ["stopped", str(i), str(128 + sig)], line
            seen.append(line)
        p.communicate(timeout=30)
        assert p.returncode == 0
        _wait(lambda: nv.is_default(), timeout=10, what="the helper resetting the GPU")
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
        h.close()
    assert len(seen) == n and nv.is_default()
