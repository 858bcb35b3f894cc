"""Issue 28 item 10: ``fit``'s validation-cuts table never cuts a figure (counts printed as
``17…`` in a narrow table); long cut and test names fold onto more lines instead."""
from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from joulebound.cli import scaling

_M = {"n": 1789, "mape": 0.43, "median_ratio": 1.40, "median_abs_err": 0.43, "within_x1_25": 0.18,
      "within_x2": 0.97, "coverage90": 0.99, "median_interval_factor": 2.70}


def _mech() -> dict:
    cuts = [{"cut": "upper -> lower half of step sizes", "test": "each data set split at its median",
             "time": _M, "energy": {**_M, "n": 12345}},
            {"cut": "leave-one-GPU-out", "test": "a100-pcie-80gb", "time": {**_M, "n": 1432}}]
    return {"params": {"kappa": 1.2, "launch_s": 4.27e-6, "step_s": 1e-3, "wait_ratio": 1.5,
                       "host": {"cpu_w": 40.0, "dram_w": 10.0}, "provenance": {}},
            "rows": 1789, "datasets": ["mayaki_ecai2025", "perseus", "zeus_nsdi23"],
            "targets": {"median_abs_err": 0.25, "within_x2": 0.9, "coverage90": 0.8},
            "cuts": cuts, "legacy_cuts": {"prerun": [{"cut": "in-sample", "test": "all", "law": "prerun",
                                                      "energy_own_meter": {**_M, "n": 1789}}]}}


@pytest.mark.parametrize("width", [80, 100, 132])
def test_cut_table_prints_every_count_whole(monkeypatch, width):
    buf = io.StringIO()
    narrow = Console(file=buf, width=width, color_system=None)
    monkeypatch.setattr(scaling, "_table_console", lambda: narrow)
    monkeypatch.setattr(scaling, "console", Console(file=io.StringIO(), width=width))
    scaling._print_cuts(_mech())
    out = buf.getvalue()
    assert "…" not in out, out
    for n in ("1789", "12345", "1432"):
        assert re.search(rf"\b{n}\b", out), (n, out)
    assert "≤×1.25" in out and "missed" in out
    assert max(len(line) for line in out.splitlines()) <= width
