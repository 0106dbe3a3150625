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


def _read_cache_size(index: int, default: int) -> int:
    path = f"/sys/devices/system/cpu/cpu0/cache/index{index}/size"
    try:
        txt = open(path).read().strip()
    except OSError:
        return default
    mult = 1024 if txt.endswith("K") else 1024 * 1024 if txt.endswith("M") else 1
    try:
        return int(txt.rstrip("KM")) * mult
    except ValueError:
        return default


def _cpu_flags() -> set:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _cpu_common(name: str, vector_bits: int, regs: int, fma: bool, features=()) -> Target:
    return Target(name=name, kind="c", vector_bits=vector_bits, vector_registers=regs,
                  has_fma=fma, l1_bytes=_read_cache_size(0, 32 * 1024),
                  l2_bytes=_read_cache_size(2, 1024 * 1024),
                  l3_bytes=_read_cache_size(3, 8 * 1024 * 1024),
                  threads=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
                  features=tuple(features))


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
