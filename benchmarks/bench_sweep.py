"""Sweep runner overhead on CPU: one torchrun launch for many configurations vs one per world size.

The tiny grid (BERT L 1–2, d 64, h 2, S 32, B 4, 3 measured steps; single + DDP + FSDP2 + TP at
2 gloo ranks) is run into fresh stores, alternately packed (``single`` inside the 2-rank launch:
1 launch) and unpacked (a 1-process launch + a 2-rank launch), ``JOULEBOUND_BENCH_SWEEP_REPEATS``
(default 3) times each. Wall time is dominated by start-up (Python, torch, transformers, process
group), which is why one launch runs many configurations.

What the store keeps per configuration (``joulebound.jobs.runstore``): ``time_s`` is the wall
time of rank 0's EnergyMeter window around all the measured steps together (3 steps, 10-200
ms in all here), one figure per run; step times are not kept. Every run, packed or not, measures the same
8 configurations, so a configuration's time is the median over all the runs with their min–max
(6 runs by default). One run's figure moves with this VM's CPU speed, which switches between two
levels ~2x apart (see ``bench_traces``), and, for the 2-rank configurations, with anything else
on the 2 cores.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from benchmarks.timing import fmt, sample_speed, spread

MODES = (("packed (single inside the 2-rank launch)", True), ("one launch per world size", False))


def _s(xs: list[float], nd: int = 3) -> str:
    """median (min–max)."""
    return fmt(spread(xs), f".{nd}f", collapse="equal")


def run() -> str:
    from joulebound.jobs.runstore import load_results
    from joulebound.measure.sweep.runner import run_sweep
    from joulebound.workload.grid import preset

    repeats = int(os.environ.get("JOULEBOUND_BENCH_SWEEP_REPEATS", 3))
    cfgs = preset("tiny").expand(["single", "ddp", "fsdp", "tp"], [1, 2])
    walls: dict[bool, list[float]] = {True: [], False: []}
    measured: dict[bool, list[float]] = {True: [], False: []}
    launches: dict[bool, int] = {}
    per_cfg: dict[str, list[tuple[float, float, float | None]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            for _, pack in MODES:
                db = Path(tmp) / f"{pack}-{i}.db"
                sample_speed()
                t0 = time.perf_counter()
                s = run_sweep(cfgs, db, "bench", progress=False, device="cpu", pack=pack)
                walls[pack].append(time.perf_counter() - t0)
                launches[pack] = s["launches"]
                df = load_results(db)
                assert (df.status == "ok").all(), df.error.tolist()
                measured[pack].append(float(df.time_s.sum()))
                for r in df.itertuples():
                    per_cfg.setdefault(r.config_id, []).append(
                        (r.time_s, r.throughput_tok_s, r.speedup))
    n_runs = 2 * repeats
    lines = ["## sweep", "",
             "Tiny grid, 8 configurations, CPU (gloo), `OMP_NUM_THREADS` = cores / ranks. "
             f"Measured wall-clock seconds on this machine. The sweep was run {n_runs} times into "
             f"fresh stores, alternately packed and unpacked ({repeats} runs of each mode); every "
             "figure is the median (min–max) over the runs it names.", "",
             "| mode | launches | runs | wall (s) | measured steps, sum over configs (s) | "
             "start-up + build share | wall / packed's wall |", "|---|---|---|---|---|---|---|"]
    for label, pack in MODES:
        share = [(w - m) / w * 100 for w, m in zip(walls[pack], measured[pack], strict=True)]
        ratio = [w / p for w, p in zip(walls[pack], walls[True], strict=True)]
        lines.append(f"| {label} | {launches[pack]} | {repeats} | {_s(walls[pack], 1)} | "
                     f"{_s(measured[pack])} | {_s(share, 0)} % | {_s(ratio, 2)} |")
    lines += ["", "wall / packed's wall: each unpacked run against the packed run just before it."]
    lines += ["", "Per configuration, over all "
              f"{n_runs} runs (packed and unpacked run the same 8 configurations). `time` is "
              "the store's `time_s`: the wall time of all 3 measured steps together, one figure "
              "per run (the store keeps no per-step times); tokens/s = tokens / time; speedup = "
              "throughput / single's on the same global batch in the same run (CPU, so no "
              "energy):", "",
              "| config | time (s) | tokens/s | speedup |", "|---|---|---|---|"]
    for cid in (c.config_id for c in cfgs):
        rows = per_cfg[cid]
        sp = [r[2] for r in rows if r[2] is not None]
        sp_s = "—" if not sp else _s(sp, 2)
        lines.append(f"| {cid} | {_s([r[0] for r in rows])} | {_s([r[1] for r in rows], 0)} | "
                     f"{sp_s} |")
    lines += ["", "On 2 shared cores the multi-rank strategies are slower than one rank (speedup < 1): "
              "the ranks compete for the same cores and gloo moves data through memory. These are "
              "functional runs, not GPU scaling figures."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(run())
