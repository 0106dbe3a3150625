#!/usr/bin/env python3
"""Add the row-reduction timed cases of issue #26 to a GPU check bundle
(see polycomp/hw/cuda/gpu_bundle.py and scripts/gpu_bundle_bench.py).

    python scripts/gpu_bundle_rowreduce.py BUNDLE_DIR [--quick]

Each case is a memory-bound kernel polycomp compiles for ``cuda-sm90`` at constant
shapes; the runner (``scripts/gpu_bundle_run.py``, numpy + cupy + nvcc, and torch for
the peers) draws the inputs on the GPU machine, checks the kernel path against numpy and
times it with CUDA events next to its peers **in the same process**: torch eager and
``torch.compile`` (default mode) of the same computation, and a device-to-device copy
of the same number of bytes (the roofline: ``GB/s`` moved by the kernel against the
copy's).  Variants:

* ``model``: the mapping the cost model of scheduler/gpu/rowplan.py chooses;
* ``before``: the mapping before issue #26 (a warp per row, 8 rows per block, scalar
  columns, every pass reading the row from memory);
* ``T<n>...``: other mappings forced with the option ``row_map``, to check the model's
  choice against them (``-uncached``: a softmax's maximum and sum in one online pass;
  ``-2pass``: the same mapping with ``row_online=False``).

Groups (float32 unless named): ``softmax``, ``layernorm``, ``row_sum``, ``row_max`` at
the issue's shapes; ``bias_residual_layernorm``, ``scale_mask_softmax`` and
``bias_gelu`` at BERT-base shapes (batch 8, sequence 128 and 512); ``softmax-float16``
and ``layernorm-float16``.  ``--quick``: one shape per group.
"""

import argparse
import sys

TARGET = "cuda-sm90"
BEFORE = {"threads": 32, "rows": 8, "vector": 1, "cache": False}
#: options of the ``before`` variant: its mapping, the maximum and the sum in two passes
BEFORE_OPTS = {"row_map": BEFORE, "row_online": False}

SOFTMAX = {"12288x128": (12288, 128), "8192x1024": (8192, 1024),
           "4096x4096": (4096, 4096), "64x30000": (64, 30000), "750000x32": (750000, 32)}
LAYERNORM = {"8192x768": (8192, 768), "32768x1024": (32768, 1024),
             "750000x32": (750000, 32)}
ROWRED = {"8192x1024": (8192, 1024), "64x30000": (64, 30000)}
#: BERT-base: (batch*seq, hidden), (batch*heads*seq, seq), (batch*seq, ffn)
BERT = {"B8-S128": (1024, 768, 12288, 128, 3072), "B8-S512": (4096, 768, 49152, 512, 3072)}
#: forced alternatives to the model's choice, per (group, shape)
ALTERNATIVES = {
    ("softmax", "8192x1024"): {"T32-uncached": {"threads": 32, "vector": 4, "cache": False},
                               "T128": {"threads": 128, "vector": 4},
                               "T8": {"threads": 8, "vector": 4}},
    ("softmax", "4096x4096"): {"T256": {"threads": 256, "vector": 4},
                               "T1024": {"threads": 1024, "vector": 4},
                               "T128-uncached": {"threads": 128, "vector": 4, "cache": False}},
    ("softmax", "64x30000"): {"T512-uncached": {"threads": 512, "vector": 4, "cache": False},
                              "T512-uncached-2pass": ({"threads": 512, "vector": 4,
                                                       "cache": False}, False)},
    ("softmax", "750000x32"): {"T8": {"threads": 8, "vector": 4},
                               "T32": {"threads": 32, "vector": 1}},
    ("layernorm", "8192x768"): {"T64": {"threads": 64, "vector": 4},
                                "T16": {"threads": 16, "vector": 4}},
}


def _kernels(dtype: str = "float32"):
    """The DSL kernels of the groups, by group name: f(shape...) -> Kernel."""
    import polycomp as pc
    from polycomp.frontend import ops

    def softmax(n, w):
        @pc.tensor_expr
        def softmax(X: pc.Tensor[(n, w), dtype]):
            return ops.softmax(X)
        return softmax

    def layernorm(n, w):
        @pc.tensor_expr
        def layernorm(X: pc.Tensor[(n, w), dtype], g: pc.Tensor[(w,), dtype],
                      b: pc.Tensor[(w,), dtype]):
            return ops.layernorm(X, g, b)
        return layernorm

    def row(op):
        def make(n, w):
            @pc.tensor_expr
            def row_reduce(X: pc.Tensor[(n, w), dtype]):
                j = pc.reduce_axis(w, "j")
                return pc.compute((n,), lambda i: op(X[i, j], axis=j), name="S")
            return row_reduce
        return make

    def bias_residual_layernorm(n, w):
        @pc.tensor_expr
        def bias_residual_layernorm(X: pc.Tensor[(n, w), dtype], b: pc.Tensor[(w,), dtype],
                                    R: pc.Tensor[(n, w), dtype], g: pc.Tensor[(w,), dtype],
                                    beta: pc.Tensor[(w,), dtype]):
            y = pc.compute((n, w), lambda i, c: X[i, c] + b[c] + R[i, c], name="y")
            return ops.layernorm(y, g, beta)
        return bias_residual_layernorm

    def scale_mask_softmax(n, s):
        @pc.tensor_expr
        def scale_mask_softmax(X: pc.Tensor[(n, s), dtype], mask: pc.Tensor[(s, s), dtype]):
            y = pc.compute((n, s), lambda i, c: X[i, c] * 0.125 + mask[i % s, c], name="y")
            return ops.softmax(y)
        return scale_mask_softmax

    def bias_gelu(n, w):
        @pc.tensor_expr
        def bias_gelu(X: pc.Tensor[(n, w), dtype], b: pc.Tensor[(w,), dtype]):
            return ops.gelu(pc.compute((n, w), lambda i, c: X[i, c] + b[c], name="y"))
        return bias_gelu

    return {"softmax": softmax, "layernorm": layernorm, "row_sum": row(pc.sum),
            "row_max": row(pc.max), "bias_residual_layernorm": bias_residual_layernorm,
            "scale_mask_softmax": scale_mask_softmax, "bias_gelu": bias_gelu}


def add(root: str, ck, group: str, name: str, variant: str, ref: str, extra=None):
    """One timed case: the kernel path against numpy, torch eager and compile, a copy."""
    from polycomp.hw.cuda.codegen import split_kernels
    from polycomp.hw.cuda.gpu_bundle import record_case
    from polycomp.scheduler.gpu.rowstate import row_kernels
    f = ck.final_ir
    temps, kernels = split_kernels(f)
    if f.params:
        raise ValueError(f"{f.name}: constant shapes expected, got sizes {f.params}")
    rks = row_kernels(ck.state).kernels
    note = "; ".join(f"k{k}: {r.mapping.label()} (model {r.cost.seconds * 1e6:.1f} us)"
                     for k, r in rks.items()) or "no row kernel"
    info = {"time": "1", "gen": "0", "ref": ref, "group": group, "name": name,
            "variant": variant, "baseline": f"torch_{ref},torch_compile_{ref},copy",
            "note": note[:300]}
    info.update(extra or {})
    return record_case(ck.source, f, kernels, temps, {}, {}, {}, root, target=ck.target.name,
                       extra=info)


def cases(root: str, quick: bool = False) -> int:
    from polycomp.driver import compile_kernel

    def first(d):
        return dict(list(d.items())[:1]) if quick else d
    k32 = _kernels("float32")
    n = 0

    def one(group, ref, make, name, shape, extra=None, dtype_tol=None):
        nonlocal n
        variants: dict = {"model": None, "before": BEFORE_OPTS}
        if not quick:
            for v, rm in ALTERNATIVES.get((group, name), {}).items():
                # a mapping, or (a mapping, row_online)
                variants[v] = {"row_map": rm[0], "row_online": rm[1]} \
                    if isinstance(rm, tuple) else {"row_map": rm}
        for variant, opts in variants.items():
            ck = compile_kernel(make(*shape), TARGET, opts)
            info = dict(extra or {})
            if dtype_tol:
                info["tol"] = dtype_tol
            add(root, ck, group, name, variant, ref, info)
            n += 1

    for name, shape in first(SOFTMAX).items():
        one("softmax", "softmax", k32["softmax"], name, shape)
    for name, shape in first(LAYERNORM).items():
        one("layernorm", "layernorm", k32["layernorm"], name, shape, {"eps": "1e-05"})
    for group in ("row_sum", "row_max"):
        for name, shape in first(ROWRED).items():
            one(group, group, k32[group], name, shape)
    for name, (rows, hidden, arows, seq, ffn) in first(BERT).items():
        one("bias_residual_layernorm", "bias_residual_layernorm",
            k32["bias_residual_layernorm"], name, (rows, hidden), {"eps": "1e-05"})
        one("scale_mask_softmax", "scale_mask_softmax", k32["scale_mask_softmax"], name,
            (arows, seq), {"scale": "0.125"})
        ck = compile_kernel(k32["bias_gelu"](rows, ffn), TARGET)
        add(root, ck, "bias_gelu", name, "model", "bias_gelu")
        n += 1
    k16 = _kernels("float16")
    for name in (["8192x1024"] if quick else ["8192x1024", "4096x4096"]):
        one("softmax-float16", "softmax", k16["softmax"], name, SOFTMAX[name],
            dtype_tol="4e-3")
    one("layernorm-float16", "layernorm", k16["layernorm"], "8192x768", LAYERNORM["8192x768"],
        {"eps": "1e-05"}, dtype_tol="4e-3")
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--quick", action="store_true", help="one shape per group, no "
                    "alternative mappings")
    args = ap.parse_args(argv)
    n = cases(args.bundle, args.quick)
    print(f"{n} timed row-reduction cases added to {args.bundle}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
