"""Tile-local temporaries: arrays private to a subtree stored in a per-thread tile buffer.

A fused chain produces its intermediate (``T``, the elementwise stages' arrays, the
softmax's exponentials) one tile at a time and consumes each tile inside the same
iteration of the enclosing loops; the row statistics of an online softmax likewise live
for one row block.  The schedule says so: every access of such an array by the
statements below a mark node ``cpu_local:<n>`` stays inside one box per iteration of
the loops above the mark.  This module computes that box with the promotion engine's
footprints and records it as a :class:`LocalTile` (typed compile state,
:class:`LocalTiles`, indexed by the mark's ``<n>``); the CPU IR pass
:mod:`polycomp.hw.cpu.local_tile` gives it a box-sized buffer per concurrent iteration
and redirects every load and store of the arrays to it.

Assumes: the arrays of one record are indexed alike (one shape) and may share storage
(see :class:`LocalTile`: the passes that place a record guarantee it).  Checked by
:func:`decide_local_tiles`: every access of each array of a record is made by a
statement instance below the mark (so nothing outside the subtree reads a value the
local buffer no longer holds), and the footprint is bounded.  A record restricted to
some ``statements`` (:class:`LocalTile`) takes the footprint of their instances below
the mark only; the pass that places it proves that the other accesses need no value
of the buffer.

Guarantees: the record's ``origin`` is the box offset, a piecewise affine function of
the prefix schedule at the mark (``c_0 .. c_{d-1}``, the AST's loop iterators), the
per-dimension minimum of the record's arrays' footprints (their union), and ``sizes``
the box's extents, the largest
extent over all prefix points (constants, or functions of the kernel's symbols when a
dimension's extent is one: a tile over all input channels ``C``); an access ``A[x]``
below the mark touches ``origin(c) <= x < origin(c) + sizes``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from polycomp import ir
from polycomp.scheduler.common import marks
from polycomp.scheduler.promotion.footprint import footprint, prefix_space_map
from polycomp.state import CompileState

__all__ = ["LocalTile", "LocalTiles", "local_tiles", "local_mark", "decide_local_tiles",
           "decide_tiles_at", "sharing_is_legal"]


@dataclass(eq=False)
class LocalTile:
    """Arrays ``arrays`` (temporaries, in program order) stored in one per-thread buffer
    of ``sizes`` below the mark ``cpu_local:<n>``.  Several arrays share the buffer when
    each is produced from the previous one at the same point and nothing reads the
    previous one afterwards (a chain's ``T -> Sc -> P``: the statement that writes the
    next array reads the element it overwrites first, and no later statement reads it).
    ``origin`` (``{ [c_0..c_{d-1}] -> [o_0..] }``, set by :func:`decide_local_tiles`) is
    the box offset on the prefix schedule at the mark.

    ``statements`` (None: every statement) restricts the record to the accesses of those
    statements' instances below the mark: the arrays stay in memory for every other
    access, and only the instances below the mark use the buffer (dead-store contraction,
    :mod:`polycomp.scheduler.cpu.scop_dead_store`, guarantees that nothing else reads what
    they write and that they read only what they wrote in the same iteration).
    ``layout`` (None: the array's order) lists the array's dimensions in the buffer's
    order, outermost first."""
    arrays: tuple[ir.Buffer, ...]
    name: str
    origin: isl.MultiPwAff | None = None
    sizes: tuple[ir.Expr, ...] = ()
    statements: frozenset[str] | None = None
    layout: tuple[int, ...] | None = None

    @property
    def dtype(self) -> str:
        return self.arrays[0].dtype


@dataclass(eq=False)
class LocalTiles:
    """The tile-local records of a compile (``state.slot(LocalTiles)``); the mark
    ``cpu_local:<n>`` names ``records[n]``, a list of the records realised at that
    mark."""
    records: list[list[LocalTile]] = field(default_factory=list)


def local_tiles(state: CompileState) -> LocalTiles:
    return state.slot(LocalTiles)


def local_mark(state: CompileState, tiles: list[LocalTile]) -> str:
    """Record ``tiles`` (to be realised at one mark) and return the mark's name."""
    recs = local_tiles(state).records
    recs.append(tiles)
    return marks.make(marks.CPU_LOCAL, len(recs) - 1).get_name()


def decide_local_tiles(schedule: isl.Schedule, state: CompileState, model_statements) -> str | None:
    """Fill the ``origin``/``sizes`` of every record of the ``cpu_local`` marks in
    ``schedule`` from the footprints of ``model_statements``' accesses below each mark;
    None, or why a record cannot be realised (an access outside the subtree, an
    unbounded box, boxes of different sizes in one record)."""
    why: list[str] = []

    def visit(node: isl.ScheduleNode) -> bool:
        if marks.is_kind(node, marks.CPU_LOCAL):
            n = marks.index_of(node, marks.CPU_LOCAL)
            below = node.child(0)
            err = _decide(below, local_tiles(state).records[n], model_statements,
                          state.model.params)
            if err:
                why.append(err)
        return True
    schedule.get_root().foreach_descendant_top_down(visit)
    return "; ".join(why) or None


def decide_tiles_at(node: isl.ScheduleNode, tiles: list[LocalTile], state: CompileState
                    ) -> str | None:
    """:func:`decide_local_tiles` for the records ``tiles`` of one mark whose child is
    ``node`` (the mark not placed yet): None, or why they cannot be realised."""
    return _decide(node, tiles, state.model.statements, state.model.params)


def _decide(node: isl.ScheduleNode, tiles: list[LocalTile], statements, params) -> str | None:
    domain = node.get_domain()
    prefix = prefix_space_map(node)
    for t in tiles:
        union = None          # the arrays' footprints as one array's (they share storage)
        for buf in t.arrays:
            acc = isl.UnionMap.empty(domain.get_space())
            for s in statements:
                if t.statements is not None and s.name not in t.statements:
                    continue
                for a in s.accesses:
                    if a.buffer.name == buf.name:
                        acc = acc.union(isl.UnionMap.from_map(a.relation))
            if t.statements is not None:       # only their instances below the mark
                acc = acc.intersect_domain(domain)
            elif not acc.domain().is_subset(domain):
                return f"{buf.name} is accessed outside the local scope"
            f = footprint(prefix, acc)
            if f is None:
                return f"{buf.name} is not accessed in the local scope"
            f = f.set_tuple_name(isl.dim_type.out, t.arrays[0].name)
            if union is not None and not union.get_space().is_equal(f.get_space()):
                return f"{buf.name} is not indexed as {t.arrays[0].name}"
            union = f if union is None else union.union(f).coalesce()
        assert union is not None
        box = _box(union, params)
        if box is None:
            return f"{t.arrays[0].name}'s footprint is unbounded"
        t.origin, t.sizes = box
    return None


def _box(f: isl.Map, params) -> tuple[isl.MultiPwAff, tuple[ir.Expr, ...]] | None:
    """The box of the footprint ``f = { [p] -> A[a] }``: the per-dimension minimum of
    ``a`` (a function of ``p``) and the largest extent over all ``p``: a constant when
    it is bounded over all symbol values too (a tile of ``TM`` rows), else a function of
    the symbols (as IR: all ``C`` input channels); None when an extent is unbounded."""
    from polycomp.lowering.ast_to_ir import pw_aff_to_ir
    from polycomp.lowering.simplify import simplify
    ctx = f.get_ctx()
    n = f.dim(isl.dim_type.out)
    lst = isl.PwAffList.alloc(ctx, n)
    sizes = []
    for d in range(n):
        lo, hi = f.dim_min(d), f.dim_max(d)
        ext = hi.sub(lo).add_constant_val(isl.Val.one(ctx))
        v = ext.max_val()                  # over the prefix points and the symbols
        if v.is_int():
            sizes.append(ir.IntImm(int(v.to_python())))
        else:                              # a function of the symbols
            rng = isl.Map.from_pw_aff(ext).range()
            if not rng.is_bounded():
                return None
            mx = rng.dim_max(0).coalesce()
            sizes.append(simplify(pw_aff_to_ir(mx, rng.params(), tuple(params))))
        lst = lst.add(lo)
    space = isl.Space.map_from_domain_and_range(
        f.domain().get_space(), isl.Space.set_alloc(ctx, 0, n).align_params(f.get_space()))
    return isl.MultiPwAff.from_pw_aff_list(space, lst), tuple(sizes)


def sharing_is_legal(schedule: isl.Schedule, state: CompileState, statements,
                     reference: isl.Schedule
                     ) -> bool:
    """Whether ``schedule`` keeps every dependence of ``statements`` once the arrays of
    each record of ``state`` are one array (the storage they share): the dependences of
    the program with those arrays renamed, as isl derives them under its ``reference``
    order (in which the renamed program computes the same values: each array of a
    record is produced from the previous one at the same point, which nothing reads
    afterwards)."""
    import dataclasses

    from polycomp.scheduler.chain.statements import program_model
    from polycomp.scheduler.common.tree import is_legal
    rename = {a.name: t.arrays[0].name for rec in local_tiles(state).records for t in rec
              for a in t.arrays[1:]}
    if not rename:
        return True

    shared = set(rename) | set(rename.values())

    def renamed(m: isl.Map) -> isl.Map:
        name = m.get_tuple_name(isl.dim_type.out)
        return m.set_tuple_name(isl.dim_type.out, rename[name]) if name in rename else m
    # only the shared arrays' dependences change (isl's dataflow analysis is per array)
    stmts = [dataclasses.replace(s, accesses=[dataclasses.replace(
        a, relation=renamed(a.relation),
        index_relation=None if a.index_relation is None else renamed(a.index_relation))
        for a in s.accesses if a.buffer.name in shared]) for s in statements]
    stmts = [s for s in stmts if s.accesses]
    return is_legal(schedule, program_model(state.model, stmts, reference).dependences)
