"""Tensor-core path end to end: f16/bf16 matmul, batch_matmul, matmul+bias+relu and
conv2d (implicit GEMM) through mma/ldmatrix tensorization and 1-4 stage cp.async
pipelines, checked against numpy in the CUDA simulator on random shapes (multiples of
16 and ragged extents with partial tiles); bank conflicts of swizzled vs linear shared
tiles; global load efficiency of the cp.async copies; SASS (HMMA, LDSM, LDGSTS) of
the nvcc cubins for sm_80 and sm_90; the golden tree of the tiling pass.

Simulated kernels use 64x64 block tiles of 2x2 warps (32x32 warp tiles) to keep the
simulation small; the binary checks use the default 128x128x32, 3-stage configuration.
"""
import functools
import os

import islpy as isl
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polycomp import dtypes as dt
from polycomp.driver import compile_kernel
from polycomp.errors import ResourceLimitError
from polycomp.frontend import ops
from polycomp.hw.cuda.sass import compile_archs, has_opcode
from polycomp.hw.cuda.simulator import simulate
from polycomp.hw.target import get_target
from polycomp.islutil import context
from polycomp.scheduler.common.pattern_schedule import PatternSchedulePass
from polycomp.scheduler.common.program_order import ProgramOrderPass
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.tensorcore.map import TensorCoreMappingPass
from polycomp.scheduler.tensorcore.tile import TensorCoreTilingPass
from polycomp.state import CompileState

SMALL = {"block": (64, 64), "warp": (32, 32), "k": 32}
FACTORIES = {
    "matmul": lambda d: ops.matmul_kernel(d),
    "batch_matmul": lambda d: ops.batch_matmul_kernel(d),
    "matmul_bias_relu": lambda d: ops.matmul_bias_relu_kernel(d),
    "conv2d": lambda d: ops.conv2d_kernel((1, 1), (0, 0), (1, 1), d),
    "conv2d_s2_p1": lambda d: ops.conv2d_kernel((2, 2), (1, 1), (1, 1), d),
}


@functools.lru_cache(maxsize=None)
def compiled(op, dtype, stages, swizzle=True, block=SMALL["block"], warp=SMALL["warp"]):
    opts = {"tc_tile": dict(SMALL, block=block, warp=warp, stages=stages, swizzle=swizzle)}
    ck = compile_kernel(FACTORIES[op](dtype), "cuda", opts)
    assert "tc-tiling" in ck.notes and "tensor cores" in ck.notes["tc-tiling"][0], ck.notes
    return ck


def extent():
    """Multiples of 16 and ragged extents (partial tiles)."""
    return st.one_of(st.integers(1, 5).map(lambda x: 16 * x), st.integers(1, 70))


def check(out, ref, k, absprod):
    """f32 accumulation of exact f16/bf16 products: error <= K * 2^-23 * sum |a b|."""
    tol = (k + 2) * 2.0 ** -22 * absprod + 1e-6
    assert np.all(np.abs(out.astype(np.float64) - ref) <= tol), \
        float(np.max(np.abs(out.astype(np.float64) - ref) - tol))


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dt.to_numpy(dtype))


MM_CONFIGS = [("float16", 1), ("bfloat16", 2), ("float16", 3), ("bfloat16", 4)]


@pytest.mark.parametrize("dtype,stages", MM_CONFIGS)
@settings(max_examples=5)
@given(n=extent(), k=extent(), m=extent(), seed=st.integers(0, 2 ** 16))
def test_matmul(dtype, stages, n, k, m, seed):
    rng = np.random.default_rng(seed)
    a, b = rand(rng, (n, k), dtype), rand(rng, (k, m), dtype)
    c, rep = simulate(compiled("matmul", dtype, stages), a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    check(c, a64 @ b64, k, np.abs(a64) @ np.abs(b64))
    assert rep.ok


@pytest.mark.parametrize("dtype,stages", [("bfloat16", 2), ("float16", 3)])
@settings(max_examples=4)
@given(bt=st.integers(1, 3), n=extent(), k=extent(), m=extent(), seed=st.integers(0, 2 ** 16))
def test_batch_matmul(dtype, stages, bt, n, k, m, seed):
    rng = np.random.default_rng(seed)
    a, b = rand(rng, (bt, n, k), dtype), rand(rng, (bt, k, m), dtype)
    c, rep = simulate(compiled("batch_matmul", dtype, stages), a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    check(c, np.matmul(a64, b64), k, np.matmul(np.abs(a64), np.abs(b64)))
    assert rep.ok


@pytest.mark.parametrize("dtype,stages", [("float16", 4), ("bfloat16", 3)])
@settings(max_examples=4)
@given(n=extent(), k=extent(), m=extent(), seed=st.integers(0, 2 ** 16))
def test_matmul_bias_relu(dtype, stages, n, k, m, seed):
    rng = np.random.default_rng(seed)
    a, b, bias = rand(rng, (n, k), dtype), rand(rng, (k, m), dtype), rand(rng, (m,), dtype)
    c, rep = simulate(compiled("matmul_bias_relu", dtype, stages), a, b, bias)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = np.maximum(a64 @ b64 + bias.astype(np.float64), 0)
    check(c, ref, k, np.abs(a64) @ np.abs(b64) + 1)
    assert rep.ok


@pytest.mark.parametrize("op,dtype,stages", [("conv2d", "float16", 2),
                                             ("conv2d_s2_p1", "bfloat16", 3)])
@settings(max_examples=4)
@given(n=st.integers(1, 2), c=st.integers(1, 20), f=st.integers(1, 20), kh=st.integers(1, 3),
       kw=st.integers(1, 3), h=st.integers(3, 12), w=st.integers(3, 12),
       seed=st.integers(0, 2 ** 16))
def test_conv2d_implicit_gemm(op, dtype, stages, n, c, f, kh, kw, h, w, seed):
    rng = np.random.default_rng(seed)
    x, wt = rand(rng, (n, c, h, w), dtype), rand(rng, (f, c, kh, kw), dtype)
    out, rep = simulate(compiled(op, dtype, stages), x, wt)
    spec = ops.OPS[op]
    ref = spec.reference(x, wt)
    absprod = spec.reference(np.abs(x.astype(np.float64)), np.abs(wt.astype(np.float64)))
    check(out, ref, c * kh * kw, absprod)
    assert rep.ok


def test_epilogue_cast_to_f16():
    ck = compile_kernel(ops.matmul_kernel("float16", "float16"), "cuda",
                        {"tc_tile": dict(SMALL, stages=2)})
    rng = np.random.default_rng(3)
    a, b = rand(rng, (40, 48), "float16"), rand(rng, (48, 24), "float16")
    c, rep = simulate(ck, a, b)
    assert c.dtype == np.float16 and rep.ok
    ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16)
    np.testing.assert_allclose(c.astype(np.float64), ref.astype(np.float64), rtol=2e-3, atol=2e-3)


# --------------------------------------------------------------------------- memory counters


def test_swizzled_tiles_are_conflict_free_and_copies_fully_efficient():
    rng = np.random.default_rng(0)
    a, b = rand(rng, (64, 64), "float16"), rand(rng, (64, 128), "float16")
    c, rep = simulate(compiled("matmul", "float16", 3), a, b)
    assert rep.ok
    k = rep.kernels[0]
    assert k.shared_load.requests > 0 and k.shared_store.requests > 0
    assert rep.bank_conflicts == 0
    # every global load is a 16-byte cp.async of an aligned tile row: 100 % efficiency,
    # each element of A loaded once per block column, of B once per block row
    assert k.global_load.efficiency == 1.0
    assert k.global_load.bytes == 2 * (64 * 64 * 2 + 64 * 128 * 1)
    # results: one 16-byte store per thread and 16x8 tile (4 columns x 4 bytes)
    assert k.global_store.efficiency == 1.0
    assert k.global_store.bytes == 64 * 128 * 4 and k.global_store.requests == 64 * 128 // 128


def test_unswizzled_tiles_conflict():
    rng = np.random.default_rng(0)
    a, b = rand(rng, (64, 64), "float16"), rand(rng, (64, 128), "float16")
    c, rep = simulate(compiled("matmul", "float16", 3, swizzle=False), a, b)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4,
                               atol=1e-4)
    assert rep.kernels[0].shared_load.bank_conflicts > 0
    assert rep.bank_conflicts > 0


def test_shared_budget_counts_all_stages(tmp_path):
    big = {"block": (256, 128), "warp": (64, 64), "k": 64, "stages": 4}   # 192 KiB
    with pytest.raises(ResourceLimitError, match="stage"):
        compile_kernel(ops.matmul_kernel("float16"), "cuda", {"tc_tile": big})
    # 4 stages of 128x32 + 32x128: 64 KiB, past the 48 KiB of static shared memory, below
    # the sm_80 opt-in limit: dynamic shared memory with the opt-in attribute
    ck = compile_kernel(ops.matmul_kernel("float16"), "cuda", {"tc_tile": {"stages": 4}})
    assert "extern __shared__" in ck.source
    assert "cudaFuncAttributeMaxDynamicSharedMemorySize, 65536" in ck.source
    assert ", 65536>>>" in ck.source
    for ops_, res in compile_archs(ck.source, (80,), str(tmp_path)).values():
        assert has_opcode(ops_, "HMMA") and has_opcode(ops_, "LDGSTS")
        assert all(r.spill_stores == 0 for r in res)


def test_tensor_cores_off_and_f32_untouched():
    ck = compile_kernel(ops.matmul_kernel("float16"), "cuda", {"tensor_cores": False})
    assert "ptx_mma" not in ck.source and "mma.sync" not in ck.source
    ck = compile_kernel(ops.matmul_kernel("float32"), "cuda")
    assert "mma.sync" not in ck.source


# --------------------------------------------------------------------------- SASS


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.parametrize("op,dtype", [("matmul", "float16"), ("batch_matmul", "bfloat16"),
                                      ("matmul_bias_relu", "float16"), ("conv2d", "bfloat16")])
def test_sass_sm80_sm90(op, dtype, tmp_path):
    ck = compile_kernel(FACTORIES[op](dtype), "cuda")   # the default configuration
    for sm, (ops_, res) in compile_archs(ck.source, (80, 90), str(tmp_path)).items():
        assert has_opcode(ops_, "HMMA") and has_opcode(ops_, "LDSM"), (sm, ops_)
        if op != "conv2d":   # plain contiguous loads: cp.async (conv gathers im2col rows)
            assert has_opcode(ops_, "LDGSTS"), (sm, ops_)
        assert ops_.get("STG.E.128", 0) > 0, (sm, ops_)   # float32 results: 128-bit stores
        tc = [r for r in res if r.shared_bytes > 0]
        assert tc and all(r.spill_stores == 0 and r.spill_loads == 0 for r in tc), (sm, res)


# --------------------------------------------------------------------------- golden tree

GOLDEN_DIR = os.path.join(os.path.dirname(__file__), "golden")


def _golden(name, tree):
    path = os.path.join(GOLDEN_DIR, name)
    if os.environ.get("POLYCOMP_UPDATE_GOLDEN") == "1":
        with open(path, "w") as f:
            f.write(tree.to_str() + "\n")
    with open(path) as f:
        expected = isl.Schedule.read_from_str(context(), f.read().strip())
    assert isl.Schedule.read_from_str(context(), tree.to_str()).plain_is_equal(expected), name


def test_tc_tiling_and_mapping_golden():
    """Tree in (the pattern schedule), tiled tree out; then the mapping pass on the
    tiled tree (block filters; the launch registered)."""
    model = ops.matmul_kernel("float16").polyhedral_model()
    ctx = CompileState(model, get_target("cuda"), {"tc_tile": dict(SMALL, stages=3)})
    sched = ProgramOrderPass().run(model.initial_schedule, ctx)
    sched = PatternSchedulePass().run(sched, ctx)
    tiled = TensorCoreTilingPass().run(sched, ctx)
    _golden("tc_tiling.matmul_f16.out.isl", tiled)
    plan = gpu_kernels(ctx).tc_plans[0]
    assert plan.config.k == 32 and plan.view.in_dtype == "float16"
    assert not gpu_kernels(ctx).launches        # generic passes must not see the kernel yet
    mapped = TensorCoreMappingPass().run(tiled, ctx)
    _golden("tc_mapping.matmul_f16.out.isl", mapped)
    launch = gpu_kernels(ctx).launches[plan.kernel]
    assert launch.block == (32, 2, 2) and launch.block_params == ("bx1", "by1")


def test_partial_aligned_tiles_use_zero_filling_cp_async():
    """Rows of 48 and 40 elements (multiples of 8) in partial 64x64 tiles: every chunk is
    one cp.async, the out-of-range ones with src_bytes 0 (zero fill, no global read)."""
    from polycomp.hw.cuda import ptx  # noqa: F401  (registers the intrinsic handlers)
    from polycomp.hw.cuda.sim_intrinsics import INTRINSICS
    calls = {"n": 0, "empty": 0}
    inner = INTRINSICS["ptx_cp_async"]

    def counting(sim, call, active):
        nb = np.broadcast_to(np.asarray(sim.eval(call.args[2], active)), active.shape)
        calls["n"] += int(active.sum())
        calls["empty"] += int((active & (nb == 0)).sum())
        return inner(sim, call, active)
    rng = np.random.default_rng(5)
    a, b = rand(rng, (70, 48), "float16"), rand(rng, (48, 40), "float16")
    c, rep = simulate(compiled("matmul", "float16", 2), a, b,
                      intrinsics=dict(INTRINSICS, ptx_cp_async=counting))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    check(c, a64 @ b64, 48, np.abs(a64) @ np.abs(b64))
    # 2 blocks x 2 K tiles x (64x32 A + 32x64 B) / 8 chunks, all by cp.async
    assert calls["n"] == 2 * 2 * (64 * 32 + 32 * 64) // 8 and calls["empty"] > 0
    assert rep.kernels[0].global_load.bytes == 70 * 48 * 2 + 2 * 48 * 40 * 2


def test_bench_gpu_runs(capsys):
    """`polycomp bench gpu`: without a GPU it says so and exits 0; with one it measures
    (one small size here)."""
    from polycomp.benchmarks import gpu
    from polycomp.hw.cuda.launcher import gpu_available
    assert gpu.main(["--sizes", "1", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert ("TFLOP/s" in out) if gpu_available() else ("no CUDA GPU" in out)
