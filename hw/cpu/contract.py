"""IR pass: contract temporaries to the iteration of the loop that uses them.

Assumes: multi-dimensional (not yet flattened) IR; temporaries are ``Allocate`` nodes
of ``global`` scope (the lowering wraps the whole body in one per non-output stage).

Guarantees: for a temporary ``T`` and a loop ``for v`` such that every access to ``T``
in the whole program lies in that loop's body and indexes some dimension ``d`` of
``T`` with exactly ``v``, dimension ``d`` is dropped: ``T`` becomes ``T'`` (one
dimension fewer), allocated inside the loop body, and ``T[.., v, ..]`` becomes
``T'[.., ..]``.  Iteration ``v`` only ever touches slice ``v`` and nothing reads ``T``
after the loop, so each iteration may use its own (or the same, reused) storage: values
and dependences inside an iteration are unchanged.  Applied repeatedly, a fused
elementwise chain's intermediates become scalars and a fused row-wise kernel's
intermediates (softmax's exponentials, layernorm's centred row) become one row per
iteration, which stays in cache instead of going to memory.  A contracted buffer of
constant size up to ``LOCAL_BYTES`` gets ``local`` scope (a stack array, registers
after the C compiler's scalar replacement); larger ones stay ``global`` (heap; see
:mod:`polycomp.hw.cpu.hoist_alloc` for one allocation per thread).  A temporary that no
loop contracts stays allocated where it was, outside every loop (a GEMM's ``C`` with
its epilogue inside the product's parallel loop is one shared array, not one per
thread).
"""
from __future__ import annotations

from dataclasses import replace

from polycomp import dtypes as dt
from polycomp import ir

LOCAL_BYTES = 16 * 1024


def _accesses(node, buf) -> list:
    out = []
    ir.walk(node, lambda n: out.append(n)
            if isinstance(n, (ir.Load, ir.Store)) and n.buffer is buf else None)
    return out


def _touches(node, buf) -> bool:
    return bool(_accesses(node, buf))


class _Drop(ir.Mutator):
    """Rewrite accesses of ``old`` to ``new`` without index ``dim``."""

    def __init__(self, old, new, dim):
        self.old, self.new, self.dim = old, new, dim

    def visit_Load(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        if e.buffer is not self.old:
            return e if all(a is b for a, b in zip(idx, e.indices)) else replace(e, indices=idx)
        return ir.Load(self.new, idx[:self.dim] + idx[self.dim + 1:], e.dtype, e.lanes)

    def visit_Store(self, s):
        idx = tuple(self.visit(i) for i in s.indices)
        v = self.visit(s.value)
        if s.buffer is not self.old:
            return replace(s, indices=idx, value=v)
        return ir.Store(self.new, idx[:self.dim] + idx[self.dim + 1:], v, s.lanes)


def _scope(shape, dtype) -> str:
    size = 1
    for d in shape:
        if not isinstance(d, ir.IntImm):
            return "global"
        size *= d.value
    return "local" if size * dt.itemsize(dtype) <= LOCAL_BYTES else "global"


def _contract_dim(loop: ir.For, buf: ir.Buffer):
    """The dimension of ``buf`` that every access inside ``loop`` indexes with the loop
    variable, or None."""
    acc = _accesses(loop.body, buf)
    if not acc:
        return None
    for d in range(len(buf.shape)):
        if all(a.indices[d] is loop.var for a in acc):
            return d
    return None


def _allocated_shape(node, name: str):
    """The shape of the (single) Allocate of buffer ``name`` in ``node``."""
    found = []
    ir.walk(node, lambda n: found.append(tuple(n.buffer.shape))
            if isinstance(n, ir.Allocate) and n.buffer.name == name else None)
    return found[0] if found else None


def _place(node, buf: ir.Buffer):
    """``node`` with the storage of ``buf`` (which only ``node`` touches) contracted as
    far as possible; returns the new node (containing the Allocate)."""
    if isinstance(node, ir.For):
        d = _contract_dim(node, buf)
        if d is not None:
            shape = buf.shape[:d] + buf.shape[d + 1:]
            nb = ir.Buffer(buf.name, buf.dtype, shape, _scope(shape, buf.dtype), buf.flat)
            body = _Drop(buf, nb, d).visit(node.body)
            return replace(node, body=_place(body, nb))
        inner = _place(node.body, buf)
        if _allocated_shape(inner, buf.name) == tuple(buf.shape):
            # nothing below contracts it: allocating inside the loop would only make
            # one full copy per iteration (per thread, in a parallel loop)
            return ir.Allocate(buf, node)
        return replace(node, body=inner)
    if isinstance(node, ir.Block):
        inside = [k for k, s in enumerate(node.stmts) if _touches(s, buf)]
        if len(inside) == 1:
            k = inside[0]
            stmts = list(node.stmts)
            stmts[k] = _place(stmts[k], buf)
            return ir.Block(tuple(stmts))
        return ir.Allocate(buf, node)
    if isinstance(node, (ir.LetStmt, ir.AttrStmt, ir.Allocate)):
        return replace(node, body=_place(node.body, buf))
    if isinstance(node, ir.IfThenElse):
        if node.orelse is None or not _touches(node.orelse, buf):
            return replace(node, then=_place(node.then, buf))
        if not _touches(node.then, buf):
            return replace(node, orelse=_place(node.orelse, buf))
    return ir.Allocate(buf, node)


def contract(func: ir.LoweredFunc) -> ir.LoweredFunc:
    """Contract the temporaries allocated at the top of ``func``'s body."""
    body = func.body
    temps = []
    while isinstance(body, ir.Allocate) and body.buffer.scope == "global":
        temps.append(body.buffer)
        body = body.body
    for buf in temps:
        if _touches(body, buf):
            body = _place(body, buf)
    return func.with_body(body)
