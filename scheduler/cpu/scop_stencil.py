"""Pass ``scop-stencil``: time tiling of stencils in C SCoPs, with a wavefront of
tiles run in parallel (Pluto's diamond-free, skewed tiling).

In ``for t: for i: for j:`` stencils (jacobi-2d, heat-3d, fdtd-2d, seidel-2d) the time
loop carries dependences, so only the space loops of one time step can run in parallel
and every time step streams the arrays through memory once.  isl's scheduler (validity,
proximity and coincidence = the dependences) finds a skewed, fully permutable band
(jacobi-2d: ``[t, 2t + i, 2t + j]``); tiling it reuses each tile for several time steps,
and tiles on one anti-diagonal of the tile grid are independent.

Assumes: the program-order tree (``domain -> sequence`` of top-level filters, or one
subtree) after ``scop-gemm``; ``ctx.model.dependences`` holds every dependence.

A top-level subtree is a *stencil* when its statements share their outermost loop (the
time loop) and write no element whose subscripts use it, it has no ``cpu_parallel``
mark, all its
statements have at least two loops and the deepest exactly :data:`MAX_LOOPS` = 3 (time
and two space loops; a 1-D stencil's time step is too little work, and isl's scheduler
takes seconds on four loops), and isl's schedule of its statements (dependences restricted
to them) is one permutable band of ``n >= 3`` members (a leaf below) whose first member
is not coincident.  With ``f_0 .. f_{n-1}`` its members, tile sizes ``s`` (time, then
space: :data:`TILES`), ``T_d = floor(f_d / s_d)`` for ``d < n - 1``, the subtree becomes

    band[T_0 + T_1]                                 (the wavefront, sequential)
      mark cpu_parallel
        band[T_1, .., T_{n-2}]                      (tiles of one wavefront: parallel)
          band[f_0, .., f_{n-2}]                    (points of a tile)
            sequence                                (statements in textual order)
              filter S: band[f_{n-1}]               (innermost: unit stride, vectorised)

Legality (isl terms): the band is permutable, so every dependence between its
instances has non-negative distances on all ``f_d`` and thus on all ``T_d``; one whose
tiles differ has ``T_0 + T_1`` larger, or equal with ``T_0, T_1`` equal and a later
``T_2 ..``; within a tile the points keep isl's order except that, at equal ``f_0 ..
f_{n-2}``, the statements run one after the other instead of interleaved along
``f_{n-1}``.  The pass checks the whole result with
:func:`~polycomp.scheduler.common.tree.violated_dependences` and, for the mark, that
every dependence between instances with equal wavefront has equal ``T_1`` (isl's
coincidence, so the tiles of one wavefront may run in any order); if either fails the
subtree keeps the program order (with a note).
"""
from __future__ import annotations

import islpy as isl

from polycomp import ir
from polycomp.frontend.c_model import CScopModel
from polycomp.islutil import sets
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.scheduler.cpu import tree as T
from polycomp.scheduler.cpu.parallel import has_mark
from polycomp.scheduler.cpu.scop_tile import floor_member
from polycomp.state import CompileState

#: loops of the deepest statement: isl's scheduler takes about 10 s on heat-3d's four
#: (time and three space loops), so deeper stencils keep their per-time-step parallel
#: loops (``scop-parallel``)
MAX_LOOPS = 3

#: tile sizes of the tiled members (time first), by their count: the footprint of a
#: tile, (space + 2 * time) rows (planes) of every array, stays within about 1 MiB
#: for PolyBench's LARGE rows
TILES = {2: (8, 32)}


def isl_band(filt: isl.UnionSet, ctx: CompileState) -> tuple[list, isl.ScheduleNode] | None:
    """The members of the single permutable band isl's scheduler gives the statements
    of ``filt`` (and the band node), or None when it gives anything else."""
    m = ctx.model
    deps = m.dependences.intersect_domain(filt).intersect_range(filt)
    sc = isl.ScheduleConstraints.on_domain(filt).set_context(m.context)
    sc = sc.set_validity(deps).set_proximity(deps).set_coincidence(deps)
    node = sc.compute_schedule().get_root().child(0)
    if node.get_type() != isl.schedule_node_type.band or not node.band_get_permutable():
        return None
    if node.child(0).get_type() != isl.schedule_node_type.leaf:
        return None
    return T.members(node), node


def _coincident(deps: isl.UnionMap, outer: isl.UnionPwAff, member: isl.UnionPwAff) -> bool:
    w = isl.UnionMap.from_union_pw_aff(outer)
    m = isl.UnionMap.from_union_pw_aff(member)
    return deps.intersect(w.apply_range(w.reverse())).is_subset(m.apply_range(m.reverse()))


def stencil_tree(members: list, names: list[str], filt: isl.UnionSet):
    """The tiled wavefront subtree of the module docstring."""
    n = len(members)
    sizes = TILES[n - 1]
    tiles = [floor_member(m, s) for m, s in zip(members[:n - 1], sizes)]
    inner = members[n - 1]
    seq = T.Sequence([
        T.Filter(f, T.Band([inner.intersect_domain(f)], permutable=True))
        for f in (isl.UnionSet.from_set(s) for name in names
                  for s in sets(filt) if s.get_tuple_name() == name)])
    point = T.Band(members[:n - 1], seq, permutable=True)
    wave = tiles[0].add(tiles[1])
    par = T.Band(tiles[1:], point, permutable=True, coincident=[True] + [False] * (n - 3))
    return T.Band([wave], T.Mark(marks.CPU_PARALLEL, par)), wave, tiles[1]


def _time_loop_outside(ctx: CompileState, names: list[str]) -> bool:
    """Whether the statements share their outermost loop iterator (the time loop) and
    none of them writes an element whose subscripts use it (a time loop only
    repeats the sweep; LU's ``i`` indexes the rows it writes)."""
    stmts = [ctx.model.statement(n) for n in names]
    firsts = {s.iters[0].name for s in stmts if s.iters}
    if len(firsts) != 1 or any(not s.iters for s in stmts):
        return False
    return not any(s.iters[0] in ir.free_vars(ix) for s in stmts for ix in s.write_indices)


class ScopStencilPass(Pass):
    """See the module docstring."""
    name = "scop-stencil"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        if not isinstance(ctx.model, CScopModel) or not ctx.cpu_options.parallel:
            return schedule
        domain, tree = T.from_schedule(schedule)
        order = [s.name for s in ctx.model.statements]
        kids = T.stage_children(tree)
        deps = ctx.model.dependences
        changed = False
        for idx, child in enumerate(kids):
            if has_mark(child, marks.CPU_PARALLEL):
                continue
            filt = child.filter if isinstance(child, T.Filter) else domain
            ss = sets(filt)
            dims = [s.dim(isl.dim_type.set) for s in ss]
            if not dims or min(dims) < 2 or max(dims) != MAX_LOOPS:
                continue
            names = sorted((s.get_tuple_name() for s in ss), key=order.index)
            if not _time_loop_outside(ctx, names):
                continue
            got = isl_band(filt, ctx)
            if got is None:
                continue
            members, node = got
            if len(members) < 3 or len(members) - 1 not in TILES or \
                    node.band_member_get_coincident(0):
                continue
            sub, wave, t1 = stencil_tree(members, names, filt)
            local = deps.intersect_domain(filt).intersect_range(filt)
            what = f"{'+'.join(names)}: time-tiled {'x'.join(map(str, TILES[len(members) - 1]))}"
            if not _coincident(local, wave, t1):
                ctx.note(self.name, f"{what}: tiles of a wavefront not independent; kept")
                continue
            new_kid = T.Filter(child.filter, sub) if isinstance(child, T.Filter) else sub
            trial_kids = list(kids)
            trial_kids[idx] = new_kid
            trial_tree = T.Sequence(trial_kids, tree.kind) if isinstance(tree, T.Sequence) \
                else new_kid
            trial = T.to_schedule(domain, trial_tree)
            if not violated_dependences(trial, local).is_empty():
                ctx.note(self.name, f"{what}: would violate a dependence; program order kept")
                continue
            kids[idx] = new_kid
            if not isinstance(tree, T.Sequence):
                tree = new_kid
            changed = True
            ctx.note(self.name, f"{what} on isl's band {T.mupa_of(members)}, wavefront "
                                f"of tiles in parallel, innermost loop per statement")
        if not changed:
            return schedule
        return T.to_schedule(domain, tree)

