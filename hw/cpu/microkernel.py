"""IR pass: the register-blocked outer-product micro-kernel, one generator for the FMA
unit (float32/float64, bare ``cpu_microkernel`` marks, below) and the dot-product units
(bf16 ``vdpbf16ps``, int8 ``vpdpbusd``: ``cpu_microkernel:<n>`` marks whose typed
payload :class:`~polycomp.scheduler.cpu.state.DotTile` gives the element types, lanes,
group and register block; see :func:`dot_tile`).  Both build the same tile: ``MR x
NR/L`` accumulators in a ``register`` buffer loaded from ``C``, a ``k`` loop with the
``Y`` vectors let-bound and each row's ``X`` broadcast bound around that row's updates,
one store per accumulator; the FMA tile updates with ``acc + x * y``, the dot tile with
the unit's intrinsic call over groups of ``k``.

Assumes: flattened, simplified IR; ``AttrStmt("cpu_microkernel")`` marks (from
:mod:`polycomp.scheduler.cpu.backbone_tile`) whose body, in a full register tile, is

    for k in [k0, k0 + K):                   (any extent)
      for ii in [0, MR):                      (constant)
        for jj in [0, NR):                    (constant, a multiple of the vector length L)
          C[c] = C[c] + R                     (c affine, coefficient 1 in jj, free of k)

where ``R`` vectorises along ``jj`` (:mod:`polycomp.lowering.vectorize`'s conditions;
for matmul ``R = Ap[..ii..] * Bp[..jj..]``); the point loops may instead run to
``min(MR, ..)`` / ``min(NR, ..)`` (the unisolated tiles of a product with symbolic
sizes: a run-time choice between the full tile and a variant per row count whose
vectors are masked to the tile's columns, see :func:`_tile`), or the row loop may run
over ``[lo, hi)`` with a column extent that depends on the row (a tile crossing a
triangle's diagonal, syrk's ``j <= i``: each row's ``C`` vectors masked to its own
columns, see :func:`_fixed_tile`).  ``C`` may also be strided along ``jj`` (a
channel-form convolution's output channels, one output plane apart: each accumulator
stored lane by lane), by a constant or by an expression of the size parameters
(:func:`column_stride`: symbolic image sizes); such a tile of a run-time row count
(:func:`strided_rows`: the last row tile of an output row of symbolic width, the
scheduler isolating the tiles in the channels only) takes its fused init and epilogue
chain in both of its variants, the rows past its count not stored (nor loaded).  Marks
over other bodies
(the partial tiles isl generates at the edges of an isolated band) are dropped and left
to the generic vectoriser.

Guarantees: the tile becomes

    acc[ii][u] = C[c(ii, u*L .. u*L+L-1)]           for ii < MR, u < NR/L   (vector loads)
    for k:  acc[ii][u] = acc[ii][u] + R(ii, u)      (fully unrolled; FMA when printed)
    C[c(ii, u*L ..)] = acc[ii][u]                    (vector stores)

with ``acc`` a ``register`` buffer of ``MR * NR/L`` vectors (printed as that many C
vector variables).  Each ``C`` element receives the same additions in the same ``k``
order as before (they are only kept in a register between them), so results are
bit-identical to the scalar loop up to FMA contraction.

*Fused init* (default; ``POLYCOMP_ACC_INIT=0`` or ``microkernels(acc_init=False)``
off): a statement right before a bare mark (in the same block, or before an ``if
(g)`` whose then-branch is the mark) that is an init nest of the same tile,

    [if (cond)] for ii' in [0, MR): for jj' in [0, NR): C[c'] = v     (v reads no C)

with the loops' bounds equal to the tile's point loops and ``c'`` equal to ``c`` under
``ii' -> ii, jj' -> jj`` (``cond`` holding every conjunct of ``g``; a one-row tile: the
column loop alone), is dropped and the tile becomes

    if (cond) acc[ii][u] = v(ii, u*L ..)     else acc[ii][u] = <the loads above>
    for k: ...                                (unchanged)
    C[c(ii, u*L ..)] = acc[ii][u]             (a contiguous C: ``cond ? acc : C + acc``)

where ``cond`` is what remains of the init's condition without ``g``'s conjuncts (none:
the init branch alone).  The init wrote exactly the tile's elements of ``C`` and
nothing between it and the tile reads or writes them, so starting the accumulators at
``v`` instead of loading the ``v`` just stored is the same computation: each element's
additions start from the same value in the same order (bit-identical).  This removes
the zeroing pass of a channel-form convolution (whose init the scheduler places on each
register tile, :func:`polycomp.scheduler.cpu.backbone_tile.accumulators_from_init`) and
its strided accumulator loads in the first input-channel tile, and a GEMM's stores of
zeros at ``k`` tile 0.

*Split init* (AVX2 float64; option ``acc_init_split``, ``POLYCOMP_ACC_INIT_SPLIT=0``
off; :func:`microkernels`' ``acc_init_split``): an init nest right before a bare mark
whose tile has run-time extents (an unisolated tile of a product with symbolic sizes,
:func:`_tile`'s ``if (full) .. else <partial>``), with the same run-time extents and
store index as the tile, becomes the full variant's start as above (``C = 0``: the
accumulators start at ``v``, stored without ``C +``); the partial variant keeps the
nest before it.  An init that reads ``C`` at its own point only (gemm's ``C *=
beta``) keeps the accumulators' start at zero and the full tile's stores under the
init's condition write ``v(C) + acc`` (contracted to one FMA) instead of ``C + acc``:
the scaling pass before the tile is gone.  Measured on Zen 3 (docs/c_frontend.md
"AVX2 fp64"): the zero and scaling stores, ``if (k tile == 0)`` nests ahead of each
tile, were 9-12 % of the CPU samples of 3mm's products.

*Fill* (a mark whose body is ``[if (c)] <fill nest>; <tile>``, from
:func:`polycomp.hw.cpu.pack.fill_first_row`: ``for k': for jj': P[p] = A[a]`` over the
tile's ``k`` and ``jj`` ranges, ``P[p]`` the tile's ``Y`` factor): ``if (c)`` the tile
whose ``k`` loop loads each ``Y`` vector from ``A[a]`` and stores it to ``P[p]`` before
its FMAs, ``else`` the plain tile (the same values: what the nest would have stored is
what the tile reads); a tile not of that form keeps the nest (vectorised) before it.

*Fused epilogue* (default; ``POLYCOMP_ACC_EPILOGUE=0`` or
``microkernels(acc_epilogue=False)`` off; constant full tiles without masks):
the statements right after the mark (or its ``if (g)``) that are nests ``[if (cond)]
for ii': for jj': E_n[e_n] = v_n`` over the tile's point loops (the GEMM tree's
epilogue chain at the last ``k`` tile, a channel-form convolution's at the last
input-channel tile; :func:`_epilogue_nests`) -- ``e_n`` of coefficient 1 in ``jj``
(a strided ``C``: any constant stride, each ``E_n`` stored lane by lane), ``v_n`` reading
``C`` and ``E_1 .. E_{n-1}`` only at their own point, no later ``E`` and nothing else
of the chain, ``R`` reading no ``E``, one common ``cond`` -- are dropped and the tile
ends, after its stores, with

    if (cond) for each (ii, u):  let c = acc[ii][u]; let e_1 = v_1(c, ..); ..
                                 E_1[e_1(ii, u*L ..)] = e_1; ..

(the accumulator holding ``C``'s final value: a contiguous ``C``'s store first sets
``acc = C + acc``).  Each element gets the same operations on the same values as
before (``C``'s and the chain's values at its point come from registers instead of
the stores just made), so results are bit-identical; ``C`` and every ``E`` are still
stored (later statements may read them).
"""
from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping, Sequence, Set

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.hw.clike import conv_symbolic_enabled
from polycomp.lowering.simplify import const_difference, simplify, upper_bound
from polycomp.lowering.vectorize import (
    OUTLINE,
    Unvectorizable,
    Widen,
    analyse,
    index_coeff,
    lane_range,
    uses,
)
from polycomp.scheduler.common import marks
from polycomp.scheduler.cpu.state import DotTile

from .pack import PackedBuffers

#: bytes of a cache line (one prefetch each)
LINE_BYTES = 64

#: ``Call(PIN_REGISTER, (v,))``: the vector ``v`` itself, printed so that the C compiler
#: must hold it in a register (an empty ``asm`` with a ``"+x"`` operand,
#: :class:`polycomp.hw.cpu.vector_printer.VectorPrinter`); the interpreter returns ``v``
PIN_REGISTER = "pin_register"

#: a ``Y`` vector of this many bytes (AVX2's ``__m256``) is pinned (pin_y_vectors)
PIN_VECTOR_BYTES = 32


def pin_y_vectors(D: str, L: int) -> bool:
    """Whether the FMA tile binds each ``Y`` vector through :data:`PIN_REGISTER`.  gcc
    (``-O3 -march=native`` on Zen 3) folds a let-bound ``Y`` load into the memory operand
    of every FMA that uses it when the tile has 4 rows (``4 x 3`` and ``4 x 2`` on AVX2:
    12 ``Y`` loads and 4 broadcasts per 12 FMAs instead of 3 + 4, counted with
    ``objdump -d``); ``6 x 2`` kept its ``Y`` vectors in registers.  Pinned, ``4 x 3``
    (the graph's weight GEMMs on AVX2) loads each ``Y`` vector once, all 16 ``ymm``
    registers in use without a spill.  Only 256-bit vectors (AVX-512 C and scalar C are
    unchanged);
    ``POLYCOMP_MK_PIN_Y=0`` turns it off (branch ``gemm10``, docs/cpu_backend.md)."""
    return os.environ.get("POLYCOMP_MK_PIN_Y", "1") != "0" and \
        L > 1 and L * dt.itemsize(D) == PIN_VECTOR_BYTES


def _match(body):
    """``(k_loops, ii_loop, jj_loop, store, rest)`` of a full register tile, or None."""
    loops = []
    node = body
    while isinstance(node, ir.For):
        loops.append(node)
        node = node.body
    if len(loops) < 2 or not isinstance(node, ir.Store) or node.lanes != 1:
        return None
    st = node
    *lk, li, lj = loops
    if not uses(st.indices[0], li.var):
        # a one-row tile: the simplifier removed the row loop, li is a reduction loop
        lk = lk + [li]
        li = ir.For(ir.Var("mk_row"), ir.IntImm(0), ir.IntImm(1), "serial", lj)
    if not lk or _row_bound(li) is None or upper_bound(lj.extent) is None:
        return None
    v = st.value
    if not (isinstance(v, ir.Binary) and v.op == "+"):
        return None
    for acc, rest in ((v.a, v.b), (v.b, v.a)):
        if isinstance(acc, ir.Load) and acc.buffer is st.buffer and \
                ir.structural_equal(acc.indices[0], st.indices[0]):
            return lk, li, lj, st, rest
    return None


def column_stride(c: ir.Expr, v: ir.Var) -> int | ir.Expr | None:
    """The stride of the store index ``c`` along the tile's column variable ``v``: a
    constant ``>= 1``, or an expression of the kernel's size parameters only (a
    channel-form convolution's output plane ``OH * OW`` of symbolic image sizes, whose
    accumulators are stored lane by lane, any run-time stride alike; not with
    ``POLYCOMP_CONV_SYMBOLIC=0``); else None."""
    s = index_coeff(c, v)
    if isinstance(s, int):
        return s if s >= 1 else None
    if s is None or not conv_symbolic_enabled() or \
            not all(isinstance(u, ir.Var) and u.is_param for u in ir.free_vars(s)):
        return None
    return s


def strided_rows(li: ir.For, lj: ir.For, st: ir.Store) -> bool:
    """Whether a tile whose row count is a run-time value (``min(MR, ..)``, the unisolated
    row tiles of a channel-form convolution of symbolic width) and whose column count is
    a constant stores a ``C`` strided along its columns (the convolution's output
    channels, one plane apart): such a tile's variants (the full one and the one of
    fewer rows) both take the fused init and epilogue chain (not with
    ``POLYCOMP_CONV_SYMBOLIC=0``)."""
    return isinstance(lj.extent, ir.IntImm) and not isinstance(li.extent, ir.IntImm) and \
        column_stride(st.indices[0], lj.var) not in (None, 1) and conv_symbolic_enabled()


def _row_bound(li: ir.For) -> int | None:
    """A constant bound of the row loop's end ``min + extent`` (the register rows); an
    end ``x % c`` (``c > 0`` constant: a triangle's last ``n mod MR`` rows, ``n % 6``)
    is at most ``c - 1``, with floored and truncated remainders alike."""
    end = li.extent if ir.is_const(li.min, 0) else simplify(li.min + li.extent)
    if isinstance(end, ir.Binary) and end.op == "%" and isinstance(end.b, ir.IntImm) and \
            end.b.value > 0:
        return end.b.value - 1
    return upper_bound(end)


class _Unguarded(ir.Mutator):
    """``cond ? load : 0`` (a padding guard) replaced by ``load``, the conditions kept."""

    def __init__(self):
        self.conds: list = []

    def visit_Select(self, e):
        if isinstance(e.f, ir.FloatImm) and e.f.value == 0.0 and isinstance(e.t, ir.Load):
            self.conds.append(e.cond)
            return e.t
        return self.generic(e)


def _worst(d: ir.Expr, box: list, low: bool) -> ir.Expr | None:
    """The least (``low``) or greatest value of ``d`` over ``box`` (``(var, lo, hi)``,
    ``d`` affine in each var with a constant coefficient), or None."""
    sub = {}
    for v, lo, hi in box:
        a = index_coeff(d, v)
        if not isinstance(a, int):
            return None
        sub[v] = (lo if a > 0 else hi) if low else (hi if a > 0 else lo)
    return simplify(ir.substitute(d, sub))


def interior(conds: list, box: list) -> ir.Expr | None:
    """A run-time condition under which every one of ``conds`` (conjunctions of affine
    comparisons ``a < b``, ``a <= b``, ``a > b``, ``a >= b``) holds at every point of
    ``box``: each comparison at its worst corner (or None when one is not of that form)."""
    parts: list = []

    def conj(c) -> bool:
        if isinstance(c, ir.Binary) and c.op == "&&":
            return conj(c.a) and conj(c.b)
        if not (isinstance(c, ir.Binary) and c.op in ("<", "<=", ">", ">=")):
            return False
        d = simplify(c.a - c.b)
        w = _worst(d, box, c.op in (">", ">="))
        if w is None:
            return False
        parts.append(ir.Binary(c.op, w, ir.IntImm(0), "bool"))
        return True
    if not all(conj(c) for c in conds) or not parts:
        return None
    out = parts[0]
    for p_ in parts[1:]:
        out = ir.Binary("&&", out, p_, "bool")
    return out


def _tile(lk, li, lj, st, rest, lanes_of, tile_ids: Iterator[int], prefetch: bool = True,
          init: tuple | None = None, epilogues: Sequence = (), dead: Set[str] = frozenset(),
          fill: tuple | None = None, stream: tuple | None = None,
          init_nest: ir.Stmt | None = None):
    """:func:`_guarded_tile`; a tile whose ``C`` is strided by a symbolic extent (a
    channel-form convolution of symbolic image sizes) and whose ``R`` reads its input
    under padding guards ``cond ? x : 0`` becomes ``if (interior) <the tile reading x
    unguarded> else <the tile>``, ``interior`` each guard's comparisons at their worst
    corner of the tile's rows and reduction loops (:func:`interior`): the tiles away
    from the border evaluate no condition (``POLYCOMP_CONV_INTERIOR=0``: not)."""
    args = (lanes_of, tile_ids, prefetch, init, epilogues, dead, fill, stream, init_nest)
    plain = _guarded_tile(lk, li, lj, st, rest, *args)
    stride = column_stride(st.indices[0], lj.var)
    if plain is None or isinstance(stride, int) or stride is None or \
            os.environ.get("POLYCOMP_CONV_INTERIOR", "1") == "0":
        return plain
    ung = _Unguarded()
    bare = ung.visit(rest)
    rows = _row_bound(li)
    if not ung.conds or rows is None:
        return plain
    box = [(li.var, ir.IntImm(0), ir.IntImm(max(rows - 1, 0)))] + \
        [(k.var, k.min, simplify(k.min + k.extent - 1)) for k in lk]
    inner = interior(ung.conds, box)
    if inner is None:
        return plain
    if not isinstance(li.extent, ir.IntImm):
        # the fast tile only as a full one (the tile of fewer rows ends an output row,
        # at the border of a padded image): no second fewer-rows variant to build
        full = upper_bound(li.extent)
        if full is None or not ir.is_const(li.min, 0):
            return plain
        inner = ir.Binary("&&", ir.Binary("==", li.extent, ir.IntImm(full), "bool"), inner,
                          "bool")
        li = ir.For(li.var, li.min, ir.IntImm(full), li.kind, li.body, li.annotations)
        if init is not None and len(init) > 2:
            return plain
    fast = _guarded_tile(lk, li, lj, st, bare, *args)
    return plain if fast is None else ir.IfThenElse(inner, fast, plain)


def _guarded_tile(lk, li, lj, st, rest, lanes_of, tile_ids: Iterator[int],
                  prefetch: bool = True, init: tuple | None = None, epilogues: Sequence = (),
                  dead: Set[str] = frozenset(), fill: tuple | None = None,
                  stream: tuple | None = None, init_nest: ir.Stmt | None = None):
    """The register tile of the module docstring, or None; ``tile_ids`` numbers the
    tiles of one function (``acc1``/``mk1_*``, ``acc2``/``mk2_*``, ...); ``prefetch``:
    prefetch a contiguous ``C`` tile's lines for writing before the ``k`` loop.

    Point loops with run-time extents ``Ei = min(MR, ..)``, ``Ej = min(NR, ..)`` (the
    unisolated tiles of a product with symbolic sizes,
    :func:`polycomp.scheduler.cpu.backbone_tile.partial_tiles`; ``MR``, ``NR`` their
    constant upper bounds) become ``if (Ei == MR && Ej == NR) <full tile> else <partial
    tile>``: the partial tile masks every vector of ``Y`` and ``C`` to the ``Ej``
    columns (masked lanes read nothing and are not stored), its rows ``i >= Ei``
    broadcast row ``Ei - 1``'s ``X`` (an element that exists) and are not stored.  One
    partial variant, not one per row count: the kernel's C stays about half as long
    (gcc's build time of a symbolic product).  With ``init`` and its nest ``init_nest``
    (the *split init*), the full tile starts its accumulators at the init's value and
    the partial tile runs after the nest, as before."""
    if fill is not None and not (isinstance(li.extent, ir.IntImm) and
                                 isinstance(lj.extent, ir.IntImm)):
        return None
    if not ir.is_const(li.min, 0) or uses(lj.extent, li.var):
        # a tile crossing a triangle's diagonal: rows [lo, hi) of the register rows,
        # each with its own column count (see _fixed_tile's ``lo``)
        MR, NR = _row_bound(li), upper_bound(lj.extent)
        if MR is None or NR is None or MR < 1 or NR < 2 or not ir.is_const(lj.min, 0):
            return None
        lo, hi = li.min, simplify(li.min + li.extent)
        tile = _fixed_tile(lk, li, lj, st, rest, lanes_of, tile_ids, prefetch, MR, NR,
                           lj.extent, None, lo, hi)
        if tile is None:
            return None
        # at run time 0 <= lo < hi <= MR (else the loops as they were: an empty or
        # unexpected row range never reads X at a row outside the tile's)
        nest: ir.Stmt = ir.For(li.var, li.min, li.extent, li.kind,
                               ir.For(lj.var, lj.min, lj.extent, lj.kind, st,
                                      lj.annotations), li.annotations)
        for k in reversed(lk):
            nest = ir.For(k.var, k.min, k.extent, k.kind, nest, k.annotations)
        ok = simplify(ir.Binary("&&", ir.Binary("&&", ir.Binary(
            "<=", ir.IntImm(0), lo, "bool"), ir.Binary("<", lo, hi, "bool"), "bool"),
            ir.Binary("<=", hi, ir.IntImm(MR), "bool"), "bool"))
        return ir.IfThenElse(ok, tile, nest)
    if isinstance(li.extent, ir.IntImm) and isinstance(lj.extent, ir.IntImm):
        return _fixed_tile(lk, li, lj, st, rest, lanes_of, tile_ids, prefetch,
                           li.extent.value, lj.extent.value, init=init, epilogues=epilogues,
                           dead=dead, fill=fill, stream=stream)
    if ((init is not None and init_nest is None) or epilogues) and \
            not strided_rows(li, lj, st):
        return None
    MR, NR = upper_bound(li.extent), upper_bound(lj.extent)
    if MR is None or NR is None or MR < 1 or NR < 2:
        return None
    full = _fixed_tile(lk, li, lj, st, rest, lanes_of, tile_ids, prefetch, MR, NR,
                       init=init, epilogues=epilogues, dead=dead)
    if full is None:
        return None
    cols = None if isinstance(lj.extent, ir.IntImm) else lj.extent
    rows = None if isinstance(li.extent, ir.IntImm) else li.extent
    part = _fixed_tile(lk, li, lj, st, rest, lanes_of, tile_ids, prefetch, MR, NR, cols, rows,
                       init=None if init_nest is not None else init, epilogues=epilogues,
                       dead=dead)
    if part is None:
        return None
    whole: ir.Expr | None = None
    for ext, n in ((rows, MR), (cols, NR)):
        if ext is not None:
            eq = ir.Binary("==", ext, ir.IntImm(n), "bool")
            whole = eq if whole is None else ir.Binary("&&", whole, eq, "bool")
    assert whole is not None
    return ir.IfThenElse(whole, full, part if init_nest is None else ir.seq(init_nest, part))


def _fixed_tile(lk, li, lj, st, rest, lanes_of, tile_ids: Iterator[int], prefetch: bool,
                MR: int, NR: int, cols: ir.Expr | None = None, rows: ir.Expr | None = None,
                lo: ir.Expr | None = None, hi: ir.Expr | None = None,
                init: tuple | None = None, epilogues: Sequence = (),
                dead: Set[str] = frozenset(), fill: tuple | None = None,
                stream: tuple | None = None):
    """The tile of ``MR x NR`` constant extents (``cols``: a run-time column count
    ``<= NR`` that masks every vector; ``rows``: a run-time row count ``1 <= rows <=
    MR``: row ``i`` reads ``X`` at row ``min(i, rows - 1)``, only rows ``< rows`` are
    stored).  With ``lo``/``hi`` (run-time rows ``0 <= lo < hi <= MR``, a tile that
    crosses a triangle's diagonal) only rows ``lo <= i < hi`` exist: row ``i`` reads
    ``X`` at row ``min(max(i, lo), hi - 1)``, ``cols`` may depend on the row variable
    (row ``i``'s vectors of ``C`` are masked to its own count), the ``Y`` vectors to
    the largest count of an existing row; the other rows are computed, not stored.

    ``init``: ``(cond, value)`` of a fused init (:func:`_init_nest`): where ``cond`` holds
    (always when None) the accumulators start from ``value`` (an expression of the point
    variables, vectorised along ``jj`` like ``R``) and ``C`` is not read.

    ``epilogues``: ``(cond, store)`` of a fused epilogue chain (:func:`_epilogue_nests`,
    no masked vectors): after the stores, where ``cond`` holds, each statement's
    value on every accumulator vector, ``C`` and the earlier statements' outputs at
    the same point read from registers, stored once; ``dead``: chain temporaries
    (:class:`~polycomp.scheduler.cpu.state.CpuMicroKernels`) whose stores after the
    last reduction tile are dropped (a strided ``C`` among them: stored only before).

    ``fill``: ``(loops, store)`` of a fill nest (:func:`_split_fill`, ``for k'..: for
    jj': P[p] = A[a]``, the tile's ``k`` and ``jj`` ranges) whose ``P[p]`` is the
    tile's ``Y`` factor: each ``Y`` vector is loaded from ``A[a]`` instead and stored to
    ``P[p]`` in the same ``k`` iteration, before the updates (the values read are
    those the fill nest would have stored); None when the tile is not of that form
    (every vector full, unit stride along ``jj`` in ``P`` and ``A``).

    ``stream``: a prefetch nest (:func:`_split_stream`) whose prefetch goes first in
    each ``k`` iteration (dropped where its loops are not the tile's ``k`` loops)."""
    L = lanes_of(st.buffer.dtype)
    if L <= 1 or NR < 2 or not ir.is_const(lj.min, 0) or \
            (lo is None and not ir.is_const(li.min, 0)):
        return None
    c = st.indices[0]
    cstride = column_stride(c, lj.var)
    if cstride is None or any(uses(c, k.var) for k in lk) or \
            ((cols is not None or lo is not None) and cstride != 1) or \
            (rows is not None and cstride != 1 and not conv_symbolic_enabled()):
        return None

    def row(i: int) -> ir.Expr:
        """The row of ``X`` that tile row ``i`` reads."""
        if lo is not None and hi is not None:
            return simplify(ir.min_(ir.max_(ir.IntImm(i), lo), hi - 1))
        if rows is None or i == 0:
            return ir.IntImm(i)
        return simplify(ir.min_(ir.IntImm(i), rows - 1))

    def exists(i: int) -> ir.Expr | None:
        """Whether tile row ``i`` is a row of the nest (None: always)."""
        if lo is not None and hi is not None:
            return simplify(ir.Binary("&&", ir.Binary("<=", lo, ir.IntImm(i), "bool"),
                                      ir.Binary("<", ir.IntImm(i), hi, "bool"), "bool"))
        if rows is not None and i > 0:
            return ir.Binary("<", ir.IntImm(i), rows, "bool")
        return None

    def cols_of(i: int | None) -> ir.Expr | None:
        """Row ``i``'s column count (``i`` None: the count the ``Y`` vectors take)."""
        if cols is None or not uses(cols, li.var):
            return cols
        if i is not None:
            return simplify(ir.substitute(cols, {li.var: ir.IntImm(i)}))
        most: ir.Expr | None = None
        for r in range(MR):
            here = exists(r)
            n = simplify(ir.substitute(cols, {li.var: ir.IntImm(r)}))
            if here is not None:
                n = ir.Select(here, n, ir.IntImm(0), "int64")
            most = n if most is None else ir.max_(most, n)
        return most
    if _reads(rest, st.buffer):
        return None
    probe = lj
    if cstride != 1:    # analyse R alone: C's strided store is the micro-kernel's own
        dummy = ir.Buffer("mk_probe", st.buffer.dtype, (lj.extent,), flat=True)
        probe = ir.For(lj.var, lj.min, lj.extent, lj.kind,
                       ir.Store(dummy, (lj.var,), rest), lj.annotations)
    dtype, lanes = analyse(probe, lanes_of)  # R widens along jj (raises otherwise)
    if dtype != st.buffer.dtype or lanes != L:
        return None
    D = st.buffer.dtype
    NV = -(-NR // L)
    last = NR - (NV - 1) * L          # lanes of the last vector (L unless NR mod L != 0)
    if MR * NV + NV + 1 > 2 * 32:     # far beyond any register file: not a register tile
        return None
    tid = next(tile_ids)

    ycols = cols_of(None)

    def count(u, i: int | None = None) -> ir.Expr | None:
        """The columns of vector ``u`` stored (None: all ``L``) of row ``i`` (None: the
        columns any row stores)."""
        n = ycols if i is None else cols_of(i)
        if n is not None:
            return simplify(n - u * L)
        return None if u < NV - 1 or last == L else ir.IntImm(last)

    def masked(u, e, i: int | None = None):
        """Lanes beyond the tile's NR columns are neither read nor computed."""
        n = count(u, i)
        if n is None:
            return e
        return ir.Select(lane_range(ir.IntImm(0), n, L), e,
                         ir.Broadcast(ir.FloatImm(0.0, D), L, D), D)
    acc = ir.Buffer(f"acc{tid}", D, (ir.IntImm(MR * NV * L),), scope="register",
                    flat=True)

    def slot(i, u):
        return ir.Ramp(ir.IntImm((i * NV + u) * L), ir.IntImm(1), L)

    def cidx(i, u):
        return simplify(ir.substitute(c, {li.var: ir.IntImm(i), lj.var: ir.IntImm(u * L)}))

    def cref(i, u):
        return ir.Ramp(cidx(i, u), ir.const(cstride), L)

    # C strided along the columns (a convolution's channel form: columns are output
    # channels, one plane apart): each accumulator is stored through a small stack
    # buffer, lane by lane (once per tile, after the whole reduction)
    lane_buf = ir.Buffer(f"mk{tid}_c", D, (ir.IntImm(L),), scope="local", flat=True) \
        if cstride != 1 else None

    def strided_store(i, u, n) -> ir.Stmt:
        assert lane_buf is not None
        lane = ir.Var(f"mk{tid}_l", "int64")
        put = ir.Store(lane_buf, (ir.Ramp(ir.IntImm(0), ir.IntImm(1), L),),
                       ir.Load(acc, (slot(i, u),), D, L), L)
        scalar = ir.Store(st.buffer, (simplify(cidx(i, u) + lane * cstride),),
                          ir.Load(lane_buf, (lane,), D), 1)
        return ir.seq(put, ir.For(lane, ir.IntImm(0), ir.IntImm(n), "serial", scalar))

    # the factor shared by a row of the tile (the Y vector) is loaded once per k
    # iteration (let-bound around the whole update); the X broadcast of row i is bound
    # just around row i's NV FMAs, so at most MR*NV accumulators + NV Y vectors + one
    # broadcast are live at a time (what the register block was sized for: binding all
    # MR broadcasts first makes gcc spill accumulators inside the k loop)
    xf, yf = _factors(rest, li.var, lj.var)
    ylets, xlets = [], {}
    yvars, xvars = {}, {}
    fill_stores: list[ir.Stmt] = []
    source = None
    if fill is not None:
        source = _fill_source(fill, lk, lj, yf)
        if source is None or any(count(u) is not None for u in range(NV)):
            return None
        yf, ptarget = source
    pin = pin_y_vectors(D, L)
    if yf is not None:
        for u in range(NV):
            v = ir.Var(f"mk{tid}_y{u}", D)
            yval = masked(u, Widen(lj.var, ir.IntImm(u * L), D, L).expr(yf))
            if pin:
                yval = ir.Call(PIN_REGISTER, (yval,), D, pure=False)
            ylets.append((v, yval))
            yvars[u] = v
            if source is not None:
                at = simplify(ir.substitute(ptarget.indices[0], {lj.var: ir.IntImm(u * L)}))
                fill_stores.append(ir.Store(ptarget.buffer, (ir.Ramp(at, ir.IntImm(1), L),),
                                            v, L))
        for i in range(MR):
            v = ir.Var(f"mk{tid}_x{i}", D)
            xlets[i] = Widen(lj.var, ir.IntImm(0), D, L).expr(
                ir.substitute(xf, {li.var: row(i)}))
            xvars[i] = v
    loads: list[ir.Stmt] = []
    stores: list[ir.Stmt] = []
    plain_stores: list[ir.Stmt] = []    # (contiguous C) the stores without C's value
    row_stmts: list[ir.Stmt] = []
    # contiguous C: the accumulators start at zero while C's lines are prefetched for
    # writing, and C is added once after the k loop (C's lines arrive during the loop
    # instead of stalling its first FMAs: a GEMM's C tile is in L3 or memory at each k
    # tile); strided C (a convolution's channel form) keeps the load before the loop
    from_zero = lane_buf is None
    starts: list[ir.Stmt] = []      # the fused init's accumulator values
    if init is not None:
        ival = init[1]
        for i in range(MR):
            for u in range(NV):
                w = Widen(lj.var, ir.IntImm(u * L), D, L)
                starts.append(ir.Store(acc, (slot(i, u),), masked(
                    u, w.expr(ir.substitute(ival, {li.var: row(i)}))), L))
    if from_zero and prefetch:
        esize = dt.itemsize(D)
        for i in range(MR):
            offs = sorted({*range(0, NR, max(1, LINE_BYTES // esize)), NR - 1})
            for o in offs:
                at = simplify(ir.substitute(c, {li.var: ir.IntImm(i), lj.var: ir.IntImm(o)}))
                loads.append(ir.Evaluate(ir.Call(
                    "prefetch", (ir.Load(st.buffer, (at,), D), ir.IntImm(1)), "int32",
                    pure=False)))
    for i in range(MR):
        updates = []
        row_first = len(stores)
        for u in range(NV):
            if from_zero:
                loads.append(ir.Store(acc, (slot(i, u),),
                                      ir.Broadcast(ir.FloatImm(0.0, D), L, D), L))
                total: ir.Expr = ir.Binary(
                    "+", masked(u, ir.Load(st.buffer, (cref(i, u),), D, L), i),
                    ir.Load(acc, (slot(i, u),), D, L), D)
            else:
                ld: ir.Stmt = ir.Store(acc, (slot(i, u),),
                                       masked(u, ir.Load(st.buffer, (cref(i, u),), D, L)), L)
                here = exists(i)    # a row past the tile's: C not read there
                loads.append(ld if here is None else ir.IfThenElse(here, ld))
                total = ir.Load(acc, (slot(i, u),), D, L)
            store: ir.Stmt = ir.Store(st.buffer, (cref(i, u),), total, L)
            plain: ir.Stmt = ir.Store(st.buffer, (cref(i, u),),
                                      ir.Load(acc, (slot(i, u),), D, L), L)
            if epilogues and from_zero:     # the accumulator holds C's final value
                store = ir.seq(ir.Store(acc, (slot(i, u),), total, L), plain)
            if lane_buf is not None:
                store = strided_store(i, u, last if u == NV - 1 else L)
            elif count(u, i) is not None:
                store = ir.AttrStmt("vector_mask", (count(u, i), L), store)
                plain = ir.AttrStmt("vector_mask", (count(u, i), L), plain)
            stores.append(store)
            plain_stores.append(plain)
            if yf is not None:
                r = ir.Binary("*", xvars[i], yvars[u], D)
            else:
                w = Widen(lj.var, ir.IntImm(u * L), D, L)
                r = masked(u, w.expr(ir.substitute(rest, {li.var: row(i)})))
            updates.append(ir.Store(acc, (slot(i, u),),
                                    ir.Binary("+", ir.Load(acc, (slot(i, u),), D, L), r, D), L))
        rstmt = ir.seq(*updates)
        row_stmts.append(ir.LetStmt(xvars[i], xlets[i], rstmt) if i in xlets else rstmt)
        here = exists(i)
        if here is not None:     # rows outside the tile's: computed, not stored
            stores[row_first:] = [ir.IfThenElse(here, ir.seq(*stores[row_first:]))]
            plain_stores[row_first:] = [ir.IfThenElse(here, ir.seq(*plain_stores[row_first:]))]
    pf = _stream_stmt(stream, lk)
    body = ir.seq(*(() if pf is None else (pf,)), *fill_stores, *row_stmts)
    for v, val in reversed(ylets):
        body = ir.LetStmt(v, val, body)
    for k in reversed(lk):
        body = ir.For(k.var, k.min, k.extent, k.kind, body,
                      k.annotations + (("microkernel", f"{MR}x{NR}"),))
    if epilogues:
        if any(count(u, i) is not None or (exists(i) is not None and lane_buf is None)
               for i in range(MR) for u in range(NV)):
            return None
        epi = _epilogue_stmts(epilogues, st, li, lj, acc, slot, MR, NV, L, D, lane_buf, dead,
                              exists)
        if epi is None:
            return None
        if lane_buf is not None and st.buffer.name in dead:
            # C's values are dead once the chain ran on them: stored only in the
            # tiles before the last reduction tile (a strided C: the costly stores)
            ecnd, ebody = epi
            stores = [ebody if ecnd is None else ir.IfThenElse(ecnd, ebody, ir.seq(*stores))]
            epi = None
    if init is not None and len(init) > 2 and init[2]:
        # an init reading C at its own point (gemm's C *= beta): the accumulators start
        # at zero as in every k tile, and the init tile's stores add them to the init's
        # value instead of C's (the stores the init nest made, then C + acc: the same
        # operations on the same values)
        if not from_zero or cols is not None or rows is not None or lo is not None:
            return None
        own = []
        for i in range(MR):
            for u in range(NV):
                w = Widen(lj.var, ir.IntImm(u * L), D, L)
                own.append(ir.Store(st.buffer, (cref(i, u),), ir.Binary(
                    "+", w.expr(ir.substitute(init[1], {li.var: row(i)})),
                    ir.Load(acc, (slot(i, u),), D, L), D), L))
        out = ir.seq(*loads, body, ir.seq(*own) if init[0] is None else
                     ir.IfThenElse(init[0], ir.seq(*own), ir.seq(*stores)))
    elif init is not None:
        first, later = ir.seq(*starts), ir.seq(*loads)
        if from_zero:   # the stores of the init's tile need not add C
            prefetches = [p_ for p_ in loads if isinstance(p_, ir.Evaluate)]
            first = ir.seq(*prefetches, *starts)
            if init[0] is None:
                out = ir.seq(first, body, *plain_stores)
            else:
                out = ir.seq(ir.IfThenElse(init[0], first, later), body,
                             ir.IfThenElse(init[0], ir.seq(*plain_stores), ir.seq(*stores)))
        else:
            out = ir.seq(first if init[0] is None else ir.IfThenElse(init[0], first, later),
                         body, *stores)
    else:
        out = ir.seq(*loads, body, *stores)
    if epilogues and epi is not None:
        ecnd, ebody = epi
        out = ir.seq(out, ebody if ecnd is None else ir.IfThenElse(ecnd, ebody))
    if lane_buf is not None:
        out = ir.Allocate(lane_buf, out)
    return ir.Allocate(acc, out)


def _split_stream(body):
    """``((loops, prefetches), tile)`` of ``<prefetch nest>; <tile>`` (a filled mark's
    ``for k'..: prefetch(A[n]); ..``, :func:`polycomp.hw.cpu.pack.fill_first_row`'s
    ``stream``), else ``(None, body)``."""
    if not (isinstance(body, ir.Block) and len(body.stmts) >= 2):
        return None, body
    loops = []
    node = body.stmts[0]
    while isinstance(node, ir.For):
        loops.append(node)
        node = node.body
    calls = node.stmts if isinstance(node, ir.Block) else (node,)
    if not loops or not all(isinstance(c, ir.Evaluate) and isinstance(c.value, ir.Call) and
                            c.value.name == "prefetch" for c in calls):
        return None, body
    rest = body.stmts[1] if len(body.stmts) == 2 else ir.Block(body.stmts[1:])
    return (loops, node), rest


def _stream_stmt(stream, lk) -> ir.Stmt | None:
    """A prefetch nest (:func:`_split_stream`) on the tile's own ``k`` variables, when
    its loops have the tile's ``k`` ranges; else None (the prefetches are dropped)."""
    if stream is None:
        return None
    loops, ev = stream
    if len(loops) != len(lk) or any(const_difference(f.min, t.min) != 0 or
                                    const_difference(f.extent, t.extent) != 0
                                    for f, t in zip(loops, lk)):
        return None
    return ir.substitute(ev, {f.var: t.var for f, t in zip(loops, lk)})


def _split_fill(body):
    """``((cond, loops, store), tile)`` of a mark body ``[if (cond)] <fill>; <tile>``
    (:func:`polycomp.hw.cpu.pack.fill_first_row`: ``<fill>`` is ``for ..: P[p] = A[a]``
    over plain loops; ``<tile>`` may start with a prefetch nest, :func:`_split_stream`),
    else ``(None, body)``."""
    if not (isinstance(body, ir.Block) and len(body.stmts) >= 2):
        return None, body
    first = body.stmts[0]
    cond = None         # (the condition simplified away: one row tile, always filled)
    if isinstance(first, ir.IfThenElse) and first.orelse is None:
        cond, first = first.cond, first.then
    loops = []
    node = first
    while isinstance(node, ir.For):
        loops.append(node)
        node = node.body
    if not loops or not isinstance(node, ir.Store) or node.lanes != 1 or \
            not isinstance(node.value, ir.Load) or len(node.indices) != 1:
        return None, body
    return (cond, loops, node), \
        body.stmts[1] if len(body.stmts) == 2 else ir.Block(body.stmts[1:])


def _fill_source(fill, lk, lj, yf):
    """``(A[a], P[p])`` of a fill nest (:func:`_split_fill`) on the tile's own loop
    variables, when its loops have the tile's ``k`` and ``jj`` ranges, ``P[p]`` is the
    tile's ``Y`` factor ``yf`` and both indices step by 1 along ``jj``; else None."""
    _cond, loops, store = fill
    if not isinstance(yf, ir.Load) or yf.buffer is not store.buffer or \
            len(loops) != len(lk) + 1 or len(yf.indices) != 1:
        return None
    to = {}
    for f, t in zip(loops, (*lk, lj)):
        if const_difference(f.min, t.min) != 0 or const_difference(f.extent, t.extent) != 0:
            return None
        to[f.var] = t.var
    target = ir.substitute(store.indices[0], to)
    src = ir.substitute(store.value, to)
    if const_difference(target, yf.indices[0]) != 0 or len(src.indices) != 1 or \
            index_coeff(target, lj.var) != 1 or index_coeff(src.indices[0], lj.var) != 1:
        return None
    return src, ir.Load(store.buffer, (target,), yf.dtype)


def _factors(rest, vi, vj):
    """``(x, y)`` when ``rest = x * y`` with ``x`` free of the column variable ``vj`` and
    ``y`` free of the row variable ``vi``, else ``(None, None)``."""
    if isinstance(rest, ir.Binary) and rest.op == "*":
        for x, y in ((rest.a, rest.b), (rest.b, rest.a)):
            if not uses(x, vj) and not uses(y, vi):
                return x, y
    return None, None


def _reads(e, buf) -> bool:
    found = []
    ir.walk(e, lambda n: found.append(1) if isinstance(n, ir.Load) and n.buffer is buf else None)
    return bool(found)


def _init_nest(stmt, reads_ok: bool = False):
    """``(cond, loops, store)`` of an init nest in front of a micro-kernel: ``[if
    (cond)] for ..: C[c] = v`` (a perfect nest of For loops around one scalar store
    whose value does not read ``C``; ``cond`` None when unguarded), or None."""
    cond = None
    if isinstance(stmt, ir.IfThenElse) and stmt.orelse is None:
        cond, stmt = stmt.cond, stmt.then
    found = _loops_to_store(stmt)
    if found is None or not found[0] or (not reads_ok and
                                         _reads(found[1].value, found[1].buffer)):
        return None
    return cond, found[0], found[1]


def _epilogue_nests(stmts, guard, lk, li, lj, st, rest) -> tuple[list, int]:
    """The epilogue chain after a micro-kernel: the longest run of ``stmts`` that are
    nests ``[if (cond)] for ii': for jj': E[e] = v`` (:func:`_init_nest`) with the
    tile's point loops, ``e`` of coefficient 1 in ``jj`` where ``c``'s is (else any
    constant ``>= 1``: stored lane by lane), each ``v`` reading ``C`` and
    the earlier statements' outputs only at their own point (their stores' indices),
    none of the later ones' and nothing the chain writes otherwise (and the tile's
    ``R`` reads none of their outputs), of ``C``'s dtype
    with no casts and only vector math calls; ``cond`` without the conjuncts of the
    mark's ``guard`` and free of the tile's loops.  Returns ``[(cond, store)]`` with
    the stores renamed to the tile's point variables, and the number of ``stmts``
    they take (an ``if`` holding several nests is taken whole or not at all)."""
    from polycomp.lowering.vectorize import VECTOR_MATH
    out: list = []
    used = 0
    if not (isinstance(li.extent, ir.IntImm) and isinstance(lj.extent, ir.IntImm)) and \
            not strided_rows(li, lj, st):
        return out, used
    own = {st.buffer: simplify(st.indices[0])}
    written = {st.buffer}
    for s_ in stmts:
        group = _epilogue_group(s_, guard)
        if group is None:
            break
        taken: list = []
        for nest in group:
            e = _epilogue_nest(nest, lk, li, lj, st, own, written, VECTOR_MATH)
            if e is None or _reads(rest, e[1].buffer) or \
                    any(_reads(p[1].value, e[1].buffer) for p in out + taken):
                break
            taken.append(e)
            own[e[1].buffer] = e[1].indices[0]
            written.add(e[1].buffer)
        if len(taken) != len(group):
            break
        out += taken
        used += 1
    return out, used


def _epilogue_group(stmt, guard) -> list | None:
    """The nests of one statement after a micro-kernel: ``[if (cond)] nest`` or ``if
    (cond) { nest; nest; .. }`` (isl puts a chain under one condition), each as
    :func:`_init_nest` gives it (reads of ``C`` allowed) with ``cond`` less the
    conjuncts of ``guard``; None if some part is not such a nest."""
    cond, body = None, stmt
    if isinstance(stmt, ir.IfThenElse) and stmt.orelse is None:
        cond, body = stmt.cond, stmt.then
    parts = list(body.stmts) if isinstance(body, ir.Block) else [body]
    out = []
    for p in parts:
        nest = _init_nest(p if cond is None else ir.IfThenElse(cond, p), reads_ok=True)
        if nest is not None and guard is not None:
            nest = _implied(nest, guard.cond)
        if nest is None:
            return None
        out.append(nest)
    return out or None


def _epilogue_nest(nest, lk, li, lj, st, own: dict, written: set, vector_math):
    """``(cond, store)`` of one epilogue nest (see :func:`_epilogue_nests`), or None."""
    cond, loops, est = nest
    if len(loops) != (1 if li.var.name == "mk_row" else 2) or est.buffer in written or \
            len(est.indices) != 1 or est.buffer.dtype != st.buffer.dtype:
        return None
    pairs = [(loops[-1], lj)] + ([] if li.var.name == "mk_row" else [(loops[0], li)])
    if not all(ir.structural_equal(simplify(a.min), simplify(b.min)) and
               ir.structural_equal(simplify(a.extent), simplify(b.extent))
               for a, b in pairs):
        return None
    ren = {a.var: b.var for a, b in pairs}
    idx = simplify(ir.substitute(est.indices[0], ren))
    value = ir.substitute(est.value, ren)
    cs, es = column_stride(st.indices[0], lj.var), column_stride(idx, lj.var)
    if es is None or (cs == 1 and es != 1) or \
            any(uses(idx, k.var) or uses(value, k.var) for k in lk):
        return None
    if cond is not None and any(uses(cond, v) for v in (li.var, lj.var)):
        return None
    nodes: list = []
    ir.walk(value, nodes.append)
    bad = any(isinstance(n, ir.Cast) or (isinstance(n, ir.Call) and
                                         n.name not in vector_math) for n in nodes)
    for n in nodes:
        if not isinstance(n, ir.Load):
            continue
        if n.buffer in own:
            bad = bad or len(n.indices) != 1 or not ir.structural_equal(
                simplify(n.indices[0]), simplify(own[n.buffer]))
        else:   # nothing the chain writes, at any point
            bad = bad or n.buffer.dtype != st.buffer.dtype or n.buffer is est.buffer
    if bad or value.dtype != st.buffer.dtype:
        return None
    return cond, ir.Store(est.buffer, (idx,), value, 1)


class _OwnPoint(ir.Mutator):
    """Loads of the given buffers (read at their own point: checked by
    :func:`_epilogue_nests`) replaced by their values' variables."""

    def __init__(self, values: dict):
        self.values = dict(values)

    def visit_Load(self, ld):
        return self.values[ld.buffer] if ld.buffer in self.values else self.generic(ld)


def _epilogue_stmts(epilogues, st, li, lj, acc, slot, MR: int, NV: int, L: int, D: str,
                    lane_buf: ir.Buffer | None = None, dead: Set[str] = frozenset(),
                    exists=lambda i: None):
    """The vector statements of a fused epilogue chain (see :func:`_fixed_tile`; every
    statement under the same ``cond``): per accumulator vector ``(i, u)``, ``C``'s value
    is ``acc[i][u]``, each statement's value is widened along ``jj`` with ``C`` and the
    earlier statements' values bound as vector lets, and stored (not the arrays in
    ``dead``, chain temporaries), rows ``i`` where ``exists(i)`` is not None only under
    it (a tile of a run-time row count).  ``(cond, body)``, or None when a value does
    not widen or the conditions differ."""
    cond = epilogues[0][0]
    if any((c is None) != (cond is None) or (c is not None and not ir.structural_equal(
            c, cond)) for c, _ in epilogues):
        return None
    vecs: list[ir.Stmt] = []
    for i in range(MR):
        for u in range(NV):
            cv = ir.Var(f"ep_c{i}_{u}", D)
            vars_ = {st.buffer: cv}
            chain: list = []       # (var, value, store) per statement
            for n, (_, est) in enumerate(epilogues):
                v0 = ir.substitute(_OwnPoint(vars_).visit(est.value), {li.var: ir.IntImm(i)})
                w = Widen(lj.var, ir.IntImm(u * L), D, L, vector_lets=vars_.values())
                try:
                    vec = w.expr(v0)
                except Unvectorizable:
                    return None
                ev = ir.Var(f"ep{n}_{i}_{u}", D)
                at = simplify(ir.substitute(est.indices[0], {li.var: ir.IntImm(i),
                                                             lj.var: ir.IntImm(u * L)}))
                if lane_buf is None:
                    put: ir.Stmt = ir.Store(est.buffer, (ir.Ramp(at, ir.IntImm(1), L),), ev, L)
                else:       # strided along the columns: through the lane buffer
                    stride = index_coeff(est.indices[0], lj.var)
                    lane = ir.Var(f"ep{n}_l", "int64")
                    put = ir.seq(
                        ir.Store(lane_buf, (ir.Ramp(ir.IntImm(0), ir.IntImm(1), L),), ev, L),
                        ir.For(lane, ir.IntImm(0), ir.IntImm(L), "serial", ir.Store(
                            est.buffer, (simplify(at + lane * stride),),
                            ir.Load(lane_buf, (lane,), D), 1)))
                chain.append((ev, vec, None if est.buffer.name in dead else put))
                vars_[est.buffer] = ev
            body: ir.Stmt = ir.seq(*(store for _, _, store in chain if store is not None))
            for ev, vec, _ in reversed(chain):
                body = ir.LetStmt(ev, vec, body)
            one: ir.Stmt = ir.LetStmt(cv, ir.Load(acc, (slot(i, u),), D, L), body)
            here = exists(i)
            vecs.append(one if here is None else ir.IfThenElse(here, one))
    return cond, ir.seq(*vecs)


def _own_point(store: ir.Store) -> bool:
    """Whether ``store``'s value reads its own buffer only at the stored element (an
    init ``C[c] = beta * C[c]``)."""
    found: list = []
    ir.walk(store.value, lambda n: found.append(n)
            if isinstance(n, ir.Load) and n.buffer is store.buffer else None)
    return bool(found) and all(len(e.indices) == 1 and ir.structural_equal(
        e.indices[0], store.indices[0]) for e in found)


def _guarded_mark(stmt):
    """``(mark, guard)``: a bare micro-kernel mark, alone (``guard`` None) or as the
    then-branch of an ``if`` (``guard``: that IfThenElse; isl guards an isolated tile
    that way), else ``(None, None)``."""
    guard = None
    if isinstance(stmt, ir.IfThenElse):
        guard, stmt = stmt, stmt.then
        while isinstance(stmt, ir.Block) and len(stmt.stmts) == 1:
            stmt = stmt.stmts[0]
    if isinstance(stmt, ir.AttrStmt) and stmt.key == marks.CPU_MICROKERNEL and \
            stmt.value in ("", None):
        return stmt, guard
    return None, None


def _conjuncts(e) -> list:
    if isinstance(e, ir.Binary) and e.op == "&&":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _implied(nest, guard: ir.Expr):
    """The init ``nest`` as seen inside ``if (guard)``: its condition without the
    conjuncts of ``guard`` (each must be one of its own: the init runs only where the
    micro-kernel does), or None."""
    cond, loops, st = nest
    mine = _conjuncts(cond) if cond is not None else []
    rest = list(mine)
    for g in _conjuncts(guard):
        hit = next((q for q, c in enumerate(rest) if ir.structural_equal(c, g)), None)
        if hit is None:
            return None
        del rest[hit]
    left = None
    for c in rest:
        left = c if left is None else ir.Binary("&&", left, c, "bool")
    return left, loops, st


def _fused_init(nest, lk, li, lj, st, symbolic: bool = False):
    """``(cond, value)`` when the init ``nest`` (:func:`_init_nest`) writes exactly the
    micro-kernel's tile of ``C``: its innermost loops run like the tile's point loops
    ``li``, ``lj`` (a one-row tile: the column loop alone) and its store index equals
    ``c`` under that renaming; ``value`` is in the tile's point variables.  Else None.
    The point loops' extents are constants, or (``symbolic``) the same run-time
    extents ``min(MR, ..)`` as the tile's (an unisolated tile, :func:`_tile`)."""
    cond, loops, init_st = nest
    if init_st.buffer is not st.buffer or len(init_st.indices) != 1 or (not symbolic and (
            not isinstance(li.extent, ir.IntImm) or not isinstance(lj.extent, ir.IntImm))):
        return None
    one_row = li.var.name == "mk_row"
    if len(loops) != (1 if one_row else 2):
        return None
    pairs = [(loops[-1], lj)] + ([] if one_row else [(loops[0], li)])
    ren = {}
    for a, b in pairs:
        if not (ir.structural_equal(simplify(a.min), simplify(b.min)) and
                ir.structural_equal(simplify(a.extent), simplify(b.extent))):
            return None
        ren[a.var] = b.var
    idx = simplify(ir.substitute(init_st.indices[0], ren))
    if not ir.structural_equal(idx, simplify(st.indices[0])):
        return None
    value = ir.substitute(init_st.value, ren)
    if any(uses(value, k.var) for k in lk) or (cond is not None and any(
            uses(cond, v) for v in (li.var, lj.var, *(k.var for k in lk)))):
        return None
    return cond, value


class _Micro(ir.Mutator):
    def __init__(self, lanes_of, dots: Sequence[DotTile] = (),
                 packed: PackedBuffers | None = None, note=None, prefetch: bool = True,
                 acc_init: bool = True, acc_epilogue: bool = True,
                 dead: Set[str] = frozenset(),
                 chains: Mapping[str, tuple[str, ...]] | None = None,
                 acc_init_split: bool = False):
        self.lanes_of = lanes_of
        self.acc_init_split = acc_init_split
        self.dead = dead
        self.chains = chains or {}
        self.acc_init = acc_init
        self.acc_epilogue = acc_epilogue
        self.fused = 0
        self.epilogues = 0
        self.filling = 0
        self.prefetch = prefetch
        self.dots, self.packed = dots, packed or PackedBuffers()
        self.note = note
        self.count = 0
        self.tile_ids = itertools.count(1)     # register-tile names, per function

    def visit_Block(self, b):
        """An init nest right before a bare micro-kernel mark that writes the same tile
        (:func:`_fused_init`, option ``acc_init``) becomes the accumulators' start; the
        epilogue nests right after it (:func:`_epilogue_nests`, option
        ``acc_epilogue``) run on the accumulators after the stores."""
        if not self.acc_init and not self.acc_epilogue:
            return self.generic(b)
        out: list = []
        q = 0
        stmts = b.stmts
        while q < len(stmts):
            fused, used = self._fuse_at(stmts, q)
            if fused is not None:
                self.count += 1
                out.append(fused)
                q += used
            else:
                out.append(self.visit(stmts[q]))
                q += 1
        return ir.seq(*out)

    def _fuse_at(self, stmts, q: int):
        """``(tile, statements used)`` of a micro-kernel at ``stmts[q]`` (or after an
        init nest there) with a fused init and/or epilogue chain, or ``(None, 0)``."""
        nest = None
        mark, guard = _guarded_mark(stmts[q])
        first = q
        own_read = False
        if mark is None and self.acc_init and q + 1 < len(stmts):
            mark, guard = _guarded_mark(stmts[q + 1])
            nest = _init_nest(stmts[q]) if mark is not None else None
            if nest is None and mark is not None and guard is None and self.acc_init_split:
                nest = _init_nest(stmts[q], reads_ok=True)      # (split init only)
                own_read = nest is not None and _own_point(nest[2])
                nest = nest if own_read else None
            if nest is not None and guard is not None:
                nest = _implied(nest, guard.cond)
            if nest is None:
                return None, 0
            first = q + 1
        if mark is None:
            return None, 0
        fill, mbody = _split_fill(mark.body)
        stream, mbody = _split_stream(mbody) if fill is not None else (None, mbody)
        m = _match(mbody)
        if m is None:
            return None, 0
        lk, li, lj, st, rest = m
        init = _fused_init(nest, lk, li, lj, st, strided_rows(li, lj, st)) \
            if nest is not None and not own_read else None
        init_nest = None
        if nest is not None and init is None and self.acc_init_split and guard is None \
                and fill is None and st.buffer.dtype == "float64" and not (
                    isinstance(li.extent, ir.IntImm) and isinstance(lj.extent, ir.IntImm)):
            # split init: the unisolated tile's full variant starts from the init
            init = _fused_init(nest, lk, li, lj, st, symbolic=True)
            init_nest = stmts[q] if init is not None else None
            if init is not None and own_read:
                init = (init[0], init[1], True)
        if nest is not None and init is None:
            return None, 0
        epis, n_epi = _epilogue_nests(stmts[first + 1:], guard, lk, li, lj, st, rest) \
            if self.acc_epilogue and init_nest is None else ([], 0)
        if init is None and not epis:
            return None, 0
        try:
            whole = tuple(e.buffer.name for _, e in epis) == self.chains.get(st.buffer.name)
            fused = _tile(lk, li, lj, st, rest, self.lanes_of, self.tile_ids,
                          self.prefetch, init, epis, self.dead if whole else frozenset(),
                          stream=stream, init_nest=init_nest)
        except Unvectorizable:
            fused = None
        if fused is None and epis and init is not None:     # the init alone
            try:
                fused = _tile(lk, li, lj, st, rest, self.lanes_of, self.tile_ids,
                              self.prefetch, init, stream=stream)
            except Unvectorizable:
                fused = None
            epis, n_epi = [], 0
        if fused is None:
            return None, 0
        if init is not None:
            self.fused += 1
        self.epilogues += len(epis)
        whole_ = tuple(e.buffer.name for _, e in epis) == self.chains.get(st.buffer.name)
        fused = self._filled(fill, fused, lambda f: _tile(
            lk, li, lj, st, rest, self.lanes_of, self.tile_ids, self.prefetch, init, epis,
            self.dead if whole_ else frozenset(), fill=f, stream=stream))
        if guard is not None:
            fused = ir.IfThenElse(guard.cond, fused, self.visit(guard.orelse))
        return fused, first - q + 1 + n_epi

    def visit_AttrStmt(self, s):
        if s.key != marks.CPU_MICROKERNEL:
            return self.generic(s)
        if s.value not in ("", None):          # cpu_microkernel:<n>: a dot-product tile
            n = marks.attr_index(s, marks.CPU_MICROKERNEL)
            out = None
            if n is not None and 0 <= n < len(self.dots):
                out = dot_tile(s.body, self.dots[n], self.packed, self.tile_ids)
            if out is not None:
                self.count += 1
                return out
            if self.note is not None:
                what = f"{self.dots[n].update} ({self.dots[n].unit})" \
                    if n is not None and 0 <= n < len(self.dots) else f"mark {s.value}"
                self.note(f"dot-product tile of {what} not formed (the nest is not of the "
                          f"expected form): left to the generic path")
            return self.visit(s.body)
        fill, body = _split_fill(s.body)
        stream, body = _split_stream(body) if fill is not None else (None, body)
        m = _match(body)
        if m is not None:
            try:
                lk, li, lj, st, rest = m
                out = _tile(lk, li, lj, st, rest, self.lanes_of, self.tile_ids, self.prefetch,
                            stream=stream)
            except Unvectorizable:   # left to the generic path
                out = None
            if out is not None:
                self.count += 1
                return self._filled(fill, out, lambda f: _tile(
                    lk, li, lj, st, rest, self.lanes_of, self.tile_ids, self.prefetch,
                    fill=f, stream=stream))
        return self.visit(s.body)

    def _filled(self, fill, tile, make):
        """``tile`` (a mark's tile) when the mark has no fill nest (``fill`` None); else
        ``if (cond) <the tile filling the panel in its k loop> else tile`` (``make(fill)``,
        :func:`_fixed_tile`'s ``fill``), or, where that tile is not formed, the fill nest
        (to the generic path) under ``cond`` and then ``tile``."""
        if fill is None:
            return tile
        cond, loops, store = fill
        try:
            with_fill = make(fill)
        except Unvectorizable:
            with_fill = None
        if with_fill is not None:
            self.filling += 1
            return with_fill if cond is None else ir.IfThenElse(cond, with_fill, tile)
        nest: ir.Stmt = store
        for lp in reversed(loops):
            nest = ir.For(lp.var, lp.min, lp.extent, lp.kind, nest, lp.annotations)
        nest = self.visit(nest)
        return ir.seq(nest if cond is None else ir.IfThenElse(cond, nest), tile)


def microkernels(func: ir.LoweredFunc, lanes_of, dots: Sequence[DotTile] = (),
                 packed: PackedBuffers | None = None, note=None,
                 prefetch: bool = True, acc_init: bool | None = None,
                 acc_epilogue: bool | None = None,
                 dead: Set[str] = frozenset(),
                 chains: Mapping[str, tuple[str, ...]] | None = None,
                 acc_init_split: bool = False) -> ir.LoweredFunc:
    """The pass (see the module docstring): ``lanes_of(dtype)`` gives the vector lanes;
    ``dots`` are the payloads of the ``cpu_microkernel:<n>`` marks
    (:func:`polycomp.scheduler.cpu.state.cpu_microkernels`) and ``packed`` says what
    the packing pass made (:func:`polycomp.hw.cpu.pack.packed_buffers`); ``note(text)``
    is told about each dot-product nest left to the generic path; ``prefetch`` (option
    ``prefetch``): the FMA tiles prefetch their ``C`` lines; ``acc_init`` (default: not
    ``POLYCOMP_ACC_INIT=0``): an init nest right before a tile starts its accumulators
    (the module docstring's *fused init*); ``acc_epilogue`` (default: not
    ``POLYCOMP_ACC_EPILOGUE=0``): the epilogue nests right after a tile run on its
    accumulators (*fused epilogue*); ``dead``: the chain temporaries whose stores a
    fused epilogue drops after the last reduction tile, where it runs the whole chain
    ``chains[C]`` (:class:`~polycomp.scheduler.cpu.state.CpuMicroKernels`);
    ``acc_init_split``: a float64 init nest before an unisolated tile (symbolic sizes)
    starts the accumulators of its full variant (the module docstring's *split init*)."""
    if acc_init is None:
        acc_init = os.environ.get("POLYCOMP_ACC_INIT", "1") != "0"
    if acc_epilogue is None:
        acc_epilogue = os.environ.get("POLYCOMP_ACC_EPILOGUE", "1") != "0"
    m = _Micro(lanes_of, dots, packed, note, prefetch, acc_init, acc_epilogue, dead,
               chains or {}, acc_init_split=acc_init_split)
    out = func.with_body(m.visit(func.body))
    out = out.counted(microkernels=m.count, filling_tiles=m.filling)
    return out


# --------------------------------------------------------------------------- dot tiles
#
# The IR intrinsics of a dot-product tile (printed by hw/cpu/vector_printer.py):
#
# * ``dot_bf16(acc, x, y)`` (float32 x lanes): each lane of ``acc`` plus the two
#   products of the bf16 pair in the same 32-bit lane of ``x`` and ``y``
#   (``vdpbf16ps``);
# * ``dot_u8s8(acc, x, y)`` (int32 x lanes): each lane plus the four products of the
#   unsigned bytes of ``x`` and the signed bytes of ``y`` in that lane (``vpdpbusd``);
# * ``broadcast_group(load)``: the ``group`` elements of a ``group``-lane load, repeated
#   in every 32-bit lane (``x``: one row of the tile's broadcast operand).
#
# ``x`` and ``y`` are *group vectors*: ``lanes * group`` elements of the input dtype
# (a 512-bit register), element ``l * group + g`` the ``g``-th value of ``k`` of lane ``l``.

DOT_CALLS = {("bfloat16", "bfloat16", "float32"): "dot_bf16",
             ("uint8", "int8", "int32"): "dot_u8s8"}
BROADCAST_GROUP = "broadcast_group"
#: the annotation of a dot tile's loop over the groups of ``k``
DOT_GROUPS = "dot_groups"


def dot_call(tile: DotTile) -> str | None:
    """The IR intrinsic of ``tile``'s unit, or None where there is none."""
    return DOT_CALLS.get((*tile.operands, tile.accumulator))


def _loops_to_store(node):
    """``(loops outermost first, store)`` of a perfect nest of For loops around one
    Store, or None."""
    loops = []
    while isinstance(node, ir.For):
        loops.append(node)
        node = node.body
    return (loops, node) if isinstance(node, ir.Store) and node.lanes == 1 else None


def _operand(e, tile: DotTile, role: int):
    """The packed load of dot operand ``role`` (0: ``x``, 1: ``y``) in the factor ``e``
    of the product, or None: ``cast(load)`` for an operand of the inputs' dtype;
    ``cast(load ^ -offset) + offset`` (the unsigned byte of the packed element, see
    :mod:`polycomp.hw.cpu.pack`) for the unsigned operand of the inputs' width."""
    want = tile.operands[role]
    acc = tile.accumulator
    if want == tile.inputs:
        if isinstance(e, ir.Cast) and e.dtype == acc and isinstance(e.value, ir.Load) and \
                e.value.dtype == tile.inputs:
            return e.value
        return None
    if role != 0 or want != "u" + tile.inputs or not tile.offset:
        return None
    if not (isinstance(e, ir.Binary) and e.op == "+" and e.dtype == acc):
        return None
    for c, v in ((e.b, e.a), (e.a, e.b)):
        if ir.is_const(c, tile.offset) and isinstance(v, ir.Cast) and v.dtype == acc:
            x = v.value
            if isinstance(x, ir.Binary) and x.op == "^" and isinstance(x.a, ir.Load) and \
                    ir.is_const(x.b, -tile.offset) and x.a.dtype == tile.inputs:
                return x.a
    return None


def _vars_of(e) -> set:
    return set(ir.free_vars(e))


def dot_tile(body, tile: DotTile, packed: PackedBuffers, tile_ids: Iterator[int]):
    """The register tile of a ``cpu_microkernel:<n>`` nest on a dot-product unit, or None
    (the nest is then left to the generic path).

    Assumes (flattened, simplified IR; :mod:`polycomp.scheduler.cpu.backbone_tile`'s dot
    tree, :mod:`polycomp.hw.cpu.pack`'s grouped packing): ``body`` is an optional
    *correction* nest ``for ii, jj: C[c] = C[c] + S[s]`` (the column sums of a
    compensated packing) followed by

        for kk in [0, Ek):  for ii in [0, Ei):  for jj in [0, Ej):
          C[c] = C[c] + X * Y

    (loops of extent 1 may be gone) with ``Ei <= mr``, ``Ej <= nr``, ``X`` / ``Y``
    reading the packings of the tile's broadcast / vector array (``packed``: grouped
    panels of ``mr`` / ``nr`` lanes), in which the ``group`` values ``kk = group*p + g``
    of a row ``ii`` of ``X`` are consecutive, and the ``lanes`` columns ``jj = 16u + l``
    of ``Y`` are consecutive groups (checked on the index expressions along the loops
    that are there); padding of the last group and of the last panel's lanes is zero.

    Guarantees: per row count ``r`` (``r = Ei``, or one variant per ``r <= mr`` chosen by
    ``Ei`` at run time)

        acc[i][u] = C[c(i, 16u ..)] (+ S[s(16u ..)])        (masked to Ej columns)
        for p in [0, ceil(Ek / group)):
          y_u = Y's group vector at (p, 16u);  per row i: x_i = broadcast_group(X at (i, p))
          acc[i][u] = dot(acc[i][u], x_i, y_u)
        C[c(i, 16u ..)] = acc[i][u]                           (masked to Ej columns)

    with ``acc`` a register buffer of ``r * ceil(Ej / lanes)`` vectors, each variant in
    an :data:`OUTLINE` attribute (printed as a function of its own), the stores whole
    vectors where the tile has all its columns (a run-time test where ``Ej`` is not a
    constant).  Each output element gets the same products; they are summed per lane
    group by the unit (in the unit's rounding for bf16; exactly for int8), the padding
    adding zeros."""
    call = dot_call(tile)
    if call is None:
        return None
    L, G = tile.lanes, tile.group
    stmts = list(body.stmts) if isinstance(body, ir.Block) else [body]
    if len(stmts) not in (1, 2):
        return None
    main = _loops_to_store(stmts[-1])
    corr = _loops_to_store(stmts[0]) if len(stmts) == 2 else None
    if main is None or (len(stmts) == 2 and corr is None):
        return None
    loops, st = main
    C = st.buffer
    if C.dtype != tile.accumulator:
        return None
    c = st.indices[0]
    v = st.value
    if not (isinstance(v, ir.Binary) and v.op == "+" and isinstance(v.a, ir.Load)
            and v.a.buffer is C and ir.structural_equal(v.a.indices[0], c)
            and isinstance(v.b, ir.Binary) and v.b.op == "*"):
        return None
    xl = yl = None
    for fx, fy in ((v.b.a, v.b.b), (v.b.b, v.b.a)):
        a, b = _operand(fx, tile, 0), _operand(fy, tile, 1)
        if a is not None and b is not None and \
                packed.arrays.get(a.buffer.name) == tile.x_array and \
                packed.arrays.get(b.buffer.name) == tile.y_array:
            xl, yl = a, b
            break
    if xl is None or yl is None:
        return None
    for buf, width in ((xl.buffer, tile.mr), (yl.buffer, tile.nr)):
        lay = packed.layouts.get(buf.name)
        if lay is None or lay.kind != "packed-panel" or lay.group != G or lay.width != width:
            return None
    if any(not ir.is_const(lp.min, 0) for lp in loops):
        return None
    cv = _vars_of(c)
    kk = [lp for lp in loops if lp.var not in cv]
    ii = [lp for lp in loops if lp.var in cv and lp.var in _vars_of(xl.indices[0])]
    jj = [lp for lp in loops if lp.var in cv and lp.var in _vars_of(yl.indices[0])]
    if len(kk) > 1 or len(ii) > 1 or len(jj) > 1 or len(kk) + len(ii) + len(jj) != len(loops):
        return None
    if ii and ii[0].var in _vars_of(yl.indices[0]) or jj and jj[0].var in _vars_of(xl.indices[0]):
        return None
    one = ir.IntImm(1)
    kvar = kk[0].var if kk else None
    ivar = ii[0].var if ii else ir.Var("mk_row")
    jvar = jj[0].var if jj else ir.Var("mk_col")
    Ek, Ei, Ej = (lp[0].extent if lp else one for lp in (kk, ii, jj))
    ub_i, ub_j = upper_bound(Ei), upper_bound(Ej)
    if ub_i is None or ub_j is None or not (1 <= ub_i <= tile.mr) or not (1 <= ub_j <= tile.nr):
        return None
    NV = -(-ub_j // L)
    if ub_i * NV + NV + 1 > 2 * 32:
        return None
    p = ir.Var("mk_p")

    def at(e, k, i=None, j=None):
        m = {}
        if kvar is not None and k is not None:
            m[kvar] = k
        if i is not None:
            m[ivar] = i
        if j is not None:
            m[jvar] = j
        return simplify(ir.substitute(e, m))

    def consecutive(e, base, steps) -> bool:
        """``e`` at each ``(k, i, j, offset)`` of ``steps`` is ``base`` + offset."""
        for k, i, j, off in steps:
            d = const_difference(at(e, k, i, j), base)
            if d != off:
                return False
        return True
    kg = p * G                      # the k of group p
    kp = kg if kvar is not None else None
    yidx, xidx = yl.indices[0], xl.indices[0]
    ybase = [at(yidx, kp, None, ir.IntImm(u * L)) for u in range(NV)]
    xbase = [at(xidx, kp, ir.IntImm(i)) for i in range(ub_i)]
    if any(kvar is not None and kvar in _vars_of(b) or jvar in _vars_of(b) for b in xbase) \
            or any(kvar is not None and kvar in _vars_of(b) or ivar in _vars_of(b)
                   for b in ybase):
        return None
    for u in range(NV):
        steps = [(kg + g, None, ir.IntImm(u * L), g) for g in range(1, G)] \
            if kvar is not None else []
        if jj:
            steps += [(kp, None, ir.IntImm(u * L + t), t * G) for t in (1, L - 1)]
        if not consecutive(yidx, ybase[u], steps):
            return None
    if kvar is not None:
        for i in range(ub_i):
            if not consecutive(xidx, xbase[i],
                               [(kg + g, ir.IntImm(i), None, g) for g in range(1, G)]):
                return None
    # the correction nest: the same output points, C[c] + S[s] with s consecutive in jj
    sums = None
    if corr is not None:
        cloops, cst = corr
        sv = cst.value
        if cst.buffer is not C or not (isinstance(sv, ir.Binary) and sv.op == "+"
                                       and isinstance(sv.a, ir.Load) and sv.a.buffer is C
                                       and isinstance(sv.b, ir.Load)):
            return None
        cvars = _vars_of(cst.indices[0])
        ci = [lp for lp in cloops if lp.var in cvars and lp.var not in _vars_of(sv.b.indices[0])]
        cj = [lp for lp in cloops if lp.var in _vars_of(sv.b.indices[0])]
        if len(ci) + len(cj) != len(cloops) or len(ci) != len(ii) or len(cj) != len(jj):
            return None
        if any(not ir.is_const(lp.min, 0) for lp in cloops):
            return None
        if (ci and not ir.structural_equal(ci[0].extent, Ei)) or \
                (cj and not ir.structural_equal(cj[0].extent, Ej)):
            return None
        m = {}
        if ci:
            m[ci[0].var] = ivar
        if cj:
            m[cj[0].var] = jvar
        if not ir.structural_equal(simplify(ir.substitute(cst.indices[0], m)), c):
            return None
        sidx = simplify(ir.substitute(sv.b.indices[0], m))
        sbase = [at(sidx, None, None, ir.IntImm(u * L)) for u in range(NV)]
        for u in range(NV):
            if cj and not consecutive(sidx, sbase[u], [
                    (None, None, ir.IntImm(u * L + t), t) for t in (1, L - 1)]):
                return None
        sums = (sv.b.buffer, sbase)
    tid = next(tile_ids)
    D, IN = tile.accumulator, tile.inputs
    cols = None if isinstance(Ej, ir.IntImm) else Ej

    def cref(i, u):
        return ir.Ramp(at(c, None, ir.IntImm(i), ir.IntImm(u * L)), ir.IntImm(1), L)

    def masked(u, stmt):
        if cols is None and (u + 1) * L <= ub_j:
            return stmt
        count = simplify((cols if cols is not None else ir.IntImm(ub_j)) - u * L)
        return ir.AttrStmt("vector_mask", (count, L), stmt)

    def tile_of(rows: int) -> ir.Stmt:
        acc = ir.Buffer(f"acc{tid}_{rows}", D, (ir.IntImm(rows * NV * L),), scope="register",
                        flat=True)

        def slot(i, u):
            return ir.Ramp(ir.IntImm((i * NV + u) * L), ir.IntImm(1), L)
        loads, stores, rowsb = [], [], []
        for i in range(rows):
            for u in range(NV):
                init: ir.Expr = ir.Load(C, (cref(i, u),), D, L)
                if sums is not None:
                    sbuf, sb = sums
                    init = ir.Binary("+", init, ir.Load(
                        sbuf, (ir.Ramp(sb[u], ir.IntImm(1), L),), sbuf.dtype, L), D)
                loads.append(masked(u, ir.Store(acc, (slot(i, u),), init, L)))
                stores.append(ir.Store(C, (cref(i, u),), ir.Load(acc, (slot(i, u),), D, L), L))
        yvars = [ir.Var(f"mk{tid}_y{u}", IN) for u in range(NV)]
        for i in range(rows):
            xv = ir.Var(f"mk{tid}_x{i}", IN)
            xval = ir.Call(BROADCAST_GROUP, (ir.Load(
                xl.buffer, (ir.Ramp(xbase[i], ir.IntImm(1), G),), IN, G),), IN)
            ups = [ir.Store(acc, (slot(i, u),), ir.Call(call, (
                ir.Load(acc, (slot(i, u),), D, L), xv, yvars[u]), D), L) for u in range(NV)]
            rowsb.append(ir.LetStmt(xv, xval, ir.seq(*ups)))
        kbody: ir.Stmt = ir.seq(*rowsb)
        for u in reversed(range(NV)):
            kbody = ir.LetStmt(yvars[u], ir.Load(yl.buffer, (ir.Ramp(
                ybase[u], ir.IntImm(1), L * G),), IN, L * G), kbody)
        groups = simplify((Ek + (G - 1)) // G)
        k = ir.For(p, ir.IntImm(0), groups, "serial", kbody,
                   ((("coincident", False),) if kk else ()) +
                   (("microkernel", f"{rows}x{NV * L}"), (DOT_GROUPS, True)))
        # the stores: whole vectors where the tile has all its columns (masked stores
        # here make gcc 12 keep accumulators on the stack inside the k loop)
        store: ir.Stmt = ir.seq(*(masked(n % NV, x) for n, x in enumerate(stores)))
        if cols is not None:
            store = ir.IfThenElse(ir.Binary(">=", cols, ir.IntImm(NV * L), "bool"),
                                  ir.seq(*stores), store)
        return ir.AttrStmt(OUTLINE, f"dot_tile{rows}",
                           ir.Allocate(acc, ir.seq(*loads, k, store)))
    if isinstance(Ei, ir.IntImm):
        return tile_of(Ei.value)
    out: ir.Stmt | None = None
    for r in range(1, ub_i + 1):
        cond = ir.Binary("==" if r < ub_i else ">=", Ei, ir.IntImm(r), "bool")
        out = ir.IfThenElse(cond, tile_of(r), out)
    return out
