"""The thread mapping of a row-reduction kernel, chosen from its shape by a cost model
(AStitch's adaptive thread mapping: packing short rows, splitting long ones).

A stitched row group (a ``backbone:<n>`` of class ``rowreduce``) computes, for every
row, reductions over the row's columns and the row-wise stages that read them (softmax,
layernorm, row sums).  :class:`RowMapping` says how its rows and columns go onto CUDA threads:

* ``threads`` ``T`` per row (a power of two): column ``c`` of a row goes to thread
  ``floor(c / V) mod T`` of the row, so consecutive threads read consecutive ``V``-column
  vectors (coalesced).  The mapping *class* follows from ``T``:

  - ``packed`` (``T < 32``): several rows per warp, their partial results combined by
    *segmented* shuffles (a butterfly over ``T`` lanes, member mask the row's lanes);
  - ``warp`` (``T = 32``): a warp per row, a 32-lane butterfly;
  - ``block`` (``T > 32``): a block per row: a butterfly per warp, the warps' results
    through shared memory (one ``__syncthreads``), a butterfly over the warps.

* ``rows`` ``R`` per block (``R = 1`` for the block class), ``T * R`` threads per block;
* ``vector`` ``V``: consecutive columns per access (a 16-byte access for ``V = 4``
  float32), where every access of the group's arrays is unit-stride in the column and
  the row length is a multiple of ``V`` (guarded for symbolic lengths);
* ``cache``: the row's inputs are loaded once into the thread's registers
  (``ceil(W / (V T)) * V`` elements) and every pass of the group reads them there
  (AStitch's local stitching): each input is read from DRAM once, each output written
  once.  Needs a row length bounded by a constant (``W``, or the version's ``bound``).

The cost model (:func:`estimate`) is stated in docs/rowreduce.md.  In short, for a
kernel moving ``bytes`` (inputs read once per pass, or once when cached, one pass
fewer for an online max-and-sum, outputs written once) in ``blocks = ceil(N / R)``
blocks of ``B = T R`` threads:

* occupancy: ``P = min(32, 2048 / B, 65536 / (B * regs))`` blocks per SM, ``regs =
  32 + cache registers``;
* waves: ``ceil(blocks / (SMs * P))``;
* sectors: a warp request reads ``min(T, 32) V itemsize`` contiguous bytes of each of
  its rows; below 32 bytes (one sector) the rest of the sector is moved for nothing, so
  the bytes count ``32 / (min(T, 32) V itemsize)`` times;
* bytes in flight per SM (Little's law): ``resident threads * bytes a thread has in
  flight`` (its whole cache when cached, else up to ``UNROLL`` vector loads), which
  bounds each SM's bandwidth by ``in-flight / LATENCY``;
* each wave takes ``max(bytes / min(BW, SMs_active * per-SM bandwidth), passes *
  LATENCY + combine latency, instructions / (SMs_active * ISSUE_RATE))``, the combine
  latency being the shuffle steps and, for the block class, a barrier and a
  shared-memory round trip per reduction; the instructions are ``INSTR_PER_ELEMENT``
  per element and pass, ``INSTR_PER_STEP`` per shuffle step, for every thread of the
  row (idle lanes of a short row included).

The candidate with the smallest estimate is chosen (the smaller ``T`` on ties).  The
constants are datasheet values and guesses until a GPU measures them (the GPU check
bundle ``scripts/gpu_bundle_rowreduce.py`` times the model's choice beside the
alternatives).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from polycomp.errors import OptionError

WARP = 32
MAX_THREADS = 1024
#: threads per block of the packed and warp classes
BLOCK_THREADS = 256
#: bytes of one access at most (a 128-bit load or store)
VECTOR_BYTES = 16
#: the unit of DRAM and L2 traffic
SECTOR = 32
#: registers a thread may spend on the row cache (4-byte registers)
CACHE_REGISTERS = 32
#: registers of a row kernel besides its cache (indices, accumulators, addresses)
BASE_REGISTERS = 32
#: vector loads a thread keeps in flight in an uncached column loop (nvcc's unrolling)
UNROLL = 4
#: loaded DRAM latency under load, seconds
LATENCY = 1000e-9
#: one shuffle step / one barrier plus shared-memory round trip, seconds
SHUFFLE_S = 30e-9
BARRIER_S = 150e-9
#: thread instructions an SM issues per second (4 schedulers x 32 lanes x ~1.7 GHz), and
#: instructions per element of one pass / per shuffle step
ISSUE_RATE = 4 * 32 * 1.7e9
INSTR_PER_ELEMENT = 4
INSTR_PER_STEP = 3
#: the innermost row extent the model assumes when it is symbolic (rows of 2-d and 3-d
#: row groups: a sequence length)
INNER_ROWS = 128
#: per-SM limits
THREADS_PER_SM = 2048
BLOCKS_PER_SM = 32
REGISTERS_PER_SM = 65536
#: peak DRAM bandwidth by SM version (bytes/s; datasheet: A100 40 GB, H100 SXM)
BANDWIDTH = {80: 1.55e12, 90: 3.35e12}
#: the bandwidth one SM can draw at most, in multiples of its fair share (BW / SMs)
SM_SHARE = 1.0


@dataclass(frozen=True)
class RowMapping:
    """How a row group's rows and columns go onto threads (see the module docstring)."""
    threads: int
    rows: int
    vector: int = 1
    cache: bool = False
    bound: int | None = None

    @property
    def kind(self) -> str:
        return "packed" if self.threads < WARP else "warp" if self.threads == WARP \
            else "block"

    @property
    def block_threads(self) -> int:
        return self.threads * self.rows

    @property
    def warps_per_row(self) -> int:
        """Warps whose results a row combines through shared memory (block class)."""
        return max(1, self.threads // WARP)

    @property
    def segment(self) -> int:
        """Lanes of one row within a warp (the butterfly's width)."""
        return min(self.threads, WARP)

    def per_thread(self, width: int) -> int:
        """Vector accesses of one thread per pass over a row of ``width`` columns."""
        units = -(-width // self.vector)
        return -(-units // self.threads)

    def label(self) -> str:
        s = f"{self.kind} T={self.threads} R={self.rows} V={self.vector}"
        if self.cache:
            s += " cached"
        if self.bound is not None:
            s += f" W<={self.bound}"
        return s


@dataclass(frozen=True)
class RowShape:
    """What the model needs of a row group: ``rows`` (product of the row extents, None
    when symbolic), ``width`` (the columns of a row: the innermost column extent, None
    when symbolic), ``bound`` (a constant upper bound of ``width``, if any),
    ``itemsize`` (largest element size of an array the columns index), ``passes`` (how
    many statements read the row's inputs from memory), ``in_arrays`` / ``out_arrays``
    (row-long arrays read / written per row), ``reductions`` (row reductions, each one
    combine), ``rank`` (row dimensions) and ``inner_rows`` (the extent of the innermost
    one, None when symbolic), ``online`` (a maximum and a sum of exponentials that an
    uncached mapping computes in one pass), ``vector_ok`` (every access is unit-stride in
    the column, so vectors apply when the width allows), ``cache_ok`` (one column
    dimension: the row can be kept in registers)."""
    rows: int | None
    width: int | None
    itemsize: int
    passes: int = 1
    in_arrays: int = 1
    out_arrays: int = 0
    reductions: int = 1
    vector_ok: bool = True
    cache_ok: bool = True
    bound: int | None = None
    inner_rows: int | None = None
    rank: int = 1
    online: bool = False

    @property
    def block_rows(self) -> int:
        """The extent of the innermost row dimension (the one blocks pack ``R`` rows
        of; the outer row dimensions are grid dimensions): all rows for one row
        dimension, :data:`INNER_ROWS` when symbolic."""
        if self.rank == 1:
            return self.rows if self.rows is not None else 1 << 30
        return self.inner_rows if self.inner_rows is not None else INNER_ROWS

    @property
    def known_width(self) -> int | None:
        return self.width if self.width is not None else self.bound


@dataclass(frozen=True)
class RowCost:
    """The model's estimate for one mapping (see :func:`estimate`)."""
    seconds: float
    waves: int
    blocks: int
    blocks_per_sm: int
    occupancy: float          # resident threads / 2048
    inflight_per_sm: int      # bytes in flight per SM, full wave
    registers: int
    bytes: int

    def describe(self) -> str:
        return (f"{self.seconds * 1e6:.2f} us: {self.blocks} blocks, {self.waves} wave(s), "
                f"{self.blocks_per_sm} blocks/SM (occupancy {self.occupancy:.0%}), "
                f"{self.inflight_per_sm // 1024} KiB in flight/SM, ~{self.registers} regs")


def vector_width(width: int | None, itemsize: int, vector_ok: bool) -> int:
    """The widest ``V`` (a power of two, ``V * itemsize <= 16``) dividing ``width``."""
    if not vector_ok or width is None:
        return 1
    v = max(1, VECTOR_BYTES // itemsize)
    while v > 1 and width % v:
        v //= 2
    return v


def cache_fits(m: RowMapping, width: int, itemsize: int, arrays: int = 1) -> bool:
    """Does a thread's share of ``arrays`` rows fit the cache budget of
    :data:`CACHE_REGISTERS`?"""
    return arrays * m.per_thread(width) * m.vector * itemsize <= CACHE_REGISTERS * 4


def estimate(m: RowMapping, shape: RowShape, target) -> RowCost:
    """The model's time for ``m`` on ``shape`` (module docstring, docs/rowreduce.md).
    A symbolic row count counts as a full GPU (four waves of 2048 threads per SM); a
    symbolic width as its bound, else 1024."""
    cuda = target.cuda
    sms = cuda.sms
    bw = BANDWIDTH.get(cuda.sm, BANDWIDTH[80])
    width = shape.known_width or 1024
    rows = shape.rows if shape.rows is not None else 4 * sms * THREADS_PER_SM
    b = m.block_threads
    per_thread = m.per_thread(width)
    cache_regs = -(-shape.in_arrays * per_thread * m.vector * shape.itemsize // 4) \
        if m.cache else 0
    regs = BASE_REGISTERS + cache_regs
    per_sm = max(1, min(BLOCKS_PER_SM, THREADS_PER_SM // b,
                        REGISTERS_PER_SM // (b * -(-regs // 8) * 8)))
    inner = min(shape.block_rows, rows)
    per_block = -(-inner // m.rows)                   # blocks per innermost row run
    blocks = per_block * max(1, rows // inner)
    fill = inner / (per_block * m.rows)              # block rows that have a row
    reads = 1 if m.cache else max(1, shape.passes - (1 if shape.online else 0))
    # sectors: a warp request touches, per row, min(T, 32) * V * itemsize contiguous
    # bytes; below a 32-byte sector the rest of each sector is moved for nothing
    chunk = m.segment * m.vector * shape.itemsize
    efficiency = min(1.0, chunk / SECTOR)
    row_bytes = width * shape.itemsize * (shape.in_arrays * reads + shape.out_arrays) \
        / efficiency
    total = rows * row_bytes
    flight = per_thread if m.cache else min(per_thread, UNROLL)
    flight_bytes = flight * m.vector * shape.itemsize * max(1, shape.in_arrays)
    steps = int(math.log2(m.segment))
    combine = shape.reductions * steps * SHUFFLE_S
    if m.kind == "block":
        combine += shape.reductions * (BARRIER_S + int(math.log2(m.warps_per_row)) * SHUFFLE_S)
    instr = m.threads * (shape.passes * per_thread * m.vector * INSTR_PER_ELEMENT
                         + shape.reductions * (steps + int(math.log2(m.warps_per_row)))
                         * INSTR_PER_STEP)
    wave_blocks = sms * per_sm
    waves = max(1, -(-blocks // wave_blocks))
    seconds = 0.0
    left = blocks
    while left > 0:   # full waves, then the last one
        n = min(left, wave_blocks)
        if n == wave_blocks and left > wave_blocks:          # the same for every full wave
            full = left // wave_blocks
            seconds += full * _wave(n, m, per_sm, sms, flight_bytes, row_bytes, bw, reads,
                                    combine, instr, fill)
            left -= full * wave_blocks
            continue
        seconds += _wave(n, m, per_sm, sms, flight_bytes, row_bytes, bw, reads, combine,
                         instr, fill)
        left -= n
    return RowCost(seconds, waves, blocks, per_sm, per_sm * b / THREADS_PER_SM,
                   per_sm * b * flight_bytes, regs, int(total))


def _wave(n, m, per_sm, sms, flight_bytes, row_bytes, bw, reads, combine, instr,
          fill) -> float:
    """One wave of ``n`` blocks (see :func:`estimate`); ``instr``: thread instructions
    per row; ``fill``: the share of block rows that have a row."""
    active = min(sms, n)
    resident = min(per_sm, -(-n // sms))
    busy = resident * m.block_threads * fill
    per_sm_bw = min(SM_SHARE * bw / sms, busy * flight_bytes / LATENCY)
    rate = min(bw, active * per_sm_bw)
    return max(n * m.rows * fill * row_bytes / rate, reads * LATENCY + combine,
               n * m.rows * instr / (active * ISSUE_RATE))


def block_rows(t: int, shape: RowShape) -> int:
    """``R`` for ``T = t``: 256 threads per block, fewer rows when the innermost row
    extent is smaller (down to a warp's worth of threads); 1 above a warp."""
    if t > WARP:
        return 1
    r = max(1, BLOCK_THREADS // t)
    need = 1
    while need < shape.block_rows:
        need *= 2
    return max(min(r, need), max(1, WARP // t))


def candidates(shape: RowShape, target, vector: int | None = None,
               cache: bool | None = None) -> list[RowMapping]:
    """Every mapping the model considers for ``shape`` (``vector`` / ``cache`` fixed
    when given)."""
    width = shape.known_width
    v = vector if vector is not None else vector_width(shape.width, shape.itemsize,
                                                        shape.vector_ok)
    out = []
    t = 1
    while t <= MAX_THREADS:
        rows = block_rows(t, shape)
        if width is not None and t > 1 and (t // 2) * v >= width:
            break                           # half the threads would already cover a row
        for c in ((False, True) if cache is None else (cache,)):
            m = RowMapping(t, rows, v, c, shape.bound if shape.width is None else None)
            if c and not (shape.cache_ok and width is not None and shape.passes > 1
                          and cache_fits(m, width, shape.itemsize, shape.in_arrays)):
                continue
            out.append(m)
        t *= 2
    return out


def choose(shape: RowShape, target, fixed=None) -> tuple[RowMapping, RowCost]:
    """The mapping with the smallest :func:`estimate` (fields of ``fixed``, a
    :class:`~polycomp.hw.options.RowMapOption`, are taken as given).  A symbolic row
    length without a bound takes the warp class (``T = 32``, ``R = 8``, scalar columns),
    which suits the widest range of lengths; the multi-version dispatch
    (:mod:`polycomp.scheduler.tuning.row_versions`) picks by the length at run time instead."""
    vec = fixed.vector if fixed is not None else None
    cache = fixed.cache if fixed is not None else None
    if shape.known_width is None and (fixed is None or fixed.threads is None):
        m = RowMapping(WARP, (fixed.rows if fixed is not None and fixed.rows else
                              block_rows(WARP, shape)), vec or 1)
        return m, estimate(m, shape, target)
    if fixed is not None and fixed.threads is not None:
        t = fixed.threads
        rows = fixed.rows or block_rows(t, shape)
        v = vec if vec is not None else vector_width(shape.width, shape.itemsize,
                                                     shape.vector_ok)
        width = shape.known_width
        c = (cache is None or cache) and width is not None and shape.cache_ok and \
            shape.passes > 1 and \
            cache_fits(RowMapping(t, rows, v), width, shape.itemsize, shape.in_arrays)
        if cache and not c:
            why = "its length is not bounded" if width is None else \
                "nothing reads it twice" if not (shape.cache_ok and shape.passes > 1) else \
                f"{width} columns do not fit {CACHE_REGISTERS} registers per thread with " \
                f"{t} threads per row"
            raise OptionError(f"option row_map.cache: the row cannot be kept in registers "
                              f"({why})")
        m = RowMapping(t, rows, v, c, shape.bound if shape.width is None else None)
        return m, estimate(m, shape, target)
    best = None
    for m in candidates(shape, target, vec, cache):
        if fixed is not None and fixed.rows is not None and m.threads <= WARP:
            m = RowMapping(m.threads, fixed.rows, m.vector, m.cache, m.bound)
        cost = estimate(m, shape, target)
        if best is None or cost.seconds < best[1].seconds * (1 - 1e-9):
            best = (m, cost)
    assert best is not None
    return best
