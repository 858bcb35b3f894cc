"""Actuators (dry-run, simulated, NVML via a fake) and the privileged clock helper."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from joulebound.core.clocks import AUTO, ClockConfig
from joulebound.core.errors import JouleboundError
from joulebound.gpumodel.characterization import Characterization
from joulebound.runtime.actuators import (
    DryRunActuator,
    NvmlActuator,
    SimulatedActuator,
    reset_all_clocks,
)
from joulebound.runtime.helper import ClockHelper, HelperActuator
from joulebound.testing.fakenvml import FakeNvml

HI, LO = ClockConfig(1410, 1593), ClockConfig(1005, 1593)


def test_dry_run_logs_only_changes():
    a = DryRunActuator()
    assert a.set_clocks(HI) and not a.set_clocks(HI) and a.set_clocks(LO)
    a.close()
    assert [s.config for s in a.switches] == [HI, LO, AUTO]
    ts = [s.t_s for s in a.switches]
    assert ts == sorted(ts) and ts[0] >= 0


def test_nvml_actuator_sets_only_on_change_and_resets():
    nv = FakeNvml()
    with NvmlActuator(nvml=nv, check_privileges=False, install_signal_handlers=False) as a:
        a.set_clocks(HI)
        a.set_clocks(HI)
        a.set_clocks(LO)
        assert nv.core_lock[0] == (1005, 1005) and nv.mem_lock[0] == (1593, 1593)
        assert nv.count("nvmlDeviceSetGpuLockedClocks") == 2
        a.set_clocks(ClockConfig(1200, None))      # memory back to the governor
        assert nv.mem_lock[0] is None and nv.core_lock[0] == (1200, 1200)
    assert nv.is_default()


def test_nvml_actuator_resets_on_exception():
    nv = FakeNvml()
    with pytest.raises(RuntimeError):
        with NvmlActuator(nvml=nv, check_privileges=False, install_signal_handlers=False) as a:
            a.set_clocks(LO)
            raise RuntimeError("training crashed")
    assert nv.is_default()


def test_nvml_actuator_without_privileges_says_what_to_do():
    nv = FakeNvml(privileged=False)
    a = NvmlActuator(nvml=nv, check_privileges=False, install_signal_handlers=False)
    with pytest.raises(JouleboundError, match="CAP_SYS_ADMIN.*clock-helper"):
        a.set_clocks(LO)
    a.close()
    if os.geteuid() != 0:
        with pytest.raises(JouleboundError, match="root or CAP_SYS_ADMIN"):
            NvmlActuator(nvml=FakeNvml())


def test_nvml_actuator_resets_on_sigterm():
    nv = FakeNvml()
    got = []
    prev = signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    try:
        a = NvmlActuator(nvml=nv, check_privileges=False)
        a.set_clocks(LO)
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not (nv.is_default() and got) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert nv.is_default() and got == [signal.SIGTERM]   # reset, and the program's handler
        assert a.closed and not a.set_clocks(HI)             # closed: no further NVML calls
        assert nv.core_lock[0] is None
    finally:
        signal.signal(signal.SIGTERM, prev)


def test_reset_all_clocks():
    nv = FakeNvml(n_gpus=3)
    nv.nvmlDeviceSetGpuLockedClocks(2, 900, 900)
    reps = reset_all_clocks(nvml=nv)
    assert [r.uuid for r in reps] == ["GPU-fake-0", "GPU-fake-1", "GPU-fake-2"]
    assert all(r.ok for r in reps) and nv.is_default()
    rep, = reset_all_clocks(nvml=FakeNvml(privileged=False), gpus=[0])
    assert not rep.ok and "sudo" in rep.errors[0]


def _char():
    cfgs = [AUTO, HI, LO]
    t = np.array([[1.0, 1.0, 2.0], [1.0, 1.0, 1.1]])
    e = np.array([[10.0, 9.0, 12.0], [10.0, 9.5, 6.0]])
    return Characterization(["a", "b"], cfgs, t, e, np.zeros((2, 3), bool))


def test_simulated_actuator_charges_clocks_in_effect_with_latency():
    sim = SimulatedActuator(_char(), switch_latency_s=1.5)
    sim.set_clocks(LO)          # issued at t=0, in effect from the first op starting at >= 1.5
    for lab in (0, 1, 0, -1, 1):
        sim.on_op(lab)
    tot = sim.totals
    # ops: a@auto (0..1), b@auto (1..2), a@LO (2..4), unknown (no cost), b@LO (4..5.1)
    assert tot.time_s == pytest.approx(1 + 1 + 2 + 1.1)
    assert tot.energy_j == pytest.approx(10 + 10 + 12 + 6)
    assert tot.unknown_ops == 1 and tot.switches == 1
    assert tot.per_iteration[0] == (pytest.approx(2.0), pytest.approx(20.0))
    with pytest.raises(JouleboundError, match="not in the characterization"):
        sim.set_clocks(ClockConfig(500, 500))


@pytest.fixture
def helper(tmp_path):
    nv = FakeNvml(n_gpus=2)
    h = ClockHelper(tmp_path / "clocks.sock", nvml=nv, check_privileges=False, burst=5,
                    min_interval_s=10.0).start()
    yield h, nv
    h.close()


def test_helper_socket_permissions_and_validation(helper):
    h, nv = helper
    assert oct(os.stat(h.path).st_mode & 0o777) == oct(0o660)
    a = HelperActuator(h.path, gpu=1)
    assert a.uuid == "GPU-fake-1"
    assert "1593" in a.hello["gpus"]["GPU-fake-1"]["supported"]
    a.set_clocks(LO)
    assert nv.core_lock[1] == (1005, 1005) and nv.core_lock[0] is None
    with pytest.raises(JouleboundError, match="not supported"):
        a.set_clocks(ClockConfig(1007, 1593))
    with pytest.raises(JouleboundError, match="memory clock 999"):
        a.set_clocks(ClockConfig(1005, 999))
    assert nv.core_lock[1] == (1005, 1005)       # refused requests changed nothing
    # another client may not take a GPU that is in use
    b = HelperActuator(h.path, gpu=1)
    with pytest.raises(JouleboundError, match="in use"):
        b.set_clocks(HI)
    b.close()
    a.close()
    assert nv.is_default()


def test_helper_rate_limits_defer_and_never_raise(helper):
    h, nv = helper
    a = HelperActuator(h.path, gpu=0)
    for i in range(5):                            # burst of 5, then one per 10 s
        a.set_clocks(HI if i % 2 else LO)
    n = nv.count("nvmlDeviceSetGpuLockedClocks")
    target = HI if a.current == LO else LO
    assert a.set_clocks(target) is False          # deferred, not an error
    assert nv.count("nvmlDeviceSetGpuLockedClocks") == n
    assert a.deferred == 1 and "1 switch(es) deferred" in a.rate_limit_note()
    a.reset()                                     # resets are never throttled
    assert nv.is_default(0)
    a.close()


CLIENT = """
import os, sys, time
from joulebound.core.clocks import ClockConfig
from joulebound.runtime.helper import HelperActuator
a = HelperActuator(sys.argv[1], gpu=0)
a.set_clocks(ClockConfig(1410, 1593))
a.set_clocks(ClockConfig(1005, 1215))
child = os.fork()            # like a DataLoader worker: outlives the SIGKILLed client a while
if child == 0:
    time.sleep(60)
    os._exit(0)
print("locked", child, flush=True)
time.sleep(60)
"""


def test_helper_restores_defaults_when_client_is_sigkilled(helper):
    h, nv = helper
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, str(h.path)],
                            stdout=subprocess.PIPE, text=True)
    child = None
    try:
        word, child = proc.stdout.readline().split()
        child = int(child)
        assert word == "locked"
        assert nv.core_lock[0] == (1005, 1005) and nv.mem_lock[0] == (1215, 1215)
        proc.send_signal(signal.SIGKILL)        # mid-plan, no chance to clean up
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while not nv.is_default() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert nv.is_default()
        assert nv.count("nvmlDeviceResetGpuLockedClocks") >= 1
    finally:
        if proc.poll() is None:
            proc.kill()
        if child:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handling for the test, even when the test run inherited SIGINT as
    ignored (a background job): the guard rightly keeps an inherited ignore -- another test."""
    prev = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, prev)


def test_nvml_actuator_resets_on_sigint_and_keeps_keyboardinterrupt(python_sigint):
    nv = FakeNvml()
    with pytest.raises(KeyboardInterrupt):
        a = NvmlActuator(nvml=nv, check_privileges=False)
        a.set_clocks(HI)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)
    a.close()                       # waits for the restorer thread's reset
    assert nv.is_default() and a.closed
    with pytest.raises(KeyboardInterrupt):   # nobody holds the guard: SIGINT is as before
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)


def test_nvml_actuator_pre_ampere_falls_back_to_core_clocks():
    nv = FakeNvml(memory_locks=False)
    with NvmlActuator(nvml=nv, check_privileges=False, install_signal_handlers=False) as a:
        a.set_clocks(LO)
        assert nv.core_lock[0] == (1005, 1005) and nv.mem_lock[0] is None
        assert a.lock_memory is False and "pre-Ampere" in a.notes[0]
        a.set_clocks(HI)
        assert nv.count("nvmlDeviceSetMemoryLockedClocks") == 1     # not retried
    assert nv.core_lock[0] is None


def test_helper_pre_ampere_locks_core_only(tmp_path):
    nv = FakeNvml(memory_locks=False)
    h = ClockHelper(tmp_path / "c.sock", nvml=nv, check_privileges=False).start()
    try:
        a = HelperActuator(h.path)
        a.set_clocks(LO)
        assert nv.core_lock[0] == (1005, 1005)
        a.close()
        assert nv.core_lock[0] is None
    finally:
        h.close()


def test_nvml_actuator_unknown_gpu_index():
    with pytest.raises(JouleboundError, match="GPU index 5 is not visible"):
        NvmlActuator(gpu=5, nvml=FakeNvml(), check_privileges=False,
                     install_signal_handlers=False)


@pytest.mark.parametrize("opener", ["actuator", "calibrate"])
def test_a_gpu_nvml_does_not_know_is_a_clear_error_and_nvml_is_shut_down(opener):
    """Both clock paths open the GPU through the device layer's one opener: an unknown GPU is
    named with the fix, and the NVML session is closed again (no leaked nvmlInit)."""
    from joulebound.measure.calibrate.backends import NvmlBackend

    nv = FakeNvml(n_gpus=1)
    with pytest.raises(JouleboundError, match=r"GPU index 3 is not visible.*nvidia-smi -L"):
        if opener == "actuator":
            NvmlActuator(gpu=3, nvml=nv, check_privileges=False, install_signal_handlers=False)
        else:
            NvmlBackend(gpu=3, nvml=nv)
    assert nv.count("nvmlInit") == nv.count("nvmlShutdown") == 1
