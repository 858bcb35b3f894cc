"""One controller per rank under torchrun (2 CPU ranks, gloo, DDP), via ``controlled()``."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")


def test_one_controller_per_torchrun_rank(torchrun_cpu):
    """Each rank records its own op stream into a two-phase plan, then follows it with its own
    controller (``ddp_controller`` in tests/_torchrun_worker.py, one launch shared with
    test_energy_distributed.py)."""
    proc, out = torchrun_cpu
    assert proc.returncode == 0, proc.stderr[-2000:]
    for rank in (0, 1):
        res = json.loads((out / f"res.{rank}.json").read_text())
        assert res["ops"] == 6 * res["k"] and res["planned"] >= 5 * res["k"]
        assert res["acc"] >= 0.99
        log = [json.loads(x) for x in (out / f"sw.{rank}.jsonl").read_text().splitlines()]
        plan_sw = [r for r in log if r["reason"] == "plan"]
        assert len(plan_sw) >= 10 and log[-1]["config"] == "auto"
