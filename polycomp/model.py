"""The polyhedral model of a kernel: statements, domains, accesses, dependences.

A :class:`PolyModel` is what every front end produces and every later step reads: its
statements, each with a parametric isl domain (symbolic dimensions are isl parameters;
the context states every parameter and every declared extent is >= 1), tagged
read/write access relations (one tag per textual reference, as in PPCG:
``[S[i] -> S_ref0[]] -> A[...]``), the initial schedule tree, and the flow, anti and
output dependences that ``isl.UnionAccessInfo.compute_flow`` derives under it
(:func:`compute_accesses_and_dependences`).  Arrays stay multi-dimensional here.

A model has one of two typed origins, one subclass each, made by its front end:

* :class:`polycomp.frontend.dsl_model.DslModel` — a traced ``@tensor_expr`` program
  (``graph`` is its :class:`~polycomp.frontend.dsl.KernelGraph`, with stages; one
  statement per stage, a reduction split into ``<stage>_init`` and ``<stage>_update``);
* :class:`polycomp.frontend.c_model.CScopModel` — a C SCoP (``graph`` is its
  :class:`~polycomp.frontend.c_program.CGraph`; one ``assign`` statement per C
  assignment; the outputs are in-out).

Passes that depend on the origin test it with ``isinstance(model, DslModel)`` /
``isinstance(model, CScopModel)`` (and then read the typed ``graph``); everything else
reads the :class:`KernelSignature` every front end's graph provides.  This module
imports no front end: the front ends sit above the model.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

import islpy as isl

from polycomp import ir
from polycomp.errors import SourceLocation
from polycomp.islutil import maps, sets, tuple_names, union_all

__all__ = ["Access", "Statement", "KernelSignature", "PolyModel", "FrontEndKernel",
           "compute_accesses_and_dependences"]


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
    # the dimensions indexed by data (a gather, ``table[idx[i], j]``: ``(0,)``); the
    # relation maps them to the whole extent (a may-access).  Passes that derive
    # footprints, strides or copies from ``indices`` must skip such an access's array.
    indirect: tuple = ()


@dataclass(eq=False)
class Statement:
    """``write = value`` executed once for each point of ``domain``."""
    name: str
    stage: Any                # the front end's Stage (DSL) or CStatementSource (C)
    kind: str                 # "compute" | "init" | "update" (DSL) | "assign" (C)
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


class KernelArray(Protocol):
    """An array of a kernel's signature (a DSL ``Tensor``, a C ``CArray``)."""
    @property
    def buffer(self) -> ir.Buffer: ...


class KernelSignature(Protocol):
    """What every front end's graph provides (the DSL's ``KernelGraph``, the C reader's
    ``CGraph``): the kernel's name, parameters (``ir.Var``, ``is_param``), input and
    output arrays in argument order, temporaries (arrays that are no output, allocated
    by the kernel) and the source location."""
    @property
    def name(self) -> str: ...
    @property
    def params(self) -> tuple: ...
    @property
    def inputs(self) -> tuple[KernelArray, ...]: ...
    @property
    def outputs(self) -> tuple[KernelArray, ...]: ...
    @property
    def temporaries(self) -> tuple[KernelArray, ...]: ...
    @property
    def location(self) -> SourceLocation | None: ...


@dataclass(eq=False)
class PolyModel:
    """Statements plus the derived isl objects of one kernel (see the module doc; made
    as a :class:`~polycomp.frontend.dsl_model.DslModel` or a
    :class:`~polycomp.frontend.c_model.CScopModel`)."""
    graph: KernelSignature
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
    def name(self) -> str:
        return self.graph.name

    @property
    def dependences(self) -> isl.UnionMap:
        """All dependences (flow | anti | output) between statement instances."""
        return self.flow.union(self.anti).union(self.output)

    @property
    def live_in(self) -> tuple[ir.Buffer, ...]:
        return tuple(t.buffer for t in self.graph.inputs)

    @property
    def live_out(self) -> tuple[ir.Buffer, ...]:
        return tuple(t.buffer for t in self.graph.outputs)

    @property
    def temporaries(self) -> tuple[ir.Buffer, ...]:
        """Arrays the kernel allocates itself (no input or output)."""
        return tuple(t.buffer for t in self.graph.temporaries)

    @property
    def inout(self) -> tuple[str, ...]:
        """Names of the outputs whose initial contents the caller gives (none for a DSL
        program: it writes every output element; every output of a C SCoP)."""
        return ()

    def statement(self, name: str) -> Statement:
        for s in self.statements:
            if s.name == name:
                return s
        raise KeyError(name)

    def __str__(self) -> str:
        return self.text()

    def text(self, dependences: bool = True) -> str:
        """The model as text: statements, domains, accesses and (``dependences``) the
        flow, anti and output dependences."""
        from polycomp.lowering.printer import expr_str
        out = [f"kernel {self.name}",
               f"  context: {self.context}",
               f"  live-in: {', '.join(b.name for b in self.live_in)}",
               f"  live-out: {', '.join(b.name for b in self.live_out)}"]
        for s in self.statements:
            idx = ", ".join(expr_str(i) for i in s.write_indices)
            out.append(f"  {s.name} ({s.kind}): {s.write.name}[{idx}] = {expr_str(s.value)}")
            out.append(f"    domain: {s.domain}")
            for a in s.accesses:
                out.append(f"    {a.kind:5s} {a.tag}: {a.relation}")
        if dependences:
            for name in ("flow", "anti", "output"):
                out.append(f"  {name} dependences: {getattr(self, name)}")
        return "\n".join(out)


class FrontEndKernel(Protocol):
    """What the driver compiles: a front end's kernel (a ``@tensor_expr``
    :class:`~polycomp.frontend.dsl.Kernel`, a C :class:`~polycomp.frontend.c_reader.CKernel`)
    with a name and a fresh model of itself."""
    @property
    def name(self) -> str: ...

    def polyhedral_model(self) -> PolyModel: ...


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
    """The dependences of :func:`_dataflow_and_no_source`."""
    return _dataflow_and_no_source(sink, must, may, kill, order_of, group_of)[0]


def array_dataflow(m: PolyModel, sink: isl.UnionMap,
                   must: isl.UnionMap) -> tuple[isl.UnionMap, isl.UnionMap]:
    """``(F, N)``: the last writer among the ``must`` sources of each instance of
    ``sink`` (``compute_flow``'s dependences) and the sink's instances with none
    (``get_may_no_source``), under ``m``'s program order, group by group over the
    top-level nests as :func:`compute_accesses_and_dependences` does (linear in the
    nests where each one's accesses are covered by the nests just before it)."""
    if not m.order_of:
        m.program_order(())                 # fills m.order_of
    return _dataflow_and_no_source(sink, must, None, None, m.order_of,
                                   _top_level_groups(m.initial_schedule))


def _dataflow_and_no_source(sink: isl.UnionMap, must: isl.UnionMap | None,
                            may: isl.UnionMap | None, kill: isl.UnionMap | None,
                            order_of: dict[str, list[isl.Map]],
                            group_of: dict[str, int] | None
                            ) -> tuple[isl.UnionMap, isl.UnionMap]:
    """isl's dataflow analysis (``compute_flow``'s may dependences, and the sink's
    instances without a must source or kill: ``get_may_no_source``) of ``sink`` against
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
        f = analyse(sink, {k: maps(a) for k, a in accesses.items() if a is not None})
        return f.get_may_dependence(), f.get_may_no_source()
    grouped = {k: _by_group(a, group_of) for k, a in accesses.items() if a is not None}
    with_sources = sorted({p for g in grouped.values() for p in g}, reverse=True)
    out, unsourced = [], []
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
        unsourced.append(remaining)
    no_source = isl.UnionMap.empty(space)
    for r in unsourced:
        no_source = no_source.union(r)
    return union_all(out, space), no_source


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
