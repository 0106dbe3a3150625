"""Pass: choose the loop each top-level subtree runs in parallel (OpenMP) on CPUs.

Assumes: ``domain -> sequence`` of top-level children (or a single subtree); each child
reaches its first band through filter and mark nodes only; ``ctx.model.dependences``
holds every dependence.

Guarantees: in every top-level subtree that has no ``cpu_parallel`` mark yet, a mark
``cpu_parallel`` is inserted directly above the first band when that band's first member
is coincident for the dependences between the subtree's instances (every such
dependence has distance 0 on it).  Code generation turns the outermost loop below a
``cpu_parallel`` mark into ``#pragma omp parallel for schedule(static)``: contiguous
chunks of iterations per thread, so threads write disjoint, contiguous ranges of the
output (no false sharing except at chunk boundaries).  Marks do not change the
schedule, so it stays legal; the parallel loop is dependence-free by coincidence.
Subtrees whose first member is not coincident (e.g. a reduction over the outermost
dimension) stay sequential.  A band whose first member takes a single value on the
subtree's domain (a batch of 1 with constant shapes: a loop of one iteration) and whose
second member is coincident is split after the first member and the mark put on the
second (otherwise the whole subtree would run on one thread); a band of one such member
gets no mark, the first band below it (or each child of a sequence below it) does.  A
subtree that has a mark already (a GEMM with its epilogue fused below a batch loop) gets
marks on the unmarked children of its sequences (:func:`_mark_beside`), never below a
``cpu_parallel`` mark.
"""
from __future__ import annotations

import islpy as isl

from polycomp.islutil import some_differ
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.cpu import tree as T
from polycomp.state import CompileState

MARK = marks.CPU_PARALLEL


def has_mark(tree, name: str) -> bool:
    if isinstance(tree, T.Mark) and marks.is_kind(tree.name, name):
        return True
    if isinstance(tree, T.Sequence):
        return any(has_mark(c, name) for c in tree.children)
    child = getattr(tree, "child", None)
    return child is not None and has_mark(child, name)


def member_is_coincident(member: isl.UnionPwAff, domain: isl.UnionSet,
                         deps: isl.UnionMap) -> bool:
    """Does every dependence between instances of ``domain`` have equal ``member``
    values at both ends?  Tested dependence by dependence (an endpoint ``member`` does
    not cover fails), not by composing ``member`` with its inverse: that relation pairs
    every two statements of a fused band (quadratic in a chain of stages)."""
    deps = deps.intersect_domain(domain).intersect_range(domain)
    if deps.is_empty():
        return True
    m = isl.UnionMap.from_union_pw_aff(member)
    covered = m.domain()
    if not (deps.domain().is_subset(covered) and deps.range().is_subset(covered)):
        return False
    return not some_differ(deps, m)


def _single_value(member: isl.UnionPwAff, domain: isl.UnionSet) -> bool:
    """Does ``member`` take one value on ``domain`` (a leading extent-1 axis, e.g. a
    batch of 1 with constant shapes)?  Symbolic extents never do."""
    vals = isl.UnionMap.from_union_pw_aff(member).intersect_domain(domain).range()
    if vals.is_empty():
        return False
    return isl.Set.from_union_set(vals).is_singleton()


def _split_unit_member(tree, domain, deps):
    """A band whose first member takes one value and whose second is coincident, split
    after the first member with the mark on the rest (the loop of one iteration is no
    parallel loop); else None.  Splitting a permutable band keeps its schedule."""
    if (len(tree.members) < 2 or tree.options is not None
            or not _single_value(tree.members[0], domain)
            or not member_is_coincident(tree.members[1], domain, deps)):
        return None
    lt = tree.loop_types
    inner = T.Band(tree.members[1:], tree.child, tree.permutable, tree.coincident[1:],
                   None, lt[1:] if lt is not None else None)
    inner.coincident[0] = True
    return T.Band(tree.members[:1], T.Mark(MARK, inner), tree.permutable,
                  tree.coincident[:1], None, lt[:1] if lt is not None else None)


def _mark_first_band(tree, domain, deps):
    """``tree`` with a cpu_parallel mark above its first band, if coincident (above the
    band's second member when the first takes a single value)."""
    if isinstance(tree, T.Band):
        split = _split_unit_member(tree, domain, deps)
        if split is not None:
            return split, True
        if len(tree.members) == 1 and _single_value(tree.members[0], domain):
            tree.child, n = _below_unit(tree.child, domain, deps)
            if n:
                return tree, n
        if member_is_coincident(tree.members[0], domain, deps):
            tree.coincident[0] = True
            return T.Mark(MARK, tree), True
        return tree, False
    if isinstance(tree, T.Filter):
        tree.child, done = _mark_first_band(tree.child, tree.filter, deps)
        return tree, done
    if isinstance(tree, T.Mark):
        tree.child, done = _mark_first_band(tree.child, domain, deps)
        return tree, done
    return tree, False


def _below_unit(tree, domain, deps) -> tuple[object, int]:
    """Marks below a band of one single-valued member (a loop of one iteration): on the
    first band below, or on each child of a sequence below."""
    if isinstance(tree, T.Sequence):
        return _mark_beside(tree, domain, deps)
    new, done = _mark_first_band(tree, domain, deps)
    return new, int(done)


def _mark_beside(tree, domain, deps) -> tuple[object, int]:
    """In a subtree that has a ``cpu_parallel`` mark somewhere, the stages of a sequence
    beside the marked one (a GEMM's fused epilogue after the GEMM below a serial batch
    loop): each child of such a sequence without a mark gets one above its first band
    (:func:`_mark_first_band`).  Never below a ``cpu_parallel`` mark (no nested parallel
    loops)."""
    if isinstance(tree, T.Mark):
        if marks.is_kind(tree.name, MARK):
            return tree, 0
        tree.child, n = _mark_beside(tree.child, domain, deps)
        return tree, n
    if isinstance(tree, T.Filter):
        tree.child, n = _mark_beside(tree.child, tree.filter, deps)
        return tree, n
    if isinstance(tree, T.Band):
        tree.child, n = _mark_beside(tree.child, domain, deps)
        return tree, n
    if isinstance(tree, T.Sequence):
        total = 0
        for k, c in enumerate(tree.children):
            dom = getattr(c, "filter", domain)
            if has_mark(c, MARK):
                tree.children[k], n = _mark_beside(c, dom, deps)
            else:
                tree.children[k], n = _mark_first_band(c, dom, deps)
            total += n
        return tree, total
    return tree, 0


class CpuParallelPass(Pass):
    name = "cpu-parallel"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        domain, tree = T.from_schedule(schedule)
        deps = ctx.model.dependences
        kids = T.stage_children(tree)
        marked = 0
        for k, child in enumerate(kids):
            dom = domain if child is tree else getattr(child, "filter", domain)
            if has_mark(child, MARK):
                new, done = _mark_beside(child, dom, deps)
            else:
                new, done = _mark_first_band(child, dom, deps)
            marked += done
            if child is tree:
                tree = new
            else:
                kids[k] = new
        if not marked:
            return schedule
        ctx.note(self.name, f"{marked} parallel loop(s)")
        return T.to_schedule(domain, tree)
