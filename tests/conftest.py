"""Shared fixtures. Tests that need the real third-party data use ``shared_data``."""

from __future__ import annotations

import os
from pathlib import Path

# One BLAS / OpenMP thread per test process (and the children it starts), set before numpy or
# torch is imported here: the suite's arrays are small, and under `pytest -n 2` on two cores each
# worker's thread pools would oversubscribe the cores and spin-wait. Measured on the 2-core VM:
# the Perseus kernel-model evaluation (a 32x608 @ 608x38 product per call) takes 6 ms of CPU with
# one OpenBLAS thread and 46 ms with two. A value set by the caller is kept.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402

from joulebound.datapath import find_data  # noqa: E402


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The ../shared/data folder; skips (with a message) when it is absent."""
    path = find_data(required=False)
    if path is None:
        pytest.skip("../shared/data not found (set JOULEBOUND_DATA to run the real-data checks)")
    return path


@pytest.fixture(autouse=True)
def _private_gpu_lock_dir(tmp_path_factory, monkeypatch):
    """Per-test GPU lock folder (joulebound.devices.gpu.GpuLock): fake GPUs share UUIDs across
    tests and across the test runs of other checkouts on this machine."""
    monkeypatch.setenv("JOULEBOUND_LOCK_DIR", str(tmp_path_factory.mktemp("gpu-locks")))


#: modules holding the suite's long tests (end-to-end launches, real-data fits, the demo study;
#: 10-90 s each on the 2-core VM), longest first. They are collected first so that under
#: `pytest -n 2` the two workers start on them and the short tests fill in at the end, instead of
#: one worker finishing a long test alone while the other idles. Order only: nothing is skipped.
LONG_FIRST = (
    "test_sweep_run.py", "test_validation_checks.py", "test_validation_stage.py",
    "test_runtime_ddp.py", "test_sweep_workload.py", "test_energy_distributed.py",
    "test_energy_capture.py", "test_model_grounding.py", "test_clock_safety.py",
    "test_plan_cli.py", "test_packaging.py", "test_parser_fuzz.py", "test_energy_trainers.py",
    "test_logs.py", "test_energy_losses.py",
)


def pytest_collection_modifyitems(session, config, items):
    """Run the modules of :data:`LONG_FIRST` first (each module's tests kept together and in
    order, so a module-scoped fixture is still built once per worker that runs it)."""
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda it: rank.get(it.path.name, len(rank)))

