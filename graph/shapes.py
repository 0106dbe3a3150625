"""Symbolic shape propagation with constraints (TSCompiler Alg. 1; DISC's constraints).

:func:`propagate` runs a worklist over the graph: a node whose input shapes are known
gets its output shape from its operator's rule (:mod:`polycomp.graph.opdefs`); when an
output shape changes, its consumers are queued again.  Rules state what they need
through a :class:`Constraints` store:

* **dim equality** ``a == b`` (matmul's K, broadcasting two symbolic extents, layernorm's
  last dim): two integers must agree (else :class:`ShapeMismatchError` naming both
  producers); a symbol on one side is *substituted* by the other side everywhere
  (so an input declared ``(B, T)`` next to one of ``(B, S)`` ends with ``T := S``);
* **size equality** ``prod(in) == prod(out)`` (reshape/view): a ``-1`` target extent is
  solved as ``prod(in) / prod(known)``, which keeps ``x.view(B*S, H)`` as the sympy
  expression ``B*S`` (not a fresh unknown), and a later ``view(B, S, H)`` simplifies back.

Guarantee: after ``propagate`` every value has a shape over the graph inputs' dim symbols
(constraints applied), and ``graph.constraints`` lists what was assumed, which the runtime's
shape guards check once per call.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import sympy

from polycomp.errors import PolycompInternalError, ShapeMismatchError

from .ir import Graph, Node, Shape, Value, shape_str


@dataclass
class Constraint:
    lhs: sympy.Expr
    rhs: sympy.Expr
    why: str

    def __str__(self) -> str:
        return f"{self.lhs} == {self.rhs}  ({self.why})"


@dataclass
class Constraints:
    """Dim- and size-equality constraints plus the substitution they imply."""
    subst: dict[sympy.Symbol, sympy.Expr] = field(default_factory=dict)
    recorded: list[Constraint] = field(default_factory=list)

    def apply(self, e: sympy.Expr) -> sympy.Expr:
        if not self.subst:
            return e
        return sympy.simplify(e.xreplace(self.subst)) if e.free_symbols else e

    def apply_shape(self, shape: Shape) -> Shape:
        return tuple(self.apply(d) for d in shape)

    def equal(self, a: sympy.Expr, b: sympy.Expr, node: Node, va: Value, vb: Value,
              what: str) -> sympy.Expr:
        """Require ``a == b``; returns the agreed extent."""
        a, b = self.apply(a), self.apply(b)
        diff = sympy.simplify(a - b)
        if diff == 0:
            return a
        if diff.is_number:
            raise mismatch(node, va, vb, f"{what}: {a} != {b}")
        self.recorded.append(Constraint(a, b, f"{node.op} {node.name!r}: {what}"))
        for side, other in ((b, a), (a, b)):
            if isinstance(side, sympy.Symbol) and side not in other.free_symbols:
                self.subst = {k: v.xreplace({side: other}) for k, v in self.subst.items()}
                self.subst[side] = other
                return other
        return a


def mismatch(node: Node, va: Value, vb: Value, detail: str) -> ShapeMismatchError:
    return ShapeMismatchError(
        f"{node.op} {node.name!r}: shapes cannot agree ({detail}): {va.name!r} "
        f"{shape_str(va.shape)} from {va.origin()} vs {vb.name!r} {shape_str(vb.shape)} "
        f"from {vb.origin()}", node.location)


def broadcast(node: Node, cs: Constraints, va: Value, vb: Value) -> Shape:
    """numpy broadcasting over symbolic extents: an explicit 1 stretches; two symbolic
    extents that differ are constrained equal (DISC), two integers must agree."""
    sa, sb = va.shape or (), vb.shape or ()
    n = max(len(sa), len(sb))
    sa = (sympy.Integer(1),) * (n - len(sa)) + tuple(sa)
    sb = (sympy.Integer(1),) * (n - len(sb)) + tuple(sb)
    out = []
    for k, (a, b) in enumerate(zip(sa, sb)):
        if a == 1:
            out.append(b)
        elif b == 1:
            out.append(a)
        else:
            out.append(cs.equal(a, b, node, va, vb, f"broadcast axis {k - n}"))
    return tuple(out)


def propagate(graph: Graph) -> Constraints:
    """Derive every value's symbolic shape (worklist); see the module docstring."""
    from .opdefs import OPS
    cs = Constraints()
    consumers = graph.consumers()
    work: deque[Node] = deque(graph.nodes)
    queued = set(graph.nodes)
    while work:
        node = work.popleft()
        queued.discard(node)
        if any(v.shape is None for v in node.inputs):
            continue  # queued again when the producer's shape is known
        shape = cs.apply_shape(OPS[node.op].shape(node, cs))
        if shape != node.output.shape:
            node.output.shape = shape
            for c in consumers.get(node.output, ()):
                if c not in queued:
                    work.append(c)
                    queued.add(c)
    for val in [*graph.inputs, *(n.output for n in graph.nodes)]:
        if val.shape is None:
            raise PolycompInternalError(f"shape of {val.name!r} was not derived")
        val.shape = cs.apply_shape(val.shape)
    kept = []
    for con in cs.recorded:  # in terms of the surviving symbols; drop the trivial ones
        lhs, rhs = cs.apply(con.lhs), cs.apply(con.rhs)
        if sympy.simplify(lhs - rhs) != 0:
            kept.append(Constraint(lhs, rhs, con.why))
    cs.recorded = kept
    graph.constraints = cs
    return cs
