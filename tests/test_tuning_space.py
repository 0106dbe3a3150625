"""The CPU GEMM search space (scheduler/tuning/space.py): generated from the target's
data, every point valid by construction, and sampled points compute correct products."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from polycomp import dtypes as dt
from polycomp.driver import build, compile_kernel
from polycomp.frontend.ops import matmul_kernel
from polycomp.hw.target import get_target
from polycomp.scheduler.tuning import CpuPoint, GemmShape, cpu_space
from polycomp.scheduler.tuning.space import KC_CHOICES

BERT = GemmShape(32, 3072, 1024)


def check_point(p: CpuPoint, target, shape: GemmShape) -> None:
    """The construction rules of the module docstring, checked independently."""
    if not p.packing:
        assert (p.MR, p.NI, p.MC, p.NC, p.KC) == (0, 0, 0, 0, 0)
        return
    size, L, R = dt.itemsize(shape.dtype), target.vector_lanes(shape.dtype), \
        target.cpu.vector_registers
    NR = p.NI * L
    assert p.NI in (1, 2, 4) and 1 <= p.MR <= 16
    assert R // 2 <= p.MR * p.NI + p.NI + 1 <= R
    assert p.KC in KC_CHOICES and p.MR * p.KC * size <= target.l1_bytes // 2
    assert p.NC % NR == 0 and p.KC * p.NC * size <= target.l2_bytes
    assert p.NC <= max(NR, 2 * shape.N)
    assert p.MC % p.MR == 0 and p.MC <= max(p.MR, 2 * shape.M)


@pytest.mark.parametrize("name", ["cpu-avx2", "cpu-avx512"])
def test_every_point_is_valid_and_unique(name):
    t = get_target(name)
    space = cpu_space(t, BERT)
    assert len(space) == len(set(space)) > 100
    for p in space:
        check_point(p, t, BERT)
    assert {p.packing for p in space} == {True, False}
    assert {p.parallel for p in space} == {True, False}


def test_space_follows_the_target_data():
    avx2, avx512 = get_target("cpu-avx2"), get_target("cpu-avx512")
    mr2 = max(p.MR * p.NI for p in cpu_space(avx2, BERT))
    mr512 = max(p.MR * p.NI for p in cpu_space(avx512, BERT))
    # accumulators MR*NI with MR*NI + NI + 1 <= 16 / 32 registers and MR <= 16
    assert (mr2, mr512) == (14, 28)
    small_l1 = avx2.with_capacities(L1=8192)
    panel = lambda t: max(p.MR * p.KC * 4 for p in cpu_space(t, BERT))   # X panel bytes
    # the X panel fits in half of L1, whatever the host's L1 is (32 KiB, 48 KiB, ...)
    assert panel(small_l1) <= 4096 < panel(avx2) <= avx2.l1_bytes // 2
    small_l2 = avx2.with_capacities(L2=65536)
    assert max(p.NC * p.KC for p in cpu_space(small_l2, BERT)) * 4 <= 65536
    # a small problem: no tile beyond the (rounded-up) extents
    tiny = GemmShape(3, 5, 7)
    assert max(p.MC for p in cpu_space(avx2, tiny)) <= 16
    assert len(cpu_space(get_target("c"), BERT)) == 2      # scalar C: packing off only


def test_point_options_are_accepted_by_the_target():
    from polycomp.hw.options import CpuOptions
    for p in cpu_space(get_target("cpu-avx2"), BERT)[::97]:
        o = CpuOptions(**p.options())
        assert o.microkernel == p.packing


@pytest.mark.slow
def test_sampled_points_compute_correct_products():
    """Extremes of the space (smallest/largest tiles, packing off) at an odd shape."""
    t = get_target("cpu-avx2")
    shape = GemmShape(37, 50, 29)
    space = [p for p in cpu_space(t, shape) if p.packing]
    picks = [min(space, key=lambda p: (p.MC * p.NC * p.KC, p.MR)),
             max(space, key=lambda p: (p.MC * p.NC * p.KC, p.MR * p.NI)),
             dataclasses.replace(space[len(space) // 2], parallel=True),
             CpuPoint(False, True)]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((shape.M, shape.K), dtype=np.float32)
    b = rng.standard_normal((shape.K, shape.N), dtype=np.float32)
    sources = set()
    for p in picks:
        f = build(matmul_kernel(), t, p.options())
        np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4, err_msg=p.label())
        sources.add(compile_kernel(matmul_kernel(), t, p.options()).source)
    assert len(sources) == len(picks)       # each point really changes the code
