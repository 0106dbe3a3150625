"""``POLYCOMP_WEIGHT_GEMM_REGISTER=MRxNI`` (``graph/compile.py``
``weight_register_override``): the register block every non-head-split weight GEMM of a
graph is compiled with, for comparing blocks on a host (docs/graph.md, the Zen 3
profile); results still match numpy; a malformed value is a ``UsageError``."""
from __future__ import annotations

import numpy as np
import pytest

import polycomp.graph.compile as gcompile
from polycomp.errors import UsageError
from polycomp.graph import GraphBuilder, compile_graph


def _linear(rng):
    g = GraphBuilder("lin")
    x = g.input("x", (7, 16))
    w = rng.standard_normal((16, 40)).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    y = g.relu(g.add(g.matmul(x, g.constant("w", w)), g.constant("b", b)))
    return g.build(y), w, b


def test_override_reaches_the_weight_gemm(monkeypatch):
    seen = []
    real = gcompile.compile_kernel

    def spy(kernel, target, opts):
        seen.append(dict(opts or {}))
        return real(kernel, target, opts)
    monkeypatch.setattr(gcompile, "compile_kernel", spy)
    monkeypatch.setenv("POLYCOMP_WEIGHT_GEMM_REGISTER", "3x2")
    rng = np.random.default_rng(0)
    graph, w, b = _linear(rng)
    cg = compile_graph(graph, "cpu")
    assert [o.get("gemm_register") for o in seen] == [(3, 2)]
    x = rng.standard_normal((7, 16)).astype(np.float32)
    got = cg(x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(got, np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-5)


def test_unset_and_malformed(monkeypatch):
    monkeypatch.delenv("POLYCOMP_WEIGHT_GEMM_REGISTER", raising=False)
    assert gcompile.weight_register_override() is None
    monkeypatch.setenv("POLYCOMP_WEIGHT_GEMM_REGISTER", "6x2")
    assert gcompile.weight_register_override() == (6, 2)
    for bad in ("6", "0x2", "axb"):
        monkeypatch.setenv("POLYCOMP_WEIGHT_GEMM_REGISTER", bad)
        with pytest.raises(UsageError, match="MRxNI"):
            gcompile.weight_register_override()
