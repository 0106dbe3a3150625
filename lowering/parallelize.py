"""IR pass: run the outermost coincident loops in parallel (OpenMP on CPU targets).

Assumes: ``For`` loops carry the ``coincident`` annotation computed at AST generation
(:func:`polycomp.lowering.ast_to_ir.build_ast`).
Guarantees: on every path from the root, the outermost loop annotated coincident (and
not of constant extent below ``min_extent``) gets kind ``parallel``; loops below it are
left serial (no nested parallelism).  Loops that are not
coincident are untouched, so the transformation preserves every dependence.
"""
from __future__ import annotations

from dataclasses import replace

from polycomp import ir


class _Parallelize(ir.Mutator):
    def __init__(self, min_extent: int):
        self.inside = 0
        self.min_extent = min_extent

    def visit_For(self, s):
        if self.inside == 0 and s.kind == "serial" and s.annotation("coincident", False) \
                and not (isinstance(s.extent, ir.IntImm) and s.extent.value < self.min_extent):
            self.inside += 1
            body = self.visit(s.body)
            self.inside -= 1
            return replace(s, kind="parallel", body=body)
        if s.kind == "parallel":
            self.inside += 1
            body = self.visit(s.body)
            self.inside -= 1
            return replace(s, body=body)
        return self.generic(s)


def parallelize(func: ir.LoweredFunc, min_extent: int = 2) -> ir.LoweredFunc:
    return func.with_body(_Parallelize(min_extent).visit(func.body))
