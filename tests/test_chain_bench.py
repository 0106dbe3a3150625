"""benchmarks/chains.py: its kernels are chains the fused path takes, its numpy peers
compute the same thing, and its table and geometric means."""
import math

import numpy as np
import pytest

from polycomp.benchmarks import chains
from polycomp.scheduler.chain.detect import detect_chains


@pytest.mark.parametrize("group,shape", [("bmm", (2, 12, 8, 5, 7)),
                                         ("bmm+softmax", (2, 12, 8, 5, 7)),
                                         ("attention", (3, 11, 4))])
def test_benchmark_kernels_are_chains_and_match_numpy(group, shape):
    from polycomp.driver import build
    k = chains._kernel(group, shape)
    (m,) = detect_chains(k.polyhedral_model())
    assert m.has_softmax == (group != "bmm")
    rng = np.random.default_rng(0)
    if group == "attention":
        b, s, d = shape
        xs = [rng.standard_normal(x).astype(np.float32) for x in ((b, s, d), (b, d, s), (b, s, d))]
        ref = chains._np_softmax((xs[0] @ xs[1]) * np.float32(1 / math.sqrt(d))) @ xs[2]
    else:
        b, mm, n, kk, ll = shape
        xs = [rng.standard_normal(x).astype(np.float32)
              for x in ((b, mm, kk), (b, kk, ll), (b, ll, n))]
        t = xs[0] @ xs[1]
        ref = (chains._np_softmax(t) if group == "bmm+softmax" else t) @ xs[2]
    np.testing.assert_allclose(build(k, "c")(*xs), ref, rtol=2e-4, atol=2e-4)


def test_summary_and_table():
    rows = [{"group": "bmm", "case": "G1", "shape": [1], "fused": True, "max_rel_err": 0.0,
             "fused_ms": 1.0, "fused_median_ms": 1.0, "fused_GFLOPs": 10.0,
             "unfused_ms": 2.0, "x_unfused": 2.0, "x_unfused_median": 1.0,
             "numpy_ms": 8.0, "x_numpy": 8.0, "x_numpy_median": 4.0},
            {"group": "bmm", "case": "G2", "shape": [1], "fused": False, "max_rel_err": 0.0,
             "fused_ms": 1.0, "fused_median_ms": 1.0, "fused_GFLOPs": 10.0,
             "unfused_ms": 0.5, "x_unfused": 0.5, "x_unfused_median": 1.0,
             "numpy_ms": 2.0, "x_numpy": 2.0, "x_numpy_median": 1.0}]
    s = {x["group"]: x for x in chains.summary(rows)}
    assert s["bmm"]["x_unfused"] == pytest.approx(1.0) and s["all"]["x_numpy"] == pytest.approx(4.0)
    table = chains.format_table({"threads": 1, "target": "c", "isa": "", "rows": rows,
                                 "summary": chains.summary(rows)})
    assert "G2 (NOT fused)" in table and "| bmm | 2 | 1.00 / 1.00 | 4.00 / 2.00 |" in table
    assert set(chains.CHAINS) == {f"G{i}" for i in range(1, 13)}
    assert chains.CHAINS["G10"] == (1, 512, 64, 64, 256)
