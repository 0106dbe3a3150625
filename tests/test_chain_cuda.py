"""Fused chains on the CUDA targets (scheduler/chain/cuda_kernel.py, docs/fusion.md):
the GPU-semantics simulator (strict: races, divergent barriers, out-of-bounds raise)
against numpy's unfused result on hypothesis-drawn small shapes (odd and prime extents,
extent 1, several m-blocks, n-blocks and l tiles through small ``chain_tiles``), causal
and additive masks with rows masked in full (NaN, as numpy); the model's tiles; one
kernel whose global traffic is below the unfused pipeline's; the emitted ``.cu``
compiled by ``nvcc -arch=sm_80 -cubin`` with no spills."""
import dataclasses
import functools
import re
import subprocess

import chain_kernels as ck
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polycomp as pc
from polycomp.driver import compile_kernel
from polycomp.errors import OptionError
from polycomp.frontend import ops
from polycomp.hw.cuda.simulator import simulate
from polycomp.scheduler.chain.detect import ChainMatch

NAMES = ("bmm_chain", "bmm_softmax_chain", "causal_attention", "masked_attention",
         "mm_relu_chain")
SMALL = {"chain_tiles": (16, 16), "chain": "force"}
FORCE = {"chain": "force"}     # fused wherever legal: the rule of cuda_gate is tested below


@functools.lru_cache(maxsize=None)
def fused(name: str, small: bool = True):
    return compile_kernel(getattr(ck, name), "cuda", SMALL if small else FORCE)


def _inputs(name, b, m, k, l, n, rng, nan=False):  # noqa: E741
    return ck.float32_inputs(name, b, m, k, l, n, rng, nan)


_check = ck.check_float32


extent = st.sampled_from([1, 2, 3, 5, 7, 13, 17, 31, 37])


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=3, deadline=None)
@given(b=st.integers(1, 2), m=extent, k=st.sampled_from([1, 3, 17]), l=extent,  # noqa: E741
       n=st.sampled_from([1, 5, 8, 67]), nan=st.booleans(), seed=st.integers(0, 2**16))
def test_fused_cuda_matches_numpy(name, b, m, k, l, n, nan, seed):  # noqa: E741
    xs = _inputs(name, b, m, k, l, n, np.random.default_rng(seed), nan)
    out, _ = simulate(fused(name), *xs)
    _check(out, ck.reference(name, *xs))


def test_model_tiles_and_one_kernel():
    """Default tiles: the closed form on 48 KiB of shared memory (alpha 16) rounded to 16
    and shrunk to the kernel's budget (symbolic K: not known to fit X's resident rows, so
    the larger tile shrinks first); one kernel, no global temporary."""
    from polycomp.scheduler.chain.cuda_kernel import THREADS
    c = fused("causal_attention", small=False)
    note = " ".join(c.state.remarks["chain-cuda"])
    src = c.source
    assert len(re.findall(r"__global__ void", src)) == 1
    assert "cudaMalloc" not in src                    # no intermediate in global memory
    assert f"__launch_bounds__({THREADS})" in src
    assert "TM=48 TL=64" in note and "alpha=16" in note
    rng = np.random.default_rng(3)
    xs = _inputs("causal_attention", 1, 5, 3, 7, 2, rng)
    out, _ = simulate(c, *xs)
    _check(out, ck.reference("causal_attention", *xs))


@pytest.mark.parametrize("n", [8, 12, 6])
def test_streamed_z_by_cp_async_when_rows_are_aligned(n):
    """``N % 4 == 0``: Z's tiles arrive by cp.async (16 B, zero-filled past N and L)
    issued before the first product; otherwise by plain loads."""
    c = fused("masked_attention")
    assert "pc_cp_async16" in c.source and "pc_cp_async_wait<0>" in c.source
    xs = _inputs("masked_attention", 2, 19, 3, 37, n, np.random.default_rng(n))
    out, _ = simulate(c, *xs)
    _check(out, ck.reference("masked_attention", *xs))


@pytest.mark.parametrize("name,k", [("masked_attention", 70), ("bmm_chain", 129)])
def test_x_in_chunks_when_k_exceeds_kr(name, k):
    """``K > KR = 64``: X's rows are loaded in chunks of 64 columns for every ``l`` tile
    (the last chunk partial); ``K <= 64`` keeps them resident (the other tests)."""
    xs = _inputs(name, 1, 21, k, 35, 8, np.random.default_rng(k))
    out, _ = simulate(fused(name), *xs)
    _check(out, ck.reference(name, *xs))


def test_fused_moves_less_global_memory_than_unfused():
    rng = np.random.default_rng(1)
    xs = _inputs("bmm_softmax_chain", 1, 32, 16, 48, 16, rng)
    out_f, rep_f = simulate(fused("bmm_softmax_chain"), *xs)
    unfused = compile_kernel(ck.bmm_softmax_chain, "cuda", {"chain": False})
    out_u, rep_u = simulate(unfused, *xs)
    _check(out_f, out_u)

    def sectors(rep):
        return sum(k.global_load.sectors + k.global_store.sectors for k in rep.kernels)
    assert len(rep_f.kernels) == 1 < len(rep_u.kernels)
    assert sectors(rep_f) < sectors(rep_u)


@pc.tensor_expr
def attention_k_rows(Q: pc.Tensor[(ck.B, ck.M, ck.K), "float32"],
                     Kr: pc.Tensor[(ck.B, ck.L, ck.K), "float32"],
                     V: pc.Tensor[(ck.B, ck.L, ck.N), "float32"]):
    r = pc.reduce_axis(ck.K, "r")
    t = pc.compute((ck.B, ck.M, ck.L),
                   lambda b, i, j: pc.sum(Q[b, i, r] * Kr[b, j, r], axis=r), name="T")
    sc = pc.compute((ck.B, ck.M, ck.L),
                    lambda b, i, j: pc.select(j > i, float("-inf"), t[b, i, j] * 0.125),
                    name="Sc")
    return ops.batch_matmul(ops.softmax(sc, axis=-1, name="S"), V, name="O")


def test_k_stored_as_rows():
    """``Q K^T`` with ``K[.., l, k]``: fused (Y read as rows) where chain detection
    accepts the layout (``ChainMatch.y_transposed``), else the unfused pipeline; numpy's
    result either way."""
    c = compile_kernel(attention_k_rows, "cuda", SMALL)
    accepts = "y_transposed" in {f.name for f in dataclasses.fields(ChainMatch)}
    assert ("chain-cuda" in c.state.remarks) == accepts
    rng = np.random.default_rng(5)
    q, kr, v = (rng.standard_normal(s).astype(np.float32)
                for s in ((2, 19, 17), (2, 37, 17), (2, 37, 8)))
    out, _ = simulate(c, q, kr, v)
    _check(out, ck.reference("causal_attention", q, kr.transpose(0, 2, 1).copy(), v))


def test_chain_tiles_option_is_checked():
    with pytest.raises(OptionError, match="chain_tiles"):
        compile_kernel(ck.bmm_chain, "cuda", {"chain_tiles": (24, 16)})


@pytest.mark.nvcc
def test_fused_cu_compiles_without_spills(tmp_path):
    # the softmax path with the most registers, the path without softmax (no batch), and
    # constant shapes (ViT-B attention: nvcc unrolls more, X resident)
    from polycomp.benchmarks.chains_cuda import _kernel
    sources = {"causal_attention": fused("causal_attention", small=False).source,
               "mm_relu_chain": fused("mm_relu_chain", small=False).source,
               "vit_b": compile_kernel(_kernel(12, 197, 64), "cuda").source}
    for name, source in sources.items():
        cu = tmp_path / f"{name}.cu"
        cu.write_text(source)
        r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-Xptxas", "-v", "-o",
                            str(tmp_path / f"{name}.cubin"), str(cu)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-3000:]
        log = r.stdout + r.stderr
        assert re.search(r"Used \d+ registers", log), log
        spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                            r"(\d+) bytes spill loads", log)
        assert spills and all(s == ("0", "0", "0") for s in spills), (name, log)


@pytest.mark.parametrize("case", ["bmm_chain", "causal_attention"])
def test_golden_tree_cuda(case, goldens):
    """``chain-fuse`` for ``cuda``: the program tree (kernel mark, block filter,
    ``ACC_INIT``, the ring over ``l`` tiles of 64 with ``FIRST`` / ``MIDDLE`` /
    ``SOFTMAX`` / ``SECOND``, ``WRITE_OUT``) with the CUDA kernel's 48 x 64 tiles, legal
    for every dependence but the online softmax's (tests/test_chain_cuda_tree.py)."""
    from chain_trees import check_golden_tree
    roles = ["acc_init", "first", "second", "write_out"] if case == "bmm_chain" else \
        ["acc_init", "first", "middle", "softmax", "second", "write_out"]
    sched = check_golden_tree(getattr(ck, case), "cuda", FORCE,
                              f"test_chain_cuda_golden/{case}.chain-fuse.isl", goldens, roles)
    assert "floor((i1)/48)" not in sched.to_str() and "48by0" in sched.to_str()


@pytest.mark.parametrize("name,shape,target,fuse", [
    ("attention", (12, 197, 64), "cuda-sm90", True),      # 48 blocks, split 2: 96
    ("attention", (1, 197, 64), "cuda-sm90", False),      # 4 blocks, split 3: 12 < 132 / 5
    ("attention", (8, 1050, 32), "cuda", True),
    ("attention", (16, 4096, 64), "cuda", False),         # long rows: L > 2048
    ("attention", (16, 2048, 128), "cuda-sm90", False),   # 2 n-blocks recompute, L > 512
    ("bmm+softmax", (1, 512, 64, 64, 256), "cuda", True),   # G10: split 4 ways, 32 blocks
    ("bmm+softmax", (8, 512, 64, 64, 512), "cuda", True),   # G1: 64 blocks
    ("bmm", (8, 512, 64, 64, 512), "cuda", False),          # nothing between, unsplit
    ("bmm", (1, 1024, 64, 64, 512), "cuda-sm90", True),     # G12: nothing between, S = 8
])
def test_gate_fuses_where_it_paid_on_a_gpu(name, shape, target, fuse):
    """Option ``chain=True`` follows scheduler/chain/cuda_gate.py's rule (from H200
    timings); ``"force"`` fuses every legal chain; the reason is in the notes."""
    from polycomp.benchmarks.chains import _kernel
    k = _kernel(name, shape)
    c = compile_kernel(k, target)
    assert ("chain-cuda" in c.state.remarks) == fuse
    if not fuse:
        assert any("chain not fused" in n for n in c.state.remarks["chain-fuse"])
        forced = compile_kernel(k, target, {"chain": "force"})
        assert "chain-cuda" in forced.state.remarks


def test_chain_option_values():
    with pytest.raises(OptionError, match="'force'"):
        compile_kernel(ck.bmm_chain, "cuda", {"chain": "sometimes"})
