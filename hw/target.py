"""Target descriptions: one table per target of memory levels, capacities and features.

A :class:`Target` is data only; the pipelines that use it live in
:mod:`polycomp.hw.pipelines`.  ``get_target(name)`` knows ``c`` (portable C, scalar),
``cpu`` (this machine, detected), ``cpu-avx2``, ``cpu-avx512`` and ``cuda`` (sm_80 by
default; ``cuda-sm90`` for Hopper).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from polycomp.errors import TargetError


@dataclass(frozen=True)
class Target:
    name: str
    kind: str                          # "c" | "cuda" | "npu"
    # CPU
    vector_bits: int = 0               # 0: scalar code only
    vector_registers: int = 16
    has_fma: bool = False
    l1_bytes: int = 32 * 1024
    l2_bytes: int = 1024 * 1024
    l3_bytes: int = 8 * 1024 * 1024
    threads: int = 1
    # CUDA
    sm: int = 80
    shared_memory_per_block: int = 48 * 1024
    shared_memory_optin: int = 0       # larger opt-in limit (sm_80: 163 KB)
    registers_per_thread: int = 255
    max_threads_per_block: int = 1024
    warp_size: int = 32
    features: tuple = field(default_factory=tuple)

    def has(self, feature: str) -> bool:
        return feature in self.features

    @property
    def isa(self) -> str:
        """The CPU vector instruction set the C printer emits: ``avx512``, ``avx2`` or
        ``""`` (scalar C; gcc may still auto-vectorise)."""
        if self.kind != "c" or not self.vector_bits:
            return ""
        return "avx512" if self.vector_bits >= 512 else "avx2"

    def vector_lanes(self, dtype: str) -> int:
        """Lanes of one vector register for ``dtype`` (1 where that dtype is computed
        with scalar code: only float32 and float64 are vectorised)."""
        bits = {"float32": 32, "float64": 64}.get(dtype)
        if not self.isa or bits is None:
            return 1
        return self.vector_bits // bits


def _read_sys(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _parse_size(txt: str) -> int | None:
    mult = {"K": 1024, "M": 1024 * 1024, "G": 1024 ** 3}.get(txt[-1:].upper(), 1)
    try:
        return int(txt.rstrip("KMGkmg")) * mult
    except ValueError:
        return None


def cache_sizes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict:
    """``{"l1": bytes, "l2": bytes, "l3": bytes}`` of this machine's data/unified caches
    from sysfs (``index*/level``, ``type``, ``size``), with defaults (32K, 1M, 8M) where
    sysfs has nothing."""
    out = {"l1": 32 * 1024, "l2": 1024 * 1024, "l3": 8 * 1024 * 1024}
    for k in range(8):
        level = _read_sys(f"{root}/index{k}/level")
        kind = _read_sys(f"{root}/index{k}/type")
        size = _read_sys(f"{root}/index{k}/size")
        if level is None or size is None or kind == "Instruction":
            continue
        v = _parse_size(size)
        if v and level in ("1", "2", "3"):
            out["l" + level] = v
    return out


def cpu_threads() -> int:
    """Threads generated code runs with: ``OMP_NUM_THREADS`` when set, else the CPUs this
    process may run on."""
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_flags() -> set:
    """The feature flags of /proc/cpuinfo (empty where unavailable)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


_cpu_flags = cpu_flags


def _cpu_common(name: str, vector_bits: int, regs: int, fma: bool, features=()) -> Target:
    """A C target on this machine's caches and thread count with the given vector ISA
    (``cpu-avx2``: 256-bit, 16 ymm registers, FMA; ``cpu-avx512``: 512-bit, 32 zmm)."""
    caches = cache_sizes()
    return Target(name=name, kind="c", vector_bits=vector_bits, vector_registers=regs,
                  has_fma=fma, l1_bytes=caches["l1"], l2_bytes=caches["l2"],
                  l3_bytes=caches["l3"], threads=cpu_threads(), features=tuple(features))


def detect_cpu() -> Target:
    """The ``cpu`` target: the widest vector ISA this machine runs natively."""
    flags = _cpu_flags()
    if "avx512f" in flags:
        return replace(_cpu_common("cpu", 512, 32, True, ("avx2", "fma", "avx512f")), name="cpu")
    if "avx2" in flags:
        return replace(_cpu_common("cpu", 256, 16, "fma" in flags, ("avx2", "fma")), name="cpu")
    return _cpu_common("cpu", 0, 16, False)


def get_target(name) -> Target:
    if isinstance(name, Target):
        return name
    if name == "c":
        return _cpu_common("c", 0, 16, False)
    if name == "cpu":
        return detect_cpu()
    if name == "cpu-avx2":
        return _cpu_common("cpu-avx2", 256, 16, True, ("avx2", "fma"))
    if name == "cpu-avx512":
        return _cpu_common("cpu-avx512", 512, 32, True, ("avx2", "fma", "avx512f"))
    if name in ("cuda", "cuda-sm80"):
        return Target(name="cuda", kind="cuda", sm=80, shared_memory_optin=163 * 1024)
    if name == "cuda-sm90":
        return Target(name="cuda-sm90", kind="cuda", sm=90, shared_memory_optin=227 * 1024)
    raise TargetError(f"unknown target {name!r}; known: c, cpu, cpu-avx2, cpu-avx512, cuda, "
                      f"cuda-sm90")


TARGET_NAMES = ("c", "cpu", "cpu-avx2", "cpu-avx512", "cuda", "cuda-sm90")
