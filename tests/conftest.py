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
