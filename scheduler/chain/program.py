"""The fused chain as a CPU program: the schedule tree code generation lowers.

:func:`cpu_program` builds, for a chain plan (:mod:`.plan`) on a CPU target, the
schedule tree that *is* the fused kernel: lowered by isl's AST generator like any other
tree, then realised by the CPU IR passes (tile-local buffers :mod:`polycomp.hw.cpu.
local_tile`, operand packing, OpenMP, the register-tile micro-kernel of
:mod:`polycomp.hw.cpu.microkernel`, the vectoriser) and printed by the C/AVX printers.
With ``b`` the batch dimensions, ``TM x TL`` the plan's tiles and ``MR x NR`` / ``MR x
NR2`` the register blocks of the two products::

    mark chain_fused:<n>
      mark cpu_parallel
        band [b.., floor(m/TM)]                              (permutable, coincident)
          [mark cpu_local:<rows>]                          (softmax: mx, mo, c, sm)
            sequence
              [filter mx_init, sm_init: band [m]]
              filter O_init: band [m, n]
              filter the tile's statements: band [floor(l/TL)]    (per-tile ones: lt)
                mark cpu_local:<tile>                      (T, the stages' arrays, ex)
                  sequence
                    filter T_init, T_update:  [mark cpu_pack_request:<p>]  (Y[.., l, k])
                      band [floor((m mod TM)/MR), floor((l mod TL)/NR)]  isolate full
                        sequence T_init band [m mod MR, l mod NR]
                                 T_update mark cpu_microkernel -> band [k]
                                                -> band [m mod MR, l mod NR]
                    filter E..: band [m, l]                          (no softmax)
                    filter E.., save, mx_update, scale, sm_rescale, ex, sm_update:
                      band [m] -> sequence E.. [l]; save; mx_update [l]; scale;
                                           sm_rescale; {ex; sm_update} [l]   (softmax)
                    filter [O_rescale,] O_update:
                      band [floor((m mod TM)/MR), floor(n/NR2)]  isolate full
                        [sequence O_rescale band [m mod MR, n mod NR2]]
                        mark cpu_microkernel -> band [l mod TL]
                                                -> band [m mod MR, n mod NR2]
              [filter O_normalise: band [m, n]]

so one ``(b, m-block, l-tile)`` computes a ``TM x TL`` tile of ``T`` into a per-thread
buffer (micro-kernel), applies the elementwise stages (and the online softmax: a row
at a time, vectorised along ``l``) in place, and multiplies it into the ``TM x N``
block of ``O`` (micro-kernel, ``O`` rescaled in the same register tile first); the
statements with a softmax are those of :mod:`.online`.  ``T``'s tile and the
intermediates after it share one buffer (:class:`~.local.LocalTile`); the row
statistics another.  With a constant ``L`` that is no multiple of ``NR``, the first
product's last ``L mod NR`` columns are a register band of their own (a second filter
under its sequence), so that they too get constant bounds.

Legality: :func:`cpu_program` checks the whole tree with isl against the dependences of
the statements it runs (the model's, or with a softmax the online program's) and
returns no program otherwise.  Why it holds: the row-block band is coincident (rows
only depend on themselves), the ``l`` tiles run in order, and the register bands tile
permutable bands whose only dependences are the products' accumulations (carried by the
reduction loops inside them) and the row-wise ones (inside a row of the block).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import islpy as isl

from polycomp.model import PolyModel
from polycomp.scheduler.chain.local import (
    LocalTile,
    decide_local_tiles,
    local_mark,
    sharing_is_legal,
)
from polycomp.scheduler.chain.plan import ChainPlan
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.tree import is_legal
from polycomp.scheduler.cpu import tree as T
from polycomp.scheduler.cpu.backbone_tile import isolate_full_tiles
from polycomp.state import CompileState

__all__ = ["ChainProgram", "adopt", "cpu_program", "upa", "members", "universe", "band"]


@dataclass(eq=False)
class ChainProgram:
    """The fused program of a chain on a CPU target: its tree, the statements it runs
    (the model's, or the online program's, :mod:`.online`), the new statements lowering
    builds (name -> statement) and the dependences its tree was checked against."""
    schedule: isl.Schedule
    statements: list
    new: dict = field(default_factory=dict)
    dependences: isl.UnionMap | None = None
    model: PolyModel | None = None    # the program's own model (None: the kernel's)


def adopt(state: CompileState, prog: ChainProgram) -> None:
    """Record ``prog`` as the compile's fused program (``chain_plans(state).programs``,
    from which lowering builds its statements); when it runs statements of its own, the
    dependences of its model join the model's, which lowering (loop coincidence) and
    the pass manager's legality checks read."""
    from polycomp.scheduler.chain.plan import chain_plans
    chain_plans(state).programs.append(prog)
    if prog.model is not None:
        m, pm = state.model, prog.model
        m.flow = m.flow.union(pm.flow).coalesce()
        m.anti = m.anti.union(pm.anti).coalesce()
        m.output = m.output.union(pm.output).coalesce()


def _dims(stmt) -> list[str]:
    return [f"i{k}" for k in range(stmt.domain.dim(isl.dim_type.set))]


def _params(model) -> str:
    n = model.context.dim(isl.dim_type.param)
    if not n:
        return ""
    return "[" + ", ".join(model.context.get_dim_name(isl.dim_type.param, k)
                           for k in range(n)) + "] -> "


def upa(model, pieces: Sequence[tuple]) -> isl.UnionPwAff:
    """``{ S[i0..] -> [(e)] ; .. }`` of ``(statement, isl expression on i0..)`` pieces."""
    body = "; ".join(f"{s.name}[{', '.join(_dims(s))}] -> [({e})]" for s, e in pieces)
    return isl.UnionPwAff.read_from_str(model.ctx, f"{_params(model)}{{ {body} }}")


def members(model, stmts, exprs: Callable) -> list[isl.UnionPwAff]:
    """Band members over ``stmts``: member ``k`` maps statement ``s`` to ``exprs(s)[k]``
    (isl expressions on its dimensions ``i0, i1, ..``)."""
    per = [(s, exprs(s)) for s in stmts]
    return [upa(model, [(s, e[k]) for s, e in per]) for k in range(len(per[0][1]))]


def restricted(model, stmts, cond: Callable) -> isl.UnionSet:
    """The filter of the instances of ``stmts`` satisfying ``cond(s)`` (an isl
    constraint on the statement's dimensions ``i0, i1, ..``)."""
    body = "; ".join(f"{s.name}[{', '.join(_dims(s))}] : {cond(s)}" for s in stmts)
    return isl.UnionSet.read_from_str(model.ctx, f"{_params(model)}{{ {body} }}")


def universe(stmts) -> isl.UnionSet:
    """The filter of every instance of ``stmts``."""
    u = None
    for s in stmts:
        x = isl.UnionSet.from_set(isl.Set.universe(s.domain.get_space()))
        u = x if u is None else u.union(x)
    assert u is not None
    return u


def band(ms, child=None, coincident=None, options=None) -> T.Band:
    """A permutable band of members ``ms`` (coincidence flags per member)."""
    return T.Band(list(ms), child if child is not None else T.Leaf(), permutable=True,
                  coincident=[bool(c) for c in (coincident or [False] * len(ms))],
                  options=options)


def register_tiles(model, update, init, row: Callable, col: Callable, red: Callable,
                   rows: int, cols: int, mr: int, nr: int, prefix: Callable,
                   domain: isl.Set | None = None) -> T.Band:
    """The register tiles of a product ``C[row, col] += ..`` (statement ``update``,
    reduction dimensions ``red``) in a ``rows x cols`` block (0: no block, the whole
    extent): ``band [floor((row mod rows)/mr), floor((col mod cols)/nr)]`` with the full
    ``mr x nr`` tiles isolated (isl generates them with constant bounds: the
    micro-kernel's pattern) -> [sequence: ``init`` on the tile, then] ``mark
    cpu_microkernel -> band [red..] -> band [row mod mr, col mod nr]``.  ``row``,
    ``col`` and ``prefix`` (the outer band members), ``red`` (a list) give isl
    expressions per statement; ``init`` (or None) has the same ``row``/``col``;
    ``domain``: the update's instances the band runs (default: all)."""
    def tile(s):
        r, c = row(s), col(s)
        rr = f"({r}) mod {rows}" if rows else r
        cc = f"({c}) mod {cols}" if cols else c
        return [f"floor(({rr})/{mr})", f"floor(({cc})/{nr})"]

    def point(s):
        return [f"({row(s)}) mod {mr}", f"({col(s)}) mod {nr}"]
    stmts = [update] if init is None else [init, update]
    iso = isolate_full_tiles(members(model, [update], prefix), members(model, [update], tile),
                             members(model, [update], point), (mr, nr),
                             update.domain if domain is None else domain)
    micro = T.Mark(marks.CPU_MICROKERNEL,
                   band(members(model, [update], red),
                        band(members(model, [update], point), coincident=[1, 1])))
    body: object = micro
    if init is not None:
        body = T.Sequence([
            T.Filter(universe([init]), band(members(model, [init], point), coincident=[1, 1])),
            T.Filter(universe([update]), micro)])
    return band(members(model, stmts, tile), body, coincident=[1, 1], options=iso)


def cpu_program(plan: ChainPlan, state: CompileState, index: int) -> ChainProgram | str:
    """The fused program of ``plan`` on ``state``'s CPU target (module docstring), its
    mark ``chain_fused:<index>``, with its ``cpu_local`` records decided; or why there is
    none (the tree would violate a dependence, a local tile cannot be realised)."""
    from polycomp.scheduler.chain.online import online_softmax
    m = plan.match
    online = online_softmax(m, state.model, plan.tl) if m.has_softmax else None
    b = _Builder(plan, state, online)
    tree = T.Mark(marks.make(marks.CHAIN_FUSED, index).get_name(), b.tree())
    model = state.model
    domain = isl.UnionSet.empty(model.context.get_space())
    for s in b.stmts:
        domain = domain.union(isl.UnionSet.from_set(s.domain))
    schedule = T.to_schedule(domain, tree)
    deps = online.model.dependences if online is not None else model.dependences
    if not is_legal(schedule, deps):
        return "the fused program would violate a dependence"
    why = decide_local_tiles(schedule, state, b.stmts)
    if why is not None:
        return why
    reference = online.reference if online is not None else model.initial_schedule
    if not sharing_is_legal(schedule, state, b.stmts, reference):
        return "the tile-local buffers' sharing would violate a dependence"
    if online is None:
        return ChainProgram(schedule, b.stmts, {}, deps)
    return ChainProgram(schedule, b.stmts, dict(online.new), deps, online.model)


class _Builder:
    """The parts of the tree of :func:`cpu_program` (module docstring)."""

    def __init__(self, plan: ChainPlan, state: CompileState, online):
        self.plan, self.state, self.online = plan, state, online
        self.model = model = state.model
        m = self.match = plan.match
        self.nb = m.batch_dims
        mine = [s for s in model.statements if s.name in set(m.statements)]

        def stmt(stage, kind):
            return next(s for s in mine if s.stage is stage and s.kind == kind)
        self.r = r = online.roles if online is not None else {}
        self.stmts = online.statements if online is not None else mine
        self.t_init, self.t_upd = stmt(m.first, "init"), stmt(m.first, "update")
        self.o_init = stmt(m.second, "init")
        self.o_upd = r["O_update"] if online is not None else stmt(m.second, "update")
        self.ew = [s for s in self.stmts if any(s.stage is e.stage for e in m.elementwise)]
        self.per_tile = (r["save"], r["scale"], r["sm_rescale"], r["O_rescale"]) \
            if online is not None else ()
        from polycomp.scheduler.chain.statements import StatementMaker
        self.names = StatementMaker(model)      # names of the local buffers
        self.names.taken |= {s.name for s in self.stmts} | {
            x.buffer.name for s in self.stmts for x in s.accesses}

    # the dimensions of a statement, as isl expressions on its i0, i1, ..
    def mdim(self, s) -> str:
        return _dims(s)[self.nb]

    def ldim(self, s) -> str:      # l: T's and the stages' column, O_update's reduction
        return _dims(s)[self.nb + 2 if s is self.o_upd else self.nb + 1]

    def ndim(self, s) -> str:
        return _dims(s)[self.nb + 1]

    def ltile(self, s) -> str:     # the l tile of a statement
        if s in self.per_tile:
            return _dims(s)[-1]
        return f"floor(({self.ldim(s)})/{self.plan.tl})"

    def prefix(self, s) -> list[str]:
        return [*_dims(s)[:self.nb], f"floor(({self.mdim(s)})/{self.plan.tm})", self.ltile(s)]

    def rows_band(self, stmts, cols: bool, child=None) -> T.Band:
        """``band [m]`` (``[m, n]`` with ``cols``) over ``stmts`` (coincident)."""
        f = (lambda s: [self.mdim(s), self.ndim(s)]) if cols else (lambda s: [self.mdim(s)])
        return band(members(self.model, stmts, f), child, coincident=[1] * (1 + cols))

    def first_product(self):
        """T's tile, ``Y`` packed in panels when it is stored ``[.., l, k]``.  With a
        constant ``L`` that is not a multiple of ``NR``, the last ``L mod NR`` columns
        (in the last ``l`` tile) are register tiles of their own width, so that isl
        generates them with constant bounds too (the micro-kernel's pattern)."""
        from polycomp.scheduler.promotion.cpu_pack import request_mark
        from polycomp.scheduler.promotion.record import PackRequest, promotion_state
        p, nb, model = self.plan, self.nb, self.model
        stmts = [self.t_init, self.t_upd]

        def tiles(cols, nr, col=self.ldim, domain=None):
            return register_tiles(model, self.t_upd, self.t_init, self.mdim, col,
                                  lambda s: [_dims(s)[nb + 2]], p.tm, cols, p.mr, nr,
                                  self.prefix, domain)
        out: object = tiles(p.tl, p.nr)
        n_l = None if "l" in p.symbolic else p.dims.l
        if n_l is not None and n_l > p.nr and n_l % p.nr >= 2:
            main = n_l - n_l % p.nr
            low = restricted(model, stmts, lambda s: f"{self.ldim(s)} < {main}")
            high = restricted(model, stmts, lambda s: f"{self.ldim(s)} >= {main}")
            dom = self.t_upd.domain.intersect(isl.Set.read_from_str(
                model.ctx, f"{_params(model)}{{ {self.t_upd.name}[{', '.join(_dims(self.t_upd))}]"
                           f" : {self.ldim(self.t_upd)} >= {main} }}"))
            out = T.Sequence([
                T.Filter(low, tiles(p.tl, p.nr)),
                T.Filter(high, tiles(0, n_l % p.nr, lambda s: f"({self.ldim(s)}) - {main}",
                                     dom))])
        if self.match.y_transposed and self.state.target.isa:
            req = PackRequest(self.match.y, nb, p.nr, "L1")
            out = T.Mark(request_mark(promotion_state(self.state).pack_requests, req), out)
        return T.Filter(universe(stmts), out)

    def stages(self) -> list[T.Filter]:
        """The elementwise stages on the tile, with a softmax a row at a time."""
        model, r = self.model, self.r
        if self.online is None:
            return [T.Filter(universe([s]), band(members(model, [s], lambda s: [
                self.mdim(s), self.ldim(s)]), coincident=[1, 1])) for s in self.ew]

        def cols(ss, child=None, co=0):
            return band(members(model, ss, lambda s: [self.ldim(s)]), child, coincident=[co])
        ex, sm_upd = r["ex"], r["sm_update"]
        seq = [T.Filter(universe([s]), cols([s], co=1)) for s in self.ew]
        seq += [T.Filter(universe([r["save"]])),
                T.Filter(universe([r["mx_update"]]), cols([r["mx_update"]])),
                T.Filter(universe([r["scale"]])), T.Filter(universe([r["sm_rescale"]])),
                T.Filter(universe([ex, sm_upd]), cols([ex, sm_upd], T.Sequence([
                    T.Filter(universe([ex])), T.Filter(universe([sm_upd]))])))]
        row = [*self.ew, r["save"], r["mx_update"], r["scale"], r["sm_rescale"], ex, sm_upd]
        return [T.Filter(universe(row), self.rows_band(row, False, T.Sequence(seq)))]

    def second_product(self) -> T.Filter:
        p, rescale = self.plan, self.r.get("O_rescale")
        out = register_tiles(self.model, self.o_upd, rescale, self.mdim, self.ndim,
                             lambda s: [f"({self.ldim(s)}) mod {p.tl}"], p.tm, 0, p.mr, p.nr2,
                             self.prefix)
        return T.Filter(universe([self.o_upd] + ([rescale] if rescale else [])), out)

    def tree(self):
        model, m, r, online = self.model, self.match, self.r, self.online
        tile_arrays = (m.t, *(e.out for e in m.elementwise))
        if online is not None:
            tile_arrays += (r["ex"].write,)
        tile_mark = local_mark(self.state, [LocalTile(tile_arrays,
                                                      self.names.fresh(f"{m.t.name}_tile"))])
        once = [self.o_init] + ([r["mx_init"], r["sm_init"], r["O_normalise"]]
                                if online is not None else [])
        tiled = [s for s in self.stmts if s not in once]
        inner = T.Sequence([self.first_product(), *self.stages(), self.second_product()])
        per_tile = T.Filter(universe(tiled), band(members(model, tiled, lambda s: [
            self.ltile(s)]), T.Mark(tile_mark, inner)))
        init_o = T.Filter(universe([self.o_init]), self.rows_band([self.o_init], True))
        body: object
        if online is None:
            body = T.Sequence([init_o, per_tile])
        else:
            inits, norm = [r["mx_init"], r["sm_init"]], r["O_normalise"]
            rows = [LocalTile((a,), self.names.fresh(f"{a.name}_row"))
                    for a in online.row_arrays]
            body = T.Mark(local_mark(self.state, rows), T.Sequence([
                T.Filter(universe(inits), self.rows_band(inits, False)), init_o, per_tile,
                T.Filter(universe([norm]), self.rows_band([norm], True))]))
        outer = members(model, self.stmts, lambda s: [
            *_dims(s)[:self.nb], f"floor(({self.mdim(s)})/{self.plan.tm})"])
        return T.Mark(marks.CPU_PARALLEL, band(outer, body, coincident=[1] * (self.nb + 1)))
