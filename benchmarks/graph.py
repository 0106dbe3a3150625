"""Graph benchmark: ``polycomp bench graph [--json] [--quick]``.

Kernel counts per model (polycomp groups vs the op count), end-to-end CPU time of the
BERT-base encoder layer vs PyTorch eager (same process, same threads, rounds
interleaved; best and median), and the memory traffic of AStitch's two shapes
(softmax + layernorm chains on <rows, cols>) against the one-read-one-write minimum, as
the partition's kernels read and write it.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time


def _time(f, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        out.append(time.perf_counter() - t)
    return out


def kernel_counts(hidden: int, heads: int, ffn: int, target: str) -> list[dict]:
    from polycomp.graph import compile_graph
    from polycomp.graph.fx import import_module
    from polycomp.graph.models import MODELS
    rows = []
    for name, mk in MODELS.items():
        m = mk(hidden, heads, ffn)
        g = import_module(m, [("B", "S", hidden)], name)
        cg = compile_graph(g, target)
        rows.append({"model": name, "ops": len(g.nodes),
                     "inductor_kernels": inductor_kernels(m, hidden),
                     "groups": sum(gr.kind != "view" for gr in cg.partition.groups),
                     "distinct_builds": cg.kernel_count, "compiled": cg})
    return rows


def inductor_kernels(model, hidden: int) -> int | None:
    """TorchInductor's generated kernel count for ``model`` (extern GEMM calls are not
    counted by inductor's metric); None when inductor does not work here."""
    import torch
    try:
        from torch._inductor import metrics
        torch._dynamo.reset()
        metrics.reset()
        with torch.no_grad():
            torch.compile(model, dynamic=True)(torch.randn(1, 16, hidden))
        return int(metrics.generated_kernel_count)
    except Exception:  # noqa: BLE001 - a comparison column, not a requirement
        return None


def bert_times(cg, model, shapes, repeat: int, inductor: bool) -> list[dict]:
    import torch
    rows = []
    ind = None
    if inductor:
        try:
            torch._dynamo.reset()
            ind = torch.compile(model, dynamic=True)
            with torch.no_grad():
                ind(torch.randn(*shapes[0], 768))
        except Exception:  # noqa: BLE001 - a comparison column, not a requirement
            ind = None
    for b, s in shapes:
        x = torch.randn(b, s, 768)
        with torch.no_grad():
            ref = model(x)
            err = float((cg(x) - ref).abs().max() / ref.abs().max())
            tp, te, ti = [], [], []
            for _ in range(repeat):  # interleaved rounds
                tp += _time(lambda x=x: cg(x), 1)
                te += _time(lambda x=x: model(x), 1)
                if ind is not None:
                    ti += _time(lambda x=x: ind(x), 1)
        rows.append({"batch": b, "seq": s, "polycomp_best_ms": min(tp) * 1e3,
                     "polycomp_median_ms": statistics.median(tp) * 1e3,
                     "eager_best_ms": min(te) * 1e3, "eager_median_ms": statistics.median(te) * 1e3,
                     "speedup_best": min(te) / min(tp),
                     "speedup_median": statistics.median(te) / statistics.median(tp),
                     "inductor_best_ms": min(ti) * 1e3 if ti else None,
                     "inductor_median_ms": statistics.median(ti) * 1e3 if ti else None,
                     "max_rel_err": err})
    return rows


def astitch_traffic(target: str, repeat: int) -> list[dict]:
    """softmax -> layernorm on AStitch's <rows, cols> shapes.  ``traffic_vs_min``: bytes
    crossing the partition's group boundaries (each group reads its inputs and writes
    its outputs once; a model, not a hardware counter) over one read + one write of x;
    ``unfused_vs_min`` the same for op-by-op execution.  Times: polycomp vs eager."""
    import numpy as np
    import torch

    from polycomp.graph import GraphBuilder, compile_graph
    rows = []
    for r, c in ((750000, 32), (64, 30000)):
        g = GraphBuilder(f"astitch_{r}x{c}")
        x = g.input("x", (r, c))
        gm = g.constant("g", np.ones(c, np.float32))
        bt = g.constant("b", np.zeros(c, np.float32))
        graph = g.build(g.layernorm(g.softmax(x), gm, bt))
        cg = compile_graph(graph, target)
        part = cg.partition
        moved = sum(4 * math.prod(int(d) for d in v.shape)
                    for gr in part.groups for v in part.inputs_of(gr) + part.outputs_of(gr)
                    if not v.is_const)
        unfused = sum(4 * math.prod(int(d) for d in n.output.shape) * (len(n.inputs) + 1)
                      for n in graph.nodes)
        xv = torch.randn(r, c)
        ref = torch.nn.functional.layer_norm(torch.softmax(xv, -1), (c,))
        err = float((cg(xv) - ref).abs().max())
        tp, te = [], []
        for _ in range(repeat):
            tp += _time(lambda xv=xv, cg=cg: cg(xv), 1)
            te += _time(lambda xv=xv, c=c: torch.nn.functional.layer_norm(
                torch.softmax(xv, -1), (c,)), 1)
        rows.append({"shape": f"<{r},{c}>", "kernels": len(part.groups),
                     "traffic_vs_min": moved / (8 * r * c),
                     "unfused_vs_min": unfused / (8 * r * c),
                     "polycomp_best_ms": min(tp) * 1e3, "eager_best_ms": min(te) * 1e3,
                     "speedup_median": statistics.median(te) / statistics.median(tp),
                     "max_abs_err": err})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="polycomp bench graph", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="batch 1 seq 128 only, 3 rounds")
    p.add_argument("--target", default="cpu")
    p.add_argument("--no-inductor", action="store_true", help="skip torch.compile timings")
    args = p.parse_args(argv)
    # before libgomp loads (torch's copy and the kernels'): on a loaded 2-core machine,
    # spinning OpenMP workers of two runtimes starve each other's barriers (a 0.1 ms
    # elementwise kernel took 8 ms with the default policy)
    from polycomp.hw.cpu.build import quiet_openmp
    quiet_openmp()
    import torch
    torch.set_num_threads(2)
    counts = kernel_counts(768, 12, 3072, args.target)
    bert = counts[0]
    from polycomp.graph.models import bert_layer
    shapes = [(1, 128)] if args.quick else [(1, 128), (1, 384), (8, 128), (8, 384)]
    times = bert_times(bert["compiled"], bert_layer(), shapes, 3 if args.quick else 5,
                       not args.no_inductor)
    traffic = astitch_traffic(args.target, 3 if args.quick else 5)
    for r in counts:
        del r["compiled"]
    res = {"kernel_counts": counts, "bert_cpu": times, "astitch": traffic}
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    print("model  ops  polycomp kernels  distinct builds  inductor kernels")
    for r in counts:
        print(f"{r['model']:6} {r['ops']:4} {r['groups']:10} {r['distinct_builds']:14} "
              f"{r['inductor_kernels']!s:>14}")
    print("BERT layer (hidden 768): batch seq  polycomp ms (best/med)  eager ms (best/med)  "
          "speedup")
    for r in times:
        print(f"  {r['batch']:3} {r['seq']:4}  "
              f"{r['polycomp_best_ms']:8.1f}/{r['polycomp_median_ms']:8.1f}"
              f"  {r['eager_best_ms']:8.1f}/{r['eager_median_ms']:8.1f}  "
              f"{r['speedup_best']:.2f}x (median {r['speedup_median']:.2f}x)"
              f"  (rel err {r['max_rel_err']:.1e})"
              + (f"  inductor {r['inductor_best_ms']:.1f}/{r['inductor_median_ms']:.1f}"
                 if r["inductor_best_ms"] is not None else ""))
    for r in traffic:
        print(f"AStitch {r['shape']}: {r['kernels']} kernel(s), traffic {r['traffic_vs_min']:.2f}x "
              f"of one-read-one-write (op-by-op: {r['unfused_vs_min']:.2f}x); "
              f"{r['polycomp_best_ms']:.1f} ms vs eager {r['eager_best_ms']:.1f} ms "
              f"(median speedup {r['speedup_median']:.2f}x, err {r['max_abs_err']:.1e})")
    return 0
