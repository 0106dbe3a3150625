"""The NPU IR pass ``npu-isa``: every logical instruction becomes the Ascend C API calls
of the A2 generation (``__NPU_ARCH__`` 2201) that implement it, with their real
parameter structs; nothing logical is left for the printer or the simulator.

Assumes: a :class:`~.program.Kernel` whose programs hold logical instructions
(:data:`~.program.LOGICAL`) on buffers laid out as the lowering declared them
(:class:`~.program.LocalBuf` layouts); vector tiles whose row length is a multiple of
16 elements (``CP``, or a constant tile width) and at most 255 data blocks; at most
255 rows per vector instruction (the host tiling caps ``TR``; constant row counts are
split here).  Guarantees: the same computation as API calls only --

* GM -> L1: ``DataCopy`` + ``Nd2NzParams`` (one call per tile; per 16-row group for the
  ``ZZ`` layout of an fp32 right operand); zero padding to 32 bytes only (rows past a
  tile's valid rows keep what they held: the Mmad never reads them as valid data);
* L1 -> L0A / L0B: ``LoadData`` + ``LoadData2DParams`` (per fractal row or column of
  the step, whichever needs fewer calls; ``ifTranspose`` for the b16 right operand),
  ``LoadDataWithTranspose`` for the b32 right operand; the zZ row length is the step's
  own k fractals, as its Mmad reads them;
* Mmad: ``MmadParams{m, n, k, 0, false, init}`` with ``m`` rounded up to 16 (an ``m``
  of 1 would switch the cube to GEMV and read L0A as ND);
* L0C -> GM: ``Fixpipe`` + ``FixpipeParamsV220`` (``CFG_ROW_MAJOR``, ``F322F16`` for an
  fp16 output);
* GM <-> UB: ``DataCopyPad`` + ``DataCopyExtParams`` (a value per row lands in a block
  of its own, which the pad fill repeats over the block);
* vector operations (:func:`expand_vector`): the first-n form (count) where every
  operand has the destination's layout; the repeat form with per-operand strides for a
  value per row (block stride 0, repeat stride 1 over ``Brcb``'d blocks) or one row
  (repeat stride 0), one call per 256-byte column chunk; tensor-scalar calls
  (``Adds``/``Muls``/``Maxs``/``Mins``); ``FusedMulAdd`` (``dst = src0 * dst + src1``);
  ``Cast`` with a ``RoundMode``; row reductions as a fold of the column chunks into one
  repeat per row (tiles of many short rows) or by halving each row (first-n calls; long
  rows, few rows), then ``ReduceRepeat`` and ``Brcb``; comparisons as
  ``Compare``/``Compares`` into a bit mask and ``Select``;
  ``tanh`` and ``erf`` from basic calls (they are not basic API); transposes by
  ``TransDataTo5HD``.  Temporaries are UB buffers this pass adds to the program.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from polycomp.errors import PolycompInternalError
from polycomp.pass_manager import TargetPass
from polycomp.state import CompileState

from .program import (
    ITEMSIZE,
    CopyIm2Col,
    CopyIn,
    CopyOut,
    DataCopyGm2L1,
    DataCopyNd2Nz,
    DataCopyPadIn,
    DataCopyPadOut,
    FixpipeCall,
    GmRef,
    Ix,
    Kernel,
    Let,
    Load2D,
    LoadData2D,
    LoadData3D,
    LoadDataTranspose,
    LocalBuf,
    Loop,
    Mmad,
    MmadCall,
    NpuModule,
    Program,
    Rep,
    Scalar,
    Slot,
    TransData5HD,
    VecCall,
    VecOp,
    align,
    c0,
    ceildiv,
    imax,
    imin,
    ix,
    product,
    simplify_ix,
)
from .target import FRACTAL_BYTES, MAX_REPEAT, REPEAT_BYTES

_S = simplify_ix


def _blocks(nbytes: Ix) -> Ix:
    """32-byte blocks of ``nbytes`` (rounded up)."""
    return ceildiv(nbytes, 32)


# --------------------------------------------------------------------------- transfers


def _copy_in(s: CopyIn) -> tuple:
    b, r = s.dst.buf, s.src
    rows, cols = r.matrix()
    src = GmRef(r.tensor, r.linear())
    size = b.itemsize
    if b.level == "L1" and b.layout == "NZ":
        return (DataCopyNd2Nz(s.dst, src, ix(1), _S(rows), _S(cols), ix(0), _S(r.stride()),
                              ix(b.rows), ix(1), ix(0)),)
    if b.level == "L1" and b.layout == "ZZ":     # row groups of 16, fractals side by side
        g = ix("g16")
        assert isinstance(b.cols, int)
        return (Loop("g16", ceildiv(rows, 16), (
            DataCopyNd2Nz(s.dst.at(g * (16 * b.cols)),
                          GmRef(r.tensor, _S(r.linear() + g * 16 * r.stride())), ix(1),
                          imin(16, rows - g * 16), _S(cols), ix(0), _S(r.stride()), ix(16),
                          ix(1), ix(0)),)),)
    if b.level == "L1" and b.layout == "VEC":    # one row of 32-byte blocks (Fixpipe's
        # quantisation parameters: whole blocks, the host pads the argument)
        return (DataCopyGm2L1(s.dst, src, ix(1), _S(_blocks(cols * size)), ix(0), ix(0)),)
    if b.level == "L1" and b.layout == "ND":     # an NC1HWC0 image band: blocks of rows
        # the box's leading extents are the blocks (channel groups), the rest contiguous
        blocks = product(r.extents[:2])
        inner = product(r.extents[2:]) * size
        full = product(ix(d) for d in r.tensor.dims[2:]) * size
        return (DataCopyGm2L1(s.dst, src, _S(blocks), _S(_blocks(inner)),
                              _S(_blocks(full - inner)), ix(0)),)
    if b.level == "UB":
        if b.layout == "COL" or r.split == 0:     # a value per row, one block each
            return (DataCopyPadIn(s.dst, src, _S(rows), ix(size),
                                  _S((r.stride() - 1) * size), ix(0)),)
        row_bytes = ix(b.cols) * size
        return (DataCopyPadIn(s.dst, src, _S(rows), _S(cols * size),
                              _S((r.stride() - cols) * size),
                              _S(ceildiv(row_bytes - align(cols * size, 32), 32))),)
    raise PolycompInternalError(f"npu-isa: no copy GM -> {b.level} ({b.layout})")


#: Fixpipe's ``quantPre`` per output type (L0C holds fp32, or int32 for int8 operands)
_QUANT = {"float16": "F322F16", "bfloat16": "F322BF16", "float32": "NoQuant",
          "int32": "NoQuant"}


def _copy_out(s: CopyOut) -> tuple:
    b, r = s.src.buf, s.dst
    rows, cols = r.matrix()
    dst = GmRef(r.tensor, r.linear())
    if s.pipe == "FIX":
        # int32 -> fp16 (int8: requantised) x the scale / the column's scale
        req = r.tensor.dtype == "int8"
        if s.scale is not None:
            return (FixpipeCall(dst, s.src, _S(cols), _S(rows), ix(b.rows), _S(r.stride()),
                                "REQ8" if req else "DEQF16", deq=s.scale),)
        if s.quant is not None:
            return (FixpipeCall(dst, s.src, _S(cols), _S(rows), ix(b.rows), _S(r.stride()),
                                "VREQ8" if req else "VDEQF16", cbuf=s.quant),)
        quant = _QUANT[r.tensor.dtype]
        return (FixpipeCall(dst, s.src, _S(cols), _S(rows), ix(b.rows), _S(r.stride()),
                            quant, atomic=s.atomic),)
    size = b.itemsize
    if b.layout == "COL" or r.split == 0:
        return (DataCopyPadOut(dst, s.src, _S(rows), ix(size), ix(0),
                               _S((r.stride() - 1) * size)),)
    row_bytes = ix(b.cols) * size
    return (DataCopyPadOut(dst, s.src, _S(rows), _S(cols * size),
                           _S(ceildiv(row_bytes - align(cols * size, 32), 32)),
                           _S((r.stride() - cols) * size)),)


def _load2d(s: Load2D) -> tuple:
    """L1 -> L0A (zZ) / L0B (nZ) for one k step of ``k_ext`` valid columns (A) / rows
    (B) from element ``k_offset`` of the L1 tile."""
    src, dst = s.src.buf, s.dst.buf
    q = c0(src.dtype)                         # elements of a fractal row (32 B)
    frac = FRACTAL_BYTES // src.itemsize      # elements of a fractal
    assert isinstance(src.rows, int)
    assert isinstance(dst.rows, int) and isinstance(dst.cols, int)
    if dst.level == "L0A":                    # A: NZ (cols/q, rows, q) -> zZ
        mf = dst.rows // 16
        kf = ceildiv(s.k_ext, q)              # the step's k fractals (its Mmad reads so)
        kf0 = _S(ix(s.k_offset) // q)
        col = src.rows // 16                  # fractals in one fractal column of L1
        if mf <= dst.cols // q:               # one call per fractal row (repeat kf)
            i = ix("fa")
            return (Loop("fa", ix(mf), (
                LoadData2D(s.dst.at(i * kf * frac), s.src, _S(kf0 * col + i), kf,
                           ix(col), ix(0), False),)),)
        i = ix("fa")                          # one call per fractal column (repeat mf)
        return (Loop("fa", kf, (
            LoadData2D(s.dst.at(i * frac), s.src, _S((kf0 + i) * col), ix(mf), ix(1),
                       _S(kf - 1), False),)),)
    nn = dst.cols // 16
    if src.layout == "ZZ":                    # b32 B: 16x16 squares, transposed
        groups = ceildiv(s.k_ext, 16)
        g = ix("fb")
        assert isinstance(src.cols, int)
        sq = src.cols // 16                   # squares in one row group
        k16 = _S(ix(s.k_offset) // 16)
        return (Loop("fb", groups, (
            LoadDataTranspose(s.dst.at(g * 2 * nn * frac), s.src, _S((k16 + g) * sq),
                              ix(nn), ix(1), ix(0), ix(nn - 1)),)),)
    if src.itemsize == 1:                     # b8 B: NZ (cols/32, rows, 32): 32x32
        kq = ceildiv(s.k_ext, 32)             # squares, transposed into two nZ fractals
        g = ix("fb")                          # each; one call per k fractal row
        n32 = dst.cols // 32                  # (repeat over the n squares)
        k32 = _S(ix(s.k_offset) // 32)
        col = src.rows // 32                  # squares in one fractal column of L1
        return (Loop("fb", kq, (
            LoadDataTranspose(s.dst.at(g * nn * frac), s.src, _S(k32 + g), ix(n32),
                              ix(col), ix(1), ix(0)),)),)
    kf = ceildiv(s.k_ext, 16)                 # b16 B: NZ (cols/16, rows, 16) -> nZ
    kf0 = _S(ix(s.k_offset) // 16)
    col = src.rows // 16
    i = ix("fb")
    if nn <= dst.rows // 16:                  # one call per n fractal (repeat kf)
        return (Loop("fb", ix(nn), (
            LoadData2D(s.dst.at(i * frac), s.src, _S(i * col + kf0), kf, ix(1),
                       ix(nn - 1), True),)),)
    return (Loop("fb", kf, (                  # one call per k fractal row (repeat nn)
        LoadData2D(s.dst.at(i * nn * frac), s.src, _S(kf0 + i), ix(nn), ix(col), ix(0),
                   True),)),)


def _mmad(s: Mmad) -> tuple:
    """The whole L0C tile (its layout has the tile's rows; an m of 1 would be GEMV), the
    valid k (the fractals past it hold no valid data)."""
    return (MmadCall(s.c, s.a, s.b, ix(s.c.buf.rows), ix(s.c.buf.cols), _S(s.k), s.init),)


def _im2col(s: CopyIm2Col) -> tuple:
    g = s.geom
    return (LoadData3D(s.dst, s.src, s.pad, s.h, s.w, s.channels, s.k_ext, s.p_ext, s.k0,
                       s.p0, g.sw, g.sh, g.kw, g.kh, g.dw, g.dh),)


# --------------------------------------------------------------------------- vector


@dataclass
class _Temps:
    """The UB temporaries this pass adds to one program (one per purpose and shape)."""
    bufs: dict = field(default_factory=dict)

    def get(self, role: str, dtype: str, rows: int | str, cols: int | str,
            layout: str = "ND") -> LocalBuf:
        key = (role, dtype, rows, cols, layout)
        if key not in self.bufs:
            self.bufs[key] = LocalBuf(f"vt{len(self.bufs)}", "UB", dtype, rows, cols, layout)
        return self.bufs[key]


_BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min"}
_SCALAR_API = {"Add": "Adds", "Mul": "Muls", "Max": "Maxs", "Min": "Mins"}
_UNARY = {"Exp": "Exp", "Ln": "Ln", "Sqrt": "Sqrt", "Rsqrt": "Rsqrt", "Abs": "Abs"}
_CMP = {"CompareGT": "GT", "CompareGE": "GE", "CompareLT": "LT", "CompareLE": "LE",
        "CompareEQ": "EQ", "CompareNE": "NE"}
_SWAP = {"GT": "LT", "LT": "GT", "GE": "LE", "LE": "GE", "EQ": "EQ", "NE": "NE"}
_REDUCE = {"ReduceSum": ("SUM", "Add"), "ReduceMax": ("MAX", "Max"),
           "ReduceMin": ("MIN", "Min")}
#: a row reduction halves (:meth:`_VecExpander.halving`) when its tile has fewer rows
#: than this many per repeat of a row: the fold's one call per repeat (4 cycles of issue
#: each, the tile's rows as its repeats) then costs more than log2 calls a row
_HALVE_ROWS = 6
#: the most elements of a UB row (192 KiB of fp32): the halving's widest level
_MAX_UB_ELEMENTS = 192 * 1024 // 4
# erf: Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7)
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _lanes(dtype: str) -> int:
    return REPEAT_BYTES // ITEMSIZE[dtype]


def _elements(b: LocalBuf, rows: Ix) -> Ix:
    """Elements of ``rows`` rows of ``b`` in its layout."""
    if b.layout == "ROW":
        return ix(b.cols)
    if b.layout == "COL":
        return rows * c0(b.dtype)
    return rows * ix(b.cols)


def _count(b: LocalBuf, rows: Ix, whole: bool = False) -> Ix:
    """The first-n count of ``rows`` rows of ``b`` (``whole``: rounded up to whole
    256-byte repeats, as Compare needs)."""
    n = _elements(b, rows)
    return _S(align(n, _lanes(b.dtype)) if whole else n)


def _is_slot(x) -> bool:
    return isinstance(x, Slot)


def _scalar(x, neg: bool = False, inv: bool = False) -> Scalar:
    if isinstance(x, Scalar):
        return Scalar(x.value, x.neg != neg, x.inv != inv)
    return Scalar(x if isinstance(x, Ix) else float(x), neg, inv)


def _pitch(ops) -> Ix:
    """The widest row pitch, in 32-byte blocks, of the row-major (``ND``) tiles among
    ``ops``: the repeat stride a one-repeat-per-row call gives them."""
    out: Ix | None = None
    seen: set[Ix] = set()
    for x in ops:
        if _is_slot(x) and x.buf.layout == "ND":
            p = _S(ceildiv(ix(x.buf.cols) * x.buf.itemsize, 32))
            if p not in seen:
                seen.add(p)
                out = p if out is None else _S(imax(out, p))
    return out if out is not None else ix(0)


def _by_pitch(pitch: Ix, short: tuple, long: tuple, prefer_long: Ix | None = None) -> tuple:
    """``short`` (one repeat per row: its repeat stride is ``pitch``) where ``pitch``
    fits the 8-bit repeat stride (and ``prefer_long``, 0 or 1, is 0), else ``long``
    (row by row): chosen here when the condition is a constant, else at run time by
    two guard loops of 0 or 1 iterations (the row length is the host's ``CP``)."""
    lg = _S(imin(1, imax(0, pitch - MAX_REPEAT)))
    if prefer_long is not None:
        lg = _S(imin(1, lg + prefer_long))
    if lg.is_const():
        return short if lg.args[0] == 0 else long
    return (Loop("rs", _S(1 - lg), short), Loop("rl", lg, long))


class _VecExpander:
    """Expands the logical vector operations of one program (see the module
    docstring)."""

    def __init__(self, temps: _Temps):
        self.temps = temps
        self.loops = 0

    def var(self, base: str) -> str:
        self.loops += 1
        return f"{base}{self.loops}"

    # ------------------------------------------------------------ helpers
    def strided(self, api: str, dst: Slot, srcs: tuple, rows: Ix, attr: str = "") -> tuple:
        """``api`` over ``rows`` rows with a destination tile (ND) and sources of any
        layout, one repeat per row, one call per 256-byte column chunk (and per 255
        rows)."""
        b = dst.buf
        lanes = _lanes(b.dtype)
        cols = ix(b.cols)
        j = ix(self.var("cj"))
        ops = [dst, *srcs]

        def strides(x) -> tuple[Ix, Ix]:
            if not _is_slot(x):
                return (ix(0), ix(0))
            lay = x.buf.layout
            if lay == "COL":
                return (ix(0), ix(1))
            if lay == "ROW":
                return (ix(1), ix(0))
            return (ix(1), _S(ceildiv(ix(x.buf.cols) * x.buf.itemsize, 32)))

        def at(x, r0: Ix):
            if not _is_slot(x):
                return x
            lay = x.buf.layout
            if lay == "COL":
                return x.at(r0 * c0(x.buf.dtype))
            if lay == "ROW":
                return x.at(j * lanes)
            return x.at(r0 * ix(x.buf.cols) + j * lanes)
        mask = _S(imin(lanes, cols - j * lanes))

        def call(r0: Ix, n: Ix) -> VecCall:
            return VecCall(api, at(dst, r0), tuple(at(x, r0) for x in srcs), None,
                           Rep(mask, n, tuple(strides(x) for x in ops
                                              if _is_slot(x) or x is dst)), attr)
        if isinstance(rows, Ix) and rows.is_const() and rows.args[0] > MAX_REPEAT:
            n = rows.args[0]
            body = tuple(call(ix(r0), ix(min(MAX_REPEAT, n - r0)))
                         for r0 in range(0, n, MAX_REPEAT))
        else:
            body = (call(ix(0), rows),)
        short = (Loop(j.args[0], ceildiv(cols, lanes), body),)
        long = self.strided_long(api, dst, srcs, rows, attr)
        if not any(_is_slot(x) and x.buf.layout == "COL" for x in srcs):
            return _by_pitch(_pitch(ops), short, long)
        # a value per row: in the short form its block walks the bank groups, one a
        # repeat, and meets the tile's repeats in about every other one (docs/npu.md);
        # the row-by-row form reads it once a call.  Row by row where that costs less:
        # rows * (4 + C) < C * (4 + 1.5 rows), C the column chunks, 4 the issue
        c = _S(ceildiv(cols, lanes))
        prefer = _S(imin(1, imax(0, c * (8 + 3 * rows) - 2 * rows * (4 + c))))
        return _by_pitch(_pitch(ops), short, long, prefer)

    def strided_long(self, api: str, dst: Slot, srcs: tuple, rows: Ix, attr: str) -> tuple:
        """The form of :meth:`strided` for rows longer than a repeat stride spans (more
        than 255 data blocks): one row at a time, the row's 256-byte column chunks as
        the repeats (at most 255 a call; the partial last chunk a call of its own)."""
        b = dst.buf
        lanes = _lanes(b.dtype)
        cols = ix(b.cols)
        r = ix(self.var("lr"))
        g = ix(self.var("lg"))
        ops = [dst, *srcs]
        full = cols // lanes
        tail = cols % lanes

        def strides(x) -> tuple[Ix, Ix]:
            if not _is_slot(x):
                return (ix(0), ix(0))
            if x.buf.layout == "COL":                 # the row's value block, repeated
                return (ix(0), ix(0))
            return (ix(1), ix(8))                     # ROW, ND: chunk after chunk

        def at(x, c: Ix):
            if not _is_slot(x):
                return x
            lay = x.buf.layout
            if lay == "COL":
                return x.at(r * c0(x.buf.dtype))
            if lay == "ROW":
                return x.at(c)
            return x.at(r * ix(x.buf.cols) + c)

        def call(c: Ix, mask: Ix, n: Ix) -> VecCall:
            return VecCall(api, at(dst, c), tuple(at(x, c) for x in srcs), None,
                           Rep(mask, n, tuple(strides(x) for x in ops
                                              if _is_slot(x) or x is dst)), attr)
        t = ix(self.var("lt"))
        c_full = _S(g * (MAX_REPEAT * lanes))
        return (Loop(r.args[0], rows, (
            Loop(g.args[0], _S(ceildiv(full, MAX_REPEAT)), (
                call(c_full, ix(lanes), _S(imin(MAX_REPEAT, full - g * MAX_REPEAT))),)),
            Loop(t.args[0], _S(imin(1, tail)), (
                call(_S(full * lanes), _S(tail), ix(1)),)))),)

    def tile_temp(self, role: str, like: LocalBuf, dtype: str | None = None) -> Slot:
        return Slot(self.temps.get(role, dtype or like.dtype, like.rows, like.cols,
                                   like.layout))

    def mask_temp(self, like: LocalBuf) -> Slot:
        """A bit mask for a tile like ``like`` (one bit per element)."""
        rows = like.rows if like.layout != "ROW" else 1
        cols: int | str
        if like.layout == "COL":
            cols = c0(like.dtype)
        else:
            cols = like.cols
        return Slot(self.temps.get("mask", "uint8", rows, cols, "MASK"))

    # ------------------------------------------------------------ the operations
    def expand(self, s: VecOp) -> tuple:
        op, dst, rows = s.op, s.dst, s.rows
        srcs = s.srcs
        if op in _REDUCE:
            return self.reduce(s)
        if op == "Transpose":
            return self.transpose(dst, srcs[0])
        if op == "Duplicate":
            return (VecCall("Duplicate", dst, (_scalar(srcs[0]),), _count(dst.buf, rows)),)
        if op == "Cast":
            return self.cast(dst, srcs[0], rows)
        if op in _UNARY:
            return self.same_layout(_UNARY[op], dst, srcs, rows)
        if op == "Tanh":
            return self.tanh(dst, srcs[0], rows)
        if op == "Erf":
            return self.erf(dst, srcs[0], rows)
        if op in _CMP:
            return self.compare(dst, srcs, rows, _CMP[op])
        if op == "Select":
            return self.select(dst, srcs, rows)
        if op in _BINARY:
            return self.binary(op, dst, srcs, rows)
        if op == "FusedMulAdd":
            return self.fused_mul_add(dst, srcs, rows)
        raise PolycompInternalError(f"npu-isa: no expansion of vector op {op}")

    def broadcast_src(self, x, dst: Slot, rows: Ix, role: str) -> tuple[tuple, Any]:
        """``x`` as an operand with ``dst``'s layout: itself, or a temporary tile it is
        broadcast into (a value per row or one row over a tile)."""
        if not _is_slot(x) or x.buf.layout == dst.buf.layout:
            return (), x
        t = self.tile_temp(role, dst.buf, x.buf.dtype)
        return self.strided("Adds", t, (x, Scalar(0.0)), rows), t

    def same_layout(self, api: str, dst: Slot, srcs: tuple, rows: Ix) -> tuple:
        pc, x = self.convert(srcs[0], dst, rows)
        pre, x = self.broadcast_src(x, dst, rows, "bc0")
        return (*pc, *pre, VecCall(api, dst, (x,), _count(dst.buf, rows)))

    def cast(self, dst: Slot, src, rows: Ix) -> tuple:
        if not _is_slot(src):
            return (VecCall("Duplicate", dst, (_scalar(src),), _count(dst.buf, rows)),)
        if src.buf.dtype == dst.buf.dtype:
            return self.binary("Add", dst, (src, 0.0), rows)
        if dst.buf.dtype == "int8":
            return self.cast_int8(dst, src, rows)
        # narrowing, and int32 -> float (not every int32 is a float): round to nearest
        mode = "CAST_RINT" if ITEMSIZE[dst.buf.dtype] < ITEMSIZE[src.buf.dtype] or \
            src.buf.dtype == "int32" else "CAST_NONE"
        if dst.buf.layout == "COL" and src.buf.layout == "COL":
            # a value per row: one block per row in either type (a block holds 16 halves
            # or 8 floats): a repeat per row, every lane of the destination block from
            # the source block's first lanes
            qd, qs = c0(dst.buf.dtype), c0(src.buf.dtype)
            return (VecCall("Cast", dst, (src,), None,
                            Rep(ix(qd), rows, ((ix(1), ix(1)),
                                               (ix(0 if qd > qs else 1), ix(1)))), mode),)
        pre, x = self.broadcast_src(src, dst, rows, "bc0")
        return (*pre, VecCall("Cast", dst, (x,), _count(dst.buf, rows), attr=mode))

    def cast_int8(self, dst: Slot, src: Slot, rows: Ix) -> tuple:
        """float -> int8 as the DSL casts (toward zero; defined for values in (-129,
        128)): the A2 Cast has no float -> int8_t, so float -> half with CAST_TRUNC (the
        mantissa cut toward zero: a value of that range keeps its integer part, which
        needs 8 bits of half's 11) then half -> int8_t with CAST_TRUNC (asc-devkit docs,
        Cast, the A2 table of type pairs and round modes; out of range the hardware
        saturates)."""
        if src.buf.dtype not in ("float16", "float32") or dst.buf.layout != "ND":
            raise PolycompInternalError(f"npu-isa: no cast {src.buf.dtype} -> int8 "
                                        f"({dst.buf.layout})")
        pre, x = self.broadcast_src(src, dst, rows, "bc0")
        out: tuple = tuple(pre)
        if x.buf.dtype == "float32":
            h = Slot(self.temps.get(f"half_{x.buf.name}", "float16", x.buf.rows, x.buf.cols,
                                    x.buf.layout))
            out += (VecCall("Cast", h, (x,), _count(h.buf, rows), attr="CAST_TRUNC"),)
            x = h
        return (*out, VecCall("Cast", dst, (x,), _count(dst.buf, rows), attr="CAST_TRUNC"))

    def convert(self, x, like: Slot, rows: Ix) -> tuple[tuple, Any]:
        """``x`` in ``like``'s type (a Cast into a temporary of ``x``'s layout)."""
        if not _is_slot(x) or x.buf.dtype == like.buf.dtype:
            return (), x
        t = Slot(self.temps.get(f"conv_{x.buf.name}", like.buf.dtype, x.buf.rows, x.buf.cols,
                                x.buf.layout))
        return self.cast(t, x, rows), t

    def binary(self, op: str, dst: Slot, srcs: tuple, rows: Ix) -> tuple:
        pa, a = self.convert(srcs[0], dst, rows)
        pb, b = self.convert(srcs[1], dst, rows)
        return (*pa, *pb, *self._binary(op, dst, (a, b), rows))

    def _binary(self, op: str, dst: Slot, srcs: tuple, rows: Ix) -> tuple:
        a, b = srcs
        if not _is_slot(a) and not _is_slot(b):
            raise PolycompInternalError(f"npu-isa: {op} of two scalars")
        if not _is_slot(b) or not _is_slot(a):           # tensor-scalar
            x, s = (a, b) if _is_slot(a) else (b, a)
            first = _is_slot(a)
            pre, x = self.broadcast_src(x, dst, rows, "bc0")
            n = _count(dst.buf, rows)
            if op in _SCALAR_API:
                return (*pre, VecCall(_SCALAR_API[op], dst, (x, _scalar(s)), n))
            if op == "Sub" and first:                     # x - s
                return (*pre, VecCall("Adds", dst, (x, _scalar(s, neg=True)), n))
            if op == "Sub":                               # s - x
                return (*pre, VecCall("Muls", dst, (x, Scalar(-1.0)), n),
                        VecCall("Adds", dst, (dst, _scalar(s)), n))
            if op == "Div" and first:                     # x / s
                return (*pre, VecCall("Muls", dst, (x, _scalar(s, inv=True)), n))
            return (*pre, VecCall("Reciprocal", dst, (x,), n),   # s / x
                    VecCall("Muls", dst, (dst, _scalar(s)), n))
        lays = {a.buf.layout, b.buf.layout, dst.buf.layout}
        if len(lays) == 1:
            return (VecCall(op, dst, (a, b), _count(dst.buf, rows)),)
        if dst.buf.layout == "ND":
            return self.strided(op, dst, (a, b), rows)
        raise PolycompInternalError(f"npu-isa: {op} of {a.buf.layout} and {b.buf.layout} "
                                    f"into {dst.buf.layout}")

    def fused_mul_add(self, dst: Slot, srcs: tuple, rows: Ix) -> tuple:
        """``dst = srcs[0] * dst + srcs[1]`` (``FusedMulAdd``; ``dst`` a tile, the
        sources of any layout, as a binary call's)."""
        pa, a = self.convert(srcs[0], dst, rows)
        pb, b = self.convert(srcs[1], dst, rows)
        if {a.buf.layout, b.buf.layout, dst.buf.layout} == {dst.buf.layout}:
            return (*pa, *pb, VecCall("FusedMulAdd", dst, (a, b), _count(dst.buf, rows)))
        if dst.buf.layout != "ND":
            raise PolycompInternalError(f"npu-isa: FusedMulAdd into {dst.buf.layout}")
        return (*pa, *pb, *self.strided("FusedMulAdd", dst, (a, b), rows))

    def tanh(self, dst: Slot, x, rows: Ix) -> tuple:
        """``tanh(x) = 1 - 2 / (exp(2x) + 1)`` (not a basic API call)."""
        pre, x = self.broadcast_src(x, dst, rows, "bc0")
        t = dst if x is not dst else self.tile_temp("tanh", dst.buf)
        n = _count(dst.buf, rows)
        return (*pre, VecCall("Muls", t, (x, Scalar(2.0)), n),
                VecCall("Exp", t, (t,), n), VecCall("Adds", t, (t, Scalar(1.0)), n),
                VecCall("Reciprocal", t, (t,), n), VecCall("Muls", t, (t, Scalar(-2.0)), n),
                VecCall("Adds", dst, (t, Scalar(1.0)), n))

    def erf(self, dst: Slot, x, rows: Ix) -> tuple:
        """erf by Abramowitz & Stegun 7.1.26: ``sign(x) (1 - p(t) exp(-x^2))``, ``t =
        1 / (1 + 0.3275911 |x|)`` (not a basic API call)."""
        pre, x = self.broadcast_src(x, dst, rows, "bc0")
        t = self.tile_temp("erf_t", dst.buf)
        q = self.tile_temp("erf_q", dst.buf)
        m = self.mask_temp(dst.buf)
        n = _count(dst.buf, rows)
        nw = _count(dst.buf, rows, whole=True)
        out: list = [*pre, VecCall("Abs", t, (x,), n),
                     VecCall("Muls", t, (t, Scalar(_ERF_P)), n),
                     VecCall("Adds", t, (t, Scalar(1.0)), n),
                     VecCall("Reciprocal", t, (t,), n),
                     VecCall("Muls", q, (t, Scalar(_ERF_A[4])), n)]
        for a in reversed(_ERF_A[:4]):
            out += [VecCall("Adds", q, (q, Scalar(a)), n), VecCall("Mul", q, (q, t), n)]
        out += [VecCall("Mul", t, (x, x), n), VecCall("Muls", t, (t, Scalar(-1.0)), n),
                VecCall("Exp", t, (t,), n), VecCall("Mul", q, (q, t), n),
                VecCall("Muls", q, (q, Scalar(-1.0)), n),
                VecCall("Adds", q, (q, Scalar(1.0)), n),
                VecCall("Muls", t, (q, Scalar(-1.0)), n),
                VecCall("Compares", m, (x, Scalar(0.0)), nw, attr="LT"),
                VecCall("Select", dst, (m, t, q), nw, attr="VSEL_TENSOR_TENSOR_MODE")]
        return tuple(out)

    def compare(self, dst: Slot, srcs: tuple, rows: Ix, mode: str) -> tuple:
        """A comparison as 0/1 values: Compare(s) into a bit mask, then Select 1 / 0
        (over whole repeats of the operands' type: through a temporary of that type
        when the result is wider)."""
        a, b = srcs
        if not _is_slot(a):
            a, b, mode = b, a, _SWAP[mode]
        if ITEMSIZE[a.buf.dtype] < ITEMSIZE[dst.buf.dtype]:
            t = self.tile_temp("cmp_narrow", dst.buf, a.buf.dtype)
            return (*self.compare(t, (a, b), rows, mode),
                    VecCall("Cast", dst, (t,), _count(dst.buf, rows), attr="CAST_NONE"))
        pre_a, a = self.broadcast_src(a, dst, rows, "bc0")
        m = self.mask_temp(dst.buf)
        nw = _count(dst.buf, rows, whole=True)
        if _is_slot(b):
            pre_b, b = self.broadcast_src(b, dst, rows, "bc1")
            cmp = VecCall("Compare", m, (a, b), nw, attr=mode)
        else:
            pre_b = ()
            cmp = VecCall("Compares", m, (a, _scalar(b)), nw, attr=mode)
        one = self.tile_temp("ones", dst.buf)
        return (*pre_a, *pre_b, cmp,
                VecCall("Duplicate", one, (Scalar(1.0),), nw),
                VecCall("Select", dst, (m, one, Scalar(0.0)), nw,
                        attr="VSEL_TENSOR_SCALAR_MODE"))

    def select(self, dst: Slot, srcs: tuple, rows: Ix) -> tuple:
        """``select(c, t, f)``: the mask of ``c != 0``, then Select."""
        c, t, f = srcs
        pre: list = []
        if not _is_slot(c):
            raise PolycompInternalError("npu-isa: Select with a scalar condition")
        pc, c = self.broadcast_src(c, dst, rows, "bc0")
        pre += pc
        if c.buf.dtype != dst.buf.dtype:              # the condition in the result's type
            tc = self.tile_temp("sel_c", dst.buf)
            pre += self.cast(tc, c, rows)
            c = tc
        m = self.mask_temp(dst.buf)
        nw = _count(dst.buf, rows, whole=True)
        if not _is_slot(t) and not _is_slot(f):
            one = self.tile_temp("sel_t", dst.buf)
            pre.append(VecCall("Duplicate", one, (_scalar(t),), nw))
            t = one
        if _is_slot(t):
            pre.append(VecCall("Compares", m, (c, Scalar(0.0)), nw, attr="NE"))
        else:                                # select(c, s, x) = select(!c, x, s)
            pre.append(VecCall("Compares", m, (c, Scalar(0.0)), nw, attr="EQ"))
            t, f = f, t
        pt, t = self.broadcast_src(t, dst, rows, "bc1")
        pre += pt
        if _is_slot(f):
            pf, f = self.broadcast_src(f, dst, rows, "bc2")
            pre += pf
            return (*pre, VecCall("Select", dst, (m, t, f), nw,
                                  attr="VSEL_TENSOR_TENSOR_MODE"))
        return (*pre, VecCall("Select", dst, (m, t, _scalar(f)), nw,
                              attr="VSEL_TENSOR_SCALAR_MODE"))

    def reduce(self, s: VecOp) -> tuple:
        """A row reduction over the first ``n`` columns: the 256-byte column chunks
        folded into one repeat per row, ``ReduceRepeat`` of that repeat, ``Brcb`` of the
        packed values to a block per row."""
        kind, fold = _REDUCE[s.op]
        src, n = s.srcs[0], s.srcs[1]
        n = n if isinstance(n, Ix) else ix(int(n))
        rows, dst = s.rows, s.dst
        out: list = []
        if src.buf.dtype != dst.buf.dtype:                 # reduce in the result's type
            t = self.tile_temp("red_cast", src.buf, dst.buf.dtype)
            out += self.cast(t, src, rows)
            src = t
        dt = src.buf.dtype
        lanes = _lanes(dt)
        rb = src.buf.rows
        packed = Slot(self.temps.get("packed", dt, 1, -(-rb // 8) * 8 if isinstance(rb, int)
                                     else rb, "PACK"))
        src_rep = _S(ceildiv(ix(src.buf.cols) * src.buf.itemsize, 32))
        first = imin(lanes, n)
        if isinstance(src.buf.cols, int) and src.buf.cols <= lanes:    # one repeat a row
            out.append(VecCall("ReduceRepeat", packed, (src,), None,
                               Rep(_S(first), rows, ((ix(0), ix(1)), (ix(1), src_rep))),
                               attr=kind))
        else:
            tmp = Slot(self.temps.get("fold", dt, rb, lanes))
            short = self.column_fold(fold, tmp, src, src_rep, rows, n)
            # row by row, the valid columns halved into a row temporary (first-n
            # calls, log2 of them a row): where a row is longer than a repeat stride
            # spans, or a tile has so few rows that the fold's calls of one repeat a
            # row cost more in issue than the halving's calls
            halve = self.halving(fold, tmp, src, rows, n)
            g = _S(imin(1, imax(0, src_rep - MAX_REPEAT)
                        + imax(0, ceildiv(n, lanes) - rows * _HALVE_ROWS)))
            if g.is_const():
                out += list(short if g.args[0] == 0 else halve)
            else:
                out += [Loop("rs", _S(1 - g), short), Loop("rh", g, halve)]
            out.append(VecCall("ReduceRepeat", packed, (tmp,), None,
                               Rep(first, rows, ((ix(0), ix(1)), (ix(1), ix(8)))), attr=kind))
        out.append(VecCall("Brcb", dst, (packed,), None,
                           Rep(ix(0), ceildiv(rows, 8), ((ix(1), ix(8)),))))
        return tuple(out)

    def column_fold(self, fold: str, tmp: Slot, src: Slot, src_rep: Ix, rows: Ix,
                    n: Ix) -> tuple:
        """The column fold: the ``ceildiv(n, L)`` 256-byte column chunks of the tile's
        rows (a call each, the rows as its repeats) folded into ``tmp`` (one repeat a
        row).  For a tile of ``TR`` rows of ``CP`` (whose rows the host pads to an odd
        multiple of 256 bytes, ``bank_pitch``), even chunks go into ``tmp``, odd ones
        into a second accumulator, added into ``tmp`` at the end: chunk ``c`` of a row
        is ``256 c`` bytes into it, so with the accumulators in opposite halves of the
        UB bank groups (``npu-ub-banks`` places them against the tile) no chunk reads
        the half its accumulator reads.  Other tiles keep one accumulator."""
        lanes = _lanes(src.buf.dtype)
        chunks = ceildiv(n, lanes)

        def st(k: int) -> tuple:
            return ((ix(1), ix(8)),) * k + ((ix(1), src_rep),)

        def step(acc: Slot, c: Ix) -> VecCall:
            return VecCall(fold, acc, (acc, src.at(c * lanes)), None,
                           Rep(_S(imin(lanes, n - c * lanes)), rows, st(2)))
        if src.buf.cols != "CP" or src.buf.rows != "TR":
            # not a row tile of the host's padded pitch (a transposed staging tile, a
            # chunk, a constant width): one accumulator
            j = ix(self.var("rj"))
            return (VecCall("Adds", tmp, (src, Scalar(0.0)), None,
                            Rep(_S(imin(lanes, n)), rows, st(1))),
                    Loop(j.args[0], _S(chunks - 1), (step(tmp, j + 1),)))
        acc1 = Slot(self.temps.get("fold_odd", src.buf.dtype, tmp.buf.rows, lanes))
        j, g, h = (ix(self.var(v)) for v in ("rj", "rp", "rq"))
        return (VecCall("Adds", tmp, (src, Scalar(0.0)), None,
                        Rep(_S(imin(lanes, n)), rows, st(1))),
                Loop(g.args[0], _S(imin(1, chunks - 1)), (
                    VecCall("Adds", acc1, (src.at(ix(lanes)), Scalar(0.0)), None,
                            Rep(_S(imin(lanes, n - lanes)), rows, st(1))),
                    Loop(j.args[0], _S(ceildiv(chunks - 2, 2)), (
                        step(tmp, j * 2 + 2),
                        Loop(h.args[0], _S(imin(1, chunks - 3 - j * 2)),
                             (step(acc1, j * 2 + 3),)))),
                    VecCall(fold, tmp, (tmp, acc1), None,
                            Rep(_S(imin(lanes, n - lanes)), rows,
                                ((ix(1), ix(8)),) * 3)))))

    def halving(self, fold: str, tmp: Slot, src: Slot, rows: Ix, n: Ix) -> tuple:
        """The first ``n`` columns of each row of ``src`` reduced (``fold``: Add, Max,
        Min) to one repeat of lanes (``L``) in that row of ``tmp`` (``rows x L``), by
        folding the part of the row past a width ``W_k = L (2^k + 1)`` onto its start,
        widest first: the first fold from ``src`` into a row temporary (the head that
        no tail element meets copied), the later ones within it, the last into
        ``tmp``'s row from at most ``3 L`` elements.  The widths are odd multiples of a
        repeat (256 bytes), so the two parts a fold reads sit in different halves of
        the UB bank groups (no read-read conflict, docs/npu.md); every operand starts
        at a 32-byte boundary.  Each step is a guard loop of 0 or 1 iterations (``n``
        may be a tiling value); a row costs about ``n / L`` repeats in ``log2(n / L)``
        first-n calls."""
        b = src.buf
        dt = b.dtype
        lanes = _lanes(dt)
        blk = c0(dt)
        half = Slot(self.temps.get("half", dt, 1, b.cols))
        r = ix(self.var("hr"))
        row = src.at(r * ix(b.cols))
        acc = tmp.at(r * lanes)
        cap = n.args[0] if n.is_const() else _MAX_UB_ELEMENTS
        widths: list[int] = []
        k = 1
        while lanes * ((1 << k) + 1) < cap:
            widths.append(lanes * ((1 << k) + 1))
            k += 1

        def gt(x: int) -> Ix:                               # [n > x]
            return _S(imin(1, imax(0, n - x)))
        body: list = []

        def guarded(cond: Ix, part: tuple) -> None:
            if cond.is_const():
                body.extend(part if cond.args[0] else ())
            else:
                body.append(Loop(self.var("hg"), cond, part))
        for i in reversed(range(len(widths))):
            w = widths[i]
            nxt = widths[i + 1] if i + 1 < len(widths) else None
            m = _S(n - w)                              # the tail: (0, w] when first
            m8 = _S((m // blk) * blk)
            first = (VecCall(fold, half, (row, row.at(w)), m8),
                     VecCall("Adds", half.at(m8), (row.at(m8), Scalar(0.0)), _S(w - m8)),
                     Loop(self.var("hg"), _S(imin(1, m - m8)), (
                         VecCall(fold, half, (half, row.at(_S(m8 + w))), _S(m - m8)),)))
            if nxt is None:
                guarded(gt(w), first)
                continue
            guarded(_S(gt(w) - gt(nxt)), first)
            guarded(gt(nxt), (VecCall(fold, half, (half, half.at(w)), ix(nxt - w)),))
        # the last folds, into tmp's row: from half (n > 3L), from the row (L < n <= 3L)
        guarded(gt(3 * lanes), (VecCall(fold, acc, (half, half.at(lanes)), ix(lanes)),
                                VecCall(fold, acc, (acc, half.at(2 * lanes)), ix(lanes))))
        guarded(_S(gt(lanes) - gt(3 * lanes)), (
            VecCall("Adds", acc, (row, Scalar(0.0)), ix(lanes)),
            VecCall(fold, acc, (acc, row.at(lanes)), _S(imin(n, 2 * lanes) - lanes)),
            Loop(self.var("hg"), gt(2 * lanes), (
                VecCall(fold, acc, (acc, row.at(2 * lanes)), _S(n - 2 * lanes)),))))
        guarded(_S(1 - gt(lanes)), (VecCall("Adds", acc, (row, Scalar(0.0)), n),))
        return (Loop(r.args[0], rows, tuple(body)),)

    def transpose(self, dst: Slot, src: Slot) -> tuple:
        """``dst = src^T`` by TransDataTo5HD: 16 source rows of one data block each, one
        call per band of 16 source rows, repeated over the source's column blocks."""
        sb, db = src.buf, dst.buf
        dt = sb.dtype
        q = c0(dt)                                        # elements of a block
        src_rows, src_cols = ix(sb.rows), ix(sb.cols)
        ls, ld = ix(sb.cols), ix(db.cols)
        rb = ix(self.var("tb"))
        reps = ceildiv(src_cols, q)
        if ITEMSIZE[dt] == 2:           # 16 x 16: dst row j <- column j of 16 rows
            douts = tuple(_S((ix(j)) * ld + rb * 16) for j in range(16))
            dst_rep = _S(ceildiv(ld * 16 * 2, 32))
        else:                           # 16 x 8: dst rows j, halves 2j / 2j+1
            douts = tuple(_S(ix(j // 2) * ld + rb * 16 + (j % 2) * 8) for j in range(16))
            dst_rep = _S(ceildiv(ld * 8 * 4, 32))
        srcs = tuple(_S((rb * 16 + i) * ls) for i in range(16))
        # a repeat count of 1 starts at the lists plus the strides: no strides then
        one = imin(reps - 1, 1)
        return (Loop(rb.args[0], ceildiv(src_rows, 16), (
            TransData5HD(dst, douts, src, srcs, reps, _S(dst_rep * one), _S(one)),)),)


# --------------------------------------------------------------------------- the pass


def _expand_body(body: tuple, vec: _VecExpander) -> tuple:
    out: list = []
    for s in body:
        if isinstance(s, Loop):
            out.append(dataclasses.replace(s, body=_expand_body(s.body, vec)))
        elif isinstance(s, CopyIn):
            out += _copy_in(s)
        elif isinstance(s, CopyOut):
            out += _copy_out(s)
        elif isinstance(s, Load2D):
            out += _load2d(s)
        elif isinstance(s, Mmad):
            out += _mmad(s)
        elif isinstance(s, CopyIm2Col):
            out += _im2col(s)
        elif isinstance(s, VecOp):
            out += vec.expand(s)
        else:
            out.append(s)
    return tuple(out)


def expand_program(p: Program) -> Program:
    """``p`` with API calls only (module docstring); temporaries appended to its
    buffers."""
    temps = _Temps()
    body = _expand_body(p.body, _VecExpander(temps))
    return dataclasses.replace(p, body=body, buffers=p.buffers + tuple(temps.bufs.values()))


def expand_kernel(k: Kernel) -> Kernel:
    return k.map_programs(expand_program)


class NpuIsaPass(TargetPass):
    """See the module docstring."""
    name = "npu-isa"

    def run(self, mod: Any, state: CompileState) -> NpuModule:
        assert isinstance(mod, NpuModule), type(mod).__name__
        return mod.with_program(expand_kernel(mod.program))


__all__ = ["NpuIsaPass", "expand_kernel", "expand_program", "Let"]
