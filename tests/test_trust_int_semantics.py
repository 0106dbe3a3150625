"""Integer semantics are numpy's on every path: two's-complement wrap-around for every
integer dtype (docs/dsl.md, "Integer arithmetic").

Issue #24: ``select(A[i] + 1 > A[i], 1, 0)`` compiled to ``B = 1`` (the simplifier folded
``x + 1 > x``, false at INT_MAX), and ``select(A[i] + 1 > 0, ..)`` at INT64_MAX gave 1 in
the built kernel (gcc exploited signed overflow).  Each kernel here runs at the edge
values on the interpreter, ``c``, ``cpu-avx2``, ``cpu-avx512`` (natively or through
SIMDe), the CUDA simulator (whose printed ``.cu`` nvcc compiles), and the NPU target
(which takes float tensors only: a clear ``TargetError``).
"""
import subprocess

import numpy as np
import pytest

import polycomp as pc
from polycomp import ir
from polycomp.driver import build, compile_kernel, interpret
from polycomp.errors import TargetError
from polycomp.lowering.simplify import is_index, simplify, wrap

N = pc.sym("N")
INTS = ("int64", "int32", "int8")


def _edges(dtype):
    info = np.iinfo(dtype)
    return np.array([info.max, info.max - 1, 0, -1, info.min, info.min + 1, 5, -7], dtype)


def _c(v, dtype):
    return np.array(v, dtype)


# (name, DSL body of B[i] from A and i, numpy reference of A)
CASES = [
    ("plus1_gt_self", lambda A, i: pc.select(A[i] + 1 > A[i], 1, 0),
     lambda a, d: (a + _c(1, d) > a).astype(np.int64)),
    ("plus1_gt_zero", lambda A, i: pc.select(A[i] + 1 > 0, 1, 0),
     lambda a, d: (a + _c(1, d) > 0).astype(np.int64)),
    ("minus1_lt_self", lambda A, i: pc.select(A[i] - 1 < A[i], A[i], -A[i]),
     lambda a, d: np.where(a - _c(1, d) < a, a, -a)),
    ("min_plus1", lambda A, i: pc.min(A[i] + 1, A[i]),
     lambda a, d: np.minimum(a + _c(1, d), a)),
    ("max_times2", lambda A, i: pc.max(A[i] * 2, A[i] + A[i] - 1),
     lambda a, d: np.maximum(a * _c(2, d), a + a - _c(1, d))),
    ("floordiv_of_multiple", lambda A, i: (A[i] * 4) // 4,
     lambda a, d: (a * _c(4, d)) // _c(4, d)),
    ("mod_of_multiple", lambda A, i: (A[i] * 3 + 1) % 3,
     lambda a, d: (a * _c(3, d) + _c(1, d)) % _c(3, d)),
    ("neg_minus1", lambda A, i: -A[i] - 1, lambda a, d: -a - _c(1, d)),
    ("abs_lt_zero", lambda A, i: pc.select(pc.abs(A[i]) < 0, 1, 0),
     lambda a, d: (np.abs(a) < 0).astype(np.int64)),
    ("sum_of_squares_cmp", lambda A, i: pc.select(A[i] * A[i] >= 0, 1, 0),
     lambda a, d: (a * a >= 0).astype(np.int64)),
]


def _kernel(name, body, dtype):
    @pc.tensor_expr(name=f"{name}_{dtype}")
    def k(A: pc.Tensor[(N,), dtype]):
        return pc.compute((N,), lambda i: body(A, i), name="B")
    return k


def _paths(k):
    """``(name, run)`` of every path that executes here."""
    from polycomp.hw.cpu.build import CFunction
    from polycomp.hw.cpu.simd_build import build_simde, has_native_avx512, simde_available

    def avx512(a):
        if has_native_avx512():
            return build(k, "cpu-avx512")(a)
        if not simde_available():
            pytest.fail("neither AVX-512 nor SIMDe (libsimde-dev) on this host")
        ck = compile_kernel(k, "cpu-avx512")
        return CFunction(ck.final_ir, build_simde(ck.source))(a)

    return [("interpreter", lambda a: interpret(k, a)),
            ("c", lambda a: build(k, "c")(a)),
            ("cpu-avx2", lambda a: build(k, "cpu-avx2")(a)),
            ("cpu-avx512", avx512),
            ("cuda-simulator", lambda a: interpret(compile_kernel(k, "cuda"), a))]


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("name,body,ref", CASES, ids=[c[0] for c in CASES])
def test_integer_edges_wrap_like_numpy_on_every_path(name, body, ref, dtype):
    a = _edges(dtype)
    with np.errstate(all="ignore"):
        want = np.asarray(ref(a, dtype))
    k = _kernel(name, body, dtype)
    for path, run in _paths(k):
        got = np.asarray(run(a))
        np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64),
                                      err_msg=f"{name} {dtype} via {path}")


def test_issue_cases_exactly():
    """The two reports of the issue, at INT64_MAX and INT32_MAX."""
    for dtype in ("int64", "int32"):
        big = np.array([np.iinfo(dtype).max], dtype)
        k = _kernel("issue_gt_self", CASES[0][1], dtype)
        for path, run in _paths(k):
            assert run(big).tolist() == [0], (dtype, path)
    k = _kernel("issue_gt_zero", CASES[1][1], "int64")
    for path, run in _paths(k):
        assert run(np.array([np.iinfo(np.int64).max], np.int64)).tolist() == [0], path


def test_npu_rejects_integer_kernels_clearly():
    k = _kernel("npu_gt_self", CASES[0][1], "int64")
    with pytest.raises(TargetError, match="npu"):
        compile_kernel(k, "npu")


@pytest.mark.parametrize("target", ["interpreter", "c", "cpu-avx2", "cpu-avx512", "cuda", "npu"])
def test_float_plus1_gt_self_is_false_at_inf_nan_and_large(target):
    @pc.tensor_expr(name="fgt")
    def fgt(X: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: pc.select(X[i] + 1 > X[i], 1.0, 0.0), name="B")
    x = np.array([1.0, np.inf, -np.inf, np.nan, 1e20, -1e20, 0.5, 16777216.0], np.float32)
    want = (x + np.float32(1) > x).astype(np.float32)
    if target == "interpreter":
        got = interpret(fgt, x)
    elif target in ("cuda", "npu"):
        got = interpret(compile_kernel(fgt, target), x)
    else:
        got = build(fgt, target)(x)
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ the simplifier


def _load(dtype="int64"):
    buf = ir.Buffer("A", (ir.IntImm(8),), dtype)
    return ir.Load(buf, (ir.Var("i"),), dtype)


@pytest.mark.parametrize("dtype", INTS)
def test_simplifier_keeps_data_comparisons(dtype):
    x = _load(dtype)
    one = ir.IntImm(1, dtype)
    for op in ("<", "<=", ">", ">="):
        e = simplify(ir.Binary(op, ir.Binary("+", x, one, dtype), x, "bool"))
        assert not isinstance(e, ir.IntImm), (op, dtype)
    for op in ("min", "max"):
        e = simplify(ir.Binary(op, ir.Binary("+", x, one, dtype), x, dtype))
        assert isinstance(e, ir.Binary) and e.op == op
    four = ir.IntImm(4, dtype)
    e = simplify(ir.Binary("//", ir.Binary("*", x, four, dtype), four, dtype))
    assert isinstance(e, ir.Binary) and e.op == "//"
    # == / != of a constant difference are exact modulo 2**bits
    e = simplify(ir.Binary("==", ir.Binary("+", x, one, dtype), x, "bool"))
    assert isinstance(e, ir.IntImm) and e.value == 0


def test_simplifier_still_decides_index_comparisons():
    i, n = ir.Var("i"), ir.Var("N", is_param=True)
    assert is_index(ir.Binary("+", i, n, "int64"))
    e = simplify(ir.Binary(">", ir.Binary("+", i, ir.IntImm(1), "int64"), i, "bool"))
    assert isinstance(e, ir.IntImm) and e.value == 1
    e = simplify(ir.Binary("min", ir.Binary("+", n, ir.IntImm(3), "int64"), n, "int64"))
    assert e is n


@pytest.mark.parametrize("dtype", INTS)
def test_constant_folding_wraps(dtype):
    info = np.iinfo(dtype)
    mx, mn = ir.IntImm(int(info.max), dtype), ir.IntImm(int(info.min), dtype)
    one = ir.IntImm(1, dtype)
    assert simplify(ir.Binary("+", mx, one, dtype)).value == info.min
    assert simplify(ir.Binary("-", mn, one, dtype)).value == info.max
    assert simplify(ir.Unary("neg", mn, dtype)).value == info.min
    assert simplify(ir.Binary("//", mn, ir.IntImm(-1, dtype), dtype)).value == info.min
    assert simplify(ir.Binary("//", mx, ir.IntImm(0, dtype), dtype)).value == 0
    assert simplify(ir.Cast(ir.IntImm(int(info.max) + 1 if dtype != "int64" else 2 ** 40,
                                      "int64"), dtype)).value == \
        wrap(int(info.max) + 1 if dtype != "int64" else 2 ** 40, dtype)
    # a normal form never carries a constant outside the dtype
    x = _load(dtype)
    e = simplify(ir.Binary("+", ir.Binary("+", x, mx, dtype), one, dtype))
    assert all(info.min <= c.value <= info.max for c in _consts(e))


def test_normal_form_keeps_other_widths_as_atoms():
    """``(int32 x + 1) + int64 y`` wraps at 32 bits first: not ``x + y + 1``."""
    x = _load("int32")
    y = ir.Var("y")
    inner = ir.Binary("+", x, ir.IntImm(1, "int32"), "int32")
    e = simplify(ir.Binary("-", ir.Binary("+", inner, y, "int64"), ir.IntImm(1), "int64"))
    assert any(isinstance(n, ir.Binary) and n.dtype == "int32" for n in _nodes(e))


def test_int_to_float_constant_rounds_once():
    v = 2 ** 53 + 2 ** 29 + 1       # float(v) then float32 rounds differently
    e = simplify(ir.Cast(ir.IntImm(v), "float32"))
    assert e.value == float(np.float32(np.int64(v)))


def _nodes(e):
    out = []
    ir.walk(e, out.append)
    return out


def _consts(e):
    return [n for n in _nodes(e) if isinstance(n, ir.IntImm)]


# ------------------------------------------------------------------ printed source


def test_int64_data_arithmetic_is_printed_unsigned_index_arithmetic_plainly():
    k = _kernel("print_gt0", CASES[1][1], "int64")
    for target in ("c", "cuda"):
        src = compile_kernel(k, target).source
        assert "(unsigned long long)(A[" in src, target
        assert "(unsigned long long)(i" not in src and "(unsigned long long)(c" not in src


@pytest.mark.nvcc
def test_cuda_source_of_wrapping_kernels_compiles(tmp_path):
    for name, body, _ in CASES:
        src = compile_kernel(_kernel(name, body, "int64"), "cuda").source
        cu = tmp_path / f"{name}.cu"
        cu.write_text(src)
        r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "k.cubin"),
                            str(cu)], capture_output=True, text=True)
        assert r.returncode == 0, (name, r.stderr[-2000:])


def test_gcc_builds_use_fwrapv():
    from polycomp.hw.cpu.build import DEFAULT_FLAGS
    from polycomp.hw.cpu.simd_build import AVX512_FLAGS, SIMDE_FLAGS
    for flags in (DEFAULT_FLAGS, SIMDE_FLAGS, AVX512_FLAGS):
        assert "-fwrapv" in flags
