"""Compile-time scaling: ``polycomp bench compile_scaling [--cases a,b] [--targets c,cuda]
[--repeat N] [--json]``.

Synthetic programs whose size grows along one axis, to find compile steps that grow
faster than the program (issue #14: "100/150/300 C statements took 4.8 s / 16.5 s /
> 60 s; loop depth 10 took 93 s; 200 chained DSL stages took 34 s"):

* ``c-stmts-N``: a C kernel with N statements in one loop, statement ``s`` reading the
  array statement ``s - 1`` wrote (``T{s}[i] = T{s-1}[i] * 1.5f + 1.0f``);
* ``c-loops-N``: the same statements, each in its own loop;
* ``c-depth-D``: one statement in a perfect nest of depth D over D symbolic extents;
* ``dsl-chain-N``: N chained elementwise ``@tensor_expr`` stages;

and the shapes of issue #24 ("300 independent loop nests do not finish in 120 s; one
statement under d nested 2-trip loops: 12 s at d = 8, > 60 s at d = 10"):

* ``c-nests-N``: N independent 2-deep loop nests, nest ``s`` writing its own array
  (``B{s}[i][j] = A[i][j] * 2.0f + s``);
* ``c-inplace-N``: N loop nests updating one array in place (``A[i] = A[i] * 0.5f + s``):
  every nest depends on the one before;
* ``c-depth2-D``: ``B[0] += A[0]`` under D nested loops of 2 iterations each (every
  loop carries the dependence, whose last-writer relation is a binary counter).

A cell is the best CPU time (``time.process_time``: less disturbed by other jobs on a
shared machine than wall time) of ``repeat`` runs of the front end (reading the C text,
which builds its polyhedral model once to report errors; tracing a DSL kernel) and
``compile_kernel(kernel, target)``: what ``polycomp compile`` spends.  With
``--timeout S`` every cell runs in a child process and one that takes longer than ``S``
seconds of wall time shows ``> S``.
"""

import argparse
import json
import subprocess
import sys
import time

DEFAULT_CASES = ("c-stmts-100", "c-stmts-150", "c-stmts-300", "c-loops-300",
                 "c-depth-10", "dsl-chain-100", "dsl-chain-200",
                 "c-nests-100", "c-nests-300", "c-nests-1000",
                 "c-inplace-100", "c-inplace-300", "c-inplace-1000",
                 "c-depth2-6", "c-depth2-8", "c-depth2-10", "c-depth2-12")
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


def c_nests(n: int) -> str:
    """The C text of ``c-nests-N``."""
    decl = ", ".join(["float A[N][M]"] + [f"float B{s}[N][M]" for s in range(n)])
    nests = "\n".join(f"  for (int i = 0; i < N; i++)\n    for (int j = 0; j < M; j++)\n"
                      f"      B{s}[i][j] = A[i][j] * 2.0f + {s}.0f;" for s in range(n))
    return f"void k(int N, int M, {decl}) {{\n{nests}\n}}\n"


def c_inplace(n: int) -> str:
    """The C text of ``c-inplace-N``."""
    nests = "\n".join(f"  for (int i = 0; i < N; i++) A[i] = A[i] * 0.5f + {s}.0f;"
                      for s in range(n))
    return f"void k(int N, float A[N]) {{\n{nests}\n}}\n"


def c_depth2(d: int) -> str:
    """The C text of ``c-depth2-D``."""
    text = "void k(float A[1], float B[1]) {\n"
    for j in range(d):
        text += "  " * (j + 1) + f"for (int i{j} = 0; i{j} < 2; i{j}++)\n"
    return text + "  " * (d + 1) + "B[0] += A[0];\n}\n"


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
    texts = {"c-nests": c_nests, "c-inplace": c_inplace, "c-depth2": c_depth2}
    if kind in texts:
        return read_c_kernel(texts[kind](n))
    raise SystemExit(f"unknown case kind {kind!r}: c-stmts, c-loops, c-depth, dsl-chain, "
                     f"c-nests, c-inplace, c-depth2")


def time_case(name: str, target: str, repeat: int) -> dict:
    """``{"s": best CPU seconds}`` or ``{"error": message}``."""
    from polycomp.driver import compile_kernel
    compile_kernel(make_case("c-stmts-1"), target)   # imports and registry: not timed
    best = None
    for _ in range(max(1, repeat)):
        t0 = time.process_time()
        try:
            compile_kernel(make_case(name), target)
        except Exception as e:  # noqa: BLE001 - reported in the table, never hidden
            return {"error": f"{type(e).__name__}: {e}"}
        dt = time.process_time() - t0
        best = dt if best is None else min(best, dt)
    return {"s": best}


def time_case_in_child(name: str, target: str, repeat: int, timeout: float) -> dict:
    """:func:`time_case` in a child process, or ``{"timeout": seconds}``."""
    cmd = [sys.executable, "-m", "polycomp.benchmarks.compile_scaling", "--cases", name,
           "--targets", target, "--repeat", str(repeat), "--json"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    try:
        return json.loads(r.stdout)["rows"][0]["times"][target]
    except (ValueError, KeyError, IndexError):
        return {"error": f"child exited with {r.returncode}: {r.stderr.strip()[-300:]}"}


def _cell(c: dict) -> str:
    if "error" in c:
        return "error"
    if "timeout" in c:
        return f"> {c['timeout']:g}"
    return f"{c['s']:.2f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="polycomp bench compile_scaling",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(DEFAULT_CASES),
                   help=f"comma-separated cases (default: {','.join(DEFAULT_CASES)})")
    p.add_argument("--targets", default=",".join(DEFAULT_TARGETS),
                   help=f"comma-separated targets (default: {','.join(DEFAULT_TARGETS)})")
    p.add_argument("--repeat", type=int, default=1, help="compiles per cell; the best counts")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--timeout", type=float, default=None,
                   help="run each cell in a child process, at most this many seconds")
    args = p.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    cases = [c for c in args.cases.split(",") if c]
    targets = [t for t in args.targets.split(",") if t]
    rows = []
    if not args.json:
        print(f"compile CPU time in seconds (best of {args.repeat})\n\n| case | "
              + " | ".join(targets) + " |\n|------|" + "|".join("---:" for _ in targets) + "|")
    for case in cases:
        times = {t: time_case(case, t, args.repeat) if args.timeout is None else
                 time_case_in_child(case, t, args.repeat, args.timeout) for t in targets}
        rows.append({"case": case, "times": times})
        if not args.json:
            print(f"| {case} | " + " | ".join(_cell(c) for c in times.values()) + " |",
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
