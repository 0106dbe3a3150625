"""Run generated C kernels under AddressSanitizer and UndefinedBehaviorSanitizer in a
standalone executable (issue #14's sanitizer job).

An ASan-instrumented shared library cannot be loaded into a Python process that was
not started with libasan preloaded, so this module does not use ctypes: it appends a
``main()`` to the kernel's C source that reads the input arrays from a binary file,
allocates every buffer with its exact size (ASan's redzones on either side are the
guard space: a read or write one element past a buffer is reported), calls the
kernel's entry point ``void <name>(int64_t params..., const T* inputs..., T* outputs...)``
(:func:`polycomp.hw.cpu.codegen.signature`) with the sizes embedded as constants,
and writes the outputs to a second file. gcc builds it with :data:`SAN_FLAGS`;
:func:`run_sanitized` runs it in a subprocess and returns the outputs as numpy arrays,
or raises :class:`SanitizerError` on a non-zero exit or any sanitizer report.

Usage (tests/test_sanitizers.py, or any script)::

    ck = compile_kernel(kernel, "c")
    exe = build_sanitized(ck.final_ir, ck.source, "/tmp/k")
    outs = run_sanitized(exe, ck.final_ir, arrays)
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import threading
from dataclasses import dataclass

import numpy as np

from polycomp import dtypes as dt
from polycomp.errors import PolycompError

from .build import DEFAULT_FLAGS, compiler, compiler_command, run_compiler

#: the sanitizer build: the target's usual flags less optimisation level and -shared/-fPIC.
#: ``-O0``: every access stays in the code for ASan to check, and gcc builds a large
#: kernel 3-4x faster than at ``-O1`` (the runs are tiny); ``-g1`` (line tables: reports
#: keep file:line) builds about 15 % faster than ``-g``
SAN_FLAGS = tuple(f for f in DEFAULT_FLAGS if f not in ("-O3", "-shared", "-fPIC")) + (
    "-O0", "-g1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer")

#: the run's environment: abort on the first report, print stacks; OpenMP kept small
SAN_ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:halt_on_error=1",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
           "OMP_NUM_THREADS": "2"}

#: text any sanitizer report contains
_REPORT_MARKERS = ("AddressSanitizer", "LeakSanitizer", "runtime error:",
                   "UndefinedBehaviorSanitizer")


class SanitizerError(PolycompError):
    """A kernel run under ASan/UBSan failed: non-zero exit or a sanitizer report."""


@dataclass(frozen=True)
class SanitizedRun:
    """What one sanitized run produced: the outputs and the process's stderr."""
    outputs: tuple
    stderr: str


def _caller_buffers(func) -> tuple:
    from polycomp.shapes import caller_arrays
    return caller_arrays(func)


def harness_source(func) -> str:
    """C ``main()`` calling ``func`` (a :class:`~polycomp.ir.LoweredFunc`) once per pair
    of arguments ``IN OUT``: ``IN`` holds, as int64, the parameter values, the byte size
    of every input and output buffer; then the caller's arrays (inputs, then the initial
    contents of in-out outputs) back to back.  ``OUT`` receives the outputs back to
    back.  Sizes are read at run time, so one executable (and one process: the
    sanitizers' start-up is paid once) serves every shape."""
    given_names = {b.name for b in _caller_buffers(func)}
    bufs = tuple(func.inputs) + tuple(func.outputs)
    np_, nb = len(func.params), len(bufs)
    lines = ["", "/* sanitizer harness (polycomp.hw.cpu.sanitize) */",
             "#include <stdio.h>", "#include <string.h>",
             "static void *pc_san_alloc(size_t n) {",
             "  void *p = NULL;",
             "  if (posix_memalign(&p, 64, n ? n : 1) != 0) { perror(\"alloc\"); exit(3); }",
             "  return p;", "}",
             "int main(int argc, char **argv) {",
             "  if (argc < 3 || argc % 2 == 0) return 2;",
             "  for (int a = 1; a + 1 < argc; a += 2) {",
             "  FILE *in = fopen(argv[a], \"rb\"); if (!in) return 2;",
             f"  int64_t prm[{max(np_, 1)}], sz[{max(nb, 1)}];",
             f"  if (fread(prm, 8, {np_}, in) != {np_}) return 2;",
             f"  if (fread(sz, 8, {nb}, in) != {nb}) return 2;",
             f"  void *b[{max(nb, 1)}];"]
    for k, buf in enumerate(bufs):
        lines.append(f"  b[{k}] = pc_san_alloc((size_t)sz[{k}]);")
        if buf.name in given_names:
            lines.append(f"  if (fread(b[{k}], 1, (size_t)sz[{k}], in) != (size_t)sz[{k}]) "
                         "return 2;")
        else:  # a pure output: not zero, so an element the kernel misses shows
            lines.append(f"  memset(b[{k}], 0x7f, (size_t)sz[{k}]);")
    args = [f"prm[{k}]" for k in range(np_)] + [f"b[{k}]" for k in range(nb)]
    lines += ["  fclose(in);", f"  {func.name}({', '.join(args)});",
              "  FILE *out = fopen(argv[a + 1], \"wb\"); if (!out) return 2;",
              f"  for (int k = {len(func.inputs)}; k < {nb}; k++)",
              "    if (fwrite(b[k], 1, (size_t)sz[k], out) != (size_t)sz[k]) return 2;",
              "  fclose(out);",
              f"  for (int k = 0; k < {nb}; k++) free(b[k]);",
              "  }",
              "  return 0;", "}", ""]
    return "\n".join(lines)


#: the system headers generated sources include; precompiled once (``<immintrin.h>`` is
#: about half of a vector kernel's sanitizer build)
PCH_HEADERS = ("stdint.h", "stdbool.h", "stdlib.h", "math.h", "string.h", "stdio.h",
               "immintrin.h")
_pch_lock = threading.Lock()
_pch_flags: dict = {}


def precompiled_header_flags() -> tuple:
    """``("-I", dir, "-include", header)`` naming a precompiled header of
    :data:`PCH_HEADERS` built with :data:`SAN_FLAGS` (once per compiler and flags, in the
    temp dir), or ``()`` when it cannot be built.  The sources' own includes of these
    headers are then no-ops (include guards), and gcc ignores a PCH whose flags do not
    match (it parses the header instead): the executable is the same either way."""
    cc = compiler()
    key = hashlib.sha1(repr((cc, SAN_FLAGS, PCH_HEADERS)).encode()).hexdigest()[:16]
    with _pch_lock:
        if key in _pch_flags:
            return _pch_flags[key]
        d = os.path.join(tempfile.gettempdir(), f"polycomp-san-pch-{os.getuid()}-{key}")
        header = os.path.join(d, "pc_san.h")
        flags: tuple = ()
        try:
            if not os.path.exists(header + ".gch"):
                os.makedirs(d, exist_ok=True)
                with open(header, "w") as f:
                    f.write("".join(f"#include <{h}>\n" for h in PCH_HEADERS))
                tmp = f"{header}.{os.getpid()}.gch"
                r = subprocess.run([*compiler_command(cc), *SAN_FLAGS, "-x", "c-header",
                                    header, "-o", tmp], capture_output=True, text=True)
                if r.returncode == 0 and os.path.isfile(tmp):
                    os.replace(tmp, header + ".gch")
            if os.path.exists(header + ".gch"):
                flags = ("-I", d, "-include", "pc_san.h")
        except OSError:
            flags = ()
        _pch_flags[key] = flags
        return flags


def build_sanitized(func, source: str, path: str) -> str:
    """Compile the kernel ``source`` plus its harness into the executable ``path`` with
    :data:`SAN_FLAGS` (and the precompiled system headers); returns ``path``."""
    src = path + ".c"
    with open(src, "w") as f:
        f.write(source + harness_source(func))
    cmd = [*compiler_command(), *SAN_FLAGS, *precompiled_header_flags(), src, "-o", path,
           "-lm"]
    run_compiler(cmd, path, "the sanitizer build")
    return path


def parameter_values(func, arrays) -> dict:
    """The kernel's symbolic sizes inferred from the caller's ``arrays`` (checked as a
    ctypes call would check them)."""
    from polycomp.shapes import checked_arguments
    _, _, values = checked_arguments(func, arrays, {})
    return values


def run_sanitized(exe: str, func, arrays, timeout: float = 60) -> SanitizedRun:
    """Run the executable ``exe`` (from :func:`build_sanitized`) on the caller's
    ``arrays``; raises :class:`SanitizerError` on a non-zero exit or a report."""
    return run_sanitized_many(exe, func, [arrays], timeout)[0]


def run_sanitized_many(exe: str, func, calls: list, timeout: float = 60) -> list:
    """:func:`run_sanitized` for each list of arrays in ``calls``, in one process (in
    order, each call on its own freshly allocated buffers); one :class:`SanitizedRun`
    per call (they share the process's stderr)."""
    from polycomp.shapes import buffer_bytes, eval_int
    argv, plans = [exe], []
    for k, arrays in enumerate(calls):
        values = parameter_values(func, arrays)
        inp, outp = f"{exe}.{k}.in", f"{exe}.{k}.out"
        sizes = [values[p.name] for p in func.params] + \
            [buffer_bytes(b, values) for b in tuple(func.inputs) + tuple(func.outputs)]
        with open(inp, "wb") as f:
            f.write(np.asarray(sizes, dtype=np.int64).tobytes())
            for a in arrays:
                f.write(np.ascontiguousarray(a).tobytes())
        argv += [inp, outp]
        plans.append((values, outp))
    env = dict(os.environ, **SAN_ENV)
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode != 0 or any(m in r.stderr for m in _REPORT_MARKERS):
        sizes_txt = "; ".join(str(v) for v, _ in plans)
        raise SanitizerError(f"{func.name} (sizes {sizes_txt}) exited with {r.returncode} "
                             f"under ASan/UBSan:\n{r.stderr[-6000:]}")
    runs = []
    for values, outp in plans:
        data = open(outp, "rb").read()
        outs, pos = [], 0
        for b in func.outputs:
            shape = tuple(eval_int(d, values) for d in b.shape)
            nd = np.dtype(dt.to_numpy(b.dtype))
            n = int(np.prod(shape, dtype=np.int64)) * nd.itemsize
            outs.append(np.frombuffer(data[pos:pos + n], dtype=nd).reshape(shape).copy())
            pos += n
        runs.append(SanitizedRun(tuple(outs), r.stderr))
    return runs


def sanitize_call(func, source: str, arrays, path: str) -> SanitizedRun:
    """Build and run ``func`` (its C ``source``) on ``arrays`` under the sanitizers;
    ``path`` names the executable (its directory must exist)."""
    exe = build_sanitized(func, source, path)
    return run_sanitized(exe, func, arrays)
