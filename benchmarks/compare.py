"""Does a rerun reproduce? Compare two versions of docs/benchmarks.md figure by figure.

Every figure stated with a spread, ``median (min–max)``, in the first file is looked up in the
second (same section, same table row and column, or the same place in the same line of text)
and the second's median is checked against the first's min–max. Figures without a spread (counts,
modeled results, single values) are not compared.

Usage::

    git show HEAD~1:docs/benchmarks.md > /tmp/old.md
    python -m benchmarks.compare /tmp/old.md docs/benchmarks.md [--tolerance 0.05]

Prints every figure outside the first run's spread and a summary per section; exits 1 when any
is outside (``--tolerance`` widens each spread by that fraction of its median, for rounding;
``--speed`` first scales the rerun's times by the ratio of the two runs' machine speeds, from the
reference-loop line under each section, ``benchmarks/timing.py``: for runs on different days; on
the same day it adds a few percent of noise to figures that need no correction).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

NUM = r"[-+]?\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(rf"({NUM})\s*(?:[a-zµ%×/ ]{{0,6}}?)\s*\(({NUM})\s*[–-]\s*({NUM})")
SECTION = re.compile(r"<!-- bench:(\w+) -->(.*?)<!-- /bench:\1 -->", re.S)


@dataclass(frozen=True)
class Figure:
    """One ``median (min–max)`` figure and where it stands."""

    section: str
    where: str
    median: float
    lo: float
    hi: float


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def figures(text: str) -> dict[tuple[str, str], Figure]:
    """Every spread-carrying figure of a benchmarks.md, keyed by (section, place)."""
    out: dict[tuple[str, str], Figure] = {}
    for area, body in SECTION.findall(text):
        header: list[str] = []
        prev: list[str] = []
        seen: dict[str, int] = {}          # rows with the same first cell: numbered
        for line in body.splitlines():
            if line.startswith("|"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if set("".join(cells)) <= set("-: "):
                    header, seen = prev, {}        # the row above a separator names the columns
                    continue
                prev = cells
                n = seen[cells[0]] = seen.get(cells[0], 0) + 1
                row = cells[0] + (f" [{n}]" if n > 1 else "")
                for j, cell in enumerate(cells):
                    for k, m in enumerate(FIGURE.finditer(cell)):
                        col = header[j] if j < len(header) else str(j)
                        where = f"{row} / {col}" + (f" #{k}" if k else "")
                        out[(area, where)] = Figure(area, where, _num(m[1]), _num(m[2]),
                                                    _num(m[3]))
            elif line.strip():
                key = re.sub(r"[\d.,]+", "#", line)[:60]
                for k, m in enumerate(FIGURE.finditer(line)):
                    where = f"text {key!r} #{k}"
                    out[(area, where)] = Figure(area, where, _num(m[1]), _num(m[2]), _num(m[3]))
    return out


TIME = re.compile(r"(?<![\w/])(CPU |wall )?(ms|µs|us|ns|s)\b|time|wall", re.I)
SPEED = "Machine speed during this section"


def is_time(f: Figure) -> bool:
    """Whether a figure is a time (scales with the machine's speed): its column or line names a
    time unit, and it is not a ratio or a rate."""
    return bool(TIME.search(f.where)) and not re.search(r"×|ratio|/ Zeus|per second|Hz|%",
                                                         f.where)


def speeds(text: str) -> dict[str, float]:
    """Each section's machine speed: its reference loop's fastest sample (CPU ms), from its speed line.

    The minimum, not the median: this VM's speed switches between two levels ~2x apart, and the
    median of a section's samples lands on either level depending on how many it took at each, so
    two runs of the same day differed by up to 1.7x in median (0.93-1.07x in minimum). The fast
    level itself moves when the whole machine is slower (another day, another host)."""
    return {f.section: f.lo for f in figures(text).values() if SPEED in f.where}


def compare(old: str, new: str, tolerance: float = 0.0, speed: bool = False
            ) -> tuple[list[tuple[Figure, Figure]], dict[str, list[int]]]:
    """(figures of ``new`` outside ``old``'s spread as (old, new) pairs, per section
    [compared, outside]). ``speed``: a time figure of ``new`` is first divided by the ratio of
    the two runs' reference-loop minima in its section (sections with a speed line in both)."""
    a, b = figures(old), figures(new)
    sa, sb = (speeds(old), speeds(new)) if speed else ({}, {})
    outside = []
    per: dict[str, list[int]] = {}
    for key, f in a.items():
        g = b.get(key)
        if g is None or (speed and SPEED in f.where):    # the reference itself: not a figure
            continue
        c = per.setdefault(f.section, [0, 0])
        c[0] += 1
        value = g.median
        if f.section in sa and f.section in sb and is_time(f):
            value = g.median * sa[f.section] / sb[f.section]
        pad = tolerance * abs(f.median)
        if not (f.lo - pad <= value <= f.hi + pad):
            c[1] += 1
            outside.append((f, Figure(g.section, g.where, value, g.lo, g.hi)))
    return outside, per


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path, help="the first run's benchmarks.md")
    ap.add_argument("new", type=Path, help="the rerun's benchmarks.md")
    ap.add_argument("--tolerance", type=float, default=0.0,
                    help="widen each spread by this fraction of its median (default 0)")
    ap.add_argument("--speed", action="store_true",
                    help="first scale the rerun's times by the ratio of the two runs' machine "
                         "speed (each section's fastest reference-loop sample)")
    args = ap.parse_args(argv)
    old, new = args.old.read_text(), args.new.read_text()
    if args.speed:
        sa, sb = speeds(old), speeds(new)
        for area in sorted(set(sa) & set(sb)):
            print(f"{area}: machine speed, rerun / first run: reference loop's fastest sample "
                  f"{sb[area]:.2f} / {sa[area]:.2f} CPU ms = {sb[area] / sa[area]:.2f}")
    outside, per = compare(old, new, args.tolerance, args.speed)
    for f, g in outside:
        print(f"[{f.section}] {f.where}: {g.median:.4g} outside {f.median:g} ({f.lo:g}–{f.hi:g})")
    for area, (n, bad) in sorted(per.items()):
        print(f"{area}: {n - bad} of {n} figures within the first run's spread")
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main())
