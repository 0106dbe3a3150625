"""Rows longer than UB: the long-row form of a vector program (part of ``npu-lower``).

Assumes: a vector plan (:mod:`polycomp.scheduler.npu.view`) whose column group is one
dimension, every GM tensor read and written directly (no transposed box) and no
carried reduction; the builder of :mod:`.lower_vector` makes one instruction per
expression node over tiles of ``TR`` rows x ``CW`` columns (``CW`` a host tiling value:
the chunk width).

Guarantees: the same values as the one-tile program, computed chunk by chunk
(``ceildiv(C, CW)`` chunks of a row, the last one partial):

* a reduction's **level** is one more than the highest level of the reductions its
  operand depends on; the reductions of level ``L`` take pass ``L`` over GM: each chunk's
  partial reduction (of its valid columns) is folded into the row's total, which
  starts as the identity; the values per row computed from totals of level ``L``
  follow the pass; a last pass computes every output chunk and writes it (outputs
  that are values per row are written after the passes);
* a sum of ``exp(a - m)``, ``m`` a row maximum of the level before and ``a`` independent
  of it (softmax, log_softmax), joins the maximum's pass in the **online** form: per
  chunk ``M' = max(M, max(chunk))``, ``S = S * exp(Mc - Mc') + sum(exp(a - Mc'))``
  with ``Mc = max(M, lowest finite)``, so a prefix of ``-inf`` values scales by
  ``exp(0)`` rather than ``exp(-inf + inf)``; the values after the pass use the true
  maximum ``M``, so rows holding NaN or infinities give numpy's answer;
* each pass loads its inputs into buffers of its own (``<name>_p<L>``), ping-pong with
  the counter ``i * chunks + c``; temporaries are the vector pipe's only.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from polycomp.scheduler.npu.view import VectorView, dim_size, tensor_keys

from .lower_vector import (
    _ACC,
    _RED,
    Val,
    _Builder,
    _Load,
    _setup,
    _stage,
    gm_access,
    int8_output_in_epilogue_only,
    ping_pong,
)
from .program import (
    CopyIn,
    CopyOut,
    GlobalTensor,
    GmRegion,
    Ix,
    LocalBuf,
    Loop,
    Slot,
    VecOp,
    ceildiv,
    imin,
    ix,
)

_REDS = frozenset(_RED.values())
_ACC_OF = {v: _ACC[k] for k, v in _RED.items()}
#: the lowest finite value per type: the clamp of the online maximum
LOWEST = {"float16": -65504.0, "float32": -3.4028234663852886e38}


@dataclass(frozen=True)
class LongForm:
    """The long-row form's buffers and tile body (inside the tile loop)."""
    buffers: tuple[LocalBuf, ...]
    body: tuple


@dataclass(frozen=True)
class _Online:
    """A maximum ``m`` (op index ``mx``) and the sum ``s`` (op index ``sm``) of
    ``exp(d)``, ``d = a - mm`` (``mm``: ``m`` or its cast), folded into one pass."""
    mx: int
    sm: int
    d: int          # op index of the Sub
    e: int          # op index of the Exp
    cast: int | None


def _region(g: GlobalTensor, keys: tuple, view: VectorView, split: int, stride: Ix,
            c0: Ix | None, cn: Ix | None) -> GmRegion:
    t, TR = ix("t"), ix("TR")
    R = ix(dim_size(view.row)) if view.row is not None else ix(1)
    offs, exts = [], []
    for k in keys:
        role = view.role(k)
        if role == "r":
            offs.append(t * TR)
            exts.append(imin(TR, R - t * TR))
        elif role == "c":
            assert c0 is not None and cn is not None
            offs.append(c0)
            exts.append(cn)
        elif role == "b":
            offs.append(ix(f"i_{k}"))
            exts.append(ix(1))
        else:
            offs.append(ix(0))
            exts.append(ix(1))
    return GmRegion(g, tuple(offs), tuple(exts), split, stride)


def _bufs(srcs) -> list[LocalBuf]:
    return [x for x in srcs if isinstance(x, LocalBuf)]


def _online_pairs(ops: list, level: dict, prod: dict) -> list[_Online]:
    out: list[_Online] = []
    for sm, (op, _s, srcs) in enumerate(ops):
        if op != "ReduceSum":
            continue
        k_e = prod.get(srcs[0].name)
        if k_e is None or ops[k_e][0] != "Exp" or not isinstance(ops[k_e][2][0], LocalBuf):
            continue
        k_d = prod.get(ops[k_e][2][0].name)
        if k_d is None or ops[k_d][0] != "Sub" or len(_bufs(ops[k_d][2])) != 2:
            continue
        a, mm = ops[k_d][2]
        if not isinstance(a, LocalBuf) or not isinstance(mm, LocalBuf) or \
                mm.layout != "COL" or a.layout == "COL":
            continue
        cast, m = None, mm
        k_m = prod.get(mm.name)
        if k_m is not None and ops[k_m][0] == "Cast":
            cast, m = k_m, ops[k_m][2][0]
            k_m = prod.get(m.name)
        if k_m is None or ops[k_m][0] != "ReduceMax" or \
                level.get(a.name, 0) >= level[m.name] or level[_s.name] != level[m.name] + 1:
            continue
        if all(p.mx != k_m for p in out):
            out.append(_Online(k_m, sm, k_d, k_e, cast))
    return out


def _front(graph, view: VectorView):
    """The builder of the chunk tiles (``TR x CW``) with every stage's ops, its chunked
    loads and its outputs ``(tensor, buffer, keys, access)``; None where the plan has no
    chunked form."""
    if len(view.cols) != 1 or view.carried:
        return None
    bld = _Builder(graph.name, view, tile_cols="CW", prefix="ul")
    _tensors, loads, row_loads = _setup(bld, graph)
    if any(x.access.transposed for x in loads):
        return None
    for s in graph.stages:
        _stage(bld, s)
    outs: list = []
    for o in graph.outputs:
        int8_output_in_epilogue_only(o)
        v = bld.values[o.name]
        keys = tensor_keys(o)
        dims = tuple(1 if k is None else dim_size(k) for k in keys)
        acc = gm_access(keys, dims, view, f"output {o.name}")
        if acc.transposed or acc.kind != v.kind or acc.kind == "ROW":
            return None
        outs.append((GlobalTensor(o.name, o.dtype, dims, is_output=True),
                     ping_pong(bld, v), keys, acc))
    # row vectors (gamma, beta) are loaded with every chunk: ping-pong like the tiles
    row_loads = [_Load(x.tensor, ping_pong(bld, Val("ROW", x.buf)), x.access)
                 for x in row_loads]
    outs = [(g, next(b for b in bld.buffers if b.name == ob.name), k, a)
            for g, ob, k, a in outs]
    return bld, [*loads, *row_loads], outs


class _Long:
    """The passes of the long-row form (module docstring) over the builder's ops."""

    def __init__(self, bld: _Builder, loads: list, view: VectorView):
        self.bld, self.view = bld, view
        self.ops = list(bld.ops)
        self.buffers = list(bld.buffers)
        self.loaded = {x.buf.name: x for x in loads}
        prod = {dst.name: k for k, (_op, dst, _s) in enumerate(self.ops)}
        self.level: dict[str, int] = {}
        for op, dst, srcs in self.ops:
            lv = max((self.level.get(x.name, 0) for x in _bufs(srcs)), default=0)
            self.level[dst.name] = lv + (1 if op in _REDS else 0)
        self.online = _online_pairs(self.ops, self.level, prod)
        self.C = ix(dim_size(view.cols[0]))
        self.nch = ceildiv(self.C, ix("CW"))
        t, TR = ix("t"), ix("TR")
        R = ix(dim_size(view.row)) if view.row is not None else ix(1)
        self.rows = imin(TR, R - t * TR)
        self.pre: list = []

    def col(self, dtype: str) -> LocalBuf:
        b = self.bld.new("COL", dtype)
        self.buffers.append(b)
        return b

    def needed(self, targets: set[str]) -> tuple[list[int], set[str]]:
        """The chunked ops (indices) computing ``targets``, and the buffers they read."""
        want, idx = set(targets), []
        for k in reversed(range(len(self.ops))):
            op, dst, srcs = self.ops[k]
            if dst.name in want and op not in _REDS and dst.layout != "COL":
                idx.append(k)
                want |= {x.name for x in _bufs(srcs) if x.layout != "COL"}
        return sorted(idx), want

    def vec(self, op: str, dst: LocalBuf, srcs: tuple, counter: Ix | None) -> VecOp:
        def slot(b: LocalBuf) -> Slot:
            if not b.pingpong:
                return Slot(b)
            # a value per row written out (a COL output) rotates with the tiles
            return Slot(b, counter if counter is not None and b.layout != "COL" else ix("i"))
        return VecOp(op, slot(dst), tuple(slot(x) if isinstance(x, LocalBuf) else x
                                          for x in srcs), self.rows)

    def region(self, g: GlobalTensor, keys: tuple, acc, c: Ix | None, n: Ix | None):
        return _region(g, keys, self.view, acc.split, acc.row_stride, c, n)

    def chunk_loop(self, tag: str, targets: set[str], tail, outputs: list) -> tuple:
        """One pass over the row's chunks: the loads ``targets`` need, the chunk ops,
        ``tail(n)`` (ops given the chunk's valid width ``n``), the chunked ``outputs``."""
        var = f"c{tag}"
        c, CW = ix(var), ix("CW")
        counter = ix("i") * self.nch + c
        nval = imin(CW, self.C - c * CW)
        tail_ops = tail(nval)
        written = {d.name for _op, d, _s in tail_ops}
        idx, want = self.needed(targets | ({x.name for _op, _d, s in tail_ops
                                            for x in _bufs(s)} - written))
        ren: dict[str, LocalBuf] = {}
        body: list = []
        for name in [n for n in self.loaded if n in want]:
            x = self.loaded[name]
            b = x.buf
            if tag != "f":      # each pass its own input tiles (flags per loop)
                b = dataclasses.replace(b, name=f"{b.name}_p{tag}")
                self.buffers.append(b)
            ren[name] = b
            body.append(CopyIn(self.region(x.tensor, self.bld.keys[x.tensor.name],
                                           x.access, c * CW, nval), Slot(b, counter)))

        def sub(x):
            return ren.get(x.name, x) if isinstance(x, LocalBuf) else x
        for k in idx:
            op, dst, srcs = self.ops[k]
            body.append(self.vec(op, dst, tuple(sub(x) for x in srcs), counter))
        for op, dst, srcs in tail_ops:
            body.append(self.vec(op, sub(dst), tuple(sub(x) for x in srcs), counter))
        for g, ob, keys, acc in outputs:
            body.append(CopyOut(Slot(ob, counter), self.region(g, keys, acc, c * CW, nval),
                                pipe="MTE3"))
        return (Loop(var, self.nch, tuple(body)),)

    def post(self, lv: int) -> list:
        """The values per row computed from the totals of level ``lv``."""
        return [self.vec(op, dst, srcs, None) for op, dst, srcs in self.ops
                if op not in _REDS and dst.layout == "COL" and self.level[dst.name] == lv]

    def plain(self, k: int):
        """A reduction by partial folds: its identity first, then per chunk."""
        op, dst, srcs = self.ops[k]
        fold, identity = _ACC_OF[op]
        self.pre.append(self.vec("Duplicate", dst, (identity,), None))
        part = self.col(dst.dtype)
        return srcs[0].name, lambda n: [(op, part, (srcs[0], n)), (fold, dst, (dst, part))]

    def online_tail(self, p: _Online):
        """The online max / sum of one pair (module docstring)."""
        _op, m, (f, _n) = self.ops[p.mx]
        _op, s, _srcs = self.ops[p.sm]
        _op, d, (a, mm) = self.ops[p.d]
        _op, e, _srcs = self.ops[p.e]
        pm, mn = self.col(m.dtype), self.col(m.dtype)
        mmn = mn if p.cast is None else self.col(mm.dtype)
        mcn, mc, sc, ps = (self.col(mm.dtype), self.col(mm.dtype), self.col(mm.dtype),
                           self.col(s.dtype))
        low = LOWEST[mm.dtype]
        self.pre += [self.vec("Duplicate", m, (float("-inf"),), None),
                     self.vec("Duplicate", mc, (low,), None),
                     self.vec("Duplicate", s, (0.0,), None)]
        cast = [("Cast", mmn, (mn,))] if p.cast is not None else []
        return {f.name, a.name}, lambda n: [
            ("ReduceMax", pm, (f, n)), ("Max", mn, (m, pm)), *cast,
            ("Max", mcn, (mmn, low)), ("Sub", sc, (mc, mcn)), ("Exp", sc, (sc,)),
            ("Mul", s, (s, sc)), ("Sub", d, (a, mcn)), ("Exp", e, (d,)),
            ("ReduceSum", ps, (e, n)), ("Add", s, (s, ps)), ("Add", m, (mn, 0.0)),
            ("Add", mc, (mcn, 0.0))]

    def passes(self) -> list:
        """Pass L for each level L of reductions, each followed by its values per row."""
        ops = self.ops
        fused = {p.sm for p in self.online} | {p.mx for p in self.online}
        top = max((self.level[dst.name] for op, dst, _ in ops if op in _REDS), default=0)
        main = self.post(0)
        for lv in range(1, top + 1):
            targets: set[str] = set()
            tails: list = []
            for k, (op, dst, _) in enumerate(ops):
                if op in _REDS and self.level[dst.name] == lv and k not in fused:
                    name, tail = self.plain(k)
                    targets.add(name)
                    tails.append(tail)
            for p in self.online:
                if self.level[ops[p.mx][1].name] == lv:
                    names, tail = self.online_tail(p)
                    targets |= names
                    tails.append(tail)
            if tails:
                main += self.chunk_loop(str(lv), targets,
                                        lambda n, ts=tails: [x for f in ts for x in f(n)], [])
            main += self.post(lv)
        return main


def long_rows(graph, view: VectorView) -> LongForm | None:
    """The long-row form of ``graph``'s vector program (module docstring), or None where
    the plan is not one it takes (several column dimensions, a transposed box, carried
    reductions)."""
    front = _front(graph, view)
    if front is None:
        return None
    bld, loads, outs = front
    lg = _Long(bld, loads, view)
    main = lg.passes()
    chunk_outs = [o for o in outs if o[1].layout != "COL"]
    if chunk_outs:
        main += lg.chunk_loop("f", {o[1].name for o in chunk_outs}, lambda n: [], chunk_outs)
    for g, ob, keys, acc in outs:
        if ob.layout == "COL":
            main.append(CopyOut(Slot(ob, ix("i")), lg.region(g, keys, acc, None, None),
                                pipe="MTE3"))
    return LongForm(tuple(lg.buffers), (*lg.pre, *main))
