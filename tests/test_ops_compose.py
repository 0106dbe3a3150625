"""Operators compose inside a user's ``@tensor_expr`` kernel: the same operator used
twice (stage names are made unique), a residual connection, scalar operands, and
symbols shared between operators."""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import polycomp as pc
from polycomp.driver import build, compile_kernel, interpret
from polycomp.frontend import ops

N, D, Hd = pc.sym("N D Hd")


@pc.tensor_expr
def ffn_block(X: pc.Tensor[(N, D), "float64"], W1: pc.Tensor[(D, Hd), "float64"],
              b1: pc.Tensor[(Hd,), "float64"], W2: pc.Tensor[(Hd, D), "float64"],
              g: pc.Tensor[(D,), "float64"], beta: pc.Tensor[(D,), "float64"]):
    h = ops.gelu(ops.bias_add(ops.matmul(X, W1), b1))
    y = ops.add(X, ops.mul(ops.matmul(h, W2), 0.5))
    return ops.layernorm(y, g, beta)


def _ref(X, W1, b1, W2, g, beta):
    erf = np.vectorize(math.erf)
    t = X @ W1 + b1
    h = 0.5 * t * (1 + erf(t / math.sqrt(2)))
    y = X + 0.5 * (h @ W2)
    mu = y.mean(-1, keepdims=True)
    var = ((y - mu) ** 2).mean(-1, keepdims=True)
    return (y - mu) / np.sqrt(var + 1e-5) * g + beta


def test_stage_names_are_unique():
    names = [s.name for s in ffn_block.graph.stages]
    assert len(names) == len(set(names))
    assert "matmul" in names and "matmul_1" in names


_RUN = {}


@pytest.mark.slow
@given(n=st.integers(1, 17), d=st.integers(1, 13), h=st.integers(1, 11),
       seed=st.integers(0, 2 ** 32 - 1))
def test_ffn_block_matches_numpy(n, d, h, seed):
    if not _RUN:
        _RUN["c"] = build(ffn_block, "c")
        cuda = compile_kernel(ffn_block, "cuda")
        _RUN["interpreter"] = lambda *x: interpret(ffn_block, *x)
        _RUN["cuda-ir"] = lambda *x: interpret(cuda, *x)
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(s) for s in ((n, d), (d, h), (h,), (h, d), (d,), (d,))]
    ref = _ref(*args)
    for path, run in _RUN.items():
        np.testing.assert_allclose(run(*args), ref, rtol=1e-9, atol=1e-9, err_msg=path)
