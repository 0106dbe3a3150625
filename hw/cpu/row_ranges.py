"""IR pass: realise ``cpu_row_ranges`` marks — one parallel loop over run-time row ranges.

Assumes: the IR straight from the isl AST (before :mod:`.pack`, which gives each
iteration of the first loop below a ``cpu_parallel`` mark its own packed buffers), with
``AttrStmt("cpu_row_ranges", "<n>")`` from :mod:`polycomp.scheduler.cpu.scop_gemm`
above the AST of a subtree written for the rows ``lo <= i < hi`` (``lo``, ``hi``: the
isl parameters named in ``cpu_row_ranges(state).ranges[n]``, a
:class:`~polycomp.scheduler.cpu.state.RowRanges`; the subtree's filter bounds ``hi - lo
<= mc``); the subtree carries no dependence between rows (the scheduler checked that
every dependence of the product relates instances of one row).

Guarantees: the mark becomes

    cpu_parallel -> for u in [0, U) (coincident):
        let lo = first + mr * floor(u * P / U)
        let hi = min(first + mr * floor((u + 1) * P / U), last + 1)
        <the subtree>

with ``n = last - first + 1`` rows, ``P = ceil(n / mr)`` register rows and ``U = max(1,
min(P, T * ceil(n / (T * mc)), n * prod(inner) // min_work))`` ranges (``T`` threads;
a product of fewer than ``min_work`` multiply-adds a range is not split further: waking
a thread costs more): consecutive ranges cover
``[first, last]`` exactly once, in order, each at most ``mc`` rows (``floor((u + 1) P /
U) - floor(u P / U) <= ceil(P / U)`` register rows, ``U >= n / mc``), every range but
the last a whole number of register rows; ``U`` a multiple of ``T`` (unless capped by
``P``), so OpenMP's static schedule gives each thread ``U / T`` consecutive ranges, the
threads' row counts within ``mr`` of each other.  Every instance of the product runs
once, in its range's subtree, in the subtree's order; the parameter expressions are
evaluated at run time (PolyBench's ``ni``).  The loop variables of the AST that read
``lo`` and ``hi`` (isl's names) now read these lets.
"""
from __future__ import annotations

from dataclasses import replace

from polycomp import ir
from polycomp.lowering.ast_to_ir import pw_aff_to_ir
from polycomp.scheduler.common import marks
from polycomp.scheduler.cpu.state import RowRanges, cpu_row_ranges
from polycomp.state import CompileState


def _named(body: ir.Stmt, name: str) -> ir.Var:
    """The variable called ``name`` in ``body`` (the AST lowerer makes one object per
    name), or a new one when the body does not read it."""
    found: list[ir.Var] = []
    ir.walk(body, lambda n: found.append(n) if isinstance(n, ir.Var) and n.name == name
            else None)
    return found[0] if found else ir.Var(name)


def range_bounds(rec: RowRanges, first: ir.Expr, last: ir.Expr, u: ir.Expr,
                 inner: tuple = ()) -> tuple[ir.Expr, ir.Expr, ir.Expr]:
    """``(U, lo, hi)`` of the module docstring for rows ``first .. last`` (IR on the
    kernel's parameters), range ``u`` and ``inner``, the extents of the other loops
    (IR; their product times the rows is the product's multiply-adds)."""
    n = last - first + 1
    mr, T = rec.mr, max(1, rec.threads)
    P = (n + (mr - 1)) // mr
    U = ir.min_(P, T * ((n + (T * rec.mc - 1)) // (T * rec.mc)))
    if inner and rec.min_work > 1:
        work = n
        for e in inner:
            work = work * e
        U = ir.min_(U, work // rec.min_work)
    U = ir.max_(ir.IntImm(1), U)
    lo = first + mr * ((u * P) // U)
    hi = ir.min_(first + mr * (((u + 1) * P) // U), last + 1)
    return U, lo, hi


class _Ranges(ir.Mutator):
    def __init__(self, state: CompileState):
        self.records = cpu_row_ranges(state).ranges
        self.model = state.model

    def visit_AttrStmt(self, s):
        if s.key != marks.CPU_ROW_RANGES:
            return self.generic(s)
        rec: RowRanges = self.records[int(s.value)]
        body = self.visit(s.body)
        if isinstance(body, ir.AttrStmt) and body.key == marks.CPU_PARALLEL:
            body = body.body
        ctx, params = self.model.context, tuple(self.model.params)
        first = pw_aff_to_ir(rec.first, ctx, params)
        last = pw_aff_to_ir(rec.last, ctx, params)
        u = ir.Var(f"{rec.lo}_u")
        inner = tuple(pw_aff_to_ir(e, ctx, params) for e in rec.inner)
        U, lo_e, hi_e = range_bounds(rec, first, last, u, inner)
        lo, hi = _named(body, rec.lo), _named(body, rec.hi)
        loop = ir.For(u, ir.IntImm(0), U, "serial",
                      ir.LetStmt(lo, lo_e, ir.LetStmt(hi, hi_e, body)),
                      (("coincident", True),))
        return ir.AttrStmt(marks.CPU_PARALLEL, "", loop)


def realise_row_ranges(func: ir.LoweredFunc, state: CompileState) -> ir.LoweredFunc:
    """The pass of the module docstring."""
    if not cpu_row_ranges(state).ranges:
        return func
    return replace(func, body=_Ranges(state).visit(func.body))
