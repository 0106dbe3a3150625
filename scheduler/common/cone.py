"""The dependence cone of a loop nest, and the schedule hyperplanes read off it.

Pluto finds time-tiling hyperplanes with an ILP over all statements; isl's scheduler
does the same search (and takes about 10 s on heat-3d's four loops).  For the nests
this module serves — stencils under a time loop, and loop bands whose every member
carries a dependence — the answer is small and can be read off the *distance set*
directly: every dependence is mapped into one coordinate space shared by the nest's
statements, its distance vectors ``Δ = E(b) - E(a)`` form an isl set (parametric,
possibly non-uniform), and a hyperplane ``h`` is legal for a purpose exactly when
``{Δ : h·Δ < bound}`` is empty.  Candidates are small non-negative integer vectors,
tried in order of their sum (Pluto's cost: the smaller the skew, the shorter the reuse
distances), so a search is a few dozen isl emptiness tests (milliseconds).

* :func:`embedding` / :class:`NestSpace`: the statements of a nest under a shared
  outer (time) loop ``t``, each ``S[t, x]`` mapped to ``[t, z_1 .. z_D]`` with ``z_S``
  the subscripts of the statement's write (so ``ey[0][j] = ..`` of fdtd-2d sits on row
  0 of the arrays the other statements write), or its space iterators padded with
  leading zeros when the write does not give ``D`` injective subscripts;
* :func:`distance_set` / :func:`pair_distances`: the distance vectors of a dependence
  relation under an embedding (one isl set, or one per pair of statements);
* :func:`skew_band`: a fully permutable band ``(t, y_1 .. y_D)``, ``y_d = z_d +
  Σ_{e<d} c_{d,e}·(t, z)_e + o_d[S]``, with every distance component ``>= 0``: for each
  row the coefficients are tried by increasing sum, and for each the statement
  offsets ``o_d`` (Pluto's scalar shifts) are the difference constraints ``o[S'] - o[S]
  >= -min(row·Δ)`` over the pairs ``S -> S'``, solved as longest paths (none when a
  cycle is positive); lower triangular with a unit diagonal, so each statement's map
  stays injective;
* :func:`diamond_row`: the mirror ``h- = c·t - z_1 + o[S]`` of the first space row,
  when every dependence lies inside the cone ``|Δz_1| <= c·Δt`` (Pluto's diamond tiles
  with concurrent start);
* :func:`wavefront` : a hyperplane ``h >= 0`` with ``h·Δ >= 1`` for every distance —
  it carries every dependence, so all instances with equal ``h·v`` are independent
  (the GPU wavefront of a band whose every member carries a dependence: seidel-2d's
  ``4t + 2i + j``).

Nothing here changes a schedule; the passes that use the rows check their result with
:func:`~polycomp.scheduler.common.tree.violated_dependences`.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import islpy as isl

from polycomp.islutil import maps, sets

#: largest coefficient tried in a hyperplane (stencils need 1 or 2; seidel's wavefront 4)
MAX_COEFF = 4


@dataclass(frozen=True)
class NestSpace:
    """The shared coordinate space of a nest's statements: ``embed`` maps each
    statement instance ``S[t, x]`` to ``[t, z_1 .. z_D]`` (``dims`` = D; ``order`` = the
    statements' names in textual order)."""
    embed: isl.UnionMap
    dims: int
    order: tuple[str, ...]
    aligned: tuple[str, ...]   # statements whose ``z`` are their write's subscripts


def _var(space: isl.Space, d: int) -> isl.Aff:
    return isl.Aff.var_on_domain(isl.LocalSpace.from_space(space), isl.dim_type.set, d)


def _write_alignment(stmt, dims: int) -> list[isl.Aff] | None:
    """The write's subscripts as affine functions of ``S``'s iterators, when the
    written array has ``dims`` dimensions, no subscript uses the time iterator and the
    map from the space iterators to the subscripts is injective on the domain."""
    if len(stmt.writes) != 1:
        return None
    rel = stmt.writes[0].relation
    if rel.dim(isl.dim_type.out) != dims:
        return None
    try:
        pma = isl.PwMultiAff.from_map(rel)
    except isl.Error:
        return None
    if pma.n_piece() != 1:
        return None
    affs: list[isl.Aff] = []
    pma.foreach_piece(lambda _s, ma: affs.extend(ma.get_at(k) for k in range(dims)))
    if any(not a.get_coefficient_val(isl.dim_type.in_, 0).is_zero() for a in affs):
        return None                      # a subscript uses the time loop
    # injective for each time step: S[t, x] -> [t, subscripts]
    t = isl.Map.from_aff(_var(stmt.domain.get_space(), 0))
    if not rel.intersect_domain(stmt.domain).range_product(t).is_injective():
        return None
    return affs


def embedding(stmts: list) -> NestSpace | None:
    """The :class:`NestSpace` of ``stmts`` (in textual order; dimension 0 of every
    domain is the shared time loop), or None when a statement has no space loop."""
    if not stmts or any(s.domain.dim(isl.dim_type.set) < 2 for s in stmts):
        return None
    dims = max(s.domain.dim(isl.dim_type.set) - 1 for s in stmts)
    embed: isl.UnionMap | None = None
    aligned = []
    for s in stmts:
        sp = s.domain.get_space()
        n = sp.dim(isl.dim_type.set) - 1
        zs = _write_alignment(s, dims)
        if zs is None:
            zero = isl.Aff.zero_on_domain(isl.LocalSpace.from_space(sp))
            zs = [zero] * (dims - n) + [_var(sp, 1 + d) for d in range(n)]
        else:
            aligned.append(s.name)
        out = isl.Space.set_alloc(sp.get_ctx(), 0, 1 + dims).align_params(sp)
        ma_space = isl.Space.map_from_domain_and_range(sp, out)
        lst = isl.AffList.alloc(sp.get_ctx(), 1 + dims)
        for a in [_var(sp, 0)] + zs:
            lst = lst.add(a)
        ma = isl.MultiAff.from_aff_list(ma_space, lst)
        um = isl.UnionMap.from_map(isl.Map.from_multi_aff(ma).intersect_domain(s.domain))
        embed = um if embed is None else embed.union(um)
    assert embed is not None
    return NestSpace(embed, dims, tuple(s.name for s in stmts), tuple(aligned))


def _embedded(deps: isl.UnionMap, embed: isl.UnionMap) -> isl.UnionMap:
    dom = embed.domain()
    return deps.intersect_domain(dom).intersect_range(dom)


def distance_set(deps: isl.UnionMap, embed: isl.UnionMap) -> isl.Set | None:
    """``{ E(b) - E(a) : a -> b in deps }`` for an embedding ``E`` into one
    anonymous space (None when ``deps`` is empty on the embedded statements)."""
    rel = _embedded(deps, embed).apply_domain(embed).apply_range(embed)
    ms = maps(rel)
    if not ms:
        return None
    out = ms[0].deltas()
    for m in ms[1:]:
        out = out.union(m.deltas())
    return out.coalesce()


def pair_distances(deps: isl.UnionMap, embed: isl.UnionMap) -> dict[tuple[str, str], isl.Set]:
    """The distance set of the dependences from statement ``S`` to statement ``S'``,
    per pair ``(S, S')`` (as :func:`distance_set`, one set per pair)."""
    out: dict[tuple[str, str], isl.Set] = {}
    for m in maps(_embedded(deps, embed)):
        key = (m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out))
        um = isl.UnionMap.from_map(m).apply_domain(embed).apply_range(embed)
        for x in maps(um):
            d = x.deltas()
            out[key] = d if key not in out else out[key].union(d)
    return {k: v.coalesce() for k, v in out.items()}


def _violates(deltas: isl.Set, coeffs: tuple[int, ...], bound: int) -> bool:
    """Is there a distance ``Δ`` with ``coeffs·Δ < bound``?"""
    return _min(deltas, coeffs) < bound


def _min(deltas: isl.Set, coeffs: tuple[int, ...]) -> float:
    """The smallest ``coeffs·Δ`` over the distances (parameters included; ``-inf``
    when unbounded, ``+inf`` when there is none)."""
    sp = deltas.get_space()
    aff = isl.Aff.zero_on_domain(isl.LocalSpace.from_space(sp))
    for k, c in enumerate(coeffs):
        if c:
            aff = aff.set_coefficient_val(isl.dim_type.in_, k,
                                          isl.Val.int_from_si(sp.get_ctx(), c))
    v = deltas.min_val(aff)
    if v.is_nan():
        return float("inf")
    if v.is_neginfty():
        return float("-inf")
    if v.is_infty():
        return float("inf")
    return v.to_python()


def nonnegative(deltas: isl.Set, d: int) -> bool:
    """Is component ``d`` of every distance ``>= 0``?"""
    coeffs = tuple(1 if k == d else 0 for k in range(deltas.dim(isl.dim_type.set)))
    return not _violates(deltas, coeffs, 0)


def _candidates(free: int, max_coeff: int):
    """Non-negative integer vectors of length ``free``, by increasing sum."""
    vecs = itertools.product(range(max_coeff + 1), repeat=free)
    return sorted(vecs, key=lambda v: (sum(v), [-x for x in v]))


@dataclass(frozen=True)
class SkewRow:
    """One member of a skewed band over ``[t, z_1 .. z_D]``: ``coeffs·(t, z) +
    offset[S]`` for statement ``S`` (the statement shifts that align the statements of
    one time step, Pluto's scalar shifts)."""
    coeffs: tuple[int, ...]
    offsets: tuple[tuple[str, int], ...]

    def offset(self, name: str) -> int:
        return dict(self.offsets).get(name, 0)


def _shifts(pairs: dict, names: tuple[str, ...], row: tuple[int, ...]) -> dict | None:
    """Smallest non-negative statement offsets ``o`` with ``row·Δ + o[S'] - o[S] >= 0``
    for the distances ``Δ`` of every pair ``S -> S'`` (difference constraints, solved
    as longest paths), or None when there are none (a positive cycle, or a pair with
    unbounded negative ``row·Δ``)."""
    need: dict[tuple[str, str], float] = {}
    for (a, b), d in pairs.items():
        lo = _min(d, row)
        if lo == float("inf"):
            continue
        if lo == float("-inf"):
            return None
        if a == b:
            if lo < 0:
                return None
            continue
        need[(a, b)] = max(need.get((a, b), float("-inf")), -lo)   # o[b] - o[a] >= -lo
    o = {n: 0 for n in names}
    for _ in range(len(names) + 1):
        changed = False
        for (a, b), w in need.items():
            if o[b] < o[a] + w:
                o[b] = int(o[a] + w)
                changed = True
        if not changed:
            base = min(o.values())
            return {n: v - base for n, v in o.items()}
    return None


def skew_band(pairs: dict, names: tuple[str, ...], dims: int,
              max_coeff: int = MAX_COEFF) -> list[SkewRow] | None:
    """A fully permutable band over ``[t, z_1 .. z_D]`` (``dims`` = D) for the pair
    distances ``pairs`` (:func:`pair_distances`): row 0 is ``t`` (None unless every
    distance has ``Δt >= 0``); row ``d`` is ``z_d + Σ_{e<d} c_e·(t, z)_e + o_d[S]``
    with the smallest coefficients (by sum) for which statement offsets exist that
    make every distance of the row ``>= 0`` (:func:`_shifts`).  Lower triangular with
    a unit diagonal: each statement's map stays injective.  None when some row has no
    such coefficients up to ``max_coeff``."""
    n = dims + 1
    first = tuple(1 if k == 0 else 0 for k in range(n))
    if any(_min(d, first) < 0 for d in pairs.values()):
        return None
    rows = [SkewRow(first, ())]
    for d in range(1, n):
        for c in _candidates(d, max_coeff):
            row = tuple(c) + (1,) + (0,) * (n - d - 1)
            o = _shifts(pairs, names, row)
            if o is not None:
                rows.append(SkewRow(row, tuple(sorted((k, v) for k, v in o.items() if v))))
                break
        else:
            return None
    return rows


def diamond_row(pairs: dict, names: tuple[str, ...], rows: list[SkewRow],
                max_coeff: int = MAX_COEFF) -> SkewRow | None:
    """The mirror image ``h- = c·t - z_1 + o[S]`` of the first space row of a
    :func:`skew_band` (``h+ = rows[1] = c+·t + z_1 + o+[S]``): the smallest ``c >= 1``
    for which statement offsets make every distance of ``h-`` non-negative, or None.

    With both rows, the tiles ``floor(h+ / s), floor(h- / s)`` are Pluto's diamonds
    (Bandishti et al., SC 2012): ``h+ + h- = (c+ + c)·t`` plus statement offsets is
    parallel to the time axis, so the tiles of one wavefront ``T+ + T-`` lie side by
    side along ``z_1`` and all of the first wavefront start together (concurrent
    start), where the parallelogram tiles of ``(t, y_1)`` start one after the other.
    ``h-`` needs every dependence inside the cone ``|Δz_1| <= c·Δt``: a dependence
    within one time step along ``z_1`` (seidel-2d's in-place ``A[i-1][j]``) leaves no
    such row."""
    if len(rows) < 2 or any(rows[1].coeffs[2:]):
        return None
    n = len(rows[1].coeffs)
    for c in range(1, max_coeff + 1):
        row = (c, -1) + (0,) * (n - 2)
        o = _shifts(pairs, names, row)
        if o is not None:
            return SkewRow(row, tuple(sorted((k, v) for k, v in o.items() if v)))
    return None


def skew_rows(deltas: isl.Set, max_coeff: int = MAX_COEFF) -> list[tuple[int, ...]] | None:
    """:func:`skew_band` of one distance set without statement offsets (a single
    statement, or distances already in one space): the rows' coefficients."""
    n = deltas.dim(isl.dim_type.set)
    rows = skew_band({("S", "S"): deltas}, ("S",), n - 1, max_coeff)
    return None if rows is None else [r.coeffs for r in rows]


def wavefront(deltas: isl.Set, max_coeff: int = MAX_COEFF) -> tuple[int, ...] | None:
    """A hyperplane ``h`` (non-negative integers, smallest sum first, some coefficient
    equal to 1 so that dropping that member keeps the band unimodular) with ``h·Δ >=
    1`` for every distance ``Δ``, or None."""
    n = deltas.dim(isl.dim_type.set)
    for c in _candidates(n, max_coeff):
        if 1 not in c:
            continue
        if not _violates(deltas, tuple(c), 1):
            return tuple(c)
    return None


def band_members(space: NestSpace, rows: list[SkewRow]) -> list[isl.UnionPwAff]:
    """The band members ``row·E(S) + offset[S]`` of the rows, as UnionPwAffs over the
    embedded statements' domains."""
    per_stmt = {m.get_tuple_name(isl.dim_type.in_): m for m in maps(space.embed)}
    out = []
    for row in rows:
        parts = []
        for name in space.order:
            m = per_stmt[name]
            ma = isl.PwMultiAff.from_map(m)
            acc = None
            for k, c in enumerate(row.coeffs):
                if c == 0:
                    continue
                x = ma.get_pw_aff(k)
                term = x if c == 1 else x.scale_val(isl.Val.int_from_si(x.get_ctx(), c))
                acc = term if acc is None else acc.add(term)
            assert acc is not None, "a row has a unit diagonal"
            off = row.offset(name)
            if off:
                acc = acc.add_constant_val(isl.Val.int_from_si(acc.get_ctx(), off))
            parts.append(isl.UnionPwAff.from_pw_aff(acc.intersect_domain(m.domain())))
        u = parts[0]
        for p in parts[1:]:
            u = u.union_add(p)
        out.append(u)
    return out


def statements_of(us: isl.UnionSet) -> list[str]:
    return [s.get_tuple_name() for s in sets(us)]
