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


def union_all(items, space: isl.Space) -> isl.UnionMap:
    """The union of the maps or union maps ``items`` (an empty union map of ``space``
    when there are none).  Pairwise, so that no union is copied once per item: a chain
    ``u = u.union(m)`` copies the growing ``u`` each time (islpy never hands isl its
    last reference), quadratic in the number of maps."""
    us = [isl.UnionMap.from_map(x) if isinstance(x, isl.Map) else x for x in items]
    if not us:
        return isl.UnionMap.empty(space)
    while len(us) > 1:
        us = [us[k].union(us[k + 1]) if k + 1 < len(us) else us[k]
              for k in range(0, len(us), 2)]
    return us[0]


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


def intersect_all_params(parts) -> isl.Set | None:
    """``parts[0] ∩ parts[1] ∩ ...`` by :func:`intersect_params`, left to right (the
    parameters in the order the parts introduce them); None for no parts."""
    out = None
    for p in parts:
        out = p if out is None else intersect_params(out, p)
    return out


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


# --------------------------------------------------------------------------- dependences


def tuple_names(us: isl.UnionSet) -> set[str]:
    """The tuple names of the sets of a union set (statement names of a domain)."""
    return {s.get_tuple_name() for s in sets(us)}


class StatementDependences:
    """A dependence relation split by source statement, so that the dependences among a
    few statements are found without visiting all of them: a test per loop of a
    program of ``n`` loop nests then costs what that loop's statements need, not
    ``O(n)`` maps each (quadratic in the program: 300 nests of ``A[i] = A[i] * c``)."""

    def __init__(self, deps: isl.UnionMap):
        self.deps = deps
        self.space = deps.get_space()
        self.by_source: dict[str, list[tuple[str, isl.Map]]] = {}
        for m in maps(deps):
            src = m.get_tuple_name(isl.dim_type.in_)
            dst = m.get_tuple_name(isl.dim_type.out)
            self.by_source.setdefault(src, []).append((dst, m))

    def between(self, sources: set[str], sinks: set[str]) -> isl.UnionMap:
        """The dependences from a statement in ``sources`` to one in ``sinks``."""
        return union_all([m for src in sources for dst, m in self.by_source.get(src, ())
                          if dst in sinks], self.space)

    def among(self, names: set[str]) -> isl.UnionMap:
        """The dependences whose source and sink are both statements in ``names``."""
        return union_all([m for src in names for dst, m in self.by_source.get(src, ())
                          if dst in names], self.space)


def statement_maps(f: isl.UnionMap) -> dict[str, isl.Map]:
    """The map of each statement (domain tuple name) of a schedule-like union map
    (several range spaces of one statement are united after flattening)."""
    out: dict[str, isl.Map] = {}
    for m in maps(f):
        name = m.get_tuple_name(isl.dim_type.in_)
        m = m.flatten_range()
        out[name] = m if name not in out else out[name].union(m)
    return out


def _aligned(a: isl.Map, b: isl.Map) -> tuple[isl.Map, isl.Map]:
    a = a.align_params(b.get_space())
    return a, b.align_params(a.get_space())


def _per_dependence(deps: isl.UnionMap, f):
    """``(dependence map, f of its source, f of its sink)`` for each map of ``deps``
    whose two statements ``f`` schedules (the others drop out, as in a composition);
    ``f`` is a union map or its :func:`statement_maps`."""
    per = f if isinstance(f, dict) else statement_maps(f)
    for m in maps(deps):
        fs = per.get(m.get_tuple_name(isl.dim_type.in_))
        ft = per.get(m.get_tuple_name(isl.dim_type.out))
        if fs is not None and ft is not None:
            yield m, fs, ft


def restrict_equal(deps: isl.UnionMap, f) -> isl.UnionMap:
    """The dependences ``x -> y`` of ``deps`` with ``f(x) = f(y)`` (endpoints that ``f``
    does not schedule drop out).

    Decisions about dependence distances are made on the dependence relations
    themselves (intersections and emptiness tests), never by composing them with the
    schedule (``deps.apply_domain(f).apply_range(f).deltas()``): that composition
    eliminates variables of a relation of twice the statement's dimension, which for
    some dependences is exponential in the loop depth -- the last-writer relation of
    ``B[0] += A[0]`` under ``d`` nested 2-trip loops is one polytope whose constraints
    encode a binary counter (``d = 8``: 0.4 s per loop, ``d = 10``: minutes).  Adding
    the equalities ``f(x) = f(y)`` (the composition of ``f`` with its inverse, per pair
    of statements) keeps it a plain intersection."""
    out = []
    for m, fs, ft in _per_dependence(deps, f):
        same = fs.apply_range(ft.reverse())
        m, same = _aligned(m, same)
        out.append(m.intersect(same))
    return union_all(out, deps.get_space())


def some_differ(deps: isl.UnionMap, f, decreasing_only: bool = False) -> bool:
    """Is there a dependence ``x -> y`` of ``deps`` with ``f(x) != f(y)`` (with
    ``decreasing_only``: ``f(x) >lex f(y)``, a negative distance)?  Emptiness tests on
    each dependence map intersected with ``f(x) <lex f(y)`` and ``f(x) >lex f(y)``
    (see :func:`restrict_equal`)."""
    for m, fs, ft in _per_dependence(deps, f):
        if fs.dim(isl.dim_type.out) == 0:
            continue
        orders = [fs.lex_gt_map(ft)] if decreasing_only else [fs.lex_lt_map(ft),
                                                               fs.lex_gt_map(ft)]
        for order in orders:
            mm, order = _aligned(m, order)
            if not mm.intersect(order).is_empty():
                return True
    return False


def project_range(f: isl.UnionMap, first: int, n: int) -> isl.UnionMap:
    """``f`` with range dimensions ``first .. first + n - 1`` only (flattened ranges)."""
    out = []
    for m in maps(f):
        m = m.flatten_range()
        total = m.dim(isl.dim_type.out)
        m = m.project_out(isl.dim_type.out, first + n, total - first - n)
        out.append(m.project_out(isl.dim_type.out, 0, first))
    return union_all(out, f.get_space())
