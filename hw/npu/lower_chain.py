"""Lowering of a fused chain plan to the NPU IR on the A2 generation: both products on
the cube cores, the middle stages and the online softmax on the vector cores, the
intermediate between them in a small per-block GM workspace (cube and vector are
separate cores here: a score tile reaches UB only through GM, and ``P`` reaches L1 only
through GM), handed over with cross-core flags.

Per batch element ``b``, row block ``mo`` (``TM`` rows) and column block ``no`` (``TN``
columns of ``O``) -- a block of work, the blocks numbered and split over the chip's
cube cores (``bid, bid + bnum, ...``), each cube core's two vector cores taking half the
rows -- for the ``l`` blocks ``j = 0 .. nL`` (``TL`` columns of ``T``)::

    cube core, step j:                                  vector core, step j:
      j < nL:  S_j = X . Y_j   (MTE2, MTE1, M)            j < nL:  wait S_j; S_j -> UB (MTE2)
               wait slot free; S_j -> wsS (FIX)                    middle stages, online
               tell the vector cores                               softmax (V); P_j -> wsP
      j >= 1:  wait P_{j-1}; P_{j-1} -> L1 (MTE2)                  (MTE3); tell the cube core
               P_{j-1} . Z_{j-1} (M)                      j >= 1:  wait P.Z_{j-1}; O_ub +=
               softmax: P.Z -> wsO (FIX), tell them                P.Z_{j-1}
               else: accumulate in L0C                    j < nL:  O_ub *= alpha_j
    after:     no softmax: L0C -> O (FIX)                 after:   O_ub /= l; O_ub -> O (MTE3)

so the cube computes ``S_{j+1}`` and ``P_{j-1} . Z`` while the vector cores work on
``S_j`` (the skew of FlashAttention-style kernels on this generation).  Every hand-over
has two workspace slots (``j % 2``) and a "slot free" flag back; the waits and sets are
guarded by 0-or-1-trip loops.  The online softmax: ``m' = max(m, rowmax S)``, ``alpha =
exp(m - m')``, ``P = exp(S - m')``, ``l = l alpha + rowsum P``; the running max starts at
the lowest finite float (a row all -inf so far gets ``P = 0``, ``alpha = 1``; a row
masked in full ends as 0/0 = NaN, as numpy).  Columns past ``L`` reach the second
product with weight 0 (softmax: -inf first; otherwise 0 when the middle stages could map
a zero to a non-finite value) and the cube reads only the valid ``k`` of ``P``.

Assumes: an :class:`~polycomp.scheduler.chain.npu_detect.NpuChain` and tiles that are
multiples of 16 with ``k0 | KL1``, ``k0 | TL``.  Guarantees: tails are padded on the
way in and clipped on the way out; the programs have no in-core flags (the ``npu-sync``
pass places them; the simulator's race checks prove them, across cores too).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from polycomp.errors import TargetError
from polycomp.scheduler.chain.npu_detect import NpuChain
from polycomp.scheduler.chain.npu_plan import NpuChainTiles, x_resident
from polycomp.scheduler.npu.view import dim_key, dim_size

from .lower_chain_vector import TileVec, Val
from .lower_cube import tile_walk
from .program import (
    BID,
    BNUM,
    SUB,
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
    Slot,
    Tiling,
    VecOp,
    ceildiv,
    eq,
    imax,
    imin,
    ix,
    land,
)

__all__ = ["chain_core_programs", "chain_program", "gm_tensors"]

#: cross-core flag ids (a flag id is the receiver's): cube -> vector: S ready, P slot
#: free, P.Z ready; vector -> cube: S slot free, P ready, P.Z slot free
S_READY, P_FREE, O_READY = 0, 2, 4
S_FREE, P_READY, O_FREE = 0, 2, 4


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


def _guard(cond: Ix, items) -> tuple:
    """Each item under its own 0-or-1-trip loop (``cond``: 1 when it runs, <= 0 when
    not), so that the flag placement sees one pipe per item."""
    return tuple(Loop("g", cond, (it,)) for it in items)


def _when(lo: Ix, hi: Ix, k: Ix) -> Ix:
    """1 when ``lo <= k < hi``, else <= 0."""
    return imin(imin(1, k - lo + 1), hi - k)


@dataclass(frozen=True)
class _Ws:
    s: GlobalTensor
    p: GlobalTensor
    o: GlobalTensor | None


class _Chain:
    """The pieces of the fused kernel (shared values of :func:`chain_program`)."""

    def __init__(self, name: str, graph, chain: NpuChain, t: NpuChainTiles):
        m = self.m = chain.match
        self.name, self.t, self.cd = name, t, chain.dtype
        self.tensors = gm_tensors(graph, chain)
        gm = {g.name: g for g in self.tensors}
        self.X, self.Y, self.Z, self.O = (gm[b.name] for b in (m.x, m.y, m.z, m.out))
        self.nb = m.batch_dims
        self.M, self.K = ix(self.X.dims[-2]), ix(self.X.dims[-1])
        self.L, self.N = ix(self.Y.dims[-1]), ix(self.Z.dims[-1])
        self.nL = ceildiv(self.L, t.tl)
        self.soft = m.has_softmax
        self.half = t.tm // 2
        self.bvars = tuple(f"b{k}" for k in range(self.nb))
        self.bidx: tuple[Ix, ...] = tuple(ix(v) for v in self.bvars)
        self.one: tuple[Ix, ...] = tuple(ix(1) for _ in self.bvars)
        mo, no = ix("mo"), ix("no")
        self.m_ext = imin(t.tm, self.M - mo * t.tm)
        self.n_ext = imin(t.tn, self.N - no * t.tn)
        kx = self.X.dims[-1]
        self.x_resident = x_resident(kx if isinstance(kx, int) else None, t)
        self.ws = _Ws(GlobalTensor("wsS", "float32", ("NB", 2, t.tm, t.tl)),
                      GlobalTensor("wsP", self.cd, ("NB", 2, t.tm, t.tl)),
                      GlobalTensor("wsO", "float32", ("NB", 2, t.tm, t.tn))
                      if self.soft else None)

    # ------------------------------------------------------------------ the blocks
    def total(self) -> Ix:
        t = self.t
        out = ceildiv(self.M, t.tm) * ceildiv(self.N, t.tn)
        for d in self.X.dims[:self.nb]:
            out = ix(d) * out
        return out

    def lets(self) -> tuple:
        t = self.t
        nm, nn = ceildiv(self.M, t.tm), ceildiv(self.N, t.tn)
        out: list = [Let("mo", (ix("tile") // nn) % nm), Let("no", ix("tile") % nn)]
        stride = nm * nn
        for v, d in reversed(list(zip(self.bvars, self.X.dims[:self.nb]))):
            out.append(Let(v, (ix("tile") // stride) % ix(d)))
            stride = stride * ix(d)
        return tuple(out)

    # ------------------------------------------------------------------ cube core
    def cube(self) -> Program:
        t, cd = self.t, self.cd
        j = ix("j")
        k = j - 1
        q = ix("q")              # this core's running l-block count: slots and hand-overs
        qk = q - 1
        mo, no, ko, ki, kj = ix("mo"), ix("no"), ix("ko"), ix("ki"), ix("kj")

        def b(name: str, level: str, dt: str, r: int, c: int, lay: str) -> LocalBuf:
            return LocalBuf(name, level, dt, r, c, lay, pingpong=True)
        zz = "NZ" if cd != "float32" else "ZZ"
        l1x = LocalBuf("l1X", "L1", cd, t.tm, t.kl1, "NZ", pingpong=not self.x_resident)
        l1y, l1z = b("l1Y", "L1", cd, t.kl1, t.tl, zz), b("l1Z", "L1", cd, t.tl, t.tn, zz)
        l1p = b("l1P", "L1", cd, t.tm, t.tl, "NZ")
        l0x, l0p = b("l0X", "L0A", cd, t.tm, t.k0, "zZ"), b("l0P", "L0A", cd, t.tm, t.k0, "zZ")
        l0y, l0z = b("l0Y", "L0B", cd, t.k0, t.tl, "nZ"), b("l0Z", "L0B", cd, t.k0, t.tn, "nZ")
        l0s = b("l0S", "L0C", "float32", t.tm, t.tl, "NZ")
        l0o = LocalBuf("l0O", "L0C", "float32", t.tm, t.tn, "NZ", pingpong=self.soft)
        l_ext_j = imin(t.tl, self.L - j * t.tl)
        l_ext_k = imin(t.tl, self.L - k * t.tl)
        k_ext = imin(t.kl1, self.K - ko * t.kl1)
        k_step = imin(t.k0, k_ext - ki * t.k0)
        x_slot = Slot(l1x, ix(0) if self.x_resident else ko)
        x_in: tuple = () if self.x_resident else (
            CopyIn(GmRegion(self.X, (*self.bidx, mo * t.tm, ko * t.kl1),
                            (*self.one, self.m_ext, k_ext)), x_slot),)
        first = (Loop("ko", ceildiv(self.K, t.kl1), (
            *x_in,
            CopyIn(GmRegion(self.Y, (*self.bidx, ko * t.kl1, j * t.tl),
                            (*self.one, k_ext, l_ext_j)), Slot(l1y, ko)),
            Loop("ki", ceildiv(k_ext, t.k0), (
                Load2D(x_slot, Slot(l0x, ki), ki * t.k0, k_step),
                Load2D(Slot(l1y, ko), Slot(l0y, ki), ki * t.k0, k_step),
                Mmad(Slot(l0s, q), Slot(l0x, ki), Slot(l0y, ki), land(eq(ko, 0), eq(ki, 0)),
                     self.m_ext, l_ext_j, k_step))))),)
        slot_j, slot_k = q % 2, qk % 2
        s_out = (Loop("w", imin(imax(q - 1, 0), 1), (CrossWait(2, ix(S_FREE) + slot_j),)),
                 CopyOut(Slot(l0s, q), GmRegion(self.ws.s, (ix(BID), slot_j, ix(0), ix(0)),
                                                (ix(1), ix(1), self.m_ext, l_ext_j))),
                 CrossSet(2, "FIX", ix(S_READY) + slot_j))
        p_step = imin(t.k0, l_ext_k - kj * t.k0)
        o_slot = Slot(l0o, qk) if self.soft else Slot(l0o)
        init = eq(kj, 0) if self.soft else land(eq(k, 0), eq(kj, 0))
        second: tuple = (
            CrossWait(2, ix(P_READY) + slot_k),
            CopyIn(GmRegion(self.ws.p, (ix(BID), slot_k, ix(0), ix(0)),
                            (ix(1), ix(1), self.m_ext, l_ext_k)), Slot(l1p, qk)),
            CrossSet(2, "MTE2", ix(P_FREE) + slot_k),
            CopyIn(GmRegion(self.Z, (*self.bidx, k * t.tl, no * t.tn),
                            (*self.one, l_ext_k, self.n_ext)), Slot(l1z, qk)),
            Loop("kj", ceildiv(l_ext_k, t.k0), (
                Load2D(Slot(l1p, qk), Slot(l0p, kj), kj * t.k0, p_step),
                Load2D(Slot(l1z, qk), Slot(l0z, kj), kj * t.k0, p_step),
                Mmad(o_slot, Slot(l0p, kj), Slot(l0z, kj), init, self.m_ext, self.n_ext,
                     p_step))),
        )
        if self.soft:
            assert self.ws.o is not None
            second += (Loop("w", imin(imax(qk - 1, 0), 1), (CrossWait(2, ix(O_FREE) + slot_k),)),
                       CopyOut(o_slot, GmRegion(self.ws.o, (ix(BID), slot_k, ix(0), ix(0)),
                                                (ix(1), ix(1), self.m_ext, self.n_ext))),
                       CrossSet(2, "FIX", ix(O_READY) + slot_k))
        body = (Let("q", ix("i") * self.nL + j),
                *_guard(_when(ix(0), self.nL, j), first + s_out),
                *_guard(_when(ix(1), self.nL + 1, j), second))
        out_box = GmRegion(self.O, (*self.bidx, mo * t.tm, no * t.tn),
                           (*self.one, self.m_ext, self.n_ext))
        tail: tuple = () if self.soft else (CopyOut(Slot(l0o), out_box),)
        x_pre: tuple = (CopyIn(GmRegion(self.X, (*self.bidx, mo * t.tm, ix(0)),
                                        (*self.one, self.m_ext, self.K)), x_slot),) \
            if self.x_resident else ()
        blocks = tile_walk(self.total(), (*x_pre, Loop("j", self.nL + 1, body), *tail),
                           self.lets())
        # drain the "slot free" flags the vector cores sent for the last two blocks
        n_mine = ceildiv(self.total() - ix(BID), ix(BNUM))
        last = ix("lastQ")
        drain: list = [Let("lastQ", n_mine * self.nL)]
        drain.append(Loop("d", imin(last, 2),
                          (CrossWait(2, ix(S_FREE) + (last - 1 - ix("d")) % 2),)))
        if self.soft:
            drain.append(Loop("d", imin(last, 2),
                              (CrossWait(2, ix(O_FREE) + (last - 1 - ix("d")) % 2),)))
        bufs = (l1x, l1y, l1z, l1p, l0x, l0p, l0y, l0z, l0s, l0o)
        return Program(self.name, "AIC", bufs, (*blocks, *drain))

    # ------------------------------------------------------------------ vector cores
    def vector(self) -> Program:
        t = self.t
        j = ix("j")
        q = ix("q")
        qk = q - 1
        mo, no = ix("mo"), ix("no")
        half = self.half
        r0 = ix(SUB) * half
        rows = imax(imin(half, self.m_ext - r0), 0)
        l_ext_j = imin(t.tl, self.L - j * t.tl)
        vec = TileVec(half, t.tl, 1, q, mo * t.tm + r0, j * t.tl, rows, l_ext_j,
                      self.bvars, {g.name: g for g in self.tensors if not g.is_output})
        ubs = LocalBuf("ubS", "UB", "float32", half, t.tl, "ND", pingpong=True)
        ubp = LocalBuf("ubP", "UB", self.cd, half, t.tl, "ND", pingpong=True)
        cur = Val("ND", ubs)
        for e in self.m.elementwise:
            nxt = vec.stage(e.stage.body, e.prev, cur, tuple(e.iters), self.nb)
            vec.release(cur)
            if nxt.kind != "ND" or nxt.buf is None:
                nxt = vec.emit("Add", [nxt, Val("S", scalar=0.0)], "ND")
            cur = nxt
        slot_j, slot_k = q % 2, qk % 2
        oacc = LocalBuf("ubO", "UB", "float32", half, t.tn, "ND")
        mrun = vec.new("COL", "float32", name="ubRowMax")
        lrun = vec.new("COL", "float32", name="ubRowSum")
        rescale: list = []
        if self.soft:
            cur = self.mask_tail(vec, cur, j, float("-inf"))
            bm = vec.emit("ReduceMax", [vec.keep(cur)], "COL", extra=(ix(t.tl),))
            mnew = vec.emit("Max", [Val("COL", mrun), bm])
            alpha = vec.emit("Exp", [vec.emit("Sub", [Val("COL", mrun), vec.keep(mnew)])])
            vec.emit("Max", [Val("COL", mrun), vec.keep(mnew)], dst=Val("COL", mrun))
            p = vec.emit("Exp", [vec.emit("Sub", [cur, mnew])])
            bs = vec.emit("ReduceSum", [vec.keep(p)], "COL", extra=(ix(t.tl),))
            la = vec.emit("Mul", [Val("COL", lrun), vec.keep(alpha)])
            vec.emit("Add", [la, bs], dst=Val("COL", lrun))
            vec.emit("Cast", [p], "ND", dst=Val("ND", ubp))
            n_main = len(vec.ops)
            vec.emit("Mul", [Val("ND", oacc), alpha], dst=Val("ND", oacc))
            rescale = vec.ops[n_main:]
            vec.ops = vec.ops[:n_main]
        else:
            if self.m.elementwise and not vec.zero_safe():
                cur = self.mask_tail(vec, cur, j, 0.0)
            vec.emit("Cast", [cur], "ND", dst=Val("ND", ubp))
        vec.end_block()
        ops, vec.ops = vec.ops, []
        s_in = (CrossWait(2, ix(S_READY) + slot_j),
                CopyIn(GmRegion(self.ws.s, (ix("blk"), slot_j, r0, ix(0)),
                                (ix(1), ix(1), rows, l_ext_j)), Slot(ubs, q)),
                CrossSet(2, "MTE2", ix(S_FREE) + slot_j))
        p_out = (Loop("w", imin(imax(q - 1, 0), 1), (CrossWait(2, ix(P_FREE) + slot_j),)),
                 CopyOut(Slot(ubp, q), GmRegion(self.ws.p, (ix("blk"), slot_j, r0, ix(0)),
                                                (ix(1), ix(1), rows, l_ext_j)), pipe="MTE3"),
                 CrossSet(2, "MTE3", ix(P_READY) + slot_j))
        run = _when(ix(0), self.nL, j)
        body: tuple = (Let("q", ix("i") * self.nL + j),
                       *_guard(run, (*s_in, *vec.copy_ins(), *ops, *p_out)))
        bufs: list[LocalBuf] = [ubs, ubp]
        pre: tuple = ()
        post: tuple = ()
        if self.soft:
            assert self.ws.o is not None
            ubpz = LocalBuf("ubPZ", "UB", "float32", half, t.tn, "ND", pingpong=True)
            add = (CrossWait(2, ix(O_READY) + slot_k),
                   CopyIn(GmRegion(self.ws.o, (ix("blk"), slot_k, r0, ix(0)),
                                   (ix(1), ix(1), rows, self.n_ext)), Slot(ubpz, qk)),
                   CrossSet(2, "MTE2", ix(O_FREE) + slot_k),
                   VecOp("Add", Slot(oacc), (Slot(oacc), Slot(ubpz, qk)), rows))
            body += _guard(_when(ix(1), self.nL + 1, j), add) + _guard(run, rescale)
            bufs += [ubpz, oacc]
            lowest = float(np.finfo(np.float32).min)
            pre = (VecOp("Duplicate", Slot(mrun), (lowest,), rows),
                   VecOp("Duplicate", Slot(lrun), (0.0,), rows),
                   VecOp("Duplicate", Slot(oacc), (0.0,), rows))
            out_box = GmRegion(self.O, (*self.bidx, mo * t.tm + r0, no * t.tn),
                               (*self.one, rows, self.n_ext))
            post = (VecOp("Div", Slot(oacc), (Slot(oacc), Slot(lrun)), rows),
                    CopyOut(Slot(oacc), out_box, pipe="MTE3"))
        bufs += [b for b in vec.buffers if b not in bufs and
                 (self.soft or b.name not in ("ubRowMax", "ubRowSum"))]
        walk = (Let("blk", ix(BID) // 2),
                Loop("i", ceildiv(self.total() - ix("blk"), ix(BNUM) // 2),
                     (Let("tile", ix("i") * (ix(BNUM) // 2) + ix("blk")), *self.lets(),
                      *pre, Loop("j", self.nL + 1, body), *post)))
        n_mine = ceildiv(self.total() - ix("blk"), ix(BNUM) // 2)
        drain = (Let("lastQ", n_mine * self.nL),
                 Loop("d", imin(ix("lastQ"), 2),
                      (CrossWait(2, ix(P_FREE) + (ix("lastQ") - 1 - ix("d")) % 2),)))
        return Program(self.name, "AIV", tuple(bufs), (*vec.pre, *walk, *drain))

    def mask_tail(self, vec: TileVec, cur: Val, j: Ix, fill: float) -> Val:
        """Columns past ``L`` of the last block := ``fill``, in place; the Select runs
        only on that block, and only when ``TL`` does not divide ``L``."""
        valid = vec.emit("CompareLT", [vec.keep(vec.l_index()), Val("S", scalar=self.L)])
        vec.emit("Select", [valid, vec.keep(cur), Val("S", scalar=fill)], dst=vec.keep(cur))
        last = land(eq(j, self.nL - 1), ix(1) - eq(self.L % self.t.tl, 0))
        vec.ops[-1] = Loop("gt", last, (vec.ops[-1],))
        return cur


def _chain(name: str, graph, chain: NpuChain, t: NpuChainTiles) -> _Chain:
    if any(v % 16 for v in (t.tm, t.tl, t.tn, t.k0, t.kl1)) or t.kl1 % t.k0 or \
            t.tl % t.k0:
        raise TargetError(f"npu chain tiles {t}: multiples of 16 with k0 | KL1, k0 | TL, "
                          f"each vector core takes half the TM rows")
    return _Chain(name, graph, chain, t)


def chain_core_programs(name: str, graph, chain: NpuChain,
                        t: NpuChainTiles) -> Iterator[Program]:
    """The cube core's program, then the vector cores' (as :func:`chain_program` has
    them), built one after the other: a fitting check stops at the first that does not
    fit."""
    c = _chain(name, graph, chain, t)
    yield c.cube()
    yield c.vector()


def chain_program(name: str, graph, chain: NpuChain, t: NpuChainTiles,
                  double_buffer: bool = True) -> Kernel:
    """The fused kernel (module docstring), without in-core flags.  Double buffering is
    the ``npu-double-buffer`` pass's (the rotating buffers are marked ``pingpong``)."""
    c = _chain(name, graph, chain, t)
    ws = tuple(w for w in (c.ws.s, c.ws.p, c.ws.o) if w is not None)
    return Kernel(name, "mix", c.tensors, (Phase(c.cube(), c.vector()),),
                  Tiling((("TM", t.tm), ("TL", t.tl), ("TN", t.tn), ("k0", t.k0),
                          ("KL1", t.kl1))), ws, c.total())
