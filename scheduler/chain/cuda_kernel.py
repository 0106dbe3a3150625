"""The fused chain as a CUDA kernel (targets ``cuda``, ``cuda-sm90``), built as
CUDA-level IR so that the printer emits it and the GPU-semantics simulator runs it.

One thread block per ``(n-block, m-block, batch)`` (grid ``x, y, z``), ``THREADS``
threads on ``x``; the chain's order is Chimera's ``(b, m, l, k | n)``:

    Oacc[TM][TN] = 0 (registers, EO per thread); rmax = -inf, rsum = 0 (shared, per row)
    for l0 in steps of TL:                                       (streamed: Y, Z tiles)
      Sacc[TM][TL] = 0 (registers, ES per thread)   (Y stored [.., l, k] when the match
                                                    says ``y_transposed``: Q K^T)
      for kc in steps of KR = 64:
        Xs[TM][KR] <- X[b, m-block, kc:]     (zero pad; only at the first l tile when
                                              K <= KR: X's rows stay resident)
        for k0 in steps of TK within the chunk:
          Ys[TK][TL] <- Y[b, kc+k0:, l-block]  (zero pad)
          __syncthreads(); Sacc += Xs[:, k0:] . Ys; __syncthreads()
      Ss[TM][TL] <- elementwise(Sacc)          (padding: -inf with a softmax, else 0)
      __syncthreads()
      softmax (thread r < TM owns row r): m' = max(m, max_c Ss[r][c]);
        m' = -inf: p = 0 (NaN kept), scale 1; else p = exp(S - m'), scale = exp(m - m'),
        s = s * scale + sum p;  Sc[r] = scale
      __syncthreads()
      Oacc *= Sc[row]; Zs[TL][TN] <- Z[b, l-block, n-block] (zero pad)
      __syncthreads(); Oacc += Ss . Zs; __syncthreads()
    O[b, m-block, n-block] = Oacc (/ rsum[row] with a softmax)

so the intermediate ``T`` never reaches global memory: its ``TM x TL`` tile lives in
registers (accumulation) and shared memory (softmax, second product).  A row masked in
full ends as ``0 / 0 = NaN``, as numpy's unfused ``exp(x - max) / sum`` does.

Split ``l`` (flash-decoding), when the grid above is small (:func:`split_count`): with
``S > 1`` splits grid ``z`` covers ``(batch, split)`` (``bz = b * S + s``) and block
``s`` walks only its ``l`` tiles ``[s * P, min((s + 1) * P, ceil(L/TL)))``, ``P =
ceil(ceil(L/TL) / S)`` (empty where ``L`` is small at run time: it writes ``O_s = 0,
m_s = -inf, s_s = 0``).  It writes its unnormalised ``Oacc`` to the global temporary
``cpart_o[S][b..][M][N]`` and, with a softmax, the first n-block writes its rows'
running max and sum to ``cpart_m``, ``cpart_s[S][b..][M]``; a second kernel
(:func:`_combine`, one thread per element of ``O``) merges the partials in the online
softmax's way (``O = sum_s e^(m_s - Mx) O_s / sum_s e^(m_s - Mx) s_s``, ``Mx = max_s
m_s``; without a softmax ``O = sum_s O_s``).  ``S = 1`` is the single kernel above.

Element ``e`` of thread ``t`` in a ``R x C`` tile is ``i = e * THREADS + t``, row
``i // C``, column ``i % C`` (consecutive threads on consecutive columns: coalesced
global loads, conflict-free shared rows); the per-thread element loops are ``unrolled``
with constant trip counts, so nvcc keeps ``Sacc``/``Oacc`` in registers.

Tiles (:func:`cuda_tiles`): Chimera's closed form on the target's shared-memory capacity
with ``alpha = 16`` (``T_M = T_L = -alpha + sqrt(alpha^2 + MC)``), rounded down to
multiples of 16 and shrunk (``TL`` first, down to 32, when ``K <= KR`` is known, since
X's rows then stay resident; else the larger of the two) until the kernel's shared
arrays fit the static 48 KiB and
the per-thread accumulators ``ES + EO`` stay at most 28 floats (more spills
in ptxas at 256 threads); ``TK = 16``,
``TN = 64``.  Option ``chain_tiles=(TM, TL)`` overrides ``TM, TL`` (tests use small
tiles to get several blocks and ``l`` tiles on tiny shapes, and splits).

This is the fp32 CUDA-core kernel for float32 chains; float16/bfloat16 chains get the
Tensor Core kernel of :mod:`.tc_kernel` (``mma.sync``, ``ldmatrix``, a ``cp.async`` ring;
docs/fusion.md, "Tensor Core chains").
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from polycomp import ir
from polycomp.errors import OptionError
from polycomp.hw.cuda import ptx
from polycomp.scheduler.chain.detect import ChainMatch
from polycomp.scheduler.chain.movement_model import plan_levels
from polycomp.scheduler.chain.plan import ChainPlan

__all__ = ["CudaChainTiles", "cuda_tiles", "split_count", "build_kernel", "THREADS", "ALPHA",
           "MIN_SPLIT_TILES", "MAX_SPLITS"]

THREADS = 256
ALPHA = 16
TK = 16
KR = 64                        # columns of X kept in shared memory
TN = 64
MAX_ACC = 28                   # accumulator floats per thread (Sacc + Oacc)
MIN_SPLIT_TILES = 2            # l tiles per split at least (split_count)
MAX_SPLITS = 64                # splits at most (the combining kernel keeps S maxima in
                               # registers: 80 at S = 64 in ptxas, sm_80, no spills)
NEG_INF = float("-inf")


@dataclass(frozen=True)
class CudaChainTiles:
    """The kernel's tiles and where they came from (the model's shared-level optimum)."""
    tm: int
    tl: int
    tk: int
    tn: int
    threads: int
    model_tm: int              # the closed form's T_M, T_L on the shared level
    model_tl: int
    splits: int = 1            # S: blocks sharing one O tile's l loop (split_count)

    @property
    def shared_floats(self) -> int:
        return (self.tm * KR + self.tk * self.tl + self.tm * self.tl
                + self.tl * self.tn + 3 * self.tm)

    @property
    def es(self) -> int:
        return self.tm * self.tl // self.threads

    @property
    def eo(self) -> int:
        return self.tm * self.tn // self.threads


def _fits(tm: int, tl: int, capacity_floats: int) -> bool:
    t = CudaChainTiles(tm, tl, TK, TN, THREADS, 0, 0)
    return t.shared_floats <= capacity_floats and t.es + t.eo <= MAX_ACC


def cuda_tiles(plan: ChainPlan, shared_bytes: int,
               override: tuple[int, ...] | None = None,
               sms: int | None = None) -> CudaChainTiles:
    """See the module docstring; ``override`` is option ``chain_tiles``; with the
    device's SM count ``sms`` the ``l`` loop is split by :func:`split_count` (else
    ``S = 1``)."""
    cap = shared_bytes // 4
    lp = plan_levels(plan.dims, [("shared", shared_bytes)], ALPHA, plan.match.has_softmax)[0]
    mtm, mtl = lp.tiles.m, lp.tiles.l
    if override is not None:
        tm, tl = override[0], override[1]
        return CudaChainTiles(tm, tl, TK, TN, THREADS, mtm, mtl,
                              split_count(plan, tm, tl, sms))
    tm = max(16, mtm // 16 * 16)
    tl = max(16, mtl // 16 * 16)
    resident = plan.dims.k <= KR      # X stays in shared memory: TL costs no traffic
    while not _fits(tm, tl, cap) and (tm > 16 or tl > 16):
        if resident and tl > 32 or not resident and tl > tm or tm == 16:
            tl -= 16
        else:
            tm -= 16
    return CudaChainTiles(tm, tl, TK, TN, THREADS, mtm, mtl, split_count(plan, tm, tl, sms))


def split_count(plan: ChainPlan, tm: int, tl: int, sms: int | None) -> int:
    """``S``, the number of blocks that share one ``TM x TN`` tile of ``O`` by splitting
    its ``l`` tiles (flash-decoding): the largest ``S`` with ``blocks * S <= sms`` (the
    grid up to one block per SM; ``blocks = batch * ceil(M/TM) * ceil(N/TN)``) and at
    least :data:`MIN_SPLIT_TILES` ``l`` tiles per split (at most :data:`MAX_SPLITS`
    splits), then lowered so no split is
    empty (``S = ceil(nl / ceil(nl / S))``, ``nl = ceil(L/TL)``).  1 (the unsplit kernel)
    without ``sms``, with a symbolic batch extent, or where the grid already has more
    than half the SMs in blocks.  Symbolic ``M, N, K, L`` count as the plan's ``BIG``.
    ``POLYCOMP_CHAIN_SPLITS=S`` sets ``S`` (for measurements; the kernel is correct for
    any ``S >= 1``, empty splits included)."""
    env = os.environ.get("POLYCOMP_CHAIN_SPLITS", "")
    if env:
        if not env.isdigit() or int(env) < 1:
            raise OptionError(f"POLYCOMP_CHAIN_SPLITS takes a positive integer, got {env!r}")
        return int(env)
    d = plan.dims
    if sms is None or any(x.startswith("b") for x in plan.symbolic):
        return 1
    blocks = d.batch * -(-d.m // tm) * -(-d.n // TN)
    nl = -(-d.l // tl)
    s = min(sms // blocks, nl // MIN_SPLIT_TILES, MAX_SPLITS)
    if s <= 1:
        return 1
    return -(-nl // -(-nl // s))


# --------------------------------------------------------------------------- IR helpers

def _i(v: int) -> ir.Expr:
    return ir.IntImm(v)


def _f(v: float) -> ir.Expr:
    return ir.FloatImm(v)


def _for(var: ir.Var, extent, body: ir.Stmt, kind: str = "serial",
         start: ir.Expr | None = None) -> ir.Stmt:
    return ir.For(var, start if start is not None else _i(0), ir.const(extent), kind, body)


def _sel(c, t, f) -> ir.Expr:
    return ir.Select(c, t, f, t.dtype)


def _ceil_div(a: ir.Expr, b: int) -> ir.Expr:
    return (a + (b - 1)) // b


def _loop_steps(extent: ir.Expr, step: int) -> ir.Expr:
    return _ceil_div(extent, step)


def _seq(*stmts) -> ir.Stmt:
    return ir.seq(*stmts)


# --------------------------------------------------------------------------- the kernel

def build_kernel(plan: ChainPlan, tiles: CudaChainTiles, kernel_id: int = 0) -> ir.Stmt:
    """The kernel (``AttrStmt("kernel", id)`` around its block and thread loops) computing
    the chain's output from its inputs; see the module docstring."""
    m: ChainMatch = plan.match
    nb = m.batch_dims
    tm, tl, tk, tn, nt = tiles.tm, tiles.tl, tiles.tk, tiles.tn, tiles.threads
    X, Y, Z, O = m.x, m.y, m.z, m.out
    bshape = tuple(X.shape[:nb])
    M, K = X.shape[nb], X.shape[nb + 1]
    L, N = Z.shape[nb], Z.shape[nb + 1]
    y_rows = bool(getattr(m, "y_transposed", False))    # Y stored [.., l, k]
    bx, by, bz = ir.Var("cb_n"), ir.Var("cb_m"), ir.Var("cb_b")
    tx = ir.Var("ct")
    sp = _Split.make(tiles.splits, bz, bshape, M, N, m.has_softmax)
    z_blocks, bidx, l_first, l_count = _geometry(sp, bz, bshape, _loop_steps(L, tl))
    m0 = by * tm
    n0 = bx * tn

    f32 = "float32"
    Xs = ir.Buffer("cx_s", f32, (_i(tm * KR),), "shared")
    Ys = ir.Buffer("cy_s", f32, (_i(tk * tl),), "shared")
    Ss = ir.Buffer("cs_s", f32, (_i(tm * tl),), "shared")
    Zs = ir.Buffer("cz_s", f32, (_i(tl * tn),), "shared")
    Rmax = ir.Buffer("crmax_s", f32, (_i(tm),), "shared")
    Rsum = ir.Buffer("crsum_s", f32, (_i(tm),), "shared")
    Rsc = ir.Buffer("crsc_s", f32, (_i(tm),), "shared")
    Sacc = ir.Buffer("csacc", f32, (_i(tiles.es),), "local")
    Oacc = ir.Buffer("coacc", f32, (_i(tiles.eo),), "local")
    soft = m.has_softmax

    def ld(b, *idx):
        return ir.Load(b, tuple(idx), b.dtype)

    def st(b, idx, v):
        return ir.Store(b, tuple(idx) if isinstance(idx, tuple) else (idx,), v)

    def cooperative(rows: int, cols: int, body) -> ir.Stmt:
        return _cooperative(rows, cols, nt, tx, body)

    def per_elem(n_el: int, cols: int, body) -> ir.Stmt:
        e = ir.Var("ce")
        idx = e * nt + tx
        return _for(e, n_el, body(e, idx // cols, idx % cols), "unrolled")

    barrier = ir.barrier()
    k0, l0 = ir.Var("ck0"), ir.Var("cl0")
    kk, jj = ir.Var("ckk"), ir.Var("cjj")

    # ---- first product: Sacc = X[b, m-block, :] . Y[b, :, l-block]; X's rows in
    # chunks of KR columns, loaded once per block when K <= KR (resident across l tiles)
    kc = ir.Var("ckc")

    def load_x(r, c):
        gm, gk = m0 + r, kc * KR + c
        ok = (gm < M) & (gk < K)
        return st(Xs, r * KR + c, _sel(ok, ld(X, *bidx, gm, gk), _f(0.0)))

    def mac_s(e, r, c):
        return st(Sacc, e, ld(Sacc, e) + ld(Xs, r * KR + k0 * tk + kk) * ld(Ys, kk * tl + c))
    reload = ir.binary("||", ir.binary("==", l0, l_first), K > KR)
    first = _seq(
        per_elem(tiles.es, tl, lambda e, r, c: st(Sacc, e, _f(0.0))),
        _for(kc, _loop_steps(K, KR), _seq(
            ir.IfThenElse(reload, cooperative(tm, KR, load_x)),
            _for(k0, ir.min_(_i(KR // tk), _loop_steps(K - kc * KR, tk)), _seq(
                _load_y(Ys, Y, bidx, kc * KR + k0 * tk, l0 * tl, K, L, tiles, tx, y_rows),
                barrier,
                _for(kk, tk, per_elem(tiles.es, tl, mac_s)), barrier)))))

    # ---- elementwise stages, written into Ss (padding: -inf with a softmax, else 0)
    def scores(e, r, c):
        gm, gl = m0 + r, l0 * tl + c
        v = _elementwise(m, ld(Sacc, e), [*bidx, gm, gl])
        pad = _f(NEG_INF if soft else 0.0)
        return st(Ss, r * tl + c, _sel((gm < M) & (gl < L), v, pad))
    middle = _seq(per_elem(tiles.es, tl, scores), barrier)

    # ---- online softmax, one thread per row
    online = _online_softmax(Ss, Rmax, Rsum, Rsc, tx, tm, tl) if soft else None

    # ---- second product: Oacc (*= scale) += Ss . Z[b, l-block, n-block]
    def load_z(r, c):
        gl, gn = l0 * tl + r, n0 + c
        ok = (gl < L) & (gn < N)
        return st(Zs, r * tn + c, _sel(ok, ld(Z, *bidx, gl, gn), _f(0.0)))

    def rescale(e, r, c):
        return st(Oacc, e, ld(Oacc, e) * ld(Rsc, r))

    def mac_o(e, r, c):
        return st(Oacc, e, ld(Oacc, e) + ld(Ss, r * tl + jj) * ld(Zs, jj * tn + c))
    # Z's tile: cp.async (16 B per copy) issued before the first product, so the copy
    # overlaps it, when Z's rows are 16-byte aligned (N % 4 == 0); else plain loads
    aligned = ir.binary("==", N % 4, _i(0))
    prefetch_z = ir.IfThenElse(aligned, _seq(
        _cooperative(tl, tn // 4, nt, tx, lambda r, c: _cp_async_z(
            Zs, Z, bidx, r, c * 4, l0 * tl + r, n0 + c * 4, L, N, tn)),
        ptx.cp_async_commit()))
    second = _seq(
        per_elem(tiles.eo, tn, rescale) if soft else None,
        ir.IfThenElse(aligned, ptx.cp_async_wait(0), cooperative(tl, tn, load_z)), barrier,
        _for(jj, tl, per_elem(tiles.eo, tn, mac_o)), barrier)

    # ---- write-out: O, or with S > 1 this split's partial O (unnormalised) and, with a
    # softmax, its rows' running max and sum (_Split)
    def out(e, r, c):
        gm, gn = m0 + r, n0 + c
        if sp is not None:
            return ir.IfThenElse((gm < M) & (gn < N),
                                 st(sp.o, (sp.index, *bidx, gm, gn), ld(Oacc, e)))
        v = ld(Oacc, e) / ld(Rsum, r) if soft else ld(Oacc, e)
        return ir.IfThenElse((gm < M) & (gn < N), st(O, (*bidx, gm, gn), v))
    stats = _Split.store_stats(sp, bidx, bx, tx, tm, m0 + tx, Rmax, Rsum)

    init = [per_elem(tiles.eo, tn, lambda e, r, c: st(Oacc, e, _f(0.0)))]
    if soft:
        init.append(ir.IfThenElse(tx < tm, _seq(st(Rmax, tx, _f(NEG_INF)),
                                                st(Rsum, tx, _f(0.0)))))
        init.append(barrier)
    thread_body = _seq(
        *init,
        _for(l0, l_count, _seq(prefetch_z, first, middle, online, second), start=l_first),
        per_elem(tiles.eo, tn, out), stats)
    body: ir.Stmt = ir.Allocate(Sacc, ir.Allocate(Oacc, thread_body))
    body = ir.For(tx, _i(0), _i(nt), "gpu_thread", body, (("axis", "x"), ("threads", nt)))
    for buf in (Rsc, Rsum, Rmax, Zs, Ss, Ys, Xs):
        body = ir.Allocate(buf, body)
    body = ir.For(bz, _i(0), z_blocks, "gpu_block", body, (("axis", "z"),))
    body = ir.For(by, _i(0), _ceil_div(M, tm), "gpu_block", body, (("axis", "y"),))
    body = ir.For(bx, _i(0), _ceil_div(N, tn), "gpu_block", body, (("axis", "x"),))
    main = ir.AttrStmt("kernel", str(kernel_id), body)
    return _Split.finish(sp, main, O, bshape, M, N, nt, kernel_id)


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

    @staticmethod
    def make(ns: int, bz: ir.Var, bshape: tuple, M: ir.Expr, N: ir.Expr,
             soft: bool) -> _Split | None:
        if ns == 1:
            return None
        f32 = "float32"

        def rows(name: str) -> ir.Buffer | None:
            return ir.Buffer(name, f32, (_i(ns), *bshape, M), "global") if soft else None
        return _Split(ns, bz % ns, ir.Buffer("cpart_o", f32, (_i(ns), *bshape, M, N), "global"),
                      rows("cpart_m"), rows("cpart_s"))

    @staticmethod
    def store_stats(sp: _Split | None, bidx: list, bx: ir.Var, tx: ir.Var, tm: int,
                    gm: ir.Expr, Rmax: ir.Buffer, Rsum: ir.Buffer) -> ir.Stmt | None:
        """With splits and a softmax: thread ``tx < TM`` of the first n-block stores its
        row's max and sum (else nothing)."""
        if sp is None or sp.m is None or sp.s is None:
            return None
        M = sp.m.shape[-1]
        ok = ir.binary("==", bx, _i(0)) & (tx < tm) & (gm < M)
        idx = (sp.index, *bidx, gm)
        return ir.IfThenElse(ok, _seq(ir.Store(sp.m, idx, ir.Load(Rmax, (tx,), Rmax.dtype)),
                                      ir.Store(sp.s, idx, ir.Load(Rsum, (tx,), Rsum.dtype))))

    @staticmethod
    def finish(sp: _Split | None, main: ir.Stmt, O: ir.Buffer, bshape: tuple, M: ir.Expr,
               N: ir.Expr, nt: int, kernel_id: int) -> ir.Stmt:
        """``main`` unsplit; with splits, ``main`` then the combining kernel, inside the
        temporaries' Allocates."""
        if sp is None:
            return main
        body = _seq(main, ir.AttrStmt("kernel", str(kernel_id + 1),
                                      _combine(O, sp, bshape, M, N, nt)))
        for b in (sp.s, sp.m, sp.o):
            if b is not None:
                body = ir.Allocate(b, body)
        return body


def _geometry(sp: _Split | None, bz: ir.Var, bshape: tuple,
              n_lt: ir.Expr) -> tuple[ir.Expr, list[ir.Expr], ir.Expr, ir.Expr]:
    """Grid ``z``'s extent, the batch indices, and the block's first ``l`` tile and count:
    ``z = b`` and all tiles unsplit; ``z = b * S + s`` (split fastest) and tiles ``[s * P,
    min((s + 1) * P, n_lt))``, ``P = ceil(n_lt / S)``, with splits."""
    if sp is None:
        batch, bidx = _batch(bshape, bz)
        return batch, bidx, _i(0), n_lt
    batch, bidx = _batch(bshape, bz // sp.ns)
    per = _ceil_div(n_lt, sp.ns)
    first = sp.index * per
    return batch * sp.ns, bidx, first, ir.max_(ir.min_(per, n_lt - first), _i(0))


def _combine(O: ir.Buffer, sp: _Split, bshape: tuple, M: ir.Expr, N: ir.Expr,
             nt: int) -> ir.Stmt:
    """The second kernel with ``S > 1`` splits: one thread per element ``(b.., m, n)`` of
    ``O`` (consecutive threads on consecutive ``n``) combines the ``S`` partial tiles.
    With a softmax, ``O = sum_s w_s O_s / sum_s w_s s_s`` with ``w_s = exp(m_s - Mx)``,
    ``Mx = max_s m_s``, and ``w_s = 1`` where ``Mx = -inf`` (every split masked in full
    or empty there: each ``O_s`` is 0 or NaN, each ``s_s`` 0, so the row is ``0 / 0 =
    NaN`` as the unsplit kernel's); this is the online softmax's merge of the splits in
    turn, so NaN partials stay NaN.  Without a softmax, ``O = sum_s O_s``."""
    f32 = "float32"
    cb, ct, sv = ir.Var("cc_blk"), ir.Var("cc_t"), ir.Var("cc_s")
    ns, Op, Mp, Sp = sp.ns, sp.o, sp.m, sp.s
    total: ir.Expr = M * N
    for e in bshape:
        total = total * e
    i = cb * nt + ct
    gn, row = i % N, i // N
    gm = row % M
    _, bidx = _batch(bshape, row // M)
    Num = ir.Buffer("cc_num", f32, (_i(1),), "local")
    Den = ir.Buffer("cc_den", f32, (_i(1),), "local")
    Mx = ir.Buffer("cc_max", f32, (_i(1),), "local")

    def ld(b, *idx):
        return ir.Load(b, tuple(idx), f32)

    def acc(b, v):
        return ir.Store(b, (_i(0),), ld(b, _i(0)) + v)
    o_s = ld(Op, sv, *bidx, gm, gn)
    if Mp is None or Sp is None:
        body = _seq(ir.Store(Num, (_i(0),), _f(0.0)), _for(sv, ns, acc(Num, o_s), "unrolled"),
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
                                    _seq(acc(Num, w * o_s), acc(Den, w * s_s))), "unrolled"),
            ir.Store(O, (*bidx, gm, gn), ld(Num, _i(0)) / ld(Den, _i(0))))))))
    body = ir.IfThenElse(i < total, body)
    body = ir.For(ct, _i(0), _i(nt), "gpu_thread", body, (("axis", "x"), ("threads", nt)))
    return ir.For(cb, _i(0), _ceil_div(total, nt), "gpu_block", body, (("axis", "x"),))


def _batch(bshape: tuple, bz: ir.Var) -> tuple[ir.Expr, list[ir.Expr]]:
    """The number of batch blocks and the batch indices of the flattened block index."""
    batch: ir.Expr = _i(1)
    for e in bshape:
        batch = batch * e
    bidx: list[ir.Expr] = []
    rest: ir.Expr = bz
    for k in reversed(range(len(bshape))):
        bidx.insert(0, rest % bshape[k] if k else rest)
        rest = rest // bshape[k]
    return batch, bidx


def _load_y(Ys: ir.Buffer, Y: ir.Buffer, bidx: list, k_lo, l_lo, K, L,
            tiles: CudaChainTiles, tx: ir.Var, y_rows: bool) -> ir.Stmt:
    """``Ys[TK][TL] <- Y[b, k_lo:, l_lo:]`` (zero pad) over the threads; ``Y`` stored
    ``[.., k, l]``, or ``[.., l, k]`` with ``y_rows`` (consecutive threads on consecutive
    ``k`` then, for coalescing)."""
    tk, tl = tiles.tk, tiles.tl

    def kl(gk, gl, pos):
        ok = (gk < K) & (gl < L)
        idx = (*bidx, gl, gk) if y_rows else (*bidx, gk, gl)
        return ir.Store(Ys, (pos,), _sel(ok, ir.Load(Y, idx, Y.dtype), _f(0.0)))
    if y_rows:
        return _cooperative(tl, tk, tiles.threads, tx,
                            lambda r, c: kl(k_lo + c, l_lo + r, c * tl + r))
    return _cooperative(tk, tl, tiles.threads, tx,
                        lambda r, c: kl(k_lo + r, l_lo + c, r * tl + c))


def _cooperative(rows: int, cols: int, nt: int, tx: ir.Var, body) -> ir.Stmt:
    """``body(row, col)`` for every element of a ``rows x cols`` tile, dealt over the
    ``nt`` threads (element ``q * nt + t``)."""
    q = ir.Var("cq")
    n_el = rows * cols
    idx = q * nt + tx
    inner = body(idx // cols, idx % cols)
    if n_el % nt:
        inner = ir.IfThenElse(idx < n_el, inner)
    return _for(q, -(-n_el // nt), inner, "unrolled")


def _elementwise(m: ChainMatch, value: ir.Expr, indices: list[ir.Expr]) -> ir.Expr:
    """The chain's elementwise stages applied to ``value`` at ``(b.., m, l)``."""
    v = value
    for stage in m.elementwise:
        mapping = {it: x for it, x in zip(stage.iters, indices)}
        v = _Replace(stage.prev, v, mapping).visit(stage.stage.body)
    return v


def _cp_async_z(Zs: ir.Buffer, Z: ir.Buffer, bidx: list, r, c, gl, gn, L, N,
                tn: int) -> ir.Stmt:
    """One 16-byte ``cp.async`` of ``Z[b, gl, gn:gn+4]`` into ``Zs[r][c:c+4]``: the
    elements inside ``Z`` are read, the rest of the 16 bytes zero-filled (a copy wholly
    outside reads nothing and points at an in-bounds, aligned element)."""
    inside = gl < L
    nbytes = _sel(inside, ir.max_(ir.min_(N - gn, _i(4)), _i(0)) * 4, _i(0))
    src = ir.Load(Z, (*bidx, _sel(inside, gl, _i(0)), _sel(gn < N, gn, _i(0))), Z.dtype)
    return ptx.cp_async(ir.Load(Zs, (r * tn + c,), Zs.dtype), src, nbytes)


def _online_softmax(Ss: ir.Buffer, Rmax: ir.Buffer, Rsum: ir.Buffer, Rsc: ir.Buffer,
                    tx: ir.Var, tm: int, tl: int) -> ir.Stmt:
    """Thread ``r < TM`` rescales row ``r`` of the score tile ``Ss`` in place to
    ``p = exp(s - m')`` and updates the row's running max, sum and scale (module
    docstring); a barrier follows."""
    f32 = "float32"
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
        ir.LetStmt(mnew, _sel(ld(Mx, _i(0)) > ld(Rmax, row), ld(Mx, _i(0)), ld(Rmax, row)),
                   ir.IfThenElse(ir.binary("==", mnew, _f(NEG_INF)), masked_row, normal_row)))))
    return _seq(ir.IfThenElse(tx < tm, row_body), ir.barrier())


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


def predicted_bytes(plan: ChainPlan, tiles: CudaChainTiles, sizes: dict[str, int]) -> int:
    """Global bytes the kernel reads and writes (float32) at the extents ``sizes``
    (``batch, m, n, k, l``): each ``(n-block, m-block)`` block reads its rows of X once
    per split (once per ``l`` tile when ``K > KR``), all of Y and its columns of Z, and
    writes its part of O once (the benchmark's prediction next to the simulator's count);
    with ``S > 1`` splits the partial tiles are written and read back once, and with a
    softmax the rows' partial max and sum too."""
    b, mm, n, k, l_ = (sizes[x] for x in ("batch", "m", "n", "k", "l"))
    mb, nbk, lb = math.ceil(mm / tiles.tm), math.ceil(n / tiles.tn), math.ceil(l_ / tiles.tl)
    ns = tiles.splits
    x = b * nbk * (lb if k > KR else ns) * mm * k
    y = b * nbk * mb * k * l_
    z = b * mb * l_ * n
    o = b * mm * n
    if ns > 1:
        o += 2 * ns * b * mm * n + (4 * ns * b * mm if plan.match.has_softmax else 0)
    return 4 * (x + y + z + o)
