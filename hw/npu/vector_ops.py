"""Vector-unit instructions (pipe V) on UB tiles: semantics and cycle cost.

A tile is ``rows x cols`` elements, each row padded to 32 bytes; one instruction over
``rows`` rows costs ``rows * ceil(row bytes / 256)`` repeats of one cycle plus the
issue latency.  Row reductions (``ReduceSum``/``ReduceMax``) write column 0 of their
destination."""
from __future__ import annotations

import numpy as np

from polycomp.errors import PolycompInternalError
from polycomp.hw.npu.program import Slot, VecOp

UNARY = {"Exp": np.exp, "Relu": lambda x: np.maximum(x, 0), "Abs": np.abs,
         "Sqrt": np.sqrt, "Tanh": np.tanh, "Copy": lambda x: x}
BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
          "Max": np.maximum, "Min": np.minimum}
SCALAR = {"Adds": np.add, "Muls": np.multiply, "Maxs": np.maximum}
REDUCE = {"ReduceSum": np.sum, "ReduceMax": np.max}
BROADCAST = {"SubRow": np.subtract, "DivRow": np.divide, "MulRow": np.multiply}


def vec_execute(sim, s: VecOp, env: dict) -> bool:
    rows = s.rows.eval(env)
    what = f"{s.op} -> {s.dst.buf.name}"
    srcs = [sim.access(s.pipe, x, env, False, what)[:rows] if isinstance(x, Slot) else x
            for x in s.srcs]
    dst = sim.access(s.pipe, s.dst, env, True, what)
    valid = s.dst.buf.cols
    with np.errstate(all="ignore"):
        if s.op in UNARY:
            dst[:rows] = UNARY[s.op](srcs[0].astype(np.float32))
        elif s.op in BINARY:
            dst[:rows] = BINARY[s.op](srcs[0], srcs[1])
        elif s.op in SCALAR:
            dst[:rows] = SCALAR[s.op](srcs[0], srcs[1])
        elif s.op in REDUCE:
            n = int(srcs[1])   # valid columns of the source row
            dst[:rows, 0] = REDUCE[s.op](srcs[0][:, :n].astype(np.float32), axis=1)
        elif s.op in BROADCAST:
            dst[:rows] = BROADCAST[s.op](srcs[0], srcs[1][:, :1])
        else:
            raise PolycompInternalError(f"unknown vector op {s.op} ({valid})")
    return True


def vec_cycles(sim, s: VecOp, env: dict) -> int:
    src = next((x.buf for x in s.srcs if isinstance(x, Slot)), s.dst.buf)
    row_bytes = src.cols * src.itemsize
    repeats = s.rows.eval(env) * -(-row_bytes // sim.p.vector_bytes_per_cycle)
    return sim.p.vector_latency + repeats
