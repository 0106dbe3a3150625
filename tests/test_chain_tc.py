"""Fused chains on Tensor Cores (scheduler/chain/tc_kernel.py, docs/fusion.md "Tensor Core
chains"): float16 / bfloat16 chains through the GPU-semantics simulator in strict mode
(races, divergent barriers, out-of-bounds accesses, warp-collective misuse and cp.async
hazards raise) against numpy computed in float32 from the rounded inputs, on
hypothesis-drawn shapes (extent 1, odd and prime extents, multiples of 8 for the cp.async
path, several m-, n- and l-tiles and k chunks), causal and additive masks with a row
masked in full, NaN inputs; the emitted ``.cu`` through ``nvcc`` for sm_80 (no spills, no
stack frame) and sm_90; the golden fused tree."""
import functools

import chain_kernels as ck
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polycomp import dtypes as dt
from polycomp.driver import compile_kernel
from polycomp.hw.cuda.simulator import simulate
from polycomp.scheduler.chain.detect import detect_chains, why_not

NAMES = ("bmm_chain", "causal_attention", "masked_attention", "attention_k_rows",
         "mm_relu_chain")
SMALL = {"chain_tiles": (16, 16)}
EPS = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}   # unit roundoff of P's rounding


@functools.lru_cache(maxsize=None)
def fused(name: str, dtype: str, tiles: tuple | None = (16, 16)):
    return compile_kernel(ck.HALF[dtype][name], "cuda",
                          {"chain_tiles": tiles} if tiles else None)


def _inputs(name, dtype, b, m, k, l, n, rng, nan=False):  # noqa: E741
    h = dt.to_numpy(dtype)
    if name == "mm_relu_chain":
        shapes = ((m, k), (k, l), (l, n))
    elif name == "attention_k_rows":
        shapes = ((b, m, k), (b, l, k), (b, l, n))
    else:
        shapes = ((b, m, k), (b, k, l), (b, l, n))
    xs = [rng.standard_normal(s).astype(np.float32).astype(h) for s in shapes]
    if name == "masked_attention":
        mask = np.where(rng.random((m, l)) < 0.3, -np.inf, 0).astype(np.float32)
        mask[m // 2, :] = -np.inf                      # a row masked in full
        xs.append(mask)
    if nan:
        xs[0].flat[0] = np.nan
    return xs


def _reference(name, xs):
    """numpy in float32 from the rounded inputs, and the error bound of rounding P (or
    T without a softmax) to the input dtype before the second product."""
    f = [x.astype(np.float32) for x in xs]
    if name == "attention_k_rows":
        q, kr, v = f
        ref = ck.reference("attention_k_rows", q, kr, v)
        bound = ck.reference("attention_k_rows", q, kr, np.abs(v))
    elif name == "bmm_chain":
        x, y, z = f
        ref, bound = (x @ y) @ z, np.abs(x @ y) @ np.abs(z)
    else:
        absz = [*f[:2], np.abs(f[2]), *f[3:]]
        ref, bound = ck.reference(name, *f), ck.reference(name, *absz)
    return ref, bound


def _check(out, ref, bound, dtype, out_dtype="float32"):
    assert out.shape == ref.shape and out.dtype == dt.to_numpy(out_dtype)
    out = out.astype(np.float32)
    assert np.array_equal(np.isnan(out), np.isnan(ref))
    ok = ~np.isnan(ref)
    rel = 1e-4 if out_dtype == "float32" else 1e-4 + EPS[out_dtype]   # + the output's rounding
    tol = 2 * EPS[dtype] * np.nan_to_num(bound) + rel * (1 + np.abs(np.nan_to_num(ref)))
    err = np.abs(np.where(ok, out - ref, 0))
    assert (err <= tol).all(), float((err - tol).max())


extent = st.sampled_from([1, 2, 3, 7, 8, 13, 16, 17, 24, 31, 37])


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=3, deadline=None)
@given(b=st.integers(1, 2), m=extent, k=st.sampled_from([1, 3, 8, 17, 24]), l=extent,  # noqa: E741
       n=st.sampled_from([1, 5, 8, 16, 67]), nan=st.booleans(),
       dtype=st.sampled_from(["float16", "bfloat16"]), seed=st.integers(0, 2**16))
def test_tc_chain_matches_numpy(name, b, m, k, l, n, nan, dtype, seed):  # noqa: E741
    xs = _inputs(name, dtype, b, m, k, l, n, np.random.default_rng(seed), nan)
    out, _ = simulate(fused(name, dtype), *xs)
    _check(out, *_reference(name, xs), dtype)


@pytest.mark.parametrize("name,dtype,shape", [
    ("masked_attention", "float16", (1, 19, 16, 40, 8)),     # cp.async ring, 3 l tiles
    ("causal_attention", "bfloat16", (2, 33, 70, 24, 16)),   # K > 64: two k chunks per l tile
    ("bmm_chain", "float16", (1, 17, 72, 9, 24)),            # k chunks, plain Y loads (L % 8)
])
def test_tc_ring_paths(name, dtype, shape):
    """The cp.async ring: items are (l tile, k chunk); 16-byte copies when rows are a
    multiple of 8 elements, element copies otherwise; X re-streamed when K > KC."""
    c = fused(name, dtype)
    src = c.source
    assert "pc_cp_async16" in src and "pc_cp_async_wait<1>" in src   # 3 stages
    assert "pc_mma_m16n8k16_" + ("f16" if dtype == "float16" else "bf16") in src
    assert "pc_ldmatrix_x4_trans" in src and "__shfl_xor_sync" in src or name == "bmm_chain"
    xs = _inputs(name, dtype, *shape, np.random.default_rng(7))
    out, rep = simulate(c, *xs)
    _check(out, *_reference(name, xs), dtype)
    assert len(rep.kernels) == 1


@pytest.mark.parametrize("kernel,name,dtype", [
    ("attention_f16_out", "causal_attention", "float16"),
    ("bmm_chain_bf16_out", "bmm_chain", "bfloat16")])
@settings(max_examples=3, deadline=None)
@given(b=st.integers(1, 2), m=extent, k=st.sampled_from([1, 8, 17]), l=extent,  # noqa: E741
       n=st.sampled_from([1, 8, 67]), seed=st.integers(0, 2**16))
def test_half_output(kernel, name, dtype, b, m, k, l, n, seed):  # noqa: E741
    """``out_dtype=`` float16/bfloat16: the cast stage after O is part of the chain
    (``ChainMatch.out_cast``) and the kernel stores O rounded to it."""
    c = compile_kernel(getattr(ck, kernel), "cuda", SMALL)
    (match,) = detect_chains(getattr(ck, kernel).polyhedral_model())
    assert match.out_cast and match.out.dtype == dtype and "chain-cuda" in c.state.remarks
    xs = _inputs(name, dtype, b, m, k, l, n, np.random.default_rng(seed))
    out, _ = simulate(c, *xs)
    _check(out, *_reference(name, xs), dtype, dtype)


def test_detection_and_why_not():
    """Half-precision chains are detected with their dtype; mixed dtypes are explained."""
    import polycomp as pc
    from polycomp.frontend import ops
    for dtype, kernels in ck.HALF.items():
        for name, k in kernels.items():
            (m,) = detect_chains(k.polyhedral_model())
            assert m.dtype == dtype and m.y_transposed == (name == "attention_k_rows")

    @pc.tensor_expr
    def mixed(X: pc.Tensor[(ck.B, ck.M, ck.K), "float16"],
              Y: pc.Tensor[(ck.B, ck.K, ck.L), "float16"],
              Z: pc.Tensor[(ck.B, ck.L, ck.N), "float32"]):
        return ops.batch_matmul(ops.batch_matmul(X, Y, name="T"), Z, name="O")
    model = mixed.polyhedral_model()
    assert detect_chains(model) == []
    assert any("mixed operand dtypes" in r for r in why_not(model))
    # the CPU targets keep the half-precision chain unfused (their kernel is float32)
    c = compile_kernel(ck.bmm_chain_f16, "c")
    assert "chain" not in c.state.remarks or "fused kernel" not in " ".join(
        c.state.remarks.get("chain", []))


def test_default_tiles_and_one_kernel():
    """Default tiles: the closed form on 48 KiB of 16-bit elements (alpha 16) rounded to
    16, shrunk to the ring's shared memory and the accumulator budget; one kernel, no
    global temporary; the full-size kernel gives numpy's result."""
    c = fused("causal_attention", "float16", None)
    note = " ".join(c.state.remarks["chain-cuda"])
    assert "Tensor Core" in note and "alpha=16" in note and "T_M=141" in note
    assert c.source.count("__global__ void") == 1 and "cudaMalloc" not in c.source
    assert "TM=96 TL=32" in note and "2-stage" in note
    assert "pc_cp_async_wait<0>" in c.source          # double buffer: wait_group S-2 = 0
    for shape in ((1, 70, 5, 67, 9), (1, 100, 16, 72, 24)):    # element copies; cp.async
        xs = _inputs("causal_attention", "float16", *shape, np.random.default_rng(2))
        out, _ = simulate(c, *xs)
        _check(out, *_reference("causal_attention", xs), "float16")


def _check_attention(c, s, d, dtype, rng):
    """The bench's attention kernel ``c`` at ``[1, s, d]`` in the simulator against
    numpy (float32 from the rounded inputs)."""
    h = dt.to_numpy(dtype)
    q, kt, v = (rng.standard_normal(x).astype(np.float32).astype(h)
                for x in ((1, s, d), (1, d, s), (1, s, d)))
    out, _ = simulate(c, q, kt, v)
    f = [x.astype(np.float32) for x in (q, kt, v)]
    p = ck.np_softmax((f[0] @ f[1]) * np.float32(1 / np.sqrt(d)))
    _check(out, p @ f[2], p @ np.abs(f[2]), dtype)


@pytest.mark.parametrize("dtype,s,d", [("float16", 37, 24), ("bfloat16", 50, 80)])
def test_constant_shapes_x_resident(dtype, s, d):
    """Constant K <= 128: one X buffer loaded once per block (not in the ring), KC = K
    rounded to 16, TN = N rounded to 16 (N <= 80); the bench's attention kernel."""
    from polycomp.benchmarks.chains_cuda import _kernel
    c = compile_kernel(_kernel(1, s, d, dtype), "cuda")
    note = " ".join(c.state.remarks["chain-cuda"])
    assert "X resident" in note and f"KC={-(-d // 16) * 16} TN={-(-d // 16) * 16}" in note
    _check_attention(c, s, d, dtype, np.random.default_rng(s))


@pytest.mark.parametrize("dtype,s,d,dynamic", [("float16", 197, 64, True),
                                               ("bfloat16", 130, 128, True),
                                               ("float16", 192, 40, False)])
def test_wide_tiles(dtype, s, d, dynamic):
    """Constant K <= 128, N <= 64, M and L >= 128: TM = 128, TL = 64 in a 2-stage ring
    (tc_kernel.WIDE_*: the H200-timed configuration), past 48 KiB in dynamic shared
    memory; the last l tile partial (197, 130) or whole (192), against numpy."""
    from polycomp.benchmarks.chains_cuda import _kernel
    c = compile_kernel(_kernel(1, s, d, dtype), "cuda")
    note = " ".join(c.state.remarks["chain-cuda"])
    assert "TM=128 TL=64" in note and "2-stage" in note, note
    assert ("pc_dyn_smem" in c.source) == dynamic
    _check_attention(c, s, d, dtype, np.random.default_rng(s + d))


def test_fused_moves_less_global_memory_than_unfused():
    xs = _inputs("causal_attention", "float16", 1, 32, 16, 48, 16, np.random.default_rng(1))
    out_f, rep_f = simulate(fused("causal_attention", "float16"), *xs)
    unfused = compile_kernel(ck.causal_attention_f16, "cuda", {"chain": False})
    out_u, rep_u = simulate(unfused, *xs)
    _check(out_f, *_reference("causal_attention", xs), "float16")

    def sectors(rep):
        return sum(k.global_load.sectors + k.global_store.sectors for k in rep.kernels)
    assert len(rep_f.kernels) == 1 < len(rep_u.kernels)
    assert sectors(rep_f) < sectors(rep_u)


@pytest.mark.nvcc
@pytest.mark.parametrize("target", ["cuda", "cuda-sm90"])
def test_tc_cu_compiles_without_spills(target):
    """sm_80 (and sm_90 for cuda-sm90): ptxas reports no spills and no stack frame for the
    softmax kernel at its default tiles, the 2-d relu chain, and constant ViT-B shapes."""
    from polycomp.benchmarks.chains_cuda import _kernel
    from polycomp.hw.cuda.sass import compile_cubin
    sm = 90 if target == "cuda-sm90" else 80
    kernels = {"causal_f16": ck.causal_attention_f16, "mm_relu_bf16":
               ck.HALF["bfloat16"]["mm_relu_chain"], "vit_b": _kernel(12, 197, 64, "float16")}
    for name, k in kernels.items():
        c = compile_kernel(k, target)
        assert "chain-cuda" in c.state.remarks and "Tensor Core" in " ".join(
            c.state.remarks["chain-cuda"]), name
        _, res = compile_cubin(c.source, sm)
        assert res and all(r.spill_stores == r.spill_loads == r.stack_bytes == 0
                           for r in res), (name, res)


@pytest.mark.parametrize("case", ["causal_attention_f16", "bmm_chain_bf16_out"])
def test_golden_tree_tc(case, goldens):
    """``chain-fuse`` for ``cuda`` on half-precision chains: the program tree with the
    Tensor Core kernel's tiles (96 x 32, the ring's ``k`` chunks of 64 below ``FIRST``;
    the output cast is the write-out step, after the whole ``l`` loop)."""
    from chain_trees import check_golden_tree
    k = getattr(ck, case)
    roles = ["acc_init", "first", "middle", "softmax", "second", "write_out"] \
        if case.startswith("causal") else ["acc_init", "first", "second", "write_out"]
    sched = check_golden_tree(k, "cuda", {}, f"test_chain_tc_golden/{case}.chain-fuse.isl",
                              goldens, roles)
    text = sched.to_str()
    assert "96by0" in text and "floor((i2)/32)" in text and "floor((i3)/64)" in text
    assert ("O_cast" in text) == case.endswith("_out")
    assert ("O_out" in text) != case.endswith("_out")     # the cast is the write-out


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("polycomp.hw.cuda.launcher", fromlist=["x"]).gpu_available(),
                    reason="hardware: no NVIDIA GPU (with pycuda or cupy) here")
@pytest.mark.parametrize("target", ["cuda", "cuda-sm90"])
@pytest.mark.parametrize("name,dtype,shape", [
    ("causal_attention", "float16", (3, 197, 64, 197, 64)),     # ViT-B-like, L % 8 != 0
    ("masked_attention", "bfloat16", (2, 100, 32, 256, 80)),    # cp.async paths
    ("attention_k_rows", "float16", (2, 77, 72, 130, 24)),      # K > KC: two k chunks
    ("bmm_chain", "float16", (1, 33, 16, 40, 8))])
def test_tc_chain_on_gpu(target, name, dtype, shape):
    """The same kernels on a real GPU (pycuda or cupy), against the same reference."""
    from polycomp.driver import build
    if target == "cuda-sm90":
        from polycomp.hw.cuda.launcher import device_api
        if device_api().compute_capability() < 90:
            pytest.skip("hardware: cuda-sm90 needs an sm_90 GPU")
    xs = _inputs(name, dtype, *shape, np.random.default_rng(11))
    out = build(ck.HALF[dtype][name], target)(*xs)
    _check(np.asarray(out), *_reference(name, xs), dtype)
