"""IR pass: ``C = C - X * Y`` under a ``cpu_microkernel`` mark becomes ``C = C + (-X) * Y``.

The register-tile generator (:mod:`polycomp.hw.cpu.microkernel`) forms tiles of
accumulations ``C = C + R``; factorisations written in C subtract
(``A[i][j] -= A[i][k] * A[k][j]``, :mod:`polycomp.scheduler.cpu.scop_factor`).

Assumes: flattened IR with ``AttrStmt("cpu_microkernel")`` marks (FMA tiles: an empty
value); the pass only looks at a store reached from the mark through ``For`` loops.

Guarantees: such a store ``C[c] = C[c] - X * Y`` (the same ``C[c]`` loaded) becomes
``C[c] = C[c] + neg(X) * Y``.  ``neg`` is exact and ``a + (-(x*y))`` is ``a - x*y`` in
IEEE arithmetic (signed zeros included; fused: ``fma(-x, y, a)`` is the one rounding of
``a - x*y``), so the values are unchanged.  Anything else is left as it is.
"""
from __future__ import annotations

from polycomp import ir
from polycomp.scheduler.common import marks


def _negate(st: ir.Store) -> ir.Store | None:
    v = st.value
    if not (isinstance(v, ir.Binary) and v.op == "-" and isinstance(v.a, ir.Load) and
            v.a.buffer is st.buffer and len(v.a.indices) == len(st.indices) and all(
                ir.structural_equal(a, b) for a, b in zip(v.a.indices, st.indices)) and
            isinstance(v.b, ir.Binary) and v.b.op == "*"):
        return None
    p = v.b
    neg = ir.Binary("*", ir.Unary("neg", p.a, p.a.dtype), p.b, p.dtype)
    return ir.Store(st.buffer, st.indices, ir.Binary("+", v.a, neg, v.dtype), st.lanes)


def _under(s: ir.Stmt) -> ir.Stmt:
    if isinstance(s, ir.For):
        body = _under(s.body)
        return s if body is s.body else ir.For(s.var, s.min, s.extent, s.kind, body,
                                               s.annotations)
    if isinstance(s, ir.Store):
        return _negate(s) or s
    return s


class _Marks(ir.Mutator):
    def visit_AttrStmt(self, s):
        if s.key == marks.CPU_MICROKERNEL and s.value in ("", None):
            body = _under(s.body)
            return s if body is s.body else ir.AttrStmt(s.key, s.value, body)
        return self.generic(s)


def negate_updates(func: ir.LoweredFunc) -> ir.LoweredFunc:
    """The pass (module docstring)."""
    return func.with_body(_Marks().visit(func.body))
