"""The fused conv chain as a CPU program: overlapped tiles, im2col copies and the two
convolutions as register-tiled products, as statements and a schedule tree.

A schedule runs each statement instance once, so the model's statements cannot express
the fused kernel's halo *recomputation* (each output tile computes the intermediate it
reads, the halo included, so tiles are independent).  This module writes the fused
program with its own statements, made from the model's (:mod:`.statements`), over the
output tiles ``(n, ty, tx)`` of ``TH x TW`` pixels (``y0 = TH ty``, ``x0 = TW tx``); the
intermediate region of a tile is ``IH x IW = (TH + KH2 - 1) x (TW + KW2 - 1)`` pixels
from ``(sy, sx) = (y0 - p2h, x0 - p2w)``, flattened to ``p = IW i + j`` (``IP = IH IW``),
the tile's output pixels to ``q = TW i2 + j2`` (``PP = TH TW``):

* ``Xc[n, ty, tx, c, a, b, i, j]``: ``Xcol[.., c, a, b, IW i + j] = X[n, c, sy + i + a -
  p1h, sx + j + b - p1w]`` (0 outside ``X``: the first padding) — im2col of the patch;
* ``Ti[.., f, p]``: ``S0[.., f, p] = 0``; ``Tu[.., f, p, c, a, b]``: ``S0[.., f, p] +=
  W1[f, c, a, b] * Xcol[.., c, a, b, p]`` — the first convolution on the whole region
  (the halo recomputed);
* ``E_k[.., f, i, j]`` for the pixels inside ``T``'s extents: the ``k``-th elementwise
  stage at ``(n, f, sy + i, sx + j)`` reading ``S_{k-1}`` at ``IW i + j``; ``Z[.., f, i,
  j]`` for the pixels outside them: ``S_last[.., f, IW i + j] = 0`` (the second padding);
* with a second window larger than 1x1, ``Wc[.., f, a2, b2, i2, j2]``: ``Scol[.., f, a2,
  b2, TW i2 + j2] = S_last[.., f, IW (i2 + a2) + j2 + b2]`` — im2col of the windows;
* ``Oi[.., g, q]``: ``Oacc[.., g, q] = 0``; ``Ou[.., g, q, f, a2, b2]``: ``Oacc[.., g, q]
  += W2[g, f, a2, b2] * Scol[.., f, a2, b2, q]`` (``S_last[.., f, q]`` for 1x1);
* ``Os[.., g, i2, j2]`` for the pixels inside ``O``: ``O[n, g, y0 + i2, x0 + j2] =
  Oacc[.., g, TW i2 + j2]``.

Every new array is indexed by the tile ``(n, ty, tx)``, so tiles share nothing: the
program is the chain (each output element sums the same products as the model's, the
intermediate values recomputed identically per tile) and its tiles may run in any order.
Its reference order is one tile at a time, each statement's loops in index order; the
fused tree (:func:`conv_program`)::

    mark conv_chain_fused:<n>
      mark cpu_parallel
        band [n, ty, tx]                                       (permutable, coincident)
          mark cpu_local:<a>                                   (Xcol, Oacc per tile)
            sequence
              filter Xc: band [c, a, b, i, j]
              filter Oi: band [g, q]
              filter Ti, Tu, E.., Z, Wc, Ou: band [floor(f/TF)]
                mark cpu_local:<b>                   (S0 = S1 = .. one buffer; Scol)
                  sequence
                    filter Ti, Tu: band [floor((f mod TF)/MR), floor(p/NR)] (full isolated)
                       -> sequence Ti band [f mod MR, p mod NR];
                                   Tu mark cpu_microkernel -> band [c, a, b]
                                                            -> band [f mod MR, p mod NR]
                    filter E_k: band [f, i, j]    filter Z: band [f, i, j]
                    filter Wc: band [f, a2, b2, i2, j2]
                    filter Ou: band [floor(g/MR), floor(q/NR)] (full isolated)
                       -> mark cpu_microkernel -> band [f, a2, b2]
                                                -> band [g mod MR, q mod NR]
              filter Os: band [g, i2, j2]

checked by isl against the reference order's dependences.  The products are GEMMs whose
rows are channels (the weights, broadcast) and whose columns are the tile's pixels
(contiguous in the copies: the micro-kernel's vector loads).
"""
from __future__ import annotations

import islpy as isl

from polycomp import ir
from polycomp.scheduler.chain.local import (
    LocalTile,
    decide_local_tiles,
    local_mark,
    sharing_is_legal,
)
from polycomp.scheduler.chain.program import (
    ChainProgram,
    band,
    members,
    register_tiles,
    universe,
)
from polycomp.scheduler.chain.statements import StatementMaker, program_model
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.tree import is_legal
from polycomp.scheduler.cpu import tree as T
from polycomp.state import CompileState

__all__ = ["conv_program"]

I64 = "int64"
F32 = "float32"


def _i(v) -> ir.Expr:
    return v if isinstance(v, ir.Expr) else ir.IntImm(v)


def _add(a, b) -> ir.Expr:
    return ir.Binary("+", _i(a), _i(b), I64)


def _sub(a, b) -> ir.Expr:
    return ir.Binary("-", _i(a), _i(b), I64)


def _mul(a, b) -> ir.Expr:
    return ir.Binary("*", _i(a), _i(b), I64)


def _min(a, b) -> ir.Expr:
    return ir.Binary("min", _i(a), _i(b), I64)


def _max(a, b) -> ir.Expr:
    return ir.Binary("max", _i(a), _i(b), I64)


def _cdiv(a, b: int) -> ir.Expr:
    return ir.Binary("//", _add(a, b - 1), ir.IntImm(b), I64)


def _inside(v, lo, hi) -> ir.Expr:
    return ir.Binary("&&", ir.Binary(">=", v, ir.IntImm(lo), "bool"),
                     ir.Binary("<", v, _i(hi), "bool"), "bool")


def _and(a, b) -> ir.Expr:
    return ir.Binary("&&", a, b, "bool")


class _Subst(ir.Mutator):
    """A stage body at the tile's coordinates: iterators -> expressions; loads of
    ``prev`` -> ``repl(indices)``."""

    def __init__(self, env: dict, prev: ir.Buffer, repl):
        self.env, self.prev, self.repl = env, prev, repl

    def visit_Var(self, e):
        return self.env.get(e, e)

    def visit_Load(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        if e.buffer is self.prev:
            return self.repl(idx)
        return ir.Load(e.buffer, idx, e.dtype, e.lanes)


def conv_program(plan, state: CompileState, index: int) -> ChainProgram | str:
    """The fused program of the conv chain ``plan`` (module docstring), its mark
    ``conv_chain_fused:<index>``; or why there is none."""
    b = _ConvBuilder(plan, state)
    tree = T.Mark(marks.make(marks.CONV_CHAIN_FUSED, index).get_name(), b.tree())
    model = state.model
    prog = b.stmts
    schedule = T.to_schedule(b.pm.domain, tree)
    if not is_legal(schedule, b.pm.dependences):
        return "the fused program would violate a dependence"
    why = decide_local_tiles(schedule, state, prog)
    if why is not None:
        return why
    if not sharing_is_legal(schedule, state, prog, b.reference()):
        return "the tile-local buffers' sharing would violate a dependence"
    del model
    return ChainProgram(schedule, prog, {s.name: s for s in prog}, b.pm.dependences, b.pm)


class _ConvBuilder:
    def __init__(self, plan, state: CompileState):
        self.plan, self.state = plan, state
        self.model = model = state.model
        m = self.match = plan.match
        t = plan.tiles
        c1, c2 = m.first, m.second
        self.th, self.tw, self.tf = t.th, t.tw, t.tf
        self.ih, self.iw = t.th + c2.kh - 1, t.tw + c2.kw - 1
        self.ip, self.pp = self.ih * self.iw, t.th * t.tw
        self.k2 = c2.kh * c2.kw
        nb, cc, hh, ww = c1.x.shape
        _, f1, h1, w1 = c1.out.shape
        _, f2, h2, w2 = c2.out.shape
        self.ext = dict(nb=nb, c=cc, h=hh, w=ww, f1=f1, h1=h1, w1=w1, f2=f2, h2=h2, w2=w2)
        mk = self.mk = StatementMaker(model)
        v = {k: ir.Var(k, I64) for k in ("n", "ty", "tx", "c", "a", "b", "i", "j", "f", "p",
                                        "g", "q", "a2", "b2", "i2", "j2")}
        self.v = v
        nty, ntx = _cdiv(h2, t.th), _cdiv(w2, t.tw)
        # constant tile counts: the tiles of an image are one loop (OpenMP's iterations)
        self.ntiles = None
        if isinstance(h2, ir.IntImm) and isinstance(w2, ir.IntImm):
            self.ntiles = (-(-h2.value // t.th), -(-w2.value // t.tw))
        tile_iters = (v["n"], v["ty"], v["tx"])
        tile_bounds = [(0, nb), (0, nty), (0, ntx)]
        tile_shape = (nb, nty, ntx)
        y0, x0 = _mul(t.th, v["ty"]), _mul(t.tw, v["tx"])
        sy, sx = _sub(y0, c2.ph), _sub(x0, c2.pw)
        tidx = tile_iters
        # arrays
        xcol = mk.buffer(f"{c1.x.name}_col", (*tile_shape, cc, c1.kh, c1.kw, self.ip))
        names = [c1.out.name] + [e.out.name for e in m.middle]
        st = [mk.buffer(f"{n}_tile", (*tile_shape, f1, self.ip)) for n in names]
        oacc = mk.buffer(f"{c2.out.name}_acc", (*tile_shape, f2, self.pp))
        self.xcol, self.st, self.oacc = xcol, st, oacc

        def load(buf, idx):
            return ir.Load(buf, tuple(idx), F32)
        pix = _add(_mul(self.iw, v["i"]), v["j"])
        stmts = []
        # Xc: im2col of the input patch
        yy = _sub(_add(_add(sy, v["i"]), v["a"]), c1.ph)
        xx = _sub(_add(_add(sx, v["j"]), v["b"]), c1.pw)
        cond = _and(_inside(yy, 0, hh), _inside(xx, 0, ww))
        self.xc = mk.make(f"{c1.x.name}_im2col", c1.stage, "compute",
                          (*tile_iters, v["c"], v["a"], v["b"], v["i"], v["j"]),
                          [*tile_bounds, (0, cc), (0, c1.kh), (0, c1.kw), (0, self.ih),
                           (0, self.iw)],
                          xcol, (*tidx, v["c"], v["a"], v["b"], pix),
                          ir.Select(cond, load(c1.x, (v["n"], v["c"], yy, xx)),
                                    ir.FloatImm(0.0, F32), F32))
        # the first convolution on the region
        sp = (*tidx, v["f"], v["p"])
        self.ti = mk.make(f"{c1.stage.name}_tile_init", c1.stage, "init",
                          (*tile_iters, v["f"], v["p"]), [*tile_bounds, (0, f1), (0, self.ip)],
                          st[0], sp, ir.FloatImm(0.0, F32))
        self.tu = mk.make(f"{c1.stage.name}_tile_update", c1.stage, "update",
                          (*tile_iters, v["f"], v["p"], v["c"], v["a"], v["b"]),
                          [*tile_bounds, (0, f1), (0, self.ip), (0, cc), (0, c1.kh),
                           (0, c1.kw)], st[0], sp,
                          ir.Binary("+", load(st[0], sp), ir.Binary(
                              "*", load(c1.w, (v["f"], v["c"], v["a"], v["b"])),
                              load(xcol, (*tidx, v["c"], v["a"], v["b"], v["p"])), F32), F32))
        stmts += [self.xc, self.ti, self.tu]
        # the elementwise stages inside T's extents, zeros outside
        ilo, jlo = _max(0, _sub(0, sy)), _max(0, _sub(0, sx))
        ihi, jhi = _min(self.ih, _sub(h1, sy)), _min(self.iw, _sub(w1, sx))
        region = [*tile_bounds, (0, f1)]
        fij = (*tile_iters, v["f"], v["i"], v["j"])
        at = (*tidx, v["f"], pix)
        self.ew = []
        for k, e in enumerate(m.middle):
            n_, f_, y_, x_ = e.iters
            env = {n_: v["n"], f_: v["f"], y_: _add(sy, v["i"]), x_: _add(sx, v["j"])}
            body = _Subst(env, e.prev, lambda idx, k=k: load(st[k], at)).visit(e.stage.body)
            self.ew.append(mk.make(f"{e.stage.name}_t", e.stage, "compute", fij,
                                   [*region, (ilo, _sub(ihi, ilo)), (jlo, _sub(jhi, jlo))],
                                   st[k + 1], at, body))
        stmts += self.ew
        inside = self._inside_set(sy, sx, h1, w1)
        self.zero = mk.make(f"{names[-1]}_pad", (m.middle[-1].stage if m.middle else c1.stage),
                            "compute", fij,
                            [*region, (0, self.ih), (0, self.iw)], st[-1], at,
                            ir.FloatImm(0.0, F32), restrict=lambda d: d.subtract(inside(d)))
        stmts.append(self.zero)
        last = st[-1]
        q = v["q"]
        if self.k2 > 1:
            scol = mk.buffer(f"{names[-1]}_col", (*tile_shape, f1, c2.kh, c2.kw, self.pp))
            self.scol = scol
            src = _add(_add(_mul(self.iw, _add(v["i2"], v["a2"])), v["j2"]), v["b2"])
            self.wc = mk.make(f"{names[-1]}_im2col", c2.stage, "compute",
                              (*tile_iters, v["f"], v["a2"], v["b2"], v["i2"], v["j2"]),
                              [*tile_bounds, (0, f1), (0, c2.kh), (0, c2.kw), (0, self.th),
                               (0, self.tw)], scol,
                              (*tidx, v["f"], v["a2"], v["b2"],
                               _add(_mul(self.tw, v["i2"]), v["j2"])),
                              load(last, (*tidx, v["f"], src)))
            stmts.append(self.wc)
            red_iters: tuple[ir.Var, ...] = (v["f"], v["a2"], v["b2"])
            red_bounds = [(0, f1), (0, c2.kh), (0, c2.kw)]
            operand = load(scol, (*tidx, v["f"], v["a2"], v["b2"], q))
            weight = load(c2.w, (v["g"], v["f"], v["a2"], v["b2"]))
        else:
            self.scol = None
            self.wc = None
            red_iters, red_bounds = (v["f"],), [(0, f1)]
            operand = load(last, (*tidx, v["f"], q))
            weight = load(c2.w, (v["g"], v["f"], ir.IntImm(0), ir.IntImm(0)))
        gq = (*tidx, v["g"], q)
        self.oi = mk.make(f"{c2.stage.name}_acc_init", c2.stage, "init",
                          (*tile_iters, v["g"], q), [*tile_bounds, (0, f2), (0, self.pp)],
                          oacc, gq, ir.FloatImm(0.0, F32))
        self.ou = mk.make(f"{c2.stage.name}_acc_update", c2.stage, "update",
                          (*tile_iters, v["g"], q, *red_iters),
                          [*tile_bounds, (0, f2), (0, self.pp), *red_bounds], oacc, gq,
                          ir.Binary("+", load(oacc, gq), ir.Binary("*", weight, operand, F32),
                                    F32))
        self.os = mk.make(f"{c2.stage.name}_store", c2.stage, "compute",
                          (*tile_iters, v["g"], v["i2"], v["j2"]),
                          [*tile_bounds, (0, f2), (0, _min(self.th, _sub(h2, y0))),
                           (0, _min(self.tw, _sub(w2, x0)))], c2.out,
                          (v["n"], v["g"], _add(y0, v["i2"]), _add(x0, v["j2"])),
                          load(oacc, (*tidx, v["g"], _add(_mul(self.tw, v["i2"]), v["j2"]))))
        stmts += [self.oi, self.ou, self.os]
        self.stmts = stmts
        self.pm = program_model(model, stmts, self.reference())

    def _inside_set(self, sy, sx, h1, w1):
        """A function of a region statement's domain: its pixels inside ``T``'s
        extents (``0 <= sy + i < H1``, ``0 <= sx + j < W1``)."""
        from polycomp.affine import to_isl
        from polycomp.model import _isl_names
        names = _isl_names(tuple(self.model.params), ())
        h1s, w1s = to_isl(h1, names), to_isl(w1, names)
        th, tw = self.th, self.tw
        p2h, p2w = self.match.second.ph, self.match.second.pw

        def inside(d: isl.Set) -> isl.Set:
            name = d.get_tuple_name()
            prm = "[" + ", ".join(p.name for p in self.model.params) + "] -> " \
                if self.model.params else ""
            text = (f"{prm}{{ {name}[n, ty, tx, f, i, j] : 0 <= {th}ty - {p2h} + i < {h1s} "
                    f"and 0 <= {tw}tx - {p2w} + j < {w1s} }}")
            return d.intersect(isl.Set.read_from_str(d.get_ctx(), text))
        return inside

    # ------------------------------------------------------------------ trees
    def _dims(self, s) -> list[str]:
        return [f"i{k}" for k in range(s.domain.dim(isl.dim_type.set))]

    def _band(self, stmts, first: int, count: int | None = None, child=None, co=True):
        """``band [dims first..]`` of each of ``stmts`` (``count`` of them)."""
        def dims(s):
            d = self._dims(s)[first:]
            return d if count is None else d[:count]
        ms = members(self.model, stmts, dims)
        return band(ms, child, coincident=[int(co)] * len(ms))

    def reference(self) -> isl.Schedule:
        """One tile at a time, each statement's loops in index order."""
        s = [x for x in (self.xc, self.ti, self.tu, *self.ew, self.zero, self.wc, self.oi,
                         self.ou, self.os) if x is not None]
        seq = T.Sequence([T.Filter(universe([x]), self._band([x], 3, co=False)) for x in s])
        tree = self._band(s, 0, 3, seq, co=False)
        dom = isl.UnionSet.empty(self.model.context.get_space())
        for x in s:
            dom = dom.union(isl.UnionSet.from_set(x.domain))
        return T.to_schedule(dom, tree)

    def tree(self):
        p, model = self.plan, self.model
        tf, mr, nr = self.tf, p.mr, p.nv * p.vw
        d = self._dims

        def tile3(s):
            return self._tiles(s)

        def fblock(s):          # the f-block of a statement of the block
            return [f"floor(({d(s)[5 if s is self.ou else 3]})/{tf})"]

        def prefix(s):
            return [*tile3(s), *fblock(s)]
        first = register_tiles(model, self.tu, self.ti, lambda s: d(s)[3], lambda s: d(s)[4],
                               lambda s: d(s)[5:8], tf, 0, mr, nr, prefix)
        second = register_tiles(model, self.ou, None, lambda s: d(s)[3], lambda s: d(s)[4],
                                lambda s: d(s)[5:], 0, 0, mr, nr, prefix)
        block = [T.Filter(universe([self.ti, self.tu]), first)]
        block += [T.Filter(universe([e]), self._band([e], 3)) for e in (*self.ew, self.zero)]
        if self.wc is not None:
            block.append(T.Filter(universe([self.wc]), self._band([self.wc], 3)))
        block.append(T.Filter(universe([self.ou]), second))
        in_block = [x for x in (self.ti, self.tu, *self.ew, self.zero, self.wc, self.ou)
                    if x is not None]
        st_tiles = [LocalTile(tuple(self.st), self.st[0].name)]
        if self.scol is not None:
            st_tiles.append(LocalTile((self.scol,), self.scol.name))
        fmark = local_mark(self.state, st_tiles)
        fband = band(members(model, in_block, fblock),
                     T.Mark(fmark, T.Sequence(block)))
        tmark = local_mark(self.state, [LocalTile((self.xcol,), self.xcol.name),
                                        LocalTile((self.oacc,), self.oacc.name)])
        body = T.Mark(tmark, T.Sequence([
            T.Filter(universe([self.xc]), self._band([self.xc], 3)),
            T.Filter(universe([self.oi]), self._band([self.oi], 3)),
            T.Filter(universe(in_block), fband),
            T.Filter(universe([self.os]), self._band([self.os], 3))]))
        outer = members(model, self.stmts, self._tiles)
        return T.Mark(marks.CPU_PARALLEL, band(outer, body, coincident=[1] * len(outer)))

    def _tiles(self, s) -> list[str]:
        """The tile band's members on ``s``: ``[n, ty, tx]``, or with constant tile counts
        ``nty x ntx`` the one member ``nty ntx n + ntx ty + tx`` (all tiles of the batch
        in one loop, so that its iterations spread evenly over the threads)."""
        n, ty, tx = self._dims(s)[:3]
        if self.ntiles is None:
            return [n, ty, tx]
        nty, ntx = self.ntiles
        return [f"{nty * ntx}*{n} + {ntx}*{ty} + {tx}"]
