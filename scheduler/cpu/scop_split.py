"""Pass ``scop-split``: index-set splitting of a loop that carries dependences only
through one iteration, so that the pieces before and after that iteration are
parallel (and vectorisable) loops.

Floyd-Warshall's ``for k: for i: for j: p[i][j] = min(p[i][j], p[i][k] + p[k][j])``
carries dependences on ``i`` inside a step ``k`` only through row ``k`` (rows ``i < k``
read it before it is updated, rows ``i > k`` after), and on ``j`` inside a row only
through column ``k`` (``p[i][k]`` is read before and after it is updated).  Split ``i``
into ``i < k``, ``i = k``, ``i > k`` and, in each piece, ``j`` likewise: the C order is
unchanged (the pieces run in the order of ``i``), but the ``i < k`` and ``i > k`` loops
carry no dependence any more (``scop-parallel`` makes them OpenMP loops) and the ``j``
pieces carry none either (the vectoriser takes them).

Assumes: a tree of domain, band, sequence, set, filter and mark nodes;
``ctx.model.dependences`` holds every dependence (flow, anti, output).  A stage (child
of the root sequence, or the root's subtree) with a mark anywhere in it (another pass's
rewrite: scop-factor's blocks, scop-trmm's row blocks, micro-kernels, stencil tiles) is
left alone.

Guarantees: for band member ``x`` at schedule depth ``d >= 1`` (with ``P`` the prefix
schedule of the outer ``d`` loops), let ``D`` be the dependences among the band's
statements with ``P(a) = P(b)`` (and equal values of the band's members before ``x``)
and ``x(a) != x(b)`` (the dependences ``x`` carries).  A *split point* is a
single-valued affine ``v = V(P)``, depending on ``P``, such that every instance
``a`` of some basic map of ``domain(D)`` or ``range(D)`` has ``x(a) = V(P(a))`` (read
off the dependence relations with ``lexmin = lexmax``).  With the pieces
``L = {a : x(a) < V(P(a))}``, ``E = {x = V}`` and ``G = {x > V}`` of the band's domain,
the split is made when ``D`` has no pair of instances both in ``L`` and none both in
``G``: the band (from ``x`` on) is replaced by a sequence of filters ``L, E, G`` (empty
pieces dropped), each with a copy of it; in ``E`` the member ``x`` is dropped (constant
for fixed ``P``).  Since ``L < E < G`` in ``x`` for equal ``P``, the new tree orders
every pair of instances with different ``P`` or different ``x`` as before and pairs with
equal ``(P, x)`` as before too (same subtree); ``x`` is coincident in ``L`` and ``G``.
The pieces are searched again for the band's remaining members.  The whole result is
checked with isl (:func:`~polycomp.scheduler.common.tree.violated_dependences`) and
the input schedule returned, with a note, if any dependence is violated.  The values
of the schedule change (a sequence level is added), the execution order of every
dependent pair does not, so results are bitwise those of the C order.
"""
from __future__ import annotations

from collections.abc import Callable

import islpy as isl

from polycomp.frontend.c_model import CScopModel
from polycomp.islutil import (
    StatementDependences,
    maps,
    restrict_equal,
    sets,
    some_differ,
    tuple_names,
)
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import union_set_list, violated_dependences
from polycomp.state import CompileState

_T = isl.schedule_node_type


def _flat_schedule(node: isl.ScheduleNode, m: int) -> isl.UnionMap:
    """``a -> [P(a), x_0(a), .., x_m(a)]``: the prefix schedule of the band at ``node``
    followed by its members ``0 .. m``, on the band's domain."""
    dom = node.get_domain()
    prefix = node.get_prefix_schedule_union_map().intersect_domain(dom)
    mupa = node.band_get_partial_schedule()
    f = prefix
    for k in range(m + 1):
        mk = isl.UnionMap.from_union_pw_aff(mupa.get_union_pw_aff(k)).intersect_domain(dom)
        f = f.flat_range_product(mk)
    return f


def _affs(pma: isl.PwMultiAff) -> list[isl.MultiAff]:
    out: list[isl.MultiAff] = []
    pma.foreach_piece(lambda _s, ma: out.append(ma))
    return out


def _split_points(d: isl.UnionMap, f: isl.UnionMap) -> list[isl.Map]:
    """The single-valued ``{[P] -> [v]}`` with ``x = v(P)`` on the source or the sink
    set of a basic map of ``d`` (``f``: instances to ``[P, x]``), ``v`` depending on
    ``P``."""
    out: list[isl.Map] = []
    for m in maps(d):
        for side in (m.domain(), m.range()):
            for s in sets(f.intersect_domain(isl.UnionSet.from_set(side)).range()):
                for b in s.get_basic_sets():
                    n = b.dim(isl.dim_type.set)
                    if n < 2:
                        continue
                    pm = isl.Map.from_range(isl.Set(b)).move_dims(
                        isl.dim_type.in_, 0, isl.dim_type.out, 0, n - 1)
                    lo, hi = pm.lexmin(), pm.lexmax()
                    if not lo.is_equal(hi) or not lo.is_single_valued():
                        continue
                    affs = _affs(isl.PwMultiAff.from_map(lo.coalesce()))
                    if not affs or any(not a.plain_is_equal(affs[0]) for a in affs):
                        continue
                    # one affine v on the whole P space, depending on P
                    aff = affs[0].get_aff(0)
                    if not aff.involves_dims(isl.dim_type.in_, 0, n - 1):
                        continue
                    v = isl.Map.from_multi_aff(affs[0])
                    if not any(v.is_equal(w) for w in out):
                        out.append(v)
    return out


def _pieces(v: isl.Map, f: isl.UnionMap) -> list[isl.UnionSet]:
    """The instances with ``x < v(P)``, ``x = v(P)`` and ``x > v(P)`` (``f`` maps
    them to ``[P, x]``)."""
    parts: list[list[isl.UnionSet]] = [[], [], []]
    for fm in maps(f):
        sp = fm.range().get_space()
        n = sp.dim(isl.dim_type.set)
        ident = isl.Map.identity(isl.Space.map_from_set(sp))
        # [P, x] -> [v(P)] and [P, x] -> [x]
        pv = ident.project_out(isl.dim_type.out, n - 1, 1).apply_range(v.align_params(sp))
        px = ident.project_out(isl.dim_type.out, 0, n - 1)
        one = px.range().get_space()
        for k, cmp in enumerate((isl.Map.lex_lt(one), isl.Map.identity(
                isl.Space.map_from_set(one)), isl.Map.lex_gt(one))):
            sel = px.apply_range(cmp).intersect(pv.align_params(px.get_space())).domain()
            parts[k].append(isl.UnionSet.from_set(fm.intersect_range(sel).domain()))
    out = []
    for ps in parts:
        u = ps[0]
        for p in ps[1:]:
            u = u.union(p)
        out.append(u)
    return out


class _Splitter:
    def __init__(self, deps: StatementDependences):
        self.deps = deps
        self.done: list[str] = []

    def band(self, node: isl.ScheduleNode, first: int = 0) -> isl.ScheduleNode:
        """Split members ``first ..`` of the band at ``node``; returns the node at the
        same position."""
        dom = node.get_domain()
        d = self.deps.among(tuple_names(dom)).intersect_domain(dom).intersect_range(dom)
        prefix = node.get_prefix_schedule_union_map().intersect_domain(dom)
        depth = node.get_schedule_depth()
        if not prefix.is_empty():
            d = restrict_equal(d, prefix)
        mupa = node.band_get_partial_schedule()
        for m in range(node.band_n_member()):
            if d.is_empty():
                return node
            fm = isl.UnionMap.from_union_pw_aff(mupa.get_union_pw_aff(m)).intersect_domain(dom)
            if m >= first and depth + m >= 1 and some_differ(d, fm):
                carried = d.subtract(restrict_equal(d, fm))
                f = _flat_schedule(node, m)
                for v in _split_points(carried, f):
                    lo, eq, hi = _pieces(v, f)
                    covers = lo.union(eq).union(hi).is_equal(dom)
                    if covers and all(carried.intersect_domain(p).intersect_range(p).is_empty()
                                      for p in (lo, hi)):
                        return self._split(node, m, [lo, eq, hi], v)
            d = restrict_equal(d, fm)
        return node

    def _split(self, node: isl.ScheduleNode, m: int, pieces: list[isl.UnionSet],
               v: isl.Map) -> isl.ScheduleNode:
        dom = node.get_domain()
        kept = [(k, p.intersect(dom)) for k, p in enumerate(pieces)]
        kept = [(k, p) for k, p in kept if not p.is_empty()]
        self.done.append(f"member {m} of the loop at depth {node.get_schedule_depth()} "
                         f"at {v.coalesce()}")
        if m > 0:
            node = node.band_split(m).child(0)
        n_members = node.band_n_member()
        node = node.insert_sequence(union_set_list(node.get_ctx(), [p for _, p in kept]))
        for c, (k, _) in enumerate(kept):
            band = node.child(c).child(0)
            if k == 1 and n_members == 1:   # x = v(P): drop the member
                band = band.delete()
            elif k == 1:
                band = self.band(band.band_split(1).delete(), 0)
            else:
                band = self.band(band, 1)
            node = band.parent().parent()
        return node.parent() if m > 0 else node


def has_mark(node: isl.ScheduleNode) -> bool:
    """A mark at or below ``node``."""
    found: list[bool] = []

    def fn(n: isl.ScheduleNode) -> bool:
        if n.get_type() == _T.mark:
            found.append(True)
            return False
        return True
    node.foreach_descendant_top_down(fn)
    return bool(found)


def visit_unmarked_nests(schedule: isl.Schedule,
                         visit: Callable[[isl.ScheduleNode], isl.ScheduleNode]) -> isl.Schedule:
    """The schedule with ``visit`` applied to each top-level nest (each child of the root
    sequence, or the root's child when there is no sequence) that has no mark at or below
    it (another pass's rewrite); ``visit`` returns the node it was given, rewritten."""
    root = schedule.get_root()
    if root.n_children() == 0:
        return schedule
    top = root.child(0)
    if top.get_type() == _T.sequence:     # the stages: each child of the root sequence
        for k in range(top.n_children()):
            if not has_mark(top.child(k)):
                top = visit(top.child(k)).parent()
    elif not has_mark(top):
        top = visit(top)
    return top.get_schedule()


def split_tree(schedule: isl.Schedule, deps: isl.UnionMap) -> tuple[isl.Schedule, list[str]]:
    """The schedule with every split made (module docstring) and a line per split."""
    s = _Splitter(StatementDependences(deps))

    def visit(node: isl.ScheduleNode) -> isl.ScheduleNode:
        t = node.get_type()
        if t == _T.mark:
            return node
        if t == _T.band:
            node = s.band(node)
        for k in range(node.n_children()):
            node = visit(node.child(k)).parent()
        return node

    return visit_unmarked_nests(schedule, visit), s.done


class ScopSplitPass(Pass):
    """See the module docstring."""
    name = "scop-split"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        if not isinstance(ctx.model, CScopModel):
            return schedule
        out, done = split_tree(schedule, ctx.model.dependences)
        if not done:
            return schedule
        if not violated_dependences(out, ctx.model.dependences).is_empty():
            ctx.note(self.name, "index-set split not made: it would violate a dependence")
            return schedule
        for line in done:
            ctx.note(self.name, f"index-set split: {line}")
        return out
