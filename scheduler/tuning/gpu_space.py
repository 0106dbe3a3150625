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

On a target with a warpgroup matrix unit (``wgmma``, ``cuda-sm90a``) the space is the
``wgmma`` plans' (:func:`hopper_space`; :mod:`polycomp.scheduler.tensorcore.hopper`):
block tiles ``BM`` in 64, 128, 256 and ``BN`` the unit's N values that are multiples of
the 64-element TMA panel, consumer warpgroup tiles of 64 (128 for ``BM`` = 256) rows and
the block's N, K tiles of one 64- or 128-byte swizzle span, 2..8 stages within the
opt-in shared memory, a persistent grid or one block per tile, the accumulators within
the registers ``setmaxnreg`` gives a consumer.

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
    """One Tensor Core configuration (the ``tc_tile`` option's fields); ``persistent``
    is set (True/False) for the sm_90a ``wgmma`` plans only (``warp`` then is the
    consumer warpgroup tile)."""
    block: tuple[int, int]
    warp: tuple[int, int]
    k: int
    stages: int
    swizzle: bool = True
    persistent: bool | None = None

    @property
    def wgmma(self) -> bool:
        return self.persistent is not None

    @property
    def consumers(self) -> int:
        return (self.block[0] // self.warp[0]) * (self.block[1] // self.warp[1])

    @property
    def warps(self) -> int:
        """Warps per block (a wgmma plan: its consumer warpgroups and the producer's)."""
        if self.wgmma:
            return 4 * (1 + self.consumers)
        return self.consumers

    def shared_bytes(self, itemsize: int = 2) -> int:
        return self.stages * (self.block[0] + self.block[1]) * self.k * itemsize

    def registers(self, mma: tuple[int, int, int]) -> int:
        if self.wgmma:      # accumulators of a consumer thread (a warpgroup of 128)
            return self.warp[0] * self.warp[1] // 128 + WGMMA_OVERHEAD
        m, n, kk = mma
        acc = self.warp[0] * self.warp[1] // 32
        frag_a = (self.warp[0] // m) * (m * kk // 2 // 32)      # f16 pairs per thread
        frag_b = (self.warp[1] // n) * (n * kk // 2 // 32)
        return acc + frag_a + frag_b + REG_OVERHEAD

    def options(self) -> dict:
        tc = {"block": self.block, "warp": self.warp, "k": self.k, "stages": self.stages,
              "swizzle": self.swizzle}
        if self.wgmma:
            tc["persistent"] = self.persistent
        return {"tc_tile": tc}

    def label(self) -> str:
        tail = ("-persistent" if self.persistent else "-tiles") if self.wgmma else ""
        return (f"b{self.block[0]}x{self.block[1]}-w{self.warp[0]}x{self.warp[1]}"
                f"-k{self.k}-s{self.stages}{tail}")

    def knobs(self) -> tuple[tuple[str, object], ...]:
        out = (("block", f"{self.block[0]}x{self.block[1]}"),
               ("warp", f"{self.warp[0]}x{self.warp[1]}"), ("k", self.k),
               ("stages", self.stages), ("swizzle", self.swizzle))
        return out + ((("persistent", self.persistent),) if self.wgmma else ())


def mma_shape(target) -> tuple[int, int, int]:
    for u in target.units:
        if u.kind == "matrix":
            return tuple(u.shape)         # type: ignore[return-value]
    raise ValueError(f"target {target.name} has no matrix unit")


#: registers of a wgmma consumer thread besides its accumulators (as the tiling pass
#: counts them, :mod:`polycomp.scheduler.tensorcore.hopper`)
WGMMA_OVERHEAD = 64
#: the shared bytes a wgmma block needs besides its stages (barriers, alignment)
WGMMA_RESERVED = 2048
#: the cost of one K tile's mbarrier hand-off (full wait, wgmma issue, empty arrive)
WGMMA_STAGE_SECONDS = 50e-9


def _wgmma_unit(target):
    for u in target.units:
        if u.kind == "matrix" and u.threads == 128:
            return u
    return None


def hopper_space(target) -> list[GpuPoint]:
    """The ``wgmma`` points of an sm_90a target (see the module docstring)."""
    cu = target.cuda
    unit = _wgmma_unit(target)
    rule = next((c for c in target.memory.copies if c.tensor is not None), None)
    spans = [sp for sp in (rule.tensor.swizzles if rule else (128,)) if sp >= 64]
    lo, hi, step = cu.register_realloc or (24, 256, 8)
    smem = (cu.shared_memory_optin or target.shared_memory_per_block) - WGMMA_RESERVED
    out = []
    for bm in (64, 128, 256):
        wm = 128 if bm == 256 else 64
        consumers = bm // wm
        per = (cu.registers_per_sm // 128 - 80) // consumers
        regs = min(hi, cu.registers_per_thread // step * step, per // step * step)
        for bn in (n for n in unit.n_values if n % 64 == 0):
            p0 = GpuPoint((bm, bn), (wm, bn), 64, 2, True, True)
            if p0.registers(unit.shape) > regs:
                continue
            for span in spans:
                k = span // 2
                for st in range(2, 9):
                    for persistent in (True, False):
                        p = GpuPoint((bm, bn), (wm, bn), k, st, True, persistent)
                        if p.shared_bytes() <= smem:
                            out.append(p)
    return out


def gpu_space(target) -> list[GpuPoint]:
    """Every valid Tensor Core point of ``target`` (see the module docstring)."""
    if _wgmma_unit(target) is not None:
        return hopper_space(target)
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
    if p.wgmma:      # setmaxnreg needs the register cap of one block per SM
        return 1
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
    overlap = {1: 0.0, 2: 0.7, 3: 0.9, 4: 0.95}.get(p.stages, 0.97)
    t_block = max(t_mma, t_mem) + (1 - overlap) * min(t_mma, t_mem)
    if p.wgmma:      # each K tile's mbarrier hand-off between producer and consumers
        t_block += (kk // p.k) * WGMMA_STAGE_SECONDS
    if p.wgmma and p.persistent:     # tiles dealt over resident blocks: no idle tail waves
        # beyond the last partial round; the producer keeps copying across tiles
        return t_block * math.ceil(blocks / (sms * per_sm))
    waves = math.ceil(blocks / (sms * per_sm))
    return t_block * waves


def rank(target, M: int, N: int, K: int, top: int | None = None) -> list[tuple[float, GpuPoint]]:
    """The space sorted by predicted time (ties: fewer warps, smaller tiles)."""
    scored = sorted(((predict_seconds(p, target, M, N, K), p) for p in gpu_space(target)),
                    key=lambda t: (t[0], t[1].warps, t[1].block, t[1].k, t[1].stages))
    return scored[:top] if top else scored
