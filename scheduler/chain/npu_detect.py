"""Chain detection for the NPU targets: the chains the cube takes.

The cube multiplies float16 (or float32) operands into float32 accumulators, so an NPU
chain is the chain of :mod:`.detect` with those dtypes::

    T[b, m, l] = sum_k X[b, m, k] * Y[b, k, l]     X, Y float16 (widened) or float32
    S[b, m, l] = middle(T)                         optional, float32 (as detect.py)
    P[b, m, l] = cast(S, dtype of Z)               only when Z is float16: the cube's
                                                   input dtype (FlashAttention's P)
    O[b, m, n] = sum_l P[b, m, l] * Z[b, l, n]     float32 accumulation

``X, Y, Z`` have one dtype; ``T``, the middle stages and ``O`` are float32; the
float32 chain (no cast stage) is the chain :mod:`.detect` accepts.  Everything else is
checked as :mod:`.detect` checks it (and by its helpers): the access patterns of both
products, flow dependences from each stage to the next, intermediates read only by the
next stage and no kernel output, equal batch extents.  ``Y`` stored ``[.., l, k]`` is
not taken (the fused NPU program loads ``Y`` tiles as ``(k, l)``).

CPU and CUDA keep :func:`.detect.detect_chains` (float32 only); only the NPU backend
calls :func:`detect_npu_chain`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from polycomp import ir
from polycomp.scheduler.chain import detect as d
from polycomp.scheduler.chain.detect import ChainMatch

__all__ = ["NpuChain", "detect_npu_chain"]

_CUBE = ("float16", "float32")


@dataclass(frozen=True, eq=False)
class NpuChain:
    """A chain for the NPU: the :class:`ChainMatch` (its ``stages``/``statements``
    include the cast stage), the cube's operand dtype and the cast stage (None for a
    float32 chain)."""
    match: ChainMatch
    dtype: str
    cast_stage: Any

    @property
    def p(self) -> ir.Buffer:
        """The second product's left operand (``P``, or the last middle array)."""
        return self.cast_stage.output.buffer if self.cast_stage is not None else \
            (self.match.softmax[3].output.buffer if self.match.softmax else
             (self.match.elementwise[-1].out if self.match.elementwise else self.match.t))


def _product(stage) -> d._Contr | str:
    """``out[.., m, c] = sum_r a[.., m, r] * b[.., r, c]``, ``a`` and ``b`` of one cube
    dtype (float16 widened to float32, or float32), accumulated in float32."""
    got = d._single_axis(stage, "the cube accumulates in float32")
    if isinstance(got, str):
        return got
    c, bs, m, n, r = got
    for fa, fb in ((c.a, c.b), (c.b, c.a)):
        if fa.guard is not None or fb.guard is not None:
            continue
        if d._exact(fa.load, *bs, m, r) and d._exact(fb.load, *bs, r, n):
            ta, tb = fa.load.buffer.dtype, fb.load.buffer.dtype
            if ta != tb or ta not in _CUBE:
                return f"operands are {ta} and {tb}; the cube takes two float16 or two " \
                       f"float32 operands"
            return d._Contr(stage, fa.load.buffer, fb.load.buffer, stage.output.buffer,
                            len(bs))
    return "operands are not A[.., m, k] and B[.., k, n]"


def _cast_of(stage, prev: ir.Buffer, nb: int) -> bool:
    """``stage`` is ``P[it] = cast(prev[it], float16)``."""
    body = stage.body
    return (stage.reduce_op is None and stage.output.dtype == "float16"
            and len(stage.iters) == nb + 2 and isinstance(body, ir.Cast)
            and isinstance(body.value, ir.Load) and body.value.buffer is prev
            and d._exact(body.value, *stage.iters))


@dataclass
class _Middle:
    """The stages walked between the products."""
    prev: ir.Buffer
    j: int
    chain: list
    elementwise: list
    softmax: tuple = ()
    cast: Any = None


def _walk_middle(stages, mid: _Middle, nb: int, outs: set) -> str | None:
    """Advance ``mid`` over the elementwise stages, the softmax and the cast of ``P``;
    a reason when the chain breaks."""
    while mid.j < len(stages):
        prev, j = mid.prev, mid.j
        if id(prev) in outs:
            return f"the intermediate {prev.name} is a kernel output"
        readers = d._readers(stages, prev)
        sm = d._softmax(stages, j, prev, nb) if not mid.softmax else None
        if sm is not None:
            if not d._softmax_private(stages, sm, readers, outs):
                return "the softmax's arrays are read outside the chain"
            mid.softmax = sm
            mid.chain += list(sm)
            mid.prev, mid.j = sm[3].output.buffer, j + 4
            continue
        if readers != [stages[j]]:
            return f"{prev.name} is read by {len(readers)} stages, not just the next one"
        if _cast_of(stages[j], prev, nb):
            mid.cast = stages[j]
            mid.chain.append(stages[j])
            mid.prev, mid.j = stages[j].output.buffer, j + 1
            return None
        ew = None if mid.softmax else d._elementwise(stages[j], prev, nb)
        if ew is None:
            return None
        mid.elementwise.append(ew)
        mid.chain.append(stages[j])
        mid.prev, mid.j = ew.out, j + 1
    return None


def _match_from(model, stages, i: int) -> NpuChain | str:
    c1 = _product(stages[i])
    if isinstance(c1, str):
        return c1
    outs = {id(t.buffer) for t in model.graph.outputs}
    nb = c1.nb
    mid = _Middle(c1.out, i + 1, [stages[i]], [])
    why = _walk_middle(stages, mid, nb, outs)
    if why is not None:
        return why
    prev, j, chain, cast = mid.prev, mid.j, mid.chain, mid.cast
    if j >= len(stages):
        return "no second contraction follows"
    c2 = d._second_product(stages, j, prev, nb, outs, _product)
    if isinstance(c2, str):
        return c2
    if c2.b.dtype != c1.a.dtype:
        return f"the operands are {c1.a.dtype} and {c2.b.dtype}; one cube dtype is needed"
    if (cast is None) != (c1.a.dtype == "float32"):
        return ("a float16 chain needs P = cast(S, float16) before the second product"
                if cast is None else "a float32 chain casts its intermediate")
    chain.append(stages[j])
    why = d._no_flow(model, chain)
    if why is not None:
        return why
    if not d._batch_extents_equal(model, c1, c2):
        return "the batch extents differ"
    names = tuple(s.name for s in model.statements if any(s.stage is c for c in chain))
    m = ChainMatch(chain[0], stages[j], c1.a, c1.b, c2.b, c2.out, c1.out,
                   tuple(mid.elementwise), mid.softmax, nb, tuple(chain), names, False)
    return NpuChain(m, c1.a.dtype, cast)


def detect_npu_chain(model) -> NpuChain | str:
    """The model's chain when the model *is* one NPU chain (every statement belongs to
    it), else why not."""
    stages = d._stages(model)
    reasons = []
    for i in range(len(stages)):
        m = _match_from(model, stages, i)
        if isinstance(m, NpuChain):
            if set(m.match.statements) != {s.name for s in model.statements}:
                others = sorted({s.name for s in model.statements} - set(m.match.statements))
                return f"statements outside the chain: {', '.join(others)}"
            return m
        if not isinstance(d._contraction(stages[i], allow_transposed=True), str) or \
                not isinstance(_product(stages[i]), str):
            reasons.append(f"{stages[i].name}: {m}")
    return "; ".join(reasons) if reasons else "no two contractions in a chain"
