"""benchmarks/timing.py: figures taken in fresh interpreters, their spread over the processes, and
a failing child reported with its error (the machinery under every section of docs/benchmarks.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))             # `pytest` alone does not put the checkout on the path

from benchmarks.timing import fresh_cpu_runs, fresh_results, in_fresh_process, spread  # noqa: E402


def test_each_call_runs_in_its_own_fresh_interpreter() -> None:
    got = fresh_results({"pid": ("os:getpid", ())}, processes=3)["pid"]
    assert len(set(got)) == 3 and os.getpid() not in got
    assert in_fresh_process("math:hypot", (3, 4)) == 5.0


def test_fresh_cpu_runs_gives_median_within_the_process_spread() -> None:
    # getattr("abc", "upper") is the zero-argument callable the child times
    t = fresh_cpu_runs({"upper": ("builtins:getattr", ("abc", "upper"))}, processes=3, repeats=2,
                       min_total_s=0.002)["upper"]
    med, lo, hi = t
    assert 0 < lo <= med <= hi < 1e-3          # seconds per call of str.upper


def test_a_failing_child_raises_with_its_error() -> None:
    with pytest.raises(RuntimeError, match="math domain error"):
        in_fresh_process("math:sqrt", (-1,))


def test_spread_is_median_min_max() -> None:
    assert spread([3.0, 1.0, 2.0, 10.0]) == (2.5, 1.0, 10.0)


def test_run_all_refuses_an_unknown_area_and_names_the_known_ones() -> None:
    r = subprocess.run([sys.executable, "-m", "benchmarks.run_all", "--only", "nosuch"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "invalid choice: 'nosuch'" in r.stderr and "planner" in r.stderr


def test_compare_flags_exactly_the_figures_outside_the_first_runs_spread() -> None:
    from benchmarks.compare import compare, figures

    def doc(a: str, b: str, c: str) -> str:
        return ("<!-- bench:x -->\n| case | CPU ms | n |\n|---|---:|---:|\n"
                f"| one | {a} | 7 |\n| one | {b} | 7 |\n\nratio {c}; met.\n<!-- /bench:x -->")

    old = doc("2.0 (1.5–2.5)", "4.0 (3.9–4.1)", "0.93× (0.88–0.94)")
    new = doc("2.4 (2.2–2.6)", "4.3 (4.2–4.4)", "0.95× (0.90–0.99)")
    assert len(figures(old)) == 3            # the repeated row label is kept apart; counts skipped
    outside, per = compare(old, new)
    assert [(f.median, g.median) for f, g in outside] == [(4.0, 4.3), (0.93, 0.95)]
    assert per == {"x": [3, 2]}
    assert compare(old, new, tolerance=0.1)[1] == {"x": [3, 0]}


def test_compare_at_the_machines_speed_scales_times_not_ratios() -> None:
    from benchmarks.compare import compare

    def doc(t: str, r: str, speed: str) -> str:
        return ("<!-- bench:x -->\n| case | CPU ms | joulebound / Zeus |\n|---|---:|---:|\n"
                f"| one | {t} | {r} |\n\nMachine speed during this section: a fixed pure-Python "
                f"loop of 10^5 multiply-adds took {speed} CPU ms over 9 samples.\n"
                "<!-- /bench:x -->")

    old = doc("2.0 (1.8–2.2)", "0.90× (0.85–0.95)", "3.00 (2.90–3.10)")
    new = doc("4.1 (3.9–4.4)", "0.91× (0.86–0.96)", "6.00 (5.80–6.20)")   # a 2x slower machine
    wheres = [f.where for f, _ in compare(old, new)[0]]
    assert len(wheres) == 2 and wheres[0] == "one / CPU ms" and "Machine speed" in wheres[1]
    outside, per = compare(old, new, speed=True)
    assert outside == [] and per == {"x": [2, 0]}      # 4.1 ms at half speed is 2.05 ms
    # Same machine, same speed levels; the rerun's section happened to take most of its samples
    # at the slow level (a median 1.8x higher): the fast level is the reference, times unscaled.
    flipped = doc("2.1 (1.9–2.3)", "0.91× (0.86–0.96)", "5.40 (2.95–5.90)")
    old = doc("2.0 (1.8–2.2)", "0.90× (0.85–0.95)", "3.00 (2.90–5.80)")
    assert compare(old, flipped, speed=True)[0] == []
