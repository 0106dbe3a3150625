"""The C targets as data: memory hierarchy (this machine's caches from sysfs), vector
units and machine parameters.

``c`` is portable scalar C; ``cpu`` is this machine's widest vector ISA; ``cpu-avx2`` and
``cpu-avx512`` name one.  Memory levels: ``memory`` (host RAM) -> ``L3`` -> ``L2`` (packed
``Y`` blocks of a GEMM) -> ``L1`` (packed ``X`` panels, register-tile zero-fill and
epilogue) -> ``registers`` (the micro-kernel's accumulators).  Packing copies are plain
loads and stores made by the thread that uses the buffer, so they need no
synchronisation beyond program order (the parallel loop's iterations own their slots).
"""
from __future__ import annotations

import os
import sys

from polycomp.errors import TargetError
from polycomp.hw.memory import ComputeUnit, CopyRule, MemoryHierarchy, MemoryLevel
from polycomp.hw.target import CpuParams, Target


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


def cache_sizes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, int]:
    """``{"l1": bytes, "l2": bytes, "l3": bytes, "l1_ways": ways}`` of this machine's
    data/unified caches from sysfs (``index*/level``, ``type``, ``size``,
    ``ways_of_associativity``), with defaults (32K, 1M, 8M, 8 ways) where sysfs has
    nothing."""
    out = {"l1": 32 * 1024, "l2": 1024 * 1024, "l3": 8 * 1024 * 1024, "l1_ways": 8}
    for k in range(8):
        level = _read_sys(f"{root}/index{k}/level")
        kind = _read_sys(f"{root}/index{k}/type")
        size = _read_sys(f"{root}/index{k}/size")
        if level is None or size is None or kind == "Instruction":
            continue
        v = _parse_size(size)
        if v and level in ("1", "2", "3"):
            out["l" + level] = v
        ways = _read_sys(f"{root}/index{k}/ways_of_associativity")
        if level == "1" and ways is not None and ways.isdigit() and int(ways) > 0:
            out["l1_ways"] = int(ways)
    return out


def requested_threads() -> int | None:
    """The thread count this process asks for: ``torch.get_num_threads()`` when torch is
    imported (kernels follow ``torch.set_num_threads``), else ``OMP_NUM_THREADS`` as it
    is now; None when neither says."""
    torch = sys.modules.get("torch")
    get = getattr(torch, "get_num_threads", None)
    if get is not None:
        return max(1, int(get()))
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(env) if env.isdigit() and int(env) > 0 else None


def cpu_threads() -> int:
    """Threads generated code runs with (the blocking is planned for it, and each call
    sets it: :class:`polycomp.hw.cpu.build.CFunction`): :func:`requested_threads`, else
    the CPUs this process may run on."""
    asked = requested_threads()
    if asked is not None:
        return asked
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_flags() -> set[str]:
    """The feature flags of /proc/cpuinfo (empty where unavailable)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_hierarchy(vector_bits: int, vector_registers: int) -> MemoryHierarchy:
    caches = cache_sizes()
    reg_bytes = max(vector_bits // 8, 8) * vector_registers
    return MemoryHierarchy(
        levels=(
            MemoryLevel("memory", "global", 0, 64, ("host",), "arrays the caller passes"),
            MemoryLevel("L3", "global", caches["l3"], 64, ("core",), "shared by all cores"),
            MemoryLevel("L2", "global", caches["l2"], 64, ("core",),
                        "packed Y block of a GEMM"),
            MemoryLevel("L1", "global", caches["l1"], 64, ("core",),
                        "packed X panel, register-tile zero-fill and epilogue"),
            MemoryLevel("registers", "local", reg_bytes, max(vector_bits // 8, 8), ("thread",),
                        f"{vector_registers} vector registers" if vector_bits else
                        "scalar registers"),
        ),
        copies=(
            CopyRule("memory", "L2", "packing loop (loads/stores into a panel layout)"),
            CopyRule("memory", "L1", "packing loop (loads/stores into a panel layout)"),
            CopyRule("L1", "registers", "vector load/broadcast" if vector_bits else "load"),
            CopyRule("registers", "memory", "vector store" if vector_bits else "store"),
        ))


#: the AVX-512 dot-product units: feature flag (/proc/cpuinfo spelling) -> unit.  Shape
#: (lanes, k per lane): each 32-bit lane multiplies a group of consecutive k values
#: (the packing of scheduler/cpu/backbone_tile.py's dot tiles groups them so)
DOT_UNITS = {
    "avx512_bf16": ComputeUnit("AVX512_BF16 vdpbf16ps", "vector", (16, 2),
                               ("bfloat16 -> float32",),
                               "16 fp32 lanes, each += a pair of exact bf16 products",
                               operands=("bfloat16", "bfloat16"), accumulator="float32"),
    "avx512_vnni": ComputeUnit("AVX512_VNNI vpdpbusd", "vector", (16, 4),
                               ("uint8 x int8 -> int32",),
                               "16 int32 lanes, each += four u8 x s8 products "
                               "(int8 x int8 via the +128 offset correction)",
                               operands=("uint8", "int8"), accumulator="int32"),
}


def cpu_units(vector_bits: int, fma: bool,
              features: tuple[str, ...] = ()) -> tuple[ComputeUnit, ...]:
    if not vector_bits:
        return (ComputeUnit("scalar", "scalar", (1,), ("float32", "float64", "int*")),)
    lanes = vector_bits // 32
    isa = "AVX-512" if vector_bits >= 512 else "AVX2"
    dots = tuple(u for f, u in DOT_UNITS.items() if f in features)
    return (ComputeUnit(f"{isa} {'FMA' if fma else 'mul/add'}", "vector", (lanes,),
                        ("float32", "float64 (half the lanes)"),
                        f"{lanes} float32 lanes"),) + dots + \
        (ComputeUnit("scalar", "scalar", (1,), ("all",)),)


def make_cpu_target(name: str, vector_bits: int, regs: int, fma: bool,
                    features: tuple[str, ...] = ()) -> Target:
    """A C target on this machine's caches and thread count with the given vector ISA
    (``cpu-avx2``: 256-bit, 16 ymm registers, FMA; ``cpu-avx512``: 512-bit, 32 zmm)."""
    return Target(name=name, kind="c", memory=cpu_hierarchy(vector_bits, regs),
                  units=cpu_units(vector_bits, fma, tuple(features)), features=tuple(features),
                  cpu=CpuParams(vector_bits=vector_bits, vector_registers=regs, has_fma=fma,
                                threads=cpu_threads(),
                                l1_ways=cache_sizes().get("l1_ways", 8)))


def detect_cpu() -> Target:
    """The ``cpu`` target: the widest vector ISA this machine runs natively."""
    flags = cpu_flags()
    if "avx512f" in flags:
        dots = tuple(f for f in DOT_UNITS if f in flags)
        return make_cpu_target("cpu", 512, 32, True, ("avx2", "fma", "avx512f") + dots)
    if "avx2" in flags:
        return make_cpu_target("cpu", 256, 16, "fma" in flags, ("avx2", "fma"))
    return make_cpu_target("cpu", 0, 16, False)


def cpu_target(name: str) -> Target:
    if name == "c":
        return make_cpu_target("c", 0, 16, False)
    if name == "cpu":
        return detect_cpu()
    if name == "cpu-avx2":
        return make_cpu_target("cpu-avx2", 256, 16, True, ("avx2", "fma"))
    if name == "cpu-avx512":
        return make_cpu_target("cpu-avx512", 512, 32, True, ("avx2", "fma", "avx512f"))
    if name == "cpu-avx512-bf16":
        return make_cpu_target("cpu-avx512-bf16", 512, 32, True,
                               ("avx2", "fma", "avx512f") + tuple(DOT_UNITS))
    raise TargetError(f"no C target {name!r}; C targets: c, cpu, cpu-avx2, cpu-avx512, "
                      f"cpu-avx512-bf16")
