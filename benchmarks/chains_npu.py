"""Chain fusion on the NPU target: ``polycomp bench chains_npu [--json] [--only NAMES]
[--target npu|npu-lite]``.

No NPU here: every figure comes from the cycle-level NPU simulator
(:mod:`polycomp.hw.npu.sim`, cycle model and its assumptions in docs/npu.md) running
the programs the emitted source is printed from, fp16 operands with fp32
accumulation, one batch element per case by default, or each case's own batch with
``--full-batch``.  On the multi-core chip the batch matters: the fused program splits
its ``(b, m, n)`` blocks over the cube cores, so one batch element of a short sequence
leaves most cores idle (ViT-B: 2 of 24), while the unfused programs split each
product's output tiles:

* ``fused``: the chain compiled for ``npu`` with chain fusion (scheduler/chain/npu_*:
  one cube/vector program, the scores never in GM), constant shapes;
* ``unfused``: what the NPU target does without it, the same computation with the
  intermediate in GM — with a softmax, the kernel compiled with ``chain=False`` (phases:
  cube, vector, cube, joined by GM workspaces; symbolic shapes, because the vector
  mapping cannot tell two constant extents ``M == L`` apart); without one, the two
  batch matmuls as two kernels (the first writing ``T`` in fp16 from L0C, as ``P`` is
  the cast of ``T``), cycles and bytes added.

Cases: AutoGTCO's attention shapes ``softmax(Q K^T / sqrt(d)) V`` (DETR, ViT-B,
ViT-H, SETR: ``[batch x heads, sequence, head dim]``) and Chimera's Table 3.5 chains
G1-G12 ``(batch, M, N, K, L)`` with nothing (``bmm``) or a softmax (``bmm+softmax``)
between the products.  ``GM bytes`` is every byte moved between GM and the core
(GM->L1, GM->UB, L0C->GM, UB->GM); ``predicted`` the fused plan's model figure
(:mod:`polycomp.scheduler.chain.npu_plan`, 32-byte bursts not counted).  Both sides
are checked against each other in the same run (max abs difference).
"""
from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

ATTENTION = {"DETR": (8, 1050, 32), "ViT-B": (12, 197, 64), "ViT-H": (16, 257, 80),
             "SETR": (12, 576, 64)}
CHAINS = {
    "G1": (8, 512, 64, 64, 512), "G2": (12, 512, 64, 64, 512), "G3": (16, 512, 64, 64, 512),
    "G4": (12, 256, 64, 64, 256), "G5": (16, 256, 64, 64, 256), "G6": (16, 256, 80, 80, 256),
    "G7": (12, 208, 64, 64, 208), "G8": (16, 208, 64, 64, 208), "G9": (16, 208, 80, 80, 208),
    "G10": (1, 512, 64, 64, 256), "G11": (1, 768, 64, 64, 384), "G12": (1, 1024, 64, 64, 512),
}
#: G1-G3, G4-G5, G7-G8 differ only in the batch (the same rows without --full-batch)
DEFAULT = ("DETR", "ViT-B", "ViT-H", "SETR", "G1", "G4", "G6", "G7", "G9", "G10", "G11", "G12")


def _fp16_chain(m: int, k: int, l: int, n: int, softmax: bool, scale: float | None,  # noqa: E741
                symbolic: bool, batch: int = 1, name: str = "chain"):
    """``O = cast(middle(X Y), fp16) Z`` (middle: ``* scale`` and / or a softmax), with
    symbolic sizes or constant ones (``batch`` x ``m, k, l, n``)."""
    import polycomp as pc
    from polycomp.frontend import ops
    from polycomp.frontend.dsl import Kernel
    if symbolic:
        B, M, K, L, N = pc.sym("B M K L N")
    else:
        B, M, K, L, N = batch, m, k, l, n

    def chain(X, Y, Z):
        t = ops.batch_matmul(X, Y, name="T")
        if scale is not None:
            t = pc.compute((B, M, L), lambda b, i, j: t[b, i, j] * scale, name="Sc")
        if softmax:
            t = ops.softmax(t, axis=-1, name="S")
        p = pc.compute((B, M, L), lambda b, i, j: pc.cast(t[b, i, j], "float16"), name="P")
        return ops.batch_matmul(p, Z, name="O")
    shapes = {"X": (B, M, K), "Y": (B, K, L), "Z": (B, L, N)}
    return Kernel(chain, name=name, inputs={v: pc.Tensor[s, "float16"]
                                            for v, s in shapes.items()})


def _gm(rep) -> int:
    return sum(v for p, v in rep.bytes.items() if "GM" in p)


def _unfused(m, k, l, n, softmax, scale, target, args):  # noqa: E741
    from polycomp.driver import compile_kernel
    from polycomp.frontend.ops import batch_matmul_kernel
    from polycomp.hw.npu.backend import simulate
    if softmax:
        ck = compile_kernel(_fp16_chain(m, k, l, n, softmax, scale, True), target,
                            {"chain": False})
        out, rep = simulate(ck, *args)
        return out, rep.cycles, _gm(rep), rep.busy
    x, y, z = args
    t, r1 = simulate(compile_kernel(batch_matmul_kernel("float16", "float16"), target), x, y)
    out, r2 = simulate(compile_kernel(batch_matmul_kernel("float16"), target), t, z)
    busy = {p: r1.busy.get(p, 0) + r2.busy.get(p, 0) for p in {*r1.busy, *r2.busy}}
    return out, r1.cycles + r2.cycles, _gm(r1) + _gm(r2), busy


def case(name: str, group: str, target: str, full_batch: bool = False) -> dict:
    from polycomp.driver import compile_kernel
    from polycomp.hw.npu.backend import simulate
    from polycomp.scheduler.chain.npu_pass import chain_plan_of
    if group == "attention":
        batch, s, d = ATTENTION[name]
        m, k, l, n, softmax, scale = s, d, s, d, True, 1.0 / math.sqrt(d)  # noqa: E741
    else:
        batch, m, n, k, l = CHAINS[name]  # noqa: E741
        softmax, scale = group == "bmm+softmax", None
    bt = batch if full_batch else 1
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(sh).astype(np.float16) * (0.5 if softmax else 0.25)
            for sh in ((bt, m, k), (bt, k, l), (bt, l, n))]
    t0 = time.perf_counter()
    # fused whatever the A2 cycle model predicts (its choice is reported beside)
    ck = compile_kernel(_fp16_chain(m, k, l, n, softmax, scale, False, batch=bt), target,
                        {"chain_cost": False})
    plan = chain_plan_of(ck.schedule, ck.state)
    if plan is None:
        raise RuntimeError(f"{name}: not fused: {ck.notes.get('npu-chain-fuse')}")
    from polycomp.hw.npu.program import NpuModule
    assert isinstance(ck.final_ir, NpuModule)
    prog = ck.final_ir.program
    fused, rep = simulate(ck, *args)
    t1 = time.perf_counter()
    unf, u_cycles, u_bytes, u_busy = _unfused(m, k, l, n, softmax, scale, target, args)
    t2 = time.perf_counter()
    flops = 2 * m * l * (k + n)
    t = plan.tiles
    return {"group": group, "case": name, "batch": bt, "shape (M, K, L, N)": [m, k, l, n],
            "tiles": f"{t.tm}x{t.tl} TN={t.tn} k0={t.k0} KL1={t.kl1}",
            "fused_cycles": rep.cycles, "unfused_cycles": u_cycles,
            "model_cycles": list(plan.cycles) if plan.cycles else None,
            "model_fuses": plan.cycles is None or plan.cycles[0] <= plan.cycles[1],
            "cycles_unfused_over_fused": round(u_cycles / rep.cycles, 3),
            "fused_gm_bytes": _gm(rep), "predicted_fused_bytes": int(plan.fused),
            "unfused_gm_bytes": u_bytes,
            "bytes_unfused_over_fused": round(u_bytes / _gm(rep), 3),
            "fused_cube_utilisation": round(rep.cube_utilisation, 3),
            "fused_busy": {p: v for p, v in rep.busy.items() if v},
            "unfused_busy": {p: v for p, v in u_busy.items() if v},
            "flops": flops, "max_abs_diff": float(np.nanmax(np.abs(fused - unf))),
            "buffers": sum(len(p.buffers) for p in prog.programs),
            "sim_seconds": [round(t1 - t0, 1), round(t2 - t1, 1)]}


def run(only: list[str], target: str, full_batch: bool = False) -> list[dict]:
    rows = []
    for name in only:
        groups = ["attention"] if name in ATTENTION else ["bmm", "bmm+softmax"]
        for g in groups:
            rows.append(case(name, g, target, full_batch))
    return rows


def _table(rows: list[dict], target: str) -> str:
    head = ("| group | case | batch | M, K, L, N | tiles | fused cycles | unfused cycles | "
            "x cycles | fused GM MiB (predicted) | unfused GM MiB | x bytes | fused cube util "
            "| max abs diff | model: fused / unfused cycles | model fuses |")
    lines = [f"target {target}, NPU simulator, fp16 operands / fp32 accumulation; "
             f"x = unfused / fused", "", head,
             "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['group']} | {r['case']} | {r['batch']} | "
            f"{', '.join(map(str, r['shape (M, K, L, N)']))} "
            f"| {r['tiles']} | {r['fused_cycles']} | {r['unfused_cycles']} | "
            f"{r['cycles_unfused_over_fused']:.2f} | {r['fused_gm_bytes'] / 2**20:.2f} "
            f"({r['predicted_fused_bytes'] / 2**20:.2f}) | {r['unfused_gm_bytes'] / 2**20:.2f}"
            f" | {r['bytes_unfused_over_fused']:.2f} | "
            f"{100 * r['fused_cube_utilisation']:.1f}% | {r['max_abs_diff']:.1e} | "
            f"{' / '.join(map(str, r['model_cycles'] or ['-']))} | "
            f"{'yes' if r['model_fuses'] else 'no'} |")
    lines += ["", "geometric means (unfused / fused):", ""]
    for g in sorted({r["group"] for r in rows}):
        sel = [r for r in rows if r["group"] == g]
        gc = math.exp(sum(math.log(r["cycles_unfused_over_fused"]) for r in sel) / len(sel))
        gb = math.exp(sum(math.log(r["bytes_unfused_over_fused"]) for r in sel) / len(sel))
        lines.append(f"* {g} ({len(sel)} rows): cycles {gc:.2f}, GM bytes {gb:.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="polycomp bench chains_npu",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(DEFAULT),
                    help="comma-separated cases (attention: DETR, ViT-B, ViT-H, SETR; "
                         "chains G1-G12)")
    ap.add_argument("--target", default="npu", choices=("npu", "npu-lite"))
    ap.add_argument("--full-batch", action="store_true",
                    help="each case's own batch (default: one batch element)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    names = [s.strip() for s in a.only.split(",") if s.strip()]
    bad = [s for s in names if s not in ATTENTION and s not in CHAINS]
    if bad:
        ap.error(f"unknown case(s) {', '.join(bad)}")
    rows = run(names, a.target, a.full_batch)
    print(json.dumps(rows, indent=2) if a.json else _table(rows, a.target))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
