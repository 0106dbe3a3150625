"""NaN follows numpy on every backend: it propagates through ``max``/``min`` (elementwise
and reductions), ``relu`` and the float math (issue #14, silent wrong result 5)."""
import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import build, compile_kernel, interpret
from polycomp.hw.cpu.build import CFunction
from polycomp.hw.cpu.simd_build import build_simde, has_native_avx512

N, M = pc.sym("N M")


@pc.tensor_expr
def relu_rowmax(A: pc.Tensor[(N, M), "float32"]):
    R = pc.compute((N, M), lambda i, j: pc.max(A[i, j], 0.0), name="R")
    Q = pc.compute((N, M), lambda i, j: pc.min(0.0, A[i, j]), name="Q")
    j = pc.reduce_axis(M, "j")
    X = pc.compute((N,), lambda i: pc.max(A[i, j], axis=j), name="X")
    jj = pc.reduce_axis(M, "jj")
    Y = pc.compute((N,), lambda i: pc.min(A[i, jj], axis=jj), name="Y")
    return R, Q, X, Y


def _reference(A):
    return (np.maximum(A, 0.0), np.minimum(0.0, A), A.max(axis=1), A.min(axis=1))


def _runners():
    out = {"interpreter": lambda a: interpret(compile_kernel(relu_rowmax, "c"), a),
           "c": build(relu_rowmax, "c"),
           "cpu-avx2": build(relu_rowmax, "cpu-avx2"),
           "cuda (simulator IR)": lambda a: interpret(compile_kernel(relu_rowmax, "cuda"), a)}
    ck = compile_kernel(relu_rowmax, "cpu-avx512")
    out["cpu-avx512 (SIMDe)"] = CFunction(ck.final_ir, build_simde(ck.source))
    if has_native_avx512():
        out["cpu-avx512 (native)"] = build(relu_rowmax, "cpu-avx512")
    return out


def _input(m: int) -> np.ndarray:
    """Rows with a NaN first, last, in the middle of a vector, and none."""
    rng = np.random.default_rng(m)
    A = rng.standard_normal((5, m)).astype(np.float32)
    A[0, 0] = np.nan
    A[1, m - 1] = np.nan
    A[2, m // 2] = np.nan
    A[3, :] = np.nan
    return A


@pytest.mark.parametrize("m", [1, 7, 8, 17, 40])
def test_nan_propagates_like_numpy(m):
    A = _input(m)
    ref = _reference(A)
    for name, run in _runners().items():
        got = run(A)
        for g, r, what in zip(got, ref, ("relu", "min(0, x)", "row max", "row min")):
            np.testing.assert_array_equal(np.asarray(g), r, err_msg=f"{name}: {what}")


def test_issue_examples():
    """``relu([nan, -1, 2])`` is ``[nan, 0, 2]``; a row max with a NaN is NaN."""
    A = np.array([[np.nan, -1.0, 2.0], [10.0, np.nan, 3.0]], dtype=np.float32)
    for name, run in _runners().items():
        R, _, X, _ = run(A)
        np.testing.assert_array_equal(R[0], [np.nan, 0.0, 2.0], err_msg=name)
        np.testing.assert_array_equal(X, [np.nan, np.nan], err_msg=name)
