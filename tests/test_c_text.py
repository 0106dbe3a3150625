"""C, CUDA and Ascend C source text is written only by the printers and by one family of
template modules per backend (issue #22): every kernel comes out of the pipeline, so no
scheduler pass, lowering pass or IR pass may build source text beside it.

The check reads every module of the package with ``ast`` and looks at its string
constants (docstrings excepted) for the marks of C source: ``#include``, ``#pragma``,
``__global__``/``__device__``/``__aicore__``, ``extern "C"``, ``static inline``,
``int main(``, ``for (int ``, a ``void f(`` definition.  The modules that may hold such
text are listed below with what they are; a new one fails the test.
"""
from __future__ import annotations

import ast
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

C_TEXT = re.compile(r'#include|#pragma |__global__|__device__|__aicore__|extern "C"|'
                    r'static inline|int main\(|for \(int |\bvoid \w+\(')

# the package's folders that hold compiler code (front ends quote C in their error
# messages, benchmarks/ builds measurement programs: neither is compiler output)
FOLDERS = ("polycomp", "scheduler", "lowering", "hw", "graph")

ALLOWED = {
    # printers: IR -> source text
    "hw/clike.py": "the C-family expression and statement printer",
    "hw/cpu/codegen.py": "the C printer (kernels, multi-version modules)",
    "hw/cpu/vector_printer.py": "the AVX2/AVX-512 printer",
    "hw/cuda/codegen.py": "the CUDA printer (kernels, host launchers, multi-version modules)",
    "hw/npu/printer.py": "the Ascend C printer",
    # template modules: fixed support code the printed sources include
    "hw/cpu/vector_prelude.py": "CPU: the vector support library (masks, math, dot units)",
    "hw/cpu/sanitize.py": "CPU: the sanitizer run's C harness (a main() calling the kernel)",
    "hw/cpu/simd_build.py": "CPU: the SIMDe precompiled header's includes",
    "hw/cuda/ptx.py": "CUDA: the sm_80 PTX wrappers (ldmatrix, mma, cp.async)",
    "hw/cuda/ptx_hopper.py": "CUDA: the sm_90a PTX wrappers (wgmma, TMA, mbarrier) and the "
                             "TMA tensor-map encoder",
    "hw/npu/api_header.py": "NPU: the Ascend C API declarations the emitted code is checked "
                            "against (g++ -fsyntax-only)",
}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            out.add(id(node.body[0].value))
    return out


def modules_with_c_text() -> dict[str, int]:
    """Module path (relative to the repository) -> the first line of C text in it."""
    found: dict[str, int] = {}
    for folder in FOLDERS:
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, folder)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in sorted(files):
                if not f.endswith(".py"):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as fh:
                    tree = ast.parse(fh.read())
                docs = _docstrings(tree)
                for node in ast.walk(tree):
                    if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                            and id(node) not in docs and C_TEXT.search(node.value):
                        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
                        found[rel] = min(found.get(rel, node.lineno), node.lineno)
    return found


def test_c_text_only_in_printers_and_templates():
    found = modules_with_c_text()
    outside = {m: line for m, line in found.items() if m not in ALLOWED}
    assert not outside, "C source text outside the printers and template modules " \
        "(print it from IR instead): " + ", ".join(f"{m}:{n}" for m, n in sorted(outside.items()))


def test_allowed_modules_still_exist():
    missing = [m for m in ALLOWED if not os.path.exists(os.path.join(ROOT, m))]
    assert not missing, f"remove from ALLOWED: {missing}"


def test_the_check_sees_c_text(tmp_path, monkeypatch):
    """A scheduler module that builds a loop as text is caught (the check is not vacuous)."""
    pkg = tmp_path / "scheduler"
    pkg.mkdir()
    (pkg / "bad.py").write_text('"""A docstring may say for (int i = 0; ...)."""\n'
                                'def emit(n):\n'
                                '    return f"for (int i = 0; i < {n}; i++) a[i] = 0;"\n')
    (pkg / "fine.py").write_text('"""Mentions #include <x.h> in a docstring only."""\n'
                                 'X = "no source here"\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    assert modules_with_c_text() == {"scheduler/bad.py": 3}
