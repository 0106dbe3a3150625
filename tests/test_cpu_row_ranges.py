"""``cpu_row_ranges``: a GEMM with a symbolic row count runs by row ranges cut at run
time (scheduler/cpu/scop_gemm.py ``row_ranges``, hw/cpu/row_ranges.py).

The exactness of the built kernels is checked with the other C SCoPs
(tests/test_c_scop_schedule.py, ``gemm_ikj`` at 389 rows: four ranges); here the range
arithmetic the IR pass prints, run on Python integers (lowering/host_eval.py), and
that the tree and the C carry one range loop per product."""
from __future__ import annotations

import islpy as isl
import pytest

from polycomp import ir
from polycomp.hw.cpu.row_ranges import range_bounds
from polycomp.lowering.host_eval import call_host
from polycomp.scheduler.cpu.state import RowRanges


def _value(expr: ir.Expr, n: ir.Var, u: ir.Var, nv: int, uv: int) -> int:
    f = ir.LoweredFunc("f", (n, u), (), (), ir.Return(expr), ())
    out = call_host(f, {"n": nv, "u": uv})
    assert out is not None
    return out


@pytest.mark.parametrize("threads", [2, 3])
def test_ranges_cover_the_rows_balanced_over_the_threads(threads):
    ctx = isl.Context()
    pa = isl.PwAff("[n] -> { [(0)] }", context=ctx)
    rec = RowRanges("lo", "hi", pa, pa, 6, 192, threads)
    n, u = ir.Var("n", is_param=True), ir.Var("u")
    first, last = ir.IntImm(3), n + 2                  # rows 3 .. n + 2
    U, lo, hi = range_bounds(rec, first, last, u)
    for nv in (1, 5, 6, 7, 191, 192, 385, 800, 900, 1000, 1153, 2000):
        count = _value(U, n, u, nv, 0)
        ranges = [(_value(lo, n, u, nv, k), _value(hi, n, u, nv, k)) for k in range(count)]
        assert ranges[0][0] == 3 and ranges[-1][1] == nv + 3, (nv, ranges)
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), (nv, ranges)
        assert all(0 < h - lo_ <= 192 for lo_, h in ranges), (nv, ranges)
        assert all((h - lo_) % 6 == 0 for lo_, h in ranges[:-1]), (nv, ranges)
        panels = -(-nv // 6)
        if count < panels:
            # OpenMP's static schedule: each thread count / threads consecutive ranges
            assert count % threads == 0, (nv, count)
            per = count // threads
            shares = [ranges[(t + 1) * per - 1][1] - ranges[t * per][0]
                      for t in range(threads)]
            assert max(shares) - min(shares) <= 6, (nv, shares)


def test_a_small_product_is_not_split():
    """Fewer than ``min_work`` multiply-adds a range: fewer ranges (PolyBench's SMALL
    gemm, 60 x 70 x 80, one range; MEDIUM's 200 x 220 x 240 one per thread)."""
    from polycomp.scheduler.cpu.scop_gemm import RANGE_MIN_WORK
    ctx = isl.Context()
    pa = isl.PwAff("[n] -> { [(0)] }", context=ctx)
    rec = RowRanges("lo", "hi", pa, pa, 6, 192, 2, (pa, pa), RANGE_MIN_WORK)
    n, u = ir.Var("n", is_param=True), ir.Var("u")
    for rows, cols, depth, want in ((60, 70, 80, 1), (200, 220, 240, 2), (1, 1, 1, 1)):
        U, _, _ = range_bounds(rec, ir.IntImm(0), n - 1, u, (ir.IntImm(cols), ir.IntImm(depth)))
        assert _value(U, n, u, rows, 0) == want, (rows, cols, depth)
