"""Low-precision GEMMs on the AVX-512 dot-product units: host facts, builds and numpy
references.

A DSL product of bfloat16 (int8) arrays accumulated in float32 (int32) compiles, on a
target declaring the unit (``cpu-avx512-bf16``, or ``cpu`` on a host with
``avx512_bf16`` / ``avx512_vnni``), through the ordinary pipeline: the backbone tiling
(:mod:`polycomp.scheduler.cpu.backbone_tile`, :func:`match_dot_product`) tiles it for
the unit and marks its micro-kernel ``cpu_microkernel:<n>``; the packing groups ``k``
in pairs (bf16) or quads (int8) inside each 32-bit lane (:mod:`polycomp.hw.cpu.pack`:
int8 ``X`` stored as ``x + 128`` read unsigned, ``Y``'s column sums compensating it);
the micro-kernel pass (:mod:`polycomp.hw.cpu.microkernel`, :func:`dot_tile`) makes the
register tile of ``vdpbf16ps`` / ``vpdpbusd`` intrinsic calls that the vector printer
prints (:mod:`polycomp.hw.cpu.vector_printer`, helpers in
:mod:`polycomp.hw.cpu.vector_prelude`).  See docs/cpu_backend.md.

This module keeps what tests and benchmarks need around that: whether this host runs
the units (:func:`host_has`), the flags of a native build (:data:`NATIVE_FLAGS`),
:func:`build_lowp` (native or SIMDe), and the numpy references with the units'
rounding.

bf16 rounding: the products of two bf16 values are exact in fp32.  The native
instruction adds the two products of a pair to the fp32 accumulator one after the
other, each addition rounded to nearest even, the odd element first (Intel's
definition, ``pair_order="odd-first"``); SIMDe 0.7's emulation as gcc vectorises it
adds the pair's products first (one rounding) and then that sum to the accumulator
(``"pair-sum"``, measured bit for bit).  :func:`reference_bf16` reproduces each (without
the native unit's denormal flushing: inputs of normal range).
"""
from __future__ import annotations

import numpy as np

from polycomp.hw.cpu.build import DEFAULT_FLAGS
from polycomp.hw.cpu.target import DOT_UNITS, cpu_flags

#: kind -> the feature flag of its unit (a key of :data:`~polycomp.hw.cpu.target.DOT_UNITS`)
KINDS = {"bf16": "avx512_bf16", "int8": "avx512_vnni"}

#: native build: AVX-512 with the BF16 and VNNI extensions
NATIVE_FLAGS = tuple(f for f in DEFAULT_FLAGS if not f.startswith("-march=")) + (
    "-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni")


def feature(kind: str) -> str:
    """The /proc/cpuinfo flag of the unit of ``kind``."""
    return KINDS[kind]


def input_dtype(kind: str) -> str:
    """The arrays' dtype of a ``kind`` product (the unit's vector operand)."""
    return DOT_UNITS[KINDS[kind]].operands[1]


def host_has(kind: str) -> bool:
    """Whether this machine executes the unit of ``kind`` natively."""
    return {"avx512f", KINDS[kind]} <= cpu_flags()


def build_lowp(kernel, target, mode: str = "auto", options=None):
    """``kernel`` compiled for ``target`` (with ``options``) and built ``"native"``
    (:data:`NATIVE_FLAGS`: run only where :func:`host_has`), ``"simde"`` (emulated) or
    ``"auto"`` (native where the host has both units)."""
    from polycomp.driver import compile_kernel
    from polycomp.hw.cpu.build import CFunction, build_shared
    from polycomp.hw.cpu.simd_build import build_simde
    ck = compile_kernel(kernel, target, options)
    if mode == "auto":
        mode = "native" if all(host_has(k) for k in KINDS) else "simde"
    path = build_shared(ck.source, flags=NATIVE_FLAGS) if mode == "native" \
        else build_simde(ck.source)
    return CFunction(ck.final_ir, path)


# --------------------------------------------------------------------------- references


def _bf16_bits_to_f32(x: np.ndarray) -> np.ndarray:
    return (x.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def reference_bf16(A, B, pair_order: str = "odd-first") -> np.ndarray:
    """``A @ B`` for bf16 ``A``, ``B`` with the dot-product unit's rounding: per output
    element, ``k`` in pairs ``(2p, 2p+1)`` (zero padded) accumulated in fp32 in order of
    ``p``; within a pair the exact products are added one at a time, the odd element
    first (``"odd-first"``, the native instruction) or the even one (``"even-first"``),
    or summed first and their rounded sum added (``"pair-sum"``, SIMDe)."""
    a = _bf16_bits_to_f32(np.ascontiguousarray(A))
    b = _bf16_bits_to_f32(np.ascontiguousarray(B))
    M, K = a.shape
    N = b.shape[1]
    acc = np.zeros((M, N), np.float32)

    def prod(k):       # the product of two bf16 values is exact in float32
        if k >= K:
            return np.zeros((M, N), np.float32)
        return np.outer(a[:, k], b[k, :]).astype(np.float32)
    for p in range(-(-K // 2)):
        even, odd = prod(2 * p), prod(2 * p + 1)
        if pair_order == "pair-sum":
            acc = (acc + (even + odd).astype(np.float32)).astype(np.float32)
            continue
        for t in ((odd, even) if pair_order == "odd-first" else (even, odd)):
            acc = (acc + t).astype(np.float32)
    return acc


def reference_int8(A, B) -> np.ndarray:
    """``A @ B`` of int8 matrices in int32 (exact)."""
    return A.astype(np.int32) @ B.astype(np.int32)
