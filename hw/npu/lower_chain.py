"""Lowering of a fused chain plan to the NPU IR: both products on the cube, the middle
stages and the online softmax on the vector unit, the intermediate never in GM.

Per batch element ``b``, row block ``mo`` (``TM`` rows) and column block ``no`` (``TN``
columns of ``O``), for each ``l`` block ``lo`` (``TL`` columns of ``T``)::

    for ko (KL1 columns of X / rows of Y per L1 stage):     MTE2  X, Y tiles -> L1 (NZ)
        for ki (k0 per step):                                MTE1  L1 -> L0A / L0B
                                                             M     S (+)= X . Y  in L0C
    FIX  S: L0C -> UB (fp32)                ; MTE2  mask tiles -> UB, Z tile -> L1
    V    middle stages on S; columns past L (last block): -inf (softmax) / 0
    V    online softmax: m' = max(m, rowmax S), alpha = exp(m - m'), P = exp(S - m'),
         l = l alpha + rowsum P, O_ub *= alpha          (m starts at the lowest finite
         float: a row that is all -inf so far gets P = 0, alpha = 1, and a row masked
         in full ends as 0/0 = NaN, as numpy)
    V    P -> the cube's dtype (Cast) ; MTE3  UB -> L1 (NZ)
    for ki2 (k0 per step over TL):                           MTE1  P, Z slices -> L0A/L0B
                                                             M     P . Z into L0C
    softmax: FIX  P.Z: L0C -> UB ; V  O_ub += P.Z (in the next block's vector work)
                                                      else: the L0C tile accumulates
  softmax: V O_ub /= l ; MTE3 O_ub -> GM             else: FIX L0C -> GM

With double buffering the ``l`` blocks run in pairs on two buffer sets (``l1Xa`` /
``l1Xb`` ...) and the body is skewed by one block (:func:`chain_program`), so the cube
computes block ``k + 1``'s scores while the vector unit works on block ``k``; without
it, one set and no skew (this double buffering is structural, so the builder does it,
not the double-buffering pass).  The program has no flags: the ``npu-sync`` pass
(:func:`polycomp.hw.npu.sync.place_flags`) places them (the simulator's race check
proves them on every run).

Assumes: an :class:`~polycomp.scheduler.chain.npu_detect.NpuChain` and tiles that are
multiples of 16 with ``k0 | KL1``, ``k0 | TL``.  Guarantees: tails are zero-padded on
the way in (``X`` rows, ``Y``/``Z`` columns and rows); columns past ``L`` reach the
second product only with weight 0 (softmax: set to ``-inf`` first; otherwise when the
middle stages could map a zero to a non-finite value, set to 0), times the zero rows of
``Z``; rows past ``M`` and columns past ``N`` are clipped on the way out.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polycomp.errors import TargetError
from polycomp.scheduler.chain.npu_detect import NpuChain
from polycomp.scheduler.chain.npu_plan import NpuChainTiles, x_resident
from polycomp.scheduler.npu.view import dim_key, dim_size

from .lower_chain_vector import TileVec, Val
from .program import (
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
    Tiling,
    VecOp,
    ceildiv,
    eq,
    imin,
    ix,
    land,
)

__all__ = ["chain_program", "gm_tensors"]


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


@dataclass(frozen=True)
class _Bufs:
    """The on-chip buffers of one parity (one block in flight)."""
    l1x: LocalBuf
    l1y: LocalBuf
    l1z: LocalBuf
    l1p: LocalBuf
    l0x: LocalBuf
    l0p: LocalBuf
    l0y: LocalBuf
    l0z: LocalBuf
    l0s: LocalBuf
    l0o: LocalBuf
    ubs: LocalBuf
    ubp: LocalBuf
    ubpz: LocalBuf


def _bufs(p: str, t: NpuChainTiles, cd: str, l0o: LocalBuf | None,
          l1x: LocalBuf | None) -> _Bufs:
    def b(name: str, level: str, dt: str, r: int, c: int, layout: str) -> LocalBuf:
        return LocalBuf(f"{name}{p}", level, dt, r, c, layout, 1)
    return _Bufs(l1x or b("l1X", "L1", cd, t.tm, t.kl1, "NZ"),
                 b("l1Y", "L1", cd, t.kl1, t.tl, "NZ"),
                 b("l1Z", "L1", cd, t.tl, t.tn, "NZ"), b("l1P", "L1", cd, t.tm, t.tl, "NZ"),
                 b("l0X", "L0A", cd, t.tm, t.k0, "zZ"), b("l0P", "L0A", cd, t.tm, t.k0, "zZ"),
                 b("l0Y", "L0B", cd, t.k0, t.tl, "nZ"), b("l0Z", "L0B", cd, t.k0, t.tn, "nZ"),
                 b("l0S", "L0C", "float32", t.tm, t.tl, "NZ"),
                 l0o or b("l0O", "L0C", "float32", t.tm, t.tn, "NZ"),
                 b("ubS", "UB", "float32", t.tm, t.tl, "ND"), b("ubP", "UB", cd, t.tm, t.tl, "ND"),
                 b("ubPZ", "UB", "float32", t.tm, t.tn, "ND"))


def _guard(cond: Ix, items) -> tuple:
    """Each item under its own 0-or-1-trip loop (``cond``: 1 when it runs, <= 0 when
    not), so that the flag placement sees one pipe per item."""
    return tuple(Loop("g", cond, (it,)) for it in items)


def _when_lt(k: Ix, n: Ix) -> Ix:
    return imin(imin(1, k + 1), n - k)          # 0 <= k < n


class _Chain:
    """The pieces of the fused program (shared values of :func:`chain_program`)."""

    def __init__(self, name: str, graph, chain: NpuChain, t: NpuChainTiles, parities: int):
        m = self.m = chain.match
        self.t, self.P, self.cd = t, parities, chain.dtype
        self.tensors = gm_tensors(graph, chain)
        gm = {g.name: g for g in self.tensors}
        self.X, self.Y, self.Z, self.O = (gm[b.name] for b in (m.x, m.y, m.z, m.out))
        self.nb = m.batch_dims
        self.M, self.K = ix(self.X.dims[-2]), ix(self.X.dims[-1])
        self.L, self.N = ix(self.Y.dims[-1]), ix(self.Z.dims[-1])
        self.nL = ceildiv(self.L, t.tl)
        self.bvars = tuple(f"b{k}" for k in range(self.nb))
        self.bidx: tuple[Ix, ...] = tuple(ix(v) for v in self.bvars)
        self.one: tuple[Ix, ...] = tuple(ix(1) for _ in self.bvars)
        mo, no = ix("mo"), ix("no")
        self.m_ext, self.n_ext = imin(t.tm, self.M - mo * t.tm), imin(t.tn, self.N - no * t.tn)
        self.soft = m.has_softmax
        self.shared_o = None if self.soft else \
            LocalBuf("l0O", "L0C", "float32", t.tm, t.tn, "NZ", 1)
        # X's row block stays in L1 across the l blocks (and n blocks) when one L1
        # stage holds all of K (a constant extent)
        kx = self.X.dims[-1]
        self.x_resident = x_resident(kx if isinstance(kx, int) else None, t)
        self.shared_x = LocalBuf("l1X", "L1", self.cd, t.tm, t.kl1, "NZ", 1) \
            if self.x_resident else None
        self.sets = [_bufs("ab"[j] if parities > 1 else "", t, self.cd, self.shared_o,
                           self.shared_x) for j in range(parities)]
        self.vec = TileVec(t.tm, t.tl, 1, ix(0), mo * t.tm, ix(0), self.m_ext, ix(0),
                           self.bvars, {g.name: g for g in self.tensors if not g.is_output})
        self.mrun = Val("COL", self.vec.new("COL", "float32", name="ubRowMax"))
        self.lrun = Val("COL", self.vec.new("COL", "float32", name="ubRowSum"))
        self.oacc = LocalBuf("ubO", "UB", "float32", t.tm, t.tn, "ND")
        if not self.soft:
            self.vec.buffers = []

    def first(self, b: _Bufs, k: Ix) -> tuple:
        """``S(k) = X . Y`` into L0C, then into UB."""
        t, ko, ki = self.t, ix("ko"), ix("ki")
        l_ext, k_ext = imin(t.tl, self.L - k * t.tl), imin(t.kl1, self.K - ko * t.kl1)
        x_in: tuple = () if self.x_resident else (self.x_copy(ko * t.kl1, k_ext, b.l1x),)
        return (Loop("ko", ceildiv(self.K, t.kl1), (
            *x_in,
            CopyIn(GmRegion(self.Y, (*self.bidx, ko * t.kl1, k * t.tl),
                            (*self.one, k_ext, l_ext)), Slot(b.l1y)),
            Loop("ki", ceildiv(k_ext, t.k0), (
                Load2D(Slot(b.l1x), Slot(b.l0x), ki * (t.k0 // 16)),
                Load2D(Slot(b.l1y), Slot(b.l0y), ki * (t.k0 // 16)),
                Mmad(Slot(b.l0s), Slot(b.l0x), Slot(b.l0y), land(eq(ko, 0), eq(ki, 0))),
            )))), CopyLocal(Slot(b.l0s), Slot(b.ubs)))

    def x_copy(self, k0: Ix, k_ext: Ix, dst: LocalBuf) -> CopyIn:
        mo, t = ix("mo"), self.t
        return CopyIn(GmRegion(self.X, (*self.bidx, mo * t.tm, k0),
                               (*self.one, self.m_ext, k_ext)), Slot(dst))

    def mask_tail(self, cur: Val, k: Ix, fill: float) -> Val:
        """Columns past ``L`` of the last block := ``fill``, in place; the Select runs
        only on that block, and only when ``TL`` does not divide ``L``."""
        vec = self.vec
        valid = vec.emit("CompareLT", [vec.keep(vec.l_index()), Val("S", scalar=self.L)])
        vec.emit("Select", [valid, vec.keep(cur), Val("S", scalar=fill)], dst=vec.keep(cur))
        last = land(eq(k, self.nL - 1), ix(1) - eq(self.L % self.t.tl, 0))
        vec.ops[-1] = Loop("gt", last, (vec.ops[-1],))
        return cur

    def softmax(self, b: _Bufs, k: Ix, cur: Val) -> list:
        """The online softmax of the block; P into ``ubP``; returns the rescaling of
        ``O_ub`` (run after the previous block's ``P.Z`` is added)."""
        vec, t, mrun, lrun = self.vec, self.t, self.mrun, self.lrun
        s = self.mask_tail(cur, k, float("-inf"))
        # the running max starts at the lowest finite float, not -inf: a row that is all
        # -inf so far shifts by a finite value (P = 0, alpha = 1)
        bm = vec.emit("ReduceMax", [vec.keep(s)], "COL", extra=(ix(t.tl),))
        mnew = vec.emit("Max", [vec.keep(mrun), bm])
        alpha = vec.emit("Exp", [vec.emit("Sub", [vec.keep(mrun), vec.keep(mnew)])])
        vec.emit("Max", [vec.keep(mrun), vec.keep(mnew)], dst=vec.keep(mrun))
        p = vec.emit("Exp", [vec.emit("Sub", [s, mnew])])
        bs = vec.emit("ReduceSum", [vec.keep(p)], "COL", extra=(ix(t.tl),))
        la = vec.emit("Mul", [vec.keep(lrun), vec.keep(alpha)])
        vec.emit("Add", [la, bs], dst=vec.keep(lrun))
        vec.emit("Cast", [p], "ND", dst=Val("ND", b.ubp))
        n_main = len(vec.ops)
        o = Val("ND", self.oacc)
        vec.emit("Mul", [o, alpha], dst=o)
        tail = vec.ops[n_main:]
        vec.ops = vec.ops[:n_main]
        return tail

    def vector(self, b: _Bufs, k: Ix, prev_pz: LocalBuf | None) -> tuple:
        """The block's vector work (guarded by ``0 <= k < nL``) and, with a softmax, the
        add of the previous block's ``P.Z`` (guarded by ``1 <= k <= nL``)."""
        vec, t, nL = self.vec, self.t, self.nL
        vec.l_off, vec.l_ext = k * t.tl, imin(t.tl, self.L - k * t.tl)
        vec.loads = {}
        cur = Val("ND", b.ubs)
        for e in self.m.elementwise:
            nxt = vec.stage(e.stage.body, e.prev, cur, tuple(e.iters), self.nb)
            vec.release(cur)
            if nxt.kind != "ND" or nxt.buf is None:
                nxt = vec.emit("Add", [nxt, Val("S", scalar=0.0)], "ND")
            cur = nxt
        tail: list = []
        if self.soft:
            tail = self.softmax(b, k, cur)
        else:
            if self.m.elementwise and not vec.zero_safe():
                cur = self.mask_tail(cur, k, 0.0)
            vec.emit("Cast", [cur], "ND", dst=Val("ND", b.ubp))
        vec.end_block()
        ops, vec.ops = vec.ops, []
        run = _when_lt(k, nL)
        add: tuple = ()
        if self.soft and prev_pz is not None:
            add = _guard(imin(imin(1, k), nL - k + 1), (VecOp(
                "Add", Slot(self.oacc), (Slot(self.oacc), Slot(prev_pz)), self.m_ext),))
        return _guard(run, (*vec.copy_ins(), *ops)) + add + _guard(run, tail)

    def second(self, b: _Bufs, k: Ix) -> tuple:
        """``P.Z`` of the block (into UB with a softmax, else accumulated in L0C)."""
        t, kj, no = self.t, ix("kj"), ix("no")
        l_ext = imin(t.tl, self.L - k * t.tl)
        init = eq(kj, 0) if self.soft else land(eq(k, 0), eq(kj, 0))
        items: tuple = (
            CopyLocal(Slot(b.ubp), Slot(b.l1p), pipe="MTE3"),
            CopyIn(GmRegion(self.Z, (*self.bidx, k * t.tl, no * t.tn),
                            (*self.one, l_ext, self.n_ext)), Slot(b.l1z)),
            Loop("kj", ix(t.tl // t.k0), (
                Load2D(Slot(b.l1p), Slot(b.l0p), kj * (t.k0 // 16)),
                Load2D(Slot(b.l1z), Slot(b.l0z), kj * (t.k0 // 16)),
                Mmad(Slot(b.l0o), Slot(b.l0p), Slot(b.l0z), init),
            )))
        if self.soft:
            items += (CopyLocal(Slot(b.l0o), Slot(b.ubpz)),)
        return _guard(_when_lt(k, self.nL), items)

    def buffers(self) -> tuple[LocalBuf, ...]:
        out: list[LocalBuf] = []
        for bs in self.sets:
            for f in bs.__dataclass_fields__:
                b = getattr(bs, f)
                if b not in out and (self.soft or f != "ubpz"):
                    out.append(b)
        if self.soft:
            out.append(self.oacc)
        return (*out, *(b for b in self.vec.buffers if b not in out))


def chain_program(name: str, graph, chain: NpuChain, t: NpuChainTiles,
                  double_buffer: bool) -> Program:
    """The fused program (module docstring), without flags.

    Software pipelining: with double buffering, the ``l`` blocks run in pairs on two
    buffer sets (parities ``a``, ``b``) and the loop body is skewed by one block,
    ``S(2p) ; vector + P.Z (2p-1) ; S(2p+1) ; vector + P.Z (2p)``, so the cube
    computes the next block's scores before the current block's second product (the
    pipes are in-order: otherwise the cube would wait for the vector unit every
    block).  With a softmax, ``O_ub += P.Z`` of block ``k`` is done in the vector work
    of block ``k + 1`` (before its rescaling; a last virtual block ``k = nL`` does the
    final one), so the vector unit does not wait for the second product either.  Each
    block's parts are guarded by 0-or-1-trip loops (``k < nL``)."""
    if any(v % 16 for v in (t.tm, t.tl, t.tn, t.k0, t.kl1)) or t.kl1 % t.k0 or t.tl % t.k0:
        raise TargetError(f"npu chain tiles {t}: multiples of 16 with k0 | KL1, k0 | TL")
    P = 2 if double_buffer else 1
    skew, lp = P - 1, ix("lp")
    c = _Chain(name, graph, chain, t, P)
    body: list = []
    for j in range(P):
        kf = lp * P + j                         # the block whose scores are computed
        kv = lp * P + (j - skew)                # the block whose P goes through V, P.Z
        bv = c.sets[(j - skew) % P]
        prev = c.sets[(j - skew - 1) % P].ubpz if c.soft else None
        body += _guard(_when_lt(kf, c.nL), c.first(c.sets[j], kf))
        body += [*c.vector(bv, kv, prev), *c.second(bv, kv)]
    mo, no = ix("mo"), ix("no")
    out_box = GmRegion(c.O, (*c.bidx, mo * t.tm, no * t.tn), (*c.one, c.m_ext, c.n_ext))
    if c.soft:
        assert c.mrun.buf is not None and c.lrun.buf is not None
        lowest = float(np.finfo(np.float32).min)
        pre: list = [VecOp("Duplicate", Slot(c.mrun.buf), (lowest,), c.m_ext),
                     VecOp("Duplicate", Slot(c.lrun.buf), (0.0,), c.m_ext),
                     VecOp("Duplicate", Slot(c.oacc), (0.0,), c.m_ext)]
        post: list = [VecOp("Div", Slot(c.oacc), (Slot(c.oacc), Slot(c.lrun.buf)), c.m_ext),
                      CopyOut(Slot(c.oacc), out_box, pipe="MTE3")]
    else:
        assert c.shared_o is not None
        pre, post = [], [CopyOut(Slot(c.shared_o), out_box)]
    nest: tuple = (*pre, Loop("lp", ceildiv(c.nL + 1 + skew, P), tuple(body)), *post)
    nest = (Loop("no", ceildiv(c.N, t.tn), nest),)
    if c.shared_x is not None:      # X's row block, once per m block
        nest = (c.x_copy(ix(0), c.K, c.shared_x), *nest)
    nest = (Loop("mo", ceildiv(c.M, t.tm), nest),)
    for v, ext in reversed(list(zip(c.bvars, c.X.dims[:c.nb]))):
        nest = (Loop(v, ix(ext), nest),)
    return Program(name, "cube", c.tensors, c.buffers(), (*c.vec.pre, *nest),
                   Tiling((("TM", t.tm), ("TL", t.tl), ("TN", t.tn), ("k0", t.k0),
                           ("KL1", t.kl1))))
