"""Targets as data: a :class:`Target` is a name, a family (``kind``), a memory hierarchy,
compute units, features and the family's machine parameters.

Targets are made by the backends registered in :mod:`polycomp.hw.registry` (each
backend package under ``hw/`` declares its targets' hierarchies in its ``target.py``);
``get_target(name)`` asks the registry.  The pipelines that use a target live in the
backend packages.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from polycomp.hw.memory import ComputeUnit, MemoryHierarchy, MemoryLevel


@dataclass(frozen=True)
class CpuParams:
    """Machine parameters of a C target: vector width (0: scalar C), vector registers,
    FMA, the threads generated code runs with, and the L1 data cache's ways (sysfs
    ``ways_of_associativity``; 8 where sysfs has nothing)."""
    vector_bits: int = 0
    vector_registers: int = 16
    has_fma: bool = False
    threads: int = 1
    l1_ways: int = 8


CUDA_MAX_THREADS_PER_BLOCK = 1024   # every CUDA architecture's limit
CUDA_WARP_SIZE = 32                 # threads of a warp (and of a warp-level mma.sync)
CUDA_WARPGROUP_SIZE = 128           # threads of a warpgroup (sm_90a wgmma): 4 aligned warps


@dataclass(frozen=True)
class CudaParams:
    """Machine parameters of a CUDA target: the SM version and per-block limits
    (``shared_memory_optin``: the larger dynamic shared-memory limit a kernel may opt
    into).  ``arch_suffix`` ``"a"`` names the architecture-specific feature set
    (``sm_90a``: ``wgmma``, ``setmaxnreg``); ``max_cluster`` the blocks of a portable
    thread-block cluster (1: no clusters); ``register_realloc`` the ``(min, max, step)``
    per-thread register counts ``setmaxnreg`` may move a warpgroup to (empty: none)."""
    sm: int = 80
    shared_memory_optin: int = 0
    registers_per_thread: int = 255
    max_threads_per_block: int = CUDA_MAX_THREADS_PER_BLOCK
    warp_size: int = CUDA_WARP_SIZE
    sms: int = 108                     # streaming multiprocessors (A100: 108, H100: 132)
    arch_suffix: str = ""
    registers_per_sm: int = 65536
    max_cluster: int = 1
    register_realloc: tuple[int, ...] = ()

    @property
    def arch(self) -> str:
        """The nvcc architecture name without ``sm_`` (``"80"``, ``"90a"``)."""
        return f"{self.sm}{self.arch_suffix}"


@dataclass(frozen=True)
class Target:
    name: str
    kind: str                          # the backend family: "c" | "cuda" | ...
    memory: MemoryHierarchy
    units: tuple[ComputeUnit, ...] = ()
    features: tuple[str, ...] = field(default_factory=tuple)
    cpu: CpuParams | None = None
    cuda: CudaParams | None = None

    def has(self, feature: str) -> bool:
        return feature in self.features

    # ------------------------------------------------------------ memory levels
    def capacity(self, level: str) -> int:
        return self.memory.capacity(level)

    @property
    def l1_bytes(self) -> int:
        return self.memory.capacity("L1")

    @property
    def l2_bytes(self) -> int:
        return self.memory.capacity("L2")

    @property
    def l3_bytes(self) -> int:
        return self.memory.capacity("L3")

    @property
    def shared_memory_per_block(self) -> int:
        return self.memory.capacity("shared")

    def with_capacities(self, **capacities: int) -> Target:
        """A copy with some levels' capacities changed (``L1=32768``), e.g. for tests
        that must not depend on this machine's caches."""
        levels = tuple(replace(lv, capacity=capacities.pop(lv.name, lv.capacity))
                       for lv in self.memory.levels)
        if capacities:
            raise KeyError(f"no levels {sorted(capacities)} in target {self.name}")
        return replace(self, memory=replace(self.memory, levels=levels))

    # ------------------------------------------------------------ CPU vector ISA
    @property
    def isa(self) -> str:
        """The CPU vector instruction set the C printer emits: ``avx512``, ``avx2`` or
        ``""`` (scalar C; gcc may still auto-vectorise)."""
        if self.cpu is None or not self.cpu.vector_bits:
            return ""
        return "avx512" if self.cpu.vector_bits >= 512 else "avx2"

    def vector_lanes(self, dtype: str) -> int:
        """Lanes of one vector register for ``dtype`` (1 where that dtype is computed
        with scalar code: only float32 and float64 are vectorised)."""
        bits = {"float32": 32, "float64": 64}.get(dtype)
        if not self.isa or bits is None or self.cpu is None:
            return 1
        return self.cpu.vector_bits // bits


def get_target(name: str | Target) -> Target:
    """The target called ``name`` (a registered name, see ``polycomp targets``)."""
    if isinstance(name, Target):
        return name
    from polycomp.hw.registry import backend_for_name
    return backend_for_name(name).make_target(name)


__all__ = ["Target", "CpuParams", "CudaParams", "MemoryHierarchy", "MemoryLevel",
           "ComputeUnit", "get_target"]
