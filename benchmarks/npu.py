"""NPU simulator figures (one A2 chip, every core): cube utilisation of fp16 matmul with
and without double buffering, of int8 (plain, and dequantised per channel by a vector
epilogue or by Fixpipe) and bf16 matmul, of an implicit-GEMM convolution
(against the matmul of the same GEMM shape) and of attention (four phases),
softmax/layernorm against their roofline (HBM, per-core MTE, per-core vector work),
also over rows longer than a vector repeat stride spans.

``polycomp bench npu [--json] [--size N[,N...]] [--only SECTIONS] [--rows R --cols C]
[--no-long-rows]``.  Every figure comes
from the cycle-level simulator (:mod:`polycomp.hw.npu.sim`) running the program the
emitted source is printed from; the model's parameters are in
:mod:`polycomp.hw.npu.target` and docs/npu.md.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

_SHORT = {"float16": "fp16", "bfloat16": "bf16", "int8": "int8"}


def _matmul(n: int, double_buffer: bool, dtype: str = "float16") -> dict:
    from polycomp import dtypes
    from polycomp.driver import compile_kernel
    from polycomp.frontend.ops import matmul_kernel
    from polycomp.hw.npu.backend import simulate
    ck = compile_kernel(matmul_kernel(dtype), "npu", {"double_buffer": double_buffer})
    rng = np.random.default_rng(0)
    if dtype == "int8":
        a, b = (rng.integers(-128, 128, (n, n)).astype(np.int8) for _ in range(2))
    else:
        a, b = (rng.standard_normal((n, n)).astype(dtypes.to_numpy(dtype)) for _ in range(2))
    t0 = time.perf_counter()
    out, rep = simulate(ck, a, b)
    wall = time.perf_counter() - t0
    acc = np.int64 if dtype == "int8" else np.float32
    err = float(np.max(np.abs(out.astype(np.float64) - a.astype(acc) @ b.astype(acc))))
    # the roofline: the chip's cube peak for this work, the GM -> L1 traffic at every
    # core's MTE2 bandwidth, HBM and L2 at their bandwidths
    from polycomp.hw.npu.target import NpuParams
    p = NpuParams()
    cube_peak = -(-rep.busy["M"] // p.aic_cores)
    mte = -(-rep.bytes.get("GM->L1", 0) // (p.aic_cores * p.gm_bytes_per_cycle))
    roof = max(cube_peak, mte, rep.hbm_cycles, rep.l2_cycles)
    return {"kernel": f"matmul {_SHORT[dtype]} {n}^3", "double_buffer": double_buffer,
            "cycles": rep.cycles, "cube_utilisation": round(rep.cube_utilisation, 4),
            "cores": rep.aic, "bound": rep.bound, "bound_busy": round(rep.bound_busy, 3),
            "hbm_cycles": rep.hbm_cycles, "mte_cycles": mte,
            "l2_cycles": rep.l2_cycles, "roofline_cycles": roof,
            "vs_roofline": round(rep.cycles / roof, 3),
            "busy": {k: v for k, v in rep.busy.items() if v}, "bytes": rep.bytes,
            "max_abs_error": err, "sim_seconds": round(wall, 2)}


def _dequant_kernel(int8_out: bool = False):
    """int8 GEMM dequantised per output channel: ``cast(cast(C, f32) * scale[j], f16)``
    (``int8_out``: requantised, ``cast(clamp(cast(C, f32) * scale[j]), int8)``)."""
    import polycomp as pc
    from polycomp.frontend.dsl import Kernel, Tensor
    N, M, K = pc.sym("N M K")

    def body(A, B, scale):
        k = pc.reduce_axis(K, "k")
        c = pc.compute((N, M), lambda i, j: pc.sum(pc.cast(A[i, k], "int32")
                                                   * pc.cast(B[k, j], "int32"), axis=k),
                       name="C")
        if int8_out:
            return pc.compute((N, M), lambda i, j: pc.cast(pc.min(pc.max(
                pc.cast(c[i, j], "float32") * scale[j], -128.0), 127.0), "int8"), name="Q")
        return pc.compute((N, M), lambda i, j: pc.cast(pc.cast(c[i, j], "float32")
                                                       * scale[j], "float16"), name="D")
    name = "matmul_int8_requant" if int8_out else "matmul_int8_dequant"
    return Kernel(body, name, {"A": Tensor[(N, K), "int8"], "B": Tensor[(K, M), "int8"],
                               "scale": Tensor[(M,), "float32"]})


def _dequant(n: int, fixpipe: bool, int8_out: bool = False) -> dict:
    """The per-channel dequantised int8 GEMM: the vector epilogue (int32 tiles through a
    GM workspace to the vector cores) or Fixpipe's VDEQF16 (option fixpipe_quant); the
    scales have <= 10 mantissa bits, so both give the float32 answer.  ``int8_out``:
    requantised to int8 (the vector epilogue, or Fixpipe's VREQ8 with the option; the
    scales put the values past both ends)."""
    from polycomp.driver import compile_kernel
    from polycomp.hw.npu.backend import simulate
    from polycomp.hw.npu.target import NpuParams
    ck = compile_kernel(_dequant_kernel(int8_out), "npu", {"fixpipe_quant": fixpipe})
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-128, 128, (n, n)).astype(np.int8) for _ in range(2))
    s = (rng.integers(1, 1024, n) * 2.0 ** (-15 if int8_out else -20)).astype(np.float32)
    t0 = time.perf_counter()
    out, rep = simulate(ck, a, b, s)
    wall = time.perf_counter() - t0
    acc = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32)
    # (Fixpipe's VREQ8 rounds to nearest even where the DSL's cast truncates)
    ref = (np.clip(np.rint(acc * s) if fixpipe else acc * s, -128, 127).astype(np.int8)
           if int8_out else (acc * s).astype(np.float16))
    p = NpuParams()
    cube_peak = -(-rep.busy["M"] // p.aic_cores)
    mte = -(-rep.bytes.get("GM->L1", 0) // (p.aic_cores * p.gm_bytes_per_cycle))
    roof = max(cube_peak, mte, rep.hbm_cycles, rep.l2_cycles)
    how = ("Fixpipe VREQ8" if int8_out else "Fixpipe VDEQF16") if fixpipe else \
        "vector epilogue"
    what = " -> int8" if int8_out else ""
    return {"kernel": f"int8 {n}^3 *scale[j]{what} ({how})", "double_buffer": True,
            "cycles": rep.cycles, "cube_utilisation": round(rep.cube_utilisation, 4),
            "cores": rep.aic, "bound": rep.bound, "bound_busy": round(rep.bound_busy, 3),
            "hbm_cycles": rep.hbm_cycles, "mte_cycles": mte,
            "l2_cycles": rep.l2_cycles, "roofline_cycles": roof,
            "vs_roofline": round(rep.cycles / roof, 3),
            "busy": {k: v for k, v in rep.busy.items() if v}, "bytes": rep.bytes,
            "bit_exact": bool(np.array_equal(out, ref)), "sim_seconds": round(wall, 2)}


def _conv(c: int, hw: int, f: int) -> list[dict]:
    """conv2d 3x3 (padding 1) fp16 as implicit GEMM, and the matmul of the same GEMM
    shape (F x C*9 @ C*9 x H*W) as its peer."""
    from polycomp.driver import compile_kernel
    from polycomp.frontend.ops import conv2d_kernel, matmul_kernel
    from polycomp.hw.npu.backend import simulate
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float16)
    w = rng.standard_normal((f, c, 3, 3)).astype(np.float16)
    ck = compile_kernel(conv2d_kernel((1, 1), (1, 1), (1, 1), "float16"), "npu")
    t0 = time.perf_counter()
    _, rep = simulate(ck, x, w)
    wall = time.perf_counter() - t0
    a = w.reshape(f, c * 9)
    b = rng.standard_normal((c * 9, hw * hw)).astype(np.float16)
    _, peer = simulate(compile_kernel(matmul_kernel("float16"), "npu"), a, b)
    gemm = f"{f}x{hw * hw}x{c * 9}"
    return [{"kernel": f"conv2d 3x3 fp16 C={c} {hw}x{hw} F={f} (implicit GEMM {gemm})",
             "cycles": rep.cycles, "cube_utilisation": round(rep.cube_utilisation, 4),
             "bytes": rep.bytes, "sim_seconds": round(wall, 2)},
            {"kernel": f"matmul fp16 {gemm} (same GEMM, operands in GM)",
             "cycles": peer.cycles, "cube_utilisation": round(peer.cube_utilisation, 4),
             "bytes": peer.bytes}]


def _attention(bt: int, n: int, d: int) -> dict:
    from polycomp.driver import compile_kernel
    from polycomp.frontend.ops import attention_kernel
    from polycomp.hw.npu.backend import simulate
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((bt, n, d)).astype(np.float32) for _ in range(3))
    _, rep = simulate(compile_kernel(attention_kernel("float32"), "npu"), q, k, v)
    return {"kernel": f"attention fp32 Bt={bt} N=M={n} D={d} (4 phases)",
            "cycles": rep.cycles, "cube_utilisation": round(rep.cube_utilisation, 4),
            "busy": {p: c for p, c in rep.busy.items() if c}, "bytes": rep.bytes}


def _rowwise(kind: str, rows: int, cols: int) -> dict:
    from polycomp.driver import compile_kernel
    from polycomp.frontend.ops import layernorm_kernel, softmax_kernel
    from polycomp.hw.npu.backend import simulate
    from polycomp.hw.npu.target import NpuParams
    k = {"softmax": lambda: softmax_kernel(dtype="float16"),
         "softmax_axis0": lambda: softmax_kernel(axis=0, dtype="float16"),
         "layernorm": lambda: layernorm_kernel("float16")}[kind]()
    ck = compile_kernel(k, "npu")
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((rows, cols)).astype(np.float16)]
    args += [rng.standard_normal(cols).astype(np.float16) for _ in ck.final_ir.inputs[1:]]
    t0 = time.perf_counter()
    _, rep = simulate(ck, *args)
    wall = time.perf_counter() - t0
    p = NpuParams()
    cores = max(1, rep.aiv)
    # per vector core: its share of the GM traffic at its MTE bandwidth, its share of
    # the vector work; the chip: HBM
    mte = max(rep.bytes.get("GM->UB", 0) / p.gm_bytes_per_cycle,
              rep.bytes.get("UB->GM", 0) / p.out_bytes_per_cycle) / cores
    vec = rep.busy["V"] / cores
    roof = max(mte, vec, rep.hbm_cycles, rep.l2_cycles)
    # the least HBM time: every input read once, every output written once
    least = -(-sum(a.nbytes for a in args) * 2 // p.hbm_bytes_per_cycle) if kind != \
        "layernorm" else -(-(2 * args[0].nbytes + 2 * args[1].nbytes) // p.hbm_bytes_per_cycle)
    return {"kernel": f"{kind} fp16 ({rows}, {cols})", "cycles": rep.cycles,
            "hbm_least_cycles": least, "vs_hbm_least": round(rep.cycles / least, 2),
            "vector_cores": rep.aiv, "bound": rep.bound,
            "bound_busy": round(rep.bound_busy, 3), "hbm_cycles": rep.hbm_cycles,
            "mte_bound": int(mte), "vector_cycles": int(vec),
            "vs_roofline": round(rep.cycles / roof, 3),
            "vs_hbm": round(rep.cycles / max(1, rep.hbm_cycles), 2),
            "vector_instructions": rep.instructions["V"], "bytes": rep.bytes,
            "sim_seconds": round(wall, 2)}


SECTIONS = ("matmul", "conv", "attention", "rowwise")


def run(size: int | list[int], rows: int, cols: int, long_rows: bool = True,
        only: tuple[str, ...] = SECTIONS) -> dict:
    """Every section of ``only``; ``size``: the matmul size, or several (fp16 with double
    buffering at each, the other matmul rows at the first)."""
    sizes = [size] if isinstance(size, int) else list(size)
    r = _run(sizes, rows, cols, only)
    if long_rows and "rowwise" in only:   # rows longer than a repeat stride spans
        r["rowwise"] += [_rowwise("softmax", 4096, 4096), _rowwise("layernorm", 8192, 4096),
                         # rows longer than UB: in chunks, two passes over GM
                         _rowwise("softmax", 4096, 32000)]
    return r


def _run(sizes: list[int], rows: int, cols: int, only: tuple[str, ...]) -> dict:
    size = sizes[0]
    r: dict = {k: [] for k in SECTIONS}
    if "matmul" in only:
        r["matmul"] = [_matmul(size, True), *(_matmul(n, True) for n in sizes[1:]),
                       _matmul(size, False), _matmul(size, True, "int8"),
                       _dequant(size, False), _dequant(size, True),
                       _dequant(size, False, True), _dequant(size, True, True),
                       _matmul(size, True, "bfloat16")]
    if "conv" in only:
        r["conv"] = _conv(256, 30, 256)
    if "attention" in only:
        r["attention"] = [_attention(4, 256, 64)]
    if "rowwise" in only:
        r["rowwise"] = [_rowwise("softmax", rows, cols), _rowwise("layernorm", rows, cols),
                        # reduced over axis 0 (transposed through UB; 256 rows: a
                        # reduced column of 1024 does not fit the A2 UB with its staging)
                        _rowwise("softmax_axis0", min(cols, 256), rows)]
    return r


def _table(r: dict) -> str:
    lines = ["NPU simulator (target npu: one A2 chip; cycle model in docs/npu.md)", "",
             f"{'kernel':48s} {'double buf':>10s} {'cores':>5s} {'cycles':>10s} "
             f"{'cube util':>9s} {'bound (busy)':>13s} {'MTE2':>8s} {'HBM':>8s} {'L2':>8s} "
             f"{'roofline':>9s} {'/roofline':>9s}"]
    for m in r["matmul"]:
        bound = f"{m['bound']} ({100 * m['bound_busy']:.0f}%)"
        lines.append(f"{m['kernel']:48s} {str(m['double_buffer']):>10s} {m['cores']:>5d} "
                     f"{m['cycles']:>10d} {100 * m['cube_utilisation']:>8.1f}% "
                     f"{bound:>13s} {m['mte_cycles']:>8d} {m['hbm_cycles']:>8d} "
                     f"{m['l2_cycles']:>8d} {m['roofline_cycles']:>9d} "
                     f"{m['vs_roofline']:>9.2f}")
    lines += ["", "bound: HBM or L2 (the chip's traffic at their bandwidth), else the "
              "busiest pipe of any core (cube, MTE2, MTE1, FIX, vector) and its busy share; "
              "MTE2: the GM -> L1 bytes at every core's MTE2 bandwidth",
              "", f"{'kernel':62s} {'cycles':>10s} {'cube util':>9s}"]
    for m in r["conv"] + r["attention"]:
        lines.append(f"{m['kernel']:62s} {m['cycles']:>10d} "
                     f"{100 * m['cube_utilisation']:>8.1f}%")
    lines += ["", f"{'kernel':32s} {'AIV':>4s} {'cycles':>9s} {'bound (busy)':>13s} "
              f"{'HBM':>9s} {'MTE/core':>9s} "
              f"{'V/core':>9s} {'/roofline':>9s} {'/HBM':>6s} {'/least':>6s}"]
    for v in r["rowwise"]:
        bound = f"{v['bound']} ({100 * v['bound_busy']:.0f}%)"
        lines.append(f"{v['kernel']:32s} {v['vector_cores']:>4d} {v['cycles']:>9d} "
                     f"{bound:>13s} "
                     f"{v['hbm_cycles']:>9d} {v['mte_bound']:>9d} {v['vector_cycles']:>9d} "
                     f"{v['vs_roofline']:>9.2f} {v['vs_hbm']:>6.2f} "
                     f"{v['vs_hbm_least']:>6.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="polycomp bench npu", description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1024",
                    help="matmul size, or several comma-separated (fp16 double-buffered "
                         "rows at each, the other matmul rows at the first; default 1024)")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated sections to run, of {', '.join(SECTIONS)} "
                         f"(default: all)")
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-long-rows", action="store_true",
                    help="leave out softmax (4096, 4096), layernorm (8192, 4096) and "
                         "softmax (4096, 32000) (about 16 minutes of simulation)")
    a = ap.parse_args(argv)
    only = tuple(x.strip() for x in a.only.split(",") if x.strip())
    bad = [x for x in only if x not in SECTIONS]
    if bad:
        ap.error(f"--only: unknown section(s) {', '.join(bad)}; sections: "
                 f"{', '.join(SECTIONS)}")
    try:
        sizes = [int(x) for x in a.size.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--size: {a.size!r} is not a comma-separated list of integers")
    if not sizes or min(sizes) < 1:
        ap.error("--size: give at least one positive size")
    r = run(sizes, a.rows, a.cols, not a.no_long_rows, only)
    print(json.dumps(r, indent=2) if a.json else _table(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
