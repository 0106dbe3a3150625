"""The operator library, written in the ``@tensor_expr`` DSL itself.

Two layers:

* **Tensor-level operators** (``matmul``, ``conv2d_nchw``, ``softmax``, ``add``, ...) take
  :class:`~polycomp.frontend.dsl.Tensor` values inside a ``@tensor_expr`` function and
  return the Tensor(s) they build with :func:`~polycomp.frontend.dsl.compute`; they
  compose like any DSL code::

      @pc.tensor_expr
      def block(X: pc.Tensor[(N, D)], W: pc.Tensor[(D, M)], b: pc.Tensor[(M,)]):
          return ops.gelu(ops.bias_add(ops.matmul(X, W), b))

* **Kernel factories** (``matmul_kernel(dtype)``, ``conv2d_kernel(stride, ...)``, ...)
  return ready-made :class:`~polycomp.frontend.dsl.Kernel` objects whose dimensions are
  fresh :func:`~polycomp.frontend.dsl.sym` symbols, and :data:`OPS` registers each
  configuration with a numpy reference and an input-shape generator, for tests,
  examples and the command line.

Dtype conventions (every operator follows them):

* The *accumulation dtype* of a reduction is ``float32`` for ``float16``/``bfloat16``
  inputs, ``int32`` for ``int8`` inputs, and the input dtype otherwise
  (:func:`accumulation_dtype`).  Sums, matrix products and convolutions accumulate in
  it and their result has that dtype unless ``out_dtype`` asks for another (one more
  elementwise stage then casts).  ``max``/``min`` reductions are exact and keep the
  input dtype.
* Transcendental operators (``gelu``, ``softmax``, ``layernorm``) compute in the
  accumulation dtype and round to the input dtype once, when the result is stored.
* Elementwise arithmetic follows :func:`polycomp.dtypes.promote` (numpy-like; Python
  scalars are weakly typed), computed as :mod:`polycomp.dtypes` describes.

Layouts are row-major; ``conv2d_nchw`` uses NCHW activations and FCHW (OIHW) weights.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import DSLError, DTypeError, ShapeMismatchError, SourceLocation

from . import dsl
from .dsl import Kernel, Tensor, TensorType, cast, compute, reduce_axis, select, sym

__all__ = [
    "accumulation_dtype", "broadcast_shapes", "add", "sub", "mul", "div", "maximum",
    "minimum", "relu", "leaky_relu", "gelu", "bias_add", "transpose", "reduce_sum",
    "reduce_max", "reduce_min", "softmax", "layernorm", "matmul", "batch_matmul",
    "matmul_bias_relu", "conv2d_nchw", "conv2d_output_extent", "binary_kernel",
    "relu_kernel", "leaky_relu_kernel", "row_stats_kernel", "gelu_kernel",
    "bias_add_kernel", "transpose_kernel", "reduce_kernel", "softmax_kernel",
    "layernorm_kernel", "matmul_kernel", "batch_matmul_kernel",
    "matmul_bias_relu_kernel", "conv2d_kernel", "mlp_kernel", "attention_kernel",
    "outer_add_kernel", "reduce3d_kernel", "softmax3d_kernel", "layernorm3d_kernel",
    "matmul_same_dtype_kernel", "conv2d_bias_relu_kernel", "scalar_operand", "OpSpec",
    "OPS",
]


# =========================================================================== helpers


def accumulation_dtype(dtype: str) -> str:
    """The dtype a reduction over ``dtype`` values accumulates in (see module docstring)."""
    dtype = dt.canonical(dtype)
    if dtype in ("float16", "bfloat16"):
        return "float32"
    if dtype == "int8":
        return "int32"
    if dtype == "bool":
        return "int32"
    return dtype


def _caller() -> SourceLocation | None:
    """The line that called into the operator library (errors about an operator's
    arguments point there, not into this file)."""
    import linecache
    f = inspect.currentframe()
    try:
        while f is not None and f.f_code.co_filename == __file__:
            f = f.f_back
        if f is None:
            return None
        fn = f.f_code.co_filename
        return SourceLocation(fn, f.f_lineno, linecache.getline(fn, f.f_lineno))
    finally:
        del f


def _indexed(n: int, fn: Callable[[tuple], ir.Expr]) -> Callable:
    """A function of ``n`` index arguments (as :func:`compute` wants) calling ``fn(idx)``."""
    def f(*idx):
        return fn(tuple(idx))
    f.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(f"i{k}", inspect.Parameter.POSITIONAL_ONLY) for k in range(n)])
    return f


def _axis(axis: int, ndim: int, what: str) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise DSLError(f"{what}: axis must be an int, got {axis!r}", _caller())
    a = int(axis) + ndim if axis < 0 else int(axis)
    if not 0 <= a < ndim:
        raise ShapeMismatchError(f"{what}: axis {axis} is out of range for a {ndim}-d tensor",
                                 _caller())
    return a


def _same_extent(a: ir.Expr, b: ir.Expr) -> bool:
    from polycomp.lowering.simplify import const_difference
    if a is b or ir.structural_equal(a, b):
        return True
    return const_difference(a, b) == 0


def _shape_str(shape) -> str:
    from polycomp.lowering.printer import expr_str
    return "(" + ", ".join(expr_str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _check_tensor(x, what: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise DSLError(f"{what} needs a Tensor, got {type(x).__name__}", _caller())
    return x


def _check_extent(a: ir.Expr, b: ir.Expr, what: str, sa, sb) -> None:
    if not _same_extent(a, b):
        raise ShapeMismatchError(f"{what}: extents do not match, {_shape_str(sa)} vs "
                                 f"{_shape_str(sb)}", _caller())


def _acc_load(x: Tensor, idx, acc: str) -> ir.Expr:
    v = x[idx]
    return v if v.dtype == acc else cast(v, acc)


def _finish(t: Tensor, out_dtype: str | None, name: str) -> Tensor:
    """``t`` cast elementwise to ``out_dtype`` (an extra stage) when that differs."""
    if out_dtype is None or dt.canonical(out_dtype) == t.dtype:
        return t
    n = t.ndim
    return compute(t.shape, _indexed(n, lambda i: cast(t[i], out_dtype)), name=name,
                   dtype=out_dtype)


# =========================================================================== elementwise


def broadcast_shapes(*shapes) -> tuple:
    """numpy's broadcasting of symbolic shapes: align on the right; an extent that is the
    constant 1 stretches, other extents must be equal (structurally, or differing by 0)."""
    nd = max(len(s) for s in shapes)
    out = []
    for k in range(nd):
        ext = None
        for s in shapes:
            j = k - (nd - len(s))
            if j < 0:
                continue
            d = s[j]
            if ext is None or ir.is_const(ext, 1):
                ext = d
            elif ir.is_const(d, 1):
                continue
            elif not _same_extent(ext, d):
                raise ShapeMismatchError(
                    "cannot broadcast shapes " + " and ".join(_shape_str(x) for x in shapes),
                    _caller())
        out.append(ext)
    return tuple(out)


def _broadcast_load(x, out_shape: tuple, idx: tuple) -> ir.Expr:
    """Element of operand ``x`` (a Tensor or a Python/IR scalar) at output index ``idx``."""
    if not isinstance(x, Tensor):
        return x
    off = len(out_shape) - x.ndim
    sub = []
    for j, d in enumerate(x.shape):
        o = out_shape[j + off]
        sub.append(ir.IntImm(0) if ir.is_const(d, 1) and not ir.is_const(o, 1) else idx[j + off])
    return x[tuple(sub)]


def _binary(op: str, a, b, name: str | None) -> Tensor:
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise DSLError(f"{op}() needs at least one Tensor operand", _caller())
    shapes = [x.shape for x in (a, b) if isinstance(x, Tensor)]
    shape = broadcast_shapes(*shapes)
    fn = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
          "divide": lambda x, y: x / y, "maximum": ir.max_, "minimum": ir.min_}[op]

    def body(idx):
        return fn(_broadcast_load(a, shape, idx), _broadcast_load(b, shape, idx))
    return compute(shape, _indexed(len(shape), body), name=name or op)


def add(a, b, name: str | None = None) -> Tensor:
    """``a + b`` elementwise with numpy broadcasting (either side may be a scalar)."""
    return _binary("add", a, b, name)


def sub(a, b, name: str | None = None) -> Tensor:
    """``a - b`` elementwise with numpy broadcasting."""
    return _binary("sub", a, b, name)


def mul(a, b, name: str | None = None) -> Tensor:
    """``a * b`` elementwise with numpy broadcasting."""
    return _binary("mul", a, b, name)


def div(a, b, name: str | None = None) -> Tensor:
    """``a / b`` (true division; needs a float operand) with numpy broadcasting."""
    return _binary("divide", a, b, name)


def maximum(a, b, name: str | None = None) -> Tensor:
    """Elementwise maximum with numpy broadcasting."""
    return _binary("maximum", a, b, name)


def minimum(a, b, name: str | None = None) -> Tensor:
    """Elementwise minimum with numpy broadcasting."""
    return _binary("minimum", a, b, name)


def relu(x: Tensor, name: str = "relu") -> Tensor:
    """``max(x, 0)`` elementwise, same dtype."""
    _check_tensor(x, "relu()")
    return compute(x.shape, _indexed(x.ndim, lambda i: ir.max_(x[i], 0)), name=name)


def leaky_relu(x: Tensor, alpha: float = 0.01, name: str = "leaky_relu") -> Tensor:
    """``x if x > 0 else alpha * x`` elementwise (a data-dependent ``select``), float
    tensors, same dtype."""
    _check_tensor(x, "leaky_relu()")
    if not dt.is_float(x.dtype):
        raise DTypeError(f"leaky_relu() needs a float tensor, got {x.dtype}", _caller())
    return compute(x.shape, _indexed(x.ndim, lambda i: select(x[i] > 0, x[i], alpha * x[i])),
                   name=name)


_SQRT1_2 = 0.7071067811865476


def gelu(x: Tensor, name: str = "gelu") -> Tensor:
    """GELU in its exact (erf) form, ``0.5 * x * (1 + erf(x / sqrt(2)))``, elementwise.

    Computed in the accumulation dtype (float32 for 16-bit floats), rounded to x's dtype.
    """
    _check_tensor(x, "gelu()")
    if not dt.is_float(x.dtype):
        raise DTypeError(f"gelu() needs a float tensor, got {x.dtype}", _caller())
    acc = accumulation_dtype(x.dtype)

    def body(i):
        v = _acc_load(x, i, acc)
        return 0.5 * v * (1.0 + dsl.erf(v * _SQRT1_2))
    return compute(x.shape, _indexed(x.ndim, body), name=name, dtype=x.dtype)


def bias_add(x: Tensor, bias: Tensor, axis: int = -1, name: str = "bias_add") -> Tensor:
    """``x + bias`` where the 1-d ``bias`` runs along ``axis`` of ``x`` (``axis=1`` for
    NCHW activations)."""
    _check_tensor(x, "bias_add()")
    _check_tensor(bias, "bias_add()")
    if bias.ndim != 1:
        raise ShapeMismatchError(f"bias_add(): bias must be 1-d, got {_shape_str(bias.shape)}",
                                 _caller())
    a = _axis(axis, x.ndim, "bias_add()")
    _check_extent(x.shape[a], bias.shape[0], "bias_add()", x.shape, bias.shape)
    return compute(x.shape, _indexed(x.ndim, lambda i: x[i] + bias[i[a]]), name=name)


def transpose(x: Tensor, perm=None, name: str = "transpose") -> Tensor:
    """Axis permutation: ``out.shape[k] = x.shape[perm[k]]`` (numpy's ``transpose``);
    ``perm=None`` reverses the axes."""
    _check_tensor(x, "transpose()")
    perm = tuple(range(x.ndim))[::-1] if perm is None else tuple(int(p) for p in perm)
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeMismatchError(f"transpose(): {perm} is not a permutation of the "
                                 f"{x.ndim} axes", _caller())
    shape = tuple(x.shape[p] for p in perm)

    def body(i):
        src = [None] * x.ndim
        for k, p in enumerate(perm):
            src[p] = i[k]
        return x[tuple(src)]
    return compute(shape, _indexed(x.ndim, body), name=name)


# =========================================================================== reductions


def _axes(axis, ndim: int, what: str) -> tuple:
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = tuple(sorted({_axis(a, ndim, what) for a in axes}))
    if len(out) != len(axes):
        raise ShapeMismatchError(f"{what}: an axis is listed twice in {axis!r}", _caller())
    return out


def _reduce(op: str, x: Tensor, axis, keepdims: bool, acc: str, name: str) -> Tensor:
    what = f"reduce_{op}()"
    _check_tensor(x, what)
    axes = _axes(axis, x.ndim, what)
    rs = [reduce_axis(x.shape[a]) for a in axes]
    shape = tuple((ir.IntImm(1) if keepdims else None) if k in axes else d
                  for k, d in enumerate(x.shape))
    shape = tuple(d for d in shape if d is not None)
    reducer = {"sum": dsl.sum, "max": dsl.max, "min": dsl.min}[op]

    def body(i):
        src, it, r = [], iter(i), iter(rs)
        for k in range(x.ndim):
            if k in axes:
                src.append(next(r))
                if keepdims:
                    next(it)
            else:
                src.append(next(it))
        return reducer(_acc_load(x, tuple(src), acc), axis=rs)
    return compute(shape, _indexed(len(shape), body), name=name, dtype=acc)


def reduce_sum(x: Tensor, axis=None, keepdims: bool = False, out_dtype: str | None = None,
               name: str = "reduce_sum") -> Tensor:
    """Sum over ``axis`` (an int, a tuple, or None for all axes), accumulated in
    :func:`accumulation_dtype` of x (the result's dtype unless ``out_dtype`` is given)."""
    acc = accumulation_dtype(x.dtype)
    return _finish(_reduce("sum", x, axis, keepdims, acc, name), out_dtype, name + "_cast")


def reduce_max(x: Tensor, axis=None, keepdims: bool = False, name: str = "reduce_max") -> Tensor:
    """Maximum over ``axis`` (exact, in x's dtype; identity -inf / the dtype's minimum)."""
    return _reduce("max", x, axis, keepdims, x.dtype, name)


def reduce_min(x: Tensor, axis=None, keepdims: bool = False, name: str = "reduce_min") -> Tensor:
    """Minimum over ``axis`` (exact, in x's dtype)."""
    return _reduce("min", x, axis, keepdims, x.dtype, name)


def _rest_index(i: tuple, a: int) -> tuple:
    return i[:a] + i[a + 1:]


def softmax(x: Tensor, axis: int = -1, name: str = "softmax") -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis`` in four stages: the row
    maximum, the shifted exponentials, their sum, the quotient.  Computed in the
    accumulation dtype, stored in x's dtype."""
    _check_tensor(x, "softmax()")
    if not dt.is_float(x.dtype):
        raise DTypeError(f"softmax() needs a float tensor, got {x.dtype}", _caller())
    a = _axis(axis, x.ndim, "softmax()")
    acc = accumulation_dtype(x.dtype)
    n = x.ndim
    mx = reduce_max(x, a, name=f"{name}_max")
    e = compute(x.shape, _indexed(n, lambda i: dsl.exp(_acc_load(x, i, acc)
                                                         - _acc_load(mx, _rest_index(i, a), acc))),
                name=f"{name}_exp", dtype=acc)
    s = _reduce("sum", e, a, False, acc, f"{name}_sum")
    return compute(x.shape, _indexed(n, lambda i: e[i] / s[_rest_index(i, a)]), name=name,
                   dtype=x.dtype)


def layernorm(x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5,
              name: str = "layernorm") -> Tensor:
    """Layer normalisation over the last axis (length D):
    ``(x - mean) / sqrt(var + eps) * gamma + beta`` with ``gamma``, ``beta`` of shape (D,)
    and the biased variance ``mean((x - mean)^2)`` (two passes: sum, centre, sum of
    squares, normalise).  Computed in the accumulation dtype, stored in x's dtype."""
    _check_tensor(x, "layernorm()")
    for g, what in ((gamma, "gamma"), (beta, "beta")):
        _check_tensor(g, "layernorm()")
        if g.ndim != 1:
            raise ShapeMismatchError(f"layernorm(): {what} must be 1-d", _caller())
        _check_extent(x.shape[-1], g.shape[0], f"layernorm() {what}", x.shape, g.shape)
    if not dt.is_float(x.dtype):
        raise DTypeError(f"layernorm() needs a float tensor, got {x.dtype}", _caller())
    acc = accumulation_dtype(x.dtype)
    n, last = x.ndim, x.ndim - 1
    d = cast(x.shape[-1], acc)
    s1 = _reduce("sum", x, last, False, acc, f"{name}_sum")
    xc = compute(x.shape, _indexed(n, lambda i: _acc_load(x, i, acc) - s1[i[:-1]] / d),
                 name=f"{name}_centered", dtype=acc)
    sq = compute(x.shape, _indexed(n, lambda i: xc[i] * xc[i]), name=f"{name}_sq")
    s2 = _reduce("sum", sq, last, False, acc, f"{name}_sqsum")

    def body(i):
        inv = dsl.rsqrt(s2[i[:-1]] / d + eps)
        return xc[i] * inv * _acc_load(gamma, (i[-1],), acc) + _acc_load(beta, (i[-1],), acc)
    return compute(x.shape, _indexed(n, body), name=name, dtype=x.dtype)


# =========================================================================== contractions


def matmul(a: Tensor, b: Tensor, out_dtype: str | None = None, name: str = "matmul") -> Tensor:
    """``C[i, j] = sum_k A[i, k] * B[k, j]`` for A (N, K), B (K, M), accumulated in
    :func:`accumulation_dtype` of the promoted input dtype."""
    _check_tensor(a, "matmul()")
    _check_tensor(b, "matmul()")
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeMismatchError(f"matmul() needs 2-d tensors, got {_shape_str(a.shape)} and "
                                 f"{_shape_str(b.shape)}", _caller())
    _check_extent(a.shape[1], b.shape[0], "matmul()", a.shape, b.shape)
    acc = accumulation_dtype(dt.promote(a.dtype, b.dtype))
    k = reduce_axis(a.shape[1], "k")
    c = compute((a.shape[0], b.shape[1]),
                lambda i, j: dsl.sum(_acc_load(a, (i, k), acc) * _acc_load(b, (k, j), acc), axis=k),
                name=name, dtype=acc)
    return _finish(c, out_dtype, name + "_cast")


def batch_matmul(a: Tensor, b: Tensor, out_dtype: str | None = None,
                 name: str = "batch_matmul") -> Tensor:
    """``C[n, i, j] = sum_k A[n, i, k] * B[n, k, j]`` for A (B, N, K), B (B, K, M)."""
    _check_tensor(a, "batch_matmul()")
    _check_tensor(b, "batch_matmul()")
    if a.ndim != 3 or b.ndim != 3:
        raise ShapeMismatchError(f"batch_matmul() needs 3-d tensors, got {_shape_str(a.shape)} "
                                 f"and {_shape_str(b.shape)}", _caller())
    _check_extent(a.shape[0], b.shape[0], "batch_matmul() batch", a.shape, b.shape)
    _check_extent(a.shape[2], b.shape[1], "batch_matmul()", a.shape, b.shape)
    acc = accumulation_dtype(dt.promote(a.dtype, b.dtype))
    k = reduce_axis(a.shape[2], "k")
    c = compute((a.shape[0], a.shape[1], b.shape[2]),
                lambda n, i, j: dsl.sum(_acc_load(a, (n, i, k), acc) * _acc_load(b, (n, k, j), acc),
                                        axis=k),
                name=name, dtype=acc)
    return _finish(c, out_dtype, name + "_cast")


def matmul_bias_relu(a: Tensor, b: Tensor, bias: Tensor, out_dtype: str | None = None,
                     name: str = "matmul_bias_relu") -> Tensor:
    """``relu(A @ B + bias)`` with bias (M,) broadcast over rows; two stages (the product
    in the accumulation dtype, then the epilogue, stored in ``out_dtype`` or the
    accumulation dtype)."""
    c = matmul(a, b, name=name + "_mm")
    _check_tensor(bias, "matmul_bias_relu()")
    if bias.ndim != 1:
        raise ShapeMismatchError("matmul_bias_relu(): bias must be 1-d", _caller())
    _check_extent(c.shape[1], bias.shape[0], "matmul_bias_relu() bias", c.shape, bias.shape)
    acc = c.dtype
    return compute(c.shape, lambda i, j: ir.max_(c[i, j] + _acc_load(bias, (j,), acc), 0),
                   name=name, dtype=out_dtype or acc)


def _pair(v, what) -> tuple:
    if isinstance(v, (int, np.integer)):
        v = (int(v), int(v))
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise DSLError(f"conv2d_nchw(): {what} must be an int or a pair", _caller())
    return v


def conv2d_output_extent(size, kernel, stride: int, padding: int, dilation: int) -> ir.Expr:
    """``(size + 2*padding - dilation*(kernel-1) - 1) // stride + 1`` (quasi-affine)."""
    from polycomp.lowering.simplify import simplify
    size, kernel = ir.const(size), ir.const(kernel)
    e = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    return simplify(e)


def conv2d_nchw(x: Tensor, w: Tensor, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                out_dtype: str | None = None, name: str = "conv2d",
                w_layout: str = "fchw") -> Tensor:
    """2-d convolution (cross-correlation, as in deep-learning frameworks).

    ``x`` is (N, C, H, W), ``w`` is (F, C, KH, KW) (``w_layout="fchw"``) or (C, KH, KW, F)
    (``"chwf"``: the output channel innermost, so the CPU backend's channel form reads
    its weight vectors in place instead of packing them per call); the result (N, F, OH, OW) with
    ``OH = (H + 2*ph - dh*(KH-1) - 1) // sh + 1`` (likewise OW) is
    ``out[n, f, oh, ow] = sum_{c, kh, kw} xpad[n, c, oh*sh + kh*dh - ph, ow*sw + kw*dw - pw]
    * w[f, c, kh, kw]`` where ``xpad`` is x with zeros outside its extents: the padding is
    a ``select`` in the body, no padded tensor is materialised.  Accumulates in
    :func:`accumulation_dtype` of the promoted input dtype.
    """
    _check_tensor(x, "conv2d_nchw()")
    _check_tensor(w, "conv2d_nchw()")
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeMismatchError("conv2d_nchw() needs x (N, C, H, W) and w (F, C, KH, KW)",
                                 _caller())
    if w_layout not in ("fchw", "chwf"):
        raise DSLError(f"conv2d_nchw(): w_layout {w_layout!r} (fchw or chwf)", _caller())
    if w_layout == "chwf":
        wc, KH, KW, F = w.shape
    else:
        F, wc, KH, KW = w.shape
    _check_extent(x.shape[1], wc, "conv2d_nchw() channels", x.shape, w.shape)
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride, "stride"), _pair(padding, "padding"), \
        _pair(dilation, "dilation")
    if min(sh, sw, dh, dw) < 1 or min(ph, pw) < 0:
        raise DSLError("conv2d_nchw(): stride and dilation must be >= 1, padding >= 0",
                       _caller())
    N, C, H, W = x.shape
    oh = conv2d_output_extent(H, KH, sh, ph, dh)
    ow = conv2d_output_extent(W, KW, sw, pw, dw)
    acc = accumulation_dtype(dt.promote(x.dtype, w.dtype))
    rc, rh, rw = reduce_axis(C, "rc"), reduce_axis(KH, "rh"), reduce_axis(KW, "rw")

    def body(n, f, y, z):
        h = y * sh + rh * dh - ph
        v = z * sw + rw * dw - pw
        xv = _acc_load(x, (n, rc, h, v), acc)
        if ph or pw:
            inside = (h >= 0) & (h < H) & (v >= 0) & (v < W)
            xv = select(inside, xv, ir.const(0.0, acc) if dt.is_float(acc) else ir.IntImm(0, acc))
        widx = (rc, rh, rw, f) if w_layout == "chwf" else (f, rc, rh, rw)
        return dsl.sum(xv * _acc_load(w, widx, acc), axis=[rc, rh, rw])
    out = compute((N, F, oh, ow), body, name=name, dtype=acc)
    return _finish(out, out_dtype, name + "_cast")


# =========================================================================== kernel factories


def _kernel(name: str, fn: Callable, **inputs: TensorType) -> Kernel:
    """A :class:`Kernel` of ``fn`` whose parameters have the given tensor types."""
    return Kernel(fn, name, inputs)


def _T(shape, dtype) -> TensorType:
    return Tensor[tuple(shape), dt.canonical(dtype)]  # type: ignore[misc]


def _dtname(dtype: str) -> str:
    return dt.canonical(dtype)


BROADCASTS = ("none", "row", "col", "scalar_rhs")


def scalar_operand(dtype: str):
    """The Python scalar of the ``scalar_rhs`` binary kernels: 2 for integer dtypes,
    0.5 for float dtypes (weakly typed, so the result keeps ``dtype``)."""
    return 2 if dt.is_int(dt.canonical(dtype)) else 0.5


def binary_kernel(op: str, broadcast: str = "none", dtype: str = "float32") -> Kernel:
    """``op`` in add/sub/mul/div/maximum/minimum on an (N, M) tensor ``a`` and ``b`` of
    shape (N, M) (``broadcast="none"``), (M,) (``"row"``), (N, 1) (``"col"``), or the
    Python scalar :func:`scalar_operand` (``"scalar_rhs"``, a one-input kernel)."""
    if broadcast not in BROADCASTS:
        raise DSLError(f"binary_kernel(): broadcast must be one of {BROADCASTS}", _caller())
    N, M = sym("N M")
    f = globals()[op]
    bshape = {"none": (N, M), "row": (M,), "col": (N, 1)}.get(broadcast)
    kname = f"{op}_{broadcast}_{_dtname(dtype)}"
    if broadcast == "scalar_rhs":
        return _kernel(kname, lambda a: f(a, scalar_operand(dtype)), a=_T((N, M), dtype))
    return _kernel(kname, lambda a, b: f(a, b), a=_T((N, M), dtype), b=_T(bshape, dtype))


def relu_kernel(dtype: str = "float32") -> Kernel:
    """relu on a (N, M) tensor."""
    N, M = sym("N M")
    return _kernel(f"relu_{_dtname(dtype)}", lambda x: relu(x), x=_T((N, M), dtype))


def leaky_relu_kernel(dtype: str = "float32") -> Kernel:
    """leaky_relu (alpha 0.01) on a (N, M) tensor."""
    N, M = sym("N M")
    return _kernel(f"leaky_relu_{_dtname(dtype)}", lambda x: leaky_relu(x), x=_T((N, M), dtype))


def row_stats_kernel(dtype: str = "float32") -> Kernel:
    """Two outputs from one (N, M) input: the row maxima and the row sums."""
    N, M = sym("N M")
    return _kernel(f"row_stats_{_dtname(dtype)}",
                   lambda x: (reduce_max(x, 1, name="row_max"), reduce_sum(x, 1, name="row_sum")),
                   x=_T((N, M), dtype))


def gelu_kernel(dtype: str = "float32") -> Kernel:
    """gelu (erf form) on a (N, M) tensor."""
    N, M = sym("N M")
    return _kernel(f"gelu_{_dtname(dtype)}", lambda x: gelu(x), x=_T((N, M), dtype))


def bias_add_kernel(dtype: str = "float32") -> Kernel:
    """bias_add of an NCHW tensor (N, C, H, W) and a bias (C,) along axis 1."""
    N, C, H, W = sym("N C H W")
    return _kernel(f"bias_add_{_dtname(dtype)}", lambda x, bias: bias_add(x, bias, axis=1),
                   x=_T((N, C, H, W), dtype), bias=_T((C,), dtype))


def transpose_kernel(perm=(0, 2, 1), dtype: str = "float32") -> Kernel:
    """transpose of an (A, B, C) tensor by ``perm``."""
    A, B, C = sym("A B C")
    tag = "".join(str(p) for p in perm)
    return _kernel(f"transpose_{tag}_{_dtname(dtype)}", lambda x: transpose(x, perm),
                   x=_T((A, B, C), dtype))


def reduce_kernel(op: str = "sum", axis=1, dtype: str = "float32") -> Kernel:
    """reduce_sum / reduce_max / reduce_min of an (N, M) tensor over ``axis`` (0, 1,
    or None for both, giving a 0-d result)."""
    N, M = sym("N M")
    reducers: dict[str, Callable[..., Tensor]] = {"sum": reduce_sum, "max": reduce_max,
                                                  "min": reduce_min}
    f = reducers[op]
    tag = "all" if axis is None else str(axis)
    return _kernel(f"reduce_{op}_{tag}_{_dtname(dtype)}", lambda x: f(x, axis),
                   x=_T((N, M), dtype))


def softmax_kernel(axis: int = -1, dtype: str = "float32") -> Kernel:
    """softmax of an (N, M) tensor along ``axis``."""
    N, M = sym("N M")
    tag = str(axis).replace("-", "m")
    return _kernel(f"softmax_{tag}_{_dtname(dtype)}", lambda x: softmax(x, axis),
                   x=_T((N, M), dtype))


def layernorm_kernel(dtype: str = "float32", eps: float = 1e-5) -> Kernel:
    """layernorm of an (N, D) tensor over D with gamma, beta of shape (D,)."""
    N, D = sym("N D")
    return _kernel(f"layernorm_{_dtname(dtype)}",
                   lambda x, gamma, beta: layernorm(x, gamma, beta, eps),
                   x=_T((N, D), dtype), gamma=_T((D,), dtype), beta=_T((D,), dtype))


def matmul_kernel(dtype: str = "float32", out_dtype: str | None = None) -> Kernel:
    """``C = A @ B`` with A (N, K), B (K, M)."""
    N, M, K = sym("N M K")
    return _kernel(f"matmul_{_dtname(dtype)}", lambda A, B: matmul(A, B, out_dtype),
                   A=_T((N, K), dtype), B=_T((K, M), dtype))


def batch_matmul_kernel(dtype: str = "float32", out_dtype: str | None = None) -> Kernel:
    """``C[b] = A[b] @ B[b]`` with A (Bt, N, K), B (Bt, K, M)."""
    Bt, N, M, K = sym("Bt N M K")
    return _kernel(f"batch_matmul_{_dtname(dtype)}", lambda A, B: batch_matmul(A, B, out_dtype),
                   A=_T((Bt, N, K), dtype), B=_T((Bt, K, M), dtype))


def matmul_bias_relu_kernel(dtype: str = "float32") -> Kernel:
    """``relu(A @ B + bias)`` with A (N, K), B (K, M), bias (M,)."""
    N, M, K = sym("N M K")
    return _kernel(f"matmul_bias_relu_{_dtname(dtype)}",
                   lambda A, B, bias: matmul_bias_relu(A, B, bias),
                   A=_T((N, K), dtype), B=_T((K, M), dtype), bias=_T((M,), dtype))


def conv2d_kernel(stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                  dtype: str = "float32") -> Kernel:
    """conv2d_nchw of X (N, C, H, W) with Wt (F, C, KH, KW), all extents symbolic; the
    output extents are quasi-affine expressions of the symbols."""
    N, C, H, W, F, KH, KW = sym("N C H W F KH KW")
    s, p, d = _pair(stride, "stride"), _pair(padding, "padding"), _pair(dilation, "dilation")
    tag = f"s{s[0]}{s[1]}_p{p[0]}{p[1]}_d{d[0]}{d[1]}"
    return _kernel(f"conv2d_{tag}_{_dtname(dtype)}",
                   lambda X, Wt: conv2d_nchw(X, Wt, s, p, d),
                   X=_T((N, C, H, W), dtype), Wt=_T((F, C, KH, KW), dtype))


def outer_add_kernel(dtype: str = "float32") -> Kernel:
    """``a + b`` with a (N, 1) and b (1, M): both sides broadcast, giving (N, M)."""
    N, M = sym("N M")
    return _kernel(f"outer_add_{_dtname(dtype)}", lambda a, b: add(a, b),
                   a=_T((N, 1), dtype), b=_T((1, M), dtype))


def reduce3d_kernel(op: str = "sum", axis=(0, 2), keepdims: bool = True,
                    dtype: str = "float32") -> Kernel:
    """reduce_sum / reduce_max of an (A, B, C) tensor over ``axis`` (keepdims as asked)."""
    A, B, C = sym("A B C")
    reducers: dict[str, Callable[..., Tensor]] = {"sum": reduce_sum, "max": reduce_max,
                                                  "min": reduce_min}
    f = reducers[op]
    tag = "".join(str(a) for a in (axis if isinstance(axis, tuple) else (axis,)))
    return _kernel(f"reduce3d_{op}_{tag}{'_keep' if keepdims else ''}_{_dtname(dtype)}",
                   lambda x: f(x, axis, keepdims), x=_T((A, B, C), dtype))


def softmax3d_kernel(axis: int = 1, dtype: str = "float32") -> Kernel:
    """softmax of an (A, B, C) tensor along ``axis``."""
    A, B, C = sym("A B C")
    return _kernel(f"softmax3d_{axis}_{_dtname(dtype)}", lambda x: softmax(x, axis),
                   x=_T((A, B, C), dtype))


def layernorm3d_kernel(dtype: str = "float32", eps: float = 1e-5) -> Kernel:
    """layernorm of a (B, T, D) tensor over D."""
    B, T, D = sym("B T D")
    return _kernel(f"layernorm3d_{_dtname(dtype)}",
                   lambda x, gamma, beta: layernorm(x, gamma, beta, eps),
                   x=_T((B, T, D), dtype), gamma=_T((D,), dtype), beta=_T((D,), dtype))


def matmul_same_dtype_kernel(dtype: str = "float32") -> Kernel:
    """``A @ B`` accumulated in the accumulation dtype, returned in the input dtype (a
    cast stage for 16-bit and int8 inputs)."""
    N, M, K = sym("N M K")
    return _kernel(f"matmul_same_{_dtname(dtype)}", lambda A, B: matmul(A, B, dtype),
                   A=_T((N, K), dtype), B=_T((K, M), dtype))


def conv2d_bias_relu_kernel(dtype: str = "float32") -> Kernel:
    """A composite: ``relu(conv2d_nchw(X, Wt, stride 2, padding 1) + b[f])``; the later
    stages have the quasi-affine output extents of the convolution."""
    N, C, H, W, F, KH, KW = sym("N C H W F KH KW")
    return _kernel(f"conv2d_bias_relu_{_dtname(dtype)}",
                   lambda X, Wt, b: relu(bias_add(conv2d_nchw(X, Wt, 2, 1), b, axis=1)),
                   X=_T((N, C, H, W), dtype), Wt=_T((F, C, KH, KW), dtype), b=_T((F,), dtype))


def mlp_kernel(dtype: str = "float32") -> Kernel:
    """A composite: ``gelu(X @ W + b)`` with X (N, D), W (D, M), b (M,) (three stages)."""
    N, D, M = sym("N D M")
    return _kernel(f"mlp_gelu_{_dtname(dtype)}",
                   lambda X, W, b: gelu(bias_add(matmul(X, W), b)),
                   X=_T((N, D), dtype), W=_T((D, M), dtype), b=_T((M,), dtype))


def attention_kernel(dtype: str = "float32") -> Kernel:
    """A composite: ``softmax(Q K^T / sqrt(D)) V`` per batch, with Q (Bt, N, D), K and
    V (Bt, M, D): transpose, batch_matmul, scale, the four softmax stages, batch_matmul
    (in the accumulation dtype throughout)."""
    Bt, N, M, D = sym("Bt N M D")

    def fn(Q, K, V):
        acc = accumulation_dtype(Q.dtype)
        s = batch_matmul(Q, transpose(K, (0, 2, 1)), name="scores")
        s = mul(s, dsl.rsqrt(cast(Q.shape[2], acc)), name="scaled")
        return batch_matmul(softmax(s), V, name="attention")
    return _kernel(f"attention_{_dtname(dtype)}", fn, Q=_T((Bt, N, D), dtype),
                   K=_T((Bt, M, D), dtype), V=_T((Bt, M, D), dtype))


# =========================================================================== numpy references


def _f64(a):
    a = np.asarray(a)
    return a.astype(np.float64) if a.dtype.kind == "f" or a.dtype == dt.to_numpy("bfloat16") else a


def _np_acc(a):
    """numpy value of ``a`` in the accumulation dtype, float64 for floats (a reference
    computed more precisely than the kernel)."""
    a = np.asarray(a)
    if a.dtype.kind in "iu":
        return a.astype(dt.to_numpy(accumulation_dtype(dt.canonical(a.dtype))))
    return a.astype(np.float64)


def _ref_binary(op):
    def ref(a, b=None):
        if b is None:  # scalar_rhs
            b = 2 if np.asarray(a).dtype.kind in "iu" else 0.5
        if np.asarray(a).dtype.kind in "iu":
            f = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                 "maximum": np.maximum, "minimum": np.minimum}[op]
            return f(a, np.asarray(b).astype(np.asarray(a).dtype))
        f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
             "maximum": np.maximum, "minimum": np.minimum}[op]
        return f(_f64(a), _f64(b))
    return ref


def _ref_relu(x):
    return np.maximum(_f64(x), 0) if np.asarray(x).dtype.kind not in "iu" else np.maximum(x, 0)


def _ref_leaky_relu(x):
    x = _f64(x)
    return np.where(x > 0, x, 0.01 * x)


def _ref_row_stats(x):
    return _ref_reduce("max", 1)(x), _ref_reduce("sum", 1)(x)


def _ref_gelu(x):
    import math
    x = _f64(x)
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + erf(x * _SQRT1_2))


def _ref_bias_add(x, bias):
    if np.asarray(x).dtype.kind in "iu":
        return x + bias[None, :, None, None]
    return _f64(x) + _f64(bias)[None, :, None, None]


def _ref_reduce(op, axis):
    def ref(x):
        f = getattr(np, op)      # np.sum, np.max, np.min
        v = _np_acc(x) if op == "sum" else _f64(x)
        return f(v, axis=axis)
    return ref


def _ref_softmax(axis):
    def ref(x):
        x = _f64(x)
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)
    return ref


def _ref_layernorm(eps):
    def ref(x, gamma, beta):
        x = _f64(x)
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * _f64(gamma) + _f64(beta)
    return ref


def _ref_matmul(a, b):
    return np.matmul(_np_acc(a), _np_acc(b))


def _ref_matmul_bias_relu(a, b, bias):
    return np.maximum(np.matmul(_np_acc(a), _np_acc(b)) + _np_acc(bias), 0)


def _ref_conv2d(stride, padding, dilation):
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation

    def ref(x, w):
        x, w = _np_acc(x), _np_acc(w)
        n, c, h, wd = x.shape
        f, _, kh, kw = w.shape
        xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw), dtype=x.dtype)
        xp[:, :, ph:ph + h, pw:pw + wd] = x
        oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        out = np.zeros((n, f, oh, ow), dtype=x.dtype)
        for a in range(kh):
            for b in range(kw):
                patch = xp[:, :, a * dh: a * dh + (oh - 1) * sh + 1: sh,
                           b * dw: b * dw + (ow - 1) * sw + 1: sw]
                out += np.einsum("nchw,fc->nfhw", patch, w[:, :, a, b])
        return out
    return ref


def _ref_reduce3d(op, axis, keepdims):
    def ref(x):
        f = getattr(np, op)      # np.sum, np.max, np.min
        v = _np_acc(x) if op == "sum" else _f64(x)
        return f(v, axis=axis, keepdims=keepdims)
    return ref


def _ref_conv2d_bias_relu(x, w, b):
    out = _ref_conv2d((2, 2), (1, 1), (1, 1))(x, w)
    return np.maximum(out + _np_acc(b)[None, :, None, None], 0)


def _ref_matmul_same_dtype(a, b):
    out = _ref_matmul(a, b)
    return out.astype(np.asarray(a).dtype) if out.dtype.kind in "iu" else out  # wraps


def _ref_mlp(x, w, b):
    return _ref_gelu(np.matmul(_np_acc(x), _np_acc(w)) + _np_acc(b))


def _ref_attention(q, k, v):
    q, k, v = _f64(q), _f64(k), _f64(v)
    s = np.matmul(q, np.transpose(k, (0, 2, 1))) / np.sqrt(q.shape[2])
    return np.matmul(_ref_softmax(-1)(s), v)


# =========================================================================== the registry


@dataclass(frozen=True)
class OpSpec:
    """One registered operator configuration.

    ``factory(dtype)`` returns the kernel; ``reference(*arrays)`` is its numpy
    semantics (float64 for float inputs, the kernel's integer dtype otherwise);
    ``shapes(dim)`` draws the input shapes, calling ``dim(lo, hi)`` for each free extent
    (so tests can pass a hypothesis ``draw`` and scripts a random generator);
    ``reference`` returns a tuple for a kernel with several outputs;
    ``reduction(shapes)`` is the number of terms combined into one output element (1
    for elementwise operators; tests scale their tolerance by it); ``dtypes`` lists the
    input dtypes the operator is meant for; ``kind`` is its operator class;
    ``value_range`` bounds integer inputs and ``positive`` asks for inputs bounded away
    from 0 (e.g. divisors); ``exclude`` lists (dtype, reason) pairs left out.
    """
    name: str
    factory: Callable[[str], Kernel]
    reference: Callable
    shapes: Callable
    dtypes: tuple = ("float32", "float64")
    kind: str = "elementwise"
    reduction: Callable = lambda shapes: 1
    value_range: int = 20
    away_from_zero: tuple = ()
    notes: str = ""

    def kernel(self, dtype: str = "float32") -> Kernel:
        """The (cached) kernel for ``dtype``."""
        return _cached_kernel(self.name, dt.canonical(dtype))

    def inputs(self, rng: np.random.Generator, shapes, dtype: str) -> list:
        """Random input arrays of ``shapes`` for ``dtype`` (standard normal floats,
        integers uniform in ``[-value_range, value_range]``; inputs listed in
        ``away_from_zero`` have magnitude in [0.5, 2])."""
        out = []
        nd = dt.to_numpy(dtype)
        for k, s in enumerate(shapes):
            if dt.is_int(dtype):
                a = rng.integers(-self.value_range, self.value_range + 1, size=s)
            elif k in self.away_from_zero:
                a = rng.uniform(0.5, 2.0, size=s) * rng.choice([-1.0, 1.0], size=s)
            else:
                a = rng.standard_normal(size=s)
            out.append(np.asarray(a).astype(nd))
        return out


@functools.lru_cache(maxsize=None)
def _cached_kernel(name: str, dtype: str) -> Kernel:
    return OPS[name].factory(dtype)


FLOATS = ("float32", "float64", "float16", "bfloat16")
ALL = FLOATS + ("int32", "int8")


def _mn(dim, lo=1, hi=300):
    return dim(lo, hi), dim(lo, hi)


def _reg(*specs) -> dict:
    return {s.name: _tag_reference(s) for s in specs}


def _tag_reference(spec: OpSpec) -> OpSpec:
    """``spec`` whose factory marks its kernels with ``numpy_reference`` (the spec's
    numpy semantics): ``polycomp run`` checks them against it instead of interpreting
    the IR (a 1024^3 matmul in the interpreter takes minutes)."""
    make = spec.factory

    def factory(dtype: str) -> Kernel:
        kernel = make(dtype)
        kernel.numpy_reference = spec.reference
        return kernel
    return replace(spec, factory=factory)


#: (operator, broadcast, dtypes) of the registered elementwise binary configurations
_BINARY_CONFIGS = (
    ("add", "none", None), ("add", "row", ("float32", "float64", "float16", "int32")),
    ("add", "col", ("float32", "float64", "bfloat16", "int8")),
    ("add", "scalar_rhs", ("float32", "float64", "int32")),
    ("sub", "none", ("float32", "float64", "int8")),
    ("mul", "none", None), ("mul", "col", ("float32", "float64")),
    ("div", "none", ("float32", "float64", "float16", "bfloat16")),
    ("div", "row", ("float32", "float64")),
    ("maximum", "none", None), ("maximum", "scalar_rhs", ("float32", "float64")),
    ("minimum", "none", ("float32", "float64", "int32")),
)


def _binary_specs():
    out = []
    for op, bc, dtypes in _BINARY_CONFIGS:
        def shapes(dim, bc=bc):
            n, m = _mn(dim)
            return {"none": [(n, m), (n, m)], "row": [(n, m), (m,)],
                    "col": [(n, m), (n, 1)], "scalar_rhs": [(n, m)]}[bc]
        name = op if bc == "none" else f"{op}_{bc}"
        out.append(OpSpec(name, functools.partial(binary_kernel, op, bc), _ref_binary(op),
                          shapes, dtypes or ALL, "broadcast" if bc != "none" else "elementwise",
                          value_range=10 if op == "mul" else 50,
                          away_from_zero=(1,) if op == "div" else ()))
    return out


def _conv_spec(name, stride, padding, dilation, notes=""):
    def shapes(dim):
        n, c, f = dim(1, 2), dim(1, 4), dim(1, 5)
        kh, kw = dim(1, 3), dim(1, 3)
        # the input must be large enough for one output position
        h = dim(max(1, dilation[0] * (kh - 1) + 1 - 2 * padding[0]), 13)
        w = dim(max(1, dilation[1] * (kw - 1) + 1 - 2 * padding[1]), 13)
        return [(n, c, h, w), (f, c, kh, kw)]
    return OpSpec(name, lambda dtype: conv2d_kernel(stride, padding, dilation, dtype),
                  _ref_conv2d(stride, padding, dilation), shapes,
                  ("float32", "float64", "float16", "int8"), "conv",
                  reduction=lambda s: s[1][1] * s[1][2] * s[1][3], value_range=8, notes=notes)


OPS: dict = _reg(
    *_binary_specs(),
    OpSpec("relu", relu_kernel, _ref_relu, lambda dim: [_mn(dim)], ALL),
    OpSpec("gelu", gelu_kernel, _ref_gelu, lambda dim: [_mn(dim)], FLOATS),
    OpSpec("leaky_relu", leaky_relu_kernel, _ref_leaky_relu, lambda dim: [_mn(dim)],
           ("float32", "float64", "float16")),
    OpSpec("row_stats", row_stats_kernel, _ref_row_stats, lambda dim: [_mn(dim)],
           ("float32", "float64", "int8"), "reduce", reduction=lambda s: s[0][1]),
    OpSpec("bias_add", bias_add_kernel, _ref_bias_add,
           lambda dim: (lambda n, c, h, w: [(n, c, h, w), (c,)])(dim(1, 3), dim(1, 9),
                                                                 dim(1, 17), dim(1, 19)),
           ALL, "broadcast"),
    OpSpec("transpose_021", functools.partial(transpose_kernel, (0, 2, 1)),
           lambda x: np.transpose(x, (0, 2, 1)),
           lambda dim: [(dim(1, 7), dim(1, 40), dim(1, 40))], ALL),
    OpSpec("transpose_201", functools.partial(transpose_kernel, (2, 0, 1)),
           lambda x: np.transpose(x, (2, 0, 1)),
           lambda dim: [(dim(1, 7), dim(1, 40), dim(1, 40))], ("float32", "float64")),
    OpSpec("reduce_sum_1", functools.partial(reduce_kernel, "sum", 1), _ref_reduce("sum", 1),
           lambda dim: [_mn(dim)], ALL, "reduce", reduction=lambda s: s[0][1]),
    OpSpec("reduce_sum_0", functools.partial(reduce_kernel, "sum", 0), _ref_reduce("sum", 0),
           lambda dim: [_mn(dim)], ("float32", "float64"), "reduce", reduction=lambda s: s[0][0]),
    OpSpec("reduce_sum_all", functools.partial(reduce_kernel, "sum", None),
           _ref_reduce("sum", None), lambda dim: [_mn(dim, 1, 120)], ("float32", "float64"),
           "reduce", reduction=lambda s: s[0][0] * s[0][1]),
    OpSpec("reduce_max_1", functools.partial(reduce_kernel, "max", 1), _ref_reduce("max", 1),
           lambda dim: [_mn(dim)], ALL, "reduce"),
    OpSpec("reduce_max_0", functools.partial(reduce_kernel, "max", 0), _ref_reduce("max", 0),
           lambda dim: [_mn(dim)], ("float32", "float64", "int32"), "reduce"),
    OpSpec("reduce_min_1", functools.partial(reduce_kernel, "min", 1), _ref_reduce("min", 1),
           lambda dim: [_mn(dim)], ("float32", "float64", "int8"), "reduce"),
    OpSpec("softmax", functools.partial(softmax_kernel, -1), _ref_softmax(-1),
           lambda dim: [_mn(dim)], FLOATS, "reduce", reduction=lambda s: s[0][1]),
    OpSpec("softmax_axis0", functools.partial(softmax_kernel, 0), _ref_softmax(0),
           lambda dim: [_mn(dim, 1, 120)], ("float32", "float64"), "reduce",
           reduction=lambda s: s[0][0]),
    OpSpec("layernorm", layernorm_kernel, _ref_layernorm(1e-5),
           lambda dim: (lambda n, d: [(n, d), (d,), (d,)])(dim(1, 200), dim(1, 200)),
           FLOATS, "reduce", reduction=lambda s: s[0][1]),
    OpSpec("matmul", matmul_kernel, _ref_matmul,
           lambda dim: (lambda n, k, m: [(n, k), (k, m)])(dim(1, 40), dim(1, 40), dim(1, 40)),
           ALL, "matmul", reduction=lambda s: s[0][1], value_range=8),
    OpSpec("batch_matmul", batch_matmul_kernel, _ref_matmul,
           lambda dim: (lambda b, n, k, m: [(b, n, k), (b, k, m)])(dim(1, 4), dim(1, 20),
                                                                  dim(1, 20), dim(1, 20)),
           ("float32", "float64", "float16", "int8"), "matmul", reduction=lambda s: s[0][2],
           value_range=8),
    OpSpec("matmul_bias_relu", matmul_bias_relu_kernel, _ref_matmul_bias_relu,
           lambda dim: (lambda n, k, m: [(n, k), (k, m), (m,)])(dim(1, 40), dim(1, 40),
                                                                 dim(1, 40)),
           ("float32", "float64", "bfloat16", "int8"), "matmul", reduction=lambda s: s[0][1],
           value_range=8),
    _conv_spec("conv2d", (1, 1), (0, 0), (1, 1)),
    _conv_spec("conv2d_s2_p1", (2, 2), (1, 1), (1, 1)),
    _conv_spec("conv2d_s21_p12_d2", (2, 1), (1, 2), (2, 1)),
    OpSpec("add_outer", outer_add_kernel, lambda a, b: _ref_binary("add")(a, b),
           lambda dim: (lambda n, m: [(n, 1), (1, m)])(dim(1, 300), dim(1, 300)),
           ("float32", "float64", "int8"), "broadcast"),
    OpSpec("reduce_sum_3d_02_keep", functools.partial(reduce3d_kernel, "sum", (0, 2), True),
           _ref_reduce3d("sum", (0, 2), True),
           lambda dim: [(dim(1, 20), dim(1, 30), dim(1, 20))], ("float32", "float64"),
           "reduce", reduction=lambda s: s[0][0] * s[0][2]),
    OpSpec("reduce_max_3d_1", functools.partial(reduce3d_kernel, "max", 1, False),
           _ref_reduce3d("max", 1, False),
           lambda dim: [(dim(1, 20), dim(1, 30), dim(1, 20))], ("float32", "float64", "int8"),
           "reduce"),
    OpSpec("softmax_3d_1", functools.partial(softmax3d_kernel, 1), _ref_softmax(1),
           lambda dim: [(dim(1, 9), dim(1, 40), dim(1, 20))], ("float32", "float64"),
           "reduce", reduction=lambda s: s[0][1]),
    OpSpec("layernorm_3d", layernorm3d_kernel, _ref_layernorm(1e-5),
           lambda dim: (lambda b, t, d: [(b, t, d), (d,), (d,)])(dim(1, 5), dim(1, 30),
                                                                dim(1, 60)),
           ("float32", "float64"), "reduce", reduction=lambda s: s[0][2]),
    OpSpec("matmul_same_dtype", matmul_same_dtype_kernel, _ref_matmul_same_dtype,
           lambda dim: (lambda n, k, m: [(n, k), (k, m)])(dim(1, 40), dim(1, 40), dim(1, 40)),
           ("float32", "float64", "float16", "bfloat16", "int8"), "matmul",
           reduction=lambda s: s[0][1], value_range=4),
    OpSpec("conv2d_bias_relu", conv2d_bias_relu_kernel, _ref_conv2d_bias_relu,
           lambda dim: (lambda n, c, f, kh, kw: [(n, c, dim(1, 13), dim(1, 13)),
                                                 (f, c, kh, kw), (f,)])(
               dim(1, 2), dim(1, 4), dim(1, 5), dim(1, 3), dim(1, 3)),
           ("float32", "float64", "float16"), "composite",
           reduction=lambda s: s[1][1] * s[1][2] * s[1][3]),
    OpSpec("mlp_gelu", mlp_kernel, _ref_mlp,
           lambda dim: (lambda n, d, m: [(n, d), (d, m), (m,)])(dim(1, 30), dim(1, 30),
                                                                dim(1, 30)),
           ("float32", "float64", "float16"), "composite", reduction=lambda s: s[0][1]),
    OpSpec("attention", attention_kernel, _ref_attention,
           lambda dim: (lambda b, n, m, d: [(b, n, d), (b, m, d), (b, m, d)])(
               dim(1, 3), dim(1, 20), dim(1, 20), dim(1, 16)),
           ("float32", "float64", "bfloat16"), "composite",
           reduction=lambda s: s[0][2] + s[1][1]),
)
"""Every registered operator configuration by name (see :class:`OpSpec`)."""
