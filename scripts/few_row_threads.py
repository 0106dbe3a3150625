"""Few-row weight GEMMs, 1 vs 2 threads in one process: ``m x k`` by a pre-packed ``k x
k`` weight (the graph's weight-GEMM options), the kernel compiled for 1 thread (c1) and
the one compiled for 2 threads (c2) run at 1 and at 2 threads, interleaved in shuffled
order, 7 rounds of ~4 ms batches; wall and process CPU us per call, best / median.

    OMP_WAIT_POLICY=PASSIVE python scripts/few_row_threads.py 16x256 32x256 16x512
"""
from __future__ import annotations

import dataclasses
import random
import statistics
import sys
import time

import numpy as np


def build(m: int, k: int, threads: int):
    import polycomp as pc
    from polycomp.driver import compile_kernel
    from polycomp.frontend import ops
    from polycomp.frontend.dsl import Kernel
    from polycomp.graph.compile import CPU_WEIGHT_GEMM_OPTIONS, CPU_WEIGHT_GEMM_OPTIONS_32
    from polycomp.hw.target import get_target
    from polycomp.scheduler.promotion.record import prepacked_inputs
    t = get_target("cpu")
    t = dataclasses.replace(t, cpu=dataclasses.replace(t.cpu, threads=threads))
    opts = CPU_WEIGHT_GEMM_OPTIONS_32 if t.cpu.vector_registers >= 32 else \
        CPU_WEIGHT_GEMM_OPTIONS
    kern = Kernel(lambda A, B: ops.matmul(A, B), name=f"frt{m}_{k}_{threads}",
                  inputs={"A": pc.Tensor[(m, k), "float32"], "B": pc.Tensor[(k, k), "float32"]})
    ck = compile_kernel(kern, t, {**opts, "prepack": ("B",)})
    return ck.backend.load(ck), prepacked_inputs(ck.state)[0]


def bm(xs: list[float]) -> str:
    return f"{min(xs):.0f}/{statistics.median(xs):.0f}"


def main() -> None:
    rng = np.random.default_rng(0)
    for spec in sys.argv[1:] or ["16x256", "32x256", "16x512", "16x768"]:
        m, k = map(int, spec.split("x"))
        A = rng.standard_normal((m, k)).astype(np.float32)
        B = rng.standard_normal((k, k)).astype(np.float32)
        (f1, r1), (f2, r2) = build(m, k, 1), build(m, k, 2)
        modes = {"c1@1T": (f1, 1, r1.pack(B)), "c2@1T": (f2, 1, r2.pack(B)),
                 "c2@2T": (f2, 2, r2.pack(B))}
        for f, th, P in modes.values():
            f.threads = th
            np.testing.assert_allclose(f(A, P), A.astype(np.float64) @ B, rtol=1e-4, atol=1e-3)
        wall: dict = {n: [] for n in modes}
        cpu: dict = {n: [] for n in modes}
        for _ in range(7):
            for name in random.sample(list(modes), len(modes)):
                f, th, P = modes[name]
                f.threads = th
                t0, reps = time.perf_counter(), 0
                while time.perf_counter() - t0 < 0.002:
                    f(A, P)
                    reps += 1
                reps = max(3, reps * 2)
                w, c = time.perf_counter(), time.process_time()
                for _ in range(reps):
                    f(A, P)
                wall[name].append((time.perf_counter() - w) / reps * 1e6)
                cpu[name].append((time.process_time() - c) / reps * 1e6)
        print(f"{m}x{k}x{k}: " + "; ".join(f"{n} wall {bm(wall[n])} cpu {bm(cpu[n])}"
                                           for n in modes) + " (us, best/median)", flush=True)


if __name__ == "__main__":
    main()
