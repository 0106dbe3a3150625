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


def compute_accesses_and_dependences(m: PolyModel) -> None:
    """Fill ``m``'s access relations and its flow, anti and output dependences.

    The dataflow analysis runs once per array: isl only relates a sink to sources that
    access the same array, so the union of the per-array results is the relation the
    analysis of the whole program gives, while one analysis over all statements compared
    every sink with every source (quadratic in the statements: 3 s of a 300-statement C
    kernel's compile)."""
    space = m.context.get_space()
    reads = isl.UnionMap.empty(space)
    writes = isl.UnionMap.empty(space)
    treads = isl.UnionMap.empty(space)
    twrites = isl.UnionMap.empty(space)
    per_array: dict[str, tuple[isl.UnionMap, isl.UnionMap]] = {}
    for s in m.statements:
        for a in s.accesses:
            um = isl.UnionMap.from_map(a.relation)
            tm = isl.UnionMap.from_map(_tag(a.relation, a.tag))
            array = a.relation.get_tuple_name(isl.dim_type.out)
            ar, aw = per_array.get(array, (isl.UnionMap.empty(space), isl.UnionMap.empty(space)))
            if a.kind == "read":
                reads, treads = reads.union(um), treads.union(tm)
                per_array[array] = (ar.union(um), aw)
            else:
                writes, twrites = writes.union(um), twrites.union(tm)
                per_array[array] = (ar, aw.union(um))
    m.reads, m.writes, m.tagged_reads, m.tagged_writes = reads, writes, treads, twrites
    # the program order as a flat map, restricted per array to the statements that
    # access it (the schedule tree's analysis costs time in the size of the whole tree)
    order = m.initial_schedule.get_map()
    flow = anti = out = isl.UnionMap.empty(space)
    for array in sorted(per_array):
        ar, aw = per_array[array]
        if aw.is_empty():
            continue  # no dependence without a write
        sched = order.intersect_domain(ar.domain().union(aw.domain()))
        if not ar.is_empty():
            flow = flow.union(isl.UnionAccessInfo.from_sink(ar).set_must_source(aw)
                              .set_schedule_map(sched).compute_flow().get_may_dependence())
            anti = anti.union(isl.UnionAccessInfo.from_sink(aw).set_may_source(ar)
                              .set_schedule_map(sched).compute_flow().get_may_dependence())
        out = out.union(isl.UnionAccessInfo.from_sink(aw).set_must_source(aw)
                        .set_schedule_map(sched).compute_flow().get_may_dependence())
    m.flow = flow.coalesce()
    m.anti = anti.coalesce()
    m.output = out.coalesce()
