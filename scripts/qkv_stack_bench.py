"""Whole-model effect of the stacked q/k/v projection (issue #27): the same model
compiled twice in one process, ``POLYCOMP_QKV_STACK=0`` (three projections) and the
default (one stacked GEMM), called interleaved with eager torch; best / median ms and
process CPU ms per call.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE \\
        python scripts/qkv_stack_bench.py --only bert-2,gpt2-2 --threads 1,2 --rounds 15 [--fifo]
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="bert-2,gpt2-2")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--fifo", action="store_true",
                    help="time under SCHED_FIFO (scripts/step_profile.py realtime)")
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(__file__))
    from step_profile import realtime
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    from polycomp.hw.cpu.build import quiet_openmp
    quiet_openmp()
    import torch
    from models import CASES, _out, build  # type: ignore[import-not-found]

    from polycomp.graph.dynamo import polycomp_backend
    cases = [c for c in CASES if c.name in a.only.split(",")]
    for threads in (int(t) for t in a.threads.split(",")):
        torch.set_num_threads(threads)
        for case in cases:
            fns = {}
            with torch.no_grad():
                m, x = build(case)
                ref = _out(m(**x))
                fns["eager"] = lambda m=m, x=x: m(**x)
                for name, env in (("unstacked", "0"), ("stacked", "1")):
                    os.environ["POLYCOMP_QKV_STACK"] = env
                    torch._dynamo.reset()
                    mc, _ = build(case)
                    pc = torch.compile(mc, backend=lambda gm, ex: polycomp_backend(gm, ex),
                                       dynamic=False)
                    got = _out(pc(**x))
                    err = float((got - ref).abs().max() / ref.abs().max())
                    assert err < 1e-4, (name, err)
                    fns[name] = lambda pc=pc, x=x: pc(**x)
                os.environ.pop("POLYCOMP_QKV_STACK")
                wall: dict[str, list[float]] = {k: [] for k in fns}
                cpu: dict[str, list[float]] = {k: [] for k in fns}
                for _ in range(2):
                    for f in fns.values():
                        f()
                if a.fifo:
                    realtime(True)
                for _ in range(a.rounds):
                    ks = list(fns)
                    random.shuffle(ks)
                    for k in ks:
                        c, t = time.process_time(), time.perf_counter()
                        fns[k]()
                        wall[k].append((time.perf_counter() - t) * 1e3)
                        cpu[k].append((time.process_time() - c) * 1e3)
            if a.fifo:
                realtime(False)
            print(f"{case.name} threads={threads} (load {os.getloadavg()[0]:.1f})")
            for k in fns:
                print(f"  {k:10s} wall best {min(wall[k]):7.2f} median "
                      f"{statistics.median(wall[k]):7.2f} ms   cpu median "
                      f"{statistics.median(cpu[k]):7.2f} ms")
            for k in ("unstacked", "stacked"):
                med = statistics.median(wall["eager"]) / statistics.median(wall[k])
                print(f"  eager / {k}: best {min(wall['eager']) / min(wall[k]):.3f}x "
                      f"median {med:.3f}x")


if __name__ == "__main__":
    main()
