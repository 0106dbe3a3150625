"""IR pass: replace single-assignment scalar temporaries by let-bound values.

Assumes: contracted temporaries (:mod:`polycomp.hw.cpu.contract`): ``Allocate`` of a
``local`` buffer with one element (shape ``()`` or all extents 1) around the statements
of one loop iteration.

Guarantees: when such a buffer's accesses in the Allocate's body are, in order, one
``Store`` at the top level of the body's statement list followed only by ``Load``s in
the statements after it, the Allocate disappears and the value becomes ``let t = v``
over those statements (each Load of the buffer becomes ``t``).  The stored value is read
only after it is written and never again written, so every read sees the same value.
A value that lives in a let (not in memory) is what lets the vectoriser keep fused
elementwise chains (``bias_add`` then ``gelu``) in registers.
"""
from __future__ import annotations

from dataclasses import replace

from polycomp import ir


def _accesses(node, buf) -> list:
    out = []
    ir.walk(node, lambda n: out.append(n)
            if isinstance(n, (ir.Load, ir.Store)) and n.buffer is buf else None)
    return out


def _scalar(buf: ir.Buffer) -> bool:
    return buf.scope == "local" and all(isinstance(d, ir.IntImm) and d.value == 1
                                        for d in buf.shape)


class _Loads(ir.Mutator):
    def __init__(self, buf, var):
        self.buf, self.var = buf, var

    def visit_Load(self, e):
        if e.buffer is self.buf:
            return self.var
        return self.generic(e)


def _replace(buf: ir.Buffer, body):
    stmts = list(body.stmts) if isinstance(body, ir.Block) else [body]
    for k, s in enumerate(stmts):
        acc = _accesses(s, buf)
        if not acc:
            continue
        if not (isinstance(s, ir.Store) and s.buffer is buf and len(acc) == 1):
            return None
        rest = stmts[k + 1:]
        if any(isinstance(a, ir.Store) for r in rest for a in _accesses(r, buf)):
            return None
        var = ir.Var(buf.name, buf.dtype)
        tail = _Loads(buf, var).visit(ir.seq(*rest)) if rest else ir.Block(())
        return ir.seq(*stmts[:k], ir.LetStmt(var, s.value, tail))
    return None


class _ScalarReplace(ir.Mutator):
    def visit_Allocate(self, s):
        body = self.visit(s.body)
        if _scalar(s.buffer):
            out = _replace(s.buffer, body)
            if out is not None:
                return out
        return s if body is s.body else replace(s, body=body)


def scalar_replace(func: ir.LoweredFunc) -> ir.LoweredFunc:
    return func.with_body(_ScalarReplace().visit(func.body))
