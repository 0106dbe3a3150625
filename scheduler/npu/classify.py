"""Which stages the cube takes: plain (batch) matmul contractions, with the output
cast or a vector epilogue after them (used by the ``npu-map`` pass, :mod:`.map`).
"""
from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class Dequant:
    """The one stage after an int32 matmul ``C`` that Fixpipe can apply on its way out
    of L0C: ``out[i, j] = cast(cast(C[i, j], float32) * s, float16)`` (or ``s * ...``)
    with ``s`` a constant (``value``: the per-tensor ``DEQF16``) or ``scale[j]``, a 1-d
    float32 input read at the column (``tensor``: the per-channel ``VDEQF16``); or, with
    ``out_dtype`` int8, the requantisation ``cast(min(max(cast(C[i, j], float32) * s,
    -128.0), 127.0), int8)`` (either nesting of the clamp; ``REQ8`` / ``VREQ8``)."""
    value: float | None = None
    tensor: str | None = None
    out_dtype: str = "float16"


def fixpipe_exact(v: float) -> bool:
    """``v`` is what Fixpipe multiplies by when given ``v``: a normal float32 with at
    most 10 mantissa bits (the hardware reads bits [31:13], 1 sign, 8 exponent and 10
    mantissa bits; asc-devkit docs, "随路量化"; inf, NaN and subnormals are not allowed)."""
    import struct
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    exp = (bits >> 23) & 0xFF
    return struct.unpack("<f", struct.pack("<f", v))[0] == v and 0 < exp < 255 and \
        not bits & 0x1FFF


def requant_exact(v: float) -> bool:
    """A constant scale with which Fixpipe's ``REQ8`` computes the DSL's
    ``cast(min(max(C * v, -128.0), 127.0), int8)`` bit for bit: Fixpipe reads it
    exactly (:func:`fixpipe_exact`) and it is an integer, so every product in the int8
    range is an integer and rounding it to nearest (the hardware) or toward zero (the
    DSL's cast) agree; products past the range saturate both ways."""
    return fixpipe_exact(v) and float(v).is_integer()


def _clamped(e) -> ir.Expr | None:
    """``x`` of ``min(max(x, -128.0), 127.0)`` or ``max(min(x, 127.0), -128.0)`` (either
    argument order); None otherwise."""
    def part(n, op: str, bound: float):
        if isinstance(n, ir.Binary) and n.op == op:
            for x, c in ((n.a, n.b), (n.b, n.a)):
                if isinstance(c, ir.FloatImm) and float(c.value) == bound:
                    return x
        return None
    for outer, ob, inner, ib in (("min", 127.0, "max", -128.0), ("max", -128.0, "min", 127.0)):
        x = part(e, outer, ob)
        x = part(x, inner, ib) if x is not None else None
        if x is not None:
            return x
    return None


def dequant(stages) -> Dequant | None:
    """The :class:`Dequant` of an int32 matmul stage followed by exactly one stage
    ``out[i, j] = cast(cast(C[i, j], float32) * s, float16)`` or its int8
    requantisation; None for anything else (a per-row ``scale[i]``, a bias, another
    output type: a vector epilogue)."""
    if len(stages) != 2 or stages[0].output.dtype != "int32" or \
            stages[1].output.dtype not in ("float16", "int8") or stages[1].is_reduction:
        return None
    e, s = stages[1].body, stages[1]
    out = s.output.dtype
    if not (isinstance(e, ir.Cast) and e.dtype == out):
        return None
    prod = e.value if out == "float16" else _clamped(e.value)
    if not (isinstance(prod, ir.Binary) and prod.op == "*"):
        return None
    a, b = prod.a, prod.b
    if isinstance(a, (ir.FloatImm, ir.Load)) and not _is_acc(a, stages[0].name):
        a, b = b, a
    if not _is_acc(a, stages[0].name):
        return None
    assert isinstance(a, ir.Cast) and isinstance(a.value, ir.Load)
    idx = a.value.indices
    iters = [v.name for v in s.iters]
    if len(idx) != len(iters) or len(iters) != 2 or \
            any(not isinstance(i, ir.Var) or i.name != n for i, n in zip(idx, iters)):
        return None
    if isinstance(b, ir.FloatImm):
        return Dequant(value=float(b.value), out_dtype=out)
    if isinstance(b, ir.Load) and b.dtype == "float32" and len(b.indices) == 1 and \
            isinstance(b.indices[0], ir.Var) and b.indices[0].name == iters[1] and \
            b.buffer.name in {t.name for t in _inputs(stages)}:
        return Dequant(tensor=b.buffer.name, out_dtype=out)
    return None


def _is_acc(e, name: str) -> bool:
    return isinstance(e, ir.Cast) and e.dtype == "float32" and \
        isinstance(e.value, ir.Load) and e.value.buffer.name == name


def _inputs(stages) -> list:
    """The buffers the stages read that no stage writes."""
    written = {s.name for s in stages}
    out: list = []

    def visit(n) -> None:
        if isinstance(n, ir.Load) and n.buffer.name not in written:
            out.append(n.buffer)
    for s in stages:
        ir.walk(s.body, visit)
    return out


def epilogue_matmul(stages) -> Contraction | None:
    if len(stages) > 1 and stages[0].is_reduction:
        c = match_contraction(stages[0])
        if isinstance(c, Contraction) and is_matmul(c) and len(c.out_dims) == 2:
            return c
    return None
