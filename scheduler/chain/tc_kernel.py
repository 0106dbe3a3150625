"""The fused chain on Tensor Cores (targets ``cuda``, ``cuda-sm90``): float16 / bfloat16
``X, Y, Z`` with float32 accumulation, FlashAttention-2 style, built as CUDA-level IR
(printed by the CUDA printer, run by the GPU-semantics simulator).

One thread block per ``(n-block, m-block, batch)`` (grid ``x, y, z``), ``TM / 16`` warps;
warp ``w`` owns rows ``16w .. 16w+15`` of the ``TM``-row tile.  The streamed items are
``q = (j, c)``: ``l`` tile ``j`` (``TL`` columns) and ``k`` chunk ``c`` (``KC`` columns,
``nk = ceil(K / KC)`` chunks), ``q = j * nk + c``:

    Oacc = 0 (mma C fragments, TN/8 tiles of 16x8 per warp); mrun = -inf, lsum = 0
    X tile -> Xs[0] when nk == 1 (resident: read once per block)    } group 0
    prologue: items 0 .. S-2 -> ring stage q % S, one commit each  }
    for q in 0 .. nl*nk - 1:
      cp.async.wait_group S-2; __syncthreads()       item q has landed, stage (q-1) % S free
      issue item q+S-1 (X chunk when nk > 1, Y chunk, Z tile with its first chunk); commit
      c == 0: Sacc = 0
      Sacc += X chunk . Y chunk      mma.sync m16n8k16: A by ldmatrix.x4 from Xs,
                                     B by ldmatrix.x4.trans from Ys[k][l] (ldmatrix.x4 from
                                     Ys[l][k] when Y is stored [.., l, k])
      c == nk-1 (the l tile is complete):
        S = elementwise(Sacc) at (b, m, l); -inf (softmax) / 0 outside M x L
        online softmax on the fragments: row max over the thread's columns, then over the
          quad (__shfl_xor_sync 1, 2); m' = max(mrun, max); m' = -inf: p = 0 (NaN kept),
          scale 1; else p = exp(s - m'), scale = exp(mrun - m'); lsum = lsum*scale + sum p
          (per thread), Oacc *= scale
        P -> A fragments in registers (the C layout of two 16x8 tiles is the A layout of
          one 16x16: pc_pack_{f16,bf16}x2 rounds and packs pairs), Oacc += P . Z tile
          (ldmatrix.x4.trans from Zs[j % S])
    cp.async.wait_group 0
    lsum summed over the quad; O[b, m, n] = Oacc / lsum (Oacc without a softmax)

Copies: every 8-element chunk is one 16-byte ``cp.async`` (zero-filled past the extents)
when the source's rows are a multiple of 8 elements (checked at run time, uniform in the
block), else 8 element loads stored to shared memory (zero past the extents).  Shared
rows are padded by 8 elements (16 bytes) so the 8 rows one ``ldmatrix`` phase reads fall
in distinct bank groups.  The ring holds ``S`` stages of the X chunk (used only when
``nk > 1``; a single X buffer when ``K`` is a constant ``<= KC``), the Y chunk and the
Z tile; item ``q`` lands in stage ``q % S``, Z tile ``j``
in stage ``j % S`` (issued with item ``(j, 0)``, read at the end of tile ``j``; tile
``j + S`` is issued after the barrier of iteration ``(j + S) nk - S + 1 > (j + 1) nk - 1``,
so never over a tile still read).

Precision: the products of f16/bf16 values are exact in float32 and summed in float32;
``P`` (the softmax's ``exp(s - m')`` in ``[0, 1]``, or ``T`` itself without a softmax) is
rounded to the input dtype before the second product, as FlashAttention does: the
relative error of ``O`` is about ``2^-11`` (f16) / ``2^-8`` (bf16) per term.  Without a
softmax a ``T`` beyond the f16 range (65504) overflows to inf.

Tiles (:func:`tc_tiles`): Chimera's closed form on the shared level counted in 16-bit
elements with ``alpha = 16`` (the mma's ``k``), rounded down to multiples of 16 and
shrunk until the ring fits the static 48 KiB and the accumulators ``TL/2 + TN/2`` stay at
most :data:`MAX_ACC` floats per thread; ``KC = roundup16(K)`` for a constant ``K <= 128``
(X resident), else 64; ``TN = roundup16(N)`` for a constant ``N <= 80``, else 64; three
stages when they fit, else two.  Option ``chain_tiles=(TM, TL)`` overrides ``TM, TL``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from polycomp import ir
from polycomp.hw.cuda import ptx
from polycomp.scheduler.chain.cuda_kernel import _batch, _elementwise
from polycomp.scheduler.chain.detect import ChainMatch
from polycomp.scheduler.chain.movement_model import plan_levels
from polycomp.scheduler.chain.plan import BIG, ChainPlan

__all__ = ["TcChainTiles", "tc_tiles", "build_tc_kernel", "ALPHA", "MAX_ACC"]

ALPHA = 16                    # the mma's k: Chimera's Tensor Core micro-kernel minimum
PAD = 8                       # elements of padding per shared row (16 bytes)
MAX_ACC = 48                  # accumulator floats per thread (Sacc TL/2 + Oacc TN/2; 56 spilled
                              # 8 B on sm_90 at ViT-B)
#: With a resident X (constant K <= 128), N <= 64 and L >= 64, where the rule below
#: picks TL < 64: TM = 128, TL = 64 in a 2-stage ring of dynamic shared memory (up to
#: TL/2 + TN/2 = 64 accumulators, 55-88 KiB).  On an H200 that was 1.10-1.18x faster
#: than the 48-accumulator, 48 KiB choice (TL = 32, 3 stages) at SETR and at s = 2048,
#: 4096 (d = 64, 128), with no spills on sm_80/90; TL = 128 was slower (0.73-0.84x).
WIDE_ACC = 64
WIDE_SHARED = 96 * 1024
KC_DEFAULT = 64
NEG_INF = float("-inf")


@dataclass(frozen=True)
class TcChainTiles:
    """The Tensor Core kernel's tiles and where they came from."""
    tm: int
    tl: int
    kc: int                    # k chunk (the whole padded K when nk == 1)
    tn: int
    stages: int
    dtype: str                 # float16 / bfloat16
    y_rows: bool               # Y stored [.., l, k]
    model_tm: int              # the closed form's T_M, T_L (16-bit elements, alpha 16)
    model_tl: int
    x_resident: bool = False   # K is a constant <= KC: one X buffer, never re-streamed

    @property
    def threads(self) -> int:
        return 2 * self.tm     # one warp per 16 rows

    @property
    def xs(self) -> int:       # elements of one stage of each ring buffer
        return self.tm * (self.kc + PAD)

    @property
    def ys(self) -> int:
        return self.tl * (self.kc + PAD) if self.y_rows else self.kc * (self.tl + PAD)

    @property
    def zs(self) -> int:
        return self.tl * (self.tn + PAD)

    @property
    def x_stages(self) -> int:
        return 1 if self.x_resident else self.stages

    @property
    def shared_bytes(self) -> int:
        return 2 * (self.x_stages * self.xs + self.stages * (self.ys + self.zs))

    @property
    def acc_floats(self) -> int:
        return self.tl // 2 + self.tn // 2


def _round16(v: int) -> int:
    return -(-v // 16) * 16


def tc_tiles(plan: ChainPlan, shared_bytes: int,
             override: tuple[int, ...] | None = None) -> TcChainTiles:
    """See the module docstring; ``override`` is option ``chain_tiles``."""
    m = plan.match
    d = plan.dims
    # the model counts 4-byte elements: twice the bytes is the capacity in 16-bit ones
    lp = plan_levels(d, [("shared", 2 * shared_bytes)], ALPHA, m.has_softmax)[0]
    mtm, mtl = lp.tiles.m, lp.tiles.l
    resident = d.k != BIG and d.k <= 128
    kc = _round16(d.k) if resident else KC_DEFAULT
    tn = _round16(d.n) if d.n != BIG and d.n <= 80 else 64
    y_rows = bool(m.y_transposed)

    def make(tm, tl, s):
        return TcChainTiles(tm, tl, kc, tn, s, m.dtype, y_rows, mtm, mtl, resident)
    if override is not None:
        t = make(override[0], override[1], 2)
        t3 = make(override[0], override[1], 3)
        return t3 if t3.shared_bytes <= shared_bytes else t
    max_acc, budget = MAX_ACC, shared_bytes
    tm = max(16, min(128, mtm // 16 * 16))
    tl = max(16, min(128, mtl // 16 * 16))
    while True:
        t = make(tm, tl, 2)
        if t.acc_floats > max_acc and tl > 16:      # registers: only TL counts
            tl -= 16
        elif t.shared_bytes > budget and (tm > 16 or tl > 16):
            if tl >= tm and tl > 16 or tm == 16:
                tl -= 16
            else:
                tm -= 16
        else:
            break
    t3 = make(tm, tl, 3)
    chosen = t3 if t3.shared_bytes <= budget else make(tm, tl, 2)
    wide = make(128, 64, 2)      # the configuration timed faster on an H200 (WIDE_ACC)
    if (resident and tn <= 64 and "l" not in plan.symbolic and d.l >= 64
            and ("m" in plan.symbolic or d.m >= 128) and chosen.tl < 64
            and wide.acc_floats <= WIDE_ACC and wide.shared_bytes <= WIDE_SHARED):
        return wide
    return chosen


# --------------------------------------------------------------------------- IR helpers

def _i(v: int) -> ir.Expr:
    return ir.IntImm(v)


def _f(v: float) -> ir.Expr:
    return ir.FloatImm(v)


def _sel(c, t, f) -> ir.Expr:
    return ir.Select(c, t, f, t.dtype)


def _eq(a, b) -> ir.Expr:
    return ir.binary("==", a, b)


def _ceil_div(a, b: int) -> ir.Expr:
    return (a + (b - 1)) // b


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


# --------------------------------------------------------------------------- the kernel

def build_tc_kernel(plan: ChainPlan, tiles: TcChainTiles, kernel_id: int = 0) -> ir.Stmt:
    """The kernel (``AttrStmt("kernel", id)`` around its block and thread loops) computing
    the chain's output from its inputs; see the module docstring."""
    m: ChainMatch = plan.match
    nb = m.batch_dims
    tm, tl, kc, tn, S = tiles.tm, tiles.tl, tiles.kc, tiles.tn, tiles.stages
    nt = tiles.threads
    dtype = tiles.dtype
    X, Y, Z, O = m.x, m.y, m.z, m.out
    bshape = tuple(X.shape[:nb])
    M, K = X.shape[nb], X.shape[nb + 1]
    L, N = Z.shape[nb], Z.shape[nb + 1]
    y_rows = tiles.y_rows
    soft = m.has_softmax
    bx, by, bz = ir.Var("tb_n"), ir.Var("tb_m"), ir.Var("tb_b")
    tx = ir.Var("tt")
    batch, bidx = _batch(bshape, bz)
    m0, n0 = by * tm, bx * tn

    f32, i32 = "float32", "int32"
    Xs = ir.Buffer("tx_s", dtype, (_i(tiles.x_stages * tiles.xs),), "shared")
    Ys = ir.Buffer("ty_s", dtype, (_i(S * tiles.ys),), "shared")
    Zs = ir.Buffer("tz_s", dtype, (_i(S * tiles.zs),), "shared")
    Sacc = ir.Buffer("tsacc", f32, (_i(tl // 2),), "local")
    Oacc = ir.Buffer("toacc", f32, (_i(tn // 2),), "local")
    Af = ir.Buffer("tafrag", i32, (_i(4),), "local")
    Bf = ir.Buffer("tbfrag", i32, (_i(4),), "local")
    Pf = ir.Buffer("tpfrag", i32, (_i(4),), "local")
    Mrun = ir.Buffer("tmrun", f32, (_i(2),), "local")
    Lsum = ir.Buffer("tlsum", f32, (_i(2),), "local")
    Tmp = ir.Buffer("ttmp", f32, (_i(1),), "local")

    lane = tx % 32
    wrow = tx // 32 * 16                    # the warp's first row in the tile
    g, t4 = lane // 4, lane % 4
    lr, lc = lane % 16, lane // 16 * 8      # ldmatrix.x4 row giver: row, column offset
    nk = _ceil_div(K, kc)
    nq = _ceil_div(L, tl) * nk

    # ---- copies of one streamed item q = (j, c) into ring stage q % S
    def x_copy(c) -> _Copy:
        return _Copy(X, lambda r, k: (*bidx, r, k), tm, kc, m0, c * kc, M, K)

    def y_copy(j, c) -> _Copy:
        if y_rows:
            return _Copy(Y, lambda r, k: (*bidx, r, k), tl, kc, j * tl, c * kc, L, K)
        return _Copy(Y, lambda k, r: (*bidx, k, r), kc, tl, c * kc, j * tl, K, L)

    def z_copy(j) -> _Copy:
        return _Copy(Z, lambda r, n: (*bidx, r, n), tl, tn, j * tl, n0, L, N)

    def issue(q) -> ir.Stmt:
        j, c, s = q // nk, q % nk, q % S
        return ir.seq(
            None if tiles.x_resident else
            ir.IfThenElse(nk > 1, _copy(x_copy(c), Xs, s * tiles.xs, tx, nt)),
            _copy(y_copy(j, c), Ys, s * tiles.ys, tx, nt),
            ir.IfThenElse(_eq(c, _i(0)), _copy(z_copy(j), Zs, j % S * tiles.zs, tx, nt)))

    pv = ir.Var("tpro")
    prologue = ir.seq(
        ir.IfThenElse(_eq(nk, _i(1)), _copy(x_copy(_i(0)), Xs, _i(0), tx, nt)),
        ir.For(pv, _i(0), _i(S - 1), "unrolled",
               ir.seq(ir.IfThenElse(pv < nq, issue(pv)), ptx.cp_async_commit())))

    # ---- first product on the item: Sacc += Xs[xstage] . Ys[stage]
    q = ir.Var("tq_it")
    stage = q % S
    xbase = _i(0) if tiles.x_resident else _sel(nk > 1, stage, _i(0)) * tiles.xs
    ybase = stage * tiles.ys
    kk, npair = ir.Var("tkk"), ir.Var("tnp")
    xst = kc + PAD
    a_ld = ptx.ldmatrix(_ld(Af, 0), _ld(Xs, xbase + (wrow + lr) * xst + kk * 16 + lc), 4, False)
    if y_rows:     # Ys[l][k]: matrices (l 0-7, k 0-7), (l 0-7, k 8-15), (l 8-15, k 0-7), ..
        yaddr = ybase + (npair * 16 + lane // 16 * 8 + lane % 8) * (kc + PAD) \
            + kk * 16 + lane // 8 % 2 * 8
        b_ld = ptx.ldmatrix(_ld(Bf, 0), _ld(Ys, yaddr), 4, False)
    else:          # Ys[k][l]: transposed 8x8 matrices
        yaddr = ybase + (kk * 16 + lr) * (tl + PAD) + npair * 16 + lc
        b_ld = ptx.ldmatrix(_ld(Bf, 0), _ld(Ys, yaddr), 4, True)
    first = _unrolled(kk, kc // 16, ir.seq(
        a_ld,
        _unrolled(npair, tl // 16, ir.seq(
            b_ld,
            ptx.mma(_ld(Sacc, npair * 8), _ld(Af, 0), _ld(Bf, 0), dtype),
            ptx.mma(_ld(Sacc, npair * 8 + 4), _ld(Af, 0), _ld(Bf, 2), dtype)))))
    ct = ir.Var("tct")
    zero_s = _unrolled(ct, tl // 2, _st(Sacc, ct, _f(0.0)))

    # ---- the complete l tile j: elementwise stages, online softmax, second product
    j = q // nk
    ti, ci = ir.Var("tti"), ir.Var("tci")        # 16x8 tile, element of its C fragment

    def frag(body) -> ir.Stmt:
        """``body(index, tile row, tile column)`` over the thread's Sacc elements."""
        return _unrolled(ti, tl // 8, _unrolled(ci, 4, body(
            ti * 4 + ci, wrow + g + ci // 2 * 8, ti * 8 + t4 * 2 + ci % 2)))

    def scores(e, r, c):
        gm, gl = m0 + r, j * tl + c
        v = _elementwise(m, _ld(Sacc, e), [*bidx, gm, gl])
        return _st(Sacc, e, _sel((gm < M) & (gl < L), v, _f(NEG_INF if soft else 0.0)))
    parts = [frag(scores)]
    if soft:
        parts.append(_online_softmax(Sacc, Oacc, Mrun, Lsum, Tmp, tl, tn))
    zbase = j % S * tiles.zs
    zaddr = zbase + (kk * 16 + lr) * (tn + PAD) + npair * 16 + lc
    pack = ptx.pack_half2
    second = _unrolled(kk, tl // 16, ir.seq(
        _st(Pf, 0, pack(_ld(Sacc, kk * 8), _ld(Sacc, kk * 8 + 1), dtype)),
        _st(Pf, 1, pack(_ld(Sacc, kk * 8 + 2), _ld(Sacc, kk * 8 + 3), dtype)),
        _st(Pf, 2, pack(_ld(Sacc, kk * 8 + 4), _ld(Sacc, kk * 8 + 5), dtype)),
        _st(Pf, 3, pack(_ld(Sacc, kk * 8 + 6), _ld(Sacc, kk * 8 + 7), dtype)),
        _unrolled(npair, tn // 16, ir.seq(
            ptx.ldmatrix(_ld(Bf, 0), _ld(Zs, zaddr), 4, True),
            ptx.mma(_ld(Oacc, npair * 8), _ld(Pf, 0), _ld(Bf, 0), dtype),
            ptx.mma(_ld(Oacc, npair * 8 + 4), _ld(Pf, 0), _ld(Bf, 2), dtype)))))
    parts.append(second)
    finish = ir.seq(*parts)

    loop = ir.For(q, _i(0), nq, "serial", ir.seq(
        ptx.cp_async_wait(S - 2), ir.barrier(),
        ir.IfThenElse(q + (S - 1) < nq, issue(q + (S - 1))), ptx.cp_async_commit(),
        ir.IfThenElse(_eq(q % nk, _i(0)), zero_s),
        first,
        ir.IfThenElse(_eq(q % nk, nk - 1), finish)))

    # ---- write-out
    def out(e, r, c):
        gm, gn = m0 + r, n0 + c
        v = _ld(Oacc, e) / _ld(Lsum, ci // 2) if soft else _ld(Oacc, e)
        return ir.IfThenElse((gm < M) & (gn < N), ir.Store(O, (*bidx, gm, gn), v))
    rr = ir.Var("trr")
    write = [ptx.cp_async_wait(0)]
    if soft:
        for mask in (1, 2):
            sh = ir.Var(f"tsh{mask}", f32)
            write.append(_unrolled(rr, 2, ir.LetStmt(sh, ptx.shfl_xor(_ld(Lsum, rr), mask),
                                                     _st(Lsum, rr, _ld(Lsum, rr) + sh))))
    write.append(_unrolled(ti, tn // 8, _unrolled(ci, 4, out(
        ti * 4 + ci, wrow + g + ci // 2 * 8, ti * 8 + t4 * 2 + ci % 2))))

    init = [_unrolled(ct, tn // 2, _st(Oacc, ct, _f(0.0))),
            _unrolled(rr, 2, ir.seq(_st(Mrun, rr, _f(NEG_INF)), _st(Lsum, rr, _f(0.0))))]
    thread_body = ir.seq(*init, prologue, loop, *write)
    body: ir.Stmt = thread_body
    for buf in (Tmp, Lsum, Mrun, Pf, Bf, Af, Oacc, Sacc):
        body = ir.Allocate(buf, body)
    body = ir.For(tx, _i(0), _i(nt), "gpu_thread", body, (("axis", "x"), ("threads", nt)))
    for buf in (Zs, Ys, Xs):
        body = ir.Allocate(buf, body)
    body = ir.For(bz, _i(0), batch, "gpu_block", body, (("axis", "z"),))
    body = ir.For(by, _i(0), _ceil_div(M, tm), "gpu_block", body, (("axis", "y"),))
    body = ir.For(bx, _i(0), _ceil_div(N, tn), "gpu_block", body, (("axis", "x"),))
    return ir.AttrStmt("kernel", str(kernel_id), body)


def _online_softmax(Sacc: ir.Buffer, Oacc: ir.Buffer, Mrun: ir.Buffer, Lsum: ir.Buffer,
                    Tmp: ir.Buffer, tl: int, tn: int) -> ir.Stmt:
    """The online softmax on the thread's two rows (fragment rows ``g``, ``g + 8``):
    scores -> ``p``, running max / per-thread partial sum updated, ``Oacc`` rescaled."""
    return ir.seq(*(_softmax_row(r, Sacc, Oacc, Mrun, Lsum, Tmp, tl, tn) for r in (0, 1)))


def _softmax_row(r: int, Sacc: ir.Buffer, Oacc: ir.Buffer, Mrun: ir.Buffer, Lsum: ir.Buffer,
                 Tmp: ir.Buffer, tl: int, tn: int) -> ir.Stmt:
    """Row ``r`` (0: ``g``, 1: ``g + 8``) of :func:`_online_softmax`: elements
    ``2r, 2r+1`` of each 16x8 fragment."""
    f32 = "float32"
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


def predicted_bytes(tiles: TcChainTiles, sizes: dict[str, int]) -> int:
    """Global bytes the kernel reads and writes at the extents ``sizes`` (``batch, m, n,
    k, l``; 2-byte inputs, 4-byte output): per ``(n-block, m-block)`` block X once (once
    per ``l`` tile when ``K > KC``), all of Y, its columns of Z; O written once."""
    b, mm, n, k, l_ = (sizes[x] for x in ("batch", "m", "n", "k", "l"))
    mb, nbk, lb = math.ceil(mm / tiles.tm), math.ceil(n / tiles.tn), math.ceil(l_ / tiles.tl)
    x = b * nbk * (lb if k > tiles.kc else 1) * mm * k
    y = b * nbk * mb * k * l_
    z = b * mb * l_ * n
    return 2 * (x + y + z) + 4 * b * mm * n
