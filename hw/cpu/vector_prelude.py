"""C support code for generated AVX2 / AVX-512 kernels: primitives, masks, reductions and
vector math (``exp``, ``log``, ``tanh``, ``erf``, ``sigmoid``).

The generated kernels call these ``static inline`` helpers (prefix ``pc256_`` for AVX2,
``pc512_`` for AVX-512) instead of raw intrinsics wherever an operation needs more than
one instruction or differs between a native build and a SIMDe build:

* native (``-mavx512f`` or ``-march=native`` on AVX-512 hardware): each helper is the
  real intrinsic (masked loads/stores, ``scalef``, ``getexp``-free bit tricks);
* SIMDe (``PC_SIMDE`` defined, compiled without ``-mavx512f``): SIMDe 0.7 lacks masked
  loads/stores, ``_mm512_reduce_*`` and some conversions, so those helpers fall back to
  lane loops over a small array; everything else maps to SIMDe's emulation.

The float32 math is the Cephes single-precision algorithms (``expf``: range reduction by
``ln 2`` split in two constants and a degree-6 polynomial, ~1 ulp; ``logf``: mantissa in
``[sqrt(1/2), sqrt(2))`` and a degree-9 polynomial, ~1 ulp; ``tanhf``: an odd polynomial
below 0.625, ``1 - 2/(exp(2|x|)+1)`` above) and, for ``erf``, a rational
approximation ``x P(x^2) / Q(x^2)`` on ``[-4, 4]`` (coefficients as published in Eigen's
``generic_fast_erf_float``; a few ulp).  float64 math calls libm lane by lane (correct,
not fast); float64 arithmetic is fully vectorised.
"""
from __future__ import annotations

_HEADER = r"""
#if !defined(PC_SIMDE) && !(PC_NATIVE_CONDITION)
#define PC_SIMDE   /* this build has no native PC_ISA_NAME: emulate it with SIMDe */
#endif
#if defined(PC_SIMDE)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/avx2.h>
#include <simde/x86/fma.h>
#else
#include <immintrin.h>
#endif
#define PC_VINLINE static inline __attribute__((always_inline))
"""

# ---------------------------------------------------------------- AVX2 (256-bit)

_AVX2 = r"""
/* ---- AVX2 primitives (8 x f32, 4 x f64; masks are all-ones lanes) ---- */
PC_VINLINE __m256 pc256_lane_range_ps(int64_t lo, int64_t hi) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  lo = lo < 0 ? 0 : (lo > 8 ? 8 : lo); hi = hi < 0 ? 0 : (hi > 8 ? 8 : hi);
  __m256i ge = _mm256_cmpgt_epi32(idx, _mm256_set1_epi32((int)lo - 1));
  __m256i lt = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), idx);
  return _mm256_castsi256_ps(_mm256_and_si256(ge, lt));
}
PC_VINLINE __m256d pc256_lane_range_pd(int64_t lo, int64_t hi) {
  const __m256i idx = _mm256_setr_epi64x(0, 1, 2, 3);
  lo = lo < 0 ? 0 : (lo > 4 ? 4 : lo); hi = hi < 0 ? 0 : (hi > 4 ? 4 : hi);
  __m256i ge = _mm256_cmpgt_epi64(idx, _mm256_set1_epi64x(lo - 1));
  __m256i lt = _mm256_cmpgt_epi64(_mm256_set1_epi64x(hi), idx);
  return _mm256_castsi256_pd(_mm256_and_si256(ge, lt));
}
PC_VINLINE __m256 pc256_maskz_loadu_ps(__m256 m, const float* p) { return _mm256_maskload_ps(p, _mm256_castps_si256(m)); }
PC_VINLINE void pc256_mask_storeu_ps(float* p, __m256 m, __m256 v) { _mm256_maskstore_ps(p, _mm256_castps_si256(m), v); }
PC_VINLINE __m256d pc256_maskz_loadu_pd(__m256d m, const double* p) { return _mm256_maskload_pd(p, _mm256_castpd_si256(m)); }
PC_VINLINE void pc256_mask_storeu_pd(double* p, __m256d m, __m256d v) { _mm256_maskstore_pd(p, _mm256_castpd_si256(m), v); }
#if !defined(PC_SIMDE)
PC_VINLINE __m256 pc256_load_strided_ps(const float* p, int64_t s) {
  if (s == 2) {  /* every other float: two loads (the second stops at p[14]), a shuffle
                    within 128-bit lanes and a permute of 64-bit pairs, not a gather */
    const __m256 lo = _mm256_loadu_ps(p);
    const __m256 hi = _mm256_maskload_ps(p + 8, _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, -1, 0));
    const __m256 t = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
  }
  if (s == -1)   /* backwards (durbin's r[k-i-1]): p[-7..0] loaded and reversed, not a gather */
    return _mm256_permutevar8x32_ps(_mm256_loadu_ps(p - 7), _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0));
  const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)s));
  return _mm256_i32gather_ps(p, idx, 4);
}
PC_VINLINE __m256 pc256_maskz_load_strided_ps(__m256 m, const float* p, int64_t s) {
  const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)s));
  return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), p, idx, m, 4);
}
PC_VINLINE __m256d pc256_load_strided_pd(const double* p, int64_t s) {
  if (s == -1)   /* backwards: p[-3..0] loaded and reversed, not a gather */
    return _mm256_permute4x64_pd(_mm256_loadu_pd(p - 3), _MM_SHUFFLE(0, 1, 2, 3));
  const __m128i idx = _mm_mullo_epi32(_mm_setr_epi32(0, 1, 2, 3), _mm_set1_epi32((int)s));
  return _mm256_i32gather_pd(p, idx, 8);
}
PC_VINLINE __m256d pc256_maskz_load_strided_pd(__m256d m, const double* p, int64_t s) {
  const __m128i idx = _mm_mullo_epi32(_mm_setr_epi32(0, 1, 2, 3), _mm_set1_epi32((int)s));
  return _mm256_mask_i32gather_pd(_mm256_setzero_pd(), p, idx, m, 8);
}
#else
PC_VINLINE __m256 pc256_load_strided_ps(const float* p, int64_t s) {
  float t[8] __attribute__((aligned(32))); for (int l = 0; l < 8; ++l) t[l] = p[l * s]; return _mm256_load_ps(t);
}
PC_VINLINE __m256 pc256_maskz_load_strided_ps(__m256 m, const float* p, int64_t s) {
  float t[8] __attribute__((aligned(32))) = {0}; int k = _mm256_movemask_ps(m);
  for (int l = 0; l < 8; ++l) if ((k >> l) & 1) t[l] = p[l * s]; return _mm256_load_ps(t);
}
PC_VINLINE __m256d pc256_load_strided_pd(const double* p, int64_t s) {
  double t[4] __attribute__((aligned(32))); for (int l = 0; l < 4; ++l) t[l] = p[l * s]; return _mm256_load_pd(t);
}
PC_VINLINE __m256d pc256_maskz_load_strided_pd(__m256d m, const double* p, int64_t s) {
  double t[4] __attribute__((aligned(32))) = {0}; int k = _mm256_movemask_pd(m);
  for (int l = 0; l < 4; ++l) if ((k >> l) & 1) t[l] = p[l * s]; return _mm256_load_pd(t);
}
#endif
PC_VINLINE __m256 pc256_mask_const_ps(int on) { return _mm256_castsi256_ps(_mm256_set1_epi32(on ? -1 : 0)); }
PC_VINLINE __m256d pc256_mask_const_pd(int on) { return _mm256_castsi256_pd(_mm256_set1_epi64x(on ? -1 : 0)); }
PC_VINLINE __m256 pc256_neg_ps(__m256 x) { return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f)); }
PC_VINLINE __m256d pc256_neg_pd(__m256d x) { return _mm256_xor_pd(x, _mm256_set1_pd(-0.0)); }
PC_VINLINE __m256 pc256_abs_ps(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
PC_VINLINE __m256d pc256_abs_pd(__m256d x) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), x); }
PC_VINLINE __m256 pc256_mask_not_ps(__m256 m) { return _mm256_xor_ps(m, pc256_mask_const_ps(1)); }
PC_VINLINE __m256d pc256_mask_not_pd(__m256d m) { return _mm256_xor_pd(m, pc256_mask_const_pd(1)); }
/* min/max with numpy's NaN semantics: a NaN in either operand gives NaN (the bare
   instructions return the second operand when either is NaN) */
PC_VINLINE __m256 pc256_max_ps(__m256 a, __m256 b) { return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q)); }
PC_VINLINE __m256 pc256_min_ps(__m256 a, __m256 b) { return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q)); }
PC_VINLINE __m256d pc256_max_pd(__m256d a, __m256d b) { return _mm256_blendv_pd(_mm256_max_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q)); }
PC_VINLINE __m256d pc256_min_pd(__m256d a, __m256d b) { return _mm256_blendv_pd(_mm256_min_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q)); }
PC_VINLINE float pc256_reduce_add_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s)); s = _mm_add_ss(s, _mm_movehdup_ps(s)); return _mm_cvtss_f32(s);
}
PC_VINLINE float pc256_reduce_max_ps(__m256 v) {
  if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) return __builtin_nanf("");  /* NaN propagates, as in numpy */
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s)); s = _mm_max_ss(s, _mm_movehdup_ps(s)); return _mm_cvtss_f32(s);
}
PC_VINLINE float pc256_reduce_min_ps(__m256 v) {
  if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) return __builtin_nanf("");  /* NaN propagates, as in numpy */
  __m128 s = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_min_ps(s, _mm_movehl_ps(s, s)); s = _mm_min_ss(s, _mm_movehdup_ps(s)); return _mm_cvtss_f32(s);
}
PC_VINLINE float pc256_reduce_mul_ps(__m256 v) {
  __m128 s = _mm_mul_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_mul_ps(s, _mm_movehl_ps(s, s)); s = _mm_mul_ss(s, _mm_movehdup_ps(s)); return _mm_cvtss_f32(s);
}
PC_VINLINE double pc256_reduce_add_pd(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
PC_VINLINE double pc256_reduce_max_pd(__m256d v) {
  if (_mm256_movemask_pd(_mm256_cmp_pd(v, v, _CMP_UNORD_Q))) return __builtin_nan("");  /* NaN propagates, as in numpy */
  __m128d s = _mm_max_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_max_sd(s, _mm_unpackhi_pd(s, s)));
}
PC_VINLINE double pc256_reduce_min_pd(__m256d v) {
  if (_mm256_movemask_pd(_mm256_cmp_pd(v, v, _CMP_UNORD_Q))) return __builtin_nan("");  /* NaN propagates, as in numpy */
  __m128d s = _mm_min_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_min_sd(s, _mm_unpackhi_pd(s, s)));
}
PC_VINLINE double pc256_reduce_mul_pd(__m256d v) {
  __m128d s = _mm_mul_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_mul_sd(s, _mm_unpackhi_pd(s, s)));
}
/* math building blocks of the generic float32 code below */
#define PCV256_SET1(x) _mm256_set1_ps(x)
#define PCV256_ADD _mm256_add_ps
#define PCV256_SUB _mm256_sub_ps
#define PCV256_MUL _mm256_mul_ps
#define PCV256_DIV _mm256_div_ps
#define PCV256_MIN _mm256_min_ps
#define PCV256_MAX _mm256_max_ps
#define PCV256_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define PCV256_ROUND(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define PCV256_LT(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define PCV256_LE(a, b) _mm256_cmp_ps(a, b, _CMP_LE_OQ)
#define PCV256_EQ(a, b) _mm256_cmp_ps(a, b, _CMP_EQ_OQ)
#define PCV256_BLEND(m, a, b) _mm256_blendv_ps(a, b, m)
#define PCV256_ABS pc256_abs_ps
#define PCV256_SIGN(x) _mm256_and_ps(x, _mm256_set1_ps(-0.0f))
#define PCV256_OR _mm256_or_ps
typedef __m256 pcv256_t;
/* p * 2^n for integer-valued n in [-150, 128]: two normal factors 2^(n/2), so 2^128
   never forms and results below FLT_MIN round through the subnormals */
PC_VINLINE __m256 pcv256_ldexp(__m256 p, __m256 n) {
  __m256i ni = _mm256_cvtps_epi32(n);
  __m256i n1 = _mm256_srai_epi32(ni, 1);
  __m256i n2 = _mm256_sub_epi32(ni, n1);
  __m256i e1 = _mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23);
  __m256i e2 = _mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e1)), _mm256_castsi256_ps(e2));
}
/* x = m * 2^e with m in [0.5, 1) for normal positive x */
PC_VINLINE __m256 pcv256_frexp(__m256 x, __m256* e) {
  __m256i bits = _mm256_castps_si256(x);
  *e = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(bits, 23)), _mm256_set1_ps(126.0f));
  __m256i m = _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f000000));
  return _mm256_castsi256_ps(m);
}
"""

# ---------------------------------------------------------------- AVX-512 (512-bit)

_AVX512 = r"""
/* ---- AVX-512 primitives (16 x f32, 8 x f64; masks are __mmask16 / __mmask8) ---- */
#if defined(PC_SIMDE)
typedef simde__mmask16 pc_mask16;
typedef simde__mmask8 pc_mask8;
#else
typedef __mmask16 pc_mask16;
typedef __mmask8 pc_mask8;
#endif
PC_VINLINE pc_mask16 pc512_lane_range_ps(int64_t lo, int64_t hi) {
  lo = lo < 0 ? 0 : (lo > 16 ? 16 : lo); hi = hi < 0 ? 0 : (hi > 16 ? 16 : hi);
  if (hi <= lo) return (pc_mask16)0;
  return (pc_mask16)((((uint32_t)1 << hi) - 1u) & ~(((uint32_t)1 << lo) - 1u));
}
PC_VINLINE pc_mask8 pc512_lane_range_pd(int64_t lo, int64_t hi) {
  lo = lo < 0 ? 0 : (lo > 8 ? 8 : lo); hi = hi < 0 ? 0 : (hi > 8 ? 8 : hi);
  if (hi <= lo) return (pc_mask8)0;
  return (pc_mask8)((((uint32_t)1 << hi) - 1u) & ~(((uint32_t)1 << lo) - 1u));
}
PC_VINLINE pc_mask16 pc512_mask_const_ps(int on) { return (pc_mask16)(on ? 0xffffu : 0u); }
PC_VINLINE pc_mask8 pc512_mask_const_pd(int on) { return (pc_mask8)(on ? 0xffu : 0u); }
PC_VINLINE pc_mask16 pc512_mask_not_ps(pc_mask16 m) { return (pc_mask16)(~m & 0xffffu); }
PC_VINLINE pc_mask8 pc512_mask_not_pd(pc_mask8 m) { return (pc_mask8)(~m & 0xffu); }
/* valign(hi, lo, r): lanes r.. of lo, then lanes ..r-1 of hi (the sliding windows of
   lowering/vectorize.py; r a constant) */
#if !defined(PC_SIMDE) && defined(__AVX512F__)
#define pc512_valign_pd(hi, lo, r) _mm512_castsi512_pd(_mm512_alignr_epi64(_mm512_castpd_si512(hi), _mm512_castpd_si512(lo), (r)))
#define pc512_valign_ps(hi, lo, r) _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(hi), _mm512_castps_si512(lo), (r)))
#else
PC_VINLINE __m512d pc512_valign_pd(__m512d hi, __m512d lo, int r) {
  double t[16]; _mm512_storeu_pd(t, lo); _mm512_storeu_pd(t + 8, hi); return _mm512_loadu_pd(t + r);
}
PC_VINLINE __m512 pc512_valign_ps(__m512 hi, __m512 lo, int r) {
  float t[32]; _mm512_storeu_ps(t, lo); _mm512_storeu_ps(t + 16, hi); return _mm512_loadu_ps(t + r);
}
#endif
#if !defined(PC_SIMDE) && defined(__AVX512F__)
PC_VINLINE __m512 pc512_maskz_loadu_ps(pc_mask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
PC_VINLINE void pc512_mask_storeu_ps(float* p, pc_mask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }
PC_VINLINE __m512d pc512_maskz_loadu_pd(pc_mask8 m, const double* p) { return _mm512_maskz_loadu_pd(m, p); }
PC_VINLINE void pc512_mask_storeu_pd(double* p, pc_mask8 m, __m512d v) { _mm512_mask_storeu_pd(p, m, v); }
PC_VINLINE __m512 pc512_cvtepi32_ps(__m512i v) { return _mm512_cvtepi32_ps(v); }
PC_VINLINE __m512 pc512_load_strided_ps(const float* p, int64_t s) {
  if (s == 2) {  /* every other float: two loads (the second stops at p[30]) and one
                    two-source permute, not a gather */
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_ps(_mm512_loadu_ps(p), even, _mm512_maskz_loadu_ps(0x7fff, p + 16));
  }
  if (s == -1)   /* backwards: p[-15..0] loaded and reversed, not a gather */
    return _mm512_permutexvar_ps(_mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                 _mm512_loadu_ps(p - 15));
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32((int)s));
  return _mm512_i32gather_ps(idx, p, 4);
}
PC_VINLINE uint32_t pc_spread8(uint32_t x) {  /* bit l of x -> bit 2l (l < 8) */
  x &= 0xffu; x = (x | (x << 4)) & 0x0f0fu; x = (x | (x << 2)) & 0x3333u;
  return (x | (x << 1)) & 0x5555u;
}
PC_VINLINE __m512 pc512_maskz_load_strided_ps(pc_mask16 m, const float* p, int64_t s) {
  if (s == 2) {  /* every other float under a lane mask (a row's tail): two masked loads
                    touching only the active lanes' elements, one permute, not a gather */
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512 lo = _mm512_maskz_loadu_ps((pc_mask16)pc_spread8(m), p);
    const __m512 hi = _mm512_maskz_loadu_ps((pc_mask16)pc_spread8((uint32_t)m >> 8), p + 16);
    return _mm512_maskz_permutex2var_ps(m, lo, even, hi);
  }
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32((int)s));
  return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, p, 4);
}
PC_VINLINE __m512d pc512_load_strided_pd(const double* p, int64_t s) {
  if (s == -1)   /* backwards: p[-7..0] loaded and reversed, not a gather */
    return _mm512_permutexvar_pd(_mm512_setr_epi64(7, 6, 5, 4, 3, 2, 1, 0), _mm512_loadu_pd(p - 7));
  const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)s));
  return _mm512_i32gather_pd(idx, p, 8);
}
PC_VINLINE __m512d pc512_maskz_load_strided_pd(pc_mask8 m, const double* p, int64_t s) {
  const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)s));
  return _mm512_mask_i32gather_pd(_mm512_setzero_pd(), m, idx, p, 8);
}
#else
/* SIMDe 0.7 has no masked loads/stores: lane loops that touch only active lanes */
PC_VINLINE __m512 pc512_maskz_loadu_ps(pc_mask16 m, const float* p) {
  float t[16] __attribute__((aligned(64))) = {0};
  for (int l = 0; l < 16; ++l) if ((m >> l) & 1) t[l] = p[l];
  return _mm512_load_ps(t);
}
PC_VINLINE void pc512_mask_storeu_ps(float* p, pc_mask16 m, __m512 v) {
  float t[16] __attribute__((aligned(64)));
  _mm512_store_ps(t, v);
  for (int l = 0; l < 16; ++l) if ((m >> l) & 1) p[l] = t[l];
}
PC_VINLINE __m512d pc512_maskz_loadu_pd(pc_mask8 m, const double* p) {
  double t[8] __attribute__((aligned(64))) = {0};
  for (int l = 0; l < 8; ++l) if ((m >> l) & 1) t[l] = p[l];
  return _mm512_load_pd(t);
}
PC_VINLINE void pc512_mask_storeu_pd(double* p, pc_mask8 m, __m512d v) {
  double t[8] __attribute__((aligned(64)));
  _mm512_store_pd(t, v);
  for (int l = 0; l < 8; ++l) if ((m >> l) & 1) p[l] = t[l];
}
PC_VINLINE __m512 pc512_load_strided_ps(const float* p, int64_t s) {
  float t[16] __attribute__((aligned(64))); for (int l = 0; l < 16; ++l) t[l] = p[l * s]; return _mm512_load_ps(t);
}
PC_VINLINE __m512 pc512_maskz_load_strided_ps(pc_mask16 m, const float* p, int64_t s) {
  float t[16] __attribute__((aligned(64))) = {0}; for (int l = 0; l < 16; ++l) if ((m >> l) & 1) t[l] = p[l * s]; return _mm512_load_ps(t);
}
PC_VINLINE __m512d pc512_load_strided_pd(const double* p, int64_t s) {
  double t[8] __attribute__((aligned(64))); for (int l = 0; l < 8; ++l) t[l] = p[l * s]; return _mm512_load_pd(t);
}
PC_VINLINE __m512d pc512_maskz_load_strided_pd(pc_mask8 m, const double* p, int64_t s) {
  double t[8] __attribute__((aligned(64))) = {0}; for (int l = 0; l < 8; ++l) if ((m >> l) & 1) t[l] = p[l * s]; return _mm512_load_pd(t);
}
PC_VINLINE __m512 pc512_cvtepi32_ps(__m512i v) {
  int32_t a[16] __attribute__((aligned(64))); float t[16] __attribute__((aligned(64)));
  _mm512_store_si512((void*)a, v);
  for (int l = 0; l < 16; ++l) t[l] = (float)a[l];
  return _mm512_load_ps(t);
}
#endif
PC_VINLINE __m512 pc512_neg_ps(__m512 x) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u))); }
PC_VINLINE __m512d pc512_neg_pd(__m512d x) { return _mm512_castsi512_pd(_mm512_xor_si512(_mm512_castpd_si512(x), _mm512_set1_epi64((long long)0x8000000000000000ull))); }
PC_VINLINE __m512 pc512_abs_ps(__m512 x) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff))); }
PC_VINLINE __m512d pc512_abs_pd(__m512d x) { return _mm512_castsi512_pd(_mm512_and_si512(_mm512_castpd_si512(x), _mm512_set1_epi64(0x7fffffffffffffffll))); }
PC_VINLINE __m512 pc512_max_ps(__m512 a, __m512 b) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_max_ps(a, b), a); }
PC_VINLINE __m512 pc512_min_ps(__m512 a, __m512 b) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_min_ps(a, b), a); }
PC_VINLINE __m512d pc512_max_pd(__m512d a, __m512d b) { return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), _mm512_max_pd(a, b), a); }
PC_VINLINE __m512d pc512_min_pd(__m512d a, __m512d b) { return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), _mm512_min_pd(a, b), a); }
/* horizontal reductions: halve to 256 bits, then the AVX2 ones (no _mm512_reduce_*) */
PC_VINLINE __m256 pc512_lo_ps(__m512 v) { return _mm512_castps512_ps256(v); }
PC_VINLINE __m256 pc512_hi_ps(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
PC_VINLINE float pc512_reduce_add_ps(__m512 v) { return pc256_reduce_add_ps(_mm256_add_ps(pc512_lo_ps(v), pc512_hi_ps(v))); }
PC_VINLINE float pc512_reduce_max_ps(__m512 v) { return pc256_reduce_max_ps(pc256_max_ps(pc512_lo_ps(v), pc512_hi_ps(v))); }
PC_VINLINE float pc512_reduce_min_ps(__m512 v) { return pc256_reduce_min_ps(pc256_min_ps(pc512_lo_ps(v), pc512_hi_ps(v))); }
PC_VINLINE float pc512_reduce_mul_ps(__m512 v) { return pc256_reduce_mul_ps(_mm256_mul_ps(pc512_lo_ps(v), pc512_hi_ps(v))); }
PC_VINLINE double pc512_reduce_add_pd(__m512d v) { return pc256_reduce_add_pd(_mm256_add_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1))); }
PC_VINLINE double pc512_reduce_max_pd(__m512d v) { return pc256_reduce_max_pd(pc256_max_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1))); }
PC_VINLINE double pc512_reduce_min_pd(__m512d v) { return pc256_reduce_min_pd(pc256_min_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1))); }
PC_VINLINE double pc512_reduce_mul_pd(__m512d v) { return pc256_reduce_mul_pd(_mm256_mul_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1))); }
#define PCV512_SET1(x) _mm512_set1_ps(x)
#define PCV512_ADD _mm512_add_ps
#define PCV512_SUB _mm512_sub_ps
#define PCV512_MUL _mm512_mul_ps
#define PCV512_DIV _mm512_div_ps
#define PCV512_MIN _mm512_min_ps
#define PCV512_MAX _mm512_max_ps
#define PCV512_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define PCV512_ROUND(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT)
#define PCV512_LT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)
#define PCV512_LE(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ)
#define PCV512_EQ(a, b) _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ)
#define PCV512_BLEND(m, a, b) _mm512_mask_blend_ps(m, a, b)
#define PCV512_ABS pc512_abs_ps
#define PCV512_SIGN(x) _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)))
#define PCV512_OR(a, b) _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
typedef __m512 pcv512_t;
#if defined(PC_SIMDE)
/* SIMDe's scalef forms 2^n as a float: split n so 2^128 never forms */
PC_VINLINE __m512 pcv512_ldexp(__m512 p, __m512 n) {
  __m512 n1 = _mm512_roundscale_ps(_mm512_mul_ps(n, _mm512_set1_ps(0.5f)), _MM_FROUND_TO_NEG_INF);
  return _mm512_scalef_ps(_mm512_scalef_ps(p, n1), _mm512_sub_ps(n, n1));
}
#else
PC_VINLINE __m512 pcv512_ldexp(__m512 p, __m512 n) { return _mm512_scalef_ps(p, n); }
#endif
PC_VINLINE __m512 pcv512_frexp(__m512 x, __m512* e) {
  __m512i bits = _mm512_castps_si512(x);
  *e = _mm512_sub_ps(pc512_cvtepi32_ps(_mm512_srli_epi32(bits, 23)), _mm512_set1_ps(126.0f));
  __m512i m = _mm512_or_si512(_mm512_and_si512(bits, _mm512_set1_epi32(0x007fffff)), _mm512_set1_epi32(0x3f000000));
  return _mm512_castsi512_ps(m);
}
"""

# ---------------------------------------------------------------- float32 math, generic

_MATH_TEMPLATE = r"""
/* ---- float32 vector math (W = 256 | 512) ---- */
PC_VINLINE pcvW_t pcW_exp_ps(pcvW_t x0) {
  /* clamp so that 2^fx is in [2^-150, 2^128]: ldexp then underflows to 0 (through the
     subnormals) and overflows to inf by itself; min/max keep NaN */
  pcvW_t x = PCVW_MAX(PCVW_SET1(-104.0f), PCVW_MIN(PCVW_SET1(89.0f), x0));
  pcvW_t fx = PCVW_ROUND(PCVW_MUL(x, PCVW_SET1(1.44269504088896341f)));
  x = PCVW_FMA(fx, PCVW_SET1(-0.693359375f), x);
  x = PCVW_FMA(fx, PCVW_SET1(2.12194440e-4f), x);
  pcvW_t z = PCVW_MUL(x, x);
  pcvW_t y = PCVW_SET1(1.9875691500E-4f);
  y = PCVW_FMA(y, x, PCVW_SET1(1.3981999507E-3f));
  y = PCVW_FMA(y, x, PCVW_SET1(8.3334519073E-3f));
  y = PCVW_FMA(y, x, PCVW_SET1(4.1665795894E-2f));
  y = PCVW_FMA(y, x, PCVW_SET1(1.6666665459E-1f));
  y = PCVW_FMA(y, x, PCVW_SET1(5.0000001201E-1f));
  y = PCVW_FMA(y, z, PCVW_ADD(x, PCVW_SET1(1.0f)));
  return pcvW_ldexp(y, fx);
}
PC_VINLINE pcvW_t pcW_log_ps(pcvW_t x0) {
  pcvW_t e;
  pcvW_t m = pcvW_frexp(x0, &e);
  /* m in [0.5, 1): move to [sqrt(1/2), sqrt(2)) */
  __typeof__(PCVW_LT(m, m)) small = PCVW_LT(m, PCVW_SET1(0.707106781186547524f));
  e = PCVW_BLEND(small, e, PCVW_SUB(e, PCVW_SET1(1.0f)));
  m = PCVW_BLEND(small, PCVW_SUB(m, PCVW_SET1(1.0f)), PCVW_SUB(PCVW_ADD(m, m), PCVW_SET1(1.0f)));
  pcvW_t z = PCVW_MUL(m, m);
  pcvW_t y = PCVW_SET1(7.0376836292E-2f);
  y = PCVW_FMA(y, m, PCVW_SET1(-1.1514610310E-1f));
  y = PCVW_FMA(y, m, PCVW_SET1(1.1676998740E-1f));
  y = PCVW_FMA(y, m, PCVW_SET1(-1.2420140846E-1f));
  y = PCVW_FMA(y, m, PCVW_SET1(1.4249322787E-1f));
  y = PCVW_FMA(y, m, PCVW_SET1(-1.6668057665E-1f));
  y = PCVW_FMA(y, m, PCVW_SET1(2.0000714765E-1f));
  y = PCVW_FMA(y, m, PCVW_SET1(-2.4999993993E-1f));
  y = PCVW_FMA(y, m, PCVW_SET1(3.3333331174E-1f));
  y = PCVW_MUL(PCVW_MUL(y, m), z);
  y = PCVW_FMA(e, PCVW_SET1(-2.12194440e-4f), y);
  y = PCVW_FMA(z, PCVW_SET1(-0.5f), y);
  pcvW_t r = PCVW_FMA(e, PCVW_SET1(0.693359375f), PCVW_ADD(m, y));
  /* x == 0 -> -inf; x < 0 or NaN -> NaN; +inf -> +inf */
  r = PCVW_BLEND(PCVW_EQ(x0, PCVW_SET1(0.0f)), r, PCVW_SET1(-INFINITY));
  r = PCVW_BLEND(PCVW_EQ(x0, PCVW_SET1(INFINITY)), r, PCVW_SET1(INFINITY));
  r = PCVW_BLEND(PCVW_LE(PCVW_SET1(0.0f), x0), PCVW_SET1(NAN), r);
  return r;
}
PC_VINLINE pcvW_t pcW_tanh_ps(pcvW_t x) {
  pcvW_t ax = PCVW_ABS(x);
  pcvW_t z = PCVW_MUL(x, x);
  pcvW_t p = PCVW_SET1(-5.70498872745E-3f);
  p = PCVW_FMA(p, z, PCVW_SET1(2.06390887954E-2f));
  p = PCVW_FMA(p, z, PCVW_SET1(-5.37397155531E-2f));
  p = PCVW_FMA(p, z, PCVW_SET1(1.33314422036E-1f));
  p = PCVW_FMA(p, z, PCVW_SET1(-3.33332819422E-1f));
  pcvW_t small = PCVW_FMA(PCVW_MUL(p, z), x, x);
  pcvW_t e = pcW_exp_ps(PCVW_ADD(ax, ax));
  pcvW_t big = PCVW_SUB(PCVW_SET1(1.0f), PCVW_DIV(PCVW_SET1(2.0f), PCVW_ADD(e, PCVW_SET1(1.0f))));
  big = PCVW_OR(big, PCVW_SIGN(x));
  return PCVW_BLEND(PCVW_LT(ax, PCVW_SET1(0.625f)), big, small);
}
PC_VINLINE pcvW_t pcW_sigmoid_ps(pcvW_t x) {
  pcvW_t e = pcW_exp_ps(PCVW_SUB(PCVW_SET1(0.0f), x));
  return PCVW_DIV(PCVW_SET1(1.0f), PCVW_ADD(PCVW_SET1(1.0f), e));
}
PC_VINLINE pcvW_t pcW_erf_ps(pcvW_t a) {
  pcvW_t x = PCVW_MAX(PCVW_SET1(-4.0f), PCVW_MIN(PCVW_SET1(4.0f), a));
  pcvW_t x2 = PCVW_MUL(x, x);
  pcvW_t p = PCVW_FMA(x2, PCVW_SET1(-2.72614225801306e-10f), PCVW_SET1(2.77068142495902e-08f));
  p = PCVW_FMA(x2, p, PCVW_SET1(-2.10102402082508e-06f));
  p = PCVW_FMA(x2, p, PCVW_SET1(-5.69250639462346e-05f));
  p = PCVW_FMA(x2, p, PCVW_SET1(-7.34990630326855e-04f));
  p = PCVW_FMA(x2, p, PCVW_SET1(-2.95459980854025e-03f));
  p = PCVW_FMA(x2, p, PCVW_SET1(-1.60960333262415e-02f));
  p = PCVW_MUL(x, p);
  pcvW_t q = PCVW_FMA(x2, PCVW_SET1(-1.45660718464996e-05f), PCVW_SET1(-2.13374055278905e-04f));
  q = PCVW_FMA(x2, q, PCVW_SET1(-1.68282697438203e-03f));
  q = PCVW_FMA(x2, q, PCVW_SET1(-7.37332916720468e-03f));
  q = PCVW_FMA(x2, q, PCVW_SET1(-1.42647390514189e-02f));
  return PCVW_DIV(p, q);
}
"""

# float64 math and float32 functions without a vector algorithm: libm lane by lane
_LANEWISE = r"""
#define PC_LANEWISE(W, SUF, VT, ST, L, NAME, CALL) \
PC_VINLINE VT pc##W##_##NAME##_##SUF(VT v) { \
  ST t[L] __attribute__((aligned(64))); \
  _mm##W##_store_##SUF(t, v); \
  for (int l = 0; l < L; ++l) t[l] = CALL(t[l]); \
  return _mm##W##_load_##SUF(t); \
}
PC_VINLINE double pc_sigmoid_f64(double x) { return 1.0 / (1.0 + exp(-x)); }
"""

_LANEWISE_FUNCS = (("exp", "exp"), ("log", "log"), ("tanh", "tanh"), ("erf", "erf"),
                   ("sigmoid", "pc_sigmoid_f64"))


def _lanewise(width: int) -> str:
    lanes = width // 64
    return "".join(f"PC_LANEWISE({width}, pd, __m{width}d, double, {lanes}, {n}, {c})\n"
                   for n, c in _LANEWISE_FUNCS)


#: the float32 math functions with a vector algorithm (others run lane by lane)
VECTOR_MATH_F32 = ("exp", "log", "tanh", "erf", "sigmoid")
#: every math function a vectorised loop may call (float32 and float64)
VECTOR_MATH = ("exp", "log", "tanh", "erf", "sigmoid", "sqrt", "rsqrt", "abs", "floor", "ceil")


# ---------------------------------------------------------------- dot-product units

#: what the dot-product intrinsics of hw/cpu/microkernel.py need: the macro a native
#: build must define, the ISA named in the SIMDe fallback's comment, and the helpers
_DOT_UNITS = {
    "dot_bf16": ("__AVX512BF16__", "AVX512_BF16", r"""
PC_VINLINE __m512 pc512_dpbf16_ps(__m512 acc, __m512i x, __m512i y) {
  __m512bh a, b; memcpy(&a, &x, sizeof a); memcpy(&b, &y, sizeof b);
  return _mm512_dpbf16_ps(acc, a, b);
}
"""),
    "dot_u8s8": ("__AVX512VNNI__", "AVX512_VNNI", r"""
/* the accumulator is a tied operand of vpdpbusd: with gcc 12's coalescing of SSA names
   the micro-kernel keeps stack copies of most accumulators inside its k loop
   (tests/test_cpu_lowp*.py check there are none; bf16 tiles do better without this) */
#pragma GCC optimize ("no-tree-coalesce-vars")
PC_VINLINE __m512i pc512_dpbusd_epi32(__m512i acc, __m512i x, __m512i y) { return _mm512_dpbusd_epi32(acc, x, y); }
PC_VINLINE pc_mask16 pc512_lane_range_epi32(int64_t lo, int64_t hi) { return pc512_lane_range_ps(lo, hi); }
#if !defined(PC_SIMDE)
PC_VINLINE __m512i pc512_maskz_loadu_epi32(pc_mask16 m, const int32_t* p) { return _mm512_maskz_loadu_epi32(m, p); }
PC_VINLINE void pc512_mask_storeu_epi32(int32_t* p, pc_mask16 m, __m512i v) { _mm512_mask_storeu_epi32(p, m, v); }
#else
PC_VINLINE __m512i pc512_maskz_loadu_epi32(pc_mask16 m, const int32_t* p) {
  int32_t t[16] __attribute__((aligned(64))) = {0};
  for (int l = 0; l < 16; ++l) if ((m >> l) & 1) t[l] = p[l];
  return _mm512_load_si512((const void*)t);
}
PC_VINLINE void pc512_mask_storeu_epi32(int32_t* p, pc_mask16 m, __m512i v) {
  int32_t t[16] __attribute__((aligned(64)));
  _mm512_store_si512((void*)t, v);
  for (int l = 0; l < 16; ++l) if ((m >> l) & 1) p[l] = t[l];
}
#endif
"""),
}

#: AVX2's ``valign`` (only in AVX2 kernels' prelude, so the AVX-512 one is unchanged):
#: two 128-bit lanes, so a shift by ``r`` lanes is a ``vperm2i128`` that takes the middle
#: 256 bits of ``hi:lo`` and a ``vpalignr`` (within 128-bit lanes) of it and ``lo`` or
#: ``hi``; ``r`` a constant (the byte counts are immediates)
_AVX2_VALIGN = r"""
/* valign(hi, lo, r): lanes r.. of lo, then lanes ..r-1 of hi (AVX2: the lifted layout's
   seams, lowering/lift.py; r a constant): vperm2i128 0x21 is the middle 256 bits of
   hi:lo, vpalignr shifts within the 128-bit halves */
#define pc256_valign_si256(hi, lo, b) ((b) < 16 ? \
  _mm256_alignr_epi8(_mm256_permute2x128_si256((lo), (hi), 0x21), (lo), (b) & 15) : (b) == 16 ? \
  _mm256_permute2x128_si256((lo), (hi), 0x21) : \
  _mm256_alignr_epi8((hi), _mm256_permute2x128_si256((lo), (hi), 0x21), (b) & 15))
#define pc256_valign_pd(hi, lo, r) _mm256_castsi256_pd(pc256_valign_si256(_mm256_castpd_si256(hi), _mm256_castpd_si256(lo), 8 * (r)))
#define pc256_valign_ps(hi, lo, r) _mm256_castsi256_ps(pc256_valign_si256(_mm256_castps_si256(hi), _mm256_castps_si256(lo), 4 * (r)))
"""


_DOT_COMMON = r"""
/* ---- AVX-512 dot-product units: a group vector is 16 lanes of a pair of bf16 or a
   quad of int8 values (__m512i) ---- */
PC_VINLINE __m512i pc512_broadcast_group(const void* p) { int32_t w; memcpy(&w, p, sizeof w); return _mm512_set1_epi32(w); }
"""


def prelude(isa: str, dots: tuple[str, ...] = ()) -> str:
    """The C helpers for ``isa`` (``avx2`` or ``avx512``), after the scalar header; with
    ``dots`` (the dot-product intrinsics a kernel calls,
    :func:`polycomp.hw.cpu.vector_printer.dot_calls`) also theirs, and a native build
    then needs their extensions too (SIMDe emulates the whole kernel otherwise)."""
    if isa not in ("avx2", "avx512"):
        return ""
    cond = "defined(__AVX512F__)" if isa == "avx512" else "defined(__AVX2__) && defined(__FMA__)"
    name = isa.upper()
    if dots and isa == "avx512":
        cond += "".join(f" && defined({_DOT_UNITS[d][0]})" for d in dots)
        name += "".join(f" + {_DOT_UNITS[d][1]}" for d in dots)
    header = _HEADER.replace("PC_NATIVE_CONDITION", cond).replace("PC_ISA_NAME", name)
    out = [header, _AVX2, _MATH_TEMPLATE.replace("W", "256"), _LANEWISE, _lanewise(256)]
    if isa == "avx2":
        out.append(_AVX2_VALIGN)
    if isa == "avx512":
        out += [_AVX512, _MATH_TEMPLATE.replace("W", "512"), _lanewise(512)]
        if dots:
            out += [_DOT_COMMON] + [_DOT_UNITS[d][2] for d in dots]
    return "".join(out)
