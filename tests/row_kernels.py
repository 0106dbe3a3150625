"""Row-reduction kernels and their numpy references for the row-mapping tests
(tests/test_rowreduce_mapping.py): softmax, layernorm, row sum / max / min, two outputs,
a row value as an output, softmax and layernorm over 2-d and 3-d rows, a bias + gelu
row stage after a sum, in float32, float16 and bfloat16."""

import numpy as np

import polycomp as pc
from polycomp.frontend import ops

SYM = "sym"
KINDS = ("softmax", "layernorm", "sum", "max", "min", "two_outputs", "mean_out")


def _lam(n: int, f):
    """A function of ``n`` plain positional indices calling ``f(indices)`` (the DSL
    takes no ``*args``)."""
    return {1: lambda a: f((a,)), 2: lambda a, b: f((a, b)),
            3: lambda a, b, c: f((a, b, c)), 4: lambda a, b, c, d: f((a, b, c, d))}[n]


def kernel(kind: str, rows, width, dtype: str = "float32"):
    """The DSL kernel ``kind`` over ``X: (*rows, width)``; ``rows`` a tuple of extents
    (``SYM`` for a symbol), ``width`` an extent or ``SYM``."""
    names = "NBH"
    R = tuple(pc.sym(names[k]) if r == SYM else r for k, r in enumerate(rows))
    W = pc.sym("M") if width == SYM else width
    shape = R + (W,)
    r, n = len(R), len(shape)

    def red(name, fn, op):
        j = pc.reduce_axis(W, f"j_{name}")
        return pc.compute(R, _lam(r, lambda i: op(fn(i + (j,)), axis=j)), name=name)

    if kind == "layernorm":
        @pc.tensor_expr
        def layernorm(X: pc.Tensor[shape, dtype], g: pc.Tensor[(W,), dtype],
                      b: pc.Tensor[(W,), dtype]):
            return ops.layernorm(X, g, b)
        return layernorm
    if kind == "bias_gelu_sum":
        @pc.tensor_expr
        def bias_gelu_sum(X: pc.Tensor[shape, dtype], b: pc.Tensor[(W,), dtype]):
            y = pc.compute(shape, _lam(n, lambda i: X[i] + b[i[-1]]), name="y")
            s = red("S", lambda ij: y[ij], pc.sum)
            return ops.gelu(y), s
        return bias_gelu_sum

    @pc.tensor_expr
    def rows_kernel(X: pc.Tensor[shape, dtype]):
        if kind in ("sum", "max", "min"):
            return red("S", lambda ij: X[ij], getattr(pc, kind))
        if kind == "softmax":
            return ops.softmax(X)
        if kind == "two_outputs":
            Y = pc.compute(shape, _lam(n, lambda i: X[i] * 2.0 + 1.0), name="Y")
            return Y, red("S", lambda ij: X[ij], pc.sum)
        if kind == "mean_out":
            S = red("S", lambda ij: X[ij], pc.sum)
            mu = pc.compute(R, _lam(r, lambda i: S[i] * 0.5), name="mu")
            return mu, pc.compute(shape, _lam(n, lambda i: X[i] - mu[i[:-1]]), name="Y")
        raise AssertionError(kind)
    return rows_kernel


def _gelu(x):
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))


def reference(kind: str, args) -> tuple:
    x = args[0].astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if kind == "sum":
            return (x.sum(-1),)
        if kind == "max":
            return (x.max(-1),)
        if kind == "min":
            return (x.min(-1),)
        if kind == "softmax":
            e = np.exp(x - x.max(-1, keepdims=True))
            return (e / e.sum(-1, keepdims=True),)
        if kind == "layernorm":
            g, b = args[1].astype(np.float64), args[2].astype(np.float64)
            d = x - x.mean(-1, keepdims=True)
            return (d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5) * g + b,)
        if kind == "two_outputs":
            return (x * 2.0 + 1.0, x.sum(-1))
        if kind == "mean_out":
            mu = x.sum(-1) * 0.5
            return (mu, x - mu[..., None])
        if kind == "bias_gelu_sum":
            y = x + args[1].astype(np.float64)
            return (_gelu(y), y.sum(-1))
    raise AssertionError(kind)


def inputs(kind: str, shape: tuple, seed: int = 0, dtype: str = "float32",
           special: bool = False) -> list:
    """Random inputs; ``special``: rows of NaN, of -inf, one +inf, one NaN, zeros."""
    from polycomp import dtypes as dt
    rng = np.random.default_rng(seed)
    npd = dt.to_numpy(dtype)
    x = (2 * rng.standard_normal(shape)).astype(npd)
    if special:
        flat = x.reshape(-1, shape[-1])
        for r, fill in enumerate([np.nan, -np.inf, "inf1", "nan1", 0.0]):
            if r >= flat.shape[0]:
                break
            if fill == "inf1":
                flat[r, shape[-1] // 2] = np.inf
            elif fill == "nan1":
                flat[r, 0] = np.nan
            else:
                flat[r, :] = fill
    out = [x]
    if kind == "layernorm":
        out += [rng.standard_normal(shape[-1]).astype(npd) for _ in range(2)]
    if kind == "bias_gelu_sum":
        out += [rng.standard_normal(shape[-1]).astype(npd)]
    return out


def tolerance(dtype: str, width: int) -> float:
    return {"float32": 2e-5, "float64": 1e-10, "float16": 4e-3,
            "bfloat16": 3e-2}[dtype] * max(1.0, width ** 0.5)
