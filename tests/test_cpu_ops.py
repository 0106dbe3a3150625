"""Every operator of the op library (polycomp.frontend.ops.OPS) through the CPU backend,
compared with its numpy reference on random symbolic-shape instances (hypothesis).

Paths:

* ``cpu-avx2``: AVX2 + FMA intrinsics, built natively (every registered dtype; dtypes
  other than float32/float64 run scalar code, which must still be right, with fewer
  examples);
* ``cpu-avx512 (SIMDe)``: the AVX-512 output compiled without ``-mavx512f`` against
  SIMDe (float32 for every operator, float64 for a few), so it runs on machines without
  AVX-512;
* ``cpu-avx512 (native)``: the same source compiled natively, only where /proc/cpuinfo
  lists avx512f (no skip elsewhere: the case is simply not generated).

Extents are drawn with a bias to 1, primes and odd sizes, so vector loops run with
masked tails (sizes not multiples of 8 or 16) and matmul-like kernels hit the partial
register tiles; a separate test uses larger matmul shapes so the full-tile micro-kernel
runs.  Tolerances as in the interpreter/C op tests: ``rtol = r0 + 4 L eps`` with ``L``
the reduction length, ``atol = rtol * max(1, max|ref|)``; integers exact.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ops_helpers import FAST_OPS, check_close, extent, op_params, runner

from polycomp.driver import build, compile_kernel
from polycomp.frontend.ops import OPS
from polycomp.hw.cpu.build import CFunction, build_shared
from polycomp.hw.cpu.simd_build import build_simde, has_native_avx512, simde_available
from polycomp.hw.cpu.target import cpu_flags

HAS_AVX2 = {"avx2", "fma"} <= cpu_flags()
AVX2_CASES = [(n, d) for n, s in OPS.items() for d in s.dtypes
              if d in ("float32", "float64")] if HAS_AVX2 else []
#: dtypes the vectoriser leaves scalar: fewer examples (the C path's own tests cover them)
AVX2_SCALAR_CASES = [(n, d) for n, s in OPS.items() for d in s.dtypes
                     if d not in ("float32", "float64")] if HAS_AVX2 else []
SIMDE_F64 = ("softmax", "layernorm", "matmul", "gelu", "reduce_sum_1", "conv2d_s2_p1")
SIMDE_CASES = ([(n, "float32") for n in OPS] + [(n, "float64") for n in SIMDE_F64]) \
    if simde_available() else []
NATIVE512_CASES = [(n, "float32") for n in OPS]


def _run(name, dtype, path, data):
    spec = OPS[name]
    shapes = spec.shapes(lambda lo, hi: data.draw(extent(lo, hi)))
    seed = data.draw(st.integers(0, 2 ** 32 - 1), label="seed")
    xs = spec.inputs(np.random.default_rng(seed), shapes, dtype)
    out = runner(name, dtype, path)(*xs)
    check_close(out, spec.reference(*xs), spec, dtype, shapes, f"{name}[{dtype}] via {path}")


@pytest.mark.parametrize("name,dtype", op_params(AVX2_CASES))
@given(data=st.data())
def test_op_avx2_native(name, dtype, data):
    _run(name, dtype, "avx2", data)


@pytest.mark.parametrize("name,dtype", op_params(AVX2_SCALAR_CASES, fast_ops=()))
@settings(max_examples=4)
@given(data=st.data())
def test_op_avx2_native_scalar_dtypes(name, dtype, data):
    _run(name, dtype, "avx2", data)


@pytest.mark.parametrize("name,dtype", op_params(SIMDE_CASES))
@settings(max_examples=6)
@given(data=st.data())
def test_op_avx512_simde(name, dtype, data):
    _run(name, dtype, "simde", data)


@pytest.mark.skipif(not has_native_avx512(),
                    reason="hardware: this host has no AVX-512 (test_op_avx512_simde runs "
                           "the same code through SIMDe)")
@pytest.mark.parametrize("name,dtype", op_params(NATIVE512_CASES))
@settings(max_examples=6)
@given(data=st.data())
def test_op_avx512_native(name, dtype, data):
    _run(name, dtype, "native512", data)


_MM_SHAPES = st.tuples(st.integers(1, 150), st.integers(1, 300), st.integers(1, 200))


@pytest.mark.parametrize("path", ["avx2"] * HAS_AVX2 + ["simde"] * simde_available()
                         + ["native512"] * has_native_avx512())
@pytest.mark.parametrize("name", ["matmul", pytest.param("batch_matmul", marks=pytest.mark.slow),
                                  pytest.param("matmul_bias_relu", marks=pytest.mark.slow)])
@settings(max_examples=5)
@given(nkm=_MM_SHAPES, seed=st.integers(0, 2 ** 31))
def test_matmul_full_tiles(path, name, nkm, seed):
    """Shapes large enough for full MR x NR register tiles (the micro-kernel) next to
    partial edge tiles."""
    n, k, m = nkm
    spec = OPS[name]
    rng = np.random.default_rng(seed)
    shapes = {"matmul": [(n, k), (k, m)], "batch_matmul": [(2, n, k), (2, k, m)],
              "matmul_bias_relu": [(n, k), (k, m), (m,)]}[name]
    xs = spec.inputs(rng, shapes, "float32")
    out = runner(name, "float32", path)(*xs)
    check_close(out, spec.reference(*xs), spec, "float32", shapes, f"{name} via {path}")


def test_every_registered_operator_is_covered():
    if HAS_AVX2:
        assert {n for n, _ in AVX2_CASES} == set(OPS)
        assert {(n, d) for n, d in AVX2_CASES + AVX2_SCALAR_CASES} == \
            {(n, d) for n, spec in OPS.items() for d in spec.dtypes}
    if simde_available():
        assert {n for n, d in SIMDE_CASES if d == "float32"} == set(OPS)


#: constant-shape convolutions: every tile, the narrow and masked ones included, has
#: compile-time extents, so all of them run micro-kernels (symbolic shapes only do for
#: full tiles)
CONST_CONVS = [((1, 3, 9, 9), (20, 3, 3, 3), 1, 1), ((2, 5, 23, 19), (7, 5, 3, 3), 2, 1),
               ((1, 4, 40, 37), (9, 4, 1, 1), 1, 0), ((1, 6, 14, 14), (33, 6, 3, 3), 1, 1)]


@pytest.mark.parametrize("path", ["avx2"] * HAS_AVX2 + ["simde"] * simde_available()
                         + ["native512"] * has_native_avx512())
@pytest.mark.parametrize("case", [0] + [pytest.param(k, marks=pytest.mark.slow)
                                         for k in range(1, len(CONST_CONVS))])
def test_constant_shape_convolutions(path, case):
    import polycomp as pc
    from polycomp.frontend import ops
    from polycomp.frontend.dsl import Kernel
    from polycomp.frontend.ops import _ref_conv2d
    xs, ws, stride, pad = CONST_CONVS[case]

    def conv(x, w):
        return ops.conv2d_nchw(x, w, (stride, stride), (pad, pad))
    k = Kernel(conv, name=f"cconv{case}", inputs={"x": pc.Tensor[xs, "float32"],
                                                   "w": pc.Tensor[ws, "float32"]})
    ck = compile_kernel(k, "cpu-avx512" if path != "avx2" else "cpu-avx2")
    assert ck.final_ir.counts.microkernels >= 1
    if path == "simde":
        f = CFunction(ck.final_ir, build_simde(ck.source))
    else:
        f = build(k, "cpu-avx512" if path == "native512" else "cpu-avx2")
    rng = np.random.default_rng(case)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    ref = _ref_conv2d((stride, stride), (pad, pad), (1, 1))(x, w)
    np.testing.assert_allclose(f(x, w), ref, rtol=1e-4, atol=1e-4)


CONST_MATMULS = [(13, 7, 129), (1, 5, 17), (37, 64, 33), (7, 300, 70)]


@pytest.mark.parametrize("path", ["avx2"] * HAS_AVX2 + ["simde"] * simde_available()
                         + ["native512"] * has_native_avx512())
@pytest.mark.parametrize("case", [0] + [pytest.param(k, marks=pytest.mark.slow)
                                         for k in range(1, len(CONST_MATMULS))])
def test_constant_shape_matmuls(path, case):
    """Every register tile of a constant-shape product, one-row and narrow edge tiles
    included, is a micro-kernel."""
    import polycomp as pc
    from polycomp.frontend import ops
    from polycomp.frontend.dsl import Kernel
    n, k, m = CONST_MATMULS[case]
    kern = Kernel(lambda A, B: ops.matmul(A, B), name=f"cmm{case}",
                  inputs={"A": pc.Tensor[(n, k), "float32"], "B": pc.Tensor[(k, m), "float32"]})
    target = "cpu-avx2" if path == "avx2" else "cpu-avx512"
    ck = compile_kernel(kern, target)
    assert ck.final_ir.counts.microkernels >= 1
    f = CFunction(ck.final_ir, build_simde(ck.source)) if path == "simde" else build(kern, target)
    rng = np.random.default_rng(case)
    A = rng.standard_normal((n, k)).astype(np.float32)
    B = rng.standard_normal((k, m)).astype(np.float32)
    np.testing.assert_allclose(f(A, B), A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", [n if n in FAST_OPS else pytest.param(n, marks=pytest.mark.slow)
                                  for n in OPS] if HAS_AVX2 else [])
@settings(max_examples=2, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1))
def test_op_avx2_constant_shapes(name, seed):
    """Every operator with constant shapes (what a deployed model has, and what the
    benchmarks compile): trip counts and tile extents become constants, so full tiles
    are micro-kernels, row-wise nests prefetch their next row (hw/cpu/prefetch.py) and
    the vectoriser sees constant tails.  Shapes are drawn at random from the op's
    ranges."""
    import polycomp as pc
    from polycomp.frontend.dsl import Kernel
    spec = OPS[name]
    rng = np.random.default_rng(seed)
    shapes = spec.shapes(lambda lo, hi: int(rng.integers(lo, hi + 1)))
    sym = spec.kernel("float32")
    inputs = {t.buffer.name: pc.Tensor[tuple(s), t.buffer.dtype]
              for t, s in zip(sym.graph.inputs, shapes)}
    k = Kernel(sym.fn, name=f"{sym.name}_const", inputs=inputs)
    ck = compile_kernel(k, "cpu-avx2")
    assert ck.final_ir.params == ()
    xs = spec.inputs(rng, shapes, "float32")
    out = CFunction(ck.final_ir, build_shared(ck.source))(*xs)
    check_close(out, spec.reference(*xs), spec, "float32", shapes,
                f"{name} with constant shapes {shapes}")
