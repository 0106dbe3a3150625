"""Symbolic shapes at run time: evaluating extents and inferring parameters from arrays."""
from __future__ import annotations

import numpy as np

from polycomp import ir
from polycomp.errors import ShapeMismatchError, UnknownSymbolError, user_location


def eval_int(e: ir.Expr, params: dict) -> int:
    """Evaluate an integer IR expression given ``{param name: value}``."""
    if isinstance(e, int):
        return e
    if isinstance(e, ir.IntImm):
        return e.value
    if isinstance(e, ir.Var):
        if e.name not in params:
            raise UnknownSymbolError(f"no value given for symbolic dimension {e.name!r}",
                                     user_location())
        return int(params[e.name])
    if isinstance(e, ir.Unary) and e.op == "neg":
        return -eval_int(e.a, params)
    if isinstance(e, ir.Binary):
        a, b = eval_int(e.a, params), eval_int(e.b, params)
        return {"+": a + b, "-": a - b, "*": a * b, "//": a // b if b else 0,
                "%": a % b if b else 0, "min": min(a, b), "max": max(a, b)}[e.op]
    raise ShapeMismatchError(f"cannot evaluate extent {e}", user_location())


def caller_arrays(func) -> tuple:
    """The buffers a caller of ``func`` passes, in order: its inputs, then the outputs
    named in ``func.inout`` (in-out arrays: the kernel starts from the contents
    the caller gives, e.g. a C kernel that updates ``C[i][j] += ...``)."""
    inout = func.inout
    return tuple(func.inputs) + tuple(b for b in func.outputs if b.name in inout)


def infer_params(params: tuple, args: tuple, arrays: list, given: dict | None = None,
                 outputs: tuple = ()) -> dict:
    """Bind symbolic dimensions from the shapes of the input arrays.

    A dimension that is a bare symbol binds it; every other dimension is checked once
    all symbols are known.  Symbols that appear in no input must be given explicitly.
    Every extent of the arguments and of the ``outputs`` buffers must be >= 1 (the
    kernel's context assumes it; e.g. a convolution's output extent
    ``(H - KH) // s + 1`` is 0 or negative when the filter is larger than the input).
    """
    from polycomp.lowering.printer import expr_str
    out = dict(given or {})
    for buf, arr in zip(args, arrays):
        if arr.ndim != len(buf.shape):
            raise ShapeMismatchError(f"argument {buf.name!r} must have {len(buf.shape)} "
                                     f"dimension(s), got an array of shape {arr.shape}",
                                     user_location())
        for d, n in zip(buf.shape, arr.shape):
            if isinstance(d, ir.Var) and d.is_param:
                if d.name in out and out[d.name] != n:
                    raise ShapeMismatchError(
                        f"symbol {d.name} is {out[d.name]} from another argument but "
                        f"{buf.name!r} has extent {n} there (shape {arr.shape})", user_location())
                out[d.name] = int(n)
    missing = [p.name for p in params if p.name not in out]
    if missing:
        raise UnknownSymbolError(f"cannot infer symbolic dimension(s) {', '.join(missing)} "
                                 f"from the input shapes; pass them as keyword arguments",
                                 user_location())
    for buf, arr in zip(args, arrays):
        want = tuple(eval_int(d, out) for d in buf.shape)
        if tuple(arr.shape) != want:
            raise ShapeMismatchError(
                f"argument {buf.name!r} must have shape "
                f"({', '.join(expr_str(d) for d in buf.shape)}) = {want}, got {arr.shape}",
                user_location())
    for p in params:
        if out[p.name] < 1:
            raise ShapeMismatchError(f"symbolic dimension {p.name} must be >= 1, got {out[p.name]}",
                                     user_location())
    for buf in tuple(outputs):
        for d in buf.shape:
            if not isinstance(d, ir.IntImm) and eval_int(d, out) < 1:
                vals = ", ".join(f"{p.name}={out[p.name]}" for p in params)
                raise ShapeMismatchError(
                    f"extent {expr_str(d)} of {buf.name!r} is {eval_int(d, out)} for {vals}; "
                    f"the kernel needs every extent >= 1", user_location())
    return out


def checked_arguments(func, inputs, params: dict, copy: bool = False):
    """Validate a call of ``func``: the number and dtypes of the caller's arrays (inputs,
    then initial contents of in-out outputs) and the symbolic sizes.  Returns
    ``(expected buffers, arrays, parameter values)``; ``copy`` makes C-contiguous copies."""
    from polycomp import dtypes as dt
    from polycomp.errors import DTypeError, user_location
    expected = caller_arrays(func)
    if len(inputs) != len(expected):
        raise ShapeMismatchError(f"{func.name} takes {len(expected)} input array(s), got "
                                 f"{len(inputs)}", user_location())
    arrays = []
    for b, a in zip(expected, inputs):
        a = np.asarray(a)
        if a.dtype != dt.to_numpy(b.dtype):
            raise DTypeError(f"argument {b.name!r} must be {b.dtype}, got {a.dtype}",
                             user_location())
        arrays.append(np.array(a, order="C", copy=True) if copy else a)
    values = infer_params(func.params, expected, arrays, params, outputs=func.outputs)
    return expected, arrays, values
