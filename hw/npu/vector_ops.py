"""Vector-unit instructions (pipe V) on UB tiles: semantics and cycle cost.

Operands are slots of UB buffers seen by their layout — ``ND`` a ``rows x CP`` tile
(rows padded to 32 bytes), ``COL`` one value per row (column 0 of a 32-byte row),
``ROW`` one row broadcast over the tile's rows — or scalars (a float, or a tiling
value such as the row length).  Arithmetic is in float32; the destination's type is
applied on the store (``Cast`` is a plain copy into a buffer of another type).
Reductions (``ReduceSum``/``ReduceMax``/``ReduceMin``) take the number of valid columns
and write a ``COL`` buffer.

Cost: ``ND`` destinations ``rows x ceil(row bytes / 256)`` repeats, ``COL`` ones
``ceil(rows x 32 / 256)``, reductions the repeats of their source tile, ``Transpose``
(a ``rows x CP`` tile to or from a ``CP x TRP`` staging tile, for axes that are
transposed between GM and the tile) the bytes of its source over 256; ``Duplicate``
fills a tile with a scalar (the identity of a carried reduction); plus the issue
latency; ``Erf`` (a polynomial on real hardware) counts 4 passes.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from polycomp.errors import PolycompInternalError
from polycomp.hw.npu.program import Ix, Slot, VecOp

_erf = np.vectorize(math.erf, otypes=[np.float64])
Fn = Callable[..., Any]
UNARY: dict[str, Fn] = {
    "Exp": np.exp, "Ln": np.log, "Sqrt": np.sqrt, "Rsqrt": lambda x: 1 / np.sqrt(x),
    "Abs": np.abs, "Tanh": np.tanh, "Erf": lambda x: _erf(x), "Cast": lambda x: x,
    "Duplicate": lambda x: x}
BINARY: dict[str, Fn] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
          "Max": np.maximum, "Min": np.minimum,
          "CompareGT": np.greater, "CompareGE": np.greater_equal, "CompareLT": np.less,
          "CompareLE": np.less_equal, "CompareEQ": np.equal, "CompareNE": np.not_equal}
REDUCE: dict[str, Fn] = {"ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min}
PASSES = {"Erf": 4}


def _view(arr: np.ndarray, layout: str, rows: int) -> np.ndarray:
    if layout == "COL":
        return arr[:rows, :1]
    if layout == "ROW":
        return arr[:1]
    return arr[:rows]


def _operand(sim, x, env: dict, rows: int, what: str, pipe: str):
    if isinstance(x, Slot):
        arr = sim.access(pipe, x, env, False, what)
        return _view(arr, x.buf.layout, rows).astype(np.float32)
    if isinstance(x, Ix):
        return np.float32(x.eval(env))
    return np.float32(x)


def _transpose(sim, s: VecOp, env: dict, what: str) -> bool:
    """``dst = src^T`` on whole tiles (a (rows x CP) tile <-> a (CP x TRP) staging
    tile); the part of ``dst`` beyond ``src`` is zero."""
    src = sim.access(s.pipe, s.srcs[0], env, False, what).T
    dst = sim.access(s.pipe, s.dst, env, True, what)
    r, c = min(src.shape[0], dst.shape[0]), min(src.shape[1], dst.shape[1])
    dst[...] = 0
    dst[:r, :c] = src[:r, :c]
    return True


def vec_execute(sim, s: VecOp, env: dict) -> bool:
    rows = s.rows.eval(env)
    what = f"{s.op} -> {s.dst.buf.name}"
    if s.op == "Transpose":
        return _transpose(sim, s, env, what)
    if s.op in REDUCE:
        src = _operand(sim, s.srcs[0], env, rows, what, s.pipe)
        n = s.srcs[1].eval(env) if isinstance(s.srcs[1], Ix) else int(s.srcs[1])
        val = REDUCE[s.op](src[:, :n], axis=1, keepdims=True)
    else:
        ops = [_operand(sim, x, env, rows, what, s.pipe) for x in s.srcs]
        with np.errstate(all="ignore"):
            if s.op in UNARY:
                val = UNARY[s.op](ops[0])
            elif s.op in BINARY:
                val = BINARY[s.op](ops[0], ops[1])
            elif s.op == "Select":
                val = np.where(ops[0] != 0, ops[1], ops[2])
            else:
                raise PolycompInternalError(f"NPU simulator: unknown vector op {s.op}")
    dst = sim.access(s.pipe, s.dst, env, True, what)
    view = _view(dst, s.dst.buf.layout, rows)
    view[...] = np.broadcast_to(np.asarray(val, np.float32), view.shape).astype(dst.dtype)
    return True


def vec_cycles(sim, s: VecOp, env: dict) -> int:
    rows = s.rows.eval(env)
    per = sim.p.vector_bytes_per_cycle
    b = s.dst.buf
    if s.op in REDUCE and isinstance(s.srcs[0], Slot):
        b = s.srcs[0].buf
    r, c = b.shape(env)
    if s.op == "Transpose":   # the whole source tile, 256 B per repeat
        src = s.srcs[0].buf
        return sim.p.vector_latency + -(-src.size(env) // per)
    if b.layout == "COL":
        repeats = -(-rows * 32 // per)
    else:
        repeats = (1 if b.layout == "ROW" else rows) * -(-c * b.itemsize // per)
    return sim.p.vector_latency + repeats * PASSES.get(s.op, 1)
