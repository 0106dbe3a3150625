"""``cpu_row_ranges``: a GEMM with a symbolic row count runs by row ranges cut at run
time (scheduler/cpu/scop_gemm.py ``row_ranges``, hw/cpu/row_ranges.py).

The exactness of the built kernels is checked with the other C SCoPs
(tests/test_c_scop_schedule.py, ``gemm_ikj`` at 1031 rows: four ranges); here the range
arithmetic the IR pass prints, run on Python integers (lowering/host_eval.py), and
the ranges' blocking (``range_blocking``)."""
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


@pytest.mark.parametrize("threads,mc", [(2, 192), (3, 192), (2, 510)])
def test_ranges_cover_the_rows_balanced_over_the_threads(threads, mc):
    ctx = isl.Context()
    pa = isl.PwAff("[n] -> { [(0)] }", context=ctx)
    rec = RowRanges("lo", "hi", pa, pa, 6, mc, threads)
    n, u = ir.Var("n", is_param=True), ir.Var("u")
    first, last = ir.IntImm(3), n + 2                  # rows 3 .. n + 2
    U, lo, hi = range_bounds(rec, first, last, u)
    for nv in (1, 5, 6, 7, 191, 192, 385, 800, 900, 1000, 1153, 2000):
        count = _value(U, n, u, nv, 0)
        ranges = [(_value(lo, n, u, nv, k), _value(hi, n, u, nv, k)) for k in range(count)]
        assert ranges[0][0] == 3 and ranges[-1][1] == nv + 3, (nv, ranges)
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), (nv, ranges)
        assert all(0 < h - lo_ <= mc for lo_, h in ranges), (nv, ranges)
        assert count >= min(-(-nv // 6), threads * -(-nv // (threads * mc))), (nv, count)
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


def test_range_blocking_keeps_both_packed_blocks_in_l2(monkeypatch):
    """``range_blocking``: a range's ``X`` block within 5/8 of L2, its ``Y`` block within
    1/4, whole register rows and panels; fp64 on a 1 MiB L2: 510 rows (PolyBench's 800,
    900 and 1000 rows: one range a thread at 2 threads), ``NC`` 192; never fewer rows or
    more columns than the nominal blocking; unchanged with tiles given or
    ``POLYCOMP_RANGE_BLOCKING=0``."""
    from polycomp.scheduler.cpu.backbone_tile import Blocking
    from polycomp.scheduler.cpu.scop_gemm import RANGE_X_L2, RANGE_Y_L2, range_blocking
    monkeypatch.delenv("POLYCOMP_RANGE_BLOCKING", raising=False)
    l2 = 1 << 20
    for size, L, KC, NC in ((8, 8, 160, 384), (4, 16, 256, 512)):
        b = Blocking(6, 4, L, 192, NC, KC, False)
        r = range_blocking(b, size, l2, False)
        assert r.MC % r.MR == 0 and r.NC % r.NR == 0, r
        assert r.MC * r.KC * size <= RANGE_X_L2 * l2 < (r.MC + r.MR) * r.KC * size, r
        assert r.KC * r.NC * size <= RANGE_Y_L2 * l2 < (r.NC + r.NR) * r.KC * size, r
        assert (r.KC, r.MR, r.NI) == (b.KC, b.MR, b.NI)
    fp64 = range_blocking(Blocking(6, 4, 8, 192, 384, 160, False), 8, l2, False)
    assert (fp64.MC, fp64.NC) == (510, 192)
    small = range_blocking(Blocking(6, 4, 8, 192, 64, 160, False), 8, 1 << 17, False)
    assert (small.MC, small.NC) == (192, 32)
    b = Blocking(6, 4, 8, 192, 384, 160, False)
    assert range_blocking(b, 8, l2, True) is b
    monkeypatch.setenv("POLYCOMP_RANGE_BLOCKING", "0")
    assert range_blocking(b, 8, l2, False) is b
