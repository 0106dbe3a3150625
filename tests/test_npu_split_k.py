"""Split-K of the last round of output tiles (``lower_cube._split_k``): the tiles left
over after the full rounds are cut along ``k`` into parts the idle cores take, added in
GM by Fixpipe's atomic add after every part 0 is written (an all-core cross-core flag);
the simulator matches numpy, balances the cube work over the cores, and reports the
race when that flag is missing."""
import dataclasses

import numpy as np
import pytest

from polycomp.driver import compile_kernel
from polycomp.errors import NpuRaceError
from polycomp.frontend.ops import batch_matmul_kernel, matmul_kernel
from polycomp.hw.npu.backend import run_module, simulate
from polycomp.hw.npu.lower_cube import split_parts
from polycomp.hw.npu.program import CrossWait, Loop, ix
from polycomp.scheduler.npu.cube import K_SPLIT_MAX


def _walk(body):
    for s in body:
        yield s
        if isinstance(s, Loop):
            yield from _walk(s.body)


def _parts(r: int, p: int, ks: int) -> int:
    env: dict = {}
    for let in split_parts(ix("r"), ix("p"), ix("ks"), K_SPLIT_MAX):
        env[let.var] = let.value.eval({"r": r, "p": p, "ks": ks, **env})
    return env["S"]


def _busiest(r: int, p: int, s: int) -> float:
    """The busiest core's tail work in tiles: its units of 1/S."""
    return -(-r * s // p) / s


@pytest.mark.parametrize("r,p,ks,want", [(0, 24, 16, 1), (16, 24, 16, 3), (8, 24, 16, 3),
                                         (1, 24, 16, 4), (23, 24, 16, 1), (12, 24, 16, 2),
                                         (1, 24, 2, 2), (1, 2, 16, 2), (5, 24, 16, 4)])
def test_split_parts_balances_the_last_round(r, p, ks, want):
    """The parts chosen for ``r`` tail tiles on ``p`` cores (at most ``ks`` k steps
    each): the least work on the busiest core of any S in 1..K_SPLIT_MAX, the fewest
    parts on a tie."""
    s = _parts(r, p, ks)
    assert s == want
    best = min(_busiest(r, p, q) for q in range(1, min(K_SPLIT_MAX, ks) + 1))
    assert _busiest(r, p, s) == best


@pytest.mark.parametrize("target,n,m,k", [("npu-lite", 37, 70, 131), ("npu", 300, 260, 97),
                                          ("npu", 1, 17, 5)])
def test_split_k_matches_numpy_at_odd_shapes(target, n, m, k):
    ck = compile_kernel(matmul_kernel("float16"), target)
    rng = np.random.default_rng(n + m + k)
    a = rng.standard_normal((n, k)).astype(np.float16)
    b = rng.standard_normal((k, m)).astype(np.float16)
    out, rep = simulate(ck, a, b)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)


def test_split_k_batched_int8_exact():
    """int8 operands accumulate in int32: the parts add exactly (3 tiles, one per
    batch, on 2 cores: the third is cut into 2 parts)."""
    ck = compile_kernel(batch_matmul_kernel("int8", "int32"), "npu-lite")
    assert "SetAtomicAdd<int32_t>();" in ck.source
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (3, 40, 200)).astype(np.int8)
    b = rng.integers(-128, 128, (3, 200, 30)).astype(np.int8)
    out, rep = simulate(ck, a, b)
    assert rep.bytes["L0C->GM"] > out.nbytes          # the cut tile is written twice
    assert np.array_equal(out, np.einsum("bik,bkj->bij", a.astype(np.int64),
                                         b.astype(np.int64)).astype(np.int32))


def test_split_k_balances_cube_work_over_cores():
    """64 output tiles of 128 x 128 on 24 cores, 3 k steps each: 2 full rounds and 16
    tiles cut into 3 parts, so every core does 8 k steps (without the split the
    busiest does 9); and the emitted kernel adds the parts with SetAtomicAdd."""
    ck = compile_kernel(matmul_kernel("float16"), "npu")
    assert "SetAtomicAdd<float>();" in ck.source and "SetAtomicNone();" in ck.source
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 192)).astype(np.float16)
    b = rng.standard_normal((192, 1024)).astype(np.float16)
    out, rep = simulate(ck, a, b)
    np.testing.assert_allclose(out, a.astype(np.float32) @ b.astype(np.float32),
                               rtol=1e-5, atol=1e-4)
    cube = [c["M"] for c in rep.cores_busy.values()]
    assert len(cube) == 24 and max(cube) == min(cube) == rep.busy["M"] // 24
    assert rep.bound in ("MTE2", "cube", "HBM", "L2")


def test_atomic_add_without_the_all_core_flag_is_a_race():
    """The atomic adds must wait until every part 0 is written: without the
    CrossCoreWaitFlag the simulator names the unordered GM writes."""
    ck = compile_kernel(matmul_kernel("float16"), "npu-lite")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((37, 131)).astype(np.float16)
    b = rng.standard_normal((131, 70)).astype(np.float16)
    k = ck.final_ir.program
    assert any(isinstance(s, CrossWait) for p in k.programs for s in _walk(p.body))

    def strip(body):
        out = []
        for s in body:
            if isinstance(s, CrossWait):
                continue
            out.append(dataclasses.replace(s, body=strip(s.body)) if isinstance(s, Loop)
                       else s)
        return tuple(out)
    bad = k.map_programs(lambda p: dataclasses.replace(p, body=strip(p.body)))
    with pytest.raises(NpuRaceError, match="race on GM C .*write after write"):
        run_module(ck.final_ir.with_program(bad), ck.target, a, b)
