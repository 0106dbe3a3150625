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

    domain -> mark "chain_fused:TMxTL"
      -> mark "npu_chain:TM:TL:TN:k0:KL1"
        -> band [b.., floor(m/TM)]           (permutable, coincident)
          -> sequence ...                     (tree.py: l blocks of TL without a
                                               softmax; whole rows with one)

The NPU program builder (:func:`polycomp.scheduler.npu.build.npu_program`) reads the
tiles from the ``npu_chain`` mark (``CompileState.npu_schedule``) and builds the fused
program of :mod:`.npu_program`, which also splits ``l`` with a softmax (online
rescaling: the reassociation the statement-level tree cannot express, as on the CPU).
"""
from __future__ import annotations

import islpy as isl

from polycomp.errors import ResourceLimitError, TargetError
from polycomp.scheduler.chain.npu_detect import NpuChain, detect_npu_chain
from polycomp.scheduler.chain.npu_plan import NpuChainPlan, npu_chain_plan
from polycomp.scheduler.chain.npu_program import NpuChainTiles
from polycomp.scheduler.chain.plan import ChainPlan
from polycomp.scheduler.chain.tree import fused_tree
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import is_legal
from polycomp.state import CompileState

__all__ = ["NPU_CHAIN", "NpuChainFusePass", "npu_plan_for", "npu_fused_tree", "chain_tiles_of"]

NPU_CHAIN = "npu_chain"


def npu_plan_for(state: CompileState) -> tuple[NpuChainPlan | None, str]:
    """The plan of the model's NPU chain, or None and why not."""
    o = state.options
    if not getattr(o, "chain", True):
        return None, "option chain is off"
    ch = detect_npu_chain(state.model)
    if not isinstance(ch, NpuChain):
        return None, ch
    try:
        plan = npu_chain_plan(ch, state.model, state.target,
                              bool(getattr(o, "double_buffer", True)),
                              getattr(o, "chain_tiles", None))
    except ResourceLimitError:
        raise                       # the user's chain_tiles do not fit
    except TargetError as e:
        return None, str(e)
    return plan, ""


def npu_fused_tree(plan: NpuChainPlan, model) -> isl.Schedule:
    """The tree of the module docstring."""
    t = plan.tiles
    cp = ChainPlan(plan.chain.match, plan.dims, plan.symbolic, (), "L0C", t.tm, t.tl, 1, 1, 16)
    tree = fused_tree(cp, model)
    node = tree.get_root().child(0).child(0)
    node = node.insert_mark(marks.make(NPU_CHAIN, t.tm, t.tl, t.tn, t.k0, t.kl1))
    return node.get_schedule()


def chain_tiles_of(schedule: isl.Schedule | None) -> NpuChainTiles | None:
    """The tiles in ``schedule``'s ``npu_chain`` mark (None: no mark)."""
    if schedule is None:
        return None
    found: list[NpuChainTiles] = []

    def visit(node: isl.ScheduleNode) -> bool:
        if marks.is_kind(node, NPU_CHAIN):
            found.append(NpuChainTiles(*(int(v) for v in
                                         marks.argument(node, NPU_CHAIN).split(":"))))
        return True
    schedule.get_root().foreach_descendant_top_down(visit)
    return found[0] if found else None


class NpuChainFusePass(Pass):
    """See the module docstring."""
    name = "npu-chain-fuse"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        plan, why = npu_plan_for(ctx)
        if plan is None:
            ctx.note(self.name, f"no chain fused: {why}")
            return schedule
        tree = npu_fused_tree(plan, ctx.model)
        if not is_legal(tree, ctx.model.dependences):
            ctx.note(self.name, "no chain fused: the fused tree would violate a dependence")
            return schedule
        for line in plan.describe():
            ctx.note(self.name, line)
        return tree

