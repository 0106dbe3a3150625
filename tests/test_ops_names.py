"""User names that collide with identifiers of the generated C/CUDA still compile and run.

Tensor, stage and symbol names are the user's; the printers rename the ones C or CUDA
cannot use (math functions, runtime functions, locals of the host code, isl's loop
iterators ``c0, c1, ...``) without changing the argument order.
"""
import subprocess

import numpy as np
import polycomp as pc
from polycomp.driver import build, compile_kernel, interpret

N, c1 = pc.sym("N c1")


@pc.tensor_expr
def clashing(expf: pc.Tensor[(N, c1), "float64"], err: pc.Tensor[(c1,), "float64"]):
    a = pc.compute((N, c1), lambda i, j: pc.exp(expf[i, j]), name="exp")
    b = pc.compute((N, c1), lambda i, j: a[i, j] * err[j], name="c0")
    return pc.compute((N, c1), lambda i, j: b[i, j] + 1.0, name="free")


def _ref(x, y):
    return np.exp(x) * y + 1.0


def test_clashing_names_c_backend():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((3, 5)), rng.standard_normal(5)
    np.testing.assert_allclose(build(clashing, "c")(x, y), _ref(x, y), rtol=1e-12)
    np.testing.assert_allclose(interpret(clashing, x, y), _ref(x, y), rtol=1e-12)


def test_clashing_names_cuda_source_compiles(tmp_path):
    ck = compile_kernel(clashing, "cuda")
    x, y = np.ones((2, 3)), np.arange(3.0)
    np.testing.assert_allclose(interpret(ck, x, y), _ref(x, y), rtol=1e-12)
    cu = tmp_path / "k.cu"
    cu.write_text(ck.source)
    r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "k.cubin"), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
