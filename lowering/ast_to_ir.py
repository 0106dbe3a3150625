"""Lowering: isl schedule tree -> isl AST -> polycomp IR.

``build_ast`` runs ``isl_ast_build_node_from_schedule`` under the model's context
(so guards implied by ``N >= 1`` etc. are dropped).  :class:`AstLowerer` walks the AST
and produces IR:

* ``for`` nodes become :class:`~polycomp.ir.For` with unit stride (a stride ``s`` loop
  becomes ``for t in [0, n): let c = init + s*t``; a degenerate loop becomes a ``let``);
* ``if`` nodes become :class:`~polycomp.ir.IfThenElse`;
* ``mark`` nodes become :class:`~polycomp.ir.AttrStmt` (key = the mark's declared kind,
  value = the payload index after it: :func:`polycomp.scheduler.common.marks.split`) so
  hardware passes can pattern-match them;
* user nodes become the statement's ``Store`` (or, for statements registered by
  promotion passes, whatever IR their builder returns) with the statement iterators
  replaced by the AST's argument expressions.

isl division operators map to floor division/modulo (``div``/``pdiv_q``/``fdiv_q`` ->
``//``, ``pdiv_r``/``zdiv_r`` -> ``%``; ``zdiv_r`` is only ever compared with 0, where the
two agree).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import islpy as isl

from polycomp import ir
from polycomp.errors import PolycompInternalError
from polycomp.islutil import (
    StatementDependences,
    flatten_range,
    intersect_all_params,
    intersect_params,
    maps,
    project_range,
    restrict_equal,
    some_differ,
    tuple_names,
)
from polycomp.model import PolyModel
from polycomp.scheduler.common import marks

_OP = isl.ast_expr_op_type
_BIN = {
    _OP.add: "+", _OP.sub: "-", _OP.mul: "*", _OP.div: "//", _OP.fdiv_q: "//",
    _OP.pdiv_q: "//", _OP.pdiv_r: "%", _OP.zdiv_r: "%", _OP.min: "min", _OP.max: "max",
    _OP.eq: "==", _OP.le: "<=", _OP.lt: "<", _OP.ge: ">=", _OP.gt: ">",
    # islpy's type stubs lack the names that end in "_" (Python keywords)
    _OP.and_: "&&", _OP.and_then: "&&", _OP.or_: "||", _OP.or_else: "||",  # type: ignore[attr-defined]
}


def build_ast(schedule: isl.Schedule, context: isl.Set,
              dependences: isl.UnionMap | StatementDependences | None = None) -> isl.AstNode:
    """Generate the isl AST of ``schedule`` under ``context``.

    With ``dependences``, a ``before_each_for`` callback annotates every ``for`` node
    with an isl id ``coincident`` or ``carried``: the loop is coincident when every
    dependence between two instances it executes with equal outer loop values has
    distance 0 on it (the test PPCG and Pluto apply when generating code).
    """
    # passes may add parameters (block/thread ids): the build's context must know them
    context = context.align_params(schedule.get_domain().get_space())
    # Every object of the tree on the build's parameter space: isl intersects the
    # executed relation (one map per statement) with each filter of a sequence, and a
    # filter on fewer parameters made it realign all those maps for each filter
    # (quadratic in the statements: a 200-stage chain on cuda spent 29 s here).  The
    # same sets on a wider parameter space: the AST is the same.
    schedule = schedule.align_params(context.get_space())
    context = context.align_params(schedule.get_domain().get_space())
    # The same set in fewer disjuncts: a GPU kernel's block/thread ranges arrive as a
    # union of one piece per statement and boundary case (18 for a 5-point stencil with
    # its boundary copy), and isl's generation works on every disjunct at every level
    # (that kernel: 21 s -> 5 s).
    context = context.coalesce()
    build = isl.AstBuild.from_context(context)
    handles = []
    errors: list = []
    if dependences is not None:  # empty dependences: every loop is coincident
        index = dependences if isinstance(dependences, StatementDependences) else \
            StatementDependences(dependences)

        def before_each_for(b):
            try:
                return isl.Id("coincident" if _loop_is_coincident(b, index) else "carried")
            except Exception as e:  # isl swallows exceptions raised in callbacks
                errors.append(e)
                return isl.Id("carried")
        build, h = build.set_before_each_for(before_each_for)
        handles.append(h)  # the callback must stay alive while the AST is built
    node = build.node_from_schedule(schedule)
    if errors:
        raise errors[0]
    del handles
    return node


def build_ast_parts(schedule: isl.Schedule, context: isl.Set | None,
                    dependences: isl.UnionMap | None = None,
                    split: tuple[isl.Set, Sequence[isl.Set]] | None = None,
                    ) -> list[isl.AstNode]:
    """The isl AST of ``schedule`` under ``context`` (see :func:`build_ast`) as a list of
    ASTs to be executed in order.

    When the schedule is a top-level sequence whose children use different parameters
    (the block/thread parameters of separate GPU kernels), child ``i`` is generated on
    its own (the schedule restricted to its filter ``F_i``) under ``context`` with the
    parameters that no node of its subtree uses projected out (an exact projection: the
    constraints the remaining parameters satisfy).  The AST of a sequence is the
    concatenation of its children's ASTs, and the projected context states the same
    about the child's parameters as the full one, so the result executes the same
    instances in the same order; it saves isl from carrying every other kernel's
    parameter constraints through the generation of each kernel.  Otherwise: one AST.

    ``split``: ``(base, parts)`` with ``context = base ∩ parts[0] ∩ parts[1] ...`` (the
    model's context and each GPU kernel's block/thread ranges; ``context`` may then be
    None: it is computed only where needed).  Projecting the whole
    context once per child costs time in its size, which grows with the kernels (one
    dense basic set over every kernel's parameters: cubic in the number of loop nests,
    100 independent C nests on ``cuda`` took minutes); see :func:`_split_contexts` for
    the projection part by part, which gives the same sets."""
    parts = None
    if split is not None:
        parts = _split_contexts(schedule, *split)
    if parts is None:
        if context is None:
            assert split is not None
            context = _whole_context(*split)
        parts = _independent_parts(schedule, context)
    index = StatementDependences(dependences) if dependences is not None else None
    if parts is None:
        assert context is not None
        return [build_ast(schedule, context, index)]
    return [build_ast(schedule.intersect_domain(filt), ctx, index) for filt, ctx in parts]


def _param_names(obj) -> set:
    sp = obj.get_space()
    return {sp.get_dim_name(isl.dim_type.param, k) for k in range(sp.dim(isl.dim_type.param))}


_NODE_OBJECTS = {
    isl.schedule_node_type.filter: lambda n: [n.filter_get_filter()],
    isl.schedule_node_type.extension: lambda n: [n.extension_get_extension()],
    isl.schedule_node_type.band: lambda n: [n.band_get_partial_schedule(),
                                            n.band_get_ast_build_options()],
    isl.schedule_node_type.expansion: lambda n: [n.expansion_get_expansion(),
                                                 n.expansion_get_contraction()],
    isl.schedule_node_type.guard: lambda n: [n.guard_get_guard()],
    isl.schedule_node_type.context: lambda n: [n.context_get_context()],
}


def _subtree_params(node: isl.ScheduleNode) -> set:
    """Names of the parameters used by the isl objects of ``node``'s subtree."""
    names: set = set()

    def visit(n):
        for obj in _NODE_OBJECTS.get(n.get_type(), lambda n: [])(n):
            names.update(_param_names(obj))
        return True
    node.foreach_descendant_top_down(visit)
    return names


def _independent_parts(schedule: isl.Schedule, context: isl.Set):
    """``[(filter F_i, context projected onto the parameters of child i)]`` for a
    top-level sequence where some child does not use every parameter constrained by
    ``context``; None otherwise (one AST for the whole schedule)."""
    root = schedule.get_root()
    if root.n_children() != 1 or root.child(0).get_type() != isl.schedule_node_type.sequence:
        return None
    seq = root.child(0)
    if seq.n_children() < 2:
        return None
    cnames = [context.get_space().get_dim_name(isl.dim_type.param, k)
              for k in range(context.dim(isl.dim_type.param))]
    common = _param_names(schedule.get_domain())
    parts, reduced = [], False
    for i in range(seq.n_children()):
        child = seq.child(i)
        keep = common | _subtree_params(child)
        ctx = context
        for k in reversed(range(len(cnames))):
            if cnames[k] not in keep:
                ctx = ctx.project_out(isl.dim_type.param, k, 1)
                reduced = True
        parts.append((child.filter_get_filter(), ctx))
    return parts if reduced else None


def _split_contexts(schedule: isl.Schedule, base: isl.Set, parts: Sequence[isl.Set]):
    """:func:`_independent_parts` of the context ``base ∩ parts[0] ∩ ...`` computed part by
    part, or None where the shortcut does not apply (then the caller projects the
    whole context).

    Let ``C`` be the parameters of the schedule's domain (every child keeps them),
    ``K_i = C ∪`` the parameters child ``i``'s subtree uses, and ``P_j`` the parameters
    of part ``j`` outside ``C``.  When ``base`` has no parameter outside ``C`` and the
    ``P_j`` are pairwise disjoint, each eliminated parameter occurs in exactly one part,
    so projecting the conjunction onto ``K_i`` is the conjunction of the projections:
    ``base``, every part with ``P_j ⊆ K_i`` whole, and every other part projected onto
    ``C`` (it must then have ``P_j ∩ K_i = ∅``; otherwise: None).  A whole part implies
    its own projection, so the projections of all parts (``Q``, computed once, over
    ``C`` only) are intersected for every child: each child costs its own parts and
    ``Q``, not the size of the whole context."""
    root = schedule.get_root()
    if not parts or root.n_children() != 1 or \
            root.child(0).get_type() != isl.schedule_node_type.sequence:
        return None
    seq = root.child(0)
    if seq.n_children() < 2:
        return None
    common = _param_names(schedule.get_domain())
    if not _param_names(base) <= common:
        return None
    private: list[set] = []
    seen: set = set()
    for part in parts:
        p = _param_names(part) - common
        if p & seen:
            return None
        seen |= p
        private.append(p)
    q = base
    for part in parts:
        q = intersect_params(q, _project_params(part, common))
    out, reduced = [], False
    for i in range(seq.n_children()):
        child = seq.child(i)
        keep = common | _subtree_params(child)
        ctx = q
        for part, p in zip(parts, private):
            if p <= keep:
                ctx = intersect_params(ctx, part)
            elif p & keep:
                return None
            else:
                reduced = True
        out.append((child.filter_get_filter(), ctx))
    return out if reduced else None


def _whole_context(base: isl.Set, parts: Sequence[isl.Set]) -> isl.Set:
    """``base ∩ parts[0] ∩ ...``, the parameters of ``parts`` first (their order decides
    the AST's parameter order, as when the parts were intersected as they came)."""
    extra = intersect_all_params(parts)
    if extra is None:
        return base
    context = base.align_params(extra.get_space())
    return context.intersect(extra.align_params(context.get_space()))


def _project_params(s: isl.Set, keep: set) -> isl.Set:
    """``s`` with its parameters outside ``keep`` projected out."""
    sp = s.get_space()
    for k in reversed(range(sp.dim(isl.dim_type.param))):
        if sp.get_dim_name(isl.dim_type.param, k) not in keep:
            s = s.project_out(isl.dim_type.param, k, 1)
    return s


def _loop_is_coincident(build: isl.AstBuild, index: StatementDependences) -> bool:
    """Is the loop being generated by ``build`` coincident for the dependences of
    ``index`` (see :func:`build_ast`)?  With ``F`` the build's schedule (outer loops,
    then this one): no dependence ``x -> y`` among the loop's statements has
    ``F_outer(x) = F_outer(y)`` and ``F_this(x) != F_this(y)``.

    The build's schedule is coalesced first (isl hands it out with one disjunct per
    generated piece and redundant constraints).  Only the dependences among the
    statements the loop executes are looked at (:class:`~polycomp.islutil.
    StatementDependences`: linear in the program, not quadratic), and the test is a
    pair of emptiness tests on each dependence relation (:func:`~polycomp.islutil.
    restrict_equal`), never a composition of the relation with the schedule (its
    distance set): that was exponential in the loop depth for some dependences."""
    sched = flatten_range(build.get_schedule()).coalesce()
    deps = index.among(tuple_names(sched.domain()))
    if deps.is_empty():
        return True
    n = maps(sched)[0].dim(isl.dim_type.out)
    outer = restrict_equal(deps, project_range(sched, 0, n - 1))
    return not some_differ(outer, project_range(sched, n - 1, 1))


class AstLowerer:
    """Converts one isl AST to IR.

    ``statements`` maps a statement name to a callable ``(args: list[ir.Expr]) -> Stmt``
    producing the IR of one instance given its domain coordinates.
    """

    def __init__(self, statements: dict[str, Callable], params: tuple):
        self.statements = statements
        self.vars: dict[str, ir.Var] = {p.name: p for p in params}

    def var(self, name: str) -> ir.Var:
        v = self.vars.get(name)
        if v is None:
            v = self.vars[name] = ir.Var(name)
        return v

    # ---------------------------------------------------------------- expressions
    def expr(self, e: isl.AstExpr) -> ir.Expr:
        t = e.get_type()
        if t == isl.ast_expr_type.int:
            return ir.IntImm(int(e.get_val().to_python()))
        if t == isl.ast_expr_type.id:
            return self.var(e.get_id().get_name())
        if t != isl.ast_expr_type.op:
            raise PolycompInternalError(f"unexpected isl AST expression {e.to_C_str()}")
        op = e.get_op_type()
        args = [self.expr(e.get_op_arg(k)) for k in range(e.get_op_n_arg())]
        if op in _BIN:
            b = _BIN[op]
            if b in ("==", "<=", "<", ">=", ">", "&&", "||"):
                return ir.Binary(b, args[0], args[1], "bool")
            out = args[0]
            for a in args[1:]:  # min/max may be n-ary
                out = ir.Binary(b, out, a, "int64")
            return out
        if op == _OP.minus:
            return ir.Unary("neg", args[0], "int64")
        if op in (_OP.cond, _OP.select):
            return ir.Select(args[0], args[1], args[2], args[1].dtype)
        raise PolycompInternalError(f"unsupported isl AST operator in {e.to_C_str()}")

    # ---------------------------------------------------------------- statements
    def stmt(self, node: isl.AstNode) -> ir.Stmt:
        t = node.get_type()
        if t == isl.ast_node_type.block:
            lst = node.block_get_children()
            return ir.seq(*[self.stmt(lst.get_at(k)) for k in range(lst.n_ast_node())])
        if t == isl.ast_node_type.for_:  # type: ignore[attr-defined]
            return self.for_(node)
        if t == isl.ast_node_type.if_:  # type: ignore[attr-defined]
            then = self.stmt(node.if_get_then_node())
            orelse = self.stmt(node.if_get_else_node()) if node.if_has_else_node() else None
            return ir.IfThenElse(self.expr(node.if_get_cond()), then, orelse)
        if t == isl.ast_node_type.mark:
            key, value = marks.split(node.mark_get_id().get_name())
            return ir.AttrStmt(key, value, self.stmt(node.mark_get_node()))
        if t == isl.ast_node_type.user:
            return self.user(node.user_get_expr())
        raise PolycompInternalError(f"unsupported isl AST node type {t}")

    def for_(self, node) -> ir.Stmt:
        it = node.for_get_iterator().get_id().get_name()
        v = self.var(it)
        init = self.expr(node.for_get_init())
        body = self.stmt(node.for_get_body())
        if node.for_is_degenerate():
            return ir.LetStmt(v, init, body)
        inc = int(node.for_get_inc().get_val().to_python())
        cond = node.for_get_cond()
        if cond.get_type() != isl.ast_expr_type.op or cond.get_op_type() not in (_OP.le, _OP.lt):
            raise PolycompInternalError(f"loop condition {cond.to_C_str()} is not an upper bound")
        lhs, rhs = cond.get_op_arg(0), cond.get_op_arg(1)
        if not (lhs.get_type() == isl.ast_expr_type.id and lhs.get_id().get_name() == it):
            raise PolycompInternalError(f"loop condition {cond.to_C_str()} does not bound {it}")
        ub = self.expr(rhs)
        count = ub - init + (1 if cond.get_op_type() == _OP.le else 0)  # for inc == 1
        ann: tuple[tuple[str, Any], ...] = ()
        try:  # islpy raises (rather than returning None) when a node has no annotation
            note = node.get_annotation()
        except isl.Error:
            note = None
        if note is not None:
            ann = (("coincident", note.get_name() == "coincident"),)
        if inc == 1:
            return ir.For(v, init, count, "serial", body, ann)
        t = self.var(it + "_t")
        extent = (count + (inc - 1)) // inc
        return ir.For(t, ir.IntImm(0), extent, "serial",
                      ir.LetStmt(v, init + t * inc, body), ann)

    def user(self, e: isl.AstExpr) -> ir.Stmt:
        name = e.get_op_arg(0).get_id().get_name()
        fn = self.statements.get(name)
        if fn is None:
            raise PolycompInternalError(f"the AST executes unknown statement {name}")
        args = [self.expr(e.get_op_arg(k)) for k in range(1, e.get_op_n_arg())]
        return fn(args)


def pw_aff_to_ir(pa: isl.PwAff, context: isl.Set, params: tuple) -> ir.Expr:
    """An IR expression for a (parametric) isl PwAff, via isl's AST expression builder."""
    context = context.align_params(pa.get_space())
    build = isl.AstBuild.from_context(context)
    return AstLowerer({}, params).expr(build.expr_from_pw_aff(pa.align_params(context.get_space())))


def statement_builders(model) -> dict[str, Callable]:
    """For each model statement, a builder instantiating its Store at given coordinates."""
    out = {}
    for s in model.statements:
        def make(args, s=s):
            if len(args) != len(s.iters):
                raise PolycompInternalError(f"{s.name} called with {len(args)} coordinates")
            return ir.substitute(s.store(), dict(zip(s.iters, args)))
        out[s.name] = make
    return out


def lower_schedule(model: PolyModel, schedule: isl.Schedule, extra_statements: dict | None = None,
                   name: str | None = None, simplify_body: bool = True,
                   extra_context: isl.Set | None = None,
                   context_parts: Sequence[isl.Set] = (),
                   statement_hook: Callable[[Callable[[str], ir.Var]], dict] | None = None,
                   ) -> ir.LoweredFunc:
    """Lower ``schedule`` of ``model`` to a :class:`~polycomp.ir.LoweredFunc`.

    Temporaries (stages that are not outputs) are allocated in global scope around
    the whole body.  ``extra_context`` adds parameter constraints for AST generation
    (passes that introduce parameters, e.g. GPU block/thread ids, provide it);
    ``context_parts`` adds several such sets (one per GPU kernel:
    ``CompileState.ast_context_parts``), which AST generation projects part by part
    and intersects only where it needs the whole context (:func:`build_ast_parts`);
    ``statement_hook(var)`` returns statement builders that replace or add to the
    model's (a target's promoted statements and copies, see
    :meth:`polycomp.hw.registry.Backend.lowering_statements`); ``var(name)`` gives the
    IR variable of an AST iterator or parameter.
    """
    from .simplify import simplify
    split: tuple[isl.Set, Sequence[isl.Set]] | None = None
    context: isl.Set | None = model.context
    if extra_context is not None:  # e.g. ranges of block/thread parameters
        context = _whole_context(model.context, [extra_context])
    if context_parts:
        split = (model.context, tuple(context_parts) + (
            (extra_context,) if extra_context is not None else ()))
        context = None      # computed where needed (see build_ast_parts)
    asts = build_ast_parts(schedule, context, model.dependences, split)
    builders = statement_builders(model)
    lowerer = AstLowerer(builders, model.params)
    if statement_hook is not None:
        builders.update(statement_hook(lowerer.var))
    builders.update(extra_statements or {})
    body = ir.seq(*[lowerer.stmt(ast) for ast in asts])
    for buf in reversed(model.temporaries):
        body = ir.Allocate(buf, body)
    f = ir.LoweredFunc(name or model.name, tuple(model.params), model.live_in, model.live_out,
                       body, model.inout)
    return f.with_body(simplify(f.body)) if simplify_body else f


def origin_to_ir(origin: isl.MultiPwAff, env: dict, model) -> list[ir.Expr] | None:
    """``origin`` (a function of the prefix schedule ``c_0..``) as IR on the enclosing
    loops' variables ``env`` (by name); a dimension isl generated no loop for (a single
    value) takes that value from the origin's domain; a parameter a pass added (not the
    model's: ``cpu_row_ranges``' ``lo``) reads the variable of its name in ``env`` (the
    let that binds it).  None when one cannot be read."""
    from .simplify import simplify
    out = []
    n_in = origin.dim(isl.dim_type.in_)
    params = list(model.params) + list(env.values())
    fixed = {}
    for k in range(n_in):
        v = env.get(f"c{k}")
        if v is None:
            val = origin.domain().plain_get_val_if_fixed(isl.dim_type.set, k)
            if not val.is_int():
                return None
            v = ir.Var(f"c{k}")
            fixed[v] = ir.IntImm(int(val.to_python()))
        params.append(v)
    for d in range(origin.dim(isl.dim_type.out)):
        pa = origin.get_pw_aff(d)
        nparam = pa.dim(isl.dim_type.param)
        pa = pa.move_dims(isl.dim_type.param, nparam, isl.dim_type.in_, 0, n_in)
        for k in range(n_in):
            pa = pa.set_dim_id(isl.dim_type.param, nparam + k, isl.Id(f"c{k}"))
        pa = pa.project_domain_on_params()
        out.append(simplify(ir.substitute(pw_aff_to_ir(pa, model.context, tuple(params)),
                                          fixed)))
    return out
