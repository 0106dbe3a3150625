"""Helpers shared by the operator-library tests: compiled kernels cached per pytest
session (CUDA compilation of the larger operators takes seconds, and both the
simulation and the nvcc tests need it), the extents hypothesis draws, and the
tolerance every backend is held to against the numpy references."""
import numpy as np
import pytest
from hypothesis import strategies as st

from polycomp import dtypes as dt
from polycomp.driver import build, compile_kernel, interpret
from polycomp.frontend.ops import OPS, accumulation_dtype

#: the operators whose float32 case of each whole-library sweep stays in the fast lane
#: (``-m "not slow"``): a contraction, a row reduction with its epilogue, a broadcast
FAST_OPS = ("matmul", "softmax", "add_row")


def op_params(cases, fast_ops=FAST_OPS, fast_dtypes=("float32",)) -> list:
    """``(name, dtype)`` cases as pytest params (id ``name-dtype``); all but the
    ``fast_ops`` x ``fast_dtypes`` ones are marked ``slow``."""
    return [pytest.param(n, d, id=f"{n}-{d}",
                         marks=() if n in fast_ops and d in fast_dtypes else pytest.mark.slow)
            for n, d in cases]


_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73,
           79, 83, 89, 97, 101, 127, 131, 163, 197, 211, 251, 257, 293)


def extent(lo: int, hi: int):
    """An extent in [lo, hi]: the low end, a prime, an odd size, or anything."""
    primes = [p for p in _PRIMES if lo <= p <= hi]
    options = [st.just(lo), st.integers(lo, hi)]
    first_odd = lo if lo % 2 else lo + 1
    if first_odd <= hi:
        options.append(st.integers(first_odd // 2, (hi - 1) // 2).map(lambda k: 2 * k + 1))
    if primes:
        options.append(st.sampled_from(primes))
    return st.one_of(*options)


_EPS = {"float64": 2.3e-16, "float32": 1.2e-7, "float16": 9.8e-4, "bfloat16": 7.9e-3}
_R0 = {"float64": 1e-12, "float32": 1e-5}


def check_close(out, ref, spec, dtype, shapes, what):
    """``out`` matches the reference ``ref`` of op ``spec``: integers exactly, floats
    within a relative error growing with the reduction length (``spec.reduction``)."""
    if isinstance(ref, tuple):  # a kernel with several outputs
        assert isinstance(out, tuple) and len(out) == len(ref), \
            f"{what}: {len(ref)} outputs expected"
        for k, (o, r) in enumerate(zip(out, ref)):
            check_close(o, r, spec, dtype, shapes, f"{what} output {k}")
        return
    out = np.asarray(out)
    ref = np.asarray(ref)
    assert out.shape == ref.shape, f"{what}: shape {out.shape} != reference {ref.shape}"
    if out.dtype.kind in "iub":
        np.testing.assert_array_equal(out, ref, err_msg=what)
        return
    acc = accumulation_dtype(dtype)
    out_dt = dt.canonical(out.dtype)
    L = spec.reduction(shapes)
    rtol = _R0[acc] + 4 * L * _EPS[acc]
    if out_dt in ("float16", "bfloat16"):
        rtol += 2 * _EPS[out_dt]
    ref64 = ref.astype(np.float64)
    scale = max(1.0, float(np.max(np.abs(ref64)))) if ref64.size else 1.0
    np.testing.assert_allclose(out.astype(np.float64), ref64, rtol=rtol, atol=rtol * scale,
                               err_msg=f"{what} (L={L}, shapes={shapes})")

_COMPILED: dict = {}
_RUNNERS: dict = {}


def compiled(name: str, dtype: str, target: str, options: dict | None = None):
    """``compile_kernel(OPS[name].kernel(dtype), target, options)``, cached."""
    key = (name, dtype, target, tuple(sorted((options or {}).items())))
    if key not in _COMPILED:
        _COMPILED[key] = compile_kernel(OPS[name].kernel(dtype), target, options)
    return _COMPILED[key]


def runner(name: str, dtype: str, path: str):
    """A callable running op ``name`` for ``dtype`` along ``path``: ``"interpreter"``
    (program-order IR), ``"c"`` (gcc + ctypes) or ``"cuda-ir"`` (the CUDA pipeline's IR
    through :func:`polycomp.driver.interpret`), ``"avx2"`` (cpu-avx2, native),
    ``"simde"`` (cpu-avx512 with SIMDe), ``"native512"`` (cpu-avx512, native) or ``"gpu"``
    (the cuda target on a real GPU, through pycuda or cupy)."""
    key = (name, dtype, path)
    if key not in _RUNNERS:
        if path == "interpreter":
            ck = compiled(name, dtype, "c", {"parallel": False})
            _RUNNERS[key] = lambda *xs: interpret(ck, *xs)
        elif path == "c":
            _RUNNERS[key] = build(OPS[name].kernel(dtype), "c")
        elif path == "cuda-ir":
            ck = compiled(name, dtype, "cuda")
            _RUNNERS[key] = lambda *xs: interpret(ck, *xs)
        elif path == "avx2":
            _RUNNERS[key] = build(OPS[name].kernel(dtype), "cpu-avx2")
        elif path == "simde":
            from polycomp.hw.cpu.build import CFunction
            from polycomp.hw.cpu.simd_build import build_simde
            ck = compiled(name, dtype, "cpu-avx512")
            _RUNNERS[key] = CFunction(ck.final_ir, build_simde(ck.source))
        elif path == "native512":
            _RUNNERS[key] = build(OPS[name].kernel(dtype), "cpu-avx512")
        elif path == "gpu":
            _RUNNERS[key] = build(OPS[name].kernel(dtype), "cuda")
        else:
            raise ValueError(path)
    return _RUNNERS[key]
