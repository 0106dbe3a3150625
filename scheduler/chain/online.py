"""The online softmax of a fused chain as statements (FlashAttention's rescaling).

A softmax between the two products, as the op library writes it, is four stages over
``(b, m, l)`` (``b`` the batch dimensions): the row max ``mx``, ``ex = exp(prev - mx)``,
the row sum ``sm``, ``dv = ex / sm``; the second product reads ``dv``.  The max and the
sums need the whole row, so a schedule of these statements cannot split ``l`` into
tiles.  The *online* formulation computes the same function with a running max and a
running sum per row, rescaling what was accumulated so far whenever the max grows; it
is a different program (the sums are reassociated), so this module writes it as one:

* kept from the model, unchanged: the products' statements but the second update, the
  elementwise stages, ``mx_init``/``mx_update`` (the running max: the model's max is
  already a running max when its updates run block by block), ``sm_init``/``sm_update``
  (``sm += ex``), ``O_init``;
* new, per row and ``l`` tile ``lt`` (``TL`` columns, the plan's tile):

  ``save[b, m, lt]``:      ``mo[b, m] = mx[b, m]``        (before the tile's max updates)
  ``scale[b, m, lt]``:     ``c[b, m] = exp(mo[b, m] - ms[b, m])``   (after them)
  ``rescale[b, m, lt]``:   ``sm[b, m] = sm[b, m] * c[b, m]``
  ``O_rescale[b, m, n, lt]``: ``O[b, m, n] = O[b, m, n] * c[b, m]``

  with ``ms = select(mx == -inf, 0, mx)`` (the *safe* max); and, in place of the model's
  statements of the same domains: ``ex_online[b, m, l]``: the model's ``ex`` with
  ``ms`` for ``mx`` (``exp(prev - ms)``), ``O_update_online[b, m, n, l]``: the model's
  second update reading ``ex`` instead of ``dv``, and after the last tile
  ``O_normalise[b, m, n]``: ``O = O / sm``.  The model's ``dv`` statement is dropped.

The *reference order* of this program (:attr:`OnlineSoftmax.reference`) is one row at a
time: ``band [b.., m] -> sequence [inits; O_init [n]; band [lt] -> sequence [T tile,
elementwise, save, mx_update, scale, rescale, ex_online + sm_update, O_rescale,
O_update_online]; O_normalise [n]]``; its dependences (:attr:`OnlineSoftmax.model`,
computed by isl as for any model) are what the fused tree must satisfy.

Why it computes numpy's unfused softmax (up to reassociation): after the tiles up to
``t``, with ``M_t`` the max of the row so far, ``sm = sum_l exp(x_l - M_t)`` and ``O =
sum_l exp(x_l - M_t) Z[l]`` (induction: the new tile's ``c = exp(M_{t-1} - M_t)``
rescales the old terms to the new max), so ``O / sm`` is the softmax-weighted sum.
Edge values, as numpy's ``exp(x - max) / sum`` (tested): a row that is ``-inf`` so far
has ``mx = -inf``, ``ms = 0``, so its terms are ``exp(-inf) = 0`` and ``c = 0`` (nothing
accumulated to rescale); a row masked in full ends as ``0 / 0 = NaN`` (numpy:
``exp(-inf - -inf) = NaN``); a ``-inf`` prefix longer than a tile followed by finite
scores is finite and equal; a NaN score makes ``mx`` NaN (polycomp's ``max`` propagates
NaN, as numpy's) and the row NaN; a ``+inf`` score gives ``inf - inf = NaN`` in its term
and the row NaN, as in numpy.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from polycomp import ir
from polycomp.model import PolyModel, Statement

__all__ = ["OnlineSoftmax", "online_softmax"]

_NEG_INF = float("-inf")


@dataclass(eq=False)
class OnlineSoftmax:
    """The online program of a chain with a softmax (module docstring).  ``kept``: the
    model's statements it keeps, ``new``: its own (name -> statement), in program
    order; ``statements``: all of them; ``model``: a model of the program (its
    statements, the reference order, the dependences isl derives under it)."""
    kept: list[Statement]
    new: dict[str, Statement]
    reference: isl.Schedule | None = None
    model: PolyModel | None = None
    roles: dict[str, Statement] = field(default_factory=dict)

    @property
    def statements(self) -> list[Statement]:
        return [*self.kept, *self.new.values()]

    @property
    def row_arrays(self) -> tuple[ir.Buffer, ...]:
        """The per-row arrays (running max, saved max, scale, running sum)."""
        r = self.roles
        return (r["mx_init"].write, r["save"].write, r["scale"].write, r["sm_init"].write)


class _Replace(ir.Mutator):
    def __init__(self, fn):
        self.fn = fn

    def visit_Load(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        out = self.fn(e, idx)
        return out if out is not None else ir.Load(e.buffer, idx, e.dtype, e.lanes)


def online_softmax(match, model, tl: int) -> OnlineSoftmax:
    """The online program of ``match`` (a chain with a softmax) for ``l`` tiles of
    ``tl`` columns (module docstring)."""
    from polycomp.scheduler.chain.statements import StatementMaker, program_model
    nb = match.batch_dims
    by_stage: dict[int, list[Statement]] = {}
    for s in model.statements:
        by_stage.setdefault(id(s.stage), []).append(s)

    def stmt(stage, kind):
        return next(s for s in by_stage[id(stage)] if s.kind == kind)
    mxs, exs, sms, dvs = match.softmax
    mx_init, mx_upd = stmt(mxs, "init"), stmt(mxs, "update")
    sm_init, sm_upd = stmt(sms, "init"), stmt(sms, "update")
    ex, dv = stmt(exs, "compute"), stmt(dvs, "compute")
    o_init, o_upd = stmt(match.second, "init"), stmt(match.second, "update")
    names = set(match.statements)
    kept = [s for s in model.statements if s.name in names and s not in (ex, dv, o_upd)]

    mk = StatementMaker(model)
    f32 = "float32"
    mx, sm, o, exb = mx_init.write, sm_init.write, o_init.write, ex.write
    row_idx = tuple(mx_init.write_indices)             # (b.., m)
    mo = mk.buffer(f"{mx.name}_prev", mx.shape)
    cb = mk.buffer(f"{mx.name}_scale", mx.shape)
    lt = ir.Var("lt", "int64")
    l_ext = match.t.shape[-1]
    n_tiles = ir.Binary("//", ir.Binary("+", l_ext, ir.IntImm(tl - 1), "int64"),
                        ir.IntImm(tl), "int64")
    row_bounds = [(ir.IntImm(0), d) for d in mx.shape]
    tile_bound = (ir.IntImm(0), n_tiles)

    def load(buf, idx):
        return ir.Load(buf, tuple(idx), f32)

    def safe_max(idx):
        m_ = load(mx, idx)
        return ir.Select(ir.Binary("==", m_, ir.FloatImm(_NEG_INF, f32), "bool"),
                         ir.FloatImm(0.0, f32), m_, f32)

    roles: dict[str, Statement] = {"mx_init": mx_init, "mx_update": mx_upd,
                                   "sm_init": sm_init, "sm_update": sm_upd,
                                   "O_init": o_init}
    new: dict[str, Statement] = {}

    def add(role, base, stage, kind, iters, bounds, out, out_idx, value) -> None:
        s = mk.make(base, stage, kind, iters, bounds, out, out_idx, value)
        roles[role] = new[s.name] = s

    row_iters = tuple(mx_init.iters)
    add("save", f"{mxs.name}_save", mxs, "compute", (*row_iters, lt),
        [*row_bounds, tile_bound], mo, row_idx, load(mx, row_idx))
    add("scale", f"{mxs.name}_rescale", mxs, "compute", (*row_iters, lt),
        [*row_bounds, tile_bound], cb, row_idx,
        ir.Call("exp", (ir.Binary("-", load(mo, row_idx), safe_max(row_idx), f32),), f32))
    add("sm_rescale", f"{sms.name}_rescale", sms, "compute", (*row_iters, lt),
        [*row_bounds, tile_bound], sm, row_idx,
        ir.Binary("*", load(sm, row_idx), load(cb, row_idx), f32))
    ex_value = _Replace(lambda e, idx: safe_max(idx) if e.buffer is mx else None).visit(ex.value)
    add("ex", f"{ex.name}_online", exs, "compute", ex.iters, _bounds(ex), exb,
        ex.write_indices, ex_value)
    o_idx = tuple(o_init.write_indices)                 # (b.., m, n)
    o_rows = o_idx[:nb + 1]
    o_bounds = _bounds(o_init)
    add("O_rescale", f"{o_init.stage.name}_rescale", match.second, "compute",
        (*o_init.iters, lt), [*o_bounds, tile_bound], o, o_idx,
        ir.Binary("*", load(o, o_idx), load(cb, o_rows), f32))
    upd_value = _Replace(lambda e, idx: load(exb, idx) if e.buffer is dv.write else None
                         ).visit(o_upd.value)
    add("O_update", f"{o_upd.name}_online", match.second, "update", o_upd.iters,
        _bounds(o_upd), o, o_upd.write_indices, upd_value)
    add("O_normalise", f"{o_init.stage.name}_normalise", match.second, "compute",
        o_init.iters, o_bounds, o, o_idx,
        ir.Binary("/", load(o, o_idx), load(sm, o_rows), f32))
    prog = OnlineSoftmax(kept, new, roles=roles)
    roles.update({"T_init": stmt(match.first, "init"), "T_update": stmt(match.first, "update")})
    prog.reference = _reference(prog, match, model, tl)
    prog.model = program_model(model, prog.statements, prog.reference)
    return prog


def _bounds(s: Statement) -> list[tuple[ir.Expr, ir.Expr]]:
    """``(lower bound, extent)`` of each dimension of the model's statement ``s`` (as the
    model builds its domain: the output's extents, then an update's reduce axes)."""
    out: list[tuple[ir.Expr, ir.Expr]] = [(ir.IntImm(0), d) for d in s.stage.output.buffer.shape]
    if s.kind == "update":
        out += [(a.lo, a.extent) for a in s.stage.reduce_axes]
    return out


def _reference(prog: OnlineSoftmax, match, model, tl: int) -> isl.Schedule:
    """The reference (row at a time) order of the module docstring."""
    from polycomp.scheduler.chain.program import band, members, universe
    from polycomp.scheduler.cpu import tree as T
    r = prog.roles
    nb = match.batch_dims
    stmts = prog.statements
    ew = [s for s in prog.kept if any(s.stage is e.stage for e in match.elementwise)]
    rows = members(model, stmts, lambda s: _dims(s)[:nb + 1])

    def ldim(s) -> str:          # the tile index of a per-tile statement
        d = _dims(s)
        if s in (r["save"], r["scale"], r["sm_rescale"], r["O_rescale"]):
            return d[-1]
        if s is r["O_update"]:
            return f"floor(({d[nb + 2]})/{tl})"
        return f"floor(({d[nb + 1]})/{tl})"

    def leaf(ss, dims):
        return T.Filter(universe(ss), band(members(model, ss, dims)) if dims else T.Leaf())

    per_tile = [s for s in stmts if s not in (r["mx_init"], r["sm_init"], r["O_init"],
                                              r["O_normalise"])]
    nb1 = nb + 1
    inner = T.Sequence([
        leaf([r["T_init"]], lambda s: [_dims(s)[nb1]]),
        leaf([r["T_update"]], lambda s: [_dims(s)[nb1], _dims(s)[nb1 + 1]]),
        *(leaf([s], lambda s: [_dims(s)[nb1]]) for s in ew),
        leaf([r["save"]], None),
        leaf([r["mx_update"]], lambda s: [_dims(s)[nb1]]),
        leaf([r["scale"]], None),
        leaf([r["sm_rescale"]], None),
        T.Filter(universe([r["ex"], r["sm_update"]]), band(
            members(model, [r["ex"], r["sm_update"]], lambda s: [_dims(s)[nb1]]),
            T.Sequence([T.Filter(universe([r["ex"]])), T.Filter(universe([r["sm_update"]]))]))),
        leaf([r["O_rescale"]], lambda s: [_dims(s)[nb1]]),
        leaf([r["O_update"]], lambda s: [_dims(s)[nb1], _dims(s)[nb1 + 1]]),
    ])
    tree = band(rows, T.Sequence([
        T.Filter(universe([r["mx_init"], r["sm_init"]])),
        leaf([r["O_init"]], lambda s: [_dims(s)[nb1]]),
        T.Filter(universe(per_tile), band(members(model, per_tile, lambda s: [ldim(s)]),
                                          inner)),
        leaf([r["O_normalise"]], lambda s: [_dims(s)[nb1]]),
    ]))
    dom = isl.UnionSet.empty(model.context.get_space())
    for s in stmts:
        dom = dom.union(isl.UnionSet.from_set(s.domain))
    return T.to_schedule(dom, tree)


def _dims(s) -> list[str]:
    return [f"i{k}" for k in range(s.domain.dim(isl.dim_type.set))]
