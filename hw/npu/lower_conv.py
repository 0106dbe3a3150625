"""Convolutions as implicit GEMM on the A2 generation: the NPU IR pieces of a conv plan.

The ``npu-map`` pass recognised the convolution (:mod:`polycomp.scheduler.npu.conv`:
``out[n] (F x OH*OW) = W' (F x K') @ im2col(X[n])``).  On this generation the cube
reads an image through ``LoadData3DV2``, which takes it in L1 in the NC1HWC0 layout
(``C0`` channels of 32 bytes innermost, ``C1 = ceil(C / C0)`` groups) and expands the
window positions; the matching weights are ``W'[f, (c1, kh, kw, c0)]``.  The kernel is
mixed, in two phases:

1. the vector cores convert X (NCHW) and W (FCHW) to NC1HWC0 workspaces ``Xh`` and
   ``Wh`` (``TransDataTo5HD`` of ``C0 x chunk`` tiles, channels past ``C`` zero);
2. the cube cores run the GEMM: ``Wh`` as the ``(F, K')`` left operand (``K' = C1 KH
   KW C0``); per L1 stage of ``NC1`` channel groups the band of ``Xh[n]`` rows the
   tile's output positions need goes GM -> L1 as is (``DataCopy`` + ``DataCopyParams``)
   and each L0 step is ``LoadData3DV2`` from it into L0B (the transposed im2col tile),
   the band's own top / bottom padding given per tile; the output is written as
   ``(N, F, P)`` with ``P = OH * OW``, i.e. NCHW; a bias / relu after the convolution
   runs on the vector cores as the matmul's epilogue (:mod:`.lower_cube`).

The host derives ``C1``, ``K'``, ``KHW``, ``HW``, ``NC1`` (channel groups per L1 stage:
the cube tiling's ``kL1`` over ``KH KW C0``, at least 1), ``KL1 = NC1 KH KW C0``,
``OH``, ``OW``, ``P`` and ``BAND`` (the elements of the largest image band a tile
needs, the size of its L1 buffer).
"""
from __future__ import annotations

from polycomp import ir
from polycomp.errors import TargetError
from polycomp.scheduler.npu.conv import ConvMatch

from .lower_cube import tile_walk
from .program import (
    ConvGeom,
    CopyIn,
    CopyOut,
    GlobalTensor,
    GmRegion,
    Ix,
    Let,
    LocalBuf,
    Program,
    Slot,
    VecOp,
    c0,
    ceildiv,
    eq,
    imin,
    ix,
)


def ct_size(dtype: str) -> int:
    return 2 if dtype == "float16" else 4


#: the most elements of one image row chunk the vector cores transpose at a time
CHUNK = 256


def chunk_size(itemsize: int, ub: int) -> int:
    """The chunk: at most :data:`CHUNK`, and the 8 tiles of ``16 x chunk`` (source and
    destination, two copies, for X and W) within UB."""
    c = CHUNK
    while c > 16 and 8 * 16 * c * itemsize > ub:
        c //= 2
    return c


def to_ix(e) -> Ix:
    """An integer size expression (symbols, constants, + - * //) as an :class:`Ix`."""
    if isinstance(e, ir.Var):
        return ix(e.name)
    if isinstance(e, ir.IntImm):
        return ix(int(e.value))
    if isinstance(e, ir.Binary) and e.op in ("+", "-", "*", "//"):
        a, b = to_ix(e.a), to_ix(e.b)
        return Ix("floordiv" if e.op == "//" else e.op, (a, b))
    raise TargetError(f"npu: the size expression {e} has no host tiling form")


def conv_geom(m: ConvMatch) -> ConvGeom:
    """The window of ``m`` (output width: ``OW``)."""
    w = m.window
    return ConvGeom(w.sh, w.sw, w.ph, w.pw, w.dh, w.dw, to_ix(m.kh), to_ix(m.kw), ix("OW"))


class ConvTensors:
    """The GM tensors of a convolution kernel and its derived sizes: the arguments X
    (N, C, H, W) and W (F, C, KH, KW), the output as (N, F, P), the workspaces Xh
    (N, C1, H, W, C0) and Wh (F, K'), and views of them for the copies."""

    def __init__(self, m: ConvMatch, out_name: str, out_dtype: str, kl1: int, n0: int,
                 m0: int = 16, l1: int = 1 << 30):
        def size(e) -> str | int:
            if isinstance(e, ir.Var):
                return e.name
            if isinstance(e, ir.IntImm):
                return int(e.value)
            raise TargetError(f"npu: conv operand extent {e} is neither a symbol nor a "
                              f"constant")
        N, C, H, W, F, _, KH, KW = (size(e) for e in (*m.x.shape, *m.w.shape))
        self.sizes = (N, C, H, W, F, KH, KW)
        dt = m.dtype
        self.q = q = c0(dt)
        self.x = GlobalTensor(m.x.name, dt, (N, C, H, W))
        self.w = GlobalTensor(m.w.name, dt, (F, C, KH, KW))
        self.out = GlobalTensor(out_name, out_dtype, (N, F, "P"), is_output=True,
                                view=(N, F, "OH", "OW"))
        self.xh = GlobalTensor(f"{m.x.name}_5hd", dt, (N, "C1", H, W, q))
        self.wh = GlobalTensor(f"{m.w.name}_5hd", dt, (F, "KDP"))
        # views for the conversion: (N, C, HW) -> (N, C1, HW, C0)
        self.x3 = GlobalTensor(m.x.name, dt, (N, C, "HW"))
        self.x4 = GlobalTensor(self.xh.name, dt, (N, "C1", "HW", q))
        self.w3 = GlobalTensor(m.w.name, dt, (F, C, "KHW"))
        self.w4 = GlobalTensor(self.wh.name, dt, (F, "C1", "KHW", q))
        g = conv_geom(m)
        kw_q = ix(KH) * ix(KW) * q
        rows_out = (ix(n0) + ix("OW") - 2) // ix("OW") + 1
        rows_in = (rows_out - 1) * g.sh + (ix(KH) - 1) * g.dh + 1
        # channel groups per L1 stage: the cube tiling's kL1, and both ping-pong copies of
        # the weights' tile and of the image band within L1
        per_group = (ix(m0) * kw_q + imin(H, rows_in) * ix(W) * q) * (2 * ct_size(dt))
        self.derived = {
            "OH": to_ix(m.oh), "OW": to_ix(m.ow), "P": ix("OH") * ix("OW"),
            "HW": ix(H) * ix(W), "KHW": ix(KH) * ix(KW), "C1": ceildiv(C, q),
            "KDP": ix("C1") * kw_q,
            "NC1": Ix("max", (ix(1), imin(imin(ix(kl1) // kw_q, ix(l1) // per_group),
                                         ix("C1")))),
            "KL1": ix("NC1") * kw_q,
            "BAND": ix("NC1") * imin(H, rows_in) * ix(W) * q,
        }
        self.geom = g


def prep_program(name: str, ct: ConvTensors, ub: int) -> tuple[Program, Ix]:
    """The vector cores' phase: X and W to NC1HWC0 (module docstring); the number of
    chunks it splits over the cores."""
    q = ct.q
    dt = ct.x.dtype
    N, C, _, _, F, _, _ = ct.sizes
    chunk = chunk_size(ct.x.itemsize, ub)
    body: tuple = ()
    total: Ix = ix(0)
    bufs: list[LocalBuf] = []
    for k, (t3, t4, outer, inner) in enumerate(((ct.x3, ct.x4, N, "HW"),
                                                (ct.w3, ct.w4, F, "KHW"))):
        tag = "XW"[k]
        src = LocalBuf(f"ubChunk{tag}", "UB", dt, 16, chunk, "ND", pingpong=True)
        dst = LocalBuf(f"ub5hd{tag}", "UB", dt, chunk, 16, "ND", pingpong=True)
        bufs += [src, dst]
        nch = ceildiv(inner, chunk)
        units = ix(outer) * ix("C1") * nch
        i = ix(f"i{k}")
        lets = (Let(f"o{k}", ix("tile") // (ix("C1") * nch)),
                Let(f"g{k}", (ix("tile") // nch) % ix("C1")),
                Let(f"h{k}", (ix("tile") % nch) * chunk))
        o, g, h = ix(f"o{k}"), ix(f"g{k}"), ix(f"h{k}")
        chans = imin(q, ix(C) - g * q)
        ext = imin(chunk, ix(inner) - h)
        unit = (
            VecOp("Duplicate", Slot(src, i), (0.0,), ix(16)),
            CopyIn(GmRegion(t3, (o, g * q, h), (ix(1), chans, ext)), Slot(src, i)),
            VecOp("Transpose", Slot(dst, i), (Slot(src, i),), ix(chunk)),
            CopyOut(Slot(dst, i), GmRegion(t4, (o, g, h, ix(0)), (ix(1), ix(1), ext, ix(q))),
                    pipe="MTE3"),
        )
        body += tile_walk(units, unit, lets, var=f"i{k}")
        total = units if k == 0 else Ix("max", (total, units))
    return Program(f"{name}_5hd", "AIV", tuple(bufs), body), total


def band_copy(ct: ConvTensors, img: Slot, ko: Ix, n0: int, no: Ix, n_ext: Ix) -> tuple:
    """The L1 stage ``ko``'s image band of the output positions ``no * n0 +: n_ext``:
    its lets (the band's rows and padding) and the copy."""
    g = ct.geom
    N, C, H, W, F, KH, KW = ct.sizes
    p0 = no * n0
    # a tile whose windows lie wholly in the padding (above or below the image) has
    # an empty band: it loads the image's last row instead and puts every window in
    # the top padding (LoadData3DV2 with l1H = 0 would leave L0B as it was)
    r0, r1 = ix("r0v"), ix("r1v")
    emp = ix("emp")
    lets = (Let("yb", p0 // ix("OW")), Let("ye", (p0 + n_ext - 1) // ix("OW")),
            Let("top", ix("yb") * g.sh - g.ph),
            Let("r0v", Ix("max", (ix(0), ix("top")))),
            Let("r1v", imin(H, ix("ye") * g.sh - g.ph + (ix(KH) - 1) * g.dh + 1)),
            Let("emp", eq(imin(r0, r1), r1)),
            Let("r0", r0 + emp * (ix(H) - 1 - r0)),
            Let("r1", r1 + emp * (ix(H) - r1)),
            Let("c1s", ko * ix("NC1")),
            Let("nc1", imin(ix("NC1"), ix("C1") - ix("c1s"))))
    copy = CopyIn(GmRegion(ct.xh, (ix("b"), ix("c1s"), ix("r0"), ix(0), ix(0)),
                           (ix(1), ix("nc1"), ix("r1") - ix("r0"), ix(W), ix(ct.q))), img)
    return lets, copy


def band_pad(ct: ConvTensors) -> tuple[Ix, Ix, Ix, Ix]:
    """The band's padding: left, right, top, bottom."""
    g = ct.geom
    KH = ct.sizes[5]
    emp = ix("emp")
    bottom = ix("ye") * g.sh - g.ph + (ix(KH) - 1) * g.dh + 1 - ix("r1")
    # an empty band: every window row above the one loaded row
    above = (ix("ye") - ix("yb")) * g.sh + (ix(KH) - 1) * g.dh + 1
    return (ix(g.pw), ix(g.pw), emp * above + (ix(1) - emp) * (ix("r0") - ix("top")),
            (ix(1) - emp) * bottom)


__all__ = ["ConvTensors", "prep_program", "band_copy", "band_pad", "conv_geom", "to_ix",
           "CopyOut"]
