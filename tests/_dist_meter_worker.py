"""Energy cases for tests/test_energy_distributed.py, run under torchrun (gloo, CPU): the suite
runs :func:`run_case` inside tests/_torchrun_worker.py's launch; ``main`` runs them alone.

Two simulated GPUs (SIM-GPU-0 at 100 W, SIM-GPU-1 at 200 W) shared by the ranks of one host.
Three ways of holding meters, each over a 1.0 s window (manual clock, so exact):
  own:   every rank meters the GPU it owns (LOCAL_RANK);
  all:   every rank meters every GPU (the double-counting trap);
  rank0: only rank 0 holds a meter, over every GPU; the other ranks pass None.
Rank 0 writes the aggregated results as JSON to argv[1].
"""

from __future__ import annotations

import json
import sys

import torch.distributed as dist

from joulebound.energy.distributed import aggregate
from joulebound.energy.meter import EnergyMeter
from joulebound.energy.simulated import SimulatedBackend


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def run_case(case: str, rank: int) -> dict:
    clock = Clock()
    meter = None
    if case == "own" or case == "all" or (case == "rank0" and rank == 0):
        backend = SimulatedBackend(power=[lambda t: 100.0, lambda t: 200.0], t0=clock.t)
        meter = EnergyMeter(backend, gpus=None if case == "own" else "all", interval_s=0,
                            clock=clock)
        meter.begin_window("job")
        clock.t += 1.0
        meter.end_window("job")
        local = sum(r.energy_j for r in meter.results)
    else:
        local = 0.0
    job = aggregate(meter)
    naive = [None] * dist.get_world_size()
    dist.all_gather_object(naive, local)
    w = job[0]
    return {"energy_j": w.energy_j, "uuids": [d.uuid for d in w.devices], "ranks": w.ranks,
            "duplicates": w.duplicates, "naive_sum_j": sum(naive), "provenance": w.provenance,
            "n_windows": len(job)}


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = {case: run_case(case, rank) for case in ("own", "all", "rank0")}
    if rank == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
