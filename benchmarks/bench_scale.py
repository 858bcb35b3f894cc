"""Scaling of the planner's stages with the number of kernels: fast solver (rows repeat, as in a
trace of many iterations), switch-aware DP (L = 6 ms) and ``characterize`` on distinct kernels
(every kernel its own measured duration, as a profiled trace). GPT-3-XL on the RTX 3080 Ti model,
524 clock configurations, 947 kernels per iteration.

Each cell is measured in fresh child processes (one thread: OMP/BLAS pinned to 1) doing only that case: CPU
time of the stage (``time.process_time``), its peak RSS above the process before the stage
(the kernel's high-water mark ``VmHWM`` reset through ``/proc/self/clear_refs`` just before
the stage, minus the RSS then; for ``characterize`` the table it returns is part of it) and the size of the
characterization table (time + energy + measured-flags arrays). For ``characterize`` the result
column also gives the part of the CPU time spent in the OS kernel (``os.times().system``): mostly
the first writes to the fresh pages of the 8 GiB table at 10^6, which on this VM cost 0.1-1.7 s
per GiB depending on whether the host had backed those pages already. Slopes are least-squares
fits of log CPU time on log kernels over the sizes >= 10^4.

Each cell runs in ``REPEATS`` (3) fresh processes, the rounds interleaved; the table gives the
median (min–max) over them. ``JOULEBOUND_BENCH_MAX_KERNELS`` (default 1.1 × 10^6) caps the sizes;
the DP alone can be capped lower with ``JOULEBOUND_BENCH_MAX_DP_KERNELS`` (default: the same cap);
``JOULEBOUND_BENCH_SCALE_REPEATS`` sets the repeats.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from benchmarks.timing import ONE_THREAD, fmt, sample_speed, spread

ENV = ONE_THREAD
ITERATIONS = (1, 11, 106, 1056)        # 947, 10,417, 100,382, 1,000,032 kernels
REPEATS = 3                            # fresh processes per cell (JOULEBOUND_BENCH_SCALE_REPEATS)

CHILD = r"""
import dataclasses, json, os, resource, sys, time
import numpy as np
from joulebound.workload.analytic import build_trace
from joulebound.gpumodel import characterize
case, it = sys.argv[1], int(sys.argv[2])
tr = build_trace("gpt3-xl", iterations=it)
def rss():
    # reset the peak (VmHWM) to the current RSS, return the current RSS (MiB); the stage's
    # peak is then VmHWM afterwards minus this (falls back to ru_maxrss where /proc lacks it)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status("VmRSS")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
def _status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise OSError(key)
def peak():
    try:
        return _status("VmHWM")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
if case == "char":
    rng = np.random.default_rng(0)
    dur = 1e-5 + rng.lognormal(-9.5, 1.2, len(tr))
    tr = dataclasses.replace(tr, kernels=[dataclasses.replace(k, duration_s=float(d))
                                          for k, d in zip(tr.kernels, dur)])
    r0, c0, s0 = rss(), time.process_time(), os.times().system
    ch = characterize(tr, "rtx3080ti")
    cpu, top, extra = time.process_time() - c0, peak() - r0, ch.meta["n_unique_kernels"]
    sys_s = os.times().system - s0
else:
    ch = characterize(tr, "rtx3080ti")
    r0, c0 = rss(), time.process_time()
    if case == "dp":
        from joulebound.planning.solve import plan_switch_aware
        p = plan_switch_aware(ch, slowdown=0.01, switch_latency_s=6e-3)
    else:
        from joulebound.planning.solve import solve
        p = solve(ch, objective="relaxed", slowdown=0.01)
    cpu, top, extra = time.process_time() - c0, peak() - r0, round(p.energy_delta, 6)
table = (ch.time_s.nbytes + ch.energy_j.nbytes + ch.measured.nbytes) / 2**20
print(json.dumps({"kernels": ch.n_kernels, "cpu": cpu, "peak_mib": max(top, 0.0),
                  "table_mib": table, "extra": extra, "sys": globals().get("sys_s")}))
"""

NUMBA_CHILD = r"""
import json, time
import numpy as np
c0 = time.process_time()
from joulebound.planning.solve import plan_switch_aware
from joulebound.gpumodel.characterization import Characterization
from joulebound.core.clocks import ClockConfig
rng = np.random.default_rng(0)
t = rng.uniform(1e-4, 2e-4, (200, 4))
ch = Characterization(device="x", configs=[ClockConfig(1000 + 100 * i, 5000) for i in range(4)],
                      kernel_names=[f"k{i}" for i in range(200)], time_s=t,
                      energy_j=t * rng.uniform(100, 300, (200, 4)),
                      measured=np.ones((200, 4), bool))
plan_switch_aware(ch, slowdown=0.01, switch_latency_s=1e-3)
print(json.dumps({"cpu": time.process_time() - c0}))
"""


def numba_start() -> tuple[float, float] | None:
    """CPU s of importing the planner and its first switch-aware plan (a tiny one) in a fresh
    process: with numba's compiled code cached, and compiling it into an empty cache."""
    import tempfile

    out = []
    with tempfile.TemporaryDirectory() as cold:
        for env in (ENV, {**ENV, "NUMBA_CACHE_DIR": cold}):
            r = subprocess.run([sys.executable, "-c", NUMBA_CHILD], capture_output=True, text=True,
                               env=env)
            if r.returncode != 0:
                return None
            out.append(json.loads(r.stdout.strip().splitlines()[-1])["cpu"])
    return out[0], out[1]


CASES = (("fast", "fast solver, ε = 1 % (rows repeat)", "< 10 s, < 2 GiB at 10^6"),
         ("dp", "switch-aware DP, L = 6 ms, ε = 1 %", "< 30 s at 10^6"),
         ("char", "characterize, every kernel distinct", "< 30 s, peak ≤ 1.5 × table at 10^6"))


def _slope(ks: list[int], ts: list[float]) -> float | None:
    pts = [(k, t) for k, t in zip(ks, ts, strict=True) if k >= 10_000 and t > 0]
    if len(pts) < 2:
        return None
    x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


def _cell(case: str, it: int) -> dict | str:
    """One cell in a fresh child: its figures, or the child's last error line."""
    out = subprocess.run([sys.executable, "-c", CHILD, case, str(it)], capture_output=True,
                         text=True, env=ENV)
    if out.returncode != 0:
        return (out.stderr.strip().splitlines() or [f"rc {out.returncode}"])[-1]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _mr(xs: list[float], nd: int) -> str:
    """``median (min–max)`` with ``nd`` decimals (one value: just it)."""
    return fmt(spread(xs), f".{nd}f", collapse="equal" if len(xs) == 1 else "never")


def run() -> str:
    cap = int(os.environ.get("JOULEBOUND_BENCH_MAX_KERNELS", 1_100_000))
    cap_dp = int(os.environ.get("JOULEBOUND_BENCH_MAX_DP_KERNELS", cap))
    repeats = int(os.environ.get("JOULEBOUND_BENCH_SCALE_REPEATS", REPEATS))
    cells = [(case, it) for case, _, _ in CASES for it in ITERATIONS
             if 947 * it <= (cap_dp if case == "dp" else cap)]
    got: dict[tuple[str, int], list[dict]] = {c: [] for c in cells}
    failed: dict[tuple[str, int], str] = {}
    for _ in range(repeats):              # round by round: load drift reaches every cell
        for c in cells:
            if c in failed:
                continue
            sample_speed()
            r = _cell(*c)
            if isinstance(r, str):
                failed[c] = r
            else:
                got[c].append(r)
    lines = ["## Scaling with the number of kernels (`bench_scale`)", "",
             f"Load average when started: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores. "
             f"Each cell run in {repeats} fresh child processes (one thread; rounds: every cell "
             "once, then again), each doing only that case: median (min–max) over the runs of the "
             "CPU s and of the peak RSS above the process before the stage (MiB); table = time + "
             "energy + measured arrays (MiB). Measured.", "",
             "| stage | kernels | CPU s | peak MiB | table MiB | result | target |",
             "|---|---:|---:|---:|---:|---:|---|"]
    slopes = []
    verdicts = []
    for case, label, target in CASES:
        ks: list[int] = []
        runs_t: list[list[float]] = []
        big: dict | None = None
        for it in ITERATIONS:
            c = (case, it)
            if c in failed:
                lines.append(f"| {label} | ~{947 * it:,} | failed: {failed[c]} | | | | |")
                continue
            rs = got.get(c)
            if not rs:
                continue
            r = rs[0]
            cpu = [x["cpu"] for x in rs]
            ks.append(r["kernels"])
            runs_t.append(cpu)
            if r["kernels"] >= 1_000_000:
                big = {**r, "cpu": float(np.median(cpu)),
                       "peak_mib": float(np.median([x["peak_mib"] for x in rs]))}
            res = (f"{r['extra']:,} distinct; {_mr([x['sys'] for x in rs], 1)} s of the CPU s in "
                   "the kernel" if case == "char" else f"ΔE {r['extra']:+.2%}")
            lines.append(f"| {label} | {r['kernels']:,} | {_mr(cpu, 2)} | "
                         f"{_mr([x['peak_mib'] for x in rs], 0)} | {r['table_mib']:.0f} | {res} | "
                         f"{target} |")
        s = _slope(ks, [float(np.median(t)) for t in runs_t])
        per_run = [_slope(ks, [t[i] for t in runs_t]) for i in range(min(map(len, runs_t), default=0))]
        per_run = [x for x in per_run if x is not None]
        verdicts.append(f"{label}: {_verdict(case, big, s)}")
        slopes.append(f"{label}: {'n/a' if s is None else f'{s:.2f}'}"
                      + (f" (each run's: {_mr(per_run, 2)})" if len(per_run) > 1 else "")
                      + f" (sizes {', '.join(f'{k:,}' for k in ks if k >= 10_000)})")
    start = numba_start()
    if start is not None:
        lines += ["", f"The DP cells include the planner's start in a fresh process: {start[0]:.2f} CPU s "
                  "(importing numba and loading the DP's compiled code from its cache, plus a tiny "
                  f"plan); compiling that code into an empty cache, once per environment: "
                  f"{start[1]:.2f} CPU s. The characterize cells include the same kind of start "
                  "for its own compiled loops (numba's import and their cache load: most of the "
                  "947-kernel cell), which also flattens the slopes from 10^4."]
    lines += ["", "Log-log slope of the median CPU time vs kernels from 10^4 up (target ≤ 1.1):", ""]
    lines += [f"- {s}" for s in slopes]
    lines += ["", "Targets at 10^6 kernels × the device's configurations (RTX 3080 Ti: 512), on the "
              "medians, and slope ≤ 1.1:", ""]
    lines += [f"- {v}" for v in verdicts]
    return "\n".join(lines)


def _verdict(case: str, r: dict | None, slope: float | None) -> str:
    """Which of the stage's targets the measured cells meet."""
    parts = []
    if slope is not None:
        parts.append(f"slope {slope:.2f} {'met' if slope <= 1.1 else 'NOT met'}")
    if r is None:
        parts.append("10^6 not measured (size capped; see JOULEBOUND_BENCH_MAX_*)")
        return "; ".join(parts)
    cpu, peak, table = r["cpu"], r["peak_mib"], r["table_mib"]
    if case == "fast":
        parts.append(f"{cpu:.1f} s < 10 s {'met' if cpu < 10 else 'NOT met'}, "
                     f"{peak:.0f} MiB < 2 GiB {'met' if peak < 2048 else 'NOT met'}")
    elif case == "dp":
        parts.append(f"{cpu:.1f} s < 30 s {'met' if cpu < 30 else 'NOT met'}")
    else:
        parts.append(f"{cpu:.1f} s < 30 s {'met' if cpu < 30 else 'NOT met'}, peak "
                     f"{peak / table:.2f} × table ≤ 1.5 {'met' if peak <= 1.5 * table else 'NOT met'}")
    return "; ".join(parts)


if __name__ == "__main__":  # pragma: no cover
    print(run())
