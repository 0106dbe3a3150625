"""C loop nests with ``_Float16`` operands on Tensor Cores (issue #28 item 1):
``scop-tensor-cores`` (scheduler/tensorcore/scop.py) recognises a GEMM-like nest of a C
SCoP (``C[i][j] += A[i][k] * B[k][j]``, PolyBench's ``C *= beta`` before the ``alpha *
A * B`` accumulation, a transposed ``B[j][k]``, float or ``_Float16`` ``C``) and rewrites
it for the Tensor Core tiling (``mma.sync`` on ``cuda``, ``wgmma`` on ``cuda-sm90a``).

Checked: the notes (the precision contract; the fallback reasons for nests that do not
match), the golden tree of the pass, the simulator's result against numpy with fp32
accumulation tolerance at odd sizes, extent 1 and symbolic sizes (every kernel's sizes
are parameters), ``fp_exact`` keeping the CUDA-core path bitwise equal to ``gcc -O0``,
and ``nvcc`` builds for sm_80 / sm_90a.
"""
from __future__ import annotations

import ctypes
import subprocess

import islpy as isl
import numpy as np
import pytest

from polycomp.driver import compile_kernel
from polycomp.frontend.c_reader import read_c_kernel
from polycomp.hw.cuda.simulator import simulate
from polycomp.hw.target import get_target
from polycomp.islutil import context
from polycomp.scheduler.gpu.scop_groups import ScopGroupingPass
from polycomp.scheduler.tensorcore.scop import ScopTensorCorePass, tensor_core_views
from polycomp.state import CompileState

HGEMM = r"""
typedef _Float16 half;
void hgemm(int M, int N, int K, float C[M][N], const half A[M][K], const half B[K][N]) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++)
      for (int k = 0; k < K; k++)
        C[i][j] += (float)A[i][k] * (float)B[k][j];
}
"""

# PolyBench's gemm with half operands: the scaling, then the k-outside-j accumulation
POLY = r"""
void gemm(int ni, int nj, int nk, float alpha, float beta, float C[ni][nj],
          _Float16 A[ni][nk], _Float16 B[nk][nj]) {
  for (int i = 0; i < ni; i++) {
    for (int j = 0; j < nj; j++)
      C[i][j] *= beta;
    for (int k = 0; k < nk; k++)
      for (int j = 0; j < nj; j++)
        C[i][j] += alpha * A[i][k] * B[k][j];
  }
}
"""

# A * B^T into a half C that starts at zero
HGEMM_T = r"""
void hgemm_t(int M, int N, int K, _Float16 C[M][N], const _Float16 A[M][K],
             const _Float16 B[N][K]) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      C[i][j] = 0;
      for (int k = 0; k < K; k++)
        C[i][j] += A[i][k] * B[j][k];
    }
}
"""

KERNELS = {"hgemm": HGEMM, "poly": POLY, "hgemm_t": HGEMM_T}
_CACHE: dict = {}


def compiled(name: str, target: str = "cuda", options: tuple = ()):
    key = (name, target, options)
    if key not in _CACHE:
        _CACHE[key] = compile_kernel(read_c_kernel(KERNELS[name]), target, dict(options))
    return _CACHE[key]


def run_case(name, ck, m, n, kk, seed):
    """(simulated C, numpy reference in fp32, tolerance)."""
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, (m, kk)).astype(np.float16)
    f32 = lambda x: x.astype(np.float32)  # noqa: E731
    if name == "hgemm_t":
        B = rng.uniform(-1, 1, (n, kk)).astype(np.float16)
        C = rng.uniform(-1, 1, (m, n)).astype(np.float16)
        got, _ = simulate(ck, A, B, C.copy(), M=m, N=n, K=kk)
        ref = f32(A) @ f32(B).T
        return f32(got), ref, 2.0 ** -10 * (1 + np.abs(ref))   # one half rounding
    B = rng.uniform(-1, 1, (kk, n)).astype(np.float16)
    C = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    if name == "hgemm":
        got, _ = simulate(ck, A, B, C.copy(), M=m, N=n, K=kk)
        ref = C + f32(A) @ f32(B)
    else:
        alpha, beta = np.float32(1.5), np.float32(-0.75)
        got, _ = simulate(ck, alpha, beta, A, B, C.copy(), ni=m, nj=n, nk=kk)
        ref = beta * C + alpha * (f32(A) @ f32(B))
    return got, ref, 1e-5 * kk * (1 + np.abs(ref))    # fp32 sums in another order


# --------------------------------------------------------------------------- the path

@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("target,unit", [("cuda", "mma.m16n8k16"),
                                         ("cuda-sm90a", "wgmma.m64n")])
def test_gemm_nests_reach_tensor_cores(name, target, unit):
    ck = compiled(name, target)
    note = " ".join(ck.notes["scop-tensor-cores"])
    assert "loop nest 0: Tensor Cores" in note
    assert "not bitwise equal to gcc -O0" in note and "fp_exact" in note
    assert unit in " ".join(ck.notes["tc-tiling"])
    assert ("mma.sync" if target == "cuda" else "wgmma") in ck.source


def test_transposed_operand_and_scaling_in_the_view():
    ck = compiled("hgemm_t")
    (view,) = tensor_core_views(ck.state).views.values()
    assert (view.a.load.buffer.name, view.b.load.buffer.name) == ("A", "B")
    assert [i.name for i in view.b.load.indices] == ["j", "k"]      # B[j][k]
    assert [s.name for s in (view.init, view.update, *view.epilogue)] == \
        ["S_1_tc_init", "S_1_tc", "S_1_tc_out"]
    note = " ".join(compiled("poly").notes["scop-tensor-cores"])
    assert "C[i][j] = c0 + alpha * sum_k A * B (float16)" in note


# --------------------------------------------------------------------------- results

SIZES = [(1, 1, 1), (17, 33, 45), (37, 45, 19), (20, 9, 70)]


@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("m,n,kk", SIZES)
def test_simulator_matches_numpy(name, m, n, kk):
    """Edges not multiples of 16, extent 1, a K over two K tiles; symbolic sizes (one
    compiled kernel for every shape)."""
    got, ref, tol = run_case(name, compiled(name), m, n, kk, seed=m + n + kk)
    assert np.all(np.abs(got - ref) <= tol), np.abs(got - ref).max()


SMALL_TILES = (("tc_tile", (("block", (64, 64)), ("warp", (32, 32)), ("k", 32),
                             ("stages", 2))),)


@pytest.mark.parametrize("name", ["poly", "hgemm_t"])
def test_several_blocks_and_k_tiles(name):
    """64x64 block tiles: a 2x2 grid with partial tiles on both edges, two K tiles."""
    opts = tuple((k, dict(v) if isinstance(v, tuple) else v) for k, v in SMALL_TILES)
    ck = compile_kernel(read_c_kernel(KERNELS[name]), "cuda", dict(opts))
    assert "block (64, 64)" in " ".join(ck.notes["tc-tiling"])
    got, ref, tol = run_case(name, ck, 70, 65, 33, seed=11)
    assert np.all(np.abs(got - ref) <= tol), np.abs(got - ref).max()


@pytest.mark.parametrize("name", ["poly", "hgemm_t"])
def test_simulator_matches_numpy_sm90a(name):
    got, ref, tol = run_case(name, compiled(name, "cuda-sm90a"), 33, 17, 40, seed=3)
    assert np.all(np.abs(got - ref) <= tol), np.abs(got - ref).max()


MIX = r"""
void mix(int M, int N, int K, float alpha, float C[M][N], _Float16 A[M][K], _Float16 B[K][N],
         float D[M][N]) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++)
      C[i][j] = 1.0f;
  for (int i = 0; i < M; i++)
    for (int k = 0; k < K; k++)
      for (int j = 0; j < N; j++)
        C[i][j] += alpha * A[i][k] * B[k][j];
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++)
      D[i][j] = C[i][j] * 2.0f;
}
"""


@pytest.mark.parametrize("target", ["cuda", "cuda-sm90a"])
def test_fused_nests_with_an_epilogue(target):
    """isl's scheduler fuses the three nests into one (scop-gpu-groups): the scaling
    before and the elementwise statement after the update stay in the Tensor Core
    kernel (``D`` computed from the final ``C`` by the thread owning the element; the
    simulator's race check would catch a quad store of ``C`` read by another lane)."""
    ck = compile_kernel(read_c_kernel(MIX), target)
    assert "Tensor Cores:" in " ".join(ck.notes["scop-tensor-cores"])
    (view,) = tensor_core_views(ck.state).views.values()
    assert [s.name for s in view.epilogue] == ["S_1_tc_out", "S_2"]
    m, n, kk = 20, 33, 50
    rng = np.random.default_rng(1)
    A = rng.uniform(-1, 1, (m, kk)).astype(np.float16)
    B = rng.uniform(-1, 1, (kk, n)).astype(np.float16)
    C = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    (c, d), _ = simulate(ck, np.float32(0.5), A, B, C, np.zeros((m, n), np.float32),
                         M=m, N=n, K=kk)
    ref = 1.0 + 0.5 * (A.astype(np.float32) @ B.astype(np.float32))
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d, 2 * ref, rtol=1e-5, atol=1e-5)


def test_constant_sizes():
    src = """void f(float C[24][40], _Float16 A[24][17], _Float16 B[17][40]) {
      for (int i = 0; i < 24; i++) for (int j = 0; j < 40; j++)
        for (int k = 0; k < 17; k++) C[i][j] += A[i][k] * B[k][j]; }"""
    ck = compile_kernel(read_c_kernel(src), "cuda")
    assert "Tensor Cores:" in " ".join(ck.notes["scop-tensor-cores"])
    rng = np.random.default_rng(5)
    A = rng.uniform(-1, 1, (24, 17)).astype(np.float16)
    B = rng.uniform(-1, 1, (17, 40)).astype(np.float16)
    C = rng.uniform(-1, 1, (24, 40)).astype(np.float32)
    got, _ = simulate(ck, A, B, C.copy())
    ref = C + A.astype(np.float32) @ B.astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- fp_exact

def test_fp_exact_keeps_cuda_cores_bitwise_gcc(tmp_path):
    c = tmp_path / "g.c"
    c.write_text(POLY)
    so = tmp_path / "g.so"
    subprocess.run(["gcc", "-O0", "-ffp-contract=off", "-fPIC", "-shared", "-o", str(so),
                    str(c)], check=True)
    m, n, kk = 19, 23, 21
    rng = np.random.default_rng(7)
    A = rng.uniform(-1, 1, (m, kk)).astype(np.float16)
    B = rng.uniform(-1, 1, (kk, n)).astype(np.float16)
    C = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    ref = C.copy()
    ctypes.CDLL(str(so)).gemm(ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(kk),
                              ctypes.c_float(1.5), ctypes.c_float(-0.75),
                              *[ctypes.c_void_p(x.ctypes.data) for x in (ref, A, B)])
    ck = compiled("poly", "cuda", (("fp_exact", True),))
    assert "tc-tiling" not in ck.notes
    assert "fp_exact: Tensor Cores off" in " ".join(ck.notes["scop-tensor-cores"])
    assert ck.source.startswith("// fp_exact: build with nvcc -fmad=false")
    got, _ = simulate(ck, np.float32(1.5), np.float32(-0.75), A, B, C.copy(),
                      ni=m, nj=n, nk=kk)
    np.testing.assert_array_equal(got, ref)
    assert "mma" not in ck.source


def test_tensor_cores_off_by_option():
    ck = compiled("hgemm", "cuda", (("tensor_cores", False),))
    assert "tc-tiling" not in ck.notes and "mma.sync" not in ck.source


# --------------------------------------------------------------------------- fallbacks

_HEAD = "void f(int M, int N, int K, {c} C[M][N], {a} A[M][{ka}], {a} B[K][N]) {{\n"
_LOOP = ("for (int i = 0; i < M; i++) for (int j = 0; j < N; j++) "
         "for (int k = 0; k < K; k{inc}) ")

FALLBACKS = [
    ("int", _HEAD.format(c="int", a="int", ka="K") + _LOOP.format(inc="++")
     + "C[i][j] += A[i][k] * B[k][j]; }", "C is int32"),
    ("double", _HEAD.format(c="double", a="double", ka="K") + _LOOP.format(inc="++")
     + "C[i][j] += A[i][k] * B[k][j]; }", "C is float64"),
    ("float operands", _HEAD.format(c="float", a="float", ka="K") + _LOOP.format(inc="++")
     + "C[i][j] += A[i][k] * B[k][j]; }", "operand A is float32"),
    ("k stride 2", _HEAD.format(c="float", a="_Float16", ka="K") + _LOOP.format(inc="+=2")
     + "C[i][j] += A[i][k] * B[k][j]; }", "not a rectangle 0 <= x < extent with unit strides"),
    ("odd index", _HEAD.format(c="float", a="_Float16", ka="2*K") + _LOOP.format(inc="++")
     + "C[i][j] += A[i][2*k] * B[k][j]; }", "not indexed [m][k] / [k][n]"),
    ("triangle", _HEAD.format(c="float", a="_Float16", ka="K")
     + "for (int i = 0; i < M; i++) for (int j = 0; j < N; j++) "
       "for (int k = 0; k < i && k < K; k++) C[i][j] += A[i][k] * B[k][j]; }",
     "not a rectangle"),
    ("scaling after", _HEAD.format(c="float", a="_Float16", ka="K")
     + "for (int i = 0; i < M; i++) for (int j = 0; j < N; j++) { "
       "for (int k = 0; k < K; k++) C[i][j] += A[i][k] * B[k][j]; C[i][j] *= 2.0f; } }",
     "after the update writes C again"),
    ("three operands", _HEAD.format(c="float", a="_Float16", ka="K") + _LOOP.format(inc="++")
     + "C[i][j] += A[i][k] * B[k][j] * A[i][k]; }", "not a product of two array elements"),
]


@pytest.mark.parametrize("src,why", [(s, w) for _, s, w in FALLBACKS],
                         ids=[n for n, _, _ in FALLBACKS])
def test_fallback_notes(src, why):
    ck = compile_kernel(read_c_kernel(src), "cuda")
    note = " ".join(ck.notes["scop-tensor-cores"])
    assert "no Tensor Cores" in note and why in note, note
    assert "tc-tiling" not in ck.notes


def test_non_affine_subscript_is_a_clear_error():
    """A gathered operand is no SCoP: the reader names the subscript and line."""
    from polycomp.errors import NonAffineIndexError
    src = (_HEAD.replace("B[K][N]) {", "B[K][N], int idx[K]) {").format(
        c="float", a="_Float16", ka="K") + _LOOP.format(inc="++")
        + "C[i][j] += A[i][idx[k]] * B[k][j]; }")
    with pytest.raises(NonAffineIndexError, match="idx"):
        compile_kernel(read_c_kernel(src), "cuda")


# --------------------------------------------------------------------------- golden

@pytest.mark.parametrize("name", ["poly", "hgemm_t"])
def test_pass_golden(name, goldens):
    """Tree in (after ``scop-gpu-groups``) / tree out of ``scop-tensor-cores``
    (``tests/golden/c_tc_<name>.scop-tensor-cores.{in,out}.isl``)."""
    model = read_c_kernel(KERNELS[name]).polyhedral_model()
    ctx = CompileState(model, get_target("cuda"), {})
    sched = ScopGroupingPass().run(model.initial_schedule, ctx)

    def same(a, text):
        read = lambda t: isl.Schedule.read_from_str(context(), t)  # noqa: E731
        return read(a.to_str()).plain_is_equal(read(text))
    stored_in = goldens.expected(f"c_tc_{name}.scop-tensor-cores.in.isl", sched.to_str(),
                                 lambda s: same(sched, s))
    assert same(sched, stored_in)
    out = ScopTensorCorePass().run(isl.Schedule.read_from_str(context(), stored_in), ctx)
    stored_out = goldens.expected(f"c_tc_{name}.scop-tensor-cores.out.isl", out.to_str(),
                                  lambda s: same(out, s))
    assert same(out, stored_out)
    assert ctx.model is not model        # the rewritten statements
    names = {s.name for s in ctx.model.statements}
    assert {"S_1_tc_init", "S_1_tc", "S_1_tc_out"} <= names and "S_0" not in names


# --------------------------------------------------------------------------- nvcc

@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.parametrize("name", ["poly", "hgemm_t"])
@pytest.mark.parametrize("target,arch", [("cuda", "sm_80"), ("cuda-sm90a", "sm_90a")])
def test_nvcc_compiles(name, target, arch, tmp_path):
    ck = compiled(name, target)
    cu = tmp_path / "k.cu"
    cu.write_text(ck.source)
    r = subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "-O3", "-o",
                        str(tmp_path / "k.cubin"), str(cu)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.nvcc
@pytest.mark.slow
def test_fp_exact_cubin_has_no_fma(tmp_path):
    """The launcher's build of an ``fp_exact`` kernel (``nvcc -fmad=false``): no FFMA in
    the SASS of the CUDA-core GEMM, where the default build contracts ``c + a*b``."""
    from polycomp.hw.cuda.launcher import compile_cubin, nvcc_flags
    from polycomp.hw.cuda.sass import has_opcode, sass_opcodes
    assert "-fmad=false" in nvcc_flags(False) and "-fmad=false" not in nvcc_flags(True)
    src = compiled("poly", "cuda", (("fp_exact", True),)).source
    exact = sass_opcodes(compile_cubin(src, 80, fmad=False), str(tmp_path))
    fused = sass_opcodes(compile_cubin(src, 80), str(tmp_path))
    assert has_opcode(fused, "FFMA") and not has_opcode(exact, "FFMA"), (exact, fused)
