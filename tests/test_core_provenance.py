"""Provenance labels are written through joulebound.core.provenance's constants, never as literals."""

from __future__ import annotations

import ast
from pathlib import Path

import joulebound
from joulebound.core import provenance

PKG = Path(joulebound.__file__).parent
LABELS = {*provenance.ALL, provenance.MEASURED_AND_MODELED}
# string constants that spell a label but are not one
NOT_A_LABEL = {
    ("planning/study.py", "measured"),       # what a paper's figure is, in the paper's words
    ("cli/validate.py", "published"),    # a calibration kind (fit | published | transfer)
}


def _literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    allowed: set[int] = set()
    for n in ast.walk(tree):
        body = getattr(n, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            allowed.add(id(body[0].value))       # docstrings document the serialized values
        if isinstance(n, ast.Dict):
            allowed.update(id(k) for k in n.keys if k is not None)  # keys: field names
        if isinstance(n, ast.Subscript):
            allowed.add(id(n.slice))
        if isinstance(n, ast.JoinedStr):
            allowed.update(id(v) for v in ast.walk(n))  # display text
        if isinstance(n, ast.Tuple) and len(n.elts) == 2 and isinstance(n.elts[0], ast.Constant) \
                and isinstance(n.elts[1], ast.Attribute) and n.elts[1].attr == n.elts[0].value:
            allowed.add(id(n.elts[0]))           # ("measured", self.measured): an array's name
    return sorted((n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in LABELS and id(n) not in allowed)


def test_no_provenance_label_is_spelled_out_in_the_package():
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel in ("core/provenance.py", "core/vocab.py"):   # where the words are defined
            continue
        found += [f"{rel}:{line}: {value!r}" for line, value in _literals(path)
                  if (rel, value) not in NOT_A_LABEL]
    assert found == [], "use joulebound.core.provenance.MEASURED / MODELED / PUBLISHED:\n" + \
        "\n".join(found)


def test_the_scan_finds_a_literal(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""doc: "modeled"."""\nx = {"provenance": "modeled"}\nkind = "measured"\n')
    assert _literals(bad) == [(2, "modeled"), (3, "measured")]
