"""Memory spaces of the CUDA simulator and the shared-memory race tracker.

Every space stores its elements in one flat numpy array ``data``; an access at element
``offset`` (row-major, within the logical buffer) by simulator lane ``l`` touches
``data[base[l] + offset]``:

* :class:`GlobalMemory`: kernel arguments and global temporaries, one array for the
  whole launch sequence (``base`` = 0);
* :class:`SharedMemory`: one copy per thread block of the lane chunk
  (``base`` = block slot * size), with a
  :class:`~polycomp.hw.cuda.sim_races.SharedRaceTracker`;
* :class:`LocalMemory`: registers/local arrays, one copy per thread (``base`` =
  lane * size).

Fresh shared and local storage and the global temporaries are *poisoned* (NaN for
floats, ``0xAA`` bytes for integers) so that reading an element nobody wrote shows up
in the results instead of silently reading zero.
"""
from __future__ import annotations

import numpy as np

from polycomp import dtypes as dt

from .sim_races import SharedRaceTracker


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
        self._stamp: np.ndarray | None = None

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
        self.tracker = SharedRaceTracker(n_blocks, self.size)

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
