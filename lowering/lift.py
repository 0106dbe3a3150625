"""IR pass: 1-D stencil sweeps on a lane-transposed ("dimension-lifted") layout.

A 1-D stencil ``for t: { for i in [lo, n - d): Y1[i] = f1(X[i-1], X[i], X[i+1], ..);
for i ..: Y2[i] = f2(..) }`` vectorised along ``i`` reads ``X[i-1]`` and ``X[i+1]`` as
lane shifts (or misaligned loads) of the vectors at ``i``: two shuffles per vector
besides the arithmetic, which on AVX-512 hosts that run 512-bit operations in two
halves bounds the sweep (docs/c_frontend.md, jacobi-1d).  With the elements of each
array ``X`` of extent ``n`` copied to ``Xt`` so that lane ``l`` of vector ``j`` holds
``X[l*M + j]`` (``M = ceil(n / L)``; Henretty et al., CC 2011, "data layout
transformation for stencil computations"), the neighbours of vector ``j`` are the
vectors ``j - 1`` and ``j + 1``: aligned loads, no shuffle; only the seams ``j = 0``
and ``j = M - 1`` rotate one vector by a lane (``valign(x, x, L-1)`` /
``valign(x, x, 1)``).

Assumes: a flattened function (one index per buffer) before the vectoriser; a time
loop ``T`` (serial) whose body is one or more loops ``for v in [lo, lo + e)`` (serial or
parallel), each body one ``Store Y[v] = value`` that reads ``Y`` at most at ``Y[v]``
(so the iterations of a sweep are independent), whose value is built from ``+ - * /``,
negation, constants, scalar variables other than ``v`` and ``T``'s, and loads
``X[v + k]``, ``k`` in ``{-1, 0, 1}``; every buffer of the nest is 1-D of the same
extent ``n`` (structurally) and dtype ``D`` with ``L = lanes_of(D) > 1``; ``lo >= 1``
and ``n - (lo + e) = d >= 1`` constants (a point reads its neighbours only inside
``[0, n)``); ``T``'s variable appears nowhere else.

Guarantees: such a nest becomes

    if M >= G (G = max(lo, L + d) + 1, a runtime check; else the nest as it was):
      allocate Xt (L*M elements) per buffer; Xt[j*L + l] = X[l*M + j] (0 past n)
      for t: for each loop in order: for j in [0, M): Yt[j] = value on vectors of Xt
             (stores masked to the lanes l with lo <= l*M + j < n - d: a blend of
             the new vector with the old one, their operands read by masked loads, or
             without ``masked_loads`` by whole loads, bound to variables first)
      X[l*M + j] = Xt[j*L + l] for every written buffer, l*M + j < n

Every element is computed by the same operations in the same order on the same
operands (a lane's neighbours are the elements at ``i - 1``, ``i + 1``), so the
results are bitwise those of the nest; the loops of one sweep run in any order (their
iterations are independent) and the sweeps in their order.  ``G`` keeps lanes ``1 ..
L-2`` whole (only lane 0 below ``lo`` and lane ``L - 1`` past ``n - d`` are masked),
and the padding past ``n`` is read only by masked lanes.  The new loops are annotated
:data:`LIFTED` (the vectoriser leaves them alone).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from polycomp import ir
from polycomp.lowering.simplify import simplify
from polycomp.lowering.vectorize import LIFTED, VALIGN, lane_range

#: ``POLYCOMP_LIFT_AVX2=0`` keeps AVX2 targets off the lifted layout (their 1-D
#: stencils time-tiled, as before it was built for them): for A/B comparisons
LIFT_AVX2_ENV = "POLYCOMP_LIFT_AVX2"


def lifts_on(target) -> bool:
    """Whether ``target``'s vector ISA runs 1-D stencils on the lifted layout of
    :mod:`polycomp.lowering.lift` (given the option ``vector_lift``): AVX-512, and AVX2
    unless :data:`LIFT_AVX2_ENV` is ``0``.  The one answer the scheduler
    (:func:`polycomp.scheduler.cpu.scop_stencil.lifted_layout`) and the CPU backend
    (which runs the pass) share."""
    if target.isa == "avx2":
        return os.environ.get(LIFT_AVX2_ENV, "1") != "0"
    return target.isa == "avx512"


_OPS = ("+", "-", "*", "/")


@dataclass(frozen=True)
class _Sweep:
    """One loop of the nest: ``Y[v] = value`` for ``v`` in ``[lo, n - d)``."""
    var: ir.Var
    lo: int
    d: int
    store: ir.Store


def _sweeps(loop: ir.For) -> list[ir.For] | None:
    body = loop.body
    stmts = list(body.stmts) if isinstance(body, ir.Block) else [body]
    if not stmts or not all(isinstance(s, ir.For) for s in stmts):
        return None
    return stmts  # type: ignore[return-value]


def _offset(index: ir.Expr, v: ir.Var) -> int | None:
    k = simplify(ir.Binary("-", index, v, "int64"))
    if isinstance(k, ir.IntImm) and not ir.free_vars(k):
        return k.value
    return None


def _value_ok(e: ir.Expr, v: ir.Var, banned: set, bufs: dict) -> bool:
    if isinstance(e, (ir.FloatImm, ir.IntImm)):
        return True
    if isinstance(e, ir.Var):
        return e is not v and e not in banned and e.dtype != "bool"
    if isinstance(e, ir.Load):
        if e.lanes != 1 or len(e.indices) != 1:
            return False
        k = _offset(e.indices[0], v)
        if k is None or abs(k) > 1:
            return False
        bufs[e.buffer.name] = e.buffer
        return True
    if isinstance(e, ir.Binary):
        return e.op in _OPS and _value_ok(e.a, v, banned, bufs) and \
            _value_ok(e.b, v, banned, bufs)
    if isinstance(e, ir.Unary):
        return e.op == "neg" and _value_ok(e.a, v, banned, bufs)
    return False


def _reads_neighbour(e: ir.Expr, v: ir.Var, buf: ir.Buffer) -> bool:
    """Whether ``e`` loads ``buf`` at an offset other than 0 from ``v``."""
    found: list = []
    ir.walk(e, lambda x: found.append(x) if isinstance(x, ir.Load) and x.buffer is buf
            and _offset(x.indices[0], v) != 0 else None)
    return bool(found)


def _sweep_store(s: ir.For, tvar: ir.Var, bufs: dict) -> ir.Store | None:
    """The store of a sweep ``s`` that meets the module's assumptions (its buffers added
    to ``bufs``), else None."""
    if s.kind not in ("serial", "parallel") or not isinstance(s.body, ir.Store):
        return None
    st = s.body
    if st.lanes != 1 or len(st.indices) != 1 or _offset(st.indices[0], s.var) != 0:
        return None
    if not isinstance(s.min, ir.IntImm) or s.min.value < 1:
        return None
    reads: dict = {}
    if not _value_ok(st.value, s.var, {tvar}, reads):
        return None
    if _reads_neighbour(st.value, s.var, st.buffer):
        return None        # in place (seidel-like): the iterations are not independent
    bufs.update(reads)
    bufs[st.buffer.name] = st.buffer
    return st


def _match(loop: ir.For, lanes_of) -> tuple[list[_Sweep], dict, ir.Expr, str, int] | None:
    """The sweeps, buffers (name -> Buffer), extent ``n``, dtype and lanes of a time loop
    that meets the module's assumptions, else None."""
    if loop.kind != "serial" or loop.annotation(LIFTED):
        return None
    inner = _sweeps(loop)
    if inner is None:
        return None
    bufs: dict = {}
    sweeps = []
    for s in inner:
        st = _sweep_store(s, loop.var, bufs)
        if st is None:
            return None
        sweeps.append((s, st))
    if len({id(b) for b in bufs.values()}) != len(bufs):
        return None
    first = next(iter(bufs.values()))
    if any(len(b.shape) != 1 or b.dtype != first.dtype for b in bufs.values()):
        return None
    n = first.shape[0]
    if not all(ir.is_const(simplify(ir.Binary("-", b.shape[0], n, "int64")), 0)
               for b in bufs.values()):
        return None
    D = first.dtype
    L = lanes_of(D)
    if L <= 1 or D not in ("float32", "float64"):
        return None
    out = []
    for s, st in sweeps:
        d = simplify(ir.Binary("-", n, ir.Binary("+", s.min, s.extent, "int64"), "int64"))
        if not isinstance(d, ir.IntImm) or d.value < 1:
            return None
        assert isinstance(s.min, ir.IntImm)
        out.append(_Sweep(s.var, s.min.value, d.value, st))
    if any(loop.var in ir.free_vars(sw.store) for sw in out):
        return None
    return out, bufs, n, D, L


def _i(x) -> ir.Expr:
    return x if isinstance(x, ir.Expr) else ir.IntImm(x)


def _add(a, b) -> ir.Expr:
    return simplify(ir.Binary("+", _i(a), _i(b), "int64"))


def _mul(a, b) -> ir.Expr:
    return simplify(ir.Binary("*", _i(a), _i(b), "int64"))


class _Lifter:
    def __init__(self, bufs: dict, n: ir.Expr, D: str, L: int, M: ir.Var,
                 masked_loads: bool = True):
        self.n, self.D, self.L, self.M = n, D, L, M
        self.masked_loads = masked_loads
        self.t = {name: ir.Buffer(f"{name}_lift", D, (_mul(M, L),)) for name in bufs}
        self.bufs = bufs
        self.rot: dict = {}

    def vload(self, name: str, j) -> ir.Load:
        L = self.L
        return ir.Load(self.t[name], (ir.Ramp(_mul(j, L), ir.IntImm(1), L),), self.D, L)

    def rotated(self, name: str, k: int) -> ir.Var:
        """The vector of ``X[i + k]`` across a seam, as a variable bound by
        :meth:`store`: ``k = -1``, ``X[l*M - 1]``: lane ``l - 1`` of the last vector;
        ``k = 1``, ``X[(l+1)*M]``: lane ``l + 1`` of the first."""
        key = (name, k)
        if key not in self.rot:
            L = self.L
            src = self.vload(name, _add(self.M, -1) if k == -1 else 0)
            var = ir.Var(f"{name}_rot{'l' if k == -1 else 'r'}", self.D)
            self.rot[key] = (var, ir.Call(VALIGN, (src, src, ir.IntImm(L - 1 if k == -1 else 1)),
                                          self.D))
        return self.rot[key][0]

    def widen(self, e: ir.Expr, v: ir.Var, j, seam: int) -> ir.Expr:
        """``e`` at vector ``j`` of the lifted layout; ``seam`` -1 / 1 when ``j`` is the
        first / last vector (the neighbour across it is a rotated vector), else 0."""
        D, L = self.D, self.L
        if isinstance(e, (ir.FloatImm, ir.IntImm, ir.Var)):
            x = e if e.dtype == D else ir.Cast(e, D)
            return ir.Broadcast(x, L, D)
        if isinstance(e, ir.Load):
            k = _offset(e.indices[0], v)
            name = e.buffer.name
            if k == 0:
                return self.vload(name, j)
            if k == seam:                   # across the seam: a rotated vector, bound
                return self.rotated(name, k)  # outside the masked store (all lanes read)
            return self.vload(name, _add(j, k))
        if isinstance(e, ir.Binary):
            return ir.Binary(e.op, self.widen(e.a, v, j, seam), self.widen(e.b, v, j, seam),
                             D)
        assert isinstance(e, ir.Unary)
        return ir.Unary(e.op, self.widen(e.a, v, j, seam), D)

    def store(self, sw: _Sweep, j, seam: int, masked: bool) -> ir.Stmt:
        """``Yt[j] = value``, stored only in the lanes ``lo <= l*M + j < n - d`` when
        ``masked`` (a blend with the old vector).  Without :attr:`masked_loads` the
        value and the old vector are bound to variables first, so that the printer
        reads them with whole loads (it masks the loads inside a ``select``'s
        branches)."""
        L, M = self.L, self.M
        name = sw.store.buffer.name
        self.rot = {}
        val = self.widen(sw.store.value, sw.var, j, seam)
        idx = (ir.Ramp(_mul(j, L), ir.IntImm(1), L),)
        lets: list[tuple[ir.Var, ir.Expr]] = []
        if masked:
            lt = lambda a, b: ir.Binary("<", a, b, "bool")   # noqa: E731
            lo_lane = ir.Select(lt(_i(j), _i(sw.lo)), ir.IntImm(1), ir.IntImm(0), "int64")
            hi = simplify(ir.Binary("-", self.n, ir.IntImm(sw.d), "int64"))
            hi_lane = ir.Select(lt(_add(_mul(M, L - 1), j), hi), ir.IntImm(L), ir.IntImm(L - 1),
                                "int64")
            old: ir.Expr = ir.Load(self.t[name], idx, self.D, L)
            if not self.masked_loads:
                new_v, old_v = ir.Var(f"{name}_new", self.D), ir.Var(f"{name}_old", self.D)
                lets = [(new_v, val), (old_v, old)]
                val, old = new_v, old_v
            val = ir.Select(lane_range(lo_lane, hi_lane, L), val, old, self.D)
        out: ir.Stmt = ir.Store(self.t[name], idx, val, L)
        for var, value in reversed(lets):
            out = ir.LetStmt(var, value, out)
        for var, value in reversed(list(self.rot.values())):
            out = ir.LetStmt(var, value, out)
        return out

    def sweep(self, sw: _Sweep, tag: int) -> ir.Stmt:
        """One sweep over ``j`` in ``[0, M)``: the seams and the vectors where lane 0 or
        lane ``L - 1`` lies outside ``[lo, n - d)`` masked, the rest plain."""
        L, M = self.L, self.M
        ann = ((LIFTED, True),)
        hi = simplify(ir.Binary("-", self.n, ir.IntImm(sw.d), "int64"))
        # plain vectors: j in [lo, jhi), jhi = min(M - 1, n - d - (L-1)*M) (lane L-1 whole)
        jhi = ir.Var(f"lift_hi{tag}", "int64")
        j1 = ir.Var(f"lift_j{tag}", "int64")
        j2 = ir.Var(f"lift_k{tag}", "int64")
        j0 = ir.Var(f"lift_h{tag}", "int64")
        head = ir.For(j0, ir.IntImm(1), ir.IntImm(sw.lo - 1), "serial",
                      self.store(sw, j0, 0, True), ann) if sw.lo > 1 else None
        plain = ir.For(j1, ir.IntImm(sw.lo), ir.max_(ir.IntImm(0), _add(jhi, -sw.lo)),
                       "serial", self.store(sw, j1, 0, False), ann)
        lo2 = ir.max_(jhi, ir.IntImm(sw.lo))
        tail = ir.For(j2, lo2, ir.max_(ir.IntImm(0), simplify(
            ir.Binary("-", _add(M, -1), lo2, "int64"))), "serial",
            self.store(sw, j2, 0, True), ann)
        body = ir.seq(self.store(sw, ir.IntImm(0), -1, True),
                      *([head] if head is not None else []), plain, tail,
                      self.store(sw, _add(M, -1), 1, True))
        return ir.LetStmt(jhi, ir.min_(_add(M, -1), simplify(
            ir.Binary("-", hi, _mul(M, L - 1), "int64"))), body)

    def copy(self, names: list[str], into_lifted: bool) -> ir.Stmt:
        """``Xt[j*L + l] = X[l*M + j]`` (0 past ``n``) or back (``l*M + j < n`` only)."""
        L, M = self.L, self.M
        j = ir.Var("lift_cj" if into_lifted else "lift_oj", "int64")
        lane = ir.Var("lift_cl" if into_lifted else "lift_ol", "int64")
        i = _add(_mul(lane, M), j)
        at = _add(_mul(j, L), lane)
        inside = ir.Binary("<", i, self.n, "bool")
        stmts: list[ir.Stmt] = []
        for name in names:
            b, t = self.bufs[name], self.t[name]
            if into_lifted:
                stmts.append(ir.Store(t, (at,), ir.Select(
                    inside, ir.Load(b, (i,), self.D), ir.FloatImm(0.0, self.D), self.D)))
            else:
                stmts.append(ir.IfThenElse(inside, ir.Store(b, (i,), ir.Load(t, (at,), self.D))))
        ann = ((LIFTED, True),)
        return ir.For(j, ir.IntImm(0), M, "serial",
                      ir.For(lane, ir.IntImm(0), ir.IntImm(L), "serial", ir.seq(*stmts), ann),
                      ann)


def guard_of(sweeps: list[_Sweep], L: int) -> int:
    """The least ``M`` the lifted form runs at (lanes ``1 .. L-2`` whole)."""
    return max(max(sw.lo for sw in sweeps), L + max(sw.d for sw in sweeps)) + 1


class _Lift(ir.Mutator):
    def __init__(self, lanes_of, note, masked_loads: bool):
        self.lanes_of = lanes_of
        self.note = note
        self.masked_loads = masked_loads
        self.count = 0

    def visit_For(self, s):
        got = _match(s, self.lanes_of)
        if got is None:
            return self.generic(s)
        sweeps, bufs, n, D, L = got
        self.count += 1
        tag = self.count
        M = ir.Var(f"lift_m{tag}", "int64")
        lf = _Lifter(bufs, n, D, L, M, self.masked_loads)
        written = [sw.store.buffer.name for sw in sweeps]
        written = sorted(set(written), key=written.index)
        names = list(bufs)
        if self.note is not None:
            self.note(f"time loop {s.var.name}: {len(sweeps)} sweep(s) over "
                      f"{', '.join(names)} on the lifted layout ({L} lanes of ceil(n/{L}) "
                      f"elements; the nest as it was up to n = {L * (guard_of(sweeps, L) - 1)})")
        steps = ir.For(s.var, s.min, s.extent, "serial",
                       ir.seq(*[lf.sweep(sw, k) for k, sw in enumerate(sweeps)]),
                       s.annotations + ((LIFTED, True),))
        fast: ir.Stmt = ir.seq(lf.copy(names, True), steps, lf.copy(written, False))
        for name in reversed(names):
            fast = ir.Allocate(lf.t[name], fast)
        guard = guard_of(sweeps, L)
        cond = ir.Binary(">=", M, ir.IntImm(guard), "bool")
        ceil_n = simplify(ir.Binary("//", _add(n, L - 1), ir.IntImm(L), "int64"))
        return ir.LetStmt(M, ceil_n, ir.IfThenElse(cond, fast, s))


def lift(func: ir.LoweredFunc, lanes_of, note=None, masked_loads: bool = True
         ) -> ir.LoweredFunc:
    """Run every qualifying time loop of ``func`` on the lifted layout (see the module
    docstring); ``lanes_of(dtype)`` gives the vector length; ``note(text)`` is told of
    each loop lifted.  ``masked_loads``: the partial vectors (the seams, the vectors
    where lane 0 or ``L - 1`` lies outside the sweep) read their operands with masked
    loads (AVX-512: as cheap as plain ones), else with whole loads before the blend
    (AVX2: a ``vmaskmovpd`` load costs several times a plain one on Zen 3; every
    lifted load is inside the ``L*M`` elements of its copy)."""
    m = _Lift(lanes_of, note, masked_loads)
    return func.with_body(m.visit(func.body))
