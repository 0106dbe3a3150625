#!/usr/bin/env python3
"""Add timed cases to a GPU check bundle (see polycomp/hw/cuda/gpu_bundle.py).

    python scripts/gpu_bundle_bench.py BUNDLE_DIR [--quick]

Each case is a kernel polycomp compiles for ``cuda`` (``sm_80`` code, run on whatever
GPU the runner finds) at a real model shape.  Its inputs are not stored: the runner
draws them on the GPU machine from a seed (standard normal), computes the reference
with numpy there, checks both the host and the kernel path against it and times the
kernel path with CUDA events, next to a library peer on the same device (cuBLAS through
cupy for GEMMs, cupy's batched products and softmax for chains), in the same run:

* ``gemm``: the fp16 Tensor Core GEMM (``ops.matmul_kernel("float16")``, f32 output)
  at ``n x n x n``;
* ``attention``: ``softmax(Q K^T / sqrt(d)) V`` in float32 at AutoGTCO's shapes, fused
  (chain fusion) and unfused (``chain=False``);
* ``attention-float16`` / ``attention-bfloat16``: the same in 16-bit inputs (the Tensor
  Core chain kernel against the unfused Tensor Core pipeline, and PyTorch's
  ``scaled_dot_product_attention``);
* ``bmm`` / ``bmm+softmax``: Chimera's batch-matmul chains G1, G2, G10, G12 fused (with
  ``chain="force"``: the rule of scheduler/chain/cuda_gate.py would not fuse some of
  them) and unfused.
"""
from __future__ import annotations

import argparse
import math
import sys

CHAINS = {"G1": (8, 512, 64, 64, 512), "G2": (12, 512, 64, 64, 512),
          "G10": (1, 512, 64, 64, 256), "G12": (1, 1024, 64, 64, 512)}


def add(root: str, ck, group: str, name: str, variant: str, ref: str, baseline: str,
        extra: dict | None = None) -> str | None:
    from polycomp.hw.cuda.codegen import split_kernels
    from polycomp.hw.cuda.gpu_bundle import record_case
    f = ck.final_ir
    temps, kernels = split_kernels(f)
    if f.params:
        raise ValueError(f"{f.name}: constant shapes expected, got sizes {f.params}")
    values: dict = {}
    info = {"time": "1", "gen": "0", "ref": ref, "baseline": baseline, "group": group,
            "name": name, "variant": variant}
    info.update(extra or {})
    return record_case(ck.source, f, kernels, temps, values, {}, {}, root,
                       target=ck.target.name, extra=info)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--quick", action="store_true", help="one shape per group")
    args = ap.parse_args(argv)
    from polycomp.benchmarks.chains import _kernel as chain_kernel
    from polycomp.benchmarks.chains_cuda import ATTENTION
    from polycomp.driver import compile_kernel
    from polycomp.frontend import ops
    n_cases = 0
    gemm = ops.matmul_kernel("float16")
    for n in ([2048] if args.quick else [1024, 2048, 4096]):
        ck = compile_kernel(gemm, "cuda")
        # symbolic M, N, K: bind them through the case's params
        from polycomp.hw.cuda.codegen import split_kernels
        from polycomp.hw.cuda.gpu_bundle import record_case
        f = ck.final_ir
        temps, kernels = split_kernels(f)
        values = {p.name: n for p in f.params}
        record_case(ck.source, f, kernels, temps, values, {}, {}, args.bundle,
                    target=ck.target.name,
                    extra={"time": "1", "gen": "0", "ref": "matmul", "baseline": "cublas",
                           "group": "gemm", "name": f"{n}^3", "variant": "polycomp"})
        n_cases += 1
    shapes = dict(list(ATTENTION.items())[:1] if args.quick else ATTENTION.items())
    for name, (b, s, d) in shapes.items():
        k = chain_kernel("attention", (b, s, d))
        for variant, opts in (("fused", {"chain": "force"}), ("unfused", {"chain": False})):
            ck = compile_kernel(k, "cuda", opts)
            add(args.bundle, ck, "attention", name, variant, "attention", "cupy_attention",
                {"scale": repr(1.0 / math.sqrt(d))})
            n_cases += 1
    from polycomp.benchmarks.chains_cuda import _kernel as attention_kernel
    for dtype in ("float16", "bfloat16"):      # the Tensor Core chain kernel
        for name, (b, s, d) in shapes.items():
            k = attention_kernel(b, s, d, dtype)
            variants: list = [("fused", {"chain": "force"}), ("unfused", {"chain": False})]
            if dtype == "float16":     # smaller row blocks: twice the blocks, 4 warps each
                variants += [(f"fused-{tm}x{tl}", {"chain": "force", "chain_tiles": (tm, tl)})
                             for tm, tl in ((64, 32), (64, 64))]
            for variant, opts in variants:
                ck = compile_kernel(k, "cuda", opts)
                add(args.bundle, ck, f"attention-{dtype}", name, variant, "attention",
                    "torch_sdpa" + ("_bf16" if dtype == "bfloat16" else ""),
                    {"scale": repr(1.0 / math.sqrt(d)),
                     # P is rounded to 16 bits before P.V (FlashAttention); the unfused
                     # pipeline keeps it in float32
                     "tol": "2e-2" if dtype == "bfloat16" else "4e-3"})
                n_cases += 1
    chains = dict(list(CHAINS.items())[:1] if args.quick else CHAINS.items())
    for group in ("bmm", "bmm+softmax"):
        for name, shape in chains.items():
            k = chain_kernel(group, shape)
            for variant, opts in (("fused", {"chain": "force"}), ("unfused", {"chain": False})):
                ck = compile_kernel(k, "cuda", opts)
                add(args.bundle, ck, group, name, variant,
                    "bmm_softmax_chain" if group == "bmm+softmax" else "bmm_chain",
                    "cupy_" + ("bmm_softmax_chain" if group == "bmm+softmax" else "bmm_chain"))
                n_cases += 1
    print(f"{n_cases} timed cases added to {args.bundle}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
