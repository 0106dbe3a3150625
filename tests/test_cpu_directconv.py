"""Direct convolutions on the CPU backend: the AVX2 masked stride-2 load (padded
stride-2 rows: two masked loads and a permute instead of a gather) against a scalar
model for every lane mask."""
import ctypes

import numpy as np
import pytest

from polycomp.hw.cpu.build import DEFAULT_FLAGS, build_shared
from polycomp.hw.cpu.target import cpu_flags
from polycomp.hw.cpu.vector_prelude import prelude

HAS_AVX2 = {"avx2", "fma"} <= cpu_flags()

_SRC = r"""
void probe(const float* p, const int32_t* masks, int n, float* out) {
  for (int k = 0; k < n; ++k) {
    __m256 m = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i*)(masks + 8 * k)));
    _mm256_storeu_ps(out + 8 * k, pc256_maskz_load_strided_ps(m, p, 2));
  }
}
"""


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
def test_avx2_masked_stride2_load():
    src = "#include <stdint.h>\n#include <math.h>\n#include <stdlib.h>\n" + prelude("avx2") + _SRC
    lib = ctypes.CDLL(build_shared(src, flags=DEFAULT_FLAGS))
    lib.probe.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    lib.probe.restype = None
    masks = np.array([[-1 if (k >> l) & 1 else 0 for l in range(8)] for k in range(256)],
                     np.int32)
    data = np.arange(1, 17, dtype=np.float32)
    out = np.zeros((256, 8), np.float32)
    lib.probe(data.ctypes.data, masks.ctypes.data, 256, out.ctypes.data)
    want = np.where(masks != 0, data[0::2][None, :], 0.0)
    np.testing.assert_array_equal(out, want)
