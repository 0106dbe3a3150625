"""C source of a fused chain for the CPU targets (``c``, ``cpu-avx2``, ``cpu-avx512``).

The fused tree (:mod:`.tree`) puts the chain under a ``chain_fused`` mark; the
code-generation pass :func:`polycomp.scheduler.chain.codegen.chain_calls` replaces the
marked loop nest by a call of the function generated here, which executes the plan's
block order ``(b, m, l, k | n)`` with the intermediate tile in a per-thread local
buffer:

    parallel for (b, m-block of TM rows):
      Oacc[TM][N'] = 0                  (running max -inf, running sum 0 with softmax)
      for l-block of TL columns:
        pack Y[b, :, l-block] -> Yp[K][TL'] and Z[b, l-block, :] -> Zp[TL][N'] (zero pad)
        Tt[TM][TL'] = X[b, m-block, :] . Yp          (micro-kernel, MR x NV vectors)
        Tt = elementwise stages (scale, masks)       (scalar C, per element)
        softmax: online rescaling (running max m, sum s per row; see below)
        Oacc += Tt[:, :TL] . Zp                      (micro-kernel)
      O[b, m-block, :] = Oacc (/ s with softmax)

Online softmax (FlashAttention): with the row's running max ``m`` and sum ``s``, a new
tile of scores ``t`` gives ``m' = max(m, max t)``, ``c = exp(m - m')``, ``p = exp(t -
m')``, ``s' = s c + sum p``, ``Oacc = Oacc c + p . Z``; at the end ``O = Oacc / s``.  A
row all ``-inf`` so far (``m' = -inf``) contributes nothing (``p = 0``, NaN kept where a
score is NaN), so a row masked in full ends as ``0 / 0 = NaN`` — what numpy's unfused
``exp(x - max) / sum`` gives (``exp(-inf - -inf) = NaN``); NaN or ``+inf`` scores make
their row NaN, as in numpy.  Rounding differs from the unfused chain (tile-wise
maxima and sums), within float32 tolerance.

The same source serves the three ISAs through a few macros: ``VW`` lanes (16, 8 or 1),
vector load/store/FMA/exp (AVX-512 / AVX2 intrinsics and the vector prelude's
``pc512_exp_ps`` / ``pc256_exp_ps``; plain ``float`` and ``expf`` for ``c``).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from polycomp import ir
from polycomp.scheduler.chain.scalar_c import ScalarC

__all__ = ["KernelSpec", "generate", "function_name"]

PREFIX = "pc_chain_"


@dataclass(frozen=True)
class KernelSpec:
    """What the generated function depends on: ISA (``avx512``, ``avx2``, ``""``),
    tiles, register block, the elementwise code (C statements on ``v``) and the extra
    input arrays it reads, softmax or not."""
    isa: str
    tm: int
    tl: int
    mr: int
    nv: int
    elementwise: tuple[str, ...]
    extra: tuple[str, ...]
    softmax: bool
    y_transposed: bool = False

    @property
    def vw(self) -> int:
        return {"avx512": 16, "avx2": 8}.get(self.isa, 1)


def function_name(spec: KernelSpec) -> str:
    h = hashlib.sha1(repr(spec).encode()).hexdigest()[:10]
    return f"{PREFIX}{spec.isa or 'c'}_{h}"


_MACROS = {
    "avx512": """#define CV __m512
#define CV_LD(p) _mm512_loadu_ps(p)
#define CV_ST(p, v) _mm512_storeu_ps((p), (v))
#define CV_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define CV_MUL(a, b) _mm512_mul_ps((a), (b))
#define CV_SUB(a, b) _mm512_sub_ps((a), (b))
#define CV_MAX(a, b) _mm512_max_ps((a), (b))
#define CV_SET1(x) _mm512_set1_ps(x)
#define CV_ZERO() _mm512_setzero_ps()
#define CV_EXP(v) pc512_exp_ps(v)
""",
    "avx2": """#define CV __m256
#define CV_LD(p) _mm256_loadu_ps(p)
#define CV_ST(p, v) _mm256_storeu_ps((p), (v))
#define CV_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define CV_MUL(a, b) _mm256_mul_ps((a), (b))
#define CV_SUB(a, b) _mm256_sub_ps((a), (b))
#define CV_MAX(a, b) _mm256_max_ps((a), (b))
#define CV_SET1(x) _mm256_set1_ps(x)
#define CV_ZERO() _mm256_setzero_ps()
#define CV_EXP(v) pc256_exp_ps(v)
""",
    "": """#define CV float
#define CV_LD(p) (*(p))
#define CV_ST(p, v) (*(p) = (v))
#define CV_FMA(a, b, c) ((a) * (b) + (c))
#define CV_MUL(a, b) ((a) * (b))
#define CV_SUB(a, b) ((a) - (b))
#define CV_MAX(a, b) ((a) > (b) ? (a) : (b))
#define CV_SET1(x) (x)
#define CV_ZERO() 0.0f
#define CV_EXP(v) expf(v)
""",
}


def _microkernel(fn: str, r: int, nv: int, vw: int) -> str:
    """``C[r][nv*vw] (+)= A[r][kk] . B[kk][nv*vw]`` with accumulators in registers."""
    lines = [f"static inline void {fn}(int64_t kk, const float* restrict A, int64_t lda, "
             f"const float* restrict Bp, int64_t ldb, float* restrict C, int64_t ldc, "
             f"int acc) {{"]
    for i in range(r):
        for v in range(nv):
            lines.append(f"  CV c{i}_{v} = acc ? CV_LD(C + {i} * ldc + {v * vw}) : CV_ZERO();")
    lines.append("  for (int64_t q = 0; q < kk; ++q) {")
    for v in range(nv):
        lines.append(f"    const CV b{v} = CV_LD(Bp + q * ldb + {v * vw});")
    for i in range(r):
        lines.append(f"    {{ const CV a = CV_SET1(A[{i} * lda + q]);")
        for v in range(nv):
            lines.append(f"      c{i}_{v} = CV_FMA(a, b{v}, c{i}_{v});")
        lines.append("    }")
    lines.append("  }")
    for i in range(r):
        for v in range(nv):
            lines.append(f"  CV_ST(C + {i} * ldc + {v * vw}, c{i}_{v});")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _gemm(name: str, mr: int, nv: int, vw: int) -> str:
    """``C[rows][cols] (+)= A[rows][kk] . B[kk][cols]`` over register blocks
    (``cols`` a multiple of ``vw``)."""
    out = []
    for r in range(1, mr + 1):
        for v in range(1, nv + 1):
            out.append(_microkernel(f"{name}_mk{r}x{v}", r, v, vw))
    disp = []
    for r in range(1, mr + 1):
        for v in range(1, nv + 1):
            disp.append(f"        case {r * 16 + v}: {name}_mk{r}x{v}(kk, A + i * lda, lda, "
                        f"Bp + j, ldb, C + i * ldc + j, ldc, acc); break;")
    out.append(f"""static void {name}(int64_t rows, int64_t cols, int64_t kk,
    const float* restrict A, int64_t lda, const float* restrict Bp, int64_t ldb,
    float* restrict C, int64_t ldc, int acc) {{
  for (int64_t j = 0; j < cols; j += {nv * vw}) {{
    const int64_t nvec = (cols - j) / {vw} < {nv} ? (cols - j) / {vw} : {nv};
    for (int64_t i = 0; i < rows; i += {mr}) {{
      const int64_t r = rows - i < {mr} ? rows - i : {mr};
      switch (r * 16 + nvec) {{
{chr(10).join(disp)}
        default: break;
      }}
    }}
  }}
}}
""")
    return "".join(out)


def generate(spec: KernelSpec) -> str:
    """The C source of the fused chain function for ``spec`` (see the module docstring).
    Signature: ``(B, M, N, K, L, X, Y, Z, O, extra...)``, every array contiguous."""
    fn, vw = function_name(spec), spec.vw
    g = f"{fn}_gemm"
    extra_params = "".join(f", const float* restrict {e}" for e in spec.extra)
    ew = "\n".join(f"            {line}" for line in spec.elementwise)
    elementwise = "" if not spec.elementwise else f"""
      for (int64_t r = 0; r < mr; ++r) {{
        const int64_t m = m0 + r;
        for (int64_t c = 0; c < lc; ++c) {{
          const int64_t l = l0 + c;
          float v = Tt[r * TLP + c];
{ew}
          Tt[r * TLP + c] = v;
        }}
      }}
      (void)bb;"""
    softmax = "" if not spec.softmax else f"""
      for (int64_t r = 0; r < mr; ++r) {{
        float* t = Tt + r * TLP;
        float mx = -INFINITY;
        {{
          CV vx = CV_SET1(-INFINITY);
          int64_t c = 0;
          for (; c + {vw} <= lc; c += {vw}) vx = CV_MAX(vx, CV_LD(t + c));
          float tmp[{vw}];
          CV_ST(tmp, vx);
          for (int q = 0; q < {vw}; ++q) mx = tmp[q] > mx ? tmp[q] : mx;
          for (; c < lc; ++c) mx = t[c] > mx ? t[c] : mx;
        }}
        /* a NaN the maxima skip still makes its row NaN: exp(NaN - m) enters the sum */
        const float mnew = mx > rmax[r] ? mx : rmax[r];
        if (mnew == -INFINITY) {{            /* all -inf so far: p = 0 (NaN kept) */
          for (int64_t c = 0; c < lc; ++c) t[c] = t[c] != t[c] ? t[c] : 0.0f;
          continue;
        }}
        const float scale = expf(rmax[r] - mnew);
        const CV vm = CV_SET1(mnew);
        CV vs = CV_ZERO();
        int64_t c = 0;
        for (; c + {vw} <= lc; c += {vw}) {{
          const CV p = CV_EXP(CV_SUB(CV_LD(t + c), vm));
          CV_ST(t + c, p);
          vs = CV_FMA(p, CV_SET1(1.0f), vs);
        }}
        float s = 0.0f;
        {{ float tmp[{vw}]; CV_ST(tmp, vs); for (int q = 0; q < {vw}; ++q) s += tmp[q]; }}
        for (; c < lc; ++c) {{ const float p = expf(t[c] - mnew); t[c] = p; s += p; }}
        rsum[r] = rsum[r] * scale + s;
        rmax[r] = mnew;
        if (scale != 1.0f) {{
          const CV vsc = CV_SET1(scale);
          float* o = Oa + r * NP;
          for (int64_t q = 0; q < NP; q += {vw}) CV_ST(o + q, CV_MUL(CV_LD(o + q), vsc));
        }}
      }}"""
    finish = "Oa[r * NP + n] / rsum[r]" if spec.softmax else "Oa[r * NP + n]"
    if spec.y_transposed:     # Y[b, l, k]: transpose the tile while packing
        pack_y = """for (int64_t k = 0; k < K; ++k)
          for (int64_t c = lc; c < TLP; ++c) Yp[k * TLP + c] = 0.0f;
        for (int64_t c = 0; c < lc; ++c) {
          const float* src = Y + (bb * L + l0 + c) * K;
          for (int64_t k = 0; k < K; ++k) Yp[k * TLP + c] = src[k];
        }"""
    else:
        pack_y = """for (int64_t k = 0; k < K; ++k) {
          const float* src = Y + (bb * K + k) * L + l0;
          float* dst = Yp + k * TLP;
          memcpy(dst, src, (size_t)lc * sizeof(float));
          for (int64_t c = lc; c < TLP; ++c) dst[c] = 0.0f;
        }"""
    return f"""
/* ---- fused chain {fn} (polycomp scheduler/chain): TM={spec.tm} TL={spec.tl}
        MR={spec.mr} NV={spec.nv} ---- */
#ifndef PC_CHAIN_MACROS_{spec.isa or 'c'}
#define PC_CHAIN_MACROS_{spec.isa or 'c'}
#include <math.h>
#include <stdlib.h>
#include <string.h>
{_MACROS[spec.isa]}#endif
{_gemm(g, spec.mr, spec.nv, vw)}
static void {fn}(int64_t B, int64_t M, int64_t N, int64_t K, int64_t L,
    const float* restrict X, const float* restrict Y, const float* restrict Z,
    float* restrict O{extra_params}) {{
  const int64_t TM = {spec.tm}, TL = {spec.tl}, TLP = {-(-spec.tl // vw) * vw};
  const int64_t NP = (N + {vw - 1}) / {vw} * {vw};
  const int64_t mblocks = (M + TM - 1) / TM;
  #pragma omp parallel
  {{
    float* Tt = (float*)aligned_alloc(64, (size_t)((TM * TLP * 4 + 63) / 64 * 64));
    float* Yp = (float*)aligned_alloc(64, (size_t)((K * TLP * 4 + 63) / 64 * 64));
    float* Zp = (float*)aligned_alloc(64, (size_t)((TL * NP * 4 + 63) / 64 * 64));
    float* Oa = (float*)aligned_alloc(64, (size_t)((TM * NP * 4 + 63) / 64 * 64));
    float rmax[{spec.tm}], rsum[{spec.tm}];
    (void)rmax; (void)rsum;
    #pragma omp for schedule(static)
    for (int64_t blk = 0; blk < B * mblocks; ++blk) {{
      const int64_t bb = blk / mblocks, m0 = (blk % mblocks) * TM;
      const int64_t mr = M - m0 < TM ? M - m0 : TM;
      const float* Xb = X + (bb * M + m0) * K;
      memset(Oa, 0, (size_t)(TM * NP) * sizeof(float));
      for (int64_t r = 0; r < TM; ++r) {{ rmax[r] = -INFINITY; rsum[r] = 0.0f; }}
      for (int64_t l0 = 0; l0 < L; l0 += TL) {{
        const int64_t lc = L - l0 < TL ? L - l0 : TL;
        /* full tiles whose rows are whole vectors are read in place; others are packed */
        const float* Yt = Yp;
        int64_t ldy = TLP;
        if ({int(not spec.y_transposed)} && lc == TLP) {{
          Yt = Y + bb * K * L + l0;
          ldy = L;
        }} else {{
        {pack_y}
        }}
        const float* Zt = Zp;
        int64_t ldz = NP;
        if (N == NP) {{
          Zt = Z + (bb * L + l0) * N;
          ldz = N;
        }} else {{
          for (int64_t l = 0; l < lc; ++l) {{
            const float* src = Z + (bb * L + l0 + l) * N;
            float* dst = Zp + l * NP;
            memcpy(dst, src, (size_t)N * sizeof(float));
            for (int64_t c = N; c < NP; ++c) dst[c] = 0.0f;
          }}
        }}
        {g}(mr, TLP, K, Xb, K, Yt, ldy, Tt, TLP, 0);{elementwise}{softmax}
        {g}(mr, NP, lc, Tt, TLP, Zt, ldz, Oa, NP, 1);
      }}
      for (int64_t r = 0; r < mr; ++r)
        for (int64_t n = 0; n < N; ++n)
          O[(bb * M + m0 + r) * N + n] = {finish};
    }}
    free(Tt); free(Yp); free(Zp); free(Oa);
  }}
}}
"""


def c_value(e: ir.Expr, prev: ir.Buffer, iters: tuple, names: dict[int, str],
            strides: dict[str, list[str]], nb: int) -> str:
    """``e`` as a C expression in the elementwise loop: ``prev`` at the point is ``v``,
    the iterators are ``bb`` (flattened batch), ``m``, ``l``; other loads index their
    array (``names`` maps buffer ids to parameter names, ``strides`` their row-major
    strides as C expressions)."""
    return _BmmScalarC(prev, iters, names, strides, nb).expr(e)


class _BmmScalarC(ScalarC):
    def __init__(self, prev, iters, names, strides, nb):
        super().__init__(prev)
        self.iters, self.names, self.strides, self.nb = iters, names, strides, nb

    def _axis(self, x) -> int:
        return next(i for i, v in enumerate(self.iters) if v is x)

    def var(self, x: ir.Var) -> str:
        k = self._axis(x)
        if k < self.nb:
            raise ValueError("a batch iterator outside an index")
        return "m" if k == self.nb else "l"

    def load(self, x: ir.Load) -> str:
        nb, name = self.nb, self.names[id(x.buffer)]
        terms = []
        for idx, st in zip(x.indices, self.strides[name]):
            k = self._axis(idx)
            if k >= nb:
                terms.append(f"{'m' if k == nb else 'l'} * {st}")
        if any(any(i is v for v in self.iters[:nb]) for i in x.indices):
            terms.append(f"bb * {_batch_stride(self.strides[name], nb)}")
        return f"{name}[{' + '.join(terms) or '0'}]"


def _batch_stride(strides: list[str], nb: int) -> str:
    """The stride of the flattened batch index of an array indexed by the full batch
    prefix: the stride of its last batch dimension."""
    return strides[nb - 1]
