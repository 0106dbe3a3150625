"""The CUDA simulator on hand-written CUDA-level IR: shared memory and barriers, races,
divergent barriers, warp shuffles and votes, bounds and launch errors.  The kernels
are also printed by the CUDA code generator and compiled with nvcc, so they are real
CUDA, not only simulator input."""
import subprocess

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from polycomp import ir
from polycomp.hw.cuda.codegen import emit_cuda
from polycomp.hw.cuda.simulator import (
    BarrierDivergenceError,
    GlobalMemoryRaceError,
    GlobalWriteConflictError,
    LaunchError,
    OutOfBoundsError,
    SharedMemoryRaceError,
    SimulatorError,
    WarpSyncError,
    simulate,
)

FULL = ir.IntImm(0xFFFFFFFF)
i64 = ir.IntImm


def V(name):
    return ir.Var(name)


def gpu(var, extent, kind, axis, body, threads=None):
    ann = (("axis", axis),) + ((("threads", threads),) if threads else ())
    return ir.For(var, i64(0), ir.const(extent), kind, body, ann)


def kernel(name, params, inputs, outputs, *kernels, temps=()):
    body = ir.Block(tuple(ir.AttrStmt("kernel", str(k), s) for k, s in enumerate(kernels)))
    for t in temps:
        body = ir.Allocate(t, body)
    return ir.LoweredFunc(name, tuple(params), tuple(inputs), tuple(outputs), body)


def buf(name, shape, scope="global", dtype="float32"):
    return ir.Buffer(name, dtype, tuple(ir.const(s) for s in shape), scope, flat=True)


def shfl(name, value, x, width=None):
    args = (FULL, value, ir.const(x)) + ((ir.const(width),) if width else ())
    return ir.Call(name, args, value.dtype, pure=False)


def nvcc_compiles(func, tmp_path):
    cu = tmp_path / f"{func.name}.cu"
    cu.write_text(emit_cuda(func))
    r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "k.cubin"),
                        str(cu)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return cu.read_text()


# --------------------------------------------------------------------------- transpose

TILE = 16


def transpose(barrier=True, pad=1):
    """B = A^T through a shared TILE x (TILE+pad) tile; N is symbolic (partial tiles are
    guarded around the memory accesses, not around the barrier)."""
    N = ir.Var("N", is_param=True)
    A, B = buf("A", (N, N)), buf("B", (N, N))
    S = buf("S", (TILE, TILE + pad), "shared")
    bx, by, tx, ty = V("bx"), V("by"), V("tx"), V("ty")
    w = TILE + pad
    row_in, col_in = by * TILE + ty, bx * TILE + tx
    row_out, col_out = bx * TILE + ty, by * TILE + tx
    load = ir.IfThenElse((row_in < N) & (col_in < N),
                         ir.Store(S, (ty * w + tx,), A[row_in * N + col_in]))
    store = ir.IfThenElse((row_out < N) & (col_out < N),
                          ir.Store(B, (row_out * N + col_out,), S[tx * w + ty]))
    body = ir.seq(load, ir.barrier() if barrier else None, store)
    threads = gpu(ty, TILE, "gpu_thread", "y", gpu(tx, TILE, "gpu_thread", "x", body, TILE),
                  TILE)
    nb = (N + (TILE - 1)) // TILE
    k = gpu(by, nb, "gpu_block", "y", gpu(bx, nb, "gpu_block", "x", ir.Allocate(S, threads)))
    return kernel("transpose", [N], [A], [B], k)


@given(n=st.one_of(st.sampled_from([1, 15, 16, 17, 31, 32, 33]), st.integers(1, 70)))
def test_transpose_with_barrier_is_correct_and_race_free(n):
    A = np.random.default_rng(n).standard_normal((n, n)).astype(np.float32)
    out, rep = simulate(transpose(), A)
    np.testing.assert_array_equal(out, A.T)
    assert rep.ok
    nb = -(-n // TILE)
    assert rep.barriers == nb * nb          # one barrier per block
    assert rep.shared_store.requests == rep.shared_load.requests > 0


def test_transpose_without_barrier_races():
    A = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    with pytest.raises(SharedMemoryRaceError) as e:
        simulate(transpose(barrier=False), A)
    msg = str(e.value)
    assert "read-after-write" in msg and "S[" in msg and "__syncthreads" in msg
    # lock-step execution still produces the right numbers: only the checker sees it
    out, rep = simulate(transpose(barrier=False), A, strict=False)
    np.testing.assert_array_equal(out, A.T)
    assert rep.races and not rep.ok
    assert all(f.kind == "shared-race" for f in rep.findings)
    # every thread off the tile diagonal reads a word another thread wrote: 240 per block
    assert sum(f.count for f in rep.races) == 4 * (TILE * TILE - TILE)
    assert "shared-race" in str(rep)


@pytest.mark.nvcc
def test_transpose_compiles_with_nvcc(tmp_path):
    src = nvcc_compiles(transpose(), tmp_path)
    assert "__syncthreads();" in src and "__shared__" in src


# ------------------------------------------------------------------------ races across iterations

def staged_sum(second_barrier=True):
    """out[t] = sum_k A[k, 31 - t] via a shared row per iteration; without the second
    barrier, iteration k+1 overwrites S while iteration k's reads may be pending."""
    K = ir.Var("K", is_param=True)
    A, out = buf("A", (K, 32)), buf("out", (32,))
    S = buf("S", (32,), "shared")
    tx, k = V("tx"), V("k")
    it = ir.seq(ir.Store(S, (tx,), A[k * 32 + tx]), ir.barrier(),
                ir.Store(out, (tx,), out[tx] + S[31 - tx]),
                ir.barrier() if second_barrier else None)
    body = ir.seq(ir.Store(out, (tx,), ir.FloatImm(0.0)),
                  ir.For(k, i64(0), K, "serial", it))
    t = gpu(tx, 32, "gpu_thread", "x", body, 32)
    return kernel("staged", [K], [A], [out], gpu(V("b"), 1, "gpu_block", "x",
                                                 ir.Allocate(S, t)))


def test_race_across_loop_iterations():
    A = np.random.default_rng(0).standard_normal((5, 32)).astype(np.float32)
    out, rep = simulate(staged_sum(True), A)
    np.testing.assert_allclose(out, A[:, ::-1].sum(axis=0), rtol=1e-5)
    assert rep.ok and rep.barriers == 10
    with pytest.raises(SharedMemoryRaceError, match="write-after-read"):
        simulate(staged_sum(False), A)


# --------------------------------------------------------------------------- divergence

def barrier_in_branch(cut):
    """if (tx < cut) { S[tx] = A[tx]; __syncthreads(); out[tx] = S[tx ^ 1]; }"""
    A, out = buf("A", (64,)), buf("out", (64,))
    S = buf("S", (64,), "shared")
    tx = V("tx")
    then = ir.seq(ir.Store(S, (tx,), A[tx]), ir.barrier(),
                  ir.Store(out, (tx,), S[(tx // 2) * 2 + (1 - tx % 2)]))
    t = gpu(tx, 64, "gpu_thread", "x", ir.IfThenElse(tx < cut, then), 64)
    return kernel("branchy", [], [A], [out], gpu(V("b"), 1, "gpu_block", "x",
                                                 ir.Allocate(S, t)))


def test_barrier_inside_thread_dependent_if_is_divergent():
    A = np.arange(64, dtype=np.float32)
    with pytest.raises(BarrierDivergenceError) as e:
        simulate(barrier_in_branch(16), A)
    assert "16 of 64 threads" in str(e.value) and "(16, 0, 0)" in str(e.value)
    _, rep = simulate(barrier_in_branch(16), A, strict=False)
    assert len(rep.divergences) == 1 and rep.finding_counts == {"barrier-divergence": 1}
    # the same code with a condition every thread passes is fine
    out, rep = simulate(barrier_in_branch(64), A)
    np.testing.assert_array_equal(out, A.reshape(32, 2)[:, ::-1].ravel())
    assert rep.ok


def test_barrier_under_partial_tile_guard_is_divergent():
    """A barrier inside a gpu_thread loop narrower than the block (the printed guard
    `if (threadIdx.x < extent)`) is divergent in the last, partial block."""
    N = ir.Var("N", is_param=True)
    A, out = buf("A", (N,)), buf("out", (N,))
    S = buf("S", (32,), "shared")
    bx, tx = V("bx"), V("tx")
    body = ir.seq(ir.Store(S, (tx,), A[bx * 32 + tx]), ir.barrier(),
                  ir.Store(out, (bx * 32 + tx,), S[tx]))
    t = ir.For(tx, i64(0), ir.min_(N - bx * 32, 32), "gpu_thread", body,
               (("axis", "x"), ("threads", 32)))
    f = kernel("guarded", [N], [A], [out],
               gpu(bx, (N + 31) // 32, "gpu_block", "x", ir.Allocate(S, t)))
    out, rep = simulate(f, np.ones(64, np.float32))
    assert rep.ok
    with pytest.raises(BarrierDivergenceError, match="block \\(1, 0, 0\\)"):
        simulate(f, np.ones(40, np.float32))


# --------------------------------------------------------------------------- shuffles

def warp_reduce(kind="down", threads=64):
    """One sum per warp (shfl_down tree, lane 0 writes) or an all-reduce (shfl_xor
    butterfly, every lane writes), with the value in a local register."""
    N = ir.Var("N", is_param=True)
    A = buf("A", (N,))
    R = buf("R", (1,), "local")
    bx, tx = V("bx"), V("tx")
    gid = bx * threads + tx
    steps = [ir.Store(R, (i64(0),), A[gid])]
    name = "__shfl_down_sync" if kind == "down" else "__shfl_xor_sync"
    for off in (16, 8, 4, 2, 1):
        steps.append(ir.Store(R, (i64(0),), R[i64(0)] + shfl(name, R[i64(0)], off)))
    if kind == "down":
        out = buf("out", (N // 32,))
        steps.append(ir.IfThenElse(ir.binary("==", tx % 32, 0),
                                   ir.Store(out, (gid // 32,), R[i64(0)])))
    else:
        out = buf("out", (N,))
        steps.append(ir.Store(out, (gid,), R[i64(0)]))
    t = gpu(tx, threads, "gpu_thread", "x", ir.Allocate(R, ir.seq(*steps)), threads)
    return kernel(f"warp_{kind}", [N], [A], [out], gpu(bx, N // threads, "gpu_block", "x", t))


@pytest.mark.parametrize("threads", [32, 64, 96])
def test_shfl_down_warp_reduction(threads):
    A = np.random.default_rng(threads).standard_normal(threads * 3).astype(np.float32)
    out, rep = simulate(warp_reduce("down", threads), A)
    np.testing.assert_allclose(out, A.reshape(-1, 32).sum(axis=1), rtol=1e-5, atol=1e-5)
    assert rep.ok and rep.undefined_shuffle_reads == 0
    assert rep.kernels[0].shuffles == 5 * (threads * 3 // 32)


def test_shfl_xor_butterfly_allreduce():
    A = np.random.default_rng(1).standard_normal(128).astype(np.float32)
    out, rep = simulate(warp_reduce("xor"), A)
    np.testing.assert_allclose(out, np.repeat(A.reshape(-1, 32).sum(axis=1), 32), rtol=1e-5,
                               atol=1e-5)
    assert rep.ok


@pytest.mark.nvcc
def test_warp_shuffles_compile_with_nvcc(tmp_path):
    src = nvcc_compiles(warp_reduce("down"), tmp_path)
    assert "__shfl_down_sync(" in src


def one_warp(value_of, threads=32, out_dtype="float32", extra_guard=None):
    """out[tx] = value_of(A[tx], tx) in one block of ``threads`` threads."""
    A, out = buf("A", (threads,)), buf("out", (threads,), dtype=out_dtype)
    tx = V("tx")
    st_ = ir.Store(out, (tx,), value_of(A[tx], tx))
    if extra_guard is not None:
        st_ = ir.IfThenElse(extra_guard(tx), st_)
    t = gpu(tx, threads, "gpu_thread", "x", st_, threads)
    return kernel("one_warp", [], [A], [out], gpu(V("b"), 1, "gpu_block", "x", t))


def ptx_source_lane(mode, lane, b, width):
    """The source lane of ``shfl.sync.<mode>`` per the PTX ISA pseudo-code, with the
    clamp/segment operand ``c`` that CUDA's ``__shfl_*_sync(..., width)`` passes."""
    segmask = 32 - width
    cval = 0 if mode == "up" else 0x1F
    max_lane = (lane & segmask) | (cval & ~segmask & 0x1F)
    min_lane = lane & segmask
    b &= 0x1F
    if mode == "up":
        j, ok = lane - b, lane - b >= max_lane
    elif mode == "down":
        j, ok = lane + b, lane + b <= max_lane
    elif mode == "bfly":
        j, ok = lane ^ b, (lane ^ b) <= max_lane
    else:
        j = min_lane | (b & ~segmask & 0x1F)
        ok = j <= max_lane
    return j if ok else lane


@pytest.mark.parametrize("width", [32, 16, 8, 4, 2, 1])
@pytest.mark.parametrize("delta", [1, 3, 8, 21])
def test_shuffle_source_lanes(width, delta):
    A = np.arange(32, dtype=np.float32) * 10
    modes = {"__shfl_down_sync": "down", "__shfl_up_sync": "up",
             "__shfl_xor_sync": "bfly", "__shfl_sync": "idx"}
    for name, mode in modes.items():
        src = [ptx_source_lane(mode, lane, delta, width) for lane in range(32)]
        out, rep = simulate(one_warp(lambda a, tx, name=name: shfl(name, a, delta, width)), A)
        np.testing.assert_array_equal(out, A[src], err_msg=name)
        assert rep.ok


def test_shfl_sync_with_per_lane_source():
    A = np.arange(32, dtype=np.float32)
    out, _ = simulate(one_warp(lambda a, tx: ir.Call("__shfl_sync", (FULL, a, 31 - tx),
                                                     "float32", pure=False)), A)
    np.testing.assert_array_equal(out, A[::-1])


def test_shuffle_from_missing_lanes_is_undefined():
    """A 16-thread block is a partial warp: shfl_down by 8 in lanes 8..15 reads lanes
    16..23, which do not exist; their results are poisoned and counted."""
    A = np.arange(16, dtype=np.float32)
    out, rep = simulate(one_warp(lambda a, tx: shfl("__shfl_down_sync", a, 8), threads=16), A)
    np.testing.assert_array_equal(out[:8], A[8:])
    assert np.isnan(out[8:]).all()
    assert rep.undefined_shuffle_reads == 8
    assert rep.ok          # legal CUDA (the mask names only non-existent extra lanes)


def test_shuffle_in_divergent_branch_is_a_warp_sync_error():
    """A full-mask shuffle executed by only half of the warp."""
    A, out = buf("A", (32,)), buf("out", (32,))
    tx = V("tx")
    body = ir.IfThenElse(tx < 16, ir.Store(out, (tx,), shfl("__shfl_xor_sync", A[tx], 1)))
    f = kernel("half", [], [A], [out], gpu(V("b"), 1, "gpu_block", "x",
                                           gpu(tx, 32, "gpu_thread", "x", body, 32)))
    with pytest.raises(WarpSyncError, match="does not execute it"):
        simulate(f, np.zeros(32, np.float32))
    _, rep = simulate(f, np.zeros(32, np.float32), strict=False)
    assert len(rep.warp_sync_errors) == 1


def test_ballot_any_all():
    A = np.random.default_rng(5).standard_normal(32).astype(np.float32)
    ballot = lambda a, tx: ir.Call("__ballot_sync", (FULL, a > 0.0), "int64", pure=False)
    out, rep = simulate(one_warp(ballot, out_dtype="int64"), A)
    expect = int(sum(1 << i for i in range(32) if A[i] > 0))
    assert (out == expect).all() and rep.ok
    for name, fn in (("__any_sync", np.any), ("__all_sync", np.all)):
        vote = lambda a, tx, name=name: ir.Call(name, (FULL, a > -10.0), "int64", pure=False)
        out, _ = simulate(one_warp(vote, out_dtype="int64"), A)
        assert (out == int(fn(A > -10.0))).all()
    vote = lambda a, tx: ir.Call("__all_sync", (FULL, a > 0.0), "int64", pure=False)
    out, _ = simulate(one_warp(vote, out_dtype="int64"), A)
    assert (out == int(np.all(A > 0))).all()


# --------------------------------------------------------------------------- errors

def test_out_of_bounds_store_names_the_thread():
    f = one_warp(lambda a, tx: a)
    A, out = f.inputs[0], f.outputs[0]
    tx = V("tx")
    bad = kernel("oob", [], [A], [out], gpu(V("b"), 1, "gpu_block", "x", gpu(
        tx, 32, "gpu_thread", "x", ir.Store(out, (tx + 1,), A[tx]), 32)))
    with pytest.raises(OutOfBoundsError, match=r"thread \(31, 0, 0\) of block \(0, 0, 0\)"):
        simulate(bad, np.zeros(32, np.float32))


def test_thread_loop_wider_than_block_is_a_launch_error():
    A, out = buf("A", (64,)), buf("out", (64,))
    tx = V("tx")
    f = kernel("wide", [], [A], [out], gpu(V("b"), 1, "gpu_block", "x", ir.For(
        tx, i64(0), i64(64), "gpu_thread", ir.Store(out, (tx,), A[tx]),
        (("axis", "x"), ("threads", 32)))))
    with pytest.raises(LaunchError, match="blockDim.x is 32"):
        simulate(f, np.zeros(64, np.float32))


def test_conflicting_global_stores():
    A, out = buf("A", (32,)), buf("out", (1,))
    tx = V("tx")

    def f(value):
        return kernel("conflict", [], [A], [out], gpu(V("b"), 1, "gpu_block", "x", gpu(
            tx, 32, "gpu_thread", "x", ir.Store(out, (i64(0),), value), 32)))
    with pytest.raises(GlobalWriteConflictError):
        simulate(f(A[tx]), np.arange(32, dtype=np.float32))
    out_, rep = simulate(f(A[i64(3)]), np.arange(32, dtype=np.float32))   # same value
    assert out_[0] == 3 and rep.ok


def test_unknown_intrinsic_is_reported():
    f = one_warp(lambda a, tx: ir.Call("__nosuch", (a,), "float32", pure=False))
    with pytest.raises(SimulatorError, match="__nosuch"):
        simulate(f, np.zeros(32, np.float32))


def test_custom_intrinsic_table():
    """Handlers are a table: a new intrinsic is one function."""
    from polycomp.hw.cuda.sim_intrinsics import INTRINSICS

    def lane_id(sim, call, active):
        return sim.geom.warp_lane.astype(np.float32)
    table = dict(INTRINSICS, __laneid=lane_id)
    f = one_warp(lambda a, tx: a + ir.Call("__laneid", (), "float32", pure=False), threads=64)
    out, _ = simulate(f, np.zeros(64, np.float32), intrinsics=table)
    np.testing.assert_array_equal(out, np.tile(np.arange(32), 2))


def test_in_out_outputs_start_from_the_given_contents():
    A, out = buf("A", (40,)), buf("out", (40,))
    tx = V("tx")
    f = kernel("acc", [], [A], [out], gpu(V("b"), 1, "gpu_block", "x", gpu(
        tx, 40, "gpu_thread", "x", ir.Store(out, (tx,), out[tx] + A[tx]), 64)))
    f.inout = ("out",)
    A_ = np.arange(40, dtype=np.float32)
    C0 = np.full(40, 2.0, np.float32)
    res, rep = simulate(f, A_, C0)
    np.testing.assert_array_equal(res, A_ + 2.0)
    np.testing.assert_array_equal(C0, 2.0)         # the caller's array is not modified
    assert rep.global_load.requests == 2 * 2       # 2 loads, warps 0 and 1 (8 lanes)


# --------------------------------------------------------------------------- tiled matmul

def tiled_matmul(T=16):
    """C = A @ B with T x T shared tiles of A and B per block (zero-filled at the edges
    so that every thread reaches both barriers) and the sum in a register."""
    N, K, M = (ir.Var(n, is_param=True) for n in "NKM")
    A, B, C = buf("A", (N, K)), buf("B", (K, M)), buf("C", (N, M))
    As, Bs = buf("As", (T, T), "shared"), buf("Bs", (T, T), "shared")
    acc = buf("acc", (1,), "local")
    bx, by, tx, ty, kt, kk = (V(n) for n in ("bx", "by", "tx", "ty", "kt", "kk"))
    row, col = by * T + ty, bx * T + tx
    zero = ir.FloatImm(0.0)
    r0 = (i64(0),)
    tile = ir.seq(
        ir.Store(As, (ty * T + tx,), ir.select((row < N) & (kt * T + tx < K),
                                                A[row * K + kt * T + tx], zero)),
        ir.Store(Bs, (ty * T + tx,), ir.select((kt * T + ty < K) & (col < M),
                                                B[(kt * T + ty) * M + col], zero)),
        ir.barrier(),
        ir.For(kk, i64(0), i64(T), "serial",
               ir.Store(acc, r0, acc[r0] + As[ty * T + kk] * Bs[kk * T + tx])),
        ir.barrier())
    body = ir.Allocate(acc, ir.seq(
        ir.Store(acc, r0, zero),
        ir.For(kt, i64(0), (K + (T - 1)) // T, "serial", tile),
        ir.IfThenElse((row < N) & (col < M), ir.Store(C, (row * M + col,), acc[r0]))))
    threads = gpu(ty, T, "gpu_thread", "y", gpu(tx, T, "gpu_thread", "x", body, T), T)
    k = gpu(by, (N + (T - 1)) // T, "gpu_block", "y",
            gpu(bx, (M + (T - 1)) // T, "gpu_block", "x",
                ir.Allocate(As, ir.Allocate(Bs, threads))))
    return kernel("tiled_matmul", [N, K, M], [A, B], [C], k)


@given(n=st.integers(1, 40), k=st.integers(1, 40), m=st.integers(1, 40))
def test_tiled_matmul_with_shared_tiles(n, k, m):
    rng = np.random.default_rng(n * 10000 + k * 100 + m)
    A = rng.standard_normal((n, k)).astype(np.float32)
    B = rng.standard_normal((k, m)).astype(np.float32)
    out, rep = simulate(tiled_matmul(), A, B)
    np.testing.assert_allclose(out, A @ B, rtol=1e-4, atol=1e-4)
    assert rep.ok
    kt = -(-k // 16)
    assert rep.barriers == 2 * kt * (-(-n // 16)) * (-(-m // 16))


@pytest.mark.nvcc
def test_tiled_matmul_256_and_nvcc(tmp_path):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((256, 64)).astype(np.float32)
    B = rng.standard_normal((64, 256)).astype(np.float32)
    out, rep = simulate(tiled_matmul(), A, B)
    np.testing.assert_allclose(out, A @ B, rtol=1e-4, atol=1e-4)
    # As[ty][kk] is a broadcast within each half-warp and Bs[kk][tx] 16 consecutive
    # words: no bank conflicts; the tile loads are coalesced 64-byte rows
    assert rep.bank_conflicts == 0
    assert rep.global_load.efficiency == 1.0
    assert rep.flops == 2 * 256 * 256 * 64
    nvcc_compiles(tiled_matmul(), tmp_path)


def redundant_copy(value_of):
    """Every thread row ty stores S[tx] = value_of(tx, ty); barrier; out[ty, tx] = S[tx]."""
    A, out = buf("A", (32,)), buf("out", (4, 32))
    S = buf("S", (32,), "shared")
    tx, ty = V("tx"), V("ty")
    body = ir.seq(ir.Store(S, (tx,), value_of(A, tx, ty)), ir.barrier(),
                  ir.Store(out, (ty * 32 + tx,), S[tx]))
    t = gpu(ty, 4, "gpu_thread", "y", gpu(tx, 32, "gpu_thread", "x", body, 32), 4)
    return kernel("redundant", [], [A], [out], gpu(V("b"), 1, "gpu_block", "x",
                                                   ir.Allocate(S, t)))


def test_redundant_identical_shared_stores_are_not_races():
    """Threads that store the same value to one word (a copy replicated over a thread
    dimension) are order-independent; different values are a race."""
    A = np.arange(32, dtype=np.float32)
    out, rep = simulate(redundant_copy(lambda A, tx, ty: A[tx]), A)
    np.testing.assert_array_equal(out, np.tile(A, (4, 1)))
    assert rep.ok
    with pytest.raises(SharedMemoryRaceError, match="write-write in one instruction"):
        simulate(redundant_copy(lambda A, tx, ty: A[tx] + ir.cast(ty, "float32")), A)


# --------------------------------------------------------------------------- global races

def exchange(split, barrier=False):
    """G[i] = 2 * A[i] (i = b*32 + t), then out[i] = G[source(b, t)]: reading what
    another thread wrote.  ``split`` puts the two phases in separate kernels (a launch
    boundary orders them); otherwise they share a kernel, where a barrier orders the
    threads of one block and nothing orders different blocks."""
    A, out = buf("A", (64,)), buf("out", (64,))
    G = buf("G", (64,))
    b, t = V("b"), V("t")
    i = b * 32 + t

    def launch(body):
        return gpu(b, 2, "gpu_block", "x", gpu(t, 32, "gpu_thread", "x", body, 32))

    def make(source):
        write = ir.Store(G, (i,), A[i] * 2.0)
        read = ir.Store(out, (i,), G[source(b, t)])
        if split:
            return kernel("xchg", [], [A], [out], launch(write), launch(read), temps=[G])
        return kernel("xchg", [], [A], [out], launch(ir.seq(
            write, ir.barrier() if barrier else None, read)), temps=[G])
    return make


OTHER_BLOCK = lambda b, t: ((1 - b) * 32 + t)                 # noqa: E731
SAME_BLOCK = lambda b, t: (b * 32 + (t + 1) % 32)             # noqa: E731


def test_global_race_between_blocks_of_one_kernel():
    A = np.arange(64, dtype=np.float32)
    # separate kernels: ordered by the launch boundary
    out, rep = simulate(exchange(split=True)(OTHER_BLOCK), A)
    np.testing.assert_array_equal(out, np.roll(A * 2, 32))
    assert rep.ok
    # one kernel, reading the other block's element: a barrier does not help
    for barrier in (False, True):
        with pytest.raises(GlobalMemoryRaceError, match="read-after-write") as e:
            simulate(exchange(split=False, barrier=barrier)(OTHER_BLOCK), A)
        assert "block (1, 0, 0)" in str(e.value) and "block (0, 0, 0)" in str(e.value)
    # within a block, the barrier orders the write before the read
    out, rep = simulate(exchange(split=False, barrier=True)(SAME_BLOCK), A)
    np.testing.assert_array_equal(out, (A * 2).reshape(2, 32)[:, np.r_[1:32, 0]].ravel())
    assert rep.ok
    with pytest.raises(GlobalMemoryRaceError):
        simulate(exchange(split=False)(SAME_BLOCK), A)
    _, rep = simulate(exchange(split=False)(SAME_BLOCK), A, strict=False)
    assert rep.finding_counts == {"global-race": 1}
    _, rep = simulate(exchange(split=False)(SAME_BLOCK), A, global_races=False)
    assert rep.ok


def test_read_modify_write_after_barrier_is_ordered():
    """Thread t reads X[t ^ 1] (another thread's element), barrier, then every thread
    updates its own X[t]: the update is ordered after the other thread's read."""
    A, X = buf("A", (32,)), buf("X", (32,))
    S = buf("S", (32,), "local")
    t = V("t")
    body = ir.Allocate(S, ir.seq(
        ir.Store(S, (i64(0),), X[(t // 2) * 2 + (1 - t % 2)]),
        ir.barrier(),
        ir.Store(X, (t,), X[t] + A[t] + S[i64(0)])))
    f = kernel("rmw", [], [A], [X], gpu(V("b"), 1, "gpu_block", "x",
                                        gpu(t, 32, "gpu_thread", "x", body, 32)))
    f.inout = ("X",)
    A_ = np.arange(32, dtype=np.float32)
    X0 = np.ones(32, np.float32)
    out, rep = simulate(f, A_, X0)
    np.testing.assert_array_equal(out, X0 + A_ + 1)
    assert rep.ok
    # without the barrier, thread t's update races with thread t^1's read of X[t]
    body2 = ir.Allocate(S, ir.seq(
        ir.Store(S, (i64(0),), X[(t // 2) * 2 + (1 - t % 2)]),
        ir.Store(X, (t,), X[t] + A[t] + S[i64(0)])))
    f2 = kernel("rmw", [], [A], [X], gpu(V("b"), 1, "gpu_block", "x",
                                         gpu(t, 32, "gpu_thread", "x", body2, 32)))
    f2.inout = ("X",)
    with pytest.raises(GlobalMemoryRaceError, match="write-after-read"):
        simulate(f2, A_, X0)


def test_shared_access_hooks_see_every_shared_access(monkeypatch):
    """Extensions (cp.async in-flight checks) observe ordinary shared loads/stores."""
    seen = []
    from polycomp.hw.cuda import simulator as simmod

    class Recording(simmod.Simulator):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.shared_access_hooks.append(
                lambda sim, mem, pos, off, active, write: seen.append(
                    (mem.buffer.name, write, int(active.sum()))))
    monkeypatch.setattr(simmod, "Simulator", Recording)
    simulate(transpose(), np.zeros((16, 16), np.float32))
    assert seen == [("S", True, 256), ("S", False, 256)]


def test_buffers_above_the_tracking_limit_are_listed(monkeypatch):
    from polycomp.hw.cuda import simulator as simmod
    monkeypatch.setattr(simmod, "GLOBAL_RACE_MAX_ELEMENTS", 16)
    A = np.arange(64, dtype=np.float32)
    _, rep = simulate(exchange(split=False)(SAME_BLOCK), A)     # the race goes unseen
    assert rep.ok and rep.unchecked == ["G", "out"]
    assert "global race checks skipped" in str(rep)
