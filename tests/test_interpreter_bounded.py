"""The IR interpreter evaluates reductions in chunks: memory stays bounded for large
problems (``polycomp run`` of a 1024^3 matmul used to be OOM-killed at 24 GB, issue #14)
and results do not depend on the chunk size."""
import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import interpret
from polycomp.lowering import interpreter

N, M, K = pc.sym("N M K")


@pc.tensor_expr
def mm_max(A: pc.Tensor[(N, K), "float64"], B: pc.Tensor[(K, M), "float64"]):
    k = pc.reduce_axis(K, "k")
    C = pc.compute((N, M), lambda i, j: pc.sum(A[i, k] * B[k, j], axis=k), name="C")
    kk = pc.reduce_axis(K, "kk")
    D = pc.compute((N,), lambda i: pc.max(A[i, kk], axis=kk), name="D")
    return C, D


@pytest.mark.parametrize("limit", [1, 7, 64, 1 << 23])
def test_chunked_reductions_agree(monkeypatch, limit):
    monkeypatch.setattr(interpreter, "MAX_REDUCTION_LANES", limit)
    rng = np.random.default_rng(limit)
    A = rng.standard_normal((5, 13))
    B = rng.standard_normal((13, 3))
    C, D = interpret(mm_max, A, B)
    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(D, A.max(axis=1))


def test_large_reduction_memory_is_bounded():
    """lanes x iterations = 2^27 here; in chunks the peak stays far below the 1 GiB the
    products alone would take (measured with tracemalloc on numpy's allocations)."""
    import tracemalloc
    A = np.ones((512, 512))
    B = np.ones((512, 512))
    tracemalloc.start()
    try:
        C, _ = interpret(mm_max, A, B)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.all(C == 512.0)
    assert peak < 400 * 2 ** 20, f"peak {peak / 2**20:.0f} MiB"
