"""The CPU pipeline's typed compile state: the payloads of ``cpu_microkernel:<n>`` and
``cpu_parallel:<n>`` marks (and of ``cpu_row_ranges:<n>`` marks, :class:`RowRanges`, at
the end).

A bare ``cpu_microkernel`` mark (float32/float64 GEMMs and convolutions, on the FMA
unit) carries nothing: the micro-kernel pass reads the element type from the IR.  A
GEMM tiled for a *dot-product* unit (``vdpbf16ps``, ``vpdpbusd``: each accumulator
lane adds the products of a group of ``k`` values) is marked ``cpu_microkernel:<n>``
by :mod:`polycomp.scheduler.cpu.backbone_tile`, and ``<n>`` indexes the
:class:`DotTile` it recorded here (``cpu_microkernels(state).dots[n]``); the IR
micro-kernel pass (:mod:`polycomp.hw.cpu.microkernel`) reads it from there.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from polycomp.state import CompileState

__all__ = ["CpuMicroKernels", "CpuParallelLoops", "CpuRowRanges", "DotTile", "ParallelLoop",
           "RowRanges", "cpu_microkernels", "cpu_parallel_loops", "cpu_row_ranges"]


@dataclass(frozen=True)
class DotTile:
    """The register tile of one product on a dot-product unit.

    ``update``: the product's update statement; ``unit``: the unit's name (the target's
    :class:`~polycomp.hw.memory.ComputeUnit`); ``operands``: the dtypes the unit
    multiplies (broadcast operand ``X``, vector operand ``Y``); ``inputs``: the arrays'
    element dtype; ``accumulator``: the lanes' dtype (the product's output dtype);
    ``lanes`` accumulator lanes per vector and ``group`` values of ``k`` per lane (the
    unit's shape); ``offset``: what ``X``'s packing added to each element (128 for
    int8 on a ``u8 x s8`` unit, 0 otherwise); ``mr`` x ``nr``: the register block
    (``nr`` a multiple of ``lanes``)."""
    update: str
    unit: str
    operands: tuple[str, str]
    inputs: str
    accumulator: str
    lanes: int
    group: int
    offset: int
    mr: int
    nr: int
    x_array: str
    y_array: str


@dataclass(eq=False)
class CpuMicroKernels:
    """The dot-product tiles of a compile, indexed by their marks' ``<n>``; and the
    *chain temporaries*: arrays (a backbone's output ``C``, an epilogue chain's
    intermediate outputs) that are kernel temporaries read by nothing but their
    backbone's updates and the chain's statements at their own point -- once the
    chain runs on the accumulators their values need not be stored after the last
    reduction tile (``cpu-backbone-tile`` records them, the micro-kernel pass drops
    those stores)."""
    dots: list[DotTile] = field(default_factory=list)
    chain_temporaries: set[str] = field(default_factory=set)
    #: per backbone output ``C`` with a chain: the chain's outputs in order (its
    #: temporaries are dead only where the whole chain runs on the accumulators)
    chains: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def add(self, tile: DotTile) -> int:
        """Record ``tile``; its index (the mark's ``<n>``)."""
        self.dots.append(tile)
        return len(self.dots) - 1


def cpu_microkernels(state: CompileState) -> CpuMicroKernels:
    """The micro-kernel payloads of ``state``'s compile."""
    return state.slot(CpuMicroKernels)


@dataclass(frozen=True)
class ParallelLoop:
    """How the loop below a ``cpu_parallel:<n>`` mark is shared by the threads.
    ``dynamic``: one iteration at a time to whichever thread is free (OpenMP
    ``schedule(dynamic)``) instead of one contiguous chunk per thread: for a loop of a
    few long iterations (a GEMM's row tiles) a thread that starts late (a passive
    OpenMP worker woken from sleep, a core taken by another process) takes fewer of
    them, and the call does not wait for its whole share.  Only for loops whose
    iterations any thread may run: per-thread buffers are rewritten by each iteration
    before they are read (the packed panels)."""
    dynamic: bool


@dataclass(eq=False)
class CpuParallelLoops:
    """The payloads of a compile's ``cpu_parallel:<n>`` marks, indexed by ``<n>``."""
    loops: list[ParallelLoop] = field(default_factory=list)

    def add(self, loop: ParallelLoop) -> int:
        """Record ``loop``; its index (the mark's ``<n>``)."""
        self.loops.append(loop)
        return len(self.loops) - 1


def cpu_parallel_loops(state: CompileState) -> CpuParallelLoops:
    """The ``cpu_parallel:<n>`` payloads of ``state``'s compile."""
    return state.slot(CpuParallelLoops)


@dataclass(frozen=True, eq=False)
class RowRanges:
    """The payload of a ``cpu_row_ranges:<n>`` mark (:mod:`polycomp.scheduler.cpu.
    scop_gemm`): the subtree below is written for the rows ``lo <= i < hi`` of one
    *range* (``lo``, ``hi``: the names of two isl parameters of its filter, which also
    bounds ``hi - lo <= mc``), and runs once per range.  With ``first`` / ``last`` the
    product's first and last row (isl PwAffs of the kernel's parameters), ``n = last -
    first + 1`` rows, ``P = ceil(n / mr)`` register rows and ``U`` ranges, range ``u``
    is ``[first + mr*floor(u P / U), min(first + mr*floor((u + 1) P / U), last + 1))``,
    ``U = min(P, threads * ceil(n / (threads * mc)))`` (at least 1): a multiple of the
    threads, so OpenMP's static schedule gives every thread as many ranges, each of at
    most ``mc`` rows, the threads' row counts within ``mr`` rows of each other.  A
    product too small to share (``n * prod(inner)`` multiply-adds, ``inner`` the
    extents of the other loops, below ``min_work`` per range) takes fewer ranges, ``U
    <= n * prod(inner) / min_work``: one, on one thread, for PolyBench's SMALL gemm."""
    lo: str
    hi: str
    first: object        # isl.PwAff on the kernel's parameters
    last: object
    mr: int
    mc: int
    threads: int
    inner: tuple = ()    # isl.PwAffs on the kernel's parameters
    min_work: int = 1


@dataclass(eq=False)
class CpuRowRanges:
    """The ``cpu_row_ranges:<n>`` payloads of a compile, indexed by ``n``."""
    ranges: list[RowRanges] = field(default_factory=list)

    def add(self, r: RowRanges) -> int:
        """Record ``r``; its index (the mark's ``<n>``)."""
        self.ranges.append(r)
        return len(self.ranges) - 1


def cpu_row_ranges(state: CompileState) -> CpuRowRanges:
    """The row-range payloads of ``state``'s compile."""
    return state.slot(CpuRowRanges)
