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
    assert "joulebound.runtime.controller" in g["joulebound.runtime.session"]
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


#: the layers, lowest first: a module may import its own layer's package and the layers below it,
#: never a layer at or above its own (siblings on one rank do not import each other). ``testing``
#: (test doubles) stands beside the house: tests and the doubles import the product, the product
#: never imports it. The package's face (``joulebound/__init__``, ``__main__``) may import any
#: layer. Kept in step with the README's Architecture paragraph and docs/architecture.md.
LAYERS = (
    ("core",),                  # vocabulary, units grammar, clock pairs, typed errors, helpers
    ("hw",),                    # catalog, specs, links, memory technologies, NVML, GPU lock
    ("workload",),              # training configs, traces, op streams, Kineto, capture
    ("gpumodel",),              # THE kernel time/power model, its fit and parameter files
    ("planning", "jobs"),       # clock plans | job predictor and advice
    ("runtime", "energy"),      # clock control at run time | energy meters, stores, integrations
    ("measure",),               # calibration runs and training sweeps on real GPUs
    ("report",),                # HTML and plots
    ("cli",),                   # thin: parse, call the library, print
)
RANK = {pkg: i for i, names in enumerate(LAYERS) for pkg in names}


def _layer(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_package_has_a_layer() -> None:
    """A new top-level package must be placed in :data:`LAYERS` (or be the testing package)."""
    tops = {_layer(m) for m in MODULES} - {None, "testing", "__main__"}
    assert tops <= set(RANK), f"packages without a layer: {sorted(tops - set(RANK))}"


def _upward(g: dict[str, dict[str, int]]) -> list[str]:
    bad = []
    for mod, deps in g.items():
        a = _layer(mod)
        if a not in RANK:
            continue
        for dep, line in deps.items():
            b = _layer(dep)
            if b is None or b == a or b == "testing":
                continue   # the face (`from joulebound import __version__`); testing: own test
            if RANK[b] >= RANK[a]:
                bad.append(f"{mod}:{line} imports {dep} ({a} may import only "
                           f"{', '.join(p for p in RANK if RANK[p] < RANK[a]) or 'nothing'})")
    return bad


def test_imports_point_down_the_layers_only() -> None:
    bad = _upward(import_graph())
    assert bad == [], "\n".join(bad)


def test_the_layer_check_sees_an_upward_or_sideways_import() -> None:
    """One upward arrow (core importing the CLI) and one sideways (planning importing jobs)
    are each caught."""
    g = {k: dict(v) for k, v in import_graph().items()}
    g["joulebound.core.errors"]["joulebound.cli"] = 7
    g["joulebound.planning.study"]["joulebound.jobs.mechanistic"] = 9
    bad = _upward(g)
    assert any(b.startswith("joulebound.core.errors:7") for b in bad)
    assert any(b.startswith("joulebound.planning.study:9") for b in bad)


def _external_imports(name: str) -> list[str]:
    """Modules of joulebound that import ``name`` (any statement, any depth)."""
    out = []
    for mod, (path, _) in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            if any(n == name or n.startswith(name + ".") for n in names):
                out.append(mod)
                break
    return sorted(out)


def test_only_the_hardware_layer_imports_pynvml() -> None:
    """NVML is reached through ``joulebound.hw`` only (the fake NVML of the testing package
    stands in for it in tests)."""
    bad = [m for m in _external_imports("pynvml")
           if not (m.startswith("joulebound.hw") or m.startswith("joulebound.testing"))]
    assert bad == [], f"pynvml imported outside joulebound.hw: {bad}"


def test_the_research_package_is_reached_only_by_validate() -> None:
    """``research`` (validation checks, the pipeline that writes shipped parameters) is outside
    the wheel: only ``joulebound validate`` loads it, lazily."""
    assert _external_imports("research") == ["joulebound.cli.validate"]


def _layer_order_in(text: str) -> list[str]:
    """The layer names of :data:`LAYERS` in the order ``text`` first names them in bold
    (``**core**``) or as packages (``joulebound.core``)."""
    import re

    pos = {}
    for pkg in RANK:
        m = re.search(rf"\*\*{pkg}\*\*|`joulebound\.{pkg}`", text)
        assert m, f"{pkg} is not named"
        pos[pkg] = m.start()
    return sorted(pos, key=pos.get)


def test_the_readme_and_the_architecture_page_name_the_layers_in_order() -> None:
    """README's Architecture paragraph (bold names) and docs/architecture.md's table (package
    names) list the layers lowest first, siblings in either order."""
    root = PKG.parent
    readme = (root / "README.md").read_text()
    para = readme[readme.index("## Architecture"):readme.index("## Validation figures")]
    page = (root / "docs" / "architecture.md").read_text()
    table = page[page.index("| layer |"):]
    for order in (_layer_order_in(para), _layer_order_in(table)):
        ranks = [RANK[p] for p in order]
        assert ranks == sorted(ranks), order
