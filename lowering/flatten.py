"""IR pass: linearise multi-dimensional buffer accesses (row-major).

Assumes: every Load/Store indexes its Buffer with one index per dimension.
Guarantees: every Load/Store uses a single index ``sum_k idx_k * stride_k`` (strides
are products of the trailing extents, symbolic where the shape is) on a buffer with
``flat=True``; Allocate nodes refer to the same flat buffers.  Numerically a no-op.
"""
from __future__ import annotations

from dataclasses import replace

from polycomp import ir

from .simplify import simplify


def flat_index(shape: tuple, indices: tuple) -> ir.Expr:
    """``((i0 * s1 + i1) * s2 + i2) ...`` (Horner form) for a row-major layout."""
    if not indices:
        return ir.IntImm(0)
    out = indices[0]
    for ext, idx in zip(shape[1:], indices[1:]):
        out = out * ext + idx
    return simplify(out)


class _Flatten(ir.Mutator):
    def __init__(self):
        self.flat: dict = {}

    def buf(self, b: ir.Buffer) -> ir.Buffer:
        if b.flat:
            return b
        nb = self.flat.get(b)
        if nb is None:
            nb = self.flat[b] = replace(b, flat=True)
        return nb

    def visit_Load(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        if e.buffer.flat:
            return ir.Load(e.buffer, idx, e.dtype, e.lanes)
        return ir.Load(self.buf(e.buffer), (flat_index(e.buffer.shape, idx),), e.dtype, e.lanes)

    def visit_Store(self, s):
        idx = tuple(self.visit(i) for i in s.indices)
        v = self.visit(s.value)
        if s.buffer.flat:
            return ir.Store(s.buffer, idx, v, s.lanes)
        return ir.Store(self.buf(s.buffer), (flat_index(s.buffer.shape, idx),), v, s.lanes)

    def visit_Allocate(self, s):
        return ir.Allocate(self.buf(s.buffer), self.visit(s.body))


def flatten(func: ir.LoweredFunc) -> ir.LoweredFunc:
    m = _Flatten()
    body = m.visit(func.body)
    f = ir.LoweredFunc(func.name, func.params, tuple(m.buf(b) for b in func.inputs),
                       tuple(m.buf(b) for b in func.outputs), body, func.inout, func.counts)
    return f
