"""Clock control that a local user cannot hijack or block (issue 30, items 1, 2, 3, 6 and 8).

What docs/runtime.md's *Threat model* promises, each checked here:

* the helper's ``<socket>.lock`` and every GPU lock file are opened without following symlinks,
  created exclusively and checked (a plain file with one link, of root / this user) before a byte
  is written: a planted symlink or hard link is refused and its target is never written (item 1);
  the helper refuses a socket folder other users can write;
* lock files cannot be opened (so not ``flock``-ed) by users outside the lock folder's owner and
  group: folder 0700 (0770 for a group), files 0600 (0660); a folder or file left open by an
  older version is tightened. As root, a real unprivileged user (``nobody``) tries to take a read
  lock on the GPU's lock file and cannot block clock control (item 2; skipped when not root —
  without root the file modes and the checks are what is tested);
* one lock folder per machine, whatever ``TMPDIR``, ``JOULEBOUND_LOCK_DIR`` or the privileges: a
  helper client and an in-process run never both drive a GPU (item 3);
* a plan's clock pairs are checked against the live GPU's table before the script starts: the
  unsupported ones are named and nothing runs, or ``--snap`` maps them with a note (item 6);
* a GPU another client holds at the first switch: training goes on without changing clocks,
  ``skipped_switches`` and a note say so (item 8).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from joulebound.core.clocks import AUTO, ClockConfig, is_supported, nearest_supported
from joulebound.core.errors import GpuBusy, JouleboundError
from joulebound.hw import gpu as gpu_layer
from joulebound.testing.fakenvml import FakeNvml

HI, LO = ClockConfig(1410, 1593), ClockConfig(1005, 1593)
SET = "nvmlDeviceSetGpuLockedClocks"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

TRAIN = """
import sys
from pathlib import Path
import torch
Path(sys.argv[2]).write_text("started")
x = torch.randn(8, 8)
w = torch.randn(8, 8)
for i in range(int(sys.argv[1])):
    y = torch.mm(x, w)
    y = torch.relu(y)
    x = torch.tanh(y)
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A training script and its recorded op stream (the plan's kernel names)."""
    pytest.importorskip("torch")
    from joulebound.cli import main
    from joulebound.workload.trace import Trace

    d = tmp_path_factory.mktemp("trust")
    (d / "train.py").write_text(TRAIN)
    cwd = os.getcwd()
    os.chdir(d)
    try:
        assert main(["run", "--record", "ops.json", "--json", "--", "python", "train.py", "12",
                     str(d / "rec.marker")]) == 0
    finally:
        os.chdir(cwd)
    return d, Trace.load(d / "ops.json").names()


def _plan(d: Path, names: list[str], configs: list[ClockConfig], name: str) -> Path:
    from joulebound.planning.plan import Plan

    choice = np.array([1 + (i % (len(configs) - 1)) for i in range(len(names))])
    path = d / f"{name}.json"
    Plan(device="test", kernel_names=names, configs=configs, choice=choice,
         switch_latency_s=0.0).save(path)
    return path


@pytest.fixture
def cli_nvml(monkeypatch):
    """The CLI in this process with a FakeNvml as ``pynvml`` and clock privileges."""
    monkeypatch.setattr(gpu_layer, "has_clock_privileges", lambda: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nv = FakeNvml(n_gpus=1)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return nv


def _lock_dir(monkeypatch, path: Path) -> Path:
    """Point this process's GPU lock folder at ``path`` (the environment variable too: the code
    before this fix read it, so the tests also run, and fail, against that code)."""
    monkeypatch.setattr(gpu_layer, "LOCK_DIR", path, raising=False)
    monkeypatch.setenv("JOULEBOUND_LOCK_DIR", str(path))
    return path


# -- item 1: nothing is written through a planted link ------------------------------------------
def test_a_symlink_at_the_helpers_lock_file_is_refused_and_its_target_never_written(tmp_path):
    from joulebound.runtime.helper import ClockHelper

    victim = tmp_path / "root-owned-secret"
    victim.write_text("do not touch")
    victim.chmod(0o600)
    folder = tmp_path / "sock"
    folder.mkdir(mode=0o755)
    (folder / "clocks.sock.lock").symlink_to(victim)
    with pytest.raises(JouleboundError, match="symbolic link"):
        ClockHelper(folder / "clocks.sock", nvml=FakeNvml(), check_privileges=False).start()
    assert victim.read_text() == "do not touch"       # was: the helper's pid written through
    assert not (folder / "clocks.sock").exists()


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775])
def test_the_helper_refuses_a_socket_folder_other_users_can_write(tmp_path, mode):
    from joulebound.runtime.helper import ClockHelper

    victim = tmp_path / "secret"
    victim.write_text("do not touch")
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    (folder / "clocks.sock.lock").symlink_to(victim)
    with pytest.raises(JouleboundError, match="writable by other users"):
        ClockHelper(folder / "clocks.sock", nvml=FakeNvml(), check_privileges=False).start()
    assert victim.read_text() == "do not touch"
    assert [p.name for p in folder.iterdir()] == ["clocks.sock.lock"]


def test_a_link_planted_at_a_gpu_lock_file_is_refused_and_its_target_never_written(
        tmp_path, monkeypatch):
    locks = _lock_dir(monkeypatch, tmp_path / "locks")
    locks.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("do not touch")
    (locks / "GPU-fake-0.lock").symlink_to(victim)
    with pytest.raises(JouleboundError, match="symbolic link"):     # was: a raw OSError
        gpu_layer.GpuLock("GPU-fake-0").acquire()
    os.link(victim, locks / "GPU-fake-1.lock")                       # a hard link
    with pytest.raises(JouleboundError, match="one link"):
        gpu_layer.GpuLock("GPU-fake-1").acquire()
    assert victim.read_text() == "do not touch"                     # was: the holder's JSON
    # the lock folder itself must not be a symlink either
    other = tmp_path / "elsewhere"
    other.mkdir(mode=0o700)
    _lock_dir(monkeypatch, tmp_path / "linked-locks").symlink_to(other)
    with pytest.raises(JouleboundError, match="symbolic link"):
        gpu_layer.GpuLock("GPU-fake-2").acquire()
    assert not list(other.iterdir())


# -- item 2: no user outside the folder's owner and group can block clock control ---------------
def test_lock_files_cannot_be_opened_by_other_users_and_old_open_modes_are_closed(tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setattr(os, "umask", os.umask)        # the test does not change the umask
    old = os.umask(0o022)
    try:
        locks = _lock_dir(monkeypatch, tmp_path / "locks")
        lk = gpu_layer.GpuLock("GPU-fake-0", owner="joulebound run").acquire()
        assert stat.S_IMODE(locks.stat().st_mode) == 0o700
        assert stat.S_IMODE((locks / "GPU-fake-0.lock").stat().st_mode) == 0o600
        lk.release()
        # a folder and a file as the previous version left them (0755 / 0644): tightened
        locks.chmod(0o755)
        (locks / "GPU-fake-1.lock").write_text("{}")
        (locks / "GPU-fake-1.lock").chmod(0o644)
        with gpu_layer.GpuLock("GPU-fake-1"):
            assert stat.S_IMODE(locks.stat().st_mode) == 0o750      # nothing for others
            assert stat.S_IMODE((locks / "GPU-fake-1.lock").stat().st_mode) == 0o600
        # a folder shared with a group of privileged users: 0770 -> files 0660, nothing for others
        locks.chmod(0o770)
        with gpu_layer.GpuLock("GPU-fake-2"):
            assert stat.S_IMODE((locks / "GPU-fake-2.lock").stat().st_mode) == 0o660
        # every user may write the folder: refused, nothing created
        locks.chmod(0o777)
        with pytest.raises(JouleboundError, match="writable by every user"):
            gpu_layer.GpuLock("GPU-fake-3").acquire()
        assert not (locks / "GPU-fake-3.lock").exists()
    finally:
        os.umask(old)


_NOBODY = 65534
_ATTACK = textwrap.dedent("""
    import fcntl, os, sys, time
    try:
        fd = os.open(sys.argv[1], os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        print("denied", exc.errno, flush=True)
        sys.exit(0)
    print("held", flush=True)
    time.sleep(60)
""")


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(_NOBODY)
    os.setuid(_NOBODY)


@pytest.mark.skipif(not IS_ROOT, reason="needs root to run the attack as another user; without "
                    "root the modes and checks are tested above")
def test_an_unprivileged_user_cannot_block_clock_control_with_a_read_lock(tmp_path_factory,
                                                                          monkeypatch):
    """The attack of item 2 with a real other user: ``nobody`` opens the GPU's lock file read-only
    and takes a shared ``flock``. Before the fix (folder 0755, file 0644) it held the lock and
    every clock change (helper and ``run --actuator nvml``) was refused ``busy``."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="jb-trust-"))    # not under pytest's 0700 folder
    try:
        base.chmod(0o755)                                 # like /run/joulebound
        locks = _lock_dir(monkeypatch, base / "locks")
        gpu_layer.GpuLock("GPU-fake-0", owner="joulebound clock-helper").acquire().release()
        lock_file = locks / "GPU-fake-0.lock"
        py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
        p = subprocess.Popen([py, "-I", "-c", _ATTACK, str(lock_file)],
                             stdout=subprocess.PIPE, text=True, preexec_fn=_as_nobody)
        try:
            line = p.stdout.readline().split()
            assert line and line[0] == "denied", line     # was: "held"
            with gpu_layer.GpuLock("GPU-fake-0"):          # was: GpuBusy while nobody held it
                pass
        finally:
            p.kill()
            p.wait()
        # a lock file that belongs to another user is not used (nor written)
        os.chown(lock_file, _NOBODY, _NOBODY)
        with pytest.raises(JouleboundError, match="belongs to uid 65534"):
            gpu_layer.GpuLock("GPU-fake-0").acquire()
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


# -- item 3: one lock folder per machine ---------------------------------------------------------
def test_one_lock_folder_per_machine_whatever_the_environment_or_privileges(tmp_path,
                                                                            monkeypatch):
    """A helper client (root's environment) holds GPU 0; a process with CAP_SYS_ADMIN but not
    root and its own TMPDIR / JOULEBOUND_LOCK_DIR must find the same lock and be refused."""
    import tempfile

    from joulebound.runtime.actuators import NvmlActuator
    from joulebound.runtime.helper import ClockHelper, HelperActuator

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    locks = _lock_dir(monkeypatch, tmp_path / "locks")
    nv = FakeNvml(n_gpus=1)
    h = ClockHelper(tmp_path / "c.sock", nvml=nv, check_privileges=False).start()
    a = HelperActuator(h.path, gpu=0)
    try:
        assert a.set_clocks(LO)
        # the other process: another environment, privileges without root
        for k, v in (("TMPDIR", tmp_path / "tmp"), ("JOULEBOUND_LOCK_DIR", tmp_path / "mine"),
                     ("HOME", tmp_path / "home"), ("XDG_RUNTIME_DIR", tmp_path / "xdg")):
            v.mkdir()
            monkeypatch.setenv(k, str(v))
        monkeypatch.setattr(tempfile, "tempdir", None)
        monkeypatch.setattr(gpu_layer, "has_clock_privileges", lambda: True)
        assert gpu_layer.GpuLock("GPU-fake-0").path == locks / "GPU-fake-0.lock"
        with pytest.raises(GpuBusy, match="clock-helper"):    # was: both drove GPU 0
            NvmlActuator(gpu=0, nvml=nv, install_signal_handlers=False)
        assert nv.count(SET) == 1 and nv.core_lock[0] == (1005, 1005)
        assert not any(list(p.iterdir()) for p in (tmp_path / "tmp", tmp_path / "mine"))
    finally:
        a.close()
        h.close()
    assert nv.is_default()


def test_no_fallback_folder_when_the_machine_folder_cannot_be_made(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    _lock_dir(monkeypatch, blocker / "locks")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    with pytest.raises(JouleboundError, match="install -d"):
        gpu_layer.GpuLock("GPU-fake-0").acquire()
    assert not list(tmp_path.glob("joulebound-gpu-locks*"))


# -- item 6: unsupported clocks are refused before the first step --------------------------------
BAD = [ClockConfig(-5, 1593), ClockConfig(0, 1593), ClockConfig(1007, 1593)]


@pytest.mark.parametrize("actuator", ["nvml", "helper"])
def test_a_plan_with_unsupported_clocks_is_refused_before_the_script_starts(
        recorded, cli_nvml, tmp_path, monkeypatch, capsys, actuator):
    from joulebound.cli import main
    from joulebound.runtime.helper import ClockHelper

    d, names = recorded
    plan = _plan(tmp_path, names, [AUTO, *BAD, HI], "bad")
    marker = tmp_path / "started"
    extra = []
    h = None
    if actuator == "helper":
        h = ClockHelper(tmp_path / "c.sock", nvml=cli_nvml, check_privileges=False).start()
        extra = ["--socket", str(h.path)]
    try:
        rc = main(["run", "--plan", str(plan), "--actuator", actuator, *extra, "--json", "--",
                   "python", str(d / "train.py"), "40", str(marker)])
    finally:
        if h is not None:
            h.close()
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2, err
    for c in BAD:                                    # every offending pair named, up front
        assert c.label in err, (c.label, err)
    assert "1410/1593" not in err.split("support:")[1].split(".")[0]
    assert "--snap" in err
    assert not marker.exists()                      # was: training ran (nvml) / died after 4 s
    assert cli_nvml.count(SET) == 0 and cli_nvml.is_default()


def test_snap_maps_unsupported_pairs_to_the_nearest_and_says_so(recorded, cli_nvml, tmp_path,
                                                                monkeypatch, capsys):
    from joulebound.cli import main

    d, names = recorded
    seen: dict[str, list[tuple[int, int]]] = {"core": [], "mem": []}
    for kind, call in (("core", SET), ("mem", "nvmlDeviceSetMemoryLockedClocks")):
        orig = getattr(cli_nvml, call)
        monkeypatch.setattr(cli_nvml, call, lambda h, lo, hi, orig=orig, kind=kind: (
            seen[kind].append((lo, hi)), orig(h, lo, hi))[1])
    off = [ClockConfig(1007, 1593), ClockConfig(1400, 1600), ClockConfig(1100, None)]
    plan = _plan(tmp_path, names, [AUTO, *off], "off")
    rc = main(["run", "--plan", str(plan), "--actuator", "nvml", "--snap", "--json", "--",
               "python", str(d / "train.py"), "40", str(tmp_path / "m")])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    note = next(n for n in out["notes"] if n.startswith("--snap"))
    for a, b in (("1007/1593", "1005/1593"), ("1400/1600", "1410/1593"), ("1100/auto",
                                                                          "1095/auto")):
        assert f"{a} -> {b}" in note, note
    cores = {lo for lo, _ in seen["core"]}
    assert cores and cores <= {1410, 1005, 1095}, cores    # only pairs of the GPU's table
    assert {lo for lo, _ in seen["mem"]} <= {1593}
    assert cli_nvml.is_default()
    # even with --snap, values that are not clocks are refused
    plan = _plan(tmp_path, names, [AUTO, ClockConfig(-5, 1593), HI], "neg")
    assert main(["run", "--plan", str(plan), "--actuator", "nvml", "--snap", "--", "python",
                 str(d / "train.py"), "4", str(tmp_path / "m2")]) == 2
    assert "-5/1593" in capsys.readouterr().err and not (tmp_path / "m2").exists()


def test_nearest_supported_is_the_one_clock_rule_nearest_pair():
    table = {1593: [1410, 1305, 1200, 1095, 1005, 900, 810], 1215: [1410, 1200, 1005, 810]}
    assert nearest_supported(HI, table) == HI
    assert nearest_supported(ClockConfig(1007, 1593), table) == ClockConfig(1005, 1593)
    assert nearest_supported(ClockConfig(1250, 1300), table) == ClockConfig(1200, 1215)
    assert nearest_supported(ClockConfig(1150, 1593), table) == ClockConfig(1200, 1593)  # tie up
    assert nearest_supported(ClockConfig(None, 1600), table) == ClockConfig(None, 1593)
    assert nearest_supported(ClockConfig(0, 1593), table) is None
    assert nearest_supported(ClockConfig(-5, None), table) is None
    assert nearest_supported(ClockConfig(1000, 1593), {}) is None
    for c in (ClockConfig(1, 1), ClockConfig(5000, 9000), ClockConfig(1300, None)):
        assert is_supported(nearest_supported(c, table), table)


# -- item 8: busy at the first switch ------------------------------------------------------------
def test_a_gpu_busy_at_the_first_switch_does_not_stop_training(recorded, tmp_path, monkeypatch,
                                                                capsys):
    from joulebound.cli import main
    from joulebound.runtime.helper import ClockHelper, HelperActuator

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    d, names = recorded
    plan = _plan(tmp_path, names, [AUTO, HI, LO], "ok")
    nv = FakeNvml()
    h = ClockHelper(tmp_path / "c.sock", nvml=nv, check_privileges=False).start()
    other = HelperActuator(h.path, gpu=0)
    marker = tmp_path / "started"
    try:
        assert other.set_clocks(LO)                  # another client owns GPU 0
        rc = main(["run", "--plan", str(plan), "--actuator", "helper", "--socket", str(h.path),
                   "--json", "--", "python", str(d / "train.py"), "40", str(marker)])
        out = json.loads(capsys.readouterr().out)
        assert nv.core_lock[0] == (1005, 1005)       # the owner's clocks were left alone
    finally:
        other.close()
        h.close()
    assert rc == 0 and out["exit_code"] == 0 and marker.exists()   # was: rc 2, training died
    assert out["skipped_switches"] > 0 and out["ops"] > 0
    note = next(n for n in out["notes"] if "busy" in n)
    assert f"{out['skipped_switches']:,} switch(es) skipped" in note and "in use" in note
    assert nv.count(SET) == 1 and nv.is_default()


def test_a_busy_gpu_is_asked_for_again_and_used_once_free(tmp_path, monkeypatch):
    from joulebound.runtime import helper as helper_mod
    from joulebound.runtime.helper import ClockHelper, HelperActuator

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(helper_mod, "BUSY_RETRY_S", 0.05)
    nv = FakeNvml()
    h = ClockHelper(tmp_path / "c.sock", nvml=nv, check_privileges=False).start()
    try:
        a = HelperActuator(h.path, gpu=0)
        b = HelperActuator(h.path, gpu=0, skip_when_busy=True, install_signal_handlers=False)
        assert a.set_clocks(LO)
        assert not b.set_clocks(HI) and not b.set_clocks(LO)   # asked once, then backing off
        assert b.skipped == 2 and nv.count(SET) == 1
        with pytest.raises(GpuBusy, match="in use"):           # calibration keeps the error
            HelperActuator(h.path, gpu=0, install_signal_handlers=False).set_clocks(HI)
        a.close()
        time.sleep(0.06)
        assert b.set_clocks(HI) and nv.core_lock[0] == (1410, 1410)
        b.close()
        assert "obtained later" in b.notes[-1] and "2 switch(es) skipped" in b.notes[-1]
    finally:
        h.close()
    assert nv.is_default()
