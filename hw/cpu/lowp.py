"""Low-precision GEMM on the AVX-512 dot-product units: bf16 x bf16 -> fp32 through
``vdpbf16ps`` (AVX512_BF16) and int8 x int8 -> int32 through ``vpdpbusd``
(AVX512_VNNI, u8 x s8 with the offset correction).

These units multiply *pairs* (bf16) or *quads* (int8) of consecutive ``k`` values per
32-bit lane, so both operands are packed with ``k`` grouped by ``G`` (2 or 4) inside
each 32-bit word:

* ``Bp[q][p][c]`` (one 32-bit word per column ``c`` of panel ``q`` of ``NR`` columns and
  group ``p`` of ``k``) holds ``B[G*p + g][q*NR + c]`` for ``g < G`` (zero outside ``B``),
  so the micro-kernel loads ``NV`` full vectors per group;
* ``Ap[i][p]`` holds ``A[i][G*p + g]`` (zero padded), broadcast as one 32-bit word.

The micro-kernel (``MR x NR``, ``NR = 16 * NV``; the register block of the fp32 GEMM,
:func:`polycomp.scheduler.cpu.backbone_tile.register_block`, on the target's register
count) keeps its ``MR * NV`` accumulators in registers for the whole ``k`` range: they
start as zero registers (int8: as the offset correction, see below), with one store
per accumulator at the end; the last panel of columns stores through a lane
mask, rows beyond ``M`` are a micro-kernel of fewer rows (no scalar edge code).  The
tiles ``(i tile, column panel)`` are split over the OpenMP threads as one collapsed
static loop, so products with few rows (BERT at L = 1) still give every thread work.

int8 (both operands ``int8``, as ``polycomp.frontend.ops.matmul`` takes them):
``vpdpbusd`` multiplies *unsigned* bytes of its first operand by signed bytes of the
second, so ``A`` is packed as ``A + 128`` (``u8``) and ``128 * sum_k B[k, j]`` (column
sums formed while packing ``B``) is the accumulators' start value: exact in int32.
(Subtracting it after the ``k`` loop instead made gcc keep a stack copy of every
accumulator inside the loop.)

bf16 rounding: the products of two bf16 values are exact in fp32.  The native
instruction adds the two products of a pair to the fp32 accumulator one after the
other, each addition rounded to nearest even, the odd element first (Intel's
definition, ``pair_order="odd-first"``); SIMDe 0.7's emulation as gcc vectorises it
adds the pair's products first (one rounding) and then that sum to the accumulator
(``"pair-sum"``, measured bit for bit).  :func:`reference_bf16` reproduces each (without
the native unit's denormal flushing: inputs of normal range).

Where the build machine lacks the instructions the source compiles against SIMDe
(``PC_SIMDE``, :func:`polycomp.hw.cpu.simd_build.build_simde`); :data:`NATIVE_FLAGS`
builds the native instructions (``objdump`` shows ``vdpbf16ps`` / ``vpdpbusd``), to be
executed only where /proc/cpuinfo lists ``avx512_bf16`` / ``avx512_vnni``.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from polycomp import ir
from polycomp.errors import TargetError
from polycomp.hw.cpu.build import DEFAULT_FLAGS, build_shared
from polycomp.hw.cpu.target import cpu_flags
from polycomp.model import Statement

#: kind -> (group G of k per 32-bit lane, unit feature the target must declare, C input
#: type, C output type, numpy input dtype name, numpy output dtype)
KINDS = {
    "bf16": (2, "avx512_bf16", "uint16_t", "float", "bfloat16", np.float32),
    "int8": (4, "avx512_vnni", "int8_t", "int32_t", "int8", np.int32),
}

#: native build: AVX-512 with the BF16 and VNNI extensions.  ``-fno-tree-coalesce-vars``:
#: with gcc 12 the int8 micro-kernel otherwise keeps a stack copy of 19 of its 24
#: accumulators inside the k loop (copies between the coalesced SSA names of
#: ``vpdpbusd``'s tied operand); with it, none (tests/test_cpu_lowp.py checks)
NATIVE_FLAGS = tuple(f for f in DEFAULT_FLAGS if not f.startswith("-march=")) + (
    "-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni", "-fno-tree-coalesce-vars")


@dataclass(frozen=True)
class LowpGemm:
    """A generated low-precision GEMM ``C (M, N) = A (M, K) @ B (K, N)``."""
    kind: str
    M: int
    N: int
    K: int
    MR: int
    NV: int
    name: str
    source: str

    @property
    def NR(self) -> int:
        return 16 * self.NV


def host_has(kind: str) -> bool:
    """Whether this machine executes the unit of ``kind`` natively."""
    return {"avx512f", KINDS[kind][1]} <= cpu_flags()


_HEADER = r"""#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(PC_SIMDE)
#ifndef SIMDE_ENABLE_NATIVE_ALIASES
#define SIMDE_ENABLE_NATIVE_ALIASES
#endif
#include <simde/x86/avx512.h>
#else
#include <immintrin.h>
#endif
static inline long pc_lmin(long a, long b) { return a < b ? a : b; }
#if defined(PC_SIMDE)
static inline void pc_store_ps_n(float* p, __m512 v, long n) {
  float t[16] __attribute__((aligned(64))); _mm512_store_ps(t, v);
  for (long l = 0; l < n; ++l) p[l] = t[l];
}
static inline void pc_store_epi32_n(int32_t* p, __m512i v, long n) {
  int32_t t[16] __attribute__((aligned(64))); _mm512_store_si512((void*)t, v);
  for (long l = 0; l < n; ++l) p[l] = t[l];
}
#else
static inline void pc_store_ps_n(float* p, __m512 v, long n) {
  _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), v);
}
static inline void pc_store_epi32_n(int32_t* p, __m512i v, long n) {
  _mm512_mask_storeu_epi32(p, (__mmask16)((1u << n) - 1u), v);
}
#endif
static inline __m512bh pc_bh(__m512i v) { __m512bh r; memcpy(&r, &v, sizeof r); return r; }
"""


def _microkernel(g: LowpGemm, rows: int, KG: int) -> str:
    """The ``rows x NR`` tile: accumulators in registers over all ``KG`` groups."""
    NV = g.NV
    bf = g.kind == "bf16"
    vt = "__m512" if bf else "__m512i"
    zero = "_mm512_setzero_ps()" if bf else "_mm512_setzero_si512()"
    out_t = "float" if bf else "int32_t"
    # not inlined into the tile loop's switch: one call per tile, and each micro-kernel
    # is register-allocated on its own
    lines = [f"static __attribute__((noinline)) void {g.name}_mk{rows}("
             f"const uint32_t* restrict Ap, "
             f"const uint32_t* restrict Bq, const int32_t* restrict colsum, "
             f"{out_t}* restrict C, long i0, long j0) {{"]
    if bf:
        lines += [f"  {vt} acc{i}_{u} = {zero};" for i in range(rows) for u in range(NV)]
    else:
        # the offset correction is the accumulators' start value, in registers:
        # acc = -128 * colsum, then += (A + 128) . B over k
        for u in range(NV):
            lines.append(f"  const __m512i corr{u} = _mm512_sub_epi32({zero}, _mm512_slli_epi32("
                         f"_mm512_loadu_si512((const void*)(colsum + j0 + {16 * u})), 7));")
        lines += [f"  {vt} acc{i}_{u} = corr{u};" for i in range(rows) for u in range(NV)]
    lines.append(f"  const uint32_t* restrict a = Ap + i0 * {KG};")
    lines.append(f"  for (long p = 0; p < {KG}; ++p) {{")
    for u in range(NV):
        y = f"_mm512_loadu_si512((const void*)(Bq + p * {g.NR} + {16 * u}))"
        lines.append(f"    const __m512i y{u} = {y};")
    for i in range(rows):
        # one broadcast live at a time, bound around its row's dot products only
        lines.append(f"    {{ const __m512i x = _mm512_set1_epi32((int)a[p + {i * KG}]);")
        for u in range(NV):
            if bf:
                lines.append(f"      acc{i}_{u} = _mm512_dpbf16_ps(acc{i}_{u}, pc_bh(x), "
                             f"pc_bh(y{u}));")
            else:
                lines.append(f"      acc{i}_{u} = _mm512_dpbusd_epi32(acc{i}_{u}, x, y{u});")
        lines.append("    }")
    lines.append("  }")
    store = "_mm512_storeu_ps" if bf else "_mm512_storeu_si512"
    store_n = "pc_store_ps_n" if bf else "pc_store_epi32_n"
    for u in range(NV):
        lines.append(f"  {{ const long n = pc_lmin(16, {g.N} - (j0 + {16 * u}));")
        for i in range(rows):
            ptr = f"C + (i0 + {i}) * {g.N} + j0 + {16 * u}"
            cast = "" if bf else "(void*)"
            lines.append(f"    if (n >= 16) {store}({cast}({ptr}), acc{i}_{u}); "
                         f"else if (n > 0) {store_n}({ptr}, acc{i}_{u}, n);")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _pack_b(g: LowpGemm, G: int, KG: int, NP: int) -> str:
    """``Bp[q][p][c]`` (and the int8 column sums), parallel over panels."""
    M_, N, K, NR = g.M, g.N, g.K, g.NR
    del M_
    if g.kind == "bf16":
        word = " | ".join(f"((uint32_t)(k + {t} < {K} ? B[(k + {t}) * {N} + j] : 0) << {16 * t})"
                          for t in range(G))
        extra = ""
    else:
        word = " | ".join(f"((uint32_t)(uint8_t)(k + {t} < {K} ? B[(k + {t}) * {N} + j] : 0)"
                          f" << {8 * t})" for t in range(G))
        extra = (f"          if (j < {N}) for (long t = 0; t < {G}; ++t) "
                 f"if (k + t < {K}) s[c] += B[(k + t) * {N} + j];\n")
    sums = ("        int32_t s[%d] = {0};\n" % NR) if g.kind == "int8" else ""
    out_sums = (f"        for (long c = 0; c < {NR}; ++c) colsum[q * {NR} + c] = s[c];\n"
                if g.kind == "int8" else "")
    return (f"    #pragma omp for schedule(static)\n"
            f"    for (long q = 0; q < {NP}; ++q) {{\n{sums}"
            f"      for (long p = 0; p < {KG}; ++p) {{\n"
            f"        const long k = {G} * p;\n"
            f"        for (long c = 0; c < {NR}; ++c) {{\n"
            f"          const long j = q * {NR} + c;\n"
            f"          Bp[(q * {KG} + p) * {NR} + c] = j < {N} ? ({word}) : 0u;\n{extra}"
            f"        }}\n      }}\n{out_sums}    }}\n")


def _pack_a(g: LowpGemm, G: int, KG: int) -> str:
    K = g.K
    if g.kind == "bf16":
        word = " | ".join(f"((uint32_t)(k + {t} < {K} ? A[i * {K} + k + {t}] : 0) << {16 * t})"
                          for t in range(G))
    else:   # u8 = s8 + 128 (flip the sign bit); the padding is 0 (B's padding is 0 too)
        word = " | ".join(f"((uint32_t)(k + {t} < {K} ? (uint8_t)(A[i * {K} + k + {t}] ^ 0x80)"
                          f" : 0) << {8 * t})" for t in range(G))
    return (f"    #pragma omp for schedule(static)\n"
            f"    for (long i = 0; i < {g.M}; ++i)\n"
            f"      for (long p = 0; p < {KG}; ++p) {{\n"
            f"        const long k = {G} * p;\n"
            f"        Ap[i * {KG} + p] = {word};\n      }}\n")


def _bytes64(n: int) -> int:
    """``n`` rounded up to a multiple of 64 (aligned_alloc's size rule)."""
    return (n + 63) // 64 * 64


def generate(kind: str, M: int, N: int, K: int, MR: int = 6, NV: int = 4,
             name: str | None = None) -> LowpGemm:
    """The C source of the ``kind`` GEMM for constant ``M, N, K`` (see module doc)."""
    if kind not in KINDS:
        raise TargetError(f"no low-precision GEMM kind {kind!r}; kinds: {', '.join(KINDS)}")
    if min(M, N, K) < 1:
        raise TargetError(f"low-precision GEMM needs positive extents, got {M}x{N}x{K}")
    G, _, in_t, out_t, _, _ = KINDS[kind]
    name = name or f"pc_{kind}_gemm_{M}_{N}_{K}"
    g = LowpGemm(kind, M, N, K, MR, NV, name, "")
    KG = -(-K // G)
    NP = -(-N // g.NR)
    MT = -(-M // MR)
    parts = [_HEADER]
    parts += [_microkernel(g, r, KG) for r in range(1, MR + 1)]
    cases = "\n".join(f"        case {r}: {name}_mk{r}(Ap, Bq, colsum, C, i0, j0); break;"
                      for r in range(1, MR + 1))
    colsum_alloc = (f"  int32_t* colsum = (int32_t*)aligned_alloc(64, "
                    f"{_bytes64(NP * g.NR * 4)});\n" if kind == "int8"
                    else "  const int32_t* colsum = 0;\n")
    parts.append(
        f"void {name}(const {in_t}* restrict A, const {in_t}* restrict B, "
        f"{out_t}* restrict C) {{\n"
        f"  uint32_t* Bp = (uint32_t*)aligned_alloc(64, {_bytes64(NP * KG * g.NR * 4)});\n"
        f"  uint32_t* Ap = (uint32_t*)aligned_alloc(64, {_bytes64(M * KG * 4)});\n"
        f"{colsum_alloc}"
        f"  #pragma omp parallel\n  {{\n"
        + _pack_b(g, G, KG, NP) + _pack_a(g, G, KG) +
        f"    #pragma omp for schedule(static) collapse(2)\n"
        f"    for (long t = 0; t < {MT}; ++t)\n"
        f"      for (long q = 0; q < {NP}; ++q) {{\n"
        f"        const long i0 = t * {MR}, j0 = q * {g.NR};\n"
        f"        const uint32_t* Bq = Bp + q * {KG * g.NR};\n"
        f"        switch (pc_lmin({MR}, {M} - i0)) {{\n{cases}\n        }}\n"
        f"      }}\n  }}\n"
        f"  free(Bp); free(Ap);" + (" free(colsum);" if kind == "int8" else "") + "\n}\n")
    return LowpGemm(kind, M, N, K, MR, NV, name, "".join(parts))


def for_target(kind: str, M: int, N: int, K: int, target) -> LowpGemm:
    """:func:`generate` with the register block of ``target``, which must declare the
    unit of ``kind`` (``polycomp.hw.cpu.target``: ``cpu-avx512-bf16``, or ``cpu`` on a
    host with the instructions)."""
    from polycomp.scheduler.cpu.backbone_tile import register_block
    unit = KINDS[kind][1]
    if not target.has(unit):
        raise TargetError(f"target {target.name!r} declares no {unit} unit for a {kind} GEMM "
                          f"(use cpu-avx512-bf16; see polycomp targets)")
    MR, NV = register_block(target.cpu.vector_registers)
    return generate(kind, M, N, K, MR, NV)


class LowpFunction:
    """A built :class:`LowpGemm`: ``f(A, B) -> C`` on numpy arrays."""

    def __init__(self, g: LowpGemm, lib_path: str):
        self.g = g
        self.lib = ctypes.CDLL(lib_path)
        self.fn = getattr(self.lib, g.name)
        self.fn.restype = None
        self.fn.argtypes = [ctypes.c_void_p] * 3

    def __call__(self, A, B, out=None):
        g = self.g
        _, _, _, _, in_np, out_np = KINDS[g.kind]
        from polycomp import dtypes as dt
        want = dt.to_numpy(in_np)
        A = np.ascontiguousarray(A)
        B = np.ascontiguousarray(B)
        if A.shape != (g.M, g.K) or B.shape != (g.K, g.N) or A.dtype != want or B.dtype != want:
            raise TargetError(f"{g.name} takes {in_np} arrays of shapes ({g.M}, {g.K}) and "
                              f"({g.K}, {g.N}), got {A.dtype} {A.shape} and {B.dtype} {B.shape}")
        C = np.empty((g.M, g.N), out_np) if out is None else out
        self.fn(A.ctypes.data, B.ctypes.data, C.ctypes.data)
        return C


def build(g: LowpGemm, mode: str = "auto") -> LowpFunction:
    """Build ``g``: ``"native"`` (the instructions; run only where :func:`host_has`),
    ``"simde"`` (emulated), or ``"auto"`` (native where the host has the unit)."""
    from polycomp.hw.cpu.simd_build import build_simde
    if mode == "auto":
        mode = "native" if host_has(g.kind) else "simde"
    path = build_shared(g.source, flags=NATIVE_FLAGS) if mode == "native" else build_simde(g.source)
    return LowpFunction(g, path)


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


# ------------------------------------------------------------- from a DSL matmul (symbolic)
#
# ``compile_kernel`` reaches the kernels above from a DSL product on a target declaring
# the unit: :mod:`polycomp.scheduler.cpu.backbone_tile` recognises the stage
# (:func:`match_lowp`) and puts a ``cpu_microkernel:lowp:<kind>:<update statement>`` mark
# on its subtree; the code-generation pass :func:`lowp_calls` replaces the marked loop
# nest by a call of the symbolic kernel of :func:`generate_symbolic` (extents, leading
# dimensions and the three arrays as arguments), whose source the backend prepends
# (:func:`sources_for`).  Other CPU targets compile the same stage through the ordinary
# path (fp32/int32 scalar code).

#: kind -> (input dtype, accumulation/output dtype) of the DSL stage
STAGE_DTYPES = {"bf16": ("bfloat16", "float32"), "int8": ("int8", "int32")}

#: the C names of the symbolic kernels: ``pc_lowp_<kind>_<MR>x<NV>``
SYMBOLIC_PREFIX = "pc_lowp_"


def symbolic_name(kind: str, MR: int, NV: int) -> str:
    return f"{SYMBOLIC_PREFIX}{kind}_{MR}x{NV}"


def _sym_microkernel(kind: str, name: str, rows: int, NV: int) -> str:
    """The ``rows x 16*NV`` tile of the symbolic kernel: as :func:`_microkernel`, with
    the ``k`` groups ``KG``, the columns ``N`` and ``C``'s row stride ``ldc`` as
    arguments."""
    NR = 16 * NV
    bf = kind == "bf16"
    vt = "__m512" if bf else "__m512i"
    zero = "_mm512_setzero_ps()" if bf else "_mm512_setzero_si512()"
    out_t = "float" if bf else "int32_t"
    lines = [f"static __attribute__((noinline)) void {name}_mk{rows}("
             f"long KG, long N, long ldc, const uint32_t* restrict Ap, "
             f"const uint32_t* restrict Bq, const int32_t* restrict colsum, "
             f"{out_t}* restrict C, long i0, long j0) {{"]
    if bf:
        lines += [f"  {vt} acc{i}_{u} = {zero};" for i in range(rows) for u in range(NV)]
    else:
        for u in range(NV):
            lines.append(f"  const __m512i corr{u} = _mm512_sub_epi32({zero}, _mm512_slli_epi32("
                         f"_mm512_loadu_si512((const void*)(colsum + j0 + {16 * u})), 7));")
        lines += [f"  {vt} acc{i}_{u} = corr{u};" for i in range(rows) for u in range(NV)]
    lines.append("  const uint32_t* restrict a = Ap + i0 * KG;")
    lines.append("  for (long p = 0; p < KG; ++p) {")
    for u in range(NV):
        lines.append(f"    const __m512i y{u} = _mm512_loadu_si512((const void*)"
                     f"(Bq + p * {NR} + {16 * u}));")
    for i in range(rows):
        lines.append(f"    {{ const __m512i x = _mm512_set1_epi32((int)a[p + {i} * KG]);")
        for u in range(NV):
            if bf:
                lines.append(f"      acc{i}_{u} = _mm512_dpbf16_ps(acc{i}_{u}, pc_lowp_bh(x), "
                             f"pc_lowp_bh(y{u}));")
            else:
                lines.append(f"      acc{i}_{u} = _mm512_dpbusd_epi32(acc{i}_{u}, x, y{u});")
        lines.append("    }")
    lines.append("  }")
    store = "_mm512_storeu_ps" if bf else "_mm512_storeu_si512"
    store_n = "pc_lowp_store_ps_n" if bf else "pc_lowp_store_epi32_n"
    cast = "" if bf else "(void*)"
    for u in range(NV):
        lines.append(f"  {{ const long n = pc_lowp_min(16, N - (j0 + {16 * u}));")
        for i in range(rows):
            ptr = f"C + (i0 + {i}) * ldc + j0 + {16 * u}"
            lines.append(f"    if (n >= 16) {store}({cast}({ptr}), acc{i}_{u}); "
                         f"else if (n > 0) {store_n}({ptr}, acc{i}_{u}, n);")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


_SYM_HEADER = r"""#ifndef PC_LOWP_HEADER
#define PC_LOWP_HEADER
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(PC_SIMDE)
#ifndef SIMDE_ENABLE_NATIVE_ALIASES
#define SIMDE_ENABLE_NATIVE_ALIASES
#endif
#include <simde/x86/avx512.h>
#else
#include <immintrin.h>
#endif
static inline long pc_lowp_min(long a, long b) { return a < b ? a : b; }
static inline size_t pc_lowp_bytes(long n) { return ((size_t)n + 63u) / 64u * 64u; }
#if defined(PC_SIMDE)
static inline void pc_lowp_store_ps_n(float* p, __m512 v, long n) {
  float t[16] __attribute__((aligned(64))); _mm512_store_ps(t, v);
  for (long l = 0; l < n; ++l) p[l] = t[l];
}
static inline void pc_lowp_store_epi32_n(int32_t* p, __m512i v, long n) {
  int32_t t[16] __attribute__((aligned(64))); _mm512_store_si512((void*)t, v);
  for (long l = 0; l < n; ++l) p[l] = t[l];
}
#else
static inline void pc_lowp_store_ps_n(float* p, __m512 v, long n) {
  _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), v);
}
static inline void pc_lowp_store_epi32_n(int32_t* p, __m512i v, long n) {
  _mm512_mask_storeu_epi32(p, (__mmask16)((1u << n) - 1u), v);
}
#endif
static inline __m512bh pc_lowp_bh(__m512i v) { __m512bh r; memcpy(&r, &v, sizeof r); return r; }
#endif
"""


def generate_symbolic(kind: str, MR: int = 6, NV: int = 4) -> str:
    """The C source of ``void pc_lowp_<kind>_<MR>x<NV>(long M, long N, long K, long lda,
    long ldb, long ldc, const T* A, const T* B, U* C)``: ``C[i*ldc + j] = sum_k
    A[i*lda + k] * B[k*ldb + j]`` for runtime extents (``M, N, K >= 0``; an empty ``k``
    range gives zeros), the scheme of :func:`generate` (same packing, micro-kernels,
    offset correction, masked column tails and fewer-row edge micro-kernels)."""
    if kind not in KINDS:
        raise TargetError(f"no low-precision GEMM kind {kind!r}; kinds: {', '.join(KINDS)}")
    G, _, in_t, out_t, _, _ = KINDS[kind]
    name = symbolic_name(kind, MR, NV)
    NR = 16 * NV
    int8 = kind == "int8"
    parts = [_SYM_HEADER]
    parts += [_sym_microkernel(kind, name, r, NV) for r in range(1, MR + 1)]
    cases = "\n".join(f"        case {r}: {name}_mk{r}(KG, N, ldc, Ap, Bq, colsum, C, i0, j0); "
                      f"break;" for r in range(1, MR + 1))
    if kind == "bf16":
        bword = " | ".join(f"((uint32_t)(k + {t} < K ? B[(k + {t}) * ldb + j] : 0) << {16 * t})"
                           for t in range(G))
        aword = " | ".join(f"((uint32_t)(k + {t} < K ? A[i * lda + k + {t}] : 0) << {16 * t})"
                           for t in range(G))
    else:
        bword = " | ".join(f"((uint32_t)(uint8_t)(k + {t} < K ? B[(k + {t}) * ldb + j] : 0)"
                           f" << {8 * t})" for t in range(G))
        aword = " | ".join(f"((uint32_t)(k + {t} < K ? (uint8_t)(A[i * lda + k + {t}] ^ 0x80)"
                           f" : 0) << {8 * t})" for t in range(G))
    sums = f"        int32_t s[{NR}] = {{0}};\n" if int8 else ""
    add_sum = (f"          if (j < N) for (long t = 0; t < {G}; ++t) "
               f"if (k + t < K) s[c] += B[(k + t) * ldb + j];\n") if int8 else ""
    out_sums = (f"        for (long c = 0; c < {NR}; ++c) colsum[q * {NR} + c] = s[c];\n"
                if int8 else "")
    colsum = (f"  int32_t* colsum = (int32_t*)aligned_alloc(64, pc_lowp_bytes(NP * {NR} * 4));\n"
              if int8 else "  const int32_t* colsum = 0;\n")
    parts.append(
        f"static void {name}(long M, long N, long K, long lda, long ldb, long ldc, "
        f"const {in_t}* restrict A, const {in_t}* restrict B, {out_t}* restrict C) {{\n"
        f"  if (M <= 0 || N <= 0) return;\n"
        f"  const long KG = (K + {G - 1}) / {G}, NP = (N + {NR - 1}) / {NR}, "
        f"MT = (M + {MR - 1}) / {MR};\n"
        f"  uint32_t* Bp = (uint32_t*)aligned_alloc(64, pc_lowp_bytes(NP * KG * {NR} * 4 + 4));\n"
        f"  uint32_t* Ap = (uint32_t*)aligned_alloc(64, pc_lowp_bytes(M * KG * 4 + 4));\n"
        f"{colsum}"
        f"  #pragma omp parallel\n  {{\n"
        f"    #pragma omp for schedule(static)\n"
        f"    for (long q = 0; q < NP; ++q) {{\n{sums}"
        f"      for (long p = 0; p < KG; ++p) {{\n"
        f"        const long k = {G} * p;\n"
        f"        for (long c = 0; c < {NR}; ++c) {{\n"
        f"          const long j = q * {NR} + c;\n"
        f"          Bp[(q * KG + p) * {NR} + c] = j < N ? ({bword}) : 0u;\n{add_sum}"
        f"        }}\n      }}\n{out_sums}    }}\n"
        f"    #pragma omp for schedule(static)\n"
        f"    for (long i = 0; i < M; ++i)\n"
        f"      for (long p = 0; p < KG; ++p) {{\n"
        f"        const long k = {G} * p;\n"
        f"        Ap[i * KG + p] = {aword};\n      }}\n"
        f"    #pragma omp for schedule(static) collapse(2)\n"
        f"    for (long t = 0; t < MT; ++t)\n"
        f"      for (long q = 0; q < NP; ++q) {{\n"
        f"        const long i0 = t * {MR}, j0 = q * {NR};\n"
        f"        const uint32_t* Bq = Bp + q * KG * {NR};\n"
        f"        switch (pc_lowp_min({MR}, M - i0)) {{\n{cases}\n        }}\n"
        f"      }}\n  }}\n"
        f"  free(Bp); free(Ap);" + (" free(colsum);" if int8 else "") + "\n}\n")
    return "".join(parts)


@dataclass(frozen=True, eq=False)
class LowpMatch:
    """A DSL stage ``C[i, j] = sum_k A[i, k] * B[k, j]`` (``init`` zero, ``update``) with
    inputs of ``STAGE_DTYPES[kind][0]`` widened to the accumulation dtype ``[1]``."""
    kind: str
    init: Statement
    update: Statement
    a: ir.Buffer        # A (i, k)
    b: ir.Buffer        # B (k, j)
    c: ir.Buffer        # C (i, j)


def _widened(f, src: str, dst: str) -> bool:
    """The factor is ``cast<dst>(load)`` of a ``src`` load, unguarded."""
    return (f.guard is None and f.load.dtype == src and isinstance(f.expr, ir.Cast)
            and f.expr.dtype == dst and f.expr.value is f.load)


def _zero_based_box(domain) -> bool:
    """The domain is a box whose every dimension starts at 0."""
    import islpy as isl
    if not domain.is_box():
        return False
    for t in range(domain.dim(isl.dim_type.set)):
        lo = domain.dim_min(t)
        zero = isl.PwAff.zero_on_domain(isl.LocalSpace.from_space(
            lo.get_domain_space())).intersect_domain(lo.domain())
        if not lo.eq_set(zero).is_equal(lo.domain()):
            return False
    return True


def match_lowp(statements, target) -> LowpMatch | None:
    """The :class:`LowpMatch` of a stage's ``(init, update)`` on ``target`` (which must
    declare the unit of the kind), or None."""
    from polycomp.scheduler.common.contraction import match_contraction
    if len(statements) != 2 or statements[0].kind != "init" or statements[1].kind != "update":
        return None
    init, upd = statements
    stage = upd.stage
    kind = next((k for k, (src, dst) in STAGE_DTYPES.items()
                 if upd.write.dtype == dst and target.has(KINDS[k][1])), None)
    if kind is None or not ir.is_const(init.value, 0):
        return None
    src, dst = STAGE_DTYPES[kind]
    c = match_contraction(stage)
    if isinstance(c, str) or c.mixed or len(c.reduce_dims) != 1 or len(stage.iters) != 2:
        return None
    if not (_widened(c.a, src, dst) and _widened(c.b, src, dst)):
        return None
    body = stage.body
    if not (isinstance(body, ir.Binary) and body.op == "*" and body.dtype == dst):
        return None
    val = upd.value
    if not (isinstance(val, ir.Binary) and val.op == "+" and isinstance(val.a, ir.Load)
            and val.a.buffer is upd.write and val.b is body):
        return None
    i, j = stage.iters
    k = c.reduce_dims[0]

    def exactly(ld, *vs) -> bool:
        return len(ld.indices) == len(vs) and all(x is v for x, v in zip(ld.indices, vs))
    if not exactly(ir.Load(upd.write, tuple(upd.write_indices), dst), i, j):
        return None
    for fa, fb in ((c.a, c.b), (c.b, c.a)):
        if exactly(fa.load, i, k) and exactly(fb.load, k, j):
            A, B = fa.load.buffer, fb.load.buffer
            if upd.write in (A, B) or not _zero_based_box(upd.domain):
                return None
            return LowpMatch(kind, init, upd, A, B, upd.write)
    return None


def _c_safe(name: str) -> bool:
    """Kept as is by :func:`polycomp.hw.clike.legalize_names` (so a pointer argument
    named like the buffer stays the buffer)."""
    from polycomp.hw.clike import C_RESERVED, _is_safe
    return _is_safe(name, C_RESERVED)


def lowp_call(m: LowpMatch, model, target):
    """The statement calling the symbolic kernel for ``m`` (extents from the update
    domain, leading dimensions from the arrays' shapes), or None when an array's name
    would be changed by the printer."""
    import islpy as isl

    from polycomp.lowering.ast_to_ir import pw_aff_to_ir
    from polycomp.lowering.simplify import simplify
    from polycomp.scheduler.cpu.backbone_tile import register_block
    if not all(_c_safe(b.name) for b in (m.a, m.b, m.c)):
        return None
    dom = m.update.domain
    params = tuple(model.params)

    def extent(t: int):
        pa = dom.dim_max(t).add_constant_val(isl.Val.one(dom.get_ctx()))
        return simplify(pw_aff_to_ir(pa, model.context, params))
    M, N, K = extent(0), extent(1), extent(2)
    lda, ldb, ldc = (simplify(ir.shape_product(b.shape[1:])) for b in (m.a, m.b, m.c))
    MR, NV = register_block(target.cpu.vector_registers)
    args = (M, N, K, lda, ldb, ldc) + tuple(ir.Var(b.name, "handle") for b in (m.a, m.b, m.c))
    return ir.Evaluate(ir.Call(symbolic_name(m.kind, MR, NV), args, "void", pure=False))


#: the mark argument of a low-precision stage: ``lowp:<kind>:<update statement>``
MARK_ARG = "lowp"


def lowp_calls(func, state):
    """Code-generation pass: each ``cpu_microkernel:lowp:<kind>:<statement>`` mark
    (placed by :mod:`polycomp.scheduler.cpu.backbone_tile` on a low-precision product's
    subtree: init and update of every ``(i, j, k)``) is replaced by the call of the
    symbolic kernel computing the same ``C``.  The marked loop nest writes only ``C``
    (an output, whole) and reads ``A`` and ``B``, so nothing else observes the change;
    the sums differ from the loop nest's in rounding order (bf16: pairs of ``k``, see
    :func:`reference_bf16`; int8 is exact).  Leaves other marks alone."""
    from polycomp.scheduler.common import marks
    stmts = {s.name: s for s in state.model.statements}

    class _Lowp(ir.Mutator):
        count = 0
        depth = 0              # enclosing loops: a mark inside one no longer covers C

        def visit_For(self, s):
            self.depth += 1
            try:
                return self.generic(s)
            finally:
                self.depth -= 1

        def visit_AttrStmt(self, s):
            if s.key != marks.CPU_MICROKERNEL or not str(s.value).startswith(MARK_ARG + ":"):
                return self.generic(s)
            if self.depth or not _writes_only(s.body, name_of_write(s)):
                return self.visit(s.body)
            _, kind, name = str(s.value).split(":", 2)
            upd = stmts.get(name)
            init = next((x for x in state.model.statements
                         if upd is not None and x.kind == "init" and x.stage is upd.stage), None)
            m = match_lowp([init, upd], state.target) if init is not None else None
            call = lowp_call(m, state.model, state.target) if m is not None else None
            if call is None:
                return self.visit(s.body)
            self.count += 1
            return call
    def name_of_write(s) -> str:
        upd = stmts.get(str(s.value).split(":", 2)[2])
        return "" if upd is None else upd.write.name

    mut = _Lowp()
    out = func.with_body(mut.visit(func.body))
    return out


def _writes_only(body, name: str) -> bool:
    """Every store in ``body`` writes the buffer ``name`` (the marked nest is exactly the
    product's: nothing fused into it)."""
    bad: list = []
    ir.walk(body, lambda n: bad.append(n) if isinstance(n, ir.Store)
            and n.buffer.name != name else None)
    return bool(name) and not bad


def sources_for(func) -> str:
    """The C sources of the symbolic kernels ``func`` calls (each once), "" for none."""
    names: list[str] = []

    def visit(n):
        if isinstance(n, ir.Call) and n.name.startswith(SYMBOLIC_PREFIX) and n.name not in names:
            names.append(n.name)
    ir.walk(func.body, visit)
    out = []
    for name in names:
        kind, block = name[len(SYMBOLIC_PREFIX):].split("_")
        MR, NV = (int(x) for x in block.split("x"))
        out.append(generate_symbolic(kind, MR, NV))
    return "".join(out)
