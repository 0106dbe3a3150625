"""The elementwise stages of a fused chain kernel as scalar C expressions.

The fused CPU kernels (:mod:`.kernel` for batch-matmul chains, :mod:`.conv_kernel` for
conv chains) apply the stages between the two contractions element by element in
generated C.  :class:`ScalarC` prints one stage's body: the previous stage's value at
the point is ``v``; how an iterator and a load of another array print depends on the
kernel's loop variables and layout, so subclasses say (:meth:`ScalarC.var`,
:meth:`ScalarC.load`).  ``min``/``max`` propagate NaN as numpy does (issue #14):
``a > b ? a : b`` alone would turn ``max(NaN, 0)`` into 0.
"""
from __future__ import annotations

from polycomp import ir

__all__ = ["ScalarC", "c_float"]

_CTYPES = {"float32": "float", "int64": "int64_t", "int32": "int32_t", "bool": "int"}
_CALLS = {"exp": "expf", "tanh": "tanhf", "sqrt": "sqrtf", "abs": "fabsf"}


def c_float(f: float) -> str:
    """A float32 C literal, NaN and infinities included."""
    if f != f:
        return "NAN"
    if f in (float("inf"), float("-inf")):
        return "INFINITY" if f > 0 else "(-INFINITY)"
    return f"{f!r}f"


class ScalarC:
    """Prints an elementwise body whose load of ``prev`` at the point is ``v``."""

    def __init__(self, prev: ir.Buffer):
        self.prev = prev

    def var(self, x: ir.Var) -> str:
        raise NotImplementedError

    def load(self, x: ir.Load) -> str:
        raise NotImplementedError

    def expr(self, x: ir.Expr) -> str:
        rec = self.expr
        if isinstance(x, ir.FloatImm):
            return c_float(float(x.value))
        if isinstance(x, ir.IntImm):
            return f"((int64_t){int(x.value)})"
        if isinstance(x, ir.Var):
            return self.var(x)
        if isinstance(x, ir.Load):
            return "v" if x.buffer is self.prev else self.load(x)
        if isinstance(x, ir.Cast):
            return f"(({_CTYPES[x.dtype]})({rec(x.value)}))"
        if isinstance(x, ir.Binary):
            a, b = rec(x.a), rec(x.b)
            if x.op in ("min", "max"):     # NaN propagates, as numpy (issue #14)
                cmp = "<" if x.op == "min" else ">"
                return f"((({a}) {cmp} ({b}) || ({a}) != ({a})) ? ({a}) : ({b}))"
            return f"(({a}) {x.op} ({b}))"
        if isinstance(x, ir.Unary):
            return f"(-({rec(x.a)}))" if x.op == "neg" else f"(!({rec(x.a)}))"
        if isinstance(x, ir.Select):
            return f"(({rec(x.cond)}) ? ({rec(x.t)}) : ({rec(x.f)}))"
        if isinstance(x, ir.Call):
            return f"{_CALLS[x.name]}({', '.join(rec(a) for a in x.args)})"
        raise ValueError(f"unsupported expression {type(x).__name__}")
