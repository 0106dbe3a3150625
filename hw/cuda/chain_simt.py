"""The float32 chain's micro-kernels on CUDA cores, as CUDA-level IR (what the
``chain_step`` / ``chain_ring`` marks of a fused chain's program tree expand to:
:mod:`polycomp.hw.cuda.chain_passes`; the tree: :mod:`polycomp.scheduler.chain.cuda_tree`;
the tiles: :mod:`polycomp.scheduler.chain.cuda_kernel`).

One thread block per ``(n-block, m-block, batch[, split])``, ``THREADS`` threads on
``x``; the chain's order is Chimera's ``(b, m, l, k | n)``.  Per step:

* ``ACC_INIT``: ``Oacc[TM][TN] = 0`` (registers, ``EO`` per thread); with a softmax the
  rows' running max ``-inf`` and sum 0 (shared, thread ``r < TM`` owns row ``r``), a
  barrier;
* the ring (``l`` loop, one ``TL`` tile per iteration): ``Zs[TL][TN] <- Z[b, l-block,
  n-block]`` issued by ``cp.async`` (16 B, zero-filled past ``N`` and ``L``) at the top of
  the iteration when ``N % 4 == 0``, so the copy overlaps the first product;
* ``FIRST``: ``Sacc[TM][TL] = 0`` (registers, ``ES`` per thread), ``X``'s rows staged in
  shared memory in chunks of ``KR = 64`` columns (once per block when ``K <= KR``: they
  stay resident across ``l`` tiles), ``Y`` in ``TK = 16`` slices (``Y`` stored ``[.., l,
  k]`` read as rows), ``Sacc += Xs . Ys``;
* ``MIDDLE`` (or, without elementwise stages, the end of ``FIRST``): the score tile
  ``Ss[TM][TL] <- elementwise(Sacc)`` in shared memory, padded with ``-inf`` (softmax) or
  0, a barrier;
* ``SOFTMAX`` (thread ``r < TM`` owns row ``r``): ``m' = max(m, max_c Ss[r][c])``; ``m' =
  -inf``: ``p = 0`` (NaN kept), scale 1; else ``p = exp(S - m')``, scale ``exp(m - m')``,
  ``s = s * scale + sum p``; a barrier;
* ``SECOND``: ``Oacc *= scale[row]`` (softmax), the Z tile waited for (``cp.async``) or
  loaded, ``Oacc += Ss . Zs``;
* ``WRITE_OUT``: ``O[b, m-block, n-block] = Oacc (/ rsum[row])``; with ``S > 1`` splits
  the split's unnormalised tile into ``cpart_o[S][b..][M][N]`` and, with a softmax, the
  first n-block's rows' running max and sum into ``cpart_m``, ``cpart_s``;
* ``COMBINE`` (the split's second kernel, one thread per element of ``O``): ``O = sum_s
  e^(m_s - Mx) O_s / sum_s e^(m_s - Mx) s_s``, ``Mx = max_s m_s`` (weights 1 where ``Mx =
  -inf``: a row masked in full stays ``0 / 0 = NaN``); without a softmax ``O = sum_s O_s``.

Element ``e`` of thread ``t`` in a ``R x C`` tile is ``i = e * THREADS + t``, row
``i // C``, column ``i % C`` (coalesced global loads, conflict-free shared rows); the
per-thread element loops are ``unrolled`` with constant trip counts, so nvcc keeps
``Sacc``/``Oacc`` in registers.  The block's parameters are the tree's (``BlockVars``):
the kernel wrapping binds them to ``blockIdx``.
"""
from __future__ import annotations

from dataclasses import dataclass

from polycomp import ir
from polycomp.scheduler.chain.cuda_kernel import KR, CudaChainTiles
from polycomp.scheduler.chain.detect import ChainMatch
from polycomp.scheduler.chain.plan import ChainPlan

from . import ptx

__all__ = ["BlockVars", "SimtChain", "batch_indices", "ceil_div", "cooperative", "elementwise"]

NEG_INF = float("-inf")


@dataclass(frozen=True)
class BlockVars:
    """The kernel's block parameters as IR variables (named as the program tree's
    parameters: the kernel wrapping substitutes them by name) and the thread index."""
    bx: ir.Var                       # n-block
    by: ir.Var                       # m-block
    batch: tuple[ir.Var, ...]        # one per batch dimension
    split: ir.Var | None             # the split of l (S > 1)
    tx: ir.Var


def _i(v: int) -> ir.Expr:
    return ir.IntImm(v)


def _f(v: float) -> ir.Expr:
    return ir.FloatImm(v)


def _for(var: ir.Var, extent, body: ir.Stmt, kind: str = "serial",
         start: ir.Expr | None = None) -> ir.Stmt:
    return ir.For(var, start if start is not None else _i(0), ir.const(extent), kind, body)


def _sel(c, t, f) -> ir.Expr:
    return ir.Select(c, t, f, t.dtype)


def ceil_div(a: ir.Expr, b: int) -> ir.Expr:
    return (a + (b - 1)) // b


def _seq(*stmts) -> ir.Stmt:
    return ir.seq(*stmts)


def cooperative(rows: int, cols: int, nt: int, tx: ir.Var, body) -> ir.Stmt:
    """``body(row, col)`` for every element of a ``rows x cols`` tile, dealt over the
    ``nt`` threads (element ``q * nt + t``)."""
    q = ir.Var("cq")
    n_el = rows * cols
    idx = q * nt + tx
    inner = body(idx // cols, idx % cols)
    if n_el % nt:
        inner = ir.IfThenElse(idx < n_el, inner)
    return _for(q, -(-n_el // nt), inner, "unrolled")


def elementwise(m: ChainMatch, value: ir.Expr, indices: list[ir.Expr],
                statements: tuple[str, ...] | None = None) -> ir.Expr:
    """The chain's elementwise stages (those of ``statements``, a ``MIDDLE`` step's:
    each stage's statement is named as the stage) applied to ``value`` at ``(b.., m,
    l)``."""
    v = value
    for stage in m.elementwise:
        if statements is not None and stage.stage.name not in statements:
            continue
        mapping = {it: x for it, x in zip(stage.iters, indices)}
        v = _Replace(stage.prev, v, mapping).visit(stage.stage.body)
    return v


class _Replace(ir.Mutator):
    """An elementwise stage's body with ``prev`` at the point replaced by ``value`` and
    the stage's iterators by the kernel's indices."""

    def __init__(self, prev: ir.Buffer, value: ir.Expr, mapping: dict):
        self.prev, self.value, self.mapping = prev, value, mapping

    def visit_Load(self, e):
        if e.buffer is self.prev:
            return self.value
        return ir.Load(e.buffer, tuple(self.visit(i) for i in e.indices), e.dtype, e.lanes)

    def visit_Var(self, v):
        return self.mapping.get(v, v)


@dataclass(frozen=True)
class _Split:
    """Block ``index`` (``0 <= index < ns``) of those sharing one ``O`` tile's ``l`` tiles,
    and the global temporaries of the partial results: ``o[ns][b..][M][N]``, with a
    softmax the rows' running max ``m`` and sum ``s`` (``[ns][b..][M]``)."""
    ns: int
    index: ir.Expr
    o: ir.Buffer
    m: ir.Buffer | None
    s: ir.Buffer | None


class SimtChain:
    """The micro-kernels of one fused float32 chain (module docstring) over the block
    parameters ``bv``; ``buffers`` lists the shared arrays (outermost first) and the
    per-thread ones, for the kernel wrapping to allocate."""

    def __init__(self, plan: ChainPlan, tiles: CudaChainTiles, bv: BlockVars):
        self.plan, self.tiles, self.bv = plan, tiles, bv
        m = self.m = plan.match
        nb = m.batch_dims
        self.X, self.Y, self.Z, self.O = m.x, m.y, m.z, m.out
        self.bshape = tuple(self.X.shape[:nb])
        self.M, self.K = self.X.shape[nb], self.X.shape[nb + 1]
        self.L, self.N = self.Z.shape[nb], self.Z.shape[nb + 1]
        self.y_rows = bool(getattr(m, "y_transposed", False))    # Y stored [.., l, k]
        self.soft = m.has_softmax
        self.bidx: list[ir.Expr] = list(bv.batch)
        tm, tl, tk, tn = tiles.tm, tiles.tl, tiles.tk, tiles.tn
        self.m0 = bv.by * tm
        self.n0 = bv.bx * tn
        f32 = "float32"
        self.Xs = ir.Buffer("cx_s", f32, (_i(tm * KR),), "shared")
        self.Ys = ir.Buffer("cy_s", f32, (_i(tk * tl),), "shared")
        self.Ss = ir.Buffer("cs_s", f32, (_i(tm * tl),), "shared")
        self.Zs = ir.Buffer("cz_s", f32, (_i(tl * tn),), "shared")
        self.Rmax = ir.Buffer("crmax_s", f32, (_i(tm),), "shared")
        self.Rsum = ir.Buffer("crsum_s", f32, (_i(tm),), "shared")
        self.Rsc = ir.Buffer("crsc_s", f32, (_i(tm),), "shared")
        self.Sacc = ir.Buffer("csacc", f32, (_i(tiles.es),), "local")
        self.Oacc = ir.Buffer("coacc", f32, (_i(tiles.eo),), "local")
        self.sp: _Split | None = None
        if tiles.splits > 1:
            assert bv.split is not None
            ns = tiles.splits

            def rows(name: str) -> ir.Buffer | None:
                return ir.Buffer(name, f32, (_i(ns), *self.bshape, self.M), "global") \
                    if self.soft else None
            self.sp = _Split(ns, bv.split, ir.Buffer(
                "cpart_o", f32, (_i(ns), *self.bshape, self.M, self.N), "global"),
                rows("cpart_m"), rows("cpart_s"))

    # ------------------------------------------------------------------ layout
    @property
    def shared(self) -> tuple[ir.Buffer, ...]:
        """Shared arrays, outermost first."""
        return (self.Xs, self.Ys, self.Ss, self.Zs, self.Rmax, self.Rsum, self.Rsc)

    @property
    def local(self) -> tuple[ir.Buffer, ...]:
        """Per-thread arrays, outermost first."""
        return (self.Sacc, self.Oacc)

    @property
    def globals(self) -> tuple[ir.Buffer, ...]:
        """Global temporaries of the split (outermost first), none unsplit."""
        sp = self.sp
        if sp is None:
            return ()
        return tuple(b for b in (sp.o, sp.m, sp.s) if b is not None)

    def grid(self) -> tuple[ir.Expr, ir.Expr, ir.Expr]:
        """Blocks on ``x`` (n-blocks), ``y`` (m-blocks), ``z`` (batch x splits)."""
        batch: ir.Expr = _i(1)
        for e in self.bshape:
            batch = batch * e
        z = batch * self.sp.ns if self.sp is not None else batch
        return ceil_div(self.N, self.tiles.tn), ceil_div(self.M, self.tiles.tm), z

    def l_range(self, s: ir.Expr) -> tuple[ir.Expr, ir.Expr]:
        """Split ``s``'s ``l`` tiles ``[first, end)``: ``[s * P, s * P + max(min(P, nl -
        s * P), 0))``, ``P = ceil(nl / S)``, ``nl = ceil(L / TL)`` (empty where ``L`` is
        small at run time)."""
        assert self.sp is not None
        nl = ceil_div(self.L, self.tiles.tl)
        per = ceil_div(nl, self.sp.ns)
        first = s * per
        return first, first + ir.max_(ir.min_(per, nl - first), _i(0))

    # ------------------------------------------------------------------ helpers
    def _ld(self, b, *idx):
        return ir.Load(b, tuple(idx), b.dtype)

    def _st(self, b, idx, v):
        return ir.Store(b, tuple(idx) if isinstance(idx, tuple) else (idx,), v)

    def _per_elem(self, n_el: int, cols: int, body) -> ir.Stmt:
        e = ir.Var("ce")
        idx = e * self.tiles.threads + self.bv.tx
        return _for(e, n_el, body(e, idx // cols, idx % cols), "unrolled")

    # ------------------------------------------------------------------ steps
    def acc_init(self) -> ir.Stmt:
        """``ACC_INIT``: ``Oacc = 0``; with a softmax the rows' max ``-inf`` and sum 0."""
        tx, tm = self.bv.tx, self.tiles.tm
        init = [self._per_elem(self.tiles.eo, self.tiles.tn,
                               lambda e, r, c: self._st(self.Oacc, e, _f(0.0)))]
        if self.soft:
            init.append(ir.IfThenElse(tx < tm, _seq(self._st(self.Rmax, tx, _f(NEG_INF)),
                                                     self._st(self.Rsum, tx, _f(0.0)))))
            init.append(ir.barrier())
        return _seq(*init)

    def prefetch_z(self, l0: ir.Expr) -> ir.Stmt:
        """The ring's copy of the ``l0``-th Z tile: ``cp.async`` (16 B per copy) issued
        and committed when Z's rows are 16-byte aligned (``N % 4 == 0``)."""
        t = self.tiles
        aligned = ir.binary("==", self.N % 4, _i(0))
        return ir.IfThenElse(aligned, _seq(
            cooperative(t.tl, t.tn // 4, t.threads, self.bv.tx, lambda r, c: self._cp_async_z(
                r, c * 4, l0 * t.tl + r, self.n0 + c * 4)),
            ptx.cp_async_commit()))

    def first(self, l0: ir.Expr, l_first: ir.Expr) -> ir.Stmt:
        """``FIRST``: ``Sacc = X[b, m-block, :] . Y[b, :, l-block]``; X's rows in chunks
        of KR columns, loaded once per block (at ``l_first``, the block's first ``l``
        tile) when ``K <= KR``."""
        t = self.tiles
        tm, tl, tk = t.tm, t.tl, t.tk
        X, K, M = self.X, self.K, self.M
        kc, k0, kk = ir.Var("ckc"), ir.Var("ck0"), ir.Var("ckk")
        barrier = ir.barrier()

        def load_x(r, c):
            gm, gk = self.m0 + r, kc * KR + c
            ok = (gm < M) & (gk < K)
            return self._st(self.Xs, r * KR + c, _sel(ok, self._ld(X, *self.bidx, gm, gk),
                                                      _f(0.0)))

        def mac_s(e, r, c):
            return self._st(self.Sacc, e, self._ld(self.Sacc, e)
                            + self._ld(self.Xs, r * KR + k0 * tk + kk)
                            * self._ld(self.Ys, kk * tl + c))
        reload = ir.binary("||", ir.binary("==", l0, l_first), K > KR)
        return _seq(
            self._per_elem(t.es, tl, lambda e, r, c: self._st(self.Sacc, e, _f(0.0))),
            _for(kc, ceil_div(K, KR), _seq(
                ir.IfThenElse(reload, cooperative(tm, KR, t.threads, self.bv.tx, load_x)),
                _for(k0, ir.min_(_i(KR // tk), ceil_div(K - kc * KR, tk)), _seq(
                    self._load_y(kc * KR + k0 * tk, l0 * tl), barrier,
                    _for(kk, tk, self._per_elem(t.es, tl, mac_s)), barrier)))))

    def scores(self, l0: ir.Expr, statements: tuple[str, ...] | None) -> ir.Stmt:
        """``MIDDLE``: ``Ss <- elementwise(Sacc)`` (the stages of ``statements``; none:
        ``Ss <- Sacc``), padded with ``-inf`` (softmax) or 0 outside ``M x L``; a
        barrier."""
        tl = self.tiles.tl

        def one(e, r, c):
            gm, gl = self.m0 + r, l0 * tl + c
            v = elementwise(self.m, self._ld(self.Sacc, e), [*self.bidx, gm, gl],
                            statements or ())
            pad = _f(NEG_INF if self.soft else 0.0)
            return self._st(self.Ss, r * tl + c, _sel((gm < self.M) & (gl < self.L), v, pad))
        return _seq(self._per_elem(self.tiles.es, tl, one), ir.barrier())

    def softmax(self) -> ir.Stmt:
        """``SOFTMAX``: thread ``r < TM`` rescales row ``r`` of ``Ss`` in place to ``p =
        exp(s - m')`` and updates the row's running max, sum and scale; a barrier."""
        f32 = "float32"
        tx, tm, tl = self.bv.tx, self.tiles.tm, self.tiles.tl
        Ss, Rmax, Rsum, Rsc = self.Ss, self.Rmax, self.Rsum, self.Rsc
        mnew, scale = ir.Var("cmnew", f32), ir.Var("cscale", f32)
        cc = ir.Var("ccol")
        Mx = ir.Buffer("cmx_r", f32, (_i(1),), "local")
        Sm = ir.Buffer("csum_r", f32, (_i(1),), "local")
        row = tx

        def ld(b, i):
            return ir.Load(b, (i,), f32)

        def st(b, i, v):
            return ir.Store(b, (i,), v)
        sv = ld(Ss, row * tl + cc)
        find_max = _seq(
            st(Mx, _i(0), _f(NEG_INF)),
            _for(cc, tl, st(Mx, _i(0), _sel(sv > ld(Mx, _i(0)), sv, ld(Mx, _i(0))))))
        masked_row = _seq(     # all -inf so far: p = 0 (NaN kept), nothing to rescale
            _for(cc, tl, st(Ss, row * tl + cc, _sel(ir.binary("!=", sv, sv), sv, _f(0.0)))),
            st(Rsc, row, _f(1.0)))
        p = ir.call("exp", sv - mnew)
        normal_row = _seq(
            st(Sm, _i(0), _f(0.0)),
            _for(cc, tl, _seq(st(Ss, row * tl + cc, p),
                              st(Sm, _i(0), ld(Sm, _i(0)) + ld(Ss, row * tl + cc)))),
            ir.LetStmt(scale, ir.call("exp", ld(Rmax, row) - mnew), _seq(
                st(Rsum, row, ld(Rsum, row) * scale + ld(Sm, _i(0))),
                st(Rmax, row, mnew),
                st(Rsc, row, scale))))
        row_body = ir.Allocate(Mx, ir.Allocate(Sm, _seq(
            find_max,
            ir.LetStmt(mnew, _sel(ld(Mx, _i(0)) > ld(Rmax, row), ld(Mx, _i(0)),
                                  ld(Rmax, row)),
                       ir.IfThenElse(ir.binary("==", mnew, _f(NEG_INF)), masked_row,
                                     normal_row)))))
        return _seq(ir.IfThenElse(tx < tm, row_body), ir.barrier())

    def second(self, l0: ir.Expr) -> ir.Stmt:
        """``SECOND``: ``Oacc (*= scale) += Ss . Z[b, l-block, n-block]``: the ring's Z
        tile waited for (``cp.async``) or loaded with plain loads."""
        t = self.tiles
        tl, tn = t.tl, t.tn
        jj = ir.Var("cjj")
        Z, L, N = self.Z, self.L, self.N

        def load_z(r, c):
            gl, gn = l0 * tl + r, self.n0 + c
            ok = (gl < L) & (gn < N)
            return self._st(self.Zs, r * tn + c, _sel(ok, self._ld(Z, *self.bidx, gl, gn),
                                                      _f(0.0)))

        def rescale(e, r, c):
            return self._st(self.Oacc, e, self._ld(self.Oacc, e) * self._ld(self.Rsc, r))

        def mac_o(e, r, c):
            return self._st(self.Oacc, e, self._ld(self.Oacc, e)
                            + self._ld(self.Ss, r * tl + jj) * self._ld(self.Zs, jj * tn + c))
        aligned = ir.binary("==", N % 4, _i(0))
        return _seq(
            self._per_elem(t.eo, tn, rescale) if self.soft else None,
            ir.IfThenElse(aligned, ptx.cp_async_wait(0),
                          cooperative(tl, tn, t.threads, self.bv.tx, load_z)),
            ir.barrier(),
            _for(jj, tl, self._per_elem(t.eo, tn, mac_o)), ir.barrier())

    def write_out(self) -> ir.Stmt:
        """``WRITE_OUT``: ``O`` from ``Oacc`` (``/ rsum`` with a softmax), or with
        splits the partial tile and the rows' running max and sum (first n-block)."""
        sp, tm, tx = self.sp, self.tiles.tm, self.bv.tx
        O, M, N = self.O, self.M, self.N

        def out(e, r, c):
            gm, gn = self.m0 + r, self.n0 + c
            if sp is not None:
                return ir.IfThenElse((gm < M) & (gn < N),
                                     self._st(sp.o, (sp.index, *self.bidx, gm, gn),
                                              self._ld(self.Oacc, e)))
            v = self._ld(self.Oacc, e) / self._ld(self.Rsum, r) if self.soft \
                else self._ld(self.Oacc, e)
            return ir.IfThenElse((gm < M) & (gn < N), self._st(O, (*self.bidx, gm, gn), v))
        stats = None
        if sp is not None and sp.m is not None and sp.s is not None:
            gm = self.m0 + tx
            ok = ir.binary("==", self.bv.bx, _i(0)) & (tx < tm) & (gm < M)
            idx = (sp.index, *self.bidx, gm)
            stats = ir.IfThenElse(ok, _seq(ir.Store(sp.m, idx, self._ld(self.Rmax, tx)),
                                           ir.Store(sp.s, idx, self._ld(self.Rsum, tx))))
        return _seq(self._per_elem(self.tiles.eo, self.tiles.tn, out), stats)

    def combine_grid(self) -> ir.Expr:
        """Blocks of the combining kernel: one thread per element of ``O``."""
        return ceil_div(self._total(), self.tiles.threads)

    def _total(self) -> ir.Expr:
        total: ir.Expr = self.M * self.N
        for e in self.bshape:
            total = total * e
        return total

    def combine(self, cb: ir.Var, ct: ir.Var) -> ir.Stmt:
        """``COMBINE`` for block ``cb``, thread ``ct`` (module docstring): this thread's
        element of ``O`` from the ``S`` partial tiles."""
        sp = self.sp
        assert sp is not None
        f32 = "float32"
        nt = self.tiles.threads
        sv = ir.Var("cc_s")
        ns, Op, Mp, Sp = sp.ns, sp.o, sp.m, sp.s
        O, M, N = self.O, self.M, self.N
        total = self._total()
        i = cb * nt + ct
        gn, row = i % N, i // N
        gm = row % M
        bidx = batch_indices(self.bshape, row // M)
        Num = ir.Buffer("cc_num", f32, (_i(1),), "local")
        Den = ir.Buffer("cc_den", f32, (_i(1),), "local")
        Mx = ir.Buffer("cc_max", f32, (_i(1),), "local")

        def ld(b, *idx):
            return ir.Load(b, tuple(idx), f32)

        def acc(b, v):
            return ir.Store(b, (_i(0),), ld(b, _i(0)) + v)
        o_s = ld(Op, sv, *bidx, gm, gn)
        body: ir.Stmt
        if Mp is None or Sp is None:
            body = _seq(ir.Store(Num, (_i(0),), _f(0.0)),
                        _for(sv, ns, acc(Num, o_s), "unrolled"),
                        ir.Store(O, (*bidx, gm, gn), ld(Num, _i(0))))
            body = ir.Allocate(Num, body)
        else:
            Ml = ir.Buffer("cc_m", f32, (_i(ns),), "local")      # the m_s, read once
            m_s, s_s = ld(Ml, sv), ld(Sp, sv, *bidx, gm)
            mx = ld(Mx, _i(0))
            w = ir.Var("cc_w", f32)
            body = ir.Allocate(Ml, ir.Allocate(Mx, ir.Allocate(Num, ir.Allocate(Den, _seq(
                ir.Store(Mx, (_i(0),), _f(NEG_INF)),
                _for(sv, ns, _seq(ir.Store(Ml, (sv,), ld(Mp, sv, *bidx, gm)),
                                  ir.Store(Mx, (_i(0),), _sel(m_s > mx, m_s, mx))), "unrolled"),
                ir.Store(Num, (_i(0),), _f(0.0)), ir.Store(Den, (_i(0),), _f(0.0)),
                _for(sv, ns, ir.LetStmt(w, _sel(ir.binary("==", mx, _f(NEG_INF)), _f(1.0),
                                                 ir.call("exp", m_s - mx)),
                                        _seq(acc(Num, w * o_s), acc(Den, w * s_s))),
                     "unrolled"),
                ir.Store(O, (*bidx, gm, gn), ld(Num, _i(0)) / ld(Den, _i(0))))))))
        return ir.IfThenElse(i < total, body)

    # ------------------------------------------------------------------ copies
    def _load_y(self, k_lo, l_lo) -> ir.Stmt:
        """``Ys[TK][TL] <- Y[b, k_lo:, l_lo:]`` (zero pad) over the threads; ``Y`` stored
        ``[.., k, l]``, or ``[.., l, k]`` (consecutive threads on consecutive ``k``
        then, for coalescing)."""
        t = self.tiles
        tk, tl = t.tk, t.tl
        Y, K, L, Ys = self.Y, self.K, self.L, self.Ys

        def kl(gk, gl, pos):
            ok = (gk < K) & (gl < L)
            idx = (*self.bidx, gl, gk) if self.y_rows else (*self.bidx, gk, gl)
            return ir.Store(Ys, (pos,), _sel(ok, ir.Load(Y, idx, Y.dtype), _f(0.0)))
        if self.y_rows:
            return cooperative(tl, tk, t.threads, self.bv.tx,
                               lambda r, c: kl(k_lo + c, l_lo + r, c * tl + r))
        return cooperative(tk, tl, t.threads, self.bv.tx,
                           lambda r, c: kl(k_lo + r, l_lo + c, r * tl + c))

    def _cp_async_z(self, r, c, gl, gn) -> ir.Stmt:
        """One 16-byte ``cp.async`` of ``Z[b, gl, gn:gn+4]`` into ``Zs[r][c:c+4]``: the
        elements inside ``Z`` are read, the rest of the 16 bytes zero-filled (a copy wholly
        outside reads nothing and points at an in-bounds, aligned element)."""
        L, N, Z = self.L, self.N, self.Z
        inside = gl < L
        nbytes = _sel(inside, ir.max_(ir.min_(N - gn, _i(4)), _i(0)) * 4, _i(0))
        src = ir.Load(Z, (*self.bidx, _sel(inside, gl, _i(0)), _sel(gn < N, gn, _i(0))),
                      Z.dtype)
        return ptx.cp_async(ir.Load(self.Zs, (r * self.tiles.tn + c,), self.Zs.dtype), src,
                            nbytes)


def batch_indices(bshape: tuple, bz: ir.Expr) -> list[ir.Expr]:
    """The batch indices of the flattened batch index ``bz`` (the last dimension
    fastest): what the kernel wrapping binds the batch parameters to."""
    bidx: list[ir.Expr] = []
    rest: ir.Expr = bz
    for k in reversed(range(len(bshape))):
        bidx.insert(0, rest % bshape[k] if k else rest)
        rest = rest // bshape[k]
    return bidx
