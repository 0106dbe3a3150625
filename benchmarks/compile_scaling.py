"""Compile-time scaling: ``polycomp bench compile_scaling [--cases a,b] [--targets c,cuda]
[--repeat N] [--json]``.

Synthetic programs whose size grows along one axis, to find compile steps that grow
faster than the program (issue #14: "100/150/300 C statements took 4.8 s / 16.5 s /
> 60 s; loop depth 10 took 93 s; 200 chained DSL stages took 34 s"):

* ``c-stmts-N``: a C kernel with N statements in one loop, statement ``s`` reading the
  array statement ``s - 1`` wrote (``T{s}[i] = T{s-1}[i] * 1.5f + 1.0f``);
* ``c-loops-N``: the same statements, each in its own loop;
* ``c-depth-D``: one statement in a perfect nest of depth D over D symbolic extents;
* ``dsl-chain-N``: N chained elementwise ``@tensor_expr`` stages.

A cell is the best CPU time (``time.process_time``: less disturbed by other jobs on a
shared machine than wall time) of ``repeat`` ``compile_kernel(kernel, target)`` calls.
"""

import argparse
import json
import sys
import time

DEFAULT_CASES = ("c-stmts-100", "c-stmts-150", "c-stmts-300", "c-loops-300",
                 "c-depth-10", "dsl-chain-100", "dsl-chain-200")
DEFAULT_TARGETS = ("c", "cuda")


def c_statements(n: int, own_loops: bool = False) -> str:
    """The C text of ``c-stmts-N`` (``own_loops``: ``c-loops-N``)."""
    decl = ", ".join(["float A[N]"] + [f"float T{s}[N]" for s in range(n)])
    lines = []
    for s in range(n):
        src = "A" if s == 0 else f"T{s - 1}"
        stmt = f"T{s}[i] = {src}[i] * 1.5f + 1.0f;"
        lines.append(f"  for (int i = 0; i < N; i++) {stmt}" if own_loops else f"    {stmt}")
    if own_loops:
        return f"void k(int N, {decl}) {{\n" + "\n".join(lines) + "\n}\n"
    return (f"void k(int N, {decl}) {{\n  for (int i = 0; i < N; i++) {{\n"
            + "\n".join(lines) + "\n  }\n}\n")


def c_depth(d: int) -> str:
    """The C text of ``c-depth-D``."""
    its = [f"i{j}" for j in range(d)]
    dims = "".join(f"[N{j}]" for j in range(d))
    sizes = ", ".join(f"int N{j}" for j in range(d))
    text = f"void k({sizes}, float A{dims}, float B{dims}) {{\n"
    for j, it in enumerate(its):
        text += "  " * (j + 1) + f"for (int {it} = 0; {it} < N{j}; {it}++)\n"
    idx = "".join(f"[{it}]" for it in its)
    return text + "  " * (d + 1) + f"B{idx} = A{idx} * 2.0f;\n}}\n"


def dsl_chain(n: int):
    """The kernel of ``dsl-chain-N``."""
    import polycomp as pc
    N = pc.sym("N")

    def stage(T, s):
        return pc.compute((N,), lambda i: T[i] * 1.5 + 1.0, name=f"S{s}")

    @pc.tensor_expr
    def chain(A: pc.Tensor[(N,), "float32"]):  # type: ignore[name-defined]
        T = A
        for s in range(n):
            T = stage(T, s)
        return T
    return chain


def make_case(name: str):
    """A fresh kernel object for case ``name`` (see the module docstring)."""
    from polycomp.frontend.c_reader import read_c_kernel
    kind, _, size = name.rpartition("-")
    if not size.isdigit():
        raise SystemExit(f"bad case {name!r}: expected KIND-SIZE, e.g. c-stmts-100")
    n = int(size)
    if kind == "c-stmts":
        return read_c_kernel(c_statements(n))
    if kind == "c-loops":
        return read_c_kernel(c_statements(n, own_loops=True))
    if kind == "c-depth":
        return read_c_kernel(c_depth(n))
    if kind == "dsl-chain":
        return dsl_chain(n)
    raise SystemExit(f"unknown case kind {kind!r}: c-stmts, c-loops, c-depth, dsl-chain")


def time_case(name: str, target: str, repeat: int) -> dict:
    """``{"s": best CPU seconds}`` or ``{"error": message}``."""
    from polycomp.driver import compile_kernel
    best = None
    for _ in range(max(1, repeat)):
        kernel = make_case(name)
        t0 = time.process_time()
        try:
            compile_kernel(kernel, target)
        except Exception as e:  # noqa: BLE001 - reported in the table, never hidden
            return {"error": f"{type(e).__name__}: {e}"}
        dt = time.process_time() - t0
        best = dt if best is None else min(best, dt)
    return {"s": best}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="polycomp bench compile_scaling",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(DEFAULT_CASES),
                   help=f"comma-separated cases (default: {','.join(DEFAULT_CASES)})")
    p.add_argument("--targets", default=",".join(DEFAULT_TARGETS),
                   help=f"comma-separated targets (default: {','.join(DEFAULT_TARGETS)})")
    p.add_argument("--repeat", type=int, default=1, help="compiles per cell; the best counts")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    cases = [c for c in args.cases.split(",") if c]
    targets = [t for t in args.targets.split(",") if t]
    rows = []
    if not args.json:
        print(f"compile CPU time in seconds (best of {args.repeat})\n\n| case | "
              + " | ".join(targets) + " |\n|------|" + "|".join("---:" for _ in targets) + "|")
    for case in cases:
        times = {t: time_case(case, t, args.repeat) for t in targets}
        rows.append({"case": case, "times": times})
        if not args.json:
            print(f"| {case} | " + " | ".join(
                "error" if "error" in c else f"{c['s']:.2f}" for c in times.values()) + " |",
                flush=True)
    if args.json:
        print(json.dumps({"targets": targets, "repeat": args.repeat, "rows": rows}, indent=1))
    errors = [(r["case"], t, c["error"]) for r in rows for t, c in r["times"].items()
              if "error" in c]
    for case, t, msg in errors:
        print(f"error: {case} {t}: {msg}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
