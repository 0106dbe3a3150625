"""The CUDA targets as data: memory hierarchy, compute units and SM parameters.

``cuda`` (alias ``cuda-sm80``) is an A100-class sm_80 device, ``cuda-sm90`` an
H100-class sm_90 one (both emit the sm_80 instruction set), ``cuda-sm90a`` (alias
``hopper``) an H100/H200 with the sm_90a feature set (:func:`hopper_hierarchy`,
:func:`hopper_units`: warpgroup ``wgmma``, the tensor memory accelerator, ``mbarrier``,
clusters, ``setmaxnreg``).  Levels: ``global`` -> ``shared`` (per block; 48 KiB static,
more by opt-in) -> ``registers`` (per thread; warp-wide ``mma`` fragments are a
register layout).  Copies global -> shared are made by ``ld/st`` dealt over the block's
threads or by ``cp.async`` (Tensor Core pipelines) and published by ``__syncthreads()``
(``cp.async.wait_group`` first for the asynchronous form); shared -> registers by
loads or ``ldmatrix`` (warp-synchronous).
"""
from __future__ import annotations

from polycomp.errors import TargetError
from polycomp.hw.memory import ComputeUnit, CopyRule, MemoryHierarchy, MemoryLevel, TensorCopy
from polycomp.hw.target import (
    CUDA_MAX_THREADS_PER_BLOCK,
    CUDA_WARPGROUP_SIZE,
    CudaParams,
    Target,
)

STATIC_SHARED = 48 * 1024          # static __shared__ per block (more by dynamic opt-in)
MAX_THREADS_PER_BLOCK = CUDA_MAX_THREADS_PER_BLOCK
REGISTERS_PER_THREAD = 255


def cuda_hierarchy() -> MemoryHierarchy:
    return MemoryHierarchy(
        levels=(
            MemoryLevel("global", "global", 0, 16, ("host", "grid"), "device memory"),
            MemoryLevel("shared", "shared", STATIC_SHARED, 16, ("block",),
                        "per block; larger by dynamic opt-in"),
            MemoryLevel("registers", "local", REGISTERS_PER_THREAD * 4, 4, ("thread", "warp"),
                        f"{REGISTERS_PER_THREAD} 32-bit registers per thread; mma fragments"),
        ),
        copies=(
            CopyRule("global", "shared", "ld.global/st.shared over the block's threads",
                     "__syncthreads()"),
            CopyRule("global", "shared", "cp.async 16 B, multi-stage pipeline",
                     "cp.async.wait_group + __syncthreads()", variant="async"),
            CopyRule("shared", "registers", "ld.shared / ldmatrix (warp)", ""),
            CopyRule("global", "registers", "ld.global", ""),
            CopyRule("registers", "global", "st.global", ""),
        ))


def cuda_units(sm: int) -> tuple[ComputeUnit, ...]:
    return (
        ComputeUnit("mma.sync", "matrix", (16, 8, 16), ("float16->float32", "bfloat16->float32"),
                    "per warp, m16n8k16"),
        ComputeUnit("CUDA core", "scalar", (1,), ("all",), "per thread; warp of 32"),
    )


#: the tensor memory accelerator of sm_90 (``cp.async.bulk.tensor``, tile mode)
TMA = TensorCopy(swizzles=(0, 32, 64, 128), max_rank=5, max_box=256, inner_multiple=16,
                 global_alignment=16, stride_multiple=16)
#: H100 SXM L2 (the H200 has 60 MiB; passes take the smaller)
HOPPER_L2 = 50 * 1024 * 1024
#: setmaxnreg: per-thread register counts a warpgroup may move to (min, max, step)
REGISTER_REALLOC = (24, 256, 8)
#: blocks of a portable thread-block cluster (16 with the non-portable opt-in)
MAX_CLUSTER = 8


def hopper_hierarchy() -> MemoryHierarchy:
    """The sm_90a hierarchy: ``global`` -> ``L2`` -> ``shared`` (per block, 227 KiB by
    dynamic opt-in; TMA writes it in box tiles with a 32/64/128-byte swizzle, zero fill
    out of bounds, completion on an ``mbarrier``) -> ``cluster shared`` (the shared
    memory of the blocks of a cluster: distributed shared memory) -> ``registers``
    (per thread; ``wgmma`` accumulators are a warpgroup-wide register layout)."""
    base = cuda_hierarchy()
    levels = list(base.levels)
    levels.insert(1, MemoryLevel("L2", "global", HOPPER_L2, 128, ("grid",),
                                 "device-wide cache (H100 SXM 50 MiB, H200 60 MiB)"))
    levels.insert(3, MemoryLevel("cluster_shared", "shared", MAX_CLUSTER * 227 * 1024, 16,
                                 ("cluster",),
                                 f"distributed shared memory: the shared memory of the up "
                                 f"to {MAX_CLUSTER} blocks of a thread-block cluster "
                                 f"(ld/st.shared::cluster, TMA multicast)"))
    copies = list(base.copies)
    copies.insert(2, CopyRule("global", "shared",
                              "cp.async.bulk.tensor tile mode (TMA): one thread issues a "
                              "box copy from a tensor map, 32/64/128-byte swizzle, zero "
                              "fill out of bounds",
                              "mbarrier expect_tx + complete_tx, try_wait.parity",
                              variant="tma", tensor=TMA))
    copies.insert(3, CopyRule("shared", "cluster_shared",
                              "st.shared::cluster / TMA multicast to the cluster's blocks",
                              "barrier.cluster / mbarrier (cluster scope)"))
    copies.insert(4, CopyRule("shared", "registers",
                              "wgmma shared-memory matrix descriptors (the TMA layout, "
                              "read by the Tensor Cores)",
                              "mbarrier try_wait (data), wgmma.fence", variant="wgmma"))
    return MemoryHierarchy(tuple(levels), tuple(copies))


def hopper_units() -> tuple[ComputeUnit, ...]:
    return (
        ComputeUnit("wgmma", "matrix", (64, 256, 16), ("float16->float32", "bfloat16->float32"),
                    "per warpgroup of 128 threads (4 aligned warps), m64nNk16 with N = 8..256 "
                    "in steps of 8; A and B from shared-memory descriptors, accumulators "
                    "in registers; wgmma.fence / commit_group / wait_group",
                    threads=CUDA_WARPGROUP_SIZE, n_values=tuple(range(8, 257, 8))),
        *cuda_units(90),
    )


#: target name -> (SM version, opt-in shared memory per block, SMs: A100, H100 SXM)
ARCHITECTURES = {"cuda": (80, 163 * 1024, 108), "cuda-sm90": (90, 227 * 1024, 132),
                 "cuda-sm90a": (90, 227 * 1024, 132)}
#: the targets with the sm_90a feature set
HOPPER_TARGETS = ("cuda-sm90a",)


def cuda_target(name: str) -> Target:
    if name == "cuda-sm80":
        name = "cuda"
    if name == "hopper":
        name = "cuda-sm90a"
    if name not in ARCHITECTURES:
        raise TargetError(f"no CUDA target {name!r}; CUDA targets: {', '.join(ARCHITECTURES)}")
    sm, optin, sms = ARCHITECTURES[name]
    if name in HOPPER_TARGETS:
        return Target(name=name, kind="cuda", memory=hopper_hierarchy(), units=hopper_units(),
                      features=("wgmma", "tma", "mbarrier", "clusters", "setmaxnreg"),
                      cuda=CudaParams(sm=sm, shared_memory_optin=optin, sms=sms,
                                      registers_per_thread=REGISTERS_PER_THREAD,
                                      max_threads_per_block=MAX_THREADS_PER_BLOCK,
                                      arch_suffix="a", max_cluster=MAX_CLUSTER,
                                      register_realloc=REGISTER_REALLOC))
    return Target(name=name, kind="cuda", memory=cuda_hierarchy(), units=cuda_units(sm),
                  cuda=CudaParams(sm=sm, shared_memory_optin=optin, sms=sms,
                                  registers_per_thread=REGISTERS_PER_THREAD,
                                  max_threads_per_block=MAX_THREADS_PER_BLOCK))
