"""Every schedule-tree mark polycomp uses, in one place.

A mark's isl id is ``<kind>`` or ``<kind>:<n>`` (``kernel:0``, ``tile:block:1``): a
declared kind (the constants below; a kind may itself contain a ``:``, as
``tile:block``), then, for marks that carry data, ``n``, the index of the mark's payload
in typed compile state (``state.slot(...)`` of the area that placed it, e.g.
``gpu_kernels(state).launches[n]`` for ``kernel:<n>``).  A mark's name is never a string
to parse into fields: passes build and read marks only through this module —
:func:`make` builds one, :func:`name_of` reads a node's, :func:`is_kind` tests a name or
node, :func:`index_of` reads the payload index (on a tree node), :func:`kernel_of`
finds the kernel a node belongs to.  Lowering turns a mark into
``AttrStmt(key=<kind>, value=<the rest>)`` (:func:`split`: ``tile:block:1`` becomes
``tile:block`` / ``1``), which the target IR passes match on (:func:`attr_index` reads
``n`` back).  The few IR attributes that IR passes add themselves (no tree mark) are
declared at the end.

| kind | placed by | meaning (payload) |
|------|-----------|---------|
| ``backbone:<n>`` | pattern schedule, C-nest grouping | a fusion group's subtree (``backbones(state).items[n]``: its operator class) |
| ``prologue`` | pattern schedule | the group's prologue stages (e.g. padding) |
| ``tile:block:<k>`` / ``tile:point`` / ``tile:reduce`` | GPU tiling | block band of group k (``gpu_kernels(state).tile_configs[k]``), point band, K-tile band |
| ``kernel:<n>`` | GPU mapping, baseline, Tensor Core mapping | the subtree that is CUDA kernel n (``gpu_kernels(state).launches[n]``) |
| ``gpu_blocks:<k>`` / ``gpu_threads:<k>`` | baseline mapping | kernel k's loops mapped to blocks / threads (``gpu_kernels(state).baseline[k]``) |
| ``copy:<statement>`` | promotion | a promotion copy's loop nest (the name of the copy statement it schedules) |
| ``tc:block:<g>`` / ``tc:frag:<g>`` / ``tc:mma:<g>`` / ``pipeline:<g>`` | Tensor Core tiling | warp tiles, fragments, mma region, cp.async pipeline of group g (``gpu_kernels(state).tc_plans[g]``; on sm_90a the ``wgmma`` plan: ``pipeline`` is its mbarrier ring of TMA stages) |
| ``tc:persistent:<g>`` | Tensor Core mapping (sm_90a) | the block band below is the tile loop nest of a persistent kernel: its iterations are dealt over the grid (``gpu_kernels(state).tc_plans[g]``) |
| ``cpu_parallel`` | CPU passes | the outermost parallel loop of a nest (OpenMP) |
| ``cpu_wavefront`` | CPU stencil time tiling | the band below runs tiles by wavefronts: its first member (the wavefront) is sequential, the loop of its second member runs the wavefront's tiles in parallel (OpenMP) when it is coincident |
| ``cpu_stencil_points`` | CPU stencil time tiling (option ``stencil_jam``) | the band below is a time tile's point band ``(t, y_1 .. y_{D-1})``, fully permutable (every dependence has non-negative distances on all its members), ``t`` its first member, and below it one innermost loop shared by the statements: the IR pass ``stencil-jam`` (:mod:`polycomp.hw.cpu.jam`) may run steps ``t`` and ``t + 1`` together (no payload) |
| ``cpu_row_ranges:<n>`` | ``scop-gemm`` (symbolic rows, several threads) | the subtree runs once per *row range* ``[lo, hi)`` (isl parameters of the subtree's filter), the ranges balanced over the threads at run time: the CPU IR pass :mod:`polycomp.hw.cpu.row_ranges` makes it a parallel loop binding ``lo`` and ``hi`` (``cpu_row_ranges(state).ranges[n]``, :mod:`polycomp.scheduler.cpu.state`) |
| ``cpu_prefetch_rows`` | ``scop-symm`` (AVX2 fp64, phase 2) | the first loop below runs over rows of its outputs, each row's part a short segment of a long row: the IR pass ``prefetch-marked-rows`` (:mod:`polycomp.hw.cpu.prefetch`) makes its vector loops prefetch, for writing, what they store two rows on (no payload) |
| ``cpu_microkernel`` | CPU backbone tiling | the register-tile loop nest of the GEMM micro-kernel |
| ``cpu_microkernel:<n>`` | CPU backbone tiling | the same on a dot-product unit (bf16 ``vdpbf16ps``, int8 ``vpdpbusd``); ``cpu_microkernels(state).dots[n]`` (:mod:`polycomp.scheduler.cpu.state`) is its typed payload |
| ``cpu_pack_request:<n>`` / ``cpu_pack:<n>`` | CPU backbone tiling / packing | operand packing (``promotion_state(state).pack_requests[n]`` / ``.packs[n]``) |
| ``npu_cube:<n>`` | NPU mapping, cube tiling | a matmul stage on the cube (above its subtree; after tiling, above the 16x16x16 products of an L0 step); ``npu_plans(state).cubes[n]``: stage, tiles, epilogue |
| ``npu_pingpong:<n>`` | NPU cube tiling | the loop below rotates ping-pong (double) buffers; ``npu_plans(state).pingpongs[n]``: level, copies |
| ``npu_conv:<n>`` | NPU mapping | a convolution as implicit GEMM on the cube; ``npu_plans(state).convs[n]`` |
| ``npu_vector:<n>`` | NPU mapping | stages of vector program n; ``npu_plans(state).vectors[n]``: dimension roles |
| ``npu_phases:<n>`` | NPU mapping | a kernel of phases joined by GM workspaces; ``npu_plans(state).phases[n]`` |
| ``npu_chain:<n>`` | NPU chain fusion | a fused chain program; ``npu_plans(state).chains[n]``: tiles, buffer use |
| ``chain_fused:<n>`` | chain fusion, CPU (``scheduler/chain/program.py``) | the fused program of a chain of two contractions (``chain_plans(state).programs[n]``); the NPU chain pass's tree (``tree.fused_tree``) carries a plain ``chain_fused`` mark (no payload) above its ``npu_chain:<n>`` |
| ``conv_chain_fused:<n>`` | conv-chain fusion, CPU (``scheduler/chain/conv_program.py``) | the fused program of two convolutions (``chain_plans(state).programs[n]``) |
| ``cpu_local:<n>`` | chain fusion (CPU) | temporaries private to the subtree, stored in per-thread tile buffers (``local_tiles(state).records[n]``) |
| ``chain_step:<n>`` | CUDA chain fusion | a block-level micro-kernel of a fused chain's kernel (``chain_program(state).steps[n]``: its role and statements) |
| ``chain_ring:<n>`` | CUDA chain fusion | the ``l`` loop below streams its tiles through a ring of shared buffers (``chain_program(state).rings[n]``) |
| ``row_vector:<n>`` | row-reduction mapping | the loop below runs over consecutive columns accessed as one aligned vector (``row_kernels(state).vectors[n]``, :mod:`polycomp.scheduler.gpu.rowstate`) |

A fused chain's ``kernel:<n>`` (CUDA) indexes ``chain_program(state).kernels[n]``
(:mod:`polycomp.scheduler.chain.cuda_tree`); ``npu_plans``:
:func:`polycomp.scheduler.npu.plan.npu_plans`.
"""
from __future__ import annotations

import islpy as isl

TILE = "tile"                  # any tiling mark
BACKBONE = "backbone"
PROLOGUE = "prologue"
TILE_BLOCK = "tile:block"
TILE_POINT = "tile:point"
TILE_REDUCE = "tile:reduce"
KERNEL = "kernel"
GPU_BLOCKS = "gpu_blocks"
GPU_THREADS = "gpu_threads"
COPY = "copy"
TC_BLOCK = "tc:block"
TC_FRAG = "tc:frag"
TC_MMA = "tc:mma"
TC_PERSISTENT = "tc:persistent"
PIPELINE = "pipeline"
CPU_PARALLEL = "cpu_parallel"
CPU_WAVEFRONT = "cpu_wavefront"
CPU_MICROKERNEL = "cpu_microkernel"
CPU_PACK_REQUEST = "cpu_pack_request"
CPU_PACK = "cpu_pack"
CPU_ROW_RANGES = "cpu_row_ranges"
CPU_STENCIL_POINTS = "cpu_stencil_points"
CPU_PREFETCH_ROWS = "cpu_prefetch_rows"
NPU_CUBE = "npu_cube"
NPU_PINGPONG = "npu_pingpong"
CHAIN_STEP = "chain_step"
CHAIN_RING = "chain_ring"
NPU_CONV = "npu_conv"
NPU_VECTOR = "npu_vector"
NPU_PHASES = "npu_phases"
NPU_CHAIN = "npu_chain"
ROW_VECTOR = "row_vector"
CHAIN_FUSED = "chain_fused"
CONV_CHAIN_FUSED = "conv_chain_fused"
CPU_LOCAL = "cpu_local"

#: every declared mark kind, longest first (how :func:`split` finds a name's kind)
KINDS = tuple(sorted((BACKBONE, PROLOGUE, TILE_BLOCK, TILE_POINT, TILE_REDUCE, KERNEL,
                      GPU_BLOCKS, GPU_THREADS, COPY, TC_BLOCK, TC_FRAG, TC_MMA, TC_PERSISTENT,
                      PIPELINE, CPU_PARALLEL, CPU_WAVEFRONT, CPU_MICROKERNEL, CPU_PACK_REQUEST,
                      CPU_PACK, NPU_CUBE, NPU_PINGPONG, NPU_CONV, NPU_VECTOR, NPU_PHASES,
                      NPU_CHAIN, CHAIN_STEP, CHAIN_RING, ROW_VECTOR, CHAIN_FUSED,
                      CONV_CHAIN_FUSED, CPU_LOCAL, CPU_ROW_RANGES,
                      CPU_STENCIL_POINTS, CPU_PREFETCH_ROWS), key=len, reverse=True))

# IR attributes that IR passes add (no schedule-tree mark):
#: the tail of a vectorised loop, ``AttrStmt(VECTOR_MASK, (count, lanes))``
#: (lowering/vectorize.py, the CPU micro-kernel; the vector printer masks its stores)
VECTOR_MASK = "vector_mask"
#: a Tensor Core K step's operand-tile copies, ``AttrStmt(TC_LOAD, "<kernel>")``
#: (hw/cuda/tensorize.py; hw/cuda/async_pipeline.py pipelines them)
TC_LOAD = "tc_load"
#: a rewritten ``tc:frag`` region, ``AttrStmt(TC_FRAGMENT, "<statement>")``
#: (hw/cuda/tensorize.py)
TC_FRAGMENT = "tc_frag"
#: warp-specialised roles, ``AttrStmt(WARP_ROLES, "<kernel>", Block[IfThenElse(role_i,
#: body_i), ...])``: disjoint thread sets that run concurrently and synchronise through
#: mbarriers only (hw/cuda/hopper.py; the simulator runs each role as a coroutine)
WARP_ROLES = "warp_roles"


def make(kind: str, *args: object) -> isl.Id:
    """The isl id of a mark: ``kind`` or ``kind:arg0:arg1...``."""
    return isl.Id(":".join([kind, *(str(a) for a in args)]))


def name_of(node: isl.ScheduleNode) -> str | None:
    """The mark name of ``node``, or None when it is no mark node."""
    if node.get_type() != isl.schedule_node_type.mark:
        return None
    return node.mark_get_id().get_name()


def is_kind(name_or_node: str | isl.ScheduleNode | None, kind: str) -> bool:
    """Is this mark (a name or a node) of ``kind`` (``kind`` itself or ``kind:...``)?"""
    name = name_or_node if isinstance(name_or_node, str) or name_or_node is None \
        else name_of(name_or_node)
    return name is not None and (name == kind or name.startswith(kind + ":"))


def split(name: str) -> tuple[str, str]:
    """``(kind, rest)`` of a mark's name: the longest declared kind the name is or starts
    with (then ``:``), and what follows (``tile:block:1`` -> ``("tile:block", "1")``).
    A name of no declared kind splits at its first ``:`` (marks other areas still
    declare in their own modules)."""
    for kind in KINDS:
        if name == kind or name.startswith(kind + ":"):
            return kind, name[len(kind) + 1:]
    kind, _, rest = name.partition(":")
    return kind, rest


def argument(name_or_node: str | isl.ScheduleNode, kind: str) -> str:
    """What follows ``kind:`` in the mark's name ("" for a bare ``kind``)."""
    name = name_or_node if isinstance(name_or_node, str) else name_of(name_or_node)
    assert name is not None and is_kind(name, kind), (name, kind)
    return name[len(kind) + 1:]


def index_of(name_or_node: str | isl.ScheduleNode, kind: str) -> int:
    """``n`` of a ``<kind>:<n>`` mark: the index of the mark's payload in the typed state
    of the area that placed it (``state.slot(...)``), as ``kernel:<n>`` indexes the GPU
    kernel facts.  Payloads are typed objects there, never parsed from the mark's name."""
    return int(argument(name_or_node, kind))


def attr_index(attr, kind: str) -> int | None:
    """``n`` of the IR attribute a ``<kind>:<n>`` mark became (``AttrStmt(kind, "n")``,
    see :func:`split`); None when ``attr`` is another attribute."""
    if getattr(attr, "key", None) != kind:
        return None
    return int(attr.value)


def kernel_number(name_or_node: str | isl.ScheduleNode | None) -> int | None:
    """``n`` of a ``kernel:<n>`` mark; None for anything else."""
    if name_or_node is None or not is_kind(name_or_node, KERNEL):
        return None
    return index_of(name_or_node, KERNEL)


def kernel_of(node: isl.ScheduleNode) -> int | None:
    """The number of the ``kernel:<n>`` mark above ``node`` (None outside kernels)."""
    x = node
    while x.has_parent():
        x = x.parent()
        n = kernel_number(x)
        if n is not None:
            return n
    return None
