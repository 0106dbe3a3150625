"""Profiler-style memory counters of one warp-level instruction, vectorised over warps.

Both functions take ``byte_offsets`` and ``active`` of shape ``(n_warps, 32)``: the byte
offset each thread accesses (relative to a base aligned to at least 128 bytes: CUDA
allocations are 256-byte aligned and a shared buffer's bank pattern does not depend on
its base) and whether the thread executes the instruction.  A warp with no active
thread issues no request.
"""
from __future__ import annotations

import numpy as np

SECTOR_BYTES = 32
BANKS = 32
BANK_BYTES = 4
_BANK_SHIFT = 40     # key = bank << 40 | word; word offsets stay far below 2**40


def _run_starts(keys: np.ndarray) -> np.ndarray:
    """For row-sorted keys (-1 = no access): True where a new distinct key starts."""
    new = np.empty(keys.shape, dtype=bool)
    new[:, 0] = keys[:, 0] >= 0
    new[:, 1:] = (keys[:, 1:] != keys[:, :-1]) & (keys[:, 1:] >= 0)
    return new


def _requesting(byte_offsets, active):
    """The rows (warps) with an active thread: (offsets, active), or (None, None)."""
    rows = active.any(axis=1)
    if rows.all():
        return byte_offsets, active
    if not rows.any():
        return None, None
    return byte_offsets[rows], active[rows]


def global_sectors(byte_offsets: np.ndarray, active: np.ndarray, itemsize: int):
    """``(requests, sectors, bytes)`` of one global load/store instruction.

    ``sectors`` sums, over warps with an active thread, the number of distinct 32-byte
    sectors their active threads touch (an element of ``itemsize`` bytes, naturally
    aligned, lies in one sector).
    """
    a, m = _requesting(byte_offsets, active)
    if a is None:
        return 0, 0, 0
    keys = np.where(m, a >> 5, -1)                   # 32-byte sectors
    keys.sort(axis=1)
    sectors = int(_run_starts(keys).sum())
    return len(a), sectors, int(m.sum()) * itemsize


def shared_wavefronts(byte_offsets: np.ndarray, active: np.ndarray, itemsize: int):
    """``(requests, wavefronts, bytes)`` of one shared-memory load/store instruction.

    A request needs as many wavefronts as the largest number of *distinct* 4-byte words
    its active threads touch in one bank (threads reading the same word share it: a
    broadcast).  Elements wider than 4 bytes touch each of their words; the hardware's
    split of 64/128-bit accesses into half/quarter-warp phases is not modelled.
    """
    a, m = _requesting(byte_offsets, active)
    if a is None:
        return 0, 0, 0
    n_requests, nbytes = len(a), int(m.sum()) * itemsize
    words = a >> 2                                   # 4-byte words
    k = max(1, itemsize // BANK_BYTES)
    if k > 1:
        words = (words[:, :, None] + np.arange(k)).reshape(len(words), -1)
        mw = np.repeat(m, k, axis=1)
    else:
        mw = m
    # fast path: words within a window of 32 consecutive words lie in distinct banks
    # (or are the same word), so such a request takes one wavefront
    if mw.all():
        span = words.max(axis=1) - words.min(axis=1)
    else:
        big = np.iinfo(np.int64).max
        span = np.where(mw, words, -1).max(axis=1) - np.where(mw, words, big).min(axis=1)
    slow = span >= BANKS
    if not slow.any():
        return n_requests, n_requests, nbytes
    fast = n_requests - int(slow.sum())
    words, mw = words[slow], mw[slow]
    keys = np.where(mw, ((words % BANKS) << _BANK_SHIFT) | words, -1)
    keys.sort(axis=1)
    new = _run_starts(keys)
    banks = np.where(keys >= 0, keys >> _BANK_SHIFT, 0)
    n = len(keys)
    slot = np.arange(n)[:, None] * BANKS + banks
    per_bank = np.bincount(slot.ravel(), weights=new.ravel(), minlength=n * BANKS)
    wavefronts = int(per_bank.reshape(n, BANKS).max(axis=1).sum())
    return n_requests, fast + wavefronts, nbytes
