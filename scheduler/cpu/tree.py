"""A small editable mirror of isl schedule trees, for the CPU passes.

isl edits schedule trees node by node (insert above, delete, split a band), which makes
restructurings such as "fuse the outer loops of these sequence children" or "rebuild
this band as three bands" awkward.  The CPU passes instead read a tree into plain
Python nodes (:func:`from_schedule`), rearrange them, and write the result back
(:func:`to_schedule`), which rebuilds the isl tree top-down from the domain with
``insert_partial_schedule`` / ``insert_sequence`` / ``insert_set`` / ``insert_mark``.
Band attributes (permutability, coincidence, AST build options, AST loop types) survive
the round trip.  Only domain, band, sequence, set, filter, mark and leaf nodes are
supported (what the CPU pipeline produces); anything else raises
:class:`~polycomp.errors.ScheduleError`.

Band helpers work on a band's members as :class:`isl.UnionPwAff` values
(:func:`members`, :func:`band_of`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from polycomp.errors import ScheduleError

_T = isl.schedule_node_type


@dataclass(eq=False)
class Leaf:
    pass


@dataclass(eq=False)
class Band:
    members: list                      # isl.UnionPwAff, outermost first
    child: object = field(default_factory=Leaf)
    permutable: bool = False
    coincident: list = None  # type: ignore[assignment]  # bool per member (default all 0)
    options: isl.UnionSet | None = None
    loop_types: list | None = None     # isl.ast_loop_type per member (None: default)

    def __post_init__(self):
        if self.coincident is None:
            self.coincident = [False] * len(self.members)


@dataclass(eq=False)
class Mark:
    name: str
    child: object = field(default_factory=Leaf)


@dataclass(eq=False)
class Filter:
    filter: isl.UnionSet
    child: object = field(default_factory=Leaf)


@dataclass(eq=False)
class Sequence:
    children: list                     # Filter
    kind: str = "sequence"             # or "set"


# --------------------------------------------------------------------------- members


def members(node: isl.ScheduleNode) -> list:
    """The members of the band at ``node`` as UnionPwAffs."""
    mupa = node.band_get_partial_schedule()
    return [mupa.get_union_pw_aff(k) for k in range(node.band_n_member())]


def mupa_of(members_: list) -> isl.MultiUnionPwAff:
    """A MultiUnionPwAff (anonymous range) with the given members."""
    if not members_:
        raise ScheduleError("a band needs at least one member")
    ctx = members_[0].get_ctx()
    space = members_[0].get_space()
    for m in members_[1:]:
        space = space.align_params(m.get_space())
    lst = isl.UnionPwAffList.alloc(ctx, len(members_))
    for m in members_:
        lst = lst.add(m.align_params(space))
    rng = isl.Space.set_alloc(ctx, 0, len(members_)).align_params(space)
    return isl.MultiUnionPwAff.from_union_pw_aff_list(rng, lst)


def union_members(parts: list) -> isl.UnionPwAff:
    """One UnionPwAff from pieces defined on disjoint statement sets."""
    out = parts[0]
    for p in parts[1:]:
        out = out.union_add(p)
    return out


def upa_from_str(ctx, text: str) -> isl.UnionPwAff:
    return isl.UnionPwAff.read_from_str(ctx, text)


# --------------------------------------------------------------------------- reading


def from_node(node: isl.ScheduleNode):
    t = node.get_type()
    if t == _T.leaf:
        return Leaf()
    if t == _T.band:
        n = node.band_n_member()
        opts = node.band_get_ast_build_options()
        types = [node.band_member_get_ast_loop_type(k) for k in range(n)]
        band = Band(members(node), from_node(node.child(0)), bool(node.band_get_permutable()),
                    [bool(node.band_member_get_coincident(k)) for k in range(n)],
                    None if opts.is_empty() else opts,
                    None if all(t == isl.ast_loop_type.default for t in types) else types)
        return band
    if t == _T.mark:
        return Mark(node.mark_get_id().get_name(), from_node(node.child(0)))
    if t == _T.filter:
        return Filter(node.filter_get_filter(), from_node(node.child(0)))
    if t in (_T.sequence, _T.set):
        kids = [from_node(node.child(k)) for k in range(node.n_children())]
        return Sequence(kids, "sequence" if t == _T.sequence else "set")
    raise ScheduleError(f"the CPU passes cannot edit schedule trees with {t} nodes")


def from_schedule(schedule: isl.Schedule):
    """``(domain, tree)`` of a schedule whose root is a domain node."""
    root = schedule.get_root()
    return root.domain_get_domain(), from_node(root.child(0))


# --------------------------------------------------------------------------- writing


def _build(node: isl.ScheduleNode, t) -> isl.ScheduleNode:
    """Insert ``t`` at the leaf ``node``; returns the node at the same position (the
    root of the inserted subtree)."""
    if isinstance(t, Leaf):
        return node
    if isinstance(t, Band):
        node = node.insert_partial_schedule(mupa_of(t.members))
        node = node.band_set_permutable(int(t.permutable))
        for k, c in enumerate(t.coincident):
            node = node.band_member_set_coincident(k, int(c))
        if t.options is not None:
            node = node.band_set_ast_build_options(t.options)
        for k, lt in enumerate(t.loop_types or ()):
            node = node.band_member_set_ast_loop_type(k, lt)
        return _build(node.child(0), t.child).parent()
    if isinstance(t, Mark):
        node = node.insert_mark(isl.Id(t.name))
        return _build(node.child(0), t.child).parent()
    if isinstance(t, Sequence):
        ctx = node.get_ctx()
        lst = isl.UnionSetList.alloc(ctx, len(t.children))
        for f in t.children:
            lst = lst.add(f.filter)
        node = node.insert_sequence(lst) if t.kind == "sequence" else node.insert_set(lst)
        for k, f in enumerate(t.children):
            node = _build(node.child(k).child(0), f.child).parent().parent()
        return node
    if isinstance(t, Filter):
        node = node.insert_filter(t.filter)
        return _build(node.child(0), t.child).parent()
    raise ScheduleError(f"unknown tree node {type(t).__name__}")


def to_schedule(domain: isl.UnionSet, tree) -> isl.Schedule:
    """The isl schedule of ``tree`` over ``domain``."""
    node = isl.Schedule.from_domain(domain).get_root().child(0)
    return _build(node, tree).get_schedule()


# --------------------------------------------------------------------------- queries


def statements_of(f: isl.UnionSet) -> list[str]:
    from polycomp.islutil import sets
    return [s.get_tuple_name() for s in sets(f)]


def band_to_union_map(members_: list) -> isl.UnionMap:
    return isl.UnionMap.from_multi_union_pw_aff(mupa_of(members_))


def stage_children(tree) -> list:
    """The children of the top-level sequence (one stage or fused group each), or the
    tree itself for a single-stage kernel (wrapped in a list)."""
    if isinstance(tree, Sequence):
        return tree.children
    return [tree]
