"""Where a fp32 GEMM's time goes, per phase: the C of ``A @ B`` (``M x N x K``, constant
shapes) as the pipeline prints it for ``--threads`` threads (one *form* per environment,
e.g. ``new`` and ``old:POLYCOMP_GEMM_X_ALIAS=0``), copied with ``rdtsc`` read around
each copy of ``Y`` (the ``pk1`` loops), each copy of ``X`` (``pk2``) and the register
tiles after a copy of ``Y``, per block and thread.  The copies are timing probes in a
scratch directory, never kernels anyone runs: every figure is of the pipeline's C.

Each form is called ``--calls`` times, the forms interleaved in shuffled order; for each
block of each thread the minimum over the calls is kept (a block is one ``(k, j)`` tile,
~1-5 ms: short enough that some call runs it undisturbed on a loaded host, where a whole
call's minimum still carries the noise), and the per-thread sums of those minima are
printed, in TSC milliseconds, with the largest thread's share of the FMA peak.  ``X``'s
copy runs once per ``k`` tile and is printed once per call.

    env -u OPENBLAS_CORETYPE OMP_WAIT_POLICY=PASSIVE python scripts/gemm_phases.py \\
        1024 --threads 1 --forms new,old:POLYCOMP_GEMM_X_ALIAS=0
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import os
import random
import re
import subprocess
import tempfile
from unittest import mock

import numpy as np

PROBE = r'''
#include <x86intrin.h>
#include <omp.h>
#define PC_NB 4096
static uint64_t pc_min[2][PC_NB][3];
static __thread uint64_t pc_cur[PC_NB][3];
static __thread int pc_blk;
static __thread uint64_t pc_xp;
static int pc_nblk[2];
void pc_reset(void) { memset(pc_min, 0xff, sizeof pc_min); }
static void pc_commit(void) {
  int t = omp_get_thread_num() & 1; pc_nblk[t] = pc_blk;
  for (int i = 0; i < pc_blk; ++i) for (int p = 0; p < 3; ++p)
    if (pc_cur[i][p] < pc_min[t][i][p]) pc_min[t][i][p] = pc_cur[i][p];
}
int pc_blocks(int t) { return pc_nblk[t]; }
uint64_t pc_get(int t, int i, int p) { return pc_min[t][i][p]; }
'''


def _block_end(s: str, i: int) -> int:
    """The index just past the ``}`` closing the first ``{`` at or after ``i``."""
    depth, j = 0, s.index("{", i)
    while True:
        depth += {"{": 1, "}": -1}.get(s[j], 0)
        if depth == 0:
            return j + 1
        j += 1


def _enclosing_end(s: str, i: int) -> int:
    """The index of the ``}`` closing the innermost block around ``i``."""
    depth, j = 0, i
    while True:
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            if depth == 0:
                return j
            depth -= 1
        j += 1


def instrument(src: str, name: str) -> str:
    """``src`` with the phase timers (see the module docstring); the function renamed."""
    s = re.sub(r"void (\w+)\(const float\* restrict A", f"void {name}(const float* restrict A",
               src, count=1)
    s = s.replace("/* ---- end of the polycomp prelude ---- */",
                  "/* ---- end of the polycomp prelude ---- */" + PROBE)
    start = s.index("{", s.index(f"void {name}(")) + 1
    i = s.find("for (int64_t pk1_")
    if i < 0:
        raise SystemExit("no copy of Y in this kernel (read in place): nothing to time")
    e = _block_end(s, i)
    enc = _enclosing_end(s, e)
    s = s[:enc] + " { pc_cur[pc_blk][2] = __rdtsc() - pc_t1; pc_blk++; } " + s[enc:]
    s = s[:e] + (" uint64_t pc_t1 = __rdtsc(); pc_cur[pc_blk][0] = pc_t1 - pc_t0; "
                 "pc_cur[pc_blk][1] = pc_xp; pc_xp = 0; ") + s[e:]
    s = s[:i] + " uint64_t pc_t0 = __rdtsc(); " + s[i:]
    j = s.find("for (int64_t pk2_")
    if j >= 0:                       # X's copy: its loop nests up to the next statement
        e1 = _block_end(s, j)
        while s[e1:].lstrip().startswith("for (int64_t pk2_"):
            e1 = _block_end(s, e1)
        s = s[:e1] + " pc_xp = __rdtsc() - pc_x0; " + s[e1:]
        s = s[:j] + " uint64_t pc_x0 = __rdtsc(); " + s[j:]
    if "pc_ws_take(" in s[start:]:   # one parallel region: each thread commits its own
        q = s.index("#pragma omp barrier", start)
        s = s[:q] + " pc_blk = 0; pc_xp = 0;\n" + s[q:]
        g = s.index("pc_ws_give(pc_ws", q)
        s = s[:g] + " pc_commit(); " + s[g:]
    else:
        s = s[:start] + " pc_blk = 0; pc_xp = 0; " + s[start:]
        last = s.rindex("}")
        s = s[:last] + " pc_commit(); " + s[last:]
    return s


def generate(m: int, n: int, k: int, threads: int, env: dict, target: str) -> str:
    import polycomp as pc
    from polycomp.driver import compile_kernel
    from polycomp.frontend import ops
    from polycomp.frontend.dsl import Kernel
    from polycomp.hw.target import get_target
    t = get_target(target)
    t = dataclasses.replace(t, cpu=dataclasses.replace(t.cpu, threads=threads))
    kern = Kernel(lambda A, B: ops.matmul(A, B), name=f"ph{m}_{n}_{k}",
                  inputs={"A": pc.Tensor[(m, k), "float32"], "B": pc.Tensor[(k, n), "float32"]})
    with mock.patch.dict(os.environ, env):      # set while compiling only
        return compile_kernel(kern, t).source


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("sizes", nargs="+", help="N (N^3) or MxNxK")
    p.add_argument("--forms", default="new")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--peak", type=float, default=93.5, help="GFLOP/s per core")
    p.add_argument("--tsc", type=float, default=0.0, help="TSC GHz (default: measured)")
    p.add_argument("--target", default="cpu")
    a = p.parse_args()
    from polycomp.hw.cpu.build import DEFAULT_FLAGS
    tsc = a.tsc * 1e9 if a.tsc else _tsc_hz()
    rng = np.random.default_rng(0)
    work = tempfile.mkdtemp(prefix="gemm_phases_")
    for spec in a.sizes:
        d = [int(x) for x in spec.split("x")]
        m, n, k = d if len(d) == 3 else d * 3
        A = rng.standard_normal((m, k)).astype(np.float32)
        B = rng.standard_normal((k, n)).astype(np.float32)
        C = np.empty((m, n), np.float32)
        args = [ctypes.c_void_p(x.ctypes.data) for x in (A, B, C)]
        libs = {}
        for form in a.forms.split(","):
            label, *rest = form.split(":")
            env = dict(e.split("=", 1) for e in rest)
            name = f"ph_{label}_{m}_{n}_{k}"
            path = os.path.join(work, name + ".c")
            with open(path, "w") as f:
                f.write(instrument(generate(m, n, k, a.threads, env, a.target), name))
            subprocess.check_call(["gcc", *DEFAULT_FLAGS, "-o", path[:-2] + ".so", path])
            lib = ctypes.CDLL(path[:-2] + ".so")
            lib.pc_get.restype = ctypes.c_uint64
            lib.pc_reset()
            fn = getattr(lib, name)
            fn.restype = None
            fn(*args)
            np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-3,
                                       atol=1e-3 * k ** 0.5)
            libs[label] = (lib, fn)
        for lib, _ in libs.values():
            lib.pc_reset()
        for _ in range(a.calls):
            for label in random.sample(list(libs), len(libs)):
                libs[label][1](*args)
        flop = 2 * m * n * k
        print(f"{m}x{n}x{k}, {a.threads} thread(s), load {os.getloadavg()[0]:.1f}: per thread, "
              f"the sums of per-block minima over {a.calls} calls (ms)")
        for label, (lib, _) in libs.items():
            line, worst = f"  {label:>10}:", 0.0
            for t in range(a.threads):
                nb = lib.pc_blocks(t)
                ph = [sum(lib.pc_get(t, i, q) for i in range(nb)) / tsc * 1e3 for q in range(3)]
                total = sum(ph)
                worst = max(worst, total)
                line += (f" T{t} copy Y {ph[0]:6.3f} copy X {ph[1]:6.3f} tiles {ph[2]:8.3f} "
                         f"= {total:8.3f} |")
            print(line + f" {flop / (worst * 1e-3) / 1e9 / (a.peak * a.threads):5.1%} of the "
                         f"FMA peak", flush=True)


def _tsc_hz() -> float:
    """The TSC rate: ``rdtsc`` ticks over a 0.2 s sleep (a probe built once)."""
    import time
    src = "#include <x86intrin.h>\nunsigned long long pc_rdtsc(void) { return __rdtsc(); }\n"
    work = tempfile.mkdtemp(prefix="gemm_phases_tsc_")
    path = os.path.join(work, "tsc.c")
    with open(path, "w") as f:
        f.write(src)
    subprocess.check_call(["gcc", "-O2", "-shared", "-fPIC", "-o", path[:-2] + ".so", path])
    lib = ctypes.CDLL(path[:-2] + ".so")
    lib.pc_rdtsc.restype = ctypes.c_ulonglong
    t0, c0 = time.perf_counter(), lib.pc_rdtsc()
    time.sleep(0.2)
    return (lib.pc_rdtsc() - c0) / (time.perf_counter() - t0)


if __name__ == "__main__":
    main()
