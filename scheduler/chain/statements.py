"""New statements of a fused chain program, made as the model makes its own.

The fused programs of :mod:`.online` (the online softmax) and :mod:`.conv_program`
(recomputed halos, im2col copies, a local accumulator) run statements the model does not
have.  They are built here exactly as :mod:`polycomp.frontend.dsl_model` builds a stage's
statements — a box domain from ``(lower bound, extent)`` pairs (isl parameters for
symbols), access relations from the IR of the value (``select`` conditions restricting
the reads they guard), every access checked to stay in its array's bounds — optionally
restricted to a subset of the box.  :func:`program_model` wraps a program's statements
and its *reference order* (the schedule that defines the program's semantics) in a
:class:`~polycomp.frontend.dsl_model.DslModel` (chains are DSL programs), whose
dependences isl derives as for any model: the fused tree of the program must satisfy
them.
"""
from __future__ import annotations

from typing import Callable, Sequence

import islpy as isl

from polycomp import ir
from polycomp.frontend.dsl_model import DslModel
from polycomp.model import Statement, compute_accesses_and_dependences

__all__ = ["StatementMaker", "program_model"]


class StatementMaker:
    """Makes statements over ``model``'s parameters, with names no statement or array of
    the model (nor an earlier made one) has."""

    def __init__(self, model):
        from polycomp.frontend.dsl_model import _ModelBuilder
        self.model = model
        self._b = _ModelBuilder(model.graph, model.ctx)
        self._b._context = model.context
        self.taken = {s.name for s in model.statements} | {
            b.name for s in model.statements for b in (s.write, *(a.buffer for a in s.accesses))}
        self.taken |= {t.buffer.name for t in (*model.graph.inputs, *model.graph.outputs)}

    def fresh(self, base: str) -> str:
        """``base``, or ``base_1``, ``base_2``, ... : a name not taken yet (then taken)."""
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

    def buffer(self, base: str, shape: Sequence, dtype: str = "float32") -> ir.Buffer:
        """A new array (a temporary of the program) of ``shape``."""
        return ir.Buffer(self.fresh(base), dtype, tuple(
            d if isinstance(d, ir.Expr) else ir.IntImm(d) for d in shape))

    def make(self, base: str, stage, kind: str, iters: Sequence[ir.Var],
             bounds: Sequence[tuple], out: ir.Buffer, out_idx: Sequence[ir.Expr],
             value: ir.Expr, restrict: Callable[[isl.Set], isl.Set] | None = None
             ) -> Statement:
        """The statement ``out[out_idx] = value`` for each point of the box ``bounds``
        (``(lower bound, extent)`` per iterator, IR expressions) — with ``restrict``,
        of ``restrict(box)`` — named ``base`` (or a fresh variant); ``stage`` is the
        front end's stage it belongs to (for locations and grouping)."""
        def expr(e):
            return e if isinstance(e, ir.Expr) else ir.IntImm(e)
        self._b.add_statement(self.fresh(base), stage, kind, tuple(iters),
                              [(expr(lo), expr(ext)) for lo, ext in bounds], out,
                              tuple(out_idx), value, getattr(stage, "location", None))
        s: Statement = self._b.statements[-1]
        ctx = self.model.context
        s.domain = s.domain.intersect_params(ctx)
        if restrict is not None:
            s.domain = restrict(s.domain)
        s.domain = s.domain.coalesce()
        for a in s.accesses:
            a.relation = a.relation.intersect_params(ctx).intersect_domain(s.domain)
            a.index_relation = (a.index_relation if a.index_relation is not None
                                else a.relation).intersect_params(ctx).intersect_domain(s.domain)
        return s


def program_model(model, statements: Sequence[Statement], reference: isl.Schedule) -> DslModel:
    """The model of a program made of ``statements`` whose semantics is the order
    ``reference``: the same graph, parameters and context as ``model``, the accesses and
    dependences isl derives (:func:`polycomp.model.compute_accesses_and_dependences`)."""
    dom = isl.UnionSet.empty(model.context.get_space())
    for s in statements:
        dom = dom.union(isl.UnionSet.from_set(s.domain))
    pm = DslModel(model.graph, model.ctx, model.params, model.context, list(statements),
                   dom, reference)
    compute_accesses_and_dependences(pm)
    return pm
