"""Prepared lent-GPU check: a single-GPU BERT fine-tuning grid with real (NVML) energy, ≤ 5 minutes.

Run on a machine with one NVIDIA GPU (H200 in the plan)::

    python -m benchmarks.gpu_sweep --out "$OUT"            # budget 240 s of configurations

It is **read-only** on the GPU: it reads NVML (energy counter, power, names, driver) through
:class:`joulebound.energy.meter.EnergyMeter` with ``backend="nvml"`` and never changes a clock,
power limit, persistence mode or any other GPU setting. As in ``benchmarks/gpu_check.py``, NVML is
reached only through its :class:`~benchmarks.gpu_check.ReadOnlyNVML` proxy, installed as
``pynvml``, which refuses every set/reset/clear function.

What it does, per BERT shape (``BertForSequenceClassification`` from a config, random init, random
token ids, AdamW — the sweep workload of :mod:`joulebound.measure.sweep.workload`):

1. a short calibration run (5 measured steps) to learn the step time;
2. the measured run with enough steps that the energy window lasts ≥ ``--window-s`` (default 3 s,
   far above NVML's ~0.1 s energy-counter update period), warm-up steps excluded.

Before the grid it meters ``--idle-s`` seconds of the idle GPU (context for the constant term E0).
It stops starting new shapes once ``--budget-s`` is spent, and writes what it measured:

- ``$OUT/gpu_sweep.csv``: one row per configuration (date, GPU, driver, torch, CUDA, shape, steps,
  time_s, energy_j, avg_power_w, J/token, tokens, peak memory, NVML flags); energy is *measured*;
- ``$OUT/gpu_sweep.db``: the same runs in the sweep store schema (``sweep_results``), so
  ``joulebound fit --data gpu_sweep.db`` can use them;
- ``$OUT/gpu_sweep_meta.json``: environment, idle power, budget, what was skipped.

``--device cpu --energy none --grid tiny`` runs the same code path on a CPU (for CI), with no energy.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: shapes of the GPU grid: the paper's BERT family (h = d/64, ff = 4d), S = 128, B = 32,
#: ordered small → large so a cut budget still covers the range
GPU_GRID: dict[str, Any] = dict(layers=[2, 6, 12, 24], hidden=[256, 512, 1024], seq=[128], batch=[32],
                                dtype=["bf16", "fp32"])
TINY_GRID: dict[str, Any] = dict(layers=[1], hidden=[64], seq=[32], batch=[4], dtype=["fp32"])

CSV_COLUMNS = ("date_utc", "gpu", "driver", "torch", "cuda", "config_id", "arch", "layers", "hidden",
               "heads", "ff", "seq", "batch", "dtype", "steps", "time_s", "energy_j",
               "energy_provenance", "avg_power_w", "j_per_token", "tokens", "padded_tokens",
               "throughput_tok_s", "peak_mem_bytes", "energy_flags")


def shapes(grid: dict[str, Any]) -> list[Any]:
    """Single-GPU :class:`~joulebound.workload.grid.SweepConfig` objects of ``grid``, small first."""
    from joulebound.workload.grid import Grid

    g = Grid(name="gpu_sweep", arch=["bert"], head_dim=64, ff_mult=4, steps=5, warmup=3,
             dropout=0.1, **grid)
    cfgs = g.expand(["single"], [1])
    return sorted(cfgs, key=lambda c: (c.dtype != grid["dtype"][0], c.layers * c.hidden ** 2))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_sweep", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder ($OUT on the lent machine)")
    ap.add_argument("--budget-s", type=float, default=240.0, help="stop starting shapes after this (s)")
    ap.add_argument("--window-s", type=float, default=3.0, help="minimum measured window (s)")
    ap.add_argument("--idle-s", type=float, default=3.0, help="idle metering before the grid (s)")
    ap.add_argument("--max-steps", type=int, default=2000)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--energy", default="nvml", help="EnergyMeter backend (nvml; none for CPU runs)")
    ap.add_argument("--grid", default="gpu", choices=("gpu", "tiny"))
    args = ap.parse_args(argv)
    if args.device == "cuda":  # every NVML call (meter, driver version) through the read-only proxy
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from benchmarks.gpu_check import _install_readonly_nvml

        _install_readonly_nvml()

    import torch

    from joulebound.energy.meter import EnergyMeter
    from joulebound.jobs.runstore import SweepStore
    from joulebound.measure.sweep.worker import environment, run_config

    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA GPU visible; nothing measured (use --device cpu --energy none for a dry run)",
              file=sys.stderr)
        return 2
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    meter = EnergyMeter(args.energy, gpus=[0] if device.type == "cuda" else None, interval_s=0.05)
    env = environment(device, 1, None)
    env["energy_notes"] = meter.notes
    date = datetime.now(UTC).isoformat(timespec="seconds")
    meta: dict[str, Any] = {"date_utc": date, "env": env, "budget_s": args.budget_s,
                            "window_s": args.window_s, "read_only": True, "skipped": []}

    if args.idle_s > 0:
        meter.begin_window("idle")
        time.sleep(args.idle_s)
        idle = meter.end_window("idle")
        meta["idle"] = {"duration_s": idle.duration_s, "energy_j": idle.energy_j,
                        "avg_power_w": idle.avg_power_w, "provenance": idle.provenance,
                        "flags": idle.flags}
        print(f"idle: {idle.avg_power_w} W over {idle.duration_s:.1f} s ({idle.provenance})")

    store = SweepStore(out / "gpu_sweep.db")
    grid = GPU_GRID if args.grid == "gpu" else TINY_GRID
    rows: list[dict[str, Any]] = []
    todo = shapes(grid)
    for i, cfg in enumerate(todo):
        spent = time.perf_counter() - t_start
        if spent > args.budget_s:
            meta["skipped"] = [c.config_id for c in todo[i:]]
            print(f"budget spent ({spent:.0f} s): skipping {len(todo) - i} shape(s)")
            break
        try:
            cal = run_config(cfg, 0, device, meter)  # 5 steps: learn the step time
            per_step = cal["time_s"] / cfg.steps
            steps = int(min(args.max_steps, max(5, math.ceil(args.window_s / max(per_step, 1e-6)))))
            run = replace(cfg, steps=steps)
            res = run_config(run, 0, device, meter)
        except torch.OutOfMemoryError as exc:
            store.record("gpu_sweep", cfg, status="failed", error=f"out of memory: {exc}", env=env)
            print(f"{cfg.config_id}: out of memory")
            torch.cuda.empty_cache()
            continue
        w = res["window"]
        row_env = dict(env, world_size=1, warmup=run.warmup, config=run.to_dict(),
                       peak_mem_kind=res["peak_mem_kind"], losses=res["losses"][:5],
                       energy_flags=w.flags, energy_backend=w.backend)
        prov = w.provenance if w.energy_j is not None else None
        store.record("gpu_sweep", run, status="ok", time_s=res["time_s"], energy_j=w.energy_j,
                     energy_provenance=prov, tokens=res["tokens"],
                     padded_tokens=res["padded_tokens"], peak_mem_bytes=res["peak_mem_bytes"],
                     env=row_env)
        row = {"date_utc": date, "gpu": env.get("gpu"), "driver": env.get("driver"),
               "torch": env["torch"], "cuda": env.get("cuda"), "config_id": run.config_id,
               **{k: run.to_dict()[k] for k in ("arch", "layers", "hidden", "heads", "ff", "seq",
                                                "batch", "dtype", "steps")},
               "time_s": res["time_s"], "energy_j": w.energy_j, "energy_provenance": prov,
               "avg_power_w": (w.energy_j / res["time_s"]) if w.energy_j is not None else None,
               "j_per_token": (w.energy_j / res["tokens"]) if w.energy_j is not None else None,
               "tokens": res["tokens"], "padded_tokens": res["padded_tokens"],
               "throughput_tok_s": res["tokens"] / res["time_s"],
               "peak_mem_bytes": res["peak_mem_bytes"], "energy_flags": ";".join(w.flags)}
        rows.append(row)
        e = "no sensor" if w.energy_j is None else f"{w.energy_j:.1f} J {prov}"
        print(f"[{time.perf_counter() - t_start:6.1f} s] {run.config_id}: {steps} steps "
              f"{res['time_s']:.2f} s, {e}, {row['throughput_tok_s']:.0f} tok/s", flush=True)
        with open(out / "gpu_sweep.csv", "w", newline="") as fh:  # rewritten after every shape
            wr = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
            wr.writeheader()
            wr.writerows(rows)
    meter.close()
    meta["measured"] = len(rows)
    meta["wall_s"] = time.perf_counter() - t_start
    (out / "gpu_sweep_meta.json").write_text(json.dumps(meta, indent=1, default=str))
    print(f"{len(rows)} configuration(s) in {meta['wall_s']:.0f} s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
