"""Pass ``conv-chain-fuse``: one schedule tree for a chain of two convolutions.

Assumes: ``ctx.model``'s statements are exactly one conv chain found by
:func:`~polycomp.scheduler.chain.conv_detect.detect_conv_chains`: ``T_init[n, f, y, x]``,
``T_update[n, f, y, x, c, kh, kw]``, elementwise ``E[n, f, y, x]``, ``O_init[n, g, y, x]``,
``O_update[n, g, y, x, f, kh, kw]`` (the second convolution reads the last of ``T, E..``
at ``(y + kh - p2h, x + kw - p2w)``); the input schedule is any legal schedule of them.

Guarantees: the output schedule covers the same statement instances and satisfies every
dependence of the model (checked with isl by :func:`conv_plan_for`; otherwise the chain
is not fused and the input schedule stays).  Its shape, with ``TH, TW, TF`` from the plan
and ``sh = p2h - (KH2 - 1)``, ``sw = p2w - (KW2 - 1)``::

    domain -> mark "conv_chain_fused:THxTWxTF"
      -> band [n, floor(y/TH), floor(x/TW)]       for O_init, O_update
              [n, floor((y+sh)/TH), floor((x+sw)/TW)]   for T_init, T_update, E..
         (permutable; n coincident)
        -> sequence T_init [f, y, x]; T_update [f, y, x, c, kh, kw]; E.. [f, y, x];
                    O_init [g, y, x]; O_update [g, y, x, f, kh, kw]

i.e. an instance of ``T`` (or ``E``) at ``(y, x)`` runs in the first output tile that
reads it — the smallest output row reading row ``y`` is ``y + sh`` — so every tile finds
the intermediate rows and columns it reads computed by itself or an earlier tile (each
dependence has non-negative distances on the band).  Statement instances run once: the
tree cannot express the fused kernel's halo *recomputation* (a schedule maps each
instance to one date); the code-generation pass replaces the marked nest by the kernel
(:mod:`.conv_kernel`), which computes each tile's ``TF x (TH + KH2 - 1) x (TW + KW2 - 1)``
intermediate block itself, the halo included, so its tiles are independent (OpenMP over
``n x tiles``).  The tree, lowered and interpreted, computes the chain (the tests check it).
"""
from __future__ import annotations

import islpy as isl

from polycomp.scheduler.chain.conv_detect import conv_why_not, detect_conv_chains
from polycomp.scheduler.chain.conv_plan import ConvChainPlan, make_conv_plan
from polycomp.scheduler.chain.plan import chain_plans
from polycomp.scheduler.chain.tree import (
    _band,
    _dims,
    _filter_node,
    _seq,
    marked_schedule,
    only_chain,
)
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import is_legal
from polycomp.state import CompileState

__all__ = ["ConvChainFusePass", "CONV_MARK", "conv_fused_tree", "conv_plan_for",
           "conv_chain_passes"]

CONV_MARK = "conv_chain_fused"


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
    plan = make_conv_plan(m, model, state.target)
    if not is_legal(conv_fused_tree(plan, model), model.dependences):
        return None, "the fused tree would violate a dependence"
    return plan, ""


def conv_fused_tree(plan: ConvChainPlan, model) -> isl.Schedule:
    """The fused schedule of the module docstring."""
    m, t = plan.match, plan.tiles
    b = m.second
    sh, sw = b.ph - (b.kh - 1), b.pw - (b.kw - 1)
    stmts = [s for s in model.statements if s.name in set(m.statements)]

    def outer(s) -> list[str]:
        n, _, y, x = _dims(s)[:4]
        if s.stage is b.stage:
            return [n, f"floor(({y})/{t.th})", f"floor(({x})/{t.tw})"]
        return [n, f"floor(({y} + {sh})/{t.th})", f"floor(({x} + {sw})/{t.tw})"]
    top = _band(model, [(s, outer(s)) for s in stmts], [1, 0, 0])
    leaves = [_filter_node(model, [s], _band(model, [(s, _dims(s)[1:])],
                                             [0] * (len(_dims(s)) - 1))) for s in stmts]
    inner = _seq(leaves)
    return marked_schedule(model, f"{CONV_MARK}:{t.th}x{t.tw}x{t.tf}", top, inner)


class ConvChainFusePass(Pass):
    """See the module docstring."""
    name = "conv-chain-fuse"

    def run(self, schedule, ctx: CompileState):
        plan, why = conv_plan_for(ctx)
        if plan is None or not plan.fuse:
            ctx.note(self.name, f"no conv chain fused: {why or 'the model predicts no gain'}")
            return schedule
        for line in plan.describe():
            ctx.note(self.name, line)
        return conv_fused_tree(plan, ctx.model)     # legal: checked by conv_plan_for


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
