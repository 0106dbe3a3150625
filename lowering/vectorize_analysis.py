"""Vectoriser analysis: affine forms in a loop variable and the legality/shape checks of
:mod:`polycomp.lowering.vectorize` (which documents the conditions).

``affine_in(e, v)`` splits an index into ``c*v + r``; :class:`_Analysis` walks a loop body
and either returns a plan (the loop's float dtype, lane count and reductions) or raises
:class:`Unvectorizable` naming the first construct that prevents vectorisation.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from polycomp import dtypes as dt
from polycomp import ir

from .simplify import simplify

VECTOR_DTYPES = ("float32", "float64")
VECTOR_MATH = ("exp", "log", "tanh", "erf", "sigmoid", "sqrt", "rsqrt", "abs", "floor", "ceil")
REDUCE_OPS = {"+": "add", "*": "mul", "max": "max", "min": "min"}


def identity(op: str, dtype: str) -> ir.Expr:
    v = {"+": 0.0, "*": 1.0, "max": float("-inf"), "min": float("inf")}[op]
    return ir.FloatImm(v, dtype)


# --------------------------------------------------------------------------- affine forms


def uses(e, v: ir.Var) -> bool:
    """Whether ``v`` occurs in ``e``."""
    stack = [e]
    while stack:
        n = stack.pop()
        if n is v:
            return True
        stack.extend(ir.children(n))
    return False


def affine_in(e: ir.Expr, v: ir.Var):
    """``(c, r)`` with ``e == c*v + r`` and ``r`` free of ``v``, or None if ``e`` is not
    affine in ``v`` (``v`` under a division, a product of two ``v`` terms, ...).  ``c``
    is an int, or an expression free of ``v`` for symbolic strides (``v * N``)."""
    if e is v:
        return 1, ir.IntImm(0)
    if not uses(e, v):
        return 0, e
    if isinstance(e, ir.Binary) and e.op in ("+", "-"):
        a, b = affine_in(e.a, v), affine_in(e.b, v)
        if a is None or b is None:
            return None
        if e.op == "+":
            return _cadd(a[0], b[0]), ir.Binary("+", a[1], b[1], e.dtype)
        return _cadd(a[0], _cneg(b[0])), ir.Binary("-", a[1], b[1], e.dtype)
    if isinstance(e, ir.Binary) and e.op == "*":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if not uses(y, v) and y.dtype in dt.INTS:
                a = affine_in(x, v)
                if a is None:
                    return None
                c = a[0] * y.value if isinstance(y, ir.IntImm) else \
                    (ir.Binary("*", ir.IntImm(a[0]), y, "int64") if isinstance(a[0], int)
                     else ir.Binary("*", a[0], y, "int64"))
                if isinstance(c, ir.Expr):
                    c = simplify(c)
                    c = c.value if isinstance(c, ir.IntImm) else c
                return c, ir.Binary("*", a[1], y, e.dtype)
        return None
    if isinstance(e, ir.Unary) and e.op == "neg":
        a = affine_in(e.a, v)
        return None if a is None else (_cneg(a[0]), ir.Unary("neg", a[1], e.dtype))
    return None


def _cadd(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    c = simplify(ir.Binary("+", ir.const(a), ir.const(b), "int64"))
    return c.value if isinstance(c, ir.IntImm) else c


def _cneg(a):
    if isinstance(a, int):
        return -a
    return simplify(ir.Unary("neg", a, "int64"))


def index_coeff(idx: ir.Expr, v: ir.Var):
    a = affine_in(idx, v)
    return None if a is None else a[0]


# --------------------------------------------------------------------------- analysis


class Unvectorizable(Exception):
    """Raised (and caught) when a loop does not meet the conditions above."""


_Refuse = Unvectorizable


@dataclass
class _Reduction:
    store: ir.Store
    op: str
    rest: ir.Expr
    acc: ir.Buffer | None = None


@dataclass
class _Plan:
    dtype: str
    lanes: int
    reductions: dict = field(default_factory=dict)   # id(store) -> _Reduction


_CMP = ("<", "<=", ">", ">=", "==")


class _Analysis:
    """Checks the conditions of the module docstring for one loop."""

    def __init__(self, loop: ir.For, lanes_of):
        self.loop = loop
        self.v = loop.var
        self.lanes_of = lanes_of
        self.dtypes: set = set()
        self.vector_lets: set = set()
        self.stores: list = []
        self.loads: list = []       # (load, coeff)

    # ------------------------------------------------------------ expressions
    def is_vector(self, e) -> bool:
        """Whether ``e``'s value differs between iterations (after analysis)."""
        if isinstance(e, ir.Var):
            return e is self.v or e in self.vector_lets
        if isinstance(e, ir.Load):
            c = index_coeff(e.indices[0], self.v)
            return c != 0
        return any(self.is_vector(c) for c in ir.children(e))

    def cond(self, e, guarded: bool) -> None:
        """A condition: a vector mask (float compare), a lane range (affine in v) or a
        scalar."""
        if not self.is_vector(e):
            self.scalar(e)
            return
        if isinstance(e, ir.Binary) and e.op in ("&&", "||"):
            self.cond(e.a, guarded)
            self.cond(e.b, guarded)
            return
        if isinstance(e, ir.Unary) and e.op == "!":
            self.cond(e.a, guarded)
            return
        if isinstance(e, ir.Binary) and e.op in _CMP + ("!=",):
            if e.a.dtype in dt.INTS and e.b.dtype in dt.INTS:
                if e.op == "!=":
                    raise _Refuse("!= on the loop variable")
                d = affine_in(ir.Binary("-", e.a, e.b, "int64"), self.v)
                if d is None or not isinstance(d[0], int) or d[0] == 0 or any(
                        uses(x, vv) for x in (d[1],) for vv in self.vector_lets):
                    raise _Refuse("a condition that is not a lane range")
                self.scalar(d[1])
                return
            self.value(e.a, guarded)
            self.value(e.b, guarded)
            return
        raise _Refuse(f"vector condition {type(e).__name__}")

    def scalar(self, e) -> None:
        """An expression whose value is the same in every iteration."""
        def fn(n):
            if isinstance(n, ir.Load):
                self.loads.append((n, 0))
        ir.walk(e, fn)

    def value(self, e, guarded: bool = False) -> None:
        """A value expression (float data) of the loop body."""
        if not self.is_vector(e):
            if guarded and _has_load(e):
                raise _Refuse("a scalar load under a lane-dependent condition")
            self.scalar(e)
            return
        if e.dtype not in VECTOR_DTYPES:
            raise _Refuse(f"a {e.dtype} value depends on the loop variable")
        self.dtypes.add(e.dtype)
        if isinstance(e, ir.Var):
            if e is self.v:
                raise _Refuse("the loop variable is used as a value")
            return
        if isinstance(e, ir.Load):
            c = index_coeff(e.indices[0], self.v)
            if c is None:
                raise _Refuse(f"load of {e.buffer.name} at a non-affine index")
            if any(uses(e.indices[0], lv) for lv in self.vector_lets):
                raise _Refuse("an index depends on a vector value")
            self.loads.append((e, 1))
            return
        if isinstance(e, ir.Binary):
            if e.op not in ("+", "-", "*", "/", "min", "max"):
                raise _Refuse(f"vector operator {e.op}")
            self.value(e.a, guarded)
            self.value(e.b, guarded)
            return
        if isinstance(e, ir.Unary) and e.op == "neg":
            self.value(e.a, guarded)
            return
        if isinstance(e, ir.Select):
            self.cond(e.cond, guarded)
            g = guarded or self.is_vector(e.cond)
            self.value(e.t, g)
            self.value(e.f, g)
            return
        if isinstance(e, ir.Call):
            if e.name not in VECTOR_MATH or len(e.args) != 1:
                raise _Refuse(f"call {e.name}")
            self.value(e.args[0], guarded)
            return
        if isinstance(e, ir.Cast):
            if e.value.dtype != e.dtype:
                raise _Refuse("a cast of a vector value")
            self.value(e.value, guarded)
            return
        raise _Refuse(f"vector {type(e).__name__}")

    # ------------------------------------------------------------ statements
    def stmt(self, s) -> None:
        if isinstance(s, ir.Block):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, ir.Store):
            c = index_coeff(s.indices[0], self.v)
            if c not in (0, 1):
                raise _Refuse(f"store to {s.buffer.name} with stride {c}")
            if c == 1 and s.buffer.dtype not in VECTOR_DTYPES:
                raise _Refuse(f"vector store of {s.buffer.dtype}")
            if c == 1:
                self.dtypes.add(s.buffer.dtype)
            self.scalar(s.indices[0])
            self.stores.append((s, c))
            if c == 0:
                self.value(s.value)
            else:
                self.value(s.value) if self.is_vector(s.value) else self.scalar(s.value)
        elif isinstance(s, ir.LetStmt):
            if self.is_vector(s.value):
                self.value(s.value)
                self.vector_lets.add(s.var)
            else:
                self.scalar(s.value)
            self.stmt(s.body)
        elif isinstance(s, ir.IfThenElse):
            if self.is_vector(s.cond):
                raise _Refuse("an if on the loop variable")
            self.scalar(s.cond)
            self.stmt(s.then)
            if s.orelse is not None:
                self.stmt(s.orelse)
        elif isinstance(s, ir.AttrStmt):
            self.stmt(s.body)
        else:
            raise _Refuse(f"{type(s).__name__} in the loop body")

    def run(self) -> _Plan:
        loop = self.loop
        if _has_vector_node(loop.body):
            raise _Refuse("already vectorised")
        self.stmt(loop.body)
        if not self.dtypes:
            raise _Refuse("no vector data")
        if len(self.dtypes) != 1:
            raise _Refuse(f"mixed vector dtypes {sorted(self.dtypes)}")
        dtype = next(iter(self.dtypes))
        lanes = self.lanes_of(dtype)
        if lanes <= 1:
            raise _Refuse(f"no vectors of {dtype} on this target")
        plan = _Plan(dtype, lanes)
        independent = (loop.annotation("coincident", False)
                       or loop.kind in ("parallel", "vectorized"))
        written: dict = {}
        for s, c in self.stores:
            written.setdefault(s.buffer, []).append((s, c))
        for buf, sts in written.items():
            accesses = [(s.indices[0], c) for s, c in sts] + \
                [(ld.indices[0], c) for ld, c in self.loads if ld.buffer is buf]
            red = self.reduction(buf, sts)
            if red is not None:
                plan.reductions[id(red.store)] = red
                continue
            if any(c != 1 for _, c in accesses):
                raise _Refuse(f"{buf.name} is written and accessed at a loop-invariant index")
            if not independent:
                first = accesses[0][0]
                if not all(ir.structural_equal(simplify(i), simplify(first)) for i, _ in accesses):
                    raise _Refuse(f"{buf.name} is accessed at different offsets in a "
                                  f"loop that is not coincident")
        return plan

    def reduction(self, buf, sts):
        if len(sts) != 1 or sts[0][1] != 0:
            return None
        s = sts[0][0]
        val = s.value
        if not (isinstance(val, ir.Binary) and buf.dtype == val.dtype
                and (val.op in REDUCE_OPS or val.op == "-")):
            return None
        if buf.dtype not in VECTOR_DTYPES:
            return None
        pairs = ((val.a, val.b),) if val.op == "-" else ((val.a, val.b), (val.b, val.a))
        for acc, rest in pairs:
            if isinstance(acc, ir.Load) and acc.buffer is buf and \
                    ir.structural_equal(acc.indices[0], s.indices[0]):
                others = [(ld, c) for ld, c in self.loads if ld.buffer is buf and ld is not acc]
                if not all(self.apart(ld, c, s.indices[0]) for ld, c in others):
                    return None
                if val.op == "-":     # acc - r: a sum of the negated terms (exact negation)
                    neg = ir.Binary("*", ir.Unary("neg", rest.a, rest.a.dtype), rest.b,
                                    rest.dtype) if isinstance(rest, ir.Binary) and \
                        rest.op == "*" else ir.Unary("neg", rest, rest.dtype)
                    return _Reduction(s, "+", neg)
                return _Reduction(s, val.op, rest)
        return None

    def apart(self, ld: ir.Load, c: int, e: ir.Expr) -> bool:
        """Whether the unit-stride load ``ld`` (``v + off``) never reads element ``e``
        (loop-invariant) of its buffer while ``v`` runs over the loop: ``e - off`` is
        below the first or above the last value of ``v`` (a constant difference after
        simplification: trisolv's ``x[i] -= L[i][j] * x[j]`` for ``j < i``)."""
        if c != 1:
            return False
        off = simplify(ir.Binary("-", ld.indices[0], self.v, self.v.dtype))
        if uses(off, self.v):
            return False
        lo = self.loop.min
        hi = ir.Binary("-", ir.Binary("+", lo, self.loop.extent, lo.dtype), ir.IntImm(1),
                       lo.dtype)
        target = ir.Binary("-", e, off, off.dtype)
        for d in (simplify(ir.Binary("-", target, hi, lo.dtype)),
                  simplify(ir.Binary("-", lo, target, lo.dtype))):
            if isinstance(d, ir.IntImm) and d.value > 0:
                return True
        return False


def _has_load(e) -> bool:
    found = []
    ir.walk(e, lambda n: found.append(1) if isinstance(n, ir.Load) else None)
    return bool(found)


def _reads(e, buf) -> bool:
    found = []
    ir.walk(e, lambda n: found.append(1) if isinstance(n, ir.Load) and n.buffer is buf else None)
    return bool(found)


def _has_vector_node(node) -> bool:
    found = []

    def fn(n):
        if isinstance(n, (ir.Ramp, ir.Broadcast)) or \
                (isinstance(n, (ir.Load, ir.Store)) and n.lanes > 1):
            found.append(1)
    ir.walk(node, fn)
    return bool(found)


def has_loop(node) -> bool:
    """Does ``node`` contain a ``For``?  Expressions contain no statements, so only
    the statements of ``node`` are visited."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ir.For):
            return True
        stack.extend(c for c in ir.children(n) if isinstance(c, ir.Stmt))
    return False


