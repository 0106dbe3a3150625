"""PolyBench-style C kernels (written for these tests) and a gcc -O0 reference runner for
the CUDA-from-C tests (tests/test_c_cuda_tiled.py) and the measurement script
(scripts/c_cuda_measure.py).

Each :class:`Case` is a C function with ``int`` size parameters and array parameters;
``signature`` lists its parameters in C order.  :func:`gcc_reference` compiles the same
source with ``gcc -O0 -ffp-contract=off`` and runs it on copies of the arrays, which is
what the CUDA simulator's results are compared with.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    signature: tuple[str, ...]                  # parameters in C order
    shapes: dict[str, tuple[str, ...]]           # array -> extents (parameter names or ints)
    dtype: str = "float32"
    paths: tuple[str, ...] = ()                  # expected path per top-level nest
    extra: dict[str, int] = field(default_factory=dict)   # non-extent parameters (T)


GEMM = Case("gemm", r"""
void gemm(int NI, int NJ, int NK, float alpha[1], float beta[1],
          float C[NI][NJ], float A[NI][NK], float B[NK][NJ]) {
#pragma scop
  for (int i = 0; i < NI; i++)
    for (int j = 0; j < NJ; j++) {
      C[i][j] *= beta[0];
      for (int k = 0; k < NK; k++)
        C[i][j] += alpha[0] * A[i][k] * B[k][j];
    }
#pragma endscop
}
""", ("NI", "NJ", "NK", "alpha", "beta", "C", "A", "B"),
    {"alpha": (1,), "beta": (1,), "C": ("NI", "NJ"), "A": ("NI", "NK"), "B": ("NK", "NJ")},
    paths=("tiled:contraction",))

MM2 = Case("mm2", r"""
void mm2(int NI, int NJ, int NK, int NL, double tmp[NI][NJ], double A[NI][NK],
         double B[NK][NJ], double C[NJ][NL], double D[NI][NL]) {
  for (int i = 0; i < NI; i++)
    for (int j = 0; j < NJ; j++) {
      tmp[i][j] = 0.0;
      for (int k = 0; k < NK; ++k)
        tmp[i][j] += 1.5 * A[i][k] * B[k][j];
    }
  for (int i = 0; i < NI; i++)
    for (int j = 0; j < NL; j++) {
      D[i][j] *= 1.2;
      for (int k = 0; k < NJ; ++k)
        D[i][j] += tmp[i][k] * C[k][j];
    }
}
""", ("NI", "NJ", "NK", "NL", "tmp", "A", "B", "C", "D"),
    {"tmp": ("NI", "NJ"), "A": ("NI", "NK"), "B": ("NK", "NJ"), "C": ("NJ", "NL"),
     "D": ("NI", "NL")}, dtype="float64", paths=("tiled:contraction", "tiled:contraction"))

# syrk with the j loop outside k: a triangular GEMM-like nest
SYRK = Case("syrk", r"""
void syrk(int N, int M, float C[N][N], float A[N][M]) {
  for (int i = 0; i < N; i++)
    for (int j = 0; j <= i; j++) {
      C[i][j] = C[i][j] * 0.75f;
      for (int k = 0; k < M; k++)
        C[i][j] += 2.0f * A[i][k] * A[j][k];
    }
}
""", ("N", "M", "C", "A"), {"C": ("N", "N"), "A": ("N", "M")},
    paths=("tiled:contraction",))

# bicg-like: an initialisation (tiled), a column sum whose outer loop carries the
# dependence (its permutable band interchanged: j outer, then a 1-D contraction), a
# matrix-vector product (a 1-D contraction)
BICG = Case("bicg", r"""
void bicg(int N, int M, float A[N][M], float s[M], float q[N], float p[M], float r[N]) {
  for (int j = 0; j < M; j++)
    s[j] = 0.0f;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < M; j++)
      s[j] = s[j] + r[i] * A[i][j];
  for (int i = 0; i < N; i++) {
    q[i] = 0.0f;
    for (int j = 0; j < M; j++)
      q[i] = q[i] + A[i][j] * p[j];
  }
}
""", ("N", "M", "A", "s", "q", "p", "r"),
    {"A": ("N", "M"), "s": ("M",), "q": ("N",), "p": ("M",), "r": ("N",)},
    paths=("tiled:elementwise", "tiled:contraction", "tiled:contraction"))

# jacobi-2d-like: a time loop (baseline: its outer loop carries dependences)
JACOBI2D = Case("jacobi2d", r"""
void jacobi2d(int T, int N, double A[N][N], double B[N][N]) {
  for (int t = 0; t < T; t++) {
    for (int i = 1; i < N - 1; i++)
      for (int j = 1; j < N - 1; j++)
        B[i][j] = 0.2 * (A[i][j] + A[i][j - 1] + A[i][1 + j] + A[1 + i][j] + A[i - 1][j]);
    for (int i = 1; i < N - 1; i++)
      for (int j = 1; j < N - 1; j++)
        A[i][j] = 0.2 * (B[i][j] + B[i][j - 1] + B[i][1 + j] + B[1 + i][j] + B[i - 1][j]);
  }
}
""", ("T", "N", "A", "B"), {"A": ("N", "N"), "B": ("N", "N")}, dtype="float64",
    paths=("baseline",), extra={"T": 3})

# a 2-D stencil with an if (tiled), a recurrence (baseline), a decreasing loop (its
# coincident member reversed, then tiled)
STENCIL = Case("stencil", r"""
void stencil(int N, int M, float A[N][M], float B[N][M], float x[N], float y[N], float z[N]) {
  for (int i = 0; i < N; i++)
    for (int j = 0; j < M; j++)
      if (i >= 1 && i < N - 1 && j >= 1 && j < M - 1)
        B[i][j] = A[i - 1][j] + A[i + 1][j] - 4.0f * A[i][j] + A[i][j - 1] + A[i][j + 1];
  for (int i = 1; i < N; i++)
    z[i] = z[i - 1] * 0.5f + x[i];
  for (int i = N - 1; i >= 0; i--)
    y[i] = x[i] * 3.0f + (i > 0 ? x[i - 1] : 0.0f);
}
""", ("N", "M", "A", "B", "x", "y", "z"),
    {"A": ("N", "M"), "B": ("N", "M"), "x": ("N",), "y": ("N",), "z": ("N",)},
    paths=("tiled:elementwise", "baseline", "tiled:elementwise"))

# a 3-D nest whose innermost loop carries a dependence (prefix sums along k): the
# band is split after its two coincident members
SCAN3 = Case("scan3", r"""
void scan3(int P, int Q, int R, float X[P][Q][R], float W[R]) {
  for (int p = 0; p < P; p++)
    for (int q = 0; q < Q; q++)
      for (int k = 1; k < R; k++)
        X[p][q][k] = X[p][q][k - 1] * W[k] + X[p][q][k];
}
""", ("P", "Q", "R", "X", "W"), {"X": ("P", "Q", "R"), "W": ("R",)},
    paths=("tiled:elementwise",))

# w = B^T (B v) in one nest: no outer loop is parallel for both statements, so isl's
# scheduler (outer coincidence) distributes it, then each part is tiled
BTBV = Case("btbv", r"""
void btbv(int R, int K, double Bm[R][K], double v[K], double w[K], double u[R]) {
  for (int c = 0; c < K; ++c)
    w[c] = 0.0;
  for (int r = 0; r < R; ++r) {
    u[r] = 0.0;
    for (int c = 0; c < K; ++c)
      u[r] += Bm[r][c] * v[c];
    for (int c = 0; c < K; ++c)
      w[c] += Bm[r][c] * u[r];
  }
}
""", ("R", "K", "Bm", "v", "w", "u"),
    {"Bm": ("R", "K"), "v": ("K",), "w": ("K",), "u": ("R",)}, dtype="float64",
    paths=("tiled:contraction", "tiled:contraction"))

# the symmetric rank-k update with k outside j, written to be vectorised along j on a
# CPU: the program-order tree tiles only i (elementwise); isl's schedule (i, j, k)
# makes it a contraction
SYRK_KJ = Case("syrk_kj", r"""
void syrk_kj(int N, int M, float C[N][N], float A[N][M]) {
  for (int i = 0; i < N; i++) {
    for (int j = 0; j <= i; j++)
      C[i][j] *= 0.5f;
    for (int k = 0; k < M; k++)
      for (int j = 0; j <= i; j++)
        C[i][j] += 1.5f * A[i][k] * A[j][k];
  }
}
""", ("N", "M", "C", "A"), {"C": ("N", "N"), "A": ("N", "M")},
    paths=("tiled:contraction",))

# gemm with k outside j: isl's schedule (i, j, k), the k band sunk below the scaling,
# then the same tiles, shared-memory operands and register accumulators as GEMM
GEMM_KJ = Case("gemm_kj", r"""
void gemm_kj(int NI, int NJ, int NK, float C[NI][NJ], float A[NI][NK], float B[NK][NJ]) {
  for (int i = 0; i < NI; i++) {
    for (int j = 0; j < NJ; j++)
      C[i][j] *= 0.5f;
    for (int k = 0; k < NK; k++)
      for (int j = 0; j < NJ; j++)
        C[i][j] += 1.5f * A[i][k] * B[k][j];
  }
}
""", ("NI", "NJ", "NK", "C", "A", "B"),
    {"C": ("NI", "NJ"), "A": ("NI", "NK"), "B": ("NK", "NJ")}, paths=("tiled:contraction",))

CASES = (GEMM, MM2, SYRK, BICG, JACOBI2D, STENCIL, SCAN3, BTBV, SYRK_KJ, GEMM_KJ)


def arrays_for(case: Case, sizes: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Random arrays (standard normal) of the case's shapes at ``sizes``."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, ext in case.shapes.items():
        shape = tuple(sizes[e] if isinstance(e, str) else e for e in ext)
        out[name] = rng.standard_normal(shape).astype(case.dtype)
    return out


_LIBS: dict[str, ctypes.CDLL] = {}


def gcc_reference(case: Case, sizes: dict[str, int], arrays: dict[str, np.ndarray],
                  tmp: str | None = None) -> dict[str, np.ndarray]:
    """Run the case's C function compiled by ``gcc -O0 -ffp-contract=off`` on copies of
    ``arrays``; return every array after the call."""
    key = hashlib.sha1(case.source.encode()).hexdigest()[:12]
    if key not in _LIBS:
        d = tmp or tempfile.mkdtemp(prefix="c_cuda_ref_")
        c, so = os.path.join(d, f"{key}.c"), os.path.join(d, f"{key}.so")
        with open(c, "w") as f:
            f.write(case.source)
        subprocess.run(["gcc", "-O0", "-ffp-contract=off", "-shared", "-fPIC", "-o", so, c],
                       check=True, capture_output=True)
        _LIBS[key] = ctypes.CDLL(so)
    fn = getattr(_LIBS[key], case.name)
    copies = {k: np.ascontiguousarray(v).copy() for k, v in arrays.items()}
    args = [ctypes.c_int(sizes[p]) if p not in copies else
            copies[p].ctypes.data_as(ctypes.c_void_p) for p in case.signature]
    fn.restype = None
    fn(*args)
    return copies
