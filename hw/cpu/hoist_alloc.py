"""IR pass: hoist heap allocations out of sequential loops.

Assumes: ``Allocate`` nodes of ``global`` scope whose buffer is fully written before it
is read in each execution of the Allocate's body (true of contracted temporaries and
packed operands: every iteration recomputes what it reads).

Guarantees: an ``Allocate`` leaves a serial loop, a ``let``, an ``if`` or a block
whenever its size does not depend on the variable bound there, so it runs once instead
of once per iteration.  It stops at parallel loops: there it ends up at the top of the
parallel loop's body, which the C printer turns into one allocation per thread
(``#pragma omp parallel { alloc; #pragma omp for ...; free }``).  Buffer names are
unique, so widening an allocation's scope changes no access.
"""
from __future__ import annotations

from dataclasses import replace

from polycomp import ir
from polycomp.lowering.vectorize import uses


def _size_uses(buf: ir.Buffer, v) -> bool:
    return any(uses(d, v) for d in buf.shape)


def _lift(node):
    """``(allocates, rest)``: the global Allocates that can leave ``node`` (outermost
    first) and ``node`` without them."""
    if isinstance(node, ir.Allocate) and node.buffer.scope == "global":
        inner, rest = _lift(node.body)
        return [node.buffer] + inner, rest
    if isinstance(node, ir.Block):
        allocs, stmts = [], []
        for s in node.stmts:
            a, r = _lift(s)
            allocs += a
            stmts.append(r)
        return allocs, ir.Block(tuple(stmts))
    if isinstance(node, ir.For) and node.kind != "parallel":
        a, r = _lift(node.body)
        keep = [b for b in a if _size_uses(b, node.var)]
        up = [b for b in a if not _size_uses(b, node.var)]
        return up, replace(node, body=_wrap(keep, r))
    if isinstance(node, ir.LetStmt):
        a, r = _lift(node.body)
        keep = [b for b in a if _size_uses(b, node.var)]
        up = [b for b in a if not _size_uses(b, node.var)]
        return up, replace(node, body=_wrap(keep, r))
    if isinstance(node, ir.AttrStmt):
        a, r = _lift(node.body)
        return a, replace(node, body=r)
    if isinstance(node, ir.IfThenElse):
        a, t = _lift(node.then)
        b, e = _lift(node.orelse) if node.orelse is not None else ([], None)
        return a + b, ir.IfThenElse(node.cond, t, e)
    if isinstance(node, ir.For):   # parallel: allocations stay at the top of its body
        a, r = _lift(node.body)
        return [], replace(node, body=_wrap(a, r))
    if isinstance(node, ir.Allocate):
        a, r = _lift(node.body)
        return a, replace(node, body=r)
    return [], node


def _wrap(bufs, body):
    for b in reversed(bufs):
        body = ir.Allocate(b, body)
    return body


def hoist_allocations(func: ir.LoweredFunc) -> ir.LoweredFunc:
    a, r = _lift(func.body)
    return func.with_body(_wrap(a, r))
