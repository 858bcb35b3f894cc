"""The suite's one plain torchrun launch (2 CPU ranks, gloo), shared by two test modules so that
the interpreter, torch and process-group start-up is paid once per rank, not once per module:

1. the energy aggregation cases of ``_dist_meter_worker.py`` (tests/test_energy_distributed.py):
   rank 0 writes them to ``OUT/agg.json``;
2. a DDP training loop with one joulebound controller per rank, via ``controlled()``
   (tests/test_runtime_ddp.py): each rank writes ``OUT/res.<rank>.json`` and its switch log
   ``OUT/sw.<rank>.jsonl``.

Run as ``python -m torch.distributed.run --standalone --nproc-per-node 2 _torchrun_worker.py OUT``
(the ``conftest.torchrun_cpu`` fixture does, once per test session).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from _dist_meter_worker import run_case
from torch.nn import functional as F

from joulebound.core.clocks import AUTO, ClockConfig
from joulebound.planning.plan import Plan
from joulebound.runtime import controlled
from joulebound.runtime.hooks import OpStream
from joulebound.testing.demo_gpt import TinyGPTConfig, build


def meter_cases(rank: int, out: Path) -> None:
    """Energy aggregation across ranks: each way of holding meters (see _dist_meter_worker)."""
    res = {case: run_case(case, rank) for case in ("own", "all", "rank0")}
    if rank == 0:
        (out / "agg.json").write_text(json.dumps(res))


def ddp_controller(rank: int, out: Path) -> None:
    """This rank's op stream recorded into a two-phase plan, then followed by its controller."""
    cfg = TinyGPTConfig(layers=1, hidden=32, seq=16, batch=2)
    model, _ = build(cfg, seed=0)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)

    def step() -> None:
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
    (out / f"res.{rank}.json").write_text(json.dumps(
        {"ops": ctl.stats.ops, "planned": ctl.stats.planned_ops, "k": len(names),
         "acc": ctl.predictor.stats.accuracy, "gpu": ctl.actuator.__class__.__name__}))


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    meter_cases(rank, out)
    dist.barrier()
    ddp_controller(rank, out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # every result is written and the group destroyed: leave without the interpreter's C++
    # teardown, where torch/gloo threads still joinable at exit abort the rank ("terminate
    # called without an active exception", SIGABRT) on a loaded 2-core machine — seen in 2 of
    # ~8 suite runs here with every output file complete; the tests then read a failed launch
    sys.stdout.flush()
    sys.stderr.flush()
    import os

    os._exit(0)
