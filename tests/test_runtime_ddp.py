"""One controller per rank under torchrun (2 CPU ranks, gloo, DDP), via ``controlled()``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

SCRIPT = """
import json, sys
import numpy as np
import torch, torch.distributed as dist
from torch.nn import functional as F
from joulebound.clocks import AUTO, ClockConfig
from joulebound.dvfs.control import controlled
from joulebound.testing.demo_gpt import TinyGPTConfig, build
from joulebound.dvfs.control.hooks import OpStream
from joulebound.dvfs.plan import Plan

dist.init_process_group("gloo")
rank, out = dist.get_rank(), sys.argv[1]
cfg = TinyGPTConfig(layers=1, hidden=32, seq=16, batch=2)
model, _ = build(cfg, seed=0)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)

def step():
    idx = torch.randint(cfg.vocab, (cfg.batch, cfg.seq + 1))
    logits = ddp(idx[:, :-1])
    F.cross_entropy(logits.reshape(-1, cfg.vocab), idx[:, 1:].reshape(-1)).backward()
    opt.step()
    opt.zero_grad()

with OpStream(record=True) as ops:          # this rank's op stream -> a two-phase plan
    for _ in range(4):
        a = len(ops.keys)
        step()
names = [ops.name(k) for k in ops.keys[a:]]
choice = np.arange(len(names)) * 2 // len(names) + 1
plan = Plan("test", names, [AUTO, ClockConfig(1410, 1593), ClockConfig(1005, 1593)], choice)
with controlled(plan, "dry-run", gpu=rank, switch_log=f"{out}/sw.{rank}.jsonl") as ctl:
    for _ in range(6):
        step()
json.dump({"ops": ctl.stats.ops, "planned": ctl.stats.planned_ops, "k": len(names),
           "acc": ctl.predictor.stats.accuracy, "gpu": ctl.actuator.__class__.__name__},
          open(f"{out}/res.{rank}.json", "w"))
dist.barrier()
dist.destroy_process_group()
"""


def test_one_controller_per_torchrun_rank(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", str(tmp_path / "train.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for rank in (0, 1):
        res = json.loads((tmp_path / f"res.{rank}.json").read_text())
        assert res["ops"] == 6 * res["k"] and res["planned"] >= 5 * res["k"]
        assert res["acc"] >= 0.99
        log = [json.loads(x) for x in (tmp_path / f"sw.{rank}.jsonl").read_text().splitlines()]
        plan_sw = [r for r in log if r["reason"] == "plan"]
        assert len(plan_sw) >= 10 and log[-1]["config"] == "auto"
