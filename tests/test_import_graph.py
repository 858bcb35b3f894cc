"""The package's import graph: no cycles, no private names across modules, no test doubles in
production code.

Every ``import`` / ``from … import`` in every module of ``joulebound`` counts — module level,
inside functions (a cycle hidden by a function-level import is still a cycle: the two modules
cannot be understood or moved apart) and under ``if TYPE_CHECKING:``. ``from pkg import name``
is an edge to ``pkg.name`` when that is a module, else to ``pkg`` (its ``__init__``); the implicit
import of a module's parent package is not an edge.
"""

from __future__ import annotations

import ast
import functools
import graphlib
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "joulebound"


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


MODULES = _modules()


@functools.cache
def _imports(mod: str) -> list[tuple[str, list[str], int]]:
    """``(target module, imported names, line)`` of every joulebound import in ``mod`` (parsed
    once per module for all the tests here)."""
    path, is_pkg = MODULES[mod]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names
                    if a.name.split(".")[0] == "joulebound"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "joulebound":
                out.append((target, [a.name for a in node.names], node.lineno))
    return out


def _resolve(name: str) -> str:
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


@functools.cache
def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first such import}."""
    g: dict[str, dict[str, int]] = {m: {} for m in MODULES}
    for mod in MODULES:
        for target, names, line in _imports(mod):
            dests = [f"{target}.{n}" if f"{target}.{n}" in MODULES else target
                     for n in names] or [target]
            for d in dests:
                d = _resolve(d)
                if d != mod:
                    g[mod].setdefault(d, line)
    return g


def _reaches(g: dict[str, dict[str, int]], a: str, b: str) -> bool:
    seen, todo = {a}, [a]
    while todo:
        for n in g[todo.pop()]:
            if n == b:
                return True
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return False


def test_the_walker_sees_function_level_imports() -> None:
    """A function-level import is an edge (the run session imports the controller inside its
    functions, the meter the rank helper)."""
    g = import_graph()
    assert "joulebound.dvfs.control.controller" in g["joulebound.dvfs.control.session"]
    assert "joulebound.energy.ranks" in g["joulebound.energy.meter"]
    assert sum(len(v) for v in g.values()) > 300


def test_no_import_cycles() -> None:
    g = import_graph()
    try:
        graphlib.TopologicalSorter(g).prepare()
    except graphlib.CycleError as exc:
        cycle = exc.args[1]
        where = [f"{a} -> {b} (line {import_graph()[a][b]})"
                 for a, b in zip(cycle, cycle[1:], strict=False)]
        raise AssertionError("import cycle (break it with a lower module both sides import): "
                             + "; ".join(where)) from None


def test_no_private_names_imported_across_modules() -> None:
    bad = []
    for mod in MODULES:
        for target, names, line in _imports(mod):
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{mod}:{line} imports {target}.{n}")
    assert bad == []


def test_production_modules_do_not_import_the_testing_package() -> None:
    g = import_graph()
    prod = [m for m in MODULES if not m.startswith("joulebound.testing")]
    bad = [f"{m} -> {d}" for m in prod for d in g[m] if d.startswith("joulebound.testing")]
    assert bad == []
