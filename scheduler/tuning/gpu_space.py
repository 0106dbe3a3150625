"""The Tensor Core GEMM search space of a CUDA target and its analytic ranking
(issue #12 items 1-2; no GPU here: points are ranked by the model, not measured).

A point is ``<block BM x BN> <warp WM x WN> <mma m x n x k> K-tile, stages, swizzle`` (the
fields of the ``tc_tile`` option).  Generated from the target's data, valid by
construction:

* the mma shape is the target's matrix unit (``mma.sync`` m16n8k16 on sm_80/sm_90);
* warp tiles are multiples of 16 (the option's rule; a multiple of the mma ``m`` and of
  two ``n`` steps) from 16 to 128, with the accumulators ``WM*WN/32`` per thread plus the
  A/B fragments of one k step and :data:`REG_OVERHEAD` within
  ``registers_per_thread``;
* block tiles are multiples of the warp tile, with ``32 * warps <= max_threads_per_block``
  and at most :data:`MAX_WARPS` warps;
* ``k`` in 32, 64 and ``stages`` in 1..4 with the staged ``(BM + BN) * k`` f16 tiles within
  the opt-in shared memory (``shared_memory_optin``, else the default per-block limit).

The model (:func:`predict_seconds`) is TSCompiler's wave model: one block's time is the
larger of its mma time and its global-traffic time (the pipeline hides one behind the
other, less so with one stage), and the kernel takes ``T_block * ceil(blocks / (SMs *
blocks_per_SM))`` with ``blocks_per_SM`` limited by threads, shared memory and registers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

#: registers per thread besides accumulators and fragments (addresses, indices, loop state)
REG_OVERHEAD = 40
#: warps per block considered (more gives no benefit on mma.sync pipelines)
MAX_WARPS = 8
#: streaming multiprocessors, dense f16 mma throughput (FLOP/s per SM) and DRAM bandwidth
#: (B/s) per architecture: A100 (sm_80) and H100 SXM (sm_90)
SM_DATA = {80: (108, 312e12 / 108, 1.9e12), 90: (132, 989e12 / 132, 3.3e12)}
MAX_BLOCKS_PER_SM = 32
REGISTERS_PER_SM = 65536
SHARED_PER_SM = {80: 167936, 90: 233472}


@dataclass(frozen=True)
class GpuPoint:
    """One Tensor Core configuration (the ``tc_tile`` option's fields)."""
    block: tuple[int, int]
    warp: tuple[int, int]
    k: int
    stages: int
    swizzle: bool = True

    @property
    def warps(self) -> int:
        return (self.block[0] // self.warp[0]) * (self.block[1] // self.warp[1])

    def shared_bytes(self, itemsize: int = 2) -> int:
        return self.stages * (self.block[0] + self.block[1]) * self.k * itemsize

    def registers(self, mma: tuple[int, int, int]) -> int:
        m, n, kk = mma
        acc = self.warp[0] * self.warp[1] // 32
        frag_a = (self.warp[0] // m) * (m * kk // 2 // 32)      # f16 pairs per thread
        frag_b = (self.warp[1] // n) * (n * kk // 2 // 32)
        return acc + frag_a + frag_b + REG_OVERHEAD

    def options(self) -> dict:
        return {"tc_tile": {"block": self.block, "warp": self.warp, "k": self.k,
                            "stages": self.stages, "swizzle": self.swizzle}}

    def label(self) -> str:
        return (f"b{self.block[0]}x{self.block[1]}-w{self.warp[0]}x{self.warp[1]}"
                f"-k{self.k}-s{self.stages}")

    def knobs(self) -> tuple[tuple[str, object], ...]:
        return (("block", f"{self.block[0]}x{self.block[1]}"),
                ("warp", f"{self.warp[0]}x{self.warp[1]}"), ("k", self.k),
                ("stages", self.stages), ("swizzle", self.swizzle))


def mma_shape(target) -> tuple[int, int, int]:
    for u in target.units:
        if u.kind == "matrix":
            return tuple(u.shape)         # type: ignore[return-value]
    raise ValueError(f"target {target.name} has no matrix unit")


def gpu_space(target) -> list[GpuPoint]:
    """Every valid Tensor Core point of ``target`` (see the module docstring)."""
    cu = target.cuda
    mma = mma_shape(target)
    smem = cu.shared_memory_optin or target.shared_memory_per_block
    warps = [(wm, wn) for wm in (16, 32, 64, 128) for wn in (16, 32, 64, 128)
             if GpuPoint((wm, wn), (wm, wn), 32, 1).registers(mma) <= cu.registers_per_thread]
    out = []
    for wm, wn in warps:
        for fm in (1, 2, 4, 8):
            for fn in (1, 2, 4, 8):
                nw = fm * fn
                if nw > MAX_WARPS or 32 * nw > cu.max_threads_per_block:
                    continue
                for k in (32, 64):
                    for st in (1, 2, 3, 4):
                        p = GpuPoint((wm * fm, wn * fn), (wm, wn), k, st)
                        if p.shared_bytes() <= smem:
                            out.append(p)
    return out


def blocks_per_sm(p: GpuPoint, target) -> int:
    sm = target.cuda.sm
    by_threads = 2048 // (32 * p.warps)
    by_smem = SHARED_PER_SM.get(sm, 167936) // max(1, p.shared_bytes())
    by_regs = REGISTERS_PER_SM // (p.registers(mma_shape(target)) * 32 * p.warps)
    return max(0, min(MAX_BLOCKS_PER_SM, by_threads, by_smem, by_regs))


def predict_seconds(p: GpuPoint, target, M: int, N: int, K: int) -> float:
    """The wave model's time of ``(M, K) x (K, N)`` f16 with ``p`` (padding included)."""
    sms, flops_sm, bw = SM_DATA.get(target.cuda.sm, SM_DATA[80])
    per_sm = max(1, blocks_per_sm(p, target))
    bm, bn = p.block
    blocks = math.ceil(M / bm) * math.ceil(N / bn)
    kk = math.ceil(K / p.k) * p.k
    resident = min(blocks, sms * per_sm)          # blocks running at once
    share = math.ceil(resident / sms)             # of them on one SM
    # mma time of one block sharing its SM with `share - 1` others; fewer than 4 warps
    # per SM leave the tensor pipes idle part of the time
    busy = min(1.0, p.warps * share / 4)
    t_mma = 2 * bm * bn * kk / (flops_sm / share) / busy
    # its global traffic, the bandwidth shared by the resident blocks
    t_mem = (bm + bn) * kk * 2 / (bw / resident)
    overlap = {1: 0.0, 2: 0.7, 3: 0.9, 4: 0.95}[p.stages]
    t_block = max(t_mma, t_mem) + (1 - overlap) * min(t_mma, t_mem)
    waves = math.ceil(blocks / (sms * per_sm))
    return t_block * waves


def rank(target, M: int, N: int, K: int, top: int | None = None) -> list[tuple[float, GpuPoint]]:
    """The space sorted by predicted time (ties: fewer warps, smaller tiles)."""
    scored = sorted(((predict_seconds(p, target, M, N, K), p) for p in gpu_space(target)),
                    key=lambda t: (t[0], t[1].warps, t[1].block, t[1].k, t[1].stages))
    return scored[:top] if top else scored
