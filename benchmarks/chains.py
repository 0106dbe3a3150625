"""Chain benchmark: ``polycomp bench chains [--json] [--quick] [--threads 1,2] [--only G]``.

Fused chains (scheduler/chain, docs/fusion.md) against, in the same run and with the
same thread count: the same kernel compiled by polycomp without chain fusion (option
``chain=False``: two products, the softmax's passes, the intermediate in memory), numpy
(OpenBLAS, ``(X @ Y) @ Z`` and the softmax as numpy expressions) and PyTorch eager
(``torch.bmm``, ``torch.softmax``) when torch is installed.

Cases: the batch-matmul chains G1-G12 of Chimera's Table 3.5, ``(batch, M, N, K, L)``:
first product ``(batch, M, K) x (batch, K, L)``, second ``(batch, M, L) x (batch, L, N)``,
with nothing (group ``bmm``) or a softmax over ``L`` (group ``bmm+softmax``) between them;
attention ``softmax(Q K^T / sqrt(d)) V`` at DETR, ViT-B, ViT-H and SETR's shapes
``[batch x heads, sequence, head dim]`` (group ``attention``; ``K^T`` is given transposed,
as the DSL kernel reads it); conv -> relu -> conv chains (group ``conv``, :data:`CONV`:
the fused kernel is timed whatever the model decides, and the row says what the model
decided; numpy is im2col + ``einsum`` on OpenBLAS, torch ``F.conv2d``).  Shapes are
constants in the kernels.

Timing as ``polycomp bench cpu`` (:func:`polycomp.benchmarks.cpu._timeit`): each side
warmed up, then all sides alternately in ``repeat`` rounds, each block after a pause; the
best single call and the median call are kept; ``x unfused`` etc. are peer time / fused
time (> 1: the fused kernel is faster), best and median.  The geometric means are over
the rows of each group and over all rows.  Each thread count runs in a child process
with ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` set (and ``torch.set_num_threads``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

_CHILD = "POLYCOMP_BENCH_CHAINS_CHILD"

#: Chimera Table 3.5: name -> (batch, M, N, K, L)
CHAINS = {
    "G1": (8, 512, 64, 64, 512), "G2": (12, 512, 64, 64, 512), "G3": (16, 512, 64, 64, 512),
    "G4": (12, 256, 64, 64, 256), "G5": (16, 256, 64, 64, 256), "G6": (16, 256, 80, 80, 256),
    "G7": (12, 208, 64, 64, 208), "G8": (16, 208, 64, 64, 208), "G9": (16, 208, 80, 80, 208),
    "G10": (1, 512, 64, 64, 256), "G11": (1, 768, 64, 64, 384), "G12": (1, 1024, 64, 64, 512),
}
#: AutoGTCO's attention shapes: name -> (batch x heads, sequence, head dim)
ATTENTION = {"DETR": (8, 1050, 32), "ViT-B": (12, 197, 64), "ViT-H": (16, 257, 80),
             "SETR": (12, 576, 64)}
#: conv -> relu -> conv chains, NCHW, stride 1, 'same' padding: name -> (n, C, H=W, F1,
#: first window, F2, second window).  Chimera's Table 3.6 shapes were not available to us;
#: these are ResNet-50 bottleneck pairs (3x3 -> 1x1: conv2 -> conv3 of a block; 1x1 ->
#: 3x3: conv1 -> conv2), two small-channel (MobileNet-like) layers, and two at batch 8
#: (an intermediate larger than L2).
CONV = {"R3-1a": (1, 64, 56, 64, 3, 256, 1), "R3-1b": (1, 128, 28, 128, 3, 512, 1),
        "R3-1c": (1, 256, 14, 256, 3, 1024, 1), "R1-3a": (1, 256, 56, 64, 1, 64, 3),
        "R1-3b": (1, 512, 28, 128, 1, 128, 3), "R1-3c": (1, 1024, 14, 256, 1, 256, 3),
        "M1-3": (1, 16, 112, 16, 1, 16, 3), "M3-1": (1, 16, 112, 16, 3, 32, 1),
        "R3-1a8": (8, 64, 56, 64, 3, 256, 1), "R1-3a8": (8, 256, 56, 64, 1, 64, 3)}
QUICK = {"G1", "G4", "G10", "ViT-B", "R3-1a", "R1-3a"}
GROUPS = ("bmm", "bmm+softmax", "attention", "conv")


def attention_kernel(b: int, s: int, d: int, dtype: str = "float32"):
    """``softmax(Q K^T / sqrt(d)) V`` with ``Q, V: [b, s, d]``, ``K^T: [b, d, s]`` of
    ``dtype`` (float16/bfloat16: half-precision operands, products accumulated in
    float32, float32 output), named ``attention`` (``attention_<dtype>`` when not
    float32)."""
    import polycomp as pc
    from polycomp.frontend import ops
    from polycomp.frontend.dsl import Kernel
    scale = 1.0 / math.sqrt(d)

    def attn(Q, KT, V):
        t = ops.batch_matmul(Q, KT, name="T")
        sc = pc.compute((b, s, s), lambda i, j, k: t[i, j, k] * scale, name="Sc")
        return ops.batch_matmul(ops.softmax(sc, axis=-1, name="S"), V, name="O")
    shapes = {"Q": (b, s, d), "KT": (b, d, s), "V": (b, s, d)}
    return Kernel(attn, name="attention" if dtype == "float32" else "attention_" + dtype,
                  inputs={k: pc.Tensor[v, dtype] for k, v in shapes.items()})


def _kernel(group: str, shape: tuple):
    import polycomp as pc
    from polycomp.frontend import ops
    from polycomp.frontend.dsl import Kernel
    if group == "conv":
        n, c, hw, f1, k1, f2, k2 = shape

        def convs(X, W1, W2):
            t = ops.conv2d_nchw(X, W1, padding=(k1 - 1) // 2, name="T")
            return ops.conv2d_nchw(ops.relu(t, name="R"), W2, padding=(k2 - 1) // 2, name="O")
        cshapes = {"X": (n, c, hw, hw), "W1": (f1, c, k1, k1), "W2": (f2, f1, k2, k2)}
        return Kernel(convs, name="conv_chain",
                      inputs={k: pc.Tensor[v, "float32"] for k, v in cshapes.items()})
    if group == "attention":
        return attention_kernel(*shape)
    b, m, n, k, l = shape  # noqa: E741
    softmax = group == "bmm+softmax"

    def chain(X, Y, Z):
        t = ops.batch_matmul(X, Y, name="T")
        if softmax:
            t = ops.softmax(t, axis=-1, name="S")
        return ops.batch_matmul(t, Z, name="O")
    shapes = {"X": (b, m, k), "Y": (b, k, l), "Z": (b, l, n)}
    return Kernel(chain, name="chain", inputs={k_: pc.Tensor[v, "float32"]
                                               for k_, v in shapes.items()})


def _np_softmax(t):
    import numpy as np
    e = np.exp(t - t.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_conv(x, w, pad: int):
    """NCHW conv, stride 1, as numpy would: im2col (a sliding-window view) and one
    tensordot (OpenBLAS)."""
    import numpy as np
    if pad:
        x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[2]
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))
    return np.ascontiguousarray(np.einsum("nchwij,fcij->nfhw", win, w, optimize=True))


def _measure(head: dict, flops: float, fused, unfused, np_fn, arrays: list, torch_op,
             threads: int, repeat: int, note: str = "") -> dict:
    """One benchmark row: ``head``'s entries, then ``max_rel_err`` (``fused`` against
    ``np_fn``: max abs difference over ``max(1, max |reference|)``), the fused kernel's
    best and median time and GFLOP/s (``flops``), and for each peer (``unfused``,
    ``numpy``, and ``torch`` when it imports: ``torch_op(torch, tensors)`` under
    ``no_grad`` on ``threads`` threads) its best time and the best and median ratios to
    the fused kernel, all timed in one :func:`~polycomp.benchmarks.cpu._timeit` run of
    ``repeat`` rounds.  Prints the row's summary line (``note`` after the time)."""
    import numpy as np

    from polycomp.benchmarks.cpu import _timeit
    ref = np_fn()
    out = fused(*arrays)
    err = float(np.max(np.abs(out - ref)) / max(1.0, float(np.max(np.abs(ref)))))
    fns = [lambda: fused(*arrays), lambda: unfused(*arrays), np_fn]
    peers = ["unfused", "numpy"]
    try:
        import torch
        torch.set_num_threads(threads)
        ta = [torch.from_numpy(a) for a in arrays]

        def torch_fn():
            with torch.no_grad():
                return torch_op(torch, ta)
        fns.append(torch_fn)
        peers.append("torch")
    except ImportError:
        pass
    times = _timeit(fns, repeat)
    row = {**head, "max_rel_err": err, "fused_ms": times[0] * 1e3,
           "fused_median_ms": times[0].median * 1e3, "fused_GFLOPs": flops / times[0] / 1e9}
    for p, t in zip(peers, times[1:]):
        row[f"{p}_ms"] = t * 1e3
        row[f"x_{p}"] = t / times[0]
        row[f"x_{p}_median"] = t.median / times[0].median
    print(f"  {head['group']:12s} {head['case']:5s} fused {row['fused_ms']:8.3f} ms {note}"
          + " ".join(f"x{p} {row[f'x_{p}']:5.2f}" for p in peers), file=sys.stderr, flush=True)
    return row


def _fused(ck) -> bool:
    """Whether the compiled kernel ``ck`` is a fused chain program (docs/fusion.md)."""
    from polycomp.scheduler.chain.plan import chain_plans
    return bool(chain_plans(ck.state).programs)


def _conv_case(name: str, shape: tuple, target: str, repeat: int, threads: int) -> dict:
    import numpy as np

    from polycomp.driver import build, compile_kernel
    from polycomp.scheduler.chain.conv_plan import FORCE_ENV
    n, c, hw, f1, k1, f2, k2 = shape
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) / 8
              for s in ((n, c, hw, hw), (f1, c, k1, k1), (f2, f1, k2, k2))]
    flops = 2.0 * n * hw * hw * (c * k1 * k1 * f1 + f1 * k2 * k2 * f2)
    kernel = _kernel("conv", shape)
    model_fuse = _fused(compile_kernel(kernel, target))
    old = os.environ.get(FORCE_ENV)
    os.environ[FORCE_ENV] = "force"          # time the fused kernel whatever the model says
    try:
        fused = build(kernel, target)
        fused_ok = _fused(compile_kernel(kernel, target))
    finally:
        if old is None:
            del os.environ[FORCE_ENV]
        else:
            os.environ[FORCE_ENV] = old
    unfused = build(kernel, target, {"chain": False})

    def np_fn():
        x, w1, w2 = arrays
        return _np_conv(np.maximum(_np_conv(x, w1, (k1 - 1) // 2), 0), w2, (k2 - 1) // 2)

    def torch_op(torch, ta):
        tf = torch.nn.functional
        t = torch.relu(tf.conv2d(ta[0], ta[1], padding=(k1 - 1) // 2))
        return tf.conv2d(t, ta[2], padding=(k2 - 1) // 2)
    head = {"group": "conv", "case": name, "shape": list(shape), "fused": fused_ok,
            "model_fuses": model_fuse}
    return _measure(head, flops, fused, unfused, np_fn, arrays, torch_op, threads, repeat,
                    f"model {'fuse' if model_fuse else 'keep'} ")


def _case(group: str, name: str, shape: tuple, target: str, repeat: int, threads: int) -> dict:
    import numpy as np
    if group == "conv":
        return _conv_case(name, shape, target, repeat, threads)

    from polycomp.driver import build, compile_kernel
    rng = np.random.default_rng(0)
    if group == "attention":
        b, s, d = shape
        arrays = [rng.standard_normal(x).astype(np.float32) for x in ((b, s, d), (b, d, s),
                                                                      (b, s, d))]
        flops = 2.0 * b * s * s * 2 * d
        scale = np.float32(1.0 / math.sqrt(d))

        def np_fn():
            q, kt, v = arrays
            return _np_softmax((q @ kt) * scale) @ v
    else:
        b, m, n, k, l = shape  # noqa: E741
        arrays = [rng.standard_normal(x).astype(np.float32) for x in ((b, m, k), (b, k, l),
                                                                      (b, l, n))]
        flops = 2.0 * b * m * l * (k + n)
        sm = group == "bmm+softmax"

        def np_fn():
            x, y, z = arrays
            t = x @ y
            return (_np_softmax(t) if sm else t) @ z
    kernel = _kernel(group, shape)
    ck = compile_kernel(kernel, target)
    fused_ok = _fused(ck)
    fused = build(kernel, target)
    unfused = build(kernel, target, {"chain": False})

    if group == "attention":
        def torch_op(torch, ta):
            return torch.bmm(torch.softmax(torch.bmm(ta[0], ta[1]) * float(scale), -1), ta[2])
    else:
        def torch_op(torch, ta):
            t = torch.bmm(ta[0], ta[1])
            return torch.bmm(torch.softmax(t, -1) if sm else t, ta[2])
    head = {"group": group, "case": name, "shape": list(shape), "fused": fused_ok}
    return _measure(head, flops, fused, unfused, np_fn, arrays, torch_op, threads, repeat)


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def summary(rows: list[dict]) -> list[dict]:
    """Geometric means of the ratios per group and over all rows."""
    out = []
    for group in (*GROUPS, "all"):
        sel = [r for r in rows if group in ("all", r["group"])]
        if not sel:
            continue
        s: dict = {"group": group, "rows": len(sel)}
        for p in ("unfused", "numpy", "torch"):
            for suffix in ("", "_median"):
                vals = [r[f"x_{p}{suffix}"] for r in sel if f"x_{p}{suffix}" in r]
                if vals:
                    s[f"x_{p}{suffix}"] = _geomean(vals)
        out.append(s)
    return out


def run_child(args) -> dict:
    from polycomp.hw.target import get_target
    t = get_target(args.target)
    rows = []
    only = set(args.only.split(",")) if args.only else None
    for group in GROUPS:
        table = ATTENTION if group == "attention" else CONV if group == "conv" else CHAINS
        for name, shape in table.items():
            if args.quick and name not in QUICK:
                continue
            if only and not ({group, name} & only):
                continue
            rows.append(_case(group, name, shape, args.target, args.repeat, args.threads))
    return {"threads": args.threads, "target": args.target, "isa": t.isa,
            "rows": rows, "summary": summary(rows)}


def _fmt(x, nd=2) -> str:
    return "" if x is None else f"{x:.{nd}f}"


def format_table(result: dict) -> str:
    rows = result["rows"]
    has_torch = any("x_torch" in r for r in rows)
    head = ["group", "case", "fused (ms)", "GFLOP/s", "unfused (ms)", "numpy (ms)"]
    head += ["torch (ms)"] * has_torch
    head += ["x unfused", "x numpy"] + ["x torch"] * has_torch
    head += ["median x unfused", "median x numpy"] + ["median x torch"] * has_torch
    out = [f"threads: {result['threads']}; target {result['target']} ({result['isa'] or 'scalar'})",
           "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        model = {True: " (model: fuse)", False: " (model: keep)"}.get(r.get("model_fuses"), "")
        cells = [r["group"], r["case"] + ("" if r["fused"] else " (NOT fused)") + model,
                 _fmt(r["fused_ms"], 3), _fmt(r["fused_GFLOPs"], 1), _fmt(r.get("unfused_ms"), 3),
                 _fmt(r.get("numpy_ms"), 3)]
        cells += [_fmt(r.get("torch_ms"), 3)] * has_torch
        cells += [_fmt(r.get("x_unfused")), _fmt(r.get("x_numpy"))]
        cells += [_fmt(r.get("x_torch"))] * has_torch
        cells += [_fmt(r.get("x_unfused_median")), _fmt(r.get("x_numpy_median"))]
        cells += [_fmt(r.get("x_torch_median"))] * has_torch
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "geometric means (best / median):", "",
            "| group | rows | x unfused | x numpy | x torch |", "|---|---:|---:|---:|---:|"]
    for s in result["summary"]:
        cells = [s["group"], str(s["rows"])]
        for p in ("unfused", "numpy", "torch"):
            cells.append(f"{_fmt(s.get(f'x_{p}'))} / {_fmt(s.get(f'x_{p}_median'))}"
                         if f"x_{p}" in s else "")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _thread_counts(text: str | None) -> list[int]:
    avail = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if text is None:
        return [1, min(2, avail or 1)] if (avail or 1) > 1 else [1]
    out: list[int] = []
    for part in text.split(","):
        n = (avail or 1) if part.strip() == "all" else int(part)
        if n not in out:
            out.append(n)
    return out


def _child(argv: list[str], threads: int):
    env = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(k, None)
    env.update({_CHILD: "1", "OMP_NUM_THREADS": str(threads),
                "OPENBLAS_NUM_THREADS": str(threads), "OMP_PROC_BIND": "false"})
    args = list(argv)
    if "--threads" in args:
        i = args.index("--threads")
        del args[i:i + 2]
    args += ["--threads", str(threads), "--json"]
    cmd = [sys.executable, "-m", "polycomp.benchmarks.chains"] + args
    return subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="polycomp bench chains",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--quick", action="store_true", help="G1, G4, G10 and ViT-B only")
    p.add_argument("--threads", default=None,
                   help="thread counts, e.g. 1,2 (default: 1 and 2, or 1 on one CPU)")
    p.add_argument("--repeat", type=int, default=None, help="timed rounds per case")
    p.add_argument("--target", default="cpu", help="polycomp target (default: cpu)")
    p.add_argument("--only", default=None,
                   help="comma-separated groups (bmm, bmm+softmax, attention, conv) or cases "
                        "(G1.., R3-1a..)")
    argv = list(argv if argv is not None else sys.argv[1:])
    args = p.parse_args(argv)
    counts = _thread_counts(args.threads)
    if args.repeat is None:
        args.repeat = 3 if args.quick else 5
    if os.environ.get(_CHILD) == "1":
        args.threads = counts[0]
        t0 = time.time()
        result = run_child(args)
        result["seconds"] = time.time() - t0
        print(json.dumps(result, indent=1))
        return 0
    results = []
    for t in counts:
        r = _child(argv, t)
        if r.returncode != 0:
            return r.returncode
        results.append(json.loads(r.stdout))
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print("\n\n".join(format_table(r) for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
