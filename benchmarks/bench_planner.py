"""Planner benchmarks: fast solver vs exact MILP (gap, speed) and scale (time, memory).

Figures are measured on this machine. Times are reported as CPU time of the solving process
(``time.process_time``, one thread: OMP/BLAS threads pinned to 1) and wall time; the development
machine is shared, so wall time can be inflated by other jobs while CPU time is not. Peak memory
is the ``ru_maxrss`` of a fresh child process doing only that case (it includes the Python
runtime and the characterization arrays themselves).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def _random_instance(g: int, c: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Smooth-roofline kernels × clock grid (the tests' generator), with 2 % cell noise."""
    rng = np.random.default_rng(seed)
    scale = rng.lognormal(-9, 1.2, g)
    share = rng.beta(0.6, 0.6, g)
    tc, tm = scale * share, scale * (1 - share)
    f = np.repeat(np.linspace(1.0, 0.45, c // 3), 3)[None, :]
    m = np.tile(np.linspace(1.0, 0.5, 3), c // 3)[None, :]
    t = 3e-6 + ((tc[:, None] / f) ** 4 + (tm[:, None] / m) ** 4) ** 0.25
    p = 60 + 220 * f**3 * (0.3 + 0.7 * tc[:, None] / f / t) + 70 * m * (0.4 + 0.6 * tm[:, None] / m / t)
    noise = 1 + 0.02 * rng.standard_normal(t.shape)
    return t * noise, p * t


def milp_vs_fast() -> str:
    from joulebound.dvfs.model import characterize
    from joulebound.dvfs.solve import FastMCKP, solve_milp
    from joulebound.workload.analytic import build_trace

    lines = ["### Fast solver vs exact MILP (HiGHS)", "",
             "Gap = (fast − MILP) / MILP energy; ratio = MILP time / fast time (CPU). The MILP "
             "gets only Pareto options (same reduction as the fast solver). The fast solver "
             "also reports a certified bound (its distance to the LP relaxation).", "",
             "| instance | kernels × configs | ε | fast energy Δ | gap vs MILP | bound | fast CPU s | MILP CPU s | ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    tr = build_trace("gpt3-xl")
    ch = characterize(tr, "rtx3080ti")
    tb, eb = ch.time_s[:, 0].sum(), ch.energy_j[:, 0].sum()
    for eps in (0.005, 0.01, 0.02, 0.05):
        b = (1 + eps) * tb
        fast, _, fc = _timed(lambda b=b: FastMCKP(ch.time_s, ch.energy_j).solve(b))
        ex, _, mc = _timed(lambda b=b: solve_milp(ch.time_s, ch.energy_j, b, time_limit_s=300))
        lines.append(f"| GPT-3-XL, RTX 3080 Ti model | {ch.n_kernels} × {ch.n_configs} | {eps:.1%} | "
                     f"{fast.energy / eb - 1:+.3%} | {fast.energy / ex.energy - 1:+.5%} | "
                     f"{fast.gap_bound:.1e} | {fc:.3f} | {mc:.2f} | {mc / max(fc, 1e-9):.0f}× |")
    for g in (200, 1000, 3000):
        for seed in (0, 1):
            t, e = _random_instance(g, 60, seed)
            b = 1.01 * t[:, 0].sum()
            fast, _, fc = _timed(lambda t=t, e=e, b=b: FastMCKP(t, e).solve(b))
            ex, _, mc = _timed(lambda t=t, e=e, b=b: solve_milp(t, e, b, time_limit_s=300))
            lines.append(f"| random (seed {seed}) | {g} × 60 | 1.0% | {fast.energy / e[:, 0].sum() - 1:+.3%} | "
                         f"{fast.energy / ex.energy - 1:+.5%} | {fast.gap_bound:.1e} | {fc:.3f} | "
                         f"{mc:.2f} | {mc / max(fc, 1e-9):.0f}× |")
    return "\n".join(lines)


CHILD = r"""
import json, resource, sys, time
import numpy as np
from joulebound.workload.analytic import build_trace
from joulebound.dvfs.model import characterize
case = sys.argv[1]
it = int(sys.argv[2])
tr = build_trace("gpt3-xl", iterations=it)
ch = characterize(tr, "rtx3080ti")
if case == "distinct":
    rng = np.random.default_rng(0)
    for a in (ch.time_s, ch.energy_j):
        for lo in range(0, len(a), 8192):
            a[lo:lo + 8192] *= 1 + 0.02 * rng.standard_normal(a[lo:lo + 8192].shape)
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
w0, c0 = time.perf_counter(), time.process_time()
if case == "dp":
    from joulebound.dvfs.solve.switching import plan_switch_aware
    p = plan_switch_aware(ch, slowdown=0.01, switch_latency_s=6e-3)
else:
    from joulebound.dvfs.solve import solve
    p = solve(ch, objective="relaxed", slowdown=0.01)
w, c = time.perf_counter() - w0, time.process_time() - c0
print(json.dumps({"kernels": ch.n_kernels, "configs": ch.n_configs, "wall": w, "cpu": c,
                  "rss0_mib": rss0 / 1024, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "energy_delta": p.energy_delta, "time_delta": p.time_delta,
                  "switches": p.n_switches, "solver": p.meta.get("solver") or p.meta.get("dp_passes")}))
"""


def scale() -> str:
    lines = ["### Scale (one core)", "",
             "Target: < 5 s and < 2 GiB each. `peak RSS` is the whole child process, "
             "including the characterization table itself (`of which table` = RSS before solving).", "",
             "| case | kernels × configs | CPU s | wall s | peak RSS MiB | of which table | energy Δ @ ε=1 % | switches |",
             "|---|---|---|---|---|---|---|---|"]
    cases = [("fast solver, GPT-3-XL × 106 iterations (rows repeat)", "fast", 106),
             ("fast solver, same, every cell perturbed ±2 % (all rows distinct, worst case)", "distinct", 106),
             ("switch-aware DP, GPT-3-XL × 11 iterations, L = 6 ms", "dp", 11)]
    for label, case, it in cases:
        out = subprocess.run([sys.executable, "-c", CHILD, case, str(it)], capture_output=True,
                             text=True, env=ENV, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        lines.append(f"| {label} | {r['kernels']} × {r['configs']} | {r['cpu']:.2f} | {r['wall']:.2f} | "
                     f"{r['rss_mib']:.0f} | {r['rss0_mib']:.0f} | {r['energy_delta']:+.2%} | {r['switches']} |")
    return "\n".join(lines)


def run() -> str:
    load = os.getloadavg()[0]
    return "\n\n".join(["## Planner (`joulebound.dvfs.solve`, `joulebound.dvfs.solve.switching`)",
                        f"Load average when started: {load:.1f} on {os.cpu_count()} cores. "
                        "All energy/time deltas are modeled (RTX 3080 Ti model).",
                        milp_vs_fast(), scale()])


if __name__ == "__main__":
    print(run())
