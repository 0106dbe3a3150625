"""Measure CUDA from C on the PolyBench/C kernels the C front end reads (helper script).

Usage: ``python scripts/c_cuda_measure.py --polybench DIR [--scale S] [--json OUT]``
(DIR: an unpacked PolyBench/C 4.2.1; nothing is fetched, nothing of it is stored).

For each ``*.c`` kernel under DIR: the file is preprocessed with ``gcc -E -P
-DPOLYBENCH_USE_C99_PROTO -DMINI_DATASET`` and its ``kernel_*`` function taken verbatim
(``static``/``inline`` dropped).  If the C front end reads it, the script compiles it for
``cuda`` twice (the per-nest choice, and ``gpu='baseline'``), and reports per kernel:

* the path of each loop nest (``T:<class>`` tiled, ``B`` baseline);
* the GPU-semantics simulator's results (strict) against the same function compiled by
  ``gcc -O0 -ffp-contract=off``, on random data at odd/prime sizes (every size
  parameter ``S + 2k`` rounded to odd, time-step counts 2): ``exact`` (bitwise) or the
  largest relative difference;
* ``nvcc -arch=sm_80 -cubin -Xptxas -v``: the largest register count over the kernels and
  the spill bytes (stores + loads);
* the simulator's global traffic (bytes loaded + stored) per floating-point operation,
  baseline and tiled;
* the threads of the least parallel launch (1: a single-thread kernel).

``--quick`` compiles the default path only and skips ptxas; ``--bundle B`` records every
simulated run in the GPU check bundle ``B`` (:mod:`polycomp.hw.cuda.gpu_bundle`: the
``.cu``, the sizes, the caller's arrays and the simulator's outputs), which
``python3 scripts/gpu_bundle_run.py B --out results.jsonl`` replays on a GPU machine
(numpy, cupy and nvcc there; no polycomp, no islpy): the C front end's check bundle::

    python scripts/c_cuda_measure.py --polybench DIR --scale 9 --quick --bundle /tmp/cb
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import islpy as isl
import numpy as np


def size_macros(path: str, scale: int) -> dict[str, int]:
    """Odd sizes for the dataset macros of the kernel's header (those its MINI_DATASET
    block defines): ``scale + 2k`` rounded up to odd, time-step counts 2."""
    h = os.path.splitext(path)[0] + ".h"
    names: list[str] = []
    if os.path.exists(h):
        txt = open(h).read()
        block = txt.split("ifdef MINI_DATASET", 1)[-1].split("#  endif", 1)[0]
        names = re.findall(r"define\s+(\w+)\s+\d+", block)
    return {n: 2 if n in ("TSTEPS", "TMAX") else (scale + 2 * k) | 1
            for k, n in enumerate(names)}


def extract(path: str, pb: str, macros: dict[str, int]) -> tuple[str, str]:
    """(function name, source of the ``kernel_*`` function with macros expanded)."""
    cmd = ["gcc", "-E", "-P", "-DPOLYBENCH_USE_C99_PROTO", "-DMINI_DATASET",
           *(f"-D{k}={v}" for k, v in macros.items()),
           f"-I{pb}/utilities", f"-I{os.path.dirname(path)}", path]
    txt = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"^[^\n;{}]*\bvoid\s+(kernel_\w+)\s*\(", txt, re.M)
    if m is None:
        raise ValueError(f"{path}: no kernel_* function")
    start = m.start()
    depth, i = 0, txt.index("{", m.end())
    while True:
        c = txt[i]
        depth += c == "{"
        depth -= c == "}"
        i += 1
        if depth == 0:
            break
    src = txt[start:i].replace("static ", "").replace("inline ", "")
    used = set(re.findall(r"\w+", src))   # the typedefs the kernel uses (nussinov's base)
    typedefs = "".join(t + "\n" for t in re.findall(r"^typedef [^;{}]*;", txt, re.M)
                       if (re.findall(r"(\w+)\s*;", t) or [""])[-1] in used)
    return m.group(1), typedefs + src


def flops(model, values: dict) -> int:
    """Floating-point operations executed: per statement, instances x arithmetic ops."""
    from polycomp import ir
    total = 0
    for st in model.statements:
        dom = st.domain
        for p, v in values.items():
            k = dom.find_dim_by_name(isl.dim_type.param, p)
            if k >= 0:
                dom = dom.fix_val(isl.dim_type.param, k, isl.Val.int_from_si(dom.get_ctx(), v))
        n = int(dom.count_val().to_python())
        ops = 0

        def count(e):
            nonlocal ops
            if isinstance(e, ir.Binary):
                ops += e.op in "+-*/" and e.dtype.startswith("float")
                count(e.a)
                count(e.b)
            elif isinstance(e, (ir.Call,)):
                ops += 1
                for a in e.args:
                    count(a)
            elif isinstance(e, ir.Select):
                count(e.t)
                count(e.f)
            elif isinstance(e, ir.Cast):
                count(e.value)
        count(st.value)
        total += n * ops
    return total


def ptxas(source: str) -> dict:
    """Registers (max over kernels) and spill bytes (sum) of ``source`` for sm_80."""
    from polycomp.errors import BuildError
    from polycomp.hw.cuda.sass import compile_cubin
    try:
        _, res = compile_cubin(source, 80)
    except BuildError as e:
        return {"error": str(e)[-500:]}
    return {"registers": max((r.registers for r in res), default=0),
            "spill_bytes": sum(r.spill_stores + r.spill_loads for r in res)}


def measure(name: str, src: str, macros: dict[str, int], workdir: str,
            isl_too: bool = False, quick: bool = False) -> dict:
    from polycomp.driver import compile_kernel
    from polycomp.frontend.c_reader import read_c_kernel
    from polycomp.hw.cuda.simulator import simulate
    from polycomp.scheduler.promotion.record import promotion_state
    from polycomp.shapes import eval_int
    row: dict = {"kernel": name}
    try:
        k = read_c_kernel(src)
    except Exception as e:  # noqa: BLE001 - a report of what the reader refuses
        row["read"] = f"no: {type(e).__name__}"
        return row
    row["read"] = "yes"
    sizes = {p: macros[p.upper()] for p in k.params}
    params = [p.name for p in k.graph.params]
    arrays = {}
    rng = np.random.default_rng(0)
    for a in tuple(k.graph.inputs) + tuple(k.graph.outputs):
        shape = tuple(eval_int(e, sizes) for e in a.buffer.shape)
        arrays[a.name] = (rng.random(shape) + 0.5).astype(a.buffer.dtype)
    # the C reference: parameters in C order (ints, then arrays by name)
    so = os.path.join(workdir, f"{name}.so")
    c = os.path.join(workdir, f"{name}.c")
    with open(c, "w") as f:
        f.write(src)
    subprocess.run(["gcc", "-O0", "-ffp-contract=off", "-shared", "-fPIC", "-o", so, c],
                   check=True, capture_output=True)
    fn = getattr(ctypes.CDLL(so), name)
    ref = {n: a.copy() for n, a in arrays.items()}
    order = re.search(rf"{name}\s*\(([^)]*)\)", src, re.S).group(1)  # type: ignore[union-attr]
    args = []
    for decl in order.split(","):
        pname = re.findall(r"\w+", decl.split("[")[0])[-1]
        if pname in params:
            args.append(ctypes.c_int(sizes[pname]))
        elif ref[pname].ndim == 0:       # alpha, beta: a floating-point scalar by value
            by_value = ctypes.c_float if ref[pname].dtype == np.float32 else ctypes.c_double
            args.append(by_value(float(ref[pname])))
        else:
            args.append(ref[pname].ctypes.data_as(ctypes.c_void_p))
    fn.restype = None
    fn(*args)
    call = [arrays[a] for a in k.inputs + k.outputs]
    nflop = flops(k.polyhedral_model(), sizes)
    row["sizes"] = sizes
    row["flops"] = nflop
    configs: list[tuple[str, dict]] = [("tiled", {})] if quick else \
        [("tiled", {}), ("baseline", {"gpu": "baseline"})]
    if isl_too:
        configs.append(("isl", {"isl_scheduler": True}))
    for label, opts in configs:
        t0 = time.perf_counter()
        ck = compile_kernel(k, "cuda", opts)
        row[f"{label}_compile_s"] = round(time.perf_counter() - t0, 2)
        if label in ("tiled", "isl"):
            notes = [n for n in ck.state.remarks.get("scop-gpu-groups", [])
                     if "tiled GPU pipeline" in n or "baseline mapping" in n]
            row["paths" if label == "tiled" else "isl_paths"] = " ".join(
                "B" if "baseline" in n else "T:" + n.split("(")[2].split(")")[0][:4]
                for n in notes)
            row["promoted" if label == "tiled" else "isl_promoted"] = sorted(
                f"{p.array.name}:{p.level[:3]}" for p in promotion_state(ck.state).promotions)
        if not quick:
            row[f"{label}_ptxas"] = ptxas(ck.source)
        t0 = time.perf_counter()
        try:
            got, rep = simulate(ck, *call, **sizes)
        except Exception as e:  # noqa: BLE001 - reported
            row[f"{label}_sim"] = f"error: {type(e).__name__}: {str(e)[:200]}"
            continue
        row[f"{label}_sim_s"] = round(time.perf_counter() - t0, 1)
        got = got if isinstance(got, tuple) else (got,)
        worst, exact = 0.0, True
        for o, g in zip(k.outputs, got):
            w = ref[o]
            exact &= bool(np.array_equal(g, w, equal_nan=True))
            worst = max(worst, float(np.max(np.abs(g - w) / np.maximum(np.abs(w), 1e-30),
                                            initial=0.0)))
        row[f"{label}_sim"] = "exact" if exact else f"rel err {worst:.1e}"
        traffic = rep.global_bytes_loaded + rep.global_bytes_stored
        row[f"{label}_bytes_per_flop"] = round(traffic / max(nflop, 1), 3)
        # the least parallel kernel: threads launched (1: a single-thread kernel)
        row[f"{label}_min_threads"] = min(
            (int(np.prod(ks.grid)) * int(np.prod(ks.block)) for ks in rep.kernels), default=0)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--polybench", required=True, help="PolyBench/C 4.2.1 directory")
    ap.add_argument("--scale", type=int, default=33, help="base size (odd sizes from it)")
    ap.add_argument("--only", default="", help="comma-separated kernel names")
    ap.add_argument("--isl", action="store_true",
                    help="also compile with isl's scheduler (option isl_scheduler)")
    ap.add_argument("--json", default="", help="write the rows to this file")
    ap.add_argument("--quick", action="store_true",
                    help="the default compile only (no gpu='baseline' one), no ptxas")
    ap.add_argument("--bundle", default="",
                    help="record every simulated run in this GPU check bundle directory "
                         "(run it on a GPU with scripts/gpu_bundle_run.py)")
    a = ap.parse_args(argv)
    if a.bundle:
        from polycomp.hw.cuda.gpu_bundle import ENV_VAR
        os.environ[ENV_VAR] = os.path.abspath(a.bundle)
    paths = sorted(p for p in glob.glob(f"{a.polybench}/**/*.c", recursive=True)
                   if "utilities" not in p)
    only = set(filter(None, a.only.split(",")))
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for path in paths:
            base = os.path.splitext(os.path.basename(path))[0]
            if only and base not in only:
                continue
            macros = size_macros(path, a.scale)
            try:
                name, src = extract(path, a.polybench, macros)
            except ValueError:       # e.g. medley/nussinov/Nussinov.orig.c
                continue
            row = measure(name, src, macros, work, a.isl, a.quick)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    print("\n| kernel | paths | sim tiled | sim baseline | regs/spill tiled | regs/spill "
          "baseline | B/FLOP baseline | B/FLOP tiled | min threads baseline | min threads "
          "tiled |" + (" isl: paths, sim, B/FLOP |"
                                                           if a.isl else ""))
    print("|---|---|---|---|---|---|---:|---:|---:|---:|" + ("---|" if a.isl else ""))
    for r in rows:
        if r["read"] != "yes":
            continue
        pt, pb = r.get("tiled_ptxas", {}), r.get("baseline_ptxas", {})
        print(f"| {r['kernel'][7:]} | {r.get('paths')} | {r.get('tiled_sim')} | "
              f"{r.get('baseline_sim')} | {pt.get('registers')}/{pt.get('spill_bytes')} | "
              f"{pb.get('registers')}/{pb.get('spill_bytes')} | "
              f"{r.get('baseline_bytes_per_flop')} | {r.get('tiled_bytes_per_flop')} | "
              f"{r.get('baseline_min_threads')} | {r.get('tiled_min_threads')} |"
              + (f" {r.get('isl_paths')}, {r.get('isl_sim')}, {r.get('isl_bytes_per_flop')} |"
                 if a.isl else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
