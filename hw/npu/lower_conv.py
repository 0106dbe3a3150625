"""Convolutions as implicit GEMM on the cube: the NPU IR pieces of a conv plan.

The ``npu-map`` pass recognised the convolution (:mod:`polycomp.scheduler.npu.conv`:
``out[n] (F x OH*OW) = Wt (F x C*KH*KW) @ im2col(X[n])``); here its operands become GM
tensors — the weights as an ``(F, KD)`` matrix (``KD = C*KH*KW``, a contiguous view: no
copy), the image as is (each ``kL1 x n0`` tile of the im2col matrix is gathered by the
GM -> L1 copy, :class:`~polycomp.hw.npu.program.CopyIm2Col`), the output as ``(N, F,
P)`` with ``P = OH*OW`` (the NCHW result) — and its window the copy's
:class:`~polycomp.hw.npu.program.ConvGeom`; the host derives ``KD``, ``OH``, ``OW`` and
``P`` (tiling data).  The cube program (:mod:`.lower_cube`) is the batched matmul's,
over ``n``.
"""
from __future__ import annotations

from polycomp import ir
from polycomp.errors import TargetError
from polycomp.scheduler.npu.conv import ConvMatch

from .program import ConvGeom, GlobalTensor, Ix, ix


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
    """The window of ``m`` as the im2col copy's geometry (output width: ``OW``)."""
    w = m.window
    return ConvGeom(w.sh, w.sw, w.ph, w.pw, w.dh, w.dw, to_ix(m.kh), to_ix(m.kw), ix("OW"))


def conv_tensors(m: ConvMatch, out_name: str, out_dtype: str):
    """``(A, B, C, derived sizes)``: Wt as ``(F, KD)``, X as is, the output as
    ``(N, F, P)``; the host derives KD, OH, OW and P."""
    def size(e) -> str | int:
        if isinstance(e, ir.Var):
            return e.name
        if isinstance(e, ir.IntImm):
            return int(e.value)
        raise TargetError(f"npu: conv operand extent {e} is neither a symbol nor a constant")
    names = [size(e) for e in (*m.x.shape, *m.w.shape)]
    N, C, H, W, F, _, KH, KW = names
    a = GlobalTensor(m.w.name, m.dtype, (F, "KD"), view=(F, C, KH, KW))
    b = GlobalTensor(m.x.name, m.dtype, (N, C, H, W))
    c = GlobalTensor(out_name, out_dtype, (N, F, "P"), is_output=True,
                     view=(N, F, "OH", "OW"))
    derived = {"KD": ix(C) * ix(KH) * ix(KW), "OH": to_ix(m.oh), "OW": to_ix(m.ow),
               "P": ix("OH") * ix("OW")}
    return a, b, c, derived, (N, C, H, W, F, KH, KW)
