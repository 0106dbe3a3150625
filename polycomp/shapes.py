"""Symbolic shapes at run time: evaluating extents and inferring parameters from arrays."""
from __future__ import annotations

import numpy as np

from polycomp import ir
from polycomp.errors import (
    ArgumentError,
    ResourceLimitError,
    ShapeMismatchError,
    UnknownSymbolError,
    user_location,
)

_COMPARE = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
            "&&": lambda a, b: bool(a) and bool(b), "||": lambda a, b: bool(a) or bool(b)}


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
    if isinstance(e, ir.Select):   # a piecewise extent (isl's ``m == 1 ? 1 : ...``)
        return eval_int(e.t if eval_int(e.cond, params) else e.f, params)
    if isinstance(e, ir.Binary):
        a, b = eval_int(e.a, params), eval_int(e.b, params)
        if e.op in _COMPARE:
            return int(_COMPARE[e.op](a, b))
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
    out = checked_size_keywords(params, given or {})
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


#: Largest number of bytes one buffer may have: its byte offsets must fit int64 index
#: arithmetic with room for the generated code's products.
MAX_BUFFER_BYTES = 1 << 62


def checked_size_keywords(params: tuple, given: dict) -> dict:
    """``given`` (the size keywords of a call) as ``{name: int}``: every key names a
    symbolic size of the kernel and every value is an integer (``bool`` is not)."""
    names = [p.name for p in params]
    out = {}
    for k, v in given.items():
        if k not in names:
            have = ", ".join(names) if names else "none"
            raise ArgumentError(f"unknown size keyword {k}={v!r}: the kernel's symbolic sizes "
                                f"are {have}", user_location())
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise ArgumentError(f"size {k} must be an integer, got {v!r} "
                                f"({type(v).__name__})", user_location())
        out[k] = int(v)
    return out


def buffer_bytes(buf, values: dict) -> int:
    """Bytes of ``buf`` (multi-dimensional shape) for these sizes."""
    from polycomp import dtypes as dt
    n = dt.itemsize(buf.dtype)
    for d in buf.shape:
        n *= max(eval_int(d, values), 0)
    return n


#: outputs up to this size are not checked against the machine's memory (every machine
#: that runs a kernel has that much)
SMALL_OUTPUT_BYTES = 1 << 24


def _physical_memory() -> int:
    import os
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return MAX_BUFFER_BYTES


def check_buffers_fit(func, values: dict) -> None:
    """Every argument buffer of ``func`` has a size that int64 index arithmetic can
    address, and the outputs polycomp allocates fit this machine's memory."""
    from polycomp.lowering.printer import expr_str

    def shape(buf) -> str:     # for the messages only (printing costs per call)
        return "(" + ", ".join(expr_str(d) for d in buf.shape) + ")"
    for buf in tuple(func.inputs) + tuple(func.outputs):
        nbytes = buffer_bytes(buf, values)
        if nbytes > MAX_BUFFER_BYTES:
            raise ArgumentError(f"{buf.name!r} of shape {shape(buf)} would have {nbytes} bytes "
                                f"for these sizes: more than a kernel can index", user_location())
        # the machine's memory is asked only for outputs that could exceed it
        if nbytes > SMALL_OUTPUT_BYTES and buf in func.outputs:
            mem = _physical_memory()
            if nbytes > mem:
                raise ResourceLimitError(f"output {buf.name!r} of shape {shape(buf)} needs "
                                         f"{nbytes} bytes, more than this machine's memory "
                                         f"({mem})", user_location())


def checked_outputs(func, out, shapes: list, dtypes: list, inputs: list) -> tuple[list, list]:
    """Validate ``out=`` of a call and return ``(output arrays, input arrays)``.

    ``out`` is None (the outputs are allocated), one array (a kernel with one output) or
    a sequence with one writable, C-contiguous array of the right shape and dtype per
    output; outputs may not overlap each other.  An input that shares memory with an
    output is copied first, so the kernel reads the caller's values, as numpy's ufuncs
    do with ``out=``."""
    n = len(func.outputs)
    if out is None:
        return [np.empty(s, dtype=d) for s, d in zip(shapes, dtypes)], inputs
    if isinstance(out, np.ndarray):
        out = [out]
    if not isinstance(out, (list, tuple)):
        raise ArgumentError(f"out= must be a list of {n} array(s), got {type(out).__name__}",
                            user_location())
    if len(out) != n:
        raise ArgumentError(f"out= must hold {n} array(s), one per output, got {len(out)}",
                            user_location())
    for k, (o, shape, dtype) in enumerate(zip(out, shapes, dtypes)):
        if not isinstance(o, np.ndarray):
            raise ArgumentError(f"out[{k}] must be a numpy array, got {type(o).__name__}",
                                user_location())
        if o.shape != shape or o.dtype != dtype or not o.flags.c_contiguous:
            raise ShapeMismatchError(f"out[{k}] must be a C-contiguous {dtype} array "
                                     f"of shape {shape}", user_location())
        if not o.flags.writeable:
            raise ArgumentError(f"out[{k}] is read-only", user_location())
        for j in range(k):
            if np.shares_memory(o, out[j]):
                raise ArgumentError(f"out[{k}] and out[{j}] overlap", user_location())
    inputs = [np.array(a, copy=True) if any(np.shares_memory(a, o) for o in out) else a
              for a in inputs]
    return list(out), inputs
