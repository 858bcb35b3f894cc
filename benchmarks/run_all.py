"""Run the benchmarks and write docs/benchmarks.md.

Each ``benchmarks/bench_<area>.py`` module exposes ``run() -> str`` returning a Markdown section
(tables of measured speed/memory figures, ratios measured in the same run). ``--only AREA`` reruns
one area and replaces only its section, so areas can be refreshed independently. Each area runs in
a fresh interpreter (:func:`_fresh_section`), alone or in a full run alike. Every section is
stamped with the machine and date it was measured on.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import os
import pkgutil
import platform
import re
from pathlib import Path

import benchmarks

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = """# Benchmarks

Produced by `make bench` (`python -m benchmarks.run_all`; one area: `--only AREA`).
Speed and memory targets live here, not in unit tests. Figures are **measured** on the machine named
in each section. Each area runs in a fresh interpreter, and each timed figure is the median over
several fresh processes with their min–max as its spread (`benchmarks/timing.py`: one process's
repeats miss the variance between processes). The development machines are shared VMs whose
speed varies from day to day (the same test suite took 319 CPU-s one day and 168 CPU-s the next),
so compare ratios measured in the same run rather than absolute times across days.
"""


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def commit() -> str:
    """The checkout's commit (short hash, ``+changes`` when the measured code (joulebound/, benchmarks/) differs from it), or ``?``."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                "joulebound", "benchmarks", "pyproject.toml"],
                               cwd=root, text=True, capture_output=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + ("+changes" if dirty else "")


def areas() -> list[str]:
    return sorted(m.name.removeprefix("bench_") for m in pkgutil.iter_modules(benchmarks.__path__)
                  if m.name.startswith("bench_"))


def section(area: str) -> str:
    from benchmarks.timing import speed_line

    module = importlib.import_module(f"benchmarks.bench_{area}")
    body = module.run().strip()
    speed = speed_line()
    if speed:
        body += "\n\n" + speed
    stamp = f"_Measured {dt.date.today().isoformat()} at commit {commit()} on {machine()}._"
    return f"<!-- bench:{area} -->\n{body}\n\n{stamp}\n<!-- /bench:{area} -->"


def _fresh_section(area: str) -> str:
    """:func:`section` computed in a fresh interpreter (``--section-to``), so an area's figures do
    not depend on what the areas before it left in this process: imported libraries (torch,
    zeus, codecarbon, OR-Tools), caches, a large heap for the garbage collector to walk (after
    the scaling area, a full collection of ~10 ms fell inside a 1.7 ms trace build now and
    then), background threads. An area therefore measures the same whether it is run alone
    (``--only``) or in ``make bench``. (The larger swings between two runs of this machine, up
    to 2x, come from the VM's CPU speed itself; :mod:`benchmarks.timing` spreads each figure's
    runs over processes and time for that.)"""
    import subprocess
    import sys
    import tempfile

    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{area}.md"
        subprocess.run([sys.executable, "-m", "benchmarks.run_all", "--only", area,
                        "--section-to", str(out)], cwd=root, check=True)
        return out.read_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", action="append", choices=areas(), metavar="AREA",
                        help=f"area(s) to run (default: all): {', '.join(areas())}")
    parser.add_argument("--section-to", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    todo = args.only or areas()
    if args.section_to:                   # a child of _fresh_section: one area, into FILE
        (area,) = todo
        Path(args.section_to).write_text(section(area))
        return
    text = DOC.read_text() if DOC.exists() else HEADER
    for area in todo:
        print(f"[bench] {area} (fresh process) ...", flush=True)
        new = _fresh_section(area)
        pattern = re.compile(rf"<!-- bench:{re.escape(area)} -->.*?<!-- /bench:{re.escape(area)} -->", re.S)
        text = pattern.sub(lambda _m, new=new: new, text) if pattern.search(text) else text.rstrip() + "\n\n" + new + "\n"
        DOC.parent.mkdir(exist_ok=True)
        DOC.write_text(text)
        print(new)


if __name__ == "__main__":
    main()
