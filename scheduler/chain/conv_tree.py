"""Pass ``conv-chain-fuse``: a chain of two convolutions as one fused program.

Assumes: ``ctx.model``'s statements are exactly one conv chain found by
:func:`~polycomp.scheduler.chain.conv_detect.detect_conv_chains` (``T = conv(X, W1)``,
elementwise ``E..``, ``O = conv(T or E_last, W2)``, stride 1, constant windows) and the
plan (:mod:`.conv_plan`, the data-movement model's decision or ``POLYCOMP_CONV_CHAIN``)
says fuse; the input schedule is any legal schedule of the model's statements.

Guarantees: the output schedule is the fused program of :mod:`.conv_program` over its
own statements (the model's are replaced: the intermediate is recomputed per output
tile, halo included, so tiles are independent), with the ``conv_chain_fused:<n>`` mark
naming it (``chain_plans(ctx).programs[n]``) and its dependences joined to the model's;
isl checks the tree against them (otherwise the input schedule stays, with a remark).
:func:`conv_chain_passes` is the CPU backend's hook deciding whether the pass runs.
"""
from __future__ import annotations

from polycomp.scheduler.chain.conv_detect import conv_why_not, detect_conv_chains
from polycomp.scheduler.chain.conv_plan import ConvChainPlan, make_conv_plan
from polycomp.scheduler.chain.plan import chain_plans
from polycomp.scheduler.chain.tree import only_chain
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.state import CompileState

__all__ = ["ConvChainFusePass", "CONV_MARK", "conv_plan_for",
           "conv_chain_passes"]

CONV_MARK = marks.CONV_CHAIN_FUSED


def conv_plan_for(state: CompileState) -> tuple[ConvChainPlan | None, str]:
    """The plan of the model's single conv chain (whatever the decision), or None and
    why there is none (computed once per compile: ``ChainPlans``)."""
    if chain_plans(state).conv is None:
        chain_plans(state).conv = _conv_plan_for(state)
    return chain_plans(state).conv


def _conv_plan_for(state: CompileState) -> tuple[ConvChainPlan | None, str]:
    model = state.model
    m, why = only_chain(model, detect_conv_chains(model), conv_why_not, "conv chain",
                        "convolutions")
    if m is None:
        return None, why
    return make_conv_plan(m, model, state.target), ""


class ConvChainFusePass(Pass):
    """See the module docstring."""
    name = "conv-chain-fuse"

    def run(self, schedule, ctx: CompileState):
        from polycomp.scheduler.chain.conv_program import conv_program
        from polycomp.scheduler.chain.program import adopt
        plan, why = conv_plan_for(ctx)
        if plan is None or not plan.fuse:
            ctx.note(self.name, f"no conv chain fused: {why or 'the model predicts no gain'}")
            return schedule
        programs = chain_plans(ctx).programs
        prog = conv_program(plan, ctx, len(programs))
        if isinstance(prog, str):
            ctx.note(self.name, f"no conv chain fused: {prog}")
            return schedule
        adopt(ctx, prog)
        for line in plan.describe():
            ctx.note(self.name, line)
        return prog.schedule


def conv_chain_passes(state: CompileState) -> list[Pass] | None:
    """The CPU backend's hook: ``[ConvChainFusePass()]`` when the model is one conv chain
    the model decides to fuse; otherwise None, after noting (for ``explain``) the
    model's figures and why the normal pipeline runs."""
    plan, why = conv_plan_for(state)
    if plan is None:
        if detect_conv_chains(state.model) or conv_why_not(state.model):
            state.note("conv-chain-fuse", f"no conv chain fused: {why}")
        return None
    if plan.fuse:
        return [ConvChainFusePass()]
    for line in plan.describe():
        state.note("conv-chain-fuse", line)
    state.note("conv-chain-fuse", "no conv chain fused: the model predicts the unfused "
                                  "convolutions faster (normal pipeline)")
    return None
