"""The CUDA simulator runs every kernel the CUDA pipeline emits for a few DSL kernels
and matches numpy, on random shapes (extent 1, primes, partial tiles), for both the
flattened ``final_ir`` (what codegen prints) and the mapped ``.ir``, for the default
(tiled) pipeline and the baseline mapping."""
import functools
import importlib.util
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import polycomp as pc
from polycomp.driver import compile_kernel
from polycomp.hw.cuda.codegen import split_kernels
from polycomp.hw.cuda.simulator import simulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N, M = pc.sym("N M")


def _matmul_relu():
    spec = importlib.util.spec_from_file_location("ex_mm", os.path.join(ROOT, "examples",
                                                                        "matmul_relu.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.matmul_relu


@pc.tensor_expr
def scale_bias(A: pc.Tensor[(N, M), "float32"], b: pc.Tensor[(M,), "float32"]):
    return pc.compute((N, M), lambda i, j: A[i, j] * 2.0 + b[j], name="C")


@pc.tensor_expr
def row_sum_max(A: pc.Tensor[(N, M), "float32"]):
    k = pc.reduce_axis(M, "k")
    s = pc.compute((N,), lambda i: pc.sum(A[i, k], axis=k), name="S")
    k2 = pc.reduce_axis(M, "k2")
    m = pc.compute((N,), lambda i: pc.max(A[i, k2], axis=k2), name="Mx")
    return s, m


@pc.tensor_expr
def softmax_rows(A: pc.Tensor[(N, M), "float32"]):
    k = pc.reduce_axis(M, "k")
    mx = pc.compute((N,), lambda i: pc.max(A[i, k], axis=k), name="mx")
    e = pc.compute((N, M), lambda i, j: pc.exp(A[i, j] - mx[i]), name="e")
    k2 = pc.reduce_axis(M, "k2")
    s = pc.compute((N,), lambda i: pc.sum(e[i, k2], axis=k2), name="s")
    return pc.compute((N, M), lambda i, j: e[i, j] / s[i], name="out")


PIPELINES = {"tiled": None, "baseline": {"gpu": "baseline"}}


@functools.lru_cache(maxsize=None)
def _compiled(name, pipeline):
    kernel = {"matmul_relu": _matmul_relu, "scale_bias": lambda: scale_bias,
              "row_sum_max": lambda: row_sum_max, "softmax_rows": lambda: softmax_rows}[name]()
    return compile_kernel(kernel, "cuda", PIPELINES[pipeline])


# extents around the tile sizes (16, 32, 64, 256), primes and 1
extent = st.one_of(st.sampled_from([1, 2, 3, 5, 7, 13, 16, 17, 31, 32, 33, 63, 65]),
                   st.integers(1, 80))


def _check(name, pipeline, inputs, expected, rtol=1e-5, atol=1e-5):
    ck = _compiled(name, pipeline)
    _, kernels = split_kernels(ck.final_ir)
    for stage in ("final", "ir"):
        out, rep = simulate(ck, *inputs, ir_stage=stage)
        outs = out if isinstance(out, tuple) else (out,)
        assert len(outs) == len(expected)
        for o, e in zip(outs, expected):
            assert not np.isnan(o).any(), f"{stage}: some outputs were never written"
            np.testing.assert_allclose(o, e, rtol=rtol, atol=atol)
        assert rep.ok, rep.summary()
        assert len(rep.kernels) == len(kernels)
        assert rep.global_store.requests > 0


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@given(n=extent, k=extent, m=extent, seed=st.integers(0, 2 ** 16))
def test_matmul_relu(pipeline, n, k, m, seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, k)).astype(np.float32)
    B = rng.standard_normal((k, m)).astype(np.float32)
    _check("matmul_relu", pipeline, (A, B), [np.maximum(A @ B, 0)], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@given(n=extent, m=extent, seed=st.integers(0, 2 ** 16))
def test_broadcast_elementwise(pipeline, n, m, seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, m)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    _check("scale_bias", pipeline, (A, b), [A * 2.0 + b])


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@given(n=extent, m=extent, seed=st.integers(0, 2 ** 16))
def test_row_reductions(pipeline, n, m, seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, m)).astype(np.float32)
    _check("row_sum_max", pipeline, (A,), [A.sum(axis=1), A.max(axis=1)], rtol=1e-4,
           atol=1e-4)


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@given(n=extent, m=extent, seed=st.integers(0, 2 ** 16))
def test_two_stage_softmax(pipeline, n, m, seed):
    rng = np.random.default_rng(seed)
    A = (3 * rng.standard_normal((n, m))).astype(np.float32)
    e = np.exp(A - A.max(axis=1, keepdims=True))
    _check("softmax_rows", pipeline, (A,), [e / e.sum(axis=1, keepdims=True)], rtol=1e-5,
           atol=1e-6)


def test_simulate_compiles_a_dsl_kernel_and_reports():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((9, 20)).astype(np.float32)
    b = rng.standard_normal(20).astype(np.float32)
    out, rep = simulate(scale_bias, A, b)       # a Kernel is compiled for cuda
    np.testing.assert_allclose(out, A * 2.0 + b, rtol=1e-6)
    text = str(rep)
    assert "scale_bias_k0" in text and "coalescing efficiency" in text
    assert rep.global_bytes_stored == 9 * 20 * 4          # each output once
    assert rep.flops == 2 * 9 * 20
    # the baseline mapping (one element per thread, no promotion) loads A and b once
    # per output element
    out, rep = simulate(_compiled("scale_bias", "baseline"), A, b)
    assert rep.global_bytes_loaded == 2 * 9 * 20 * 4


def test_matmul_256_counts_and_flops():
    """The size the brief names: 256x256x64 (and the flop count is exact)."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((256, 64)).astype(np.float32)
    B = rng.standard_normal((64, 256)).astype(np.float32)
    out, rep = simulate(_compiled("matmul_relu", "tiled"), A, B)
    np.testing.assert_allclose(out, np.maximum(A @ B, 0), rtol=1e-4, atol=1e-4)
    assert rep.ok
    assert rep.flops == 2 * 256 * 256 * 64
    assert rep.global_bytes_stored >= 256 * 256 * 4
    assert rep.global_bytes_loaded >= (256 * 64 + 64 * 256) * 4
