"""PolyBench/C through the C front end: ``polycomp bench polybench --polybench DIR
[--dataset MINI|SMALL|MEDIUM|LARGE] [--threads 2] [--rounds 5] [--kernels a,b]
[--json]``.

Nothing is fetched: ``DIR`` is an unpacked PolyBench/C 4.2.1 tree (``DIR/utilities/
polybench.h``, ``DIR/<group>/.../<name>/<name>.c``).  For each kernel the file is
preprocessed with ``gcc -E -P -DPOLYBENCH_USE_C99_PROTO -D<DATASET>_DATASET`` and the
``kernel_*`` function is taken verbatim (with the file's ``typedef`` of plain types,
e.g. nussinov's ``typedef char base;``); the sizes are the ``int n = ...;`` values of
its ``main``.  Per kernel:

* **read**: :func:`polycomp.frontend.c_reader.read_c_kernel` accepts it;
* **exact**: on random data at MINI, the outputs of polycomp's ``c`` and ``cpu``
  targets with ``fp_exact=True`` are bitwise equal (NaNs in the same places) to the
  same function compiled by ``gcc -O0 -ffp-contract=off``;
* **speed** at ``--dataset``: the ``cpu`` target (default options, ``--threads``
  OpenMP threads) against the same function built by ``gcc -O3 -march=native``, same
  data, timed in the same run, ``--rounds`` rounds each (the in-out arrays are reset
  from the same initial data before every call, outside the timed region); best and
  median, speedup = gcc time / polycomp time; ``rel_err`` is the largest relative
  difference of polycomp's outputs from gcc -O3's;
* **vs Polly**: the same against ``clang -O3 -march=native -mllvm -polly -mllvm
  -polly-parallel`` when a clang with Polly is installed ("not available" otherwise);
  a Polly build that crashes reads "crashed" in its cell, and the kernel's polycomp and
  gcc columns stay;
* **compile_s**: seconds of ``compile_kernel(k, "cpu")`` (model to C source; gcc's own
  build of the generated C is not included);
* **vs peer** (``--peer-c DIR``): the same against another polycomp build's generated C
  for the kernel, ``DIR/<name>.c`` (written by ``--dump-c DIR`` run under another
  checkout, e.g. ``main``: the same entry point), built with the same gcc flags and timed
  in the same run: ``peer time / polycomp time``, best and median — how this build
  compares with that one without a second process on a shared host.

Each kernel runs in its own (spawned) process, so that a build that crashes -- clang +
Polly's 3mm at LARGE keeps an 8.4 MiB array in its stack frame, past the usual 8 MiB
limit -- costs one cell, not the run; the child raises its stack limit to
:data:`STACK_LIMIT` (within the hard limit) first.  A kernel whose process dies in polycomp's or
gcc's steps makes the command exit with status 1 after printing the table.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import json
import math
import multiprocessing
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

DATASETS = ("MINI", "SMALL", "MEDIUM", "LARGE", "EXTRALARGE")
HOW_TO_GET = ("PolyBench/C 4.2.1 is not in the repository; download "
              "polybench-c-4.2.1-beta.tar.gz from https://sourceforge.net/projects/"
              "polybench/ (or https://github.com/MatthiasJReisinger/PolyBenchC-4.2.1), "
              "unpack it and pass its folder: --polybench DIR")
REF_FLAGS = ("-O3", "-march=native")
EXACT_REF_FLAGS = ("-O0", "-ffp-contract=off")
#: the soft stack limit a kernel's process asks for (bytes; capped by the hard limit)
STACK_LIMIT = 512 << 20
POLLY_FLAGS = ("-O3", "-march=native", "-mllvm", "-polly", "-mllvm", "-polly-parallel",
               "-fopenmp")
#: kernels whose matrix must be well conditioned (a factorisation divides by pivots)
SPD = ("cholesky", "lu", "ludcmp")


class PolybenchError(Exception):
    """The PolyBench folder or one of its files cannot be used."""


@dataclass
class PolyKernel:
    """One PolyBench kernel: its name, the ``kernel_*`` function's source (with the
    typedefs it needs) and the dataset's sizes."""
    name: str
    func: str
    source: str
    sizes: dict


@dataclass
class Row:
    name: str
    read: bool = False
    error: str = ""
    exact: dict = field(default_factory=dict)      # target -> True/False/"error: ..."
    compile_s: float | None = None
    polycomp_s: tuple = ()                          # (best, median)
    gcc_s: tuple = ()
    polly_s: tuple = ()
    speedup: float | None = None
    speedup_median: float | None = None
    vs_polly: float | None = None
    rel_err: float | None = None
    peer_s: tuple = ()
    vs_peer: float | None = None
    vs_peer_median: float | None = None
    polly_error: str = ""                           # the Polly peer crashed or failed
    died: str = ""                                  # the kernel's process died: how, when


# --------------------------------------------------------------------------- sources


def find_kernels(pb: str) -> list[tuple[str, str]]:
    """``(name, path of name.c)`` of every kernel folder under ``pb``."""
    if not os.path.isfile(os.path.join(pb, "utilities", "polybench.h")):
        raise PolybenchError(f"{pb!r} is not a PolyBench/C folder (no utilities/polybench.h). "
                             + HOW_TO_GET)
    out = []
    for c in sorted(glob.glob(os.path.join(pb, "**", "*.c"), recursive=True)):
        d = os.path.dirname(c)
        name = os.path.basename(d)
        if os.path.basename(c) == name + ".c" and "utilities" not in c.split(os.sep):
            out.append((name, c))
    return out


def select_kernels(pb: str, kernels=None) -> list[tuple[str, str]]:
    """:func:`find_kernels` restricted to ``kernels`` (all when empty); an unknown name is a
    :class:`PolybenchError`."""
    found = find_kernels(pb)
    if kernels:
        unknown = set(kernels) - {n for n, _ in found}
        if unknown:
            raise PolybenchError(f"no kernel {', '.join(sorted(unknown))} in {pb}")
        found = [(n, p) for n, p in found if n in kernels]
    return found


def extract(path: str, pb: str, dataset: str) -> PolyKernel:
    """The ``kernel_*`` function of ``path`` with macros expanded (see the module doc)."""
    cmd = ["gcc", "-E", "-P", "-DPOLYBENCH_USE_C99_PROTO", f"-D{dataset}_DATASET",
           "-I", os.path.join(pb, "utilities"), "-I", os.path.dirname(path), path]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise PolybenchError(f"gcc -E failed on {path}: {r.stderr.strip()[-500:]}")
    txt = r.stdout
    m = re.search(r"^[^\n;{}]*\bvoid\s+(kernel_\w+)\s*\(", txt, re.M)
    if m is None:
        raise PolybenchError(f"{path} has no kernel_* function")
    i = txt.index("{", m.end())
    depth, j = 0, i
    while j < len(txt):
        depth += {"{": 1, "}": -1}.get(txt[j], 0)
        if depth == 0:
            break
        j += 1
    func = txt[m.start():j + 1]
    main = txt.find("int main(")
    sizes = {k: int(v) for k, v in re.findall(r"^\s*int (\w+) = (-?\d+);", txt[main:], re.M)}
    typedefs = [ln for ln in txt.splitlines()
                if re.fullmatch(r"typedef\s+[\w ]+\s+\w+\s*;", ln.strip()) and
                re.search(r"\b" + re.escape(ln.strip().rstrip(";").split()[-1]) + r"\b", func)]
    return PolyKernel(os.path.basename(os.path.dirname(path)), m.group(1),
                      "\n".join(typedefs + [func]) + "\n", sizes)


# --------------------------------------------------------------------------- data


def make_data(k, pk: PolyKernel, seed: int = 0) -> dict:
    """Random arguments of ``k`` (a CKernel) by name: arrays, scalars, sizes."""
    from polycomp import dtypes as dt
    from polycomp.shapes import eval_int
    rng = np.random.default_rng(seed)
    g = k.graph
    missing = [p.name for p in g.params if p.name not in pk.sizes]
    if missing:
        raise PolybenchError(f"{pk.name}: main() gives no `int {missing[0]} = ...;` size")
    values = {p.name: pk.sizes[p.name] for p in g.params}
    out: dict = {p.name: pk.sizes[p.name] for p in g.params}
    for a in g.arrays:
        buf = a.buffer
        shape = tuple(eval_int(d, values) for d in buf.shape)
        nd = dt.to_numpy(buf.dtype)
        if dt.is_float(buf.dtype):
            x = rng.uniform(0.5, 1.5, size=shape) if not shape else \
                rng.uniform(-1.0, 1.0, size=shape)
            if pk.name in SPD and len(shape) == 2 and shape[0] == shape[1]:
                b = rng.uniform(-1.0, 1.0, size=shape)
                x = b @ b.T / shape[0] + np.eye(shape[0])
            if pk.name == "durbin":
                x = x / (4 * max(shape + (1,)))
            out[buf.name] = np.ascontiguousarray(np.asarray(x).astype(nd))
        elif buf.dtype == "bool":
            out[buf.name] = rng.integers(0, 2, size=shape).astype(nd)
        else:
            out[buf.name] = rng.integers(0, 4, size=shape).astype(nd)
    return out


# --------------------------------------------------------------------------- reference


class Reference:
    """The PolyBench function built by a C compiler into a shared library, called in
    place through ctypes."""

    def __init__(self, k, pk: PolyKernel, cc: str, flags, workdir: str):
        src = os.path.join(workdir, f"{pk.name}_{abs(hash(tuple(flags)))}.c")
        with open(src, "w") as f:
            f.write("#include <math.h>\n" + pk.source)
        lib = src[:-2] + ".so"
        cmd = [cc, *flags, "-fPIC", "-shared", "-std=gnu11", src, "-o", lib, "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise PolybenchError(f"{' '.join(cmd)} failed: {r.stderr.strip()[-800:]}")
        self.k = k
        self.fn = getattr(ctypes.CDLL(lib), pk.func)
        self.fn.restype = None
        g = k.graph
        arrays = {a.name: a.buffer for a in g.arrays}
        self.order = g.signature
        types: list = []
        for n in self.order:
            b = arrays.get(n)
            if b is None:
                types.append(ctypes.c_int)
            elif not b.shape:
                types.append({"float32": ctypes.c_float, "float64": ctypes.c_double,
                              "int32": ctypes.c_int, "int64": ctypes.c_longlong,
                              "int8": ctypes.c_byte, "bool": ctypes.c_bool}[b.dtype])
            else:
                types.append(ctypes.c_void_p)
        self.types = types
        self.fn.argtypes = types

    def args(self, work: dict) -> list:
        out = []
        for n, t in zip(self.order, self.types):
            v = work[n]
            out.append(v.ctypes.data if t is ctypes.c_void_p else
                       (t(v.item()) if isinstance(v, np.ndarray) else t(v)))
        return out


class Compiled:
    """polycomp's build of the kernel, called through its raw C entry point."""

    def __init__(self, k, target: str, options: dict | None):
        from polycomp.driver import compile_kernel
        t0 = time.perf_counter()
        ck = compile_kernel(k, target, options=options)
        self.compile_s = time.perf_counter() - t0
        from polycomp.hw.registry import backend_for
        self.f = backend_for(ck.target).load(ck)
        self.k = k
        self.source = ck.source

    def args(self, work: dict) -> list:
        g = self.k.graph   # the entry point's arguments in this order (its own
        # names may be legalised: PolyBench's `_fict_` is not a valid C name there)
        return ([ctypes.c_int64(work[p.name]) for p in g.params] +
                [work[a.name].ctypes.data for a in g.inputs + g.outputs])


class Peer(Compiled):
    """Another polycomp build's generated C for the kernel (``--peer-c``), built with
    the flags polycomp builds its own C with; same entry point and arguments."""

    def __init__(self, k, path: str):
        from polycomp.hw.cpu.build import build_shared
        with open(path) as f:
            src = f.read()
        m = re.search(r"^void\s+(\w+)\s*\(", src, re.M)
        if m is None:
            raise PolybenchError(f"{path}: no entry point")
        lib = ctypes.CDLL(build_shared(src))
        self.cfunc = getattr(lib, m.group(1))
        self.cfunc.restype = None
        g = k.graph
        self.cfunc.argtypes = [ctypes.c_int64] * len(g.params) + \
            [ctypes.c_void_p] * (len(g.inputs) + len(g.outputs))
        self.k = k
        self.compile_s = 0.0


def fresh(data: dict, into: dict | None = None) -> dict:
    """A working copy of ``data`` (arrays copied; into an existing copy when given)."""
    if into is None:
        return {n: (v.copy() if isinstance(v, np.ndarray) else v) for n, v in data.items()}
    for n, v in data.items():
        if isinstance(v, np.ndarray):
            np.copyto(into[n], v)
    return into


def run_once(fn, argf, data) -> dict:
    work = fresh(data)
    fn(*argf(work))
    return work


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        na, nb = np.isnan(a), np.isnan(b)
        return bool(np.array_equal(na, nb) and
                    np.array_equal(a[~na].view(np.uint8), b[~nb].view(np.uint8)))
    return bool(np.array_equal(a, b))


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    if (np.isnan(a) != np.isnan(b)).any():
        return math.inf
    if not ok.any():
        return 0.0
    scale = np.maximum(np.abs(b[ok]), 1e-30)
    return float(np.max(np.abs(a[ok] - b[ok]) / np.maximum(scale, np.max(np.abs(b[ok])) * 1e-12)))


def timed(fn, argf, data, rounds: int) -> tuple:
    work = fresh(data)
    times = []
    for _ in range(rounds):
        fresh(data, work)
        args = argf(work)
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def polly_compiler() -> str | None:
    """A clang that accepts ``-mllvm -polly`` (None when there is none)."""
    for cc in ("clang", "clang-18", "clang-17", "clang-16", "clang-15"):
        if shutil.which(cc) is None:
            continue
        r = subprocess.run([cc, "-O3", "-mllvm", "-polly", "-x", "c", "-c", "-o", os.devnull,
                            "-"], input="void f(void){}\n", capture_output=True, text=True)
        if r.returncode == 0:
            return cc
    return None


# --------------------------------------------------------------------------- the suite


def check_exact(k, pk_mini: PolyKernel, targets, workdir: str) -> dict:
    """target -> True / False / "error: ..." (see the module doc)."""
    from polycomp.frontend.c_reader import read_c_kernel
    out: dict = {}
    try:
        km = read_c_kernel(pk_mini.source, pk_mini.func)
        data = make_data(km, pk_mini, seed=1)
        ref = Reference(km, pk_mini, "gcc", EXACT_REF_FLAGS, workdir)
        want = run_once(ref.fn, ref.args, data)
    except Exception as e:  # noqa: BLE001 - reported in the table
        return {t: f"error: {type(e).__name__}: {e}" for t in targets}
    for t in targets:
        try:
            c = Compiled(km, t, {"fp_exact": True})
            got = run_once(c.f.cfunc, c.args, data)
            out[t] = all(same_bits(got[n], want[n]) for n in km.outputs)
        except Exception as e:  # noqa: BLE001
            out[t] = f"error: {type(e).__name__}: {str(e)[:300]}"
    return out


def bench_kernel(name: str, path: str, pb: str, dataset: str, rounds: int,
                 workdir: str, polly: str | None, exact_targets=("c", "cpu"),
                 peer_dir: str | None = None, polly_flags=POLLY_FLAGS,
                 stage=None) -> Row:
    """One kernel's row. ``stage(what, row)``, when given, is called before each step
    that runs generated or peer code (what a crash would be blamed on)."""
    from polycomp.frontend.c_reader import read_c_kernel
    row = Row(name)
    if stage is None:
        def stage(what: str, row: Row) -> None:
            pass
    try:
        pk = extract(path, pb, dataset)
        k = read_c_kernel(pk.source, pk.func)
        row.read = True
    except Exception as e:  # noqa: BLE001 - reported in the table
        row.error = f"{type(e).__name__}: {str(e)[:300]}"
        return row
    stage("the exactness check at MINI", row)
    row.exact = check_exact(k, extract(path, pb, "MINI") if dataset != "MINI" else pk,
                            exact_targets, workdir)
    stage(f"polycomp and gcc -O3 at {dataset}", row)
    try:
        data = make_data(k, pk)
        c = Compiled(k, "cpu", None)
        row.compile_s = c.compile_s
        gcc = Reference(k, pk, "gcc", REF_FLAGS, workdir)
        want = run_once(gcc.fn, gcc.args, data)
        got = run_once(c.f.cfunc, c.args, data)
        row.rel_err = max((rel_err(got[n], want[n]) for n in k.outputs), default=0.0)
        peer = None
        if peer_dir is not None and os.path.isfile(os.path.join(peer_dir, f"{name}.c")):
            peer = Peer(k, os.path.join(peer_dir, f"{name}.c"))
        if peer is None:
            row.gcc_s = timed(gcc.fn, gcc.args, data, rounds)
            row.polycomp_s = timed(c.f.cfunc, c.args, data, rounds)
        else:   # interleaved rounds: the host's load drifts alike for all three
            g, p, q = [], [], []
            for _ in range(rounds):
                g.append(timed(gcc.fn, gcc.args, data, 1)[0])
                p.append(timed(c.f.cfunc, c.args, data, 1)[0])
                q.append(timed(peer.cfunc, peer.args, data, 1)[0])
            row.gcc_s = (min(g), statistics.median(g))
            row.polycomp_s = (min(p), statistics.median(p))
            row.peer_s = (min(q), statistics.median(q))
            row.vs_peer = row.peer_s[0] / row.polycomp_s[0]
            row.vs_peer_median = row.peer_s[1] / row.polycomp_s[1]
        row.speedup = row.gcc_s[0] / row.polycomp_s[0]
        row.speedup_median = row.gcc_s[1] / row.polycomp_s[1]
    except Exception as e:  # noqa: BLE001
        row.error = f"{type(e).__name__}: {str(e)[:300]}"
        return row
    if polly is not None:
        stage(f"{polly} + Polly at {dataset}", row)
        try:
            pl = Reference(k, pk, polly, polly_flags, workdir)
            row.polly_s = timed(pl.fn, pl.args, data, rounds)
            row.vs_polly = row.polly_s[0] / row.polycomp_s[0]
        except Exception as e:  # noqa: BLE001 - the peer's failure is a cell, not the row
            row.polly_error = f"{type(e).__name__}: {str(e)[:300]}"
    return row


def _bench_in_child(conn, args: tuple, kwargs: dict) -> None:
    """The body of a kernel's process: raise the stack limit, run :func:`bench_kernel`,
    send ``("stage", what, row)`` before each step and ``("row", row)`` at the end."""
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    want = STACK_LIMIT if hard == resource.RLIM_INFINITY else min(STACK_LIMIT, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_STACK, (want, hard))
    def stage(what: str, r: Row) -> None:
        conn.send(("stage", what, dict(r.__dict__)))
    row = bench_kernel(*args, **{**kwargs, "stage": stage})
    conn.send(("row", "", dict(row.__dict__)))
    conn.close()


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def bench_kernel_isolated(*args, **kwargs) -> Row:
    """:func:`bench_kernel` in a spawned process (see the module doc). When the process
    dies, the row keeps what was measured before the fatal step: a crash while timing
    the Polly peer leaves the polycomp and gcc columns and reads "crashed" in the Polly
    cell; a crash earlier makes the row's error name the step."""
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_bench_in_child, args=(sender, args, kwargs), daemon=True)
    proc.start()
    sender.close()
    last: dict | None = None
    step = "starting the kernel's process"
    done = False
    while True:
        try:
            kind, what, fields = receiver.recv()
        except EOFError:
            break
        last = fields
        done = kind == "row"
        step = what or step
    proc.join()
    row = Row(**last) if last is not None else Row(args[0] if args else kwargs["name"])
    if done and proc.exitcode == 0:
        return row
    how = _exit_reason(proc.exitcode)
    row.died = f"{how} during {step}"
    if "Polly" in step:
        row.polly_error = f"crashed ({how})"
    else:
        row.error = f"the kernel's process died: {row.died}"
    return row


def dump_sources(pb: str, dataset: str, out: str, kernels=None) -> list[str]:
    """Write ``compile_kernel(k, "cpu").source`` of every selected kernel to
    ``out/<name>.c`` (the sources ``--peer-c`` times against); returns the names."""
    from polycomp.driver import compile_kernel
    from polycomp.frontend.c_reader import read_c_kernel
    os.makedirs(out, exist_ok=True)
    done = []
    for name, path in find_kernels(pb):
        if kernels and name not in kernels:
            continue
        pk = extract(path, pb, dataset)
        src = compile_kernel(read_c_kernel(pk.source, pk.func), "cpu").source
        with open(os.path.join(out, f"{name}.c"), "w") as f:
            f.write(src)
        done.append(name)
    return done


def _run_kernels(pb: str, dataset: str, rounds: int, kernels, progress,
                 polly: str | None, peer_dir: str | None = None,
                 polly_flags=POLLY_FLAGS) -> list:
    """The rows of the selected kernels (``OMP_NUM_THREADS`` already set)."""
    found = select_kernels(pb, kernels)
    rows: list = []
    with tempfile.TemporaryDirectory(prefix="polycomp-polybench-") as workdir:
        for name, path in found:
            row = bench_kernel_isolated(name, path, pb, dataset, rounds, workdir, polly,
                                        peer_dir=peer_dir, polly_flags=polly_flags)
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows


def run(pb: str, dataset: str = "MINI", threads: int = 2, rounds: int = 5,
        kernels=None, progress=None, peer_dir: str | None = None,
        polly: str | None | bool = True, polly_flags=POLLY_FLAGS) -> dict:
    """The suite's result (see the module doc); ``progress(row)`` after each kernel.
    ``polly``: True finds a clang with Polly (:func:`polly_compiler`), False or None
    times none, a string is the compiler to use with ``polly_flags``."""
    if not os.path.isdir(pb):
        raise PolybenchError(f"no PolyBench folder at {pb!r}. " + HOW_TO_GET)
    if dataset not in DATASETS:
        raise PolybenchError(f"unknown dataset {dataset!r} (one of {', '.join(DATASETS)})")
    if polly is True:
        polly = polly_compiler()
    elif polly is False:
        polly = None
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(threads)   # the polycomp builds' thread count
    try:
        rows = _run_kernels(pb, dataset, rounds, kernels, progress, polly, peer_dir,
                            polly_flags)
    finally:  # leave the caller's environment as it was (it sets targets' thread counts)
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    sp = [r.speedup for r in rows if r.speedup]
    vp = [r.vs_polly for r in rows if r.vs_polly]
    vq = [r.vs_peer for r in rows if r.vs_peer]
    return {"dataset": dataset, "threads": threads, "rounds": rounds,
            "polly": polly or "not available", "peer": peer_dir or "",
            "geomean_vs_peer": math.exp(sum(map(math.log, vq)) / len(vq)) if vq else None,
            "rows": [r.__dict__ for r in rows],
            "read": sum(r.read for r in rows), "kernels": len(rows),
            "died": sum(bool(r.died) and bool(r.error) for r in rows),   # not Polly's
            "exact": sum(all(v is True for v in r.exact.values()) and bool(r.exact)
                         for r in rows),
            "geomean_speedup": math.exp(sum(map(math.log, sp)) / len(sp)) if sp else None,
            "geomean_vs_polly": math.exp(sum(map(math.log, vp)) / len(vp)) if vp else None}


def _fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def table(result: dict) -> str:
    peer = bool(result.get("peer"))
    lines = [f"PolyBench/C at {result['dataset']}, {result['threads']} threads, "
             f"{result['rounds']} rounds; Polly: {result['polly']}"
             + (f"; peer: {result['peer']}" if peer else ""),
             "| kernel | read | exact (c, cpu) at MINI | speedup vs gcc -O3 (best / median) "
             "| vs Polly | rel err | compile s |" + (" vs peer (best / median) |" if peer else ""),
             "|---|---|---|---|---|---|---|" + ("---|" if peer else "")]
    for r in result["rows"]:
        ex = ", ".join("yes" if v is True else ("no" if v is False else "error")
                       for v in r["exact"].values()) or "-"
        sp = (f"{_fmt(r['speedup'])} / {_fmt(r['speedup_median'])}"
              if r["speedup"] is not None else ("error" if r["error"] else "-"))
        vp = ("not available" if result["polly"] == "not available" else
              "crashed" if r.get("polly_error", "").startswith("crashed") else
              "failed" if r.get("polly_error") else _fmt(r["vs_polly"]))
        vq = (f" {_fmt(r.get('vs_peer'))} / {_fmt(r.get('vs_peer_median'))} |" if peer else "")
        lines.append(f"| {r['name']} | {'yes' if r['read'] else 'no'} | {ex} | {sp} | {vp} | "
                     f"{_fmt(r['rel_err'], '.1e')} | {_fmt(r['compile_s'])} |" + vq)
    lines.append(f"read {result['read']}/{result['kernels']}, exact {result['exact']}/"
                 f"{result['kernels']}, geomean speedup vs gcc -O3: "
                 f"{_fmt(result['geomean_speedup'])}"
                 + (f", vs peer: {_fmt(result.get('geomean_vs_peer'))}" if peer else ""))
    errs = [f"{r['name']}: {r['error']}" for r in result["rows"] if r["error"]]
    errs += [f"{r['name']} vs Polly: {r['polly_error']}" + (
        f" ({r['died']})" if r.get("died") and not r["error"] else "")
        for r in result["rows"] if r.get("polly_error")]
    errs += [f"{r['name']} exact {t}: {v}" for r in result["rows"]
             for t, v in r["exact"].items() if isinstance(v, str)]
    return "\n".join(lines + errs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="polycomp bench polybench", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("--polybench", metavar="DIR", default=os.environ.get("POLYBENCH_DIR"),
                    help="an unpacked PolyBench/C 4.2.1 folder (or $POLYBENCH_DIR)")
    ap.add_argument("--dataset", default="MINI", type=str.upper, choices=DATASETS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--kernels", default="", help="comma-separated kernel names")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--peer-c", metavar="DIR", default=None,
                    help="time DIR/<kernel>.c (another build's generated C) in the same run")
    ap.add_argument("--dump-c", metavar="DIR", default=None,
                    help="only write this build's generated C of each kernel to DIR")
    ap.add_argument("--target", default="cpu", choices=("cpu", "cuda"),
                    help="cuda: the CUDA target on a GPU (benchmarks/polybench_cuda.py)")
    a = ap.parse_args(argv)
    if not a.polybench:
        print("polycomp bench polybench: --polybench DIR is required. " + HOW_TO_GET,
              file=sys.stderr)
        return 2
    kernels = [x for x in a.kernels.split(",") if x] or None
    if a.target == "cuda":
        from benchmarks.polybench_cuda import run_cuda, table_cuda
        try:
            res = run_cuda(a.polybench, a.dataset, max(1, a.rounds), kernels,
                           progress=lambda r: print(f"  {r.name}: {r.paths} min threads "
                                                    f"{r.min_threads} {r.error}",
                                                    file=sys.stderr, flush=True))
        except PolybenchError as e:
            print(f"polycomp bench polybench: {e}", file=sys.stderr)
            return 2
        print(json.dumps(res, indent=1) if a.json else table_cuda(res))
        if not res["gpu"]:
            print("polycomp bench polybench --target cuda: no GPU (pycuda or cupy and a "
                  "CUDA device); the static columns only. On a machine without one, "
                  "scripts/c_cuda_measure.py --bundle checks the kernels on the simulator "
                  "and packs a GPU check bundle", file=sys.stderr)
            return 2
        return 0
    if a.dump_c:
        try:
            names = dump_sources(a.polybench, a.dataset, a.dump_c, kernels)
        except PolybenchError as e:
            print(f"polycomp bench polybench: {e}", file=sys.stderr)
            return 2
        print(f"wrote {len(names)} sources to {a.dump_c}")
        return 0
    try:
        res = run(a.polybench, a.dataset, a.threads, max(1, a.rounds), kernels,
                  peer_dir=a.peer_c,
                  progress=lambda r: print(
                      f"  {r.name}: read={r.read} exact={r.exact} speedup={_fmt(r.speedup)} "
                      f"polycomp={r.polycomp_s} gcc={r.gcc_s}", file=sys.stderr, flush=True))
    except PolybenchError as e:
        print(f"polycomp bench polybench: {e}", file=sys.stderr)
        return 2
    print(json.dumps(res, indent=1) if a.json else table(res))
    if res["died"]:
        print(f"polycomp bench polybench: {res['died']} kernel process(es) died "
              "(see the table's notes)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
