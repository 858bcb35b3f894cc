"""Does every printed figure carry exactly one provenance label? A checker of the CLI's text.

A *figure* is a number with a unit of energy, power, time, emissions or a percentage (``12.1 J``,
``0.000003 kWh``, ``45.4 W``, ``2.68 h``, ``-63.13 %``). Its *labels* are the words of the one
vocabulary (:data:`joulebound.core.provenance.ALL`: measured, modeled, published) that say
where it comes from:

- a line of text with figures must name exactly one label, or, when it names several, each of
  its clauses (split at semicolons outside brackets) with figures must name exactly one
  (``lasted 0.07 s (measured); CPU+DRAM 3.0 J (modeled)`` is two clauses, each labeled);
- a row of a rich table with figures must name exactly one label itself (a provenance cell,
  ``12.1 modeled``), or, when it names none, the table's title and the headers of the columns
  its figures are in must name exactly one between them.

Wording that describes a figure's interval or range (``90 % interval``, ``5-95 %``), the
switch latency's symbol where it is restated (``L = 20 ms``, set and labeled once) and a model's
validation error (``1.7 % time, 4.0 % energy MAPE``) are not figures. Run the CLI with a wide ``COLUMNS`` so that rich does not wrap a sentence over lines.
"""

from __future__ import annotations

import re

LABELS = ("measured", "modeled", "published")
_LABEL = re.compile(r"\b(measured|modeled|published)\b")
_UNIT = r"(?:kWh|MWh|Wh|mJ|kJ|MJ|J|kW|mW|W|ms|µs|us|min|s|h|gCO2e|%)"
FIGURE = re.compile(r"(?<![\w.])[-+−]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?\s?" + _UNIT + r"(?![\w/²])")
#: descriptions of a figure's range, not figures
_DESCRIPTORS = re.compile(
    r"\b5[-–]95 %|\b90 % (?:interval|range)"
    r"|\bL ?= ?\d+(?:\.\d+)? ?ms"                      # the switch latency's symbol, defined once
    r"|[\d.]+ % (?:time|energy|power)(?:,|\s+MAPE)"      # a model's validation error, not a figure
    r"|[\d.]+ % (?:energy )?MAPE")
_BORDERS = "┏┡└┃│━─┳╇┻┼┗┛┓┩┴"


def figures(text: str) -> list[str]:
    """The figures in ``text`` (see the module docstring)."""
    return FIGURE.findall(_DESCRIPTORS.sub(" ", text))


def labels(text: str) -> set[str]:
    """The distinct provenance labels named in ``text``."""
    return set(_LABEL.findall(text))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"[┃│]", line)[1:-1]]


def _clauses(line: str) -> list[str]:
    """``line`` split at the semicolons outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in line:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == ";" and depth <= 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur]


def problems(output: str, where: str = "") -> list[str]:
    """Every figure-bearing line or table row of ``output`` that names no label or more than
    one, as ``"<where>: <line> -> <labels>"``."""
    lines = output.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("┏"):              # a rich table
            title = lines[i - 1] if i > 0 and not lines[i - 1].lstrip().startswith(
                tuple(_BORDERS)) else ""
            j = i + 1
            header: list[list[str]] = []
            while j < len(lines) and not lines[j].lstrip().startswith("┡"):
                header.append(_cells(lines[j]))
                j += 1
            cols = [" ".join(h[k] for h in header if k < len(h))
                    for k in range(max((len(h) for h in header), default=0))]
            j += 1
            while j < len(lines) and not lines[j].lstrip().startswith("└"):
                cells = _cells(lines[j])
                row_figs = [k for k, c in enumerate(cells) if figures(c)]
                if row_figs:
                    own = labels(" ".join(cells))
                    if not own:
                        own = labels(title) | set().union(
                            *(labels(cols[k]) for k in row_figs if k < len(cols)))
                    if len(own) != 1:
                        out.append(f"{where}: table '{title.strip()}' row {lines[j].strip()!r}"
                                   f" -> {sorted(own)}")
                j += 1
            i = j + 1
            continue
        if figures(line) and len(labels(line)) != 1:
            parts = _clauses(line) if labels(line) else [line]
            for clause in parts:
                if figures(clause) and len(labels(clause)) != 1:
                    out.append(f"{where}: {clause.strip()!r} -> {sorted(labels(clause))}")
        i += 1
    return out
