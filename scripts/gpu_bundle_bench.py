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

``--set hopper``: the sm_90a GEMMs (target ``cuda-sm90a``: TMA, mbarrier ring, wgmma,
persistent grid; ``hopper_cases``): f16 and bf16 with float32 and 16-bit outputs at
``n^3`` (1024..8192) and at transformer shapes (M = tokens 128..8192, N/K 768..12288),
with tile variants at a few of them, against ``torch.matmul`` (cuBLAS, 16-bit output) in
the same process; the sm_80 kernel of target ``cuda`` at ``n^3`` for comparison.  The
references of these large products are computed on the GPU (cuBLAS float32).

``--set large``: attention at long sequences (float32 and float16: ``LARGE_ATTENTION``),
where kernel times are milliseconds and the library peers' launch overhead no longer
counts, the batch-matmul chains with float16 inputs (the Tensor Core chain kernel), and
the float32 kernel's split of ``l`` (``split_cases``).
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


#: long sequences, where kernel time (ms) dwarfs any caller's launch overhead
LARGE_ATTENTION = {"S2048": (32, 2048, 64), "S4096": (16, 4096, 64),
                   "S2048-d128": (16, 2048, 128)}
_TOL16 = {"float16": "4e-3", "bfloat16": "2e-2"}


def _half_chain(group: str, shape: tuple, dtype: str):
    """Chimera's batch-matmul chain with 16-bit inputs (products accumulated in float32:
    the Tensor Core chain kernel's form), constant shapes."""
    import polycomp as pc
    from polycomp.frontend import ops
    from polycomp.frontend.dsl import Kernel
    b, m, n, k, l = shape  # noqa: E741

    def chain(X, Y, Z):
        t = ops.batch_matmul(X, Y, name="T")
        if group == "bmm+softmax":
            t = ops.softmax(t, axis=-1, name="S")
        return ops.batch_matmul(t, Z, name="O")
    shapes = {"X": (b, m, k), "Y": (b, k, l), "Z": (b, l, n)}
    return Kernel(chain, name="chain_" + dtype,
                  inputs={v: pc.Tensor[sh, dtype] for v, sh in shapes.items()})


def gemm_cases(root: str, sizes: list) -> int:
    from polycomp.driver import compile_kernel
    from polycomp.frontend import ops
    from polycomp.hw.cuda.codegen import split_kernels
    from polycomp.hw.cuda.gpu_bundle import record_case
    ck = compile_kernel(ops.matmul_kernel("float16"), "cuda")
    f = ck.final_ir
    temps, kernels = split_kernels(f)
    for n in sizes:         # symbolic M, N, K: bound through the case's params
        record_case(ck.source, f, kernels, temps, {p.name: n for p in f.params}, {}, {},
                    root, target=ck.target.name,
                    extra={"time": "1", "gen": "0", "ref": "matmul", "baseline": "cublas",
                           "group": "gemm", "name": f"{n}^3", "variant": "polycomp"})
    return len(sizes)


#: transformer GEMM shapes (N, K) of a layer: attention projections and MLP (BERT/ViT-B
#: 768, GPT-style 4096 and its 3x / 4x widths), at M = tokens
TRANSFORMER_NK = {"qkv768": (2304, 768), "proj768": (768, 768), "mlp-up768": (3072, 768),
                  "mlp-down768": (768, 3072), "proj4096": (4096, 4096),
                  "mlp-up4096": (12288, 4096), "mlp-down4096": (4096, 12288)}
TOKENS = (128, 512, 2048, 8192)
#: tile variants timed beside the default at a few shapes (the tuner's knobs)
HOPPER_VARIANTS = {"128x128": {"block": (128, 128)},
                   "128x128-np": {"block": (128, 128), "persistent": False},
                   "64x256": {"block": (64, 256)}}


def hopper_cases(root: str, quick: bool = False) -> int:
    """Timed sm_90a GEMM cases (see the module docstring); one source per kernel (the
    sizes are symbolic: every shape is a case of the same source)."""
    from polycomp.driver import compile_kernel
    from polycomp.frontend import ops
    from polycomp.hw.cuda.codegen import split_kernels
    from polycomp.hw.cuda.gpu_bundle import record_case

    def record(ck, shapes, group, variant, peer, tol=None):
        f = ck.final_ir
        temps, kernels = split_kernels(f)
        arch = ck.target.cuda.arch if ck.target.cuda.arch_suffix else ""
        n = 0
        for name, (m, nn, k) in shapes.items():
            params = {"N": m, "M": nn, "K": k}
            extra = {"time": "1", "gen": "0", "ref": "matmul", "ref_device": "1",
                     "baseline": peer, "group": group, "name": name, "variant": variant,
                     "flops": str(2 * m * nn * k)}
            if tol:
                extra["tol"] = tol
            record_case(ck.source, f, kernels, temps,
                        {p.name: params[p.name] for p in f.params}, {}, {}, root,
                        target=ck.target.name, extra=extra, arch=arch)
            n += 1
        return n
    cube = {f"{n}^3": (n, n, n) for n in ((2048,) if quick else (1024, 2048, 4096, 8192))}
    tf = {f"M{m}-{name}": (m, nn, k) for m in ((512,) if quick else TOKENS)
          for name, (nn, k) in (list(TRANSFORMER_NK.items())[:2] if quick
                                else TRANSFORMER_NK.items())}
    n_cases = 0
    for dtype in ("float16", "bfloat16"):
        peer = "torch_matmul" if dtype == "float16" else "torch_matmul_bf16"
        tag = {"float16": "f16", "bfloat16": "bf16"}[dtype]
        for out, label in ((None, "f32 out"), (dtype, f"{tag} out")):
            ck = compile_kernel(ops.matmul_kernel(dtype, out_dtype=out), "hopper")
            tol = None if out is None else "2e-2"
            n_cases += record(ck, cube, f"gemm-{tag} sm_90a", f"polycomp {label}", peer, tol)
            if out is not None:
                n_cases += record(ck, tf, f"gemm-{tag} transformer sm_90a",
                                  f"polycomp {label}", peer, tol)
    if not quick:        # tile variants (f16, 16-bit out) at a few shapes
        few_cube = {k: v for k, v in cube.items() if k in ("2048^3", "8192^3")}
        few_tf = {k: v for k, v in tf.items() if k.startswith(("M512-", "M8192-"))
                  and k.endswith(("proj768", "mlp-up4096"))}
        for variant, tile in HOPPER_VARIANTS.items():
            ck = compile_kernel(ops.matmul_kernel("float16", out_dtype="float16"), "hopper",
                                {"tc_tile": tile})
            n_cases += record(ck, few_cube, "gemm-f16 sm_90a", f"polycomp f16 out {variant}",
                              "torch_matmul", "2e-2")
            n_cases += record(ck, few_tf, "gemm-f16 transformer sm_90a",
                              f"polycomp f16 out {variant}", "torch_matmul", "2e-2")
        # the sm_80 kernel (mma.sync, cp.async) of target cuda, as before this target
        ck = compile_kernel(ops.matmul_kernel("float16"), "cuda")
        n_cases += record(ck, cube, "gemm-f16 sm_90a", "polycomp f32 out (cuda: sm_80 code)",
                          "torch_matmul")
    return n_cases


def attention_cases(root: str, shapes: dict, dtypes: tuple, tile_variants: bool) -> int:
    from polycomp.benchmarks.chains_cuda import _kernel as attention_kernel
    from polycomp.driver import compile_kernel
    n = 0
    for dtype in dtypes:
        for name, (b, s, d) in shapes.items():
            k = attention_kernel(b, s, d, dtype)
            variants: list = [("fused", {"chain": "force"}), ("unfused", {"chain": False})]
            if tile_variants and dtype == "float16":   # smaller row blocks: 2x the blocks
                variants += [(f"fused-{tm}x{tl}", {"chain": "force", "chain_tiles": (tm, tl)})
                             for tm, tl in ((64, 32), (64, 64))]
            info = {"scale": repr(1.0 / math.sqrt(d))}
            if dtype != "float32":
                # P is rounded to 16 bits before P.V (FlashAttention); unfused keeps float32
                info["tol"] = _TOL16[dtype]
            peer = {"float32": "cupy_attention", "float16": "torch_sdpa",
                    "bfloat16": "torch_sdpa_bf16"}[dtype]
            group = "attention" if dtype == "float32" else f"attention-{dtype}"
            for variant, opts in variants:
                add(root, compile_kernel(k, "cuda", opts), group, name, variant,
                    "attention", peer, info)
                n += 1
    return n


def chain_cases(root: str, chains: dict, dtypes: tuple) -> int:
    from polycomp.benchmarks.chains import _kernel as chain_kernel
    from polycomp.driver import compile_kernel
    n = 0
    for dtype in dtypes:
        for group in ("bmm", "bmm+softmax"):
            ref = "bmm_softmax_chain" if group == "bmm+softmax" else "bmm_chain"
            for name, shape in chains.items():
                k = chain_kernel(group, shape) if dtype == "float32" else \
                    _half_chain(group, shape, dtype)
                info = {} if dtype == "float32" else {"tol": _TOL16[dtype]}
                label = group if dtype == "float32" else f"{group}-{dtype}"
                for variant, opts in (("fused", {"chain": "force"}),
                                      ("unfused", {"chain": False})):
                    add(root, compile_kernel(k, "cuda", opts), label, name, variant, ref,
                        "cupy_" + ref, info)
                    n += 1
    return n


def split_cases(root: str) -> int:
    """The float32 kernel's split of ``l`` across blocks (flash-decoding,
    scheduler/chain/cuda_kernel.py): the model's split count, one split (today's kernel
    before the split existed) and, for G10, one l-tile per split; fused with ``"force"``
    so the gate does not decide."""
    import os

    from polycomp.benchmarks.chains import _kernel as chain_kernel
    from polycomp.driver import compile_kernel
    n = 0
    cases = [("bmm+softmax", "G10", (1, 512, 64, 64, 256), (None, 1, 8)),
             ("bmm+softmax", "G12", (1, 1024, 64, 64, 512), (None, 1)),
             ("bmm", "G10", (1, 512, 64, 64, 256), (None, 1)),
             ("bmm", "G12", (1, 1024, 64, 64, 512), (None, 1)),
             ("attention", "ViT-B", (12, 197, 64), (None, 1))]
    for group, name, shape, splits in cases:
        k = chain_kernel(group, shape)
        ref = {"bmm+softmax": "bmm_softmax_chain", "bmm": "bmm_chain"}.get(group, "attention")
        info = {"scale": repr(1.0 / math.sqrt(shape[2]))} if group == "attention" else {}
        for s in splits:
            if s is not None:
                os.environ["POLYCOMP_CHAIN_SPLITS"] = str(s)
            try:
                ck = compile_kernel(k, "cuda", {"chain": "force"})
            finally:
                os.environ.pop("POLYCOMP_CHAIN_SPLITS", None)
            note = " ".join(ck.state.remarks.get("chain-cuda", []))
            variant = "split-model" if s is None else f"split-{s}"
            add(root, ck, f"split {group}", name, variant, ref, "cupy_" + ref if ref !=
                "attention" else "cupy_attention", {**info, "note": note[:300]})
            n += 1
        add(root, compile_kernel(k, "cuda", {"chain": False}), f"split {group}", name,
            "unfused", ref, "cupy_" + ref if ref != "attention" else "cupy_attention", info)
        n += 1
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--quick", action="store_true", help="one shape per group")
    ap.add_argument("--set", choices=("standard", "large", "flash", "hopper"),
                    default="standard",
                    help="standard: the cases above; large: long-sequence attention "
                         "(float32 and float16), the float16 batch-matmul chains and the "
                         "float32 split; flash: float16 attention against PyTorch's SDPA "
                         "on 4-d inputs; hopper: sm_90a GEMMs against torch.matmul")
    args = ap.parse_args(argv)
    from polycomp.benchmarks.chains_cuda import ATTENTION

    def first(d: dict) -> dict:
        return dict(list(d.items())[:1]) if args.quick else d
    if args.set == "hopper":      # sm_90a GEMMs against torch.matmul (cuBLAS)
        n_cases = hopper_cases(args.bundle, args.quick)
    elif args.set == "flash":       # the Tensor Core kernel against PyTorch's flash path
        from polycomp.benchmarks.chains_cuda import _kernel as attention_kernel
        from polycomp.driver import compile_kernel
        n_cases = 0
        for name, (b, sq, d) in {**ATTENTION, **LARGE_ATTENTION}.items():
            ck = compile_kernel(attention_kernel(b, sq, d, "float16"), "cuda")
            add(args.bundle, ck, "attention-float16", name, "fused", "attention",
                "torch_sdpa", {"scale": repr(1.0 / math.sqrt(d)), "tol": _TOL16["float16"]})
            n_cases += 1
    elif args.set == "large":
        n_cases = attention_cases(args.bundle, first(LARGE_ATTENTION), ("float32", "float16"),
                                  False)
        n_cases += chain_cases(args.bundle, first(CHAINS), ("float16",))
        n_cases += split_cases(args.bundle)
    else:
        n_cases = gemm_cases(args.bundle, [2048] if args.quick else [1024, 2048, 4096])
        n_cases += attention_cases(args.bundle, first(ATTENTION),
                                   ("float32", "float16", "bfloat16"), True)
        n_cases += chain_cases(args.bundle, first(CHAINS), ("float32",))
    print(f"{n_cases} timed cases added to {args.bundle}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
