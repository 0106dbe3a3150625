"""The fused NPU program of a chain: both products on the cube, the middle stages and the
online softmax on the vector unit, the intermediate never in GM.

Per batch element ``b``, row block ``mo`` (``TM`` rows) and column block ``no`` (``TN``
columns of ``O``), for each ``l`` block ``lo`` (``TL`` columns of ``T``)::

    for ko (KL1 columns of X / rows of Y per L1 stage):     MTE2  X, Y tiles -> L1 (NZ)
        for ki (k0 per step):                                MTE1  L1 -> L0A / L0B
                                                             M     S (+)= X . Y  in L0C
    FIX  S: L0C -> UB (fp32)                ; MTE2  mask tiles -> UB, Z tile -> L1
    V    middle stages on S; columns past L: -inf (softmax) / 0
    V    online softmax: m' = max(m, rowmax S), alpha = exp(m - m'), P = exp(S - m'),
         l = l alpha + rowsum P, O_ub *= alpha          (a row that is all -inf so far
         shifts by 0, so its P is 0 and its alpha 1-or-0, and a row masked in full ends
         as 0/0 = NaN, as numpy)
    V    P -> the cube's dtype (Cast) ; MTE3  UB -> L1 (NZ)
    for ki2 (k0 per step over TL):                           MTE1  P, Z slices -> L0A/L0B
                                                             M     P . Z into L0C
    softmax: FIX  P.Z: L0C -> UB ; V  O_ub += P.Z     else: the L0C tile accumulates
  softmax: V O_ub /= l ; MTE3 O_ub -> GM             else: FIX L0C -> GM

Buffers filled by one pipe and read by another are ping-pong copies selected by
``lo % 2`` (``ko % 2``, ``ki % 2`` for the operand stages; the output tile number for
L0C without a softmax), so the cube computes block ``lo + 1`` while the vector unit
works on ``lo``.  The program has no flags: :func:`polycomp.scheduler.npu.sync.place_flags`
places them (the simulator's race check proves them on every run).

Assumes: an :class:`~.npu_detect.NpuChain` and tiles that are multiples of 16 with
``k0 | KL1``, ``k0 | TL``.  Guarantees: tails are zero-padded on the way in (``X``
rows, ``Y``/``Z`` columns and rows), columns past ``L`` never reach the second product
with a non-zero weight, rows past ``M`` and columns past ``N`` are clipped on the way
out.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polycomp.errors import TargetError
from polycomp.hw.npu.program import (
    CopyIn,
    CopyLocal,
    CopyOut,
    GlobalTensor,
    GmRegion,
    Ix,
    Load2D,
    LocalBuf,
    Loop,
    Mmad,
    Program,
    Slot,
    VecOp,
    ceildiv,
    eq,
    imin,
    ix,
    land,
)
from polycomp.scheduler.chain.npu_detect import NpuChain
from polycomp.scheduler.chain.npu_vector import TileVec, Val
from polycomp.scheduler.npu.view import dim_key, dim_size

__all__ = ["NpuChainTiles", "chain_program", "gm_tensors"]


@dataclass(frozen=True)
class NpuChainTiles:
    """``TM x TL`` score tile (L0C, UB), ``TN`` columns of ``O`` per block, ``k0`` per
    cube step, ``KL1`` columns of ``X`` per L1 stage."""
    tm: int
    tl: int
    tn: int
    k0: int
    kl1: int


def _dims(t) -> tuple[str | int, ...]:
    out: list[str | int] = []
    for e in t.shape:
        k = dim_key(e, t.name)
        out.append(1 if k is None else dim_size(k))
    return tuple(out)


def gm_tensors(graph, chain: NpuChain) -> tuple[GlobalTensor, ...]:
    """The kernel's arguments in order (inputs, then ``O``)."""
    ins = tuple(GlobalTensor(t.name, t.dtype, _dims(t)) for t in graph.inputs)
    o = chain.match.out
    out = next(t for t in graph.outputs if t.name == o.name)
    return (*ins, GlobalTensor(out.name, "float32", _dims(out), is_output=True))


def chain_program(name: str, graph, chain: NpuChain, t: NpuChainTiles,
                  double_buffer: bool) -> Program:
    """The fused program (module docstring), without flags."""
    m = chain.match
    if any(v % 16 for v in (t.tm, t.tl, t.tn, t.k0, t.kl1)) or t.kl1 % t.k0 or t.tl % t.k0:
        raise TargetError(f"npu chain tiles {t}: multiples of 16 with k0 | KL1, k0 | TL")
    c = 2 if double_buffer else 1
    cd = chain.dtype
    tensors = gm_tensors(graph, chain)
    gm = {g.name: g for g in tensors}
    X, Y, Z, O = gm[m.x.name], gm[m.y.name], gm[m.z.name], gm[m.out.name]
    if X.dtype != "float32" and X.dtype != cd:
        raise TargetError(f"npu chain: {X.name} is {X.dtype}")
    nb = m.batch_dims
    M, K = ix(X.dims[-2]), ix(X.dims[-1])
    L, N = ix(Y.dims[-1]), ix(Z.dims[-1])
    bvars = tuple(f"b{k}" for k in range(nb))
    bidx: tuple[Ix, ...] = tuple(ix(v) for v in bvars)
    one: tuple[Ix, ...] = tuple(ix(1) for _ in bvars)
    mo, no, lo, ko, ki, kj = (ix(v) for v in ("mo", "no", "lo", "ko", "ki", "kj"))
    m_ext, n_ext = imin(t.tm, M - mo * t.tm), imin(t.tn, N - no * t.tn)
    l_ext, k_ext = imin(t.tl, L - lo * t.tl), imin(t.kl1, K - ko * t.kl1)

    def pp(e: Ix) -> Ix:          # the ping-pong copy (always 0 with one copy)
        return e % c if c > 1 else ix(0)
    sl, sk, sj, sq = pp(lo), pp(ko), pp(ki), pp(kj)

    l1x = LocalBuf("l1X", "L1", cd, t.tm, t.kl1, "NZ", c)
    l1y = LocalBuf("l1Y", "L1", cd, t.kl1, t.tl, "NZ", c)
    l1z = LocalBuf("l1Z", "L1", cd, t.tl, t.tn, "NZ", c)
    l1p = LocalBuf("l1P", "L1", cd, t.tm, t.tl, "NZ", c)
    l0x = LocalBuf("l0X", "L0A", cd, t.tm, t.k0, "zZ", c)
    l0p = LocalBuf("l0P", "L0A", cd, t.tm, t.k0, "zZ", c)
    l0y = LocalBuf("l0Y", "L0B", cd, t.k0, t.tl, "nZ", c)
    l0z = LocalBuf("l0Z", "L0B", cd, t.k0, t.tn, "nZ", c)
    l0s = LocalBuf("l0S", "L0C", "float32", t.tm, t.tl, "NZ", c)
    l0o = LocalBuf("l0O", "L0C", "float32", t.tm, t.tn, "NZ", c)
    ubs = LocalBuf("ubS", "UB", "float32", t.tm, t.tl, "ND", c)
    ubp = LocalBuf("ubP", "UB", cd, t.tm, t.tl, "ND", c)
    bufs: list[LocalBuf] = [l1x, l1y, l1z, l1p, l0x, l0p, l0y, l0z, l0s, l0o, ubs, ubp]

    first = (
        Loop("ko", ceildiv(K, t.kl1), (
            CopyIn(GmRegion(X, (*bidx, mo * t.tm, ko * t.kl1), (*one, m_ext, k_ext)),
                   Slot(l1x, sk)),
            CopyIn(GmRegion(Y, (*bidx, ko * t.kl1, lo * t.tl), (*one, k_ext, l_ext)),
                   Slot(l1y, sk)),
            Loop("ki", ceildiv(k_ext, t.k0), (
                Load2D(Slot(l1x, sk), Slot(l0x, sj), ki * (t.k0 // 16)),
                Load2D(Slot(l1y, sk), Slot(l0y, sj), ki * (t.k0 // 16)),
                Mmad(Slot(l0s, sl), Slot(l0x, sj), Slot(l0y, sj), land(eq(ko, 0), eq(ki, 0))),
            )))),
        CopyLocal(Slot(l0s, sl), Slot(ubs, sl)),
    )
    vec = TileVec(t.tm, t.tl, c, sl, mo * t.tm, lo * t.tl, m_ext, l_ext, bvars,
                  {g.name: g for g in tensors if not g.is_output})
    cur = Val("ND", ubs)
    for e in m.elementwise:
        nxt = vec.stage(e.stage.body, e.prev, cur, tuple(e.iters), nb)
        vec.release(cur)
        if nxt.kind != "ND" or nxt.buf is None:       # a constant or a vector: broadcast
            nxt = vec.emit("Add", [nxt, Val("S", scalar=0.0)], "ND") if nxt.kind != "ND" \
                else nxt
        cur = nxt
    pre: list = []
    post: list = []
    if m.has_softmax:
        col = lambda name: vec.new("COL", "float32", name=name)  # noqa: E731
        mrun, lrun = Val("COL", col("ubRowMax")), Val("COL", col("ubRowSum"))
        oacc = Val("ND", LocalBuf("ubO", "UB", "float32", t.tm, t.tn, "ND"))
        ubpv = LocalBuf("ubPZ", "UB", "float32", t.tm, t.tn, "ND", c)
        bufs += [oacc.buf, ubpv]
        ninf, lowest = float("-inf"), float(np.finfo(np.float32).min)
        valid = vec.emit("CompareLT", [vec.keep(vec.l_index()), Val("S", scalar=L)])
        s = vec.emit("Select", [valid, cur, Val("S", scalar=ninf)])
        # the running max starts at the lowest finite float, not -inf: a row that is all
        # -inf so far shifts by a finite value (P = 0, alpha = 1) instead of -inf - -inf
        bm = vec.emit("ReduceMax", [vec.keep(s)], "COL", extra=(ix(t.tl),))
        mnew = vec.emit("Max", [vec.keep(mrun), bm])
        alpha = vec.emit("Exp", [vec.emit("Sub", [vec.keep(mrun), vec.keep(mnew)])])
        vec.emit("Max", [vec.keep(mrun), vec.keep(mnew)], dst=vec.keep(mrun))
        p = vec.emit("Exp", [vec.emit("Sub", [s, mnew])])
        bs = vec.emit("ReduceSum", [vec.keep(p)], "COL", extra=(ix(t.tl),))
        la = vec.emit("Mul", [vec.keep(lrun), vec.keep(alpha)])
        vec.emit("Add", [la, bs], dst=vec.keep(lrun))
        vec.emit("Mul", [vec.keep(oacc), alpha], dst=vec.keep(oacc))
        cur = p
        pre = [VecOp("Duplicate", Slot(mrun.buf), (lowest,), m_ext),
               VecOp("Duplicate", Slot(lrun.buf), (0.0,), m_ext),
               VecOp("Duplicate", Slot(oacc.buf), (0.0,), m_ext)]
    elif m.elementwise and not vec.zero_safe():
        valid = vec.emit("CompareLT", [vec.keep(vec.l_index()), Val("S", scalar=L)])
        cur = vec.emit("Select", [valid, cur, Val("S", scalar=0.0)])
    vec.emit("Cast", [cur], "ND", dst=Val("ND", ubp))
    vec.end_block()
    tile_ops = vec.ops
    tile_no: Ix = ix(0)
    for b_ix, ext in zip(bidx, X.dims[:nb]):
        tile_no = tile_no * ix(ext) + b_ix
    tile_no = (tile_no * ceildiv(M, t.tm) + mo) * ceildiv(N, t.tn) + no
    so = sl if m.has_softmax else pp(tile_no)
    init2 = eq(kj, 0) if m.has_softmax else land(eq(lo, 0), eq(kj, 0))
    second: tuple = (
        CopyLocal(Slot(ubp, sl), Slot(l1p, sl), pipe="MTE3"),
        CopyIn(GmRegion(Z, (*bidx, lo * t.tl, no * t.tn), (*one, l_ext, n_ext)), Slot(l1z, sl)),
        Loop("kj", ix(t.tl // t.k0), (
            Load2D(Slot(l1p, sl), Slot(l0p, sq), kj * (t.k0 // 16)),
            Load2D(Slot(l1z, sl), Slot(l0z, sq), kj * (t.k0 // 16)),
            Mmad(Slot(l0o, so), Slot(l0p, sq), Slot(l0z, sq), init2),
        )),
    )
    out_box = GmRegion(O, (*bidx, mo * t.tm, no * t.tn), (*one, m_ext, n_ext))
    if m.has_softmax:
        second += (CopyLocal(Slot(l0o, sl), Slot(ubpv, sl)),
                   VecOp("Add", Slot(oacc.buf), (Slot(oacc.buf), Slot(ubpv, sl)), m_ext))
        post = [VecOp("Div", Slot(oacc.buf), (Slot(oacc.buf), Slot(lrun.buf)), m_ext),
                CopyOut(Slot(oacc.buf), out_box, pipe="MTE3")]
    else:
        post = [CopyOut(Slot(l0o, so), out_box)]
    body = (*first, *vec.copy_ins(), *tile_ops, *second)
    nest: tuple = (*pre, Loop("lo", ceildiv(L, t.tl), body), *post)
    nest = (Loop("no", ceildiv(N, t.tn), nest),)
    nest = (Loop("mo", ceildiv(M, t.tm), nest),)
    for v, ext in reversed(list(zip(bvars, X.dims[:nb]))):
        nest = (Loop(v, ix(ext), nest),)
    bufs += [b for b in vec.buffers if b not in bufs]
    return Program(name, "cube", tensors, tuple(bufs), (*vec.pre, *nest),
                   {"TM": t.tm, "TL": t.tl, "TN": t.tn, "k0": t.k0, "KL1": t.kl1})
