"""The float32 chain's CUDA kernel (targets ``cuda``, ``cuda-sm90``): its tiles, the
split of ``l`` and the traffic it predicts.  The kernel itself is the chain's program tree
(:mod:`.cuda_tree`) expanded by the CUDA IR passes into the micro-kernels of
:mod:`polycomp.hw.cuda.chain_simt` (docs/fusion.md, "CUDA").

One thread block per ``(n-block, m-block, batch)`` (grid ``x, y, z``), ``THREADS``
threads; the chain's order is Chimera's ``(b, m, l, k | n)``: the score tile ``S = X . Y``
(``TM x TL``) accumulates in registers, is written with the elementwise stages to shared
memory, the online softmax runs one thread per row, and ``O`` (``TM x TN``) accumulates in
registers, so the intermediate never reaches global memory.

Split ``l`` (flash-decoding), when the grid above is small (:func:`split_count`): with
``S > 1`` splits grid ``z`` covers ``(batch, split)`` (``bz = b * S + s``) and block
``s`` walks only its ``l`` tiles ``[s * P, min((s + 1) * P, ceil(L/TL)))``, ``P =
ceil(ceil(L/TL) / S)``, writes its partial tile (and rows' max and sum) to global
temporaries, and a second kernel combines them.

Tiles (:func:`cuda_tiles`): Chimera's closed form on the target's shared-memory capacity
with ``alpha = 16`` (``T_M = T_L = -alpha + sqrt(alpha^2 + MC)``), rounded down to
multiples of 16 and shrunk (``TL`` first, down to 32, when ``K <= KR`` is known, since
X's rows then stay resident; else the larger of the two) until the kernel's shared
arrays fit the static 48 KiB and the per-thread accumulators ``ES + EO`` stay at most 28
floats (more spills in ptxas at 256 threads); ``TK = 16``, ``TN = 64``.  Option
``chain_tiles=(TM, TL)`` overrides ``TM, TL`` (tests use small tiles to get several
blocks and ``l`` tiles on tiny shapes, and splits).

This is the fp32 CUDA-core kernel for float32 chains; float16/bfloat16 chains get the
Tensor Core kernel of :mod:`.tc_kernel` (docs/fusion.md, "Tensor Core chains").
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from polycomp.errors import OptionError
from polycomp.scheduler.chain.movement_model import plan_levels
from polycomp.scheduler.chain.plan import ChainPlan

__all__ = ["CudaChainTiles", "cuda_tiles", "split_count", "predicted_bytes", "THREADS", "ALPHA",
           "KR", "MIN_SPLIT_TILES", "MAX_SPLITS"]

THREADS = 256
ALPHA = 16
TK = 16
KR = 64                        # columns of X kept in shared memory
TN = 64
MAX_ACC = 28                   # accumulator floats per thread (Sacc + Oacc)
MIN_SPLIT_TILES = 2            # l tiles per split at least (split_count)
MAX_SPLITS = 64                # splits at most (the combining kernel keeps S maxima in
                               # registers: 80 at S = 64 in ptxas, sm_80, no spills)


@dataclass(frozen=True)
class CudaChainTiles:
    """The kernel's tiles and where they came from (the model's shared-level optimum)."""
    tm: int
    tl: int
    tk: int
    tn: int
    threads: int
    model_tm: int              # the closed form's T_M, T_L on the shared level
    model_tl: int
    splits: int = 1            # S: blocks sharing one O tile's l loop (split_count)

    @property
    def shared_floats(self) -> int:
        return (self.tm * KR + self.tk * self.tl + self.tm * self.tl
                + self.tl * self.tn + 3 * self.tm)

    @property
    def es(self) -> int:
        return self.tm * self.tl // self.threads

    @property
    def eo(self) -> int:
        return self.tm * self.tn // self.threads


def _fits(tm: int, tl: int, capacity_floats: int) -> bool:
    t = CudaChainTiles(tm, tl, TK, TN, THREADS, 0, 0)
    return t.shared_floats <= capacity_floats and t.es + t.eo <= MAX_ACC


def cuda_tiles(plan: ChainPlan, shared_bytes: int,
               override: tuple[int, ...] | None = None,
               sms: int | None = None) -> CudaChainTiles:
    """See the module docstring; ``override`` is option ``chain_tiles``; with the
    device's SM count ``sms`` the ``l`` loop is split by :func:`split_count` (else
    ``S = 1``)."""
    cap = shared_bytes // 4
    lp = plan_levels(plan.dims, [("shared", shared_bytes)], ALPHA, plan.match.has_softmax)[0]
    mtm, mtl = lp.tiles.m, lp.tiles.l
    if override is not None:
        tm, tl = override[0], override[1]
        return CudaChainTiles(tm, tl, TK, TN, THREADS, mtm, mtl,
                              split_count(plan, tm, tl, sms))
    tm = max(16, mtm // 16 * 16)
    tl = max(16, mtl // 16 * 16)
    resident = plan.dims.k <= KR      # X stays in shared memory: TL costs no traffic
    while not _fits(tm, tl, cap) and (tm > 16 or tl > 16):
        if resident and tl > 32 or not resident and tl > tm or tm == 16:
            tl -= 16
        else:
            tm -= 16
    return CudaChainTiles(tm, tl, TK, TN, THREADS, mtm, mtl, split_count(plan, tm, tl, sms))


def split_count(plan: ChainPlan, tm: int, tl: int, sms: int | None) -> int:
    """``S``, the number of blocks that share one ``TM x TN`` tile of ``O`` by splitting
    its ``l`` tiles (flash-decoding): the largest ``S`` with ``blocks * S <= sms`` (the
    grid up to one block per SM; ``blocks = batch * ceil(M/TM) * ceil(N/TN)``) and at
    least :data:`MIN_SPLIT_TILES` ``l`` tiles per split (at most :data:`MAX_SPLITS`
    splits), then lowered so no split is
    empty (``S = ceil(nl / ceil(nl / S))``, ``nl = ceil(L/TL)``).  1 (the unsplit kernel)
    without ``sms``, with a symbolic batch extent, or where the grid already has more
    than half the SMs in blocks.  Symbolic ``M, N, K, L`` count as the plan's ``BIG``.
    ``POLYCOMP_CHAIN_SPLITS=S`` sets ``S`` (for measurements; the kernel is correct for
    any ``S >= 1``, empty splits included)."""
    env = os.environ.get("POLYCOMP_CHAIN_SPLITS", "")
    if env:
        if not env.isdigit() or int(env) < 1:
            raise OptionError(f"POLYCOMP_CHAIN_SPLITS takes a positive integer, got {env!r}")
        return int(env)
    d = plan.dims
    if sms is None or any(x.startswith("b") for x in plan.symbolic):
        return 1
    blocks = d.batch * -(-d.m // tm) * -(-d.n // TN)
    nl = -(-d.l // tl)
    s = min(sms // blocks, nl // MIN_SPLIT_TILES, MAX_SPLITS)
    if s <= 1:
        return 1
    return -(-nl // -(-nl // s))


def predicted_bytes(plan: ChainPlan, tiles: CudaChainTiles, sizes: dict[str, int]) -> int:
    """Global bytes the kernel reads and writes (float32) at the extents ``sizes``
    (``batch, m, n, k, l``): each ``(n-block, m-block)`` block reads its rows of X once
    per split (once per ``l`` tile when ``K > KR``), all of Y and its columns of Z, and
    writes its part of O once (the benchmark's prediction next to the simulator's count);
    with ``S > 1`` splits the partial tiles are written and read back once, and with a
    softmax the rows' partial max and sum too."""
    b, mm, n, k, l_ = (sizes[x] for x in ("batch", "m", "n", "k", "l"))
    mb, nbk, lb = math.ceil(mm / tiles.tm), math.ceil(n / tiles.tn), math.ceil(l_ / tiles.tl)
    ns = tiles.splits
    x = b * nbk * (lb if k > KR else ns) * mm * k
    y = b * nbk * mb * k * l_
    z = b * mb * l_ * n
    o = b * mm * n
    if ns > 1:
        o += 2 * ns * b * mm * n + (4 * ns * b * mm if plan.match.has_softmax else 0)
    return 4 * (x + y + z + o)
