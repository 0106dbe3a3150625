"""Products with symbolic sizes: every register tile, the partial ones at the edges
included, is the micro-kernel's (scheduler/cpu/backbone_tile.partial_tiles,
hw/cpu/microkernel.py): a run-time test picks the full tile or the partial one, whose
vectors are masked to the tile's columns and whose extra rows are not stored.
Results against numpy on odd, prime and extent-1 shapes (fp32 and fp64, several
``k`` tiles), NaN in the edge rows and columns, the IR's tile count, and the C front
end's PolyBench-style gemm with parameter sizes (no scalar edge loop left)."""
import re

import numpy as np
import pytest

from polycomp.driver import build, compile_kernel
from polycomp.frontend import ops
from polycomp.hw.cpu.simd_build import has_native_avx512
from polycomp.hw.cpu.target import cpu_flags

HAS_AVX2 = {"avx2", "fma"} <= cpu_flags()
TARGETS = ["cpu-avx2"] * HAS_AVX2 + ["cpu-avx512"] * has_native_avx512()
#: (M, N, K): extent 1, primes, odd sizes, an exact register tile of each ISA, a k
#: range over several k tiles (fp32 KC = 256, fp64 KC = 160)
SHAPES = [(1, 1, 1), (5, 3, 7), (7, 13, 17), (6, 64, 5), (13, 67, 31), (37, 131, 300)]
_BUILT: dict = {}


def _fn(target: str, dtype: str):
    if (target, dtype) not in _BUILT:
        _BUILT[target, dtype] = build(ops.matmul_kernel(dtype), target)
    return _BUILT[target, dtype]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_symbolic_product_all_shapes(target, dtype):
    f = _fn(target, dtype)
    rng = np.random.default_rng(7)
    eps = np.finfo(dtype).eps
    for m, n, k in SHAPES:
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        got = f(a, b)
        want = a.astype(np.float64) @ b.astype(np.float64)
        tol = 8 * k * eps * max(1.0, float(np.abs(want).max()))
        assert got.shape == (m, n)
        err = float(np.abs(got - want).max())
        assert err <= tol, f"{target} {dtype} {(m, n, k)}: max error {err} > {tol}"


@pytest.mark.parametrize("target", TARGETS)
def test_nan_in_edge_rows_and_columns(target):
    f = _fn(target, "float64")
    rng = np.random.default_rng(3)
    m, n, k = 13, 67, 31              # a 1-row (6+6+1) and a 3-column edge tile
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    a[m - 1, 4] = np.nan
    b[9, n - 1] = np.nan
    got = f(a, b)
    want = a @ b
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.allclose(got[ok], want[ok], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_partial_tiles_are_micro_kernels(target):
    ck = compile_kernel(ops.matmul_kernel("float32"), target)
    assert ck.final_ir.counts.microkernels == 1
    # two register tiles: the full one and the masked partial one
    tiles = set(re.findall(r"\b(acc\d+)_v0\b", ck.source))
    assert len(tiles) == 2, tiles


GEMM_C = """
void gemm(int ni, int nj, int nk, double alpha, double beta,
          double C[ni][nj], double A[ni][nk], double B[nk][nj]) {
  for (int i = 0; i < ni; i++) {
    for (int j = 0; j < nj; j++)
      C[i][j] *= beta;
    for (int k = 0; k < nk; k++)
      for (int j = 0; j < nj; j++)
        C[i][j] += alpha * A[i][k] * B[k][j];
  }
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_c_gemm_with_parameter_sizes_has_no_scalar_edge(target):
    from polycomp.frontend.c_reader import read_c_kernel
    k = read_c_kernel(GEMM_C, "gemm")
    ck = compile_kernel(k, target)
    assert ck.final_ir.counts.microkernels == 1      # one tile nest, all tiles in it
    assert len(set(re.findall(r"\b(acc\d+)_v0\b", ck.source))) >= 2
    # no scalar loop over the last `nj mod NR` columns left (the edge tiles of an
    # isolated band indexed the packed panel through floor division of `nj`)
    assert not re.search(r"nj\) ?% ?(16|32|64)\)", ck.source)
    assert "(nj % " not in ck.source
    f = build(k, target)
    rng = np.random.default_rng(5)
    for ni, nj, nk in ((1, 1, 1), (7, 45, 19), (23, 101, 170)):
        data = {"A": rng.uniform(-1, 1, (ni, nk)), "B": rng.uniform(-1, 1, (nk, nj)),
                "C": rng.uniform(-1, 1, (ni, nj)), "alpha": np.array(1.5),
                "beta": np.array(1.2)}
        want = 1.5 * (data["A"] @ data["B"]) + 1.2 * data["C"]
        args = [data[n] for n in list(k.inputs) + list(k.outputs)]
        got = f(*args, ni=ni, nj=nj, nk=nk)
        got = got[0] if isinstance(got, tuple) else got
        assert np.allclose(got, want, rtol=1e-12, atol=1e-12), (ni, nj, nk)


@pytest.mark.parametrize("target", TARGETS)
def test_c_gemm_packs_alpha_times_a(target):
    """PolyBench's ``alpha * A[i][k] * B[k][j]``: the packed panel holds ``alpha * A``
    (the same rounding as the product in the loop), the micro-kernel broadcasts it
    straight from the panel."""
    from polycomp.frontend.c_reader import read_c_kernel
    src = compile_kernel(read_c_kernel(GEMM_C, "gemm"), target).source
    assert re.search(r"A_pk\d+\[[^\]]+\] = \(alpha\[0\] \* A\[", src)
    assert not re.search(r"set1_pd\(\(alpha\[0\]", src)


def test_common_factor_only_when_every_read_is_scaled():
    from polycomp import ir
    from polycomp.hw.cpu.pack import _common_factor, _Unscale
    A = ir.Buffer("A", "float64", (ir.IntImm(8),))
    B = ir.Buffer("B", "float64", (ir.IntImm(8),))
    al = ir.Buffer("alpha", "float64", ())
    C = ir.Buffer("C", "float64", (ir.IntImm(8),))
    i = ir.Var("i")
    a, b = ir.Load(A, (i,), "float64"), ir.Load(B, (i,), "float64")
    f = ir.Load(al, (ir.IntImm(0),), "float64")
    scaled = ir.Binary("*", ir.Binary("*", f, a, "float64"), b, "float64")
    loop = ir.For(i, ir.IntImm(0), ir.IntImm(8), "serial", ir.Store(C, (i,), scaled))
    got = _common_factor(loop, A, loop)
    assert got is not None and ir.structural_equal(got, f)
    out = _Unscale(A, f).visit(loop)
    assert ir.structural_equal(out.body.value, ir.Binary("*", a, b, "float64"))
    # one bare read of A: not foldable
    mixed = ir.Store(C, (i,), ir.Binary("+", scaled, a, "float64"))
    assert _common_factor(mixed, A, mixed) is None
    # a factor written in the function, or one that varies with the loop: not invariant
    written = ir.Block((ir.Store(al, (ir.IntImm(0),), b), ir.Store(C, (i,), scaled)))
    assert _common_factor(written, A, written) is None
    varying = ir.Store(C, (i,), ir.Binary("*", ir.Binary("*", b, a, "float64"), b, "float64"))
    assert _common_factor(varying, A, varying) is None
