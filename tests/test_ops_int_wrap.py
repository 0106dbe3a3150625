"""Narrow-integer arithmetic wraps after every operation, in every backend, as in numpy.

int8/int32 values are computed in int64 by the C/CUDA printers (C's integer promotion
would otherwise keep ``int8 * int8`` exact, and int32 overflow is undefined in C), so
they must be wrapped back to their dtype after each ``+ - * // %`` and negation for the
C backend to agree with the interpreter and numpy.
"""
import subprocess

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import polycomp as pc
from polycomp.driver import build, compile_kernel, interpret

N = pc.sym("N")


def _kernel(dtype):
    @pc.tensor_expr(name=f"wrap_{dtype}")
    def wrap(a: pc.Tensor[(N,), dtype], b: pc.Tensor[(N,), dtype]):
        p = pc.compute((N,), lambda i: (a[i] * b[i]) // 3 + (-a[i]) * 2, name="p")
        return pc.compute((N,), lambda i: (p[i] - b[i] * b[i]) % 7 + a[i] * a[i] * b[i], name="q")
    return wrap


def _ref(a, b):
    with np.errstate(all="ignore"):
        p = (a * b) // np.asarray(3, a.dtype) + (-a) * np.asarray(2, a.dtype)
        return (p - b * b) % np.asarray(7, a.dtype) + a * a * b


KERNELS = {d: _kernel(d) for d in ("int8", "int32")}
_RUN = {}


def _runners(dtype):
    if dtype not in _RUN:
        k = KERNELS[dtype]
        cuda = compile_kernel(k, "cuda")
        _RUN[dtype] = {"interpreter": lambda *x: interpret(k, *x), "c": build(k, "c"),
                       "cuda-ir": lambda *x: interpret(cuda, *x)}
    return _RUN[dtype]


@pytest.mark.parametrize("dtype", ["int8", "int32"])
@given(n=st.integers(1, 200), seed=st.integers(0, 2 ** 32 - 1))
def test_narrow_int_arithmetic_wraps_like_numpy(dtype, n, seed):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    a = rng.integers(info.min, info.max, size=n, endpoint=True).astype(dtype)
    b = rng.integers(info.min, info.max, size=n, endpoint=True).astype(dtype)
    ref = _ref(a, b)
    for path, run in _runners(dtype).items():
        np.testing.assert_array_equal(run(a, b), ref, err_msg=f"{dtype} via {path}")


@pytest.mark.nvcc
def test_narrow_int_cuda_source_compiles(tmp_path):
    src = compile_kernel(KERNELS["int8"], "cuda").source
    cu = tmp_path / "w.cu"
    cu.write_text(src)
    r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "w.cubin"), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
