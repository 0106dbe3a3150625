"""Sanitizer job (#14): every op-library kernel built for ``c`` with
``-fsanitize=address,undefined`` and run on small shapes against numpy, in a
subprocess with libasan preloaded (a shared library built with ASan cannot be loaded
into a Python that was not started with it). libstdc++ is preloaded too: islpy throws
C++ exceptions, and ASan's ``__cxa_throw`` interceptor needs the real one at start-up."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _gcc_lib(name: str) -> str | None:
    if shutil.which("gcc") is None:
        return None
    path = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True,
                          text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def _san_env(tmp_path) -> dict:
    asan, cxx = _gcc_lib("libasan.so"), _gcc_lib("libstdc++.so")
    assert asan and cxx, "gcc's libasan/libstdc++ not found (gcc is required by the c target)"
    env = dict(os.environ, LD_PRELOAD=f"{asan} {cxx}", ASAN_OPTIONS="detect_leaks=0",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
               POLYCOMP_CACHE_DIR=str(tmp_path / "cache"), OMP_NUM_THREADS="2")
    return env


def test_sanitizer_catches_an_out_of_bounds_write(tmp_path):
    """The harness is live: an overflowing kernel built with the same flags fails."""
    script = textwrap.dedent(f"""
        import ctypes, sys
        sys.path.insert(0, {HERE!r})
        import numpy as np
        from sanitize_ops import SAN_FLAGS
        from polycomp.hw.cpu.build import build_shared
        src = "#include <stdlib.h>\\nvoid k(long n){{ float *p = malloc(n * sizeof(float));"\\
              " for (long i = 0; i <= n; i++) p[i] = 1.0f; free(p); }}\\n"
        ctypes.CDLL(build_shared(src, flags=SAN_FLAGS)).k(ctypes.c_long(8))
        print("no report")
    """)
    r = subprocess.run([sys.executable, "-c", script], env=_san_env(tmp_path),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "heap-buffer-overflow" in r.stderr, r.stdout + r.stderr[-2000:]


@pytest.mark.slow
def test_op_library_under_asan_ubsan(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(HERE, "sanitize_ops.py")],
                       env=_san_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    from polycomp.frontend.ops import OPS
    assert r.stdout.count("ok ") == len(OPS), r.stdout
