"""Build variants for checking vector code on machines without the vector ISA.

* :data:`SIMDE_FLAGS`: AVX2 + FMA (``-march=x86-64-v3``), no AVX-512, ``-O1`` (these
  builds check results; SIMDe's emulation makes ``-O3`` compiles several times slower).  Generated
  AVX-512 code then defines ``PC_SIMDE`` (see :mod:`polycomp.hw.cpu.vector_prelude`) and
  compiles against SIMDe's portable emulation (``/usr/include/simde``, package
  libsimde-dev), so it runs anywhere AVX2 runs.
* :data:`AVX512_FLAGS`: native AVX-512 (``-march=x86-64-v4``) whatever the build
  machine; such a library must only be *executed* where :func:`has_native_avx512`.
* :func:`disassemble` returns ``objdump -d`` of the code compiled with given flags, so
  tests can check that native AVX-512 builds use ``zmm`` registers.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from polycomp.errors import BuildError
from polycomp.hw.cpu.target import cpu_flags

from .build import DEFAULT_FLAGS, build_shared, compiler_command, precompiled_header, run_compiler

SIMDE_INCLUDE = "/usr/include"


def _with_march(march: str, extra=()) -> tuple:
    out = tuple(f"-march={march}" if f.startswith("-march=") else f for f in DEFAULT_FLAGS)
    if not any(f.startswith("-march=") for f in out):
        out += (f"-march={march}",)
    return out + tuple(extra)


#: ``-fno-tree-loop-im``: gcc 12's tree loop-invariant motion took 35 % of the CPU of a
#: SIMDe build of a micro-kernel (``-ftime-report`` on test_cpu_triangle's syrk_lower:
#: the emulated 512-bit operations are lane loops nested in the register-tile loops);
#: without it that build took 15.7 s of user CPU instead of 23-38 s (Zen 3, shared host).
SIMDE_FLAGS = tuple("-O1" if f.startswith("-O") else f
                    for f in _with_march("x86-64-v3", ("-DPC_SIMDE",))) + \
    ("-fno-tree-loop-im",)
AVX512_FLAGS = _with_march("x86-64-v4")


def simde_available() -> bool:
    return os.path.exists(os.path.join(SIMDE_INCLUDE, "simde", "x86", "avx512.h"))


def has_native_avx512() -> bool:
    """Whether this machine executes AVX-512F (/proc/cpuinfo lists avx512f)."""
    return "avx512f" in cpu_flags()


_PCH_HEADER = """#define SIMDE_ENABLE_NATIVE_ALIASES
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <simde/x86/avx512.h>
#include <simde/x86/avx2.h>
#include <simde/x86/fma.h>
"""


def _simde_pch() -> str | None:
    """A precompiled header of SIMDe for :data:`SIMDE_FLAGS` (parsing SIMDe is most of a
    SIMDe build's time); None if gcc cannot make one."""
    return precompiled_header(_PCH_HEADER, SIMDE_FLAGS, "pc_simde.h")


def build_simde(source: str) -> str:
    """A shared library of ``source`` with AVX-512 emulated by SIMDe."""
    if not simde_available():
        raise BuildError("SIMDe headers not found (install libsimde-dev)")
    pch = _simde_pch()
    flags = SIMDE_FLAGS + (("-include", pch) if pch else ())
    return build_shared(source, flags=flags, include_dirs=(SIMDE_INCLUDE,))


def disassemble(source: str, flags=AVX512_FLAGS) -> str:
    """``objdump -d`` of ``source`` compiled (not linked) with ``flags``."""
    objdump = shutil.which("objdump")
    if objdump is None:
        raise BuildError("objdump not found (binutils)")
    cc = compiler_command()
    flags = tuple(f for f in flags if f not in ("-shared",)) + ("-c",)
    with tempfile.TemporaryDirectory() as tmp:
        src, obj = os.path.join(tmp, "k.c"), os.path.join(tmp, "k.o")
        with open(src, "w") as f:
            f.write(source)
        run_compiler([*cc, *flags, src, "-o", obj], obj, "the source to disassemble")
        r = subprocess.run([objdump, "-d", "--no-show-raw-insn", obj], capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise BuildError(f"objdump failed: {r.stderr[-2000:]}")
        return r.stdout
