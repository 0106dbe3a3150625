"""Pass ``chain-fuse`` (CPU targets) and the chain plan every target starts from.

:class:`ChainFusePass` — assumes: ``ctx.model``'s statements are exactly one chain
found by :func:`~polycomp.scheduler.chain.detect.detect_chains` (``T = X . Y``,
optional elementwise stages / softmax, ``O = S . Z`` over ``nb`` leading batch
dimensions), float32, and :func:`plan_for` gave a plan; the input schedule is any legal
schedule of those statements (program order).  Guarantees: the output schedule is the
fused *program* of :mod:`.program` — the tree code generation lowers, with the
``chain_fused:<n>`` mark naming it (``chain_plans(ctx).programs[n]``): without a softmax
over the model's statements, with one over the online program's (:mod:`.online`: the
model's statements minus the softmax's exponential, quotient and the second update,
plus its own, whose dependences join the model's).  It satisfies every dependence of the
statements it runs (checked with isl; otherwise the input is returned unchanged with a
remark).

:func:`fused_tree` is the NPU chain pass's tree (:mod:`.npu_pass`; it also checks the
legality of every target's plan, :func:`plan_for`) over the model's statements::

    domain -> mark "chain_fused" -> band [b.., floor(m/TM)]  (permutable, coincident)
      -> sequence
           filter O_init -> band [m, n]
           filter rest   -> band [floor(l/TL)] -> sequence T_init [m, l] ; T_update
                            [m, l, k] ; E.. [m, l] ; O_update [m, l, n]

(with a softmax: ``band [b.., floor(m/TM)] -> sequence`` of every statement, row blocks
of ``TM`` rows), the block order Chimera's ``(m, l, k | n)``; the NPU pass marks it
``npu_chain:<n>`` below the ``chain_fused`` mark, and the NPU lowering builds its program
from that plan.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence, TypeVar

import islpy as isl

from polycomp.scheduler.chain.detect import ChainMatch, detect_chains
from polycomp.scheduler.chain.plan import ChainPlan, chain_plans, make_plan
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import is_legal, schedule_from_str
from polycomp.state import CompileState

__all__ = ["ChainFusePass", "MARK", "fused_tree", "plan_for"]

MARK = marks.CHAIN_FUSED


def plan_for(state: CompileState) -> tuple[ChainPlan | None, str]:
    """The plan of the model's single chain, or None and why not (computed once per
    compile: ``ChainPlans``)."""
    if chain_plans(state).contraction is None:
        chain_plans(state).contraction = _plan_for(state)
    return chain_plans(state).contraction


def _plan_for(state: CompileState) -> tuple[ChainPlan | None, str]:
    from polycomp.scheduler.chain.detect import why_not
    model = state.model
    m, why = only_chain(model, detect_chains(model), why_not, "chain", "contractions")
    if m is None:
        return None, why
    if m.dtype != "float32" and getattr(state.target, "kind", None) != "cuda":
        return None, (f"{m.name}: {m.dtype} operands (half-precision chains are fused by the "
                      f"CUDA targets' Tensor Core kernel only)")
    if m.dtype != "float32" and not state.cuda_options.tensor_cores:
        return None, f"{m.name}: {m.dtype} operands and option tensor_cores off"
    plan = make_plan(m, model, state.target)
    if not is_legal(fused_tree(plan, model), model.dependences):
        return None, "the fused tree would violate a dependence"
    return plan, ""


_C = TypeVar("_C", bound="_Chain")


class _Chain(Protocol):
    @property
    def statements(self) -> tuple[str, ...]: ...


def only_chain(model, chains: Sequence[_C], why_not: Callable[[Any], list[str]],
               kind: str, parts: str) -> tuple[_C | None, str]:
    """The model's chain when ``chains`` (the ``kind`` chains detected in ``model``) is
    exactly one that covers every statement of the model (the tree passes fuse a kernel
    made of the chain alone); else None and why: ``why_not(model)`` joined when there is
    no chain (``"no two <parts> in a chain"`` when it says nothing), too many chains, or
    the statements outside the chain."""
    if not chains:
        reasons = why_not(model)
        return None, "; ".join(reasons) if reasons else f"no two {parts} in a chain"
    if len(chains) > 1:
        return None, f"{len(chains)} {kind}s in one kernel (one is fused per kernel)"
    m = chains[0]
    if set(m.statements) != {s.name for s in model.statements}:
        others = sorted({s.name for s in model.statements} - set(m.statements))
        return None, f"statements outside the {kind}: {', '.join(others)}"
    return m, ""


def _dims(stmt) -> list[str]:
    return [f"i{k}" for k in range(stmt.domain.dim(isl.dim_type.set))]


def _params(model) -> str:
    """``[P, ..] -> `` (nothing without parameters: isl would read ``[] ->`` as an
    empty tuple)."""
    n = model.context.dim(isl.dim_type.param)
    if not n:
        return ""
    return "[" + ", ".join(model.context.get_dim_name(isl.dim_type.param, k)
                           for k in range(n)) + "] -> "


def _umap(model, pieces: list[tuple[Any, list[str]]]) -> str:
    """The multi-union-pw-aff ``[{ S[i..] -> [e0] ; .. }, { S[i..] -> [e1] ; .. }]`` of
    ``(statement, one expression per band member)`` pieces."""
    n = len(pieces[0][1])
    members = []
    for k in range(n):
        body = "; ".join(f"{s.name}[{', '.join(_dims(s))}] -> [({e[k]})]" for s, e in pieces)
        members.append(f"{{ {body} }}")
    return f"{_params(model)}[{', '.join(members)}]"


def _filter(model, stmts) -> str:
    body = "; ".join(f"{s.name}[{', '.join(_dims(s))}]" for s in stmts)
    return f"{_params(model)}{{ {body} }}"


def _band(model, pieces, coincident: int | list[int] = 0) -> str:
    """A permutable band node (YAML) of ``(statement, one expression per member)``
    ``pieces``; ``coincident``: one flag for every member, or a flag per member."""
    n = len(pieces[0][1])
    flags = [coincident] * n if isinstance(coincident, int) else coincident
    co = ", ".join(str(c) for c in flags)
    return (f'schedule: "{_umap(model, pieces)}"\n'
            f"permutable: 1\ncoincident: [ {co} ]\n")


def _indent(text: str, n: int) -> str:
    return "".join(" " * n + line + "\n" for line in text.splitlines())


def _leaf_band(model, s, order: list[int] | None = None, nb: int = 0) -> str:
    d = _dims(s)[nb:]
    if order is not None:
        d = [d[k] for k in order]
    if not d:
        return ""
    return _band(model, [(s, d)])


def _seq(children: list[str]) -> str:
    out = "sequence:\n"
    for c in children:
        lines = c.splitlines()
        out += "- " + lines[0] + "\n" + "".join("  " + ln + "\n" for ln in lines[1:])
    return out


def _filter_node(model, stmts, child: str) -> str:
    out = f'filter: "{_filter(model, stmts)}"\n'
    if child:
        out += "child:\n" + _indent(child, 2)
    return out


def marked_schedule(model, mark: str, top: str, inner: str) -> isl.Schedule:
    """The schedule ``domain -> mark "<mark>" -> <top> -> <inner>`` over ``model``'s
    whole domain, read by isl from its YAML text: ``top`` a band node (:func:`_band`),
    ``inner`` the node below it (a sequence, filters, bands).  Legality is the caller's
    to check (``is_legal``)."""
    text = (f'domain: "{model.domain}"\nchild:\n'
            f'  mark: "{mark}"\n  child:\n'
            + _indent(top + "child:\n" + _indent(inner, 2), 4))
    return schedule_from_str(text, model.ctx)


def fused_tree(plan: ChainPlan, model) -> isl.Schedule:
    """The fused schedule of the module docstring."""
    m: ChainMatch = plan.match
    nb = m.batch_dims
    stmts = [s for s in model.statements if s.name in set(m.statements)]
    bdims = lambda s: _dims(s)[:nb]  # noqa: E731

    def outer(s) -> list[str]:
        return [*bdims(s), f"floor(({_dims(s)[nb]})/{plan.tm})"]
    top = _band(model, [(s, outer(s)) for s in stmts], coincident=1)
    if m.has_softmax:
        inner = _seq([_filter_node(model, [s], _leaf_band(model, s, nb=nb)) for s in stmts])
    else:
        o_init = next(s for s in stmts if s.stage is m.second and s.kind == "init")
        # the output cast (ChainMatch.out_cast) follows the whole l loop
        after = [s for s in stmts if m.out_cast and s.stage is m.stages[-1]]
        rest = [s for s in stmts if s is not o_init and s not in after]

        def lcoord(s) -> str:
            d = _dims(s)
            return d[nb + 2] if s.stage is m.second else d[nb + 1]
        lband = _band(model, [(s, [f"floor(({lcoord(s)})/{plan.tl})"]) for s in rest])
        leaves = []
        for s in rest:
            order = [0, 2, 1] if (s.stage is m.second and s.kind == "update") else None
            leaves.append(_filter_node(model, [s], _leaf_band(model, s, order, nb)))
        inner = _seq([_filter_node(model, [o_init], _leaf_band(model, o_init, nb=nb)),
                      _filter_node(model, rest, lband + "child:\n" + _indent(_seq(leaves), 2)),
                      *(_filter_node(model, [s], _leaf_band(model, s, nb=nb)) for s in after)])
    return marked_schedule(model, MARK, top, inner)


class ChainFusePass(Pass):
    """See the module docstring."""
    name = "chain-fuse"

    def run(self, schedule, ctx: CompileState):
        from polycomp.scheduler.chain.program import adopt, cpu_program
        plan, why = plan_for(ctx)
        if plan is None:
            ctx.note(self.name, f"no chain fused: {why}")
            return schedule
        programs = chain_plans(ctx).programs
        prog = cpu_program(plan, ctx, len(programs))
        if isinstance(prog, str):
            ctx.note(self.name, f"no chain fused: {prog}")
            return schedule
        adopt(ctx, prog)
        for line in plan.describe():
            ctx.note(self.name, line)
        return prog.schedule
