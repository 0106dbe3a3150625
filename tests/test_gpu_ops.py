"""Every operator of the op library, every dtype, on a real NVIDIA GPU (the ``cuda``
target, launched through pycuda or cupy), against its numpy reference on
hypothesis-drawn symbolic shapes (extent 1, primes, odd sizes), with the tolerances of
the other backends' op tests.

Hardware: skipped where no GPU is present (this machine and CI have none; the simulator
tests check the same kernels there).  Run on a GPU machine with
``python -m pytest tests/test_gpu_ops.py -n 16``.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ops_helpers import check_close, extent, runner

from polycomp.frontend.ops import OPS
from polycomp.hw.cuda.launcher import gpu_available

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not gpu_available(),
                                 reason="hardware: no NVIDIA GPU (with pycuda or cupy) here")]

CASES = [pytest.param(n, d, id=f"{n}-{d}") for n, s in OPS.items() for d in s.dtypes]


@pytest.mark.parametrize("name,dtype", CASES)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_op_on_gpu(name, dtype, data):
    spec = OPS[name]
    shapes = spec.shapes(lambda lo, hi: data.draw(extent(lo, hi)))
    seed = data.draw(st.integers(0, 2 ** 32 - 1), label="seed")
    xs = spec.inputs(np.random.default_rng(seed), shapes, dtype)
    out = runner(name, dtype, "gpu")(*xs)
    check_close(out, spec.reference(*xs), spec, dtype, shapes, f"{name}[{dtype}] on the GPU")
