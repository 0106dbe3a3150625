"""The float32 CUDA chain kernel with its ``l`` loop split across blocks (flash-decoding,
scheduler/chain/cuda_kernel.py ``split_count``, docs/fusion.md): the GPU-semantics
simulator (strict) against numpy on hypothesis-drawn small shapes (extent 1, odd and
prime extents, empty splits where ``L`` is small, causal masks that mask whole splits of a
row, additive masks with rows masked in full, NaN inputs); the split count's rule and the
gate on the split grid (G10, G12); global traffic below the unfused pipeline's; both
kernels through ``nvcc -arch=sm_80 -cubin`` without spills."""
import functools
import os
import re
import subprocess
from unittest import mock

import chain_kernels as ck
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polycomp.driver import compile_kernel
from polycomp.errors import OptionError
from polycomp.hw.cuda.simulator import simulate

NAMES = ("bmm_chain", "bmm_softmax_chain", "causal_attention", "masked_attention",
         "mm_relu_chain")
SMALL = {"chain_tiles": (16, 16), "chain": "force"}
G10 = (1, 512, 64, 64, 256)         # benchmarks/chains.py shapes (b, m, n, k, l)
G12 = (1, 1024, 64, 64, 512)


def _compile(kernel, target="cuda", options=None, splits=None):
    env = {"POLYCOMP_CHAIN_SPLITS": str(splits)} if splits is not None else {}
    with mock.patch.dict(os.environ, env):
        if splits is None:
            os.environ.pop("POLYCOMP_CHAIN_SPLITS", None)
        return compile_kernel(kernel, target, options)


@functools.lru_cache(maxsize=None)
def forced(name: str, splits: int):
    """``name`` (symbolic extents) with ``S = splits`` (``POLYCOMP_CHAIN_SPLITS``)."""
    return _compile(getattr(ck, name), "cuda", SMALL, splits)


def _note(c) -> str:
    return " ".join(c.state.remarks.get("chain-cuda", []))


def _kernels(c) -> int:
    return len(re.findall(r"__global__ void", c.source))


def _inputs(name, b, m, k, l, n, rng, nan=False):  # noqa: E741
    return ck.float32_inputs(name, b, m, k, l, n, rng, nan, split_mask=True)


_check = ck.check_float32


extent = st.sampled_from([1, 2, 3, 5, 7, 13, 17, 31, 37])


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=3, deadline=None)
@given(splits=st.sampled_from([2, 3]), b=st.integers(1, 2), m=extent,
       k=st.sampled_from([1, 3, 17]), l=st.sampled_from([1, 2, 17, 37, 67]),  # noqa: E741
       n=st.sampled_from([1, 5, 8, 67]), nan=st.booleans(), seed=st.integers(0, 2**16))
def test_split_matches_numpy(name, splits, b, m, k, l, n, nan, seed):  # noqa: E741
    """``S`` splits of ``ceil(L/16)`` l tiles (some empty where ``L`` is small): two
    kernels, numpy's result (NaN where numpy has NaN)."""
    c = forced(name, splits)
    assert _kernels(c) == 2 and f"l split in {splits}" in _note(c)
    xs = _inputs(name, b, m, k, l, n, np.random.default_rng(seed), nan)
    out, _ = simulate(c, *xs)
    _check(out, ck.reference(name, *xs))


@pytest.mark.parametrize("k", [5, 70])
def test_split_by_the_rule_on_a_small_grid(k):
    """Constant shape ``(1, 13, 5, k, 100)`` with 16 x 16 tiles: one block, 7 l tiles,
    so ``S = min(108, 7 // 2) = 3`` (3, 3 and 1 tiles); X resident (``K = 5``) or read
    in chunks per l tile (``K = 70``); NaN in Y."""
    from polycomp.benchmarks.chains import _kernel
    c = _compile(_kernel("bmm+softmax", (1, 13, 5, k, 100)), "cuda", SMALL)
    assert "l split in 3" in _note(c) and _kernels(c) == 2
    rng = np.random.default_rng(k)
    x, y, z = (rng.standard_normal(s).astype(np.float32) for s in ((1, 13, k), (1, k, 100),
                                                                    (1, 100, 5)))
    y[0, 0, 90] = np.nan                               # the last split's column: NaN rows
    out, _ = simulate(c, x, y, z)
    _check(out, ck.reference("bmm_softmax_chain", x, y, z))


@pytest.mark.parametrize("shape,target,splits,blocks,fuse", [
    (G10, "cuda", 4, 32, True),            # 8 blocks, 8 l tiles: 2 per split; >= 108 / 5
    (G10, "cuda-sm90", 4, 32, True),
    (G12, "cuda", 6, 96, True),            # 16 blocks, 16 l tiles: 3, .., 3, 1
    (G12, "cuda-sm90", 8, 128, True),
    ((8, 512, 64, 64, 512), "cuda", 1, 64, True),      # G1: more than half of 108 SMs
])
def test_split_count_and_gate(shape, target, splits, blocks, fuse):
    """``S`` and the gate on the split grid (scheduler/chain/cuda_gate.py): G10 and G12
    are fused by ``chain=True`` once split (both won on an H200 split, lost unsplit)."""
    from polycomp.benchmarks.chains import _kernel
    from polycomp.scheduler.chain.cuda_gate import fused_blocks
    from polycomp.scheduler.chain.cuda_tree import cuda_plan
    k = _kernel("bmm+softmax", shape)
    c = _compile(k, target)
    assert ("chain-cuda" in c.state.remarks) == fuse
    forced_c = _compile(k, target, {"chain": "force"})
    plan, tiles = cuda_plan(forced_c.state)
    assert plan is not None and not isinstance(tiles, str)
    assert (tiles.tm, tiles.tl, tiles.splits) == (64, 32, splits)
    assert fused_blocks(plan, tiles) == blocks
    assert _kernels(forced_c) == (2 if splits > 1 else 1)
    if not fuse:
        assert any(f"{blocks} blocks ({splits} l splits)" in n
                   for n in c.state.remarks["chain-fuse"])


def test_split_env_is_checked():
    with pytest.raises(OptionError, match="POLYCOMP_CHAIN_SPLITS"):
        _compile(ck.bmm_chain, "cuda", SMALL, "two")


def test_split_moves_less_global_memory_than_unfused():
    """``(1, 32, 16, 16, 96)`` with 16 x 16 tiles: 2 blocks, 6 l tiles, ``S = 3``; the
    partial tiles' round trip stays below the unfused pipeline's traffic."""
    from polycomp.benchmarks.chains import _kernel
    k = _kernel("bmm+softmax", (1, 32, 16, 16, 96))
    c = _compile(k, "cuda", SMALL)
    assert "l split in 3" in _note(c)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(s).astype(np.float32) for s in ((1, 32, 16), (1, 16, 96),
                                                              (1, 96, 16))]
    out_f, rep_f = simulate(c, *xs)
    out_u, rep_u = simulate(_compile(k, "cuda", {"chain": False}), *xs)
    _check(out_f, ck.reference("bmm_softmax_chain", *xs))
    _check(out_f, out_u)

    def sectors(rep):
        return sum(r.global_load.sectors + r.global_store.sectors for r in rep.kernels)
    assert len(rep_f.kernels) == 2 < len(rep_u.kernels)
    assert sectors(rep_f) < sectors(rep_u)


@pytest.mark.nvcc
def test_split_cu_compiles_without_spills(tmp_path):
    """Both kernels at G10 (``S = 4``), with a softmax and without (plain bmm, forced)."""
    from polycomp.benchmarks.chains import _kernel
    sources = {name: _compile(_kernel(name, G10), "cuda", {"chain": "force"}).source
               for name in ("bmm+softmax", "bmm")}
    for name, source in sources.items():
        assert len(re.findall(r"__global__ void", source)) == 2, name
        cu = tmp_path / f"{name.replace('+', '_')}.cu"
        cu.write_text(source)
        r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-Xptxas", "-v", "-o",
                            str(cu.with_suffix(".cubin")), str(cu)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-3000:]
        log = r.stdout + r.stderr
        assert len(re.findall(r"Used \d+ registers", log)) == 2, log
        spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                            r"(\d+) bytes spill loads", log)
        assert len(spills) == 2 and all(s == ("0", "0", "0") for s in spills), (name, log)
