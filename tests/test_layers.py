"""The package's import graph: layers point one way, scheduler/ reads only target data of
hw/, and no two top-level packages import each other.

Every module of the package is parsed (``ast``); an import is any ``import`` /
``from ... import`` statement anywhere in the module: at the top, inside functions
(lazy imports) and under ``if TYPE_CHECKING:``.  Type-only imports count: a module that
names another's types depends on it as much as one that calls it (moving the import
under ``TYPE_CHECKING`` hides a dependency, it does not remove it).  Dynamic imports by
name (the registry's ``importlib.import_module`` of the built-in backends and of
``polycomp.targets`` entry points) are not imports of the importing module: that is
how the registry finds backends without depending on them.  The implicit import of a
package's ``__init__`` when one of its submodules is imported is not counted either.

The layers, lowest first (docs/architecture.md, "Layers", says why each module sits
where it does).  A module may import modules of its own layer and of lower layers only.
Most modules belong to the layer of their folder; the few that sit lower than their
folder are placed by name (``MODULE_LAYERS``), and every module of the core folder
``polycomp/`` is placed by name (a new one must be given a layer here).
"""
from __future__ import annotations

import ast
import os
from collections import defaultdict

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# folder -> import name (pyproject's package-dir)
PACKAGES = {"polycomp": "polycomp", "frontend": "polycomp.frontend",
            "scheduler": "polycomp.scheduler", "lowering": "polycomp.lowering",
            "hw": "polycomp.hw", "graph": "polycomp.graph",
            "benchmarks": "polycomp.benchmarks"}

LAYERS = ["base", "model", "frontend", "lowering", "pipeline", "scheduler", "driver", "hw",
          "graph", "app"]

# every module of the core folder polycomp/, and the modules that sit below their
# folder's layer, by name
MODULE_LAYERS = {
    # base: errors, element types, the loop IR and its text form and simplifier, isl
    # helpers, affine/shape utilities, option checks, the artifact cache
    "polycomp.errors": "base",
    "polycomp.dtypes": "base",
    "polycomp.ir": "base",
    "polycomp.islutil": "base",
    "polycomp.affine": "base",
    "polycomp.shapes": "base",
    "polycomp.options": "base",
    "polycomp.cache": "base",
    "polycomp.version": "base",
    "polycomp.dlpack": "base",
    "polycomp.lowering.printer": "base",
    "polycomp.lowering.simplify": "base",
    # model: the polyhedral model, the schedule-tree helpers the front ends build their
    # initial trees with, and the declared mark kinds (lowering turns marks into IR
    # attributes by them)
    "polycomp.model": "model",
    "polycomp.scheduler.common.tree": "model",
    "polycomp.scheduler.common.marks": "model",
    # pipeline: the contracts every pass and backend is written against: the compile
    # state, the pass interfaces and pass manager, the compile's result, target data
    # and the registry
    "polycomp.state": "pipeline",
    "polycomp.pass_manager": "pipeline",
    "polycomp.compiled": "pipeline",
    "polycomp.tuning_contract": "pipeline",
    "polycomp.scheduler.common.pass_base": "pipeline",
    "polycomp.lowering.ir_pass": "pipeline",
    "polycomp.hw.target": "pipeline",
    "polycomp.hw.memory": "pipeline",
    "polycomp.hw.options": "pipeline",
    "polycomp.hw.registry": "pipeline",
    # frontend: the package itself re-exports the DSL and the errors (``import polycomp
    # as pc`` is the DSL), so any layer above may use it
    "polycomp": "frontend",
    # driver: kernel -> model -> passes -> source, through the registry (it imports no
    # backend; backends may call it)
    "polycomp.driver": "driver",
    # user kernel files: load, find and pick kernels, shapes and options from the command
    # line's arguments, random inputs (the command line, tuner and explainer share them)
    "polycomp.kernel_files": "driver",
    # the tuner drives compiles: its search and multi-version builders compile each
    # configuration through the driver (the backends build their modules with them);
    # its search spaces, guards, records and cost models stay in the scheduler layer
    "polycomp.scheduler.tuning.multiversion": "driver",
    "polycomp.scheduler.tuning.cuda_versions": "driver",
    "polycomp.scheduler.tuning.row_versions": "driver",
    "polycomp.scheduler.tuning.tune": "driver",
    "polycomp.scheduler.tuning.distributed": "driver",
    # app: the command line (benchmarks/ is app too), and the tuner's command
    "polycomp.cli": "app",
    "polycomp.scheduler.tuning.cli": "app",
}

FOLDER_LAYERS = {"polycomp.frontend": "frontend", "polycomp.lowering": "lowering",
                 "polycomp.scheduler": "scheduler", "polycomp.hw": "hw",
                 "polycomp.graph": "graph", "polycomp.benchmarks": "app"}

# what scheduler/ may import from hw/: target data (never a backend package, never the
# registry)
SCHEDULER_HW = {"polycomp.hw.target", "polycomp.hw.memory", "polycomp.hw.options"}

# Imports that break the rules today, in files other engineers are rewriting for issue
# #22 (owner in the comment).  The list may only shrink: an entry that no longer occurs
# fails the test (remove it).  (importer, imported) module pairs.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {
}


# --------------------------------------------------------------------------- the graph


def modules() -> dict[str, str]:
    """Import name -> file of every module of the package."""
    out = {}
    for folder, pkg in PACKAGES.items():
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, folder)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in files:
                if not f.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), os.path.join(ROOT, folder))
                parts = rel[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                out[".".join([pkg, *parts])] = os.path.join(dirpath, f)
    return out


def imports_of(name: str, path: str, known: dict) -> set[str]:
    """The package modules ``name`` (file ``path``) imports."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out: set[str] = set()

    def resolve(target: str) -> str | None:
        # the longest module prefix of ``target`` (``polycomp.ir.Var`` -> polycomp.ir)
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[:len(up) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            if t == "polycomp" or t.startswith("polycomp."):
                m = resolve(t)
                if m is not None and m != name:
                    out.add(m)
    return out


def missing_imports(name: str, path: str, known: dict) -> list[str]:
    """The package modules ``name`` imports that do not exist (``from .gone import f``,
    ``import polycomp.gone``): such an import fails only when its line runs, and imports
    inside functions run late."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[:len(up) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            # ``from pkg import mod`` names a module or an attribute of pkg: pkg must exist
            mods = [base]
        else:
            continue
        for m in mods:
            if (m == "polycomp" or m.startswith("polycomp.")) and m not in known:
                out.append(f"{name}:{node.lineno} imports {m}")
    return out


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def layer_of(module: str) -> str:
    if module in MODULE_LAYERS:
        return MODULE_LAYERS[module]
    for prefix in sorted(FOLDER_LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return FOLDER_LAYERS[prefix]
    raise KeyError(module)


def unit_of(module: str) -> str:
    """The top-level package of ``module`` for the cycle check: its folder, with the core
    folder polycomp/ split into its layers and the modules placed below their folder
    counted with their layer (``polycomp[base]``)."""
    if module in MODULE_LAYERS:
        return f"polycomp[{MODULE_LAYERS[module]}]"
    return ".".join(module.split(".")[:2])


def violations(graph: dict[str, set[str]]) -> dict[tuple[str, str], str]:
    """(importer, imported) -> the rule it breaks."""
    rank = {name: k for k, name in enumerate(LAYERS)}
    out = {}
    for a, targets in graph.items():
        for b in targets:
            if rank[layer_of(b)] > rank[layer_of(a)]:
                out[(a, b)] = f"layer {layer_of(a)} imports layer {layer_of(b)}"
            elif a.startswith("polycomp.scheduler.") and b.startswith("polycomp.hw.") \
                    and b not in SCHEDULER_HW:
                out[(a, b)] = "scheduler/ imports hw/ beyond target data"
    return out


def unit_cycles(graph: dict[str, set[str]], skip) -> list[list[str]]:
    """Strongly connected components (more than one unit) of the graph of top-level
    packages, without the edges in ``skip``."""
    edges: dict[str, set[str]] = defaultdict(set)
    for a, targets in graph.items():
        for b in targets:
            if (a, b) not in skip and unit_of(a) != unit_of(b):
                edges[unit_of(a)].add(unit_of(b))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return comps


# --------------------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_every_module_has_a_layer():
    core_dir = os.path.join(ROOT, "polycomp") + os.sep
    core = [m for m, path in modules().items() if path.startswith(core_dir)]
    missing = [m for m in core if m not in MODULE_LAYERS]
    assert not missing, f"give these core modules a layer in MODULE_LAYERS: {missing}"
    for m in modules():
        assert layer_of(m) in LAYERS, m
    stale = [m for m in MODULE_LAYERS if m not in modules()]
    assert not stale, f"MODULE_LAYERS names modules that do not exist: {stale}"


def test_every_package_import_names_a_module():
    known = modules()
    missing = [m for name, path in known.items() for m in missing_imports(name, path, known)]
    assert not missing, "imports of modules that do not exist:\n  " + "\n  ".join(missing)


def test_imports_follow_the_layers(graph):
    found = violations(graph)
    new = {k: v for k, v in found.items() if k not in KNOWN_VIOLATIONS}
    assert not new, "imports against the layers (docs/architecture.md, Layers):\n" + \
        "\n".join(f"  {a} -> {b}: {why}" for (a, b), why in sorted(new.items()))


def test_known_violations_only_shrink(graph):
    found = violations(graph)
    gone = [k for k in KNOWN_VIOLATIONS if k not in found]
    assert not gone, f"fixed: remove from KNOWN_VIOLATIONS: {gone}"


def test_no_cycle_between_top_level_packages(graph):
    cycles = unit_cycles(graph, KNOWN_VIOLATIONS)
    assert not cycles, f"top-level packages that import each other: {cycles}"


def test_the_checker_sees_lazy_and_type_only_imports(tmp_path):
    """The parser counts imports in functions and under TYPE_CHECKING, and resolves
    relative imports (a check of the checker, on a made-up module)."""
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\n"
                   "if TYPE_CHECKING:\n    from polycomp.hw.cuda import codegen\n"
                   "def f():\n    from ..common import marks\n    import polycomp.ir as ir\n")
    known = {"polycomp.hw.cuda.codegen": "", "polycomp.scheduler.common.marks": "",
             "polycomp.ir": "", "polycomp.scheduler.gpu.m": ""}
    got = imports_of("polycomp.scheduler.gpu.m", str(src), known)
    assert got == {"polycomp.hw.cuda.codegen", "polycomp.scheduler.common.marks",
                   "polycomp.ir"}
    assert violations({"polycomp.scheduler.gpu.m": got}) == {
        ("polycomp.scheduler.gpu.m", "polycomp.hw.cuda.codegen"):
            "layer scheduler imports layer hw"}
