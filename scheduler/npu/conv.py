"""Convolutions as implicit GEMM on the cube.

``out[n, f, y, z] = sum_{c, kh, kw} X[n, c, y*sh + kh*dh - ph, z*sw + kw*dw - pw] *
Wt[f, c, kh, kw]`` (zero outside X: the padding select) is, per image ``n``, the matrix
product ``out[n] (F x OH*OW) = Wt (F x C*KH*KW) @ im2col(X[n]) (C*KH*KW x OH*OW)``:

* the left operand is the weight tensor seen as an ``(F, KD)`` matrix (``KD = C*KH*KW``,
  a contiguous view: no copy);
* the right operand is never materialised: the GM -> L1 copy of each ``kL1 x n0`` tile
  gathers its elements from X by the im2col addressing — row ``k = (c, kh, kw)``,
  column ``p = (y, z)`` — with zeros outside the image, into the fractal NZ layout like
  any B tile;
* the output is ``(N, F, P)`` with ``P = OH*OW``: the NCHW result, written by FIX.

This module recognises the convolution (:func:`match_conv`) for the ``npu-map`` pass;
the NPU lowering (:mod:`polycomp.hw.npu.lower_conv`) builds the program, the batched
matmul's over ``n``.

Assumes: the stage is the sum of ``[cast](select(guard, [cast] X[...], 0)) *
[cast] Wt[f, c, kh, kw]`` with the indices above (``guard``, when present, is X's
bounds: checked on sample points) and float16/float32 operands.  Guarantees: a match
names the operands, the window (strides, paddings, dilations) and sizes the host can
compute (symbols, constants, ``+ - * //``).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from polycomp import ir
from polycomp.errors import TargetError
from polycomp.lowering.simplify import simplify
from polycomp.scheduler.common.contraction import Contraction, match_contraction


def check_size(e) -> ir.Expr:
    """``e`` when it is an integer size expression the host can compute (symbols,
    constants, + - * //), else a :class:`TargetError`."""
    if isinstance(e, (ir.Var, ir.IntImm)):
        return e
    if isinstance(e, ir.Binary) and e.op in ("+", "-", "*", "//"):
        check_size(e.a)
        check_size(e.b)
        return e
    raise TargetError(f"npu: the size expression {e} has no host tiling form")


def _value(e, env: dict) -> int:
    v = simplify(ir.substitute(e, {k: ir.IntImm(x) for k, x in env.items()}))
    if not isinstance(v, ir.IntImm):
        raise TargetError(f"npu: convolution index {e} is not affine in its iterators")
    return int(v.value)


def _affine(e, out_v, red_v) -> tuple[int, int, int]:
    """``(stride, dilation, -padding)`` of ``e = out_v*s + red_v*d - p``."""
    f = {(a, b): _value(e, {out_v: a, red_v: b}) for a in (0, 1, 2) for b in (0, 1, 2)}
    s, d, o = f[(1, 0)] - f[(0, 0)], f[(0, 1)] - f[(0, 0)], f[(0, 0)]
    if any(f[(a, b)] != a * s + b * d + o for a, b in f) or s < 1 or d < 1:
        raise TargetError(f"npu: convolution index {e} is not iterator*stride + "
                          f"reduce*dilation - padding")
    return s, d, o


@dataclass(frozen=True)
class ConvWindow:
    """Strides, paddings and dilations of a 2-d convolution window (rows, columns)."""
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int


@dataclass(frozen=True)
class ConvMatch:
    """A conv2d NCHW stage: its image and weight tensors, window, the output's extents
    ``oh``/``ow`` and the window's ``kh``/``kw`` (host-computable size expressions)."""
    x: Any               # the image tensor (N, C, H, W)
    w: Any               # the weight tensor (F, C, KH, KW)
    window: ConvWindow
    oh: ir.Expr
    ow: ir.Expr
    kh: ir.Expr
    kw: ir.Expr
    dtype: str


def match_conv(stage, inputs) -> ConvMatch | None:
    """The convolution of ``stage`` (None when it is no conv2d NCHW stage); raises
    when it looks like one but cannot be mapped."""
    c = match_contraction(stage)
    if not isinstance(c, Contraction) or not c.mixed or len(c.out_dims) != 4 or \
            len(c.reduce_dims) != 3:
        return None
    img, wt = (c.a, c.b) if len(c.a.dims) == 6 else (c.b, c.a)
    n, f, y, z = c.out_dims
    rc, rh, rw = c.reduce_dims
    xi, wi = img.load.indices, wt.load.indices
    if len(xi) != 4 or list(wi) != [f, rc, rh, rw] or xi[0] is not n or xi[1] is not rc \
            or wt.guard is not None:
        return None
    sh, dh, oh_ = _affine(xi[2], y, rh)
    sw, dw, ow_ = _affine(xi[3], z, rw)
    X, W = img.load.buffer, wt.load.buffer
    xt = next((t for t in inputs if t.name == X.name), None)
    wtt = next((t for t in inputs if t.name == W.name), None)
    if xt is None or wtt is None:
        raise TargetError(f"npu: conv {stage.name}: its operands are not kernel inputs")
    if img.load.dtype != wt.load.dtype or img.load.dtype not in ("float16", "float32"):
        raise TargetError(f"npu: conv {stage.name}: the cube takes float16/float32 "
                          f"operands of one type")
    H, Wd = xt.shape[2], xt.shape[3]
    if img.guard is not None:
        _check_guard(img.guard, xi, (y, rh, z, rw), (H, Wd), stage.name)
    elif oh_ or ow_:
        raise TargetError(f"npu: conv {stage.name} reads outside X without a padding guard")
    oh = check_size(stage.output.shape[2])
    ow = check_size(stage.output.shape[3])
    kh, kw = check_size(wtt.shape[2]), check_size(wtt.shape[3])
    return ConvMatch(xt, wtt, ConvWindow(sh, sw, -oh_, -ow_, dh, dw), oh, ow, kh, kw,
                     img.load.dtype)


def _check_guard(guard, xi, its, hw, name: str) -> None:
    """The padding guard must be X's bounds on the two window indices (checked on a
    grid of iterator values and image sizes)."""
    y, rh, z, rw = its
    for H, W in ((3, 4), (5, 2)):
        for vals in itertools.product(range(3), repeat=4):
            env = dict(zip((y, rh, z, rw), vals))
            env.update({hw[0]: H, hw[1]: W})
            h, w = _value(xi[2], env), _value(xi[3], env)
            g = simplify(ir.substitute(guard, {k: ir.IntImm(v) for k, v in env.items()}))
            if not isinstance(g, ir.IntImm) or bool(g.value) != (0 <= h < H and 0 <= w < W):
                raise TargetError(f"npu: conv {name}: its padding guard is not the image's "
                                  f"bounds")


def check_extents(m: ConvMatch) -> None:
    """The operands' extents must be symbols or constants (the host passes them as
    tiling data); else a :class:`TargetError`."""
    for e in (*m.x.shape, *m.w.shape):
        if not isinstance(e, (ir.Var, ir.IntImm)):
            raise TargetError(f"npu: conv operand extent {e} is neither a symbol nor a "
                              f"constant")
