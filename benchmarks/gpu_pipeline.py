"""GPU pipeline report: what tiling and promotion buy for an fp32 matmul, without a GPU.

Run as ``polycomp bench gpu_pipeline [--size S] [--report-size R] [--json]``.

For the tiled pipeline (pattern schedule, 64x64x16 tiles, 16x16 threads, shared and
register promotion) and the untiled baseline (one output element per thread, every
operand read from global memory) of ``C = A @ B``:

* ``ptxas -v`` registers, shared memory and stack of each kernel (sm_80);
* simulated counters at ``S x S x S`` (default 256): global bytes loaded per FLOP,
  coalescing efficiency (bytes requested / 32-byte sectors moved) and shared-memory
  bank conflicts, from the GPU-semantics simulator;
* footprint-computed global bytes loaded per FLOP at ``R x R x R`` (default 1024): the
  promoted boxes (from the promotion records) times the number of tiles for the tiled
  kernel; one load per read of the update statement (``A``, ``B`` and the accumulator
  ``C``) per multiply-add for the baseline.  The simulated figures at ``S`` check the
  formulas.

Coalescing efficiency is bytes requested / (32 x sectors moved), loads and stores
together, as profilers define it: a warp-wide broadcast (every lane reading the same
``A[i, k]``) requests 128 bytes from one sector, so it can exceed 100%.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
import time

import numpy as np


def _ptxas(source: str, sm: int = 80) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cu = f"{tmp}/k.cu"
        with open(cu, "w") as f:
            f.write(source)
        r = subprocess.run(["nvcc", f"-arch=sm_{sm}", "-cubin", "-Xptxas", "-v", "-o",
                            f"{tmp}/k.cubin", cu], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    regs = [int(x) for x in re.findall(r"Used (\d+) registers", r.stderr)]
    smem = [int(x) for x in re.findall(r"(\d+) bytes smem", r.stderr)] or [0]
    stack = [int(x) for x in re.findall(r"(\d+) bytes stack frame", r.stderr)] or [0]
    return {"registers": max(regs), "shared_bytes": max(smem), "stack_bytes": max(stack)}


def _footprint_bytes_per_flop(ck, n: int) -> float:
    """Loads of the tiled kernel at n^3 from its promotion boxes (one load per element
    of each box per tile), plus the epilogue's direct loads (none for plain matmul)."""
    from polycomp.scheduler.promotion.record import promotion_state
    promos = promotion_state(ck.state).promotions
    tiles_ij = (-(-n // 64)) ** 2
    k_tiles = -(-n // 16)
    per_tile = sum(p.box.elements() * 4 for p in promos if p.local.scope == "shared")
    return tiles_ij * k_tiles * per_tile / (2.0 * n ** 3)


def run(size: int, report_size: int) -> dict:
    from polycomp.driver import compile_kernel
    from polycomp.frontend.ops import matmul_kernel
    from polycomp.hw.cuda.simulator import simulate

    k = matmul_kernel("float32")
    out: dict = {"size": size, "report_size": report_size, "kernels": {}}
    rng = np.random.default_rng(0)
    A = rng.standard_normal((size, size)).astype(np.float32)
    B = rng.standard_normal((size, size)).astype(np.float32)
    for label, opts in (("tiled", {}), ("baseline", {"gpu": "baseline"})):
        ck = compile_kernel(k, "cuda", opts)
        t0 = time.perf_counter()
        res, rep = simulate(ck, A, B)
        secs = time.perf_counter() - t0
        err = float(np.max(np.abs(res - A.astype(np.float64) @ B)))
        flops = 2.0 * size ** 3
        loaded = rep.global_bytes_loaded
        entry = {
            "ptxas": _ptxas(ck.source),
            "simulated_bytes_loaded_per_flop": loaded / flops,
            "simulated_coalescing_efficiency": rep.coalescing_efficiency,
            "simulated_load_efficiency": rep.global_load.efficiency,
            "simulated_bank_conflicts": rep.bank_conflicts,
            "max_abs_error": err,
            "simulation_seconds": round(secs, 1),
        }
        if label == "tiled":
            entry["footprint_bytes_per_flop_at_size"] = _footprint_bytes_per_flop(ck, size)
            entry["footprint_bytes_per_flop_at_report_size"] = _footprint_bytes_per_flop(
                ck, report_size)
        else:
            # untiled: every read of the update statement (A, B and the accumulator C)
            # goes to global memory once per multiply-add
            upd = next(s for s in ck.model.statements if s.kind == "update")
            entry["footprint_bytes_per_flop_at_report_size"] = len(upd.reads) * 4 / 2.0
        out["kernels"][label] = entry
    t, b = out["kernels"]["tiled"], out["kernels"]["baseline"]
    sim, fp = "simulated_bytes_loaded_per_flop", "footprint_bytes_per_flop_at_report_size"
    out["global_traffic_reduction_simulated"] = b[sim] / t[sim]
    out["global_traffic_reduction_footprint"] = b[fp] / t[fp]
    return out


def _table(r: dict) -> str:
    lines = [f"fp32 matmul: simulated at {r['size']}^3, footprint figures at "
             f"{r['report_size']}^3 (sm_80 ptxas)",
             f"{'kernel':10s} {'regs':>5s} {'smem B':>7s} {'stack B':>7s} {'sim B/FLOP':>11s} "
             f"{'coalesced':>9s} {'bank confl':>10s} {'footprint B/FLOP':>16s}"]
    for name, e in r["kernels"].items():
        p = e["ptxas"]
        lines.append(f"{name:10s} {p['registers']:5d} {p['shared_bytes']:7d} {p['stack_bytes']:7d} "
                     f"{e['simulated_bytes_loaded_per_flop']:11.4f} "
                     f"{100 * e['simulated_coalescing_efficiency']:8.1f}% "
                     f"{e['simulated_bank_conflicts']:10d} "
                     f"{e['footprint_bytes_per_flop_at_report_size']:16.4f}")
    lines.append(f"global loads per FLOP, baseline / tiled: simulated "
                 f"{r['global_traffic_reduction_simulated']:.1f}x, "
                 f"footprint {r['global_traffic_reduction_footprint']:.1f}x")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="polycomp bench gpu_pipeline",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=256, help="simulated problem size (default 256)")
    ap.add_argument("--report-size", type=int, default=1024,
                    help="footprint problem size (default 1024)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    r = run(a.size, a.report_size)
    print(json.dumps(r, indent=2) if a.json else _table(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
