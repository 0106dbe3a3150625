"""Half-precision arrays in C input (issue #28 item 1): ``_Float16`` (gcc, clang) and
``__fp16`` (clang, gcc on Arm) element types read as ``float16``, also through a
``typedef``; a GEMM-like nest with float16 operands widened to float takes the CUDA
tiled contraction path; the simulator and the ``c``/``cpu`` targets are bitwise equal to
``gcc -O0 -ffp-contract=off`` with ``fp_exact`` (the products of two halves are exact in
float, the sums run in the C order).  Without ``fp_exact`` the nest takes the Tensor
Cores (tests/test_c_tensor_cores.py).
"""
from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

from polycomp.driver import build, compile_kernel
from polycomp.frontend.c_reader import CParseError, read_c_kernel
from polycomp.hw.cuda.simulator import simulate

HGEMM = r"""
typedef _Float16 half;
void hgemm(int M, int N, int K, float C[M][N], const half A[M][K], const _Float16 B[K][N]) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++)
      for (int k = 0; k < K; k++)
        C[i][j] += (float)A[i][k] * (float)B[k][j];
}
"""


def test_half_types_are_read():
    k = read_c_kernel(HGEMM)
    dtypes = {a.name: a.buffer.dtype for a in k.graph.arrays}
    assert dtypes == {"C": "float32", "A": "float16", "B": "float16"}
    k2 = read_c_kernel("void f(int n, __fp16 x[n], float y[n]) "
                       "{ for (int i = 0; i < n; i++) y[i] = x[i] * 2.0f; }")
    assert k2.graph.arrays[0].buffer.dtype == "float16"


def test_invalid_half_type_is_a_clear_error():
    """``unsigned _Float16`` is not C: one error line naming the construct and line."""
    with pytest.raises(CParseError, match=r"<c-source>:1"):
        read_c_kernel("void f(int n, unsigned _Float16 x[n]) "
                      "{ for (int i = 0; i < n; i++) x[i] = 0; }")


@pytest.mark.parametrize("m,n,kk", [(1, 1, 1), (37, 70, 19)])
def test_hgemm_bitwise_gcc_o0(m, n, kk, tmp_path):
    c = tmp_path / "h.c"
    c.write_text(HGEMM)
    so = tmp_path / "h.so"
    subprocess.run(["gcc", "-O0", "-ffp-contract=off", "-fPIC", "-shared", "-o", str(so),
                    str(c)], check=True)
    rng = np.random.default_rng(m)
    A = rng.uniform(-1, 1, (m, kk)).astype(np.float16)
    B = rng.uniform(-1, 1, (kk, n)).astype(np.float16)
    C = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    ref = C.copy()
    ctypes.CDLL(str(so)).hgemm(ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(kk),
                               *[ctypes.c_void_p(x.ctypes.data) for x in (ref, A, B)])
    k = read_c_kernel(HGEMM)
    ck = compile_kernel(k, "cuda", {"fp_exact": True})   # (else: Tensor Cores, fp32 order)
    assert "tiled GPU pipeline (contraction)" in " ".join(ck.notes["scop-gpu-groups"])
    assert "tc-tiling" not in ck.notes
    got, _ = simulate(ck, A, B, C.copy(), M=m, N=n, K=kk)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(build(k, "c", {"fp_exact": True})(A, B, C.copy()), ref)
