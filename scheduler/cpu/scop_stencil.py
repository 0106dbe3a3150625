"""Pass ``scop-stencil``: time tiling of stencils in C SCoPs, the skew read off the
dependence cone: Pluto's diamond tiles with concurrent start where the cone allows
them, else parallelogram tiles, with a wavefront of tiles in parallel.

In ``for t: { for i: for j: B = f(A); for i: for j: A = f(B); }`` stencils (jacobi-1d/2d,
heat-3d, fdtd-2d, seidel-2d) the time loop carries dependences, so only the space loops
of one time step can run in parallel and every time step streams the arrays through
memory once.  A skewed, fully permutable band over time and space can be tiled: a tile
then runs several time steps on data that stays in cache, and the tiles on one
anti-diagonal of the tile grid are independent.

The band is not searched by isl's scheduler (seconds on three loops, about 10 s on
heat-3d's four) but built from the dependence cone (:mod:`polycomp.scheduler.common.
cone`): the statements of the nest are embedded in one space ``[t, z_1 .. z_D]`` (``z``
= the written element's subscripts), the distance vectors of the dependences between
each pair of statements form isl sets, and each skew row ``y_d = z_d + Σ_{e<d}
c_{d,e}·(t, z)_e + o_d[S]`` takes the smallest non-negative coefficients (by sum) for
which statement offsets ``o_d`` exist (difference constraints, solved as longest
paths) that make every distance component ``>= 0`` (jacobi-2d: ``(t, 2t + i, 2t + j)``
and ``(t, 2t + i + 1, 2t + j + 1)`` for the second statement; fdtd-2d: ``t + i``,
``t + i + 1`` for ``hz``; seidel-2d: ``(t, t + i, 2t + i + j)``).

Assumes: the program-order tree (``domain -> sequence`` of top-level filters, or one
subtree) after ``scop-gemm``; ``ctx.model.dependences`` holds every dependence.

A top-level subtree is a *stencil* when its statements share their outermost loop (the
time loop), write no element whose subscripts use it, each has at least one more loop,
the deepest at most :data:`MAX_LOOPS` (time and three space loops), it has no
``cpu_parallel`` mark, and :func:`~polycomp.scheduler.common.cone.skew_band` finds the
rows.  With the band ``M = (t, y_1 .. y_D)``, tile sizes ``s`` (:func:`tile_sizes`:
from the cache capacity, or option ``stencil_tiles``), the tiled members are

* *diamonds* (option ``stencil_shape="diamond"``, the default, when ``D >=``
  :data:`PARALLEL_MIN_DIMS` and :func:`~polycomp.scheduler.common.cone.diamond_row`
  finds the mirror row ``h- = c·t - z_1 + o[S]`` of ``h+ = y_1``): ``T_0 = floor(h+ /
  s)``, ``T_1 = floor(h- / s)``, then ``floor(y_d / s_d)`` for ``2 <= d < D``.  ``h+ +
  h-`` is a multiple of ``t`` (up to statement offsets), so the tiles of the first
  wavefront ``T_0 + T_1`` lie side by side along ``z_1`` and start together
  (concurrent start); every later wavefront has as many tiles;
* *parallelograms* otherwise (a dependence outside the cone ``|Δz_1| <= c·Δt``:
  seidel-2d's in-place ``A[i-1][j]`` of the same step; a 1-D stencil, whose tiles run
  in sequence): ``T_d = floor(M_d / s_d)`` over ``t, y_1 .. y_{D-1}`` (``t`` and
  ``y_1`` when ``D = 1``), whose first wavefront is one tile (a pipelined start);

and the subtree becomes

    mark cpu_wavefront
      band[T_0 + T_1, T_1, .., T_last]              (wavefront: sequential; its tiles
                                                     T_1: parallel; T_2 ..: sequential)
        band[t, y_1 .., y_{D-1}]                    (points of a tile)
          band[z_D + o'[S]]  (separate)             (D >= 2, several statements: one
            sequence                                 innermost loop shared by them,
              filter S                               unit stride, vectorised)
        or, when sharing it would violate a dependence (and for 1-D stencils):
          sequence                                  (statements in textual order)
            filter S: band[y_D]                     (one innermost loop per statement)

Legality (isl terms): every distance component of ``(t, y)`` is ``>= 0`` (the rows'
search requires it of every dependence, statement offsets included), so every
dependence has non-negative distances on all members of ``M`` and on every ``T_d``;
one whose tiles differ has ``T_0 + T_1`` larger, or equal with ``T_0, T_1`` equal and a
later ``T_2 ..``; within a tile, at
equal ``(t, y_1 .., y_{D-1})`` the statements run in textual order, each along
``y_D``; or, with the shared innermost loop, along ``z_D + o'[S]`` (no time skew: at a
fixed ``t`` it only shifts the loop), in textual order at equal ``z_D + o'[S]``
(:func:`fused_rows`: ``o' = 0``, else the cone's ``o_D``): legal exactly when every
dependence between instances with equal ``(t, y_1 .., y_{D-1})`` has ``Δ(z_D + o') >
0``, or ``= 0`` and its source first in textual order -- not implied by the band,
so the result is checked and the per-statement loops are kept when it fails.  The
shared loop is built with isl's ``separate`` loop type, so the middle of a row (where
every statement runs) is one loop without guards, and the row's ends where a
statement's range stops are loops of their own (fdtd-2d: ``ey``, ``ex`` and ``hz``
together over ``1 <= j < ny - 1``).  One loop reads each element once per row: with
:mod:`polycomp.hw.cpu.forward_loads` the values stored and loaded earlier in an
iteration stay in registers (fdtd-2d: 8 vector loads per row position instead of 11).

With fewer than :data:`PARALLEL_MIN_DIMS` space dimensions the tiles run in
sequence: the band is ``[T_0, T_1, ..]`` (no wavefront; its ``T_1`` loop carries
dependences, so the mark makes no loop parallel).  The pass checks the whole result
with :func:`~polycomp.scheduler.common.tree.violated_dependences` and, when the tiles
run in parallel, that every dependence between instances with equal wavefront has
equal ``T_1`` (isl's coincidence); if either fails for diamonds the parallelograms are
tried, and if they fail too the subtree keeps the program order (each with a note).
On an AVX-512 or AVX2 target (:func:`~polycomp.lowering.lift.lifts_on`) with the
options ``vector_lift`` and ``vectorize`` (and no ``stencil_tiles``), a 1-D stencil's
instances at the sizes where its arrays fit L1 (:func:`lift_split`) are left in
program order with a note (:func:`lifted_layout`): the IR pass of
:mod:`polycomp.lowering.lift` runs their sweeps on lane-transposed copies of the
arrays, which needs the plain time loop; the subtree becomes
``sequence[filter small: the program order, filter big: the tiles]`` (the two filters
never hold instances of the same parameter values, so no dependence joins them).
A nest whose cone gives no skew (adi: its row sweep reads what the column sweep wrote
along the other axis, a distance as long as the extent) is left in order with a note.
The points of a diamond are those of the parallelogram band ``(t, y_1 .., y_D)``
restricted to the tile: the same point band, so the same legality argument holds
inside a tile, and ``h+, h- >= 0`` on every distance makes ``T_0, T_1`` non-negative
between tiles.  No
operation is reordered within an element's computation: results are bitwise those of
the C loop nest.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polycomp import dtypes, ir
from polycomp.frontend.c_model import CScopModel
from polycomp.islutil import sets
from polycomp.lowering.lift import lifts_on
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.cone import (
    MAX_COEFF,
    SkewRow,
    band_members,
    diamond_row,
    embedding,
    pair_distances,
    skew_band,
)
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.scheduler.cpu import tree as T
from polycomp.scheduler.cpu.parallel import has_mark
from polycomp.scheduler.cpu.scop_tile import floor_member
from polycomp.state import CompileState

#: loops of the deepest statement (time and three space loops: heat-3d)
MAX_LOOPS = 4

#: time steps of a parallelogram tile by the number of space dimensions ``D``
TIME_STEPS = {1: 64, 2: 8, 3: 4}

#: the extent (elements) assumed for the dimensions a tile spans whole when sizing it
#: from the cache: ``y_D`` for ``D >= 2`` (a tile's rows run whole, so they vectorise),
#: nothing for ``D = 1``.  Sizes are symbolic when a kernel is compiled; these are the
#: order of PolyBench's LARGE rows (jacobi-2d 1300, fdtd-2d 1200, seidel-2d 2000;
#: heat-3d 120).  Longer rows make a tile spill to L3, shorter ones use less cache.
ROW_ELEMS = {1: 1, 2: 1024, 3: 128}

#: size granule of the tiled space members by ``D`` (1-D: powers of two from it)
GRANULE = {1: 64, 2: 8, 3: 4}

#: largest tile size tried
MAX_TILE = 1024

#: fewest space dimensions for which the tiles of a wavefront run in parallel: a 1-D
#: stencil's whole run is little work (PolyBench's jacobi-1d at LARGE: 2M updates,
#: 0.3 ms), less than a fork/join per wavefront costs when the host is busy (0.27 s
#: measured for its 14 wavefronts), so its tiles run in sequence (the mark then makes
#: no loop parallel; time tiles still keep a tile's rows in cache), as parallelograms
#: (concurrent start gains nothing without parallel tiles)
PARALLEL_MIN_DIMS = 2

#: fewest space dimensions for which the statements of a tile's row share one
#: innermost loop (:func:`fused_rows`); 1-D stencils keep one loop per statement
FUSE_MIN_DIMS = 2


def lifted_layout(ctx: CompileState) -> bool:
    """Whether a 1-D stencil's time loop is left in order for the lifted layout of
    :mod:`polycomp.lowering.lift` (options ``vector_lift`` and ``vectorize`` on an
    AVX-512 or AVX2 target, :func:`lifts_on`; no ``stencil_tiles`` given): the lifted
    sweeps need no time tiles
    (the arrays of a sweep stay in L1 at PolyBench's sizes; larger ones stream from
    L2), and they reach what time tiles cannot: a sweep without lane shifts
    (docs/c_frontend.md, jacobi-1d).  A nest the lowering pass does not take (a
    radius above 1, say) then runs its time steps in order, which measured as fast as
    time tiles on one thread."""
    o = ctx.cpu_options
    return bool(o.vector_lift and o.vectorize and o.stencil_tiles is None
                and lifts_on(ctx.target))


def lift_split(filt: isl.UnionSet, cap: int) -> tuple[isl.UnionSet, isl.UnionSet]:
    """``(small, big)``: the instances of ``filt`` (a 1-D stencil, ``S[t, i]``) at the
    parameter values where no statement reaches ``i >= cap - 1`` (its arrays of at
    most ``cap`` elements, ``i <= n - 2``), and the others.  The two never exist for the
    same parameters, so no dependence joins them and either order of the two is legal."""
    reach = None
    for st in sets(filt):
        far = st.lower_bound_val(isl.dim_type.set, 1, isl.Val.int_from_si(st.get_ctx(),
                                                                           cap - 1))
        p = far.params()
        reach = p if reach is None else reach.union(p)
    assert reach is not None
    big = filt.intersect_params(reach)
    return filt.subtract(big), big


def cache_budget(dims: int, target) -> int:
    """Bytes a tile's footprint may take: half the L1 for a 1-D stencil (its tiles are
    short rows), one core's L2 otherwise."""
    return target.l1_bytes // 2 if dims == 1 else target.l2_bytes


def tile_sizes(band: StencilBand, target, elem_bytes: int,
               override: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """The tile sizes of ``band`` (for diamonds: the size ``s`` of ``h+`` and ``h-``,
    then ``y_2 .. y_{D-1}``; for parallelograms: :data:`TIME_STEPS`, then ``y_1 ..
    y_{D-1}``, or ``y_1`` when ``D = 1``): the largest multiple of :data:`GRANULE` (a
    power-of-two multiple in 1-D) for all tiled space members alike whose footprint
    fits :func:`cache_budget`.  The
    footprint is ``Π_d (w_d + 2) · ROW_ELEMS[D] · elem_bytes`` (``elem_bytes``: the
    bytes of one element of every array the nest accesses with ``D`` subscripts), ``w_d``
    the tile's extent along ``z_d``: ``s + c_d·h`` for a member whose row has time
    coefficient ``c_d`` and a tile of ``h`` time steps (a diamond: ``w_1 = s``, ``h = 2s
    / (c+ + c-)``).  ``override`` (option ``stencil_tiles``) wins when it has as many
    sizes as the band tiles."""
    dims = band.dims
    diamond = band.minus is not None
    want = max(dims - 1, 1) + (0 if diamond else 1)
    if override is not None and len(override) == want:
        return override
    budget = cache_budget(dims, target)
    slopes = [r.coeffs[0] for r in band.rows[1:]]
    g = GRANULE[dims]
    best = g
    # 1-D: powers of two (a row tile of 832 ran 20 % slower than 512 on jacobi-1d)
    cands = [g << k for k in range(5)] if dims == 1 else range(g, MAX_TILE + 1, g)
    for s in cands:
        if diamond:
            assert band.minus is not None
            h = 2 * s // (slopes[0] + band.minus.coeffs[0])
            widths = [s] + [s + slopes[d] * h for d in range(1, dims - 1)]
        else:
            h = TIME_STEPS[dims]
            widths = [s + slopes[d] * h for d in range(max(dims - 1, 1))]
        foot = ROW_ELEMS[dims] * elem_bytes
        for w in widths:
            foot *= w + 2
        if foot > budget:
            break
        best = s
    if diamond:
        return (best,) * (dims - 1 if dims > 1 else 1)
    return (TIME_STEPS[dims],) + (best,) * max(dims - 1, 1)


def _coincident(deps: isl.UnionMap, outer: isl.UnionPwAff, member: isl.UnionPwAff) -> bool:
    w = isl.UnionMap.from_union_pw_aff(outer)
    m = isl.UnionMap.from_union_pw_aff(member)
    return deps.intersect(w.apply_range(w.reverse())).is_subset(m.apply_range(m.reverse()))


@dataclass(frozen=True)
class StencilBand:
    """The skewed band of a stencil: ``members`` ``(t, y_1 .. y_D)`` with their
    :class:`~polycomp.scheduler.common.cone.SkewRow` ``rows`` over ``(t, z_1 .. z_D)``,
    and for diamond tiles the mirror row ``h- = c·t - z_1 + o[S]`` (``minus``, its
    member ``minus_member``; None when the cone does not allow one)."""
    members: list
    rows: list
    minus: SkewRow | None = None
    minus_member: isl.UnionPwAff | None = None
    fused: tuple = ()

    @property
    def dims(self) -> int:
        return len(self.members) - 1

    def parallelograms(self) -> StencilBand:
        """This band without its diamond row (parallelogram tiles)."""
        return StencilBand(self.members, self.rows, fused=self.fused)


def fused_rows(rows: list[SkewRow], dims: int) -> list[SkewRow]:
    """Candidate rows of one innermost loop shared by all statements of a tile's row
    (:func:`stencil_tree` with ``inner``): ``z_D + o[S]`` with no time skew (at a fixed
    ``t`` a skew only shifts the loop), first with no statement offsets, then with the
    offsets of the cone's last row ``y_D``."""
    unit = (0,) * dims + (1,)
    cands = [SkewRow(unit, ())]
    if rows[-1].offsets:
        cands.append(SkewRow(unit, rows[-1].offsets))
    return cands


def cone_band(stmts: list, deps: isl.UnionMap, diamond: bool = True) -> StencilBand | None:
    """The :class:`StencilBand` of the statements ``stmts`` (textual order, sharing the
    time loop) over the dependences ``deps`` among them (with the diamond row when
    ``diamond`` and the cone allows it); None when the cone gives no band."""
    space = embedding(stmts)
    if space is None:
        return None
    pairs = pair_distances(deps, space.embed)
    rows = skew_band(pairs, space.order, space.dims)
    if rows is None:
        return None
    members = band_members(space, rows)
    fused: tuple = ()
    if space.dims >= FUSE_MIN_DIMS and len(stmts) > 1:
        cands = fused_rows(rows, space.dims)
        fused = tuple(zip(cands, band_members(space, cands)))
    minus = diamond_row(pairs, space.order, rows) if diamond else None
    if minus is None:
        return StencilBand(members, rows, fused=fused)
    return StencilBand(members, rows, minus, band_members(space, [minus])[0], fused)


def stencil_tree(band: StencilBand, names: list[str], filt: isl.UnionSet, sizes: tuple,
                 parallel: bool = True, inner: isl.UnionPwAff | None = None,
                 jam: bool = False):
    """The tiled wavefront subtree of the module docstring (the tiles of a wavefront
    coincident when ``parallel``; with ``inner``, a member over all the statements, one
    innermost loop ``band[inner] -> sequence`` shared by them instead of one loop per
    statement, and with ``jam`` a ``cpu_stencil_points`` mark above the point band);
    returns it with the wavefront and the tile member ``T_1`` (for the coincidence
    check)."""
    members = band.members
    dims = band.dims
    if band.minus_member is not None:
        # diamonds: h+ = y_1, h- and y_2 .. y_{D-1}
        tiled = [members[1], band.minus_member] + members[2:max(dims, 2)]
        sizes = (sizes[0],) + tuple(sizes)
    else:
        ntiled = len(members) if dims == 1 else len(members) - 1
        tiled = members[:ntiled]
    tiles = [floor_member(m, s) for m, s in zip(tiled, sizes)]
    filters = [isl.UnionSet.from_set(s) for name in names
               for s in sets(filt) if s.get_tuple_name() == name]
    body: object
    if inner is not None:
        # separate: a loop per set of statements that run (the full middle apart from
        # the ends where a statement's range stops), so the middle has no guards
        body = T.Band([inner.intersect_domain(filt)],
                      T.Sequence([T.Filter(f) for f in filters]), permutable=True,
                      loop_types=[isl.ast_loop_type.separate])
    else:
        last = members[-1]
        body = T.Sequence([T.Filter(f, T.Band([last.intersect_domain(f)], permutable=True))
                           for f in filters])
    point: object = T.Band(members[:-1], body, permutable=True)
    if jam and inner is not None:
        # the point band is permutable (every distance >= 0 on (t, y)): the IR pass
        # stencil-jam may run steps t and t + 1 of a tile together (hw/cpu/jam.py)
        point = T.Mark(marks.CPU_STENCIL_POINTS, point)
    # one band: the wavefront and the tiles together (isl's AST generation projects
    # the floors of separate bands one by one, with a cost that grows with the tile
    # sizes); the mark makes the second member's loop the parallel one.  Tiles in
    # sequence need no wavefront: band [T_0, T_1, ..], whose T_1 loop carries the
    # dependences between the tiles of one time tile, so the mark makes no loop parallel
    wave = tiles[0].add(tiles[1]) if parallel else tiles[0]
    band_ = T.Band([wave] + tiles[1:], point, permutable=True,
                   coincident=[False, parallel] + [False] * (len(tiles) - 2))
    return T.Mark(marks.CPU_WAVEFRONT, band_), wave, tiles[1]


def _time_loop_outside(ctx: CompileState, names: list[str]) -> bool:
    """Whether the statements share their outermost loop iterator (the time loop) and
    none of them writes an element whose subscripts use it (a time loop only
    repeats the sweep; LU's ``i`` indexes the rows it writes)."""
    stmts = [ctx.model.statement(n) for n in names]
    firsts = {s.iters[0].name for s in stmts if s.iters}
    if len(firsts) != 1 or any(not s.iters for s in stmts):
        return False
    return not any(s.iters[0] in ir.free_vars(ix) for s in stmts for ix in s.write_indices)


def _elem_bytes(stmts: list, dims: int) -> int:
    """Bytes of one element of every array the statements access with ``dims``
    subscripts (the arrays a tile's footprint holds)."""
    arrays = {a.buffer.name: dtypes.itemsize(a.buffer.dtype)
              for s in stmts for a in s.accesses if len(a.indices) == dims}
    return sum(arrays.values()) or 8


def _row_text(d: int, row: SkewRow, lhs: str) -> str:
    """One skew row in words: ``y1 = z1 + 2t (S_1 + 1)`` style (``-z1`` for a
    negative diagonal)."""
    names = ["t"] + [f"z{e}" for e in range(1, len(row.coeffs))]
    diag = names[d] if row.coeffs[d] > 0 else f"-{names[d]}"
    terms = [(f"{c}{names[e]}" if c > 1 else names[e])
             for e, c in enumerate(row.coeffs[:d]) if c]
    text = " + ".join(terms + [diag] if row.coeffs[d] < 0 else [diag] + terms)
    shifts = ", ".join(f"{n} + {o}" for n, o in row.offsets)
    return f"{lhs} = {text.replace('+ -', '- ')}" + (f" ({shifts})" if shifts else "")


def _rows_text(rows: list) -> str:
    """The skew rows in words: ``y1 = z1 + t (S_1 + 1)`` style."""
    return ", ".join(_row_text(d, row, f"y{d}") for d, row in enumerate(rows[1:], start=1))


class ScopStencilPass(Pass):
    """See the module docstring."""
    name = "scop-stencil"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        opts = ctx.cpu_options
        if not isinstance(ctx.model, CScopModel) or not opts.parallel:
            return schedule
        domain, tree = T.from_schedule(schedule)
        order = [s.name for s in ctx.model.statements]
        kids = T.stage_children(tree)
        deps = ctx.model.dependences
        changed = False
        for idx, child in enumerate(kids):
            if has_mark(child, marks.CPU_PARALLEL) or has_mark(child, marks.CPU_WAVEFRONT):
                continue
            filt = child.filter if isinstance(child, T.Filter) else domain
            ss = sets(filt)
            dims = [s.dim(isl.dim_type.set) for s in ss]
            if not dims or min(dims) < 2 or max(dims) > MAX_LOOPS:
                continue
            names = sorted((s.get_tuple_name() for s in ss), key=order.index)
            if not _time_loop_outside(ctx, names):
                continue
            small = None
            if max(dims) == 2 and lifted_layout(ctx):
                stmts = [ctx.model.statement(n) for n in names]
                cap = ctx.target.l1_bytes // _elem_bytes(stmts, 1)
                small, big = lift_split(filt, cap)
                ctx.note(self.name, f"{'+'.join(names)}: 1-D stencil left in time-step "
                                    f"order up to {cap} elements (its arrays in L1) for "
                                    f"the lifted layout (lowering/lift.py: the sweeps run "
                                    f"on lane-transposed copies of the arrays; option "
                                    f"vector_lift=False time-tiles it)"
                                    + ("" if big.is_empty() else ", time-tiled beyond"))
                if big.is_empty():
                    continue
                if small.is_empty():
                    small = None
                else:
                    filt = big
            local = deps.intersect_domain(filt).intersect_range(filt)
            # diamonds where the tiles run in parallel (concurrent start)
            want_diamond = opts.stencil_shape == "diamond" and \
                max(dims) - 1 >= PARALLEL_MIN_DIMS
            got = cone_band([ctx.model.statement(n) for n in names], local, want_diamond)
            if got is None:
                ctx.note(self.name, f"{'+'.join(names)}: not time-tiled: the dependence "
                                    f"cone gives no skew (a distance along a space "
                                    f"dimension is not bounded by {MAX_COEFF} times the "
                                    f"time distance, e.g. adi's column sweep reading the "
                                    f"row sweep's rows); the time steps stay in order")
                continue
            band: StencilBand = got
            tries = [band]
            if band.minus is not None:        # the parallelograms if the diamonds fail
                tries.append(band.parallelograms())
            for cand in tries:
                why_not = ("" if not want_diamond or cand.minus is not None else
                           "diamonds not legal, " if band.minus is not None else
                           "no diamond: a dependence leaves the cone |dz1| <= c*dt (within "
                           "one time step along z1), ")
                new_kid = self._tiled(cand, child, names, filt, kids, idx, tree, domain,
                                      local, ctx, why_not, small)
                if new_kid is not None:
                    kids[idx] = new_kid
                    if not isinstance(tree, T.Sequence):
                        tree = new_kid
                    changed = True
                    break
        if not changed:
            return schedule
        return T.to_schedule(domain, tree)

    def _tiled(self, band: StencilBand, child, names: list[str], filt: isl.UnionSet,
               kids: list, idx: int, tree, domain, local: isl.UnionMap, ctx: CompileState,
               why_not: str, small: isl.UnionSet | None = None):
        """The tiled subtree replacing ``child`` for ``band``, or None (with a note) when
        the tiles of a wavefront are not independent or a dependence is violated.  With
        ``small`` (the instances of the sizes the lifted layout takes, ``filt`` the
        others), ``sequence[small: child's subtree in program order, filt: the tiles]``."""
        dims = band.dims
        diamond = band.minus is not None
        stmts = [ctx.model.statement(n) for n in names]
        sizes = tile_sizes(band, ctx.target, _elem_bytes(stmts, dims),
                           ctx.cpu_options.stencil_tiles)
        parallel = dims >= PARALLEL_MIN_DIMS
        kind = "diamonds" if diamond else "parallelograms"
        shown = (sizes[0],) + tuple(sizes) if diamond else sizes
        what = f"{'+'.join(names)}: time-tiled {'x'.join(map(str, shown))} {kind}"
        # one innermost loop over the statements where legal, else one per statement
        chosen = None
        for inner in list(band.fused) + [None]:
            sub, wave, t1 = stencil_tree(band, names, filt, sizes, parallel,
                                         None if inner is None else inner[1],
                                         jam=ctx.cpu_options.stencil_jam and dims == 2)
            if inner is None and parallel and not _coincident(local, wave, t1):
                ctx.note(self.name, f"{what}: tiles of a wavefront not independent; "
                                    f"not used")
                return None
            if small is not None:
                plain = child.child if isinstance(child, T.Filter) else child
                sub = T.Sequence([T.Filter(small, plain), T.Filter(filt, sub)])
            new_kid = T.Filter(child.filter, sub) if isinstance(child, T.Filter) else sub
            trial_kids = list(kids)
            trial_kids[idx] = new_kid
            trial_tree = T.Sequence(trial_kids, tree.kind) \
                if isinstance(tree, T.Sequence) else new_kid
            trial = T.to_schedule(domain, trial_tree)
            if violated_dependences(trial, local).is_empty():
                chosen = inner
                break
            if inner is None:
                ctx.note(self.name, f"{what}: would violate a dependence; not used")
                return None
        if chosen is None:
            innermost = ("innermost loop per statement" if not band.fused else
                         "innermost loop per statement (one shared loop would violate a "
                         "dependence)")
        else:
            innermost = "one innermost loop shared by the statements (" + \
                _row_text(dims, chosen[0], f"z{dims}'") + ")"
        how = "wavefront of tiles in parallel" if parallel else "tiles in sequence"
        if diamond:
            assert band.minus is not None
            shape = f"{_row_text(1, band.minus, 'h-')}, concurrent start, "
        else:
            shape = f"{why_not}pipelined start, "
        sized = ("option stencil_tiles" if ctx.cpu_options.stencil_tiles == sizes else
                 f"sized for {cache_budget(band.dims, ctx.target) // 1024} KiB of cache"
                 + (f" with rows of {ROW_ELEMS[band.dims]}" if band.dims > 1 else ""))
        ctx.note(self.name, f"{what}, skew from the dependence cone "
                            f"({_rows_text(band.rows)}), {shape}{how}, "
                            f"{innermost}, {sized}")
        return new_kid
