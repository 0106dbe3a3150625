"""IR pass: realise ``cpu_pack`` marks — copy an operand's tile into a packed buffer and
read it from there.

Assumes: the IR straight from the isl AST (not simplified yet: loop iterators still
carry isl's names ``c0, c1, ...`` = schedule dimensions, degenerate loops are lets), with
``AttrStmt("cpu_pack", "<n>")`` marks from :mod:`polycomp.scheduler.promotion.cpu_pack`;
``promotion_state(state).packs[n]`` is the typed
:class:`~polycomp.scheduler.promotion.record.PackedOperand` of the mark: the array, the
box (sizes ``s``, piecewise offsets ``origin`` on the prefix schedule ``c_0 ..
c_{d-1}``) and the packed-panel layout (dimension ``p`` in panels of ``w``).

Guarantees: at each mark, with ``o = origin(c_0, .., c_{d-1})`` evaluated on the loops
around it, the body becomes

    copy:  P[slot, x_p // w, x_0.., x_{p-1}, x_{p+1}.., x_p mod w] = A[o + x]
           for every x in the box clipped to A's extents
    body:  with every read A[e] replaced by P[slot, layout(e - o)]

``P`` is a new global buffer: one leading *slot* dimension per enclosing loop that may run
in parallel (annotated coincident or marked ``cpu_parallel``), indexed by that loop's
iteration, so concurrent iterations never share a copy (the contraction pass later
gives each thread its own, smaller buffer), then the panel layout.  Reads below the
mark only touch elements of the footprint, which the box contains and the copy
filled in this iteration, so every read returns the value it read before.  ``layout``
splits ``e_p - o_p`` into panel and lane with range analysis of the enclosing loops
(``64*c4 + c7`` with ``0 <= c7 < 64`` gives panel ``c4``, lane ``c7``) and falls back to
``//`` and ``%``.  When the mark is outside every parallel loop, the copy loop nest is
wrapped in a ``cpu_parallel`` mark.  The element values and every other access are
unchanged.
"""
from __future__ import annotations

import islpy as isl

from polycomp import ir
from polycomp.lowering.ast_to_ir import pw_aff_to_ir
from polycomp.lowering.simplify import simplify
from polycomp.scheduler.common import marks
from polycomp.scheduler.promotion.footprint import Layout
from polycomp.scheduler.promotion.record import PackedOperand, promotion_state
from polycomp.state import CompileState

# --------------------------------------------------------------------------- affine helpers


def _linear(e):
    """``({Var: coeff}, const)`` for a sum of integer multiples of Vars, else None."""
    if isinstance(e, ir.IntImm):
        return {}, e.value
    if isinstance(e, ir.Var):
        return {e: 1}, 0
    if isinstance(e, ir.Binary) and e.op in ("+", "-"):
        a, b = _linear(e.a), _linear(e.b)
        if a is None or b is None:
            return None
        s = 1 if e.op == "+" else -1
        t = dict(a[0])
        for v, c in b[0].items():
            t[v] = t.get(v, 0) + s * c
        return t, a[1] + s * b[1]
    if isinstance(e, ir.Binary) and e.op == "*":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, ir.IntImm):
                a = _linear(x)
                if a is None:
                    return None
                return {v: c * y.value for v, c in a[0].items()}, a[1] * y.value
        return None
    if isinstance(e, ir.Unary) and e.op == "neg":
        a = _linear(e.a)
        return None if a is None else ({v: -c for v, c in a[0].items()}, -a[1])
    return None


def _build(terms: dict, const: int) -> ir.Expr:
    out: ir.Expr = ir.IntImm(const)
    for v, c in terms.items():
        if c:
            out = out + (v if c == 1 else v * c)
    return simplify(out)


def divmod_ranged(e: ir.Expr, w: int, ranges: dict):
    """``(e // w, e mod w)`` simplified when the terms of ``e`` not divisible by ``w``
    provably stay in ``[0, w)`` over ``ranges`` (Var -> (lo, hi) inclusive)."""
    e = simplify(e)
    lin = _linear(e)
    if lin is not None:
        terms, const = lin
        q = {v: c // w for v, c in terms.items() if c % w == 0}
        r = {v: c for v, c in terms.items() if c % w != 0}
        cq, cr = divmod(const, w)
        lo = hi = cr
        ok = True
        for v, c in r.items():
            if v not in ranges:
                ok = False
                break
            a, b = ranges[v]
            lo += min(c * a, c * b)
            hi += max(c * a, c * b)
        if ok and lo >= 0 and hi < w:
            return _build(q, cq), _build(r, cr)
    return simplify(e // w), simplify(e % w)


# --------------------------------------------------------------------------- the pass


class _Packer:
    def __init__(self, func: ir.LoweredFunc, state: CompileState):
        self.func = func
        self.model = state.model
        self.packs = promotion_state(state).packs
        self.buffers = {b.name: b for b in func.args}
        ir.walk(func.body, self._collect)
        self.allocs: list = []
        self.count = 0
        import os
        order = os.environ.get("POLYCOMP_PACK_ORDER", "rows4")
        self.rows_outer = int(order[4:]) if order.startswith("rows") else 0

    def _collect(self, n):
        if isinstance(n, ir.Allocate):
            self.buffers.setdefault(n.buffer.name, n.buffer)

    def run(self):
        body = self.stmt(self.func.body, {}, [], False)
        for b in self.allocs:
            body = ir.Allocate(b, body)
        return self.func.with_body(body)

    # env: name -> Var of enclosing iterators; loops: enclosing For and whether they
    # may run concurrently (coincident, or parallel); par: below a cpu_parallel mark
    def stmt(self, s, env, loops, par):
        if isinstance(s, ir.For):
            env2 = dict(env, **{s.var.name: s.var})
            p = bool(s.annotation("coincident", False)) or par or s.kind == "parallel"
            return ir.For(s.var, s.min, s.extent, s.kind,
                          self.stmt(s.body, env2, loops + [(s, p)],
                                    par or s.kind == "parallel"), s.annotations)
        if isinstance(s, ir.LetStmt):
            env2 = dict(env, **{s.var.name: s.var})
            return ir.LetStmt(s.var, s.value, self.stmt(s.body, env2, loops, par))
        if isinstance(s, ir.AttrStmt):
            if s.key == marks.CPU_PACK:
                return self.pack(s, env, loops, par)
            return ir.AttrStmt(s.key, s.value,
                               self.stmt(s.body, env, loops,
                                         par or s.key == marks.CPU_PARALLEL))
        if isinstance(s, ir.Block):
            return ir.Block(tuple(self.stmt(x, env, loops, par) for x in s.stmts))
        if isinstance(s, ir.IfThenElse):
            orelse = self.stmt(s.orelse, env, loops, par) if s.orelse is not None else None
            return ir.IfThenElse(s.cond, self.stmt(s.then, env, loops, par), orelse)
        if isinstance(s, ir.Allocate):
            return ir.Allocate(s.buffer, self.stmt(s.body, env, loops, par))
        return s

    def origin(self, origin: isl.MultiPwAff, env) -> list | None:
        out = []
        n_in = origin.dim(isl.dim_type.in_)
        params = list(self.model.params)
        fixed = {}
        for k in range(n_in):
            v = env.get(f"c{k}")
            if v is None:
                # isl generated no loop for a dimension with a single value: take that
                # value from the origin's domain
                val = origin.domain().plain_get_val_if_fixed(isl.dim_type.set, k)
                if not val.is_int():
                    return None
                v = ir.Var(f"c{k}")
                fixed[v] = ir.IntImm(int(val.to_python()))
            params.append(v)
        for d in range(origin.dim(isl.dim_type.out)):
            pa = origin.get_pw_aff(d)
            nparam = pa.dim(isl.dim_type.param)
            pa = pa.move_dims(isl.dim_type.param, nparam, isl.dim_type.in_, 0, n_in)
            for k in range(n_in):
                pa = pa.set_dim_id(isl.dim_type.param, nparam + k, isl.Id(f"c{k}"))
            pa = pa.project_domain_on_params()
            out.append(simplify(ir.substitute(pw_aff_to_ir(pa, self.model.context, tuple(params)),
                                              fixed)))
        return out

    def pack(self, s: ir.AttrStmt, env, loops, par):
        spec: PackedOperand = self.packs[int(s.value)]
        fp = spec.footprint
        arr = self.buffers.get(spec.array)
        body = self.stmt(s.body, env, loops, par)
        if arr is None:
            return body
        origin = self.origin(fp.origin(), env)
        if origin is None or len(origin) != len(arr.shape):
            return body
        slots = [lp for lp, p in loops if p]
        for lp in slots:
            inner = {x.var for x, _ in loops}
            if any(v in inner for v in ir.free_vars(lp.extent)):
                return body   # slot extent varies with an outer loop: do not pack
        self.count += 1
        shape = tuple(lp.extent for lp in slots) + tuple(ir.IntImm(n) for n in fp.shape)
        pbuf = ir.Buffer(f"{arr.name}_pk{self.count}", arr.dtype, shape)
        self.allocs.append(pbuf)
        slot_idx = tuple(ir.Binary("-", lp.var, lp.min, "int64") for lp in slots)
        copy = self.copy(arr, pbuf, fp.layout, fp.box.sizes, origin, slot_idx)
        if not par:
            copy = ir.AttrStmt(marks.CPU_PARALLEL, "", copy)
        body = _Redirect(arr, pbuf, fp.layout, origin, slot_idx).visit(body)
        return ir.seq(copy, body)

    def copy(self, arr, pbuf, layout: Layout, box, origin, slot_idx):
        """The loop nest filling the packed buffer (panel, other dimensions, lane)."""
        p, w = layout.dim, layout.width
        n = len(arr.shape)
        xs = [ir.Var(f"pk{self.count}_x{d}") for d in range(n)]
        lo = [simplify(ir.max_(ir.IntImm(0), ir.Unary("neg", origin[d], "int64")))
              for d in range(n)]
        hi = [simplify(ir.min_(ir.IntImm(box[d]), arr.shape[d] - origin[d])) for d in range(n)]
        q = ir.Var(f"pk{self.count}_q")
        lane = ir.Var(f"pk{self.count}_l")
        xp = q * w + lane
        idx_arr = tuple(simplify(origin[d] + (xp if d == p else xs[d])) for d in range(n))
        idx_p = slot_idx + (q,) + tuple(xs[d] for d in range(n) if d != p) + (lane,)
        st = ir.Store(pbuf, idx_p, ir.Load(arr, idx_arr, arr.dtype))
        lane_lo = simplify(ir.max_(lo[p] - q * w, ir.IntImm(0)))
        lane_hi = simplify(ir.min_(ir.IntImm(w), hi[p] - q * w))
        def lane_loop(b):
            return ir.For(lane, lane_lo, simplify(lane_hi - lane_lo), "serial", b,
                          (("coincident", True),))
        others = [d for d in range(n) if d != p]
        n_q = simplify((hi[p] + (w - 1)) // w)
        if p == n - 1 and self.rows_outer > 0 and len(others) == 1:
            # the array's contiguous dimension is the panel: blocks of RB rows of the box
            # are read left to right into all panels (row block, panel, row, lanes): RB
            # sequential streams instead of one line per row and panel (a new page per
            # row when the rows are long), and RB consecutive rows of each panel written
            # together (all panels of one row at once would be as many write streams,
            # one panel apart: the same L1 set)
            d = others[0]
            RB = self.rows_outer
            xb, r = ir.Var(f"pk{self.count}_xb"), ir.Var(f"pk{self.count}_r")
            ext = simplify(hi[d] - lo[d])
            rows = ir.For(r, ir.IntImm(0), simplify(ir.min_(ir.IntImm(RB), ext - xb * RB)),
                          "serial", ir.LetStmt(xs[d], simplify(lo[d] + xb * RB + r),
                                               lane_loop(st)), (("coincident", True),))
            panels = ir.For(q, ir.IntImm(0), n_q, "serial", rows, (("coincident", True),))
            return ir.For(xb, ir.IntImm(0), simplify((ext + (RB - 1)) // RB), "serial", panels,
                          (("coincident", True),))
        if p == n - 1:        # the array's contiguous dimension is the panel: lanes innermost
            body = lane_loop(st)
            for d in reversed(others):
                body = ir.For(xs[d], lo[d], simplify(hi[d] - lo[d]), "serial", body,
                              (("coincident", True),))
        else:                 # keep the array's last dimension innermost for reading
            body = st
            for d in reversed(others):
                body = ir.For(xs[d], lo[d], simplify(hi[d] - lo[d]), "serial", body,
                              (("coincident", True),))
            body = lane_loop(body)
        return ir.For(q, ir.IntImm(0), n_q, "serial", body, (("coincident", True),))


class _Redirect(ir.Mutator):
    """Reads of ``arr`` below the mark -> the packed buffer (ranges of loops tracked)."""

    def __init__(self, arr, pbuf, layout: Layout, origin, slot_idx):
        self.arr, self.pbuf, self.layout = arr, pbuf, layout
        self.origin, self.slot = origin, slot_idx
        self.ranges: dict = {}

    def visit_For(self, s):
        mn, ext = simplify(s.min), simplify(s.extent)
        saved = self.ranges.get(s.var)
        if isinstance(mn, ir.IntImm) and isinstance(ext, ir.IntImm) and ext.value > 0:
            self.ranges[s.var] = (mn.value, mn.value + ext.value - 1)
        body = self.visit(s.body)
        if saved is None:
            self.ranges.pop(s.var, None)
        else:
            self.ranges[s.var] = saved
        return ir.For(s.var, s.min, s.extent, s.kind, body, s.annotations)

    def visit_Load(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        if e.buffer is not self.arr:
            return ir.Load(e.buffer, idx, e.dtype, e.lanes)
        rel = [simplify(idx[d] - self.origin[d]) for d in range(len(idx))]
        new = self.slot + self.layout.index(rel, lambda x, w: divmod_ranged(x, w, self.ranges))
        return ir.Load(self.pbuf, new, e.dtype, e.lanes)


def pack(func: ir.LoweredFunc, state: CompileState) -> ir.LoweredFunc:
    """Realise every ``cpu_pack`` mark of ``func`` from ``promotion_state(state).packs``
    (see the module docstring)."""
    return _Packer(func, state).run()
