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
    by_name = {s.name: s for s in state.model.statements}
    for red in block_reductions(state).items.values():
        s = by_name[red.statement]
        found = _accumulation(s)
        assert found is not None, s.name
        op, f = found
        zero = (ir.IntImm(0),)

        def make(args, s=s, f=f, op=op, acc=red.acc):
            value = ir.substitute(f, dict(zip(s.iters, args)))
            if state.inlined:
                value = _Inline(state.inlined).visit(value)
            return ir.Store(acc, zero, ir.Binary(op, ir.Load(acc, zero, acc.dtype), value,
                                                 acc.dtype))
        out[s.name] = make
    return out
