"""Pass ``dead-store-contract``: an array that the statements below one iteration of a
loop band write, read back in that iteration and that a later statement overwrites
before anything else reads it, lives in a per-thread buffer there; its stores to memory
are removed.

adi's column sweep (after ``scop-interleave``: ``for t: for floor(i/32) (parallel): for
j: for i in strip``) writes ``p[i][j]`` / ``q[i][j]``, its back-substitution reads them
in the same strip, and the row sweep of the same time step writes every one of them
again before any other read: the stores are dead, 16 MB per time step at LARGE
(docs/c_frontend.md, "adi: where its time goes").  With the contraction the column
sweep computes ``p`` / ``q`` in a buffer ``P[j][i - i0]`` of ``n x 32`` doubles per
thread and never stores them.

Assumes: a C SCoP tree of domain, band, sequence, set, filter and mark nodes (after
``scop-interleave``, before ``scop-parallel``); ``ctx.model`` with the statements'
accesses.  A subtree with a mark in it (another pass's rewrite) is left alone.

Guarantees: the tree is walked top down; at a band node ``B`` with prefix schedule
``P`` (the outer loops and ``B``'s members: one *iteration* is one value of ``P``),
let ``X`` be the instances below ``B`` and, for an array ``A``, ``X_A`` those of
``X`` that access ``A`` (statements with one write of ``A`` at most).  Under the
program order, isl's dataflow analysis of ``A`` (every write a must source) gives the
flow dependences ``F_A`` (a read's last writer), the reads without a writer ``N_A``
and, with the writes as sinks, the output dependences ``O_A`` (a write's last earlier
writer of its element).  ``A`` is contracted at ``B`` when

1. every dependence of ``F_A`` with a source or a sink in ``X_A`` has both in ``X_A``
   with equal ``P`` (what ``X_A`` writes is read in the same iteration only, and what
   it reads was written there), and ``N_A`` has no read of ``X_A``;
2. every write of ``X_A`` is the source of a dependence of ``O_A`` (its element is
   written again later; then the last write of every element is outside ``X_A``,
   so no value of ``X_A`` is live-out);
3. the footprint of ``X_A``'s accesses per iteration lies in a box of bounded size
   (:func:`~polycomp.scheduler.chain.local.decide_tiles_at`) with a constant extent
   in at least one dimension (a buffer smaller than the array).

Every array contracted at ``B`` gets a record (:class:`~polycomp.scheduler.chain.
local.LocalTile` restricted to the statements of ``X_A``, its dimensions of constant
extent innermost: the strip's row, so that the strip loop is unit-stride in the
buffer) in one ``cpu_local`` mark placed as ``B``'s child; ``B``'s subtree is then not
searched further.  The IR pass ``local-tiles`` redirects the accesses of ``A`` below
the mark (only those of ``X_A``) to the buffer, one per concurrent iteration of the
loops around it.  Then every read of ``X_A`` returns the value of its last writer
(the last write in the same iteration to the same box position, by (1)); every read
outside ``X_A`` has its last writer outside ``X_A`` or none (by (1)), whose value the
memory still holds since only stores of ``X_A`` were removed; and the final value of
every element is the one its last write, outside ``X_A`` (2), stored.  The schedule
map is unchanged and the same operations run on the same values: results are bitwise
those of the C order.
"""
from __future__ import annotations

import os

import islpy as isl

from polycomp import ir
from polycomp.frontend.c_model import CScopModel
from polycomp.islutil import restrict_equal, tuple_names
from polycomp.model import array_dataflow
from polycomp.scheduler.chain.local import LocalTile, decide_tiles_at, local_tiles
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.cpu.scop_split import visit_unmarked_nests
from polycomp.state import CompileState

_T = isl.schedule_node_type

ENV_SWITCH = "POLYCOMP_DEAD_STORE_CONTRACT"


def enabled(ctx: CompileState) -> bool:
    """Option ``dead_store_contract`` and ``POLYCOMP_DEAD_STORE_CONTRACT`` (``0``: off)."""
    return ctx.cpu_options.dead_store_contract and os.environ.get(ENV_SWITCH, "1") != "0"


class _ArrayFlow:
    """isl's dataflow analysis of one array under the program order (module docstring):
    ``output`` (O_A), then, when asked, ``flow`` (F_A) and ``no_source`` (N_A).

    Each relation is also kept split by statement name (:class:`_ByName`), so that
    :func:`dead_in_iteration` handles only the pieces of the statements below a band:
    with one array updated in ``N`` loop nests (c-inplace-N), looking at every piece at
    every band made the pass quadratic in ``N`` (400 nests: 14.8 CPU seconds where the
    rest of the compile takes under one)."""

    def __init__(self, model: CScopModel, array: str):
        self.model = model
        reads: list[isl.Map] = []
        writes: list[isl.Map] = []
        self.writers: set[str] = set()
        for s in model.statements:
            for a in s.accesses:
                if a.buffer.name == array:
                    (reads if a.kind == "read" else writes).append(a.relation)
            if any(a.kind != "read" and a.buffer.name == array for a in s.accesses):
                self.writers.add(s.name)
        space = model.context.get_space()
        self.reads = _union(reads, space)
        self.writes = _union(writes, space)
        #: the statements that access the array
        self.users = tuple_names(self.reads.domain()) | tuple_names(self.writes.domain())
        # a writer of A that writes nothing else (one write per C statement): the model's
        # output dependences among A's writers are A's
        only_a = all(sum(1 for a in s.accesses if a.kind != "read") == 1
                     for s in model.statements if s.name in self.writers)
        if only_a:
            w = _domains(model, self.writers)
            self.output = model.output.intersect_domain(w).intersect_range(w)
        else:
            self.output = self._analyse(self.writes)[0]
        self.writes_of = _ByName(self.writes, by_range=False)
        self.overwritten = _ByName(self.output, by_range=False)
        self._flow: tuple[_ByName, _ByName, _ByName] | None = None

    def _analyse(self, sink: isl.UnionMap) -> tuple[isl.UnionMap, isl.UnionMap]:
        """The dependences of ``sink`` on the array's writes and its instances without
        one, group by group over the top-level nests (:func:`polycomp.model.
        array_dataflow`: one analysis over every writer compared each sink with every
        source, quadratic in the nests of c-inplace-N)."""
        return array_dataflow(self.model, sink, self.writes)

    def flow(self) -> tuple[_ByName, _ByName, _ByName]:
        """``F_A`` by source, ``F_A`` by sink and ``N_A`` (as a map from the reads'
        instances), each split by statement name."""
        if self._flow is None:
            dep, no_source = self._analyse(self.reads)
            self._flow = (_ByName(dep, by_range=False), _ByName(dep, by_range=True),
                          _ByName(no_source, by_range=False))
        return self._flow


class _ByName:
    """A union map's pieces grouped by the tuple name of their domain (or range):
    ``of(names)`` is the union of the pieces of those statements, in time proportional
    to their number, not to the whole map's."""

    def __init__(self, umap: isl.UnionMap, by_range: bool):
        self.space = umap.get_space()
        self.pieces: dict[str, list[isl.Map]] = {}
        maps: list[isl.Map] = []
        umap.foreach_map(maps.append)
        for m in maps:
            name = m.get_tuple_name(isl.dim_type.out if by_range else isl.dim_type.in_)
            self.pieces.setdefault(name, []).append(m)

    def of(self, names: set[str]) -> isl.UnionMap:
        return _union([m for n in sorted(names) for m in self.pieces.get(n, ())],
                      self.space)


def _union(ms: list[isl.Map], space: isl.Space) -> isl.UnionMap:
    out = isl.UnionMap.empty(space)
    for m in ms:
        out = out.union(isl.UnionMap.from_map(m))
    return out


def dead_in_iteration(model: CScopModel, array: str, below: isl.UnionSet,
                      prefix: isl.UnionMap, df: _ArrayFlow | None = None) -> bool:
    """Conditions (1) and (2) of the module docstring for ``array`` and the instances
    ``below`` (``X``) with prefix schedule ``prefix`` (``P``); ``df``: the array's
    dataflow when already computed.  Only the relations' pieces of the statements in
    ``X_A`` are looked at: a dependence touching ``X_A`` has its source or sink there."""
    df = df if df is not None else _ArrayFlow(model, array)
    pieces: list[isl.Set] = []
    below.foreach_set(pieces.append)
    x_sets = [s for s in pieces if s.get_tuple_name() in df.users]
    if not x_sets:
        return False
    x = isl.UnionSet.empty(below.get_space())
    for piece in x_sets:
        x = x.union(isl.UnionSet.from_set(piece))
    if x.is_empty():
        return False
    names = {piece.get_tuple_name() for piece in x_sets}
    written = df.writes_of.of(names).intersect_domain(x).domain()
    if not written.is_subset(df.overwritten.of(names).domain()):   # O_A's sources
        return False                              # (2): a value of X_A may be live-out
    by_source, by_sink, no_source = df.flow()
    touching = by_source.of(names).intersect_domain(x).union(
        by_sink.of(names).intersect_range(x))
    inside = restrict_equal(touching.intersect_domain(x).intersect_range(x), prefix)
    if not touching.is_subset(inside):
        return False                              # (1): read outside, or another iteration
    return no_source.of(names).intersect_domain(x).is_empty()   # (1): nothing from before


def _domains(model: CScopModel, names: set[str]) -> isl.UnionSet:
    out = isl.UnionSet.empty(model.domain.get_space())
    for s in model.statements:
        if s.name in names:
            out = out.union(isl.UnionSet.from_set(s.domain))
    return out


def _single_writes(model: CScopModel, names: set[str], array: str) -> bool:
    return all(sum(1 for a in s.accesses if a.kind != "read" and a.buffer.name == array) <= 1
               for s in model.statements if s.name in names)


def _layout(sizes: tuple[ir.Expr, ...]) -> tuple[int, ...] | None:
    """The box's dimensions, those of constant extent innermost (None: no such one)."""
    const = [d for d, e in enumerate(sizes) if isinstance(e, ir.IntImm)]
    if not const:
        return None
    return tuple(d for d in range(len(sizes)) if d not in const) + tuple(const)


class _Contractor:
    def __init__(self, ctx: CompileState):
        self.ctx = ctx
        self.model: CScopModel = ctx.model      # type: ignore[assignment]
        self.done: list[str] = []
        self.arrays = {b.name: b for s in self.model.statements for a in s.accesses
                       for b in (a.buffer,)}
        self.flows: dict[str, _ArrayFlow] = {}    # per array, computed when first asked
        self.names = set(self.arrays) | {b.name for b in self.model.temporaries}

    def fresh(self, base: str) -> str:
        """``base``, or ``base_2``, ``base_3``, ...: a name no array or buffer has."""
        name, k = base, 1
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def flow(self, array: str) -> _ArrayFlow:
        if array not in self.flows:
            self.flows[array] = _ArrayFlow(self.model, array)
        return self.flows[array]

    def visit(self, node: isl.ScheduleNode) -> isl.ScheduleNode:
        if node.get_type() == _T.band and node.band_n_member() > 0:
            tiles = self._tiles(node)
            if tiles:
                n = len(local_tiles(self.ctx).records)
                local_tiles(self.ctx).records.append(tiles)
                arrays = ", ".join(f"{t.arrays[0].name} ({'+'.join(sorted(t.statements or ()))})"
                                   for t in tiles)
                self.done.append(f"{arrays} below the loop at depth "
                                 f"{node.get_schedule_depth() + node.band_n_member() - 1}: "
                                 f"a per-thread buffer, the stores removed")
                return node.child(0).insert_mark(marks.make(marks.CPU_LOCAL, n)).parent()
        for k in range(node.n_children()):
            node = self.visit(node.child(k)).parent()
        return node

    def _tiles(self, node: isl.ScheduleNode) -> list[LocalTile]:
        below = node.child(0)
        dom = below.get_domain()
        prefix = below.get_prefix_schedule_union_map().intersect_domain(dom)
        names = tuple_names(dom)
        written = sorted({a.buffer.name for s in self.model.statements if s.name in names
                          for a in s.accesses if a.kind != "read"})
        out = []
        for array in written:
            users = {s.name for s in self.model.statements if s.name in names
                     and any(a.buffer.name == array for a in s.accesses)}
            if not _single_writes(self.model, users, array):
                continue
            if not dead_in_iteration(self.model, array, dom, prefix, self.flow(array)):
                continue
            t = LocalTile((self.arrays[array],), array, statements=frozenset(users))
            if decide_tiles_at(below, [t], self.ctx) is not None:
                continue
            layout = _layout(t.sizes)
            if layout is None:
                continue
            t.layout = layout
            t.name = self.fresh(f"{array}_live")
            out.append(t)
        return out


def contract_tree(schedule: isl.Schedule, ctx: CompileState) -> tuple[isl.Schedule, list[str]]:
    """The schedule with a ``cpu_local`` mark wherever an array is contracted (module
    docstring), a line per mark."""
    c = _Contractor(ctx)
    return visit_unmarked_nests(schedule, c.visit), c.done


class ScopDeadStorePass(Pass):
    """See the module docstring."""
    name = "dead-store-contract"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        if not isinstance(ctx.model, CScopModel) or not enabled(ctx):
            return schedule
        out, done = contract_tree(schedule, ctx)
        for line in done:
            ctx.note(self.name, line)
        return out
