"""Code-generation pass ``chain`` (CPU targets): the ``chain_fused`` mark placed by
:class:`~polycomp.scheduler.chain.tree.ChainFusePass` becomes a call of the fused
kernel (:mod:`.kernel`), and the temporaries only the marked nest used (the
intermediate, the softmax's arrays) are no longer allocated.

The marked nest computes the chain's output ``O`` from ``X, Y, Z`` (and the elementwise
stages' inputs) and writes nothing else that outlives it (the tree pass only fuses a
kernel made of the chain alone), so replacing it by a function computing the same ``O``
changes nothing observable; the sums are reassociated (tile-wise, and the online
softmax), within float32 tolerance of the loop nest.  When an argument cannot be named
in C or an elementwise expression cannot be printed, the nest is kept (a remark says so).
"""
from __future__ import annotations

import islpy as isl

from polycomp import ir
from polycomp.scheduler.chain.call_lowering import (
    c_safe,
    elementwise_lines,
    input_strides,
    lower_to_call,
    stage_inputs,
)
from polycomp.scheduler.chain.detect import _same_extent
from polycomp.scheduler.chain.kernel import KernelSpec, c_value, function_name, generate
from polycomp.scheduler.chain.plan import ChainPlan
from polycomp.scheduler.chain.tree import MARK, plan_for

__all__ = ["chain_calls", "sources_for"]


def _extent_expr(stmt, k: int, model) -> ir.Expr:
    from polycomp.lowering.ast_to_ir import pw_aff_to_ir
    from polycomp.lowering.simplify import simplify
    pa = stmt.domain.dim_max(k).add_constant_val(isl.Val.one(stmt.domain.get_ctx()))
    return simplify(pw_aff_to_ir(pa, model.context, tuple(model.params)))


def _spec_and_args(plan: ChainPlan, model, isa: str) -> tuple[KernelSpec, tuple] | str:
    m = plan.match
    nb = m.batch_dims
    upd1 = next(s for s in model.statements if s.stage is m.first and s.kind == "update")
    upd2 = next(s for s in model.statements if s.stage is m.second and s.kind == "update")
    batch: ir.Expr = ir.IntImm(1)
    for k in range(nb):
        batch = ir.Binary("*", batch, _extent_expr(upd1, k, model), "int64")
    M, L, K = (_extent_expr(upd1, nb + j, model) for j in range(3))
    N = _extent_expr(upd2, nb + 1, model)
    extra = stage_inputs(m.elementwise)
    bufs = (m.x, m.y, m.z, m.out, *extra)
    if not all(c_safe(b.name) for b in bufs):
        return "an array name the C printer renames"
    names = {id(b): b.name for b in extra}
    strides: dict[str, list[str]] = {}
    # each dimension is one of the stage's iterators (batch ones strided by the kernel)
    axes = ("",) * nb + ("M", "L")
    for b in extra:
        got = input_strides(m.elementwise, b, m.t.shape, axes, _same_extent)
        if got is None:
            return f"{b.name}'s shape differs from the scores'"
        strides[b.name] = got[1]
    lines = elementwise_lines(m.elementwise, lambda e: c_value(
        e.stage.body, e.prev, e.iters, names, strides, nb))
    if isinstance(lines, str):
        return lines
    spec = KernelSpec(isa, plan.tm, plan.tl, plan.mr, plan.nv, lines,
                      tuple(b.name for b in extra), m.has_softmax, m.y_transposed)
    args = (batch, M, N, K, L) + tuple(ir.Var(b.name, "handle") for b in bufs)
    return spec, args


def chain_calls(func: ir.LoweredFunc, state) -> ir.LoweredFunc:
    """Replace the ``chain_fused`` mark's nest by the fused kernel's call (see the module
    docstring); drop allocations nothing uses afterwards."""
    plan, _ = plan_for(state)
    if plan is None:                  # a conv chain? (scheduler/chain/conv_codegen.py)
        from polycomp.scheduler.chain.conv_codegen import conv_calls
        return conv_calls(func, state)
    got = _spec_and_args(plan, state.model, state.target.isa)
    if isinstance(got, str):
        state.note("chain", f"fused tree kept as loops: {got}")
        return func
    spec, args = got
    name = function_name(spec)
    out = lower_to_call(func, state, MARK, name, args, lambda: generate(spec))
    if out is None:
        return func
    state.note("chain", f"fused kernel {name} (TM={spec.tm}, TL={spec.tl}, isa "
                        f"{spec.isa or 'scalar'})")
    return out


def sources_for(func: ir.LoweredFunc, state) -> str:
    """The C sources of the fused kernels ``func`` calls (kept in ``state.generated``)."""
    return str(state.generated.called_by(func))
