"""Schedule-tree utilities shared by the passes: building, printing, legality, coincidence.

Conventions used by every pass:

* ``Schedule.get_map()`` is always intersected with the domain before use.
* Schedule nodes kept beyond a callback are copied (islpy objects are reference
  counted, but nodes obtained inside ``map_descendant_bottom_up`` callbacks belong to the
  traversal).
* A band's partial schedule is a ``MultiUnionPwAff``; members are numbered from 0.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import islpy as isl

from polycomp.islutil import restrict_equal, sets, some_differ


def union_set_list(ctx, sets) -> isl.UnionSetList:
    lst = isl.UnionSetList.alloc(ctx, len(sets))
    for s in sets:
        lst = lst.add(s)
    return lst


def statement_filter(ctx, names) -> isl.UnionSet:
    """The universe filter ``{ S1[...]; S2[...] }`` of the named statements."""
    return isl.UnionSet.read_from_str(ctx, "{ " + "; ".join(names) + " }")


def stmt_filter(stmts, ctx) -> isl.UnionSet:
    u: isl.UnionSet | None = None
    for s in stmts:
        x = isl.UnionSet.from_set(isl.Set.universe(s.domain.get_space()))
        u = x if u is None else u.union(x)
    assert u is not None, "no statements"
    return u


def band_map(stmts, ndims) -> isl.MultiUnionPwAff:
    """{ S[i_0..i_n] -> [i_0..i_{ndims-1}] } over the given statements."""
    um: isl.UnionMap | None = None
    for s in stmts:
        sp = s.domain.get_space()
        n = sp.dim(isl.dim_type.set)
        m = isl.Map.identity(isl.Space.map_from_set(sp))
        if n > ndims:
            m = m.project_out(isl.dim_type.out, ndims, n - ndims)
        um_s = isl.UnionMap.from_map(m.reset_tuple_id(isl.dim_type.out))
        um = um_s if um is None else um.union(um_s)
    assert um is not None, "no statements"
    return isl.MultiUnionPwAff.from_union_map(um)


def build_program_order(statements, domain: isl.UnionSet) -> isl.Schedule:
    """The initial schedule tree: stages in program order, loops in index order.

    ``domain`` -> ``sequence`` over stages (omitted for a single stage) -> per stage a
    permutable band over its output dimensions, shared by the init and update
    statements of a reduction -> for a reduction, ``sequence [init, update]`` with a band
    over the reduce axes under the update filter.
    """
    ctx = domain.get_ctx()
    stages: "OrderedDict[object, list]" = OrderedDict()
    for s in statements:
        stages.setdefault(s.stage, []).append(s)
    sched = isl.Schedule.from_domain(domain)
    node = sched.get_root().child(0)
    groups = list(stages.values())
    if len(groups) > 1:
        node = node.insert_sequence(union_set_list(ctx, [stmt_filter(g, ctx) for g in groups]))
        for k, g in enumerate(groups):
            node = _build_stage(node.child(k).child(0), g, ctx).parent().parent()
    else:
        node = _build_stage(node, groups[0], ctx)
    return node.get_schedule()


def _build_stage(node: isl.ScheduleNode, stmts, ctx) -> isl.ScheduleNode:
    """Insert a stage's bands at ``node`` (a leaf); returns a node at the same depth."""
    stage = stmts[0].stage
    depth = node.get_tree_depth()
    nspatial = len(stage.iters)
    if nspatial:
        node = node.insert_partial_schedule(band_map(stmts, nspatial))
        node = node.band_set_permutable(1)
        node = node.child(0)
    if len(stmts) == 2:  # reduction: init, update
        init, update = stmts
        node = node.insert_sequence(union_set_list(ctx, [stmt_filter([init], ctx),
                                                         stmt_filter([update], ctx)]))
        leaf = node.child(1).child(0)
        nred = len(update.iters) - nspatial
        mupa = reduce_band(update, nspatial, nred)
        node = leaf.insert_partial_schedule(mupa)
    while node.get_tree_depth() > depth:
        node = node.parent()
    return node


def reduce_band(stmt, skip, n) -> isl.MultiUnionPwAff:
    sp = stmt.domain.get_space()
    m = isl.Map.identity(isl.Space.map_from_set(sp)).project_out(isl.dim_type.out, 0, skip)
    m = m.reset_tuple_id(isl.dim_type.out)
    return isl.MultiUnionPwAff.from_union_map(isl.UnionMap.from_map(m))


# --------------------------------------------------------------------------- printing


def tree_str(schedule: isl.Schedule) -> str:
    """The schedule tree in isl's block YAML style (readable, one node per line)."""
    p = isl.Printer.to_str(schedule.get_ctx()).set_yaml_style(isl.yaml_style.BLOCK)
    return p.print_schedule(schedule).get_str()


def schedule_from_str(text: str, ctx=None) -> isl.Schedule:
    return isl.Schedule.read_from_str(ctx or isl.DEFAULT_CONTEXT, text)


# --------------------------------------------------------------------------- legality


def schedule_map(schedule: isl.Schedule) -> isl.UnionMap:
    """The flattened schedule, restricted to the schedule's domain."""
    return schedule.get_map().intersect_domain(schedule.get_domain())


def violated_dependences(schedule: isl.Schedule, deps: isl.UnionMap) -> isl.UnionMap:
    """The dependences ``a -> b`` for which ``b`` is not scheduled strictly after ``a``.

    Instances outside the schedule's domain (e.g. statements a pass removed) are not
    checked; extension statements do not appear in ``deps``.
    """
    smap = schedule_map(schedule)
    if smap.is_empty() or deps.is_empty():
        return isl.UnionMap.empty(deps.get_space())
    bad = isl.UnionMap.empty(deps.get_space())
    for r in sets(smap.range()):
        ge = isl.UnionMap.from_map(isl.Map.lex_ge(r.get_space()))
        later_or_equal = smap.apply_range(ge).apply_range(smap.reverse())  # S(a) >= S(b)
        bad = bad.union(deps.intersect(later_or_equal))
    return bad


@dataclass(eq=False)
class RelaxedDependences:
    """State slot (``state.slot(RelaxedDependences)``) of the dependences a schedule
    pass proved it may reverse (``scop-push``: two max/min updates of one integer
    element commute), for the debug legality check after every pass
    (:mod:`polycomp.pass_manager`): ``relaxed``, pairs of the model's dependences that
    need not hold any more, and ``required``, what the pass checked instead (every
    memory dependence of the reordered instances other than the relaxed pairs; the
    model's flow/anti/output relations are transitively reduced, so subtracting the
    relaxed links alone would drop the orders they imply)."""
    relaxed: isl.UnionMap | None = None
    required: isl.UnionMap | None = None

    def add(self, relaxed: isl.UnionMap, required: isl.UnionMap) -> None:
        self.relaxed = relaxed if self.relaxed is None else self.relaxed.union(relaxed)
        self.required = required if self.required is None else \
            self.required.union(required)

    def apply(self, deps: isl.UnionMap) -> isl.UnionMap:
        """``deps`` without the relaxed pairs, with the required ones."""
        if self.relaxed is None or self.required is None:
            return deps
        return deps.subtract(self.relaxed).union(self.required)


def is_legal(schedule: isl.Schedule, deps: isl.UnionMap) -> bool:
    return violated_dependences(schedule, deps).is_empty()


# --------------------------------------------------------------------------- bands


def band_coincidence(node: isl.ScheduleNode, deps: isl.UnionMap) -> list[bool]:
    """For each member of the band at ``node``: does every dependence between instances
    in this subtree with equal outer schedule (prefix and earlier members) have distance
    0 on it?  Such members can run in parallel (map to blocks/threads, OpenMP).

    Tested dependence by dependence (:func:`~polycomp.islutil.restrict_equal`,
    :func:`~polycomp.islutil.some_differ`: intersections and emptiness tests), not by
    composing the prefix and each member with their inverses, which pair every two
    statements of the band (quadratic in a fused chain of stages)."""
    prefix = node.get_prefix_schedule_union_map()
    dom = node.get_domain()
    deps = deps.intersect_domain(dom).intersect_range(dom)
    n = node.band_n_member()
    if deps.is_empty():
        return [True] * n
    # dependences whose prefix schedules are equal
    if not prefix.is_empty():
        deps = restrict_equal(deps, prefix)
    out = []
    mupa = node.band_get_partial_schedule()
    equal_so_far = deps
    for k in range(n):
        mk = isl.UnionMap.from_union_pw_aff(mupa.get_union_pw_aff(k))
        covered = mk.domain()
        whole = equal_so_far.domain().is_subset(covered) and \
            equal_so_far.range().is_subset(covered)
        out.append(whole and not some_differ(equal_so_far, mk))
        equal_so_far = restrict_equal(equal_so_far, mk)
    return out


def mark_coincidence(node: isl.ScheduleNode, deps: isl.UnionMap) -> isl.ScheduleNode:
    """Set the band's coincident flags from :func:`band_coincidence`."""
    for k, c in enumerate(band_coincidence(node, deps)):
        node = node.band_member_set_coincident(k, int(c))
    return node


def map_bands(schedule: isl.Schedule, fn) -> isl.Schedule:
    """Apply ``fn(node) -> node`` to every band node, bottom-up; exceptions propagate."""
    err: list[Exception] = []

    def cb(node):
        if err:
            return node
        try:
            if node.get_type() == isl.schedule_node_type.band:
                return fn(node)
        except Exception as e:  # isl swallows exceptions raised in callbacks
            err.append(e)
        return node

    root = schedule.get_root().map_descendant_bottom_up(cb)
    if err:
        raise err[0]
    return root.get_schedule()
