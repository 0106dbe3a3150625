"""Profiler-style counters of the CUDA simulator: global-memory sectors and coalescing,
shared-memory bank conflicts, warp formation from 2-D blocks; the counting functions
against a brute-force reference with Python sets."""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import polycomp as pc
from polycomp import ir
from polycomp.driver import compile_kernel
from polycomp.hw.cuda.sim_counters import global_sectors, shared_wavefronts
from polycomp.hw.cuda.simulator import simulate

i64 = ir.IntImm


def V(name):
    return ir.Var(name)


def buf(name, shape, scope="global", dtype="float32"):
    return ir.Buffer(name, dtype, tuple(ir.const(s) for s in shape), scope, flat=True)


def gpu(var, extent, kind, axis, body, threads=None):
    ann = (("axis", axis),) + ((("threads", threads),) if threads else ())
    return ir.For(var, i64(0), ir.const(extent), kind, body, ann)


def func(name, params, inputs, outputs, body):
    return ir.LoweredFunc(name, tuple(params), tuple(inputs), tuple(outputs),
                          ir.AttrStmt("kernel", "0", body))


# --------------------------------------------------------------------------- global


def copy_1d(threads=256):
    """out[i] = A[i], one element per thread, guarded for the partial last block."""
    N = ir.Var("N", is_param=True)
    A, out = buf("A", (N,)), buf("out", (N,))
    bx, tx = V("bx"), V("tx")
    i = bx * threads + tx
    body = ir.IfThenElse(i < N, ir.Store(out, (i,), A[i]))
    return func("copy", [N], [A], [out], gpu(bx, (N + threads - 1) // threads, "gpu_block",
                                             "x", gpu(tx, threads, "gpu_thread", "x", body,
                                                      threads)))


@given(n=st.integers(1, 3000))
def test_coalesced_copy_is_100_percent_efficient(n):
    A = np.arange(n, dtype=np.float32)
    out, rep = simulate(copy_1d(), A)
    np.testing.assert_array_equal(out, A)
    for c in (rep.global_load, rep.global_store):
        assert c.requests == -(-n // 32)          # one per warp with an active thread
        assert c.sectors == -(-n // 8)            # 8 floats per 32-byte sector
        assert c.bytes == 4 * n
    if n % 8 == 0:
        assert rep.global_load.efficiency == 1.0 == rep.coalescing_efficiency


def column_sums(threads=32):
    """out[t] = sum_j A[t, j]: thread t walks row t, so a warp reads a column."""
    N, M = ir.Var("N", is_param=True), ir.Var("M", is_param=True)
    A, out = buf("A", (N, M)), buf("out", (N,))
    bx, tx, j = V("bx"), V("tx"), V("j")
    t = bx * threads + tx
    body = ir.IfThenElse(t < N, ir.seq(
        ir.Store(out, (t,), ir.FloatImm(0.0)),
        ir.For(j, i64(0), M, "serial", ir.Store(out, (t,), out[t] + A[t * M + j]))))
    return func("colsum", [N, M], [A], [out], gpu(
        bx, (N + threads - 1) // threads, "gpu_block", "x",
        gpu(tx, threads, "gpu_thread", "x", body, threads)))


def brute_force_sectors(n, m, threads=32):
    """Sectors of the A loads of column_sums, from Python sets."""
    total = 0
    for j in range(m):
        for w0 in range(0, n, 32):
            total += len({((t * m + j) * 4) // 32 for t in range(w0, min(w0 + 32, n))})
    return total


@pytest.mark.parametrize("n,m", [(64, 8), (70, 9), (32, 64), (33, 2), (5, 3), (96, 1)])
def test_strided_column_access(n, m):
    A = np.random.default_rng(0).standard_normal((n, m)).astype(np.float32)
    out, rep = simulate(column_sums(), A)
    np.testing.assert_allclose(out, A.sum(axis=1), rtol=1e-5, atol=1e-5)
    k = rep.kernels[0]
    warps = -(-n // 32)
    # loads: out[t] and A[t, j] in each of the m iterations
    assert k.global_load.requests == 2 * m * warps
    a_sectors = brute_force_sectors(n, m)
    out_sectors = m * -(-n // 8)
    assert k.global_load.sectors == a_sectors + out_sectors
    if m >= 8:
        assert a_sectors == n * m                 # every thread its own sector
        a_eff = (4 * n * m) / (32 * a_sectors)
        assert a_eff == 0.125
        assert k.global_load.efficiency < 0.5


def test_strided_rowsum_from_the_dsl_pipeline():
    """The baseline-mapped DSL row sum reads A by columns: one sector per thread."""
    N, M = pc.sym("N M")

    @pc.tensor_expr
    def rowsum(A: pc.Tensor[(N, M), "float32"]):
        k = pc.reduce_axis(M, "k")
        return pc.compute((N,), lambda i: pc.sum(A[i, k], axis=k), name="S")

    ck = compile_kernel(rowsum, "cuda", {"gpu": "baseline"})
    A = np.random.default_rng(1).standard_normal((64, 16)).astype(np.float32)
    out, rep = simulate(ck, A)
    np.testing.assert_allclose(out, A.sum(axis=1), rtol=1e-5, atol=1e-5)
    ld = rep.global_load
    # per k: S[i] (64 consecutive floats: 8 sectors) and A[i, k] (64 sectors), 2 warps
    assert ld.requests == 16 * 2 * 2
    assert ld.sectors == 16 * (8 + 64)


def test_coalesced_dsl_elementwise_baseline():
    N, M = pc.sym("N M")

    @pc.tensor_expr
    def scale(A: pc.Tensor[(N, M), "float32"]):
        return pc.compute((N, M), lambda i, j: A[i, j] * 3.0, name="B")

    ck = compile_kernel(scale, "cuda", {"gpu": "baseline"})
    A = np.random.default_rng(2).standard_normal((48, 64)).astype(np.float32)
    out, rep = simulate(ck, A)
    np.testing.assert_allclose(out, A * 3.0)
    for c in (rep.global_load, rep.global_store):
        assert c.sectors == 48 * 64 // 8 and c.efficiency == 1.0
        assert c.requests == 48 * 64 // 32


@pytest.mark.parametrize("bx,by,sectors", [(8, 4, 4), (4, 8, 8), (32, 1, 4), (1, 32, 32)])
def test_warps_are_formed_x_fastest(bx, by, sectors):
    """A warp is 32 consecutive linear ids x + y*bx: a (8, 4) block reads 4 rows of 8
    floats (4 sectors), a (4, 8) block 8 rows of 4 floats (8 half-used sectors)."""
    A, out = buf("A", (32, 64)), buf("out", (32, 64))
    tx, ty = V("tx"), V("ty")
    body = ir.Store(out, (ty * 64 + tx,), A[ty * 64 + tx])
    f = func("tile", [], [A], [out], gpu(V("b"), 1, "gpu_block", "x", gpu(
        ty, by, "gpu_thread", "y", gpu(tx, bx, "gpu_thread", "x", body, bx), by)))
    A_ = np.random.default_rng(3).standard_normal((32, 64)).astype(np.float32)
    _, rep = simulate(f, A_, poison=False)
    assert rep.global_load.requests == 1
    assert rep.global_load.sectors == sectors
    assert rep.global_load.efficiency == 128 / (32 * sectors)


# --------------------------------------------------------------------------- shared


def shared_strided(stride, threads=64):
    """S[tx * stride] = A[tx]; barrier; out[tx] = S[tx * stride]; then a broadcast
    read of S[0]."""
    A, out, out0 = buf("A", (threads,)), buf("out", (threads,)), buf("out0", (threads,))
    S = buf("S", (threads * max(stride, 1),), "shared")
    tx = V("tx")
    body = ir.seq(ir.Store(S, (tx * stride,), A[tx]), ir.barrier(),
                  ir.Store(out, (tx,), S[tx * stride]),
                  ir.Store(out0, (tx,), S[i64(0)]))
    return func("banks", [], [A], [out, out0], gpu(V("b"), 1, "gpu_block", "x", ir.Allocate(
        S, gpu(tx, threads, "gpu_thread", "x", body, threads))))


@pytest.mark.parametrize("stride", [1, 2, 3, 4, 8, 16, 32, 33, 64])
def test_shared_bank_conflicts(stride):
    A = np.arange(64, dtype=np.float32)
    (out, out0), rep = simulate(shared_strided(stride), A)
    np.testing.assert_array_equal(out, A)
    np.testing.assert_array_equal(out0, np.zeros(64, np.float32))
    extra = math.gcd(stride, 32) - 1          # lanes sharing a bank, minus one
    k = rep.kernels[0]
    assert k.shared_store.requests == 2 and k.shared_store.bank_conflicts == 2 * extra
    # the strided read and the broadcast read (no conflict: one word)
    assert k.shared_load.requests == 4 and k.shared_load.bank_conflicts == 2 * extra
    assert rep.bank_conflicts == 4 * extra
    if stride == 32:
        assert k.shared_store.bank_conflicts == 62       # 31 per warp request
    if stride == 1:
        assert rep.bank_conflicts == 0


# --------------------------------------------------------------------------- functions


def _brute_sectors(addr, act):
    req = sec = 0
    for a, m in zip(addr, act):
        if m.any():
            req += 1
            sec += len({int(x) // 32 for x, on in zip(a, m) if on})
    return req, sec


def _brute_wavefronts(addr, act, itemsize):
    req = wav = 0
    for a, m in zip(addr, act):
        if not m.any():
            continue
        req += 1
        words = {int(x) // 4 + k for x, on in zip(a, m) if on
                 for k in range(max(1, itemsize // 4))}
        per_bank = {}
        for w in words:
            per_bank.setdefault(w % 32, set()).add(w)
        wav += max(len(s) for s in per_bank.values())
    return req, wav


@given(seed=st.integers(0, 2 ** 20), warps=st.integers(1, 4),
       itemsize=st.sampled_from([1, 2, 4, 8]), spread=st.sampled_from([8, 64, 4096]))
def test_counting_functions_match_brute_force(seed, warps, itemsize, spread):
    rng = np.random.default_rng(seed)
    elems = rng.integers(0, spread, size=(warps, 32))
    addr = elems * itemsize
    act = rng.random((warps, 32)) < rng.choice([0.0, 0.3, 1.0])
    req, sec, nbytes = global_sectors(addr, act, itemsize)
    assert (req, sec) == _brute_sectors(addr, act)
    assert nbytes == int(act.sum()) * itemsize
    req, wav, _ = shared_wavefronts(addr, act, itemsize)
    assert (req, wav) == _brute_wavefronts(addr, act, itemsize)
