"""Pass ``scop-symm``: PolyBench's symm split into three phases, the two triangular
products on the packed micro-kernel in :mod:`.scop_trmm`'s row steps.

PolyBench's symm (``A`` symmetric, its lower triangle stored; the scalar ``temp2``
expanded to ``acc[i][j]`` by the front end) runs per ``(i, j)``:

    acc[i][j] = 0;                                                    (Z)
    for k < i: { C[k][j] += alpha * B[i][j] * A[i][k];                 (M, the mirror)
                 acc[i][j] += B[k][j] * A[i][k]; }                     (P)
    C[i][j] = beta * C[i][j] + alpha * B[i][j] * A[i][i] + alpha * acc[i][j];   (F)

Matching (:func:`match_symm`), in one top-level child of the program-order tree: exactly
two updates of :func:`.scop_trmm.match_update`'s form, ``P`` reducing over the rows
*above* its output row (its domain has ``red < row``) and ``M`` over the rows *below*
(``red > row``); every other statement writes a row at a plain iterator; those before
``P`` in the text (``Z``) join phase 1, the others (``F``) are phase 2.

Schedule, with ``B`` the block of rows (as in :mod:`.scop_trmm`) and ``sub`` the
child's subtree (the C order, restricted by the filters):

    sequence
      filter Z + P:  band[floor(row/B)]                                   (phase 1)
                       sequence
                         filter Z:        sub
                         filter P1:       scop-gemm subtree of P over P1  (k < B*step)
                         filter P - P1:   sub                             (the block)
      filter F:      sub                                                  (phase 2)
      filter M:      band[floor(row/B)]                                   (phase 3)
                       sequence
                         filter M - M3:   sub                             (the block)
                         filter M3:       scop-gemm subtree of M over M3  (red >= B*step+B)

``P1 = { P : k < B*floor(i/B) }`` (the rectangle left of the block, ``k`` tiles from 0)
and ``M3`` :mod:`.scop_trmm`'s trailing part.  Each element receives its updates in
increasing reduction index (phase 1: the rectangle, then the block; phase 3: the block,
then the rows below), so the sums keep the C order (bitwise up to FMA contraction).

Legality (isl terms): :func:`polycomp.scheduler.common.tree.violated_dependences` on the
whole tree against every dependence of the child, plus :mod:`.scop_trmm`'s checks (a)
one rectangular reduction range per step and (b) no product of a step writes what its
packed operands read, for both products.  When a check fails the child keeps its
schedule, with a note.

Assumes: the program-order tree, ``ctx.model`` a C SCoP model, a target with vector
registers; runs after ``scop-trmm`` (which takes no symm: two updates; the phases it would see
as top-level children are not its to block again) and before ``scop-gemm``.

Guarantees: the tree above for a matched child whose checks pass (``explain`` notes
it), the child unchanged otherwise.
"""
from __future__ import annotations

import dataclasses

import islpy as isl

from polycomp.frontend.c_model import CScopModel
from polycomp.model import Statement
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.scheduler.cpu import scop_trmm
from polycomp.scheduler.cpu import tree as T
from polycomp.scheduler.cpu.backbone_tile import choose_blocking, dim_aff, floor_div_aff
from polycomp.scheduler.cpu.scop_gemm import ScopGemm, _separable, scop_gemm_tree
from polycomp.scheduler.cpu.scop_stages import ScopStages
from polycomp.scheduler.cpu.scop_trmm import (
    _names,
    _packs_safe,
    _read,
    _rectangular_k,
    _step,
    _trailing,
    _union,
    match_update,
)
from polycomp.scheduler.promotion.record import promotion_state
from polycomp.state import CompileState


def _direction(g: ScopGemm) -> str | None:
    """``"above"`` when every instance reduces over rows before its output row,
    ``"below"`` when after, else None."""
    s = g.update
    d = _names(s)
    i, k = d[g.upd_pos["i"]], d[g.upd_pos["k"]]
    for name, cond in (("above", f"{k} >= {i}"), ("below", f"{k} <= {i}")):
        bad = _read(s, f"{{ {s.name}[{', '.join(d)}] : {cond} }}")
        assert isinstance(bad, isl.Set)
        if bad.intersect(s.domain).is_empty():
            return name
    return None


def match_symm(statements: list[Statement]) \
        -> tuple[ScopGemm, ScopGemm, list, list] | str:
    """``(P, M, phase-1 statements besides P, phase-2 statements)`` of one top-level
    child (textual order), or why none."""
    ups = [(n, g) for n, g in enumerate(match_update(s) for s in statements)
           if g is not None]
    if len(ups) != 2:
        return "not two updates W[i][j] += X * Y"
    dirs = {}
    for n, g in ups:
        if _separable(g.update.domain, g.upd_pos["k"]):
            return "a reduction range does not depend on the row (scop-gemm's GEMM)"
        dirs[_direction(g)] = (n, g)
    if set(dirs) != {"above", "below"}:
        return "not one product over the rows above and one over the rows below"
    for s in statements:
        if not s.write_indices or scop_trmm._plain(s.write_indices[0],
                                                   tuple(s.iters)) is None:
            return f"{s.name} does not write a row at a plain iterator"
    (np_, p), (nm, m) = dirs["above"], dirs["below"]
    rest = [s for n, s in enumerate(statements) if n not in (np_, nm)]
    first = [s for s in rest if statements.index(s) < np_]
    return p, m, first, [s for s in rest if s not in first]


def _leading(g: ScopGemm, B: int) -> isl.Set:
    """``P1`` of the module docstring: the reductions left of the row's block."""
    s = g.update
    d = _names(s)
    i, k = d[g.upd_pos["i"]], d[g.upd_pos["k"]]
    t = _read(s, f"{{ {s.name}[{', '.join(d)}] : exists (q : {B}q <= {i} < {B}q + {B} "
                 f"and {k} < {B}q) }}")
    assert isinstance(t, isl.Set)
    return t.intersect(s.domain)


class ScopSymmPass(Pass):
    """See the module docstring."""
    name = "scop-symm"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        if not ctx.target.isa or not isinstance(ctx.model, CScopModel):
            return schedule
        stages = ScopStages(schedule, ctx.model.statements)
        for st in stages:
            filt = st.filter
            sub = st.sub
            names = st.names
            group = st.group
            m = match_symm(group)
            if isinstance(m, str):
                continue
            p, mir, first, fin = m
            if ctx.target.vector_lanes(p.dtype) <= 1 or p.dtype != mir.dtype:
                continue
            blk = choose_blocking(p.outer_product(), ctx.target, ctx.cpu_options)
            B = max(blk.MR, min(scop_trmm.BLOCK, blk.KC) // blk.MR * blk.MR)
            blk = dataclasses.replace(blk, KC=B)
            space = filt.get_space()
            requests = list(promotion_state(ctx).pack_requests)
            phases = []
            ok = True
            for g, part, leading in ((p, _leading(p, B), True),
                                     (mir, _trailing(mir, B), False)):
                if not _rectangular_k(g, part, B) or not _packs_safe(g, part, B):
                    ok = False
                    break
                own = isl.UnionPwAff.from_pw_aff(_step(g.update, B))
                sp = g.update.domain.get_space()
                oi = floor_div_aff(dim_aff(sp, g.upd_pos["i"]), B).scale_val(
                    isl.Val.int_from_si(sp.get_ctx(), B))
                zero = isl.Aff.zero_on_domain(isl.LocalSpace.from_space(sp))
                gp = dataclasses.replace(g, update=dataclasses.replace(g.update,
                                                                       domain=part))
                rest = isl.UnionSet.from_set(g.update.domain).subtract(
                    isl.UnionSet.from_set(part))
                pset = isl.UnionSet.from_set(part)
                if part.is_empty():
                    seq: list = [T.Filter(rest, sub)]
                else:
                    gemm = scop_gemm_tree(gp, blk, requests, (own,), True, (oi, zero),
                                          k_tiles=True)
                    seq = [T.Filter(pset, gemm), T.Filter(rest, sub)] if leading else \
                        [T.Filter(rest, sub), T.Filter(pset, gemm)]
                members = [own]
                if leading and first:
                    seq.insert(0, T.Filter(_union(first, space), sub))
                    members = [T.union_members([own] + [
                        isl.UnionPwAff.from_pw_aff(_step(s, B)) for s in first])]
                band = T.Band(members, T.Sequence(seq))
                stmts_here = [g.update] + (first if leading else [])
                phases.append(T.Filter(_union(stmts_here, space), band))
            if not ok:
                ctx.note(self.name, f"{'+'.join(names)}: a triangular product is not a "
                                    f"GEMM per block; program order kept")
                continue
            top = [phases[0]]
            if fin:
                top.append(T.Filter(_union(fin, space), sub))
            top.append(phases[1])
            new = T.Sequence(top)
            trial = stages.trial(st, new)
            deps = ctx.model.dependences.intersect_domain(filt).intersect_range(filt)
            if not violated_dependences(trial, deps).is_empty():
                ctx.note(self.name, f"{'+'.join(names)}: the three-phase order would "
                                    f"violate a dependence; program order kept")
                continue
            promotion_state(ctx).pack_requests[:] = requests
            stages.replace(st, new)
            ctx.note(self.name, f"{'+'.join(names)}: split in three phases, {B} rows a "
                                f"step; {p.update.name} ({p.update.write.name} += "
                                f"{p.x.buffer.name} * {p.y.buffer.name}, rows above) and "
                                f"{mir.update.name} ({mir.update.write.name} += "
                                f"{mir.x.buffer.name} * {mir.y.buffer.name}, rows below) "
                                f"on the micro-kernel (register block {blk.MR}x{blk.NR}, "
                                f"MC={blk.MC} NC={blk.NC} KC={blk.KC}), the blocks in "
                                f"the C order")
        return stages.schedule()
