"""Pass ``npu-chain-fuse``: the fused schedule tree of an NPU chain.

Assumes: ``ctx.model`` is a model whose statements are exactly one NPU chain
(:func:`~.npu_detect.detect_npu_chain`: ``T = X . Y`` with float16 or float32 cube
operands, optional elementwise stages and softmax, the cast of ``P`` to the cube's
dtype, ``O = P . Z``), the input schedule any legal schedule of them (program order),
option ``chain`` on.

Guarantees: the output schedule is over the same statement instances and satisfies
every dependence of the model (isl checks it; otherwise the input is returned with a
note).  It is :func:`~.tree.fused_tree` with the NPU plan's ``TM x TL``
(:mod:`.npu_plan`) and one more mark under ``chain_fused``::

    domain -> mark "chain_fused"
      -> mark "npu_chain:<n>"                 (npu_plans(state).chains[n]: the plan)
        -> band [b.., floor(m/TM)]           (permutable, coincident)
          -> sequence ...                     (tree.py: l blocks of TL without a
                                               softmax; whole rows with one)

The NPU lowering (``npu-lower``, :mod:`polycomp.hw.npu.lower_chain`) finds the
``npu_chain`` mark in the lowered function and builds the fused program from the plan,
which also splits ``l`` with a softmax (online rescaling: the reassociation the
statement-level tree cannot express, as on the CPU).  Which tiles fit is asked of the
:class:`~polycomp.scheduler.npu.plan.NpuLoweringModel` the backend gives the pass.
"""
from __future__ import annotations

import dataclasses

import islpy as isl

from polycomp import ir
from polycomp.errors import ResourceLimitError, TargetError
from polycomp.scheduler.chain.npu_detect import NpuChain, detect_npu_chain
from polycomp.scheduler.chain.npu_plan import NpuChainPlan, npu_chain_plan
from polycomp.scheduler.chain.plan import ChainPlan
from polycomp.scheduler.chain.tree import fused_tree
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import is_legal
from polycomp.scheduler.npu.map import plan_kernel
from polycomp.scheduler.npu.plan import NpuLoweringModel, NpuPlans, npu_plans
from polycomp.state import CompileState

__all__ = ["NpuChainFusePass", "npu_plan_for", "npu_fused_tree", "chain_plan_of"]


def npu_plan_for(state: CompileState,
                 lowering: NpuLoweringModel) -> tuple[NpuChainPlan | None, str]:
    """The plan of the model's NPU chain, or None and why not."""
    o = state.npu_options
    if not o.chain:
        return None, "option chain is off"
    ch = detect_npu_chain(state.model)
    if not isinstance(ch, NpuChain):
        return None, ch
    try:
        plan = npu_chain_plan(ch, state.model, state.target, o.double_buffer,
                              o.chain_tiles, lowering)
    except ResourceLimitError:
        raise                       # the user's chain_tiles do not fit
    except TargetError as e:
        return None, str(e)
    if not plan.symbolic and not _uses_iterators(ch):
        fused, unfused = lowering.chain_cycles(ch, plan.dims, plan.tiles, state.target)
        plan = dataclasses.replace(plan, cycles=(fused, unfused))
        if fused > unfused and o.chain_cost and o.chain_tiles is None:
            try:        # only where the phased program maps (else fusing is the way)
                plan_kernel(state.model.graph, state.target, o, lowering)
            except TargetError:
                return plan, ""
            return None, (f"keep unfused: the A2 cycle model predicts {fused} cycles "
                          f"fused vs {unfused} unfused (option chain_cost=False fuses)")
    return plan, ""


def _uses_iterators(ch: NpuChain) -> bool:
    """Does a stage between the products use an iterator's value (a causal mask)?  The
    phased program has no iota for it, so such a chain is fused whatever it costs."""
    def values(e, names: set) -> bool:       # an iterator outside a load's indices
        if isinstance(e, ir.Var):
            return e.name in names
        if isinstance(e, ir.Load):
            return False
        return any(values(c, names) for c in ir.children(e))
    return any(values(st.body, {v.name for v in st.iters}) for st in ch.match.stages
               if st is not ch.match.first and st is not ch.match.second)


def npu_fused_tree(plan: NpuChainPlan, model, index: int) -> isl.Schedule:
    """The tree of the module docstring (``index``: the plan's in ``NpuPlans.chains``)."""
    t = plan.tiles
    cp = ChainPlan(plan.chain.match, plan.dims, plan.symbolic, (), "L0C", t.tm, t.tl, 1, 1, 16)
    tree = fused_tree(cp, model)
    node = tree.get_root().child(0).child(0)
    node = node.insert_mark(marks.make(marks.NPU_CHAIN, index))
    return node.get_schedule()


def chain_plan_of(schedule: isl.Schedule, state: CompileState) -> NpuChainPlan | None:
    """The plan of ``schedule``'s ``npu_chain:<n>`` mark (None: no mark)."""
    found: list[int] = []

    def visit(node: isl.ScheduleNode) -> bool:
        if marks.is_kind(node, marks.NPU_CHAIN):
            found.append(marks.index_of(node, marks.NPU_CHAIN))
        return True
    schedule.get_root().foreach_descendant_top_down(visit)
    return npu_plans(state).chains[found[0]] if found else None


class NpuChainFusePass(Pass):
    """See the module docstring."""
    name = "npu-chain-fuse"

    def __init__(self, lowering: NpuLoweringModel):
        self.lowering = lowering

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        plan, why = npu_plan_for(ctx, self.lowering)
        if plan is None:
            ctx.note(self.name, f"no chain fused: {why}")
            return schedule
        chains = npu_plans(ctx).chains
        tree = npu_fused_tree(plan, ctx.model, len(chains))
        if not is_legal(tree, ctx.model.dependences):
            ctx.note(self.name, "no chain fused: the fused tree would violate a dependence")
            return schedule
        NpuPlans.push(chains, plan)
        for line in plan.describe():
            ctx.note(self.name, line)
        return tree

