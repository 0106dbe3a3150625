"""IR pass ``stencil-jam``: two time steps of a stencil's time tile per row pass.

Assumes: flattened IR (one index per access) after AST generation; an
``AttrStmt(cpu_stencil_points)`` (placed by ``scop-stencil`` with option
``stencil_jam``, :mod:`polycomp.scheduler.cpu.scop_stencil`) around the AST of a time
tile's point band ``(t, y_1 .. y_{D-1})``, which is fully permutable: every dependence
between its instances has non-negative distances on ``t`` and on ``y_1``.

For each loop nest ``for t in [t0, t0 + nt): for y in [lo(t), lo(t) + ny(t)): B(t, y)``
under the mark (the first loop whose body is exactly one loop) the pass emits::

    for u in [0, (nt + 1) // 2):
      let t = t0 + 2u
      if 2u + 1 < nt:                         -- steps t and t + 1 together
        for y in [min(lo(t), lo(t+1)), max(hi(t), hi(t+1))):
          if y in [lo(t), hi(t)) && y in [lo(t+1), hi(t+1)) && full(t, y) && full(t+1, y):
            FUSED(t, y)
          else:                               -- the rows where a step is cut
            if y in [lo(t), hi(t)): B(t, y)
            if y in [lo(t+1), hi(t+1)): B(t + 1, y)
      else:
        for y in [lo(t), hi(t)): B(t, y)

Legality (isl terms): the original order runs every ``(t, y)`` before every ``(t + 1,
y')``; the new one runs ``(t + 1, y)`` before ``(t, y')`` for ``y' > y``.  A
dependence between those instances would go from ``(t, y')`` to ``(t + 1, y)``
(negative distance on ``y``) or from ``(t + 1, .)`` back to ``(t, .)`` (negative on
``t``): the permutable band has neither.  ``B(t, y)`` is ``if full: ROW else: REST``
(or ``ROW`` alone), ``ROW`` a block of scalar stores ``pre``, one innermost loop ``for
j in [a, a + n): S(j)`` (no loop inside) and scalar stores ``post``; ``FUSED(t, y)``
is ``pre(t); pre(t+1); for j: { S_t(j); S_{t+1}(j) }; post(t); post(t+1)`` (with
``n >= 1``), built only when the pass proves, from the flat indices expanded as
polynomials, that no pair it reorders touches one element with a store: ``pre(t+1)``
against ``S_t(j)`` and ``post(t)``, ``post(t)`` against ``S_{t+1}(j)``, and
``S_{t+1}(j)`` against ``S_t(j')`` for ``j < j'`` (fdtd-2d: step ``t`` updates row
``i``, step ``t + 1`` row ``i - 1`` in the same ``j`` pass, ``hz[i-1][j-1]`` of the
second step written by the first step's previous iteration).  No element's operations
change or reorder: results are bitwise those of the unjammed code.  A nest that does
not qualify (no row, the proof fails) is left as it was, with a note.  The mark is
removed either way.

Why: a row pass of one step brings its rows in from L2 and writes them back; the
second step works on rows the first just touched, in L1 and registers (fdtd-2d at
LARGE: 1.13-1.23x less CPU measured by hand, docs/c_frontend.md "Two time steps per
row pass").  With :mod:`polycomp.lowering.vectorize`'s stored-row windows the second
step's ``hz[i-1][j-1]`` comes from the first step's stored vectors, not from memory
(a load spanning two pending stores would stall)."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from polycomp import ir
from polycomp.lowering.simplify import simplify
from polycomp.lowering.vectorize import index_poly as _poly
from polycomp.lowering.vectorize import index_poly_const as _poly_const
from polycomp.lowering.vectorize_analysis import has_loop
from polycomp.scheduler.common import marks

I64 = "int64"


def _b(op: str, a, b, dtype: str = I64) -> ir.Expr:
    return ir.Binary(op, a, b, dtype)


class _Row:
    """``ROW`` of a body: scalar stores before, the row loop, scalar stores after."""

    def __init__(self, pre: list, loop: ir.For, post: list):
        self.pre, self.loop, self.post = pre, loop, post


def _row(s) -> _Row | None:
    stmts = list(s.stmts) if isinstance(s, ir.Block) else [s]
    loops = [k for k, x in enumerate(stmts) if isinstance(x, ir.For)]
    if len(loops) != 1:
        return None
    k = loops[0]
    loop = stmts[k]
    if has_loop(loop.body) or loop.kind not in ("serial", "parallel", "vectorized"):
        return None
    rest = stmts[:k] + stmts[k + 1:]
    if not all(isinstance(x, ir.Store) and x.lanes == 1 for x in rest):
        return None
    return _Row(stmts[:k], loop, stmts[k + 1:])


def _split(body) -> tuple[ir.Expr | None, _Row | None, ir.Stmt | None]:
    """``(full, ROW, REST)`` of a point body ``if full: ROW else: REST`` (``full`` None:
    the body is ``ROW``)."""
    if isinstance(body, ir.IfThenElse):
        return body.cond, _row(body.then), body.orelse
    return None, _row(body), None


def _accesses(s) -> list[tuple[ir.Buffer, ir.Expr, bool]]:
    """``(buffer, flat index, is_store)`` of every access in ``s``; raises ValueError on
    a multi-index or vector access."""
    out: list = []

    def visit(n):
        if isinstance(n, (ir.Load, ir.Store)):
            if len(n.indices) != 1 or n.lanes != 1:
                raise ValueError(n)
            out.append((n.buffer, n.indices[0], isinstance(n, ir.Store)))
    ir.walk(s, visit)
    return out


def _outside(x: ir.Expr, a: ir.Expr, b: ir.Expr, w: ir.Expr) -> bool:
    """Whether ``x`` provably lies outside ``[a, b]``, using ``w >= 0`` (the fused
    pass runs only when the row loop is non-empty): ``x - a + k w`` a negative constant
    or ``x - b - k w`` a positive one, ``k`` in 0..4."""
    for k in range(5):
        kw = _b("*", ir.IntImm(k), w)
        lo = _poly_const(_b("+", _b("-", x, a), kw), ir.IntImm(0))
        if lo is not None and lo < 0:
            return True
        hi = _poly_const(_b("-", _b("-", x, b), kw), ir.IntImm(0))
        if hi is not None and hi > 0:
            return True
    return False


def _rest(idx: ir.Expr, j: ir.Var) -> ir.Expr | None:
    """``idx - j`` when ``idx`` is ``j`` plus terms without ``j``, else None."""
    p = _poly(idx)
    if p is None or p.get((j.name,), 0) != 1 or \
            any(j.name in k for k in p if k != (j.name,)):
        return None
    return _b("-", idx, j)


def _fusable(a: _Row, b: _Row) -> bool:
    """The reordering proof of the module docstring for rows ``a`` (step ``t``) and
    ``b`` (step ``t + 1``, its loop variable already ``a``'s)."""
    la, lb = a.loop, b.loop
    if _poly_const(la.min, lb.min) != 0 or _poly_const(la.extent, lb.extent) != 0:
        return False
    j, lo, n = la.var, la.min, la.extent
    hi = _b("-", _b("+", lo, n), ir.IntImm(1))
    w = _b("-", n, ir.IntImm(1))                      # >= 0: n >= 1 is checked
    try:
        pre_b = [x for s in b.pre for x in _accesses(s)]
        post_a = [x for s in a.post for x in _accesses(s)]
        loop_a, loop_b = _accesses(la.body), _accesses(lb.body)
    except ValueError:
        return False

    def pairs(p, q):
        return [(x, y) for x in p for y in q if x[0] is y[0] and (x[2] or y[2])]
    # pre(t+1), post(t) against a whole row loop: the scalar index outside [lo, hi]
    for scalars, loop in ((pre_b, loop_a), (post_a, loop_b)):
        for (_, e, _), (_, f, _) in pairs(scalars, loop):
            r = _rest(f, j)
            if r is None or not _outside(_b("-", e, r), lo, hi, w):
                return False
    for (_, e, _), (_, f, _) in pairs(pre_b, post_a):
        if not _outside(_b("-", e, f), ir.IntImm(0), ir.IntImm(0), w):
            return False
    # S_{t+1}(j) before S_t(j'), j < j': equal elements need j' - j = rb - ra in [1, n-1]
    for (_, e, _), (_, f, _) in pairs(loop_b, loop_a):
        rb, ra = _rest(e, j), _rest(f, j)
        if rb is None or ra is None or not _outside(
                _b("-", rb, ra), ir.IntImm(1), _b("-", n, ir.IntImm(1)),
                _b("-", n, ir.IntImm(2))):
            return False
    return True


def _jam(t_loop: ir.For, note: Callable[[str], None]) -> ir.Stmt | None:
    y_loop = t_loop.body
    assert isinstance(y_loop, ir.For)
    t, y = t_loop.var, y_loop.var
    u = ir.Var(t.name + "_u", I64)
    at = lambda s, k: simplify(ir.substitute(s, {t: _b("+", t, ir.IntImm(k))}))  # noqa: E731
    body = y_loop.body
    row = _split(body)[1]
    body_a, body_b = at(body, 0), at(body, 1)
    fa, ra, _ = _split(body_a)
    fb, rb, _ = _split(body_b)
    fused: ir.Stmt | None = None
    if row is not None and ra is not None and rb is not None:
        jb = rb.loop.var
        if jb is not ra.loop.var:
            rb = _split(ir.substitute(body_b, {jb: ra.loop.var}))[1]
        if rb is not None and _fusable(ra, rb):
            loop = replace(ra.loop, body=ir.seq(ra.loop.body, rb.loop.body))
            fused = ir.seq(*ra.pre, *rb.pre, loop, *ra.post, *rb.post)
    if fused is None:
        note("a time tile's steps left one per row pass: its rows are not one scalar "
             "block around one innermost loop, or the fused pass's reordering is not "
             "proved safe")
        return None
    lo_a, n_a = at(y_loop.min, 0), at(y_loop.extent, 0)
    lo_b, n_b = at(y_loop.min, 1), at(y_loop.extent, 1)
    hi_a, hi_b = _b("+", lo_a, n_a), _b("+", lo_b, n_b)
    lo, hi = ir.min_(lo_a, lo_b), ir.max_(hi_a, hi_b)

    def inside(l0, l1):
        return _b("&&", _b(">=", y, l0, "bool"), _b("<", y, l1, "bool"), "bool")
    in_a, in_b = inside(lo_a, hi_a), inside(lo_b, hi_b)
    apart = ir.seq(ir.IfThenElse(in_a, body_a), ir.IfThenElse(in_b, body_b))
    inner = apart
    if fused is not None:
        assert ra is not None
        cond = _b("&&", _b("&&", in_a, in_b, "bool"),
                  _b(">=", ra.loop.extent, ir.IntImm(1), "bool"), "bool")
        for f in (fa, fb):
            if f is not None:
                cond = _b("&&", cond, f, "bool")
        inner = ir.IfThenElse(cond, fused, apart)
    two = replace(y_loop, min=simplify(lo), extent=simplify(_b("-", hi, lo)), body=inner)
    nt = t_loop.extent
    pair = _b("<", _b("+", _b("*", ir.IntImm(2), u), ir.IntImm(1)), nt, "bool")
    step = ir.LetStmt(t, simplify(_b("+", t_loop.min, _b("*", ir.IntImm(2), u))),
                      ir.IfThenElse(simplify(pair), two, y_loop))
    return replace(t_loop, var=u, min=ir.IntImm(0),
                   extent=simplify(_b("//", _b("+", nt, ir.IntImm(1)), ir.IntImm(2))),
                   body=step)


class _Jam(ir.Mutator):
    def __init__(self, note: Callable[[str], None]):
        self.note = note
        self.inside = 0
        self.count = 0

    def visit_AttrStmt(self, s):
        if s.key != marks.CPU_STENCIL_POINTS:
            return self.generic(s)
        self.inside += 1
        body = self.visit(s.body)
        self.inside -= 1
        return body

    def visit_For(self, s):
        if self.inside and isinstance(s.body, ir.For) and s.kind == "serial":
            out = _jam(s, self.note)
            if out is not None:
                self.count += 1
                return out
        return self.generic(s)


class _Drop(ir.Mutator):
    def visit_AttrStmt(self, s):
        if s.key == marks.CPU_STENCIL_POINTS:
            return self.visit(s.body)
        return self.generic(s)


def stencil_jam(f: ir.LoweredFunc, note: Callable[[str], None],
                enabled: bool = True) -> ir.LoweredFunc:
    """The pass of the module docstring (``enabled`` False: only the marks dropped)."""
    if not enabled:
        return f.with_body(_Drop().visit(f.body))
    m = _Jam(note)
    return f.with_body(m.visit(f.body))


def jam_nest(s: ir.Stmt, note: Callable[[str], None]) -> ir.Stmt:
    """The pass on one statement (its marked nests jammed, the marks dropped)."""
    return _Drop().visit(_Jam(note).visit(s))
