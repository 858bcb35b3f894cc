"""A training process that dies without unwinding leaves no GPU locked (issue 30 item 5).

``joulebound run --actuator nvml`` runs in a real child process whose ``pynvml`` is the
cross-process fake (``tests/_fake_nvml_cli.py``); the training script locks clocks through the
plan, then ends by ``os._exit``, ``abort()``, SIGSEGV, SIGBUS or SIGKILL: none of these runs a
``finally`` block, ``atexit`` or a signal handler. The actuator's forked clock guardian
(:mod:`joulebound.runtime.guardian`) resets the GPU when the process is gone.
"""

from __future__ import annotations

import resource
import signal
import subprocess
import time

import pytest

from tests.test_runtime_clock_safety import SET, _child_signals, _env, _run_cmd, _wait, plan_dir

__all__ = ["plan_dir"]      # the module-scoped fixture, shared with the signal tests

DIE = """
import ctypes, os, signal, sys
import torch
x = torch.randn(8, 8)
w = torch.randn(8, 8)
for i in range(int(sys.argv[1])):
    y = torch.mm(x, w)
    y = torch.relu(y)
    x = torch.tanh(y)
print("locked", flush=True)
how = sys.argv[2]
if how == "_exit":
    os._exit(7)
if how == "abort":
    os.abort()
if how == "segv":
    ctypes.string_at(0)
os.kill(os.getpid(), getattr(signal, how))
"""

HOW = {"_exit": 7, "abort": -signal.SIGABRT, "segv": -signal.SIGSEGV,
       "SIGBUS": -signal.SIGBUS, "SIGKILL": -signal.SIGKILL}


def _no_core() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


@pytest.fixture(scope="module")
def deaths(plan_dir, tmp_path_factory):
    """One run per way of dying, all started at once (each pays the torch import)."""
    tmp = tmp_path_factory.mktemp("deaths")
    (plan_dir / "die.py").write_text(DIE)
    out = {}
    for how in HOW:
        env, nv = _env(tmp, how.strip("_"))
        cmd = _run_cmd(plan_dir, steps=0)
        cmd[-2:] = [str(plan_dir / "die.py"), "40", how]
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True,
                             preexec_fn=_child_signals(then=_no_core))
        out[how] = (p, nv)
    yield out
    for p, _ in out.values():
        if p.poll() is None:
            p.kill()
            p.communicate()


@pytest.mark.parametrize("how", list(HOW))
def test_a_run_that_dies_without_unwinding_leaves_the_gpu_at_the_defaults(deaths, how):
    p, nv = deaths[how]
    _, err = p.communicate(timeout=180)
    code = p.returncode
    if how == "segv" and code == 128 + signal.SIGSEGV:   # faulthandler re-raised it: same death
        code = -signal.SIGSEGV
    assert code == HOW[how], (how, p.returncode, err[-3000:])
    assert nv.count(SET) >= 2, f"the plan never locked the clocks ({how}): {err[-2000:]}"
    _wait(nv.is_default, timeout=20, what=f"the guardian resetting the GPU after {how}")
    resets = [c for c in nv.shared_calls() if c[0].startswith("nvmlDeviceReset")]
    assert resets and resets[-1][1] != p.pid      # reset by the guardian, not the dead process


def test_a_clean_run_leaves_its_guardian_nothing_to_do(plan_dir, tmp_path):
    """A run that ends normally resets the clocks itself; its guardian exits without a call."""
    env, nv = _env(tmp_path, "clean")
    r = subprocess.run(_run_cmd(plan_dir, steps=20), env=env, capture_output=True, text=True,
                       timeout=180, preexec_fn=_child_signals())
    assert r.returncode == 0, r.stderr[-2000:]
    time.sleep(0.5)
    assert nv.is_default()
    assert nv.count(SET) >= 2
    pids = {c[1] for c in nv.shared_calls()}
    assert len(pids) == 1, pids          # every call from the run: none from its guardian
