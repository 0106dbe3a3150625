"""``scop-split`` (scheduler/cpu/scop_split.py: index-set splitting that makes the
pieces of a loop parallel), ``scop-interleave`` (scheduler/cpu/scop_interleave.py:
recurrences below a parallel loop run a strip of its iterations innermost) and the
vectoriser's reductions whose accumulator's array is read elsewhere in the loop
(trisolv's ``x[i] -= L[i][j] * x[j]``, j < i).

Checked against the same C built by ``gcc -O0 -ffp-contract=off``: integers exactly
(default options and ``fp_exact``), the sweeps bitwise under ``fp_exact``, the vector
reduction to 1e-12 relative; golden trees for both passes; the loop reading its own
accumulator is left scalar.
"""
from __future__ import annotations

import numpy as np
import pytest
from test_c_scop_schedule import TARGET, check_golden_pass, gcc_o0, kernel, run_gcc

from polycomp.driver import build, compile_kernel
from polycomp.scheduler.cpu.scop_interleave import ScopInterleavePass
from polycomp.scheduler.cpu.scop_split import ScopSplitPass, split_tree
from polycomp.scheduler.cpu.scop_tile import ScopTilePass


def _floyd_data(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = rng.integers(-50, 1000, size=(n, n)).astype(np.int32)
    p.flat[::7] = 2**31 - 5          # sums that wrap (int32 addition modulo 2^32)
    return p


@pytest.mark.parametrize("n", [1, 2, 37])
@pytest.mark.parametrize("options", [{}, {"fp_exact": True}], ids=["default", "exact"])
def test_floyd_pieces_match_gcc_o0(n, options, tmp_path_factory):
    k = kernel("floyd_like")
    path = _floyd_data(n, seed=n)
    ref = run_gcc("floyd_like", gcc_o0("floyd_like", tmp_path_factory), {"n": n},
                  {"path": path})["path"]
    got = build(k, TARGET, options)(path.copy(), n=n)
    got = got[0] if isinstance(got, tuple) else got
    assert np.array_equal(got, ref)


def test_floyd_split_makes_row_and_column_pieces_parallel():
    """Rows ``i < k`` and ``i > k`` become OpenMP loops; the row ``i = k`` does not fork
    (one loop: too little work)."""
    notes = compile_kernel(kernel("floyd_like"), TARGET).notes
    split = notes["scop-split"]
    assert len(split) == 4 and all("index-set split" in x for x in split), split
    par = notes["scop-parallel"]
    assert par == ["parallel (OpenMP): loop at depth 1 of S_0"] * 2, par


@pytest.mark.parametrize("name,before,under_test", [
    ("floyd_like", [], ScopSplitPass),
    ("sweep_like", [ScopTilePass], ScopInterleavePass),
], ids=["floyd_like", "sweep_like"])
def test_golden_tree(name, before, under_test, goldens):
    sched, out = check_golden_pass(name, before, under_test, f"test_c_scop_split/{name}",
                                   goldens)
    # the rewritten tree schedules the same instances
    assert out.get_domain().is_equal(sched.get_domain())


@pytest.mark.parametrize("n", [1, 2, 37, 70])
@pytest.mark.parametrize("options", [{}, {"fp_exact": True}], ids=["default", "exact"])
def test_sweeps_match_gcc_o0(n, options, tmp_path_factory):
    """Strips of 32 rows side by side (one partial strip at 37 and 70, rows from 1):
    every element by the C nest's operations in its order, bitwise under fp_exact."""
    k = kernel("sweep_like")
    rng = np.random.default_rng(n)
    u = rng.uniform(-1, 1, size=(n, n))
    u.flat[u.size // 2] = np.nan
    p = np.zeros((n, n))
    y = np.zeros((n, n))
    ref = run_gcc("sweep_like", gcc_o0("sweep_like", tmp_path_factory), {"n": n},
                  {"u": u, "p": p, "y": y})
    got = build(k, TARGET, options)(u, p.copy(), y.copy(), n=n)
    for g, name in zip(got, ("p", "y")):
        w = ref[name]
        assert np.array_equal(np.isnan(g), np.isnan(w)), name
        ok = ~np.isnan(w)
        if options:
            assert np.array_equal(g[ok].view(np.uint64), w[ok].view(np.uint64)), name
        else:
            np.testing.assert_allclose(g[ok], w[ok], rtol=1e-12, atol=0, err_msg=name)


def test_interleave_only_the_row_recurrence():
    """The row sweep (a division chain along ``j`` below the parallel ``i``) is
    interleaved; the column recurrence was already tiled by scop-tile with the unit-stride
    columns innermost (vector code), and is left alone."""
    notes = compile_kernel(kernel("sweep_like"), TARGET).notes
    assert notes["scop-interleave"] == [
        "recurrence below a parallel loop: loop at depth 0 strip-mined by 32, the strip "
        "innermost"], notes


def test_no_split_where_no_piece_is_parallel():
    """trisolv's row loop carries ``x[j]`` (read by every later row): no split point
    makes the pieces parallel, so the tree is unchanged."""
    model = kernel("trisolv_like").polyhedral_model()
    out, done = split_tree(model.initial_schedule, model.dependences)
    assert done == [] and out.plain_is_equal(model.initial_schedule)


def _solve_data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    L = rng.uniform(-1, 1, size=(n, n)) + np.eye(n) * n
    return L, rng.uniform(-1, 1, size=n)


@pytest.mark.parametrize("n", [1, 9, 67])
def test_trisolv_reduction_is_vectorised(n, tmp_path_factory):
    k = kernel("trisolv_like")
    L, b = _solve_data(n, seed=n)
    x0 = np.full(n, np.nan)
    ref = run_gcc("trisolv_like", gcc_o0("trisolv_like", tmp_path_factory), {"n": n},
                  {"L": L, "b": b, "x": x0})["x"]
    got = build(k, TARGET)(L, b, x0.copy(), n=n)
    got = got[0] if isinstance(got, tuple) else got
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)


def test_trisolv_source_has_a_vector_accumulator():
    src = compile_kernel(kernel("trisolv_like"), TARGET).source
    assert "vacc" in src and "_mm512_fmadd_pd(pc512_neg_pd(" in src


def test_accumulator_read_inside_its_range_stays_scalar(tmp_path_factory):
    """``x[i] -= L[i][j] * x[j]`` over every ``j`` reads ``x[i]`` at ``j = i``: not a
    reduction the vectoriser may reorder; the result is gcc -O0's."""
    k = kernel("selfrow_like")
    assert "vacc" not in compile_kernel(k, TARGET).source
    n = 13
    L, x = _solve_data(n, seed=3)
    ref = run_gcc("selfrow_like", gcc_o0("selfrow_like", tmp_path_factory), {"n": n},
                  {"L": L, "x": x})["x"]
    got = build(k, TARGET)(L, x.copy(), n=n)
    got = got[0] if isinstance(got, tuple) else got
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)
