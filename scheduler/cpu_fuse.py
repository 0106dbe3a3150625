"""Pass: fuse consecutive stages on their outer loops (memory-bound chains on CPUs).

Assumes: the tree is ``domain -> sequence`` of per-stage filters (program order) whose
children start, for the stages this pass may fuse, with a band (what
:class:`~polycomp.scheduler.program_order.ProgramOrderPass` builds); other children
(e.g. tiled backbones, which start with a sequence or a mark) are left alone and end a
fusion group.  ``ctx.model.dependences`` holds every dependence.

Guarantees: consecutive children ``F_a .. F_b`` of a sequence are replaced by one child
``filter(F_a u .. u F_b) -> band[o] -> sequence[F_a -> rest_a, .., F_b -> rest_b]``
where ``o`` is the union of the first band member of each child and ``rest_k`` is the
child's band without that member, whenever every dependence between two instances of
the group that lie in the same iteration of the enclosing fused loops has equal ``o``
on both ends (so ``o`` is coincident: the fused loop may run in parallel and the
sequence keeps the original order inside an iteration).  Groups are formed greedily in
program order and the rewrite recurses into each new inner sequence, so elementwise
chains fuse down to their innermost loop and row-wise reductions (softmax, layernorm)
fuse on their row loop.  Execution order only changes between instances whose
dependences are all carried inside one iteration of ``o``; the schedule stays legal.
"""
from __future__ import annotations

import islpy as isl

from . import cpu_tree as T
from .pass_base import Pass, ScheduleContext


def _filter_union(children) -> isl.UnionSet:
    out = children[0].filter
    for c in children[1:]:
        out = out.union(c.filter)
    return out


def _outer(child):
    """The first member of the band at the top of a sequence child, or None."""
    band = child.child
    if isinstance(band, T.Band) and band.members:
        return band.members[0]
    return None


def _rest(band: T.Band):
    if len(band.members) == 1:
        return band.child
    return T.Band(band.members[1:], band.child, band.permutable, band.coincident[1:],
                  None)


class _Fuser:
    def __init__(self, deps: isl.UnionMap):
        self.deps = deps

    def coincident(self, group, same_prefix) -> bool:
        dom = _filter_union(group)
        deps = self.deps.intersect_domain(dom).intersect_range(dom)
        if same_prefix is not None:
            deps = deps.intersect(same_prefix)
        if deps.is_empty():
            return True
        outer = isl.UnionMap.from_union_pw_aff(T.union_members([_outer(c) for c in group]))
        return deps.is_subset(outer.apply_range(outer.reverse()))

    def sequence(self, seq: T.Sequence, prefix: isl.UnionMap | None) -> T.Sequence:
        if seq.kind != "sequence":
            return seq
        same_prefix = prefix.apply_range(prefix.reverse()) if prefix is not None else None
        out, k, kids = [], 0, seq.children
        while k < len(kids):
            group = [kids[k]]
            if _outer(kids[k]) is not None:
                j = k + 1
                while j < len(kids) and _outer(kids[j]) is not None and \
                        self.coincident(group + [kids[j]], same_prefix):
                    group.append(kids[j])
                    j += 1
            k += len(group)
            out.append(group[0] if len(group) == 1 else self.fuse(group, prefix))
        return T.Sequence(out, seq.kind)

    def fuse(self, group, prefix) -> T.Filter:
        outer = T.union_members([_outer(c) for c in group])
        inner = T.Sequence([T.Filter(c.filter, _rest(c.child)) for c in group])
        om = isl.UnionMap.from_union_pw_aff(outer)
        new_prefix = om if prefix is None else prefix.flat_range_product(om)
        inner = self.sequence(inner, new_prefix)
        if len(inner.children) == 1:          # everything fused further down
            inner = inner.children[0].child
        permutable = all(c.child.permutable for c in group)
        band = T.Band([outer], inner, permutable, [True])
        return T.Filter(_filter_union(group), band)


class CpuFusePass(Pass):
    name = "cpu-fuse"

    def run(self, schedule: isl.Schedule, ctx: ScheduleContext) -> isl.Schedule:
        domain, tree = T.from_schedule(schedule)
        if not isinstance(tree, T.Sequence):
            return schedule
        fused = _Fuser(ctx.model.dependences).sequence(tree, None)
        n_before, n_after = len(tree.children), len(fused.children)
        if n_after == n_before:
            return schedule
        ctx.note(self.name, f"fused {n_before} stage subtrees into {n_after}")
        return T.to_schedule(domain, fused.children[0].child if n_after == 1 else fused)
