"""Where PolyBench adi's time goes at LARGE: a C probe (built with gcc -fopenmp, the cpu
target's flags) times the pipeline's own kernel (``polycomp bench polybench --dump-c``'s
C, no edit) against hand-edited copies of it, all called on the same PolyBench-initialised
arrays in one process, rows in turn each round:

- ``base``: the pipeline's kernel without dead-store contraction
  (``POLYCOMP_DEAD_STORE_CONTRACT=0``: the C the hand edits below start from);
- ``contract``: the pipeline's kernel as built (pass ``dead-store-contract``: the column
  sweep's ``p`` / ``q`` in per-thread buffers, built from ``colpriv``'s design);
- ``colpriv``: the column sweep (the first ``omp parallel for`` of the time step) with its
  ``p`` / ``q`` in a per-thread buffer ``P[j][k]`` (``k``: the row in the 32-row strip),
  never stored to ``p`` / ``q``.  Every ``p[i][j]`` / ``q[i][j]`` the column sweep writes is
  written again by the row sweep of the same time step before anything outside the
  sweep's strip reads it, so those stores are dead: the results are bitwise the same
  (checked: all four arrays, against ``base``);
- ``colpriv-apart``: ``colpriv`` with ``P`` and ``Q`` computed in two strip loops per
  ``j`` step (as the pipeline's tree keeps the two statements);
- ``colpriv+store``: the same, the buffer also stored to ``p`` / ``q`` after each ``j``
  step (``p[i][j] = P[j][k]``): what the buffer alone gives, without removing the stores;
- ``col`` / ``row``: the pipeline's kernel with only the column / only the row sweep
  (wrong results, timing only).

Printed per row: best / median wall and process CPU seconds over ``--rounds``, and the
ratio of ``base``'s best wall to the row's.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE \\
        python scripts/adi_probe.py --polybench /work/polybench --threads 2 --rounds 3

(``--rows base,contract,colpriv`` times only those rows.)

(A measuring probe like ``scripts/gemm_align_probe.py``, not a kernel: the edited copies
are never part of polycomp.)
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

FLAGS = ["-O3", "-march=native", "-fopenmp", "-std=gnu11", "-fPIC", "-shared",
         "-ffp-contract=fast", "-fno-math-errno", "-fwrapv"]

COLPRIV = """#pragma omp parallel
{
double (*P)[32] = aligned_alloc(64, sizeof(double) * 32 * (size_t)n);
double (*Q)[32] = aligned_alloc(64, sizeof(double) * 32 * (size_t)n);
#pragma omp for schedule(static)
for (int64_t c1 = 0; c1 < (pc_floordiv((n - 2), 32) + 1); ++c1) {
  const int64_t i0 = pc_max_i64(1, (c1 * 32)), w = pc_min_i64((n - 2), ((c1 * 32) + 31)) - i0 + 1;
  for (int64_t k = 0; k < w; ++k) { v[i0 + k] = 1.0; P[0][k] = 0.0; Q[0][k] = v[i0 + k]; STORE0 }
  for (int64_t j = 1; j < n - 1; ++j) {
    const double *uj = u + j * n + i0;
    for (int64_t k = 0; k < w; ++k) {
      P[j][k] = ((-c[0]) / ((a[0] * P[j - 1][k]) + b[0]));
      Q[j][k] = ((((((-d[0]) * uj[k - 1]) + ((1.0 + (2.0 * d[0])) * uj[k])) - (f[0] * uj[k + 1]))
                 - (a[0] * Q[j - 1][k])) / ((a[0] * P[j - 1][k]) + b[0]));
    }
    STOREJ
  }
  for (int64_t k = 0; k < w; ++k) v[(n - 1) * n + i0 + k] = 1.0;
  for (int64_t j = n - 2; j >= 1; --j)
    for (int64_t k = 0; k < w; ++k) v[j * n + i0 + k] = P[j][k] * v[(j + 1) * n + i0 + k] + Q[j][k];
}
free(P); free(Q);
}
"""
#: colpriv with the P and Q strip loops apart, as the pipeline's tree keeps them
COLPRIV_APART = COLPRIV.replace(
    "      P[j][k] = ((-c[0]) / ((a[0] * P[j - 1][k]) + b[0]));\n",
    "      P[j][k] = ((-c[0]) / ((a[0] * P[j - 1][k]) + b[0]));\n    }\n"
    "    for (int64_t k = 0; k < w; ++k) {\n")
STORE0 = "p[(i0 + k) * n] = 0.0; q[(i0 + k) * n] = Q[0][k];"
STOREJ = ("for (int64_t k = 0; k < w; ++k) { p[(i0 + k) * n + j] = P[j][k]; "
          "q[(i0 + k) * n + j] = Q[j][k]; }")


def sweeps(lines: list[str]) -> tuple[int, int, int]:
    """Line indices: the column sweep's pragma, the row sweep's pragma, the end of the
    row sweep's loop (the line closing it)."""
    pragma = "#pragma omp parallel for schedule(static)"
    ps = [k for k, ln in enumerate(lines) if ln.strip() == pragma]
    if len(ps) != 2:
        sys.exit(f"adi_probe: expected two parallel loops in the pipeline's adi, found {len(ps)}")
    depth, k = 0, ps[1] + 1
    while True:
        depth += lines[k].count("{") - lines[k].count("}")
        if depth == 0 and "}" in lines[k]:
            return ps[0], ps[1], k
        k += 1


def variants(src: str) -> dict[str, str]:
    lines = src.splitlines(keepends=True)
    col, row, end = sweeps(lines)
    for name in ("u", "v", "p", "q", "a[0]", "b[0]", "c[0]", "d[0]", "f[0]"):
        if name not in "".join(lines[col:row]):
            sys.exit(f"adi_probe: the column sweep no longer names {name!r}")

    def cut(a, b, put=""):
        return "".join(lines[:a]) + put + "".join(lines[b:])
    return {
        "base": src,
        "colpriv": cut(col, row, COLPRIV.replace("STORE0", "").replace("STOREJ", "")),
        "colpriv-apart": cut(col, row, COLPRIV_APART.replace("STORE0", "").replace("STOREJ", "")),
        "colpriv+store": cut(col, row, COLPRIV.replace("STORE0", STORE0).replace("STOREJ", STOREJ)),
        "col": cut(row, end + 1),
        "row": cut(col, row),
    }


def init(n: int) -> list[np.ndarray]:
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    return [((i + n - j) / n).astype(np.float64)] + [np.zeros((n, n)) for _ in range(3)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--polybench", default=os.environ.get("POLYBENCH_DIR"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=1000, help="N (LARGE: 1000)")
    ap.add_argument("--tsteps", type=int, default=500, help="TSTEPS (LARGE: 500)")
    ap.add_argument("--rows", default="", help="rows to time besides base (default: all)")
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        cli = [sys.executable, "-c", "from polycomp.cli import main; main()"]
        srcs = {}
        for row, switch in (("base", "0"), ("contract", "1")):
            out = os.path.join(tmp, row)
            subprocess.run([*cli, "bench", "polybench", "--polybench", a.polybench,
                            "--dataset", "LARGE", "--threads", str(a.threads), "--kernels",
                            "adi", "--dump-c", out], check=True, stdout=subprocess.DEVNULL,
                           env=dict(os.environ, POLYCOMP_DEAD_STORE_CONTRACT=switch))
            with open(os.path.join(out, "adi.c")) as fh:
                srcs[row] = fh.read()
        vs = variants(srcs["base"])
        vs = {"base": vs["base"], "contract": srcs["contract"],
              **{k: v for k, v in vs.items() if k != "base"}}
        if a.rows:
            keep = {"base", *a.rows.split(",")}
            vs = {k: v for k, v in vs.items() if k in keep}
        fns = {}
        for name, text in vs.items():
            c, so = os.path.join(tmp, f"{name}.c"), os.path.join(tmp, f"{name}.so")
            with open(c, "w") as fh:
                fh.write(text)
            subprocess.run(["gcc", *FLAGS, "-o", so, c], check=True)
            f = ctypes.CDLL(so).kernel_adi
            f.argtypes = [ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * 4
            fns[name] = f
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in fns}
        for r in range(a.rounds):
            ref = None
            for name, f in fns.items():
                arrs = init(a.n)
                t0, c0 = time.perf_counter(), time.process_time()
                f(a.tsteps, a.n, *[x.ctypes.data for x in arrs])
                times[name].append((time.perf_counter() - t0, time.process_time() - c0))
                if name == "base":
                    ref = arrs
                elif r == 0 and name.startswith(("contract", "colpriv")) and ref:
                    same = all(np.array_equal(x.view(np.int64), y.view(np.int64))
                               for x, y in zip(arrs, ref))
                    print(f"{name}: {'bitwise equal to base' if same else 'DIFFERS from base'}")
    best0 = min(t[0] for t in times["base"])
    print(f"adi N={a.n} TSTEPS={a.tsteps}, {a.threads} threads, {a.rounds} rounds")
    print("| row | wall best / median s | CPU best / median s | base / row (best wall) |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        w, cp = [t[0] for t in ts], [t[1] for t in ts]
        print(f"| {name} | {min(w):.3f} / {statistics.median(w):.3f} | "
              f"{min(cp):.3f} / {statistics.median(cp):.3f} | {best0 / min(w):.2f} |")


if __name__ == "__main__":
    main()
