"""Every schedule-tree mark polycomp uses, in one place.

A mark's isl id is ``<kind>`` or ``<kind>:<argument>`` (``kernel:0``,
``backbone:contraction``, ``tile:block:1``).  Lowering turns a mark into an
``AttrStmt(key=<first part>, value=<the rest>)`` (``kernel`` / ``0``,
``tile`` / ``block:1``), which the target IR passes match on.  Passes build and read
marks only through this module: :func:`make` builds one, :func:`name_of` reads a node's,
:func:`is_kind` tests a name or node, :func:`argument` returns what follows the kind,
:func:`index_of` / :func:`attr_index` read the payload index of a ``<kind>:<n>`` mark (on
a tree node / on the IR attribute it became), :func:`kernel_of` finds the kernel a node
belongs to.

Data a mark carries lives in typed compile state (``state.slot(...)`` of the area that
placed it), in a list the mark's ``<n>`` indexes; a mark's name is never a string to
parse into fields.

| kind | placed by | meaning |
|------|-----------|---------|
| ``backbone:<class>`` | pattern schedule | a fusion group's subtree, by operator class |
| ``prologue`` | pattern schedule | the group's prologue stages (e.g. padding) |
| ``tile:block:<k>`` / ``tile:point`` / ``tile:reduce`` | GPU tiling | block band of group k, point band, K-tile band |
| ``kernel:<n>`` | GPU mapping, baseline, Tensor Core mapping | the subtree that is CUDA kernel n |
| ``gpu_blocks:<k>`` / ``gpu_threads:<k>`` | baseline mapping | kernel k's loops mapped to blocks / threads (``gpu_kernels(state).baseline[k]``) |
| ``copy:<statement>`` | promotion | a promotion copy's loop nest |
| ``tc:block`` / ``tc:frag`` / ``tc:mma`` / ``pipeline:<stages>`` | Tensor Core tiling | warp tiles, fragments, mma region, cp.async pipeline |
| ``cpu_parallel`` | CPU passes | the outermost parallel loop of a nest (OpenMP) |
| ``cpu_microkernel`` | CPU backbone tiling | the register-tile loop nest of the GEMM micro-kernel |
| ``cpu_pack_request:..`` / ``cpu_pack:..`` | CPU backbone tiling / packing | operand packing |
| ``npu_cube:<m0>:<n0>:<k0>:<kL1>`` | NPU cube tiling | the 16x16x16 cube instructions of an L0 step and the tiling the NPU program is built with |
| ``npu_pingpong:<level>`` | NPU cube tiling | the loop below runs over ping-pong (double) buffers of that level |
| ``chain_fused:<n>`` | chain fusion, CPU (``scheduler/chain/program.py``) | the fused program of a chain of two contractions (``chain_plans(state).programs[n]``); the CUDA and NPU chain passes mark their trees ``chain_fused:<TM>x<TL>`` (``tree.fused_tree``), which their code generation replaces |
| ``conv_chain_fused:<n>`` | conv-chain fusion, CPU (``scheduler/chain/conv_program.py``) | the fused program of two convolutions (``chain_plans(state).programs[n]``) |
| ``cpu_local:<n>`` | chain fusion (CPU) | temporaries private to the subtree, stored in per-thread tile buffers (``local_tiles(state).records[n]``) |
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
TC = "tc"                      # the IR key of the tc:* marks
TC_BLOCK = "tc:block"
TC_FRAG = "tc:frag"
TC_MMA = "tc:mma"
PIPELINE = "pipeline"
CPU_PARALLEL = "cpu_parallel"
CPU_MICROKERNEL = "cpu_microkernel"
CPU_PACK_REQUEST = "cpu_pack_request"
CPU_PACK = "cpu_pack"
NPU_CUBE = "npu_cube"
NPU_PINGPONG = "npu_pingpong"
CHAIN_FUSED = "chain_fused"
CONV_CHAIN_FUSED = "conv_chain_fused"
CPU_LOCAL = "cpu_local"


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
    """``n`` of the IR attribute a ``<kind>:<n>`` mark became (``AttrStmt(kind, "n")``);
    None when ``attr`` is another attribute."""
    if getattr(attr, "key", None) != kind:
        return None
    return int(attr.value)


def kernel_number(name_or_node: str | isl.ScheduleNode | None) -> int | None:
    """``n`` of a ``kernel:<n>`` mark; None for anything else."""
    if not is_kind(name_or_node, KERNEL):
        return None
    return int(argument(name_or_node, KERNEL))  # type: ignore[arg-type]


def kernel_of(node: isl.ScheduleNode) -> int | None:
    """The number of the ``kernel:<n>`` mark above ``node`` (None outside kernels)."""
    x = node
    while x.has_parent():
        x = x.parent()
        n = kernel_number(x)
        if n is not None:
            return n
    return None
