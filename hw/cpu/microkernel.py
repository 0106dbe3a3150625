"""IR pass: the register-blocked outer-product micro-kernel.

Assumes: flattened, simplified IR; ``AttrStmt("cpu_microkernel")`` marks (from
:mod:`polycomp.scheduler.cpu.backbone_tile`) whose body, in a full register tile, is

    for k in [k0, k0 + K):                   (any extent)
      for ii in [0, MR):                      (constant)
        for jj in [0, NR):                    (constant, a multiple of the vector length L)
          C[c] = C[c] + R                     (c affine, coefficient 1 in jj, free of k)

where ``R`` vectorises along ``jj`` (:mod:`polycomp.lowering.vectorize`'s conditions;
for matmul ``R = Ap[..ii..] * Bp[..jj..]``).  Marks over other bodies (the partial tiles
isl generates at the edges) are dropped and left to the generic vectoriser.

Guarantees: the tile becomes

    acc[ii][u] = C[c(ii, u*L .. u*L+L-1)]           for ii < MR, u < NR/L   (vector loads)
    for k:  acc[ii][u] = acc[ii][u] + R(ii, u)      (fully unrolled; FMA when printed)
    C[c(ii, u*L ..)] = acc[ii][u]                    (vector stores)

with ``acc`` a ``register`` buffer of ``MR * NR/L`` vectors (printed as that many C
vector variables).  Each ``C`` element receives the same additions in the same ``k``
order as before (they are only kept in a register between them), so results are
bit-identical to the scalar loop up to FMA contraction.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator

from polycomp import ir
from polycomp.lowering.simplify import simplify
from polycomp.lowering.vectorize import (
    Unvectorizable,
    Widen,
    analyse,
    index_coeff,
    lane_range,
    uses,
)
from polycomp.scheduler.common import marks


def _match(body):
    """``(k_loops, ii_loop, jj_loop, store, rest)`` of a full register tile, or None."""
    loops = []
    node = body
    while isinstance(node, ir.For):
        loops.append(node)
        node = node.body
    if len(loops) < 2 or not isinstance(node, ir.Store) or node.lanes != 1:
        return None
    st = node
    *lk, li, lj = loops
    if not uses(st.indices[0], li.var):
        # a one-row tile: the simplifier removed the row loop, li is a reduction loop
        lk = lk + [li]
        li = ir.For(ir.Var("mk_row"), ir.IntImm(0), ir.IntImm(1), "serial", lj)
    if not lk or not (isinstance(li.extent, ir.IntImm) and isinstance(lj.extent, ir.IntImm)):
        return None
    v = st.value
    if not (isinstance(v, ir.Binary) and v.op == "+"):
        return None
    for acc, rest in ((v.a, v.b), (v.b, v.a)):
        if isinstance(acc, ir.Load) and acc.buffer is st.buffer and \
                ir.structural_equal(acc.indices[0], st.indices[0]):
            return lk, li, lj, st, rest
    return None


def _tile(lk, li, lj, st, rest, lanes_of, tile_ids: Iterator[int]):
    """The register tile of the module docstring, or None; ``tile_ids`` numbers the
    tiles of one function (``acc1``/``mk1_*``, ``acc2``/``mk2_*``, ...)."""
    L = lanes_of(st.buffer.dtype)
    MR, NR = li.extent.value, lj.extent.value
    if L <= 1 or NR < 2 or not ir.is_const(li.min, 0) or not ir.is_const(lj.min, 0):
        return None
    c = st.indices[0]
    cstride = index_coeff(c, lj.var)
    if not isinstance(cstride, int) or cstride < 1 or any(uses(c, k.var) for k in lk):
        return None
    if _reads(rest, st.buffer):
        return None
    probe = lj
    if cstride != 1:    # analyse R alone: C's strided store is the micro-kernel's own
        dummy = ir.Buffer("mk_probe", st.buffer.dtype, (lj.extent,), flat=True)
        probe = ir.For(lj.var, lj.min, lj.extent, lj.kind,
                       ir.Store(dummy, (lj.var,), rest), lj.annotations)
    dtype, lanes = analyse(probe, lanes_of)  # R widens along jj (raises otherwise)
    if dtype != st.buffer.dtype or lanes != L:
        return None
    D = st.buffer.dtype
    NV = -(-NR // L)
    last = NR - (NV - 1) * L          # lanes of the last vector (L unless NR mod L != 0)
    if MR * NV + NV + 1 > 2 * 32:     # far beyond any register file: not a register tile
        return None
    tid = next(tile_ids)

    def masked(u, e):
        """Lanes beyond the tile's NR columns are neither read nor computed."""
        if u < NV - 1 or last == L:
            return e
        return ir.Select(lane_range(ir.IntImm(0), ir.IntImm(last), L), e,
                         ir.Broadcast(ir.FloatImm(0.0, D), L, D), D)
    acc = ir.Buffer(f"acc{tid}", D, (ir.IntImm(MR * NV * L),), scope="register",
                    flat=True)

    def slot(i, u):
        return ir.Ramp(ir.IntImm((i * NV + u) * L), ir.IntImm(1), L)

    def cidx(i, u):
        return simplify(ir.substitute(c, {li.var: ir.IntImm(i), lj.var: ir.IntImm(u * L)}))

    def cref(i, u):
        return ir.Ramp(cidx(i, u), ir.IntImm(cstride), L)

    # C strided along the columns (a convolution's channel form: columns are output
    # channels, one plane apart): each accumulator is stored through a small stack
    # buffer, lane by lane (once per tile, after the whole reduction)
    lane_buf = ir.Buffer(f"mk{tid}_c", D, (ir.IntImm(L),), scope="local", flat=True) \
        if cstride != 1 else None

    def strided_store(i, u, n) -> ir.Stmt:
        assert lane_buf is not None
        lane = ir.Var(f"mk{tid}_l", "int64")
        put = ir.Store(lane_buf, (ir.Ramp(ir.IntImm(0), ir.IntImm(1), L),),
                       ir.Load(acc, (slot(i, u),), D, L), L)
        scalar = ir.Store(st.buffer, (simplify(cidx(i, u) + lane * cstride),),
                          ir.Load(lane_buf, (lane,), D), 1)
        return ir.seq(put, ir.For(lane, ir.IntImm(0), ir.IntImm(n), "serial", scalar))

    # the factor shared by a row of the tile (the Y vector) is loaded once per k
    # iteration (let-bound around the whole update); the X broadcast of row i is bound
    # just around row i's NV FMAs, so at most MR*NV accumulators + NV Y vectors + one
    # broadcast are live at a time (what the register block was sized for: binding all
    # MR broadcasts first makes gcc spill accumulators inside the k loop)
    xf, yf = _factors(rest, li.var, lj.var)
    ylets, xlets = [], {}
    yvars, xvars = {}, {}
    if yf is not None:
        for u in range(NV):
            v = ir.Var(f"mk{tid}_y{u}", D)
            ylets.append((v, masked(u, Widen(lj.var, ir.IntImm(u * L), D, L).expr(yf))))
            yvars[u] = v
        for i in range(MR):
            v = ir.Var(f"mk{tid}_x{i}", D)
            xlets[i] = Widen(lj.var, ir.IntImm(0), D, L).expr(
                ir.substitute(xf, {li.var: ir.IntImm(i)}))
            xvars[i] = v
    loads, stores = [], []
    rows: list[ir.Stmt] = []
    for i in range(MR):
        updates = []
        for u in range(NV):
            loads.append(ir.Store(acc, (slot(i, u),),
                                  masked(u, ir.Load(st.buffer, (cref(i, u),), D, L)), L))
            store: ir.Stmt = ir.Store(st.buffer, (cref(i, u),),
                                      ir.Load(acc, (slot(i, u),), D, L), L)
            if lane_buf is not None:
                store = strided_store(i, u, last if u == NV - 1 else L)
            elif u == NV - 1 and last < L:
                store = ir.AttrStmt("vector_mask", (ir.IntImm(last), L), store)
            stores.append(store)
            if yf is not None:
                r = ir.Binary("*", xvars[i], yvars[u], D)
            else:
                w = Widen(lj.var, ir.IntImm(u * L), D, L)
                r = masked(u, w.expr(ir.substitute(rest, {li.var: ir.IntImm(i)})))
            updates.append(ir.Store(acc, (slot(i, u),),
                                    ir.Binary("+", ir.Load(acc, (slot(i, u),), D, L), r, D), L))
        row = ir.seq(*updates)
        rows.append(ir.LetStmt(xvars[i], xlets[i], row) if i in xlets else row)
    body = ir.seq(*rows)
    for v, val in reversed(ylets):
        body = ir.LetStmt(v, val, body)
    for k in reversed(lk):
        body = ir.For(k.var, k.min, k.extent, k.kind, body,
                      k.annotations + (("microkernel", f"{MR}x{NR}"),))
    out = ir.seq(*loads, body, *stores)
    if lane_buf is not None:
        out = ir.Allocate(lane_buf, out)
    return ir.Allocate(acc, out)


def _factors(rest, vi, vj):
    """``(x, y)`` when ``rest = x * y`` with ``x`` free of the column variable ``vj`` and
    ``y`` free of the row variable ``vi``, else ``(None, None)``."""
    if isinstance(rest, ir.Binary) and rest.op == "*":
        for x, y in ((rest.a, rest.b), (rest.b, rest.a)):
            if not uses(x, vj) and not uses(y, vi):
                return x, y
    return None, None


def _reads(e, buf) -> bool:
    found = []
    ir.walk(e, lambda n: found.append(1) if isinstance(n, ir.Load) and n.buffer is buf else None)
    return bool(found)


class _Micro(ir.Mutator):
    def __init__(self, lanes_of):
        self.lanes_of = lanes_of
        self.count = 0
        self.tile_ids = itertools.count(1)     # register-tile names, per function

    def visit_AttrStmt(self, s):
        if s.key != marks.CPU_MICROKERNEL:
            return self.generic(s)
        m = _match(s.body)
        if m is not None:
            try:
                out = _tile(*m, self.lanes_of, self.tile_ids)
            except Unvectorizable:   # left to the generic path
                out = None
            if out is not None:
                self.count += 1
                return out
        return self.visit(s.body)


def microkernels(func: ir.LoweredFunc, lanes_of) -> ir.LoweredFunc:
    m = _Micro(lanes_of)
    out = func.with_body(m.visit(func.body))
    out = out.counted(microkernels=m.count)
    return out
