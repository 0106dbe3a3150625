"""Code generation of a fused conv chain (CPU targets): the ``conv_chain_fused`` mark
placed by :class:`~polycomp.scheduler.chain.conv_tree.ConvChainFusePass` becomes a call
of the kernel of :mod:`.conv_kernel`, and the temporaries only the marked nest used
(``T``, the elementwise stages' arrays) are no longer allocated.

The marked nest computes ``O`` from ``X, W1, W2`` (and the elementwise stages' inputs)
and writes nothing else that outlives it (the tree pass fuses only a kernel made of the
chain alone), so the call computes the same ``O`` up to float32 reassociation.  When an
argument cannot be named in C or an elementwise expression cannot be printed, the nest
is kept (a remark says so).  The generated source goes to the compile state
(``state.generated``), from which the emitter takes it.
"""
from __future__ import annotations

from polycomp import ir
from polycomp.scheduler.chain.call_lowering import (
    c_safe,
    elementwise_lines,
    has_mark,
    input_strides,
    lower_to_call,
    stage_inputs,
)
from polycomp.scheduler.chain.conv_detect import _same
from polycomp.scheduler.chain.conv_kernel import (
    ConvKernelSpec,
    c_value_conv,
    conv_function_name,
    generate_conv,
)
from polycomp.scheduler.chain.conv_plan import ConvChainPlan
from polycomp.scheduler.chain.conv_tree import CONV_MARK, conv_plan_for
from polycomp.scheduler.chain.detect import _loads

__all__ = ["conv_calls"]

_EXTENT_NAMES = ("NB", "F1", "H1", "W1")


def _arg(e) -> ir.Expr:
    return ir.IntImm(e, "int64") if isinstance(e, int) else e


def _spec_and_args(plan: ConvChainPlan, isa: str) -> tuple[ConvKernelSpec, tuple] | str:
    m = plan.match
    a, b = m.first, m.second
    extra = stage_inputs(m.middle)
    bufs = (a.x, a.w, b.w, b.out, *extra)
    if not all(c_safe(x.name) for x in bufs):
        return "an array name the C printer renames"
    names = {id(x): x.name for x in extra}
    strides: dict[str, list[str]] = {}
    for x in extra:
        got = input_strides(m.middle, x, m.t.shape, _EXTENT_NAMES, _same)
        if got is None:
            return f"{x.name}'s extents differ from the intermediate's"
        ld, strides[x.name] = got
        if any(len({id(v) for v in ld2.indices}) != len(ld2.indices) or not all(
                ld2.indices[p] is ld.indices[p] for p in range(len(ld.indices)))
               for e in m.middle for ld2 in _loads(e.stage.body) if ld2.buffer is x):
            return f"{x.name} is read at different points"
    lines = elementwise_lines(m.middle, lambda e: c_value_conv(
        e.stage.body, e.prev, e.iters, names, strides))
    if isinstance(lines, str):
        return lines
    t = plan.tiles
    spec = ConvKernelSpec(isa, t.th, t.tw, t.tf, plan.mr, plan.nv, a.kh, a.kw, a.ph, a.pw,
                          b.kh, b.kw, b.ph, b.pw, lines, tuple(x.name for x in extra))
    nb, c, h, w = a.x.shape
    _, f1, h1, w1 = m.t.shape
    _, f2, h2, w2 = b.out.shape
    args = tuple(_arg(v) for v in (nb, c, h, w, f1, h1, w1, f2, h2, w2)) + tuple(
        ir.Var(x.name, "handle") for x in (a.x, a.w, b.w, b.out, *extra))
    return spec, args


def conv_calls(func: ir.LoweredFunc, state) -> ir.LoweredFunc:
    """Replace the ``conv_chain_fused`` nest by the kernel's call (module docstring)."""
    if not has_mark(func.body, CONV_MARK):
        return func
    plan, _ = conv_plan_for(state)
    if plan is None:
        return func
    got = _spec_and_args(plan, state.target.isa)
    if isinstance(got, str):
        state.note("chain", f"fused conv tree kept as loops: {got}")
        return func
    spec, args = got
    name = conv_function_name(spec)
    out = lower_to_call(func, state, CONV_MARK, name, args, lambda: generate_conv(spec))
    if out is None:                   # not reached: has_mark above
        return func
    t = plan.tiles
    state.note("chain", f"fused conv kernel {name} (tile {t.th}x{t.tw}, TF={t.tf}, isa "
                        f"{spec.isa or 'scalar'})")
    return out
