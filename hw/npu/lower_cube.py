"""Lowering of a cube plan (a matmul or batch_matmul backbone with the tiles the
schedule passes chose) to the NPU IR: the cube cores' program -- fractal re-tiling on
the copies, the loops of the tiled tree (``ko`` L1 stages, ``ki`` L0 steps) over the
output tiles this core owns -- and, with a vector epilogue, the vector cores' program.

Work split over the chip: the output tiles ``(b, mo, no)`` are numbered and core
``bid`` of ``bnum`` takes tiles ``bid, bid + bnum, ...`` (``GetBlockIdx()`` /
``GetBlockNum()``); the kernel can use as many blocks as there are tiles.

With an epilogue (A2: cube and vector are separate cores, joined by GM) the kernel is
mixed (``KERNEL_TYPE_MIX_AIC_1_2``): the cube core writes each output tile (fp32) to its
own slot of a GM workspace (two slots per block, alternating), tells the two vector
cores of its block (``CrossCoreSetFlag<2, PIPE_FIX>``), and before it overwrites a
slot waits until both have read it (``CrossCoreSetFlag<2, PIPE_MTE2>`` from each,
``CrossCoreWaitFlag`` on the cube core); each vector core takes half of the tile's
rows (``GetSubBlockIdx()``), runs the epilogue and writes its rows of the output.

Assumes: one sum-reduction stage ``C[b?, i, j] = sum_k A[b?, i, k] * B[b?, k, j]``
(operands float16, bfloat16 or float32, accumulation float32; int8, accumulation
int32), tiles that fit their levels
(:func:`polycomp.scheduler.npu.cube.fit_cube_tiles`; the simulator and the printer
check the allocation again).  Guarantees: tails are padded on the way in (the Mmad
reads only the valid ``k``; rows and columns past the valid ones are computed from
whatever the buffers held and clipped on the way out).  The programs have one copy of
each buffer and no in-core flags: the L1, L0 and L0C buffers (and the epilogue's UB
tiles) are marked ``pingpong`` with their rotation counters as slot indices, for the
double-buffering pass; :mod:`.sync` places the flags.  The cross-core flags are the
builder's (the workspace protocol above).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from polycomp.scheduler.npu.cube import CubeTiles

from .program import (
    BID,
    BNUM,
    SUB,
    CopyIm2Col,
    CopyIn,
    CopyOut,
    CrossSet,
    CrossWait,
    GlobalTensor,
    GmRegion,
    Ix,
    Kernel,
    Let,
    Load2D,
    LocalBuf,
    Loop,
    Mmad,
    Phase,
    Program,
    QuantArg,
    Slot,
    Tiling,
    VecOp,
    align,
    ceildiv,
    eq,
    imax,
    imin,
    ix,
    land,
)

if TYPE_CHECKING:  # pragma: no cover
    from .lower_conv import ConvTensors
    from .lower_epilogue import Epilogue

#: cross-core flag ids of the workspace protocol: tile ready (per slot), slot free
FWD, BACK = 0, 2
#: cross-core flag id (all-core mode) of the split-K tail: every part 0 is written
SPLIT_FLAG = 4


@dataclass(frozen=True)
class CubeGemm:
    """The GEMM the cube program computes: ``c[b?] (m x n) = a[b?] (m x k) @ b[b?] (k x n)``
    over GM tensors (``tensors``: in argument order); ``shared_a``: ``a`` is shared by
    the batch; ``derived``: sizes the host computes; ``conv``: ``b`` is the im2col
    matrix of an NC1HWC0 image, ``a`` the reordered weights (:mod:`.lower_conv`)."""
    a: GlobalTensor
    b: GlobalTensor
    c: GlobalTensor
    m: Ix
    n: Ix
    k: Ix
    batch: Ix | None
    tensors: tuple
    derived: dict
    shared_a: bool = False
    conv: ConvTensors | None = None


def matmul_gemm(a_dtype: str, out_dtype: str, batched: bool) -> CubeGemm:
    bd: tuple[str, ...] = ("B",) if batched else ()
    A = GlobalTensor("A", a_dtype, (*bd, "M", "K"))
    B = GlobalTensor("B", a_dtype, (*bd, "K", "N"))
    C = GlobalTensor("C", out_dtype, (*bd, "M", "N"), is_output=True)
    return CubeGemm(A, B, C, ix("M"), ix("N"), ix("K"), ix("B") if batched else None,
                    (A, B, C), {})


def tile_walk(total: Ix, body: tuple, lets: tuple, var: str = "i") -> tuple:
    """``body`` for every tile of ``total`` this core owns (``bid, bid + bnum, ...``):
    loop ``var`` over this core's tiles, ``tile`` its number, ``lets`` the tile's
    coordinates."""
    return (Loop(var, ceildiv(total - ix(BID), ix(BNUM)),
                 (Let("tile", ix(var) * ix(BNUM) + ix(BID)), *lets, *body)),)


@dataclass(frozen=True)
class _Cube:
    """The pieces of a cube program."""
    l1a: LocalBuf
    l1b: LocalBuf
    l0a: LocalBuf
    l0b: LocalBuf
    l0c: LocalBuf


def _buffers(a_dtype: str, t: CubeTiles, conv: bool = False) -> _Cube:
    # a convolution's L1 stages hold whole channel groups (KL1, derived by the host) of
    # the weights and the image band they need (BAND elements, NC1HWC0)
    l1b = LocalBuf("l1Img", "L1", a_dtype, "BAND", 1, "ND", pingpong=True) if conv else \
        LocalBuf("l1B", "L1", a_dtype, t.kl1, t.n0, "NZ" if a_dtype != "float32" else "ZZ",
                 pingpong=True)
    return _Cube(LocalBuf("l1A", "L1", a_dtype, t.m0, "KL1" if conv else t.kl1, "NZ",
                          pingpong=True), l1b,
                 LocalBuf("l0A", "L0A", a_dtype, t.m0, t.k0, "zZ", pingpong=True),
                 LocalBuf("l0B", "L0B", a_dtype, t.k0, t.n0, "nZ", pingpong=True),
                 LocalBuf("l0C", "L0C", "int32" if a_dtype == "int8" else "float32",
                          t.m0, t.n0, "NZ", pingpong=True))


def _conv_k_loops(g: CubeGemm, bufs: _Cube, t: CubeTiles, i: Ix, m_ext: Ix,
                  n_ext: Ix) -> tuple:
    """The L1 stages (channel groups: the weights' columns and the image band) and L0
    steps (LoadData3DV2 into L0B) of one output tile of a convolution."""
    from .lower_conv import band_copy, band_pad
    assert g.conv is not None
    ct = g.conv
    mo, no, ko, ki = ix("mo"), ix("no"), ix("ko"), ix("ki")
    kl1 = ix("KL1")
    k_ext = imin(kl1, g.k - ko * kl1)
    k_step = imin(t.k0, k_ext - ki * t.k0)
    lets, copy = band_copy(ct, Slot(bufs.l1b, ko), ko, t.n0, no, n_ext)
    k_inner = (
        Load2D(Slot(bufs.l1a, ko), Slot(bufs.l0a, ki), ki * t.k0, k_step),
        CopyIm2Col(Slot(bufs.l1b, ko), Slot(bufs.l0b, ki), ix("r1") - ix("r0"),
                   ix(ct.sizes[3]), ix("nc1") * ct.q, ki * t.k0, k_step,
                   no * t.n0 - ix("yb") * ix("OW"), ix(t.n0), ct.geom, band_pad(ct)),
        Mmad(Slot(bufs.l0c, i), Slot(bufs.l0a, ki), Slot(bufs.l0b, ki),
             land(eq(ko, 0), eq(ki, 0)), m_ext, n_ext, k_step),
    )
    return (Loop("ko", ceildiv(ix("C1"), ix("NC1")), (
        *lets,
        CopyIn(GmRegion(g.a, (mo * t.m0, ko * kl1), (m_ext, k_ext)), Slot(bufs.l1a, ko)),
        copy,
        Loop("ki", ceildiv(k_ext, t.k0), k_inner),
    )),)


def _k_loops(g: CubeGemm, bufs: _Cube, t: CubeTiles, i: Ix, bidx: tuple, one: tuple,
             m_ext: Ix, n_ext: Ix, extra_in: tuple = (), kb: Ix | None = None,
             kx: Ix | None = None) -> tuple:
    """The L1 stages and L0 steps of one output tile (``i``: the rotation counter of the
    L0C tile); ``kb``, ``kx``: only the ``k`` range ``[kb, kb + kx)`` (a split-K part;
    default: all of ``k``)."""
    if g.conv is not None:
        return _conv_k_loops(g, bufs, t, i, m_ext, n_ext)
    kx = g.k if kx is None else kx
    mo, no, ko, ki = ix("mo"), ix("no"), ix("ko"), ix("ki")
    k_off = ko * t.kl1 if kb is None else kb + ko * t.kl1
    k_ext = imin(t.kl1, kx - ko * t.kl1)
    k_step = imin(t.k0, k_ext - ki * t.k0)
    a_b, a_one = ((), ()) if g.shared_a else (bidx, one)
    k_inner = (
        Load2D(Slot(bufs.l1a, ko), Slot(bufs.l0a, ki), ki * t.k0, k_step),
        Load2D(Slot(bufs.l1b, ko), Slot(bufs.l0b, ki), ki * t.k0, k_step),
        Mmad(Slot(bufs.l0c, i), Slot(bufs.l0a, ki), Slot(bufs.l0b, ki),
             land(eq(ko, 0), eq(ki, 0)), m_ext, n_ext, k_step),
    )
    return (Loop("ko", ceildiv(kx, t.kl1), (
        CopyIn(GmRegion(g.a, (*a_b, mo * t.m0, k_off), (*a_one, m_ext, k_ext)),
               Slot(bufs.l1a, ko)),
        *extra_in,
        CopyIn(GmRegion(g.b, (*bidx, k_off, no * t.n0), (*one, k_ext, n_ext)),
               Slot(bufs.l1b, ko)),
        Loop("ki", ceildiv(k_ext, t.k0), k_inner),
    )),)


def _tile_lets(g: CubeGemm, t: CubeTiles) -> tuple:
    nm, nn = ceildiv(g.m, t.m0), ceildiv(g.n, t.n0)
    lets: tuple = (Let("mo", (ix("tile") // nn) % nm), Let("no", ix("tile") % nn))
    if g.batch is not None:
        lets = (Let("b", ix("tile") // (nm * nn)), *lets)
    return lets


def cube_program(name: str, a_dtype: str, out_dtype: str, batched: bool,
                 tiles: CubeTiles, epilogue: Epilogue | None = None,
                 gemm: CubeGemm | None = None, deq: float | None = None,
                 deq_tensor: str | None = None, k_split: int = 1) -> Kernel:
    """The kernel of ``C = A @ B`` (per batch) on the cube cores (module docstring);
    ``deq``: int32 accumulators written as fp16 times this scale (Fixpipe ``DEQF16``);
    ``deq_tensor``: times the column's scale, the argument of that name (Fixpipe
    ``VDEQF16``: the host converts the float32 scales to uint64 quantisation parameters,
    padded to ``NQ`` entries; each output tile copies its ``n0`` of them to L1, MTE2,
    before its k loop, and Fixpipe reads them from there).  With ``out_dtype`` int8 the
    same two forms requantise (``REQ8`` / ``VREQ8``: rounded to nearest, saturated; the
    parameters mark a signed result).  ``k_split`` > 1 (a plain float32 / int32
    result): the tiles of the last, partial round are cut along ``k`` into up to that
    many parts, accumulated in GM by Fixpipe's atomic add (:func:`_split_k`)."""
    t = tiles
    g = gemm or matmul_gemm(a_dtype, out_dtype, batched)
    quant_in: tuple = ()
    qbuf: LocalBuf | None = None
    quant_args: tuple[QuantArg, ...] = ()
    if deq_tensor is not None:
        assert g.batch is None and g.conv is None
        q = GlobalTensor(deq_tensor, "uint64", ("NQ",), view=("N",))
        qbuf = LocalBuf("l1Quant", "L1", "uint64", 1, t.n0, "VEC", pingpong=True)
        n_ext_q = imin(t.n0, g.n - ix("no") * t.n0)
        quant_in = (CopyIn(GmRegion(q, (ix("no") * t.n0,), (align(n_ext_q, 4),)),
                           Slot(qbuf, ix("i"))),)
        g = CubeGemm(g.a, g.b, g.c, g.m, g.n, g.k, g.batch, (g.a, g.b, q, g.c),
                     {**g.derived, "NQ": align(ix("N"), 4)})
        quant_args = (QuantArg(deq_tensor, "NQ", signed=out_dtype == "int8"),)
    batched = g.batch is not None
    bufs = _buffers(a_dtype, t, g.conv is not None)
    mo, no = ix("mo"), ix("no")
    bidx: tuple[Ix, ...] = (ix("b"),) if batched else ()
    one: tuple[Ix, ...] = (ix(1),) if batched else ()
    m_ext, n_ext = imin(t.m0, g.m - mo * t.m0), imin(t.n0, g.n - no * t.n0)
    i = ix("i")
    total = ceildiv(g.m, t.m0) * ceildiv(g.n, t.n0)
    if batched:
        assert g.batch is not None
        total = g.batch * total
    body = (*quant_in, *_k_loops(g, bufs, t, i, bidx, one, m_ext, n_ext))
    tiling = Tiling((("m0", t.m0), ("n0", t.n0), ("k0", t.k0), ("kL1", t.kl1)),
                    tuple(g.derived.items()))
    cube_bufs: tuple = (bufs.l1a, bufs.l1b, bufs.l0a, bufs.l0b, bufs.l0c)
    if epilogue is None and k_split > 1 and g.conv is None and deq is None and \
            qbuf is None:
        return _split_k(name, g, t, bufs, total, tiling, cube_bufs, k_split)
    if epilogue is None:
        tail = (CopyOut(Slot(bufs.l0c, i), GmRegion(g.c, (*bidx, mo * t.m0, no * t.n0),
                                                    (*one, m_ext, n_ext)), scale=deq,
                        quant=None if qbuf is None else Slot(qbuf, i)),)
        if qbuf is not None:
            cube_bufs = (*cube_bufs, qbuf)
        aic = Program(name, "AIC", cube_bufs,
                      tile_walk(total, (*body, *tail), _tile_lets(g, t)))
        return Kernel(name, "aic", g.tensors, (Phase(aic, None),), tiling, (), total,
                      quant_args)
    return _mixed(name, g, t, bufs, epilogue, total, body, tiling, cube_bufs)


def _lt(a: Ix, b: Ix) -> Ix:
    """1 when ``a < b``, else 0."""
    return ix(1) - eq(imin(a, b), b)


def _select(c: Ix, a: Ix, b: Ix) -> Ix:
    """``a`` when ``c`` (0 or 1), else ``b``."""
    return c * a + (ix(1) - c) * b


def split_parts(r: Ix, p: Ix, ks: Ix, most: int, var: str = "S") -> tuple:
    """Lets binding ``var`` to the parts ``S`` (1 to ``most``, at most ``ks`` k steps) the
    ``r`` tiles of the last round are cut into so that the busiest of ``p`` cores does
    the least work: the least ``ceil(r * S / p) / S`` (its units of ``1/S`` of a tile),
    the fewest parts on a tie (each part costs its own fill, drain and Fixpipe)."""
    scale = 1
    for s_ in range(2, most + 1):
        scale = scale * s_ // _gcd(scale, s_)
    lets = [Let(f"{var}1", ix(1)), Let(f"{var}c1", ceildiv(r, p) * scale)]
    for s_ in range(2, most + 1):
        best, cost = ix(f"{var}{s_ - 1}"), ix(f"{var}c{s_ - 1}")
        c = ceildiv(r * s_, p) * (scale // s_)
        lets += [Let(f"{var}b{s_}", land(_lt(c, cost), _lt(ix(s_ - 1), ks))),
                 Let(f"{var}{s_}", _select(ix(f"{var}b{s_}"), ix(s_), best)),
                 Let(f"{var}c{s_}", _select(ix(f"{var}b{s_}"), c, cost))]
    return (*lets, Let(var, ix(f"{var}{most}")))


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def _split_k(name: str, g: CubeGemm, t: CubeTiles, bufs: _Cube, total: Ix,
             tiling: Tiling, cube_bufs: tuple, most: int) -> Kernel:
    """The cube program with the last round split along ``k`` (stream-K for the tail).

    Of ``T`` output tiles on ``P = GetBlockNum()`` cores, ``R = T / P`` full rounds
    leave ``r = T mod P`` tiles; each is cut into ``S`` parts of whole ``k0`` steps
    (:func:`split_parts`, chosen at run time by the host), so the last round has ``r *
    S`` units of ``1/S`` of a tile, unit ``v`` is part ``v / r`` of tail tile ``v mod
    r``, and core ``bid`` takes units ``bid, bid + P, ...``.  Part 0 is written as
    before; the others are added to it in GM by Fixpipe with ``SetAtomicAdd`` (float32
    / int32 results).  Ordering: each core does its part-0 unit (unit ``bid < r``)
    first, then tells every cube core (``CrossCoreSetFlag<0, PIPE_FIX>``, the all-core
    mode); then its full tiles; then its atomic units, waiting for every core's flag
    (``CrossCoreWaitFlag``) before its first atomic Fixpipe (or at the end, with none).
    The atomic adds of one element commute (their sum is the same in any order up to
    rounding of float32)."""
    batched = g.batch is not None
    bidx: tuple[Ix, ...] = (ix("b"),) if batched else ()
    one: tuple[Ix, ...] = (ix(1),) if batched else ()
    mo, no = ix("mo"), ix("no")
    m_ext, n_ext = imin(t.m0, g.m - mo * t.m0), imin(t.n0, g.n - no * t.n0)
    bid, bnum, j = ix(BID), ix(BNUM), ix("i")
    R, r, first, ks = ix("R"), ix("r"), ix("first"), ix("KS")
    pre, full, kp = ix("pre"), ix("full"), ix("kp")
    # this core's units in order: its part-0 unit (first = 1), R full tiles, its
    # atomic units; unit j of them: a tail unit v (part v / r of tail tile v mod r) or a
    # full tile
    v = bid + (ix(1) - pre) * (j - R) * bnum
    rr = imax(r, 1)
    parts = _select(full, ix(1), ix("S"))
    out = GmRegion(g.c, (*bidx, mo * t.m0, no * t.n0), (*one, m_ext, n_ext))
    atomic = imin(kp, 1)
    body = (
        Let("pre", _lt(j, first)),
        Let("full", (ix(1) - pre) * _lt(j - first, R)),
        Let("tile", _select(full, (j - first) * bnum + bid, R * bnum + v % rr)),
        Let("kp", (ix(1) - full) * (v // rr)),
        *_tile_lets(g, t),
        Let("kb", ix(t.k0) * (kp * ks // parts)),
        Let("kx", imin(g.k, ix(t.k0) * ((kp + 1) * ks // parts)) - ix("kb")),
        *_k_loops(g, bufs, t, j, bidx, one, m_ext, n_ext, kb=ix("kb"), kx=ix("kx")),
        Loop("c", ix(1) - atomic, (CopyOut(Slot(bufs.l0c, j), out),)),
        Loop("c", atomic, (Loop("w", eq(j, first + R), (CrossWait(0, ix(SPLIT_FLAG)),)),
                           CopyOut(Slot(bufs.l0c, j), out, atomic=True))),
        Loop("s", land(eq(j, 0), first), (CrossSet(0, "FIX", ix(SPLIT_FLAG)),)),
    )
    n_atomic = ceildiv(imax(r * ix("S") - bid, 0), bnum) - first
    prog = (
        Let("R", total // bnum), Let("r", total % bnum),
        Let("KS", ceildiv(g.k, t.k0)), *split_parts(r, bnum, ks, most),
        Let("first", imax(imin(r - bid, 1), 0)),
        Loop("s", ix(1) - first, (CrossSet(0, "FIX", ix(SPLIT_FLAG)),)),
        Loop("i", first + R + n_atomic, body),
        Loop("w", eq(n_atomic, 0), (CrossWait(0, ix(SPLIT_FLAG)),)),
    )
    aic = Program(name, "AIC", cube_bufs, prog)
    return Kernel(name, "aic", g.tensors, (Phase(aic, None),), tiling, (), total * most)


def _mixed(name: str, g: CubeGemm, t: CubeTiles, bufs: _Cube, e: Epilogue, total: Ix,
           body: tuple, tiling: Tiling, cube_bufs: tuple) -> Kernel:
    """The cube program writing each tile to a workspace slot, and the vector program
    running the epilogue on half of it (module docstring)."""
    i, mo, no = ix("i"), ix("mo"), ix("no")
    batched = g.batch is not None
    bidx: tuple[Ix, ...] = (ix("b"),) if batched else ()
    one: tuple[Ix, ...] = (ix(1),) if batched else ()
    m_ext, n_ext = imin(t.m0, g.m - mo * t.m0), imin(t.n0, g.n - no * t.n0)
    ws = GlobalTensor("ws", e.acc.dtype, ("NB", 2, t.m0, t.n0))
    slot = i % 2
    # cube core: wait for the slot to be free (two tiles ago), write it, tell the AIVs
    aic_tail = (
        Loop("w", imin(imax(i - 1, 0), 1), (CrossWait(2, ix(BACK) + slot),)),
        CopyOut(Slot(bufs.l0c, i), GmRegion(ws, (ix(BID), slot, ix(0), ix(0)),
                                            (ix(1), ix(1), m_ext, n_ext))),
        CrossSet(2, "FIX", ix(FWD) + slot),
    )
    n_mine = ceildiv(total - ix(BID), ix(BNUM))
    drain = (Loop("d", imin(n_mine, 2), (CrossWait(2, ix(BACK) + (n_mine - 1 - ix("d")) % 2),)),)
    aic = Program(name, "AIC", cube_bufs,
                  tile_walk(total, (*body, *aic_tail), _tile_lets(g, t)) + drain)
    # vector cores: block bid // 2 takes the tiles of its cube core; half the rows each
    half = t.m0 // 2
    r0 = ix(SUB) * half
    rows = imax(imin(half, m_ext - r0), 0)
    acc_in = CopyIn(GmRegion(ws, (ix("blk"), slot, r0, ix(0)), (ix(1), ix(1), rows, n_ext)),
                    Slot(e.acc, i))

    def sl(b: LocalBuf) -> Slot:
        return Slot(b, i if b.pingpong else ix(0))
    vec = tuple(VecOp(op, sl(d), tuple(sl(x) if isinstance(x, LocalBuf) else x
                                       for x in srcs), rows) for op, d, srcs in e.ops)
    rows_in = tuple(CopyIn(GmRegion(gt, (no * t.n0,), (n_ext,)) if kind == "ROW" else
                           GmRegion(gt, (mo * t.m0 + r0,), (rows,), split=0,
                                    row_stride=ix(1)), sl(b))
                    for gt, b, kind in e.rows_in)
    out = CopyOut(sl(e.out), GmRegion(e.out_tensor, (*bidx, mo * t.m0 + r0, no * t.n0),
                                      (*one, rows, n_ext)), pipe="MTE3")
    aiv_body = (CrossWait(2, ix(FWD) + slot), acc_in, CrossSet(2, "MTE2", ix(BACK) + slot),
                *rows_in, *vec, out)
    aiv_walk = (Let("blk", ix(BID) // 2),
                Loop("i", ceildiv(total - ix("blk"), ix(BNUM) // 2),
                     (Let("tile", i * (ix(BNUM) // 2) + ix("blk")), *_tile_lets(g, t),
                      *aiv_body)))
    aiv = Program(name, "AIV", e.buffers, aiv_walk)
    tensors = (*g.tensors[:-1], *(v for v, _, _ in e.rows_in), e.out_tensor)
    return Kernel(name, "mix", tensors, (Phase(aic, aiv),), tiling, (ws,), total)
