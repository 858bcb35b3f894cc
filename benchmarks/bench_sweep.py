"""Sweep runner overhead on CPU: one torchrun launch for many configurations vs one per world size.

The tiny grid (BERT L 1–2, d 64, h 2, S 32, B 4, 3 measured steps; single + DDP + FSDP2 + TP at
2 gloo ranks) is run twice into fresh stores: packed (``single`` inside the 2-rank launch: 1 launch)
and unpacked (a 1-process launch + a 2-rank launch). Wall time is dominated by start-up (Python,
torch, transformers, process group), which is why one launch runs many configurations.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path


def run() -> str:
    from joulebound.sweep.grid import preset
    from joulebound.sweep.runner import run_sweep
    from joulebound.sweep.store import load_results

    cfgs = preset("tiny").expand(["single", "ddp", "fsdp", "tp"], [1, 2])
    lines = ["## sweep", "",
             "Tiny grid, 8 configurations, CPU (gloo), `OMP_NUM_THREADS` = cores / ranks. "
             "Times are measured wall-clock seconds on this machine.", "",
             "| mode | launches | wall (s) | measured steps, sum over configs (s) | "
             "start-up + build share |", "|---|---|---|---|---|"]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, pack in (("packed (single inside the 2-rank launch)", True),
                            ("one launch per world size", False)):
            db = Path(tmp) / f"{pack}.db"
            t0 = time.perf_counter()
            s = run_sweep(cfgs, db, "bench", progress=False, device="cpu", pack=pack)
            wall = time.perf_counter() - t0
            df = load_results(db)
            assert (df.status == "ok").all(), df.error.tolist()
            measured = float(df.time_s.sum())
            results[pack] = df
            lines.append(f"| {label} | {s['launches']} | {wall:.1f} | {measured:.3f} | "
                         f"{(wall - measured) / wall * 100:.0f} % |")
    df = results[True]
    lines += ["", "Per-configuration figures of the packed run (measured; CPU, so no energy; "
              "speedup = throughput / single's on the same global batch):", "",
              "| config | time (s) | tokens/s | speedup |", "|---|---|---|---|"]
    for r in df.itertuples():
        sp = "—" if r.speedup is None else f"{r.speedup:.2f}"
        lines.append(f"| {r.config_id} | {r.time_s:.3f} | {r.throughput_tok_s:.0f} | {sp} |")
    lines += ["", "On 2 shared cores the multi-rank strategies are slower than one rank (speedup < 1): "
              "the ranks compete for the same cores and gloo moves data through memory. These are "
              "functional runs, not GPU scaling figures."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(run())
