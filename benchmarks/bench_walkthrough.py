"""The README walkthrough's ``plan`` as a user waits for it: wall time of the whole command.

``joulebound run --record ops.json -- python -m joulebound.testing.demo_gpt --steps 3`` records the
tiny GPT's op stream once; then ``joulebound plan ops.json --device rtx3080ti --slowdown 1%``
(catalog switch latency) and the same with ``--switch-latency 0`` run as fresh processes
(imports included), with GPT-3-XL (921 kernels at the demo's batch; 1 here: the preset's default)
beside them, the cases interleaved over ``JOULEBOUND_BENCH_WALK_PROCS`` (default 3) rounds.
Target: the walkthrough's plan <= 5 s (issue 28: it stalled 63 s on a HiGHS call with a 60 s
limit; the core step now runs under a budget of at most 1.5 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.timing import fmt, spread

TARGET_S = 5.0
CASES = {
    "walkthrough plan (catalog latency)": ["ops.json"],
    "walkthrough plan, --switch-latency 0": ["ops.json", "--switch-latency", "0"],
    "gpt3-xl plan (catalog latency)": ["gpt3-xl"],
    "gpt3-xl plan, --switch-latency 0": ["gpt3-xl", "--switch-latency", "0"],
}


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from joulebound.cli import main; "
                           "sys.exit(main(sys.argv[1:]))", *args], cwd=cwd,
                          capture_output=True, text=True, check=True)


def run() -> str:
    n = int(os.environ.get("JOULEBOUND_BENCH_WALK_PROCS", 3))
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        _cli(["run", "--record", "ops.json", "--", sys.executable, "-m",
              "joulebound.testing.demo_gpt", "--steps", "3"], d)
        times: dict[str, list[float]] = {k: [] for k in CASES}
        for _ in range(n):
            for name, args in CASES.items():
                w0 = time.perf_counter()
                _cli(["plan", *args, "--device", "rtx3080ti", "--slowdown", "1%"], d)
                times[name].append(time.perf_counter() - w0)
        solvers = {}
        for name, args in CASES.items():
            doc = json.loads(_cli(["plan", *args, "--device", "rtx3080ti", "--slowdown", "1%",
                                   "--json"], d).stdout)
            solvers[name] = doc["rows"]
    lines = ["## The README walkthrough's plan (`bench_walkthrough`)", "",
             f"Wall time of the whole `joulebound plan ... --device rtx3080ti --slowdown 1%` command "
             f"(a fresh process: imports, characterization, every granularity's plan, 24 "
             f"parameter draws), s: median (min–max) of {n} runs, the cases interleaved; measured. "
             f"`ops.json` is the tiny GPT of `joulebound.testing.demo_gpt` recorded with "
             f"`joulebound run --record ops.json -- python -m joulebound.testing.demo_gpt --steps 3`. "
             f"Target: the walkthrough's plan <= {TARGET_S:g} s.", "",
             "| command | wall s | exact core steps (HiGHS limit s, hit?) | target |",
             "|---|---:|---|---|"]
    for name in CASES:
        t = spread(times[name])
        core = [f"{r['label']}: {r['solver_time_limit_s']:.2g}"
                + (" HIT" if r["time_limit_hit"] else "")
                for r in solvers[name] if r.get("solver_time_limit_s") is not None]
        verdict = ("met" if t[0] <= TARGET_S else "NOT met") if name.startswith("walk") else "–"
        lines.append(f"| {name} | {fmt(t, '.2f')} | {', '.join(core) or 'none'} | {verdict} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
