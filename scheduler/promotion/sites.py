"""Schedule-tree navigation for the promotion engine: kernels, sites, grafted sites.

A promotion *site* (scope) is a schedule-tree node; the local copy of a group lives for
one execution of the subtree below it, i.e. for one value of the site's prefix
schedule.  Sites are addressed by *paths* (child indices from the root) because isl
schedule nodes do not survive grafts: after a graft, :func:`original_site` follows the
``extension -> sequence -> filter`` wrapping back to the node.
"""
from __future__ import annotations

import islpy as isl

from polycomp.errors import PolycompInternalError
from polycomp.islutil import maps, sets
from polycomp.scheduler.common import marks
from polycomp.scheduler.gpu.map import thread_param
from polycomp.scheduler.gpu.tile import is_marked


def paths(node, pred, path=()) -> list[tuple[int, ...]]:
    """Paths (child indices from ``node``) of the descendants satisfying pred, pre-order."""
    out = [path] if pred(node) else []
    for k in range(node.n_children()):
        out += paths(node.child(k), pred, path + (k,))
    return out


def node_at(schedule: isl.Schedule, path) -> isl.ScheduleNode:
    """The node of ``schedule`` at ``path`` (child indices from the root)."""
    n = schedule.get_root()
    for k in path:
        n = n.child(k)
    return n


def root_of(node: isl.ScheduleNode) -> isl.ScheduleNode:
    """The root of the tree ``node`` belongs to."""
    while node.has_parent():
        node = node.parent()
    return node


def is_kernel(n) -> bool:
    """Is ``n`` a ``kernel:<n>`` mark?"""
    return marks.is_kind(n, marks.KERNEL)


def kernel_node(node) -> isl.ScheduleNode:
    """The enclosing ``kernel:<n>`` mark (``node`` itself if it is one), or the root."""
    x = node
    while x.has_parent() and not is_kernel(x):
        x = x.parent()
    return x


def shared_sites(schedule: isl.Schedule) -> list[tuple[int, ...]]:
    """Shared-memory sites: the child of every ``tile:reduce`` band; in a kernel without
    one, the child of the block band (the first band of the kernel)."""
    out = []
    root = schedule.get_root()
    for kpath in paths(root, is_kernel):
        kn = node_at(schedule, kpath)
        red = paths(kn, lambda n: n.get_type() == isl.schedule_node_type.band
                    and is_marked(n, marks.TILE_REDUCE))
        if red:
            out += [kpath + r + (0,) for r in red]
            continue
        bands = paths(kn, lambda n: n.get_type() == isl.schedule_node_type.band)
        if bands:
            out.append(kpath + bands[0] + (0,))
    return out


def thread_dependent(site, kernel: int) -> bool:
    """Do the statement instances that reach ``site`` depend on the thread ids (a thread
    filter above it, e.g. a row reduction's ``floor(i / RB) = bx and i mod RB = ty``)?

    A shared buffer, its copy and its barriers belong to the whole block: every thread
    must see the same prefix points at the site, i.e. the site's domain must not
    constrain ``tx/ty/tz<kernel>``.  Below a thread filter the footprint of one prefix
    point is one thread group's (one warp's row), the block-wide copy filter would
    leave it to the threads of one group and the barrier would sit under that group's
    guard."""
    names = [thread_param(a, kernel) for a in range(3)]
    for s in sets(site.get_domain()):
        for name in names:
            pos = s.find_dim_by_name(isl.dim_type.param, name)
            if pos >= 0 and s.involves_dims(isl.dim_type.param, pos, 1):
                return True
    return False


def inside_loop(site) -> bool:
    """Is the site below a band of its kernel other than the (degenerate) block band?"""
    x = site
    while x.has_parent():
        x = x.parent()
        if x.get_type() == isl.schedule_node_type.band and is_marked(x, marks.TILE_REDUCE):
            return True
        if marks.is_kind(x, marks.TILE_BLOCK):
            return False
    return False


def original_site(node):
    """The site after grafts: grafting wraps it as ``extension -> sequence [.., filter ->
    site]``; follow that down to the original node."""
    while node.get_type() == isl.schedule_node_type.extension:
        seq = node.child(0)
        node = seq.child(seq.n_children() - 1).child(0)
    return node


def drop_statements(schedule, stmts):
    """Execute none of ``stmts``: an empty filter below the filter that holds them."""
    names = {s.name for s in stmts}

    def holds(n):
        if n.get_type() != isl.schedule_node_type.filter:
            return False
        got = {x.get_tuple_name() for x in sets(n.filter_get_filter())}
        return bool(got) and got <= names
    for path in paths(schedule.get_root(), holds):
        node = node_at(schedule, path)
        empty = isl.UnionSet.empty(node.filter_get_filter().get_space())
        schedule = node.child(0).insert_filter(empty).get_schedule()
        break
    return schedule


def prefix_points(prefix: isl.UnionMap) -> isl.Set:
    """The union of the ranges of ``prefix`` (a site's prefix schedule ``{ S[i] -> [p] }``,
    one map per statement): the prefix points ``{ [p] }`` of the site, not coalesced."""
    ranges = [m.range() for m in maps(prefix)]
    if not ranges:
        raise PolycompInternalError("a promotion site without statement instances")
    points = ranges[0]
    for r in ranges[1:]:
        points = points.union(r)
    return points


def statements_below(prefix: isl.UnionMap, model) -> list:
    """The model's statements with instances in ``prefix``'s domain, in model order."""
    names = {m.get_tuple_name(isl.dim_type.in_) for m in maps(prefix)}
    return [s for s in model.statements if s.name in names]
