"""What the caller's array alignment costs an fp32 GEMM ``M x N x K`` (``A @ B``, constant
shapes, both operands per call): a C probe (built with gcc -fopenmp) times the pipeline's
own kernel (``compile_kernel``'s C source, no edit) with ``A``, ``B`` and ``C`` placed 64-byte
aligned or 16 bytes past a 64-byte boundary (where numpy puts a large array), and two
hand-edited copies of it:

- ``loads``: the first register row tile's in-place reads of ``B`` (the few-row fill,
  ``PackRequest.fill``) read the aligned 64 bytes *below* their address: wrong results,
  timing only -- what aligned fill loads would save;
- ``perm``: the same reads as two aligned loads and one ``vpermt2ps`` (the same values:
  bitwise equal) -- the cheapest fix that keeps the panel layout;

and ``aim0``, the pipeline's kernel compiled with ``POLYCOMP_GEMM_STREAM_AIM=0`` (the
stream's prefetches at each line's first element, as before ``stream_aim``).

Rows are ``kernel@placement`` (``0``: all aligned; ``16``: all three 16 bytes off;
``B16`` / ``C16`` / ``A16``: that operand only), called in shuffled order each round,
``--calls`` calls per row per round; printed: best / median wall per call (us), the
median over rounds of the row's best call divided by ``base@0``'s in the same round
("paired", > 1: slower than aligned), and % of the FMA peak (``--peak`` GFLOP/s per core).

    env OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=1000 python scripts/gemm_align_probe.py \\
        32x4096x1024 32x1024x4096 --threads 2 --rounds 300

(A measuring probe like ``scripts/omp_wake.py``'s, not a kernel: the edited copies are
never part of polycomp.)
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from unittest import mock

ROWS = ("base@0", "base@16", "base@C16", "base@B16", "base@A16",
        "loads@16", "loads@B16", "perm@16", "aim0@0", "aim0@16")
PLACE = {"0": (0, 0, 0), "16": (4, 4, 4), "C16": (0, 0, 4), "B16": (0, 4, 0), "A16": (4, 0, 0)}

HELPERS = r"""
#include <stdint.h>
#define PC_ALIGN_DOWN(p) ((const float*)((uintptr_t)(p) & ~(uintptr_t)63))
static inline __m512 pc_load_two_aligned(const float* p) {
  uintptr_t a = (uintptr_t)p; const float* q = PC_ALIGN_DOWN(p); int s = (int)((a & 63) >> 2);
  const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(s),
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  return _mm512_permutex2var_ps(_mm512_load_ps(q), idx, _mm512_load_ps(q + 16));
}
"""

HARNESS = r"""
#define _GNU_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef void (*kfn)(const float*, const float*, float*);
%(decls)s
static double now(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}
static int cmpd(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y;
}
typedef struct { const char* name; kfn f; int oa, ob, oc, exact; } row_t;
static void fill(float* p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) p[i] = (float)((i * seed) %% 13) - 6.25f;
}
int main(int argc, char** argv) {
  int rounds = atoi(argv[1]), calls = atoi(argv[2]), M = %(m)d, N = %(n)d, K = %(k)d;
  row_t V[] = { %(rows)s };
  int nv = sizeof(V) / sizeof(V[0]);
  size_t sa = (size_t)M * K + 64, sb = (size_t)K * N + 64, sc = (size_t)M * N + 64;
  float* A = aligned_alloc(4096, (sa * 4 + 4095) / 4096 * 4096);
  float* B = aligned_alloc(4096, (sb * 4 + 4095) / 4096 * 4096);
  float* C = aligned_alloc(4096, (sc * 4 + 4095) / 4096 * 4096);
  float* R = malloc((size_t)M * N * 4);
  for (int v = 0; v < nv; v++) {   /* the same values at every placement: bitwise check */
    fill(A + V[v].oa, (size_t)M * K, 7); fill(B + V[v].ob, (size_t)K * N, 5);
    memset(C, 0, sc * 4); V[v].f(A + V[v].oa, B + V[v].ob, C + V[v].oc);
    if (v == 0) memcpy(R, C, (size_t)M * N * 4);
    else if (V[v].exact && memcmp(R, C + V[v].oc, (size_t)M * N * 4))
      printf("%%s: NOT bitwise equal to %%s\n", V[v].name, V[0].name);
  }
  double** wall = malloc(nv * sizeof(double*)); double** rb = malloc(nv * sizeof(double*));
  for (int v = 0; v < nv; v++) {
    wall[v] = malloc((size_t)rounds * calls * sizeof(double));
    rb[v] = malloc(rounds * sizeof(double));
  }
  int* order = malloc(nv * sizeof(int)); for (int v = 0; v < nv; v++) order[v] = v;
  srand(1);
  for (int r = 0; r < rounds; r++) {
    for (int v = nv - 1; v > 0; v--) {
      int j = rand() %% (v + 1), t = order[v]; order[v] = order[j]; order[j] = t;
    }
    for (int o = 0; o < nv; o++) {
      row_t* x = &V[order[o]];
      const float* a = A + x->oa; const float* b = B + x->ob; float* c = C + x->oc;
      x->f(a, b, c);
      double best = 1e30;
      for (int q = 0; q < calls; q++) {
        double w = now(); x->f(a, b, c); w = now() - w;
        wall[order[o]][r * calls + q] = w; if (w < best) best = w;
      }
      rb[order[o]][r] = best;
    }
  }
  for (int v = 0; v < nv; v++) {
    double* pr = malloc(rounds * sizeof(double));
    for (int r = 0; r < rounds; r++) pr[r] = rb[v][r] / rb[0][r];
    qsort(pr, rounds, sizeof(double), cmpd);
    qsort(wall[v], (size_t)rounds * calls, sizeof(double), cmpd);
    printf("%%s %%g %%g %%g\n", V[v].name, wall[v][0] * 1e6, wall[v][rounds * calls / 2] * 1e6,
           pr[rounds / 2]);
  }
  return 0;
}
"""


def kernel_source(m: int, n: int, k: int, threads: int, name: str, env=None) -> str:
    """The pipeline's C for ``A @ B`` at ``threads`` (``env`` set while it compiles), its
    globals made file-local."""
    import polycomp as pc
    from polycomp.driver import compile_kernel
    from polycomp.frontend import ops
    from polycomp.frontend.dsl import Kernel
    from polycomp.hw.target import get_target
    t = get_target("cpu")
    t = dataclasses.replace(t, cpu=dataclasses.replace(t.cpu, threads=threads))
    kern = Kernel(lambda A, B: ops.matmul(A, B), name=name,
                  inputs={"A": pc.Tensor[(m, k), "float32"], "B": pc.Tensor[(k, n), "float32"]})
    with mock.patch.dict(os.environ, env or {}):     # set while compiling only
        src = compile_kernel(kern, t).source
    return re.sub(r"^int (pc_\w+)", r"static int \1", src, flags=re.M)


def edited(src: str, name: str, how: str) -> str:
    """``src`` with its in-place fill loads of ``B`` replaced (``loads`` / ``perm``)."""
    load = "_mm512_loadu_ps((B + "
    if load not in src:
        sys.exit(f"{name}: no in-place load of B (no few-row fill in this kernel)")
    new = "_mm512_load_ps(PC_ALIGN_DOWN(B + " if how == "loads" else "pc_load_two_aligned((B + "
    head = src.index(f"void {name}(")
    body = src[head:].replace(load, new).replace(f"void {name}(", f"void {name}_{how}(", 1)
    return src[:head] + HELPERS + body


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("sizes", nargs="+")
    p.add_argument("--threads", default="2")
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--calls", type=int, default=2)
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--peak", type=float, default=117.4, help="GFLOP/s per core")
    a = p.parse_args()
    rows = a.rows.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in a.sizes:
            m, n, k = (int(x) for x in spec.split("x"))
            for threads in (int(x) for x in a.threads.split(",")):
                name = f"g{m}_{n}_{k}_{threads}"
                src = kernel_source(m, n, k, threads, name)
                kinds = sorted({r.split("@")[0] for r in rows})
                objs, decls = [], []
                for kind in kinds:
                    fn = name if kind == "base" else f"{name}_{kind}"
                    text = src if kind == "base" else kernel_source(
                        m, n, k, threads, fn, {"POLYCOMP_GEMM_STREAM_AIM": "0"}) \
                        if kind == "aim0" else edited(src, name, kind)
                    path = os.path.join(tmp, f"{fn}.c")
                    with open(path, "w") as f:
                        f.write(text)
                    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-std=gnu11",
                                    "-c", path, "-o", path[:-2] + ".o"], check=True)
                    objs.append(path[:-2] + ".o")
                    decls.append(f"void {fn}(const float*, const float*, float*);")
                table = []
                for r in rows:
                    kind, place = r.split("@")
                    fn = name if kind == "base" else f"{name}_{kind}"
                    oa, ob, oc = PLACE[place]
                    table.append(f'{{"{r}", {fn}, {oa}, {ob}, {oc}, {int(kind != "loads")}}}')
                harness = os.path.join(tmp, f"h_{name}.c")
                with open(harness, "w") as f:
                    f.write(HARNESS % {"decls": "\n".join(decls), "rows": ", ".join(table),
                                       "m": m, "n": n, "k": k})
                exe = os.path.join(tmp, f"h_{name}")
                subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-std=gnu11", harness,
                                *objs, "-o", exe, "-lm"], check=True)
                out = subprocess.run([exe, str(a.rounds), str(a.calls)], check=True,
                                     capture_output=True, text=True,
                                     env={**os.environ, "OMP_NUM_THREADS": str(threads)}).stdout
                flops = 2.0 * m * n * k
                print(f"{spec}, {threads} thread(s), {a.rounds} rounds x {a.calls} calls:")
                for line in out.splitlines():
                    parts = line.split()
                    if len(parts) != 4 or not parts[0].count("@"):
                        print("  " + line)
                        continue
                    row, best, med, paired = parts[0], *map(float, parts[1:])
                    pct = flops / (best * 1e-6) / 1e9 / (a.peak * threads) * 100
                    print(f"  {row:10s} best {best:8.1f}  median {med:8.1f} us  "
                          f"paired {paired:.3f}  {pct:5.1f} % of the FMA peak")


if __name__ == "__main__":
    main()
