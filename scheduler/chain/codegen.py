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
from polycomp.scheduler.chain.kernel import KernelSpec, c_value, function_name, generate
from polycomp.scheduler.chain.plan import ChainPlan
from polycomp.scheduler.chain.tree import MARK, plan_for

__all__ = ["chain_calls", "sources_for"]

def _c_safe(name: str) -> bool:
    from polycomp.hw.cpu.lowp import _c_safe as safe
    return bool(safe(name))


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
    extra: list[ir.Buffer] = []
    for e in m.elementwise:
        for ld in _loads(e.stage.body):
            if ld.buffer is not e.prev and all(ld.buffer is not b for b in extra):
                extra.append(ld.buffer)
    bufs = (m.x, m.y, m.z, m.out, *extra)
    if not all(_c_safe(b.name) for b in bufs):
        return "an array name the C printer renames"
    names = {id(b): b.name for b in extra}
    strides: dict[str, list[str]] = {}
    t_shape = m.t.shape
    for b in extra:
        # each dimension is one of the stage's iterators; its extent must be the chain's
        kinds = []
        e0 = next(e for e in m.elementwise if any(
            isinstance(n, ir.Load) and n.buffer is b for n in _loads(e.stage.body)))
        ld = next(n for n in _loads(e0.stage.body) if n.buffer is b)
        for pos, idx in enumerate(ld.indices):
            k = next(i for i, v in enumerate(e0.iters) if v is idx)
            if not ir.structural_equal(b.shape[pos], t_shape[k]) if not isinstance(
                    b.shape[pos], int) else b.shape[pos] != t_shape[k]:
                return f"{b.name}'s shape differs from the scores'"
            kinds.append("b" if k < nb else "M" if k == nb else "L")
        st = []
        for pos in range(len(kinds)):
            later = [x for x in kinds[pos + 1:] if x != "b"]
            st.append(" * ".join(later) or "1")
        strides[b.name] = st
    lines = []
    try:
        for e in m.elementwise:
            lines.append(f"v = {c_value(e.stage.body, e.prev, e.iters, names, strides, nb)};")
    except (ValueError, StopIteration, KeyError) as exc:
        return f"elementwise stage not printable ({exc})"
    spec = KernelSpec(isa, plan.tm, plan.tl, plan.mr, plan.nv, tuple(lines),
                      tuple(b.name for b in extra), m.has_softmax, m.y_transposed)
    args = (batch, M, N, K, L) + tuple(ir.Var(b.name, "handle") for b in bufs)
    return spec, args


def _loads(e: ir.Expr) -> list[ir.Load]:
    out: list[ir.Load] = []
    ir.walk(e, lambda n: out.append(n) if isinstance(n, ir.Load) else None)
    return out


def _buffers_used(s: ir.Stmt) -> set[str]:
    used: set[str] = set()

    def visit(n):
        if isinstance(n, (ir.Load, ir.Store)):
            used.add(n.buffer.name)
        if isinstance(n, ir.Var) and n.dtype == "handle":
            used.add(n.name)
    ir.walk(s, visit)
    return used


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

    class _Replace(ir.Mutator):
        count = 0

        def visit_AttrStmt(self, s):
            if s.key != MARK:
                return self.generic(s)
            self.count += 1
            return ir.Evaluate(ir.Call(name, args, "void", pure=False))

    r = _Replace()
    body = r.visit(func.body)
    if not r.count:
        return func
    state.generated.add(name, generate(spec))
    used = _buffers_used(body)

    class _DropAlloc(ir.Mutator):
        def visit_Allocate(self, s):
            inner = self.visit(s.body)
            return inner if s.buffer.name not in used else ir.Allocate(s.buffer, inner)

    body = _DropAlloc().visit(body)
    state.note("chain", f"fused kernel {name} (TM={spec.tm}, TL={spec.tl}, isa "
                        f"{spec.isa or 'scalar'})")
    import dataclasses
    return dataclasses.replace(func, body=body)


def sources_for(func: ir.LoweredFunc, state) -> str:
    """The C sources of the fused kernels ``func`` calls (kept in ``state.generated``)."""
    return str(state.generated.called_by(func))
