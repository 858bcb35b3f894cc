"""Does a rerun reproduce? Compare two versions of docs/benchmarks.md figure by figure.

Every figure stated with a spread, ``median (min–max)``, in the first file is looked up in the
second (same section, same table row and column, or the same place in the same line of text)
and the second's median is checked against the first's min–max. Figures without a spread (counts,
modeled results, single values) are not compared.

Usage::

    git show HEAD~1:docs/benchmarks.md > /tmp/old.md
    python -m benchmarks.compare /tmp/old.md docs/benchmarks.md [--tolerance 0.05]

Prints every figure outside the first run's spread and a summary per section; exits 1 when any
is outside (``--tolerance`` widens each spread by that fraction of its median, for rounding).
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


def compare(old: str, new: str, tolerance: float = 0.0) -> tuple[list[tuple[Figure, Figure]],
                                                                  dict[str, list[int]]]:
    """(figures of ``new`` outside ``old``'s spread as (old, new) pairs, per section
    [compared, outside])."""
    a, b = figures(old), figures(new)
    outside = []
    per: dict[str, list[int]] = {}
    for key, f in a.items():
        g = b.get(key)
        if g is None:
            continue
        c = per.setdefault(f.section, [0, 0])
        c[0] += 1
        pad = tolerance * abs(f.median)
        if not (f.lo - pad <= g.median <= f.hi + pad):
            c[1] += 1
            outside.append((f, g))
    return outside, per


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path, help="the first run's benchmarks.md")
    ap.add_argument("new", type=Path, help="the rerun's benchmarks.md")
    ap.add_argument("--tolerance", type=float, default=0.0,
                    help="widen each spread by this fraction of its median (default 0)")
    args = ap.parse_args(argv)
    outside, per = compare(args.old.read_text(), args.new.read_text(), args.tolerance)
    for f, g in outside:
        print(f"[{f.section}] {f.where}: {g.median:g} outside {f.median:g} ({f.lo:g}–{f.hi:g})")
    for area, (n, bad) in sorted(per.items()):
        print(f"{area}: {n - bad} of {n} figures within the first run's spread")
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main())
