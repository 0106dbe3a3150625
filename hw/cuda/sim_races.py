"""Race trackers of the CUDA simulator: unordered conflicting accesses between threads.

Lock-step execution computes what a correctly synchronised program computes, so it
cannot see missing synchronisation by itself; these trackers record who accessed each
element and report an access that conflicts with an earlier one by another thread
without a happens-before order between them (two accesses conflict when at least one
writes).

* :class:`SharedRaceTracker` (one per shared allocation): per block, accesses since
  the block's last ``__syncthreads()``; thread ids are linear ids within the block.
* :class:`GlobalRaceTracker` (one per global buffer and kernel launch): all accesses
  of the launch; thread ids are global (``block * stride + thread``); a
  ``__syncthreads()`` orders the accesses of its own block only, and kernel launches
  order everything (a fresh tracker per launch).

Both take per-lane arrays (positions, thread ids) with the bool mask ``active`` of
the lanes that access, and return hazards as ``(kind, bad, other)``: ``bad`` a lane
mask, ``other`` the id of a conflicting thread per lane.  A store of the value the
element already holds, or of the value another thread stores to it in the same
instruction, is not a hazard: no order of such accesses can be observed (the pattern
of copies replicated over a thread dimension).  Reads are only merged into the
per-element summaries when a write (or a partial reset) needs them, so the common
"write, barrier, many reads" pattern does not pay for them.
"""
from __future__ import annotations

import numpy as np

_NONE_MIN = np.iinfo(np.int64).max
_GID_BITS = 40
_GID_MASK = (1 << _GID_BITS) - 1
MAX_PENDING = 64


def same_values(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise equality with NaN equal to NaN."""
    eq = a == b
    if a.dtype.kind in "fV":                  # V: ml_dtypes' bfloat16
        eq |= np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
    return eq


def _same_instruction(stamp, pos, ids, active, new) -> tuple | None:
    """Lanes storing to an element another lane stores a different value to."""
    lanes = np.flatnonzero(active)
    p = pos[lanes]
    idx = np.arange(len(p))
    stamp[p] = idx
    winner = stamp[p]
    dup = winner != idx
    if dup.any():
        dup &= ~same_values(new[lanes], new[lanes[winner]])
    if not dup.any():
        return None
    bad = np.zeros(len(active), dtype=bool)
    bad[lanes[dup]] = True
    other = np.zeros(len(active), dtype=np.int64)
    other[lanes] = ids[lanes[winner]]
    return ("write-write in one instruction", bad, other)


class SharedRaceTracker:
    """Who touched each shared element of each block since that block's last barrier.

    For every element: the smallest and largest id of the threads that wrote it
    (``wmin``/``wmax``) and read it (``rmin``/``rmax``); ``max == -1`` means nobody.
    An access by thread ``t`` conflicts with the earlier accesses of a kind exactly
    when ``min != t or max != t``: a read with earlier writes (read-after-write), a
    write with earlier writes and reads (write-after-write, write-after-read).
    Positions include the block's base, so blocks never mix; a barrier clears its
    blocks' rows.
    """

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
        out: list = []
        if self.writes_since_reset:
            self._conflicts("read-after-write", self.wmin, self.wmax, pos, tid, active, out)
        self._pending.append((pos, tid, active))
        if len(self._pending) >= MAX_PENDING:
            self._merge_reads()
        return out

    def write(self, pos: np.ndarray, tid: np.ndarray, active: np.ndarray,
              new: np.ndarray, current: np.ndarray) -> list:
        """Record stores of ``new`` over ``current``; return the write hazards."""
        self._merge_reads()
        out = []
        h = _same_instruction(self.stamp, pos, tid, active, new)
        if h is not None:
            out.append(h)
        changes = active & ~same_values(new, current)
        self._conflicts("write-after-write", self.wmin, self.wmax, pos, tid, changes, out)
        self._conflicts("write-after-read", self.rmin, self.rmax, pos, tid, changes, out)
        lanes = np.flatnonzero(active)
        np.minimum.at(self.wmin, pos[lanes], tid[lanes])
        np.maximum.at(self.wmax, pos[lanes], tid[lanes])
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


class _AccessSummary:
    """One kind (reads or writes) of accesses to each element of a global buffer.

    ``gmin``/``gmax``: smallest/largest global thread id; ``top_hi`` = max over the
    accesses of ``epoch << 40 | gid`` and ``top_lo`` = max of ``epoch << 40 | ~gid``,
    which give the latest epoch seen and the largest/smallest id among the accesses
    at that epoch."""

    def __init__(self, size: int):
        self.gmin = np.full(size, _NONE_MIN, dtype=np.int64)
        self.gmax = np.full(size, -1, dtype=np.int64)
        self.top_hi = np.full(size, -1, dtype=np.int64)
        self.top_lo = np.full(size, -1, dtype=np.int64)

    def add(self, pos, gid, epoch) -> None:
        np.minimum.at(self.gmin, pos, gid)
        np.maximum.at(self.gmax, pos, gid)
        e = epoch << _GID_BITS
        np.maximum.at(self.top_hi, pos, e | gid)
        np.maximum.at(self.top_lo, pos, e | (_GID_MASK - gid))

    def unordered(self, pos, gid, epoch, stride, active):
        """Lanes whose access is not ordered after every recorded one, and a
        conflicting thread id per lane.

        Ordered: every recorded access is the lane's own thread's, or was made by its
        block (all ids in the block) before the block's current epoch, except accesses
        by the thread itself at the current epoch."""
        lo, hi = self.gmin[pos], self.gmax[pos]
        used = hi >= 0
        own = (lo == gid) & (hi == gid)
        block = gid // stride
        in_block = (lo // stride == block) & (hi // stride == block)
        th, tl = self.top_hi[pos], self.top_lo[pos]
        last = th >> _GID_BITS
        last_max = th & _GID_MASK
        last_min = _GID_MASK - (tl & _GID_MASK)
        before = (last < epoch) | ((last == epoch) & (last_min == gid) & (last_max == gid))
        bad = active & used & ~own & ~(in_block & before)
        other = np.where(lo != gid, lo, hi)
        return bad, other


class GlobalRaceTracker:
    """Unordered conflicting accesses to one global buffer within a kernel launch.

    Thread ids are global (``block_linear * stride + thread``) and each block has an
    *epoch*: the number of ``__syncthreads()`` it has passed in this launch.  A
    recorded access by thread ``v`` at epoch ``f`` happens before an access by thread
    ``u`` of block ``B`` at epoch ``e`` when ``v == u``, or when ``v`` is in ``B`` and
    ``f < e`` (a barrier of ``B`` lies between).  Accesses by another block are never
    ordered within one launch, and ``__syncwarp`` is not modelled for global memory.
    The summaries (:class:`_AccessSummary`) decide "all recorded accesses happen
    before" exactly for these rules: all ids in ``B`` and, at the latest recorded
    epoch, either an epoch below ``e`` or only ``u`` itself.
    """

    BYTES_PER_ELEMENT = 72      # both summaries and the stamp, once allocated

    def __init__(self, size: int, stride: int):
        self.size, self.stride = size, stride
        self.writes = _AccessSummary(size)
        self.reads: _AccessSummary | None = None   # allocated when the first reads merge
        self.stamp: np.ndarray | None = None       # allocated at the first write
        self.written = False
        self._pending: list = []

    def _merge_reads(self) -> None:
        if not self._pending:
            return
        pos = np.concatenate([p[a] for p, g, e, a in self._pending])
        gid = np.concatenate([g[a] for p, g, e, a in self._pending])
        ep = np.concatenate([e[a] for p, g, e, a in self._pending])
        self._pending = []
        if self.reads is None:
            self.reads = _AccessSummary(self.size)
        self.reads.add(pos, gid, ep)

    def read(self, pos, gid, epoch, active) -> list:
        out = []
        if self.written:
            bad, other = self.writes.unordered(pos, gid, epoch, self.stride, active)
            if bad.any():
                out.append(("read-after-write", bad, other))
        self._pending.append((pos, gid, epoch, active))
        if len(self._pending) >= MAX_PENDING:
            self._merge_reads()
        return out

    def write(self, pos, gid, epoch, active, new, current) -> list:
        self._merge_reads()
        out = []
        if self.stamp is None:
            self.stamp = np.empty(self.size, dtype=np.int64)
        h = _same_instruction(self.stamp, pos, gid, active, new)
        if h is not None:
            out.append(h)
        changes = active & ~same_values(new, current)
        for kind, summary in (("write-after-write", self.writes),
                              ("write-after-read", self.reads)):
            if summary is None:
                continue
            bad, other = summary.unordered(pos, gid, epoch, self.stride, changes)
            if bad.any():
                out.append((kind, bad, other))
        lanes = np.flatnonzero(active)
        self.writes.add(pos[lanes], gid[lanes], epoch[lanes])
        self.written = True
        return out
