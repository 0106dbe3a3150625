"""The dependence cone (scheduler/common/cone.py): distance sets of a stencil's
statements in one shared space, the skewed band and statement shifts read off them,
and the wavefront hyperplane; checked on PolyBench-shaped C stencils against hand-derived
rows and, for every band built, against the model's dependences (isl: every distance
``>= 0`` on every member, a fully permutable band)."""
from __future__ import annotations

import islpy as isl
import pytest

from polycomp.frontend.c_reader import read_c_kernel
from polycomp.scheduler.common.cone import (
    SkewRow,
    band_members,
    diamond_row,
    distance_set,
    embedding,
    nonnegative,
    pair_distances,
    skew_band,
    skew_rows,
    wavefront,
)

SEIDEL9 = """
void seidel9(int tsteps, int n, double A[n][n]) {
  for (int t = 0; t <= tsteps - 1; t++)
    for (int i = 1; i <= n - 2; i++)
      for (int j = 1; j <= n - 2; j++)
        A[i][j] = (A[i-1][j-1] + A[i-1][j] + A[i-1][j+1] + A[i][j-1] + A[i][j]
                   + A[i][j+1] + A[i+1][j-1] + A[i+1][j] + A[i+1][j+1]) / 9.0;
}
"""

JACOBI1D = """
void jacobi1d(int tsteps, int n, double A[n], double B[n]) {
  for (int t = 0; t < tsteps; t++) {
    for (int i = 1; i < n - 1; i++)
      B[i] = 0.33333 * (A[i-1] + A[i] + A[i + 1]);
    for (int i = 1; i < n - 1; i++)
      A[i] = 0.33333 * (B[i-1] + B[i] + B[i + 1]);
  }
}
"""

# a boundary row written at row 0 of the arrays the other statements write (fdtd-2d)
FDTD = """
void fdtd(int tmax, int nx, int ny, double ex[nx][ny], double ey[nx][ny],
          double hz[nx][ny], double fict[tmax]) {
  for (int t = 0; t < tmax; t++) {
    for (int j = 0; j < ny; j++)
      ey[0][j] = fict[t];
    for (int i = 1; i < nx; i++)
      for (int j = 0; j < ny; j++)
        ey[i][j] = ey[i][j] - 0.5 * (hz[i][j] - hz[i-1][j]);
    for (int i = 0; i < nx; i++)
      for (int j = 1; j < ny; j++)
        ex[i][j] = ex[i][j] - 0.5 * (hz[i][j] - hz[i][j-1]);
    for (int i = 0; i < nx - 1; i++)
      for (int j = 0; j < ny - 1; j++)
        hz[i][j] = hz[i][j] - 0.7 * (ex[i][j+1] - ex[i][j] + ey[i+1][j] - ey[i][j]);
  }
}
"""


def model_of(src: str):
    return read_c_kernel(src).polyhedral_model()


def cone(src: str):
    m = model_of(src)
    space = embedding(list(m.statements))
    assert space is not None
    return m, space, pair_distances(m.dependences, space.embed)


def band_is_permutable(m, space, rows) -> bool:
    """Is every dependence's distance ``>= 0`` on every member of the rows' band (isl:
    the dependences mapped through each member, their deltas in ``{ [x] : x >= 0 }``)?"""
    for u in band_members(space, rows):
        um = isl.UnionMap.from_union_pw_aff(u)
        deps = m.dependences.intersect_domain(um.domain()).intersect_range(um.domain())
        d = isl.Set.from_union_set(deps.apply_domain(um).apply_range(um).deltas())
        if not d.is_subset(isl.Set.read_from_str(d.get_ctx(), "{ [x] : x >= 0 }")
                           .align_params(d.get_space())):
            return False
    return True


def test_jacobi1d_rows_and_shift():
    """``B = f(A)`` then ``A = f(B)``: the second statement is shifted by one so both
    rows have non-negative distances: ``(t, 2t + i)`` and ``(t, 2t + i + 1)``."""
    m, space, pairs = cone(JACOBI1D)
    assert space.dims == 1 and space.order == ("S_0", "S_1")
    rows = skew_band(pairs, space.order, space.dims)
    assert rows == [SkewRow((1, 0), ()), SkewRow((2, 1), (("S_1", 1),))]
    assert band_is_permutable(m, space, rows)
    # without the statement shift, no slope makes both directions non-negative
    d = distance_set(m.dependences, space.embed)
    assert d is not None and nonnegative(d, 0) and not nonnegative(d, 1)


def test_seidel9_rows_and_wavefront():
    """PolyBench's seidel-2d: ``(t, t + i, 2t + i + j)``; every member carries a
    dependence, and ``4t + 2i + j`` is the smallest hyperplane carrying all of them."""
    m, space, pairs = cone(SEIDEL9)
    assert space.aligned == ("S_0",)
    rows = skew_band(pairs, space.order, space.dims)
    assert [r.coeffs for r in rows] == [(1, 0, 0), (1, 1, 0), (2, 1, 1)]
    assert all(not r.offsets for r in rows)
    assert band_is_permutable(m, space, rows)
    d = distance_set(m.dependences, space.embed)
    assert skew_rows(d) == [(1, 0, 0), (1, 1, 0), (2, 1, 1)]
    assert wavefront(d) == (4, 2, 1)
    assert wavefront(d, max_coeff=3) is None


def test_fdtd_boundary_row_is_aligned_by_its_write():
    """``ey[0][j]`` sits on row 0 of the shared space (its write's subscripts), not on
    padded zeros of its own loops; the update of ``hz`` is shifted by one."""
    m, space, pairs = cone(FDTD)
    assert space.dims == 2 and set(space.aligned) == {"S_0", "S_1", "S_2", "S_3"}
    rows = skew_band(pairs, space.order, space.dims)
    assert [r.coeffs for r in rows] == [(1, 0, 0), (1, 1, 0), (1, 0, 1)]
    assert [r.offsets for r in rows[1:]] == [(("S_3", 1),), (("S_3", 1),)]
    assert band_is_permutable(m, space, rows)


@pytest.mark.parametrize("src,plus,minus", [
    (JACOBI1D, SkewRow((2, 1), (("S_1", 1),)), SkewRow((2, -1), (("S_1", 1),))),
    (FDTD, SkewRow((1, 1, 0), (("S_3", 1),)), SkewRow((1, -1, 0), ())),
])
def test_diamond_row_mirrors_the_first_space_row(src, plus, minus):
    """Pluto's diamonds: ``h- = c·t - z1 + o[S]`` beside ``h+ = y1``; both have
    non-negative distances for every dependence (isl), and ``h+ + h-`` is a multiple
    of ``t`` up to statement offsets (the tiles of a wavefront start together)."""
    m, space, pairs = cone(src)
    rows = skew_band(pairs, space.order, space.dims)
    assert rows[1] == plus
    got = diamond_row(pairs, space.order, rows)
    assert got == minus
    assert band_is_permutable(m, space, [rows[0], got])
    assert all(a + b == 0 for a, b in zip(plus.coeffs[1:], got.coeffs[1:]))


def test_no_diamond_for_seidel():
    """seidel-2d updates in place: ``A[i-1][j]`` of the same time step is a distance
    ``(0, 1, .)``, outside every cone ``|dz1| <= c·dt``; no ``h-`` exists (the
    parallelogram band stays)."""
    m, space, pairs = cone(SEIDEL9)
    rows = skew_band(pairs, space.order, space.dims)
    assert diamond_row(pairs, space.order, rows) is None


@pytest.mark.parametrize("deltas,expect", [
    ("{ [t, i] : t = 1 and -1 <= i <= 1 }", [(1, 0), (1, 1)]),
    ("{ [t, i] : t = 1 and -3 <= i <= 0 }", [(1, 0), (3, 1)]),
    ("{ [t, i] : t = 0 and i = 1 }", [(1, 0), (0, 1)]),
    ("{ [t, i] : t = -1 and i = 0 }", None),            # time runs backwards
    ("[n] -> { [t, i] : t = 1 and i = -n and n > 0 }", None),   # no bounded slope
    ("{ [t, i] : t = 1 and i = -5 }", None),            # slope beyond MAX_COEFF
])
def test_skew_rows_of_distance_sets(deltas, expect):
    assert skew_rows(isl.Set(deltas)) == expect


def test_shifts_fail_on_a_positive_cycle():
    """``S -> T`` needs ``o[T] >= o[S] + 1`` and ``T -> S`` needs ``o[S] >= o[T] + 1``:
    no offsets exist, so no band (the member would have to be skewed by time)."""
    ctx = isl.Context()
    one = isl.Set.read_from_str(ctx, "{ [t, i] : t = 0 and i = -1 }")
    pairs = {("S", "T"): one, ("T", "S"): one}
    assert skew_band(pairs, ("S", "T"), 1, max_coeff=0) is None
    rows = skew_band(pairs, ("S", "T"), 1)     # a time slope is not enough either: t = 0
    assert rows is None
