"""Real-GPU runs through pycuda.  Skipped where no NVIDIA GPU (and pycuda) exists: this
machine and CI have none, so the CUDA numerics are checked by the simulator tests."""
import numpy as np
import pytest

from polycomp.hw.cuda.launcher import gpu_available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(),
                                                 reason="no NVIDIA GPU / pycuda on this machine")]


def test_matmul_relu_on_gpu_matches_numpy():
    import polycomp as pc
    from polycomp.driver import build
    N, M, K = pc.sym("N M K")

    @pc.tensor_expr
    def mm(A: pc.Tensor[(N, K), "float32"], B: pc.Tensor[(K, M), "float32"]):
        k = pc.reduce_axis(K, "k")
        C = pc.compute((N, M), lambda i, j: pc.sum(A[i, k] * B[k, j], axis=k), name="C")
        return pc.compute((N, M), lambda i, j: pc.max(C[i, j], 0.0), name="D")

    rng = np.random.default_rng(0)
    A = rng.standard_normal((131, 67)).astype(np.float32)
    B = rng.standard_normal((67, 95)).astype(np.float32)
    out = build(mm, "cuda")(A, B)
    np.testing.assert_allclose(out, np.maximum(A @ B, 0), rtol=1e-4, atol=1e-4)

