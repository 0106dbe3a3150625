"""Pass: cache and register tiling of matmul-like backbones for a CPU micro-kernel.

A stage is an *outer-product backbone* when it is a sum reduction over one reduce axis
``k`` whose update is ``C[s] = C[s] + X * Y`` (``X``, ``Y`` loads of the output's
float dtype) such that the last output dimension ``j`` appears in ``Y`` only as its last
index (unit stride) and not in ``X`` at all, and some other output dimension ``i``
appears in ``X`` but not in ``Y`` (matmul: ``X = A[i, k]``, ``Y = B[k, j]``); the other
output dimensions are *batch* dimensions.  Per update instance this is one
multiply-add of the outer product of a column of ``X`` and a row of ``Y``.

Assumes: the program-order tree (a stage's subtree is ``band[s] -> sequence[init,
update -> band[k]]`` under its filter) and a target with vector registers.

Guarantees: a GEMM-form backbone's subtree (init and update together, and an
*epilogue* when the next stage is one, see :func:`match_epilogue`: its filter joins
the backbone's) becomes

    [mark cpu_parallel] [band[batch..]]
      [mark cpu_parallel] band[floor(i/MC)]
        band[floor(k/KC)]               (init at k tile 0, epilogue at floor(k_max/KC))
          mark cpu_pack_request:<n+1>   (X, panels of MR along the dim of i in X, for L1)
            band[floor(j/NC)]
              mark cpu_pack_request:<n> (Y, panels of NR along the dim of j in Y, for L2)
              band[floor((i mod MC)/MR), floor((j mod NC)/NR)]   isolate: full MR x NR tiles
                sequence
                  filter init:     band[i mod MR, j mod NR]
                  filter update:   mark cpu_microkernel
                                     band[k mod KC]
                                       band[i mod MR, j mod NR]
                  filter epilogue: band[i mod MR, j mod NR]

(every band over several statements takes the same functions of ``i``, ``j`` and the
batch dimensions for each; an operand read where it lies, :func:`in_place_operands`, has
no pack mark: the band below takes its place; the ``MC x KC`` block of ``X`` is packed
once per ``k`` tile, see :func:`x_block_once`; the few-row split below keeps the band
``[floor(j/NC), floor(k/KC)]`` with both pack marks under it), so each ``MR x NR`` tile
of ``C`` is zeroed just before its first micro-kernel and passed through the epilogue
(bias, activation) just after its last one, while it is in L1, instead of in passes over
all of ``C``.  A direct-form backbone (convolutions) keeps the init apart:

    sequence
      filter init:   mark cpu_parallel -> band[s]    (all members coincident)
      filter update: mark cpu_parallel [band[batch..]]
        band[floor(i/MR), floor(j/NR)]   isolate: full MR x NR tiles
          mark cpu_microkernel
            band[reduce dims..]
              band[i mod MR, j mod NR]

With constant channel and window extents a direct backbone takes its *channel form*
(:func:`match_channel_form`, :func:`channel_tree`): ``j`` = the output channels (``Y``,
the weights, packed in panels of ``NR`` channels), ``i`` = the output width:

    sequence
      filter init:   mark cpu_parallel -> band[s]
      filter update: mark cpu_parallel -> band[floor(f/NR)]
        mark cpu_pack_request (Y along its first dimension, panels of NR, for L2)
          band[batch..] -> band[floor(i/MR)]   isolate: full MR x NR tiles
            mark cpu_microkernel -> band[window dims.., other reduce dims..]
                                      -> band[i mod MR, f mod NR]

(weights read in place: no pack mark, and with a channel tile, :func:`channel_tile`, a
band ``[floor(c/c_tile)]`` between ``band[floor(f/NR)]`` and the batch band; rows of at
most 16 pixels take one register tile each, :func:`row_register_block`; with a symbolic
output width the tiles are isolated in the channels only, :func:`symbolic_rows`, so the
last row tile of each output row is the micro-kernel's too).  By default
(:func:`accumulators_from_init`) the channel form's init is not a filter of its own:
it joins every band (its channel tile ``0``) and runs on each register tile right
before the micro-kernel, ``band[floor(i/MR)] -> sequence[init: band[i mod MR, f mod
NR], update: mark cpu_microkernel .., e_1 .., e_n]``, with an epilogue chain
(:func:`conv_epilogue`, :func:`match_epilogue`) after it at the last channel tile;
see :func:`channel_tree` for the legality.

*Column batch dimensions* (:func:`column_batch`: batch dimensions that index ``Y`` and
not ``X``, the heads of a projection writing ``(B, H, S, D)``) run with the column tiles,
``band[kt] -> mark pack X -> band[h.., floor(j/NC)] -> mark pack Y``, in the ``(it, kt,
jt)`` order (no few-row split, no shared panel): legal as any order of the permutable
update band (the ``h`` band members are coincident, each ``C`` element's init, updates and
epilogue stay in one ``(h, j)`` tile); the ``X`` block below its mark does not depend on
``h``, so it is packed once per ``k`` tile instead of once per head.

A GEMM-form backbone with fewer than ``SMALL_M_PANELS`` register rows per thread and at
least one ``NR`` column panel per thread puts ``cpu_parallel`` on the ``[jt, kt]``
band instead of the ``i``-tile band (``MC`` = all rows, ``NC`` a thread's share of the
columns cut into equal tiles within the cache bound, :func:`few_row_nc`).  With more
than one ``j`` tile per thread, ``X`` packed and more than one ``k`` tile
(:func:`thread_k_outer`) the parallel band is a thread's chunk of ``j`` tiles instead:

    band[floor(i/MC)] -> mark cpu_parallel -> band[floor(j/(NC*chunk))]   (coincident)
      band[floor(k/KC)] -> mark cpu_pack_request (X)
        band[floor(j/NC)] (coincident) -> mark cpu_pack_request (Y) -> band[ir, jr] ..

(legal as any order of the permutable update band: each ``C`` element's init, updates in
``k`` tile order and epilogue stay in one ``(chunk, j tile)``; the same sums in the same
order as ``[jt, kt]``).

On request (``POLYCOMP_GEMM_SHARED=1``; off by default since it measured slower, see
:func:`shared_y_panel`), with several planned threads and a constant ``i`` extent above
``MC`` (the ``i`` tiles being the parallel loop, fp32/fp64 only) the GEMM tree takes
the *shared-panel* (GotoBLAS / BLIS) order instead, so each ``KC x NC`` block of ``Y``
is packed once per call for all threads, not once per ``i`` tile:

    [band[batch..]]                     (not parallel: fewer batch iterations than threads)
      band[floor(j/NC), floor(k/KC)]    (neither coincident: one Y block at a time)
        mark cpu_pack_request (Y)       (outside every parallel loop: the packing pass
                                         makes its copy a parallel loop of its own)
          mark cpu_parallel -> band[floor(i/MC)]
            mark cpu_pack_request (X)   (per i tile)
              band[ir, jr] -> sequence[init, micro-kernel, epilogue] as above

(two fork/joins per ``(j, k)`` tile: the copy of ``Y``, then the ``i`` tiles; the
end of the first is the barrier that publishes the block before any thread reads it,
the end of the second keeps the next copy from overwriting it while it is read).

*Epilogue chain*: after the first epilogue stage, each following stage that
:func:`match_epilogue` accepts with the chain so far (reads ``C`` or the chain's outputs
only at its own point, neither operand, writes nothing the backbone or the chain reads)
joins too, as one more filter after the micro-kernel: ``sequence[init, micro-kernel,
e_1, .., e_n]`` on each register tile (bias, gelu and a residual add lowered as three
stages all run while the tile is in L1).

*Pre-packed* ``Y`` (option ``prepack``, :func:`prepacked_y`): the tree is unchanged;
the ``Y`` request carries ``prepacked=True`` and the IR packing reads the input in the
panel layout instead of copying it (:mod:`polycomp.hw.cpu.pack`); the shared-panel
order is taken for it only with ``POLYCOMP_GEMM_SHARED=prepacked``.  *Dynamic row
tiles* (opt-in, :func:`dynamic_row_tiles`): the ``i``-tile band's mark is
``cpu_parallel:<n>`` with a dynamic
:class:`~polycomp.scheduler.cpu.state.ParallelLoop` payload and ``MC`` is smaller
(``ROW_TILES_PER_THREAD`` tiles per thread): legal as any schedule of the coincident
``i`` tiles (disjoint rows of ``C``; each tile packs its own ``X`` block before reading
it).  A channel form's
weights ``w[f, c, kh, kw]`` named in the option (:func:`prepacked_conv_order`) take the
tree of weights read in place under one pre-packed request at its top (no copy, so its
place does not matter; the reads below it read ``(F/NR, KH, KW, C, NR)``).  Legal as
that tree: the request mark changes no order.

Legality: the only dependences into the update statements from the init are on the same
output element ``C[s]``, whose init instance comes first in both trees (a separate
earlier filter, or the same tile at ``k`` tile 0 and the earlier sequence child); the
epilogue instance of ``C[s]`` reads only ``C[s]`` and comes after all its updates (the
same tile at the last ``k`` tile, the later sequence child), and writes an array no
statement of the backbone touches; the ``n``-th statement of a chain reads only the
point ``s`` of ``C`` and of the earlier chain statements' outputs, all written earlier in
the same tile (earlier sequence children), and writes an array none of them reads. The
update band is permutable (the only dependences between updates are on the same
``C[s]``, carried by ``k``), so any tiling and member order keeps every dependence
lexicographically positive. ``cpu_parallel`` sits on the batch band when the batch has
at least as many iterations as threads (or is symbolic), else on the ``i`` tile band
(coincident: ``C`` rows are disjoint); either way the whole product is one parallel
region (each thread packs the blocks it uses, no barrier inside), which matters on busy
machines where every fork/join waits for the slowest thread.  The shared-panel order
is the same permutable band in another member order (``jt, kt, it``; init at ``k``
tile 0 and epilogue at the last ``k`` tile as before, both inside the same ``(j, k,
i)`` tile as the updates of their ``C`` elements), and its parallel ``i`` tiles write
disjoint rows of ``C``. The isolate option makes
isl generate the full ``MR x NR`` tiles separately, with constant point-loop bounds (the
micro-kernel), and the partial tiles at the edges as generic loops; where the extent of
``i`` or ``j`` is symbolic the GEMM form is not isolated (:func:`partial_tiles`): every
register tile, partial ones included, is the micro-kernel's.  The channel form
orders the reduce loops window first: the dependences between the updates of one
output element (the accumulation) then run in another order, i.e. the sum is
reassociated (as the vectoriser's multiple accumulators do); every other dependence is
kept (``tests/test_cpu_directconv.py`` checks exactly that).

Register block ``MR x NR`` (``NR = NI`` vectors): the largest ``MR*NI/(MR+NI)`` (FMA per
load) with ``MR*NI + NI + 1 <= vector registers`` (accumulators, one row of ``Y``
vectors, one broadcast of ``X``), ``NI`` in 1, 2, 4.  ``KC`` keeps an ``MR x KC``
panel of ``X`` in a quarter of L1, ``NC`` a ``KC x NC`` block of ``Y`` in half of L2,
``MC`` splits ``i`` evenly over the threads when the extent is known.  Within a
``(j, k)`` tile each ``MR x KC`` panel of ``X`` stays in L1 while the ``NR``-wide
panels of the packed ``Y`` block stream from L2, so the ``MC x KC`` block of ``X``
need not fit a cache; a large ``MC`` means the ``Y`` block, packed once per ``i``
tile, is reused over more rows.  ``MC`` is therefore a thread's whole share of ``i``,
split further only when its packed ``X`` block would exceed four times L2.  With a
symbolic ``i`` extent ``MC`` is 32 register rows, or ``SMALL_M_PANELS`` register rows
when ``Y`` is pre-packed and several threads are planned (no copy of ``Y`` per ``i``
tile: a call of 64 .. 256 rows still has a tile per thread); a pre-packed ``Y``'s
``NC`` is balanced over its column blocks (:func:`balanced_nc`).  Options
``gemm_tiles=(MC, NC, KC)`` and ``gemm_register=(MR, NI)`` override.

Low precision (:func:`match_dot_product`): a GEMM-form backbone whose factors widen
loads of one dtype to the output dtype, on a target declaring a dot-product unit for
them (:attr:`~polycomp.hw.memory.ComputeUnit.is_dot`: each of its ``lanes`` accumulator
lanes adds the products of ``group`` consecutive ``k``; bf16 -> fp32 on AVX512_BF16,
int8 -> int32 on AVX512_VNNI with ``X`` offset by 128), gets the same GEMM tree with the
unit's lanes as vectors and ``KC`` a multiple of its group, but: the micro-kernel mark
is ``cpu_microkernel:<n>``, ``n`` indexing the
:class:`~polycomp.scheduler.cpu.state.DotTile` recorded in typed state; both pack
requests group ``k`` (``X``'s with the offset, ``Y``'s compensating it); and no tile is
isolated (edge tiles are micro-kernels too, whose point loops run to ``min(MR, ..)``
and ``min(NR, ..)``).  The tree is the fp32 one's with different marks and options, so
the legality argument above holds unchanged.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

import islpy as isl

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.hw.memory import ComputeUnit
from polycomp.hw.options import CpuOptions
from polycomp.model import Statement
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.contraction import match_contraction
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.cpu import tree as T
from polycomp.scheduler.cpu.state import (
    DotTile,
    ParallelLoop,
    cpu_microkernels,
    cpu_parallel_loops,
)
from polycomp.scheduler.promotion.cpu_pack import request_mark
from polycomp.scheduler.promotion.record import PackRequest, promotion_state
from polycomp.state import CompileState


@dataclass
class OuterProduct:
    """A matched backbone: statements and positions of its update-domain dimensions."""
    init: Statement
    update: Statement
    batch: list          # positions in the update domain
    i: int
    j: int
    k: list              # positions of the reduce dimensions
    x: ir.Load           # the operand without j (broadcast in the micro-kernel)
    y: ir.Load           # the operand with j in its last index (vector loads)
    dtype: str
    direct: bool         # conv-like: no packing, all reduce dimensions in the micro-kernel
    channel: bool = False  # direct form vectorised over j = output channels (Y packed)
    # channel form whose Y already has j = f as its last, unit-stride index (weights
    # laid out (C, KH, KW, F) at compile time): read in place, not packed per call
    y_in_place: bool = False
    # channel form whose Y (the weights ``w[f, c, kh, kw]``) is a kernel input the
    # caller packs once (option ``prepack``, :func:`prepacked_conv_order`) in panels of
    # NR output channels, the other dimensions in ``y_order`` (the micro-kernel's loop
    # order): read in place in that layout, not packed per call
    y_prepacked: bool = False
    y_order: tuple = ()

    @property
    def y_resident(self) -> bool:
        """Channel form whose weights are read where they lie (laid out with ``f``
        innermost, or pre-packed): no per-call pack, channel tiles and row parallelism
        as for weights read in place."""
        return self.y_in_place or self.y_prepacked


def loop_vars(e) -> set:
    """The variables of expression ``e`` other than the kernel's size parameters."""
    return {v for v in ir.free_vars(e) if not v.is_param}


def unit_stride_in(e, v) -> bool:
    """``e == v + (terms without v)``."""
    from polycomp.lowering.vectorize import affine_in
    a = affine_in(e, v)
    return a is not None and a[0] == 1


def _strided_in(e, v) -> bool:
    """``e == s*v + (terms without v)`` with a constant ``s >= 1``."""
    from polycomp.lowering.vectorize import affine_in
    a = affine_in(e, v)
    return a is not None and isinstance(a[0], int) and a[0] >= 1


def match_outer_product(statements) -> OuterProduct | None:
    """The outer-product structure of a reduction stage's (init, update), or None.

    The factors come from the shared matcher
    (:func:`polycomp.scheduler.common.contraction.match_contraction`); on top of it the
    CPU micro-kernel needs float32/float64 factors of the output's dtype read without
    conversion, and an operand ``Y[.., j]`` whose last index follows the innermost
    output dimension ``j``.  GEMM form (packed operands, tiled reduction): one reduce
    axis and ``Y[.., j]``.  Direct form (convolutions): several reduce axes and/or
    ``Y[.., j + r]`` possibly under a padding ``select``; the operands are read in place.
    """
    def same_float(dtype, c) -> bool:
        return dtype in ("float32", "float64") and c.a.load.dtype == dtype and \
            c.b.load.dtype == dtype
    return _outer_product(statements, same_float)


def _outer_product(statements, factors_ok) -> OuterProduct | None:
    """:func:`match_outer_product` with the dtype condition ``factors_ok(output dtype,
    contraction)``."""
    if len(statements) != 2 or statements[0].kind != "init" or statements[1].kind != "update":
        return None
    init, upd = statements
    stage = upd.stage
    dtype = upd.write.dtype
    val = upd.value
    if not (isinstance(val, ir.Binary) and val.op == "+" and isinstance(val.a, ir.Load)
            and val.a.buffer is upd.write):
        return None
    c = match_contraction(stage)
    if isinstance(c, str) or not factors_ok(dtype, c):
        return None
    a, ga, b, gb = c.a.load, c.a.guard is not None, c.b.load, c.b.guard is not None
    spatial = list(stage.iters)
    if len(spatial) < 2:
        return None
    j = spatial[-1]
    red = [ax.var for ax in stage.reduce_axes]
    for (x, gx), (y, gy) in (((a, ga), (b, gb)), ((b, gb), (a, ga))):
        if gx or not (y.indices and _strided_in(y.indices[-1], j)):
            continue
        if any(j in loop_vars(ix) for ix in y.indices[:-1]) \
                or any(j in loop_vars(ix) for ix in x.indices):
            continue
        xv = set().union(*(loop_vars(ix) for ix in x.indices))
        yv = set().union(*(loop_vars(ix) for ix in y.indices))
        if not all(r in xv or r in yv for r in red):
            continue
        cands = [t for t in range(len(spatial) - 1) if spatial[t] in xv and spatial[t] not in yv]
        if not cands:
            continue
        i = cands[-1]
        batch = [t for t in range(len(spatial) - 1) if t != i]
        direct = gy or len(red) != 1 or y.indices[-1] is not j or \
            not (red[0] in xv and red[0] in yv)
        return OuterProduct(init, upd, batch, i, len(spatial) - 1,
                            list(range(len(spatial), len(spatial) + len(red))), x, y, dtype,
                            direct)
    return None


@dataclass(frozen=True, eq=False)
class DotProduct:
    """A GEMM-form backbone for a dot-product unit (:func:`match_dot_product`): the
    outer product, the unit (``shape = (lanes, group)``), the arrays' element dtype and
    the offset ``X``'s packing adds (see :class:`~polycomp.scheduler.cpu.state.DotTile`)."""
    op: OuterProduct
    unit: ComputeUnit
    inputs: str
    offset: int

    @property
    def lanes(self) -> int:
        return self.unit.shape[0]

    @property
    def group(self) -> int:
        return self.unit.shape[1]


def dot_unit(target, inputs: str, accumulator: str) -> tuple[ComputeUnit, int] | None:
    """A dot-product unit of ``target`` (:attr:`ComputeUnit.is_dot`) that accumulates
    products of two ``inputs`` arrays in ``accumulator``, and the offset the broadcast
    operand needs: 0 where the unit takes ``inputs`` for both operands, ``2^(bits-1)``
    where it takes the unsigned type of the same width for the broadcast one (int8 on a
    ``uint8 x int8`` unit: 128, the other operand's column sums compensate)."""
    for u in target.units:
        if not u.is_dot or u.accumulator != accumulator or len(u.operands) != 2:
            continue
        xo, yo = u.operands
        if yo != inputs:
            continue
        if xo == inputs:
            return u, 0
        if inputs in dt.INTS and xo == "u" + inputs:
            return u, 1 << (dt.bits(inputs) - 1)
    return None


def match_dot_product(statements, target) -> DotProduct | None:
    """The GEMM-form outer product of ``C[.., i, j] += cast(X[.., i, .., k]) *
    cast(Y[.., k, j])`` (a reduction stage's init and update) whose factors widen
    loads of one dtype to the output dtype where ``target`` declares a dot-product unit
    for them (:func:`dot_unit`: bfloat16 -> float32 on AVX512_BF16, int8 -> int32 on
    AVX512_VNNI); None otherwise (the stage then takes the ordinary path)."""
    found: list = []

    def widened(dtype, c) -> bool:
        if c.a.guard is not None or c.b.guard is not None:
            return False
        src = c.a.load.dtype
        if c.b.load.dtype != src or src == dtype:
            return False
        for f in (c.a, c.b):
            if not (isinstance(f.expr, ir.Cast) and f.expr.dtype == dtype
                    and f.expr.value is f.load):
                return False
        unit = dot_unit(target, src, dtype)
        if unit is None:
            return False
        found.append((src, *unit))
        return True
    op = _outer_product(statements, widened)
    if op is None or op.direct or not found:
        return None
    k = op.update.iters[op.k[0]]
    for load in (op.x, op.y):        # k is one index of each operand, unit stride
        uses = [ix for ix in load.indices if k in loop_vars(ix)]
        if len(uses) != 1 or uses[0] is not k:
            return None
    src, unit, offset = found[0]
    return DotProduct(op, unit, src, offset)


def match_channel_form(op: OuterProduct) -> OuterProduct | None:
    """The *channel* orientation of a direct-form backbone (a convolution), or None:
    ``j`` = an output dimension ``f`` that indexes only the first dimension of an
    unguarded operand ``Y`` (the weights ``w[f, c, kh, kw]``) and nothing else, ``i`` =
    the last output dimension (the output width), read by the other operand ``X`` (the
    input, possibly under the padding ``select``) and not by ``Y``.  The micro-kernel
    then broadcasts one input value per output pixel and reads ``Y`` packed in panels of
    ``NR`` output channels (contiguous vectors), whatever the stride, width or padding;
    its stores of ``C`` are strided (one output plane apart)."""
    if not op.direct:
        return None
    stage = op.update.stage
    spatial = list(stage.iters)
    last = spatial[-1]
    for y, x in ((op.x, op.y), (op.y, op.x)):
        if _guarded(op, y) or len(y.indices) < 2:
            continue
        for pos in (0, len(y.indices) - 1):
            fv = loop_vars(y.indices[pos])
            if len(fv) != 1 or not unit_stride_in(y.indices[pos], next(iter(fv))):
                continue
            f = next(iter(fv))
            if f not in spatial[:-1] or any(f in loop_vars(ix) for q, ix in
                                            enumerate(y.indices) if q != pos) \
                    or any(f in loop_vars(ix) for ix in x.indices):
                continue
            if not any(last in loop_vars(ix) for ix in x.indices) \
                    or any(last in loop_vars(ix) for ix in y.indices):
                continue
            t = spatial.index(f)
            batch = [d for d in range(len(spatial) - 1) if d != t]
            return OuterProduct(op.init, op.update, batch, len(spatial) - 1, t,
                                _window_first(op, x, spatial), x, y, op.dtype, True, True,
                                y_in_place=pos > 0)
    return None


def _window_first(op: OuterProduct, x: ir.Load, spatial: list) -> list:
    """The reduce positions with the *window* dimensions first (those that share an
    index of ``x`` with an output dimension: ``kh`` in ``oh*s + kh``), the others
    (input channels) innermost, so the padding conditions, which depend on the window
    and output position only, are invariant in the innermost reduce loop."""
    red = [ax.var for ax in op.update.stage.reduce_axes]
    sp = set(spatial)

    def window(r) -> bool:
        return any(r in loop_vars(ix) and loop_vars(ix) & sp for ix in x.indices)
    order = sorted(range(len(red)), key=lambda q: not window(red[q]))
    return [op.k[q] for q in order]


def channel_k(op: OuterProduct) -> int:
    """The reduce position of a channel-form convolution that is not a window dimension
    (the input channels; the last of ``op.k`` when there are several)."""
    sp = set(op.update.stage.iters)
    it = op.update.iters
    others = [d for d in op.k
              if not any(it[d] in loop_vars(ix) and loop_vars(ix) & sp for ix in op.x.indices)]
    return others[-1] if others else op.k[-1]


def _guarded(op: OuterProduct, load: ir.Load) -> bool:
    """Whether ``load``'s array is read under a ``select`` in the update (padding)."""
    under: set = set()

    def visit(n):
        if isinstance(n, ir.Select):
            ir.walk(n, lambda m: under.add(m.buffer.name) if isinstance(m, ir.Load) else None)
    ir.walk(op.update.value, visit)
    return load.buffer.name in under


# --------------------------------------------------------------------------- sizes


@dataclass
class Blocking:
    MR: int
    NI: int
    L: int
    MC: int
    NC: int
    KC: int
    parallel_batch: bool
    parallel_j: bool = False     # threads split the j tiles (few rows: BERT at L = 1)
    shared_y: bool = False       # Y block packed once per (j, k) tile for all threads
    prepacked_y: bool = False    # Y is an input the caller packed once (option prepack)
    # channel form with Y read in place and fewer channel panels than threads: the
    # output rows (batch dims) are the parallel loop, outside the channel panels
    rows_outer: bool = False
    # channel form with Y read in place: the input channels (the innermost reduce
    # dimension) in tiles of this many, the tile loop outside the output rows (0: whole)
    c_tile: int = 0
    # the row tiles (i tiles) are the parallel loop, handed out one at a time
    # (dynamic_rows) and marked with row_mark (cpu_parallel, or cpu_parallel:<n> of a
    # ParallelLoop payload the pass records)
    dynamic_rows: bool = False
    row_mark: str = marks.CPU_PARALLEL
    # GEMM form: X / Y read where they lie, without a pack request (in_place_operands)
    x_in_place: bool = False
    y_in_place: bool = False
    # GEMM form: Y's pack request filled by the first register row tile's pass
    # (fill_y_in_first_row), prefetching the next block of Y (stream_y_fill)
    y_fill: bool = False
    y_stream: bool = False
    # ... each prefetch aimed this many elements past its line's first (stream_aim)
    y_stream_aim: int = 0
    # few-row split: each thread's j tiles as one chunk of this many, its k tiles
    # outside them (thread_k_outer; 0: the j tiles outside the k tiles)
    thread_chunk: int = 0

    @property
    def NR(self) -> int:
        return self.NI * self.L


#: convolutions with at most this many input channels keep the width form
FEW_CHANNELS = 4

#: a product with fewer register rows than this per thread is split over j tiles
SMALL_M_PANELS = 4

#: quarters of L2 a ``KC x NC`` block of ``Y`` may fill with the few-row split: its ``X``
#: block (all rows, at most ``threads * SMALL_M_PANELS`` register rows) is small, so ``Y``
#: takes 3/4 of L2, not the half of the other trees (:func:`few_row_nc`)
FEW_ROW_L2_SHARE = 3

#: row tiles per thread when the threads take them one at a time (dynamic_row_tiles)
ROW_TILES_PER_THREAD = 4


def register_block(registers: int) -> tuple[int, int]:
    """``(MR, NI)`` maximising FMAs per load under the register budget."""
    fits = [(mr, ni) for ni in (1, 2, 4) for mr in range(1, 17) if mr * ni + ni + 1 <= registers]
    return max(fits, key=lambda b: (b[0] * b[1] / (b[0] + b[1]), b[0] * b[1]))


def row_register_block(op: OuterProduct, MR: int, NI: int, registers: int, L: int,
                       n_j: int | None) -> tuple[int, int]:
    """The register block of a channel-form convolution whose output rows (``i``, a
    constant width) are at most 16 pixels and not a multiple of ``MR``: one tile per
    row (``MR`` = the width, ``NI`` vectors of ``L`` lanes, at most as many as the
    registers then allow, the fewest operations over the ``n_j`` output channels), not
    full tiles and a narrow remainder that reads the whole weight panel again for a
    pixel or two (ResNet-18's 14x14 layers: 6 + 6 + 2, 7x7: 6 + 1, now 14x32 and 7x48;
    measured 1 thread, CPU time, 256-channel 14x14 3x3 2.99 -> 2.54 ms, 512-channel 7x7
    28 -> 22 ms at batch 8).  ``POLYCOMP_CONV_ROWBLOCK=0`` keeps ``(MR, NI)`` (for comparisons)."""
    if not op.channel or os.environ.get("POLYCOMP_CONV_ROWBLOCK", "1") == "0":
        return MR, NI
    n_i = _extent(op.update.domain, op.i)
    if n_i is None or n_i > 16 or n_i % MR == 0 or n_i < MR:
        return MR, NI
    most = min((registers - 1) // (n_i + 1), NI)
    if most < 2:
        return MR, NI
    if n_j is None:
        return n_i, most

    def cost(ni: int) -> int:
        # per reduction step: FMAs, weight vectors and broadcasts of every panel, a
        # partial panel costing a whole one (64 channels at 7x7: 7x32, not 7x48 + 7x16;
        # 512: 7x48, measured 19.3 vs 21.8 ms for 7x32 at batch 8)
        return -(-n_j // (ni * L)) * (n_i * ni + ni + n_i)
    return n_i, min(range(most, 1, -1), key=cost)


def _extent(domain: isl.Set, pos: int) -> int | None:
    """The extent of dimension ``pos`` of ``domain`` if it is a constant."""
    lo, hi = domain.dim_min(pos), domain.dim_max(pos)
    try:
        if lo.is_cst() and hi.is_cst():
            lv = lo.max_val().to_python()
            hv = hi.max_val().to_python()
            return int(hv - lv + 1)
    except (isl.Error, AttributeError, TypeError):
        pass
    return None


def column_batch(op: OuterProduct) -> list:
    """The batch dimensions of a GEMM-form backbone that index ``Y`` and neither ``X``
    nor anything else of the product: the heads ``h`` of ``C[.., h, i, j] = sum_k
    X[.., i, k] * Y[k, h, j]`` (a projection writing its tiles straight into the
    attention head layout ``(B, H, S, D)``).  The GEMM tree runs them with the column
    tiles, below the packing of ``X`` (:func:`gemm_tree`), so the ``X`` block is packed
    once per ``k`` tile for all of them, not once per head."""
    if op.direct:
        return []
    it = op.update.iters
    xv = set().union(*(loop_vars(ix) for ix in op.x.indices))
    yv = set().union(*(loop_vars(ix) for ix in op.y.indices))
    return [t for t in op.batch if it[t] in yv and it[t] not in xv]


def _only_zero(domain: isl.Set, pos: int) -> bool:
    """Dimension ``pos`` of ``domain`` takes the value 0 only."""
    lo, hi = domain.dim_min(pos), domain.dim_max(pos)
    try:
        return bool(lo.is_cst() and hi.is_cst() and lo.max_val().to_python() == 0
                    and hi.max_val().to_python() == 0)
    except (isl.Error, AttributeError, TypeError):
        return False


def _batch_iterations(op: OuterProduct, dom: isl.Set, cols: list) -> tuple[int, bool]:
    """The iterations of the batch dimensions outside the column batch ``cols`` and
    whether all their extents are constants."""
    n, known = 1, True
    for t in op.batch:
        if t in cols:
            continue
        e = _extent(dom, t)
        if e is None:
            known = False
        else:
            n *= e
    return n, known


def _row_share(n_i: int | None, MR: int, threads: int, MC: int, tiles) -> int:
    """``MC`` of a product with column batch dimensions (:func:`column_batch`): a
    thread's share of the rows (not the few-row ``j`` split, whose parallel ``j``
    tiles would sit below the heads), ``MC`` as it is with a symbolic extent or tiles
    given."""
    if n_i is None or tiles:
        return MC
    panels = -(-n_i // MR)
    return MR * -(-panels // threads)


def choose_blocking(op: OuterProduct, target, options: CpuOptions,
                    dot: DotProduct | None = None, prepacked: bool = False) -> Blocking:
    """The blocking of the module docstring; for a product on a dot-product unit
    (``dot``) the vectors are the unit's accumulators (its lanes), the packed panels'
    elements are the inputs (their size sets ``KC`` and ``NC``), and ``KC`` is a
    multiple of the unit's group (each ``k`` tile starts a group).

    ``prepacked``: ``Y`` is a pre-packed input (:func:`prepacked_y`, a graph's weight).
    With symbolic rows and several threads its row tiles are ``SMALL_M_PANELS``
    register rows (``MC`` = 32 rows at ``MR`` = 8) instead of the nominal 32 register
    rows: with ``MC`` = 256 a call of at most 256 rows (a ``dynamic=True`` model's 128
    tokens) was one row tile, on one thread; a pre-packed ``Y`` is not copied per row
    tile, so the smaller tiles cost no copy (the few-row ``j`` split was tried instead:
    1.47x at 128 rows but 1.54x instead of 1.90x at 512, docs/cpu_backend.md).  Its
    ``NC`` is balanced over the ``j`` blocks (:func:`balanced_nc`), so the packed weight
    is not padded to a whole number of nominal blocks (768 columns in blocks of 480
    took 960)."""
    L = target.vector_lanes(op.dtype) if dot is None else dot.lanes
    dom = op.update.domain
    n_j = _extent(dom, op.j)
    if options.gemm_register:
        MR, NI = options.gemm_register
    else:
        MR, NI = register_block(target.cpu.vector_registers)
        if n_j is not None and n_j < NI * L:
            # narrow outputs (convolutions over small images): fewer, wider-in-i tiles
            NI = max(1, n_j // L)
            MR = min(16, (target.cpu.vector_registers - NI - 1) // NI)
        MR, NI = row_register_block(op, MR, NI, target.cpu.vector_registers, L, n_j)
    NR = NI * L
    size = dt.itemsize(op.dtype if dot is None else dot.inputs)
    threads = max(1, target.cpu.threads)
    KC = max(64, min(256, (target.l1_bytes // (4 * MR * size)) // 16 * 16))
    if dot is not None:
        # a dot unit does G multiply-adds per lane per instruction: the tile's C is
        # loaded and stored once per k tile, so k tiles as long as the X panel allows
        # (a quarter of L1), not the fp32 cap
        KC = max(64, (target.l1_bytes // (4 * MR * size)) // 16 * 16)
    NC = max(NR, (target.l2_bytes // 2 // (KC * size)) // NR * NR)
    if n_j is not None:
        NC = min(NC, -(-n_j // NR) * NR)
    n_i = _extent(dom, op.i)
    parallel_j = False
    if n_j is not None and prepacked and dot is None and not options.gemm_tiles:
        NC = balanced_nc(n_j, NC, NR)
    if n_i is not None and n_j is not None and threads > 1 and not options.gemm_tiles \
            and few_rows(n_i, MR, threads) and n_j >= threads * NR:
        # few rows: splitting i would have every thread pack (and read from memory) the
        # whole Y block for a handful of register rows; each thread takes whole j tiles
        # instead (its own part of Y, all of X, which is small), at least one per thread,
        # as many tiles per thread (few_row_nc)
        MC = MR * -(-n_i // MR)
        if dot is None and column_batch(op):
            NC = min(NC, NR * -(-n_j // (threads * NR)))    # heads: no j split (below)
        else:
            NC, KC = _few_row_tiles(n_j, KC, MR, NR, size, threads, target,
                                    prepacked and dot is None)
        parallel_j = True
    elif n_i is not None:
        panels = -(-n_i // MR)
        q = 1
        MC = MR * -(-panels // (threads * q))
        while MC * KC * size > 4 * target.l2_bytes and MC > MR:
            q += 1
            MC = MR * -(-panels // (threads * q))
    elif prepacked and dot is None and threads > 1:
        # symbolic rows, Y pre-packed: no copy of Y per row tile to amortise, so row
        # tiles of SMALL_M_PANELS register rows (each k x NC block of Y still serves 4
        # register rows from L2) and a call of 64 .. 256 rows has tiles for every thread
        MC = SMALL_M_PANELS * MR
    else:
        MC = 32 * MR            # symbolic extent: 32 register rows per task
    tiles = options.gemm_tiles
    if tiles:
        MC, NC, KC = tiles
    if dot is not None:
        KC = -(-KC // dot.group) * dot.group
    cols = column_batch(op) if dot is None else []
    if cols:               # the heads run with the column tiles (gemm_tree)
        parallel_j = False
        MC = _row_share(n_i, MR, threads, MC, tiles)
    batch_iters, known = _batch_iterations(op, dom, cols)
    # a symbolic batch of a product with column batch dimensions (a head-split
    # projection's B under dynamic=True) runs its row tiles in parallel, per batch
    # element: with the batch loop parallel, a batch-1 call ran on one thread
    parallel_batch = len(op.batch) > len(cols) and (
        batch_iters >= threads if known else not cols)
    dynamic = n_i is not None and not tiles and not parallel_j and not parallel_batch and \
        dot is None and not op.direct and threads > 1 and \
        dynamic_row_tiles(prepacked or shared_y_panel(
            Blocking(MR, NI, L, MC, NC, KC, False), n_i, prepacked))
    if dynamic and n_i is not None:
        panels = -(-n_i // MR)
        MC = min(MC, MR * max(SMALL_M_PANELS, -(-panels // (threads * ROW_TILES_PER_THREAD))))
    b = Blocking(MR, NI, L, MC, NC, KC, parallel_batch, parallel_j and not parallel_batch)
    b.dynamic_rows = dynamic
    b.rows_outer = op.channel and op.y_resident and threads > 1 and bool(op.batch) and \
        (n_j is None or -(-n_j // NR) < threads)
    b.shared_y = dot is None and not op.direct and threads > 1 and not cols and \
        shared_y_panel(b, n_i, prepacked)
    b.c_tile = channel_tile(op, b, target)
    return b


def _plain_2d(load: ir.Load, rows, cols) -> bool:
    """``load`` is ``A[rows, cols]`` of a 2-d array of constant extents, both indices the
    plain loop variables."""
    return len(load.indices) == 2 and load.indices[0] is rows and load.indices[1] is cols \
        and all(isinstance(d, (int, ir.IntImm)) for d in load.buffer.shape)


def in_place_operands(op: OuterProduct, b: Blocking, target=None) -> tuple[bool, bool]:
    """Whether the GEMM-form backbone ``op`` reads ``X`` / ``Y`` where they lie instead of
    packing them: no pack request, the micro-kernel's broadcasts read ``X[i, k]`` and its
    vector loads ``Y[k, j]`` from the arrays.  Only plain 2-d row-major operands of
    constant extents (``X[i, k]``, ``Y[k, j]``, the loop variables as indices), not the
    shared-panel form (:func:`shared_y_panel`).

    ``X``: unless its rows are a multiple of :data:`ALIASING_BYTES` apart and ``Y`` has
    more than :data:`X_ALIASED_COLUMNS` columns.  An ``MR x KC`` panel of ``X`` is ``MR``
    row segments, each read in order by one broadcast of the micro-kernel (``MR``
    sequential streams the prefetchers follow); its scalar, strided copy cost more than
    it saved: 256^3 on one Zen 4 core 314 -> 294 us (the copy was ~6.5 % of the call),
    512^3 2457 -> 2362 us, 1024^3 1.7 % less CPU time.  Rows 4 KiB apart put the ``MR``
    segments in the same L1 sets, which costs about 1 % (2048^3: 1 % more CPU time in
    place), more than the copy saves once it is spread over more than 1024 columns.
    With a pre-packed ``Y`` (a graph's weight) too.  Nor, on ``target``, when such rows
    overflow the L1 sets (:func:`x_panel_aliases`: the Zen 3 host's 8-way L1 at 1024^3).

    ``Y``: when not pre-packed, each thread's row tile (``MC``) is at most
    :data:`Y_IN_PLACE_ROWS` rows, a row of ``Y`` at most :data:`Y_IN_PLACE_ROW_BYTES`
    and not a multiple of :data:`ALIASING_BYTES`: the packed ``KC x NC`` block serves
    ``MC / MR`` register rows, and with few of them its copy is not repaid (32 x 768 x
    768 on one core 386 -> 348 us, 256^3 294 -> 289); with many rows the contiguous copy
    wins (2048^3: 164 -> 190 ms in place), and so it does when the rows are a multiple
    of 4 KiB apart: the ``KC`` rows of a block then fall into a few cache sets and evict
    each other (32 x 4096 x 1024, 16 KiB rows, and 32 x 1024 x 4096, 4 KiB rows: 3.5 ->
    4.7 ms and 3.2 -> 4.7 ms in place).

    ``POLYCOMP_GEMM_IN_PLACE``: ``auto`` (default), ``0`` (pack both, the former
    trees), ``x`` / ``y`` / ``xy`` (forced where the operand qualifies; comparisons)."""
    mode = os.environ.get("POLYCOMP_GEMM_IN_PLACE", "auto")
    if op.direct or op.channel or len(op.k) != 1 or b.shared_y or mode == "0" or \
            not _batch_free(op):
        return False, False
    it = op.update.iters
    i, j, k = it[op.i], it[op.j], it[op.k[0]]
    x_ok = _plain_2d(op.x, i, k)
    y_ok = not b.prepacked_y and _plain_2d(op.y, k, j)
    if mode != "auto":
        return x_ok and "x" in mode, y_ok and "y" in mode
    size = dt.itemsize(op.dtype)
    n_j = _extent(op.update.domain, op.j)
    if x_ok:
        x_row = _const(op.x.buffer.shape[1]) * size
        n_i = _extent(op.update.domain, op.i)
        x_ok = x_row % ALIASING_BYTES != 0 or (
            n_j is not None and n_j <= X_ALIASED_COLUMNS and
            not x_panel_aliases(b, size, target, b.MC if n_i is None else min(b.MC, n_i)))
    if not y_ok:
        return x_ok, False
    row_bytes = _const(op.y.buffer.shape[1]) * size
    n_i = _extent(op.update.domain, op.i)
    rows = b.MC if n_i is None else min(b.MC, n_i)
    return x_ok, y_ok and rows <= Y_IN_PLACE_ROWS and row_bytes <= Y_IN_PLACE_ROW_BYTES \
        and row_bytes % ALIASING_BYTES != 0


def x_panel_aliases(b: Blocking, size: int, target, rows: int) -> bool:
    """Whether an ``MR x KC`` panel of ``X`` read in place, its rows a multiple of
    :data:`ALIASING_BYTES` apart, is evicted from L1 by the ``Y`` panels the
    micro-kernel streams past it (so ``X`` is packed instead, :func:`in_place_operands`).

    Such rows put the ``MR`` segments of each ``k`` range into the same L1 sets: ``MR``
    lines of each of ``KC * size / 64`` sets, beside the ``KC * NR * size / (L1 /
    ways)`` lines each ``KC x NR`` panel of ``Y`` streams through every set.  When the
    two panels fit the L1 together but ``MR`` plus ``Y``'s lines exceed the ways of a
    set, each ``Y`` panel evicts some of the ``X`` lines and they come back from L2 in
    the next micro-kernel: AVX2's ``6 x 16`` tile at ``KC`` = 256 on the Zen 3 host's
    32 KiB 8-way L1, 6 + 4 > 8 (on Zen 4's 48 KiB 12-way L1, 6 + 4 <= 12: unchanged;
    AVX-512's 64 KiB ``Y`` panel does not fit either L1: unchanged).  Measured
    (1024^3, one thread, per-block minimum thread time of hand-edited copies of the
    generated C, docs/cpu_backend.md "fp32 GEMM on the Zen 3 host, eleventh session"):
    the register tiles took 26.3-27.7 ms with ``X`` in place, 24.4-25.1 with the
    packed copy (whose own cost is ~0.8 ms).  Only for row tiles of at least
    :data:`X_ALIAS_PACK_ROWS` rows (the 32-row products keep their measured trees); a
    pre-packed ``Y`` (a graph's weight) too since the twelfth session
    (:func:`x_alias_prepacked`: BERT batch 8 seq 384's ``3072 x 3072 x 768`` FFN down
    projection, rows 12 KiB apart).  ``POLYCOMP_GEMM_X_ALIAS=0`` keeps the former rule
    (comparisons)."""
    if target is None or (b.prepacked_y and not x_alias_prepacked()) or \
            rows < X_ALIAS_PACK_ROWS or \
            os.environ.get("POLYCOMP_GEMM_X_ALIAS", "1") == "0":
        return False
    l1, ways = target.l1_bytes, max(1, target.cpu.l1_ways)
    y_panel = b.KC * b.NR * size
    x_panel = b.MR * b.KC * size
    return x_panel + y_panel <= l1 and b.MR + -(-y_panel // (l1 // ways)) > ways


def x_alias_prepacked() -> bool:
    """Whether :func:`x_panel_aliases` also packs the aliased ``X`` of a product whose
    ``Y`` is pre-packed (a graph's weight, row tiles of at least
    :data:`X_ALIAS_PACK_ROWS` rows: the batch-1 models' 128-row products keep ``X`` in
    place).  Measured on the Zen 3 host (loaded, one thread, thread CPU time, 15
    interleaved rounds, docs/graph.md "BERT batch 8 seq 384 on the Zen 3 host"): the
    ``3072 x 3072 x 768`` product + bias + residual 212.0 / 252.3 ms in place, 189.0 /
    223.0 packed.  ``POLYCOMP_GEMM_X_ALIAS_PREPACKED=0`` keeps it in place (comparisons)."""
    return os.environ.get("POLYCOMP_GEMM_X_ALIAS_PREPACKED", "1") != "0"


def _batch_free(op: OuterProduct) -> bool:
    """(:func:`in_place_operands`) every batch dimension of ``op`` is a column batch
    dimension (:func:`column_batch`: a head-split projection's heads, which index ``Y``
    only) or takes the value 0 only (its batch 1): ``X`` may then be a plain 2-d
    array."""
    cols = column_batch(op)
    return all(t in cols or _only_zero(op.update.domain, t) for t in op.batch)


def fill_y_in_first_row(op: OuterProduct, b: Blocking, l3_bytes: int) -> bool:
    """Whether the GEMM-form backbone ``op`` packs ``Y`` without a copy pass
    (:class:`~polycomp.scheduler.promotion.record.PackRequest` ``fill``): the first
    register row tile of each row tile reads ``Y`` where it lies and stores each vector
    into the packed block in the same ``k`` iteration, the other register rows read the
    packed block (:func:`polycomp.hw.cpu.pack.fill_first_row`, the micro-kernel's
    ``fill``).  The copy pass streamed the whole ``KC x NC`` block through L1 once
    before the micro-kernels read it from L2: with few register rows per row tile it
    was a large share of the call (32 x 1024 x 1024 on one Zen 4 core: 16 % of the
    time, 84 % of the FMA peak with the copy, 92 % with the fill).

    When: ``Y`` is copied (not read in place, not pre-packed, not the shared-panel
    form), ``op`` is a plain 2-d product of constant extents (``X[i, k]``, ``Y[k, j]``)
    whose columns are whole register tiles (``N`` and ``NC`` multiples of ``NR``: the
    first row tile's tiles then cover every packed column), each thread's row tile
    holds at most :data:`FILL_ROWS` rows (more rows amortise the copy; the first tile's
    strided reads of ``Y`` are not worth it) and more than ``MR`` (one register row
    tile reads each packed element once: no copy to share), the last one at least
    ``MR`` (its first register row tile is a full tile), and ``Y`` is at most
    ``1 / FILL_L3_SHARE`` of L3 (4 MiB here) or streamed (:func:`stream_y_fill`: a larger
    ``Y`` is filled while every register row tile prefetches the next block).
    ``POLYCOMP_GEMM_FILL``: ``auto`` (default), ``0`` (the copy, for comparisons), ``1``
    (any size of ``Y``, any panel width).

    ``auto`` also asks for a register tile's row of ``Y`` of at least
    :data:`FILL_MIN_LINES` cache lines (:func:`fill_lines_ok`): AVX2's 16-float panels
    read one line of ``Y`` per ``k`` step of the first row tile, and the copy won there."""
    mode = os.environ.get("POLYCOMP_GEMM_FILL", "auto")
    if mode != "1" and not fill_lines_ok(op, b):
        return False
    if mode == "0" or b.y_in_place or \
            b.prepacked_y or b.shared_y or op.direct or op.channel or op.batch or \
            len(op.k) != 1:
        return False
    it = op.update.iters
    if not (_plain_2d(op.x, it[op.i], it[op.k[0]]) and _plain_2d(op.y, it[op.k[0]], it[op.j])):
        return False
    n_i = _extent(op.update.domain, op.i)
    n_j = _extent(op.update.domain, op.j)
    if n_i is None or n_j is None or n_j % b.NR or b.NC % b.NR:
        return False
    rows = min(b.MC, n_i)
    last = n_i - (-(-n_i // b.MC) - 1) * b.MC        # rows of the last row tile
    y_bytes = _const(op.y.buffer.shape[0]) * _const(op.y.buffer.shape[1]) * \
        dt.itemsize(op.dtype)
    return b.MR < rows <= FILL_ROWS and last >= b.MR and \
        (y_bytes <= l3_bytes // FILL_L3_SHARE or mode == "1" or stream_y_fill(op, l3_bytes))


def fill_lines_ok(op: OuterProduct, b: Blocking) -> bool:
    """Whether a register tile's row of ``Y`` (``NR`` elements: what the first row tile's
    fill reads per ``k`` step, each step a new row of ``Y``, a new page when the rows
    are 4 KiB apart) spans at least :data:`FILL_MIN_LINES` cache lines.  With one line
    per ``k`` step (AVX2's ``6 x 16`` fp32 tile: 64 bytes per 12 FMAs; fp64 ``NR`` = 8)
    the fill keeps few misses in flight and waits on ``Y``'s latency: on the Zen 3 host
    (one thread, CPU time, 32 x 1024 x 1024) the copy pass ran 1.02-1.06 ms against
    1.32-1.43 ms filled (docs/cpu_backend.md, branch ``gemm10``).  AVX-512's 64-float
    panels (4 lines per ``k`` step) keep the fill that gained on the Zen 4 host.
    ``POLYCOMP_GEMM_FILL_MIN_LINES=0`` drops the bound (the former choice)."""
    if os.environ.get("POLYCOMP_GEMM_FILL_MIN_LINES", "1") == "0":
        return True
    return b.NR * dt.itemsize(op.dtype) >= FILL_MIN_LINES * STREAM_LINE_BYTES


def stream_y_fill(op: OuterProduct, l3_bytes: int) -> bool:
    """Whether a filled ``Y`` (:func:`fill_y_in_first_row`) also streams: each register
    row tile's ``k`` loop prefetches one cache line of the next ``KC x NC`` block of
    ``Y`` per ``k`` step (row tile ``r`` the ``r``-th line of the panel's row segment;
    :func:`polycomp.hw.cpu.pack.fill_first_row`'s ``stream``), so the next block
    arrives from memory during the current block's FMAs and the first row tile then
    fills from cache.  Without it a ``Y`` from memory ran slower filled than copied
    (the first tile's panels touch a new page per ``k`` step, which the hardware
    prefetchers do not follow).  When: ``Y`` above ``1 / FILL_L3_SHARE`` of L3 (it
    comes from memory on each call) and ``POLYCOMP_GEMM_STREAM`` is not ``0`` (``0``:
    the fill without prefetches, for comparisons; ``1``: any size of ``Y``, for
    tests).  32 x 4096 x 1024 on one Zen 4 core, shared host, same process: 72 % of the
    FMA peak copied, 65 % filled, 86 % streamed (docs/cpu_backend.md)."""
    mode = os.environ.get("POLYCOMP_GEMM_STREAM", "auto")
    if mode in ("0", "1"):
        return mode == "1"
    y = op.y.buffer
    if not all(isinstance(d, (int, ir.IntImm)) for d in y.shape):
        return False
    return _const(y.shape[0]) * _const(y.shape[1]) * dt.itemsize(op.dtype) > \
        l3_bytes // FILL_L3_SHARE


def stream_aim(op: OuterProduct) -> int:
    """How far past the first element of each line the streamed prefetches of
    :func:`stream_y_fill` aim (``PackRequest.stream_aim``, elements of ``Y``): to the
    line's last element (:data:`STREAM_LINE_BYTES` / element size - 1).  On an array
    whose rows start on a 64-byte boundary that is the same line (the same prefetches as
    aiming at its first element); on numpy's arrays (16 bytes past a 64-byte boundary)
    each 64-byte vector of a panel row straddles two lines, and row tile ``r`` then
    prefetches the second of the ``r``-th vector's lines (the panel row's lines
    ``1..4`` of 5; line 0 is the previous panel's last).  Chosen with hand-edited copies
    of the generated C and then through the pipeline at 32 x 4096 x 1024 and 32 x 1024 x
    4096, two threads, shared host: on numpy's arrays 2-4 % faster (median over shuffled
    rounds of each round's best call, same process); aiming a whole line on (16) gained
    as much there but lost 6-12 % on aligned arrays through the pipeline
    (docs/cpu_backend.md *Misaligned arrays*).  ``POLYCOMP_GEMM_STREAM_AIM=0``: each
    line's first element, as before."""
    if os.environ.get("POLYCOMP_GEMM_STREAM_AIM", "1") == "0":
        return 0
    return STREAM_LINE_BYTES // dt.itemsize(op.dtype) - 1


#: stream_aim: the cache line whose last element each streamed prefetch names
STREAM_LINE_BYTES = 64
#: fill_y_in_first_row: a thread's row tile of at most this many rows
FILL_ROWS = 64
#: ... and a register tile's row of ``Y`` at least this many cache lines (fill_lines_ok)
FILL_MIN_LINES = 2
#: ... and ``Y`` at most this share of L3 (1/8: 4 MiB of Zen 4's 32): a ``Y`` that comes
#: from memory is read faster by the copy's row-contiguous pass than by the first row
#: tile's column panels (a new page per ``k`` step, which the hardware prefetchers do
#: not follow); 8 MiB (32 x 2048 x 1024) already ran slower filled on the shared host
FILL_L3_SHARE = 8


def _const(d) -> int:
    return d.value if isinstance(d, ir.IntImm) else int(d)


#: X rows a multiple of ALIASING_BYTES apart are packed above this many columns
X_ALIASED_COLUMNS = 1024
#: ... and below this many rows per row tile when they overflow the L1 sets
#: (x_panel_aliases)
X_ALIAS_PACK_ROWS = 256
#: read ``Y`` in place when a thread's row tile has at most this many rows
Y_IN_PLACE_ROWS = 256
#: ... and a row of ``Y`` at most this many bytes (in_place_operands)
Y_IN_PLACE_ROW_BYTES = 16384
#: ... and not a multiple of this many (rows that far apart share cache sets)
ALIASING_BYTES = 4096


def dynamic_row_tiles(row_tiles_only: bool) -> bool:
    """Whether a GEMM whose parallel loop is its row tiles (constant ``M``, several
    threads, fp32/fp64) hands them out one at a time (``schedule(dynamic)``, a
    :class:`~polycomp.scheduler.cpu.state.ParallelLoop` payload on its mark) in tiles of
    ``ceil(panels / (threads * ROW_TILES_PER_THREAD))`` register rows, at least
    ``SMALL_M_PANELS``, instead of one tile per thread: ``row_tiles_only`` -- the tiles
    cost nothing but the parallel loop's turns (the shared-panel form packs ``X`` per
    row tile anyway and shares ``Y``; a pre-packed ``Y`` is not copied per row tile).
    A passive OpenMP worker woken for a parallel region starts 60-200 us late on the
    idle 2-vCPU development host (a KVM guest: a sleeping vCPU is halted), and with one
    tile per thread the call waits for the late one's whole share; with tiles handed
    out as threads come, the first thread runs the tiles the late one would have waited
    for.  Opt-in (``POLYCOMP_GEMM_DYNAMIC=1``): with both cores busy-free (``chrt``)
    the smaller tiles stream a pre-packed weight from L3 once per tile, and BERT's FFN
    products took 0-9 % longer than with one tile per thread; the late-wake gain needs
    an idle host to measure (docs/cpu_backend.md *Threads*)."""
    return row_tiles_only and os.environ.get("POLYCOMP_GEMM_DYNAMIC", "0") == "1"


def _few_row_tiles(n_j: int, KC: int, MR: int, NR: int, size: int, threads: int, target,
                   deepen: bool) -> tuple[int, int]:
    """``(NC, KC)`` of the few-row split (``deepen``: a pre-packed ``Y``, :func:`few_row_kc`)."""
    if deepen:
        KC = few_row_kc(n_j, KC, MR, NR, size, threads, target.l1_bytes, target.l2_bytes)
    return few_row_nc(n_j, few_row_cache_nc(target.l2_bytes, KC, size, NR), NR, threads), KC


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def few_rows(n_i: int, MR: int, threads: int) -> bool:
    """A constant row extent ``n_i`` of fewer than :data:`SMALL_M_PANELS` register rows
    (``MR``) per thread: the threads split the ``j`` tiles instead of the ``i`` tiles
    (when there is a column panel per thread, :func:`choose_blocking`)."""
    return threads > 1 and -(-n_i // MR) < threads * SMALL_M_PANELS


def few_row_cache_nc(l2_bytes: int, KC: int, size: int, NR: int) -> int:
    """The cache bound on ``NC`` of the few-row split: a ``KC x NC`` block of ``Y`` in
    :data:`FEW_ROW_L2_SHARE` quarters of L2, a multiple of ``NR``."""
    return max(NR, l2_bytes * FEW_ROW_L2_SHARE // 4 // (KC * size) // NR * NR)


def few_row_thread_columns(n_j: int, NC: int, NR: int, threads: int) -> int:
    """The columns thread 0 runs in the few-row split with tiles of ``NC`` columns
    (``schedule(static)``: the first ``ceil(tiles / threads)`` of them, whole tiles);
    the call's critical path."""
    return _cdiv(_cdiv(n_j, NC), threads) * NC


def few_row_blocking_enabled() -> bool:
    """:func:`few_row_kc` and :func:`few_row_register_block` on (default);
    ``POLYCOMP_FEW_ROW_BLOCK=0`` keeps ``KC`` and the planned register block (for
    comparisons)."""
    return os.environ.get("POLYCOMP_FEW_ROW_BLOCK", "1") != "0"


#: the deepest ``k`` tile of the few-row split with a pre-packed ``Y`` (few_row_kc)
FEW_ROW_KC = 512


def few_row_kc(n_j: int, KC: int, MR: int, NR: int, size: int, threads: int,
               l1_bytes: int, l2_bytes: int) -> int:
    """``KC`` of the few-row split when ``Y`` is pre-packed (a graph's weight): the
    ``MR x KC`` panel of ``X`` in half of L1 (not a quarter), at most
    :data:`FEW_ROW_KC`, when the cache bound on ``NC`` it implies
    (:func:`few_row_cache_nc`: half as many columns) leaves thread 0 no more columns
    (:func:`few_row_thread_columns`); else ``KC``.  Half as many ``k`` tiles: the
    accumulators of each register tile are loaded and stored, and its ``Y`` panel's
    stream restarted, half as often.  Measured on the Zen 4 host (AVX-512, ``8 x 32``
    register block, ``KC`` 256 -> 512, 2 threads, SCHED_FIFO, best of 15 rounds, same
    process): 32 x 1024 x 4096 89.9 -> 94.8 % of the FMA peak, 32 x 1024 x 1024 and
    32 x 4096 x 1024 within the noise (docs/cpu_backend.md, *Few-row split*).  With the
    ``8 x 48`` block at 1024 columns the halved bound would cut a thread's 11 panels
    into 2 x 6 (576 instead of 528 columns): ``KC`` stays."""
    deep = min(FEW_ROW_KC, l1_bytes // (2 * MR * size) // 16 * 16)
    if deep <= KC or not few_row_blocking_enabled():
        return KC

    def thread0(kc: int) -> int:
        return few_row_thread_columns(
            n_j, few_row_nc(n_j, few_row_cache_nc(l2_bytes, kc, size, NR), NR, threads),
            NR, threads)
    return deep if thread0(deep) <= thread0(KC) else KC


def few_row_register_block(n_i: int, n_j: int, lanes: int, threads: int,
                           block: tuple[int, int]) -> tuple[int, int]:
    """The register block ``(MR, NI)`` of a product of ``n_i x n_j`` (constant) run with
    the few-row split on ``threads`` threads, ``block`` the planned one: the ``NI``
    from ``block``'s down to 2 whose ``NI * lanes``-column panels give thread 0 the
    fewest columns (``ceil(panels / threads)`` whole panels), the widest among equals;
    ``block`` itself when the split does not apply.  BERT-large's 1024 and 4096
    columns are 21.3 and 85.3 panels of 48 (8 x 48 on AVX-512): thread 0 ran 11 and 43
    panels, 528 and 2064 columns for shares of 512 and 2048 (97 and 99 %); panels of
    32 split them evenly.  8 x 32 ran as fast as 8 x 48 on one core (32 x 1024 x 1024,
    90.7 against 90.9 % of the FMA peak, best of 10); BERT-base's 768 and 3072
    columns split evenly either way and keep 8 x 48.  A narrower block keeps at least
    :data:`FEW_ROW_MIN_ACCUMULATORS` accumulators."""
    MR, NI = block
    if not few_rows(n_i, MR, threads) or NI <= 2 or not few_row_blocking_enabled():
        return block

    def thread0(ni: int) -> int:
        nr = ni * lanes
        return _cdiv(_cdiv(n_j, nr), threads) * nr
    fits = [ni for ni in range(NI, 1, -1) if ni == NI or MR * ni >= FEW_ROW_MIN_ACCUMULATORS]
    best = min(fits, key=lambda ni: (thread0(ni), -ni))
    return (MR, best) if n_j >= threads * best * lanes else block


#: the fewest accumulators a narrower few-row register block keeps
#: (:func:`few_row_register_block`): the 16 of AVX-512's 8 x 2, measured as fast as 8 x 3;
#: AVX2's 4 x 2 (8 accumulators, as many as two 4-cycle FMA pipes keep in flight) is
#: unmeasured and keeps 4 x 3
FEW_ROW_MIN_ACCUMULATORS = 16


def few_row_nc(n_j: int, NC: int, NR: int, threads: int) -> int:
    """``NC`` of the few-row split (threads take whole ``j`` tiles, ``schedule(static)``,
    so thread 0 runs ``q`` tiles of ``NC`` columns): each thread's share of the ``NR``
    column panels, ``share = ceil(panels / threads)``, cut into ``q`` tiles of at most
    ``NC`` (the cache bound) columns, ``q`` between the fewest that fit and twice as
    many, the one with the least work for thread 0 (``q * ceil(share / q)`` panels; the
    fewest tiles among equals).  Before, ``NC`` was the cache bound (half of L2)
    balanced over all columns: 1024 columns at ``NR`` = 48 made 3 tiles of 384 for 2
    threads (thread 0 ran 768 of the 1024 columns), 4096 columns 9 tiles of 480 (thread
    0: 2400); with 3/4 of L2 (:data:`FEW_ROW_L2_SHARE`) now 2 x 528 and 8 x 528 (thread
    0: 11 and 44 panels for shares of 10.7 and 42.7).  Tiles of one panel (the fewest
    panels for any share) ran at 104 instead of 167 GFLOP/s (32 x 1024 x 1024, 2
    threads, loaded host)."""
    if NC <= 0 or NC % NR:
        return NC
    panels = -(-n_j // NR)
    share = -(-panels // threads)                   # panels per thread
    least = -(-share // max(1, NC // NR))            # tiles per thread, at least
    tiles = min(range(least, 2 * least + 1), key=lambda q: (q * -(-share // q), q))
    return NR * -(-share // tiles)


def balanced_nc(n_j: int, NC: int, NR: int) -> int:
    """``NC`` (a multiple of ``NR``) evened out over the ``ceil(n_j / NC)`` column blocks
    it makes: the smallest multiple of ``NR`` that still covers ``n_j`` in as many blocks
    (768 columns, ``NR`` = 48: 480 -> 384, two blocks of 384 instead of 480 + 288)."""
    if NC <= 0 or NC % NR:
        return NC
    blocks = -(-n_j // NC)
    panels = -(-n_j // NR)
    return NR * -(-panels // blocks)


def channel_tile(op: OuterProduct, b: Blocking, target) -> int:
    """The input-channel tile of a channel-form convolution whose weights are read in
    place (:attr:`OuterProduct.y_resident`: laid out or pre-packed), 0 when the whole
    reduction stays inside each register tile: the weights one register tile reads,
    ``C * KH * KW * NR``
    elements, are read again for every tile of output pixels; above half of L2
    (ResNet-18's 512-channel 3x3: 1.2 MB per 64-channel panel) they came from L3 for
    each tile.  Tiled, a ``c_tile * KH * KW * NR`` block stays in L2 for all the output
    rows and the accumulators are loaded and stored once per channel tile (each with
    ``c_tile * KH * KW`` products between).  Tiles are balanced (``ceil(C / n)`` rounded
    up to 8 for ``n`` tiles).  ``POLYCOMP_CONV_CTILE=0`` keeps the whole reduction (for
    comparisons)."""
    if not op.channel or not op.y_resident or \
            os.environ.get("POLYCOMP_CONV_CTILE", "1") == "0":
        return 0
    dom = op.update.domain
    ck = channel_k(op)
    ext = {t: _extent(dom, t) for t in op.k}
    n_c = ext[ck]
    if n_c is None or any(e is None for e in ext.values()):
        return 0
    window = 1
    for t, e in ext.items():
        if t != ck and e is not None:
            window *= e
    per_c = window * b.NR * dt.itemsize(op.dtype)
    cap = max(8, target.l2_bytes // 2 // per_c)
    if n_c <= cap:
        return 0
    n = -(-n_c // cap)
    per_tile = -(-n_c // n)
    return -(-per_tile // 8) * 8


def shared_y_panel(b: Blocking, n_i: int | None, prepacked: bool = False) -> bool:
    """Whether the GEMM tree packs each ``KC x NC`` block of ``Y`` once, for all
    threads, and splits the ``i`` tiles over the threads inside it (the GotoBLAS / BLIS
    order ``jt -> kt -> pack Y -> parallel it -> pack X``): only when asked for
    (``POLYCOMP_GEMM_SHARED=1``: ``Y`` copied per call; ``=prepacked``: a pre-packed
    ``Y`` too), and then when the ``i`` tiles are the parallel loop and ``i`` spans
    several ``MC`` blocks (``M > MC``, a constant).  The per-thread form (the default)
    packs the whole of ``Y`` once per ``i`` tile, each thread its own copy, in one
    parallel region per call; the shared form packs it once per call, the copy split
    over the threads, at the price of one parallel region for the copy and one for the
    row tiles per ``(j, k)`` tile and of packing ``X`` once per ``(j, k, i)`` tile.
    Measured on the 2-vCPU Zen 4 host with both cores taken for the process (``chrt -f
    10``, docs/cpu_backend.md *Threads*) the per-thread form was faster at every size
    (256^3 to 2048^3: 1.09-1.18x; BERT's FFN products with a pre-packed weight
    1.13-1.31x): each parallel region costs a wake of the sleeping (passive) worker and
    a join, 25-35 us there and 60-200 us when the host is idle."""
    mode = os.environ.get("POLYCOMP_GEMM_SHARED", "0")
    if mode not in ("1", "prepacked") or (prepacked and mode != "prepacked"):
        return False
    return not b.parallel_batch and not b.parallel_j and n_i is not None and n_i > b.MC


# --------------------------------------------------------------------------- tree


def prepacked_y(op: OuterProduct, statements, options: CpuOptions) -> bool:
    """Whether the GEMM-form backbone ``op`` reads its ``Y`` pre-packed (option
    ``prepack``): ``Y`` is a kernel input named in the option, of constant extents, read
    as ``Y[k, j]`` (2-d, the reduce dimension then ``j``) and by no other reference of
    any statement (its one read is the update's, below the pack mark).  The caller then
    hands in ``Layout.packed_tiles(1, NR, KC, NC).pack(Y)``: the whole array in the
    tree's ``KC x NC`` blocks, each in the ``NR``-wide column panels the micro-kernel
    reads, laid out exactly as the per-call packed block (``Layout.packed_panel(1, NR)``
    without tiles when ``NC`` is not a multiple of ``NR``): the kernel copies nothing and
    reads the same addresses pattern as from its own copy.

    A 3-d ``Y[k, h, j]`` whose ``h`` is an affine function of column batch dimensions
    only (:func:`column_batch`: a projection's weight read per attention head, ``(K, H,
    D)``, or ``t*H + h`` for the stacked q, k, v projection's ``(K, T*H, D)``) is
    pre-packed too: ``Layout.packed_panel(2, NR, order=(1, 0))``, ``(D/NR, H, K,
    NR)`` (:func:`heads_order`), each head's ``NR``-wide panel contiguous along ``k``
    as the micro-kernel reads it."""
    y = op.y
    if op.direct or y.buffer.name not in options.prepack or len(op.k) != 1:
        return False
    if any(not isinstance(d, (int, ir.IntImm)) for d in y.buffer.shape):
        return False
    it = op.update.iters
    if len(y.indices) == 3:     # Y[k, h, j], h a column batch dimension (heads_order)
        cols = {it[c] for c in column_batch(op)}   # or t*H + h (stacked q, k, v)
        used = loop_vars(y.indices[1])
        if not used or not used <= cols:
            return False
    elif len(y.indices) != 2:
        return False
    if not (isinstance(y.indices[0], ir.Var) and y.indices[0] is it[op.k[0]]
            and isinstance(y.indices[-1], ir.Var) and y.indices[-1] is it[op.j]):
        return False
    # read once, written nowhere (a write counts as a reference)
    name = y.buffer.name
    return all(st.write.name != name for st in statements) and _reads(name, statements) == 1


def heads_order(op: OuterProduct) -> tuple:
    """The panel order of a pre-packed 3-d ``Y[k, h, j]`` (:func:`prepacked_y`): ``h``
    then ``k`` inside each panel of ``j``; () for a 2-d ``Y``."""
    return (1, 0) if len(op.y.indices) == 3 else ()


def dim_aff(space: isl.Space, pos: int) -> isl.Aff:
    return isl.Aff.var_on_domain(isl.LocalSpace.from_space(space), isl.dim_type.set, pos)


def to_upa(aff) -> isl.UnionPwAff:
    pa = aff if isinstance(aff, isl.PwAff) else isl.PwAff.from_aff(aff)
    return isl.UnionPwAff.from_pw_aff(pa)


def floor_div_aff(aff, n):
    return aff.scale_down_val(isl.Val.int_from_si(aff.get_ctx(), n)).floor()


def mod_aff(aff, n):
    return aff.mod_val(isl.Val.int_from_si(aff.get_ctx(), n))


def _image(members: list, domain: isl.Set) -> isl.Set:
    um = T.band_to_union_map(members)
    return isl.Set.from_union_set(isl.UnionSet.from_set(domain).apply(um))


def _full_tiles(img: isl.Set, p: int, t: int, sizes: tuple, dims: tuple) -> isl.Set:
    """Tiles (in ``[prefix, tile]`` space) in which, for every existing point, all
    ``sizes[d]`` values of each point dimension ``d`` in ``dims`` exist."""
    q = len(sizes)
    tiles = img.project_out(isl.dim_type.set, p + t, q)
    ctx = img.get_ctx()
    box = img
    for d in dims:   # complete the listed point dimensions, keep the others as they are
        box = box.project_out(isl.dim_type.set, p + t + d, 1).insert_dims(
            isl.dim_type.set, p + t + d, 1)
        box = box.lower_bound_val(isl.dim_type.set, p + t + d, isl.Val.int_from_si(ctx, 0))
        box = box.upper_bound_val(isl.dim_type.set, p + t + d,
                                  isl.Val.int_from_si(ctx, sizes[d] - 1))
    partial = box.subtract(img).project_out(isl.dim_type.set, p + t, q)
    return tiles.subtract(partial).coalesce()


def isolate_full_tiles(prefix: list, tile: list, point: list, sizes: tuple,
                       domain: isl.Set, tried: tuple = ((0, 1), (0,), (1,))) -> isl.UnionSet:
    """The AST option ``{ isolate[[prefix] -> [tile]] }`` of the tiles whose points
    ``point`` (of extents ``sizes``) all exist in ``domain``; when there is no such tile
    (an output narrower than one tile), of the tiles full in the first point dimension,
    else in the second (with compile-time extents the other dimension's bound is then a
    constant too).  ``tried``: the point dimensions to be full, in the order tried."""
    p, t = len(prefix), len(tile)
    img = _image(prefix + tile + point, domain)         # [prefix, tile, point]
    for dims in tried:
        full = _full_tiles(img, p, t, sizes, dims)
        if not full.is_empty():
            break
    if full.n_basic_set() > 1:
        # isl isolates convex sets: use the convex hull when it adds no partial tile
        hull = isl.Set.from_basic_set(full.convex_hull())
        if hull.is_subset(full):
            full = hull
    m = isl.Map.from_range(full).move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, p)
    return isl.UnionSet.from_set(m.wrap().set_tuple_name("isolate"))


def match_epilogue(op: OuterProduct, statements, before: tuple = ()) -> Statement | None:
    """The statement of the stage after a GEMM-form backbone (or a channel-form
    convolution, :func:`conv_epilogue`) that can run on each register tile of its
    output ``C`` right after the tile's last micro-kernel: a
    single elementwise (``compute``) statement with the domain of ``C``'s init that
    reads ``C`` only at its own point, writes another array at its own point (bias,
    activation, scaling, a cast) and reads neither operand of the product (their
    packing footprints would grow to cover its reads).  None otherwise.

    ``before``: the epilogue statements already matched (a chain: ``gelu(C + b) + r``
    lowered as one stage per operator): the statement may then read ``C`` or any of
    their outputs, each only at its own point, and must read at least one of them; it
    writes none of the arrays the backbone or those statements read or write."""
    if len(statements) != 1 or (op.direct and not (op.channel and conv_epilogue())):
        return None
    e = statements[0]
    c = op.update.write
    own = {c.name} | {p.write.name for p in before}
    if e.kind != "compute" or e.write.name in own or len(e.iters) != len(op.init.iters):
        return None

    zero = [_only_zero(e.domain, d) for d in range(len(e.iters))]

    def at_own_point(indices) -> bool:
        # (a constant 0 where the domain holds only 0 is the point: an extent-1 axis
        # broadcast-loaded at 0, e.g. a batch of 1)
        return len(indices) == len(e.iters) and \
            all(ir.structural_equal(ix, v) or (zero[d] and ir.is_const(ix, 0))
                for d, (ix, v) in enumerate(zip(indices, e.iters)))
    if not at_own_point(e.write_indices):
        return None
    try:
        same = e.domain.set_tuple_name(op.init.domain.get_tuple_name()).is_equal(
            op.init.domain)
    except isl.Error:
        return None
    loads = []
    ir.walk(e.value, lambda n: loads.append(n) if isinstance(n, ir.Load) else None)
    reads = [r for r in loads if r.buffer.name in own]
    if not same or not reads or not all(at_own_point(r.indices) for r in reads):
        return None
    if any(r.buffer in (op.x.buffer, op.y.buffer) for r in loads):
        return None             # (a residual A + A @ B) would widen the packed blocks
    read_before: set = set()
    for p in (op.update, *before):
        ir.walk(p.value, lambda n: read_before.add(n.buffer.name)
                if isinstance(n, ir.Load) else None)
    if e.write.name in read_before or e.write.name in (op.x.buffer.name, op.y.buffer.name):
        return None
    return e


def chain_temporaries(op: OuterProduct, epi: list, model) -> list[str]:
    """The arrays among ``C`` and the chain's outputs but the last that are kernel
    temporaries read by no statement outside the backbone and the chain (the chain
    reads them only at their own point, :func:`match_epilogue`): their values are
    dead once the chain ran (``CpuMicroKernels.chain_temporaries``)."""
    temps = {b.name for b in model.temporaries}
    own = {op.update.name, op.init.name} | {e.name for e in epi}
    read_elsewhere: set = set()
    for st in model.statements:
        if st.name not in own:
            ir.walk(st.value, lambda n: read_elsewhere.add(n.buffer.name)
                    if isinstance(n, ir.Load) else None)
    names = [op.update.write.name] + [e.write.name for e in epi[:-1]]
    return [n for n in names if n in temps and n not in read_elsewhere]


def gemm_dead_chain() -> bool:
    """Whether a GEMM-form backbone's epilogue chain also records its chain temporaries
    (:func:`chain_temporaries`, as the channel form does): where the micro-kernel's
    fused epilogue runs the whole chain on the accumulators, the stores of the chain's
    intermediate values that nothing else reads are dropped (BERT's FFN up projection
    stored its ``x @ W + b`` beside the GELU: 37.7 MB a call at batch 8 seq 384, read by
    nobody; the allocation is left untouched).  ``POLYCOMP_GEMM_DEAD_CHAIN=0`` keeps
    the stores (comparisons)."""
    return os.environ.get("POLYCOMP_GEMM_DEAD_CHAIN", "1") != "0"


def conv_epilogue() -> bool:
    """Whether a channel-form convolution takes an epilogue chain onto its register
    tiles (after the micro-kernel, at the last input-channel tile; with
    :func:`accumulators_from_init` only): the chain then runs on the accumulators
    (:mod:`polycomp.hw.cpu.microkernel`, *fused epilogue*) instead of as a pass over
    the output.  ``POLYCOMP_CONV_EPILOGUE=0`` keeps the pass (for comparisons)."""
    return accumulators_from_init() and os.environ.get("POLYCOMP_CONV_EPILOGUE", "1") != "0"


def accumulators_from_init() -> bool:
    """Whether a channel-form convolution's init runs on each register tile just before
    its micro-kernel (in the first input-channel tile), so that the micro-kernel starts
    its accumulators from the init's value in registers instead of a separate zeroing
    pass over the output and a strided load of each accumulator
    (:mod:`polycomp.hw.cpu.microkernel`, *fused init*).  ``POLYCOMP_ACC_INIT=0`` keeps
    the separate init pass (for comparisons)."""
    return os.environ.get("POLYCOMP_ACC_INIT", "1") != "0"


def channel_tree(op: OuterProduct, b: Blocking, sp, requests: list, ispace=None,
                 epilogue=()):
    """The channel form of a direct backbone (see :func:`match_channel_form`):

        mark cpu_parallel -> band[floor(f/NR)]
          mark cpu_pack_request (Y along its first dimension, panels of NR)
            band[batch..] -> band[floor(i/MR)]   isolate: full MR x NR tiles
              mark cpu_microkernel -> band[reduce dims..] -> band[i mod MR, f mod NR]

    so each thread packs the weights of its channel panels once, and uses them for the
    whole output while they are in L2.  Weights laid out with ``f`` innermost
    (``w[c, kh, kw, f]``, :attr:`OuterProduct.y_in_place`) are read in place: no pack
    mark; with fewer channel panels than threads (``Blocking.rows_outer``) the batch
    band (image, output row) is the parallel one, outside ``band[floor(f/NR)]``.  Every
    band is permutable and the reduction stays inside the micro-kernel, so either order
    keeps the dependences (the sum reassociated as above).

    With ``ispace`` (the init's space, :func:`accumulators_from_init`) the init joins
    every band with the same functions of its output point ``s`` as the updates of
    ``C[s]`` (its input-channel tile: ``0``) and runs on each register tile just before
    the micro-kernel:

        band[floor(i/MR)] -> sequence
          filter init:   band[i mod MR, f mod NR]          (channel tile 0 only)
          filter update: mark cpu_microkernel -> band[reduce dims..] -> band[ii, ff]

    Legal: every update of ``C[s]`` lies in the same (channel panel, rows, ``i``) tile
    as the init of ``C[s]``, at a channel tile ``>= 0``: after the init (the later
    sequence child at tile 0, a later tile otherwise); init instances are independent.
    An ``epilogue`` chain (statements of :func:`match_epilogue`, each reading ``C`` and
    the earlier ones only at its own point ``s``) takes the same functions with the
    last channel tile as its member and follows the micro-kernel in the sequence: every
    update of ``C[s]`` is at a channel tile ``<=`` the last, in the same outer tile,
    so the chain's instance of ``s`` comes after all of them, and after the earlier
    chain statements' instances of ``s`` (earlier sequence children)."""
    i, j = dim_aff(sp, op.i), dim_aff(sp, op.j)
    espaces = [e.domain.get_space() for e in epilogue] if ispace is not None else []
    spaces = ([sp] if ispace is None else [sp, ispace]) + espaces
    last_ct = 0
    if b.c_tile:
        n_c = _extent(op.update.domain, channel_k(op))
        assert n_c is not None      # (a channel tile needs a constant extent)
        last_ct = (n_c - 1) // b.c_tile

    def ct_of(s) -> isl.Aff:
        if s is sp:
            return floor_div_aff(dim_aff(s, channel_k(op)), b.c_tile)
        zero = isl.Aff.zero_on_domain(isl.LocalSpace.from_space(s))
        if s is ispace:
            return zero
        return zero.set_constant_val(isl.Val.int_from_si(s.get_ctx(), last_ct))

    def on_all(f) -> isl.UnionPwAff:    # one member over the update (and the init)
        return T.union_members([to_upa(f(s)) for s in spaces])
    ft = on_all(lambda s: floor_div_aff(dim_aff(s, op.j), b.NR))
    batch = [on_all(lambda s, t=t: dim_aff(s, t)) for t in op.batch]
    it = on_all(lambda s: floor_div_aff(dim_aff(s, op.i), b.MR))
    ii, jj = to_upa(mod_aff(i, b.MR)), to_upa(mod_aff(j, b.NR))
    ct = [on_all(ct_of)] if b.c_tile else []
    outer = batch + [ft] if b.rows_outer else [ft] + ct + batch
    iso = isolate_full_tiles(ct + outer if b.rows_outer else outer, [it], [ii, jj],
                             (b.MR, b.NR), op.update.domain,
                             ((1,),) if symbolic_rows(op) else ((0, 1), (0,), (1,)))
    point = T.Band([ii, jj], permutable=True, coincident=[True, True])
    red = T.Band([to_upa(dim_aff(sp, t)) for t in op.k], point, permutable=True)
    tile: T.Mark | T.Sequence = T.Mark(marks.CPU_MICROKERNEL, red)
    if ispace is not None:
        zero_tile = T.Band([to_upa(mod_aff(dim_aff(ispace, op.i), b.MR)),
                            to_upa(mod_aff(dim_aff(ispace, op.j), b.NR))],
                           permutable=True, coincident=[True, True])
        steps = [T.Filter(isl.UnionSet.from_set(isl.Set.universe(ispace)), zero_tile),
                 T.Filter(isl.UnionSet.from_set(isl.Set.universe(sp)), tile)]
        for es in espaces:      # the epilogue chain, in order, on the tile
            steps.append(T.Filter(isl.UnionSet.from_set(isl.Set.universe(es)), T.Band(
                [to_upa(mod_aff(dim_aff(es, op.i), b.MR)),
                 to_upa(mod_aff(dim_aff(es, op.j), b.NR))],
                permutable=True, coincident=[True, True])))
        tile = T.Sequence(steps)
    regs = T.Band([it], tile, permutable=True, coincident=[True], options=iso)
    if b.rows_outer:
        par = T.Mark(marks.CPU_PARALLEL, T.Band(outer, regs, permutable=True,
                                                coincident=[True] * len(outer)))
        # channel tiles outside the parallel rows: one fork/join per tile
        return _prepacked_mark(op, b, requests,
                               T.Band(ct, par, permutable=True) if ct else par)
    body = T.Band(batch, regs, permutable=True, coincident=[True] * len(batch)) \
        if batch else regs
    if op.y_resident:   # Y[.., f] with f unit-stride, or pre-packed: read in place
        if ct:          # each thread's (panel, channel tile) weight block in L2
            body = T.Band(ct, body, permutable=True, coincident=[False])
        return _prepacked_mark(op, b, requests, T.Mark(
            marks.CPU_PARALLEL, T.Band([ft], body, permutable=True, coincident=[True])))
    mark_y = request_mark(requests, PackRequest(op.y.buffer, 0, b.NR, "L2"))
    return T.Mark(marks.CPU_PARALLEL, T.Band([ft], T.Mark(mark_y, body), permutable=True,
                                             coincident=[True]))


def symbolic_rows(op: OuterProduct) -> bool:
    """Whether a channel-form convolution's output width (``i``) has a symbolic extent
    (image sizes symbolic: torch.compile ``dynamic=True``), so that its row tiles are
    isolated only in the channels (the tiles of all ``NR`` output channels): each row
    tile is then the micro-kernel's, the last one of a row with a run-time count of
    pixels ``min(MR, OW - MR*it)`` (:mod:`polycomp.hw.cpu.microkernel`: a full and a
    fewer-rows variant), instead of a partial piece of ``OW mod MR`` pixels that isl
    generates apart and that ran as scalar code under the padding conditions (gcc
    unswitched it into four copies).  ``POLYCOMP_CONV_SYMBOLIC=0`` isolates the full
    tiles as with constant sizes (for comparisons)."""
    return op.channel and _extent(op.update.domain, op.i) is None and \
        os.environ.get("POLYCOMP_CONV_SYMBOLIC", "1") != "0"


def _prepacked_mark(op: OuterProduct, b: Blocking, requests: list, tree):
    """``tree`` under the pre-packed request of a channel form's weights
    (:attr:`OuterProduct.y_prepacked`): the whole array in panels of ``NR`` output
    channels, the other dimensions in the micro-kernel's loop order; nothing is copied
    (the reads below read the caller's packed input, origin 0), so the mark may sit
    above every band.  ``tree`` itself when the weights are laid out instead."""
    if not op.y_prepacked:
        return tree
    return T.Mark(request_mark(requests, PackRequest(
        op.y.buffer, 0, b.NR, "L2", prepacked=True, order=op.y_order)), tree)


def prepacked_conv_order(op: OuterProduct, statements, options: CpuOptions) -> tuple:
    """The order of the other dimensions of a channel form's weights read pre-packed
    (option ``prepack``), or () when they are not: ``Y`` is a kernel input named in the
    option, of constant extents, not laid out with ``f`` innermost, indexed by plain
    loop variables ``w[f, r_1, .., r_n]`` (``f`` first, each reduce dimension once), and
    read by the update only (:func:`prepacked_y`'s count).  The order is that of the
    micro-kernel's reduce loops (:attr:`OuterProduct.k`, the window first): the caller
    packs ``Layout.packed_panel(0, NR, order=..)`` -- ``(f // NR, kh, kw, c, f mod
    NR)`` for ``w[f, c, kh, kw]`` -- so each input-channel step reads the next ``NR``
    floats, not a vector ``KH * KW * NR`` floats away."""
    y = op.y
    if not op.channel or op.y_in_place or y.buffer.name not in options.prepack \
            or len(y.indices) != len(op.k) + 1:
        return ()
    if any(not isinstance(d, (int, ir.IntImm)) for d in y.buffer.shape):
        return ()
    it = op.update.iters
    if not all(isinstance(e, ir.Var) for e in y.indices) or y.indices[0] is not it[op.j]:
        return ()
    pos = {id(e): q for q, e in enumerate(y.indices)}
    order = tuple(pos.get(id(it[t]), -1) for t in op.k)
    if sorted(order) != list(range(1, len(y.indices))) or _reads(y.buffer.name, statements) != 1:
        return ()
    return order


def _reads(name: str, statements) -> int:
    """The references to array ``name`` in ``statements`` (a write counts too)."""
    reads = 0

    def count(n):
        nonlocal reads
        if isinstance(n, ir.Load) and n.buffer.name == name:
            reads += 1
    for st in statements:
        if st.write.name == name:
            reads += 1
        ir.walk(st.value, count)
        for ix in st.write_indices:
            ir.walk(ix, count)
    return reads


def backbone_tree(op: OuterProduct, b: Blocking, epilogue=None, requests=None):
    """The subtree replacing the backbone's stage subtree: the GEMM tree (init and an
    optional epilogue inside; its pack requests appended to ``requests``), or for
    direct convolutions the filter children (init, update)."""
    if not op.direct:
        return gemm_tree(op, b, op.update.domain.get_space(), epilogue,
                         [] if requests is None else requests)
    ispace = op.init.domain.get_space()
    init_band = T.Band([to_upa(dim_aff(ispace, d)) for d in range(ispace.dim(isl.dim_type.set))],
                       permutable=True, coincident=[True] * ispace.dim(isl.dim_type.set))
    sp = op.update.domain.get_space()
    init_f = isl.UnionSet.from_set(isl.Set.universe(ispace))
    upd_f = isl.UnionSet.from_set(isl.Set.universe(sp))
    if op.channel and accumulators_from_init():
        return channel_tree(op, b, sp, [] if requests is None else requests, ispace,
                            list(epilogue or ()))
    update = channel_tree(op, b, sp, [] if requests is None else requests) if op.channel \
        else direct_tree(op, b, sp)
    return T.Sequence([T.Filter(init_f, T.Mark(marks.CPU_PARALLEL, init_band)),
                       T.Filter(upd_f, update)])


def direct_tree(op: OuterProduct, b: Blocking, sp):
    """Convolution-like backbones: operands read in place, every reduce dimension inside
    the micro-kernel, parallel over the batch dimensions (output rows)."""
    i, j = dim_aff(sp, op.i), dim_aff(sp, op.j)
    batch = [to_upa(dim_aff(sp, t)) for t in op.batch]
    tile = [to_upa(floor_div_aff(i, b.MR)), to_upa(floor_div_aff(j, b.NR))]
    ii, jj = to_upa(mod_aff(i, b.MR)), to_upa(mod_aff(j, b.NR))
    iso = isolate_full_tiles(batch, tile, [ii, jj], (b.MR, b.NR), op.update.domain)
    point = T.Band([ii, jj], permutable=True, coincident=[True, True])
    red = T.Band([to_upa(dim_aff(sp, t)) for t in op.k], point, permutable=True)
    regs = T.Band(tile, T.Mark(marks.CPU_MICROKERNEL, red), permutable=True,
                  coincident=[True, True], options=iso)
    if not batch:
        return T.Mark(marks.CPU_PARALLEL, regs)
    return T.Mark(marks.CPU_PARALLEL, T.Band(batch, regs, permutable=True,
                                         coincident=[True] * len(batch)))


def _tile_affs(space: isl.Space, op: OuterProduct, b: Blocking, k: isl.Aff | None) -> dict:
    """The schedule functions of the GEMM tree on one statement's space (``k``: its
    reduce dimension, a constant 0 for the init, None for an epilogue, whose ``kt`` the
    caller sets)."""
    i, j = dim_aff(space, op.i), dim_aff(space, op.j)
    cols = column_batch(op)
    return {"batch": [dim_aff(space, t) for t in op.batch if t not in cols],
            "cols": [dim_aff(space, t) for t in cols],
            "it": floor_div_aff(i, b.MC), "jt": floor_div_aff(j, b.NC),
            "jc": floor_div_aff(j, b.NC * max(1, b.thread_chunk)),
            "kt": None if k is None else floor_div_aff(k, b.KC),
            "ir": floor_div_aff(mod_aff(i, b.MC), b.MR),
            "jr": floor_div_aff(mod_aff(j, b.NC), b.NR),
            "ii": mod_aff(i, b.MR), "jj": mod_aff(j, b.NR)}


def _last_k_tile(op: OuterProduct, b: Blocking, space: isl.Space) -> isl.PwAff:
    """``floor(k_max / KC)`` (the last ``k`` tile, ``k_max`` a function of the
    parameters) as a function on ``space``."""
    kmax = op.update.domain.dim_max(op.k[0])
    to_params = isl.MultiAff.zero(space.map_from_domain_and_range(kmax.get_domain_space()))
    last = kmax.pullback_multi_aff(to_params)
    return last.scale_down_val(isl.Val.int_from_si(space.get_ctx(), b.KC)).floor()


def gemm_tree(op: OuterProduct, b: Blocking, sp, epilogue=None, requests=None,
              dot: DotProduct | None = None, micro_mark: str = marks.CPU_MICROKERNEL):
    """Matmul-like backbones: cache tiles, packed operands, the micro-kernel; the init
    zeroes each register tile of ``C`` in the first ``k`` tile, just before the
    micro-kernel accumulates into it (``C`` is written once per pass, not zeroed in a
    separate pass over memory first); an ``epilogue`` statement (see
    :func:`match_epilogue`) runs on each register tile in the last ``k`` tile, just
    after its last micro-kernel.  The packing of ``Y`` (for L2) and ``X`` (for L1) is
    requested by :class:`~polycomp.scheduler.promotion.record.PackRequest` records
    appended to ``requests`` (``promotion_state(state).pack_requests``), named by their marks.

    For a product on a dot-product unit (``dot``; the micro-kernel mark is then
    ``micro_mark``, ``cpu_microkernel:<n>``) both packings also group ``k`` by the unit's
    group, ``X``'s with the unit's offset and ``Y``'s compensating it (see
    :class:`~polycomp.scheduler.promotion.record.PackRequest`), and the register tiles
    are not isolated: every tile, partial ones at the edges included, is the
    micro-kernel's (its point loops run to ``min(MR, ..)`` and ``min(NR, ..)``; the
    micro-kernel masks the columns and has a variant per row count), so every output
    element is summed by the unit in the same way."""
    ispace = op.init.domain.get_space()
    zero = isl.Aff.zero_on_domain(isl.LocalSpace.from_space(ispace))
    u = _tile_affs(sp, op, b, dim_aff(sp, op.k[0]))
    z = _tile_affs(ispace, op, b, zero)
    parts = [z]
    epilogues = [] if epilogue is None else list(epilogue) \
        if isinstance(epilogue, (list, tuple)) else [epilogue]
    eparts = []
    for ep in epilogues:
        espace = ep.domain.get_space()
        e = _tile_affs(espace, op, b, None)
        e["kt"] = _last_k_tile(op, b, espace)
        parts.append(e)
        eparts.append((espace, e))

    stmts = [u] + parts         # one band member over the update, init (and epilogue)
    batch = [T.union_members([to_upa(q["batch"][d]) for q in stmts])
             for d in range(len(u["batch"]))]
    cols = [T.union_members([to_upa(q["cols"][d]) for q in stmts])
            for d in range(len(u["cols"]))]
    it, jt, jc, kt, ir_, jr = (T.union_members([to_upa(q[n]) for q in stmts])
                               for n in ("it", "jt", "jc", "kt", "ir", "jr"))
    kk = to_upa(mod_aff(dim_aff(sp, op.k[0]), b.KC))
    ii, jj = to_upa(u["ii"]), to_upa(u["jj"])
    k_outer = x_block_once(b) or bool(cols)
    order = ("jt", "kt", "it") if b.shared_y else \
        ("it", "kt", "jt") if k_outer else \
        ("it", "jc", "kt", "jt") if b.thread_chunk else ("it", "jt", "kt")
    upd_prefix = [to_upa(a) for a in u["batch"]] + \
        [a for n in order for a in ([to_upa(c) for c in u["cols"]] if n == "jt" else [])
         + [to_upa(u[n])]]
    iso = isolate_full_tiles(upd_prefix, [to_upa(u["ir"]), to_upa(u["jr"])], [ii, jj],
                             (b.MR, b.NR), op.update.domain) \
        if dot is None and not partial_tiles(op.update.domain, op.i, op.j) else None
    point = T.Band([ii, jj], permutable=True, coincident=[True, True])
    micro = T.Mark(micro_mark, T.Band([kk], point, permutable=True))
    zero_tile = T.Band([to_upa(z["ii"]), to_upa(z["jj"])], permutable=True,
                       coincident=[True, True])
    steps = [T.Filter(isl.UnionSet.from_set(isl.Set.universe(ispace)), zero_tile),
             T.Filter(isl.UnionSet.from_set(isl.Set.universe(sp)), micro)]
    for espace, e in eparts:    # the epilogue chain, in order, on the tile
        steps.append(T.Filter(isl.UnionSet.from_set(isl.Set.universe(espace)),
                              T.Band([to_upa(e["ii"]), to_upa(e["jj"])], permutable=True,
                                     coincident=[True, True])))
    body = T.Sequence(steps)
    regs = T.Band([ir_, jr], body, permutable=True, coincident=[True, True], options=iso)
    x_dim = _pos_of(op.x, op.update.iters[op.i])
    y_dim = len(op.y.indices) - 1
    requests = [] if requests is None else requests
    if dot is None:
        # an operand read where it lies (in_place_operands) gets no pack request
        mark_y = "" if b.y_in_place else request_mark(requests, PackRequest(
            op.y.buffer, y_dim, b.NR, "L2", prepacked=b.prepacked_y, fill=b.y_fill,
            stream=b.y_stream, stream_aim=b.y_stream_aim,
            tiles=() if heads_order(op) else _prepacked_tiles(op, b),
            order=heads_order(op) if b.prepacked_y else ()))
        mark_x = "" if b.x_in_place else \
            request_mark(requests, PackRequest(op.x.buffer, x_dim, b.MR, "L1"))
    else:
        k = op.update.iters[op.k[0]]
        mark_y = request_mark(requests, PackRequest(
            op.y.buffer, y_dim, b.NR, "L2", group_dim=_pos_of(op.y, k), group=dot.group,
            compensate=dot.offset))
        mark_x = request_mark(requests, PackRequest(
            op.x.buffer, x_dim, b.MR, "L1", group_dim=_pos_of(op.x, k), group=dot.group,
            offset=dot.offset))

    def packed(mark: str, node):
        return T.Mark(mark, node) if mark else node
    if b.shared_y:  # Y's block packed once per (j tile, k tile) for all threads
        inner = T.Mark(b.row_mark, T.Band([it], packed(mark_x, regs),
                                          permutable=True, coincident=[True]))
        # j tiles not coincident: the packed Y block needs no slot per j tile
        outer = T.Band([jt, kt], packed(mark_y, inner), permutable=True,
                       coincident=[False, False])
        if batch:
            outer = T.Band(batch, outer, permutable=True, coincident=[False] * len(batch))
        return outer
    if k_outer:     # X's block packed once per k tile, Y's per (k tile, j tile)
        # (the column batch dimensions, heads, with the j tiles: X packed once for all)
        outer = T.Band([kt], packed(mark_x, T.Band(
            cols + [jt], packed(mark_y, regs), permutable=bool(cols),
            coincident=[True] * (len(cols) + 1))))
    elif b.thread_chunk:     # the thread's chunk of j tiles, its k tiles, its j tiles:
        # X's block packed once per (chunk, k tile), Y's per (k tile, j tile)
        outer = T.Band([jc], T.Band([kt], packed(mark_x, T.Band(
            [jt], packed(mark_y, regs), coincident=[True]))), permutable=True,
            coincident=[True])
    else:
        outer = T.Band([jt, kt], packed(mark_y, packed(mark_x, regs)), permutable=True,
                       coincident=[True, False])
    if b.parallel_j:
        outer = T.Mark(marks.CPU_PARALLEL, outer)
    outer = T.Band([it], outer, permutable=True, coincident=[True])
    if not b.parallel_batch and not b.parallel_j:
        outer = T.Mark(b.row_mark, outer)
    if batch:
        outer = T.Band(batch, outer, permutable=True, coincident=[True] * len(batch))
        if b.parallel_batch:
            outer = T.Mark(marks.CPU_PARALLEL, outer)
    return outer


def _prepacked_tiles(op: OuterProduct, b: Blocking) -> tuple[int, ...]:
    """The cache tiles ``(KC', NC)`` of a pre-packed ``Y``'s layout (``KC' = min(KC,
    K)``: a shorter product keeps no zero rows), () for plain panels (not pre-packed, or
    ``NC`` not a multiple of ``NR``)."""
    if not b.prepacked_y or b.NC % b.NR:
        return ()
    k = op.y.buffer.shape[0]
    k = k.value if isinstance(k, ir.IntImm) else int(k)
    return (min(b.KC, k), b.NC)


def partial_tiles(domain: isl.Set, i: int, j: int) -> bool:
    """Whether the register tiles are left unisolated (the micro-kernel then takes the
    edge tiles too, see :mod:`polycomp.hw.cpu.microkernel`): where the extent of ``i``
    or ``j`` is not a compile-time constant (symbolic sizes, e.g. PolyBench's ``ni``,
    ``nj`` parameters).  isl's pieces for the partial tiles of an isolated band then
    have the tile loop eliminated and index the packed panels through ``floor``/``mod``
    of the size parameters, which neither the micro-kernel nor the vectoriser can use:
    the partial column tile ran as scalar code (a third of PolyBench gemm's time at
    LARGE, ``nj mod 32 = 12``)."""
    return _extent(domain, i) is None or _extent(domain, j) is None


def x_block_once(b: Blocking) -> bool:
    """Whether the GEMM tree runs its ``k`` tiles outside its ``j`` tiles, so that the
    ``MC x KC`` block of ``X`` is packed once per ``k`` tile instead of once per ``(j
    tile, k tile)`` (``N / NC`` times as often: 4x at 1024 columns, 8x at 2048; a
    scalar copy, about 8% of a 1024^3 product on AVX2).  Not with the few-row split,
    whose parallel loop is the ``j`` tiles (it gets the same effect per thread from
    :func:`thread_k_outer`).  ``POLYCOMP_GEMM_ORDER=jk`` keeps the former
    order (for comparisons)."""
    return not b.parallel_j and os.environ.get("POLYCOMP_GEMM_ORDER", "kj") != "jk"


def thread_k_outer(op: OuterProduct, b: Blocking, threads: int) -> int:
    """The ``j`` tiles of a thread's chunk when the few-row split (``b.parallel_j``) runs
    each thread's ``k`` tiles outside its own ``j`` tiles, 0 when it keeps the ``j``
    tiles outside the ``k`` tiles.  The tree is then ``jc -> kt -> [X pack] -> jt ->
    [Y pack] -> register tiles`` with ``jc = floor(j / (NC * chunk))`` the parallel
    loop (one chunk per thread, ``chunk = ceil(j tiles / threads)``), so a thread packs
    its ``MR``-row panels of ``X`` once per ``k`` tile instead of once per ``(j tile, k
    tile)`` (``chunk`` times as often), as the one-thread tree does (:func:`x_block_once`).
    Every element of ``C`` still sums its ``k`` tiles in order: bitwise the same results.

    When: ``X`` is packed (not in place: with ``X`` read in place the order gained
    nothing in the probe), ``Y`` is not pre-packed and not the shared-panel form, no
    column batch dimensions, constant ``N`` and ``K``, a thread has more than one ``j``
    tile and there is more than one ``k`` tile.  32 x 4096 x 1024 at two threads on the
    Zen 4 host (hand-edited copies of the generated C, same process, SCHED_FIFO, best /
    median of 30 rounds of 20 calls): 1326 / 1516 -> 1270 / 1441 us and 1305 / 1378 ->
    1257 / 1326 us (86-88 -> 90-91 % of the FMA peak); the two-thread tree run on one
    thread was 7 % slower than the one-thread tree, the same order on one thread as fast
    (docs/cpu_backend.md, *32-row products at two threads: k tiles outside each
    thread's j tiles*).  ``POLYCOMP_GEMM_THREAD_ORDER=jk`` keeps the former order (for
    comparisons)."""
    if os.environ.get("POLYCOMP_GEMM_THREAD_ORDER", "kj") == "jk" or not b.parallel_j or \
            b.prepacked_y or b.shared_y or b.x_in_place or threads < 2 or column_batch(op) \
            or len(op.k) != 1:
        return 0
    dom = op.update.domain
    n_j, n_k = _extent(dom, op.j), _extent(dom, op.k[0])
    if n_j is None or n_k is None or b.NC <= 0 or b.KC <= 0:
        return 0
    chunk = _cdiv(_cdiv(n_j, b.NC), threads)
    return chunk if chunk > 1 and n_k > b.KC else 0


def _pos_of(load: ir.Load, var) -> int:
    for d, ix in enumerate(load.indices):
        if var in loop_vars(ix):
            return d
    return 0


def pointwise_unit_stride(op: OuterProduct | None) -> bool:
    """A direct backbone in its width form whose row operand ``Y`` reads the output row
    contiguously with a 1-wide window (a 1x1 convolution of stride 1: a product of the
    weights with the input rows).  Its width form beats the channel form, whose
    accumulators are loaded and stored one output plane apart, with only ``C`` FMAs
    per accumulator in between (1 thread, AVX-512 host: 16->96 channels at 112x112
    0.76 vs 18.9 ms, 576->96 at 14x14 0.31 vs 1.52 ms, 960->160 at 7x7 0.40 vs 0.63 ms;
    strided 1x1 and 3x3 convolutions keep the channel form, which wins there)."""
    if op is None or not op.direct or op.channel:
        return False
    it = op.update.iters
    last = op.y.indices[-1]
    if not unit_stride_in(last, it[op.j]):
        return False
    dom = op.update.domain
    return all(_extent(dom, d) == 1 for d in op.k if it[d] in loop_vars(last))


def use_channel_form(ch: OuterProduct | None, target, width: OuterProduct | None = None) -> bool:
    """Whether a direct backbone runs in its channel form ``ch``: where it matches, the
    output channels and every reduce extent are constants (the packed weight panel
    has a constant box), there are at least as many channels as vector lanes, and the
    width form ``width`` is not a 1x1 convolution of stride 1 (:func:`pointwise_unit_stride`),
    and there are more than ``FEW_CHANNELS`` input channels (an RGB stem: its channel
    form reloads and restores its strided accumulators after only ``3 * KH * KW``
    products; the width form keeps them along the output row, measured 5-15% faster on
    ResNet's 7x7/2 and MobileNet's 3x3/2 stems).
    ``POLYCOMP_CONV_FORM=width`` keeps the width form (for comparisons)."""
    if ch is None or os.environ.get("POLYCOMP_CONV_FORM", "channel") != "channel":
        return False
    if pointwise_unit_stride(width):
        return False
    dom = ch.update.domain
    n_f = _extent(dom, ch.j)
    if n_f is None or n_f < target.vector_lanes(ch.dtype):
        return False
    n_c = _extent(dom, channel_k(ch))
    if n_c is not None and n_c <= FEW_CHANNELS and len(ch.k) > 1:
        return False
    return all(_extent(dom, t) is not None for t in ch.k)


def _split_name(b: Blocking) -> str:
    return "batch" if b.parallel_batch else "j tiles" if b.parallel_j else \
        "i tiles inside each shared packed Y block" if b.shared_y else "i tiles"


def _form(op: OuterProduct, dot: DotProduct | None = None) -> str:
    if dot is not None:
        return (f" (low-precision product: {dot.inputs} on the {dot.unit.name} unit, "
                f"k in groups of {dot.group})")
    return "" if not op.direct else " (direct, channel form)" if op.channel else " (direct)"


class CpuBackboneTilePass(Pass):
    name = "cpu-backbone-tile"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        if not ctx.target.isa:
            return schedule
        domain, tree = T.from_schedule(schedule)
        stmts = {s.name: s for s in ctx.model.statements}
        kids = T.stage_children(tree)
        order = [s.name for s in ctx.model.statements]
        changed = False
        idx = 0
        while idx < len(kids):
            child = kids[idx]
            idx += 1
            filt = child.filter if isinstance(child, T.Filter) else domain
            names = sorted(T.statements_of(filt), key=order.index)
            sts = [stmts[n] for n in names if n in stmts]
            dot = match_dot_product(sts, ctx.target)
            op = dot.op if dot is not None else match_outer_product(sts)
            if op is None or (dot is None and ctx.target.vector_lanes(op.dtype) <= 1):
                continue
            ch = match_channel_form(op) if dot is None else None
            if use_channel_form(ch, ctx.target, op):
                assert ch is not None
                op = ch
            pre = dot is None and prepacked_y(op, ctx.model.statements, ctx.cpu_options)
            gemm_prepacked = pre          # a GEMM's weight: its own blocks (balanced_nc)
            y_order = prepacked_conv_order(op, ctx.model.statements, ctx.cpu_options) \
                if dot is None else ()
            if y_order:                   # a conv's weight: the conv's blocking
                op = replace(op, y_prepacked=True, y_order=y_order)
                pre = True
            b = choose_blocking(op, ctx.target, ctx.cpu_options, dot, gemm_prepacked)
            # a pre-packed Y takes the per-thread order (it, kt, jt) like a copied one:
            # one parallel region per call instead of one per (j, k) block in the
            # shared-panel order (shared_y_panel; docs/cpu_backend.md *Threads*); its
            # row tiles handed out one at a time only on request (dynamic_row_tiles)
            b.prepacked_y = pre
            if dot is None:
                b.x_in_place, b.y_in_place = in_place_operands(op, b, ctx.target)
                b.y_fill = fill_y_in_first_row(op, b, ctx.target.l3_bytes)
                b.y_stream = b.y_fill and stream_y_fill(op, ctx.target.l3_bytes)
                b.y_stream_aim = stream_aim(op) if b.y_stream else 0
                b.thread_chunk = thread_k_outer(op, b, ctx.target.cpu.threads)
            if b.dynamic_rows:
                b.row_mark = marks.make(marks.CPU_PARALLEL, cpu_parallel_loops(ctx).add(
                    ParallelLoop(dynamic=True))).get_name()
            epi: list = []      # the epilogue chain: one statement per following stage
            while ctx.cpu_options.gemm_epilogue and idx + len(epi) < len(kids) and \
                    isinstance(kids[idx + len(epi)], T.Filter) and isinstance(child, T.Filter):
                nxt = [stmts[n] for n in T.statements_of(kids[idx + len(epi)].filter)
                       if n in stmts]
                e1 = match_epilogue(op, nxt, tuple(epi))
                if e1 is None:
                    break
                epi.append(e1)
            if epi and (op.channel or gemm_dead_chain()):
                mk = cpu_microkernels(ctx)
                mk.chain_temporaries.update(chain_temporaries(op, epi, ctx.model))
                mk.chains[op.update.write.name] = tuple(e.write.name for e in epi)
            if dot is None:
                new = backbone_tree(op, b, epi, promotion_state(ctx).pack_requests)
            else:
                new = self._dot_tree(dot, b, epi, ctx)
            ctx.note(self.name, f"{op.update.stage.name}{_form(op, dot)}: register block "
                                f"{b.MR}x{b.NR} "
                                f"({b.MR * b.NI} accumulators), tiles MC={b.MC} NC={b.NC} "
                                f"KC={b.KC}, parallel over "
                                f"{_split_name(b)}"
                                + (" (handed out one at a time)" if b.dynamic_rows else "")
                                + (f" (each thread's {b.thread_chunk} j tiles inside its k "
                                   f"tiles)" if b.thread_chunk else "")
                                + (f"; {op.y.buffer.name} read pre-packed (panels of {b.NR})"
                                   if b.prepacked_y else "")
                                + (f"; input channels in tiles of {b.c_tile}"
                                   if b.c_tile else "")
                                + (f"; epilogue {', '.join(e.stage.name for e in epi)} on each "
                                   f"register tile" if epi else ""))
            for _ in epi:          # the epilogue's stages join the backbone's subtree
                child.filter = child.filter.union(kids[idx].filter)
                del kids[idx]
            if isinstance(child, T.Filter):
                child.child = new
            else:
                tree = new
            changed = True
        if not changed:
            return schedule
        return T.to_schedule(domain, tree)

    @staticmethod
    def _dot_tree(dot: DotProduct, b: Blocking, epi, ctx: CompileState):
        """The GEMM tree of a product on a dot-product unit, its micro-kernel marked
        ``cpu_microkernel:<n>`` with the :class:`~polycomp.scheduler.cpu.state.DotTile`
        recorded as payload ``n``."""
        op = dot.op
        x_op, y_op = dot.unit.operands
        n = cpu_microkernels(ctx).add(DotTile(
            op.update.name, dot.unit.name, (x_op, y_op), dot.inputs, op.dtype, dot.lanes,
            dot.group, dot.offset, b.MR, b.NR, op.x.buffer.name, op.y.buffer.name))
        return gemm_tree(op, b, op.update.domain.get_space(), epi,
                         promotion_state(ctx).pack_requests, dot,
                         marks.make(marks.CPU_MICROKERNEL, n).get_name())
