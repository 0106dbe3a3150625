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
                     "groups": sum(gr.kind != "view" for gr in cg.partition.groups),
                     "distinct_builds": cg.kernel_count, "compiled": cg})
    return rows


def bert_times(cg, model, shapes, repeat: int) -> list[dict]:
    import torch
    rows = []
    for b, s in shapes:
        x = torch.randn(b, s, 768)
        with torch.no_grad():
            ref = model(x)
            err = float((cg(x) - ref).abs().max() / ref.abs().max())
            tp, te = [], []
            for _ in range(repeat):  # interleaved rounds
                tp += _time(lambda x=x: cg(x), 1)
                te += _time(lambda x=x: model(x), 1)
        rows.append({"batch": b, "seq": s, "polycomp_best_ms": min(tp) * 1e3,
                     "polycomp_median_ms": statistics.median(tp) * 1e3,
                     "eager_best_ms": min(te) * 1e3, "eager_median_ms": statistics.median(te) * 1e3,
                     "speedup_best": min(te) / min(tp), "max_rel_err": err})
    return rows


def astitch_traffic(target: str) -> list[dict]:
    """softmax -> layernorm on <rows, cols>: bytes moved by the compiled partition's
    kernels (each group reads its inputs once and writes its outputs once) vs 2*4*rows*cols."""
    import numpy as np

    from polycomp.graph import GraphBuilder, partition
    rows = []
    for r, c in ((750000, 32), (64, 30000)):
        g = GraphBuilder(f"astitch_{r}x{c}")
        x = g.input("x", (r, c))
        gm = g.constant("g", np.ones(c, np.float32))
        bt = g.constant("b", np.zeros(c, np.float32))
        graph = g.build(g.layernorm(g.softmax(x), gm, bt))
        part = partition(graph)
        moved = sum(4 * math.prod(int(d) for d in v.shape)
                    for gr in part.groups for v in part.inputs_of(gr) + part.outputs_of(gr)
                    if v.const is None)
        unfused = sum(4 * math.prod(int(d) for d in n.output.shape) * (len(n.inputs) + 1)
                      for n in graph.nodes)
        rows.append({"shape": f"<{r},{c}>", "kernels": len(part.groups),
                     "traffic_vs_min": moved / (8 * r * c),
                     "unfused_vs_min": unfused / (8 * r * c)})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="polycomp bench graph", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="batch 1 seq 128 only, 3 rounds")
    p.add_argument("--target", default="cpu")
    args = p.parse_args(argv)
    import torch
    torch.set_num_threads(2)
    counts = kernel_counts(768, 12, 3072, args.target)
    bert = counts[0]
    from polycomp.graph.models import bert_layer
    shapes = [(1, 128)] if args.quick else [(1, 128), (1, 384), (8, 128), (8, 384)]
    times = bert_times(bert["compiled"], bert_layer(), shapes, 3 if args.quick else 5)
    traffic = astitch_traffic(args.target)
    for r in counts:
        del r["compiled"]
    res = {"kernel_counts": counts, "bert_cpu": times, "astitch": traffic}
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    print("model  ops  kernels(groups)  distinct builds")
    for r in counts:
        print(f"{r['model']:6} {r['ops']:4} {r['groups']:8} {r['distinct_builds']:12}")
    print("BERT layer (hidden 768): batch seq  polycomp ms (best/med)  eager ms (best/med)  "
          "speedup")
    for r in times:
        print(f"  {r['batch']:3} {r['seq']:4}  "
              f"{r['polycomp_best_ms']:8.1f}/{r['polycomp_median_ms']:8.1f}"
              f"  {r['eager_best_ms']:8.1f}/{r['eager_median_ms']:8.1f}  {r['speedup_best']:.2f}x"
              f"  (rel err {r['max_rel_err']:.1e})")
    for r in traffic:
        print(f"AStitch {r['shape']}: {r['kernels']} kernel(s), traffic {r['traffic_vs_min']:.2f}x "
              f"of one-read-one-write (op-by-op: {r['unfused_vs_min']:.2f}x)")
    return 0
