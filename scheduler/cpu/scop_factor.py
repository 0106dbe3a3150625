"""Pass ``scop-factor``: blocked right-looking order for factorisations written
left-looking in C (PolyBench's ``lu``, ``cholesky``), the trailing update on the packed
micro-kernel.

PolyBench writes LU and Cholesky row by row: row ``i`` of the factor is finished (every
update ``A[i][j] -= A[i][k] * A[k][j]`` for ``k < min(i, j)``, then the division by the
pivot) before row ``i + 1`` starts.  Each element receives its updates in increasing
``k``; a right-looking order keeps exactly that per-element order and only changes which
elements are updated when, so it computes the same values (bitwise, up to FMA
contraction) while the bulk of the work becomes one matrix product per block of ``B``
pivots.

Matching (:func:`match_factor`), in one top-level child of the program-order tree: at
least one *update* ``U[i, j, k]`` (any position of the three iterators in the domain):
``W[i][j] = W[i][j] - X * Y`` (or ``+``) with ``W[i][j]`` written at two distinct plain
iterators, ``k`` the third one, ``X`` a load with subscripts exactly ``{i, k}`` and
``Y`` one with exactly ``{k, j}`` (``A[k][j]``; or transposed ``A[j][k]``, Cholesky) of
the written array's dtype, float32/float64.  Every other statement of the child gets a
*step* too (below).

Schedule: with ``B`` the block of pivots (the micro-kernel's ``KC``, at most
:data:`BLOCK`), every instance gets the step

* ``floor(k/B)`` for an update, or a statement with an iterator ``r`` that none of its
  write subscripts uses (Cholesky's diagonal ``A[i][i] -= A[i][k] * A[i][k]``: ``r = k``);
* ``floor(min(w)/B)`` otherwise, ``w`` the plain iterators of its write subscripts (the
  division ``A[i][j] /= A[j][j]`` with ``j < i``: ``floor(j/B)``; the square root of
  ``A[i][i]``: ``floor(i/B)``).

The *trailing* part of an update ``U`` is ``T_U = { U[i, j, k] : B*floor(k/B) + B <=
min(i, j) }`` (its element lies beyond the block of its pivot); the *panel* is every
other instance.  The child's subtree ``S`` becomes

    band[step]                                   (sequential)
      sequence
        filter panel - R:  S                    (the C order, restricted)
        filter panel & R:  [mark cpu_parallel] S (the rows beyond the block)
        filter T_U:        the scop-gemm subtree of U over T_U   (one per update)

where ``R = { s : row(s) >= B*step(s) + B }`` (``row``: the first write subscript; LU's
and Cholesky's column panel below the diagonal block, ``A[i][j] /= A[j][j]`` and its
updates for ``i`` beyond the block).  The ``cpu_parallel`` mark is placed when the
first member of ``S``'s top band (the C row loop) carries no dependence between
instances of ``panel & R`` in one step (isl's coincidence: each such row reads only its
own row and the block's rows).  When the split tree would violate a dependence, the
tree without it (``filter panel: S``) is tried.

with the scop-gemm subtree of :func:`polycomp.scheduler.cpu.scop_gemm.scop_gemm_tree`
(``KC = B``, so ``floor(k/KC)`` is the step: in ``T_U`` the ``k`` range of every
element is the whole block, the micro-kernel's rectangular ``k`` loop).  When ``U``
writes the array ``X`` or ``Y`` reads (lu, Cholesky: ``A``), ``X`` and ``Y`` are packed
per reference and the ``cpu_parallel`` mark sits above each cache block's register
tiles (the threads share the block's packed copies); otherwise (:func:`reads_in_place`:
ludcmp's expanded ``w``) nothing is packed and the mark sits above the ``i`` tiles
(whole ``MC``-row blocks per thread, one OpenMP region per step and update).  Either
loop is coincident: instances of ``T_U`` in different ``i`` tiles or register tiles
write different elements, and their operands' footprints in ``T_U`` lie in the panel
(``k`` in the block, ``min(i, j)`` beyond it), which no instance of ``T_U`` writes, so
a packed copy taken before the GEMM, or a read in place, sees the values the C order
reads.

Legality (isl terms): the pass builds the tree and checks it with
:func:`polycomp.scheduler.common.tree.violated_dependences` against every dependence
of the child; when one would be violated (a pivot loop that reads a later step's
result), the child keeps its schedule, with a note.  For LU and Cholesky every flow
dependence goes from a step to the same or a later one (an update at ``k`` reads
``A[i][k]``/``A[k][j]``, finished at step ``floor(k/B)`` or before), the panel of a
step feeds its trailing update and no trailing instance feeds the panel of its own
step, and for one element the updates keep increasing ``k``.

Assumes: the program-order tree (``domain -> sequence`` of top-level filters, or one
subtree), ``ctx.model`` a C SCoP model, a target with vector registers; runs before
``scop-gemm`` (its subtrees carry marks, which ``scop-tile`` and ``scop-stencil``
leave alone).

Guarantees: the tree above for a matched child whose check passes (``explain`` notes
it), the child unchanged otherwise.  Results equal the C order's up to FMA
contraction; the subtraction ``W - X * Y`` reaches the micro-kernel as ``W + (-X) *
Y`` (:func:`polycomp.hw.cpu.backend` negates under the mark), the same value.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import islpy as isl

from polycomp import ir
from polycomp.model import Statement
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.cpu import tree as T
from polycomp.scheduler.cpu.backbone_tile import (
    Blocking,
    OuterProduct,
    choose_blocking,
    loop_vars,
)
from polycomp.scheduler.cpu.scop_gemm import ScopGemm, scop_gemm_tree
from polycomp.scheduler.cpu.scop_stages import ScopStages
from polycomp.scheduler.promotion.record import promotion_state
from polycomp.state import CompileState

#: the largest block of pivots: the panel work grows with it (``n^2 B`` of the ``n^3``),
#: the micro-kernel's efficiency with it
BLOCK = 64


@dataclass(frozen=True, eq=False)
class FactorUpdate:
    """One matched update: its statement, the positions of ``i``, ``j``, ``k`` in its
    domain, and its two operand loads (``x``: ``{i, k}``; ``y``: ``{k, j}``)."""
    stmt: Statement
    pos: dict
    x: ir.Load
    y: ir.Load


def _plain(e: ir.Expr, iters: tuple) -> ir.Var | None:
    return e if isinstance(e, ir.Var) and e in iters else None


def match_update(s: Statement) -> FactorUpdate | None:
    """The :class:`FactorUpdate` of ``s`` (see the module docstring), or None."""
    iters = tuple(s.iters)
    if s.write.dtype not in ("float32", "float64") or len(iters) != 3 or \
            len(s.write_indices) != 2:
        return None
    w = [_plain(ix, iters) for ix in s.write_indices]
    if any(v is None for v in w) or w[0] is w[1]:
        return None
    i, j = w
    k = next(v for v in iters if v is not i and v is not j)
    v = s.value
    if not (isinstance(v, ir.Binary) and v.op in ("+", "-")):
        return None
    acc, prod = v.a, v.b
    if not (isinstance(acc, ir.Load) and acc.buffer is s.write and all(
            ir.structural_equal(a, b) for a, b in zip(acc.indices, s.write_indices))):
        return None
    if not (isinstance(prod, ir.Binary) and prod.op == "*" and
            isinstance(prod.a, ir.Load) and isinstance(prod.b, ir.Load)):
        return None

    def subs(ld: ir.Load) -> list:
        return [_plain(ix, iters) for ix in ld.indices]
    for x, y in ((prod.a, prod.b), (prod.b, prod.a)):
        if x.dtype != s.write.dtype or y.dtype != s.write.dtype:
            continue
        sx, sy = subs(x), subs(y)
        if len(sx) != 2 or len(sy) != 2 or None in sx or None in sy:
            continue
        if set(sx) == {i, k} and set(sy) == {k, j} and sx[0] is i:
            pos = {"i": iters.index(i), "j": iters.index(j), "k": iters.index(k), "b": []}
            return FactorUpdate(s, pos, x, y)
    return None


def _reads(s: Statement, buf: ir.Buffer) -> bool:
    return any(a.buffer is buf for a in s.reads)


def _step(s: Statement, u: FactorUpdate | None, B: int, inits: bool = False) \
        -> isl.PwAff | None:
    """The step of ``s``'s instances (module docstring), or None when it has none;
    ``inits``: ``s`` writes an array that an update accumulates into without reading
    it (ludcmp's ``w = A[i][j]`` before ``w -= ...``): step 0."""
    sp = s.domain.get_space()
    ls = isl.LocalSpace.from_space(sp)
    iters = tuple(s.iters)

    def var(p: int) -> isl.PwAff:
        return isl.PwAff.from_aff(isl.Aff.var_on_domain(ls, isl.dim_type.set, p))
    if inits:
        return isl.PwAff.from_aff(isl.Aff.zero_on_domain(ls)).intersect_domain(s.domain)
    if u is not None:
        e = var(u.pos["k"])
    else:
        wv: list[int] = []
        for ix in s.write_indices:
            used = loop_vars(ix)
            if len(used) > 1 or (used and _plain(ix, iters) is None):
                return None
            if used:
                wv.append(iters.index(next(iter(used))))
        free = [p for p in range(len(iters)) if p not in wv]
        if len(free) > 1:
            return None
        if free:
            e = var(free[0])
        elif wv:
            e = var(wv[0])
            for p in wv[1:]:
                e = e.min(var(p))
        else:
            return None
    return e.scale_down_val(isl.Val.int_from_si(sp.get_ctx(), B)).floor() \
        .intersect_domain(s.domain)


def reads_in_place(u: FactorUpdate) -> bool:
    """Whether the trailing update writes an array that neither operand reads
    (ludcmp's ``w``, expanded to an array by the front end): then the micro-kernel reads
    ``X`` and ``Y`` in place (no packed copies) and the threads take whole ``MC``-row
    blocks of the step (one fork/join per step and update).  Otherwise (lu, Cholesky:
    ``A`` is written and read) the operands are packed and the threads split each
    block's register tiles, sharing its packed copies."""
    return u.x.buffer is not u.stmt.write and u.y.buffer is not u.stmt.write


def _trailing(u: FactorUpdate, B: int) -> isl.Set:
    """``T_U`` of the module docstring."""
    s = u.stmt
    n = s.domain.dim(isl.dim_type.set)
    names = [f"d{p}" for p in range(n)]
    i, j, k = (names[u.pos[c]] for c in ("i", "j", "k"))
    params = s.domain.get_space().get_var_dict(isl.dim_type.param)
    ptxt = f"[{', '.join(params)}] -> " if params else ""
    txt = (f"{ptxt}{{ {s.name}[{', '.join(names)}] : exists (q : {B}q <= {k} < {B}q + {B} "
           f"and {i} >= {B}q + {B} and {j} >= {B}q + {B}) }}")
    t = isl.Set.read_from_str(s.domain.get_ctx(), txt)
    return t.align_params(s.domain.get_space()).intersect(s.domain)


def _origin(u: FactorUpdate, t: isl.Set, B: int, blk: Blocking) -> tuple[tuple, Blocking]:
    """The tile origin ``(oi, oj)`` of ``T_U`` and the blocking for it, chosen so that
    every packed footprint starts at its tile's origin (one affine origin, no pieces;
    ``b0 = B*floor(k/B) + B`` the first row and column beyond the block):

    * a strictly lower ``T_U`` (``j < i``): ``(b0 + 1, b0)``: row ``b0`` has no element,
      every later row has column ``b0``; in an ``(i, j)`` tile that has an element,
      its first column has one too (``i > j >= c``);
    * otherwise ``(b0, b0)`` with ``MC = NC`` (a multiple of ``MR`` and ``NR``): in an
      upper ``T_U`` (``j >= i``) a non-empty ``(i, j)`` tile of equal, aligned grids
      starts at or right of its rows' start, so its first column has elements."""
    sp = t.get_space()
    ls = isl.LocalSpace.from_space(sp)
    k = isl.Aff.var_on_domain(ls, isl.dim_type.set, u.pos["k"])
    b0 = k.scale_down_val(isl.Val.int_from_si(sp.get_ctx(), B)).floor() \
        .scale_val(isl.Val.int_from_si(sp.get_ctx(), B)).add_constant_val(
            isl.Val.int_from_si(sp.get_ctx(), B))
    n = sp.dim(isl.dim_type.set)
    names = [f"d{p}" for p in range(n)]
    lower = isl.Set.read_from_str(sp.get_ctx(), f"{{ {t.get_tuple_name()}[{', '.join(names)}] "
                                  f": {names[u.pos['j']]} < {names[u.pos['i']]} }}")
    if t.is_subset(lower.align_params(sp)):
        return (b0.add_constant_val(isl.Val.int_from_si(sp.get_ctx(), 1)), b0), blk
    step = math.lcm(blk.MR, blk.NR)
    mc = max(step, blk.MC // step * step)
    return (b0, b0), dataclasses.replace(blk, MC=mc, NC=mc)


def _row_beyond(s: Statement, step: isl.UnionPwAff, B: int) -> isl.Set | None:
    """The instances of ``s`` whose written row (first subscript, a plain iterator) lies
    beyond their step's block: ``row >= B*step + B``."""
    iters = tuple(s.iters)
    if not s.write_indices:
        return None
    r = _plain(s.write_indices[0], iters)
    if r is None:
        return None
    sp = s.domain.get_space()
    row = isl.PwAff.from_aff(isl.Aff.var_on_domain(isl.LocalSpace.from_space(sp),
                                                   isl.dim_type.set, iters.index(r)))
    pw = [p for p in _pieces(step)
          if p.get_domain_space().get_tuple_name(isl.dim_type.set) == s.name]
    if len(pw) != 1:
        return None
    v = isl.Val.int_from_si(sp.get_ctx(), B)
    d = row.sub(pw[0].scale_val(v).add_constant_val(v))
    return d.nonneg_set().intersect(s.domain)


def _rows_parallel(sub, step: isl.UnionPwAff, below: isl.UnionSet,
                   deps: isl.UnionMap) -> bool:
    """Whether the first member ``f`` of ``sub``'s top band (a band: the C nest's row
    loop) carries no dependence between instances of ``below`` in one step: every such
    dependence ``a -> b`` with ``step(a) = step(b)`` has ``f(a) = f(b)`` (isl's
    coincidence)."""
    if not isinstance(sub, T.Band):
        return False
    f = T.band_to_union_map([sub.members[0]])
    st = T.band_to_union_map([step])
    d = deps.intersect_domain(below).intersect_range(below)
    d = d.intersect(st.apply_range(st.reverse()))
    return d.is_subset(f.apply_range(f.reverse()))


def _pieces(upa: isl.UnionPwAff) -> list:
    out: list = []
    upa.foreach_pw_aff(out.append)
    return out


def match_factor(statements: list[Statement]) -> list[FactorUpdate] | str:
    """The updates of one top-level child (see the module docstring), or why none."""
    ups = [u for u in (match_update(s) for s in statements) if u is not None]
    if not ups:
        return "no update W[i][j] -= X[i][k] * Y[k][j] of the written array"
    if any(u.x.buffer is not u.y.buffer for u in ups):
        return "the product's operands are two arrays"
    return ups


class ScopFactorPass(Pass):
    """See the module docstring."""
    name = "scop-factor"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        stages = ScopStages.of(schedule, ctx)
        if stages is None:
            return schedule
        for st, ups in stages.matched(match_factor):
            if ctx.target.vector_lanes(ups[0].stmt.write.dtype) <= 1:
                continue
            legal = None
            for split in (True, False):
                new = self._tree(ups, st.group, st.sub, st.filter, ctx, split)
                if isinstance(new, str):
                    break
                tree_new, requests, B, blk = new
                if stages.legal(st, tree_new):
                    legal = split
                    break
            if isinstance(new, str):
                ctx.note(self.name, f"{'+'.join(st.names)}: not blocked ({new})")
                continue
            if legal is None:
                ctx.note(self.name, f"{'+'.join(st.names)}: the blocked right-looking order "
                                    f"would violate a dependence; program order kept")
                continue
            split_note = " (rows beyond the block after the block rows)" if legal else ""
            promotion_state(ctx).pack_requests[:] = requests
            stages.replace(st, tree_new)
            ctx.note(self.name, f"{'+'.join(st.names)}: blocked right-looking, {B} pivots a "
                                f"step; trailing update of "
                                f"{', '.join(u.stmt.name for u in ups)} on the micro-kernel "
                                f"(register block {blk.MR}x{blk.NR}, MC={blk.MC} "
                                f"NC={blk.NC}), panel in the C order{split_note}")
        return stages.schedule()

    @staticmethod
    def _tree(ups: list[FactorUpdate], group: list[Statement], sub, filt: isl.UnionSet,
              ctx: CompileState, split: bool):
        u0 = ups[0]
        op = OuterProduct(None, u0.stmt, [], u0.pos["i"], u0.pos["j"], [u0.pos["k"]],
                          u0.x, u0.y, u0.stmt.write.dtype, False)
        blk = choose_blocking(op, ctx.target, ctx.cpu_options)
        B = max(blk.MR, min(BLOCK, blk.KC))
        blk = dataclasses.replace(blk, KC=B)
        by_stmt = {u.stmt.name: u for u in ups}
        steps = []
        own = {}
        for s in group:
            init = s.name not in by_stmt and not _reads(s, s.write) and any(
                u.stmt.write is s.write and u.x.buffer is not s.write for u in ups)
            st = _step(s, by_stmt.get(s.name), B, init)
            if st is None:
                return f"no step for {s.name}"
            own[s.name] = isl.UnionPwAff.from_pw_aff(st)
            steps.append(own[s.name])
        step = T.union_members(steps)
        requests = list(promotion_state(ctx).pack_requests)
        trailing = isl.UnionSet.empty(filt.get_space())
        parts = []
        for u in ups:
            t = _trailing(u, B)
            if t.is_empty():
                continue
            trailing = trailing.union(isl.UnionSet.from_set(t))
            g = ScopGemm(dataclasses.replace(u.stmt, domain=t), None, u.pos, None, u.x,
                         u.y, u.stmt.write.dtype, ((u.x, u.y),))
            origin, ublk = _origin(u, t, B, blk)
            shared = not reads_in_place(u)
            parts.append(T.Filter(isl.UnionSet.from_set(t), scop_gemm_tree(
                g, ublk, requests, (own[u.stmt.name],), shared, origin, pack_x=shared,
                pack_y=shared)))
        if not parts:
            return "no trailing update"
        panel = filt.subtract(trailing)
        first = [T.Filter(panel, sub)]
        if split:   # the block's rows, then the rows beyond it (each row on its own)
            below = isl.UnionSet.empty(filt.get_space())
            for s in group:
                r = _row_beyond(s, own[s.name], B)
                if r is not None:
                    below = below.union(isl.UnionSet.from_set(r))
            below = panel.intersect(below)
            if not below.is_empty():
                rows: object = sub
                if _rows_parallel(sub, step, below, ctx.model.dependences):
                    rows = T.Mark(marks.CPU_PARALLEL, sub)
                first = [T.Filter(panel.subtract(below), sub), T.Filter(below, rows)]
        seq = T.Sequence([*first, *parts])
        return T.Band([step], seq), requests, B, blk
