"""The polyhedral model of a traced ``@tensor_expr`` program (:class:`DslModel`).

:func:`build_model` turns a :class:`~polycomp.frontend.dsl.KernelGraph` into a
:class:`DslModel`.  Guarantees, in isl terms:

* one statement per stage; a reduction stage becomes two statements,
  ``<stage>_init`` (``out[i] = identity``) and ``<stage>_update``
  (``out[i] = out[i] op body[i, r]``), with domains ``[params] -> { S[i..] : 0 <= i <
  extent .. }`` (the reduce axes' ranges added for the update);
* context: ``[params] -> { : p >= 1 for every symbol and e >= 1 for every symbolic
  extent }``;
* tagged accesses (one tag ``<stmt>_ref<n>`` per textual reference, reads in textual
  order, then the write); a read under an affine ``select`` condition is restricted to
  that condition (``index_relation`` keeps the unguarded relation); every access is
  checked to stay inside its array (:class:`~polycomp.errors.ShapeMismatchError`
  naming the user's line);
* a gather (an index read from a tensor, ``table[idx[i], j]``, carried in the IR as
  :func:`polycomp.ir.gather_index`) is a *may*-access: its relation maps each instance to
  the whole extent of every indirect dimension (``S[i, j] -> table[g, j] : 0 <= g < V``),
  an over-approximation under which the dependences stay sound; ``Access.indirect``
  lists those dimensions, and the index tensor's own read (``idx[i]``) is an ordinary
  affine access of the same statement;
* the initial schedule tree is program order
  (:func:`polycomp.scheduler.common.tree.build_program_order`), and the dependences
  come from :func:`polycomp.model.compute_accesses_and_dependences` under it.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polycomp import ir
from polycomp.affine import and_conditions, cond_to_isl, to_isl
from polycomp.errors import PolycompInternalError, ShapeMismatchError
from polycomp.model import (
    Access,
    PolyModel,
    Statement,
    _isl_names,
    _param_prefix,
    compute_accesses_and_dependences,
)

from .dsl import KernelGraph, identity, load_location

__all__ = ["DslModel", "build_model", "program_order_schedule"]


@dataclass(eq=False)
class DslModel(PolyModel):
    """The model of a traced ``@tensor_expr`` program: ``graph`` is its
    :class:`~polycomp.frontend.dsl.KernelGraph` (``graph.stages`` in program order)."""
    graph: KernelGraph


def _box(stmt_name, iters, bounds, names, params, loc) -> str:
    cons = []
    for v, (lo, ext) in zip(iters, bounds):
        lo_s = to_isl(lo, names, "lower bound", loc)
        ext_s = to_isl(ext, names, "extent", loc)
        cons.append(f"{lo_s} <= {names[v]} < {lo_s} + {ext_s}")
    dims = ", ".join(names[v] for v in iters)
    body = " and ".join(cons)
    return f"{_param_prefix(params)}{{ {stmt_name}[{dims}]" + (f" : {body} }}" if body else " }")


class _ModelBuilder:
    def __init__(self, graph: KernelGraph, ctx: isl.Context):
        self.graph = graph
        self.ctx = ctx
        self.params = graph.params
        self.statements: list[Statement] = []
        self._context: isl.Set | None = None

    def context(self) -> isl.Set:
        names = {p: p.name for p in self.params}
        cons = [f"{p.name} >= 1" for p in self.params]
        seen = set()
        for buf in ([t.buffer for t in self.graph.inputs]
                    + [s.output.buffer for s in self.graph.stages]):
            for d in buf.shape:
                if not isinstance(d, ir.IntImm):
                    c = to_isl(d, names, f"extent of {buf.name}")
                    if c not in seen:
                        seen.add(c)
                        cons.append(f"{c} >= 1")
        for s in self.graph.stages:
            for a in s.reduce_axes:
                if not isinstance(a.extent, ir.IntImm):
                    cons.append(f"{to_isl(a.extent, names, 'reduce extent', a.location)} >= 1")
        text = f"{_param_prefix(self.params)}{{ : {' and '.join(cons)} }}" if cons else "{ : }"
        return isl.Set.read_from_str(self.ctx, text)

    def build(self):
        for stage in self.graph.stages:
            self.add_stage(stage)

    def add_stage(self, stage):
        loc = stage.location
        out = stage.output.buffer
        spatial = [(ir.IntImm(0), d) for d in out.shape]
        if not stage.is_reduction:
            self.add_statement(stage.name, stage, "compute", stage.iters, spatial, out,
                               stage.iters, stage.body, loc)
            return
        ident = identity(stage.reduce_op, out.dtype)
        self.add_statement(f"{stage.name}_init", stage, "init", stage.iters, spatial, out,
                           stage.iters, ident, loc)
        iters = tuple(stage.iters) + tuple(a.var for a in stage.reduce_axes)
        bounds = spatial + [(a.lo, a.extent) for a in stage.reduce_axes]
        acc = ir.Load(out, tuple(stage.iters), out.dtype)
        op = {"sum": "+", "max": "max", "min": "min"}[stage.reduce_op]
        value = ir.Binary(op, acc, stage.body, out.dtype)
        self.add_statement(f"{stage.name}_update", stage, "update", iters, bounds, out,
                           stage.iters, value, loc)

    def add_statement(self, name, stage, kind, iters, bounds, out, out_idx, value, loc):
        names = _isl_names(self.params, iters)
        try:
            domain = isl.Set.read_from_str(self.ctx, _box(name, iters, bounds, names,
                                                          self.params, loc))
        except isl.Error as e:  # pragma: no cover - _box only emits affine text
            raise PolycompInternalError(f"isl rejected the domain of {name}: {e}", loc) from e
        stmt = Statement(name, stage, kind, tuple(iters), domain, out, tuple(out_idx), value)
        counter = [0]

        def access(kind_, buf, indices, guard, where=None):
            tag = f"{name}_ref{counter[0]}"
            counter[0] += 1
            if len(indices) != len(buf.shape):
                raise ShapeMismatchError(f"{buf.name} indexed with {len(indices)} indices",
                                         loc)
            # a gather index (data-dependent) may be any element of its dimension: the
            # relation over-approximates it by the whole extent (PPCG's may-access)
            indirect = tuple(k for k, i in enumerate(indices) if ir.reads_data(i))
            pnames = {p: p.name for p in self.params}
            idx_parts, ranges = [], []
            for k, i in enumerate(indices):
                if k in indirect:
                    v = f"pc_gather{k}"
                    idx_parts.append(v)
                    ranges.append(f"0 <= {v} < "
                                  f"{to_isl(buf.shape[k], pnames, f'extent of {buf.name}', loc)}")
                else:
                    idx_parts.append(to_isl(i, names, f"index of {buf.name}", loc))
            idx = ", ".join(idx_parts)
            dims = ", ".join(names[v] for v in iters)
            full = and_conditions(guard, " and ".join(ranges) or None)
            cond = f" : {full}" if full else ""
            text = f"{_param_prefix(self.params)}{{ {name}[{dims}] -> {buf.name}[{idx}]{cond} }}"
            rel = isl.Map.read_from_str(self.ctx, text).intersect_domain(domain)
            ucond = f" : {' and '.join(ranges)}" if ranges else ""
            unguarded = rel if not guard else isl.Map.read_from_str(
                self.ctx,
                f"{_param_prefix(self.params)}{{ {name}[{dims}] -> {buf.name}[{idx}]{ucond} }}"
            ).intersect_domain(domain)
            stmt.accesses.append(Access(tag, buf, tuple(indices), kind_, rel, where, unguarded,
                                        indirect))

        def collect(e, guard):
            if isinstance(e, ir.Select):
                collect(e.cond, guard)
                c = cond_to_isl(e.cond, names, loc)
                nc = cond_to_isl(_negate(e.cond), names, loc) if c is not None else None
                collect(e.t, and_conditions(guard, c))
                collect(e.f, and_conditions(guard, nc))
                return
            if isinstance(e, ir.Load):
                for i in e.indices:
                    collect(i, guard)
                access("read", e.buffer, e.indices, guard, load_location(e))
                return
            for c in ir.children(e):
                collect(c, guard)

        collect(value, None)
        access("write", out, tuple(out_idx), None)
        self._check_in_bounds(stmt, loc)
        self.statements.append(stmt)

    def _check_in_bounds(self, stmt, loc):
        """Every access must stay inside its array's extents (for all parameter values)."""
        from polycomp.lowering.printer import expr_str
        for a in stmt.accesses:
            buf = a.buffer
            names = {p: p.name for p in self.params}
            dims = [f"o{k}" for k in range(len(buf.shape))]
            cons = [f"0 <= {d} < {to_isl(e, names, 'extent')}" for d, e in zip(dims, buf.shape)]
            text = (f"{_param_prefix(self.params)}{{ {buf.name}[{', '.join(dims)}]"
                    + (f" : {' and '.join(cons)} }}" if cons else " }"))
            extent = isl.Set.read_from_str(self.ctx, text)
            touched = a.relation.range().intersect_params(self._context)
            if not touched.is_subset(extent):
                bad = touched.subtract(extent)
                idx = ", ".join(expr_str(i) for i in a.indices)
                raise ShapeMismatchError(
                    f"{stmt.stage.name}: {a.kind} of {buf.name}[{idx}] goes out of bounds "
                    f"(shape ({', '.join(expr_str(d) for d in buf.shape)})); e.g. elements "
                    f"{bad.sample_point() if not bad.is_empty() else bad}; guard it with "
                    f"select() or fix the index", a.location or loc)


def _negate(c: ir.Expr) -> ir.Expr:
    """The negation of an affine condition, pushed down to comparisons."""
    if isinstance(c, ir.Binary):
        flip = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
        if c.op in flip:
            return ir.Binary(flip[c.op], c.a, c.b, "bool")
        if c.op == "&&":
            return ir.Binary("||", _negate(c.a), _negate(c.b), "bool")
        if c.op == "||":
            return ir.Binary("&&", _negate(c.a), _negate(c.b), "bool")
    if isinstance(c, ir.Unary) and c.op == "!":
        return c.a
    if isinstance(c, ir.IntImm):
        return ir.IntImm(0 if c.value else 1, "bool")
    return ir.Unary("!", c, "bool")




def build_model(graph: KernelGraph, ctx: isl.Context | None = None) -> DslModel:
    """Build the polyhedral model of a traced :class:`KernelGraph`."""
    from polycomp.islutil import context as _polycomp_ctx
    ctx = ctx or _polycomp_ctx()
    b = _ModelBuilder(graph, ctx)
    try:
        b._context = b.context()
        b.build()
    except isl.Error as e:
        raise PolycompInternalError(f"isl error while building the model of "
                                    f"{graph.name}: {e}", graph.location) from None
    context = b._context
    assert context is not None
    stmts = [s for s in b.statements]
    for s in stmts:
        s.domain = s.domain.intersect_params(context)
        for a in s.accesses:
            a.relation = a.relation.intersect_params(context)
            a.index_relation = (a.index_relation if a.index_relation is not None
                                else a.relation).intersect_params(context)
    domain = isl.UnionSet.empty(context.get_space())
    for s in stmts:
        domain = domain.union(isl.UnionSet.from_set(s.domain))
    schedule = program_order_schedule(ctx, stmts, domain)
    model = DslModel(graph, ctx, graph.params, context, stmts, domain, schedule)
    compute_accesses_and_dependences(model)
    return model


def program_order_schedule(model_ctx, statements, domain) -> isl.Schedule:
    """The initial schedule tree: stages in program order, loops in index order.

    ``domain`` → ``sequence`` over stages (omitted for one stage) → per stage a band
    over its output dimensions (shared by the init and update statements of a
    reduction) → for a reduction, ``sequence [init, update]`` with a band over the
    reduce axes under the update filter.
    """
    from polycomp.scheduler.common.tree import build_program_order
    return build_program_order(statements, domain)
