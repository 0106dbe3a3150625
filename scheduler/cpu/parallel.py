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
dimension) stay sequential.
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


def _mark_first_band(tree, domain, deps):
    """``tree`` with a cpu_parallel mark above its first band, if coincident."""
    if isinstance(tree, T.Band):
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


class CpuParallelPass(Pass):
    name = "cpu-parallel"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        domain, tree = T.from_schedule(schedule)
        deps = ctx.model.dependences
        kids = T.stage_children(tree)
        marked = 0
        for k, child in enumerate(kids):
            if has_mark(child, MARK):
                continue
            new, done = _mark_first_band(child, domain if child is tree else
                                         getattr(child, "filter", domain), deps)
            marked += done
            if child is tree:
                tree = new
            else:
                kids[k] = new
        if not marked:
            return schedule
        ctx.note(self.name, f"{marked} parallel loop(s)")
        return T.to_schedule(domain, tree)
