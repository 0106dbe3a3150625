"""Pass: fuse consecutive stages on their outer loops (memory-bound chains on CPUs).

Assumes: the tree is ``domain -> sequence`` of per-stage filters (program order) whose
children start, for the stages this pass may fuse, with a band (what
:class:`~polycomp.scheduler.common.program_order.ProgramOrderPass` builds); other children
(e.g. tiled backbones, which start with a sequence or a mark) are left alone and end a
fusion group.  ``ctx.model.dependences`` holds every dependence.

Guarantees:

* Top level (the loop that will run in parallel): consecutive children ``F_a .. F_b``
  become one child ``filter(F_a u .. u F_b) -> band[o] -> sequence[F_a -> rest_a, ..]``
  where ``o`` is the union of each child's first band member and ``rest_k`` the child's
  band without it, whenever every dependence between two instances of the group has
  equal ``o`` on both ends (``o`` is coincident: each iteration is independent and the
  sequence keeps the original order inside it).
* Inner levels (inside fused loops; dependences considered are those between instances
  with equal values of the enclosing fused loops): nested sequences are spliced into
  their parent (same order), and a group may also take a child that is a reduction's
  update band, as long as every dependence inside the group goes forward or stays on
  ``o`` (``o(source) <= o(sink)``, so the fused loop executes sources first; it is then
  not marked coincident).  A child without a band (a reduction's initialisation)
  between group members moves in front of the group when no dependence links it with
  the members it passes.  So softmax computes ``exp`` and accumulates its sum in one
  pass over the row, and layernorm squares and sums the centred row in one pass.

Groups form greedily in program order and the rewrite recurses into each new inner
sequence, so elementwise chains fuse down to their innermost loop.  Every dependence
keeps its source before its sink, so the schedule stays legal.
"""
from __future__ import annotations

import islpy as isl

from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.cpu import tree as T
from polycomp.state import CompileState


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


def _outer_map(child) -> isl.UnionMap:
    """The first band member of a sequence child as a union map."""
    return isl.UnionMap.from_union_pw_aff(T.union_members([_outer(child)]))


def _rest(band: T.Band):
    if len(band.members) == 1:
        return band.child
    return T.Band(band.members[1:], band.child, band.permutable, band.coincident[1:], None)


def _splice(children) -> list:
    """Nested sequences spliced into the parent's child list (same execution order)."""
    out = []
    for c in children:
        if isinstance(c.child, T.Sequence) and c.child.kind == "sequence":
            out.extend(_splice([T.Filter(g.filter.intersect(c.filter), g.child)
                                for g in c.child.children]))
        else:
            out.append(c)
    return out


class _Fuser:
    def __init__(self, deps: isl.UnionMap):
        self.deps = deps

    def _deps(self, a: isl.UnionSet, b: isl.UnionSet, same_prefix):
        d = self.deps.intersect_domain(a).intersect_range(b)
        return d.intersect(same_prefix) if same_prefix is not None else d

    def linked(self, x, group, same_prefix) -> bool:
        g = _filter_union(group)
        return not (self._deps(x.filter, g, same_prefix).is_empty()
                    and self._deps(g, x.filter, same_prefix).is_empty())

    def fusable(self, group, nxt, same_prefix, coincident_only: bool,
                outer: isl.UnionMap) -> tuple[bool, bool]:
        """(legal, coincident) of fusing ``nxt`` into ``group`` on the union of first
        members, ``outer`` being that union (as a map) over ``group + [nxt]``.

        Both conditions hold pointwise, dependence by dependence, so only the
        dependences that involve ``nxt`` are checked when ``group`` has more than one
        member: the ones among ``group`` were checked when it grew (the caller ANDs the
        coincidence flags).  A group of one has its own dependences checked here too.
        This keeps the greedy fusion of n stages from redoing O(n) unions per step."""
        if len(group) == 1:
            dom = _filter_union(group + [nxt])
            deps = self._deps(dom, dom, same_prefix)
        else:
            dom = _filter_union(group).union(nxt.filter)
            deps = self._deps(dom, nxt.filter, same_prefix).union(
                self._deps(nxt.filter, dom, same_prefix))
        if deps.is_empty():
            return True, True
        # outer restricted to the sources / sinks: the same relations on deps, without
        # composing every pair of the group's statements
        src, snk = outer.intersect_domain(deps.domain()), outer.intersect_domain(deps.range())
        if deps.is_subset(src.apply_range(snk.reverse())):
            return True, True
        if coincident_only:
            return False, False
        pairs = src.reverse().apply_range(deps).apply_range(snk)   # o(src) -> o(sink)
        le = isl.UnionMap.from_map(isl.Map.lex_le(isl.Space.set_alloc(dom.get_ctx(), 0, 1)
                                                  .align_params(pairs.get_space())))
        return pairs.is_subset(le), False

    def sequence(self, seq: T.Sequence, prefix: isl.UnionMap | None) -> T.Sequence:
        if seq.kind != "sequence":
            return seq
        inner = prefix is not None
        same_prefix = prefix.apply_range(prefix.reverse()) if prefix is not None else None
        kids = _splice(seq.children) if inner else list(seq.children)
        out, k = [], 0
        while k < len(kids):
            if _outer(kids[k]) is None:
                out.append(kids[k])
                k += 1
                continue
            group, hoisted, coinc = [kids[k]], [], True
            group_outer = _outer_map(kids[k])
            j = k + 1
            while j < len(kids):
                nxt = kids[j]
                if _outer(nxt) is None:
                    if inner and not self.linked(nxt, group, same_prefix):
                        hoisted.append(nxt)
                        j += 1
                        continue
                    break
                outer = group_outer.union(_outer_map(nxt))
                ok, c = self.fusable(group, nxt, same_prefix, not inner, outer)
                if not ok:
                    break
                group.append(nxt)
                group_outer = outer
                coinc = coinc and c
                j += 1
            # leaves after the last member were not passed: they stay where they were
            passed = [h for h in hoisted if kids.index(h) < kids.index(group[-1])]
            kept = [h for h in hoisted if h not in passed]
            k = kids.index(group[-1]) + 1
            out.extend(passed)
            out.append(group[0] if len(group) == 1 else self.fuse(group, prefix, coinc))
            out.extend(kept)
            k = max(k, max((kids.index(h) + 1 for h in kept), default=k))
        return T.Sequence(out, seq.kind)

    def fuse(self, group, prefix, coincident: bool) -> T.Filter:
        outer = T.union_members([_outer(c) for c in group])
        inner = T.Sequence([T.Filter(c.filter, _rest(c.child)) for c in group])
        om = isl.UnionMap.from_union_pw_aff(outer)
        new_prefix = om if prefix is None else prefix.flat_range_product(om)
        inner = self.sequence(inner, new_prefix)
        if len(inner.children) == 1:          # everything fused further down
            inner = inner.children[0].child
        permutable = all(c.child.permutable for c in group)
        band = T.Band([outer], inner, permutable, [coincident])
        return T.Filter(_filter_union(group), band)


class CpuFusePass(Pass):
    name = "cpu-fuse"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        domain, tree = T.from_schedule(schedule)
        if not isinstance(tree, T.Sequence):
            return schedule
        fused = _Fuser(ctx.model.dependences).sequence(tree, None)
        n_before, n_after = len(tree.children), len(fused.children)
        if n_after == n_before:
            return schedule
        ctx.note(self.name, f"fused {n_before} stage subtrees into {n_after}")
        return T.to_schedule(domain, fused.children[0].child if n_after == 1 else fused)
