"""Convolutions of symbolic image sizes (``torch.compile(dynamic=True)``-style: N, H, W
symbolic, channels constant) against eager torch and the static compilation of the same
shape, one thread, CPU time (``time.thread_time``), best and median of several rounds
(docs/graph.md, "Compile time"); and the gcc CPU time, C size and ``.text`` of each
convolution kernel.  Compare ``POLYCOMP_CONV_SYMBOLIC=0`` (the older scalar nests)::

    for v in 1 0; do POLYCOMP_CONV_SYMBOLIC=$v python scripts/conv_symbolic_bench.py; done
"""
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("POLYCOMP_CACHE_DIR", tempfile.mkdtemp(prefix="conv_symbolic_"))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from polycomp.graph import GraphBuilder, compile_graph  # noqa: E402
from polycomp.hw.cpu.build import DEFAULT_FLAGS  # noqa: E402

#: name: (input channels, output channels, kernel, stride, groups, image H, W)
LAYERS = {
    "3x3 64->64 56x56": (64, 64, 3, 1, 1, 56, 56),
    "3x3/2 64->128 56x56": (64, 128, 3, 2, 1, 56, 56),
    "3x3 128->128 29x27": (128, 128, 3, 1, 1, 29, 27),
    "dw3x3 96 28x28": (96, 96, 3, 1, 96, 28, 28),
}


def graph_of(c, f, k, s, groups, shape, w):
    g = GraphBuilder("conv")
    xv = g.input("x", shape)
    return g.build(g.conv2d(xv, g.constant("w", w), stride=(s, s), padding=(k // 2, k // 2),
                            groups=groups))


def gcc_cpu(source: str) -> tuple[float, int]:
    """CPU seconds of gcc building ``source`` whole (no precompiled prelude) and its
    ``.text`` bytes."""
    d = tempfile.mkdtemp()
    path = os.path.join(d, "k.c")
    with open(path, "w") as f:
        f.write(source)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(["gcc", *DEFAULT_FLAGS, path, "-o", path + ".so", "-lm"], check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    size = subprocess.run(["size", "-A", path + ".so"], capture_output=True, text=True).stdout
    text = next(int(x.split()[1]) for x in size.splitlines() if x.startswith(".text"))
    return (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime), text


def times(fn, rounds: int, calls: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t0 = time.thread_time()
        for _ in range(calls):
            fn()
        out.append((time.thread_time() - t0) / calls * 1e3)
    return out


def main() -> None:
    torch.set_num_threads(1)
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    mode = os.environ.get("POLYCOMP_CONV_SYMBOLIC", "1")
    rng = np.random.default_rng(0)
    for name, (c, f, k, s, groups, h, w_) in LAYERS.items():
        w = rng.standard_normal((f, c // groups, k, k)).astype(np.float32)
        x = rng.standard_normal((1, c, h, w_)).astype(np.float32)
        ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=s, padding=k // 2,
                       groups=groups).numpy()
        row = [f"POLYCOMP_CONV_SYMBOLIC={mode} {name}:"]
        runs = {}
        for kind, shape in (("symbolic", ("N", c, "H", "W")), ("static", x.shape)):
            sim = compile_graph(graph_of(c, f, k, s, groups, shape, w), "cpu", simulate=True)
            src = [st.fn.ck.source for st in sim.steps if st.fn is not None]
            cpu, text = gcc_cpu(src[0])
            row.append(f"{kind}: gcc {cpu:.2f} s, C {len(src[0]) // 1024} KB, "
                       f".text {text // 1024} KB;")
            cg = compile_graph(graph_of(c, f, k, s, groups, shape, w), "cpu")
            got = cg(x)
            err = np.abs(got - ref).max() / np.abs(ref).max()
            assert err < 1e-4, (name, kind, err)
            runs[kind] = lambda cg=cg, x=x: cg(x)
        xt, wt = torch.from_numpy(x), torch.from_numpy(w)
        runs["eager"] = lambda xt=xt, wt=wt, s=s, p=k // 2, g=groups: F.conv2d(
            xt, wt, stride=s, padding=p, groups=g)
        for fn in runs.values():
            fn()
        res = {kind: [] for kind in runs}
        for _ in range(rounds):     # interleaved rounds
            for kind, fn in runs.items():
                res[kind] += times(fn, 1, 5)
        row.append(", ".join(f"{kind} {min(v):.3f}/{statistics.median(v):.3f} ms"
                             for kind, v in res.items()))
        print(" ".join(row), flush=True)


if __name__ == "__main__":
    main()
