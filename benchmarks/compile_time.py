"""Compile-time benchmark: ``polycomp bench compile [--targets c,cuda,...] [--ops a,b]
[--dtypes main|all] [--repeat N] [--json]``.

One row per op-library kernel (:data:`polycomp.frontend.ops.OPS`) and dtype: float32
(when the op has it) and the op's *main* dtype, its first reduced-precision float dtype
(float16 or bfloat16: what a deployed model runs, and the Tensor Core path of the CUDA
contractions) when it has one, else its first dtype if it has no float32 (``--dtypes
all``: every dtype of the op).  Each cell is the best wall time of ``repeat``
``compile_kernel(op.factory(dtype), target)`` calls (tracing, the polyhedral model,
scheduling, lowering, IR passes and emission; a fresh kernel object each time, so
nothing is cached between runs); the last row is the total of the cells per target.
A compile that fails is reported as an error, not timed.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

DEFAULT_TARGETS = ("c", "cpu-avx2", "cpu-avx512", "cuda")
REDUCED = ("float16", "bfloat16")


def kernel_dtypes(spec, which: str = "main") -> list[str]:
    """The dtypes benchmarked for ``spec`` (see the module docstring)."""
    if which == "all":
        return list(spec.dtypes)
    out = ["float32"] if "float32" in spec.dtypes else []
    main = next((d for d in spec.dtypes if d in REDUCED), None)
    if main is None and not out:
        main = spec.dtypes[0]
    if main is not None:
        out.append(main)
    return out


def time_compile(spec, dtype: str, target: str, repeat: int) -> dict:
    """``{"s": best seconds}`` or ``{"error": message}``."""
    from polycomp.driver import compile_kernel
    best = None
    for _ in range(max(1, repeat)):
        kernel = spec.factory(dtype)
        t0 = time.perf_counter()
        try:
            compile_kernel(kernel, target)
        except Exception as e:  # noqa: BLE001 - reported in the table, never hidden
            return {"error": f"{type(e).__name__}: {e}"}
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return {"s": best}


def run(targets, ops=None, dtypes: str = "main", repeat: int = 3, progress=None) -> dict:
    """The benchmark's result: ``{"targets", "repeat", "rows": [{"op", "dtype",
    "times": {target: {"s"} | {"error"}}}], "total_s": {target: seconds}}``."""
    from polycomp.frontend.ops import OPS
    from polycomp.hw.registry import target_names
    known = target_names()
    bad = [t for t in targets if t not in known]
    if bad:
        raise SystemExit(f"unknown target(s) {', '.join(bad)}; known: {', '.join(known)}")
    names = list(OPS) if not ops else list(ops)
    missing = [n for n in names if n not in OPS]
    if missing:
        raise SystemExit(f"unknown op(s) {', '.join(missing)}")
    rows = []
    for name in names:
        spec = OPS[name]
        for dtype in kernel_dtypes(spec, dtypes):
            times = {t: time_compile(spec, dtype, t, repeat) for t in targets}
            rows.append({"op": name, "dtype": dtype, "times": times})
            if progress is not None:
                progress(rows[-1])
    total = {t: sum(r["times"][t].get("s", 0.0) for r in rows) for t in targets}
    return {"targets": list(targets), "repeat": repeat, "rows": rows, "total_s": total}


def _cell(c: dict) -> str:
    return "error" if "error" in c else f"{c['s']:.3f}"


def format_table(result: dict) -> str:
    ts = result["targets"]
    lines = [f"compile time in seconds (best of {result['repeat']})", "",
             "| op | dtype | " + " | ".join(ts) + " |",
             "|----|-------|" + "|".join("---:" for _ in ts) + "|"]
    for r in result["rows"]:
        lines.append(f"| {r['op']} | {r['dtype']} | "
                     + " | ".join(_cell(r["times"][t]) for t in ts) + " |")
    lines.append("| **total** | | " + " | ".join(f"{result['total_s'][t]:.2f}" for t in ts)
                 + " |")
    errors = [(r["op"], r["dtype"], t, r["times"][t]["error"]) for r in result["rows"]
              for t in ts if "error" in r["times"][t]]
    for op, dtype, t, msg in errors:
        lines.append(f"error: {op} {dtype} {t}: {msg}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="polycomp bench compile",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default=",".join(DEFAULT_TARGETS),
                   help=f"comma-separated targets (default: {','.join(DEFAULT_TARGETS)})")
    p.add_argument("--ops", default=None, help="comma-separated op names (default: all)")
    p.add_argument("--dtypes", choices=("main", "all"), default="main",
                   help="float32 and the main dtype of each op (default), or all its dtypes")
    p.add_argument("--repeat", type=int, default=3, help="compiles per cell; the best counts")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    ops = [o for o in args.ops.split(",") if o] if args.ops else None
    progress = None
    if not args.json:
        def progress(row):
            print(f"  {row['op']} {row['dtype']}: "
                  + ", ".join(f"{t} {_cell(c)}" for t, c in row["times"].items()),
                  file=sys.stderr, flush=True)
    result = run(targets, ops, args.dtypes, args.repeat, progress)
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    return 1 if any("error" in c for r in result["rows"] for c in r["times"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
