"""Conv-chain detection: two 2-d convolutions where the second consumes the first's output.

A *conv chain* is, as the op library's :func:`~polycomp.frontend.ops.conv2d_nchw` writes
it (NCHW activations, ``W[f, c, kh, kw]`` weights, stride 1, dilation 1),

    T[n, f, y, x]  = sum_{c, kh, kw} Xpad1[n, c, y + kh - p1h, x + kw - p1w] * W1[f, c, kh, kw]
    S[n, f, y, x]  = middle(T)[n, f, y, x]                  (optional elementwise stages)
    O[n, g, y, x]  = sum_{f, kh, kw} Spad2[n, f, y + kh - p2h, x + kw - p2w] * W2[g, f, kh, kw]

where ``Xpad`` is ``X`` with zeros outside its extents (the padding ``select``), the
windows ``KH x KW`` are constants (1x1, 3x3, ...), and ``middle`` is a sequence of
elementwise stages over ``(n, f, y, x)`` (bias ``+ b[f]``, ``relu``, scales), each reading
the previous array at its own point.

What is checked, on the polyhedral model (isl):

* each convolution's update statement ``U[n, f, y, x, c, kh, kw]`` reads its input through
  the access relation ``U -> X[n, c, y + kh - ph, x + kw - pw]`` exactly (compared with
  ``isl_map_is_equal`` against the unguarded access relation; stride and dilation 1), and,
  when it pads, the guarded relation is that relation restricted to the input's box (the
  padding ``select`` is exactly the in-bounds test); its weights through
  ``U -> W[f, c, kh, kw]``; float32 throughout;
* flow dependences link the first convolution to each middle stage and the last one to
  the second convolution (the second really consumes the first's output);
* every intermediate (``T``, the middle stages' arrays) is a temporary read only by the
  next stage of the chain, and the second convolution's input channels are the first's
  output channels.

:func:`detect_conv_chains` returns :class:`ConvChainMatch` es (typed);
:func:`conv_why_not` says, for ``explain``, why a convolution starts no chain.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import islpy as isl

from polycomp import ir
from polycomp.scheduler.chain.detect import (
    MiddleStage,
    _loads,
    _no_flow,
    _readers,
    _supported_expr,
    scan_chains,
    why_no_chain,
)
from polycomp.scheduler.chain.tree import _params
from polycomp.scheduler.common.contraction import match_contraction

__all__ = ["ConvStage", "ConvChainMatch", "ConvMiddle", "detect_conv_chains",
           "conv_why_not"]


@dataclass(frozen=True, eq=False)
class ConvStage:
    """One matched convolution: ``out[n, f, y, x] = sum x[n, c, y+kh-ph, x+kw-pw] *
    w[f, c, kh, kw]``; ``kh, kw`` the constant window, ``ph, pw`` the padding."""
    stage: Any
    x: ir.Buffer
    w: ir.Buffer
    out: ir.Buffer
    kh: int
    kw: int
    ph: int
    pw: int

    @property
    def window(self) -> int:
        return self.kh * self.kw


#: An elementwise stage between the convolutions: ``out[n, f, y, x] = body`` reading
#: ``prev`` at ``iters`` (the chains' :class:`~.detect.MiddleStage`).
ConvMiddle: TypeAlias = MiddleStage


@dataclass(frozen=True, eq=False)
class ConvChainMatch:
    """A detected conv chain (module docstring); ``stages`` in program order and the
    names of their statements."""
    first: ConvStage
    second: ConvStage
    middle: tuple[ConvMiddle, ...]
    stages: tuple[Any, ...]
    statements: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.first.stage.name}->{self.second.stage.name}"

    @property
    def t(self) -> ir.Buffer:
        return self.first.out

    @property
    def halo(self) -> tuple[int, int]:
        """Extra intermediate rows/columns a tile of the output needs (the second
        window minus one): 0 for a 1x1 second convolution."""
        return self.second.kh - 1, self.second.kw - 1


def _update(model, stage):
    return next((s for s in model.statements if s.stage is stage and s.kind == "update"), None)


def _box(model, buf: ir.Buffer) -> isl.Set | None:
    """``{ buf[a0..a3] : 0 <= a2 < H and 0 <= a3 < W }`` (the spatial box of a 4-d array)."""
    from polycomp.affine import to_isl
    from polycomp.errors import NonAffineIndexError
    from polycomp.model import _isl_names
    names = _isl_names(tuple(model.params), ())
    try:
        h = to_isl(buf.shape[2], names)
        w = to_isl(buf.shape[3], names)
    except NonAffineIndexError:        # a non-affine extent: no padding check possible
        return None
    return isl.Set.read_from_str(
        model.ctx, f"{_params(model)}{{ {buf.name}[a0, a1, a2, a3] : 0 <= a2 < {h} and "
                   f"0 <= a3 < {w} }}")


def _const(e) -> int | None:
    if isinstance(e, int):
        return e
    if isinstance(e, ir.IntImm):
        return int(e.value)
    return None


def _conv(model, stage) -> ConvStage | str:
    """``stage`` as a :class:`ConvStage` or why not."""
    c = match_contraction(stage)
    if isinstance(c, str):
        return c
    if not c.mixed:
        return "not a convolution"
    if len(stage.iters) != 4 or len(c.reduce_dims) != 3:
        return "not a 2-d convolution over (n, f, y, x) with reduce axes (c, kh, kw)"
    if stage.output.dtype != "float32":
        return f"dtype {stage.output.dtype} (fused conv chains are float32)"
    n, f, y, x = stage.iters
    rc, rh, rw = (a.var for a in stage.reduce_axes)
    for fx, fw in ((c.a, c.b), (c.b, c.a)):
        if fx.widened or fw.widened or fw.guard is not None:
            continue
        wl, xl = fw.load, fx.load
        if not (len(wl.indices) == 4 and all(
                isinstance(i, ir.Var) and i is v for i, v in zip(wl.indices, (f, rc, rh, rw)))):
            continue
        if len(xl.indices) != 4 or xl.buffer.dtype != "float32" or wl.buffer.dtype != "float32":
            return "operands are not float32 NCHW arrays"
        kh, kw = _const(wl.buffer.shape[2]), _const(wl.buffer.shape[3])
        if kh is None or kw is None:
            return "the window extents are not constants"
        got = _input_access(model, stage, xl.buffer, fx.guard is not None, kh, kw)
        if isinstance(got, str):
            return got
        return ConvStage(stage, xl.buffer, wl.buffer, stage.output.buffer, kh, kw, *got)
    return "the weights are not read as W[f, c, kh, kw]"


def _input_access(model, stage, xb: ir.Buffer, guarded: bool, kh: int,
                  kw: int) -> tuple[int, int] | str:
    """The padding ``(ph, pw)`` with which the update statement reads ``xb`` through
    ``U[n, f, y, x, c, r, s] -> X[n, c, y + r - ph, x + s - pw]`` (isl equality)."""
    upd = _update(model, stage)
    acc = [a for a in upd.accesses if a.kind == "read" and a.buffer is xb]
    if len(acc) != 1:
        return f"{xb.name} is read {len(acc)} times by {stage.name}"
    a = acc[0]
    dims = ", ".join(f"i{k}" for k in range(7))
    for ph in range(kh):
        for pw in range(kw):
            want = isl.Map.read_from_str(
                model.ctx, f"{_params(model)}{{ {upd.name}[{dims}] -> {xb.name}[i0, i4, "
                           f"i2 + i5 - {ph}, i3 + i6 - {pw}] }}").intersect_domain(upd.domain)
            if not want.is_equal(a.index_relation):
                continue
            if not guarded and not a.relation.is_equal(a.index_relation):
                return "the input access is guarded by something else than padding"
            if guarded:
                box = _box(model, xb)
                if box is None or not a.relation.is_equal(
                        a.index_relation.intersect_range(box)):
                    return "the input's guard is not the padding's in-bounds test"
            return ph, pw
    return "the input is not read as X[n, c, y + kh - p, x + kw - p] (stride 1, dilation 1)"


def _middle(stage, prev: ir.Buffer) -> ConvMiddle | None:
    """An elementwise stage over ``(n, f, y, x)`` reading ``prev`` at its own point, other
    float32 loads indexed by its iterators (``b[f]``, ``m[n, f, y, x]``)."""
    if stage.reduce_op is not None or stage.output.dtype != "float32":
        return None
    iters = tuple(stage.iters)
    if len(iters) != 4:
        return None
    seen = False
    for ld in _loads(stage.body):
        if ld.buffer is prev:
            if not all(isinstance(i, ir.Var) and i is v for i, v in zip(ld.indices, iters)):
                return None
            seen = True
        elif ld.buffer.dtype != "float32" or not all(
                isinstance(i, ir.Var) and any(i is v for v in iters) for i in ld.indices):
            return None
    if not seen or not _supported_expr(stage.body, prev):
        return None
    return ConvMiddle(stage, prev, stage.output.buffer, iters)


def _same(a, b) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return _const(a) == _const(b)
    return a is b or ir.structural_equal(a, b)


def _match_from(model, stages, i: int) -> ConvChainMatch | str:
    c1 = _conv(model, stages[i])
    if isinstance(c1, str):
        return c1
    outs = {id(t.buffer) for t in model.graph.outputs}
    prev, j = c1.out, i + 1
    chain = [stages[i]]
    middle: list[ConvMiddle] = []
    while True:
        if j >= len(stages):
            return "no second convolution follows"
        if id(prev) in outs:
            return f"the intermediate {prev.name} is a kernel output"
        readers = _readers(stages, prev)
        if readers != [stages[j]]:
            return f"{prev.name} is read by {len(readers)} stages, not just the next one"
        mid = _middle(stages[j], prev)
        if mid is None:
            break
        middle.append(mid)
        chain.append(stages[j])
        prev, j = mid.out, j + 1
    c2 = _conv(model, stages[j])
    if isinstance(c2, str):
        return f"the stage after the first convolution: {c2}"
    if c2.x is not prev:
        return "the second convolution does not read the intermediate as its input"
    if not _same(c2.w.shape[1], c1.w.shape[0]):
        return "the second convolution's input channels differ from the first's outputs"
    chain.append(stages[j])
    why = _no_flow(model, chain)
    if why is not None:
        return why
    names = tuple(s.name for s in model.statements if any(s.stage is c for c in chain))
    return ConvChainMatch(c1, c2, tuple(middle), tuple(chain), names)


def detect_conv_chains(model) -> list[ConvChainMatch]:
    """Every conv chain of ``model`` (non-overlapping, in program order)."""
    return scan_chains(model, _match_from)


def conv_why_not(model) -> list[str]:
    """For each convolution that starts no conv chain, the reason (for ``explain``)."""
    return why_no_chain(model, detect_conv_chains(model), _starts_conv, _match_from)


def _starts_conv(stage) -> bool:
    from polycomp.scheduler.common.contraction import contraction_class
    return bool(stage.reduce_op) and contraction_class(stage) == "conv"
