"""Layering of tuning (issue #22 items 3 and 6): scheduler/tuning reads target data only
(hw/target.py, hw/memory.py, hw/options.py), never a backend package, and asks the
backend (Backend.tuning_space / measure / version_plan / multiversion_module ...) instead
of switching on the target's family; no code outside hw/ builds C or CUDA text for
multi-version kernels."""
from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUNING = os.path.join(ROOT, "scheduler", "tuning")
ALLOWED_HW = {"polycomp.hw.target", "polycomp.hw.memory", "polycomp.hw.options"}


def _sources():
    return sorted(os.path.join(TUNING, f) for f in os.listdir(TUNING) if f.endswith(".py"))


@pytest.mark.parametrize("path", _sources(), ids=os.path.basename)
def test_tuning_imports_target_data_only(path):
    tree = ast.parse(open(path).read(), path)
    bad = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for n in names[:1]:
            if n.startswith("polycomp.hw") and n not in ALLOWED_HW:
                bad.append(f"line {node.lineno}: {n}")
    assert not bad, bad


def _families() -> set[str]:
    from polycomp.hw.registry import backends
    return {b.family for b in backends()}


def _package_sources():
    out = []
    for top in ("polycomp", "frontend", "scheduler", "lowering", "hw", "benchmarks", "graph"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            out += [os.path.join(d, f) for f in files if f.endswith(".py")]
    return sorted(out)


def test_no_target_family_switch():
    """``t.kind == "c"`` and the like, anywhere in the package: the registry and the
    backend answer instead (target data such as ``target.cuda`` may be read)."""
    fams = _families()
    bad = []
    for path in _package_sources():
        bad += [f"{os.path.relpath(path, ROOT)}:{line}" for line in _switches(path, fams)]
    assert not bad, bad


def _switches(path, fams) -> list[int]:
    tree = ast.parse(open(path).read(), path)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) \
                and node.left.attr == "kind":
            for c in node.comparators:
                consts = [c] if isinstance(c, ast.Constant) else \
                    list(c.elts) if isinstance(c, (ast.Tuple, ast.List, ast.Set)) else []
                if any(isinstance(x, ast.Constant) and x.value in fams for x in consts):
                    bad.append(node.lineno)
    return bad


def test_no_c_or_cuda_text_in_tuning():
    """The selector and dispatchers are IR; the text is the backends' printers'."""
    for path in _sources():
        text = open(path).read()
        for needle in ('extern "C"', "int64_t ", "switch (", "#include", ".replace(f\"void"):
            assert needle not in text, (path, needle)
