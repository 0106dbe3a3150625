"""Pass ``scop-symm``: PolyBench's symm split into three phases, the two triangular
products on the micro-kernel (operands read in place) in row steps shaped like
:mod:`.scop_trmm`'s.

PolyBench's symm (``A`` symmetric, its lower triangle stored; the scalar ``temp2``
expanded to ``acc[i][j]`` by the front end) runs per ``(i, j)``:

    acc[i][j] = 0;                                                    (Z)
    for k < i: { C[k][j] += alpha * B[i][j] * A[i][k];                 (M, the mirror)
                 acc[i][j] += B[k][j] * A[i][k]; }                     (P)
    C[i][j] = beta * C[i][j] + alpha * B[i][j] * A[i][i] + alpha * acc[i][j];   (F)

Matching (:func:`match_symm`), in one top-level child of the program-order tree: exactly
two updates of :func:`.scop_trmm.match_update`'s form, ``P`` reducing over the rows
*above* its output row (its domain has ``red < row``) and ``M`` over the rows *below*
(``red > row``); every other statement writes a row at a plain iterator; those before
``P`` in the text (``Z``) join phase 1, the others (``F``) are phase 2, which runs at
the end of each of phase 1's row steps (the step's rows of ``acc`` are complete there,
and they and ``B``'s rows are still in cache; no update of phase 3 writes a row before
its ``F`` in the C order, so ``F`` reads the input ``C``).

Schedule, with ``B`` the block of rows (:data:`BLOCK`, 120) and ``sub`` the
child's subtree (the C order, restricted by the filters): one band of row steps for
both products, ``P``'s step the block of its output row, ``M``'s the block of its
*reduction* row (:func:`_red_step`; the mirror runs right-looking):

    band[q]:  Z, P, F -> floor(row/B);  M -> floor(red/B)
      sequence
        filter Z + P + F:  sequence                                      (phase 1)
                             filter Z:   sub
                             filter P1:  scop-gemm subtree of P over P1  (k < B*q)
                             filter PR:  register tiles                  (the block)
                             filter PT:  band[i, k, j]                   (its triangles)
                             filter F:   sub                             (phase 2)
        filter M:          sequence                                      (phase 3)
                             filter MT:  band[i, k, j]                   (the block's triangles)
                             filter MR:  register tiles                  (the block)
                             filter M3:  scop-gemm subtree of M over M3  (rows < B*q)

On AVX2 in float64 phase 2's ``sub`` sits below ``mark cpu_prefetch_rows``
(:func:`prefetch_phase2`, ``POLYCOMP_SYMM_PREFETCH=0`` off): the IR pass
``prefetch-marked-rows`` makes its vector loop prefetch the ``C`` it stores two rows
on (the step's rows of ``C`` are first touched there).

``M3 = { M : red >= B*floor(row/B) + B }`` (:mod:`.scop_trmm`'s trailing part); at
step ``q`` it holds the rank-``B`` update of every row above the block by the block's
rows (``red`` in ``[B q, B q + B)``), one GEMM per step (``_rectangular_k``, ``step="k"``),
its tiles counted from row 0 in one ``i`` tile of up to :data:`MIRROR_MC` rows
(``shared_packs``: several such tiles, rows beyond it, run in turn, each refilling
the one copy), so its ``Y = alpha * B[red][j]`` block (``B x NR``) is copied once
per step and panel, right after phase 1 of the same step read those rows of ``B``
(before: the rows below each step, copied again at every step above them: a copy
per step and ``k`` tile).  Phase 3 of step ``q`` writes only rows ``< B q + B`` of
``C``, whose phase-2 statements ran at steps ``<= q``, and no later step of phase 1
reads them, so the steps of the two phases interleave (each block's ``C`` rows and
``B`` rows still in cache between its phase 1 and its mirror).

When ``acc`` is a temporary of the kernel (PolyBench's expanded ``temp2``), the step
band's child is ``mark cpu_local:<n>`` (:func:`_step_local`): every access of ``acc``
of a step (``Z``, ``P``, ``F`` of its rows) lies in that step and panel, so ``acc`` is
stored in one ``B x NR`` block per thread (the box
:func:`polycomp.scheduler.chain.local.decide_local_tiles` computes; with one thread
``B x n``), not in an ``m x n`` array.

The diagonal block (:func:`_diagonal`) is split at the register rows: ``PR``/``MR``
hold the reductions outside a tile's own ``MR`` rows, the register tiles
``band[floor(row/MR), floor(col/NR)] -> mark cpu_microkernel -> band[red] ->
band[row mod MR, col mod NR]`` (every row of a tile has the same reduction range);
``PT``/``MT`` the ``MR x MR`` triangles at the diagonal.  The register tiles read
their operands in place (``pack_x`` off), except ``M3``'s ``Y = alpha * B[i][j]``,
packed as above, the copy holding ``alpha * B`` (the same rounded products,
:mod:`polycomp.hw.cpu.pack`), so the micro-kernel does no vector multiply per
reduction step (a packed ``B`` for ``P1``, without a factor, measured slower on
AVX-512), and on AVX2 in float64 ``P1``'s ``Y = B[k][j]`` (:func:`pack_phase1_b`,
``POLYCOMP_SYMM_PACK_B=0`` off: ``B`` read in place straddles cache lines).
``P1``'s subtree counts its tiles from the step's first row and, with threads, the
panel's first column (:func:`_origins`); ``M3``'s from row 0 and the panel.

With several threads the whole band sits below ``mark cpu_parallel ->
band[floor(j/W)]`` (``W`` = :func:`panel_columns`, at least 32 columns of whole
register panels: ``NR`` on AVX-512, ``4 NR`` for AVX2's fp64 ``6 x 8`` block; the
products' ``j`` tile is the panel; :func:`column_panels`: every statement touches column ``j`` of
its arrays only, so the panels are independent, checked on the dependences; one
fork/join serves the call, OpenMP's static schedule gives each thread a contiguous
range of whole panels, and isl prints the body once), and the triangles of ``P`` and
``M`` run in the order ``band[row, red, col]`` (:func:`_row_red_col`: the column
innermost, unit stride), not the C order.

``P1 = { P : k < B*floor(i/B) }`` (the rectangle left of the block, ``k`` tiles from
0).  Each element receives its updates in increasing reduction index (``acc``, at
its step: the rectangle, then the block's register tiles, then its triangles;
``C``, from its step on: at its own step the triangles then the register tiles, then
one rank-``B`` update per later step, steps in increasing order; inside each part in
increasing ``k`` for ``P``, increasing ``i`` for ``M``), so the sums keep the C order
(the schedule interpreted is bitwise ``gcc -O0``; the built micro-kernels add each
tile's partial sum of a ``k`` range to ``C`` once, as in every ``scop-gemm``
product).

Legality (isl terms): :func:`polycomp.scheduler.common.tree.violated_dependences` on the
whole tree against every dependence of the child, every dependence within one column
panel for the parallel band (:func:`_within_panels`; else no parallel panel loop),
plus (a) one rectangular reduction range per step (:mod:`.scop_trmm`'s check for
``P1``, steps of the output row; with ``step="k"`` for ``M3``, steps of the
reduction row) and (b) :mod:`.scop_trmm`'s check that no product of a step writes
what its operands read (which packing would need), for both products.  When a check
fails the child keeps its schedule, with a note.

Assumes: the program-order tree, ``ctx.model`` a C SCoP model, a target with vector
registers; runs after ``scop-trmm`` (which takes no symm: two updates; the phases it would see
as top-level children are not its to block again) and before ``scop-gemm``.

Guarantees: the tree above for a matched child whose checks pass (``explain`` notes
it), the child unchanged otherwise.
"""
from __future__ import annotations

import dataclasses
import os

import islpy as isl

from polycomp import ir
from polycomp.model import Statement
from polycomp.scheduler.chain.local import LocalTile, decide_local_tiles, local_mark, local_tiles
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.cpu import scop_trmm
from polycomp.scheduler.cpu import tree as T
from polycomp.scheduler.cpu.backbone_tile import (
    Blocking,
    choose_blocking,
    dim_aff,
    floor_div_aff,
    mod_aff,
    to_upa,
)
from polycomp.scheduler.cpu.scop_gemm import ScopGemm, _separable, scop_gemm_tree
from polycomp.scheduler.cpu.scop_stages import ScopStages
from polycomp.scheduler.cpu.scop_trmm import (
    _names,
    _packs_safe,
    _read,
    _rectangular_k,
    _step,
    _trailing,
    _union,
    match_update,
)
from polycomp.scheduler.promotion.record import promotion_state
from polycomp.state import CompileState


def _direction(g: ScopGemm) -> str | None:
    """``"above"`` when every instance reduces over rows before its output row,
    ``"below"`` when after, else None."""
    s = g.update
    d = _names(s)
    i, k = d[g.upd_pos["i"]], d[g.upd_pos["k"]]
    for name, cond in (("above", f"{k} >= {i}"), ("below", f"{k} <= {i}")):
        bad = _read(s, f"{{ {s.name}[{', '.join(d)}] : {cond} }}")
        assert isinstance(bad, isl.Set)
        if bad.intersect(s.domain).is_empty():
            return name
    return None


def match_symm(statements: list[Statement]) \
        -> tuple[ScopGemm, ScopGemm, list, list] | str:
    """``(P, M, phase-1 statements besides P, phase-2 statements)`` of one top-level
    child (textual order), or why none."""
    ups = [(n, g) for n, g in enumerate(match_update(s) for s in statements)
           if g is not None]
    if len(ups) != 2:
        return "not two updates W[i][j] += X * Y"
    dirs = {}
    for n, g in ups:
        if _separable(g.update.domain, g.upd_pos["k"]):
            return "a reduction range does not depend on the row (scop-gemm's GEMM)"
        dirs[_direction(g)] = (n, g)
    if set(dirs) != {"above", "below"}:
        return "not one product over the rows above and one over the rows below"
    for s in statements:
        if not s.write_indices or scop_trmm._plain(s.write_indices[0],
                                                   tuple(s.iters)) is None:
            return f"{s.name} does not write a row at a plain iterator"
    (np_, p), (nm, m) = dirs["above"], dirs["below"]
    rest = [s for n, s in enumerate(statements) if n not in (np_, nm)]
    first = [s for s in rest if statements.index(s) < np_]
    return p, m, first, [s for s in rest if s not in first]


#: rows of a step (rounded down to a multiple of ``MR``, at most ``KC``): the
#: rectangles' ``k`` tiles, and the diagonal blocks, whose products run as register
#: tiles too (:func:`_diagonal`); at LARGE 120 measured 0-12 % below 60 in on-CPU time
#: over several noisy runs (fewer ``C`` tile reloads per product), 96 and 156 as 120
BLOCK = 120

def column_panels(statements: list[Statement], NR: int, threads: int) \
        -> isl.UnionPwAff | None:
    """``floor(j/NR)`` over ``statements`` (``j``: each one's last written subscript, a
    plain iterator), the column panel of every instance; or None (one thread, a
    statement without such a subscript).  Every statement of symm touches only column
    ``j`` of ``C``, ``B`` and ``acc`` (``A`` is read-only), so the panels are
    independent (the pass checks it on the dependences): one parallel loop over the
    panels around all three phases (one fork/join per call instead of one per step,
    ``k`` tile and ``j`` tile), printed ``omp for schedule(static)``, which gives each
    thread one contiguous range of whole panels, their counts within one of each other
    (at PolyBench's LARGE, 1200 columns in 38 panels: 608 / 592 columns).  A panel's
    phases sweep all rows with its ``B``, ``acc`` and ``C`` columns (``m x NR``
    elements each, 256 KiB at LARGE) staying in L2.  (Before: a band ``[thread(j)]``
    with the threads' range bounds piecewise in ``n``, for which isl printed the whole
    body once per thread, and column blocks of six panels inside it.)"""
    if threads <= 1:
        return None
    parts = []
    for s in statements:
        iters = tuple(s.iters)
        j = scop_trmm._plain(s.write_indices[-1], iters) if s.write_indices else None
        if j is None:
            return None
        parts.append(isl.UnionPwAff.from_pw_aff(isl.PwAff.from_aff(
            floor_div_aff(dim_aff(s.domain.get_space(), iters.index(j)), NR))))
    return T.union_members(parts) if parts else None


def _within_panels(deps: isl.UnionMap, panels: isl.UnionPwAff) -> bool:
    """Whether every dependence of ``deps`` joins two instances of the same panel
    (``panels``' value equal at source and sink)."""
    m = isl.UnionMap.from_union_pw_aff(panels)
    return deps.is_subset(m.apply_range(m.reverse()))


def _row_red_col(g: ScopGemm) -> T.Band:
    """The diagonal block's order ``band[row, red, col]`` for the update of ``g``: the
    column ``j`` innermost, unit stride in ``W``, ``Y`` and the mirror's ``C[k][j]``
    (the C order ``i, j, k`` runs the reduction innermost, a strided dot product or
    scatter).  Every element still gets its updates in increasing reduction (``P``)
    or row (``M``) index."""
    sp = g.update.domain.get_space()
    p = g.upd_pos
    return T.Band([to_upa(dim_aff(sp, p[n])) for n in ("i", "k", "j")])


def _diagonal(g: ScopGemm, block: isl.UnionSet, b: Blocking, leading: bool) -> list:
    """The filters of a diagonal block (``block``: the update's instances there) in
    their order: ``D_rect``, the reductions outside the register tile's own rows
    (``red < MR*floor(row/MR)`` for ``P``, ``red >= MR*floor(row/MR) + MR`` for
    ``M``), as register tiles ``band[floor(row/MR), floor(col/NR)] -> mark
    cpu_microkernel -> band[red] -> band[row mod MR, col mod NR]`` on the operands as
    they lie (every row of a tile has the same reduction range, ``[B*step,
    MR*floor(row/MR))`` for ``P``); ``D_tri``, the ``MR x MR`` triangles left at the
    diagonal, in :func:`_row_red_col`'s order.  ``P`` runs ``D_rect`` first (smaller
    reduction index), ``M`` ``D_tri`` first, so every element keeps its updates in
    increasing reduction index.  (The block in :func:`_row_red_col`'s order alone, a
    row of ``W`` and ``Y`` per reduction step, was a fifth of symm's time at LARGE.)"""
    s = g.update
    d = _names(s)
    i, k = d[g.upd_pos["i"]], d[g.upd_pos["k"]]
    MR, NR = b.MR, b.NR
    cond = f"{k} < {MR}t" if leading else f"{k} >= {MR}t + {MR}"
    tiles = _read(s, f"{{ {s.name}[{', '.join(d)}] : exists (t : {MR}t <= {i} < "
                     f"{MR}t + {MR} and {cond}) }}")
    assert isinstance(tiles, isl.Set)
    rect = block.intersect(isl.UnionSet.from_set(tiles))
    tri = block.subtract(rect)
    sp = s.domain.get_space()
    ia, ja, ka = (dim_aff(sp, g.upd_pos[n]) for n in ("i", "j", "k"))
    micro: object = T.Mark(marks.CPU_MICROKERNEL, T.Band(
        [to_upa(ka)], T.Band([to_upa(mod_aff(ia, MR)), to_upa(mod_aff(ja, NR))],
                             permutable=True, coincident=[True, True]),
        permutable=True))
    regs = T.Band([to_upa(floor_div_aff(ia, MR)), to_upa(floor_div_aff(ja, NR))], micro,
                  permutable=True, coincident=[True, True])
    out = [T.Filter(f, t) for f, t in ((rect, regs), (tri, _row_red_col(g)))
           if not f.is_empty()]
    return out if leading else out[::-1]


#: the mirror's rows above a step on the micro-kernel in one ``i`` tile up to this many
#: rows (so its ``alpha * B`` block is copied once per step and panel; more rows take
#: several tiles in turn, each refilling the copy)
MIRROR_MC = 1 << 16


#: the fewest columns of a parallel panel (:func:`panel_columns`)
PANEL_COLUMNS = 32


def panel_columns(NR: int) -> int:
    """Columns of one parallel panel: the fewest whole register panels (``NR``
    columns) that make at least :data:`PANEL_COLUMNS`.  Every panel reads all of
    ``A``'s lower triangle twice (phase 1's rows, the mirror's columns), so the
    panel's width sets how often ``A`` (8 MB at LARGE: L3, not L2) is streamed: with
    AVX2's ``6 x 8`` fp64 register block, ``NR``-column panels made 150 panels at
    LARGE, 1.2 GB of ``A`` a call where AVX-512's 32-column panels made 38 panels
    and 0.3 GB.  AVX-512 (``NR`` = 32 fp64, 64 fp32) is unchanged.
    ``POLYCOMP_SYMM_PANEL=0``: ``NR`` columns (for same-process comparisons)."""
    if os.environ.get("POLYCOMP_SYMM_PANEL", "1") == "0":
        return NR
    return NR * max(1, -(-PANEL_COLUMNS // NR))


def prefetch_phase2(ctx: CompileState, dtype: str) -> bool:
    """Whether phase 2 (``F``) sits below a ``cpu_prefetch_rows`` mark: on AVX2 in
    float64 (measured there only; AVX-512's C is unchanged), unless
    ``POLYCOMP_SYMM_PREFETCH=0``.  ``F`` at a step is the first access of the step's
    rows of ``C`` in the panel (``W`` columns of each row: 256 bytes every ``n * 8``),
    which the hardware prefetchers do not follow: 4.9 % of symm's samples sat on its
    ``C`` loads at LARGE; with the IR pass ``prefetch-marked-rows`` (each vector
    iteration prefetches, for writing, its ``C`` element two rows on) 1.4 % + 0.4 %
    (docs/c_frontend.md "AVX2 fp64: where symm's remaining time goes")."""
    if os.environ.get("POLYCOMP_SYMM_PREFETCH", "1") == "0":
        return False
    return ctx.target.isa == "avx2" and dtype == "float64"


#: rows ahead that ``P1``'s copy of ``B`` prefetches (:func:`pack_phase1_b`)
PACK_PREFETCH_ROWS = 8


def pack_phase1_b(ctx: CompileState, dtype: str) -> bool:
    """Whether ``P1`` (phase 1's rectangle, ``acc += B[k][j] * A[i][k]``) reads its
    ``Y`` operand from a packed copy (``scop-gemm``'s ``pack_y``: per step, ``k`` tile
    and panel, ``KC x W`` elements of ``B``, each register panel's ``KC x NR`` sliver
    contiguous and 64-byte aligned) instead of ``B`` in place: on AVX2 in float64
    (measured there only; AVX-512's C is unchanged), unless ``POLYCOMP_SYMM_PACK_B=0``.
    In place, each ``k`` step of the ``6 x 8`` block loads 64 bytes at a row stride of
    ``n * 8`` bytes, which straddle two cache lines unless ``B`` is 64-byte aligned
    (numpy's large arrays start 16 bytes past a page); about a quarter of ``P1``'s
    samples sat on those two loads (docs/c_frontend.md "AVX2 fp64: symm's phase-1
    ``B`` packed").  The copy holds the same values, so the sums are unchanged.  The
    copy reads ``B``'s rows (``n * 8`` bytes apart, from L3) with a read prefetch
    :data:`PACK_PREFETCH_ROWS` rows on (``PackRequest.prefetch_rows``;
    ``POLYCOMP_SYMM_PACK_PREFETCH=0``: none)."""
    if os.environ.get("POLYCOMP_SYMM_PACK_B", "1") == "0":
        return False
    return ctx.target.isa == "avx2" and dtype == "float64"


def _mirror_mc(MR: int) -> int:
    return max(MR, MIRROR_MC // MR * MR)


def _red_step(g: ScopGemm, B: int) -> isl.PwAff:
    """``floor(red/B)`` on the update of ``g`` (the mirror's step: its reduction block)."""
    s = g.update
    r = dim_aff(s.domain.get_space(), g.upd_pos["k"])
    return isl.PwAff.from_aff(floor_div_aff(r, B)).intersect_domain(s.domain)


def _leading(g: ScopGemm, B: int) -> isl.Set:
    """``P1`` of the module docstring: the reductions left of the row's block."""
    s = g.update
    d = _names(s)
    i, k = d[g.upd_pos["i"]], d[g.upd_pos["k"]]
    t = _read(s, f"{{ {s.name}[{', '.join(d)}] : exists (q : {B}q <= {i} < {B}q + {B} "
                 f"and {k} < {B}q) }}")
    assert isinstance(t, isl.Set)
    return t.intersect(s.domain)


def _origins(g: ScopGemm, B: int, NR: int) -> tuple[isl.Aff, isl.Aff]:
    """``(oi, oj)`` the ``scop-gemm`` subtree of a step counts its tiles from: the
    step's first row ``B floor(i/B)``, and the panel's first column ``NR floor(j/NR)``
    (``NR`` > 0: the panels are the parallel loop's, so the subtree's ``j`` tile is 0
    and a packed block's origin is a function of generated loops) or 0."""
    sp = g.update.domain.get_space()
    ctx = sp.get_ctx()
    oi = floor_div_aff(dim_aff(sp, g.upd_pos["i"]), B).scale_val(isl.Val.int_from_si(ctx, B))
    if NR:
        oj = floor_div_aff(dim_aff(sp, g.upd_pos["j"]), NR).scale_val(
            isl.Val.int_from_si(ctx, NR))
    else:
        oj = isl.Aff.zero_on_domain(isl.LocalSpace.from_space(sp))
    return oi, oj


def _phases(p: ScopGemm, mir: ScopGemm, first: list, fin: list, blk: Blocking, B: int,
            cols: isl.UnionPwAff | None, requests: list, st, space: isl.Space,
            prefetch_rows: bool = False, pack_b: bool = False) -> tuple[list, list] | None:
    """The filters of one row step (``P``'s phase with ``first`` and ``fin``, then the
    mirror's) and the step band's members, or None when a product is not one GEMM per
    step; ``prefetch_rows``: phase 2 below a ``cpu_prefetch_rows`` mark
    (:func:`prefetch_phase2`); ``pack_b``: ``P1`` reads a packed copy of its ``Y``
    (``B``) block instead of ``B`` in place (:func:`pack_phase1_b`)."""
    phases, steps = [], []
    panels = cols is not None
    for g, part, leading in ((p, _leading(p, B), True), (mir, _trailing(mir, B), False)):
        if not _rectangular_k(g, part, B, "i" if leading else "k") \
                or not _packs_safe(g, part, B):
            return None
        own = isl.UnionPwAff.from_pw_aff(_step(g.update, B) if leading else
                                         _red_step(g, B))
        steps.append(own)
        oi, oj = _origins(g, B, blk.NC if panels else 0)
        if leading:
            # the rectangle left of the step's block, k tiles from 0, then the block
            seq: list = []
            if not part.is_empty():
                gp = dataclasses.replace(g, update=dataclasses.replace(g.update, domain=part))
                n_req = len(requests)
                seq.append(T.Filter(isl.UnionSet.from_set(part), scop_gemm_tree(
                    gp, blk, requests, (own,), True, (oi, oj), k_tiles=True, pack_x=False,
                    pack_y=pack_b)))
                # the copy of B prefetches its rows PACK_PREFETCH_ROWS on (rows n * 8
                # bytes apart, from L3: the prefetchers follow them late)
                if os.environ.get("POLYCOMP_SYMM_PACK_PREFETCH", "1") != "0":
                    requests[n_req:] = [dataclasses.replace(r, prefetch_rows=PACK_PREFETCH_ROWS)
                                        for r in requests[n_req:]]
            seq += _diagonal(g, isl.UnionSet.from_set(g.update.domain).subtract(
                isl.UnionSet.from_set(part)), blk, True)
            if first:
                seq.insert(0, T.Filter(_union(first, space), st.sub))
            if fin:
                seq.append(T.Filter(_union(fin, space), T.Mark(marks.CPU_PREFETCH_ROWS, st.sub)
                                    if prefetch_rows else st.sub))
            steps += [isl.UnionPwAff.from_pw_aff(_step(s, B)) for s in first + fin]
            phases.append(T.Filter(_union([g.update] + first + fin, space), T.Sequence(seq)))
            continue
        rest_set = isl.UnionSet.from_set(g.update.domain).subtract(isl.UnionSet.from_set(part))
        seq = _diagonal(g, rest_set, blk, False)
        if not part.is_empty():
            # rows from 0, one i tile up to MIRROR_MC rows: one alpha*B copy per step
            gp = dataclasses.replace(g, update=dataclasses.replace(g.update, domain=part))
            gemm = scop_gemm_tree(
                gp, dataclasses.replace(blk, MC=_mirror_mc(blk.MR)), requests, (own,), True,
                (oi.scale_val(isl.Val.zero(oi.get_ctx())), oj), pack_x=False, pack_y=True,
                shared_packs=True)
            seq.append(T.Filter(isl.UnionSet.from_set(part), gemm))
        phases.append(T.Filter(_union([g.update], space), T.Sequence(seq)))
    return phases, steps


def _step_local(p: ScopGemm, ctx: CompileState) -> ir.Buffer | None:
    """``P``'s accumulator ``acc`` (``temp2``) when it is a temporary of the kernel (no
    output: nothing reads it after the call) and ``POLYCOMP_SYMM_LOCAL`` is not ``0``:
    it is then stored in a block of one row step (and panel) per thread, a ``cpu_local``
    mark on the step band's body (:mod:`polycomp.scheduler.chain.local`), since every
    access of ``acc`` (``Z``, ``P``, ``F``) of a row lies in that row's step: ``Z``
    zeroes it, ``P`` completes it and ``F`` reads it within the step.  The block
    (``B x NR`` elements, 30 KiB at ``B = 120``, ``NR = 32`` in double) stays in L1/L2
    where the whole ``m x n`` array was written back to memory and faulted in again:
    the zeroing pass ran at DRAM speed (docs/c_frontend.md "symm: where the last 4 %
    go").  :func:`decide_local_tiles` checks that every access lies below the mark and
    that the box is bounded; otherwise the array is left as it is."""
    if os.environ.get("POLYCOMP_SYMM_LOCAL", "1") == "0":
        return None
    acc = p.update.write
    if acc.name not in {b.name for b in ctx.model.temporaries}:
        return None
    return acc


class ScopSymmPass(Pass):
    """See the module docstring."""
    name = "scop-symm"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        stages = ScopStages.of(schedule, ctx)
        if stages is None:
            return schedule
        for st, m in stages.matched(match_symm):
            p, mir, first, fin = m
            if ctx.target.vector_lanes(p.dtype) <= 1 or p.dtype != mir.dtype:
                continue
            blk = choose_blocking(p.outer_product(), ctx.target, ctx.cpu_options)
            B = max(blk.MR, min(BLOCK, blk.KC) // blk.MR * blk.MR)
            blk = dataclasses.replace(blk, KC=B)
            W = panel_columns(blk.NR)
            cols = column_panels(st.group, W, ctx.target.cpu.threads)
            if cols is not None and not _within_panels(stages.dependences(st), cols):
                cols = None
            if cols is not None:
                blk = dataclasses.replace(blk, NC=W)     # one j tile: the panel
            space = st.filter.get_space()
            requests = list(promotion_state(ctx).pack_requests)
            pack_b = pack_phase1_b(ctx, p.dtype)
            built = _phases(p, mir, first, fin, blk, B, cols, requests, st, space,
                            prefetch_phase2(ctx, p.dtype), pack_b)
            if built is None:
                ctx.note(self.name, f"{'+'.join(st.names)}: a triangular product is not a "
                                    f"GEMM per block; program order kept")
                continue
            phases, steps = built
            body: object = T.Sequence(phases)
            acc = _step_local(p, ctx)
            if acc is not None:
                body = T.Mark(local_mark(ctx, [LocalTile((acc,), acc.name)]), body)
            new = T.Band([T.union_members(steps)], body)
            if cols is not None:
                new = T.Mark(marks.CPU_PARALLEL, T.Band([cols], new, coincident=[True]))
            if not stages.legal(st, new):
                ctx.note(self.name, f"{'+'.join(st.names)}: the three-phase order would "
                                    f"violate a dependence; program order kept")
                continue
            promotion_state(ctx).pack_requests[:] = requests
            stages.replace(st, new)
            if acc is not None and decide_local_tiles(
                    stages.schedule(), ctx, ctx.model.statements) is not None:
                local_tiles(ctx).records[-1] = []       # the mark realises nothing
                acc = None
            ctx.note(self.name, f"{'+'.join(st.names)}: split in three phases, {B} rows a "
                                f"step; {p.update.name} ({p.update.write.name} += "
                                f"{p.x.buffer.name} * {p.y.buffer.name}, rows above) and "
                                f"{mir.update.name} ({mir.update.write.name} += "
                                f"{mir.x.buffer.name} * {mir.y.buffer.name}, rows below) "
                                f"on the micro-kernel (register block {blk.MR}x{blk.NR}, "
                                f"MC={blk.MC} NC={blk.NC} KC={blk.KC}, operands in place"
                                f"{', ' + p.y.buffer.name + ' packed for P1' if pack_b else ''}), "
                                f"the diagonal blocks as register tiles besides their "
                                f"{blk.MR}x{blk.MR} triangles" +
                                (f"; {acc.name} in a per-thread block of one step"
                                 if acc is not None else "") +
                                (f"; parallel over {blk.NC}-column panels"
                                 if cols is not None else ""))
        return stages.schedule()
