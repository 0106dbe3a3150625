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

from polycomp.islutil import (
    StatementDependences,
    restrict_equal,
    some_differ,
    statement_maps,
    tuple_names,
    union_all,
)
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.cpu import tree as T
from polycomp.state import CompileState


def _filter_union(children) -> isl.UnionSet:
    """The union of the children's filters (pairwise: no growing union copied per
    child)."""
    us = [c.filter for c in children]
    while len(us) > 1:
        us = [us[k].union(us[k + 1]) if k + 1 < len(us) else us[k]
              for k in range(0, len(us), 2)]
    return us[0]


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


class _Group:
    """A fusion group as it grows: its children, the union of their filters, the names
    of their statements and the union of their first band members (kept up to date
    member by member, so that a step costs what the new member needs)."""

    def __init__(self, first):
        self.members = [first]
        self.dom = first.filter
        self.names = tuple_names(first.filter)
        self.outer = _outer_map(first)
        self.outer_maps = statement_maps(self.outer)
        self.coincident = True

    def with_outer(self, nxt) -> tuple[isl.UnionMap, dict]:
        """The first members of the group and ``nxt``: as a union map and per
        statement (:func:`~polycomp.islutil.statement_maps`, grown, not rebuilt)."""
        om = _outer_map(nxt)
        return self.outer.union(om), {**self.outer_maps, **statement_maps(om)}

    def add(self, nxt, outer: tuple[isl.UnionMap, dict], coincident: bool) -> None:
        self.members.append(nxt)
        self.dom = self.dom.union(nxt.filter)
        self.names |= tuple_names(nxt.filter)
        self.outer, self.outer_maps = outer
        self.coincident = self.coincident and coincident


class _Fuser:
    def __init__(self, deps: isl.UnionMap):
        self.deps = deps
        self.index = StatementDependences(deps)

    def _deps(self, a: isl.UnionSet, b: isl.UnionSet, prefix, names_a=None, names_b=None):
        """The dependences from instances in ``a`` to instances in ``b`` with equal
        ``prefix`` values (the enclosing fused loops; None at the top level).  Only
        the dependence maps between the statements of ``a`` and ``b`` are looked at
        (:class:`~polycomp.islutil.StatementDependences`), and the prefix test is an
        intersection per dependence (:func:`~polycomp.islutil.restrict_equal`), never
        the composition of the prefix with its inverse over every pair of statements."""
        na = tuple_names(a) if names_a is None else names_a
        nb = tuple_names(b) if names_b is None else names_b
        d = self.index.between(na, nb).intersect_domain(a).intersect_range(b)
        return restrict_equal(d, prefix) if prefix is not None else d

    def linked(self, x, group: _Group, prefix) -> bool:
        nx = tuple_names(x.filter)
        return not (self._deps(x.filter, group.dom, prefix, nx, group.names).is_empty()
                    and self._deps(group.dom, x.filter, prefix, group.names, nx).is_empty())

    def fusable(self, group: _Group, nxt, prefix, coincident_only: bool,
                outer: tuple[isl.UnionMap, dict]) -> tuple[bool, bool]:
        """(legal, coincident) of fusing ``nxt`` into ``group`` on the union of first
        members, ``outer`` being that union over the group and ``nxt`` (as a union map
        and per statement, :meth:`_Group.with_outer`).

        Both conditions hold pointwise, dependence by dependence, so only the
        dependences that involve ``nxt`` are checked when the group has more than one
        member: the ones among the group were checked when it grew (the group ANDs the
        coincidence flags).  A group of one has its own dependences checked here too.
        Coincident: no dependence has different ``outer`` values at its ends; legal
        otherwise (inner levels): none has ``outer(source) > outer(sink)``
        (:func:`~polycomp.islutil.some_differ`, emptiness tests per dependence)."""
        nn = tuple_names(nxt.filter)
        if len(group.members) == 1:
            dom = group.dom.union(nxt.filter)
            names = group.names | nn
            deps = self._deps(dom, dom, prefix, names, names)
        else:
            deps = union_all([self._deps(group.dom, nxt.filter, prefix, group.names, nn),
                              self._deps(nxt.filter, group.dom, prefix, nn, group.names),
                              self._deps(nxt.filter, nxt.filter, prefix, nn, nn)],
                             self.deps.get_space())
        if deps.is_empty():
            return True, True
        per_statement = outer[1]
        if not some_differ(deps, per_statement):
            return True, True
        if coincident_only:
            return False, False
        return not some_differ(deps, per_statement, decreasing_only=True), False

    def sequence(self, seq: T.Sequence, prefix: isl.UnionMap | None) -> T.Sequence:
        if seq.kind != "sequence":
            return seq
        inner = prefix is not None
        kids = _splice(seq.children) if inner else list(seq.children)
        position = {id(c): k for k, c in enumerate(kids)}
        out, k = [], 0
        while k < len(kids):
            if _outer(kids[k]) is None:
                out.append(kids[k])
                k += 1
                continue
            group, hoisted = _Group(kids[k]), []
            j = k + 1
            while j < len(kids):
                nxt = kids[j]
                if _outer(nxt) is None:
                    if inner and not self.linked(nxt, group, prefix):
                        hoisted.append(nxt)
                        j += 1
                        continue
                    break
                outer = group.with_outer(nxt)
                ok, c = self.fusable(group, nxt, prefix, not inner, outer)
                if not ok:
                    break
                group.add(nxt, outer, c)
                j += 1
            # leaves after the last member were not passed: they stay where they were
            last = position[id(group.members[-1])]
            passed = [h for h in hoisted if position[id(h)] < last]
            kept = [h for h in hoisted if position[id(h)] > last]
            k = last + 1
            out.extend(passed)
            out.append(group.members[0] if len(group.members) == 1 else
                       self.fuse(group.members, prefix, group.coincident))
            out.extend(kept)
            k = max(k, max((position[id(h)] + 1 for h in kept), default=k))
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
