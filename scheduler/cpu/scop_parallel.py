"""Pass ``scop-parallel``: the outermost parallel loop of each loop nest of a C SCoP,
also below sequential loops (time loops, the pivot loop of a factorisation).

:class:`~polycomp.scheduler.cpu.parallel.CpuParallelPass` only looks at the first band
member of each top-level subtree; in a stencil (``for t: for i: for j:``) or an LU
factorisation (``for k: ...``) that loop carries dependences, and the nest ran on one
thread.  This pass walks every top-level subtree without a ``cpu_parallel`` mark top
down and marks, on every path, the first band member that is parallel.

Assumes: a tree of domain, band, sequence, set, filter and mark nodes;
``ctx.model.dependences`` holds every dependence (flow, anti, output).

Guarantees: with ``D`` the dependences between instances of the band's domain whose
prefix schedule (the outer loops, and the band members before ``m``) is equal, band
member ``m`` is *parallel* when ``D`` is a subset of ``f_m^-1 . f_m`` (every such
dependence has distance 0 on it; isl's coincidence).  The first parallel member of a
band gets a ``cpu_parallel`` mark directly above it (the band is split before ``m``
when ``m > 0``; splitting changes no schedule value), and nothing below it is marked;
a band with no parallel member, or with a ``cpu_parallel`` mark below it (threads
already split inside by the pass that built it), is left alone and its subtree is
searched.  A parallel
member that encloses fewer than ``MIN_LOOPS_INSIDE`` loops (``s[i] = 0``), or not more
loops than enclose it (:func:`worth_a_fork`), is not marked and its subtree not searched
(too little work per fork/join: it runs on one thread).  For C SCoPs this pass
replaces :class:`~polycomp.scheduler.cpu.parallel.CpuParallelPass`.  Marks and
splits do not change the schedule map, so every dependence stays as satisfied as it
was; the marked loop carries none, so OpenMP may run its iterations in any order.  Code
generation makes the loop below the mark ``#pragma omp parallel for``: one fork/join per
execution of the loop, so in ``for t`` stencils one per time step.
"""
from __future__ import annotations

import islpy as isl

from polycomp.frontend.c_model import CScopModel
from polycomp.islutil import StatementDependences, restrict_equal, some_differ, tuple_names
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.state import CompileState

_T = isl.schedule_node_type


def _has_parallel_mark(node: isl.ScheduleNode) -> bool:
    found = []

    def fn(n):
        if marks.is_kind(n, marks.CPU_PARALLEL) or marks.is_kind(n, marks.CPU_WAVEFRONT):
            found.append(n)
            return False
        return True
    node.foreach_descendant_top_down(fn)
    return bool(found)


def band_dependences(node: isl.ScheduleNode, deps: isl.UnionMap | StatementDependences
                     ) -> tuple[isl.UnionMap, isl.UnionSet, isl.MultiUnionPwAff]:
    """``(d, dom, schedule)`` of the band at ``node``: the dependences among its
    statements' instances ``dom`` between instances with equal outer schedule (the
    prefix schedule's equal pairs), and the band's partial schedule."""
    index = deps if isinstance(deps, StatementDependences) else StatementDependences(deps)
    dom = node.get_domain()
    d = index.among(tuple_names(dom)).intersect_domain(dom).intersect_range(dom)
    prefix = node.get_prefix_schedule_union_map().intersect_domain(dom)
    if not prefix.is_empty():
        d = restrict_equal(d, prefix)
    return d, dom, node.band_get_partial_schedule()


def parallel_member(node: isl.ScheduleNode,
                    deps: isl.UnionMap | StatementDependences) -> int | None:
    """The first member of the band at ``node`` that carries no dependence between
    instances with equal outer schedule (see the module docstring), or None.  Only the
    dependences among the band's statements are looked at, and each test is an
    intersection or emptiness test on the dependence relations
    (:func:`~polycomp.islutil.restrict_equal`, :func:`~polycomp.islutil.some_differ`)."""
    d, dom, mupa = band_dependences(node, deps)
    for m in range(node.band_n_member()):
        if d.is_empty():
            return m
        f = isl.UnionMap.from_union_pw_aff(mupa.get_union_pw_aff(m)).intersect_domain(dom)
        if not some_differ(d, f):
            return m
        d = restrict_equal(d, f)
    return None


class ScopParallelPass(Pass):
    """See the module docstring."""
    name = "scop-parallel"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        if not isinstance(ctx.model, CScopModel) or not ctx.cpu_options.parallel:
            return schedule
        deps = StatementDependences(ctx.model.dependences)
        found: list[str] = []

        def visit(node: isl.ScheduleNode) -> isl.ScheduleNode:
            t = node.get_type()
            if t == _T.mark and (marks.is_kind(node, marks.CPU_PARALLEL)
                                 or marks.is_kind(node, marks.CPU_WAVEFRONT)):
                return node
            # a band above a subtree a pass already split between the threads (the
            # register tiles of scop-symm's unequal row steps) is left alone
            if t == _T.band and not _has_parallel_mark(node):
                m = parallel_member(node, deps)
                if m is not None and not worth_a_fork(node, m):
                    return node          # little work per fork/join
                if m is not None:
                    inner = node.band_split(m).child(0) if m > 0 else node
                    found.append(f"loop at depth {inner.get_schedule_depth()} of "
                                 f"{'+'.join(sorted(_names(inner)))}")
                    marked = inner.insert_mark(marks.make(marks.CPU_PARALLEL))
                    # back at the position of ``node`` (the outer part of a split band)
                    return marked.parent() if m > 0 else marked
            for k in range(node.n_children()):
                node = visit(node.child(k)).parent()
            return node

        root = schedule.get_root()
        if root.n_children() == 0 or _all_marked(root.child(0)):
            return schedule
        node = visit(root.child(0)).parent()
        if found:
            for f in found:
                ctx.note(self.name, f"parallel (OpenMP): {f}")
        return node.get_schedule()


#: a parallel loop must enclose at least this many loops (itself included): a
#: one-dimensional loop (``s[i] = 0``, a time step of jacobi-1d) is O(n) work, less
#: than an OpenMP fork/join on a busy machine
MIN_LOOPS_INSIDE = 2


def _loops_inside(node: isl.ScheduleNode, m: int) -> int:
    """How many loops member ``m`` of the band at ``node`` encloses, itself included:
    the largest domain dimension of the band's statements minus the outer loops (an
    upper bound on the loops of the statement's own nest that remain), at most the band
    members from ``m`` on along the deepest path below."""
    from polycomp.islutil import sets
    depth = node.get_schedule_depth() + m
    # (a band below a filter that keeps none of its statements encloses no loop)
    dims = max((s.dim(isl.dim_type.set) for s in sets(node.get_domain())),
               default=depth) - depth
    # a member fixed by a filter and dropped from its band (scop-split's ``i = k``
    # piece) is no loop: the band members on the deepest path bound the count too
    return min(dims, node.band_n_member() - m + _members_below(node.child(0)))


def _members_below(node: isl.ScheduleNode) -> int:
    """The most band members on a path from ``node`` down to a leaf."""
    own = node.band_n_member() if node.get_type() == _T.band else 0
    return own + max((_members_below(node.child(k)) for k in range(node.n_children())),
                     default=0)


def worth_a_fork(node: isl.ScheduleNode, m: int) -> bool:
    """Whether member ``m`` of the band at ``node`` runs enough work per fork/join: it
    encloses at least ``MIN_LOOPS_INSIDE`` loops (itself included) and more loops than
    enclose it (about ``n^inside`` work per region against ``n^outside`` regions:
    doitgen's ``p`` loop inside ``r, q`` would fork 21000 times for 26k FMAs each)."""
    inside = _loops_inside(node, m)
    return inside >= MIN_LOOPS_INSIDE and inside > node.get_schedule_depth() + m


def _names(node: isl.ScheduleNode) -> set[str]:
    from polycomp.islutil import sets
    return {s.get_tuple_name() for s in sets(node.get_domain())}


def _all_marked(node: isl.ScheduleNode) -> bool:
    if node.get_type() in (_T.sequence, _T.set):
        return all(_has_parallel_mark(node.child(k)) for k in range(node.n_children()))
    return _has_parallel_mark(node)
