"""Carried windows of the CPU vectoriser (``lowering/vectorize.py``, ``_carries``; option
``vector_window``, AVX-512): in an aligned-row loop, a row read at ``X[b + k]`` beside
``X[b]`` (``0 < |k| < L``) that no store of the loop touches is read from vectors kept
in registers across iterations (one new load per iteration, lane shifts for the
neighbours).  The proof that the loop stores nothing of the carried row works on the
indices as polynomials (a store row a whole loop span away); elsewhere the row keeps
its loads.  Values and their operation order per element are unchanged, so the
results are bitwise the C order's (fdtd-2d's ``hz`` update contracted into one FMA,
replayed exactly here)."""
from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from avx512_runs import AVX512_RUNS, load_avx512, view_past_line

from polycomp import ir
from polycomp.driver import compile_kernel
from polycomp.frontend.c_reader import load_c_kernels, read_c_kernels
from polycomp.hw.cpu.simd_build import has_native_avx512
from polycomp.lowering.vectorize import vectorize_loop

KERNELS = Path(__file__).parent / "c_scop_kernels"


def _row_loop(store_row, extent):
    """``for j in [1, 1 + extent): Y[r*ny + j] = X[r*ny + j] - X[r*ny + j - 1];
    X[store_row*ny + j] = 2 * X[store_row*ny + j]`` (flat float64 buffers)."""
    r, ny, j = (ir.Var(n, "int64") for n in ("r", "ny", "j"))
    X, Y = (ir.Buffer(n, "float64", (ir.IntImm(1 << 20),), flat=True) for n in "XY")
    row = r * ny + j
    srow = store_row(r) * ny + j
    body = ir.seq(
        ir.Store(Y, (row,), ir.Load(X, (row,), "float64") - ir.Load(X, (row - 1,), "float64")),
        ir.Store(X, (srow,), ir.FloatImm(2.0, "float64") * ir.Load(X, (srow,), "float64")))
    return ir.For(j, ir.IntImm(1), extent(ny), "serial", body, (("coincident", True),))


def _windowed_and_plain(k, valign: str, jammed: bool = False):
    """``k`` built with small time tiles, with carried windows (checked: ``vwin``
    registers and the ``valign`` intrinsic in its C; with ``jammed``, two time steps per
    row pass, ``hw/cpu/jam.py``) and without ``vector_window`` (one step per pass)."""
    ck = compile_kernel(k, "cpu-avx512", {"stencil_tiles": (4,)})
    assert "vwin" in ck.source and valign in ck.source
    assert ("c2_u" in ck.source) == jammed
    plain = compile_kernel(k, "cpu-avx512", {"stencil_tiles": (4,), "vector_window": False})
    return load_avx512(ck), load_avx512(plain)


@pytest.mark.parametrize("store_row, extent, carried", [
    (lambda r: r - 1, lambda ny: ny - 2, True),    # fdtd-2d's hz: stores the row above
    (lambda r: r + 1, lambda ny: ny - 1, True),    # the row below, the loop a row short
    (lambda r: r + 1, lambda ny: ny + 1, False),   # a loop longer than the row gap
    (lambda r: r * 2, lambda ny: ny - 2, False),   # a row not a constant number of rows off
    (lambda r: r - 1, lambda ny: ny * 2, False),   # the loop spans two rows
])
def test_carried_row_needs_a_proof_that_the_loop_stores_none_of_it(store_row, extent, carried):
    out = vectorize_loop(_row_loop(store_row, extent), lambda d: 8, window=True)
    assert out is not None
    text = str(out)
    assert ("vector_carried" in text) == carried, text
    assert "vector_aligned" in text, text


def _fma(a, b, c):
    """``round(a * b + c)`` once, elementwise (IEEE fma; NaN where an input is NaN)."""
    out = np.empty_like(c)
    for i in np.ndindex(c.shape):
        x, y, z = float(a[i]), float(b[i]), float(c[i])
        out[i] = np.nan if np.isnan([x, y, z]).any() else \
            float(Fraction(x) * Fraction(y) + Fraction(z))
    return out


def _fdtd2d_reference(ex, ey, hz, fict):
    """fdtd2d_like in the C nest's order; ``hz``'s ``hz - 0.7 * t`` as one FMA as the
    build contracts it (``ey``'s and ``ex``'s ``0.5 * d`` are exact, so their FMAs
    round as the two operations do)."""
    ex, ey, hz = ex.copy(), ey.copy(), hz.copy()
    for f in fict:
        ey[0, :] = f
        ey[1:, :] = ey[1:, :] - 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] = ex[:, 1:] - 0.5 * (hz[:, 1:] - hz[:, :-1])
        t = ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1]
        hz[:-1, :-1] = _fma(np.full_like(t, -0.7), t, hz[:-1, :-1])
    return ex, ey, hz


def _jacobi2d_reference(A, B, tsteps):
    A, B = A.copy(), B.copy()
    for _ in range(tsteps):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1]
                               + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1]
                               + B[:-2, 1:-1])
    return A, B


def _same_bits(got, want, what):
    assert np.array_equal(np.isnan(got), np.isnan(want)), what
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint64), want[ok].view(np.uint64)), what


def _native() -> bool:
    return has_native_avx512() and os.environ.get("POLYCOMP_TEST_SIMDE") != "1"


@AVX512_RUNS
def test_fdtd2d_carried_windows_are_bitwise_the_c_order():
    """Rows of 4 to 6 full vectors (the carried loop runs) and shorter than a vector,
    odd sizes, the three arrays at different alignments, a NaN; two time steps per row
    pass (``stencil-jam``: its stored-row windows too): bitwise the build without
    windows (one step per pass), and natively
    bitwise the C order's replay (SIMDe's ``-O1`` build leaves the scalar boundary
    points' ``hz`` update uncontracted, so there only the vector builds agree)."""
    k, = load_c_kernels(str(KERNELS / "fdtd2d_like.c"))
    fn, plain = _windowed_and_plain(k, "pc512_valign_pd(", jammed=True)
    rng = np.random.default_rng(5)
    for (tmax, nx, ny), shifts in (((5, 7, 45), (0, 2, 5)), ((4, 6, 53), (7, 1, 3)),
                                   ((2, 4, 37), (4, 4, 4)), ((4, 5, 6), (1, 0, 2))):
        fict = rng.uniform(-1, 1, tmax)
        fields = [rng.uniform(-1, 1, (nx, ny)) for _ in range(3)]
        fields[2][nx // 2, ny // 2] = np.nan
        ex, ey, hz = (view_past_line(a, s) for a, s in zip(fields, shifts))
        fn(fict, ex, ey, hz, tmax=tmax, nx=nx, ny=ny, out=(ex, ey, hz))
        px, py, pz = (a.copy() for a in fields)
        plain(fict, px, py, pz, tmax=tmax, nx=nx, ny=ny, out=(px, py, pz))
        for g, w, name in zip((ex, ey, hz), (px, py, pz), "xyz"):
            _same_bits(g, w, (tmax, nx, ny, name, "plain"))
        want = _fdtd2d_reference(*fields, fict)
        for g, w, name in zip((ex, ey, hz), want, "xyz"):
            if _native():
                _same_bits(g, w, (tmax, nx, ny, name))
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, equal_nan=True)


@AVX512_RUNS
def test_jacobi2d_carried_windows_are_bitwise_the_c_order():
    """jacobi-2d's row of ``A`` (``j - 1, j, j + 1``) carried while ``B``'s row above
    is stored: bitwise the C order's replay at odd sizes and alignments, with a NaN."""
    k, = load_c_kernels(str(KERNELS / "jacobi2d_like.c"))
    ck = compile_kernel(k, "cpu-avx512", {"stencil_tiles": (4,)})
    assert "vwin" in ck.source
    fn = load_avx512(ck)
    rng = np.random.default_rng(7)
    for (tsteps, n), shifts in (((3, 43), (0, 3)), ((2, 50), (5, 2))):
        A0, B0 = (rng.uniform(-1, 1, (n, n)) for _ in range(2))
        A0[n // 2, n // 3] = np.nan
        A, B = (view_past_line(a, s) for a, s in zip((A0, B0), shifts))
        fn(A, B, tsteps=tsteps, n=n, out=(A, B))
        for g, w, name in zip((A, B), _jacobi2d_reference(A0, B0, tsteps), "AB"):
            _same_bits(g, w, (tsteps, n, name))


@AVX512_RUNS
def test_float32_carried_windows_match_the_plain_form():
    """float32 (16 lanes, ``valignd``): jacobi2d_like in ``float`` with ``0.2f``, rows
    of 2-4 full vectors, misaligned, a NaN: bitwise the build without windows."""
    src = (KERNELS / "jacobi2d_like.c").read_text().replace("double", "float") \
        .replace("0.2 *", "0.2f *")
    k, = read_c_kernels(src)
    fn, plain = _windowed_and_plain(k, "pc512_valign_ps(")
    rng = np.random.default_rng(11)
    for tsteps, n in ((3, 67), (2, 41)):
        A0, B0 = (rng.uniform(-1, 1, (n, n)).astype(np.float32) for _ in range(2))
        A0[n // 3, n // 2] = np.nan
        A, B = (view_past_line(a, s) for a, s in zip((A0, B0), (3, 9)))
        fn(A, B, tsteps=tsteps, n=n, out=(A, B))
        pa, pb = A0.copy(), B0.copy()
        plain(pa, pb, tsteps=tsteps, n=n, out=(pa, pb))
        for g, w in ((A, pa), (B, pb)):
            assert np.array_equal(np.isnan(g), np.isnan(w)), (tsteps, n)
            ok = ~np.isnan(w)
            assert np.array_equal(g[ok].view(np.uint32), w[ok].view(np.uint32)), (tsteps, n)
