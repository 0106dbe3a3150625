"""The polyhedral model of a traced kernel: statements, domains, accesses, dependences.

One statement per stage; a reduction stage becomes two statements, ``<stage>_init``
(``out[i] = identity``) and ``<stage>_update`` (``out[i] = out[i] op body[i, r]``).
Every statement has a parametric isl domain (symbolic dimensions are isl parameters;
the context states every parameter and every declared extent is >= 1), tagged
read/write access relations (one tag per textual reference, as in PPCG:
``[S[i] -> S_ref0[]] -> A[...]``), and the model holds the flow, anti and output
dependences that ``isl.UnionAccessInfo.compute_flow`` derives under program order.
Reads guarded by an affine ``select`` condition are restricted to that condition.
Arrays stay multi-dimensional here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import islpy as isl

from polycomp import ir
from polycomp.affine import and_conditions, cond_to_isl, to_isl
from polycomp.errors import PolycompInternalError, ShapeMismatchError
from polycomp.frontend.dsl import load_location
from polycomp.islutil import maps, sets, tuple_names, union_all

__all__ = ["Access", "Statement", "PolyModel", "build_model"]


@dataclass(eq=False)
class Access:
    """One textual reference ``buffer[indices]`` in a statement."""
    tag: str
    buffer: ir.Buffer
    indices: tuple
    kind: str                 # "read" | "write"
    relation: isl.Map         # S[i] -> buffer[...]  (restricted to its guard)
    location: object = None   # SourceLocation of the indexing in user code, if known
    # S[i] -> buffer[...] without the guard (the window a promotion copies, e.g. a padded
    # convolution input)
    index_relation: isl.Map = None  # type: ignore[assignment]


@dataclass(eq=False)
class Statement:
    """``write = value`` executed once for each point of ``domain``."""
    name: str
    stage: Any                # the front end's Stage (DSL) or statement (C loop nests)
    kind: str                 # "compute" | "init" | "update"
    iters: tuple              # ir.Var per domain dimension (stage iters, then reduce axes)
    domain: isl.Set
    write: ir.Buffer
    write_indices: tuple
    value: ir.Expr            # the right-hand side (for update: out op body)
    accesses: list = field(default_factory=list)

    @property
    def reads(self) -> list:
        return [a for a in self.accesses if a.kind == "read"]

    @property
    def writes(self) -> list:
        return [a for a in self.accesses if a.kind == "write"]

    def store(self) -> ir.Store:
        return ir.Store(self.write, self.write_indices, self.value)


@dataclass(eq=False)
class PolyModel:
    """Statements plus the derived isl objects of one kernel."""
    graph: Any                     # KernelGraph (or a front end's equivalent)
    ctx: isl.Context
    params: tuple
    context: isl.Set
    statements: list
    domain: isl.UnionSet
    initial_schedule: isl.Schedule
    reads: isl.UnionMap = None  # type: ignore[assignment]
    writes: isl.UnionMap = None  # type: ignore[assignment]
    tagged_reads: isl.UnionMap = None  # type: ignore[assignment]
    tagged_writes: isl.UnionMap = None  # type: ignore[assignment]
    flow: isl.UnionMap = None  # type: ignore[assignment]
    anti: isl.UnionMap = None  # type: ignore[assignment]
    output: isl.UnionMap = None  # type: ignore[assignment]
    # the flat program order (initial schedule) of each statement, filled with the
    # dependences: see :meth:`program_order`
    order_of: dict = field(default_factory=dict, repr=False)

    def program_order(self, names) -> isl.UnionMap:
        """The initial schedule as a flat map, restricted to the statements ``names``:
        a dataflow analysis of a few statements under it costs what they need, while
        one under the schedule tree costs time in the size of the whole tree (per
        analysis: quadratic in the statements when every kernel group asks)."""
        if not self.order_of:
            for om in maps(self.initial_schedule.get_map()):
                self.order_of.setdefault(om.get_tuple_name(isl.dim_type.in_), []).append(om)
        return union_all([m for n in names for m in self.order_of.get(n, ())],
                         self.context.get_space())

    @property
    def dependences(self) -> isl.UnionMap:
        """All dependences (flow | anti | output) between statement instances."""
        return self.flow.union(self.anti).union(self.output)

    @property
    def live_in(self) -> tuple:
        return tuple(t.buffer for t in self.graph.inputs)

    @property
    def live_out(self) -> tuple:
        return tuple(t.buffer for t in self.graph.outputs)

    def statement(self, name: str) -> Statement:
        for s in self.statements:
            if s.name == name:
                return s
        raise KeyError(name)

    def __str__(self) -> str:
        from polycomp.lowering.printer import expr_str
        out = [f"kernel {self.graph.name}",
               f"  context: {self.context}",
               f"  live-in: {', '.join(b.name for b in self.live_in)}",
               f"  live-out: {', '.join(b.name for b in self.live_out)}"]
        for s in self.statements:
            idx = ", ".join(expr_str(i) for i in s.write_indices)
            out.append(f"  {s.name} ({s.kind}): {s.write.name}[{idx}] = {expr_str(s.value)}")
            out.append(f"    domain: {s.domain}")
            for a in s.accesses:
                out.append(f"    {a.kind:5s} {a.tag}: {a.relation}")
        for name in ("flow", "anti", "output"):
            out.append(f"  {name} dependences: {getattr(self, name)}")
        return "\n".join(out)


# --------------------------------------------------------------------------- building


#: Words isl's parser reads as keywords or values (an iterator with such a name, or a
#: non-ASCII one, gets another name in isl text; lowercase comparison).
_ISL_WORDS = frozenset({"and", "or", "not", "xor", "implies", "mod", "floor", "ceil",
                        "floord", "ceild", "min", "max", "exists", "infty", "infinity",
                        "inf", "nan", "rat", "true", "false", "div"})
_ISL_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _isl_names(params, iters) -> dict:
    """Names of parameters and iterators in isl text.  Parameters keep their names (the
    DSL rejects symbols isl cannot read); an iterator keeps its name (the lambda
    parameter's) unless a parameter or an earlier iterator has it, or isl cannot read it
    (``floor``, ``NaN``, ``é``): then it is ``i<k>``-style fresh."""
    names = {p: p.name for p in params}
    used = set(names.values())
    for v in iters:
        base = v.name
        if not _ISL_IDENT.match(base) or base.lower() in _ISL_WORDS:
            base = "i"
        n, k = base, 0
        while n in used or n.lower() in _ISL_WORDS:
            k += 1
            n = f"{base}{k}"
        used.add(n)
        names[v] = n
    return names


def _param_prefix(params) -> str:
    return "[" + ", ".join(p.name for p in params) + "] -> " if params else ""


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
    def __init__(self, graph, ctx):
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
        from polycomp.frontend.dsl import identity
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
            idx = ", ".join(to_isl(i, names, f"index of {buf.name}", loc) for i in indices)
            dims = ", ".join(names[v] for v in iters)
            cond = f" : {guard}" if guard else ""
            text = f"{_param_prefix(self.params)}{{ {name}[{dims}] -> {buf.name}[{idx}]{cond} }}"
            rel = isl.Map.read_from_str(self.ctx, text).intersect_domain(domain)
            unguarded = rel if not guard else isl.Map.read_from_str(
                self.ctx, f"{_param_prefix(self.params)}{{ {name}[{dims}] -> {buf.name}[{idx}] }}"
            ).intersect_domain(domain)
            stmt.accesses.append(Access(tag, buf, tuple(indices), kind_, rel, where, unguarded))

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


def program_order_schedule(model_ctx, statements, domain) -> isl.Schedule:
    """The initial schedule tree: stages in program order, loops in index order.

    ``domain`` → ``sequence`` over stages (omitted for one stage) → per stage a band
    over its output dimensions (shared by the init and update statements of a
    reduction) → for a reduction, ``sequence [init, update]`` with a band over the
    reduce axes under the update filter.
    """
    from polycomp.scheduler.common.tree import build_program_order
    return build_program_order(statements, domain)


def build_model(graph, ctx: isl.Context | None = None) -> PolyModel:
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
    model = PolyModel(graph, ctx, graph.params, context, stmts, domain, schedule)
    compute_accesses_and_dependences(model)
    return model


def _tag(rel: isl.Map, tag: str) -> isl.Map:
    """``[S[i] -> tag[]] -> A[...]`` from ``S[i] -> A[...]`` (PPCG's tagged accesses)."""
    tag_set = isl.Set.read_from_str(rel.get_ctx(), f"{{ {tag}[] }}")
    pair = isl.Map.from_domain_and_range(rel.domain(), tag_set)  # S[i] -> tag[]
    return pair.domain_map().apply_range(rel)  # [S[i] -> tag[]] -> S[i] -> A[...]


def _top_level_groups(schedule: isl.Schedule) -> dict[str, int] | None:
    """Statement name -> position in the top-level sequence of ``schedule`` (the
    program's outermost statements and loop nests, in execution order: every instance
    of one runs before every instance of the next), or None when the tree has no such
    sequence of whole statements."""
    node = schedule.get_root()
    if node.n_children() != 1:
        return None
    node = node.child(0)
    if node.get_type() != isl.schedule_node_type.sequence or node.n_children() < 2:
        return None
    domain = {st.get_tuple_name(): st for st in sets(schedule.get_domain())}
    out: dict[str, int] = {}
    for k in range(node.n_children()):
        filt = node.child(k).filter_get_filter()
        for st in sets(filt):
            name = st.get_tuple_name()
            whole = domain.get(name)
            if name in out or whole is None or \
                    not whole.is_subset(st.align_params(whole.get_space())):
                return None         # a statement split over several children
            out[name] = k
    return out


def _by_group(um: isl.UnionMap | None, group_of: dict[str, int]) -> dict[int, list[isl.Map]]:
    out: dict[int, list[isl.Map]] = {}
    if um is not None:
        for m in maps(um):
            out.setdefault(group_of[m.get_tuple_name(isl.dim_type.in_)], []).append(m)
    return out


def _dataflow(sink: isl.UnionMap, must: isl.UnionMap | None, may: isl.UnionMap | None,
              kill: isl.UnionMap | None, order_of: dict[str, list[isl.Map]],
              group_of: dict[str, int] | None) -> isl.UnionMap:
    """isl's dataflow analysis (``compute_flow``'s may dependences) of ``sink`` against
    the ``must``/``may`` sources and ``kill`` accesses under the program order
    (``order_of``: each statement's map).

    With the top-level groups (``group_of``, see :func:`_top_level_groups`) it runs
    group by group, backwards from each sink's own group: the sink instances that no
    must source or kill of a later group covers (``get_may_no_source``) are analysed
    against the next earlier group, and the walk stops when none are left.  Every
    instance of an earlier group precedes every instance of a later one, so the last
    must source (or kill) of an instance lies in the latest group that has one, and a
    may source of an earlier group is cut off exactly when a kill between them was
    found first: the union is the relation one analysis over all groups gives.  One
    analysis compared every sink with every source of the array (quadratic: 300 loop
    nests updating one array in place cost 1.2 s); here a sink whose element the
    previous nest wrote is done after two small analyses."""
    space = sink.get_space()

    def analyse(snk: isl.UnionMap, srcs: dict[str, list[isl.Map]]):
        names = tuple_names(snk.domain())
        info = isl.UnionAccessInfo.from_sink(snk)
        for setter, ms in srcs.items():
            names |= {m.get_tuple_name(isl.dim_type.in_) for m in ms}
            info = getattr(info, setter)(union_all(ms, space))
        sched = union_all([m for n in names for m in order_of.get(n, ())], space)
        return info.set_schedule_map(sched).compute_flow()

    accesses = {"set_must_source": must, "set_may_source": may, "set_kill": kill}
    if group_of is None:
        return analyse(sink, {k: maps(a) for k, a in accesses.items() if a is not None}) \
            .get_may_dependence()
    grouped = {k: _by_group(a, group_of) for k, a in accesses.items() if a is not None}
    with_sources = sorted({p for g in grouped.values() for p in g}, reverse=True)
    out = []
    for q, sinks in sorted(_by_group(sink, group_of).items()):
        remaining = union_all(sinks, space)
        for p in with_sources:          # the groups with an access, latest first
            if p > q:
                continue
            if remaining.is_empty():
                break
            srcs = {k: g.get(p, []) for k, g in grouped.items()}
            f = analyse(remaining, srcs)
            out.append(f.get_may_dependence())
            remaining = f.get_may_no_source()   # no must source or kill yet: go on
    return union_all(out, space)


def compute_accesses_and_dependences(m: PolyModel) -> None:
    """Fill ``m``'s access relations and its flow, anti and output dependences.

    The dataflow analysis runs once per array: isl only relates a sink to sources that
    access the same array, so the union of the per-array results is the relation the
    analysis of the whole program gives, while one analysis over all statements compared
    every sink with every source (quadratic in the statements: 3 s of a 300-statement C
    kernel's compile).

    Anti dependences relate a read to the writes after it up to the first write of
    the same element (the writes kill: ``set_kill``); a later write depends on the read
    through that write and the output dependences that chain the writes (a read
    ``r -> w1`` anti, ``w1 -> w2`` output implies ``r -> w2``).  Every use of the
    dependences -- legality (the sink after the source), permutability (non-negative
    distances), coincidence (zero distances between instances with equal outer
    schedule) -- holds for such a path's end points when it holds for each step, since
    distances add up and are lexicographically non-negative.  Without the kill, ``n``
    loop nests updating one array in place had ``n^2 / 2`` anti dependence maps
    (300 nests: 45000), which every later pass carried.  The analysis of each array
    runs group by group over the top-level nests (:func:`_dataflow`): linear in the
    nests where each one's accesses are covered by the nests just before it.

    The relations are kept as isl's analysis gives them, not coalesced.  The last
    writer of ``B[0]`` under ``d`` nested 2-trip loops is ``d`` simple pieces (the
    carry position of a binary counter: equalities and bounds); coalescing fuses them
    into one polytope of ``O(d^2)`` inequalities whose integer points are the same, and
    each later projection or emptiness test on it took time exponential in ``d``
    (depth 8: 12 s, depth 10: over 60 s of a compile; 0.1 s per compile without).
    Emitted sources of the op library (c, cpu-avx512, cuda) and of the C kernels of
    tests/c_scop_kernels are the same either way."""
    space = m.context.get_space()
    acc: dict[str, list] = {"read": [], "write": [], "tread": [], "twrite": []}
    per_array: dict[str, tuple[list, list]] = {}
    for s in m.statements:
        for a in s.accesses:
            array = a.relation.get_tuple_name(isl.dim_type.out)
            kind = "read" if a.kind == "read" else "write"
            acc[kind].append(a.relation)
            acc["t" + kind].append(_tag(a.relation, a.tag))
            per_array.setdefault(array, ([], []))[kind == "write"].append(a.relation)
    m.reads, m.writes, m.tagged_reads, m.tagged_writes = (
        union_all(acc[k], space) for k in ("read", "write", "tread", "twrite"))
    # the program order, per statement: each array's analysis uses the statements that
    # access it (the schedule tree's analysis costs time in the size of the whole tree)
    order = m.initial_schedule.get_map()
    order_of: dict[str, list[isl.Map]] = {}
    for om in maps(order):
        order_of.setdefault(om.get_tuple_name(isl.dim_type.in_), []).append(om)
    m.order_of = order_of
    groups = _top_level_groups(m.initial_schedule)
    flow, anti, out = [], [], []
    for array in sorted(per_array):
        ar, aw = (union_all(x, space) for x in per_array[array])
        if aw.is_empty():
            continue  # no dependence without a write
        if not ar.is_empty():
            flow.append(_dataflow(ar, aw, None, None, order_of, groups))
            anti.append(_dataflow(aw, None, ar, aw, order_of, groups))
        out.append(_dataflow(aw, aw, None, None, order_of, groups))
    # not coalesced: isl's coalescing fuses the pieces of some relations into one
    # polytope that every later test pays for (see the docstring)
    m.flow = union_all(flow, space)
    m.anti = union_all(anti, space)
    m.output = union_all(out, space)
