"""Cube tile sizes of a contraction backbone (matmul, batch_matmul, a convolution's
implicit GEMM), fitted to the target's L0A/L0B/L0C/L1 (and UB) capacities.

Reads target data only (``Target.capacity``); the NPU lowering
(:mod:`polycomp.hw.npu.lower_cube`) builds the cube program with these tiles.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from polycomp.errors import ResourceLimitError
from polycomp.hw.target import Target


@dataclass(frozen=True)
class CubeTiles:
    """``m0 x n0`` output tile in L0C, ``k0`` per Mmad (L0A/L0B), ``kl1`` per L1 stage."""
    m0: int
    n0: int
    k0: int
    kl1: int


def fit_cube_tiles(target: Target, itemsize: int, copies: int,
                   ub_need: Callable[[int, int], int] | None = None,
                   l1_col_bytes: int = 0) -> CubeTiles:
    """The largest tiles (output tile area first, then k0, then kL1) whose buffers fit
    L0A, L0B, L0C (fp32) and L1 with ``copies`` ping-pong copies each (and UB, for a
    vector epilogue needing ``ub_need(m0, n0)`` bytes).  8-bit operands take ``k0`` and
    ``n0`` in multiples of 32 (a fractal row holds 32 of them; the right operand is
    transposed by 32 x 32 squares).  ``l1_col_bytes``: L1 bytes per output column
    besides the operands (Fixpipe's quantisation parameters, 8), per copy."""
    cap = target.capacity
    q = _quantum(itemsize)
    best: CubeTiles | None = None
    for m0 in (128, 64, 32, 16):
        for n0 in (256, 128, 64, 32, 16):
            if n0 % q or m0 * n0 * 4 * copies > cap("L0C"):
                continue
            if ub_need is not None and ub_need(m0, n0) > cap("UB"):
                continue
            for k0 in (64, 32, 16):
                if k0 % q or m0 * k0 * itemsize * copies > cap("L0A") or \
                        k0 * n0 * itemsize * copies > cap("L0B"):
                    continue
                kl1 = next((k0 * f for f in (8, 4, 2, 1)
                            if ((m0 + n0) * k0 * f * itemsize + n0 * l1_col_bytes)
                            * copies <= cap("L1")), 0)
                if not kl1:
                    continue
                t = CubeTiles(m0, n0, k0, kl1)
                if best is None or (m0 * n0, k0, kl1) > (best.m0 * best.n0, best.k0,
                                                           best.kl1):
                    best = t
    if best is None:
        raise ResourceLimitError(f"target {target.name}: no 16x16x16 cube tiling fits "
                                 f"L0A/L0B/L0C/L1 with {copies} buffer copies")
    return best


#: the most parts a split-K tail tile is cut into (each part pays its own pipeline fill,
#: drain and Fixpipe; 4 parts balance a last round of any size over 24 cores to within
#: 1/4 of a tile)
K_SPLIT_MAX = 4


def tail_split(target: Target, out_dtype: str) -> int:
    """The most parts the tiles of a cube program's last, partial round may be cut into
    along ``k`` (1: none): a plain ``float32`` / ``int32`` result (the accumulator's
    type, so the parts add in GM without a second rounding) on a target whose Fixpipe
    adds into GM (feature ``fixpipe_atomic``).  The host picks the parts per run from
    the tile count and the cores (the lowering's ``split_parts``)."""
    if target.has("fixpipe_atomic") and out_dtype in ("float32", "int32"):
        return K_SPLIT_MAX
    return 1


def _quantum(itemsize: int) -> int:
    """The multiple ``k0``, ``kL1`` and ``n0`` take: 16, or 32 for 8-bit operands."""
    return 32 if itemsize == 1 else 16


def check_tiles(t: CubeTiles, itemsize: int = 2) -> CubeTiles:
    if any(v % 16 for v in (t.m0, t.n0, t.k0, t.kl1)) or t.kl1 % t.k0:
        raise ResourceLimitError(f"cube_tile {tuple(vars(t).values())}: every size must be "
                                 f"a multiple of 16 and kL1 a multiple of k0")
    q = _quantum(itemsize)
    if any(v % q for v in (t.n0, t.k0, t.kl1)):
        raise ResourceLimitError(f"cube_tile {tuple(vars(t).values())}: with 8-bit operands "
                                 f"n0, k0 and kL1 must be multiples of {q}")
    return t


def cube_tiles(target: Target, options, itemsize: int,
               ub_need: Callable[[int, int], int] | None = None,
               l1_col_bytes: int = 0) -> CubeTiles:
    """The tiles of option ``cube_tile`` (checked), else the largest that fit with the
    copies option ``double_buffer`` asks for."""
    if options.cube_tile:
        return check_tiles(CubeTiles(*options.cube_tile), itemsize)
    return fit_cube_tiles(target, itemsize, 2 if options.double_buffer else 1, ub_need,
                          l1_col_bytes)
