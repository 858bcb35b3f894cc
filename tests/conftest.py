"""Shared fixtures. Tests that need the real third-party data use ``shared_data``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

# One BLAS / OpenMP thread per test process (and the children it starts), set before numpy or
# torch is imported here: the suite's arrays are small, and under `pytest -n 2` on two cores each
# worker's thread pools would oversubscribe the cores and spin-wait. Measured on the 2-core VM:
# the Perseus kernel-model evaluation (a 32x608 @ 608x38 product per call) takes 6 ms of CPU with
# one OpenBLAS thread and 46 ms with two. A value set by the caller is kept.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402

from joulebound.core.datapath import find_data  # noqa: E402


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The ../shared/data folder; skips (with a message) when it is absent."""
    path = find_data(required=False)
    if path is None:
        pytest.skip("../shared/data not found (set JOULEBOUND_DATA to run the real-data checks)")
    return path


@pytest.fixture(autouse=True)
def _private_gpu_lock_dir(tmp_path_factory, monkeypatch):
    """Per-test GPU lock folder (joulebound.hw.gpu.GpuLock): fake GPUs share UUIDs across
    tests and across the test runs of other checkouts on this machine. The library reads no
    environment variable for it (one folder per machine, ``gpu.LOCK_DIR``): this process's is
    set here, and children started through ``tests/_fake_nvml_cli.py`` take theirs from
    ``$JOULEBOUND_TEST_LOCK_DIR`` (read by that test runner only)."""
    from joulebound.hw import gpu as gpu_layer

    d = tmp_path_factory.mktemp("gpu-locks") / "locks"
    monkeypatch.setattr(gpu_layer, "LOCK_DIR", d)
    monkeypatch.setenv("JOULEBOUND_TEST_LOCK_DIR", str(d))


#: the user's own state the package reads: the device catalog under $JOULEBOUND_HOME (default
#: ~/.config/joulebound). Every test (and every CLI or torchrun child it starts, which inherit
#: the environment) gets an empty one, so GPUs a user imported (`joulebound devices import
#: ... --name mygpu`) never reach the suite.
USER_STATE_VARS = ("JOULEBOUND_HOME",)


def pytest_configure(config):
    """Before collection and before any session- or module-scoped fixture (the torchrun launch,
    the demo study): a private empty ``JOULEBOUND_HOME`` for the whole run (children inherit it),
    removed at the end; each test then gets its own (:func:`_private_joulebound_home`)."""
    import tempfile

    config._jb_saved_home = os.environ.get("JOULEBOUND_HOME")
    config._jb_home = tempfile.mkdtemp(prefix="joulebound-test-home-")
    os.environ["JOULEBOUND_HOME"] = config._jb_home


def pytest_unconfigure(config):
    home = getattr(config, "_jb_home", None)
    if home is None:
        return
    shutil.rmtree(home, ignore_errors=True)
    if config._jb_saved_home is None:
        os.environ.pop("JOULEBOUND_HOME", None)
    else:
        os.environ["JOULEBOUND_HOME"] = config._jb_saved_home


@pytest.fixture(autouse=True)
def _private_joulebound_home(tmp_path_factory, monkeypatch):
    """Per-test empty ``JOULEBOUND_HOME`` (the user catalog lives in its ``devices/``)."""
    monkeypatch.setenv("JOULEBOUND_HOME", str(tmp_path_factory.mktemp("joulebound-home")))


@pytest.fixture(autouse=True)
def _private_default_store(tmp_path_factory, monkeypatch):
    """Per-test default store of ``measure`` / ``runs`` (``$JOULEBOUND_DB``; else ``runs.db`` in
    the current folder, which would be the checkout's)."""
    monkeypatch.setenv("JOULEBOUND_DB", str(tmp_path_factory.mktemp("store") / "runs.db"))
    monkeypatch.delenv("JOULEBOUND_PARENT_RUN", raising=False)   # the suite run under `measure`


#: modules holding the suite's long tests (end-to-end launches, real-data fits, the demo study;
#: 5-70 s each on the 2-core VM), longest first (measured: `pytest --durations`, summed per
#: module). `make test` hands whole modules to its two workers in this order (pytest-xdist
#: ``--dist loadfile``, each worker taking the next module when it runs out), so the long ones
#: start first and the short ones fill in at the end, and a module-scoped fixture is built
#: once. test_energy_distributed.py stays out of the list: it reads the torchrun launch that
#: test_runtime_ddp.py (early here) runs for both (``torchrun_cpu``), so it is not waiting on it.
#: Order only: nothing is skipped.
LONG_FIRST = (
    "test_measure_sweep_run.py", "test_runtime_clock_safety.py", "test_measure_calibrate.py", "test_measure_sweep_workload.py",
    "test_planning_cli.py", "test_gpumodel_scale_paths.py", "test_runtime_ddp.py", "test_research_checks.py",
    "test_gpumodel_grounding.py", "test_planning_solvers.py", "test_energy_capture.py",
    "test_jobs_data.py", "test_research_stage.py", "test_energy_losses.py",
    "test_report_browser.py", "test_energy_gpu_check.py", "test_core_logs.py", "test_parser_fuzz.py",
    "test_jobs_calibration.py", "test_energy_measure.py", "test_energy_trainers.py",
    "test_runtime_cli.py", "test_runtime_walkthrough.py", "test_planning_simulate.py",
    "test_packaging.py", "test_workload_flopcounter.py",
)


def pytest_collection_modifyitems(session, config, items):
    """Run the modules of :data:`LONG_FIRST` first, in its order (each module's tests kept
    together and in order)."""
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda it: rank.get(it.path.name, len(rank)))


def once_per_session(tmp_path_factory: pytest.TempPathFactory, name: str,
                     build: Callable[[Path], None]) -> Path:
    """``build(folder)`` run once per test session, whichever xdist worker asks first; every
    caller gets the same finished folder. The workers of one session share the parent of their
    base temp folders, where a file lock serialises the callers (a worker asking while another
    builds waits for it). A build that raises leaves no result: the next caller tries again."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / f"once-{name}"
    with open(root / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".done").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / ".done").touch()
    return folder


@pytest.fixture(scope="session")
def torchrun_cpu(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """The suite's plain torchrun launch of tests/_torchrun_worker.py (2 CPU ranks, gloo), run
    once per session for the two modules that read it (test_energy_distributed.py,
    test_runtime_ddp.py): ``(the finished launch, its output folder)``."""
    pytest.importorskip("torch")
    worker = Path(__file__).with_name("_torchrun_worker.py")

    def launch(out: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(__file__).resolve().parent.parent), env.get("PYTHONPATH", "")])
        env.pop("CUDA_VISIBLE_DEVICES", None)
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                               "--nproc-per-node", "2", str(worker), str(out)],
                              env=env, capture_output=True, text=True, timeout=180)
        (out / "launch.json").write_text(json.dumps(
            {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}))

    out = once_per_session(tmp_path_factory, "torchrun-cpu", launch)
    rec = json.loads((out / "launch.json").read_text())
    return subprocess.CompletedProcess([], rec["returncode"], rec["stdout"], rec["stderr"]), out


@pytest.fixture
def fake(monkeypatch):
    """``fake(gpus, **kw)`` installs a fake ``pynvml`` (``joulebound.testing.fakenvml``) with
    those GPUs, no rank or visible-device variables set, and returns it (a test module may
    define its own ``fake``)."""
    from joulebound.testing.fakenvml import FakeGPU, FakeNvml

    for var in ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)

    def install(gpus: list[FakeGPU], **kw) -> FakeNvml:
        nv = FakeNvml(gpus=gpus, **kw)
        monkeypatch.setitem(sys.modules, "pynvml", nv)
        return nv

    return install
