"""The float16 / bfloat16 chain's micro-kernels on Tensor Cores (FlashAttention-2 style),
as CUDA-level IR: what the ``chain_step`` / ``chain_ring`` marks of a half-precision
chain's program tree expand to (:mod:`polycomp.hw.cuda.chain_passes`; the tree:
:mod:`polycomp.scheduler.chain.cuda_tree`; the tiles:
:mod:`polycomp.scheduler.chain.tc_kernel`).

One thread block per ``(n-block, m-block, batch)``, ``TM / 16`` warps; warp ``w`` owns
rows ``16w .. 16w+15`` of the ``TM``-row tile.  The ring streams items ``q = (j, c)``:
``l`` tile ``j`` (``TL`` columns) and ``k`` chunk ``c`` (``KC`` columns, ``nk = ceil(K /
KC)`` chunks), ``q = j * nk + c``:

    ACC_INIT   Oacc = 0 (mma C fragments, TN/8 tiles of 16x8 per warp); mrun = -inf, lsum = 0
    ring       X tile -> Xs[0] when nk == 1 (resident: read once per block)  } group 0
               prologue: items 0 .. S-2 -> stage q % S, one commit each     }
               for q in 0 .. nl*nk - 1:
                 cp.async.wait_group S-2; __syncthreads()   item q landed, stage (q-1) % S free
                 issue item q+S-1 (X chunk when nk > 1, Y chunk, Z tile with its first chunk)
                 commit
      FIRST      c == 0: Sacc = 0;  Sacc += X chunk . Y chunk   mma.sync m16n8k16: A by
                 ldmatrix.x4 from Xs, B by ldmatrix.x4.trans from Ys[k][l] (ldmatrix.x4
                 from Ys[l][k] when Y is stored [.., l, k])
                 c == nk-1 (the l tile is complete):
      MIDDLE       S = elementwise(Sacc) at (b, m, l); -inf (softmax) / 0 outside M x L
      SOFTMAX      online softmax on the fragments: row max over the thread's columns,
                   then over the quad (__shfl_xor_sync 1, 2); m' = max(mrun, max); m' =
                   -inf: p = 0 (NaN kept), scale 1; else p = exp(s - m'), scale =
                   exp(mrun - m'); lsum = lsum*scale + sum p (per thread), Oacc *= scale
      SECOND       P -> A fragments in registers (the C layout of two 16x8 tiles is the A
                   layout of one 16x16: pc_pack_{f16,bf16}x2 rounds and packs pairs),
                   Oacc += P . Z tile (ldmatrix.x4.trans from Zs[j % S])
               cp.async.wait_group 0
    WRITE_OUT  lsum summed over the quad; O[b, m, n] = Oacc / lsum (Oacc without a softmax)

Copies: every 8-element chunk is one 16-byte ``cp.async`` (zero-filled past the extents)
when the source's rows are a multiple of 8 elements (checked at run time, uniform in the
block), else 8 element loads stored to shared memory (zero past the extents).  Shared
rows are padded by 8 elements (16 bytes) so the 8 rows one ``ldmatrix`` phase reads fall
in distinct bank groups.  The ring holds ``S`` stages of the X chunk (used only when
``nk > 1``; a single X buffer when ``K`` is a constant ``<= KC``), the Y chunk and the
Z tile; item ``q`` lands in stage ``q % S``, Z tile ``j`` in stage ``j % S`` (issued with
item ``(j, 0)``, read at the end of tile ``j``; tile ``j + S`` is issued after the barrier
of iteration ``(j + S) nk - S + 1 > (j + 1) nk - 1``, so never over a tile still read).

Precision: ``P`` (the softmax's ``exp(s - m')`` in ``[0, 1]``, or ``T`` itself without a
softmax) is rounded to the input dtype before the second product, as FlashAttention
does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from polycomp import ir
from polycomp.scheduler.chain.plan import ChainPlan
from polycomp.scheduler.chain.tc_kernel import PAD, TcChainTiles

from . import ptx
from .chain_simt import BlockVars, ceil_div, elementwise

__all__ = ["TcChain"]

NEG_INF = float("-inf")


def _i(v: int) -> ir.Expr:
    return ir.IntImm(v)


def _f(v: float) -> ir.Expr:
    return ir.FloatImm(v)


def _sel(c, t, f) -> ir.Expr:
    return ir.Select(c, t, f, t.dtype)


def _eq(a, b) -> ir.Expr:
    return ir.binary("==", a, b)


def _unrolled(var: ir.Var, extent: int, body: ir.Stmt) -> ir.Stmt:
    return ir.For(var, _i(0), _i(extent), "unrolled", body)


def _ld(b: ir.Buffer, i) -> ir.Load:
    return ir.Load(b, (ir.const(i),), b.dtype)


def _st(b: ir.Buffer, i, v) -> ir.Stmt:
    return ir.Store(b, (ir.const(i),), v)


@dataclass(frozen=True)
class _Copy:
    """A ``rows x cols`` tile of a global array into shared ``dst`` (row stride
    ``cols + PAD``, from element ``base``): tile row ``r``, column ``c`` is global
    ``index(row0 + r, col0 + c)``, valid below ``(row_ext, col_ext)``."""
    src: ir.Buffer
    index: Callable[[ir.Expr, ir.Expr], tuple]   # (global row, global col) -> index
    rows: int
    cols: int
    row0: ir.Expr
    col0: ir.Expr
    row_ext: ir.Expr
    col_ext: ir.Expr


def _copy(cp: _Copy, dst: ir.Buffer, base: ir.Expr, tx: ir.Var, nt: int) -> ir.Stmt:
    """The copy over ``nt`` threads: 8-element chunks, one 16-byte ``cp.async`` each
    (zero-filled past the extents), when the source rows are a multiple of 8 elements;
    else element copies, consecutive threads on consecutive elements of a row (zero past
    the extents)."""
    stride = cp.cols + PAD
    aligned = _eq(cp.col_ext % 8, _i(0))
    return ir.IfThenElse(aligned, _chunks(cp, dst, base, tx, nt, stride),
                         _elements(cp, dst, base, tx, nt, stride))


def _chunks(cp: _Copy, dst: ir.Buffer, base: ir.Expr, tx: ir.Var, nt: int,
            stride: int) -> ir.Stmt:
    q = ir.Var("tq")
    per_row = cp.cols // 8
    n = cp.rows * per_row
    idx = q * nt + tx
    r, c = idx // per_row, idx % per_row * 8
    gr, gc = cp.row0 + r, cp.col0 + c
    inside = gr < cp.row_ext
    nbytes = _sel(inside, ir.max_(ir.min_(cp.col_ext - gc, _i(8)), _i(0)) * 2, _i(0))
    src = ir.Load(cp.src, tuple(cp.index(_sel(inside, gr, _i(0)),
                                         _sel(gc < cp.col_ext, gc, _i(0)))), cp.src.dtype)
    body: ir.Stmt = ptx.cp_async(ir.Load(dst, (base + r * stride + c,), dst.dtype), src,
                                 nbytes)
    if n % nt:
        body = ir.IfThenElse(idx < n, body)
    return _unrolled(q, -(-n // nt), body)


def _elements(cp: _Copy, dst: ir.Buffer, base: ir.Expr, tx: ir.Var, nt: int,
              stride: int) -> ir.Stmt:
    q = ir.Var("tqe")
    n = cp.rows * cp.cols
    idx = q * nt + tx
    r, c = idx // cp.cols, idx % cp.cols
    gr, gc = cp.row0 + r, cp.col0 + c
    ok = (gr < cp.row_ext) & (gc < cp.col_ext)
    elem = ir.Load(cp.src, tuple(cp.index(gr, gc)), cp.src.dtype)
    body: ir.Stmt = ir.Store(dst, (base + r * stride + c,),
                             _sel(ok, elem, ir.cast(_f(0.0), cp.src.dtype)))
    if n % nt:
        body = ir.IfThenElse(idx < n, body)
    return ir.For(q, _i(0), _i(-(-n // nt)), "serial", body)   # rolled: fewer registers


class TcChain:
    """The micro-kernels of one fused half-precision chain (module docstring) over the
    block parameters ``bv``; ``shared`` / ``local`` list the arrays for the kernel
    wrapping to allocate (outermost first)."""

    def __init__(self, plan: ChainPlan, tiles: TcChainTiles, bv: BlockVars):
        self.plan, self.tiles, self.bv = plan, tiles, bv
        m = self.m = plan.match
        nb = m.batch_dims
        dtype = tiles.dtype
        self.X, self.Y, self.Z, self.O = m.x, m.y, m.z, m.out
        self.bshape = tuple(self.X.shape[:nb])
        self.M, self.K = self.X.shape[nb], self.X.shape[nb + 1]
        self.L, self.N = self.Z.shape[nb], self.Z.shape[nb + 1]
        self.soft = m.has_softmax
        self.bidx: list[ir.Expr] = list(bv.batch)
        self.m0, self.n0 = bv.by * tiles.tm, bv.bx * tiles.tn
        S, tl, tn = tiles.stages, tiles.tl, tiles.tn
        f32, i32 = "float32", "int32"
        self.Xs = ir.Buffer("tx_s", dtype, (_i(tiles.x_stages * tiles.xs),), "shared")
        self.Ys = ir.Buffer("ty_s", dtype, (_i(S * tiles.ys),), "shared")
        self.Zs = ir.Buffer("tz_s", dtype, (_i(S * tiles.zs),), "shared")
        self.Sacc = ir.Buffer("tsacc", f32, (_i(tl // 2),), "local")
        self.Oacc = ir.Buffer("toacc", f32, (_i(tn // 2),), "local")
        self.Af = ir.Buffer("tafrag", i32, (_i(4),), "local")
        self.Bf = ir.Buffer("tbfrag", i32, (_i(4),), "local")
        self.Pf = ir.Buffer("tpfrag", i32, (_i(4),), "local")
        self.Mrun = ir.Buffer("tmrun", f32, (_i(2),), "local")
        self.Lsum = ir.Buffer("tlsum", f32, (_i(2),), "local")
        self.Tmp = ir.Buffer("ttmp", f32, (_i(1),), "local")
        tx = bv.tx
        self.lane = tx % 32
        self.wrow = tx // 32 * 16                    # the warp's first row in the tile
        self.g, self.t4 = self.lane // 4, self.lane % 4
        self.nk = ceil_div(self.K, tiles.kc)

    @property
    def shared(self) -> tuple[ir.Buffer, ...]:
        return (self.Xs, self.Ys, self.Zs)

    @property
    def local(self) -> tuple[ir.Buffer, ...]:
        return (self.Sacc, self.Oacc, self.Af, self.Bf, self.Pf, self.Mrun, self.Lsum,
                self.Tmp)

    @property
    def globals(self) -> tuple[ir.Buffer, ...]:
        return ()

    def grid(self) -> tuple[ir.Expr, ir.Expr, ir.Expr]:
        batch: ir.Expr = _i(1)
        for e in self.bshape:
            batch = batch * e
        return ceil_div(self.N, self.tiles.tn), ceil_div(self.M, self.tiles.tm), batch

    # ------------------------------------------------------------------ steps
    def acc_init(self) -> ir.Stmt:
        """``ACC_INIT``: ``Oacc = 0``, the running max ``-inf`` and the partial row
        sums 0."""
        ct, rr = ir.Var("tct"), ir.Var("trr")
        return ir.seq(_unrolled(ct, self.tiles.tn // 2, _st(self.Oacc, ct, _f(0.0))),
                      _unrolled(rr, 2, ir.seq(_st(self.Mrun, rr, _f(NEG_INF)),
                                              _st(self.Lsum, rr, _f(0.0)))))

    def ring(self, n_ltiles: ir.Expr, steps: dict) -> ir.Stmt:
        """The ring over ``n_ltiles`` ``l`` tiles (module docstring): the prologue, the
        item loop with the steps (``steps``: role name -> (mark value, statements)) and
        the final ``wait_group 0``."""
        t, tx, nt = self.tiles, self.bv.tx, self.tiles.threads
        S, nk = t.stages, self.nk
        nq = n_ltiles * nk
        pv = ir.Var("tpro")
        prologue = ir.seq(
            ir.IfThenElse(_eq(nk, _i(1)), _copy(self._x_copy(_i(0)), self.Xs, _i(0), tx, nt)),
            ir.For(pv, _i(0), _i(S - 1), "unrolled",
                   ir.seq(ir.IfThenElse(pv < nq, self._issue(pv)), ptx.cp_async_commit())))
        q = ir.Var("tq_it")
        first = _mark(steps, "first", self._first(q))
        finish = [_mark(steps, "middle", self._scores(q, steps))]
        if self.soft and "softmax" in steps:
            finish.append(_mark(steps, "softmax", self._online_softmax()))
        finish.append(_mark(steps, "second", self._second(q)))
        loop = ir.For(q, _i(0), nq, "serial", ir.seq(
            ptx.cp_async_wait(S - 2), ir.barrier(),
            ir.IfThenElse(q + (S - 1) < nq, self._issue(q + (S - 1))), ptx.cp_async_commit(),
            first,
            ir.IfThenElse(_eq(q % nk, nk - 1), ir.seq(*finish))))
        return ir.seq(prologue, loop, ptx.cp_async_wait(0))

    def write_out(self) -> ir.Stmt:
        """``WRITE_OUT``: the row sums over the quad, ``O = Oacc / lsum`` (``Oacc``
        without a softmax) in the output's dtype."""
        f32 = "float32"
        ti, ci, rr = ir.Var("tti"), ir.Var("tci"), ir.Var("trr")
        M, N, O = self.M, self.N, self.O

        def out(e, r, c):
            gm, gn = self.m0 + r, self.n0 + c
            v = _ld(self.Oacc, e) / _ld(self.Lsum, ci // 2) if self.soft else _ld(self.Oacc, e)
            return ir.IfThenElse((gm < M) & (gn < N), ir.Store(O, (*self.bidx, gm, gn), v))
        write = []
        if self.soft:
            for mask in (1, 2):
                sh = ir.Var(f"tsh{mask}", f32)
                write.append(_unrolled(rr, 2, ir.LetStmt(sh, ptx.shfl_xor(_ld(self.Lsum, rr),
                                                                          mask),
                                                         _st(self.Lsum, rr,
                                                             _ld(self.Lsum, rr) + sh))))
        write.append(_unrolled(ti, self.tiles.tn // 8, _unrolled(ci, 4, out(
            ti * 4 + ci, self.wrow + self.g + ci // 2 * 8, ti * 8 + self.t4 * 2 + ci % 2))))
        return ir.seq(*write)

    # ------------------------------------------------------------------ the ring's items
    def _x_copy(self, c) -> _Copy:
        t = self.tiles
        return _Copy(self.X, lambda r, k: (*self.bidx, r, k), t.tm, t.kc, self.m0, c * t.kc,
                     self.M, self.K)

    def _y_copy(self, j, c) -> _Copy:
        t = self.tiles
        if t.y_rows:
            return _Copy(self.Y, lambda r, k: (*self.bidx, r, k), t.tl, t.kc, j * t.tl,
                         c * t.kc, self.L, self.K)
        return _Copy(self.Y, lambda k, r: (*self.bidx, k, r), t.kc, t.tl, c * t.kc, j * t.tl,
                     self.K, self.L)

    def _z_copy(self, j) -> _Copy:
        t = self.tiles
        return _Copy(self.Z, lambda r, n: (*self.bidx, r, n), t.tl, t.tn, j * t.tl, self.n0,
                     self.L, self.N)

    def _issue(self, q) -> ir.Stmt:
        t, tx, nt, nk = self.tiles, self.bv.tx, self.tiles.threads, self.nk
        S = t.stages
        j, c, s = q // nk, q % nk, q % S
        return ir.seq(
            None if t.x_resident else
            ir.IfThenElse(nk > 1, _copy(self._x_copy(c), self.Xs, s * t.xs, tx, nt)),
            _copy(self._y_copy(j, c), self.Ys, s * t.ys, tx, nt),
            ir.IfThenElse(_eq(c, _i(0)), _copy(self._z_copy(j), self.Zs, j % S * t.zs, tx, nt)))

    def _first(self, q: ir.Var) -> ir.Stmt:
        """``FIRST`` on item ``q``: ``Sacc = 0`` at its first chunk, ``Sacc += Xs[xstage]
        . Ys[stage]``."""
        t = self.tiles
        S, kc, tl = t.stages, t.kc, t.tl
        Af, Bf, Sacc, Xs, Ys = self.Af, self.Bf, self.Sacc, self.Xs, self.Ys
        lane, wrow, nk = self.lane, self.wrow, self.nk
        lr, lc = lane % 16, lane // 16 * 8      # ldmatrix.x4 row giver: row, column offset
        stage = q % S
        xbase = _i(0) if t.x_resident else _sel(nk > 1, stage, _i(0)) * t.xs
        ybase = stage * t.ys
        kk, npair = ir.Var("tkk"), ir.Var("tnp")
        xst = kc + PAD
        a_ld = ptx.ldmatrix(_ld(Af, 0), _ld(Xs, xbase + (wrow + lr) * xst + kk * 16 + lc), 4,
                            False)
        if t.y_rows:   # Ys[l][k]: matrices (l 0-7, k 0-7), (l 0-7, k 8-15), (l 8-15, k 0-7), ..
            yaddr = ybase + (npair * 16 + lane // 16 * 8 + lane % 8) * (kc + PAD) \
                + kk * 16 + lane // 8 % 2 * 8
            b_ld = ptx.ldmatrix(_ld(Bf, 0), _ld(Ys, yaddr), 4, False)
        else:          # Ys[k][l]: transposed 8x8 matrices
            yaddr = ybase + (kk * 16 + lr) * (tl + PAD) + npair * 16 + lc
            b_ld = ptx.ldmatrix(_ld(Bf, 0), _ld(Ys, yaddr), 4, True)
        ct = ir.Var("tct")
        zero_s = _unrolled(ct, tl // 2, _st(Sacc, ct, _f(0.0)))
        mma = _unrolled(kk, kc // 16, ir.seq(
            a_ld,
            _unrolled(npair, tl // 16, ir.seq(
                b_ld,
                ptx.mma(_ld(Sacc, npair * 8), _ld(Af, 0), _ld(Bf, 0), t.dtype),
                ptx.mma(_ld(Sacc, npair * 8 + 4), _ld(Af, 0), _ld(Bf, 2), t.dtype)))))
        return ir.seq(ir.IfThenElse(_eq(q % nk, _i(0)), zero_s), mma)

    def _frag(self, body) -> ir.Stmt:
        """``body(index, tile row, tile column)`` over the thread's Sacc elements."""
        ti, ci = ir.Var("tti"), ir.Var("tci")
        return _unrolled(ti, self.tiles.tl // 8, _unrolled(ci, 4, body(
            ti * 4 + ci, self.wrow + self.g + ci // 2 * 8, ti * 8 + self.t4 * 2 + ci % 2)))

    def _scores(self, q: ir.Var, steps: dict) -> ir.Stmt:
        """``MIDDLE``: the elementwise stages (of the ``middle`` step's statements; none
        without one) on the fragments at ``(b, m, l)``, ``-inf`` (softmax) / 0 outside
        ``M x L``."""
        j = q // self.nk
        stmts = steps["middle"][1] if "middle" in steps else ()

        def one(e, r, c):
            gm, gl = self.m0 + r, j * self.tiles.tl + c
            v = elementwise(self.m, _ld(self.Sacc, e), [*self.bidx, gm, gl], stmts)
            return _st(self.Sacc, e, _sel((gm < self.M) & (gl < self.L), v,
                                          _f(NEG_INF if self.soft else 0.0)))
        return self._frag(one)

    def _second(self, q: ir.Var) -> ir.Stmt:
        """``SECOND``: ``P`` packed into A fragments, ``Oacc += P . Zs[j % S]``."""
        t = self.tiles
        j = q // self.nk
        kk, npair = ir.Var("tkk"), ir.Var("tnp")
        lr, lc = self.lane % 16, self.lane // 16 * 8
        zbase = j % t.stages * t.zs
        zaddr = zbase + (kk * 16 + lr) * (t.tn + PAD) + npair * 16 + lc
        pack = ptx.pack_half2
        Sacc, Pf, Bf, Oacc = self.Sacc, self.Pf, self.Bf, self.Oacc
        return _unrolled(kk, t.tl // 16, ir.seq(
            _st(Pf, 0, pack(_ld(Sacc, kk * 8), _ld(Sacc, kk * 8 + 1), t.dtype)),
            _st(Pf, 1, pack(_ld(Sacc, kk * 8 + 2), _ld(Sacc, kk * 8 + 3), t.dtype)),
            _st(Pf, 2, pack(_ld(Sacc, kk * 8 + 4), _ld(Sacc, kk * 8 + 5), t.dtype)),
            _st(Pf, 3, pack(_ld(Sacc, kk * 8 + 6), _ld(Sacc, kk * 8 + 7), t.dtype)),
            _unrolled(npair, t.tn // 16, ir.seq(
                ptx.ldmatrix(_ld(Bf, 0), _ld(self.Zs, zaddr), 4, True),
                ptx.mma(_ld(Oacc, npair * 8), _ld(Pf, 0), _ld(Bf, 0), t.dtype),
                ptx.mma(_ld(Oacc, npair * 8 + 4), _ld(Pf, 0), _ld(Bf, 2), t.dtype)))))

    def _online_softmax(self) -> ir.Stmt:
        """``SOFTMAX`` on the thread's two rows (fragment rows ``g``, ``g + 8``): scores
        -> ``p``, running max / per-thread partial sum updated, ``Oacc`` rescaled."""
        return ir.seq(*(self._softmax_row(r) for r in (0, 1)))

    def _softmax_row(self, r: int) -> ir.Stmt:
        """Row ``r`` (0: ``g``, 1: ``g + 8``) of :meth:`_online_softmax`: elements
        ``2r, 2r+1`` of each 16x8 fragment."""
        f32 = "float32"
        tl, tn = self.tiles.tl, self.tiles.tn
        Sacc, Oacc, Mrun, Lsum, Tmp = self.Sacc, self.Oacc, self.Mrun, self.Lsum, self.Tmp
        ti, ci = ir.Var("tsi"), ir.Var("tsc")

        def over_row(body, tiles: int = tl // 8) -> ir.Stmt:
            return _unrolled(ti, tiles, _unrolled(ci, 2, body(ti * 4 + 2 * r + ci)))
        mx = _ld(Tmp, 0)
        shuffles = []
        for mask in (1, 2):
            sh = ir.Var(f"tmx{r}{mask}", f32)
            shuffles.append(ir.LetStmt(sh, ptx.shfl_xor(mx, mask),
                                       _st(Tmp, 0, _sel(sh > mx, sh, mx))))
        mnew = ir.Var(f"tmnew{r}", f32)
        scale = ir.Var(f"tscale{r}", f32)
        dead = _eq(mnew, _f(NEG_INF))            # the row is all -inf so far

        def upd_max(e):
            v = _ld(Sacc, e)
            return _st(Tmp, 0, _sel(v > mx, v, mx))

        def to_p(e):
            v = _ld(Sacc, e)
            p = _sel(dead, _sel(ir.binary("!=", v, v), v, _f(0.0)), ir.call("exp", v - mnew))
            return _st(Sacc, e, p)

        def add(e):
            return _st(Tmp, 0, _ld(Tmp, 0) + _ld(Sacc, e))

        def rescale(e):
            return _st(Oacc, e, _ld(Oacc, e) * scale)
        old = _ld(Mrun, r)
        return ir.seq(
            _st(Tmp, 0, _f(NEG_INF)), over_row(upd_max), *shuffles,
            ir.LetStmt(mnew, _sel(mx > old, mx, old), ir.LetStmt(
                scale, _sel(dead, _f(1.0), ir.call("exp", old - mnew)), ir.seq(
                    over_row(to_p),
                    _st(Tmp, 0, _f(0.0)), over_row(add),
                    _st(Lsum, r, _ld(Lsum, r) * scale + _ld(Tmp, 0)),
                    _st(Mrun, r, mnew),
                    over_row(rescale, tn // 8)))))


def _mark(steps: dict, role: str, body: ir.Stmt) -> ir.Stmt:
    """``body`` under the ``chain_step`` mark of ``role`` (its value), as it was in the
    tree; unmarked where the tree had no such step (no elementwise stage)."""
    from polycomp.scheduler.common import marks
    if role not in steps:
        return body
    return ir.AttrStmt(marks.CHAIN_STEP, steps[role][0], body)
