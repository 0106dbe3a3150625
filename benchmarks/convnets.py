"""``polycomp bench convnets``: ResNet-18 and MobileNet-V2 (:mod:`polycomp.graph.convnets`,
random weights, eval mode) through ``torch.compile(backend="polycomp")`` against eager
torch in the same process: compile time, max relative error, and per thread count the
best and median of interleaved rounds (eager call, compiled call) after two warm-up
calls.  Set ``OMP_WAIT_POLICY=PASSIVE`` (and unset ``OPENBLAS_CORETYPE``) in the
environment before starting it: the OpenMP runtimes read it when they load."""
from __future__ import annotations

import argparse
import json
import statistics
import time


def _model(name: str):
    from polycomp.graph.convnets import mobilenet_v2, resnet18
    if name == "resnet18":
        return resnet18()
    if name == "mobilenet_v2":
        return mobilenet_v2()
    raise SystemExit(f"polycomp bench convnets: unknown model {name!r} "
                     f"(resnet18, mobilenet_v2)")


def run(name: str, batch: int, size: int, threads: list[int], rounds: int,
        clock: str = "wall") -> dict:
    """One model's row; ``clock="cpu"`` times each call by the process's CPU time
    (``time.process_time``: preemption by other processes does not count, so a loaded
    host's 1-thread ratios stay meaningful; at 2 threads it sums both threads' time and
    is no latency)."""
    import torch

    from polycomp.graph.dynamo import polycomp_backend
    m = _model(name)
    fns: list = []

    def backend(gm, example_inputs):
        fn = polycomp_backend(gm, example_inputs, options={"target": "cpu"})
        fns.append(fn)
        return fn
    torch._dynamo.reset()
    x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0))
    row: dict = {"model": name, "batch": batch, "size": size}
    with torch.no_grad():
        t0 = time.perf_counter()
        cm = torch.compile(m, backend=backend)
        y = cm(x)
        row["compile_s"] = time.perf_counter() - t0
        ref = m(x)
        row["max_rel_err"] = float((y - ref).abs().max() / ref.abs().max())
        row["eager_reasons"] = [r for f in fns for r in f.polycomp_report.eager]
        row["threads"] = {}
        row["clock"] = clock
        now = time.process_time if clock == "cpu" else time.perf_counter
        for th in threads:
            torch.set_num_threads(th)
            te: list[float] = []
            tp: list[float] = []
            for _ in range(2):
                m(x)
                cm(x)
            for _ in range(rounds):
                t = now()
                m(x)
                te.append(now() - t)
                t = now()
                cm(x)
                tp.append(now() - t)
            row["threads"][th] = {"eager_ms": (min(te) * 1e3, statistics.median(te) * 1e3),
                                  "polycomp_ms": (min(tp) * 1e3, statistics.median(tp) * 1e3)}
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="polycomp bench convnets",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet18,mobilenet_v2")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="time calls by wall time (default) or by the process's CPU time "
                        "(robust to preemption on a loaded host; 1 thread only)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = p.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    rows = [run(n, args.batch, args.size, threads, args.rounds, args.clock)
            for n in args.models.split(",")]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        print(f"{r['model']} batch {r['batch']} {r['size']}x{r['size']} "
              f"({r['clock']} time): compile "
              f"{r['compile_s']:.1f} s, max rel err {r['max_rel_err']:.1e}, eager ops: "
              f"{r['eager_reasons'] or 'none'}")
        for th, t in r["threads"].items():
            (eb, em), (pb, pm) = t["eager_ms"], t["polycomp_ms"]
            print(f"  {th} thread(s): eager {eb:.1f} / {em:.1f} ms, polycomp {pb:.1f} / "
                  f"{pm:.1f} ms (best / median), eager / polycomp {eb / pb:.2f}x / "
                  f"{em / pm:.2f}x")
    return 0
