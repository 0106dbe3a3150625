"""The graph ``x (M, K) @ W (K, N)`` with ``W`` a graph constant (packed at compile time, as
``benchmarks/cpu.py`` ``bench_constant_weight`` runs it), compiled once per variant (a
variant is a label and environment settings read at compile time), the calls
interleaved in one process (rounds of 20 calls each, ``out=`` as the bench calls it):
wall time per call, best and median, as % of the FMA peak of the threads used, and the
process CPU time (all threads).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 OMP_PROC_BIND=spread \\
        python scripts/weight_variants.py 32 1024 1024 old:POLYCOMP_FEW_ROW_BLOCK=0 new: --numpy
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("M", type=int)
    p.add_argument("N", type=int)
    p.add_argument("K", type=int)
    p.add_argument("variants", nargs="+", help="LABEL:ENV=VALUE,ENV=VALUE (empty: as is)")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--peak", type=float, default=117.2, help="GFLOP/s per core (fp32 FMA)")
    p.add_argument("--numpy", action="store_true", help="numpy's matmul as a peer")
    a = p.parse_args()
    from polycomp.graph import GraphBuilder, compile_graph
    m, n, k = a.M, a.N, a.K
    rng = np.random.default_rng(1)
    w = rng.standard_normal((k, n)).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    fns = {}
    for spec in a.variants:
        label, _, envs = spec.partition(":")
        saved: dict[str, str | None] = {}
        for kv in filter(None, envs.split(",")):
            key, val = kv.split("=", 1)
            saved[key] = os.environ.get(key)
            os.environ[key] = val
        try:
            g = GraphBuilder(f"wv_{label}_{m}_{n}_{k}")
            xi = g.input("x", (m, k))
            cg = compile_graph(g.build(g.matmul(xi, g.constant("w", w))), "cpu")
        finally:
            for key, old in saved.items():
                if old is None:
                    os.environ.pop(key)
                else:
                    os.environ[key] = old
        out = np.empty((m, n), np.float32)
        cg(x, out=out)
        err = float(np.max(np.abs(out - x @ w)))
        assert err < 1e-3 * k ** 0.5, f"{label}: max error {err}"
        fns[label] = (lambda cg=cg, out=out: cg(x, out=out))
    if a.numpy:
        o2 = np.empty((m, n), np.float32)
        fns["numpy"] = lambda: np.matmul(x, w, out=o2)
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    wall: dict = {key: [] for key in fns}
    cpu: dict = {key: [] for key in fns}
    for _ in range(a.rounds):
        for key, f in fns.items():
            time.sleep(0.02)
            for _ in range(20):
                c0, t0 = time.process_time(), time.perf_counter()
                f()
                t1, c1 = time.perf_counter(), time.process_time()
                wall[key].append(t1 - t0)
                cpu[key].append(c1 - c0)
    flop = 2 * m * n * k
    for key in fns:
        s, c = sorted(wall[key]), sorted(cpu[key])
        best, med = s[0], s[len(s) // 2]
        print(f"{m}x{n}x{k} {threads}T {key:>12}: best {best * 1e6:7.0f} us "
              f"{flop / best / 1e9 / a.peak / threads * 100:5.1f} %   median {med * 1e6:7.0f} us "
              f"{flop / med / 1e9 / a.peak / threads * 100:5.1f} %   CPU median "
              f"{c[len(c) // 2] * 1e6:7.0f} us", flush=True)


if __name__ == "__main__":
    main()
