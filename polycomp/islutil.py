"""Small islpy helpers used across passes."""
from __future__ import annotations

import islpy as isl


def maps(um: isl.UnionMap) -> list[isl.Map]:
    """The maps of a union map, one per space."""
    lst = um.get_map_list()
    return [lst.get_at(i) for i in range(lst.n_map())]


def sets(us: isl.UnionSet) -> list[isl.Set]:
    """The sets of a union set, one per space."""
    lst = us.get_set_list()
    return [lst.get_at(i) for i in range(lst.n_set())]


def flatten_range(um: isl.UnionMap) -> isl.UnionMap:
    """``flatten_range`` of every map of a union map (islpy lacks the union form)."""
    out = isl.UnionMap.empty(um.get_space())
    for m in maps(um):
        out = out.union(isl.UnionMap.from_map(m.flatten_range()))
    return out


def dim_bounds(s: isl.Set, k: int) -> tuple[isl.PwAff, isl.PwAff]:
    """The parametric minimum and maximum of dimension ``k`` of ``s``."""
    return s.dim_min(k), s.dim_max(k)


def intersect_params(a: isl.Set, b: isl.Set) -> isl.Set:
    """``a ∩ b`` for two sets whose parameters may differ: each is first aligned to the
    other's parameters (``a``'s first, then ``b``'s new ones), then intersected."""
    a = a.align_params(b.get_space())
    b = b.align_params(a.get_space())
    return a.intersect(b)


def param_id(ctx: isl.Context, name: str) -> isl.Id:
    """The isl id of parameter ``name`` as the parser makes it.

    ``isl.Id(name)`` from islpy carries a user pointer, so isl treats it as a different
    parameter from one named ``name`` in parsed text; always take parameter ids from
    here."""
    space = isl.Set.read_from_str(ctx, f"[{name}] -> {{ : }}").get_space()
    return space.get_dim_id(isl.dim_type.param, 0)


_CTX: isl.Context | None = None


def context() -> isl.Context:
    """polycomp's isl context: tile loops count tiles (unit stride, not scaled), point
    loops are shifted to start at 0."""
    global _CTX
    if _CTX is None:
        _CTX = isl.Context()
        _CTX.set_tile_scale_tile_loops(0)
        _CTX.set_tile_shift_point_loops(1)
    return _CTX


def pieces(pw) -> list:
    """The (domain set, affine) pieces of a PwAff or PwMultiAff."""
    out = []
    pw.foreach_piece(lambda s, a: out.append((s, a)))
    return out
