"""``joulebound measure`` as a process among processes (issue 30 items 10-12): the terminal, a
SIGKILLed ``measure``, SIGTERM and Ctrl-C to a metered command."""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from pathlib import Path

import pytest

PY = sys.executable


def _pty_run(script: str, send: bytes, timeout: float = 60.0) -> tuple[int | None, str]:
    """Run ``bash -c script`` on a new pseudo-terminal (its session leader, in the foreground);
    type ``send`` once something was printed; returns (wait status or None on timeout, output)."""
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
                os.write(fd, send)
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
