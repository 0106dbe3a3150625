"""Running an AVX-512 build in tests: natively where the host executes AVX-512, else
through SIMDe (the same source and the same order of operations per element), so the
bitwise checks of AVX-512-only passes run on every host CI uses."""
from __future__ import annotations

import os

import numpy as np
import pytest

from polycomp.hw.cpu.build import CFunction
from polycomp.hw.cpu.simd_build import build_simde, has_native_avx512, simde_available

#: skips only where neither native AVX-512 nor the SIMDe headers exist
AVX512_RUNS = pytest.mark.skipif(not (has_native_avx512() or simde_available()),
                                 reason="hardware: no AVX-512 and no SIMDe headers")


def load_avx512(ck):
    """The compiled ``cpu-avx512`` kernel ``ck`` as a callable: native where the host
    executes AVX-512, else built against SIMDe (``POLYCOMP_TEST_SIMDE=1`` forces SIMDe)."""
    if has_native_avx512() and os.environ.get("POLYCOMP_TEST_SIMDE") != "1":
        return ck.backend.load(ck)
    return CFunction(ck.final_ir, build_simde(ck.source))


def view_past_line(a: np.ndarray, shift: int) -> np.ndarray:
    """A copy of ``a`` that starts ``shift`` elements past a 64-byte boundary (so a
    test fixes each array's alignment against the vectors' cache lines)."""
    raw = np.empty(a.size + 32, a.dtype)
    start = (-(raw.ctypes.data // a.itemsize)) % (64 // a.itemsize) + shift
    v = raw[start:start + a.size].reshape(a.shape)
    v[...] = a
    return v
