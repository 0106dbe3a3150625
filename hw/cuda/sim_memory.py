"""Memory spaces of the CUDA simulator and the shared-memory race tracker.

Every space stores its elements in one flat numpy array ``data``; an access at element
``offset`` (row-major, within the logical buffer) by simulator lane ``l`` touches
``data[base[l] + offset]``:

* :class:`GlobalMemory`: kernel arguments and global temporaries, one array for the
  whole launch sequence (``base`` = 0);
* :class:`SharedMemory`: one copy per thread block of the lane chunk
  (``base`` = block slot * size), with a :class:`RaceTracker`;
* :class:`LocalMemory`: registers/local arrays, one copy per thread (``base`` =
  lane * size).

Fresh shared and local storage and the global temporaries are *poisoned* (NaN for
floats, ``0xAA`` bytes for integers) so that reading an element nobody wrote shows up
in the results instead of silently reading zero.
"""
from __future__ import annotations

import numpy as np

from polycomp import dtypes as dt

_NONE_MIN = np.iinfo(np.int64).max


def poisoned(shape, dtype: str, poison: bool = True) -> np.ndarray:
    """A new array of ``shape``: NaN / 0xAA bytes when ``poison``, else zeros."""
    nd = dt.to_numpy(dtype)
    if not poison:
        return np.zeros(shape, dtype=nd)
    arr = np.empty(shape, dtype=nd)
    if dt.is_float(dtype):
        arr.fill(np.nan)
    elif dtype == "bool":
        arr.fill(True)
    else:
        arr.view(np.uint8).fill(0xAA)
    return arr


class GlobalMemory:
    scope = "global"

    def __init__(self, buffer, array: np.ndarray):
        self.buffer = buffer
        self.array = array
        self.data = array.reshape(-1)           # a view: stores reach ``array``
        self.shape = tuple(array.shape)
        self.size = array.size
        self.itemsize = array.dtype.itemsize
        self._stamp = None

    def positions(self, offsets):
        return offsets

    def stamp(self) -> np.ndarray:
        """Scratch array (one slot per element) for duplicate-address detection."""
        if self._stamp is None:
            self._stamp = np.empty(self.size, dtype=np.int64)
        return self._stamp


class SharedMemory:
    """``__shared__`` storage: one copy per block of the chunk (``n_blocks`` copies)."""
    scope = "shared"

    def __init__(self, buffer, shape: tuple, n_blocks: int, block_slot: np.ndarray,
                 poison: bool):
        self.buffer = buffer
        self.shape = shape
        self.size = int(np.prod(shape, dtype=np.int64)) if shape else 1
        self.itemsize = dt.itemsize(buffer.dtype)
        self.n_blocks = n_blocks
        self.data = poisoned(n_blocks * self.size, buffer.dtype, poison)
        self.base = block_slot * self.size
        self.tracker = RaceTracker(n_blocks, self.size)

    def positions(self, offsets):
        return self.base + offsets


class LocalMemory:
    """Per-thread storage (``scope == "local"``): one copy per lane."""
    scope = "local"

    def __init__(self, buffer, shape: tuple, n_lanes: int, poison: bool):
        self.buffer = buffer
        self.shape = shape
        self.size = int(np.prod(shape, dtype=np.int64)) if shape else 1
        self.itemsize = dt.itemsize(buffer.dtype)
        self.data = poisoned(n_lanes * self.size, buffer.dtype, poison)
        self.base = np.arange(n_lanes, dtype=np.int64) * self.size

    def positions(self, offsets):
        return self.base + offsets


def same_values(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise equality with NaN equal to NaN."""
    eq = a == b
    if a.dtype.kind in "fV":                  # V: ml_dtypes' bfloat16
        eq |= np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
    return eq


class RaceTracker:
    """Who touched each shared word of each block since that block's last barrier.

    For every element it keeps the smallest and largest id of the threads that wrote it
    (``wmin``/``wmax``) and read it (``rmin``/``rmax``); ``max == -1`` means nobody.
    An access by thread ``t`` conflicts with earlier accesses by *another* thread
    exactly when ``min != t or max != t`` for the relevant kind, so a read conflicts
    with earlier writes (read-after-write), a write with earlier writes and reads
    (write-after-write, write-after-read), and several threads writing one element in
    the same instruction conflict with each other.  Thread ids are linear ids within
    the block; positions already include the block's base, so blocks never mix.

    Arguments are per simulator lane (``pos``, ``tid``) with the bool mask ``active``
    of the lanes that access; hazards come back as ``(kind, bad, other)`` with ``bad``
    a lane mask and ``other`` the id of a conflicting thread per lane.  Reads are only
    merged into ``rmin``/``rmax`` when a write (or a partial reset) needs them: the
    common pattern "write, barrier, many reads, barrier" never pays for them.
    """

    MAX_PENDING = 64

    def __init__(self, n_blocks: int, size: int):
        self.n_blocks, self.size = n_blocks, size
        n = n_blocks * size
        self.wmin = np.full(n, _NONE_MIN, dtype=np.int64)
        self.wmax = np.full(n, -1, dtype=np.int64)
        self.rmin = np.full(n, _NONE_MIN, dtype=np.int64)
        self.rmax = np.full(n, -1, dtype=np.int64)
        self.stamp = np.empty(n, dtype=np.int64)
        self.writes_since_reset = False   # no write anywhere since the last full reset
        self._pending: list = []          # reads not merged yet: (pos, tid, active)

    def _merge_reads(self) -> None:
        if not self._pending:
            return
        pos = np.concatenate([p[a] for p, t, a in self._pending])
        tid = np.concatenate([t[a] for p, t, a in self._pending])
        self._pending = []
        np.minimum.at(self.rmin, pos, tid)
        np.maximum.at(self.rmax, pos, tid)

    @staticmethod
    def _conflicts(kind, lo, hi, pos, tid, active, out):
        l, h = lo[pos], hi[pos]
        bad = active & (h >= 0) & ((l != tid) | (h != tid))
        if bad.any():
            out.append((kind, bad, np.where(l != tid, l, h)))

    def read(self, pos: np.ndarray, tid: np.ndarray, active: np.ndarray) -> list:
        """Record reads; return the read-after-write hazards."""
        out = []
        if self.writes_since_reset:
            self._conflicts("read-after-write", self.wmin, self.wmax, pos, tid, active, out)
        self._pending.append((pos, tid, active))
        if len(self._pending) >= self.MAX_PENDING:
            self._merge_reads()
        return out

    def write(self, pos: np.ndarray, tid: np.ndarray, active: np.ndarray,
              new: np.ndarray, current: np.ndarray) -> list:
        """Record writes of the values ``new`` over ``current``; return the
        write-after-write/-read hazards.

        A store of the value the element already holds, or of the value another thread
        stores to it in the same instruction, is not a hazard: no order of the accesses
        can be observed (the pattern of redundant copies into shared memory)."""
        self._merge_reads()
        out = []
        lanes = np.flatnonzero(active)
        p = pos[lanes]
        idx = np.arange(len(p))
        self.stamp[p] = idx
        winner = self.stamp[p]
        dup = winner != idx
        if dup.any():
            dup &= ~same_values(new[lanes], new[lanes[winner]])
        if dup.any():
            bad = np.zeros(len(active), dtype=bool)
            bad[lanes[dup]] = True
            other = np.zeros(len(active), dtype=np.int64)
            other[lanes] = tid[lanes[winner]]
            out.append(("write-write in one instruction", bad, other))
        changes = active & ~same_values(new, current)
        self._conflicts("write-after-write", self.wmin, self.wmax, pos, tid, changes, out)
        self._conflicts("write-after-read", self.rmin, self.rmax, pos, tid, changes, out)
        np.minimum.at(self.wmin, p, tid[lanes])
        np.maximum.at(self.wmax, p, tid[lanes])
        self.writes_since_reset = True
        return out

    def reset_blocks(self, blocks: np.ndarray) -> None:
        """A ``__syncthreads`` in ``blocks`` (slot indices): forget their accesses."""
        if len(blocks) == 0:
            return
        if len(blocks) == self.n_blocks:
            self._pending = []
            if not self.writes_since_reset and not (self.rmax >= 0).any():
                return
            self.writes_since_reset = False
        else:
            self._merge_reads()
        shape = (self.n_blocks, self.size)
        for arr, none in ((self.wmin, _NONE_MIN), (self.rmin, _NONE_MIN),
                          (self.wmax, -1), (self.rmax, -1)):
            arr.reshape(shape)[blocks] = none

    def reset_warps(self, synced: np.ndarray) -> None:
        """A ``__syncwarp`` in the warps where ``synced[block_slot, warp]``: forget
        accesses made only by threads of such a warp (accesses that also involve
        another warp stay: that warp is not ordered by the warp barrier)."""
        self._merge_reads()
        lo = np.minimum(self.wmin, self.rmin)
        hi = np.maximum(self.wmax, self.rmax)
        same = (hi >= 0) & (lo // 32 == hi // 32)
        if not same.any():
            return
        block = np.repeat(np.arange(self.n_blocks), self.size)
        warp = np.minimum(np.where(same, hi // 32, 0), synced.shape[1] - 1)
        sel = same & synced[block, warp]
        self.wmin[sel] = _NONE_MIN
        self.rmin[sel] = _NONE_MIN
        self.wmax[sel] = -1
        self.rmax[sel] = -1
