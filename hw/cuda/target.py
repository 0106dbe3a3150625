"""The CUDA targets as data: memory hierarchy, compute units and SM parameters.

``cuda`` (alias ``cuda-sm80``) is an A100-class sm_80 device, ``cuda-sm90`` an
H100-class sm_90 one.  Levels: ``global`` -> ``shared`` (per block; 48 KiB static,
more by opt-in) -> ``registers`` (per thread; warp-wide ``mma`` fragments are a
register layout).  Copies global -> shared are made by ``ld/st`` dealt over the block's
threads or by ``cp.async`` (Tensor Core pipelines) and published by ``__syncthreads()``
(``cp.async.wait_group`` first for the asynchronous form); shared -> registers by
loads or ``ldmatrix`` (warp-synchronous).
"""
from __future__ import annotations

from polycomp.errors import TargetError
from polycomp.hw.memory import ComputeUnit, CopyRule, MemoryHierarchy, MemoryLevel
from polycomp.hw.target import CUDA_MAX_THREADS_PER_BLOCK, CudaParams, Target

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


#: target name -> (SM version, opt-in shared memory per block, SMs: A100, H100 SXM)
ARCHITECTURES = {"cuda": (80, 163 * 1024, 108), "cuda-sm90": (90, 227 * 1024, 132)}


def cuda_target(name: str) -> Target:
    if name == "cuda-sm80":
        name = "cuda"
    if name not in ARCHITECTURES:
        raise TargetError(f"no CUDA target {name!r}; CUDA targets: {', '.join(ARCHITECTURES)}")
    sm, optin, sms = ARCHITECTURES[name]
    return Target(name=name, kind="cuda", memory=cuda_hierarchy(), units=cuda_units(sm),
                  cuda=CudaParams(sm=sm, shared_memory_optin=optin, sms=sms,
                                  registers_per_thread=REGISTERS_PER_THREAD,
                                  max_threads_per_block=MAX_THREADS_PER_BLOCK))
