"""IR pass: lower ``pipeline(stages=S)`` marks on K-tile loops to cp.async multi-stage
software pipelines.

Assumes: ``AttrStmt("pipeline", g, loop)`` (``S`` stages: the config of Tensor Core
group ``g``'s plan) where ``loop`` is the K-tile ``For kt in [lo, lo + T)`` (uniform in
the thread block) whose body, as
:mod:`polycomp.hw.cuda.tensorize` emits it, is ``[load(kt); commit; wait_group 0;
barrier; compute(kt); barrier]`` with ``load(kt) = AttrStmt("tc_load", ..)`` writing
stage ``kt mod S`` of the shared tiles (cp.async and/or plain stores) and
``compute(kt)`` reading only that stage.

For ``S >= 2`` the loop becomes (the multistage schedule)::

    for s in 0 .. S-2:   if s < T: load(lo + s);  commit          # prologue
    for kt in [lo, lo + T):                                          # steady state
        wait_group S-2; barrier
        if kt + S-1 < lo + T: load(kt + S - 1)
        commit
        compute(kt)
    wait_group 0; barrier                                            # epilogue (drain)

Guarantees: at ``compute(kt)`` the thread has committed ``kt - lo + S - 1`` groups
(empty ones included), so ``wait_group S-2`` completes the group of tile ``kt``; the
barrier after it makes every thread's copies of tile ``kt`` visible and orders all
reads of stage ``(kt-1) mod S`` (iteration ``kt-1``) before the copies into it
(``load(kt + S - 1)`` writes stage ``(kt + S - 1) mod S = (kt - 1) mod S``).  The
epilogue waits for the (empty) outstanding groups and keeps later code — the next
iteration of an enclosing loop, whose prologue writes the stages again — behind a
barrier.  Hence every shared read sees the tile of its iteration, as in the unpipelined
loop.  ``S = 1`` (or a loop that is not in that form) is left as it is.
"""
from __future__ import annotations

from polycomp import ir
from polycomp.scheduler.common import marks
from polycomp.scheduler.gpu.state import gpu_kernels

from . import ptx


def lower_pipelines(func: ir.LoweredFunc, state) -> ir.LoweredFunc:
    """See the module docstring; the stages of group ``g``'s ``pipeline:<g>`` loop are
    ``gpu_kernels(state).tc_plans[g].config.stages``."""
    return func.with_body(_Pipeline(gpu_kernels(state).tc_plans).visit(func.body))
    # (a wgmma plan's pipeline mark is consumed by hw/cuda/hopper.py: none is left here)


class _Pipeline(ir.Mutator):
    def __init__(self, plans: dict):
        self.plans = plans        # group -> TcPlan

    def visit_AttrStmt(self, s):
        g = marks.attr_index(s, marks.PIPELINE)
        if g is None:
            return self.generic(s)
        stages = self.plans[g].config.stages
        text = str(stages)        # the printed comment says how many stages
        body = self.visit(s.body)
        if stages < 2 or not isinstance(body, ir.For):
            return ir.AttrStmt(s.key, text, body)
        parts = _split(body.body)
        if parts is None:
            return ir.AttrStmt(s.key, text, body)
        load, compute = parts
        return ir.AttrStmt(s.key, text, _multistage(body, load, compute, stages))


def _split(body):
    """(load, compute statements) of the canonical K-tile body, or None."""
    if not isinstance(body, ir.Block):
        return None
    st = list(body.stmts)
    if len(st) < 5 or not (isinstance(st[0], ir.AttrStmt) and st[0].key == marks.TC_LOAD):
        return None
    if not (ptx.is_call(st[1], "ptx_cp_async_commit") and ptx.is_call(st[2], "ptx_cp_async_wait")
            and ir.is_barrier(st[3]) and ir.is_barrier(st[-1])):
        return None
    return st[0], st[4:-1]


def _multistage(loop, load, compute, stages):
    kt, lo, ext = loop.var, loop.min, loop.extent
    pro: list[ir.Stmt] = []
    for s in range(stages - 1):
        at = ir.substitute(load, {kt: lo + s})
        pro.append(ir.IfThenElse(ir.IntImm(s) < ext, at))
        pro.append(ptx.cp_async_commit())
    ahead = ir.substitute(load, {kt: kt + (stages - 1)})
    steady = [ptx.cp_async_wait(stages - 2), ir.barrier(),
              ir.IfThenElse(kt + (stages - 1) < lo + ext, ahead), ptx.cp_async_commit()]
    steady += compute
    new_loop = ir.For(kt, lo, ext, loop.kind, ir.seq(*steady), loop.annotations)
    return ir.seq(*pro, new_loop, ptx.cp_async_wait(0), ir.barrier())
