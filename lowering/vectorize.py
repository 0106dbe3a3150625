"""IR pass: turn innermost unit-stride loops into vector code (Ramp / Broadcast / lanes).

Assumes: flattened IR (every Load/Store has one linear index), simplified.  Loops of
kind ``serial``, ``parallel`` or ``vectorized`` whose body holds no loop are candidates.

A candidate loop ``for v in [m, m + n)`` is vectorised with ``L`` lanes, ``L`` the
target's vector length for the loop's float dtype ``D`` (float32 or float64; a loop
touching other dtypes with ``v`` keeps its scalar code), when:

* every Load/Store index is affine in ``v`` with coefficient 0 (the same element in
  every iteration: a scalar, broadcast) or 1 (contiguous: a vector load/store); loads
  may also have another constant coefficient ``s`` (a strided load, printed as a
  gather), stores may not;
* ``v`` appears in values only through such indices and through *affine conditions*
  ``a*v + b  op  c`` with a constant ``a != 0`` (they become lane-range masks: lanes
  ``lo <= l < hi``), so no integer vector arithmetic is needed;
* every vector value has dtype ``D`` (or is a mask), math calls are in
  :data:`polycomp.hw.cpu.vector_prelude.VECTOR_MATH`, casts of vector values are
  identities; a scalar load under a ``v``-dependent ``select`` condition is refused (it
  could not be masked);
* iterations are independent, or depend only through reductions: the loop is annotated
  ``coincident`` (or has kind parallel/vectorized), or every buffer it writes is either
  accessed only at one unit-stride index (the same element of the same iteration) or is
  a *reduction accumulator* ``X[e] = X[e] op r`` (``e`` invariant, ``op`` in
  ``+ * max min``, ``X`` accessed nowhere else in the loop).

Guarantees: the loop becomes ``for v0 in [0, n // (L*U))`` over vector iterations
(``U`` accumulators per reduction, default 4 when the loop reduces, else 1), then a
remainder loop over the leftover full vectors when ``U > 1``, then a tail over the last
``n mod L`` iterations: with ``tail="mask"`` an ``AttrStmt("vector_mask", (count, L))``
whose vector loads and stores touch only lanes ``0 <= l < count`` (inactive lanes load
zero), with ``tail="scalar"`` the original scalar loop on the leftover range.  Each
reduction accumulates into ``U`` vector registers (a ``register``-scope buffer,
initialised with the identity of ``op``), combined lane-wise and then horizontally
(``vreduce_<op>`` calls) into ``X[e]`` once.  Statement order within an iteration is
kept for every lane, so each dependence inside an iteration is preserved; reductions
are reassociated (sums are added in a different order than the scalar loop).  A
parallel loop stays parallel over vector iterations; its tail runs after it.

Vector IR conventions (what :mod:`polycomp.hw.cpu.vector_printer` prints): a vector
load/store has ``lanes = L`` and index ``Ramp(base, stride, L)`` (stride 1 for stores); ``Broadcast`` splats a
scalar; ``Call("vlane_range", (lo, hi, L))`` is the mask of lanes ``lo <= l < hi``;
comparisons of vectors are masks; ``Call("vreduce_add"|..., (vector,))`` is a scalar.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

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
    acc: ir.Buffer = None


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
        independent = loop.annotation("coincident", False) or loop.kind in ("parallel", "vectorized")
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
        if not (isinstance(val, ir.Binary) and val.op in REDUCE_OPS and buf.dtype == val.dtype):
            return None
        if buf.dtype not in VECTOR_DTYPES:
            return None
        for acc, rest in ((val.a, val.b), (val.b, val.a)):
            if isinstance(acc, ir.Load) and acc.buffer is buf and \
                    ir.structural_equal(acc.indices[0], s.indices[0]):
                if _reads(rest, buf):
                    return None
                others = [ld for ld, _ in self.loads if ld.buffer is buf and ld is not acc]
                if others:
                    return None
                return _Reduction(s, val.op, rest)
        return None


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
        if isinstance(n, (ir.Ramp, ir.Broadcast)) or (isinstance(n, (ir.Load, ir.Store)) and n.lanes > 1):
            found.append(1)
    ir.walk(node, fn)
    return bool(found)


def has_loop(node) -> bool:
    found = []
    ir.walk(node, lambda n: found.append(1) if isinstance(n, ir.For) else None)
    return bool(found)


# --------------------------------------------------------------------------- widening


def lane_range(lo, hi, lanes: int) -> ir.Call:
    return ir.Call("vlane_range", (lo, hi, ir.IntImm(lanes)), "bool")


class Widen:
    """Builds the vector form of a loop body for one vector iteration whose first lane
    is ``base`` (lane ``l`` is iteration ``base + l``)."""

    def __init__(self, v: ir.Var, base: ir.Expr, dtype: str, lanes: int, vector_lets=(),
                 mask: ir.Expr | None = None, reciprocal: bool = False):
        self.v, self.base, self.dtype, self.lanes = v, base, dtype, lanes
        self.vector_lets = set(vector_lets)
        self.mask = mask
        self.reciprocal = reciprocal

    def is_vector(self, e) -> bool:
        if isinstance(e, ir.Var):
            return e is self.v or e in self.vector_lets
        if isinstance(e, ir.Load):
            return index_coeff(e.indices[0], self.v) != 0
        return any(self.is_vector(c) for c in ir.children(e))

    def at_base(self, e: ir.Expr) -> ir.Expr:
        return simplify(ir.substitute(e, {self.v: self.base}))

    def bcast(self, e: ir.Expr) -> ir.Expr:
        e = self.at_base(e)
        if e.dtype == "bool":
            return ir.Broadcast(e, self.lanes, "bool")
        if e.dtype != self.dtype:
            e = ir.Cast(e, self.dtype)
        return ir.Broadcast(e, self.lanes, self.dtype)

    def expr(self, e: ir.Expr) -> ir.Expr:
        if not self.is_vector(e):
            return self.bcast(e)
        if isinstance(e, ir.Var):
            return e
        if isinstance(e, ir.Load):
            idx = self.at_base(e.indices[0])
            stride = ir.const(index_coeff(e.indices[0], self.v))
            return ir.Load(e.buffer, (ir.Ramp(idx, stride, self.lanes),), e.dtype, self.lanes)
        if isinstance(e, ir.Binary):
            if e.op in ("&&", "||"):
                return ir.Binary(e.op, self.cond(e.a), self.cond(e.b), "bool")
            if e.op in _CMP + ("!=",):
                return self.cond(e)
            if e.op == "/" and self.reciprocal and not self.is_vector(e.b):
                # division by a loop-invariant value: one scalar reciprocal, then products
                inv = ir.Binary("/", ir.FloatImm(1.0, e.dtype), e.b, e.dtype)
                return ir.Binary("*", self.expr(e.a), self.bcast(inv), e.dtype)
            return ir.Binary(e.op, self.expr(e.a), self.expr(e.b), e.dtype)
        if isinstance(e, ir.Unary):
            if e.op == "!":
                return ir.Unary("!", self.cond(e.a), "bool")
            return ir.Unary(e.op, self.expr(e.a), e.dtype)
        if isinstance(e, ir.Select):
            c = self.cond(e.cond) if self.is_vector(e.cond) else self.at_base(e.cond)
            return ir.Select(c, self.expr(e.t), self.expr(e.f), e.dtype)
        if isinstance(e, ir.Call):
            return ir.Call(e.name, tuple(self.expr(a) for a in e.args), e.dtype, e.pure)
        if isinstance(e, ir.Cast):
            return self.expr(e.value)
        raise _Refuse(f"cannot widen {type(e).__name__}")

    def cond(self, e: ir.Expr) -> ir.Expr:
        if not self.is_vector(e):
            return self.bcast(e)
        if isinstance(e, ir.Binary) and e.op in ("&&", "||"):
            return ir.Binary(e.op, self.cond(e.a), self.cond(e.b), "bool")
        if isinstance(e, ir.Unary) and e.op == "!":
            return ir.Unary("!", self.cond(e.a), "bool")
        if isinstance(e, ir.Binary) and e.a.dtype in dt.INTS and e.b.dtype in dt.INTS:
            s, r = affine_in(ir.Binary("-", e.a, e.b, "int64"), self.v)
            # d(l) = s*(base + l) + r = t + s*l  op  0, with t = d(0)
            t = self.at_base(ir.Binary("+", ir.Binary("*", ir.IntImm(s), self.base, "int64"),
                                       r, "int64"))
            L = ir.IntImm(self.lanes)
            zero = ir.IntImm(0)

            def S(x):
                return simplify(x)
            if s > 0:
                nt = S(ir.Unary("neg", t, "int64"))
                ceil_, floor_ = S((nt + (s - 1)) // s), S(nt // s)      # of -t/s
                ranges = {"<": (zero, ceil_), "<=": (zero, S(floor_ + 1)),
                          ">": (S(floor_ + 1), L), ">=": (ceil_, L), "==": (ceil_, S(floor_ + 1))}
            else:
                u = -s
                ceil_, floor_ = S((t + (u - 1)) // u), S(t // u)        # of t/u
                ranges = {"<": (S(floor_ + 1), L), "<=": (ceil_, L), ">": (zero, ceil_),
                          ">=": (zero, S(floor_ + 1)), "==": (ceil_, S(floor_ + 1))}
            lo, hi = ranges[e.op]
            return lane_range(lo, hi, self.lanes)
        if isinstance(e, ir.Binary):
            return ir.Binary(e.op, self.expr(e.a), self.expr(e.b), "bool")
        raise _Refuse(f"cannot widen condition {type(e).__name__}")

    def store(self, s: ir.Store) -> ir.Store:
        idx = self.at_base(s.indices[0])
        return ir.Store(s.buffer, (ir.Ramp(idx, ir.IntImm(1), self.lanes),), self.expr(s.value),
                        self.lanes)


def _acc_ref(acc: ir.Buffer, slot: int, lanes: int, dtype: str) -> ir.Load:
    return ir.Load(acc, (ir.Ramp(ir.IntImm(slot * lanes), ir.IntImm(1), lanes),), dtype, lanes)


def _acc_store(acc: ir.Buffer, slot: int, lanes: int, value: ir.Expr) -> ir.Store:
    return ir.Store(acc, (ir.Ramp(ir.IntImm(slot * lanes), ir.IntImm(1), lanes),), value, lanes)


class _Body:
    """Widen a loop body (statements) for one vector iteration; reductions go to their
    accumulator slot (masked by ``lane_mask`` in the tail)."""

    def __init__(self, plan: _Plan, widen: Widen, slot: int, lane_mask=None):
        self.plan, self.w, self.slot, self.lane_mask = plan, widen, slot, lane_mask

    def stmt(self, s):
        if isinstance(s, ir.Block):
            return ir.seq(*[self.stmt(x) for x in s.stmts])
        if isinstance(s, ir.Store):
            red = self.plan.reductions.get(id(s))
            if red is not None:
                p = self.plan
                old = _acc_ref(red.acc, self.slot, p.lanes, p.dtype)
                new = ir.Binary(red.op, old, self.w.expr(red.rest), p.dtype)
                if self.lane_mask is not None:
                    new = ir.Select(self.lane_mask, new, old, p.dtype)
                return _acc_store(red.acc, self.slot, p.lanes, new)
            if not self.w.is_vector(s.value) and index_coeff(s.indices[0], self.w.v) == 0:
                raise _Refuse("invariant store")
            return self.w.store(s)
        if isinstance(s, ir.LetStmt):
            if self.w.is_vector(s.value):
                return ir.LetStmt(s.var, self.w.expr(s.value), self.stmt(s.body))
            return ir.LetStmt(s.var, self.w.at_base(s.value), self.stmt(s.body))
        if isinstance(s, ir.IfThenElse):
            return ir.IfThenElse(self.w.at_base(s.cond), self.stmt(s.then),
                                 self.stmt(s.orelse) if s.orelse is not None else None)
        if isinstance(s, ir.AttrStmt):
            return ir.AttrStmt(s.key, s.value, self.stmt(s.body))
        raise _Refuse(f"cannot widen {type(s).__name__}")


_counter = [0]


def analyse(loop: ir.For, lanes_of):
    """``(dtype, lanes)`` if ``loop`` meets the conditions of the module docstring (its
    reductions included), else raises :class:`Unvectorizable`."""
    plan = _Analysis(loop, lanes_of).run()
    return plan.dtype, plan.lanes


def vectorize_loop(loop: ir.For, lanes_of, tail: str = "mask", reduce_unroll: int = 4,
                   reciprocal: bool = False):
    """The vector form of ``loop`` (see the module docstring), or None if it does not
    qualify."""
    try:
        an = _Analysis(loop, lanes_of)
        plan = an.run()
        return _build(loop, an, plan, tail, reduce_unroll, reciprocal)
    except _Refuse:
        return None


def _build(loop, an, plan, tail, reduce_unroll, reciprocal=False):
    L, D = plan.lanes, plan.dtype
    v, m, n = loop.var, loop.min, loop.extent
    U = reduce_unroll if plan.reductions else 1
    for red in plan.reductions.values():
        _counter[0] += 1
        red.acc = ir.Buffer(f"vacc{_counter[0]}", D, (ir.IntImm(L * U),), scope="register",
                            flat=True)
    v0 = ir.Var(v.name + "_v")
    const_n = n.value if isinstance(n, ir.IntImm) else None

    def body_at(base, slot, lane_mask=None):
        w = Widen(v, base, D, L, an.vector_lets, reciprocal=reciprocal)
        return _Body(plan, w, slot, lane_mask).stmt(loop.body)

    parts = []
    n_vec = simplify(n // L)                       # full vectors
    n_main = simplify(n // (L * U)) if U > 1 else n_vec
    ann = tuple((k, val) for k, val in loop.annotations) + (("vectorized", L),)
    kind = "parallel" if loop.kind == "parallel" else "serial"
    if const_n is None or const_n >= L * U:
        unrolled = ir.seq(*[body_at(simplify(m + (v0 * U + u) * L), u) for u in range(U)])
        parts.append(ir.For(v0, ir.IntImm(0), n_main, kind, unrolled, ann))
    if U > 1 and (const_n is None or (const_n // L) % U):
        # the full vectors left over by the unrolled loop: [n_main * U, n_vec)
        v1 = ir.Var(v.name + "_r")
        parts.append(ir.For(v1, simplify(n_main * U), simplify(n_vec - n_main * U), "serial",
                            body_at(simplify(m + v1 * L), 0), ann))
    tail_base = simplify(m + n_vec * L)
    count = simplify(n - n_vec * L)
    finals = []
    for red in plan.reductions.values():
        s = red.store
        vec = _acc_ref(red.acc, 0, L, D)
        for u in range(1, U):
            vec = ir.Binary(red.op, vec, _acc_ref(red.acc, u, L, D), D)
        old = ir.Load(s.buffer, s.indices, D)
        finals.append(ir.Store(s.buffer, s.indices,
                               ir.Binary(red.op, old, ir.Call("vreduce_" + REDUCE_OPS[red.op],
                                                              (vec,), D), D)))
    tail_stmt = None
    if const_n is None or const_n % L:
        if tail == "mask":
            mask = lane_range(ir.IntImm(0), count, L)
            t = ir.AttrStmt("vector_mask", (count, L), body_at(tail_base, 0, mask))
            tail_stmt = t if const_n is not None else ir.IfThenElse(
                ir.Binary(">", count, ir.IntImm(0), "bool"), t)
        else:
            tail_stmt = replace(loop, min=tail_base, extent=count, kind="serial")
    if tail == "mask":
        out = ir.seq(*parts, tail_stmt, *finals)
    else:
        out = ir.seq(*parts, *finals, tail_stmt)
    if plan.reductions:
        inits = []
        for red in plan.reductions.values():
            for u in range(U):
                inits.append(_acc_store(red.acc, u, L,
                                        ir.Broadcast(identity(red.op, D), L, D)))
        out = ir.seq(*inits, out)
        for red in plan.reductions.values():
            out = ir.Allocate(red.acc, out)
    if const_n is None:  # a loop with extent <= 0 runs no iteration, but the floor
        # divisions above would give a non-empty tail (and remainder vectors) for it
        out = ir.IfThenElse(ir.Binary(">", n, ir.IntImm(0), "bool"), out)
    return out


class _Vectorize(ir.Mutator):
    def __init__(self, lanes_of, tail, reduce_unroll, reciprocal):
        self.lanes_of, self.tail, self.reduce_unroll = lanes_of, tail, reduce_unroll
        self.reciprocal = reciprocal
        self.count = 0

    def visit_For(self, s):
        body = self.visit(s.body)
        s = s if body is s.body else replace(s, body=body)
        if s.kind in ("serial", "parallel", "vectorized") and not has_loop(s.body):
            out = vectorize_loop(s, self.lanes_of, self.tail, self.reduce_unroll,
                                 self.reciprocal)
            if out is not None:
                self.count += 1
                return out
        return s


def vectorize(func: ir.LoweredFunc, lanes_of, tail: str = "mask",
              reduce_unroll: int = 4, reciprocal: bool = False) -> ir.LoweredFunc:
    """Vectorise every qualifying innermost loop of ``func`` (see the module docstring).
    ``lanes_of(dtype)`` gives the vector length (1: no vectors of that dtype).  With
    ``reciprocal``, a vector divided by a loop-invariant value is multiplied by its
    reciprocal, computed once (within 1.5 ulp of the quotient instead of 0.5)."""
    m = _Vectorize(lanes_of, tail, reduce_unroll, reciprocal)
    body = m.visit(func.body)
    out = func.with_body(body)
    out.attrs["vectorized_loops"] = m.count
    return out
