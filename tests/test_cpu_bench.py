"""The CPU benchmark suite's pieces that can be checked quickly: its numpy peers compute
what polycomp's kernels compute, the table states the thread count, and one tiny case
runs end to end (timings are reported by `polycomp bench cpu`, never asserted)."""
import time

import numpy as np
import pytest

from polycomp.benchmarks import cpu as bench
from polycomp.frontend.ops import OPS


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 1), (2, 0), (1, 0)])
def test_im2col_peer_matches_the_op_reference(stride, pad):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 9, 9)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    from polycomp.frontend.ops import _ref_conv2d
    ref = _ref_conv2d((stride, stride), (pad, pad), (1, 1))(x, w)
    np.testing.assert_allclose(bench.im2col_conv(x, w, stride, pad), ref, rtol=1e-5, atol=1e-5)


def test_numpy_peers_match_the_op_references():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 33)).astype(np.float32)
    g, b = rng.standard_normal(33).astype(np.float32), rng.standard_normal(33).astype(np.float32)
    np.testing.assert_allclose(bench.np_softmax(x), OPS["softmax"].reference(x), rtol=1e-5)
    np.testing.assert_allclose(bench.np_layernorm(x, g, b), OPS["layernorm"].reference(x, g, b),
                               rtol=1e-4, atol=1e-5)


def test_table_states_threads_and_bandwidth_fraction():
    result = {"info": {"threads": 2, "target": "cpu", "isa": "avx512", "openblas": "x",
                       "kernel": "SkylakeX"},
              "copy_bandwidth_GBs": 20.0,
              "rows": [{"group": "softmax", "case": "(4, 4)", "ours_ms": 1.0, "peer_ms": 2.0,
                        "peer": "numpy", "ratio": 2.0, "GB/s": 15.0, "peer_GB/s": 7.5,
                        "of_copy_bw": 0.75, "of_stream_copy": 0.9, "ratio_median": 1.5}]}
    text = bench.format_table(result)
    assert "threads: 2" in text and "| softmax | (4, 4) |" in text
    assert "| 2.00 | 1.50 |" in text and "| 75% | 90% |" in text


def test_timeit_keeps_the_best_and_the_median_call():
    calls = iter([0.0, 0.0] + [0.003, 0.001, 0.002] * 10)
    times = bench._timeit([lambda: time.sleep(next(calls))], repeat=3, min_time=0.0)
    assert len(times) == 1 and times[0] <= times[0].median
    s = bench.Suite(quick=True, threads=1, repeat=1, target="cpu")
    fast, slow = bench.BestTime(1.0), bench.BestTime(2.0)
    fast.median, slow.median = 1.0, 4.0
    row = s.add("g", "c", fast, slow, "peer")
    assert row["ratio"] == 2.0 and row["ratio_median"] == 4.0


def test_one_case_runs(monkeypatch):
    s = bench.Suite(quick=True, threads=1, repeat=1, target="cpu")
    monkeypatch.setattr(bench, "_timeit", lambda fns, repeat: [1e-3] * len(fns))
    bw = bench.bench_stream(s, 1 << 16)
    assert bw > 0 and [r["group"] for r in s.rows] == ["stream", "stream"]


def test_machine_info_comes_from_the_target():
    from polycomp.hw.target import get_target
    info = bench.machine_info(get_target("cpu-avx512"))
    assert info["isa"] == "avx512" and info["vector_bits"] == 512
    assert info["l1"] == get_target("cpu-avx512").memory.capacity("L1") > 0


def test_fp64_rows_get_half_the_fp32_roof():
    class Roofs:
        def roof(self, unit, threads, work, traffic):
            return min(100.0, work / traffic), unit

    rows = [{"group": g, "work": 1000.0, "traffic": 1.0, "GFLOP/s": 40.0, "peer_GFLOP/s": 45.0}
            for g in ("sgemm", "dgemm")]
    rows[1]["flop_cost"] = 2
    bench.add_roofline(rows, Roofs(), "fp32 FMA 512-bit", 1)
    assert rows[0]["roof_value"] == 100.0 and rows[0]["of_roof"] == 0.4
    assert rows[1]["roof_value"] == 50.0 and rows[1]["of_roof"] == 0.8
    assert "fp64" in rows[1]["roof"] and "dgemm" in bench.GROUPS
