"""Statement builders of the block reductions of a C SCoP
(:mod:`polycomp.scheduler.gpu.scop_reduce`): the accumulating statement ``W[e] = W[e]
op f`` becomes ``acc = acc op f`` on the thread's register ``acc`` (its extension
statements, the start, combine and store, are built by
:func:`polycomp.hw.cuda.promoted.promoted_builders` from their ``CopyStmt`` kinds)."""
from __future__ import annotations

from polycomp import ir
from polycomp.scheduler.gpu.scop_reduce import _accumulation, block_reductions


def block_reduction_builders(state) -> dict:
    """``statement name -> fn(args) -> Stmt`` for every block reduction of ``state``."""
    from .promoted import _Inline
    out = {}
    zero = (ir.IntImm(0),)
    by_name = {s.name: s for s in state.model.statements}
    for red in block_reductions(state).items.values():
        s = by_name[red.statement]
        found = _accumulation(s)
        assert found is not None, s.name
        op, f, total = found
        def make(args, s=s, f=f, op=op, total=total, acc=red.acc):
            value = ir.substitute(f, dict(zip(s.iters, args)))
            if state.inlined:
                value = _Inline(state.inlined).visit(value)
            new: ir.Expr = ir.Binary(op, ir.Load(acc, zero, acc.dtype), value, total.dtype)
            if new.dtype != acc.dtype:      # C's conversion back to the element's type
                new = ir.Cast(new, acc.dtype)
            return ir.Store(acc, zero, new)
        out[s.name] = make
    return out
