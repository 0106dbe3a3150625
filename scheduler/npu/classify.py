"""Which stages the cube takes: plain (batch) matmul contractions, with the output
cast or a vector epilogue after them (used by the ``npu-map`` pass, :mod:`.map`).
"""
from __future__ import annotations

from polycomp import ir
from polycomp.scheduler.common.contraction import Contraction, match_contraction

#: the cube's operand types on the A2 generation (``Mmad``'s type combinations for
#: ``__NPU_ARCH__`` 2201: int8 x int8 -> int32, half x half, bfloat16 x bfloat16 and
#: float x float -> float; ``impl/basic_api/dav_c220/kernel_operator_mm_impl.h``)
CUBE_IN = ("float16", "float32", "bfloat16", "int8")


def is_matmul(c: Contraction) -> bool:
    """``out[b?, i, j] = sum_k a[b?, i, k] * b[b?, k, j]`` with plain iterators."""
    if len(c.reduce_dims) != 1 or len(c.out_dims) not in (2, 3) or c.a.guard or c.b.guard:
        return False
    *bd, i, j = c.out_dims
    k = c.reduce_dims[0]
    return list(c.a.load.indices) == [*bd, i, k] and list(c.b.load.indices) == [*bd, k, j] \
        and c.a.load.dtype in CUBE_IN and c.a.load.dtype == c.b.load.dtype


def is_cast_of(s, producer) -> bool:
    """``s`` is ``cast(producer[iters])`` (the output cast of a matmul): the cube path
    casts on the way out of L0C."""
    b = s.body
    return not s.is_reduction and isinstance(b, ir.Cast) and isinstance(b.value, ir.Load) \
        and b.value.buffer.name == producer.name and list(b.value.indices) == list(s.iters)


def plain_matmul(stages) -> Contraction | None:
    if 1 <= len(stages) <= 2 and stages[0].is_reduction and \
            (len(stages) == 1 or is_cast_of(stages[1], stages[0])):
        c = match_contraction(stages[0])
        if isinstance(c, Contraction) and is_matmul(c):
            return c
    return None


def dequant_scale(stages) -> float | None:
    """The constant ``s`` of an int32 matmul stage followed by exactly one stage
    ``out[i, j] = cast(cast(C[i, j], float32) * s, float16)`` (or ``s * ...``): the
    per-tensor dequantisation Fixpipe applies on its way out (``DEQF16``); None for
    anything else."""
    if len(stages) != 2 or stages[0].output.dtype != "int32" or \
            stages[1].output.dtype != "float16" or stages[1].is_reduction:
        return None
    e, s = stages[1].body, stages[1]
    if not (isinstance(e, ir.Cast) and e.dtype == "float16" and isinstance(e.value, ir.Binary)
            and e.value.op == "*"):
        return None
    a, b = e.value.a, e.value.b
    if isinstance(a, ir.FloatImm):
        a, b = b, a
    if not (isinstance(b, ir.FloatImm) and isinstance(a, ir.Cast) and a.dtype == "float32"
            and isinstance(a.value, ir.Load) and a.value.buffer.name == stages[0].name):
        return None
    idx = a.value.indices
    iters = [v.name for v in s.iters]
    if len(idx) != len(iters) or any(not isinstance(i, ir.Var) or i.name != n
                                     for i, n in zip(idx, iters)):
        return None
    return float(b.value)


def epilogue_matmul(stages) -> Contraction | None:
    if len(stages) > 1 and stages[0].is_reduction:
        c = match_contraction(stages[0])
        if isinstance(c, Contraction) and is_matmul(c) and len(c.out_dims) == 2:
            return c
    return None
