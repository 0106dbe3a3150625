"""The Tensor Core search space and its wave model (scheduler/tuning/gpu_space.py):
valid by construction (the target's own option checks accept every point, resources
fit), and the model's choices follow the problem size."""
from __future__ import annotations

import pytest

from polycomp.hw.options import tc_tile_option
from polycomp.hw.target import get_target
from polycomp.scheduler.tuning.gpu_space import (
    blocks_per_sm,
    gpu_space,
    mma_shape,
    predict_seconds,
    rank,
)


@pytest.mark.parametrize("name", ["cuda", "cuda-sm90"])
def test_every_point_valid(name):
    t = get_target(name)
    space = gpu_space(t)
    assert len(space) == len(set(space)) > 100
    smem = t.cuda.shared_memory_optin or t.shared_memory_per_block
    for p in space:
        tc_tile_option("tc_tile", p.options()["tc_tile"])    # raises on an invalid point
        assert 32 * p.warps <= t.cuda.max_threads_per_block
        assert p.shared_bytes() <= smem
        assert p.registers(mma_shape(t)) <= t.cuda.registers_per_thread
        assert blocks_per_sm(p, t) >= 1
    assert {p.stages for p in space} == {1, 2, 3, 4} and {p.k for p in space} == {32, 64}


def test_space_follows_the_target_data():
    import dataclasses
    t = get_target("cuda")
    small = dataclasses.replace(t, cuda=dataclasses.replace(t.cuda, shared_memory_optin=0))
    assert max(p.shared_bytes() for p in gpu_space(small)) <= t.shared_memory_per_block \
        < max(p.shared_bytes() for p in gpu_space(t))
    few_regs = dataclasses.replace(t, cuda=dataclasses.replace(t.cuda, registers_per_thread=96))
    assert max(p.warp[0] * p.warp[1] for p in gpu_space(few_regs)) < \
        max(p.warp[0] * p.warp[1] for p in gpu_space(t))


def test_model_choices_follow_the_shape():
    t = get_target("cuda")
    small = rank(t, 32, 3072, 1024, top=1)[0][1]
    large = rank(t, 32 * 512, 3072, 1024, top=1)[0][1]
    assert small.block[0] <= 32 < large.block[0]           # no padded rows at L = 1
    assert large.block[0] * large.block[1] > small.block[0] * small.block[1]
    # the wave model: one more block than fits a wave costs a whole block time
    p = large
    per_wave = 108 * blocks_per_sm(p, t)
    rows = p.block[0] * per_wave
    t1 = predict_seconds(p, t, rows, p.block[1], 1024)
    t2 = predict_seconds(p, t, rows + 1, p.block[1], 1024)
    assert t2 == pytest.approx(2 * t1)
    # deeper pipelines never predicted slower
    for s in (1, 2, 3):
        a = predict_seconds(p.__class__(p.block, p.warp, p.k, s), t, 4096, 4096, 4096)
        b = predict_seconds(p.__class__(p.block, p.warp, p.k, s + 1), t, 4096, 4096, 4096)
        assert b <= a


@pytest.mark.nvcc
def test_model_choice_compiles_to_mma_and_cubin(tmp_path, monkeypatch):
    from polycomp.driver import compile_kernel
    from polycomp.frontend.ops import matmul_kernel
    from polycomp.hw.cuda.launcher import compile_cubin
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path / "cache"))
    t = get_target("cuda")
    sources = set()
    for m in (32, 4096):
        p = rank(t, m, 3072, 1024, top=1)[0][1]
        ck = compile_kernel(matmul_kernel("float16", "float32"), t, p.options())
        assert "mma.sync" in ck.source
        sources.add(ck.source)
        assert compile_cubin(ck.source, 80)[:4] == b"\x7fELF"
    assert len(sources) == 2
