"""The typed records lowering consumes: applied promotions and packed operands, kept in
the promotion engine's slot of the compile state, :class:`PromotionState`
(``promotion_state(state)``).

* :class:`Promotion` — one group promoted to a local buffer on a GPU (shared memory,
  registers, Tensor Core staging buffers, privatised warp reductions), kept in
  ``promotion_state(state).promotions``; :mod:`polycomp.hw.cuda.promoted` rewrites the
  promoted statements and builds the copy statements from it.
* :class:`PackRequest` / :class:`PackedOperand` — CPU packing: a request placed by
  the backbone tiling (``promotion_state(state).pack_requests``, mark
  ``cpu_pack_request:<n>``) and the footprint the pack pass computed for it
  (``promotion_state(state).packs``, mark ``cpu_pack:<n>``), which
  :mod:`polycomp.hw.cpu.pack` realises.  Marks carry only the index.
* :class:`PrepackedInput` — an input the kernel reads in a packed layout (option
  ``prepack``): what the caller must pack once (:func:`prepacked_inputs`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import islpy as isl

from polycomp import ir
from polycomp.errors import PolycompInternalError
from polycomp.scheduler.promotion.footprint import Box, Layout, ScopedFootprint

if TYPE_CHECKING:  # pragma: no cover
    from polycomp.state import CompileState

CopyKind = Literal["copy_in", "copy_out", "sync", "warp_allreduce", "store_lane0",
                   "copy_in_lane0"]


@dataclass(frozen=True)
class CopyStmt:
    """An extension statement of a promotion: its ``kind`` and the number of prefix
    coordinates ``n_prefix`` that precede the copied element's coordinates in its
    domain (``copy[p, a]``)."""
    kind: CopyKind
    n_prefix: int


@dataclass(frozen=True)
class WarpReduction:
    """CUDA only — a reduction privatised per thread (:mod:`polycomp.scheduler.gpu.rowreduce`):
    the threads' partial results are combined with ``combine`` (``+``, ``max``, ``min``)
    by a shuffle butterfly over ``width`` lanes (a power of two; below 32 the member
    mask is the row's segment of the warp, found from the block-row parameter
    ``row_param``), for ``warps > 1`` then through the shared array ``scratch`` (one
    element per warp) and a butterfly over the warps; thread ``lane_param == 0`` stores
    the result.  ``online_max``: this is the sum of an online max-and-sum pair
    (:mod:`polycomp.scheduler.gpu.rowonline`), combined as a pair with that running
    maximum (``online_scratch``: the maximum's shared array)."""
    combine: str
    lane_param: str
    width: int = 32
    row_param: str = ""
    warps: int = 1
    scratch: ir.Buffer | None = None
    online_max: ir.Buffer | None = None
    online_scratch: ir.Buffer | None = None


@dataclass(eq=False)
class Promotion:
    """One promoted reference group: ``array`` is read/written through ``local``.

    ``offsets[stmt]`` are isl Affs (on that statement's domain space) of the box
    offset at that instance; an access ``array[idx]`` becomes
    ``local[(idx - offset) // stride]``.  ``copies`` maps extension statement names to
    their :class:`CopyStmt`.  ``producer``: a prologue stage evaluated by the copy-in
    instead of loading ``array`` (never stored).  ``level``: the memory level of the
    target's hierarchy (:mod:`polycomp.hw.memory`) that holds ``local`` (``"shared"``,
    ``"registers"``), set by the pass that promoted the group ("" for records made
    outside the engine).  ``reason``: why it was promoted, in words (for remarks).
    ``warp``: the CUDA-only part of a privatised warp reduction (None otherwise)."""
    array: ir.Buffer
    local: ir.Buffer
    kernel: int
    box: Box | None
    offsets: dict[str, list[isl.Aff]] = field(default_factory=dict)
    copies: dict[str, CopyStmt] = field(default_factory=dict)
    producer: object = None
    reason: str = ""
    level: str = ""
    warp: WarpReduction | None = None


@dataclass(frozen=True, eq=False)
class PackRequest:
    """Pack ``array`` below the request's mark into panels of ``width`` along its
    dimension ``dim``, a copy meant for memory level ``level`` of the target.

    For the dot-product units (see :class:`~polycomp.scheduler.promotion.footprint.Layout`):
    ``group > 1`` splits dimension ``group_dim`` into groups of that many consecutive
    elements, innermost (the padding up to a whole group, and the lanes of the last
    panel beyond the array, are zero); ``offset`` (int8 operands of a ``u8 x s8`` unit:
    128) stores each element ``x`` as the byte of ``x + offset`` read unsigned (``x ^
    -128`` for 128), the reads below the mark decoding it; ``compensate`` (the other
    operand of such a product: 128) rewrites every product ``x * y`` below the mark
    whose ``y`` reads the array into ``(x + compensate) * y`` and adds ``-compensate *
    (sum of the packed ``y`` over the reduction)`` to the product's output once per
    micro-kernel (column sums formed while packing), which leaves every result the
    same.

    ``reference`` (an :class:`~polycomp.model.Access` tag, empty for all) restricts the
    request to that one read reference of the array: the other reads of the array
    below the mark keep reading it (syrk's ``A[i][k]`` and ``A[j][k]``, each packed in
    its own panels)."""
    array: ir.Buffer
    dim: int
    width: int
    level: str
    group_dim: int = -1
    group: int = 1
    offset: int = 0
    compensate: int = 0
    reference: str = ""
    #: the copy of a 2-d array whose contiguous dimension is the panel (the row-block
    #: copy) prefetches, for reading, at its first panel the row this many rows on
    #: (its lines across the box; 0: none): a box of rows far apart in memory, which
    #: the hardware prefetchers follow late (:func:`.scop_symm.pack_phase1_b`)
    prefetch_rows: int = 0
    #: the array is a kernel input the caller hands in already packed in
    #: ``Layout.packed_panel(dim, width)`` (or ``Layout.packed_tiles``) over its whole
    #: extent (option ``prepack``):
    #: nothing is copied, the reads below the mark read the input in that layout
    prepacked: bool = False
    #: with ``prepacked``: the whole array in cache tiles ``(T_other, T_dim)`` (the GEMM's
    #: ``KC x NC`` blocks, :meth:`Layout.packed_tiles`), () for plain panels
    tiles: tuple[int, ...] = ()
    #: the array's other dimensions in this order inside a panel
    #: (:meth:`Layout.packed_panel` ``order``; a convolution's weights in the order its
    #: micro-kernel reads them), () for their own order
    order: tuple[int, ...] = ()
    #: no copy pass: the first iteration of the row-tile loop below the mark reads the
    #: array where it lies and fills the packed block as it goes, the later iterations
    #: read the packed block (a GEMM's ``Y`` with few rows,
    #: :func:`polycomp.scheduler.cpu.backbone_tile.fill_y_in_first_row`; realised by
    #: :meth:`polycomp.hw.cpu.pack._Packer.fill`, which falls back to the copy where the
    #: body is not of that form)
    fill: bool = False
    #: with ``fill``: the array comes from memory (above a share of L3): every register
    #: row tile's ``k`` loop also prefetches lines of the *next* block of the array, so
    #: the stream overlaps the FMAs (:func:`polycomp.hw.cpu.pack.fill_first_row`'s
    #: ``stream``; :func:`polycomp.scheduler.cpu.backbone_tile.stream_y_fill`)
    stream: bool = False
    #: with ``stream``: elements past the first of its line each prefetch aims at
    #: (:func:`polycomp.scheduler.cpu.backbone_tile.stream_aim`; 0: the line itself)
    stream_aim: int = 0


@dataclass(frozen=True)
class PrepackedInput:
    """A kernel input read in a packed layout (a GEMM's weight operand under option
    ``prepack``): the caller passes ``layout.pack(a)`` (shape :attr:`packed_shape`)
    for the array ``a`` of shape ``shape`` instead of ``a``, once per value of ``a``
    (a graph constant: at compile time).  ``name`` is the kernel's argument name."""
    name: str
    shape: tuple[int, ...]
    layout: Layout

    @property
    def packed_shape(self) -> tuple[int, ...]:
        return self.layout.shape(self.shape)

    def pack(self, a):
        """``a`` (shape :attr:`shape`) in the packed layout the kernel reads."""
        if tuple(a.shape) != self.shape:
            raise PolycompInternalError(f"pre-packed input {self.name!r}: shape {self.shape} "
                                        f"expected, got {tuple(a.shape)}")
        return self.layout.pack(a)

    def unpack(self, packed):
        """The array (shape :attr:`shape`) that :meth:`pack` made ``packed`` from."""
        return self.layout.unpack(packed, self.shape)


@dataclass(eq=False)
class PackedOperand:
    """A packing the pack pass decided: ``footprint`` (group of the array's reads below
    the mark, box with piecewise offsets ``origin(p)``, packed-panel layout) for a copy
    to ``level``.  Its index in ``PromotionState.packs`` is the mark's ``cpu_pack:<n>``."""
    footprint: ScopedFootprint
    level: str
    offset: int = 0          # see PackRequest
    compensate: int = 0      # see PackRequest
    #: for a request of one reference: the buffer (the array's name, a distinct object)
    #: that reference reads in the lowered IR, so the IR packing redirects exactly its
    #: loads (:meth:`polycomp.hw.cpu.backend.CpuBackend.lowering_statements`)
    alias: ir.Buffer | None = None
    reference: str = ""
    prepacked: bool = False  # see PackRequest: no copy, the input is read in the layout
    fill: bool = False       # see PackRequest: filled by the first row tile's pass
    stream: bool = False     # see PackRequest: the fill prefetches the next block
    stream_aim: int = 0      # see PackRequest: elements past each prefetched line's first
    prefetch_rows: int = 0   # see PackRequest: the copy prefetches the row this many on

    @property
    def array(self) -> str:
        return self.footprint.group.name


@dataclass(eq=False)
class PromotionState:
    """The promotion engine's typed state of one compile (a slot of the compile state):
    the promotions applied (GPU), and the CPU packing requests and packed operands
    (indexed by the ``cpu_pack_request:<n>`` / ``cpu_pack:<n>`` marks)."""
    promotions: list[Promotion] = field(default_factory=list)
    pack_requests: list[PackRequest] = field(default_factory=list)
    packs: list[PackedOperand] = field(default_factory=list)
    #: the inputs read pre-packed (option ``prepack``), what a caller must pack
    prepacked: list[PrepackedInput] = field(default_factory=list)


def promotion_state(state: CompileState) -> PromotionState:
    """The promotion engine's state of ``state``'s compile."""
    return state.slot(PromotionState)


def prepacked_inputs(state: CompileState | None) -> list[PrepackedInput]:
    """The inputs a compile reads pre-packed (``ck.state`` of a compiled kernel; none
    without option ``prepack`` or for a kernel compiled elsewhere)."""
    return [] if state is None else list(promotion_state(state).prepacked)
