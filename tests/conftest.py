"""Shared fixtures. Tests that need the real third-party data use ``shared_data``."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulebound.datapath import find_data


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
