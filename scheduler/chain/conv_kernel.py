"""C source of a fused conv chain for the CPU targets (``c``, ``cpu-avx2``, ``cpu-avx512``).

The code-generation pass (:mod:`.conv_codegen`) replaces the ``conv_chain_fused`` nest by
a call of the function generated here.  Per output tile of ``TH x TW`` pixels, with the
intermediate region ``IH x IW = (TH + KH2 - 1) x (TW + KW2 - 1)`` starting at
``(y0 - p2h, x0 - p2w)`` (the second window's halo, recomputed by neighbouring tiles)::

    parallel for (n, tile):                   OpenMP static over batch x tiles
      B1[c kh kw][IH IW'] = X patch (zero outside X: the first padding)   im2col, panels
      Oa[F2][TH TW'] = 0
      for f-block of TF intermediate channels:
        St[TF][IH IW'] = W1[f-block, :] . B1              micro-kernel (rows: channels)
        St = elementwise stages (bias, relu, ..), 0 outside T's extents (second padding)
        B2[f kh kw][TH TW'] = windows of St, panels (a 1x1 second window reads St itself)
        Oa += W2[:, f-block kh kw] . B2                    micro-kernel
      O[n, :, tile] = Oa

Both products are GEMMs whose rows are channels (the weights ``W[f][c kh kw]`` are
row-major already: ``A``) and whose columns are the tile's pixels, flattened and padded
to whole vectors (``B``, packed by the im2col copies in panels of ``NV x VW`` pixels, so
the micro-kernel streams it contiguously); the micro-kernels and the ISA macros are
:mod:`.kernel`'s (``MR x NV`` vectors of ``VW``: 6 x 4 zmm, 6 x 2 ymm, 4 x 4 floats).
Each product sums in another order than the loop nest (float32 reassociation).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from polycomp import ir
from polycomp.scheduler.chain.kernel import _MACROS, _gemm
from polycomp.scheduler.chain.scalar_c import ScalarC

__all__ = ["ConvKernelSpec", "generate_conv", "conv_function_name", "c_value_conv"]

PREFIX = "pc_convchain_"


@dataclass(frozen=True)
class ConvKernelSpec:
    """What the generated function depends on: ISA, tiles, register block, windows and
    paddings, the elementwise code (C statements on ``v``) and its extra input arrays."""
    isa: str
    th: int
    tw: int
    tf: int
    mr: int
    nv: int
    k1h: int
    k1w: int
    p1h: int
    p1w: int
    k2h: int
    k2w: int
    p2h: int
    p2w: int
    elementwise: tuple[str, ...]
    extra: tuple[str, ...]

    @property
    def vw(self) -> int:
        return {"avx512": 16, "avx2": 8}.get(self.isa, 1)


def _gemm_panels(name: str, mk: str, mr: int, nv: int, vw: int) -> str:
    """``C[rows][cols] (+)= A[rows][kk] . B`` with ``B`` packed in panels of ``NW = nv vw``
    columns (panel ``p`` at ``Bp + p kk NW``, rows ``NW`` apart: the micro-kernel streams
    it contiguously); the micro-kernels ``{mk}_mk<r>x<v>`` of :func:`.kernel._gemm`."""
    nw = nv * vw
    disp = []
    for r in range(1, mr + 1):
        for v in range(1, nv + 1):
            disp.append(f"        case {r * 16 + v}: {mk}_mk{r}x{v}(kk, A + i * lda, lda, "
                        f"B, {nw}, C + i * ldc + j, ldc, acc); break;")
    return f"""static void {name}(int64_t rows, int64_t cols, int64_t kk,
    const float* restrict A, int64_t lda, const float* restrict Bp,
    float* restrict C, int64_t ldc, int acc) {{
  for (int64_t j = 0; j < cols; j += {nw}) {{
    const int64_t nvec = (cols - j) / {vw} < {nv} ? (cols - j) / {vw} : {nv};
    const float* B = Bp + (j / {nw}) * kk * {nw};
    for (int64_t i = 0; i < rows; i += {mr}) {{
      const int64_t r = rows - i < {mr} ? rows - i : {mr};
      switch (r * 16 + nvec) {{
{chr(10).join(disp)}
        default: break;
      }}
    }}
  }}
}}
"""


def conv_function_name(spec: ConvKernelSpec) -> str:
    h = hashlib.sha1(repr(spec).encode()).hexdigest()[:10]
    return f"{PREFIX}{spec.isa or 'c'}_{h}"


def generate_conv(spec: ConvKernelSpec) -> str:
    """The C source (signature ``(NB, C, H, W, F1, H1, W1, F2, H2, W2, X, W1, W2, O,
    extra..)``, every array contiguous NCHW / FCKK)."""
    fn, vw, s = conv_function_name(spec), spec.vw, spec
    g = f"{fn}_gemm"
    extra = "".join(f", const float* restrict {e}" for e in s.extra)
    ew = "\n".join(f"              {line}" for line in s.elementwise)
    k2 = s.k2h * s.k2w
    nw = s.nv * vw
    if k2 == 1:
        second = f"{g}(F2, PP, fc, Wb + f0, FK, St, IPP, Oa, PP, 1);"
    else:
        second = f"""/* windows of St, packed in panels of {nw} pixels (kk = fc KH2 KW2 rows) */
        const int64_t kk2 = fc * {k2};
        for (int64_t r = 0; r < fc; ++r)
          for (int64_t a = 0; a < {s.k2h}; ++a)
            for (int64_t b = 0; b < {s.k2w}; ++b) {{
              const int64_t q = (r * {s.k2h} + a) * {s.k2w} + b;
              const float* src = St + r * IPP + a * IW + b;
              for (int64_t i = 0; i < TH; ++i) PANEL_COPY(B2, kk2, q, i * TW, src + i * IW, TW);
            }}
        for (int64_t col = TH * TW; col < PP; ++col)       /* padding pixels: zero */
          for (int64_t q = 0; q < kk2; ++q)
            B2[(col / {nw}) * kk2 * {nw} + q * {nw} + col % {nw}] = 0.0f;
        {g}p(F2, PP, kk2, Wb + f0 * {k2}, FK, B2, Oa, PP, 1);"""
    b2_alloc = "NULL" if k2 == 1 else \
        f"(float*)calloc((size_t)(TF * {k2} * ((PP + {nw - 1}) / {nw} * {nw})), sizeof(float))"
    return f"""
/* ---- fused conv chain {fn} (polycomp scheduler/chain/conv_kernel.py):
        tile {s.th}x{s.tw} px, TF={s.tf}, windows {s.k1h}x{s.k1w} then {s.k2h}x{s.k2w},
        MR={s.mr} NV={s.nv} ---- */
#ifndef PC_CHAIN_MACROS_{s.isa or 'c'}
#define PC_CHAIN_MACROS_{s.isa or 'c'}
#include <math.h>
#include <stdlib.h>
#include <string.h>
{_MACROS[s.isa]}#endif
{_gemm(g, s.mr, s.nv, vw)}
{_gemm_panels(g + "p", g, s.mr, s.nv, vw)}
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))  /* copy loops stay loops */
#endif
static void {fn}(int64_t NB, int64_t C, int64_t H, int64_t W, int64_t F1, int64_t H1,
    int64_t W1, int64_t F2, int64_t H2, int64_t W2, const float* restrict X,
    const float* restrict Wa, const float* restrict Wb, float* restrict O{extra}) {{
  const int64_t TH = {s.th}, TW = {s.tw}, TF = {s.tf};
  const int64_t IH = TH + {s.k2h - 1}, IW = TW + {s.k2w - 1};
  const int64_t PP = (TH * TW + {vw - 1}) / {vw} * {vw};
  const int64_t IPP = (IH * IW + {vw - 1}) / {vw} * {vw};
  const int64_t CK = C * {s.k1h * s.k1w}, FK = F1 * {k2};
  const int64_t nty = (H2 + TH - 1) / TH, ntx = (W2 + TW - 1) / TW;
  (void)H1; (void)W1;
  /* copies in whole vectors (gcc turns copy loops and memcpy of a bounded size into
     qword loops otherwise) */
  #define PC_COPY(d, s, n) do {{ \
      int64_t t_ = 0; \
      for (; t_ + {vw} <= (n); t_ += {vw}) CV_ST((d) + t_, CV_LD((s) + t_)); \
      for (; t_ < (n); ++t_) (d)[t_] = (s)[t_]; }} while (0)
  /* copy n floats from src to columns col.. of row q of a panel-packed B (kk rows) */
  #define PANEL_COPY(B, kk, q, col, src, n) do {{ \
      int64_t j_ = 0; \
      while (j_ < (n)) {{ \
        const int64_t c_ = (col) + j_, o_ = c_ % {nw}; \
        const int64_t r_ = {nw} - o_ < (n) - j_ ? {nw} - o_ : (n) - j_; \
        float* restrict d_ = (B) + (c_ / {nw}) * (kk) * {nw} + (q) * {nw} + o_; \
        const float* restrict s_ = (src) + j_; \
        PC_COPY(d_, s_, r_); \
        j_ += r_; \
      }} }} while (0)
  #pragma omp parallel
  {{
    /* panels are NW = {nw} pixels wide, the last one too (its tail is never read) */
    float* B1 = (float*)calloc((size_t)(CK * ((IPP + {nw - 1}) / {nw} * {nw})), sizeof(float));
    float* St = (float*)calloc((size_t)(TF * IPP), sizeof(float));
    float* B2 = {b2_alloc};
    float* Oa = (float*)calloc((size_t)(F2 * PP), sizeof(float));
    float* ln = (float*)calloc((size_t)IW, sizeof(float));
    (void)B2;
    #pragma omp for schedule(static)
    for (int64_t blk = 0; blk < NB * nty * ntx; ++blk) {{
      const int64_t bb = blk / (nty * ntx), ty = (blk / ntx) % nty, tx = blk % ntx;
      const int64_t y0 = ty * TH, x0 = tx * TW;
      const int64_t sy = y0 - {s.p2h}, sx = x0 - {s.p2w};
      /* im2col of the input patch, in panels of {nw} pixels:
         B1[(c kh kw)][i IW + j] = X[bb, c, sy+i+kh-p1h, sx+j+kw-p1w] (0 outside X);
         each row is assembled in `ln` (zeros + one memcpy), then copied in panel runs */
      for (int64_t c = 0; c < C; ++c)
        for (int64_t a = 0; a < {s.k1h}; ++a)
          for (int64_t b = 0; b < {s.k1w}; ++b) {{
            const int64_t q = (c * {s.k1h} + a) * {s.k1w} + b;
            const int64_t ox = sx + b - {s.p1w};
            int64_t jlo = -ox, jhi = W - ox;
            jlo = jlo < 0 ? 0 : jlo > IW ? IW : jlo;
            jhi = jhi > IW ? IW : jhi < jlo ? jlo : jhi;
            for (int64_t i = 0; i < IH; ++i) {{
              const int64_t yy = sy + i + a - {s.p1h};
              if (yy < 0 || yy >= H || jhi <= jlo) {{
                memset(ln, 0, (size_t)IW * sizeof(float));
              }} else {{
                const float* src = X + ((bb * C + c) * H + yy) * W + ox;
                for (int64_t j = 0; j < jlo; ++j) ln[j] = 0.0f;
                PC_COPY(ln + jlo, src + jlo, jhi - jlo);
                for (int64_t j = jhi; j < IW; ++j) ln[j] = 0.0f;
              }}
              PANEL_COPY(B1, CK, q, i * IW, ln, IW);
            }}
          }}
      memset(Oa, 0, (size_t)(F2 * PP) * sizeof(float));
      for (int64_t f0 = 0; f0 < F1; f0 += TF) {{
        const int64_t fc = F1 - f0 < TF ? F1 - f0 : TF;
        {g}p(fc, IPP, CK, Wa + f0 * CK, CK, B1, St, IPP, 0);
        /* elementwise stages; zero outside T's extents (the second convolution's padding) */
        for (int64_t r = 0; r < fc; ++r) {{
          const int64_t f = f0 + r;
          (void)f;
          for (int64_t i = 0; i < IH; ++i) {{
            const int64_t y = sy + i;
            float* t = St + r * IPP + i * IW;
            for (int64_t j = 0; j < IW; ++j) {{
              const int64_t x = sx + j;
              (void)x;
              if (y < 0 || y >= H1 || x < 0 || x >= W1) {{ t[j] = 0.0f; continue; }}
              float v = t[j];
{ew}
              t[j] = v;
            }}
          }}
        }}
        {second}
      }}
      const int64_t th = H2 - y0 < TH ? H2 - y0 : TH, tw = W2 - x0 < TW ? W2 - x0 : TW;
      for (int64_t q = 0; q < F2; ++q)
        for (int64_t i = 0; i < th; ++i) {{
          float* restrict dst = O + ((bb * F2 + q) * H2 + y0 + i) * W2 + x0;
          const float* restrict src = Oa + q * PP + i * TW;
          PC_COPY(dst, src, tw);
        }}
    }}
    free(B1); free(St); free(Oa); free(ln);
    if (B2) free(B2);
  }}
  #undef PANEL_COPY
  #undef PC_COPY
}}
"""


def c_value_conv(e: ir.Expr, prev: ir.Buffer, iters: tuple, names: dict[int, str],
                 strides: dict[str, list[str]]) -> str:
    """``e`` as a C expression in the elementwise loop: ``prev`` at the point is ``v``;
    the iterators ``(n, f, y, x)`` are ``bb, f, y, x``; other loads index their array
    (``names``: buffer id -> parameter name; ``strides``: row-major strides in C)."""
    return _ConvScalarC(prev, iters, names, strides).expr(e)


class _ConvScalarC(ScalarC):
    CVARS = ("bb", "f", "y", "x")

    def __init__(self, prev, iters, names, strides):
        super().__init__(prev)
        self.iters, self.names, self.strides = iters, names, strides

    def var(self, x: ir.Var) -> str:
        return self.CVARS[next(i for i, v in enumerate(self.iters) if v is x)]

    def load(self, x: ir.Load) -> str:
        name = self.names[id(x.buffer)]
        terms = [f"{self.var(i)} * {st}" for i, st in zip(x.indices, self.strides[name])]
        return f"{name}[{' + '.join(terms) or '0'}]"
