"""ptxas resources and SASS instruction mix of every CUDA chain kernel, as JSON.

usage: python scripts/chain_resources.py OUT.json [--only SUBSTR] [--sources DIR]
       python scripts/chain_resources.py --compare BEFORE.json AFTER.json

Compiles the chain benchmark cases (benchmarks/chains.py: bmm and bmm+softmax G1-G12 and
attention in float32 with ``chain="force"``, attention in float16/bfloat16, bmm and
bmm+softmax G1/G10/G12 in float16) and the symbolic test chains of
``tests/chain_kernels.py`` (float32 forced, float16, bfloat16) for ``cuda`` (built for
sm_80) and ``cuda-sm90`` (built for sm_90), and records per kernel: registers, shared
bytes, stack/spills (``ptxas -v``) and the SASS opcode counts (``cuobjdump -sass``).  Run
it with two trees' interpreters and compare the files (the chain kernels must keep their
instruction structure: docs/fusion.md).  ``--sources DIR`` also writes each ``.cu``.
``--compare`` prints a Markdown table of two such files: per case and target the
registers, shared bytes and spills of each kernel, the SASS instruction count and the
opcodes whose counts differ.
"""
from __future__ import annotations

import json
import os
import sys


def cases():
    from polycomp.benchmarks import chains as ch
    force = {"chain": "force"}
    for name, s in ch.CHAINS.items():
        yield f"bmm-{name}-f32", lambda s=s: ch._kernel("bmm", s), force
        yield f"bmm+softmax-{name}-f32", lambda s=s: ch._kernel("bmm+softmax", s), force
    for name, s in ch.ATTENTION.items():
        yield f"attention-{name}-f32", lambda s=s: ch._kernel("attention", s), force
        for dt in ("float16", "bfloat16"):
            yield (f"attention-{name}-{dt}", lambda s=s, dt=dt: ch.attention_kernel(*s, dtype=dt),
                   {})
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests")
    sys.path.insert(0, here)
    import chain_kernels as ck
    for name in ("bmm_chain", "bmm_softmax_chain", "causal_attention", "masked_attention",
                 "attention_k_rows", "mm_relu_chain"):
        yield f"sym-{name}-f32", lambda name=name: getattr(ck, name), force
    for dt in ("float16", "bfloat16"):
        for name, k in ck.HALF[dt].items():
            yield f"sym-{name}-{dt}", lambda k=k: k, {}


def compare(before_path: str, after_path: str) -> None:
    with open(before_path) as f:
        before = json.load(f)
    with open(after_path) as f:
        after = json.load(f)
    print("| case | target | kernel | regs | smem B | spills | SASS instructions | "
          "opcodes that differ |")
    print("|---|---|---|---|---|---|---|---|")
    same = 0
    for key in sorted(set(before) | set(after)):
        case, target = key.rsplit("@", 1)
        b, a = before.get(key, {}), after.get(key, {})
        if "error" in b or "error" in a or not a or not b:
            print(f"| {case} | {target} | - | {b.get('error', '')} | {a.get('error', '')} |||")
            continue
        rb = {r[0]: r for r in b["resources"]}
        ra = {r[0]: r for r in a["resources"]}
        sb, sa = b["sass"], a["sass"]
        diff = {op: sa.get(op, 0) - sb.get(op, 0) for op in set(sb) | set(sa)
                if sa.get(op, 0) != sb.get(op, 0)}
        ops = ", ".join(f"{op} {d:+d}" for op, d in sorted(diff.items(), key=lambda x: -abs(x[1])))
        if not diff and rb == ra:
            same += 1
        for name in sorted(set(rb) | set(ra)):
            x, y = rb.get(name), ra.get(name)

            def pair(i, x=x, y=y):
                u, v = (x[i] if x else "-"), (y[i] if y else "-")
                return str(u) if u == v else f"{u} -> {v}"
            spill = pair(4) if (x and x[4]) or (y and y[4]) else "0"
            print(f"| {case} | {target} | {name} | {pair(1)} | {pair(2)} | {spill} | "
                  f"{sum(sb.values())} -> {sum(sa.values())} | {ops or 'none'} |")
            ops = ""
    print(f"\n{same} of {len(set(before) | set(after))} cases identical in resources and "
          f"opcode counts")


def main() -> None:
    if sys.argv[1] == "--compare":
        compare(sys.argv[2], sys.argv[3])
        return
    from polycomp.driver import compile_kernel
    from polycomp.hw.cuda.sass import compile_cubin, sass_opcodes
    out = sys.argv[1]
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
    srcdir = sys.argv[sys.argv.index("--sources") + 1] if "--sources" in sys.argv else None
    result = {}
    for case, make, opts in cases():
        if only and only not in case:
            continue
        for target, sm in (("cuda", 80), ("cuda-sm90", 90)):
            key = f"{case}@{target}"
            try:
                ck = compile_kernel(make(), target, opts)
                src = ck.source
                if srcdir:
                    os.makedirs(srcdir, exist_ok=True)
                    with open(os.path.join(srcdir, key.replace("@", "_") + ".cu"), "w") as f:
                        f.write(src)
                cubin, res = compile_cubin(src, sm)
                ops = sass_opcodes(cubin)
                result[key] = {
                    "kernels": len(res),
                    "resources": [[r.kernel, r.registers, r.shared_bytes, r.stack_bytes,
                                   r.spill_stores, r.spill_loads] for r in res],
                    "sass": dict(sorted(ops.items())),
                    "notes": ck.state.remarks.get("chain-cuda", []) if ck.state else []}
            except Exception as e:  # noqa: BLE001 - recorded, compared like the rest
                result[key] = {"error": f"{type(e).__name__}: {e}"[:400]}
            print(key, result[key].get("resources", result[key].get("error")), flush=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    print("done", out)


if __name__ == "__main__":
    main()
