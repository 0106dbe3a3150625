"""Pass ``scop-tile``: rectangular tiling of permutable bands of C SCoPs whose innermost
loop walks memory with a stride, with the unit-stride member innermost in each tile.

PolyBench's ``mvt`` (``x2[i] += A[j][i] * y[j]``) and ``lu`` (``A[i][j] -= A[i][k] *
A[k][j]`` in ``for j: for k:``) run their innermost loop down a column: every access
is a cache line apart and nothing vectorises.  Interchanging alone would make the
parallel loop an inner one; tiling keeps the tile loops in their order (the outermost
stays parallel) and runs the unit-stride member innermost inside each tile (Pluto's
choice of a tile's intra-tile order for vectorisation).

A band member is *unit-stride* for an access when the member is a plain iterator of
the statement (the C reader's program-order bands are) that the access's last subscript
uses with coefficient 1 and its other subscripts do not use; *invariant* when no
subscript uses it; *strided* otherwise.

Assumes: a tree of domain, band, sequence, set, filter and mark nodes (program order,
after ``scop-gemm``); ``ctx.model`` with the statements' accesses and dependences.

Distribution: a band over a ``sequence`` (doitgen's ``for p: { t[p] = 0; for s: t[p]
+= X[r][s] * W[s][p]; }``) is first distributed over the sequence's children (each
child gets a copy of the band restricted to its filter), and a child that is a band over
one statement is merged with that copy into one band (``[p, s]``), when that merged band
is a tiling candidate below.  Distribution reorders instances of different children
(all of child 0 for every ``p`` before child 1), so it is legal only when no dependence
goes from a later child to an earlier one at a later ``p``; the isl check below decides
(LU's pivot loop fails it and is kept).  When distributing the whole band is illegal,
its first ``keep`` members stay one band above the sequence and only the rest is
distributed (symm's ``for i: for j: {t = 0; for k: {C[k][j] += ..; t += ..}; C[i][j] =
.. t}``: the last child of row ``i`` feeds the middle one of row ``i + 1``, so ``i`` is
kept and ``j`` distributed); the smallest legal ``keep`` wins.  A child's inner band may
be over a sequence of one-statement leaves (symm's ``k`` over both updates): the merged
band is then a candidate when one member is strided for no access of any of them.

Guarantees: every permutable band of ``n >= 2`` members over a single statement (or a
sequence of one-statement leaves, all accesses of all of them counted) and
without marks above it in its top-level subtree whose last member is strided for some
access while another member is strided for none (the *vector member*: the one with the
most unit-stride accesses) becomes

    band[floor(f_0/T_0), .., floor(f_{n-1}/T_{n-1})]   (permutable)
      band[f_0, .., f_{v-1}, f_{v+1}, .., f_{n-1}, f_v]  (permutable; v = vector member)

with ``T_v = VECTOR_TILE`` (a few vector lengths times the unroll, so one tile row stays
in L1) and the others ``OUTER_TILE``.  Tiling a permutable band and permuting the
members inside a tile are legal (every dependence between instances with equal outer
schedule has non-negative distances on all members, so it stays lexicographically
non-negative on the tile band, and equal tiles keep every member's order relation on
the point band only up to the permutation, which permutability allows).  The pass
checks each rewrite (one band at a time, outermost first) with isl
(:func:`~polycomp.scheduler.common.tree.violated_dependences` over the model's
dependences) and keeps that band as it was, with a note, if a dependence would be
violated.
Reductions (``x2[i] +=``) keep their order per element: the reduced member keeps its
relative order in both bands, so results are bitwise those of the C loop nest.
"""
from __future__ import annotations

import islpy as isl

from polycomp import ir
from polycomp.frontend.c_model import CScopModel
from polycomp.islutil import sets
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.scheduler.cpu import tree as T
from polycomp.scheduler.cpu.backbone_tile import floor_div_aff
from polycomp.state import CompileState

#: tile extent of the vector (innermost) member, in elements
VECTOR_TILE = 256
#: tile extent of the other members
OUTER_TILE = 32


def _member_dim(member: isl.UnionPwAff, stmt) -> int | None:
    """The domain dimension ``d`` of ``stmt`` when the band member is ``S[..] -> [x_d]``."""
    pas: list[isl.PwAff] = []
    member.foreach_pw_aff(pas.append)
    pa = next((p for p in pas
               if p.get_domain_space().get_tuple_name(isl.dim_type.set) == stmt.name), None)
    if pa is None:
        return None
    space = stmt.domain.get_space()
    for d in range(space.dim(isl.dim_type.set)):
        x = isl.PwAff.from_aff(isl.Aff.var_on_domain(isl.LocalSpace.from_space(space),
                                                     isl.dim_type.set, d))
        try:
            if pa.intersect_domain(stmt.domain).is_equal(x.intersect_domain(stmt.domain)):
                return d
        except isl.Error:
            return None
    return None


def _refs(stmt) -> list[tuple]:
    loads: list[ir.Load] = []
    ir.walk(stmt.value, lambda n: loads.append(n) if isinstance(n, ir.Load) else None)
    return [tuple(ld.indices) for ld in loads] + [tuple(stmt.write_indices)]


def stride_kinds(stmt, var: ir.Var) -> list[str]:
    """``unit``, ``invariant`` or ``strided`` for each access of ``stmt`` along ``var``."""
    from polycomp.lowering.vectorize import affine_in
    out = []
    for idx in _refs(stmt):
        if not idx:
            out.append("invariant")
            continue
        used = [var in ir.free_vars(e) for e in idx]
        if not any(used):
            out.append("invariant")
            continue
        a = affine_in(idx[-1], var)
        out.append("unit" if not any(used[:-1]) and a is not None and a[0] == 1
                   else "strided")
    return out


def vector_member(band: T.Band, stmt) -> int | None:
    """The member to run innermost in each tile, or None to leave the band alone."""
    return vector_member_of(band, [stmt])


def vector_member_of(band: T.Band, stmts: list) -> int | None:
    """:func:`vector_member` of a band over several statements: the last member is
    strided for some access of some statement, the chosen one for none of them."""
    kinds: list[list[str]] = []
    for m in band.members:
        ks: list[str] = []
        for stmt in stmts:
            d = _member_dim(m, stmt)
            if d is None:
                return None
            ks += stride_kinds(stmt, stmt.iters[d])
        kinds.append(ks)
    last = kinds[-1]
    if "strided" not in last:
        return None
    good = [k for k, ks in enumerate(kinds) if "strided" not in ks and "unit" in ks]
    if not good:
        return None
    return max(good, key=lambda k: (kinds[k].count("unit"), k))


def _leaf_statements(node, stmts: dict) -> list | None:
    """The statements of a Leaf under a one-statement filter, or of a sequence of
    filters over Leaves (one statement each), in order; None for any other subtree."""
    if isinstance(node, T.Sequence) and node.kind == "sequence":
        out = []
        for f in node.children:
            names = [x.get_tuple_name() for x in sets(f.filter)]
            if not isinstance(f.child, T.Leaf) or len(names) != 1 or names[0] not in stmts:
                return None
            out.append(stmts[names[0]])
        return out
    return None


def floor_member(m: isl.UnionPwAff, size: int) -> isl.UnionPwAff:
    """``floor(m / size)`` of a band member, piece by piece."""
    pas: list[isl.PwAff] = []
    m.foreach_pw_aff(pas.append)
    parts = []
    for pa in pas:
        affs: list[tuple[isl.Set, isl.Aff]] = []
        pa.foreach_piece(lambda dom, a: affs.append((dom, a)))  # noqa: B023
        pieces = [isl.PwAff.from_aff(floor_div_aff(a, size)).intersect_domain(dom)
                  for dom, a in affs]
        piece = pieces[0]
        for p in pieces[1:]:
            piece = piece.union_max(p)
        parts.append(isl.UnionPwAff.from_pw_aff(piece))
    return T.union_members(parts)


def tiled(band: T.Band, v: int) -> T.Band:
    """The tile band over the point band of the module docstring."""
    tiles = [floor_member(m, VECTOR_TILE if k == v else OUTER_TILE)
             for k, m in enumerate(band.members)]
    order = [k for k in range(len(band.members)) if k != v] + [v]
    point = T.Band([band.members[k] for k in order], band.child, permutable=True)
    return T.Band(tiles, point, permutable=True)


def _restrict(members: list, filt: isl.UnionSet) -> list:
    return [m.intersect_domain(filt) for m in members]


def distributed(band: T.Band, stmts: dict, filt: isl.UnionSet,
                keep: int = 0) -> T.Band | T.Sequence | None:
    """``band -> sequence(f_0 -> c_0, .., f_n -> c_n)`` distributed over its children:
    ``sequence(f_0 -> band|f_0 -> c_0, ..)``, where a child that is a band over one
    statement (or over a sequence of one-statement leaves, symm's ``for k: {S_1; S_2}``)
    is merged with the copy of ``band`` above it into one band (outer members first).
    With ``keep > 0`` the band's first ``keep`` members stay one band above the
    sequence and only the others are distributed (symm: ``i`` carries a dependence
    from the last child to the middle one, ``j`` does not).  None unless that makes
    some merged band a tiling candidate (:func:`vector_member_of`)."""
    seq = band.child
    if not isinstance(seq, T.Sequence) or seq.kind != "sequence" or \
            keep >= len(band.members):
        return None
    members = band.members[keep:]
    useful = False
    kids = []
    for f in seq.children:
        outer = _restrict(members, f.filter)
        names = [x.get_tuple_name() for x in sets(f.filter.intersect(filt))]
        inner = f.child
        if isinstance(inner, T.Band):
            under = [stmts[names[0]]] if isinstance(inner.child, T.Leaf) and \
                len(names) == 1 and names[0] in stmts else \
                _leaf_statements(inner.child, stmts)
            if under:
                merged = T.Band(outer + inner.members, inner.child, permutable=True)
                if vector_member_of(merged, under) is not None:
                    useful = True
                    kids.append(T.Filter(f.filter, merged))
                    continue
        kids.append(T.Filter(f.filter, T.Band(outer, inner, permutable=band.permutable)))
    if not useful:
        return None
    if keep == 0:
        return T.Sequence(kids)
    return T.Band(band.members[:keep], T.Sequence(kids), permutable=band.permutable)


def _band_statements(band: T.Band, filt: isl.UnionSet, stmts: dict) -> list | None:
    """The statements below ``band`` when it is over a Leaf (one statement) or over a
    sequence of one-statement Leaves; None otherwise."""
    if isinstance(band.child, T.Leaf):
        names = [x.get_tuple_name() for x in sets(filt)]
        return [stmts[names[0]]] if len(names) == 1 and names[0] in stmts else None
    return _leaf_statements(band.child, stmts)


def _candidates(tree, domain, stmts) -> list:
    """``(path, kind)`` of every band that :func:`tiled` (kind ``tile``) or
    :func:`distributed` (kind ``distribute``) would change, in tree order; ``path`` is
    the list of child positions from the root."""
    out: list = []

    def visit(node, filt, path):
        if isinstance(node, T.Mark):
            return                          # scop-gemm's subtree
        if isinstance(node, T.Filter):
            visit(node.child, node.filter, path + [0])
        elif isinstance(node, T.Sequence):
            for k, c in enumerate(node.children):
                visit(c, filt, path + [k])
        elif isinstance(node, T.Band):
            under = _band_statements(node, filt, stmts)
            if node.permutable and len(node.members) >= 2 and under and \
                    vector_member_of(node, under) is not None:
                out.append((path, "tile"))
                return
            for keep in range(len(node.members)):     # (the next one if illegal)
                if distributed(node, stmts, filt, keep) is not None:
                    out.append((path, f"distribute{keep}"))
            visit(node.child, filt, path + [0])
    visit(tree, domain, [])
    return out


def _at(tree, path: list):
    """``(parent setter, node, filter)`` of the node at ``path``."""
    node, parent, key = tree, None, None
    for k in path:
        parent = node
        if isinstance(node, T.Sequence):
            key, node = k, node.children[k]
        else:
            key, node = None, node.child
    return parent, key, node


def _replace(tree, path: list, new):
    parent, key, _ = _at(tree, path)
    if parent is None:
        return new
    if isinstance(parent, T.Sequence):
        parent.children[key] = new
    else:
        parent.child = new
    return tree


def _filter_at(tree, domain, path: list) -> isl.UnionSet:
    node, filt = tree, domain
    for k in path:
        node = node.children[k] if isinstance(node, T.Sequence) else node.child
        if isinstance(node, T.Filter):
            filt = node.filter
    return filt


class ScopTilePass(Pass):
    """See the module docstring."""
    name = "scop-tile"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        if not ctx.target.isa or not isinstance(ctx.model, CScopModel):
            return schedule
        stmts = {s.name: s for s in ctx.model.statements}
        deps = ctx.model.dependences
        skip = 0                    # candidates (in tree order) found illegal
        for _ in range(4 * len(stmts) + 4):
            domain, tree = T.from_schedule(schedule)
            cands = _candidates(tree, domain, stmts)
            if len(cands) <= skip:
                break
            path, kind = cands[skip]
            _, _, band = _at(tree, path)
            filt = _filter_at(tree, domain, path)
            names = "+".join(x.get_tuple_name() for x in sets(filt))
            if kind == "tile":
                under = _band_statements(band, filt, stmts)
                v = vector_member_of(band, under) if under else None
                assert v is not None
                new = tiled(band, v)
                sizes = "x".join(str(VECTOR_TILE if k == v else OUTER_TILE)
                                 for k in range(len(band.members)))
                what = f"{names}: band of {len(band.members)} tiled {sizes}, member {v} " \
                       f"(unit stride) innermost"
            else:
                keep = int(kind[len("distribute"):])
                new = distributed(band, stmts, filt, keep)
                what = f"{names}: loop distributed over its statements, inner bands merged"
                if keep:
                    what += f" (outer {keep} member(s) kept)"
            out = T.to_schedule(domain, _replace(tree, path, new))
            if not violated_dependences(out, deps).is_empty():
                ctx.note(self.name, f"{what}: would violate a dependence, kept")
                skip += 1
                continue
            ctx.note(self.name, what)
            schedule = out
        return schedule
