"""Lowering a fused chain's marked nest to a kernel (the CUDA targets'
:mod:`.cuda_codegen`): :func:`replace_marked_nest` replaces the nest under the tree
pass's mark by one statement (the CUDA kernel's region) and drops the allocations
nothing reads, writes or passes any more (the intermediate, the softmax's arrays).
(The CPU targets lower the fused chain's schedule tree itself: :mod:`.program`.)
"""
from __future__ import annotations

from typing import Callable

from polycomp import ir

__all__ = ["buffers_used", "replace_marked_nest"]


def buffers_used(s: ir.Stmt) -> set[str]:
    """The names of the buffers ``s`` loads, stores or passes by name (an ``ir.Var`` of
    dtype ``handle``, as a kernel call's pointer argument)."""
    used: set[str] = set()

    def visit(n):
        if isinstance(n, (ir.Load, ir.Store)):
            used.add(n.buffer.name)
        if isinstance(n, ir.Var) and n.dtype == "handle":
            used.add(n.name)
    ir.walk(s, visit)
    return used


def replace_marked_nest(body: ir.Stmt, mark: str, new: ir.Stmt,
                        droppable: Callable[[ir.Buffer], bool] = lambda b: True
                        ) -> tuple[ir.Stmt, int]:
    """``body`` with every ``AttrStmt`` of key ``mark`` (and the nest under it) replaced
    by ``new``, then every ``Allocate`` of a ``droppable`` buffer that the result no
    longer uses (:func:`buffers_used`, by name) unwrapped (its body kept); and how many
    marks were replaced.

    Assumes: the marked nest writes nothing that outlives it but what ``new`` writes
    (the tree passes fuse only a kernel made of the chain alone), so only buffers private
    to the nest lose their uses.  Guarantees: with 0 marks replaced the statements are
    unchanged (callers then keep their function); nothing but the marked nests and
    unused allocations changes."""

    class _Replace(ir.Mutator):
        count = 0

        def visit_AttrStmt(self, s):
            if s.key != mark:
                return self.generic(s)
            self.count += 1
            return new

    r = _Replace()
    out = r.visit(body)
    used = buffers_used(out)

    class _DropAlloc(ir.Mutator):
        def visit_Allocate(self, s):
            inner = self.visit(s.body)
            if droppable(s.buffer) and s.buffer.name not in used:
                return inner
            return ir.Allocate(s.buffer, inner)

    return _DropAlloc().visit(out), r.count
