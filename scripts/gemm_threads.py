"""fp32 GEMM ``M x N x K`` (``A @ B``, constant shapes) at 1 and 2 threads in one process:
each *form* compiled for its thread count (optionally with environment variables set
while it compiles, e.g. ``2:POLYCOMP_GEMM_SHARED=0``; ``2:pre`` reads ``B`` pre-packed
with the graph's weight-GEMM options, as a graph compiles ``x @ W``), numpy (OpenBLAS)
at the same counts, calls interleaved in shuffled order, ``--rounds`` batches of ~20 ms;
wall and process CPU (all threads) per call, best / median, and each form's numpy / ours
ratio at its thread count (> 1: polycomp
faster) and % of the FMA peak (``--peak`` GFLOP/s per core, best call).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE \\
        python scripts/gemm_threads.py 256 512 1024 --forms 1,2,2:POLYCOMP_GEMM_SHARED=0

A size ``MxNxK`` gives a rectangular product (``32x1024x1024``: BERT at 32 tokens).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import time
from unittest import mock

import numpy as np


def build(m: int, n: int, k: int, threads: int, env: dict, pre: bool):
    import polycomp as pc
    from polycomp.driver import compile_kernel
    from polycomp.frontend import ops
    from polycomp.frontend.dsl import Kernel
    from polycomp.hw.target import get_target
    from polycomp.scheduler.promotion.record import prepacked_inputs
    t = get_target("cpu")
    t = dataclasses.replace(t, cpu=dataclasses.replace(t.cpu, threads=threads))
    tag = "_".join(f"{v}" for v in env.values())
    kern = Kernel(lambda A, B: ops.matmul(A, B), name=f"gt{m}_{n}_{k}_{threads}{tag}",
                  inputs={"A": pc.Tensor[(m, k), "float32"], "B": pc.Tensor[(k, n), "float32"]})
    with mock.patch.dict(os.environ, env):     # set while compiling only
        from polycomp.graph.compile import CPU_WEIGHT_GEMM_OPTIONS, CPU_WEIGHT_GEMM_OPTIONS_32
        weight = CPU_WEIGHT_GEMM_OPTIONS_32 if t.cpu.vector_registers >= 32 else \
            CPU_WEIGHT_GEMM_OPTIONS     # as the graph compiles x @ W
        ck = compile_kernel(kern, t, {**weight, "prepack": ("B",)} if pre else None)
    f = ck.backend.load(ck)
    f.threads = threads
    return f, (prepacked_inputs(ck.state)[0] if pre else None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("sizes", nargs="+")
    p.add_argument("--forms", default="1,2")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--peak", type=float, default=117.4, help="GFLOP/s per core")
    a = p.parse_args()
    from threadpoolctl import threadpool_limits
    rng = np.random.default_rng(0)
    forms = []
    for part in a.forms.split(","):
        head, *rest = part.split(":")
        pre = "pre" in rest
        env = dict(e.split("=", 1) for e in rest if e != "pre")
        forms.append((part, int(head), env, pre))
    for spec in a.sizes:
        dims = [int(x) for x in spec.split("x")]
        m, n, k = dims if len(dims) == 3 else dims * 3
        A = rng.standard_normal((m, k)).astype(np.float32)
        B = rng.standard_normal((k, n)).astype(np.float32)
        C = np.empty((m, n), np.float32)
        ref = A.astype(np.float64) @ B
        runs = {}
        for label, th, env, pre in forms:
            f, packing = build(m, n, k, th, env, pre)
            Bx = packing.pack(B) if pre else B
            np.testing.assert_allclose(f(A, Bx), ref, rtol=1e-3, atol=1e-3 * k ** 0.5)
            runs[label] = (lambda f=f, A=A, Bx=Bx, C=C: f(A, Bx, out=[C]), th)
        for th in sorted({f[1] for f in forms}):
            runs[f"numpy {th}T"] = (lambda A=A, B=B, C=C: np.matmul(A, B, out=C), th)
        wall: dict = {r: [] for r in runs}
        cpu: dict = {r: [] for r in runs}
        for _ in range(a.rounds):
            for r in random.sample(list(runs), len(runs)):
                fn, th = runs[r]
                with threadpool_limits(th):
                    time.sleep(0.05)
                    fn()
                    t0, reps = time.perf_counter(), 0
                    while time.perf_counter() - t0 < 0.02 or reps < 3:
                        w, c = time.perf_counter(), time.process_time()
                        fn()
                        wall[r].append(time.perf_counter() - w)
                        cpu[r].append(time.process_time() - c)
                        reps += 1
        flop = 2 * m * n * k
        print(f"{m}x{n}x{k}, load {os.getloadavg()[0]:.1f}: wall / CPU us best / median; "
              f"numpy/ours at the same threads, best / median; % of {a.peak:.0f} GFLOP/s x "
              f"threads (best)")
        for r, (_, th) in runs.items():
            w, c = wall[r], cpu[r]
            line = (f"  {r:>34}: wall {min(w) * 1e6:9.1f} / {statistics.median(w) * 1e6:9.1f}"
                    f"  CPU {min(c) * 1e6:9.1f} / {statistics.median(c) * 1e6:9.1f}"
                    f"  {flop / min(w) / 1e9 / (a.peak * th):4.0%}")
            if not r.startswith("numpy"):
                nw = wall[f"numpy {th}T"]
                line += (f"  numpy/ours {min(nw) / min(w):.2f} / "
                         f"{statistics.median(nw) / statistics.median(w):.2f}")
            print(line, flush=True)


if __name__ == "__main__":
    main()
