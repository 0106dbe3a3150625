"""A graph convolution ``relu(conv2d(x, w, b))`` (3x3, padding 1, ``C -> C`` channels,
``H x H`` images, batch ``N``) with its weight packed at compile time in the channel
form's panels (default) and laid out ``(C, KH, KW, F)`` (``POLYCOMP_CONV_PREPACK=0``),
against eager torch (``F.relu(F.conv2d(..))``), in one process, the calls shuffled per
round: process CPU time per call, best and median (1 thread: the CPU time is the work).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE \\
        OMP_NUM_THREADS=1 python scripts/conv_prepack_bench.py 512 7 8
"""
from __future__ import annotations

import argparse
import os
import random
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("C", type=int, nargs="?", default=512)
    p.add_argument("H", type=int, nargs="?", default=7)
    p.add_argument("N", type=int, nargs="?", default=8)
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    import torch
    import torch.nn.functional as F

    from polycomp.graph import GraphBuilder, compile_graph
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((a.C, a.C, 3, 3)) / (3 * a.C ** 0.5)).astype(np.float32)
    b = rng.standard_normal(a.C).astype(np.float32)
    x = rng.standard_normal((a.N, a.C, a.H, a.H)).astype(np.float32)
    tx, tw, tb = (torch.from_numpy(v) for v in (x, w, b))
    with torch.no_grad():
        ref = F.relu(F.conv2d(tx, tw, tb, padding=1)).numpy()

    def make(flag: str):
        before = os.environ.get("POLYCOMP_CONV_PREPACK")
        os.environ["POLYCOMP_CONV_PREPACK"] = flag
        try:
            g = GraphBuilder(f"convb_{flag}")
            xv = g.input("x", x.shape)
            return compile_graph(g.build(g.relu(g.conv2d(
                xv, g.constant("w", w), g.constant("b", b), padding=(1, 1)))), "cpu")
        finally:
            if before is None:
                os.environ.pop("POLYCOMP_CONV_PREPACK")
            else:
                os.environ["POLYCOMP_CONV_PREPACK"] = before

    def eager():
        with torch.no_grad():
            F.relu(F.conv2d(tx, tw, tb, padding=1))
    fns = {"eager": eager}
    for label, flag in (("packed (F/NR, KH, KW, C, NR)", "1"), ("laid out (C, KH, KW, F)", "0")):
        cg = make(flag)
        out = np.empty(ref.shape, np.float32)
        cg(x, out=out)
        np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)
        fns[label] = (lambda cg=cg, out=out: cg(x, out=out))
    cpu: dict = {k: [] for k in fns}
    keys = list(fns)
    for _ in range(a.rounds):
        random.shuffle(keys)
        for k in keys:
            for _ in range(3):
                c0 = time.process_time()
                fns[k]()
                cpu[k].append((time.process_time() - c0) * 1e3)
    print(f"conv 3x3 {a.C}->{a.C} at {a.H}x{a.H}, batch {a.N}, {a.rounds * 3} calls each, "
          f"{os.environ.get('OMP_NUM_THREADS', '?')} thread(s), load {os.getloadavg()[0]:.1f}")
    print("| side | CPU best / median ms | eager / this (best / median) |")
    print("|---|---|---|")
    eb, em = min(cpu["eager"]), float(np.median(cpu["eager"]))
    for k in fns:
        pb, pm = min(cpu[k]), float(np.median(cpu[k]))
        print(f"| {k} | {pb:.2f} / {pm:.2f} | {eb / pb:.2f} / {em / pm:.2f} |")


if __name__ == "__main__":
    main()
