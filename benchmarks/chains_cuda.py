"""Fused attention on the CUDA target: ``polycomp bench chains_cuda [--json] [--only NAME]
[--batch N] [--no-nvcc]``.

No GPU here, so the figures are the GPU-semantics simulator's global-memory counters
(:mod:`polycomp.hw.cuda.sim_counters`: 32-byte sectors of every warp's loads and
stores, the traffic a profiler reports as ``dram``/``lts`` sectors before caching) and
``ptxas -v`` resources, for ``softmax(Q K^T / sqrt(d)) V`` at AutoGTCO's attention
shapes ``[batch x heads, sequence, head dim]`` (DETR, ViT-B, ViT-H, SETR):

* ``fused``: the kernel compiled for ``cuda`` (chain fusion, scheduler/chain/cuda_kernel.py
  for float32 on CUDA cores, scheduler/chain/tc_kernel.py for ``--dtypes float16`` /
  ``bfloat16`` on Tensor Cores: one kernel, the scores never in global memory);
* ``unfused``: the same kernel with option ``chain=False`` (the tiled CUDA pipeline: two
  products, the softmax's kernels, the intermediates in global memory).

Bytes per FLOP = simulated sector bytes / ``2 s^2 (d + d)`` (the two products' multiply-
adds; the softmax's operations are not counted).  Every batch element does the same work
on its own data, so both traffic and FLOPs are linear in the batch and bytes per FLOP do
not depend on it: the simulator runs ``--batch`` elements (default 1; the full batch
takes minutes per shape on this 2-core host) and ``predicted`` gives the fused kernel's
traffic from :func:`~polycomp.scheduler.chain.cuda_kernel.predicted_bytes` for the full
shape.  Both sides are checked against each other (same output within float32
tolerance) in the same run.
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from typing import Any

#: AutoGTCO's attention shapes: name -> (batch x heads, sequence, head dim)
ATTENTION = {"DETR": (8, 1050, 32), "ViT-B": (12, 197, 64), "ViT-H": (16, 257, 80),
             "SETR": (12, 576, 64)}


def _kernel(b: int, s: int, d: int, dtype: str = "float32"):
    """The attention kernel of ``polycomp bench chains`` at ``(b, s, d)``; with
    ``dtype`` float16/bfloat16 the same DSL with half-precision ``Q, K^T, V`` (products
    accumulated in float32, output float32: the Tensor Core chain kernel)."""
    from polycomp.benchmarks.chains import attention_kernel
    return attention_kernel(b, s, d, dtype)


def _ptxas(source: str) -> dict:
    """Registers (max over kernels), spill bytes (sum) and kernels of ``source``."""
    from polycomp.errors import BuildError
    from polycomp.hw.cuda.sass import compile_cubin
    if shutil.which("nvcc") is None:
        return {}
    try:
        _, res = compile_cubin(source, 80)
    except BuildError as e:
        return {"error": str(e)[-500:]}
    return {"registers": max((r.registers for r in res), default=0),
            "spill_bytes": sum(r.spill_stores + r.spill_loads for r in res),
            "smem": max((r.shared_bytes for r in res), default=0), "kernels": len(res)}


def _traffic(ck, inputs) -> tuple[int, int, Any]:
    from polycomp.hw.cuda.simulator import simulate
    out, rep = simulate(ck, *inputs, global_races=False)
    sectors = sum(k.global_load.sectors + k.global_store.sectors for k in rep.kernels)
    return 32 * sectors, len(rep.kernels), out


def case(name: str, batch: int, nvcc: bool, dtype: str = "float32") -> dict:
    import numpy as np

    from polycomp import dtypes as dt
    from polycomp.driver import compile_kernel
    from polycomp.hw.cuda.target import STATIC_SHARED
    from polycomp.scheduler.chain import tc_kernel
    from polycomp.scheduler.chain.cuda_kernel import cuda_tiles, predicted_bytes
    from polycomp.scheduler.chain.tree import plan_for
    full_b, s, d = ATTENTION[name]
    rng = np.random.default_rng(0)
    h = dt.to_numpy(dtype)
    q = rng.standard_normal((batch, s, d)).astype(np.float32).astype(h)
    kt = rng.standard_normal((batch, d, s)).astype(np.float32).astype(h)
    v = rng.standard_normal((batch, s, d)).astype(np.float32).astype(h)
    row: dict = {"name": name, "shape": [full_b, s, d], "simulated_batch": batch,
                 "dtype": dtype}
    t0 = time.perf_counter()
    fused = compile_kernel(_kernel(batch, s, d, dtype), "cuda")
    unfused = compile_kernel(_kernel(batch, s, d, dtype), "cuda", {"chain": False})
    row["compile_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    fb, fk, fo = _traffic(fused, (q, kt, v))
    ub, uk, uo = _traffic(unfused, (q, kt, v))
    row["simulate_s"] = round(time.perf_counter() - t0, 1)
    scale = max(1.0, float(np.nanmax(np.abs(uo))))
    # float32: reassociation only; half: P rounded to the input dtype (docs/fusion.md)
    tol = {"float32": 2e-4, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
    row["outputs_agree"] = bool(np.allclose(fo, uo, rtol=tol, atol=tol * scale))
    flops = batch * 2 * s * s * (d + d)
    row.update(fused_bytes=fb, unfused_bytes=ub, fused_kernels=fk, unfused_kernels=uk,
               fused_bytes_per_flop=fb / flops, unfused_bytes_per_flop=ub / flops,
               traffic_ratio=ub / fb)
    full = compile_kernel(_kernel(full_b, s, d, dtype), "cuda") if full_b != batch else fused
    plan, _ = plan_for(full.state)
    sizes = {"batch": full_b, "m": s, "n": d, "k": d, "l": s}
    if plan is not None and dtype == "float32":
        tiles = cuda_tiles(plan, STATIC_SHARED)
        pb = predicted_bytes(plan, tiles, sizes)
        row.update(tiles=[tiles.tm, tiles.tl, tiles.tk, tiles.tn],
                   predicted_fused_bytes_per_flop=pb / (full_b * 2 * s * s * 2 * d))
    elif plan is not None:
        tt = tc_kernel.tc_tiles(plan, STATIC_SHARED)
        pb = tc_kernel.predicted_bytes(tt, sizes)
        row.update(tiles=[tt.tm, tt.tl, tt.kc, tt.tn], stages=tt.stages,
                   predicted_fused_bytes_per_flop=pb / (full_b * 2 * s * s * 2 * d))
    if nvcc:
        row["ptxas_fused"] = _ptxas(fused.source)
        row["ptxas_unfused"] = _ptxas(unfused.source)
    return row


def _table(rows: list[dict]) -> str:
    out = ["| shape [b, s, d] | dtype | tiles TM x TL | fused B/FLOP (predicted) | unfused B/FLOP "
           "| unfused / fused | kernels | ptxas fused: regs, spills | ptxas unfused: max "
           "regs, spills | outputs agree |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pf, pu = r.get("ptxas_fused", {}), r.get("ptxas_unfused", {})
        t = r.get("tiles", ["?", "?"])
        out.append(
            f"| {r['name']} {r['shape']} | {r.get('dtype', 'float32')} | {t[0]} x {t[1]} | "
            f"{r['fused_bytes_per_flop']:.3f} "
            f"({r.get('predicted_fused_bytes_per_flop', float('nan')):.3f}) | "
            f"{r['unfused_bytes_per_flop']:.3f} | {r['traffic_ratio']:.2f} | "
            f"{r['fused_kernels']} vs {r['unfused_kernels']} | "
            f"{pf.get('registers', '-')}, {pf.get('spill_bytes', '-')} B | "
            f"{pu.get('registers', '-')}, {pu.get('spill_bytes', '-')} B | "
            f"{'yes' if r['outputs_agree'] else 'NO'} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="polycomp bench chains_cuda", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--only", default="", help="comma-separated shape names")
    ap.add_argument("--batch", type=int, default=1,
                    help="batch elements simulated (bytes per FLOP do not depend on it)")
    ap.add_argument("--no-nvcc", action="store_true", help="skip the ptxas figures")
    ap.add_argument("--dtypes", default="float32,float16",
                    help="comma-separated: float32 (CUDA cores), float16 / bfloat16 "
                         "(Tensor Core chain kernel)")
    a = ap.parse_args(argv)
    names = [n for n in ATTENTION if not a.only or n in a.only.split(",")]
    rows = []
    for dtype in a.dtypes.split(","):
        for n in names:
            rows.append(case(n, a.batch, not a.no_nvcc, dtype))
            if not a.json:
                r = rows[-1]
                print(f"{n} {dtype}: fused {r['fused_bytes_per_flop']:.3f} B/FLOP, unfused "
                      f"{r['unfused_bytes_per_flop']:.3f} B/FLOP ({r['compile_s']} s "
                      f"compile, {r['simulate_s']} s simulation)", flush=True)
    print(json.dumps(rows, indent=1) if a.json else _table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
