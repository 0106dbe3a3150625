"""Head-split projection against the bare GEMM of the same shape (issue #27): one
process, interleaved calls, best / median us.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE \\
        python scripts/heads_bench.py --threads 1 --rounds 40 [--static] [--fifo] \\
        [--kinds bare,heads,qkv3,qkv,stack]

Kinds: ``bare`` the projection and bias (rows flattened), ``heads`` the same split into
heads (``head_split``), ``qkv3`` three head-split projections of the same rows unstacked
(``POLYCOMP_QKV_STACK=0``), ``qkv`` the same stacked (``stack_projections``), ``stack``
one head-split projection of 36 heads.  ``--static``: constant batch and sequence, else
symbolic.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

import numpy as np


def build(kind: str, rng, B, S, K=768, H=12, D=64, sym=True):
    from polycomp.graph import GraphBuilder
    if kind == "stack":
        H = 3 * H
    N = H * D
    g = GraphBuilder(kind)
    x = g.input("x", ("B", "S", K) if sym else (B, S, K))
    b, s = x.shape[:2]
    outs = []
    for t in range(3 if kind.startswith("qkv") else 1):
        w = g.constant(f"w{t}", rng.standard_normal((K, N)).astype(np.float32))
        bias = g.constant(f"b{t}", rng.standard_normal(N).astype(np.float32))
        y = g.add(g.matmul(x, w), bias)
        if kind != "bare":
            y = g.transpose(g.reshape(y, shape=(b, s, H, D)), dim0=1, dim1=2)
        outs.append(y)
    return g.build(*outs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--kinds", default="bare,heads")
    ap.add_argument("--static", action="store_true")
    ap.add_argument("--fifo", action="store_true",
                    help="time under SCHED_FIFO (scripts/step_profile.py realtime)")
    a = ap.parse_args()
    import os
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    from polycomp.graph import compile_graph
    rng = np.random.default_rng(0)
    cgs = {}
    for k in a.kinds.split(","):   # qkv3: the three projections unstacked
        if k == "qkv3":
            os.environ["POLYCOMP_QKV_STACK"] = "0"
        cgs[k] = compile_graph(build(k, rng, 1, a.rows, sym=not a.static), "cpu")
        os.environ.pop("POLYCOMP_QKV_STACK", None)
    x = rng.standard_normal((1, a.rows, 768)).astype(np.float32)
    times: dict[str, list[float]] = {k: [] for k in cgs}
    for _ in range(3):
        for cg in cgs.values():
            cg(x)
    if a.fifo:
        from step_profile import realtime
        realtime(True)
    for _ in range(a.rounds):
        ks = list(cgs)
        random.shuffle(ks)
        for k in ks:
            t0 = time.perf_counter()
            cgs[k](x)
            times[k].append(time.perf_counter() - t0)
    if a.fifo:
        realtime(False)
    for k, ts in times.items():
        print(f"{k:8s} best {min(ts) * 1e6:8.0f}  median {statistics.median(ts) * 1e6:8.0f} us")


if __name__ == "__main__":
    main()
