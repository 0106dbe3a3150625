"""Real-GPU runs through pycuda or cupy.  Skipped where no NVIDIA GPU exists: this machine
and CI have none, so the CUDA numerics are checked by the simulator tests."""
import numpy as np
import pytest

from polycomp.hw.cuda.launcher import gpu_available

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not gpu_available(),
                                 reason="hardware: no NVIDIA GPU (with pycuda or cupy) here")]


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



@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tensor_core_matmul_on_gpu(dtype):
    """The mma.sync path at a shape with partial tiles on every axis."""
    import ml_dtypes

    from polycomp.driver import build
    from polycomp.frontend import ops
    np_dt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(1)
    a = rng.standard_normal((517, 263)).astype(np_dt)
    b = rng.standard_normal((263, 389)).astype(np_dt)
    out = build(ops.matmul_kernel(dtype), "cuda")(a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())


@pytest.mark.parametrize("shape", [(12, 197, 64), (2, 37, 80)], ids=["ViT-B", "odd"])
def test_fused_attention_on_gpu(shape):
    """The chain-fused attention kernel (one kernel, online softmax) on hardware."""
    from polycomp.benchmarks.chains import _kernel
    from polycomp.driver import build
    b, s, d = shape
    rng = np.random.default_rng(2)
    q, kt, v = (rng.standard_normal(x).astype(np.float32)
                for x in ((b, s, d), (b, d, s), (b, s, d)))
    out = build(_kernel("attention", shape), "cuda")(q, kt, v)
    t = (q.astype(np.float64) @ kt) / np.sqrt(d)
    e = np.exp(t - t.max(-1, keepdims=True))
    ref = (e / e.sum(-1, keepdims=True)) @ v
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
