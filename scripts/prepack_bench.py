"""A graph linear layer ``x (M, K) @ w (K, N) + b`` with its weight packed at compile time
(default) and packed on every call (``POLYCOMP_PREPACK=0``), against numpy, in one process
with the calls interleaved: wall and process CPU time (all threads) per call, best and
median.  On a loaded host the CPU time measures the work; the wall time also the waits.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE \\
        OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python scripts/prepack_bench.py 128 768 3072
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("M", type=int, nargs="?", default=128)
    p.add_argument("K", type=int, nargs="?", default=768)
    p.add_argument("N", type=int, nargs="?", default=3072)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--symbolic", action="store_true",
                   help="compile for a symbolic row count (dynamic shapes), call with M")
    a = p.parse_args()
    from polycomp.graph import GraphBuilder, compile_graph
    rng = np.random.default_rng(0)
    w = rng.standard_normal((a.K, a.N)).astype(np.float32)
    b = rng.standard_normal(a.N).astype(np.float32)

    def make(name: str, prepack: str):
        before = os.environ.get("POLYCOMP_PREPACK")
        os.environ["POLYCOMP_PREPACK"] = prepack
        try:
            g = GraphBuilder(name)
            x = g.input("x", ("M" if a.symbolic else a.M, a.K))
            return compile_graph(g.build(g.add(g.matmul(x, g.constant("w", w)),
                                                g.constant("b", b))), "cpu")
        finally:
            if before is None:
                os.environ.pop("POLYCOMP_PREPACK")
            else:
                os.environ["POLYCOMP_PREPACK"] = before
    x = rng.standard_normal((a.M, a.K)).astype(np.float32)
    o = np.empty((a.M, a.N), np.float32)
    fns = {"numpy": lambda: np.add(np.matmul(x, w, out=o), b, out=o)}
    for label, flag in (("prepacked", "1"), ("per call", "0")):
        cg = make(f"lin_{flag}", flag)
        out = np.empty((a.M, a.N), np.float32)
        cg(x, out=out)
        np.testing.assert_allclose(out, x @ w + b, rtol=1e-4, atol=1e-3)
        fns[label] = (lambda cg=cg, out=out: cg(x, out=out))
    wall: dict = {k: [] for k in fns}
    cpu: dict = {k: [] for k in fns}
    for _ in range(a.rounds):
        for k, f in fns.items():
            for _ in range(3):
                c0, t0 = time.process_time(), time.perf_counter()
                f()
                wall[k].append((time.perf_counter() - t0) * 1e3)
                cpu[k].append((time.process_time() - c0) * 1e3)
    print(f"({a.M}{' symbolic' if a.symbolic else ''}, {a.K}) x ({a.K}, {a.N}) + bias, "
          f"{a.rounds * 3} calls each, {os.environ.get('OMP_NUM_THREADS', '?')} threads, load "
          f"{os.getloadavg()[0]:.1f}")
    print("| side | wall best / median ms | CPU best / median ms | numpy / this, wall "
          "(best / median) | numpy / this, CPU (best / median) |")
    print("|---|---|---|---|---|")
    nb, nm = min(wall["numpy"]), float(np.median(wall["numpy"]))
    cb, cm = min(cpu["numpy"]), float(np.median(cpu["numpy"]))
    for k in fns:
        wb, wm = min(wall[k]), float(np.median(wall[k]))
        pb, pm = min(cpu[k]), float(np.median(cpu[k]))
        print(f"| {k} | {wb:.2f} / {wm:.2f} | {pb:.2f} / {pm:.2f} | {nb / wb:.2f} / "
              f"{nm / wm:.2f} | {cb / pb:.2f} / {cm / pm:.2f} |")


if __name__ == "__main__":
    main()
