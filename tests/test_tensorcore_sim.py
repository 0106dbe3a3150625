"""The simulator's Tensor Core and cp.async intrinsics on hand-written CUDA-level IR:
one warp copies a 16x16 A tile and a 16x8 B tile into shared memory with cp.async,
loads the fragments with ldmatrix (x4; x2.trans for B) and runs one
mma.m16n8k16; the result (stored from the accumulator fragment, PTX layout) must
equal A @ B.  Also: a read of a shared tile before its cp.async group completed is
reported, misaligned cp.async is rejected, a partial warp executing mma is a warp-sync
finding.  Every kernel is printed and compiled with nvcc for sm_80."""
import subprocess

import numpy as np
import pytest

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.hw.cuda import ptx
from polycomp.hw.cuda.codegen import emit_cuda
from polycomp.hw.cuda.sim_tensorcore import AsyncCopyHazardError
from polycomp.hw.cuda.simulator import SimulatorError, WarpSyncError, simulate

i64 = ir.IntImm


def buf(name, shape, scope="global", dtype="float32"):
    return ir.Buffer(name, dtype, tuple(ir.const(s) for s in shape), scope, flat=True)


def one_warp_mma(dtype="float16", wait=True, lanes=32):
    """C (16x8, f32) = A (16x16) @ B (16x8) with cp.async + ldmatrix + mma."""
    A, B = buf("A", (256,), dtype=dtype), buf("B", (128,), dtype=dtype)
    C = buf("C", (128,))
    As, Bs = buf("As", (256,), "shared", dtype), buf("Bs", (128,), "shared", dtype)
    af, bf = buf("af", (4,), "local", "int32"), buf("bf", (2,), "local", "int32")
    acc = buf("acc", (4,), "local", "float32")
    tx = ir.Var("tx")
    L = lambda b, i: ir.Load(b, (ir.const(i),), b.dtype)  # noqa: E731
    copies = []
    # A: 32 chunks of 8 halves -> one per lane; B: 16 chunks -> lanes 0..15
    copies.append(ptx.cp_async(L(As, tx * 8), L(A, tx * 8), ir.IntImm(16)))
    copies.append(ir.IfThenElse(tx < 16, ptx.cp_async(L(Bs, tx * 8), L(B, tx * 8),
                                                       ir.IntImm(16))))
    body = copies + [ptx.cp_async_commit()]
    if wait:
        body += [ptx.cp_async_wait(0), ir.barrier()]
    # A fragment: lane l gives row (l % 16), col 8 * (l // 16)
    row, col = tx % 16, (tx // 16) * 8
    body.append(ptx.ldmatrix(L(af, 0), L(As, row * 16 + col), 4, False))
    # B (16x8, row-major k x n): trans; lanes 0..15 give rows k = l
    body.append(ptx.ldmatrix(L(bf, 0), L(Bs, (tx % 16) * 8), 2, True))
    for r in range(4):
        body.append(ir.Store(acc, (i64(r),), ir.FloatImm(0.0)))
    body.append(ptx.mma(L(acc, 0), L(af, 0), L(bf, 0), dtype))
    g, t = tx // 4, tx % 4
    for r in range(4):
        body.append(ir.Store(C, ((g + 8 * (r // 2)) * 8 + 2 * t + r % 2,), L(acc, r)))
    inner = ir.Allocate(af, ir.Allocate(bf, ir.Allocate(acc, ir.seq(*body))))
    threads = ir.For(tx, i64(0), i64(lanes), "gpu_thread", inner,
                     (("axis", "x"), ("threads", lanes)))
    k = ir.For(ir.Var("bx"), i64(0), i64(1), "gpu_block",
               ir.Allocate(As, ir.Allocate(Bs, threads)), (("axis", "x"),))
    return ir.LoweredFunc(f"mma_{dtype}", (), (A, B), (C,), ir.AttrStmt("kernel", "0", k))


def nvcc(func, tmp_path, sm=80):
    cu = tmp_path / f"{func.name}.cu"
    cu.write_text(emit_cuda(func))
    r = subprocess.run(["nvcc", f"-arch=sm_{sm}", "-cubin", "-o", str(tmp_path / "k.cubin"),
                        str(cu)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_one_warp_mma_matches_numpy(dtype, tmp_path):
    rng = np.random.default_rng(0)
    nd = dt.to_numpy(dtype)
    a = rng.standard_normal((16, 16)).astype(nd)
    b = rng.standard_normal((16, 8)).astype(nd)
    f = one_warp_mma(dtype)
    c, rep = simulate(f, a.reshape(-1), b.reshape(-1))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.reshape(16, 8), ref, rtol=1e-5, atol=1e-5)
    assert rep.ok
    k = rep.kernels[0]
    assert k.flops >= 2 * 16 * 8 * 16
    # the cp.async loads: 48 lanes x 16 bytes, contiguous: 100 % sector efficiency
    assert k.global_load.bytes == 768 and k.global_load.efficiency == 1.0
    nvcc(f, tmp_path)


def test_read_before_wait_is_reported():
    f = one_warp_mma(wait=False)
    a = np.ones(256, np.float16)
    b = np.ones(128, np.float16)
    with pytest.raises(AsyncCopyHazardError, match="has not completed"):
        simulate(f, a, b)
    _, rep = simulate(f, a, b, strict=False)
    assert rep.finding_counts.get("async-copy", 0) >= 1


def test_partial_warp_mma_is_a_warp_sync_finding():
    f = one_warp_mma(lanes=16)
    with pytest.raises((WarpSyncError, SimulatorError)):
        simulate(f, np.ones(256, np.float16), np.ones(128, np.float16))


def test_misaligned_cp_async_rejected():
    A, As = buf("A", (64,), dtype="float16"), buf("As", (64,), "shared", "float16")
    tx = ir.Var("tx")
    body = ir.seq(ptx.cp_async(ir.Load(As, (tx * 8,), "float16"),
                               ir.Load(A, (tx * 8 + 1,), "float16"), ir.IntImm(16)),
                  ptx.cp_async_commit(), ptx.cp_async_wait(0))
    C = buf("C", (1,))
    threads = ir.For(tx, i64(0), i64(4), "gpu_thread", body, (("axis", "x"), ("threads", 4)))
    k = ir.For(ir.Var("bx"), i64(0), i64(1), "gpu_block", ir.Allocate(As, threads),
               (("axis", "x"),))
    f = ir.LoweredFunc("mis", (), (A,), (C,), ir.AttrStmt("kernel", "0", k))
    with pytest.raises(SimulatorError, match="16-byte aligned"):
        simulate(f, np.ones(64, np.float16))


def test_plain_load_of_in_flight_tile_is_reported():
    """An ordinary shared load (not ldmatrix) of an element whose cp.async group has not
    been waited for is reported too (the simulator's shared-access hook)."""
    A, As = buf("A", (256,), dtype="float16"), buf("As", (256,), "shared", "float16")
    C = buf("C", (32,))
    tx = ir.Var("tx")
    body = ir.seq(ptx.cp_async(ir.Load(As, (tx * 8,), "float16"),
                               ir.Load(A, (tx * 8,), "float16"), ir.IntImm(16)),
                  ptx.cp_async_commit(),
                  ir.Store(C, (tx,), ir.Cast(ir.Load(As, (tx * 8,), "float16"), "float32")),
                  ptx.cp_async_wait(0))
    threads = ir.For(tx, i64(0), i64(32), "gpu_thread", body, (("axis", "x"), ("threads", 32)))
    k = ir.For(ir.Var("bx"), i64(0), i64(1), "gpu_block", ir.Allocate(As, threads),
               (("axis", "x"),))
    f = ir.LoweredFunc("early", (), (A,), (C,), ir.AttrStmt("kernel", "0", k))
    with pytest.raises(AsyncCopyHazardError):
        simulate(f, np.ones(256, np.float16))
