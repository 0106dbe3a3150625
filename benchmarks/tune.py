"""Tuning benchmark: ``polycomp bench tune [--json] [--L 1,2,...] [--layer dense1,dense2]
[--budget 64] [--sample 64] [--model none|analytic|learned] [--multiversion]
[--records FILE] [--plot FILE.png] [--gpu-table]``.

CPU sgemm at BERT's dense shapes ``(32·L, 1024) x (1024, 3072)`` (dense1) and
``(32·L, 4096) x (4096, 1024)`` (dense2).  Per shape: ``polycomp tune`` with ``budget``
measured trials (optuna TPE, default config first), then the best of the same space
measured point by point on ``sample`` points (every point when ``--sample 0``; the full
space has thousands of points per shape, far beyond what fits on a shared machine, so the
default is a deterministic evenly spaced subsample plus the tuned best), and numpy
(OpenBLAS) on the same arrays.  Reports tuned / space-best and OpenBLAS / tuned time
ratios and the best-so-far curve (plotted with matplotlib when ``--plot`` is given and
matplotlib is installed).

``--model``: the tuner ranks the space by the cost model first (learned: fitted on the
records of the shapes tuned before this one in the same run, analytic until there are
enough).  ``--multiversion``: after every L of a layer is tuned, its records make ONE
multi-version shared object (:class:`~polycomp.scheduler.tuning.multiversion.
MultiVersionKernel`) that is measured at every L, so the table shows what a user of the
dynamic-shape artifact gets.  ``--gpu-table``: the CUDA wave-model plan for the layers
(model choice per bucket, the one-``.cu`` host rule's choice), no measurement.

Process set-up as in ``polycomp bench cpu``: the measurements run in a child process
whose environment has ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` removed (together,
there only) and ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` set to ``--threads``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

_CHILD = "POLYCOMP_BENCH_TUNE_CHILD"
LAYERS = {"dense1": (1024, 3072), "dense2": (4096, 1024)}


def _numpy_seconds(a, b, repeat: int) -> float:
    best = float("inf")
    a @ b
    for _ in range(repeat):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return best


def _model(args, history):
    if args.model == "none":
        return None
    from polycomp.driver import compile_kernel
    from polycomp.frontend.ops import matmul_kernel
    from polycomp.hw.target import get_target
    from polycomp.scheduler.tuning.cost_model import CostModel
    t = get_target(args.target)
    m = CostModel(t)
    finite = [r for r in history if r.seconds != float("inf")]
    if args.model == "learned" and len(finite) >= 16:
        m.fit_records(finite, compile_kernel(matmul_kernel(), t, {}).final_ir)
    return m


def run_case(layer: str, L: int, args, history: list | None = None) -> dict:
    import numpy as np

    from polycomp.frontend.ops import matmul_kernel
    from polycomp.hw.target import get_target
    from polycomp.scheduler.tuning.space import GemmShape, cpu_space
    from polycomp.scheduler.tuning.tune import safe_measure, tune
    K, M = LAYERS[layer]
    shape = {"N": 32 * L, "K": K, "M": M}
    kernel = matmul_kernel()
    history = [] if history is None else history
    model = _model(args, history)
    recs = tune(kernel, args.target, shape, args.budget, args.repeat, model=model)
    history.extend(recs)
    curve, best = [], float("inf")
    for r in recs:
        best = min(best, r.seconds)
        curve.append(best)
    tuned = min((r for r in recs if r.ok), key=lambda r: r.seconds)
    space = cpu_space(get_target(args.target), GemmShape(32 * L, M, K))
    if args.sample:
        step = max(1, len(space) // args.sample)
        pts = [p.options() for p in space[::step][:args.sample]]
    else:
        pts = [p.options() for p in space]
    if tuned.config not in pts:
        pts.append(tuned.config)
    space_best = min(safe_measure(kernel, args.target, c, shape, args.repeat).seconds
                     for c in pts)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((32 * L, K), dtype=np.float32)
    b = rng.standard_normal((K, M), dtype=np.float32)
    blas = _numpy_seconds(a, b, args.repeat)
    gflop = 2 * 32 * L * K * M / 1e9
    return {"layer": layer, "L": L, "shape": shape, "tuned_s": tuned.seconds,
            "model": args.model if model is None or model.trees is None or
            args.model != "learned" else f"learned ({model.samples} trials)",
            "tuned_config": tuned.config, "default_s": recs[0].seconds,
            "space_best_s": space_best, "space_points_measured": len(pts),
            "space_size": len(space), "openblas_s": blas,
            "tuned_gflops": gflop / tuned.seconds, "openblas_gflops": gflop / blas,
            "tuned_vs_space_best": space_best / tuned.seconds,
            "tuned_vs_openblas": blas / tuned.seconds, "best_so_far_s": curve}


def measure_multiversion(rows: list[dict], records: list, args) -> None:
    """Build one multi-version object per layer from ``records`` and measure it at every
    L of the layer (adds ``mv_s``, ``mv_version``, ``mv_vs_space_best``,
    ``mv_vs_openblas`` to the rows)."""
    import tempfile

    import numpy as np

    from polycomp.frontend.ops import matmul_kernel
    from polycomp.scheduler.tuning.multiversion import MultiVersionKernel
    from polycomp.scheduler.tuning.records import append
    for layer in sorted({r["layer"] for r in rows}):
        K, M = LAYERS[layer]
        mine = [x for x in records if x.shape.get("K") == K and x.shape.get("M") == M]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "records.jsonl")
            append(path, mine)
            mv = MultiVersionKernel(matmul_kernel(), args.target, path)
        print(mv.explain(), file=sys.stderr)
        rng = np.random.default_rng(0)
        for r in rows:
            if r["layer"] != layer:
                continue
            n = 32 * r["L"]
            a = rng.standard_normal((n, K), dtype=np.float32)
            b = rng.standard_normal((K, M), dtype=np.float32)
            out = mv(a, b)
            if not np.allclose(out, a @ b, rtol=1e-3, atol=1e-2):
                raise SystemExit(f"multi-version result differs from numpy at L={r['L']}")
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                mv(a, b)
                best = min(best, time.perf_counter() - t0)
            r["mv_s"] = best
            r["mv_version"] = mv.select(N=n, M=M, K=K)
            r["mv_vs_space_best"] = r["space_best_s"] / best
            r["mv_vs_openblas"] = r["openblas_s"] / best


def format_table(rows: list[dict]) -> str:
    mv = any("mv_s" in r for r in rows)
    out = ["layer   L    tuned ms  default ms  space-best ms  OpenBLAS ms  "
           "tuned/space-best  vs OpenBLAS" + ("    mv ms  mv/space-best  mv vs OpenBLAS"
                                               if mv else "")]
    for r in rows:
        line = (f"{r['layer']:7s} {r['L']:<4d} {r['tuned_s'] * 1e3:8.3f}  "
                f"{r['default_s'] * 1e3:10.3f}  {r['space_best_s'] * 1e3:13.3f}  "
                f"{r['openblas_s'] * 1e3:11.3f}  {r['tuned_vs_space_best']:16.1%}  "
                f"{r['tuned_vs_openblas']:10.2f}x")
        if "mv_s" in r:
            line += (f"  {r['mv_s'] * 1e3:8.3f}  {r['mv_vs_space_best']:13.1%}  "
                     f"{r['mv_vs_openblas']:13.2f}x")
        out.append(line)
    return "\n".join(out)


def gpu_table(layers: list[str], Ls: list[int]) -> str:
    """The CUDA plan per layer: the model's choice per bucket and the one-.cu host
    rule's choice (no measurement; docs/tuning.md)."""
    from polycomp.frontend.ops import matmul_kernel
    from polycomp.hw.target import get_target
    from polycomp.scheduler.tuning.cuda_versions import CudaMultiVersion
    from polycomp.scheduler.tuning.gpu_space import rank
    t = get_target("cuda")
    from polycomp.scheduler.tuning.gpu_space import predict_seconds
    out = ["| layer | L | rows | model choice | predicted µs | host rule picks | "
           "its predicted µs |", "|---|---|---|---|---|---|---|"]
    for layer in layers:
        K, M = LAYERS[layer]
        rows = [32 * L for L in Ls]
        mv = CudaMultiVersion(matmul_kernel("float16", "float32"), t, rows, M, K)
        for L, n in zip(Ls, rows):
            sec, p = rank(t, n, M, K, top=1)[0]
            i = mv.select(N=n, M=M, K=K)
            q = mv.versions[i].point
            out.append(f"| {layer} | {L} | {n} | {p.label()} | {sec * 1e6:.1f} | v{i} "
                       f"{q.label()} | {predict_seconds(q, t, n, M, K) * 1e6:.1f} |")
        out.append("")
        out.append(mv.explain())
        out.append("")
    return "\n".join(out)


def plot(rows: list[dict], path: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        ax.plot(range(1, len(r["best_so_far_s"]) + 1),
                [r["default_s"] / s for s in r["best_so_far_s"]], label=f"{r['layer']} L={r['L']}")
    ax.set_xlabel("measured trials")
    ax.set_ylabel("best so far (speed-up over the default config)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    return True


def run_child(args) -> list[dict]:
    history: list = []
    rows = [run_case(layer, L, args, history) for layer in args.layer.split(",")
            for L in (int(x) for x in args.L.split(","))]
    if args.records:
        from polycomp.scheduler.tuning.records import append
        append(args.records, history)
    if args.multiversion:
        measure_multiversion(rows, history, args)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="polycomp bench tune", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--L", default=",".join(str(2 ** e) for e in range(10)),
                   help="sequence lengths (default 1,2,4,...,512; M = 32*L)")
    p.add_argument("--layer", default="dense1,dense2", help="dense1, dense2 or both")
    p.add_argument("--budget", type=int, default=64, help="tuning trials per shape")
    p.add_argument("--sample", type=int, default=64,
                   help="space points measured for the space-best (0: all)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per measurement")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--target", default="cpu")
    p.add_argument("--plot", metavar="FILE.png", help="best-so-far curves (matplotlib)")
    p.add_argument("--model", choices=("none", "analytic", "learned"), default="none",
                   help="rank the space by the cost model before measuring")
    p.add_argument("--multiversion", action="store_true",
                   help="build and measure one multi-version object per layer")
    p.add_argument("--records", metavar="FILE.jsonl", help="append every trial's record")
    p.add_argument("--gpu-table", action="store_true",
                   help="print the CUDA wave-model plan for the layers and exit")
    argv = list(argv if argv is not None else sys.argv[1:])
    args = p.parse_args(argv)
    if args.gpu_table:
        print(gpu_table(args.layer.split(","), [int(x) for x in args.L.split(",")]))
        return 0
    if os.environ.get(_CHILD) == "1":
        rows = run_child(args)
        if args.plot and not plot(rows, args.plot):
            print("matplotlib not installed: no plot", file=sys.stderr)
        print(json.dumps(rows, indent=1) if args.json else format_table(rows))
        return 0
    env = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(k, None)
    env.update({_CHILD: "1", "OMP_NUM_THREADS": str(args.threads),
                "OPENBLAS_NUM_THREADS": str(args.threads)})
    cmd = [sys.executable, "-m", "polycomp.benchmarks.tune", *argv]
    return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
