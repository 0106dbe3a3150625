"""The fused chain on Tensor Cores (targets ``cuda``, ``cuda-sm90``): float16 / bfloat16
``X, Y, Z`` with float32 accumulation, FlashAttention-2 style: its tiles and the traffic
it predicts.  The kernel is the chain's program tree (:mod:`.cuda_tree`) expanded by the
CUDA IR passes into the micro-kernels of :mod:`polycomp.hw.cuda.chain_tc` (``mma.sync``
m16n8k16, ``ldmatrix``, online softmax on the fragments, a ``cp.async`` ring;
docs/fusion.md, "Tensor Core chains").

One thread block per ``(n-block, m-block, batch)``, ``TM / 16`` warps (warp ``w`` owns
rows ``16w .. 16w+15``); the ring streams the items ``(l tile j, k chunk c)``: ``KC``
columns of ``Y`` (and of ``X`` when ``K > KC``) and, with the first chunk, the ``Z`` tile,
through ``S`` stages of shared buffers whose rows are padded by :data:`PAD` elements.

Tiles (:func:`tc_tiles`): Chimera's closed form on the shared level counted in 16-bit
elements with ``alpha = 16`` (the mma's ``k``), rounded down to multiples of 16 and
shrunk until the ring fits the static 48 KiB and the accumulators ``TL/2 + TN/2`` stay at
most :data:`MAX_ACC` floats per thread; ``KC = roundup16(K)`` for a constant ``K <= 128``
(X resident), else 64; ``TN = roundup16(N)`` for a constant ``N <= 80``, else 64; three
stages when they fit, else two.  Option ``chain_tiles=(TM, TL)`` overrides ``TM, TL``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from polycomp.scheduler.chain.movement_model import plan_levels
from polycomp.scheduler.chain.plan import BIG, ChainPlan

__all__ = ["TcChainTiles", "tc_tiles", "predicted_bytes", "ALPHA", "MAX_ACC", "PAD"]

ALPHA = 16                    # the mma's k: Chimera's Tensor Core micro-kernel minimum
PAD = 8                       # elements of padding per shared row (16 bytes)
MAX_ACC = 48                  # accumulator floats per thread (Sacc TL/2 + Oacc TN/2; 56 spilled
                              # 8 B on sm_90 at ViT-B)
#: With a resident X (constant K <= 128), N <= 64 and L >= 64, where the rule below
#: picks TL < 64: TM = 128, TL = 64 in a 2-stage ring of dynamic shared memory (up to
#: TL/2 + TN/2 = 64 accumulators, 55-88 KiB).  On an H200 that was 1.10-1.18x faster
#: than the 48-accumulator, 48 KiB choice (TL = 32, 3 stages) at SETR and at s = 2048,
#: 4096 (d = 64, 128), with no spills on sm_80/90; TL = 128 was slower (0.73-0.84x).
WIDE_ACC = 64
WIDE_SHARED = 96 * 1024
KC_DEFAULT = 64


@dataclass(frozen=True)
class TcChainTiles:
    """The Tensor Core kernel's tiles and where they came from."""
    tm: int
    tl: int
    kc: int                    # k chunk (the whole padded K when nk == 1)
    tn: int
    stages: int
    dtype: str                 # float16 / bfloat16
    y_rows: bool               # Y stored [.., l, k]
    model_tm: int              # the closed form's T_M, T_L (16-bit elements, alpha 16)
    model_tl: int
    x_resident: bool = False   # K is a constant <= KC: one X buffer, never re-streamed

    @property
    def threads(self) -> int:
        return 2 * self.tm     # one warp per 16 rows

    @property
    def xs(self) -> int:       # elements of one stage of each ring buffer
        return self.tm * (self.kc + PAD)

    @property
    def ys(self) -> int:
        return self.tl * (self.kc + PAD) if self.y_rows else self.kc * (self.tl + PAD)

    @property
    def zs(self) -> int:
        return self.tl * (self.tn + PAD)

    @property
    def x_stages(self) -> int:
        return 1 if self.x_resident else self.stages

    @property
    def shared_bytes(self) -> int:
        return 2 * (self.x_stages * self.xs + self.stages * (self.ys + self.zs))

    @property
    def acc_floats(self) -> int:
        return self.tl // 2 + self.tn // 2


def _round16(v: int) -> int:
    return -(-v // 16) * 16


def tc_tiles(plan: ChainPlan, shared_bytes: int,
             override: tuple[int, ...] | None = None) -> TcChainTiles:
    """See the module docstring; ``override`` is option ``chain_tiles``."""
    m = plan.match
    d = plan.dims
    # the model counts 4-byte elements: twice the bytes is the capacity in 16-bit ones
    lp = plan_levels(d, [("shared", 2 * shared_bytes)], ALPHA, m.has_softmax)[0]
    mtm, mtl = lp.tiles.m, lp.tiles.l
    resident = d.k != BIG and d.k <= 128
    kc = _round16(d.k) if resident else KC_DEFAULT
    tn = _round16(d.n) if d.n != BIG and d.n <= 80 else 64
    y_rows = bool(m.y_transposed)

    def make(tm, tl, s):
        return TcChainTiles(tm, tl, kc, tn, s, m.dtype, y_rows, mtm, mtl, resident)
    if override is not None:
        t = make(override[0], override[1], 2)
        t3 = make(override[0], override[1], 3)
        return t3 if t3.shared_bytes <= shared_bytes else t
    max_acc, budget = MAX_ACC, shared_bytes
    tm = max(16, min(128, mtm // 16 * 16))
    tl = max(16, min(128, mtl // 16 * 16))
    while True:
        t = make(tm, tl, 2)
        if t.acc_floats > max_acc and tl > 16:      # registers: only TL counts
            tl -= 16
        elif t.shared_bytes > budget and (tm > 16 or tl > 16):
            if tl >= tm and tl > 16 or tm == 16:
                tl -= 16
            else:
                tm -= 16
        else:
            break
    t3 = make(tm, tl, 3)
    chosen = t3 if t3.shared_bytes <= budget else make(tm, tl, 2)
    wide = make(128, 64, 2)      # the configuration timed faster on an H200 (WIDE_ACC)
    if (resident and tn <= 64 and "l" not in plan.symbolic and d.l >= 64
            and ("m" in plan.symbolic or d.m >= 128) and chosen.tl < 64
            and wide.acc_floats <= WIDE_ACC and wide.shared_bytes <= WIDE_SHARED):
        return wide
    return chosen


def predicted_bytes(tiles: TcChainTiles, sizes: dict[str, int]) -> int:
    """Global bytes the kernel reads and writes at the extents ``sizes`` (``batch, m, n,
    k, l``; 2-byte inputs, 4-byte output): per ``(n-block, m-block)`` block X once (once
    per ``l`` tile when ``K > KC``), all of Y, its columns of Z; O written once."""
    b, mm, n, k, l_ = (sizes[x] for x in ("batch", "m", "n", "k", "l"))
    mb, nbk, lb = math.ceil(mm / tiles.tm), math.ceil(n / tiles.tn), math.ceil(l_ / tiles.tl)
    x = b * nbk * (lb if k > tiles.kc else 1) * mm * k
    y = b * nbk * mb * k * l_
    z = b * mb * l_ * n
    return 2 * (x + y + z) + 4 * b * mm * n
