"""Per-call Python cost of the graph runtime: a graph of tiny ops, one kernel per op
(``fuse=False``), called many times; prints µs per step, best and median of rounds.

    python scripts/graph_call_overhead.py [--steps 24] [--rounds 7] [--calls 200] [--profile]
        [--rows 5] [--all-threads]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def tiny_graph(steps: int):
    from polycomp.graph import GraphBuilder
    g = GraphBuilder("tiny")
    x = g.input("x", ("B", 8))
    w = g.constant("w", np.full((8, 8), 0.125, np.float32))
    h = x
    for k in range(steps):
        h = g.matmul(h, w) if k % 3 == 0 else (g.relu(h) if k % 3 == 1 else g.add(h, x))
    return g.build(h)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--rows", type=int, default=5, help="rows of the (rows, 8) input")
    ap.add_argument("--all-threads", action="store_true",
                    help="no one-thread decision (ONE_THREAD_BELOW_S = 0): every kernel "
                         "wakes the OpenMP workers")
    a = ap.parse_args()
    if a.all_threads:
        from polycomp.hw.cpu import build
        build.ONE_THREAD_BELOW_S = 0.0
    from polycomp.graph import compile_graph
    cg = compile_graph(tiny_graph(a.steps), "cpu", fuse=False)
    nsteps = sum(s.fn is not None for s in cg.steps)
    x = np.random.default_rng(0).standard_normal((a.rows, 8)).astype(np.float32)
    cg(x)
    if a.profile:
        import cProfile
        import pstats
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(a.calls):
            cg(x)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(25)
        return
    per = []
    for _ in range(a.rounds):
        t = time.perf_counter()
        for _ in range(a.calls):
            cg(x)
        per.append((time.perf_counter() - t) / a.calls / nsteps * 1e6)
    print(f"{nsteps} kernel steps: {min(per):.1f} µs/step best, "
          f"{statistics.median(per):.1f} median ({a.rounds} rounds of {a.calls} calls)")


if __name__ == "__main__":
    main()
