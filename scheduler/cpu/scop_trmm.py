"""Pass ``scop-trmm``: row-blocked order for a triangular product updated in place
(PolyBench's ``trmm``), the rows-below part on the packed micro-kernel.

PolyBench writes ``B = alpha * A^T B`` with ``A`` unit lower triangular row by row:

    for i: for j: { for k in (i, m): B[i][j] += A[k][i] * B[k][j];   (U)
                    B[i][j] = alpha * B[i][j]; }                        (S)

Row ``i`` reads the rows ``k > i`` of ``B`` before they are updated, so a row can be
finished only after every row above it; the reads of the rows below a block of rows
are independent of the block, which makes them one matrix product per block.

Matching (:func:`match_trmm`), in one top-level child of the program-order tree: one
*update* ``U[i, j, k]`` (any position of the three iterators in the domain):
``W[i][j] = W[i][j] + X * Y`` (times loop-invariant factors) with ``W[i][j]`` written at
two distinct plain iterators, ``k`` the third one, ``Y`` a load with ``j`` in one
subscript (:func:`polycomp.scheduler.cpu.scop_gemm._match_product`; ``Y`` may be ``W``
itself, ``B[k][j]``), ``X`` free of ``j`` and not ``W``; float32/float64.  Every other
statement of the child writes with its first subscript a plain iterator ``r`` (its
*row*).  A reduction range that does not depend on the output point is
:mod:`.scop_gemm`'s plain GEMM and is left to it.

Schedule: with ``B`` the block of rows (the micro-kernel's ``KC``: a multiple of ``MR``, at most
:data:`BLOCK`), every instance gets the step ``floor(row/B)`` (``row = i`` for ``U``).
The *trailing* part ``T = { U[i, j, k] : k >= B*floor(i/B) + B }`` (the products with
rows beyond the block) and the child's subtree ``S`` become

    band[step]                                         (sequential)
      sequence
        filter (U - T) + statements before U:  S      (the C order, restricted)
        filter T:  the scop-gemm subtree of U over T   (k tiles of KC = B from the
                                                        block's end, i tiles from B*step)
        filter statements after U:  S                  (the C order, restricted)

Each element of ``W`` receives its updates in increasing ``k``: first the ones inside its
block (C order), then the trailing ones (``k`` increasing in the micro-kernel), so the
sums are the C order's (bitwise up to FMA contraction).

Legality (isl terms): :func:`polycomp.scheduler.common.tree.violated_dependences`
against every dependence of the child; besides, the pass checks (a) that in one step
every element of ``T`` reduces over the same ``k`` range (the micro-kernel's
rectangular ``k`` loop; ``T`` is the product of its ``(step, i, j)`` and ``(step, k)``
projections), and (b) that no instance of ``T`` writes an element that an instance of
``T`` of the same step reads through ``X`` or ``Y`` (the packed copies, taken before the
GEMM, hold the values the C order reads).  When a check fails the child keeps its
schedule, with a note.

Assumes: the program-order tree (``domain -> sequence`` of top-level filters, or one
subtree), ``ctx.model`` a C SCoP model, a target with vector registers; runs after
``scop-factor`` and before ``scop-gemm``.

Guarantees: the tree above for a matched child whose checks pass (``explain`` notes it),
the child unchanged otherwise.
"""
from __future__ import annotations

import dataclasses

import islpy as isl

from polycomp import ir
from polycomp.model import Statement
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.cpu import tree as T
from polycomp.scheduler.cpu.backbone_tile import choose_blocking, dim_aff, floor_div_aff
from polycomp.scheduler.cpu.scop_gemm import (
    ScopGemm,
    _match_product,
    _separable,
    scop_gemm_tree,
)
from polycomp.scheduler.cpu.scop_stages import ScopStages
from polycomp.scheduler.promotion.record import promotion_state
from polycomp.state import CompileState

#: the largest block of rows: the in-block work (C order) grows with it
BLOCK = 64


def _plain(e: ir.Expr, iters: tuple) -> ir.Var | None:
    return e if isinstance(e, ir.Var) and e in iters else None


def match_update(s: Statement) -> ScopGemm | None:
    """The update of the module docstring as a :class:`ScopGemm` (no init), or None."""
    iters = tuple(s.iters)
    if s.write.dtype not in ("float32", "float64") or len(iters) != 3 or \
            len(s.write_indices) != 2:
        return None
    w = [_plain(ix, iters) for ix in s.write_indices]
    if any(v is None for v in w) or w[0] is w[1]:
        return None
    k = next(v for v in iters if v not in w)
    v = s.value
    if not (isinstance(v, ir.Binary) and v.op == "+"):
        return None
    rest = None
    for acc, other in ((v.a, v.b), (v.b, v.a)):
        if isinstance(acc, ir.Load) and acc.buffer is s.write and all(
                ir.structural_equal(a, b) for a, b in zip(acc.indices, s.write_indices)):
            rest = other
    if rest is None:
        return None
    m = _match_product(s, rest, w, w[1], k)
    if m is None:
        return None
    pos, x, y = m
    if x.buffer is s.write or pos["b"]:
        return None
    return ScopGemm(s, None, pos, None, x, y, s.write.dtype, ((x, y),))


def match_trmm(statements: list[Statement]) -> tuple[ScopGemm, list, list] | str:
    """``(update, statements before it, statements after it)`` of one top-level child
    (textual order), or why none."""
    ups = [(n, g) for n, g in enumerate(match_update(s) for s in statements)
           if g is not None]
    if len(ups) != 1:
        return "not one update W[i][j] += X * Y"
    n, g = ups[0]
    if _separable(g.update.domain, g.upd_pos["k"]):
        return "the reduction range does not depend on the row (scop-gemm's GEMM)"
    for s in statements:
        if not s.write_indices or _plain(s.write_indices[0], tuple(s.iters)) is None:
            return f"{s.name} does not write a row at a plain iterator"
    return g, statements[:n], statements[n + 1:]


def _step(s: Statement, B: int) -> isl.PwAff:
    iters = tuple(s.iters)
    r = dim_aff(s.domain.get_space(), iters.index(s.write_indices[0]))
    return isl.PwAff.from_aff(floor_div_aff(r, B)).intersect_domain(s.domain)


def _names(s: Statement) -> list[str]:
    return [f"d{p}" for p in range(s.domain.dim(isl.dim_type.set))]


def _read(s: Statement, txt: str) -> isl.Set | isl.Map:
    params = s.domain.get_space().get_var_dict(isl.dim_type.param)
    ptxt = f"[{', '.join(params)}] -> " if params else ""
    ctx = s.domain.get_ctx()
    obj = isl.Map.read_from_str(ctx, ptxt + txt) if "->" in txt.split("{", 1)[1] \
        else isl.Set.read_from_str(ctx, ptxt + txt)
    return obj.align_params(s.domain.get_space())


def _trailing(g: ScopGemm, B: int) -> isl.Set:
    """``T`` of the module docstring."""
    s = g.update
    d = _names(s)
    i, k = d[g.upd_pos["i"]], d[g.upd_pos["k"]]
    t = _read(s, f"{{ {s.name}[{', '.join(d)}] : exists (q : {B}q <= {i} < {B}q + {B} "
                 f"and {k} >= {B}q + {B}) }}")
    assert isinstance(t, isl.Set)
    return t.intersect(s.domain)


def _rectangular_k(g: ScopGemm, t: isl.Set, B: int, step: str = "i") -> bool:
    """Check (a): ``T`` is the product of its ``(step, i, j)`` and ``(step, k)``
    projections, the step ``q = floor(x / B)`` of the update's dimension ``x`` named by
    ``step`` (``"i"``: trmm's row blocks; ``"k"``: symm's mirror, whose steps are
    reduction blocks -- every output row of a step takes the same reduction range)."""
    s = g.update
    d = _names(s)
    i, j, k = (d[g.upd_pos[c]] for c in ("i", "j", "k"))
    x = d[g.upd_pos[step]]
    m = _read(s, f"{{ {s.name}[{', '.join(d)}] -> E[q, {i}, {j}, {k}] : "
                 f"{B}q <= {x} < {B}q + {B} }}")
    assert isinstance(m, isl.Map)
    e = t.apply(m)
    outs = e.project_out(isl.dim_type.set, 3, 1).insert_dims(isl.dim_type.set, 3, 1) \
        .set_tuple_name("E")
    ks = e.project_out(isl.dim_type.set, 1, 2).insert_dims(isl.dim_type.set, 1, 2) \
        .set_tuple_name("E")
    return outs.intersect(ks).is_equal(e)


def _packs_safe(g: ScopGemm, t: isl.Set, B: int) -> bool:
    """Check (b): per step, the elements ``T`` writes and those it reads through ``X``
    and ``Y`` are disjoint."""
    s = g.update
    d = _names(s)
    i = d[g.upd_pos["i"]]
    smap = _read(s, f"{{ {s.name}[{', '.join(d)}] -> [q] : {B}q <= {i} < {B}q + {B} }}")
    assert isinstance(smap, isl.Map)
    st = isl.UnionMap.from_map(smap.intersect_domain(t))

    def per_step(rel: isl.Map) -> isl.UnionMap:
        return st.reverse().apply_range(isl.UnionMap.from_map(rel))
    ops = [a.relation for a in s.reads if any(
        ld.buffer is a.buffer and len(ld.indices) == len(a.indices) and all(
            ir.structural_equal(p, q) for p, q in zip(ld.indices, a.indices))
        for ld in (g.x, g.y))]
    for w in s.writes:
        for r in ops:
            if not per_step(w.relation).intersect(per_step(r)).is_empty():
                return False
    return True


def _union(ss: list[Statement], space: isl.Space) -> isl.UnionSet:
    """The union of the domains of ``ss``."""
    out = isl.UnionSet.empty(space)
    for s in ss:
        out = out.union(isl.UnionSet.from_set(s.domain))
    return out


class ScopTrmmPass(Pass):
    """See the module docstring."""
    name = "scop-trmm"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        stages = ScopStages.of(schedule, ctx)
        if stages is None:
            return schedule
        for st, m in stages.matched(match_trmm):
            g, before, after = m
            if ctx.target.vector_lanes(g.dtype) <= 1:
                continue
            blk = choose_blocking(g.outer_product(), ctx.target, ctx.cpu_options)
            B = max(blk.MR, min(BLOCK, blk.KC) // blk.MR * blk.MR)
            blk = dataclasses.replace(blk, KC=B)
            t = _trailing(g, B)
            if t.is_empty():
                continue
            if not _rectangular_k(g, t, B) or not _packs_safe(g, t, B):
                ctx.note(self.name, f"{'+'.join(st.names)}: rows-below products not a GEMM "
                                    f"per block; program order kept")
                continue
            step = T.union_members([isl.UnionPwAff.from_pw_aff(_step(s, B))
                                    for s in st.group])
            own = isl.UnionPwAff.from_pw_aff(_step(g.update, B))
            sp = g.update.domain.get_space()
            oi = floor_div_aff(dim_aff(sp, g.upd_pos["i"]), B).scale_val(
                isl.Val.int_from_si(sp.get_ctx(), B))
            zero = isl.Aff.zero_on_domain(isl.LocalSpace.from_space(sp))
            requests = list(promotion_state(ctx).pack_requests)
            gt = dataclasses.replace(g, update=dataclasses.replace(g.update, domain=t))
            gemm = scop_gemm_tree(gt, blk, requests, (own,), True, (oi, zero), k_tiles=True)
            space = st.filter.get_space()
            head = _union(before, space).union(isl.UnionSet.from_set(g.update.domain).subtract(
                isl.UnionSet.from_set(t)))
            kids_new: list = [T.Filter(head, st.sub), T.Filter(isl.UnionSet.from_set(t), gemm)]
            if after:
                kids_new.append(T.Filter(_union(after, space), st.sub))
            new = T.Band([step], T.Sequence(kids_new))
            if not stages.legal(st, new):
                ctx.note(self.name, f"{'+'.join(st.names)}: the row-blocked order would "
                                    f"violate a dependence; program order kept")
                continue
            promotion_state(ctx).pack_requests[:] = requests
            stages.replace(st, new)
            ctx.note(self.name, f"{'+'.join(st.names)}: row-blocked, {B} rows a step; "
                                f"products with the rows below of {g.update.name} on the "
                                f"micro-kernel ({g.update.write.name} += {g.x.buffer.name} * "
                                f"{g.y.buffer.name}, register block {blk.MR}x{blk.NR}, "
                                f"MC={blk.MC} NC={blk.NC} KC={blk.KC}), the block in the "
                                f"C order")
        return stages.schedule()
