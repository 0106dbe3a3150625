"""IR pass: make the loop under each ``cpu_parallel`` mark an OpenMP parallel loop.

Assumes: ``AttrStmt("cpu_parallel")`` nodes come from the schedule-tree mark of
:mod:`polycomp.scheduler.cpu.parallel` (or the backbone/packing passes) and sit above a
loop that carries no dependence.
Guarantees: the first ``For`` on each path below such a mark gets kind ``parallel`` if
it is annotated ``coincident`` (isl's AST carries no loop for a marked band member with a
single value, so the first loop below can be an inner one that carries a dependence:
then nothing below the mark becomes parallel) and does not lie inside another parallel
loop (no nested parallel regions); the mark is removed.  Loops of constant extent 1 are
left serial (the simplifier removes them).  A ``cpu_wavefront`` mark (the time-tiled
stencils of :mod:`polycomp.scheduler.cpu.scop_stencil`: a band ``[wavefront, tile, ..]``)
stands for a ``cpu_parallel`` mark inside the first ``For`` below it (the wavefront
loop stays serial; the first loop in its body, the wavefront's tiles, becomes parallel
when it is coincident; a 1-D stencil's sequential tiles ``[T_0, T_1]`` are not).  A mark
``cpu_parallel:<n>`` whose :class:`~polycomp.scheduler.cpu.state.ParallelLoop` payload
is ``dynamic`` annotates its loop ``schedule = "dynamic"`` (the printers emit
``schedule(dynamic)``: any thread may run any iteration, which the payload's producer
guarantees is legal for the loop's per-thread buffers).  Nothing else changes, so
dependences are preserved.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from polycomp import ir
from polycomp.scheduler.common import marks
from polycomp.scheduler.cpu.state import ParallelLoop, cpu_parallel_loops

if TYPE_CHECKING:  # pragma: no cover
    from polycomp.state import CompileState

#: the For annotation naming a parallel loop's OpenMP schedule kind (absent: static)
SCHEDULE = "schedule"


class _Marks(ir.Mutator):
    def __init__(self, loops: list[ParallelLoop]):
        self.want = 0
        self.inside = 0
        self.loops = loops
        self.dynamic = False     # the innermost pending mark's payload says dynamic

    def visit_AttrStmt(self, s):
        if s.key == marks.CPU_WAVEFRONT:
            return self.visit(_wavefront(s.body))
        if s.key != marks.CPU_PARALLEL:
            return self.generic(s)
        saved = self.dynamic
        self.dynamic = bool(s.value) and self.loops[int(s.value)].dynamic
        self.want += 1
        body = self.visit(s.body)
        self.want -= 1
        self.dynamic = saved
        return body

    def visit_For(self, s):
        if self.want and not self.inside and s.kind == "serial" and \
                not ir.is_const(s.extent, 1) and not s.annotation("coincident", False):
            # the marked loop was degenerate (isl generated none): the first loop below
            # carries a dependence, so nothing under this mark runs in parallel
            saved, self.want = self.want, 0
            out = self.generic(s)
            self.want = saved
            return out
        if s.kind == "parallel" or (self.want and not self.inside and s.kind == "serial"
                                    and not ir.is_const(s.extent, 1)):
            dynamic = self.dynamic and s.kind != "parallel"
            self.inside += 1
            saved, self.want = self.want, 0
            body = self.visit(s.body)
            self.want = saved
            self.inside -= 1
            ann = s.annotations + ((SCHEDULE, "dynamic"),) if dynamic else s.annotations
            return replace(s, kind="parallel", body=body, annotations=ann)
        saved, self.want = self.want, 0 if self.inside else self.want
        out = self.generic(s)
        self.want = saved
        return out


def _wavefront(s):
    """The body of a ``cpu_wavefront`` mark with a ``cpu_parallel`` mark placed inside
    its first (wavefront) loop."""
    if isinstance(s, ir.For):
        return replace(s, body=ir.AttrStmt(marks.CPU_PARALLEL, "", s.body))
    if isinstance(s, ir.IfThenElse) and s.orelse is None:
        return replace(s, then=_wavefront(s.then))
    if isinstance(s, (ir.LetStmt, ir.AttrStmt)):
        return replace(s, body=_wavefront(s.body))
    return ir.AttrStmt(marks.CPU_PARALLEL, "", s)     # no wavefront loop: one wavefront


def parallelize_marked(func: ir.LoweredFunc, state: CompileState | None = None
                       ) -> ir.LoweredFunc:
    loops = cpu_parallel_loops(state).loops if state is not None else []
    return func.with_body(_Marks(loops).visit(func.body))


def omp_schedule(loop: ir.For) -> str:
    """The OpenMP ``schedule`` clause of a parallel loop (its :data:`SCHEDULE`
    annotation, else contiguous static chunks)."""
    return f"schedule({loop.annotation(SCHEDULE, 'static')})"
