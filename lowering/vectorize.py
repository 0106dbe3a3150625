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
  ``+ * max min``, or ``X[e] = X[e] - r`` summed as ``X[e] + (-r)``, negation being
  exact), ``X`` accessed nowhere else in the loop except by unit-stride loads
  ``X[v + off]`` that never reach ``e`` over the loop's range (``e - off`` below its
  first or above its last value by a constant after simplification: trisolv's
  ``x[i] -= L[i][j] * x[j]`` for ``j < i``).

Guarantees: the loop becomes ``for v0 in [0, n // (L*U))`` over vector iterations
(``U`` accumulators per reduction, default 4 when the loop reduces, else 1), then a
remainder loop over the leftover full vectors when ``U > 1`` (annotated
``vector_remainder``), then a tail over the last
``n mod L`` iterations: with ``tail="mask"`` an ``AttrStmt("vector_mask", (count, L))``
whose vector loads and stores touch only lanes ``0 <= l < count`` (inactive lanes load
zero), with ``tail="scalar"`` the original scalar loop on the leftover range.  Each
reduction accumulates into ``U`` vector registers (a ``register``-scope buffer,
initialised with the identity of ``op``), combined lane-wise and then horizontally
(``vreduce_<op>`` calls) into ``X[e]`` once.  Statement order within an iteration is
kept for every lane, so each dependence inside an iteration is preserved; reductions
are reassociated (sums are added in a different order than the scalar loop).  A
parallel loop stays parallel over vector iterations; its tail runs after it.

Windows (``window=True``, the CPU backend's option ``vector_window`` on AVX-512): a
serial loop without reductions, masked tails, whose vector loads and stores all lie at
constant offsets from its first vector store's index ``a`` (a 1-D stencil: the rows
of a 2-D or 3-D one at symbolic distances keep the plain form, which measured as fast
on a loaded host), some buffer ``X`` loaded at offsets that are not all multiples of
``L`` (a stencil's ``X[i-1], X[i], X[i+1]``), and one of them a multiple, runs as

    let h = min(n, valign_peel(&S[a at m]) + L)   -- to the next L-aligned store, + L
    head: [m, m + h) as up to two masked vectors
    for v0 in [0, max(0, (n-h) // L - 1)): body at m + h + v0*L, each X[a + k]
        (k = qL + r, 0 < r < L) read as valign(X[a + (q+1)L ..], X[a + qL ..], r)
    tail: the rest (L to 2L - 1 iterations, or fewer) as up to two masked vectors

so the store ``S[a ..]`` is aligned whatever the array's alignment, and ``X``'s loads
are aligned where ``X`` and ``S`` share their alignment (PolyBench's arrays do); the
values read are the same, so the result is the plain form's for any alignment.  A
window reads up to ``L - 1`` elements beyond the plain load on one side; the extra
vector in the head and the one left to the tail keep every such read within the
elements the loop reads anyway (``m + k .. m + n - 1 + k``), so nothing outside the
arrays is touched (masked lanes are not read).  The iterations run in the same chunks
of consecutive lanes as before, only cut at other points: nothing the conditions
above allow depends on where a vector starts.

Aligned rows (same option, AVX-512): a serial loop as above whose offsets from its first
vector store are not all constants (a 2-D or 3-D stencil's rows), that stores two buffers
or more (statements sharing the row loop: the C-SCoP stencil path's time tiles) and
loads some buffer at two offsets a constant apart that is not a multiple of ``L``, keeps
the plain body but starts it at the store of its busiest array aligned at run time: a
masked head of ``0 <= h < L`` lanes, the full vectors, a masked tail
(:func:`_aligned_rows`).  Same values, bitwise; nothing outside the plain form's
elements is touched.

Carried windows (same form): a row of such a loop read at ``X[b]`` and at ``X[b + k]``,
``0 < |k| < L`` (indices a constant apart as polynomials: ``hz[i][j-1]`` beside
``hz[i][j]``), that no store of the loop touches, is read through registers: each full
vector but the first and the last loads one vector of the row (``X[b + L]`` when some
``k > 0``, else ``X[b]``), reads ``X[b + k]`` as a lane shift of the vectors kept from
the previous iterations, and rotates them (:func:`_carries`).  The proof that the loop
stores none of the row (:func:`_rows_apart`): every store of ``X``, ``s(v)``, and the
row's ``b(v)`` differ by a polynomial with ``s - b + n - 1`` or ``b - s + n - 1`` a
negative constant (the stored row a whole loop span away: fdtd-2d's ``hz[i-1][j]``
against ``hz[i][j]``, ``ny`` apart for a loop of ``ny - 2``); otherwise, and in a body
with a condition or a select, the row keeps its loads.  Every carried vector is one the
plain form loads unmasked, so the same values are read, nothing more.

Vector IR conventions (what :mod:`polycomp.hw.cpu.vector_printer` prints): a vector
load/store has ``lanes = L`` and index ``Ramp(base, stride, L)`` (stride 1 for stores);
``Broadcast`` splats a scalar; ``Call("vlane_range", (lo, hi, L))`` is the mask of lanes
``lo <= l < hi``; comparisons of vectors are masks; ``Call("vreduce_add"|..., (vector,))``
is a scalar.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import replace

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.scheduler.common import marks

from .simplify import simplify
from .vectorize_analysis import (  # noqa: F401  (re-exported for the CPU passes)
    _CMP,
    REDUCE_OPS,
    VECTOR_DTYPES,
    VECTOR_MATH,
    Unvectorizable,
    _Analysis,
    _Plan,
    _Refuse,
    affine_in,
    has_loop,
    identity,
    index_coeff,
    uses,
)

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
                new: ir.Expr = ir.Binary(red.op, old, self.w.expr(red.rest), p.dtype)
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


def analyse(loop: ir.For, lanes_of):
    """``(dtype, lanes)`` if ``loop`` meets the conditions of the module docstring (its
    reductions included), else raises :class:`Unvectorizable`."""
    plan = _Analysis(loop, lanes_of).run()
    return plan.dtype, plan.lanes


def vectorize_loop(loop: ir.For, lanes_of, tail: str = "mask", reduce_unroll: int = 4,
                   reciprocal: bool = False, acc_ids: Iterator[int] | None = None,
                   window: bool = False):
    """The vector form of ``loop`` (see the module docstring), or None if it does not
    qualify.  ``acc_ids`` numbers the reduction accumulators (``vacc1``, ``vacc2``, ...);
    one counter per function keeps the names unique in it and independent of whatever
    was compiled before (a fresh counter when not given)."""
    acc_ids = acc_ids if acc_ids is not None else itertools.count(1)
    try:
        an = _Analysis(loop, lanes_of)
        plan = an.run()
        if window and not plan.reductions and tail == "mask" and loop.kind == "serial" \
                and not (isinstance(loop.extent, ir.IntImm) and loop.extent.value < 2 * plan.lanes):
            def body_at(base, slot, lane_mask=None):
                w = Widen(loop.var, base, plan.dtype, plan.lanes, an.vector_lets,
                          reciprocal=reciprocal)
                return _Body(plan, w, slot, lane_mask).stmt(loop.body)
            out = _windowed(loop, ir.Var(loop.var.name + "_v"), body_at, plan.lanes, plan.dtype,
                            acc_ids)
            if out is not None:
                return out
        return _build(loop, an, plan, tail, reduce_unroll, reciprocal, acc_ids)
    except _Refuse:
        return None


def _build(loop, an, plan, tail, reduce_unroll, reciprocal, acc_ids):
    L, D = plan.lanes, plan.dtype
    v, m, n = loop.var, loop.min, loop.extent
    U = reduce_unroll if plan.reductions else 1
    for red in plan.reductions.values():
        red.acc = ir.Buffer(f"vacc{next(acc_ids)}", D, (ir.IntImm(L * U),), scope="register",
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
                            body_at(simplify(m + v1 * L), 0),
                            ann + (("vector_remainder", True),)))
    tail_base = simplify(m + n_vec * L)
    count = simplify(n - n_vec * L)
    finals = []
    for red in plan.reductions.values():
        s = red.store
        vec: ir.Expr = _acc_ref(red.acc, 0, L, D)
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
            t = ir.AttrStmt(marks.VECTOR_MASK, (count, L), body_at(tail_base, 0, mask))
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


# --------------------------------------------------------------------------- windows
#: ``Call(VALIGN, (hi, lo, IntImm(r)))``: lanes ``r .. L-1`` of ``lo`` then lanes ``0 ..
#: r-1`` of ``hi`` (AVX-512 ``valignq``/``valignd``), i.e. the vector ``L`` elements long
#: that starts ``r`` elements into ``lo`` when ``hi`` follows ``lo`` in memory
VALIGN = "valign"
#: the IR attribute around a dot-product register tile (made by
#: :mod:`polycomp.hw.cpu.microkernel`): its body is printed as a function of its own
#: (:meth:`polycomp.hw.cpu.vector_printer.VectorPrinter.outline`); here, beside the other
#: vector IR keys, so that lowering passes (:mod:`polycomp.lowering.index_cse`) read it
OUTLINE = "outline"
#: For annotation of the loops :mod:`polycomp.lowering.lift` builds (vector code
#: already; this pass leaves them as they are)
LIFTED = "lifted"
#: ``Call(ALIGN_PEEL, (Load(buf, (i,)), IntImm(L)))``: the number ``0 <= p < L`` of
#: elements from ``&buf[i]`` to the next address that is a multiple of ``L`` elements
ALIGN_PEEL = "valign_peel"


def _first_vector_store(s) -> ir.Store | None:
    found: list[ir.Store] = []
    ir.walk(s, lambda n: found.append(n) if isinstance(n, ir.Store) and n.lanes > 1
            else None)
    return found[0] if found else None


def window_loads(body: ir.Stmt, anchor: ir.Expr, L: int, D: str) -> tuple[ir.Stmt, int]:
    """``body`` (one vector iteration) with each unmasked unit-stride vector load ``X[a +
    k .. a + k + L)``, ``a`` the ``anchor`` (the index of the store the loop is aligned
    to) and ``k`` a constant not a multiple of ``L``, of a buffer ``X`` also loaded at
    some ``X[a + jL ..]``, read as ``valign(X[a + (q+1)L ..], X[a + qL ..], r)`` (``k =
    qL + r``): loads at offsets that are multiples of ``L`` (aligned where ``X[a]`` is)
    and lane shifts, the same values.  Returns the new body and the number of loads
    rewritten."""
    anchored: set = set()

    def offset(ld) -> int | None:
        if not (isinstance(ld, ir.Load) and ld.lanes == L and ld.dtype == D):
            return None
        r = ld.indices[0]
        if not (isinstance(r, ir.Ramp) and ir.is_const(r.stride, 1)):
            return None
        k = simplify(r.base - anchor)
        return k.value if isinstance(k, ir.IntImm) else None

    def mark(n):
        k = offset(n)
        if k is not None and k % L == 0:
            anchored.add(n.buffer)
    ir.walk(body, mark)
    count = [0]

    def at(buf, k):
        return ir.Load(buf, (ir.Ramp(simplify(anchor + k), ir.IntImm(1), L),), D, L)

    class _W(ir.Mutator):
        def visit_Load(self, e):
            k = offset(e)
            if k is None or k % L == 0 or e.buffer not in anchored:
                return self.generic(e)
            q, r = divmod(k, L)
            count[0] += 1
            return ir.Call(VALIGN, (at(e.buffer, (q + 1) * L), at(e.buffer, q * L),
                                    ir.IntImm(r)), D)

    return _W().visit(body), count[0]


def _windowed(loop: ir.For, v0: ir.Var, body_at, L: int, D: str,
              acc_ids: Iterator[int]) -> ir.Stmt | None:
    """The windowed form of the vector loop (see :func:`vectorize`), or None when no
    load of its body is windowed (the loop keeps the plain form)."""
    v, m, n = loop.var, loop.min, loop.extent
    plain = body_at(simplify(m + v0 * L), 0)
    first = _first_vector_store(plain)
    if first is None:
        return None
    anchor = first.indices[0].base
    offsets: list = []
    ir.walk(plain, lambda e: offsets.append(simplify(e.indices[0].base - anchor))
            if isinstance(e, (ir.Load, ir.Store)) and e.lanes > 1 else None)
    if not all(isinstance(k, ir.IntImm) for k in offsets):
        # a 2-D/3-D stencil's other rows: windows measured no faster there (docs), an
        # aligned start of the plain form is (fdtd-2d's shared row loop)
        return _aligned_rows(loop, v0, body_at, plain, L, D, acc_ids)
    main, count = window_loads(plain, anchor, L, D)
    if not count:
        return None
    at_m = _first_vector_store(body_at(m, 0))
    assert at_m is not None
    addr = ir.Load(at_m.buffer, (at_m.indices[0].base,), at_m.buffer.dtype)
    # the head: the lanes up to the aligned store, then one more vector, so that the
    # first window's lower load stays at or above the lowest element the loop reads
    head_n = simplify(ir.min_(n, ir.Call(ALIGN_PEEL, (addr, ir.IntImm(L)), "int64") + L))
    hn = ir.Var(v.name + "_pl", "int64")
    gt0 = lambda e: ir.Binary(">", e, ir.IntImm(0), "bool")   # noqa: E731

    def masked(base, count):          # up to 2L iterations as two masked vectors
        c1, c2 = simplify(ir.min_(count, ir.IntImm(L))), simplify(count - L)
        return ir.seq(
            ir.IfThenElse(gt0(c1), ir.AttrStmt(marks.VECTOR_MASK, (c1, L), body_at(
                base, 0, lane_range(ir.IntImm(0), c1, L)))),
            ir.IfThenElse(gt0(c2), ir.AttrStmt(marks.VECTOR_MASK, (c2, L), body_at(
                simplify(base + L), 0, lane_range(ir.IntImm(0), c2, L)))))
    rest = simplify(n - hn)
    # ... and the last full vector runs outside the windows, so the last window's upper
    # load stays at or below the highest element read
    n_win = simplify(ir.max_(ir.IntImm(0), rest // L - 1))
    plain_main = body_at(simplify(m + hn + v0 * L), 0)
    first = _first_vector_store(plain_main)
    assert first is not None
    main, _ = window_loads(plain_main, first.indices[0].base, L, D)
    ann = tuple((k, val) for k, val in loop.annotations) + (("vectorized", L),
                                                           ("vector_window", True))
    body = ir.For(v0, ir.IntImm(0), n_win, "serial", main, ann)
    tail = masked(simplify(m + hn + n_win * L), simplify(rest - n_win * L))
    out: ir.Stmt = ir.LetStmt(hn, head_n, ir.seq(masked(m, hn), body, tail))
    if not isinstance(n, ir.IntImm):
        out = ir.IfThenElse(gt0(n), out)
    return out


def _stencil_row(body: ir.Stmt, L: int) -> bool:
    """Whether ``body`` (one vector iteration) stores two buffers or more (the statements
    of a stencil sharing their row loop: the C-SCoP stencil path's time tiles) and loads
    some buffer at two unit-stride indices a constant apart that is not a multiple of
    ``L`` (a stencil's ``X[i][j-1]`` beside ``X[i][j]``)."""
    stored: set = set()
    ir.walk(body, lambda e: stored.add(e.buffer) if isinstance(e, ir.Store) and e.lanes == L
            else None)
    if len(stored) < 2:
        return False
    bases: dict = {}
    ir.walk(body, lambda e: bases.setdefault(e.buffer, []).append(e.indices[0].base)
            if isinstance(e, ir.Load) and e.lanes == L and isinstance(e.indices[0], ir.Ramp)
            and ir.is_const(e.indices[0].stride, 1) else None)
    for found in bases.values():
        for a, b in itertools.combinations(found, 2):
            k = simplify(a - b)
            if isinstance(k, ir.IntImm) and k.value % L:
                return True
    return False


def _most_used_store(body: ir.Stmt, L: int) -> ir.Store:
    """The first vector store in ``body`` of the buffer with the most vector loads and
    stores in it (the first stored buffer on a tie): the store an aligned-row loop is
    aligned to.  Arrays need not share their alignment (the PolyBench bench's numpy
    copies of fdtd-2d's ``ex``, ``ey``, ``hz`` start 0, 16 and 32 bytes past a cache
    line); aligning the busiest one aligns the most accesses."""
    count: dict = {}
    stores: list[ir.Store] = []

    def visit(e):
        if isinstance(e, (ir.Load, ir.Store)) and e.lanes == L:
            count[e.buffer] = count.get(e.buffer, 0) + 1
            if isinstance(e, ir.Store):
                stores.append(e)
    ir.walk(body, visit)
    assert stores
    return max(stores, key=lambda st: (count[st.buffer], -stores.index(st)))


def _aligned_rows(loop: ir.For, v0: ir.Var, body_at, plain: ir.Stmt, L: int, D: str,
                  acc_ids: Iterator[int]) -> ir.Stmt | None:
    """The *aligned-row* form of a stencil row loop whose accesses lie on several rows
    (offsets from the first vector store that are not all constants; see
    :func:`vectorize`) shared by several statements, or None when its body stores one
    buffer or has no neighbour loads (:func:`_stencil_row`: such loops keep the plain
    form)::

        let h = min(n, valign_peel(&S[a at m]))   -- to the next L-aligned store
        head: [m, m + h) as one masked vector (h < L)
        for v0 in [0, (n - h) // L): body at m + h + v0*L   (the plain body, no windows)
        tail: the rest (< L iterations) as one masked vector

    The store ``S`` (:func:`_most_used_store`) is aligned in the main loop, and so is
    every access of an array that shares ``S``'s alignment at an offset a multiple of
    ``L``.  Why: a 512-bit access runs as two 256-bit halves on AMD's Zen 4, a half
    that crosses a cache line costs more, and no half crosses at a 32-byte boundary
    (fdtd-2d's row, three stores and eight loads: 3.2-3.3 ns per vector with its
    stores at a 64-byte boundary, 3.4 at a 32-byte one, 4.2-4.8 otherwise).  The
    iterations run in the same chunks of consecutive lanes, only cut at other points;
    every element read or written is one the plain form touches, so the result is the
    plain form's bit for bit.

    With carried rows (:func:`_carries`), the full vectors run as ``if n_vec > 2: (the
    registers' first vectors; vector 0 plain; vectors 1 .. n_vec - 2 carried
    (:func:`_carried_body`); vector n_vec - 1 plain) else: the plain loop``."""
    if not _stencil_row(plain, L):
        return None
    v, m, n = loop.var, loop.min, loop.extent
    at_m = _most_used_store(body_at(m, 0), L)
    addr = ir.Load(at_m.buffer, (at_m.indices[0].base,), at_m.buffer.dtype)
    head_n = simplify(ir.min_(n, ir.Call(ALIGN_PEEL, (addr, ir.IntImm(L)), "int64")))
    hn = ir.Var(v.name + "_pl", "int64")
    gt0 = lambda e: ir.Binary(">", e, ir.IntImm(0), "bool")   # noqa: E731

    def masked(base, count):          # fewer than L iterations as one masked vector
        return ir.IfThenElse(gt0(count), ir.AttrStmt(marks.VECTOR_MASK, (count, L), body_at(
            base, 0, lane_range(ir.IntImm(0), count, L))))
    rest = simplify(n - hn)
    n_vec = simplify(rest // L)
    ann = tuple((k, val) for k, val in loop.annotations) + (("vectorized", L),
                                                           ("vector_aligned", True))
    main_at = lambda k: simplify(m + hn + k * L)        # noqa: E731
    body: ir.Stmt = ir.For(v0, ir.IntImm(0), n_vec, "serial", body_at(main_at(v0), 0), ann)
    carries = _carries(loop, body_at, L, D)
    first_stored = sum(c.slots for c in carries)
    stored = _stored_windows(loop, body_at, L, D, first_stored)
    if carries or stored:
        # carried windows: the first and the last full vector in the plain form, the
        # ones between with each carried row rotated through registers
        reg = ir.Buffer(f"vwin{next(acc_ids)}", D,
                        (ir.IntImm(L * (first_stored + 2 * len(stored))),),
                        scope="register", flat=True)
        inner = ir.For(v0, ir.IntImm(1), simplify(n_vec - 2), "serial", _carried_body(
            loop, body_at(main_at(v0), 0), main_at(v0), carries, reg, L, D, stored),
            ann + (("vector_carried", True),))
        body = ir.IfThenElse(ir.Binary(">", n_vec, ir.IntImm(2), "bool"), ir.Allocate(
            reg, ir.seq(_carry_inits(loop, main_at(ir.IntImm(1)), carries, reg, L, D),
                        body_at(main_at(ir.IntImm(0)), 0),
                        _stored_inits(loop, main_at(ir.IntImm(1)), stored, reg, L, D),
                        inner, body_at(main_at(simplify(n_vec - 1)), 0))), body)
    tail = masked(simplify(m + hn + n_vec * L), simplify(rest - n_vec * L))
    out: ir.Stmt = ir.LetStmt(hn, head_n, ir.seq(masked(m, hn), body, tail))
    if not isinstance(n, ir.IntImm):
        out = ir.IfThenElse(gt0(n), out)
    return out


# --------------------------------------------------------------------------- carried windows


def _poly(e) -> dict | None:
    """``e`` (an integer index expression of ``+ - *``, integer constants and Vars) as a
    polynomial: monomial (sorted tuple of Var names) -> coefficient, zero terms dropped;
    None for anything else.  Unlike :func:`simplify` it distributes products, so two row
    indices ``(r - 1) * ny + j`` and ``r * ny + j`` differ by ``-ny``."""
    if isinstance(e, ir.IntImm):
        return {(): e.value} if e.value else {}
    if isinstance(e, ir.Var):
        return {(e.name,): 1} if e.dtype in dt.INTS else None
    if isinstance(e, ir.Unary) and e.op == "neg":
        a = _poly(e.a)
        return None if a is None else {k: -c for k, c in a.items()}
    if not (isinstance(e, ir.Binary) and e.op in ("+", "-", "*")):
        return None
    a, b = _poly(e.a), _poly(e.b)
    if a is None or b is None:
        return None
    out = dict(a)
    if e.op == "*":
        out = {}
        for ka, ca in a.items():
            for kb, cb in b.items():
                k = tuple(sorted(ka + kb))
                out[k] = out.get(k, 0) + ca * cb
    else:
        s = -1 if e.op == "-" else 1
        for k, c in b.items():
            out[k] = out.get(k, 0) + s * c
    return {k: c for k, c in out.items() if c}


def _poly_const(a: ir.Expr, b: ir.Expr) -> int | None:
    """``a - b`` when it is a constant polynomial, else None."""
    d = _poly(ir.Binary("-", a, b, "int64"))
    if d is None or any(k != () for k in d):
        return None
    return d.get((), 0)


#: the index polynomials for other passes (hw/cpu/jam.py's fusion proof)
index_poly = _poly
index_poly_const = _poly_const


def _unit_base(e, L: int, D: str):
    """The base of an unmasked unit-stride ``L``-lane load/store of dtype ``D``, or None."""
    if isinstance(e, (ir.Load, ir.Store)) and e.lanes == L and e.buffer.dtype == D \
            and len(e.indices) == 1 and isinstance(e.indices[0], ir.Ramp) \
            and ir.is_const(e.indices[0].stride, 1):
        return e.indices[0].base
    return None


class _Carry:
    """One carried window: the row of buffer ``buf`` read at ``anchor + k``, ``k`` in
    ``offsets`` (all in ``(-L, L)``, 0 among them), kept in the register buffer ``reg``:
    slot ``P`` the vector before the anchor's (when some ``k < 0``), ``C`` the anchor's,
    ``N`` the next one (when some ``k > 0``)."""

    def __init__(self, buf: ir.Buffer, anchor: ir.Expr, offsets: set, first_slot: int):
        self.buf, self.anchor, self.offsets = buf, anchor, offsets
        slot = itertools.count(first_slot)
        self.P = next(slot) if min(offsets) < 0 else None
        self.C = next(slot)
        self.N = next(slot) if max(offsets) > 0 else None
        self.slots = 1 + (self.P is not None) + (self.N is not None)


def _rows_apart(loop: ir.For, body: ir.Stmt, carry_buf: ir.Buffer, anchor_at_v: ir.Expr,
                L: int, D: str) -> bool:
    """Whether no store of the loop (any iteration ``v`` in ``[m, m + n)``) writes an
    element of ``carry_buf`` the carried window holds (the anchor's elements
    ``anchor(v)`` over the same range): every vector store of that buffer lies, as a
    polynomial in the loop's variables and parameters, a whole loop span away, i.e.
    ``s(v) - c(v) + n - 1`` or ``c(v) - s(v) + n - 1`` is negative (:func:`_span_below`;
    fdtd-2d: the store to ``hz[i-1][j]`` against the carried ``hz[i][j]``, ``-ny + (ny
    - 2) - 1``)."""
    n = loop.extent
    stores: list = []
    ir.walk(body, lambda e: stores.append(e)
            if isinstance(e, ir.Store) and e.buffer is carry_buf else None)
    for s in stores:
        base = _unit_base(s, L, D)
        if base is None:
            return False
        if not (_span_below(base, anchor_at_v, n) or _span_below(anchor_at_v, base, n)):
            return False
    return True


def _loads_of(e: ir.Expr, buf: ir.Buffer) -> list:
    """The loads of ``buf`` in ``e``."""
    out: list = []
    ir.walk(e, lambda n: out.append(n) if isinstance(n, ir.Load) and n.buffer is buf
            else None)
    return out


def _stored_after_reads(loop: ir.For, body: ir.Stmt, buf: ir.Buffer, anchor: ir.Expr,
                        L: int, D: str) -> bool:
    """Whether the loop stores the row of ``buf`` read at ``anchor + k`` (``k >= 0``)
    only at the anchor itself, after every load of the row in the iteration (the
    statement that stores it may read it), and every other store of ``buf`` lies a whole
    loop span away.  Then the vectors a carried window holds (``C = X[b]``, ``N = X[b +
    L]``, loaded the iteration before or at the iteration's start) are what the loads
    read: this iteration's store comes after them, the previous one's covered ``[b - L,
    b)`` (fdtd-2d with two steps per row pass: ``ex[i-1][j]``, ``ex[i-1][j+1]`` read by
    step ``t``, ``ex[i-1][j]`` then stored by step ``t + 1``)."""
    stores: list = []
    ir.walk(body, lambda e: stores.append(e) if isinstance(e, ir.Store) else None)
    stored = False
    for st in stores:
        loads = _loads_of(st.value, buf)
        if stored and any(_poly_const(ld.indices[0].base, anchor) is not None
                          for ld in loads if _unit_base(ld, L, D) is not None) or \
                stored and any(_unit_base(ld, L, D) is None for ld in loads):
            return False
        if st.buffer is not buf:
            continue
        base = _unit_base(st, L, D)
        if base is None:
            return False
        if _poly_const(base, anchor) == 0:
            stored = True
        elif not (_span_below(base, anchor, loop.extent)
                  or _span_below(anchor, base, loop.extent)):
            return False
    return True


def _span_below(a: ir.Expr, b: ir.Expr, n: ir.Expr) -> bool:
    """Whether ``a - b + n - 1 < 0`` provably: ``a - b + n - 1 + k n`` is a negative
    constant for some ``k`` in 0..3 (``n >= 0``, a loop that runs; rows two or three
    apart: ``-2 ny + (ny - 2) - 1 + ny``)."""
    x = ir.Binary("-", ir.Binary("+", ir.Binary("-", a, b, "int64"), n, "int64"),
                  ir.IntImm(1), "int64")
    for k in range(4):
        c = _poly_const(ir.Binary("+", x, ir.Binary("*", ir.IntImm(k), n, "int64"), "int64"),
                        ir.IntImm(0))
        if c is not None and c < 0:
            return True
    return False


def _unconditional(body, want) -> list | None:
    """The nodes of ``body`` (in walk order) for which ``want`` holds, or None when
    ``body`` holds a ``select``, a condition or an attribute (a masked access would
    touch fewer lanes than a whole vector: no window is built then)."""
    found: list = []
    bad = [False]

    def visit(e):
        if isinstance(e, (ir.Select, ir.IfThenElse, ir.AttrStmt)):
            bad[0] = True
        if want(e):
            found.append(e)
    ir.walk(body, visit)
    return None if bad[0] else found


def _carries(loop: ir.For, body_at, L: int, D: str) -> list[_Carry]:
    """The carried windows of an aligned-row loop, found on its body widened at the loop
    variable ``v`` (indices as functions of ``v``): for each buffer, the unit-stride
    loads whose bases lie constants apart (one row), when the row has a load at some
    base ``b`` and others at ``b + k``, ``0 < |k| < L``, and no store of the loop touches
    the row (:func:`_rows_apart`) or, with every ``k >= 0``, the loop stores the row only
    at ``b`` after reading it (:func:`_stored_after_reads`).  ``b`` is the member at the
    aligned store's column (its offset from the busiest store's base has a constant term
    that is a multiple of ``L``) when there is one.  None at all when the body holds a
    ``select`` or a condition (a masked load would read fewer lanes than a carried
    vector)."""
    body = body_at(loop.var, 0)
    found = _unconditional(body, lambda e: isinstance(e, ir.Load)
                           and _unit_base(e, L, D) is not None)
    if found is None:
        return []
    align_base = _most_used_store(body, L).indices[0].base
    rows: list = []                    # [buffer, [distinct bases]]
    for ld in found:
        base = ld.indices[0].base
        for row in rows:
            if row[0] is ld.buffer and _poly_const(base, row[1][0]) is not None:
                if all(_poly_const(base, b) != 0 for b in row[1]):
                    row[1].append(base)
                break
        else:
            rows.append([ld.buffer, [base]])
    out: list[_Carry] = []
    slot = 0
    for buf, bases in rows:
        if len(bases) < 2:
            continue

        def aligned(b):
            d = _poly(ir.Binary("-", b, align_base, "int64"))
            return d is not None and d.get((), 0) % L == 0
        anchor = next((b for b in bases if aligned(b)), bases[0])
        offsets = {_poly_const(b, anchor) for b in bases}
        if any(k is None or abs(k) >= L for k in offsets):
            continue
        ahead = min(k for k in offsets if k is not None) >= 0
        if not (_rows_apart(loop, body, buf, anchor, L, D) or (
                ahead and _stored_after_reads(loop, body, buf, anchor, L, D))):
            continue
        c = _Carry(buf, anchor, offsets, slot)
        slot += c.slots
        out.append(c)
    return out


class _Stored:
    """A stored-row window: the loop stores ``buf`` at ``anchor`` (one vector per
    iteration) and a later statement of the iteration loads ``buf[anchor + k]``, ``k`` in
    ``offsets`` (all in ``(-L, 0)``): slot ``S`` holds this iteration's stored vector,
    ``P`` the previous iteration's."""

    def __init__(self, buf: ir.Buffer, anchor: ir.Expr, offsets: set, first_slot: int):
        self.buf, self.anchor, self.offsets = buf, anchor, offsets
        self.S, self.P = first_slot, first_slot + 1


def _stored_windows(loop: ir.For, body_at, L: int, D: str, first_slot: int) -> list[_Stored]:
    """The stored-row windows of an aligned-row loop (see :class:`_Stored`): a vector
    store ``X[b] = e`` followed, in a later statement of the same iteration, by loads
    ``X[b + k]``, ``-L < k < 0`` (fdtd-2d jammed two steps per row pass,
    :mod:`polycomp.hw.cpu.jam`: the second step's ``hz[i-1][j-1]`` after the first
    step's store of ``hz[i-1][j]``), when every other store of ``X`` in the loop lies a
    whole loop span away (:func:`_span_below`).  Then the elements ``[b + k, b)`` were
    last written by the previous iteration's store and ``[b, b + L + k)`` by this
    iteration's, so ``valign(S, P, L + k)`` is what the load reads -- without a load
    that spans two pending stores (the store-to-load forward fails and waits for both:
    the jammed fdtd-2d row ran 1.5x slower with that load).  None when the body holds a
    ``select`` or a condition."""
    body = body_at(loop.var, 0)
    stores = _unconditional(body, lambda e: isinstance(e, ir.Store))
    if stores is None:
        return []
    out: list[_Stored] = []
    for q, st in enumerate(stores):
        b = _unit_base(st, L, D)
        if b is None:
            continue
        ks = _offsets_behind(stores[q + 1:], st.buffer, b, L, D)
        if not ks:
            continue
        others = [o for o in stores if o is not st and o.buffer is st.buffer]
        if any(_unit_base(o, L, D) is None or not (
                _span_below(o.indices[0].base, b, loop.extent)
                or _span_below(b, o.indices[0].base, loop.extent)) for o in others):
            continue
        out.append(_Stored(st.buffer, b, ks, first_slot + 2 * len(out)))
    return out


def _offsets_behind(stores: list, buf: ir.Buffer, b: ir.Expr, L: int, D: str) -> set:
    """The ``k`` in ``(-L, 0)`` of the unit-stride loads ``buf[b + k]`` in ``stores``'
    values."""
    loads: list = []
    for st in stores:
        ir.walk(st.value, lambda e: loads.append(e) if isinstance(e, ir.Load)
                and e.buffer is buf and _unit_base(e, L, D) is not None else None)
    ks = {_poly_const(ld.indices[0].base, b) for ld in loads}
    return {k for k in ks if k is not None and -L < k < 0}


def _stored_inits(loop: ir.For, at: ir.Expr, stored: list[_Stored], reg: ir.Buffer,
                  L: int, D: str) -> ir.Stmt:
    """After the plain first vector: ``P = X[b(at) - L]`` (what that vector stored)."""
    return ir.seq(*[_acc_store(reg, w.P, L, ir.Load(w.buf, (ir.Ramp(
        simplify(ir.substitute(w.anchor, {loop.var: at}) - L), ir.IntImm(1), L),), D, L))
        for w in stored])


class _StoredRows(ir.Mutator):
    """The stored-row windows' part of :func:`_carried_body`: a window's store ``X[b] =
    e`` becomes ``S = e; X[b] = S``, a later load ``X[b + k]`` ``valign(S, P, L + k)``."""

    def __init__(self, loop: ir.For, at: ir.Expr, stored, reg: ir.Buffer, L: int, D: str):
        self.L, self.D, self.reg = L, D, reg
        self.at = [(w, simplify(ir.substitute(w.anchor, {loop.var: at}))) for w in stored]
        self.seen: set = set()

    def slot(self, k: int) -> ir.Load:
        return _acc_ref(self.reg, k, self.L, self.D)

    def visit_Store(self, st):
        out = self.generic(st)
        base = _unit_base(st, self.L, self.D)
        for w, b in self.at:
            if base is not None and st.buffer is w.buf and _poly_const(base, b) == 0:
                self.seen.add(w.S)
                return ir.seq(_acc_store(self.reg, w.S, self.L, out.value),
                              replace(out, value=self.slot(w.S)))
        return out

    def stored_load(self, e: ir.Load, base) -> ir.Expr | None:
        for w, b in self.at:
            if base is None or e.buffer is not w.buf or w.S not in self.seen:
                continue
            k = _poly_const(base, b)
            if k is not None and -self.L < k < 0:
                return ir.Call(VALIGN, (self.slot(w.S), self.slot(w.P),
                                        ir.IntImm(self.L + k)), self.D)
        return None


def _carried_body(loop: ir.For, main: ir.Stmt, at: ir.Expr, carries: list[_Carry],
                  reg: ir.Buffer, L: int, D: str, stored: Sequence[_Stored] = ()) -> ir.Stmt:
    """``main`` (one vector iteration at ``v = at``) with each carried row's loads read
    from ``reg``: ``X[b]`` the slot ``C``, ``X[b + k]`` ``valign(C, P, L + k)`` for ``k
    < 0`` and ``valign(N, C, k)`` for ``k > 0``; the iteration first loads one vector
    of the row (``N = X[b + L]`` when some ``k > 0``, else ``C = X[b]``) and ends by
    rotating (``P = C``, ``C = N``); with stored-row windows (``stored``,
    :class:`_StoredRows`) it ends with ``P = S`` for each."""
    slot = lambda k: _acc_ref(reg, k, L, D)            # noqa: E731
    anchors = [(c, simplify(ir.substitute(c.anchor, {loop.var: at}))) for c in carries]

    class _R(_StoredRows):
        def visit_Load(self, e):
            base = _unit_base(e, L, D)
            got = self.stored_load(e, base)
            if got is not None:
                return got
            for c, b in anchors:
                if base is None or e.buffer is not c.buf:
                    continue
                k = _poly_const(base, b)
                if k is None:
                    continue
                assert k in c.offsets, (k, c.offsets)
                if k == 0:
                    return slot(c.C)
                if k < 0:
                    return ir.Call(VALIGN, (slot(c.C), slot(c.P), ir.IntImm(L + k)), D)
                return ir.Call(VALIGN, (slot(c.N), slot(c.C), ir.IntImm(k)), D)
            return self.generic(e)

    def row(buf, b):
        return ir.Load(buf, (ir.Ramp(b, ir.IntImm(1), L),), D, L)
    first, last = [], []
    for c, b in anchors:
        if c.N is not None:
            first.append(_acc_store(reg, c.N, L, row(c.buf, simplify(b + L))))
        else:
            first.append(_acc_store(reg, c.C, L, row(c.buf, b)))
        if c.P is not None:
            last.append(_acc_store(reg, c.P, L, slot(c.C)))
        if c.N is not None:
            last.append(_acc_store(reg, c.C, L, slot(c.N)))
    for w in stored:
        last.append(_acc_store(reg, w.P, L, slot(w.S)))
    body = _R(loop, at, stored, reg, L, D).visit(main)
    # one flat run of stores (a stored window's store is two): forward-loads' runs
    return ir.seq(*first, *(body.stmts if isinstance(body, ir.Block) else (body,)), *last)


def _carry_inits(loop: ir.For, at: ir.Expr, carries: list[_Carry], reg: ir.Buffer,
                 L: int, D: str) -> ir.Stmt:
    """The registers before the carried loop's first iteration ``v = at``: ``P = X[b(at)
    - L]`` and ``C = X[b(at)]`` where used (both vectors the plain form reads: the first
    iteration runs at ``at - L``, a full vector of the plain form)."""
    out = []
    for c in carries:
        b = simplify(ir.substitute(c.anchor, {loop.var: at}))
        if c.P is not None:
            out.append(_acc_store(reg, c.P, L, ir.Load(
                c.buf, (ir.Ramp(simplify(b - L), ir.IntImm(1), L),), D, L)))
        if c.N is not None:
            out.append(_acc_store(reg, c.C, L, ir.Load(
                c.buf, (ir.Ramp(b, ir.IntImm(1), L),), D, L)))
    return ir.seq(*out)


class _Vectorize(ir.Mutator):
    def __init__(self, lanes_of, tail, reduce_unroll, reciprocal, window=False):
        self.lanes_of, self.tail, self.reduce_unroll = lanes_of, tail, reduce_unroll
        self.reciprocal = reciprocal
        self.window = window
        self.count = 0
        self.acc_ids = itertools.count(1)      # accumulator names, per function

    def visit_For(self, s):
        if s.annotation(LIFTED):        # already vector code (lowering/lift.py)
            return s
        body = self.visit(s.body)
        s = s if body is s.body else replace(s, body=body)
        if s.kind in ("serial", "parallel", "vectorized") and not has_loop(s.body):
            out = vectorize_loop(s, self.lanes_of, self.tail, self.reduce_unroll,
                                 self.reciprocal, self.acc_ids, self.window)
            if out is not None:
                self.count += 1
                return out
        return s


def vectorize(func: ir.LoweredFunc, lanes_of, tail: str = "mask",
              reduce_unroll: int = 4, reciprocal: bool = False,
              window: bool = False) -> ir.LoweredFunc:
    """Vectorise every qualifying innermost loop of ``func`` (see the module docstring).
    ``lanes_of(dtype)`` gives the vector length (1: no vectors of that dtype).  With
    ``reciprocal``, a vector divided by a loop-invariant value is multiplied by its
    reciprocal, computed once (within 1.5 ulp of the quotient instead of 0.5)."""
    m = _Vectorize(lanes_of, tail, reduce_unroll, reciprocal, window)
    body = m.visit(func.body)
    out = func.with_body(body)
    out = out.counted(vectorized_loops=m.count)
    return out
