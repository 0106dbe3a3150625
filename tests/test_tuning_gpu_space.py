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


def test_hopper_space_is_the_wgmma_plans():
    """On cuda-sm90a the space is the wgmma plans': consumer warpgroup tiles, 2..8
    stages within the opt-in shared memory, persistent or not, and the accumulators
    within the registers setmaxnreg leaves a consumer; every point passes the option
    check."""
    from polycomp.scheduler.tuning.gpu_space import WGMMA_RESERVED
    t = get_target("cuda-sm90a")
    space = gpu_space(t)
    assert len(space) == len(set(space)) > 50 and all(p.wgmma for p in space)
    lo, hi, step = t.cuda.register_realloc
    for p in space:
        tc = p.options()["tc_tile"]
        tc_tile_option("tc_tile", tc)
        assert tc["persistent"] == p.persistent and p.label().endswith(
            "-persistent" if p.persistent else "-tiles")
        assert p.shared_bytes() + WGMMA_RESERVED <= t.cuda.shared_memory_optin
        assert p.warp[1] == p.block[1] and p.block[0] % p.warp[0] == 0
        assert p.warps == 4 * (1 + p.block[0] // p.warp[0])
        assert p.registers(mma_shape(t)) <= hi
        assert blocks_per_sm(p, t) == 1
    assert {p.stages for p in space} <= set(range(2, 9)) and {p.k for p in space} == {32, 64}
    assert {p.persistent for p in space} == {True, False}
    # the sm_80 spaces keep their points (no persistent knob)
    assert not any(p.wgmma for p in gpu_space(get_target("cuda-sm90")))


def test_hopper_model_prefers_persistence_and_deep_pipelines():
    t = get_target("cuda-sm90a")
    p = next(p for p in gpu_space(t) if p.block == (128, 128) and p.k == 64
             and p.stages == 4 and p.persistent)
    tiles = dataclasses_replace(p, persistent=False)
    # persistent: never slower than one block per tile
    for shape in ((8192, 8192, 8192), (128, 768, 768), (2048, 3072, 768)):
        assert predict_seconds(p, t, *shape) <= predict_seconds(tiles, t, *shape)
    shallow = dataclasses_replace(p, stages=2)
    assert predict_seconds(p, t, 4096, 4096, 4096) < predict_seconds(shallow, t, 4096, 4096, 4096)
    best = rank(t, 4096, 4096, 4096, top=1)[0][1]
    assert best.wgmma and best.block[0] * best.block[1] >= 128 * 128


def dataclasses_replace(p, **kw):
    import dataclasses
    return dataclasses.replace(p, **kw)


@pytest.mark.parametrize("shape", [(32, 3072, 1024), (4096, 4096, 4096)])
def test_hopper_model_choice_compiles_to_wgmma(shape):
    """The model's best point at a small and a large shape is a plan the sm_90a tiling
    pass accepts (a wgmma kernel with its stages and persistence)."""
    from polycomp.driver import compile_kernel
    from polycomp.frontend.ops import matmul_kernel
    t = get_target("cuda-sm90a")
    p = rank(t, *shape, top=1)[0][1]
    ck = compile_kernel(matmul_kernel("float16", "float32"), t, p.options())
    assert "wgmma" in ck.notes["tc-tiling"][0], ck.notes
    assert "wgmma.mma_async" in ck.source and "cp.async.bulk.tensor" in ck.source
