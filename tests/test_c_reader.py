"""The C SCoP front end: reading classic affine kernels, their isl model (golden
domains, dependences and schedule trees), end-to-end runs through the C backend and the
interpreter against numpy, the CUDA path (interpreted + nvcc), and the error paths."""
import subprocess

import islpy as isl
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from polycomp.driver import build, compile_kernel, interpret
from polycomp.errors import (
    DTypeError,
    NonAffineIndexError,
    PolycompError,
    ShapeMismatchError,
    UnknownSymbolError,
    UnsupportedConstructError,
)
from polycomp.frontend.c_reader import (
    CKernel,
    CParseError,
    load_c_kernel,
    load_c_kernels,
    read_c_kernel,
    read_c_kernels,
)
from polycomp.hw.target import get_target
from polycomp.lowering.interpreter import run_func
from polycomp.scheduler.common.program_order import ProgramOrderPass
from polycomp.scheduler.common.tree import tree_str
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.state import CompileState

# --------------------------------------------------------------------------- kernels

GEMM = r"""
#include <math.h>
void gemm(int N, int M, int K, float C[restrict N][M],
          const float A[restrict N][K], const float B[restrict K][M]) {
  int i;
#pragma scop
  for (i = 0; i < N; i++)
    for (int j = 0; j < M; ++j) {
      C[i][j] *= 0.5f;
      for (int k = 0; k < K; k += 1)
        C[i][j] += A[i][k] * B[k][j];
    }
#pragma endscop
}
"""

MM2 = r"""
void mm2(int NI, int NJ, int NK, int NL, float tmp[NI][NJ], float A[NI][NK],
         float B[NK][NJ], float C[NJ][NL], float D[NI][NL]) {
  for (int i = 0; i < NI; i++)
    for (int j = 0; j < NJ; j++) {
      tmp[i][j] = 0.0f;
      for (int k = 0; k < NK; ++k)
        tmp[i][j] += 1.5f * A[i][k] * B[k][j];
    }
  for (int i = 0; i < NI; i++)
    for (int j = 0; j < NL; j++) {
      D[i][j] *= 1.25f;
      for (int k = 0; k < NJ; ++k)
        D[i][j] += tmp[i][k] * C[k][j];
    }
}
"""

JACOBI1D = r"""
void jacobi1d(int T, int N, double A[N], double B[N]) {
  int t, i;
#pragma scop
  for (t = 0; t < T; t++) {
    for (i = 1; i < N - 1; i++)
      B[i] = 0.33333 * (A[i-1] + A[i] + A[i+1]);
    for (i = 1; i < N - 1; i++)
      A[i] = 0.33333 * (B[i-1] + B[i] + B[i+1]);
  }
#pragma endscop
}
"""

TRMV = r"""
void trmv(int N, float L[N][N], float x[N], float y[N]) {
  for (int i = 0; i < N; i++) {
    y[i] = 0;
    for (int j = 0; j <= i; j++)
      y[i] += L[i][j] * x[j];
  }
}
"""

STENCIL = r"""
void stencil(int N, int M, const float A[N][M], float B[N][M]) {
  for (int i = 0; i < N; i++)
    for (int j = 0; j < M; j++)
      if (i >= 1 && i < N - 1 && j >= 1 && j < M - 1)
        B[i][j] = 0.2f * (A[i][j] + A[i-1][j] + A[i+1][j] + A[i][j-1] + A[i][j+1]);
      else
        B[i][j] = A[i][j];
}
"""

MISC = r"""
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
void misc(int N, float A[N], float B[N], float C[N], float S[N]) {
  for (int i = N - 1; i >= 0; i--)
    B[i] = A[i] > 0 ? A[i] : 0.0f;
  for (int i = 0; i < N; i += 2)
    C[i] = expf(-A[i]) + sqrtf(fabsf(A[i]));
  for (int i = 0; i < MIN(N, 5); i++)
    C[i] += 1;
  for (int i = N - 2; i >= 0; --i)
    S[i] = S[i] + S[i + 1];
  for (int i = MAX(0, N - 3); i < N; i++)
    S[i] = fmaxf(S[i], A[i]) * 2;
}
"""

CLAMP = r"""
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
void clamp(int N, float A[N], float B[N]) {
  for (int i = 0; i < N; i++)
    B[i] = A[MIN(i + 1, N - 1)] - A[MAX(i - 1, 0)] + A[max(i - 2, 0)];
  if (N < 0)
    B[0] = 1;
}
"""


def _gemm_ref(A, B, C):
    return 0.5 * C + A @ B


def _mm2_ref(tmp, A, B, C, D):
    t = 1.5 * (A @ B)
    return t, 1.25 * D + t @ C


def _jacobi_ref(A, B, T):
    A, B = A.copy(), B.copy()
    n = A.shape[0]
    for _ in range(T):
        for i in range(1, n - 1):
            B[i] = 0.33333 * (A[i - 1] + A[i] + A[i + 1])
        for i in range(1, n - 1):
            A[i] = 0.33333 * (B[i - 1] + B[i] + B[i + 1])
    return A, B


def _stencil_ref(A):
    B = A.copy()
    B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[:-2, 1:-1] + A[2:, 1:-1] + A[1:-1, :-2]
                           + A[1:-1, 2:])
    return B


def _misc_ref(A, B, C, S):
    B = np.maximum(A, 0).astype(np.float32)
    C = C.copy()
    C[::2] = np.exp(-A[::2]) + np.sqrt(np.abs(A[::2]))
    C[:min(len(A), 5)] += 1
    S = S.copy()
    for i in range(len(A) - 2, -1, -1):
        S[i] = S[i] + S[i + 1]
    for i in range(max(0, len(A) - 3), len(A)):
        S[i] = max(S[i], A[i]) * 2
    return B, C, S


_CACHE: dict = {}


def kernel(src) -> CKernel:
    if ("k", src) not in _CACHE:
        _CACHE[("k", src)] = read_c_kernel(src)
    return _CACHE[("k", src)]


def runners(src):
    """(compiled C callable, interpreted program-order IR) of a kernel, built once."""
    if ("r", src) not in _CACHE:
        k = kernel(src)
        ck = compile_kernel(k, "c", {"parallel": False})
        _CACHE[("r", src)] = (build(k, "c"), lambda *a, **p: interpret(ck, *a, **p))
    return _CACHE[("r", src)]


SIZES = st.sampled_from([1, 2, 3, 5, 7, 11, 13])


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def close(a, b, tol=1e-4):
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# --------------------------------------------------------------------------- reading


def test_kernel_interface():
    k = kernel(GEMM)
    assert k.name == "gemm"
    assert k.params == ("N", "M", "K")
    assert k.inputs == ("A", "B")
    assert k.outputs == ("C",)          # written (and read): in-out
    k2 = kernel(MM2)
    assert k2.inputs == ("A", "B", "C") and k2.outputs == ("tmp", "D")
    k3 = kernel(JACOBI1D)
    assert k3.inputs == () and k3.outputs == ("A", "B")


def _eq(model, text, what):
    if isinstance(what, isl.Map):
        what = isl.UnionMap.from_map(what)
    got = what.intersect_params(model.context)
    kind = isl.UnionMap if isinstance(what, (isl.UnionMap, isl.Map)) else isl.UnionSet
    want = kind.read_from_str(model.ctx, text)
    want = want.intersect_params(model.context)
    assert got.is_equal(want), f"\n got: {got}\nwant: {want}"


def test_gemm_model_golden():
    m = kernel(GEMM).polyhedral_model()
    assert [s.name for s in m.statements] == ["S_0", "S_1"]
    assert all(s.kind == "assign" for s in m.statements)
    _eq(m, "[N, M, K] -> { S_0[i, j] : 0 <= i < N and 0 <= j < M; "
           "S_1[i, j, k] : 0 <= i < N and 0 <= j < M and 0 <= k < K }", m.domain)
    _eq(m, "[N, M, K] -> { S_0[i, j] -> S_1[i, j, 0] : 0 <= i < N and 0 <= j < M; "
           "S_1[i, j, k] -> S_1[i, j, k + 1] : 0 <= i < N and 0 <= j < M and "
           "0 <= k < K - 1 }", m.flow)
    _eq(m, "[N, M, K] -> { S_0[i, j] -> S_1[i, j, 0] : 0 <= i < N and 0 <= j < M; "
           "S_1[i, j, k] -> S_1[i, j, k + 1] : 0 <= i < N and 0 <= j < M and "
           "0 <= k < K - 1 }", m.output)
    # tagged accesses: one tag per textual reference (reads first, then the write)
    s1 = m.statement("S_1")
    assert [(a.tag, a.kind, a.buffer.name) for a in s1.accesses] == [
        ("S_1_ref0", "read", "C"), ("S_1_ref1", "read", "A"), ("S_1_ref2", "read", "B"),
        ("S_1_ref3", "write", "C")]
    _eq(m, "[N, M, K] -> { [S_1[i, j, k] -> S_1_ref1[]] -> A[i, k] : 0 <= i < N and "
           "0 <= j < M and 0 <= k < K }",
        m.tagged_reads.intersect_domain(isl.UnionSet.read_from_str(
            m.ctx, "{ [S_1[i, j, k] -> S_1_ref1[]] }").universe()))
    # the schedule tree is the loop structure: band(i, j) -> sequence(S_0, band(k))
    root = m.initial_schedule.get_root().child(0)
    assert root.get_type() == isl.schedule_node_type.band
    assert root.band_n_member() == 2 and root.band_get_permutable()
    seq = root.child(0)
    assert seq.get_type() == isl.schedule_node_type.sequence and seq.n_children() == 2
    inner = seq.child(1).child(0)
    assert inner.get_type() == isl.schedule_node_type.band and inner.band_n_member() == 1
    want = isl.UnionMap.read_from_str(
        m.ctx, "{ S_0[i, j] -> [i, j, 0, 0]; S_1[i, j, k] -> [i, j, 1, k] }")
    assert m.initial_schedule.get_map().intersect_domain(m.domain).is_equal(
        want.intersect_domain(m.domain))


def test_triangular_and_if_domains_golden():
    m = kernel(TRMV).polyhedral_model()
    _eq(m, "[N] -> { S_0[i] : 0 <= i < N; S_1[i, j] : 0 <= j <= i < N }", m.domain)
    _eq(m, "[N] -> { S_0[i] -> S_1[i, 0] : 0 <= i < N; "
           "S_1[i, j] -> S_1[i, j + 1] : 0 <= j < i < N }", m.flow)
    m = kernel(STENCIL).polyhedral_model()
    _eq(m, "[N, M] -> { S_0[i, j] : 1 <= i < N - 1 and 1 <= j < M - 1; "
           "S_1[i, j] : 0 <= i < N and 0 <= j < M and (i = 0 or i = N - 1 or j = 0 or "
           "j = M - 1) }", m.domain)
    assert m.flow.is_empty()
    # if/else: the two branches are a sequence under the (i, j) band
    band = m.initial_schedule.get_root().child(0)
    assert band.band_n_member() == 2
    assert band.child(0).get_type() == isl.schedule_node_type.sequence


def test_jacobi_dependences_golden():
    m = kernel(JACOBI1D).polyhedral_model()
    _eq(m, "[T, N] -> { S_0[t, i] : 0 <= t < T and 1 <= i < N - 1; "
           "S_1[t, i] : 0 <= t < T and 1 <= i < N - 1 }", m.domain)
    _eq(m, "[T, N] -> { S_0[t, i] -> S_1[t, i'] : 0 <= t < T and 1 <= i < N - 1 and "
           "1 <= i' < N - 1 and i - 1 <= i' <= i + 1; "
           "S_1[t, i] -> S_0[t + 1, i'] : 0 <= t < T - 1 and 1 <= i < N - 1 and "
           "1 <= i' < N - 1 and i - 1 <= i' <= i + 1 }", m.flow)
    # t band, then sequence of the two i loops (not perfectly nested: no merge)
    root = m.initial_schedule.get_root().child(0)
    assert root.band_n_member() == 1
    assert root.child(0).get_type() == isl.schedule_node_type.sequence


def test_reverse_stride_and_minmax_loops_golden():
    m = kernel(MISC).polyhedral_model()
    _eq(m, "[N] -> { S_0[i] : 0 <= i < N; S_1[i] : 0 <= i < N and i mod 2 = 0; "
           "S_2[i] : 0 <= i < N and i < 5; S_3[i] : 0 <= i <= N - 2; "
           "S_4[i] : N - 3 <= i < N and i >= 0 }", m.domain)
    # the decreasing loops are scheduled by -i: S_3[i+1] runs before S_3[i]
    _eq(m, "[N] -> { S_3[i] -> S_3[i - 1] : 1 <= i <= N - 2 }",
        m.flow.intersect_domain(isl.UnionSet.read_from_str(m.ctx, "[N] -> { S_3[i] }"))
        .intersect_range(isl.UnionSet.read_from_str(m.ctx, "[N] -> { S_3[i] }")))
    # the relu ternary: data-dependent, so both sides are (may-)reads of A
    s0 = m.statement("S_0")
    assert [a.buffer.name for a in s0.reads] == ["A", "A"]


def test_minmax_subscripts_and_empty_domain_golden():
    m = kernel(CLAMP).polyhedral_model()
    s0 = m.statement("S_0")
    _eq(m, "[N] -> { S_0[i] -> A[i + 1] : 0 <= i < N - 1; S_0[i] -> A[N - 1] : "
           "i = N - 1 }", s0.reads[0].relation)
    _eq(m, "[N] -> { S_0[i] -> A[max(i - 2, 0)] : 0 <= i < N }", s0.reads[2].relation)
    assert m.statement("S_1").domain.is_empty()     # if (N < 0) under N >= 1


@given(n=SIZES, seed=st.integers(0, 2**16))
def test_minmax_subscripts_run(n, seed):
    rng = np.random.default_rng(seed)
    A, B = rand(rng, n), rand(rng, n)
    want = np.array([A[min(i + 1, n - 1)] - A[max(i - 1, 0)] + A[max(i - 2, 0)]
                     for i in range(n)], np.float32)
    c_fn, interp = runners(CLAMP)
    close(c_fn(A, B), want)
    close(interp(A, B), want)


def test_program_order_pass_returns_the_c_tree():
    k = kernel(MM2)
    m = k.polyhedral_model()
    out = ProgramOrderPass().run(None, CompileState(m, get_target("c")))
    assert out.plain_is_equal(m.initial_schedule)


def test_load_c_kernels_from_file_with_includes(tmp_path):
    (tmp_path / "sizes.h").write_text("#define SCALE 2.0f\n")
    src = '#include "sizes.h"\n#include <stdio.h>\n' + r"""
static void helper(int n) { }
void scale(int N, float X[N], float Y[N]) {
#pragma scop
  for (int i = 0; i < N; i++)
    Y[i] = SCALE * X[i];
#pragma endscop
}
void shift(int N, float X[N + 1], float Y[N]) {
#pragma scop
  for (int i = 0; i < N; i++)
    Y[i] = X[i + 1];
#pragma endscop
}
"""
    p = tmp_path / "two.c"
    p.write_text(src)
    ks = load_c_kernels(str(p))
    assert [k.name for k in ks] == ["scale", "shift"]       # only the SCoP functions
    X = np.arange(5, dtype=np.float32)
    Y = np.zeros(5, np.float32)
    close(build(ks[0], "c")(X, Y), 2 * X)
    close(build(load_c_kernel(str(p), "shift"), "c")(X, Y[:4], N=4), X[1:])
    with pytest.raises(UnsupportedConstructError, match="2 kernels"):
        load_c_kernel(str(p))


# --------------------------------------------------------------------------- running


@given(n=SIZES, m=SIZES, k=SIZES, seed=st.integers(0, 2**16))
def test_gemm_runs(n, m, k, seed):
    rng = np.random.default_rng(seed)
    A, B, C = rand(rng, n, k), rand(rng, k, m), rand(rng, n, m)
    c_fn, interp = runners(GEMM)
    C0 = C.copy()
    close(c_fn(A, B, C), _gemm_ref(A, B, C))
    close(interp(A, B, C), _gemm_ref(A, B, C))
    assert np.array_equal(C, C0)        # the caller's array is copied, not modified


@given(ni=SIZES, nj=SIZES, nk=SIZES, nl=SIZES, seed=st.integers(0, 2**16))
def test_2mm_runs(ni, nj, nk, nl, seed):
    rng = np.random.default_rng(seed)
    A, B, C = rand(rng, ni, nk), rand(rng, nk, nj), rand(rng, nj, nl)
    tmp, D = rand(rng, ni, nj), rand(rng, ni, nl)
    c_fn, interp = runners(MM2)
    want = _mm2_ref(tmp, A, B, C, D)
    for got in (c_fn(A, B, C, tmp, D), interp(A, B, C, tmp, D)):
        close(got[0], want[0])
        close(got[1], want[1])


@given(t=st.sampled_from([1, 2, 3, 5]), n=SIZES, seed=st.integers(0, 2**16))
def test_jacobi1d_runs(t, n, seed):
    rng = np.random.default_rng(seed)
    A, B = rand(rng, n, dtype=np.float64), rand(rng, n, dtype=np.float64)
    c_fn, interp = runners(JACOBI1D)
    want = _jacobi_ref(A, B, t)
    for got in (c_fn(A, B, T=t), interp(A, B, T=t)):
        close(got[0], want[0], 1e-9)
        close(got[1], want[1], 1e-9)    # B[0], B[N-1] keep the caller's values


@given(n=SIZES, seed=st.integers(0, 2**16))
def test_trmv_runs(n, seed):
    rng = np.random.default_rng(seed)
    L, x, y = rand(rng, n, n), rand(rng, n), rand(rng, n)
    c_fn, interp = runners(TRMV)
    want = np.tril(L) @ x
    close(c_fn(L, x, y), want)
    close(interp(L, x, y), want)


@given(n=SIZES, m=SIZES, seed=st.integers(0, 2**16))
def test_stencil_with_if_runs(n, m, seed):
    rng = np.random.default_rng(seed)
    A, B = rand(rng, n, m), rand(rng, n, m)
    c_fn, interp = runners(STENCIL)
    close(c_fn(A, B), _stencil_ref(A))
    close(interp(A, B), _stencil_ref(A))


@given(n=SIZES, seed=st.integers(0, 2**16))
def test_misc_runs(n, seed):
    rng = np.random.default_rng(seed)
    A, B, C, S = (rand(rng, n) for _ in range(4))
    c_fn, interp = runners(MISC)
    want = _misc_ref(A, B, C, S)
    for got in (c_fn(A, B, C, S), interp(A, B, C, S)):
        for g, w in zip(got, want):
            close(g, w)


@pytest.mark.parametrize("src", [GEMM, MM2, JACOBI1D, TRMV, STENCIL, MISC, CLAMP],
                         ids=["gemm", "2mm", "jacobi1d", "trmv", "stencil", "misc", "clamp"])
@pytest.mark.parametrize("target, options", [
    ("c", {}), ("cpu", {}), ("cuda", {"gpu": "baseline"}),
    # the debug check cannot evaluate trees with extension nodes (promotion's copies):
    # the promoted pipeline is checked by its results below
    ("cuda", {"promote": False})], ids=["c", "cpu", "cuda-baseline", "cuda-tiled"])
def test_passes_keep_dependences(src, target, options):
    # debug mode checks after every pass that all dependences stay satisfied
    compile_kernel(kernel(src), target, options, debug=True)


def _case(name, n):
    """(kernel source, arrays in calling order, reference outputs) at extent ``n``."""
    rng = np.random.default_rng(n)
    r = lambda *s: rand(rng, *s)  # noqa: E731
    if name == "gemm":
        A, B, C = r(n, n + 1), r(n + 1, n + 2), r(n, n + 2)
        return GEMM, (A, B, C), (_gemm_ref(A, B, C),)
    if name == "2mm":
        A, B, C, tmp, D = r(n, n + 1), r(n + 1, n), r(n, n + 2), r(n, n), r(n, n + 2)
        return MM2, (A, B, C, tmp, D), _mm2_ref(tmp, A, B, C, D)
    if name == "jacobi1d":
        A, B = rand(rng, n, dtype=np.float64), rand(rng, n, dtype=np.float64)
        return JACOBI1D, (A, B), _jacobi_ref(A, B, 3)
    if name == "trmv":
        L, x, y = r(n, n), r(n), r(n)
        return TRMV, (L, x, y), (np.tril(L) @ x,)
    if name == "stencil":
        A, B = r(n, n + 3), r(n, n + 3)
        return STENCIL, (A, B), (_stencil_ref(A),)
    if name == "misc":
        args = tuple(r(n) for _ in range(4))
        return MISC, args, _misc_ref(*args)
    A, B = r(n), r(n)
    return CLAMP, (A, B), (np.array([A[min(i + 1, n - 1)] - A[max(i - 1, 0)]
                                     + A[max(i - 2, 0)] for i in range(n)], np.float32),)


@pytest.mark.parametrize("name", ["gemm", "2mm", "jacobi1d", "trmv", "stencil", "misc",
                                  "clamp"])
@pytest.mark.parametrize("options", [{}, {"gpu": "baseline"}], ids=["tiled", "baseline"])
def test_cuda_pipelines_simulated(name, options):
    # (misc's `i < MIN(N, 5)` loop has a single 256-wide tile: isl eliminates its tile
    # loop, which the baseline mapping must tolerate)
    # interpret() runs a CUDA CompiledKernel in the CUDA simulator (or the interpreter)
    ck = None
    for n in (1, 5, 17):
        src, args, want = _case(name, n)
        if ck is None:   # the sizes are parameters: one compile serves the three sizes
            ck = compile_kernel(kernel(src), "cuda", options)
        got = interpret(ck, *args, T=3) if src is JACOBI1D else interpret(ck, *args)
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            close(g, w, 1e-4)


# --------------------------------------------------------------------------- CUDA


@pytest.mark.nvcc
@pytest.mark.parametrize("gpu", ["default", "baseline"])
def test_gemm_cuda_interpreted_and_nvcc(tmp_path, gpu):
    opts = {"gpu": "baseline"} if gpu == "baseline" else {}
    ck = compile_kernel(kernel(GEMM), "cuda", opts, debug=True)
    rng = np.random.default_rng(3)
    A, B, C = rand(rng, 19, 7), rand(rng, 7, 33), rand(rng, 19, 33)
    close(interpret(ck, A, B, C), _gemm_ref(A, B, C))
    assert "__global__" in ck.source
    if gpu == "baseline":   # the (i, j) band is coincident: mapped to blocks/threads
        assert "blockIdx" in ck.source and "threadIdx" in ck.source
    _nvcc(tmp_path, ck.source)


@pytest.mark.nvcc
def test_math_and_reverse_loops_cuda_interpreted_and_nvcc(tmp_path):
    ck = compile_kernel(kernel(MISC), "cuda", debug=True)
    rng = np.random.default_rng(4)
    args = [rand(rng, 9) for _ in range(4)]
    for g, w in zip(interpret(ck, *args), _misc_ref(*args)):
        close(g, w)
    _nvcc(tmp_path, ck.source)


def _nvcc(tmp_path, source):
    cu = tmp_path / "k.cu"
    cu.write_text(source)
    r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "k.cubin"),
                        str(cu)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------------------- errors


def _err(body, cls, match, line, params="int N, float A[N], float B[N]"):
    """``body`` is the function body; ``line`` is the 1-based line within it."""
    src = f"void f({params}) {{\n{body}\n}}\n"
    with pytest.raises(cls, match=match) as e:
        read_c_kernel(src)
    assert isinstance(e.value, PolycompError)
    assert e.value.location is not None and e.value.location.lineno == line + 1, \
        (e.value.location, str(e.value))
    return e.value


@pytest.mark.parametrize("body, cls, match, line", [
    ("for (int i = 0; i < N; i++)\n  B[i] = A[i * i];", NonAffineIndexError,
     "not affine", 2),
    ("for (int i = 0; i < N; i++)\n  B[A[i] > 0 ? i : 0] = 1;", NonAffineIndexError,
     "not affine", 2),
    ("for (int i = 0; i < N; i++)\n  for (int j = 0; j < A[i]; j++)\n    B[i] = 1;",
     NonAffineIndexError, "not affine|float", 2),
    ("for (int i = 0; i < N; i++)\n  if (A[i] > 0)\n    B[i] = 1;", NonAffineIndexError,
     "if condition", 2),
    ("int i = 0;\nwhile (i < N) { B[i] = 1; i++; }", UnsupportedConstructError,
     "while loop", 2),
    ("int i;\nwhile (i < N) B[i] = 1;", UnsupportedConstructError, "while loop", 2),
    ("for (int i = 0; i < N; i++) {\n  float *t = &A[i];\n  B[i] = *t;\n}",
     UnsupportedConstructError, "local pointer", 2),
    ("for (int i = 0; i < N; i++)\n  B[i] = foo(A[i]);", UnsupportedConstructError,
     "call of function 'foo'", 2),
    ("for (int i = 0; i < N; i++)\n  printf(\"%f\", A[i]);", UnsupportedConstructError,
     "call statement", 2),
    ("for (int i = 0; i < N; i++)\n  *(B + i) = A[i];", UnsupportedConstructError,
     "assignment to", 2),
    ("for (int i = 0; i < N; i++)\n  B[i] = *(A + i);", UnsupportedConstructError,
     "pointer dereference", 2),
    ("for (int i = 0; i < N; i++) {\n  if (i > 3) goto done;\n  B[i] = 1;\n}\ndone: ;",
     UnsupportedConstructError, "goto", 2),
    ("for (int i = 0; i < N; i++)\n  B[i] = A[i] + q;", UnknownSymbolError,
     "unknown identifier 'q'", 2),
    ("for (int i = 0; i < N; i++)\n  Z[i] = 1;", UnknownSymbolError, "unknown array 'Z'", 2),
    ("for (int i = 0; i <= N; i++)\n  B[i] = A[i];", ShapeMismatchError, "out of bounds", 2),
    ("for (int i = 0; i < N; i++)\n  B[i] = A[i][0];", ShapeMismatchError,
     "1 dimension", 2),
    ("for (int i = 0; i != N; i++)\n  B[i] = A[i];", NonAffineIndexError,
     "not a upper bound|not an upper bound|upper bound", 1),
    ("for (int i = 0; i < N; i++)\n  B[i / N] = A[i];", NonAffineIndexError,
     "integer division `i / N` by a non-constant", 2),
    ("for (int i = 0; i < N; i++)\n  if (i % N == 0) B[i] = A[i];", NonAffineIndexError,
     "integer remainder `i % N` by a non-constant", 2),
    ("for (int i = 0; i < N; i++)\n  B[i] = A[i] + N % 0;", UnsupportedConstructError,
     "by the constant zero", 2),
    ("#pragma scop\nfor (int i = 0; i < N; i++)\n  B[i] = 1;\n#pragma endscop\nA[0] = 2;",
     UnsupportedConstructError, "an assignment `A\\[0\\] = 2` outside #pragma scop", 5),
    ("int i;\nfor (i = 0; i < N; i++)\n  B[i] = 1;\nA[0] = i;", UnknownSymbolError,
     "loop iterator 'i' read outside its loops", 4),
    ("for (unsigned i = N - 1; i >= 0; i--)\n  B[i] = A[i];", NonAffineIndexError,
     "unsigned iterator 'i' \\(condition `i >= 0`\\) steps below 0", 1),
    ("size_t i;\nfor (i = N - 1; i >= 1; i -= 2)\n  B[i] = A[i];", NonAffineIndexError,
     "stop it at i >= 2", 2),
    ("for (int i = 0; i < N;) {\n  B[i] = 1;\n}", UnsupportedConstructError,
     "loop 'i' without an increment", 1),
    ("for (int i = 0; i < N; i++)\n  B[i] = A[i] + ;", CParseError,
     "Invalid expression before `;`", 2),
    ("for (int i = 0; i < N; i++)\n  B[i] = A[i] & 1;", UnsupportedConstructError,
     "bitwise", 2),
    ("for (int i = 0; i < N; i++) {\n  if (i == 3) break;\n  B[i] = A[i];\n}",
     UnsupportedConstructError, "break", 2),
    ("for (int i = 0; i < N; i *= 2)\n  B[i] = A[i];", UnsupportedConstructError,
     "loop increment", 1),
    ("for (int i = 0; i < N; i++)\n  B[i] = A[i]++;", UnsupportedConstructError,
     "inside an expression", 2),
    ("for (int i = 0; i < N; i++)\n  N = 3;", UnsupportedConstructError,
     "assignment to the integer parameter 'N'", 2),
    ("B[0] = 1\nB[1] = 2;", CParseError, "syntax", 2),
])
def test_errors_name_construct_and_line(body, cls, match, line):
    _err(body, cls, match, line)


@pytest.mark.parametrize("params, cls, match", [
    ("int N, float *A, float B[N]", UnsupportedConstructError, "pointer parameter 'A'"),
    ("int N, float A[][N], float B[N]", ShapeMismatchError, "no extent"),
    ("int N, float *alpha, float A[N], float B[N]", UnsupportedConstructError,
     "pointer parameter 'alpha'"),
    ("int N, unsigned A[N], float B[N]", DTypeError, "element type"),
    ("int N, float A[N * N], float B[N]", NonAffineIndexError, "not affine"),
])
def test_signature_errors(params, cls, match):
    src = f"void f({params}) {{\n  for (int i = 0; i < N; i++)\n    B[i] = 1;\n}}\n"
    with pytest.raises(cls, match=match) as e:
        read_c_kernel(src)
    assert e.value.location is not None and e.value.location.lineno == 1


# C's integer / and % truncate towards zero (the remainder has the dividend's sign); polycomp
# reads them as floor division and modulo with a select on the affine condition where the
# two differ.  numpy's trunc / fmod are C's.
C_DIVISION = r"""
void f(int n, int p, int A[n], int Q[n][8], double B[n + 2], double C[n]) {
  for (int i = 0; i < (n + 1) / 2; i++)
    C[2 * i] = B[i] + B[(i - 4) / 3 + 2] + B[(8 - i) / -3 + 2];
  for (int i = 0; i < n; i++) {
    if ((i - 5) % 3 == -1) C[i] = C[i] + 100;
    Q[i][0] = A[i] / 3;
    Q[i][1] = A[i] % 4;
    Q[i][2] = A[i] / -3;
    Q[i][3] = A[i] % -3;
    Q[i][4] = A[i] / p;
    Q[i][5] = A[i] % p;
    Q[i][6] = (i - 4) / p;
    Q[i][7] = 7 / -2 + -7 % 3;
  }
}
"""


def _c_division_reference(n, p, A, B, C):
    i = np.arange(n)
    C = C.copy()
    h = np.arange((n + 1) // 2)
    C[2 * h] = (B[h] + B[(np.trunc((h - 4) / 3) + 2).astype(int)]
                + B[(np.trunc((8 - h) / -3) + 2).astype(int)])
    C[np.fmod(i - 5, 3) == -1] += 100
    Q = np.stack([np.trunc(A / 3), np.fmod(A, 4), np.trunc(A / -3), np.fmod(A, -3),
                  np.trunc(A / p), np.fmod(A, p), np.trunc((i - 4) / p),
                  np.full(n, -3 + -1)], axis=1).astype(np.int32)
    return Q, C


@pytest.mark.parametrize("target", ["c", "cpu"])
def test_integer_division_truncates_like_c(target):
    k = read_c_kernel(C_DIVISION)
    rng = np.random.default_rng(1)
    n, p = 11, 4
    A = rng.integers(-50, 50, n).astype(np.int32)
    B = rng.standard_normal(n + 2)
    C = rng.standard_normal(n)
    Q0 = np.zeros((n, 8), np.int32)
    Q, C_new = build(k, target)(A, B, Q0, C, p=p)
    want_Q, want_C = _c_division_reference(n, p, A, B, C)
    np.testing.assert_array_equal(Q, want_Q)
    np.testing.assert_array_equal(C_new, want_C)


def test_division_of_non_negative_values_is_a_floor_division():
    """Where isl shows the dividend ``>= 0`` (sizes, iterators from 0) C's ``/`` is the
    floor division itself: array extents (``double A[n / 2 + 1]``), local arrays and a
    strided loop's start (which may not be a select) take it."""
    k = read_c_kernel(
        "void f(int n, double A[n / 2 + 1], double B[n], double C[n]) {\n"
        "  double t[n / 2 + 1];\n"
        "  for (int i = 0; i < n; i += 2) t[i / 2] = A[i / 2] * 2;\n"
        "  for (int i = 0; i < n; i++) B[i] = t[i / 2];\n"
        "  for (int i = n / 2; i < n; i += 2) C[i] = 1;\n}\n")
    assert all("select" not in repr(st.value).lower() for st in k.program.statements)
    for n in (1, 2, 9):
        A = np.arange(n // 2 + 1, dtype=np.float64) + 1
        B, C = build(k, "c")(A, np.zeros(n), np.zeros(n))
        close(B, 2 * A[np.arange(n) // 2])
        close(C, [1.0 if i >= n // 2 and (i - n // 2) % 2 == 0 else 0.0 for i in range(n)])


def test_unsigned_countdown_that_stops_at_1():
    k = read_c_kernel("void f(unsigned n, double A[n]) {\n  unsigned i;\n"
                      "  for (i = n - 1; i >= 1; i--) A[i] = A[i] + A[i - 1];\n}\n")
    x = np.arange(5.0)
    close(build(k, "c")(x), np.concatenate([[0.0], x[1:] + x[:-1]]))


def test_integer_division_in_bounds_is_quasi_affine():
    """``n / 2`` in a bound and ``i % 3`` in a condition stay isl constraints (the CUDA
    target maps the loop) and the interpreter agrees."""
    k = read_c_kernel("void f(int n, float A[n]) {\n  for (int i = 0; i < n / 2; i++)\n"
                      "    if (i % 3 == 0) A[2 * i] = 1;\n}\n")
    assert "__global__" in compile_kernel(k, "cuda").source
    for n in (1, 2, 7, 12):
        want = np.zeros(n, np.float32)
        want[[2 * i for i in range(n // 2) if i % 3 == 0]] = 1
        close(interpret(k, np.zeros(n, np.float32)), want)
        close(build(k, "c")(np.zeros(n, np.float32)), want)


def test_scop_region_and_outside_statements():
    src = r"""
void f(int N, float A[N], float B[N]) {
  A[0] = 1;
#pragma scop
  for (int i = 0; i < N; i++) B[i] = A[i];
#pragma endscop
}
"""
    with pytest.raises(UnsupportedConstructError, match="outside #pragma scop") as e:
        read_c_kernel(src)
    assert e.value.location.lineno == 3
    with pytest.raises(UnsupportedConstructError, match="no assignment"):
        read_c_kernel("void f(int N, float A[N]) {\n#pragma scop\n#pragma endscop\n}\n")
    # an array the SCoP does not use is still an argument (an input)
    k = read_c_kernel("void f(int N, float A[N], float B[N]) {\n"
                      "  for (int i = 0; i < N; i++) A[i] = 1;\n}\n")
    assert k.inputs == ("B",) and k.outputs == ("A",)
    close(build(k, "c")(np.zeros(3, np.float32), np.zeros(3, np.float32)), np.ones(3))
    with pytest.raises(UnsupportedConstructError, match="no C function"):
        read_c_kernels("int x;\n")


# --------------------------------------------------------------------------- random SCoPs
# Random affine loop nests (up/down/strided loops, triangular and min bounds, ifs,
# loop-carried dependences through in-place updates) are compiled by polycomp and by
# gcc directly; both run on the same arrays and must agree (polycomp's C backend, its
# vectorising "cpu" backend for this machine, the interpreter, and the IR of the
# baseline CUDA mapping run by the reference interpreter).


def _gcc_reference(src, name, tmp_path):
    import ctypes
    c = tmp_path / "ref.c"
    c.write_text(src)
    so = tmp_path / "ref.so"
    r = subprocess.run(["gcc", "-O1", "-std=gnu11", "-fPIC", "-shared", str(c), "-o", str(so),
                        "-lm"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    fn = getattr(ctypes.CDLL(str(so)), name)
    fn.restype = None

    def call(n, m, *arrays):
        arrays = [np.ascontiguousarray(a.copy()) for a in arrays]
        fn(ctypes.c_int(n), ctypes.c_int(m), *[ctypes.c_void_p(a.ctypes.data) for a in arrays])
        return arrays
    return call


@st.composite
def random_scop(draw):
    pick = lambda xs: draw(st.sampled_from(xs))  # noqa: E731

    def ref(loops):
        arr = pick("AB")
        i = f"{loops[0]} + {pick([0, 1, 2])}" if loops else str(pick([0, 1, 2]))
        j = f"{loops[1]} + {pick([0, 1, 2])}" if len(loops) > 1 else str(pick([0, 1, 2]))
        if len(loops) == 2 and pick([False, True]):
            i, j = (f"{loops[0]} + {pick([0, 1, 2])}", f"{loops[0]} + {pick([0, 1])}") \
                if pick([False, True]) else (i, j)
        return f"{arr}[{i}][{j}]"

    def stmt(loops, ind):
        op = pick(["=", "+=", "-=", "*="])
        terms = [ref(loops) for _ in range(pick([1, 2]))]
        rhs = " + ".join(terms) + f" * {pick(['0.5', '2', '-1.25'])}"
        if pick([False, False, True]):
            rhs = f"({terms[0]} > 0 ? {rhs} : {pick(['0', terms[-1]])})"
        return f"{ind}{ref(loops)} {op} {rhs};"

    lines = []
    for _ in range(pick([1, 2])):
        if pick(["up", "up", "down"]) == "up":
            step = pick([1, 1, 2])
            lines.append(f"  for (int i = {pick([0, 1])}; i < {pick(['N', 'N + 1', 'N - 1'])}; "
                         f"i += {step})" + " {")
        else:
            lines.append(f"  for (int i = {pick(['N', 'N - 1'])}; i >= {pick([0, 1])}; i--)"
                         + " {")
        body = []
        for _ in range(pick([1, 2])):
            if pick([False, True]):
                body.append(stmt(["i"], "    "))
                continue
            lo = pick(["0", "1", "i"])
            hi = pick(["M", "M - 1", "MIN(M, i + 2)"])
            body.append(f"    for (int j = {lo}; j < {hi}; j++)")
            if pick([False, True]):
                cond = pick(["i + j < N + 1", "j >= i", "i != j", "j == 0 || i > 1"])
                body.append(f"      if ({cond})")
                body.append(stmt(["i", "j"], "        "))
            else:
                body.append(stmt(["i", "j"], "      "))
        lines += body + ["  }"]
    return ("#define MIN(a, b) ((a) < (b) ? (a) : (b))\n"
            "void rnd(int N, int M, double A[N + 4][N + M + 4], double B[N + 4][N + M + 4]) {\n"
            + "\n".join(lines) + "\n}\n")


@pytest.mark.slow
@given(src=random_scop(), n=st.sampled_from([1, 2, 3, 5, 7]), m=st.sampled_from([1, 2, 4, 5]),
       seed=st.integers(0, 2**16))
def test_random_scops_agree_with_gcc(tmp_path_factory, src, n, m, seed):
    tmp = tmp_path_factory.mktemp("rnd")
    rng = np.random.default_rng(seed)
    A, B = (rand(rng, n + 4, n + m + 4, dtype=np.float64) for _ in range(2))
    k = read_c_kernel(src)
    want = dict(zip(("A", "B"), _gcc_reference(src, "rnd", tmp)(n, m, A, B)))
    args = [{"A": A, "B": B}[a] for a in k.inputs + k.outputs]
    gpu = compile_kernel(k, "cuda", {"gpu": "baseline"}, debug=True)

    def run_gpu_ir(*arrays, **sizes):  # the mapped IR, blocks/threads run as lanes
        f, n_in = gpu.ir, len(k.inputs)
        outs = run_func(f, dict(zip(k.inputs, arrays[:n_in])), sizes,
                        dict(zip(k.outputs, arrays[n_in:])))
        return tuple(outs[o] for o in k.outputs)
    for run in (build(k, "c"), build(k, "cpu"), lambda *a, **p: interpret(k, *a, **p),
                run_gpu_ir):
        got = run(*args, N=n, M=m)
        got = got if isinstance(got, tuple) else (got,)
        for name, g in zip(k.outputs, got):
            np.testing.assert_allclose(g, want[name], rtol=1e-9, atol=1e-9, err_msg=src)


EMPTY_VECTOR_LOOP = r"""
void rnd(int N, int M, double A[N + 4][N + M + 4], double B[N + 4][N + M + 4]) {
  for (int i = 1; i < N + 1; i += 2) {
    for (int j = 1; j < M - 1; j++)
      A[i + 1][j + 0] += A[i + 2][j + 2] + A[i + 2][j + 0] * -1.25;
    B[i + 2][1] -= A[i + 2][2] * 0.5;
  }
}
"""


@pytest.mark.parametrize("target", ["c", "cpu"])
def test_empty_inner_loop_vectorised(tmp_path, target):
    # M = 1: the j loop has a negative extent; the vectoriser's floor divisions used to
    # run a masked tail of 7 lanes for it
    k = read_c_kernel(EMPTY_VECTOR_LOOP)
    rng = np.random.default_rng(6)
    for n, m in ((2, 1), (3, 2), (5, 13)):
        A, B = (rand(rng, n + 4, n + m + 4, dtype=np.float64) for _ in range(2))
        want = _gcc_reference(EMPTY_VECTOR_LOOP, "rnd", tmp_path)(n, m, A, B)
        for g, w in zip(build(k, target)(A, B, N=n, M=m), want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


TRIANGLE = r"""
void tri(int N, const float L[N][N], float R[N][N]) {
  for (int i = 0; i < N; i++)
    for (int j = 0; j <= i; j++)
      R[i][j] = 2 * L[i][j] + (i != j ? L[j][i] : 0.0f);
}
"""


@pytest.mark.nvcc
def test_triangular_nest_baseline_cuda_maps_outer_member_only(tmp_path):
    # the (i, j) range is not a box: a CUDA grid cannot depend on the block index, so
    # only i is mapped (j stays a loop inside each thread)
    ck = compile_kernel(kernel(TRIANGLE), "cuda", {"gpu": "baseline"}, debug=True)
    assert "gpu_blocks:0" in tree_str(ck.schedule)
    assert gpu_kernels(ck.state).baseline[0].block_loops == 1
    rng = np.random.default_rng(5)
    for n in (1, 2, 17):
        L, R = rand(rng, n, n), rand(rng, n, n)
        want = R.copy()
        il = np.tril_indices(n)
        want[il] = (2 * L + np.triu(L, 1).T)[il]
        out = run_func(ck.ir, {"L": L}, {"N": n}, {"R": R})
        close(out["R"], want)
    _nvcc(tmp_path, ck.source)


# --------------------------------------------------------------------------- C literal types
# `0.1` is a double in C and `0.1f` a float; `exp` of a float is computed in double.  With
# float arrays the weak typing polycomp used before (the literal took the array's type)
# changed results: `x * 0.1`, `x > 0.1` (0.1f > 0.1 is true in C) and `exp(x)` differed
# from gcc in the last bit or in the branch taken.

C_LITERALS = r"""
#include <math.h>
void f(int n, float A[n], float B[n][4]) {
  for (int i = 0; i < n; i++) {
    B[i][0] = A[i] * 1.1f + 0.1;
    B[i][1] = A[i] * 0.1;
    B[i][2] = A[i] > 0.1 ? 1.0f : 0.0f;
    B[i][3] = exp(A[i]) + sqrt(A[i] * A[i]);
  }
}
"""


@pytest.mark.parametrize("target", ["c", "cpu"])
def test_floating_literals_have_their_c_types(target, tmp_path):
    from benchmarks import polybench as pb
    k = read_c_kernel(C_LITERALS)
    pk = pb.PolyKernel("literals", "f", C_LITERALS, {"n": 3000})
    data = pb.make_data(k, pk, seed=2)
    data["A"][0] = np.float32(0.1)
    ref = pb.Reference(k, pk, "gcc", pb.EXACT_REF_FLAGS, str(tmp_path))
    want = pb.run_once(ref.fn, ref.args, data)
    c = pb.Compiled(k, target, {"fp_exact": True})
    got = pb.run_once(c.f.cfunc, c.args, data)
    assert want["B"][0, 2] == 1.0
    assert pb.same_bits(got["B"], want["B"])


def test_weak_literal_types_switch(monkeypatch):
    """``POLYCOMP_C_LITERAL_TYPES=0`` reads literals weakly typed (float arithmetic)."""
    src = "void f(int n, float A[n]) {\n  for (int i = 0; i < n; i++) A[i] = A[i] * 0.1;\n}\n"
    assert "float64" in repr(read_c_kernel(src).program.statements[0].value)
    monkeypatch.setenv("POLYCOMP_C_LITERAL_TYPES", "0")
    assert "float64" not in repr(read_c_kernel(src).program.statements[0].value)
