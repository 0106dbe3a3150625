"""Integer ``//`` and ``%`` by zero (and ``INT64_MIN // -1``) follow numpy on every
backend: the result is 0 (wrapped for the overflow), never SIGFPE / SIGILL or an
interpreter error (issue #14, crashes)."""
import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import build, compile_kernel, interpret

N = pc.sym("N")


def _kernel(dtype: str):
    @pc.tensor_expr
    def divk(A: pc.Tensor[(N,), dtype], B: pc.Tensor[(N,), dtype]):
        Q = pc.compute((N,), lambda i: A[i] // B[i], name="Q")
        R = pc.compute((N,), lambda i: A[i] % B[i], name="R")
        Z = pc.compute((N,), lambda i: A[i] // 0 + A[i] % 0, name="Z")
        return Q, R, Z
    return divk


def _paths(kernel):
    return {"interpreter": lambda *a: interpret(compile_kernel(kernel, "c"), *a),
            "c": build(kernel, "c"),
            "cpu-avx2": build(kernel, "cpu-avx2"),
            "cuda (simulator IR)": lambda *a: interpret(compile_kernel(kernel, "cuda"), *a)}


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_division_by_zero_like_numpy(dtype):
    info = np.iinfo(dtype)
    A = np.array([7, -7, 5, 0, info.min, info.min, info.max, 3], dtype=dtype)
    B = np.array([2, 0, -3, 0, -1, 0, -1, 1], dtype=dtype)
    with np.errstate(all="ignore"):
        ref = (A // B, A % B, A // 0 + A % 0)
    for name, run in _paths(_kernel(dtype)).items():
        for got, want, what in zip(run(A, B), ref, ("//", "%", "// 0 + % 0")):
            np.testing.assert_array_equal(got, want, err_msg=f"{name}: {what}")
