"""The polyhedral model of a C SCoP (:class:`~polycomp.frontend.c_reader.CProgram`):
a :class:`CScopModel`.

Guarantees, in isl terms:

* context: ``[params] -> { : p >= 1 for every integer parameter p and e >= 1 for every
  array extent e }`` (the same assumption the DSL makes of its symbols);
* one :class:`~polycomp.model.Statement` per assignment (``kind = "assign"``; its
  ``stage`` is the :class:`CStatementSource`), named ``S_<k>`` in textual order, with
  domain ``[params] -> { S_k[i_0, ..., i_{d-1}] : <loop bounds, strides and if
  conditions> }`` over its enclosing loops (outermost first), restricted to the
  context;
* tagged accesses as in :mod:`polycomp.model` (one tag ``S_k_ref<n>`` per textual
  reference; reads in textual order, then the write; ``location`` is the C line); a
  read under a ternary with an affine condition is restricted to that condition
  (``index_relation`` keeps the unguarded relation); every access is checked to stay
  inside its array (:class:`~polycomp.errors.ShapeMismatchError` naming the C line);
* the initial schedule tree mirrors the C program: ``domain`` -> ... where every
  statement list of a block with more than one member becomes a ``sequence`` (filters in
  textual order; an ``if``/``else`` is a two-child sequence), and every chain of
  perfectly nested loops (a loop whose body, seen through ``if``s without ``else`` and
  single-statement blocks, is one loop) becomes one band whose members are the
  iterators (``-i`` for a decreasing loop).  A band is marked permutable when every
  dependence between instances it schedules with equal outer schedule has a
  non-negative distance on each member (a single member always has).  Executing the
  tree is executing the C code;
* flow/anti/output dependences from ``compute_flow`` under that tree
  (:func:`polycomp.model.compute_accesses_and_dependences`).
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polycomp import ir
from polycomp.affine import and_conditions, to_isl
from polycomp.errors import NonAffineIndexError, PolycompInternalError, ShapeMismatchError
from polycomp.islutil import StatementDependences, restrict_equal, some_differ, tuple_names
from polycomp.islutil import context as polycomp_context
from polycomp.model import Access, PolyModel, Statement, compute_accesses_and_dependences
from polycomp.scheduler.common.tree import map_bands

from .c_expr import affine_pieces, cond_text, guarded, isl_name, param_prefix
from .c_program import CGraph, CIf, CLoop, CProgram, CSeq, CStmt

__all__ = ["CScopModel", "build_c_model", "size_local_arrays", "extent_of"]


@dataclass(eq=False)
class CScopModel(PolyModel):
    """The model of a C SCoP: ``graph`` is its :class:`~polycomp.frontend.c_program.CGraph`
    (no stages; every statement an ``assign``; every output in-out)."""
    graph: CGraph

    @property
    def inout(self) -> tuple[str, ...]:
        return self.graph.inout


def build_c_model(program: CProgram) -> CScopModel:
    """Build the :class:`~polycomp.model.PolyModel` of a C SCoP (see the module doc)."""
    ctx = polycomp_context()
    g = program.graph
    try:
        context = _context(ctx, g)
        stmts = [_statement(ctx, g, cs, context) for cs in program.statements]
        domain = isl.UnionSet.empty(context.get_space())
        for s in stmts:
            domain = domain.union(isl.UnionSet.from_set(s.domain))
        by_name = {s.name: s for s in stmts}
        schedule = _schedule(program.tree, by_name)
        # (a SCoP without statements has no schedule tree)
        model = CScopModel(g, ctx, g.params, context, stmts, domain,
                           schedule)  # type: ignore[arg-type]
        compute_accesses_and_dependences(model)
        model.initial_schedule = _mark_permutable(schedule,  # type: ignore[arg-type]
                                                  model.dependences)
    except isl.Error as e:
        raise PolycompInternalError(f"isl error while building the model of C function "
                                    f"{g.name}: {e}", g.location) from None
    return model


def size_local_arrays(program: CProgram) -> None:
    """Give a local array with a constant extent that its accesses exceed for some
    parameter values the extent they need.

    PolyBench's durbin declares ``double z[N]`` with ``N`` the dataset's constant while
    its loops run to the parameter ``n``: the C code is defined exactly when ``n <= N``,
    and then only ``z[0 .. n-2]`` is touched.  When the largest index ``m`` touched in a
    dimension is one affine expression of the parameters (``n - 2``), the extent becomes
    ``m + 1`` (raised by a constant so that it is ``>= 1`` on the context), which holds
    every access for every parameter value and gives the C results wherever the C code
    is defined.  Otherwise the extent is kept (and the bounds check reports the access).
    The buffer is the reader's own (not yet shared), so its shape is set in place."""
    g = program.graph
    if not g.temporaries:
        return
    ctx = polycomp_context()
    context = _context(ctx, g)
    ranges: dict = {}
    for cs in program.statements:
        st = _statement(ctx, g, cs, context, check=False)
        for a in st.accesses:
            if any(a.buffer is t.buffer for t in g.temporaries):
                r = a.relation.range()
                ranges[a.buffer.name] = r if a.buffer.name not in ranges else \
                    ranges[a.buffer.name].union(r)
    for t in g.temporaries:
        buf = t.buffer
        rng = ranges.get(buf.name)
        if rng is None or not buf.shape:
            continue
        shape = list(buf.shape)
        for d, e in enumerate(shape):
            if not isinstance(e, ir.IntImm):
                continue
            mx = rng.dim_max(d).coalesce()
            too_big = mx.ge_set(isl.PwAff.read_from_str(
                ctx, f"{param_prefix(g.params)}{{ [({e.value})] }}").align_params(
                    mx.get_space()))
            if too_big.is_empty():
                continue
            ext = extent_of(rng, d, g, context)
            if ext is not None:
                shape[d] = ext
        object.__setattr__(buf, "shape", tuple(shape))


def extent_of(rng: isl.Set, d: int, g, context: isl.Set) -> ir.Expr | None:
    """An extent holding every index of dimension ``d`` of ``rng`` (a set of indices,
    all ``>= 0``) for every parameter value: ``m + 1 + c`` where ``m``, the largest
    index, is one affine expression of the parameters and the constant ``c >= 0`` makes
    it ``>= 1`` on the whole context (where ``rng`` is empty too).  None when the
    largest index is not one affine expression."""
    pieces = rng.dim_max(d).coalesce().get_pieces()
    if len(pieces) != 1:
        return None
    aff = pieces[0][1]
    low = isl.PwAff.from_aff(aff).intersect_params(context.align_params(aff.get_space()))
    v = low.min_val()
    if not v.is_int():       # unbounded below on the context: no constant shift helps
        return None
    shift = max(0, -int(v.to_python()))
    return _aff_to_ir(aff, {isl_name(p.name): p for p in g.params}, 1 + shift)


def _aff_to_ir(aff: isl.Aff, names: dict, offset: int = 0) -> ir.Expr | None:
    """``aff + offset``, an integer affine function of the parameters, as IR (None if
    not integral)."""
    if not aff.get_denominator_val().is_one():
        return None
    out: ir.Expr | None = None
    for k in range(aff.dim(isl.dim_type.param)):
        c = int(aff.get_coefficient_val(isl.dim_type.param, k).to_python())
        if c:
            p = names.get(aff.get_dim_name(isl.dim_type.param, k))
            if p is None:
                return None
            term = ir.binary("*", p, c) if c != 1 else p
            out = term if out is None else ir.binary("+", out, term)
    c0 = int(aff.get_constant_val().to_python()) + offset
    if out is None:
        return ir.IntImm(c0, "int64")
    return ir.binary("+", out, c0) if c0 else out


def _context(ctx, g) -> isl.Set:
    names = {p: isl_name(p.name) for p in g.params}
    cons = [f"{names[p]} >= 1" for p in g.params]
    for a in g.arrays + tuple(g.temporaries):
        for d in a.shape:
            if not isinstance(d, ir.IntImm):
                c = f"{to_isl(d, names, f'extent of {a.name}', a.location)} >= 1"
                if c not in cons:
                    cons.append(c)
    body = " and ".join(cons) if cons else ""
    return isl.Set.read_from_str(ctx, f"{param_prefix(g.params)}{{ : {body} }}" if body
                                 else "{ : }")


def _statement(ctx, g, cs: CStmt, context: isl.Set, check: bool = True) -> Statement:
    loc = cs.source.location
    names = cs.isl_names
    dims = ", ".join(names[v] for v in cs.iters)
    prefix = param_prefix(g.params)
    cons = " and ".join(f"({c})" for c in cs.constraints)
    text = f"{prefix}{{ {cs.name}[{dims}]" + (f" : {cons} }}" if cons else " }")
    domain = isl.Set.read_from_str(ctx, text).intersect_params(context)
    stmt = Statement(cs.name, cs.source, "assign", tuple(cs.iters), domain, cs.write,
                     tuple(cs.write_indices), cs.value)
    counter = [0]

    def access(kind, buf, indices, guard):
        tag = f"{cs.name}_ref{counter[0]}"
        counter[0] += 1
        what = f"subscript of {buf.name}"
        pieces = [affine_pieces(i, names, loc, what) for i in indices]
        if all(len(p) == 1 and p[0][0] is None for p in pieces):
            idx = ", ".join(to_isl(p[0][1], names, what, loc) for p in pieces)
            head, eqs = f"{prefix}{{ {cs.name}[{dims}] -> {buf.name}[{idx}]", ""
        else:  # a subscript with affine ternaries (MIN/MAX macros): a union of pieces
            outs = [f"o{k}" for k in range(len(indices))]
            eqs = " and ".join(
                "(" + " or ".join(guarded(g, f"{o} = {to_isl(e, names, what, loc)}")
                                  for g, e in p) + ")" for o, p in zip(outs, pieces))
            head = f"{prefix}{{ {cs.name}[{dims}] -> {buf.name}[{', '.join(outs)}]"
        unguarded = isl.Map.read_from_str(
            ctx, f"{head}" + (f" : {eqs} }}" if eqs else " }")).intersect_domain(domain)
        rel = unguarded if not guard else isl.Map.read_from_str(
            ctx, f"{head} : {and_conditions(eqs or None, guard)} }}").intersect_domain(domain)
        stmt.accesses.append(Access(tag, buf, tuple(indices), kind, rel, loc, unguarded))

    def collect(e, guard):
        if isinstance(e, ir.Select):
            collect(e.cond, guard)
            try:
                c = cond_text(e.cond, names, loc, "ternary condition", None)
            except NonAffineIndexError:  # a data-dependent choice: both sides may be read
                c = None
            collect(e.t, and_conditions(guard, c))
            collect(e.f, and_conditions(guard, f"not ({c})" if c is not None else None))
            return
        if isinstance(e, ir.Load):
            access("read", e.buffer, e.indices, guard)
            return
        for child in ir.children(e):
            collect(child, guard)

    collect(cs.value, None)
    access("write", cs.write, cs.write_indices, None)
    if check:
        _check_in_bounds(ctx, g, cs, stmt, context)
    return stmt


def _check_in_bounds(ctx, g, cs, stmt, context):
    """Every access must stay inside its array for every parameter value."""
    from polycomp.lowering.printer import expr_str
    names = {p: isl_name(p.name) for p in g.params}
    prefix = param_prefix(g.params)
    for a in stmt.accesses:
        buf = a.buffer
        dims = [f"o{k}" for k in range(len(buf.shape))]
        cons = [f"0 <= {d} < {to_isl(e, names, 'extent')}" for d, e in zip(dims, buf.shape)]
        extent = isl.Set.read_from_str(ctx, f"{prefix}{{ {buf.name}[{', '.join(dims)}]"
                                            + (f" : {' and '.join(cons)} }}" if cons else " }"))
        touched = a.relation.intersect_params(context)
        outside = touched.subtract_range(extent)
        if not outside.is_empty():
            sample = _describe(outside)
            idx = ", ".join(expr_str(i) for i in a.indices)
            shape = ", ".join(expr_str(d) for d in buf.shape)
            raise ShapeMismatchError(
                f"{a.kind} of {buf.name}[{idx}] goes out of bounds of {buf.name} (shape "
                f"({shape})), e.g. {sample}; fix the loop bounds or the subscript",
                cs.source.location)


def _describe(bad: isl.Map) -> str:
    """One point of ``S[i..] -> A[..]`` (with parameter values) in words."""
    pt = bad.wrap().sample_point()
    sp = bad.get_space()

    def coords(t, first, n):
        return [str(pt.get_coordinate_val(t, first + k).to_python()) for k in range(n)]
    n_in, n_out = sp.dim(isl.dim_type.in_), sp.dim(isl.dim_type.out)
    its = coords(isl.dim_type.set, 0, n_in)
    idx = coords(isl.dim_type.set, n_in, n_out)
    pars = [f"{sp.get_dim_name(isl.dim_type.param, k)} = "
            f"{pt.get_coordinate_val(isl.dim_type.param, k).to_python()}"
            for k in range(sp.dim(isl.dim_type.param))]
    return (f"instance {bad.get_tuple_name(isl.dim_type.in_)}[{', '.join(its)}] touches "
            f"{bad.get_tuple_name(isl.dim_type.out)}[{', '.join(idx)}]"
            + (f" when {', '.join(pars)}" if pars else ""))


# --------------------------------------------------------------------------- schedule


def _transparent(node):
    """The node a band can look through: a one-child block, an ``if`` without ``else``."""
    while True:
        if isinstance(node, CSeq) and len(node.children) == 1:
            node = node.children[0]
        elif isinstance(node, CIf) and node.orelse is None:
            node = node.then
        else:
            return node


def _statements_under(node) -> list:
    if isinstance(node, CStmt):
        return [node]
    if isinstance(node, CSeq):
        return [s for c in node.children for s in _statements_under(c)]
    if isinstance(node, CIf):
        return _statements_under(node.then) + (_statements_under(node.orelse)
                                               if node.orelse is not None else [])
    if isinstance(node, CLoop):
        return _statements_under(node.body)
    return []


def _schedule(node, by_name) -> isl.Schedule | None:
    if node is None:
        return None
    if isinstance(node, CStmt):
        return isl.Schedule.from_domain(isl.UnionSet.from_set(by_name[node.name].domain))
    if isinstance(node, (CSeq, CIf)):
        parts = node.children if isinstance(node, CSeq) else [node.then, node.orelse]
        scheds = [s for s in (_schedule(c, by_name) for c in parts) if s is not None]
        return _sequence(scheds)
    if isinstance(node, CLoop):
        chain = [node]
        inner = _transparent(node.body)
        while isinstance(inner, CLoop):
            chain.append(inner)
            inner = _transparent(inner.body)
        child = _schedule(chain[-1].body, by_name)
        if child is None:
            return None
        return child.insert_partial_schedule(_band(chain, _statements_under(node), by_name))
    raise PolycompInternalError(f"unexpected C program node {type(node).__name__}")


def _sequence(scheds: list) -> isl.Schedule | None:
    """The sequence of ``scheds`` in order.  isl splices a sequence child of a sequence
    into its parent, so combining them pairwise gives the one flat sequence that
    ``s0.sequence(s1).sequence(s2)...`` gives, without copying the growing schedule once
    per child (quadratic: 13 s of 1000 loop nests)."""
    if not scheds:
        return None
    while len(scheds) > 1:
        scheds = [scheds[k].sequence(scheds[k + 1]) if k + 1 < len(scheds) else scheds[k]
                  for k in range(0, len(scheds), 2)]
    return scheds[0]


def _band(chain, stmts, by_name) -> isl.MultiUnionPwAff:
    """``{ S[i_0..] -> [+-i_d for each loop d of the chain] }`` over ``stmts``."""
    um = None
    for cs in stmts:
        names = cs.isl_names
        dims = ", ".join(names[v] for v in cs.iters)
        out = ", ".join(("-" if lp.step < 0 else "") + names[cs.iters[lp.depth]]
                        for lp in chain)
        m = isl.UnionMap.read_from_str(by_name[cs.name].domain.get_ctx(),
                                       f"{{ {cs.name}[{dims}] -> [{out}] }}")
        um = m if um is None else um.union(m)
    assert um is not None, "a band over at least one statement"
    return isl.MultiUnionPwAff.from_union_map(um)


def _mark_permutable(schedule: isl.Schedule, deps: isl.UnionMap) -> isl.Schedule:
    index = StatementDependences(deps)

    def fn(node):
        if _members_nonnegative(node, index):
            node = node.band_set_permutable(1)
        return node
    return map_bands(schedule, fn)


def _members_nonnegative(node, index: StatementDependences) -> bool:
    """Does every dependence inside this band's subtree between instances with equal
    outer schedule have a non-negative distance on every member?  Decided by emptiness
    tests on the dependence relations (:func:`~polycomp.islutil.restrict_equal`), not
    by their distance sets (exponential in the depth for some nests)."""
    n = node.band_n_member()
    if n == 1:
        return True
    dom = node.get_domain()
    deps = index.among(tuple_names(dom)).intersect_domain(dom).intersect_range(dom)
    if deps.is_empty():
        return True
    deps = restrict_equal(deps, node.get_prefix_schedule_union_map())
    mupa = node.band_get_partial_schedule()
    for k in range(n):
        mk = isl.UnionMap.from_union_pw_aff(mupa.get_union_pw_aff(k))
        if some_differ(deps, mk, decreasing_only=True):
            return False
    return True
