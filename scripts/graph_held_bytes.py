"""The bytes of constants the compiled graphs of a model hold (``CompiledGraph.held_bytes``)
and the process's resident memory, after ``torch.compile(model, backend="polycomp")``
and one call: ``python scripts/graph_held_bytes.py bert-2|bert-12|resnet18``.

Prints, summed over the model's compiled pieces: the constants' own arrays, the packed
GEMM weights, the laid-out convolution weights, the model's parameter bytes (the
caller's, for scale), and the resident set size (``/proc/self/status`` VmRSS) before
compiling, after compiling and its peak (VmHWM).  ``POLYCOMP_PREPACK=0`` for the form
without packed weights."""
from __future__ import annotations

import gc
import sys


def _status(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main(case: str) -> None:
    import torch

    from polycomp.graph.dynamo import polycomp_backend
    torch.set_num_threads(1)
    if case == "resnet18":
        from polycomp.graph.convnets import resnet18
        model = resnet18().eval()
        kwargs = {"x": torch.randn(1, 3, 224, 224)}

        def call(m):
            return m(kwargs["x"])
    else:
        from polycomp.benchmarks.models import CASES, build
        model, kwargs = build(next(c for c in CASES if c.name == case))

        def call(m):
            return m(**kwargs)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    graphs = []

    def backend(gm, ex):
        fn = polycomp_backend(gm, ex)
        graphs.append(fn)
        return fn
    torch._dynamo.reset()
    gc.collect()
    rss0 = _status("VmRSS")
    with torch.no_grad():
        cf = torch.compile(model, backend=backend)
        call(cf)
    gc.collect()
    rss1, hwm = _status("VmRSS"), _status("VmHWM")
    cgs = []
    for fn in graphs:
        inner = getattr(fn, "compiled_graph", None)
        if inner is not None:
            cgs.append(inner)
    tot = [0, 0, 0]
    for cg in cgs:
        h = cg.held_bytes()
        tot = [tot[0] + h.constants, tot[1] + h.packed, tot[2] + h.laid_out]
    mb = 1 / 2 ** 20
    print(f"{case}: {len(cgs)} compiled graph(s); held constants {tot[0] * mb:.1f} MiB, "
          f"packed {tot[1] * mb:.1f} MiB, laid out {tot[2] * mb:.1f} MiB, total "
          f"{sum(tot) * mb:.1f} MiB; model parameters {params * mb:.1f} MiB; RSS before "
          f"compile {rss0:.0f} MiB, after {rss1:.0f} MiB (+{rss1 - rss0:.0f}), peak {hwm:.0f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bert-2")
