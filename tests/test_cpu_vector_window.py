"""Aligned sliding windows of the CPU vectoriser (``lowering/vectorize.py``,
:func:`~polycomp.lowering.vectorize.window_loads`; option ``vector_window``, AVX-512).

A vector loop whose loads overlap (``X[i-1]``, ``X[i]``, ``X[i+1]``) starts at a store
aligned at run time (a masked head of ``0 <= p < L`` lanes) and reads the shifted loads
as lane shifts (``valignq``/``valignd``) of aligned loads.  The values and the order of
operations per element are unchanged, so these kernels (no product to contract, no
reduction) are bitwise the C nest's result for every alignment of the arrays and every
extent (shorter than a vector, a head only, a head and a tail).  ``fp_exact`` builds
have no vector code, so the PolyBench bitwise checks do not reach this one: these
tests compare vector builds with a numpy replay of the C order."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from avx512_runs import AVX512_RUNS, load_avx512, view_past_line

from polycomp import ir
from polycomp.driver import compile_kernel
from polycomp.frontend.c_reader import load_c_kernels, read_c_kernels
from polycomp.hw.cpu.simd_build import has_native_avx512
from polycomp.lowering.simplify import simplify
from polycomp.lowering.vectorize import ALIGN_PEEL, VALIGN, window_loads

KERNELS = Path(__file__).parent / "c_scop_kernels"
NATIVE = pytest.mark.skipif(not has_native_avx512(), reason="hardware: no AVX-512")

F32_STENCIL = """
void blur1(int n, float x[n], float y[n]) {
  int i;
#pragma scop
  for (i = 2; i < n - 2; i++)
    y[i] = (x[i-2] + x[i-1] + x[i] + x[i+1] + x[i+2]) * 0.2f;
#pragma endscop
}
"""


def _jacobi1d():
    k, = load_c_kernels(str(KERNELS / "jacobi1d_like.c"))
    return k


def _reference(A, B, tsteps):
    """PolyBench's jacobi-1d in the C nest's order of operations (numpy, IEEE)."""
    A, B = A.copy(), B.copy()
    c = np.float64(0.33333)
    for _ in range(tsteps):
        B[1:-1] = c * ((A[:-2] + A[1:-1]) + A[2:])
        A[1:-1] = c * ((B[:-2] + B[1:-1]) + B[2:])
    return A, B


def _check_jacobi1d(fn, rng, shift: int, cases, nan_from: int) -> None:
    """Run jacobi-1d's build ``fn`` at each ``(n, tsteps)`` of ``cases`` on arrays at
    different alignments (B ``shift`` elements past a 64-byte boundary, A one more), a
    NaN in A from ``n >= nan_from``: bitwise the C order's result, NaN where it is."""
    for n, tsteps in cases:
        A0, B0 = rng.uniform(0.5, 1.5, n), rng.uniform(0.5, 1.5, n)
        if n >= nan_from:
            A0[n // 3] = np.nan
        A, B = view_past_line(A0, shift + 1), view_past_line(B0, shift)
        fn(A, B, tsteps=tsteps, n=n, out=(A, B))
        wa, wb = _reference(A0, B0, tsteps)
        for g, w in ((A, wa), (B, wb)):
            assert np.array_equal(np.isnan(g), np.isnan(w)), (n, tsteps)
            ok = ~np.isnan(w)
            assert np.array_equal(g[ok].view(np.uint64), w[ok].view(np.uint64)), (n, tsteps)


def test_window_reads_shifted_loads_as_lane_shifts():
    """The IR rewrite alone: loads at offsets -1 and +1 of the anchor become ``valign`` of
    loads at multiples of ``L``; a load of a buffer without one at a multiple stays."""
    x = ir.Buffer("x", "float64", (ir.IntImm(64),))
    z = ir.Buffer("z", "float64", (ir.IntImm(64),))
    y = ir.Buffer("y", "float64", (ir.IntImm(64),))
    a = ir.Var("a")

    def ld(buf, k):
        return ir.Load(buf, (ir.Ramp(a + k, ir.IntImm(1), 8),), "float64", 8)
    body = ir.Store(y, (ir.Ramp(a, ir.IntImm(1), 8),),
                    ld(x, -1) + ld(x, 0) + ld(x, 9) + ld(z, 1), 8)
    out, n = window_loads(body, a, 8, "float64")
    assert n == 2
    calls = []
    ir.walk(out, lambda e: calls.append(e) if isinstance(e, ir.Call) else None)
    shifts = sorted(c.args[2].value for c in calls if c.name == VALIGN)
    assert shifts == [1, 7]
    offsets = set()
    ir.walk(out, lambda e: offsets.add((e.buffer.name,
                                        simplify(e.indices[0].base - a).value))
            if isinstance(e, ir.Load) else None)
    assert offsets == {("x", -8), ("x", 0), ("x", 8), ("x", 16), ("z", 1)}  # z: no anchor


def test_jacobi1d_uses_windows_only_with_the_option(goldens):
    """The option decides; AVX2 has no windows (its only lane shifts are the lifted
    layout's seams, below).  Golden: the ``vectorize`` pass on
    jacobi-1d's tiled rows, IR in and out (the aligned head, the windows, the tail)."""
    k = _jacobi1d()
    ck = compile_kernel(k, "cpu-avx512", {"vector_lift": False}, dump=True)
    recs = ck.records
    q = next(i for i, r in enumerate(recs) if r.name == "vectorize")
    for part, text in (("in", recs[q - 1].tree), ("out", recs[q].tree)):
        expected = goldens.expected(f"test_cpu_vector_window/jacobi1d.vectorize.{part}.ir",
                                    text)
        assert expected == text.strip(), f"{part}:\n{text}"
    on = ck.source
    off = compile_kernel(k, "cpu-avx512", {"vector_window": False, "vector_lift": False}).source
    body = on[on.index("void jacobi1d_like("):]
    assert body.count("pc512_valign_pd(") == 4 and "c3_pl" in body
    assert "valign" not in off[off.index("void jacobi1d_like("):] and "_pl" not in off
    avx2 = compile_kernel(k, "cpu-avx2", {"vector_lift": False}).source  # no windows
    assert "valign" not in avx2[avx2.index("void jacobi1d_like("):]


@AVX512_RUNS
@pytest.mark.parametrize("shift", [0, 3])
def test_jacobi1d_windows_are_bitwise_at_any_alignment(shift):
    """Extents below, at and above a vector, both arrays at the same and at different
    alignments (``shift``: B's start past a 64-byte boundary, A's one more), the tiles
    small so that rows start at many alignments; a NaN spreads alike."""
    k = _jacobi1d()
    ck = compile_kernel(k, "cpu-avx512", {"stencil_tiles": (5, 23)})
    assert "pc512_valign_pd(" in ck.source
    fn = load_avx512(ck)
    rng = np.random.default_rng(shift)
    _check_jacobi1d(fn, rng, shift, ((3, 2), (7, 3), (9, 4), (17, 5), (41, 7), (130, 9)),
                    nan_from=9)


@AVX512_RUNS
def test_float32_five_point_window_is_bitwise():
    """float32 (``valignd``, 16 lanes), offsets -2 .. +2, extents around a vector."""
    k, = read_c_kernels(F32_STENCIL)
    ck = compile_kernel(k, "cpu-avx512")
    assert "pc512_valign_ps(" in ck.source and ALIGN_PEEL not in ck.source
    fn = load_avx512(ck)
    rng = np.random.default_rng(5)
    for n in (4, 5, 16, 19, 21, 37, 100):
        x = view_past_line(rng.uniform(-1, 1, n).astype(np.float32), 1)
        y = view_past_line(np.zeros(n, np.float32), 6)
        got = fn(x, y, n=n, out=y)
        w = np.zeros(n, np.float32)
        w[2:-2] = ((((x[:-4] + x[1:-3]) + x[2:-2]) + x[3:-1]) + x[4:]) * np.float32(0.2)
        assert np.array_equal(got[2:-2].view(np.uint32), w[2:-2].view(np.uint32)), n


@NATIVE
def test_windows_read_nothing_outside_the_arrays(tmp_path):
    """Under ASan (buffers of their exact size, malloc's 16-byte alignment, so stores and
    loads are misaligned against 64 bytes): a window's aligned loads reach up to ``L -
    1`` elements past the plain load, and the head's extra vector and the tail's keep
    them inside the elements the loop reads anyway.  Results bitwise as well."""
    from polycomp.hw.cpu.sanitize import build_sanitized, run_sanitized_many
    k, = read_c_kernels(F32_STENCIL)
    ck = compile_kernel(k, "cpu-avx512")
    assert "pc512_valign_ps(" in ck.source
    exe = build_sanitized(ck.final_ir, ck.source, str(tmp_path / "blur1"))
    rng = np.random.default_rng(2)
    xs = [rng.uniform(-1, 1, n).astype(np.float32) for n in (5, 17, 33, 48, 50, 81, 203)]
    runs = run_sanitized_many(exe, ck.final_ir, [[x, np.zeros_like(x)] for x in xs])
    for x, run in zip(xs, runs):
        w = ((((x[:-4] + x[1:-3]) + x[2:-2]) + x[3:-1]) + x[4:]) * np.float32(0.2)
        got, = run.outputs
        assert np.array_equal(got[2:-2].view(np.uint32), w.view(np.uint32)), x.size


# ------------------------------------------------------------------- the lifted layout

F32_HEAT = """
void heat1(int T, int n, float u[n], float v[n]) {
  int t, i;
#pragma scop
  for (t = 0; t < T; t++) {
    for (i = 1; i < n - 1; i++)
      v[i] = u[i] + 0.25f * (u[i-1] - 2.0f * u[i] + u[i+1]);
    for (i = 2; i < n - 2; i++)
      u[i] = -v[i];
  }
#pragma endscop
}
"""

RADIUS2 = """
void wide1(int T, int n, double a[n], double b[n]) {
  int t, i;
#pragma scop
  for (t = 0; t < T; t++) {
    for (i = 2; i < n - 2; i++)
      b[i] = a[i-2] + a[i+2];
    for (i = 2; i < n - 2; i++)
      a[i] = b[i];
  }
#pragma endscop
}
"""

#: in place: ``a[i-1]`` is this sweep's new value, so its iterations are not independent
SEIDEL1 = """
void seidel1(int T, int n, double a[n]) {
  int t, i;
#pragma scop
  for (t = 0; t < T; t++)
    for (i = 1; i < n - 1; i++)
      a[i] = (a[i-1] + a[i] + a[i+1]) / 3.0;
#pragma endscop
}
"""


def test_jacobi1d_runs_on_the_lifted_layout(goldens):
    """Golden: the ``lift`` pass on jacobi-1d's time loop (the branch up to 2048
    elements; the time tiles beyond), IR in and out (the transposed copies, per sweep
    the masked seams with their rotated vectors around plain aligned vectors, the copy
    back, the nest as it was below the run-time guard).  Off with
    ``vector_lift=False``, for a radius above 1 and for an in-place sweep (AVX2:
    :func:`test_jacobi1d_runs_lifted_on_avx2`)."""
    k = _jacobi1d()
    ck = compile_kernel(k, "cpu-avx512", dump=True)
    recs = ck.records
    q = next(i for i, r in enumerate(recs) if r.name == "lift")
    for part, text in (("in", recs[q - 1].tree), ("out", recs[q].tree)):
        expected = goldens.expected(f"test_cpu_vector_window/jacobi1d.lift.{part}.ir", text)
        assert expected == text.strip(), f"{part}:\n{text}"
    assert any("lifted layout" in x for x in ck.notes["scop-stencil"])
    assert ck.notes["lift"] == ["time loop c0: 2 sweep(s) over A, B on the lifted layout "
                                "(8 lanes of ceil(n/8) elements; the nest as it was up to "
                                "n = 72)"], ck.notes["lift"]
    off = compile_kernel(k, "cpu-avx512", {"vector_lift": False})
    assert "_lift" not in off.source and "time-tiled" in "".join(off.notes["scop-stencil"])
    for text in (RADIUS2, SEIDEL1):
        other, = read_c_kernels(text)
        assert "_lift" not in compile_kernel(other, "cpu-avx512").source


@AVX512_RUNS
@pytest.mark.parametrize("shift", [0, 3])
def test_lifted_jacobi1d_is_bitwise(shift):
    """Extents below the guard (the nest as it was), at it (``M = 10``), odd and prime
    ones with every padding ``8M - n`` from 0 to 7, the largest lifted one (2048: the
    arrays fill L1) and the first time-tiled one past it, arrays at different
    alignments; a NaN spreads alike: bitwise the C order's result."""
    k = _jacobi1d()
    ck = compile_kernel(k, "cpu-avx512")
    assert "A_lift" in ck.source
    fn = load_avx512(ck)
    rng = np.random.default_rng(shift)
    _check_jacobi1d(fn, rng, shift, ((5, 2), (72, 3), (73, 3), (80, 4), (83, 5), (86, 1),
                                     (131, 6), (1031, 7), (2048, 3), (2049, 3)), nan_from=0)


@AVX512_RUNS
def test_lifted_float32_sweeps_are_bitwise():
    """float32 (16 lanes, guard ``M >= 18``), sweeps with different ranges (``[1, n-1)``
    and ``[2, n-2)``), a negation and a constant: bitwise the C order's result."""
    k, = read_c_kernels(F32_HEAT)
    ck = compile_kernel(k, "cpu-avx512")
    assert "u_lift" in ck.source and "pc512_valign_ps(" in ck.source
    _check_f32_heat(load_avx512(ck), ((40, 3), (273, 4), (290, 5), (517, 3)), seed=9)


def _check_f32_heat(fn, sizes, seed: int) -> None:
    """Run ``F32_HEAT``'s built kernel ``fn`` on misaligned arrays for each ``(n, T)``
    and compare bitwise with numpy's replay of the C order."""
    rng = np.random.default_rng(seed)
    f = np.float32
    for n, T in sizes:
        u0, v0 = rng.uniform(-1, 1, n).astype(f), rng.uniform(-1, 1, n).astype(f)
        u, v = view_past_line(u0, 2), view_past_line(v0, 5)
        fn(u, v, T=T, n=n, out=(u, v))
        wu, wv = u0.copy(), v0.copy()
        for _ in range(T):
            wv[1:-1] = wu[1:-1] + f(0.25) * ((wu[:-2] - f(2.0) * wu[1:-1]) + wu[2:])
            wu[2:-2] = -wv[2:-2]
        assert np.array_equal(u.view(np.uint32), wu.view(np.uint32)), n
        assert np.array_equal(v.view(np.uint32), wv.view(np.uint32)), n


# ------------------------------------------------------- the lifted layout on AVX2

KERNEL_C = KERNELS / "jacobi1d_like.c"


def test_jacobi1d_runs_lifted_on_avx2(goldens, monkeypatch):
    """Golden: the ``lift`` pass on AVX2 (4 doubles a vector, the guard ``M >= 6``,
    seams rotated by ``pc256_valign_pd``): the partial vectors read their operands by
    whole loads bound before the blend (``A_new``/``A_old``: no ``vmaskmovpd``).
    ``POLYCOMP_LIFT_AVX2=0`` gives the time tiles back on AVX2 and leaves AVX-512
    lifted."""
    k = _jacobi1d()
    ck = compile_kernel(k, "cpu-avx2", dump=True)
    recs = ck.records
    q = next(i for i, r in enumerate(recs) if r.name == "lift")
    for part, text in (("in", recs[q - 1].tree), ("out", recs[q].tree)):
        expected = goldens.expected(f"test_cpu_vector_window/jacobi1d_avx2.lift.{part}.ir",
                                    text)
        assert expected == text.strip(), f"{part}:\n{text}"
    assert ck.notes["lift"] == ["time loop c0: 2 sweep(s) over A, B on the lifted layout "
                                "(4 lanes of ceil(n/4) elements; the nest as it was up to "
                                "n = 20)"], ck.notes["lift"]
    body = ck.source[ck.source.index("void jacobi1d_like("):]
    assert body.count("pc256_valign_pd(") == 4 and "maskz_loadu" not in body.split(
        "} else {")[0]                                  # the lifted branch: whole loads
    monkeypatch.setenv("POLYCOMP_LIFT_AVX2", "0")
    off = compile_kernel(k, "cpu-avx2")
    assert "_lift" not in off.source and "lift" not in [r.name for r in off.records]
    assert "time-tiled" in "".join(off.notes["scop-stencil"])
    assert "A_lift" in compile_kernel(k, "cpu-avx512").source


def _gcc_o0_jacobi1d(tmp_path):
    import ctypes
    import subprocess
    so = tmp_path / "jacobi1d_o0.so"
    subprocess.run(["gcc", "-O0", "-ffp-contract=off", "-fPIC", "-shared", "-o", str(so),
                    str(KERNEL_C)], check=True)
    f = ctypes.CDLL(str(so)).jacobi1d_like
    f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    f.restype = None

    def run(A, B, tsteps):
        A, B = A.copy(), B.copy()
        f(tsteps, A.size, A.ctypes.data, B.ctypes.data)
        return A, B
    return run


def test_lifted_jacobi1d_avx2_is_bitwise_gcc_o0(tmp_path):
    """The AVX2 build (native: 4 doubles a vector; the default options, which
    ``polycomp bench polybench`` times: ``fp_exact`` builds are scalar) against the C
    nest built by ``gcc
    -O0``: n = 1, 2, 3 and 5 (no sweep or below the guard: the nest as it was), 20 / 21
    (the guard ``M >= 6``), 22 .. 24 (every padding ``4M - n``), PolyBench's MINI (30,
    20 steps), primes (31, 97, 1031), 2048 (the largest lifted: the arrays fill L1) and
    2049 (time-tiled); arrays at different alignments, a NaN and a huge value spreading
    alike: bitwise, NaNs in the same places."""
    k = _jacobi1d()
    ck = compile_kernel(k, "cpu-avx2")
    assert "A_lift" in ck.source and "pc256_valign_pd(" in ck.source
    fn = ck.backend.load(ck)
    ref = _gcc_o0_jacobi1d(tmp_path)
    rng = np.random.default_rng(11)
    for n, tsteps in ((1, 3), (2, 3), (3, 4), (5, 2), (20, 5), (21, 5), (22, 6), (23, 7),
                      (24, 3), (30, 20), (31, 9), (97, 11), (1031, 7), (2048, 3), (2049, 3)):
        A0, B0 = rng.uniform(0.5, 1.5, n), rng.uniform(0.5, 1.5, n)
        if n >= 5:
            A0[n // 3], B0[n // 2] = np.nan, 1e300
        A, B = view_past_line(A0, n % 4 + 1), view_past_line(B0, n % 3)
        fn(A, B, tsteps=tsteps, n=n, out=(A, B))
        for g, w in zip((A, B), ref(A0, B0, tsteps)):
            assert np.array_equal(np.isnan(g), np.isnan(w)), (n, tsteps)
            ok = ~np.isnan(w)
            assert np.array_equal(g[ok].view(np.uint64), w[ok].view(np.uint64)), (n, tsteps)


FIVE_STEPS = """
void jac5(int n, double A[n], double B[n]) {
  int t, i;
#pragma scop
  for (t = 0; t < 5; t++) {
    for (i = 1; i < n - 1; i++)
      B[i] = 0.33333 * (A[i-1] + A[i] + A[i + 1]);
    for (i = 1; i < n - 1; i++)
      A[i] = 0.33333 * (B[i-1] + B[i] + B[i + 1]);
  }
#pragma endscop
}
"""


def test_lifted_avx2_reads_nothing_outside_the_arrays(tmp_path):
    """Under ASan (buffers of their exact size): the AVX2 partial vectors' whole loads
    stay inside the lifted copies (``4M`` elements, zeros past ``n``), the copies read
    and write only ``[0, n)``: around the guard (n = 20, 21) and at every padding
    ``4M - n``.  Results bitwise the C order's (numpy replay)."""
    from polycomp.hw.cpu.sanitize import build_sanitized, run_sanitized_many
    k, = read_c_kernels(FIVE_STEPS)
    ck = compile_kernel(k, "cpu-avx2")
    assert "A_lift" in ck.source and "pc256_valign_pd(" in ck.source
    exe = build_sanitized(ck.final_ir, ck.source, str(tmp_path / "jac5"))
    rng = np.random.default_rng(8)
    calls = [[rng.uniform(0.5, 1.5, n), rng.uniform(0.5, 1.5, n)]
             for n in (3, 20, 21, 22, 23, 24, 97)]
    runs = run_sanitized_many(exe, ck.final_ir, [[a.copy() for a in c] for c in calls])
    for (A, B), run in zip(calls, runs):
        for _ in range(5):
            B[1:-1] = 0.33333 * ((A[:-2] + A[1:-1]) + A[2:])
            A[1:-1] = 0.33333 * ((B[:-2] + B[1:-1]) + B[2:])
        for g, w in zip(run.outputs, (A, B)):
            assert np.array_equal(g.view(np.uint64), w.view(np.uint64)), A.size


def test_lifted_float32_sweeps_avx2_are_bitwise():
    """float32 on AVX2 (8 lanes, ``pc256_valign_ps``, guard ``M >= 11``): sweeps with
    different ranges, a negation and a constant, below and above the guard and at
    every padding class: bitwise the C order's result (numpy replay)."""
    k, = read_c_kernels(F32_HEAT)
    ck = compile_kernel(k, "cpu-avx2")
    assert "u_lift" in ck.source and "pc256_valign_ps(" in ck.source
    _check_f32_heat(ck.backend.load(ck),
                    ((40, 3), (81, 2), (83, 4), (89, 5), (97, 3), (290, 5), (517, 3)), seed=4)


def test_avx2_valign_every_shift(tmp_path):
    """The AVX2 prelude's ``pc256_valign_pd/ps(hi, lo, r)`` (``vperm2i128`` +
    ``vpalignr``) for every ``r`` in ``[0, L)``, ``hi`` and ``lo`` different: lane ``i``
    is element ``i + r`` of ``lo`` then ``hi`` (AVX-512's ``valignq``/``valignd``)."""
    import ctypes
    import subprocess

    from polycomp.hw.cpu.vector_prelude import _AVX2_VALIGN
    shifts_pd = "".join(f"  _mm256_storeu_pd(o + {4 * r}, pc256_valign_pd(h, l, {r}));\n"
                        for r in range(4))
    shifts_ps = "".join(f"  _mm256_storeu_ps(p + {8 * r}, pc256_valign_ps(g, k, {r}));\n"
                        for r in range(8))
    src = tmp_path / "valign.c"
    src.write_text("#include <immintrin.h>\n" + _AVX2_VALIGN +
                   "void run(const double* x, double* o, const float* y, float* p) {\n"
                   "  __m256d l = _mm256_loadu_pd(x), h = _mm256_loadu_pd(x + 4);\n"
                   "  __m256 k = _mm256_loadu_ps(y), g = _mm256_loadu_ps(y + 8);\n"
                   + shifts_pd + shifts_ps + "}\n")
    so = tmp_path / "valign.so"
    subprocess.run(["gcc", "-O2", "-mavx2", "-fPIC", "-shared", "-o", str(so), str(src)],
                   check=True)
    run = ctypes.CDLL(str(so)).run
    x, y = np.arange(8, dtype=np.float64) + 1, np.arange(16, dtype=np.float32) + 1
    o, p = np.zeros(16), np.zeros(64, np.float32)
    run(*(a.ctypes.data_as(ctypes.c_void_p) for a in (x, o, y, p)))
    for r in range(4):
        assert np.array_equal(o[4 * r:4 * r + 4], x[r:r + 4]), r
    for r in range(8):
        assert np.array_equal(p[8 * r:8 * r + 8], y[r:r + 8]), r
