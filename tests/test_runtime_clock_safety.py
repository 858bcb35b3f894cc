"""Clock safety against the real CLI in real child processes (issue 15).

Every child runs ``joulebound`` through ``tests/_fake_nvml_cli.py``: its ``pynvml`` is a
cross-process :class:`FakeNvml` whose clock locks live in a file this test reads. NVML set calls can
be made slow (``delays``), so signals land while a call is in flight.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from joulebound.core.clocks import AUTO, ClockConfig
from joulebound.testing.fakenvml import FakeNvml

RUNNER = str(Path(__file__).with_name("_fake_nvml_cli.py"))
HI, LO = ClockConfig(1410, 1593), ClockConfig(1005, 1593)
SET = "nvmlDeviceSetGpuLockedClocks"

TRAIN = """
import sys
import torch
x = torch.randn(8, 8)
w = torch.randn(8, 8)
for i in range(int(sys.argv[1])):
    y = torch.mm(x, w)
    y = torch.relu(y)
    x = torch.tanh(y)
print("done", flush=True)
"""


def _env(tmp: Path, name: str, **cfg) -> tuple[dict[str, str], FakeNvml]:
    state = tmp / f"{name}.nvml.json"
    locks = tmp / f"{name}.locks"
    cfg = {"state": str(state), "locks": str(locks), **cfg}
    nv = FakeNvml(n_gpus=int(cfg.get("n_gpus", 1)), state_path=state)
    env = {**os.environ, "JOULEBOUND_TEST_FAKE_NVML": json.dumps(cfg), "PYTHONUNBUFFERED": "1"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env, nv


def _wait(pred, timeout: float = 90.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    """A training script and a plan over its op stream that switches clocks at every op."""
    pytest.importorskip("torch")
    from joulebound.cli import main
    from joulebound.planning.plan import Plan
    from joulebound.workload.trace import Trace

    d = tmp_path_factory.mktemp("plan")
    (d / "train.py").write_text(TRAIN)
    cwd = os.getcwd()
    os.chdir(d)
    try:
        assert main(["run", "--record", "ops.json", "--json", "--", "python", "train.py",
                     "12"]) == 0
    finally:
        os.chdir(cwd)
    trace = Trace.load(d / "ops.json")
    choice = np.array([1 + (i % 2) for i in range(len(trace))])
    Plan(device="test", kernel_names=trace.names(), configs=[AUTO, HI, LO], choice=choice,
         switch_latency_s=0.0).save(d / "plan.json")
    return d


def _run_cmd(d: Path, gpu: str = "0", steps: int = 1_000_000, extra=()) -> list[str]:
    return [sys.executable, RUNNER, "run", "--plan", str(d / "plan.json"), "--actuator", "nvml",
            "--gpu", gpu, "--json", *extra, "--", "python", str(d / "train.py"), str(steps)]


def _no_set_after_last_reset(nv: FakeNvml, pid: int) -> bool:
    calls = [c for c in nv.shared_calls() if c[1] == pid and "Locked" in c[0]]
    last_reset = max(i for i, c in enumerate(calls) if c[0].startswith("nvmlDeviceReset"))
    return not any(c[0].startswith("nvmlDeviceSet") for c in calls[last_reset + 1:])


STOP = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _child_signals(ignore: tuple[signal.Signals, ...] = (), then=None):
    """``preexec_fn`` for the children whose stop signals a test sends: every stop signal at its
    default, whatever this test run inherited (``nohup`` ignores HUP, a background job INT and
    QUIT -- the guard rightly keeps those ignored), then ``ignore`` ignored, then ``then()``."""
    def pre() -> None:
        for s in STOP:
            signal.signal(s, signal.SIG_DFL)
        for s in ignore:
            signal.signal(s, signal.SIG_IGN)
        if then is not None:
            then()
    return pre


@pytest.fixture(scope="module")
def runs(plan_dir, tmp_path_factory):
    """One ``joulebound run --actuator nvml`` child per stop signal, started at once (each pays
    the torch import; in parallel they cost about one), with CUDA_VISIBLE_DEVICES=1 and slow set
    calls. The SIGTERM child inherits SIGINT as ignored."""
    tmp = tmp_path_factory.mktemp("runs")
    children: dict[str, tuple[subprocess.Popen, FakeNvml, Path, dict[str, str]]] = {}
    for sig in STOP:
        env, nv = _env(tmp, sig.name, n_gpus=2, delays={SET: 0.2})
        env["CUDA_VISIBLE_DEVICES"] = "1"
        sw = tmp / f"{sig.name}.jsonl"
        ignore_int = sig == signal.SIGTERM
        p = subprocess.Popen(_run_cmd(plan_dir, extra=["--switch-log", str(sw)]), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True,
                             preexec_fn=_child_signals((signal.SIGINT,) if ignore_int else ()))
        children[sig.name] = (p, nv, sw, env)
    yield children
    for p, *_ in children.values():
        if p.poll() is None:
            p.kill()
            p.communicate()


def test_two_runs_on_one_gpu_the_second_is_refused(plan_dir, runs):
    a, nv, _, env = runs["SIGHUP"]
    _wait(lambda: nv.count(SET) >= 2, what="the first run switching")
    b = subprocess.run(_run_cmd(plan_dir, steps=10), env=env, capture_output=True,
                       text=True, timeout=120)
    assert b.returncode == 2
    assert "already controlled by joulebound run" in b.stderr and str(a.pid) in b.stderr
    assert {c[1] for c in nv.shared_calls() if c[0].startswith("nvmlDeviceSet")} == {a.pid}
    assert a.poll() is None


def test_inherited_ignored_sigint_stays_ignored(runs):
    p, nv, _, _ = runs["SIGTERM"]
    _wait(lambda: nv.count(SET) >= 2, what="switching")
    p.send_signal(signal.SIGINT)
    n = nv.count(SET)
    _wait(lambda: nv.count(SET) >= n + 3, timeout=30, what="switching after SIGINT")
    assert p.poll() is None      # SIGINT ignored as inherited: the plan goes on (SIGTERM below)


def test_stop_signals_during_an_nvml_set_call_restore_clocks_and_print_the_summary(runs):
    """INT/TERM/HUP/QUIT while a set call is in flight: the process ends (no hang), the GPU is
    back at the defaults, the closed actuator made no call after the reset, the summary and the
    switch log are complete. CUDA_VISIBLE_DEVICES=1 with --gpu 0 controls physical GPU 1 only."""
    for sig in STOP:
        p, nv, _, _ = runs[sig.name]
        _wait(lambda nv=nv: nv.count(SET) >= 2 and SET in nv.inflight(),
              what=f"a set call in flight ({sig.name})")
        assert p.poll() is None
        p.send_signal(sig)
    for sig in STOP:
        p, nv, sw, _ = runs[sig.name]
        out, err = p.communicate(timeout=60)
        assert p.returncode == 128 + sig, (sig.name, p.returncode, err[-2000:])
        res = json.loads(out)
        assert res["stopped_by"] == sig.name and res["exit_code"] == 128 + sig
        assert any("restored to the defaults" in n for n in res["notes"])
        assert nv.is_default(), sig.name
        calls = nv.shared_calls()
        assert {c[2] for c in calls if "Locked" in c[0]} == {1}   # physical GPU 1 only
        assert _no_set_after_last_reset(nv, p.pid)
        log = [json.loads(x) for x in sw.read_text().splitlines()]
        assert log and log[-1]["reason"] == "close" and log[-1]["config"] == "auto"


# -- the clock helper as a real process ---------------------------------------------------------
def _client_loop(path: str, gpu: int, stop_at: float) -> None:
    from joulebound.runtime.helper import HelperActuator

    a = HelperActuator(path, gpu=gpu)
    try:
        i = 0
        while time.monotonic() < stop_at and not a.closed:
            a.set_clocks(HI if i % 2 else LO)
            i += 1
    except Exception:
        pass


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_helper_stop_signal_with_clients_mid_switch_leaves_every_gpu_at_defaults(tmp_path, sig):
    import threading

    env, nv = _env(tmp_path, "helper", n_gpus=2, delays={SET: 0.02})
    sock = tmp_path / "c.sock"
    h = subprocess.Popen([sys.executable, RUNNER, "clock-helper", "--socket", str(sock),
                          "--burst", "1000", "--min-interval", "0"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_child_signals())
    try:
        _wait(lambda: sock.exists(), timeout=30, what="the helper socket")
        stop_at = time.monotonic() + 20
        ts = [threading.Thread(target=_client_loop, args=(str(sock), g, stop_at), daemon=True)
              for g in (0, 1)]
        for t in ts:
            t.start()
        _wait(lambda: nv.count(SET) >= 6 and SET in nv.inflight(), what="clients switching")
        h.send_signal(sig)
        out, err = h.communicate(timeout=30)
        assert h.returncode == 0, err[-2000:]
        assert nv.is_default(), nv.core_lock
        assert not sock.exists()
        for t in ts:
            t.join(timeout=30)
    finally:
        if h.poll() is None:
            h.kill()


def test_helper_at_its_fd_limit_backs_off_instead_of_spinning(tmp_path):
    import resource
    import socket

    env, nv = _env(tmp_path, "fd")
    sock = tmp_path / "c.sock"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))

    h = subprocess.Popen([sys.executable, RUNNER, "clock-helper", "--socket", str(sock)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=limit)
    conns = []
    try:
        _wait(lambda: sock.exists(), timeout=30, what="the helper socket")
        for _ in range(60):                    # more than the helper's 40 fds allow
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(2)
            end = time.monotonic() + 1.0
            while True:
                try:
                    c.connect(str(sock))
                    conns.append(c)
                    break
                except BlockingIOError:        # backlog full: let the helper accept, retry
                    if time.monotonic() > end:
                        c.close()
                        break
                    time.sleep(0.01)
        time.sleep(0.5)

        def cpu_s() -> float:
            f = Path(f"/proc/{h.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

        c0 = cpu_s()
        time.sleep(1.0)
        assert cpu_s() - c0 < 0.25          # was: a busy accept() loop at ~50 % of a core
        h.send_signal(signal.SIGTERM)
        h.communicate(timeout=30)
        assert h.returncode == 0
    finally:
        for c in conns:
            c.close()
        if h.poll() is None:
            h.kill()


@pytest.fixture
def cli_nvml(monkeypatch):
    """The CLI in this process with a fake pynvml and clock privileges."""
    import joulebound.hw.gpu as gpu_layer

    monkeypatch.setattr(gpu_layer, "has_clock_privileges", lambda: True)

    def install(**kw) -> FakeNvml:
        nv = FakeNvml(**kw)
        monkeypatch.setitem(sys.modules, "pynvml", nv)
        return nv

    return install


def test_reset_clocks_tries_every_gpu_and_reports_each_failure(cli_nvml, capsys):
    from joulebound.cli import main

    nv = cli_nvml(n_gpus=3, failing_gpus={1})
    for g in (0, 2):
        nv.nvmlDeviceSetGpuLockedClocks(g, 900, 900)
    assert main(["reset-clocks", "--json"]) == 1
    rep = {x["gpu"]: x for x in json.loads(capsys.readouterr().out)["reset"]}
    assert rep["0"]["ok"] and rep["2"]["ok"] and not rep["1"]["ok"]
    assert "GPU is lost" in rep["1"]["errors"][0]
    assert nv.core_lock[0] is None and nv.core_lock[2] is None
    # a GPU that does not exist is reported, the others are still reset; no traceback
    nv.nvmlDeviceSetGpuLockedClocks(0, 900, 900)
    assert main(["reset-clocks", "--gpus", "0,7"]) == 1
    out = capsys.readouterr().out
    assert "GPU 7" in out and "NOT reset" in out and nv.core_lock[0] is None
    assert main(["reset-clocks", "--gpus", ""]) == 2
    assert "--gpus" in capsys.readouterr().err


def test_helper_cli_refuses_bad_group_and_world_writable_mode_before_binding(cli_nvml, tmp_path,
                                                                             capsys):
    from joulebound.cli import main

    cli_nvml()
    sock = tmp_path / "c.sock"
    for args, msg in ((["--group", "no-such-group-xyz"], "no such group"),
                      (["--mode", "777"], "--insecure"),
                      (["--mode", "9z"], "octal")):
        assert main(["clock-helper", "--socket", str(sock), *args]) == 2
        err = capsys.readouterr().err
        assert msg in " ".join(err.split()), err
        assert not sock.exists() and not list(tmp_path.glob(".c.sock.*"))


# -- the clock helper in this process: ownership, rate limit, hardening ---------------------------
@pytest.fixture
def helper(tmp_path, monkeypatch):
    from joulebound.runtime.helper import ClockHelper

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nv = FakeNvml(n_gpus=2)
    h = ClockHelper(tmp_path / "clocks.sock", nvml=nv, check_privileges=False, burst=3,
                    min_interval_s=30.0).start()
    yield h, nv
    h.close()


def _raw(path, *lines: bytes) -> list[dict]:
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(path))
    f = s.makefile("rb")
    out = []
    try:
        for ln in lines:
            s.sendall(ln)
            r = f.readline()
            out.append(json.loads(r) if r else None)
    finally:
        f.close()
        s.close()
    return out


def test_a_second_helper_on_a_live_socket_refuses_to_start(helper, tmp_path):
    from joulebound.core.errors import JouleboundError
    from joulebound.runtime.helper import ClockHelper, HelperActuator

    h, nv = helper
    a = HelperActuator(h.path, gpu=0)
    a.set_clocks(LO)
    with pytest.raises(JouleboundError, match="already"):
        ClockHelper(h.path, nvml=FakeNvml(n_gpus=2), check_privileges=False).start()
    assert h.path.exists() and nv.core_lock[0] == (1005, 1005)   # the live helper is untouched
    a.set_clocks(HI)
    assert nv.core_lock[0] == (1410, 1410)
    a.close()
    assert nv.is_default()


def test_ownership_is_kept_across_resets_and_the_rate_limit_is_per_gpu(helper):
    from joulebound.runtime.helper import HelperActuator

    h, nv = helper
    a = HelperActuator(h.path, gpu=0)
    a.set_clocks(LO)
    a.reset()                                   # back to the defaults, still a's GPU
    b = HelperActuator(h.path, gpu=0)
    with pytest.raises(Exception, match="in use"):
        b.set_clocks(HI)
    b.close()
    a.set_clocks(HI)                            # 2 of the burst of 3 used
    a.close()                                   # disconnect: reset, ownership given up
    assert nv.is_default()
    # reconnecting does not refill the bucket: one token left for GPU 0, none after it
    c = HelperActuator(h.path, gpu=0)
    assert c.set_clocks(LO) and not c.set_clocks(HI) and c.deferred == 1
    assert nv.core_lock[0] == (1005, 1005)
    c.reset()                                   # resets are never throttled
    assert nv.is_default(0)
    d = HelperActuator(h.path, gpu=1)
    assert d.set_clocks(LO)                     # another GPU has its own bucket
    d.close()
    c.close()


def test_sixteen_ranks_times_five_connect_at_once(helper):
    import threading

    from joulebound.runtime.helper import HelperActuator

    h, _ = helper
    errors, acts = [], []
    barrier = threading.Barrier(80)

    def connect() -> None:
        barrier.wait()
        try:
            acts.append(HelperActuator(h.path, gpu=0))
        except Exception as exc:
            errors.append(exc)

    ts = [threading.Thread(target=connect) for _ in range(80)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60)
    assert not errors and len(acts) == 80
    for a in acts:
        a.close()


def test_malformed_requests_get_an_error_reply_never_a_dropped_connection(helper):
    h, nv = helper
    hello = b'{"op": "hello"}\n'
    replies = _raw(h.path,
                   b"[" * 2000 + b"]" * 2000 + b"\n",                          # deep JSON
                   b'{"op": "set", "gpu": 0, "core": ' + b"9" * 4000 + b"}\n",  # huge int
                   b'{"op": "hello", "x": "\xff\xfe"}\n',                       # not UTF-8
                   b'{"op": "set", "gpu": true, "core": 1005, "mem": 1593}\n',  # bool index
                   b'{"op": "set", "gpu": 0, "core": 1005.0, "mem": 1593}\n',   # float MHz
                   b"NaN\n", hello)
    *bad, ok = replies
    assert all(r is not None and r["ok"] is False and r["code"] == "invalid" for r in bad), bad
    assert "deeper" in bad[0]["error"] and "UTF-8" in bad[2]["error"]
    assert "gpu must be" in bad[3]["error"]
    assert ok["ok"] and set(ok["gpus"]) == {"GPU-fake-0", "GPU-fake-1"}
    assert nv.is_default() and nv.count("nvmlDeviceSetGpuLockedClocks") == 0
    # a line over the bound (e.g. 100k-deep JSON) is answered and the connection closed
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(h.path))
    try:
        s.sendall(b"[" * 100_000 + b"]" * 100_000)
    except OSError:
        pass
    f = s.makefile("rb")
    r = json.loads(f.readline())
    assert r["ok"] is False and "longer than 4096" in r["error"]
    f.close()
    s.close()
    assert _raw(h.path, hello)[0]["ok"]         # the helper still serves


def test_connections_over_the_cap_are_told_and_closed(tmp_path):
    from joulebound.core.errors import JouleboundError
    from joulebound.runtime.helper import ClockHelper, HelperActuator

    h = ClockHelper(tmp_path / "c.sock", nvml=FakeNvml(), check_privileges=False,
                    max_clients=2).start()
    try:
        a = [HelperActuator(h.path) for _ in range(2)]
        with pytest.raises(JouleboundError, match="at most 2 clients"):
            HelperActuator(h.path)
        for x in a:
            x.close()
    finally:
        h.close()


def test_helper_and_in_process_actuator_never_share_a_gpu(helper, monkeypatch):
    from joulebound.core.errors import JouleboundError as GpuBusy  # GpuBusy is one
    from joulebound.runtime.actuators import NvmlActuator
    from joulebound.runtime.helper import HelperActuator

    h, nv = helper
    a = HelperActuator(h.path, gpu=0)
    a.set_clocks(LO)
    with pytest.raises(GpuBusy, match="clock-helper"):
        NvmlActuator(gpu=0, nvml=nv, check_privileges=False, install_signal_handlers=False)
    a.close()
    n = NvmlActuator(gpu=1, nvml=nv, check_privileges=False, install_signal_handlers=False)
    b = HelperActuator(h.path, gpu=1)
    with pytest.raises(Exception, match="already controlled by joulebound"):
        b.set_clocks(LO)
    b.close()
    with pytest.raises(GpuBusy, match="already controlled"):   # one owner in one process too
        NvmlActuator(gpu=1, nvml=nv, check_privileges=False, install_signal_handlers=False)
    n.close()


@pytest.mark.parametrize("cvd,rank,phys", [("2", 0, 2), ("4,5,6,7", 1, 5), ("4,5,6,7", 3, 7),
                                           ("GPU-fake-6", 0, 6), (None, 3, 3),
                                           ("MIG-fake-5-a", 0, 5)])
def test_gpus_are_resolved_through_cuda_visible_devices_to_one_uuid(monkeypatch, cvd, rank, phys):
    from joulebound.runtime.actuators import NvmlActuator
    from joulebound.testing.fakenvml import FakeGPU

    gpus = [FakeGPU(f"GPU-fake-{i}", mig=(i == 5), mig_uuids=("MIG-fake-5-a",) if i == 5 else ())
            for i in range(8)]
    nv = FakeNvml(gpus=gpus)
    if cvd is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cvd)
    with NvmlActuator(gpu=rank, nvml=nv, check_privileges=False,
                      install_signal_handlers=False) as a:
        a.set_clocks(LO)
        assert [g for g, v in nv.core_lock.items() if v] == [phys]
    assert nv.is_default()


def test_helper_client_resolves_its_cuda_numbering(tmp_path, monkeypatch):
    from joulebound.core.errors import JouleboundError
    from joulebound.runtime.helper import ClockHelper, HelperActuator

    nv = FakeNvml(n_gpus=4)
    h = ClockHelper(tmp_path / "c.sock", nvml=nv, check_privileges=False).start()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    try:
        a = HelperActuator(h.path, gpu=1)
        a.set_clocks(LO)
        assert [g for g, v in nv.core_lock.items() if v] == [3]     # not GPU 1
        a.close()
        with pytest.raises(JouleboundError, match="not visible"):
            HelperActuator(h.path, gpu=2)
    finally:
        h.close()
    assert nv.is_default()


def test_the_helper_rate_limit_never_aborts_training(plan_dir, tmp_path, monkeypatch, capsys):
    from joulebound.cli import main
    from joulebound.runtime.helper import ClockHelper

    monkeypatch.chdir(plan_dir)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nv = FakeNvml()
    h = ClockHelper(tmp_path / "c.sock", nvml=nv, check_privileges=False, burst=5,
                    min_interval_s=60.0).start()
    try:
        rc = main(["run", "--plan", "plan.json", "--actuator", "helper", "--socket", str(h.path),
                   "--json", "--", "python", "train.py", "40"])
        out = json.loads(capsys.readouterr().out)
    finally:
        h.close()
    assert rc == 0 and out["exit_code"] == 0          # was: rc 2, training aborted
    assert any("deferred" in n for n in out["notes"])
    assert nv.count("nvmlDeviceSetGpuLockedClocks") == 5 and nv.is_default()
