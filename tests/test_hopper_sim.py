"""The sm_90a semantics of the CUDA simulator on hand-built IR: TMA box copies (swizzle,
out-of-bounds zero fill), mbarrier phases (arrive, expect_tx, try_wait parity),
``wgmma`` through shared-memory descriptors (K-major and MN-major operands, the
accumulator layout), warp-specialised roles run as coroutines, and the hazard detector
catching deliberately broken pipelines.

The kernel below is one block of one producer and one consumer warpgroup computing
``C[64 x 64] = A[64 x K] B[K x 64]`` through a ring of two stages; its descriptors are
written out by hand (numbers from the PTX ISA's canonical layouts), independently of
the code generator, and the printed source compiles with ``nvcc -arch=sm_90a``.
"""
import os
import subprocess

import numpy as np
import pytest

from polycomp import ir
from polycomp.hw.cuda import ptx_hopper as hp
from polycomp.hw.cuda.codegen import emit_cuda
from polycomp.hw.cuda.sim_hopper import (
    MbarrierError,
    WgmmaError,
    operand_addresses,
    swizzle,
)
from polycomp.hw.cuda.simulator import simulate
from polycomp.lowering.flatten import flatten

i64 = ir.IntImm
KT, N, M = 64, 64, 64


def _buf(name, shape, scope="global", dtype="float16"):
    return ir.Buffer(name, dtype, tuple(ir.const(s) for s in shape), scope)


def _gpu(var, extent, axis, body):
    return ir.For(var, i64(0), i64(extent), "gpu_thread", body,
                  (("axis", axis), ("threads", extent)))


def tile_kernel(k_tiles=2, b_kmajor=False, skip_full_wait=False, skip_empty_wait=False,
                early_release=False, wrong_parity=False, read_acc_early=False,
                partial_wgmma=False, a_rows=M):
    """The two-role kernel; the flags break it in the ways the detector must catch."""
    K = KT * k_tiles
    A = _buf("A", (a_rows, K))
    B = _buf("B", (N, K) if b_kmajor else (K, N))
    C = _buf("C", (M, N), dtype="float32")
    As = _buf("As", (2, M * KT), "shared")
    Bs = _buf("Bs", (2, KT * N), "shared")
    bars = _buf("bars", (4,), "shared", "int64")
    acc = _buf("acc", (N // 2,), "local", "float32")
    tx, ty, kt, e, ks = (ir.Var(n) for n in ("tx", "ty", "kt", "e", "ks"))
    full = lambda s: ir.Load(bars, (s,), "int64")           # noqa: E731
    empty = lambda s: ir.Load(bars, (s + 2,), "int64")      # noqa: E731
    s, ph = kt % 2, (kt // 2) % 2
    nbytes = (M * KT + KT * N) * 2
    copies = [hp.tma_load(ir.Load(As, (s, i64(0)), "float16"), full(s), A,
                          (i64(0), kt * KT), (M, KT), 128)]
    if b_kmajor:      # B [n][k]: rows n, 128-byte rows of k
        copies.append(hp.tma_load(ir.Load(Bs, (s, i64(0)), "float16"), full(s), B,
                                  (i64(0), kt * KT), (N, KT), 128))
    else:             # B [k][n]: one panel of 64 n (128 bytes) x 64 k rows
        copies.append(hp.tma_load(ir.Load(Bs, (s, i64(0)), "float16"), full(s), B,
                                  (kt * KT, i64(0)), (KT, N), 128))
    produce = [] if skip_empty_wait else [hp.mbarrier_wait(empty(s), 1 - ph)]
    produce += [hp.mbarrier_arrive_tx(full(s), nbytes), *copies]
    producer = ir.IfThenElse(ir.Binary("==", tx, i64(0), "bool"),
                             ir.For(kt, i64(0), i64(k_tiles), "serial", ir.seq(*produce)))
    # K-major A: rows of 128 B, 8-row groups 1024 B apart; K step = 32 B
    da = hp.wgmma_desc(ir.Load(As, (s, ks * 16), "float16"), 16, 1024, 128)
    if b_kmajor:
        db = hp.wgmma_desc(ir.Load(Bs, (s, ks * 16), "float16"), 16, 1024, 128)
    else:             # N-major: LBO = the panel (64 rows x 128 B), SBO = 8 rows; K step 2 KiB
        db = hp.wgmma_desc(ir.Load(Bs, (s, ks * 16 * N), "float16"), KT * 128, 1024, 128)
    mma = hp.wgmma(ir.Load(acc, (i64(0),), "float32"), da, db, N, "float16", 0,
                   0 if b_kmajor else 1, i64(1))
    if partial_wgmma:
        mma = ir.IfThenElse(tx < 64, mma)
    step = [] if skip_full_wait else \
        [hp.mbarrier_wait(full(s), (1 - ph) if wrong_parity else ph)]
    step += [hp.wgmma_fence(), ir.For(ks, i64(0), i64(KT // 16), "unrolled", mma),
             hp.wgmma_commit()]
    if early_release:
        step += [hp.mbarrier_arrive(empty(s))]
    else:
        step += [hp.wgmma_wait(0), hp.mbarrier_arrive(empty(s))]
    lane = tx % 32
    row = (tx // 32) * 16 + lane // 4 + ((e // 2) % 2) * 8
    col = (e // 4) * 8 + (lane % 4) * 2 + e % 2
    store = ir.For(e, i64(0), i64(N // 2), "unrolled",
                   ir.Store(C, (row, col), ir.Load(acc, (e,), "float32")))
    consumer = ir.seq(
        ir.For(e, i64(0), i64(N // 2), "unrolled", ir.Store(acc, (e,), ir.FloatImm(0.0))),
        ir.For(kt, i64(0), i64(k_tiles), "serial", ir.seq(*step)),
        *([store] if read_acc_early else []),
        hp.wgmma_wait(0), *([] if read_acc_early else [store]))
    init = ir.IfThenElse(ir.Binary("==", tx + ty * 128, i64(0), "bool"), ir.seq(
        hp.mbarrier_init(full(i64(0)), 1), hp.mbarrier_init(full(i64(1)), 1),
        hp.mbarrier_init(empty(i64(0)), 128), hp.mbarrier_init(empty(i64(1)), 128),
        hp.fence_mbarrier_init()))
    roles = ir.AttrStmt("warp_roles", "0", ir.seq(
        ir.IfThenElse(ir.Binary("==", ty, i64(0), "bool"), producer),
        ir.IfThenElse(ir.Binary("==", ty, i64(1), "bool"), consumer)))
    body = ir.Allocate(acc, ir.seq(init, ir.barrier(), roles))
    body = _gpu(tx, 128, "x", _gpu(ty, 2, "y", body))
    for b in (bars, Bs, As):
        body = ir.Allocate(b, body)
    body = ir.AttrStmt("kernel", "0", ir.For(ir.Var("bx"), i64(0), i64(1), "gpu_block", body,
                                             (("axis", "x"),)))
    return ir.LoweredFunc("tile_mma", (), (A, B), (C,), body)


def _inputs(rng, k_tiles=2, b_kmajor=False, a_rows=M):
    K = KT * k_tiles
    a = rng.standard_normal((a_rows, K)).astype(np.float16)
    b = rng.standard_normal((N, K) if b_kmajor else (K, N)).astype(np.float16)
    bmat = b.astype(np.float64).T if b_kmajor else b.astype(np.float64)
    ap = np.zeros((M, K))
    ap[:min(a_rows, M)] = a[:M]
    return a, b, ap @ bmat


@pytest.mark.parametrize("b_kmajor", [False, True])
@pytest.mark.parametrize("k_tiles", [1, 3])
def test_tma_mbarrier_wgmma_tile(b_kmajor, k_tiles):
    rng = np.random.default_rng(k_tiles)
    a, b, ref = _inputs(rng, k_tiles, b_kmajor)
    c, rep = simulate(tile_kernel(k_tiles, b_kmajor), a, b)
    assert np.allclose(c, ref, rtol=1e-5, atol=1e-4)
    assert rep.ok and rep.flops == 2 * M * N * KT * k_tiles


def test_tma_fills_out_of_bounds_with_zeros():
    """A has 40 rows: the 64-row box reads rows 40..63 as zeros."""
    rng = np.random.default_rng(5)
    a, b, ref = _inputs(rng, 2, False, a_rows=40)
    c, rep = simulate(tile_kernel(2, a_rows=40), a, b)
    assert np.allclose(c, ref, rtol=1e-5, atol=1e-4) and np.all(c[40:] == 0)


def test_swizzle_and_descriptor_layouts():
    # 128-byte swizzle: chunk bits 4-6 XOR row bits 7-9 (an involution on a 1 KiB block)
    a = np.arange(1024)
    assert sorted(swizzle(a, 128)) == list(range(1024))
    assert swizzle(128 * 3 + 16 * 1, 128) == 128 * 3 + 16 * (1 ^ 3)
    assert swizzle(64 * 2 + 16, 64) == 64 * 2 + 16 * (1 ^ 1)     # bits 4-5 ^ 7-8
    # K-major, no swizzle: 8-row core matrices of 16 B, the second K chunk at LBO
    desc = (0 >> 4) | ((256 >> 4) << 16) | ((512 >> 4) << 32)
    addr = operand_addresses(desc, 16, 16, 2, False)
    assert addr[0, 0] == 0 and addr[1, 0] == 16 and addr[0, 8] == 256 and addr[8, 0] == 512
    # MN-major, 128-byte swizzle: 64 contiguous M elements per 128-byte row, K rows 128 B
    desc = ((8192 >> 4) << 16) | ((1024 >> 4) << 32) | (1 << 62)
    addr = operand_addresses(desc, 128, 16, 2, True)
    assert addr[0, 0] == 0 and addr[64, 0] == 8192 and addr[0, 8] == 1024
    assert addr[0, 1] == swizzle(128, 128) == 144 and addr[1, 1] == swizzle(128 + 2, 128)


def test_consumer_reading_before_its_barrier_is_caught():
    rng = np.random.default_rng(0)
    a, b, _ = _inputs(rng)
    with pytest.raises(MbarrierError, match="before that thread observed the completion"):
        simulate(tile_kernel(skip_full_wait=True), a, b)


def test_producer_running_ahead_is_caught():
    """No wait on the empty barrier: the third tile overwrites stage 0 unread."""
    rng = np.random.default_rng(0)
    a, b, _ = _inputs(rng, 3)
    with pytest.raises(MbarrierError, match="never read"):
        simulate(tile_kernel(3, skip_empty_wait=True), a, b)


def test_stage_released_before_wgmma_completed_is_caught():
    """The consumer arrives on the empty barrier before wgmma.wait_group: the producer's
    next copy into the stage races with the wgmma still reading it."""
    rng = np.random.default_rng(0)
    a, b, _ = _inputs(rng, 3)
    with pytest.raises(WgmmaError, match="issued wgmma that reads it has not completed"):
        simulate(tile_kernel(3, early_release=True), a, b)


def test_wrong_parity_deadlocks():
    rng = np.random.default_rng(0)
    a, b, _ = _inputs(rng)
    with pytest.raises(MbarrierError, match="deadlock"):
        simulate(tile_kernel(wrong_parity=True), a, b)


def test_accumulators_read_before_wait_group():
    rng = np.random.default_rng(0)
    a, b, _ = _inputs(rng)
    with pytest.raises(WgmmaError, match="accumulator"):
        simulate(tile_kernel(read_acc_early=True, early_release=True), a, b)


def test_partial_warpgroup_wgmma():
    rng = np.random.default_rng(0)
    a, b, _ = _inputs(rng)
    with pytest.raises(WgmmaError, match="warpgroup"):
        simulate(tile_kernel(partial_wgmma=True), a, b)


def test_findings_collected_when_not_strict():
    rng = np.random.default_rng(0)
    a, b, _ = _inputs(rng)
    _, rep = simulate(tile_kernel(skip_full_wait=True), a, b, strict=False)
    assert not rep.ok and {f.kind for f in rep.findings} == {"mbarrier"}


@pytest.mark.parametrize("b_kmajor", [False, True])
def test_printed_tile_kernel_compiles_for_sm90a(b_kmajor, tmp_path):
    from polycomp.hw.cuda.sass import find_tool, sass_opcodes
    src = emit_cuda(flatten(tile_kernel(2, b_kmajor)))
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16" in src
    assert "cuTensorMapEncodeTiled" in src and "__grid_constant__ CUtensorMap" in src
    cu = tmp_path / "k.cu"
    cu.write_text(src)
    out = tmp_path / "k.cubin"
    r = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "-o", str(out), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    if find_tool("cuobjdump") is None:
        pytest.skip("hardware tools: cuobjdump absent")
    ops = sass_opcodes(out.read_bytes(), os.fspath(tmp_path))
    assert any(o.startswith("HGMMA.64x64x16.F32") or o.startswith("HGMMA.64") for o in ops)
    assert any(o.startswith("UTMALDG") for o in ops)
    assert any(o.startswith("SYNCS") for o in ops)
