"""Where does a graph step stop gaining from a second thread?  Measures the one-thread
decision of the graph runtime (``hw/cpu/build.py`` ``ONE_THREAD_BELOW_S``, the estimate
``graph/runtime.py`` ``StepCall.work_s``): one-kernel graphs (symbolic rows, compiled
once) at a sweep of row counts, the step's prepared kernel call (``PreparedCall``, no
graph runtime around it) forced to one thread and to all threads, interleaved in
shuffled order in one process.

    OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE python scripts/one_thread_threshold.py \\
        [--rounds 7] [--target-ms 3] [--families gemm256,gemm768,gelu,softmax]
        [--rows 16,32,64] [--static]

Per family and row count: the estimate ``work_s``, the decision the threshold makes,
wall and process CPU time (all threads) per call with one and with two threads, best /
median of the rounds, and the ratios 1T/2T (> 1: two threads faster).  Process CPU
time includes the second thread's work and its wake-up, not a loaded host's waiting."""
from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import numpy as np

FAMILIES = {
    # name: (row counts, builder)
    "gemm256": (1, 2, 4, 8, 16, 32, 64, 128, 256),
    "gemm768": (1, 2, 4, 8, 16, 32, 64, 128),
    "gelu": (4, 16, 64, 128, 256, 512, 1024, 2048),
    "softmax": (4, 16, 64, 128, 256, 512, 1024),
}


def graph(family: str, rows: int | None = None):
    """The family's one-kernel graph over ``B`` rows (symbolic), or ``rows`` rows."""
    from polycomp.graph import GraphBuilder
    rng = np.random.default_rng(0)
    g = GraphBuilder(f"ott_{family}" + ("" if rows is None else f"_{rows}"))
    if family.startswith("gemm"):
        k = int(family[4:])
        x = g.input("x", ("B" if rows is None else rows, k))
        w = g.constant("w", rng.standard_normal((k, k)).astype(np.float32) / k ** 0.5)
        return g.build(g.matmul(x, w)), k
    x = g.input("x", ("B" if rows is None else rows, 1024 if family == "gelu" else 512))
    if family == "gelu":
        b = g.constant("b", rng.standard_normal(1024).astype(np.float32))
        return g.build(g.gelu(g.add(x, b))), 1024
    return g.build(g.softmax(x)), 512


def measure(cg, x, rounds: int, target_s: float) -> dict:
    cg(x)
    cg(x)  # recorded: the prepared path
    plan = cg._plans[((x.shape, x.dtype),)]
    calls = [c for c in plan.calls if c.kernel is not None]
    assert len(calls) == 1, "one kernel step per graph"
    c = calls[0]
    k = c.kernel
    decided = k.one_thread
    # the kernel's prepared call alone (no graph runtime around it): its arguments are
    # the packed weight's address (fixed), the input's and an output's
    arrays = {cg.graph.inputs[0]: x, cg.graph.outputs[0]: np.empty(plan.out_shapes[0],
                                                                    np.float32)}
    arrays.update(cg._constants)  # constants passed as themselves (a bias)
    args = k.head + [a if a is not None else arrays[v].ctypes.data for v, a in c.arg_addr]

    def run():
        k.call(args)
    t = time.perf_counter()
    n = 0
    while time.perf_counter() - t < target_s / 4:
        run()
        n += 1
    reps = max(3, int(n * 4))  # about target_s per batch
    res: dict = {"work_s": c.work_s, "decided_one": decided, "reps": reps,
                 "wall": {1: [], 2: []}, "cpu": {1: [], 2: []}}
    for _ in range(rounds):
        for mode in random.sample([1, 2], 2):
            k.one_thread = mode == 1
            w0, p0 = time.perf_counter(), time.process_time()
            for _ in range(reps):
                run()
            res["wall"][mode].append((time.perf_counter() - w0) / reps)
            res["cpu"][mode].append((time.process_time() - p0) / reps)
    k.one_thread = decided
    ref = cg(x)
    run()
    assert np.array_equal(arrays[cg.graph.outputs[0]], ref), "not the graph's result"
    return res


def us(xs: list[float]) -> str:
    """Best / median of ``xs`` (seconds) in microseconds."""
    return f"{min(xs) * 1e6:.1f} / {statistics.median(xs) * 1e6:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--target-ms", type=float, default=3.0)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--rows", default="", help="row counts (default: each family's)")
    ap.add_argument("--static", action="store_true",
                    help="one compilation per row count, rows constant (a GEMM's row "
                         "blocks are then planned for them; with symbolic rows the "
                         "blocking plans a nominal extent)")
    a = ap.parse_args()
    from polycomp.graph import compile_graph
    from polycomp.hw.cpu.build import ONE_THREAD_BELOW_S
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')} "
          f"load {os.getloadavg()[0]:.1f}; threshold {ONE_THREAD_BELOW_S * 1e6:.0f} us")
    print("| family | rows | est. us | decides | 1T wall us b/m | 2T wall us b/m | "
          "wall 1T/2T b/m | 1T cpu us b/m | 2T cpu us b/m | est/1T |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(1)
    for fam in a.families.split(","):
        g, width = graph(fam)
        cg = None if a.static else compile_graph(g, "cpu")
        sizes = [int(r) for r in a.rows.split(",")] if a.rows else FAMILIES[fam]
        for rows in sizes:
            if a.static:
                cg = compile_graph(graph(fam, rows)[0], "cpu")
            assert cg is not None
            x = rng.standard_normal((rows, width)).astype(np.float32)
            r = measure(cg, x, a.rounds, a.target_ms / 1e3)
            w1, w2, c1, c2 = r["wall"][1], r["wall"][2], r["cpu"][1], r["cpu"][2]
            b, m = min, statistics.median
            print(f"| {fam} | {rows} | {r['work_s'] * 1e6:.1f} | "
                  f"{'1T' if r['decided_one'] else '2T'} | {us(w1)} | {us(w2)} | "
                  f"{b(w1) / b(w2):.2f} / {m(w1) / m(w2):.2f} | {us(c1)} | {us(c2)} | "
                  f"{r['work_s'] / b(w1):.1f} |", flush=True)


if __name__ == "__main__":
    main()
