"""Bitwise ``& | ^ ~ << >>`` on integer tensors (issue #14): numpy's semantics on every
backend (interpreter, c, cpu-avx2, cpu-avx512, the CUDA simulator and nvcc), logical on
conditions, a DTypeError with a float operand.

Before: ``&``/``|`` of integers raised "operands of '&&' must be conditions", ``^`` was
unsupported, a shift needed a constant count in ``[0, bits)`` and ``int32 << 31``
raised (2**31 does not fit int32)."""
import shutil
import subprocess

import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import build, compile_kernel, interpret
from polycomp.errors import DTypeError
from polycomp.hw.cpu.simd_build import has_native_avx512

N = pc.sym("N")
CPU_TARGETS = ["c", "cpu-avx2"] + (["cpu-avx512"] if has_native_avx512() else [])


def _binary(op, da, db):
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), da], B: pc.Tensor[(N,), db]):
        return pc.compute((N,), lambda i: op(A[i], B[i]), name="out")
    return k


def _all_ops(da, db):
    """One kernel, one output per operator (one build per target for all five)."""
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), da], B: pc.Tensor[(N,), db], C: pc.Tensor[(N,), db]):
        def stage(j, op, fn):
            X = C if op in SHIFTS else B
            return pc.compute((N,), lambda i: fn(A[i], X[i]), name=f"out{j}")
        return tuple(stage(j, op, fn) for j, (op, (fn, _)) in enumerate(OPS.items()))
    return k


def _values(dtype, n, rng):
    info = np.iinfo(dtype)
    edge = np.array([0, 1, -1, 5, -7, info.max, info.min], dtype=dtype)
    return np.concatenate([edge, rng.integers(info.min, info.max, n - len(edge),
                                              dtype=dtype, endpoint=True)])


def _counts(dtype, n, rng):
    """Shift counts: in range, the width and beyond, negative."""
    bits = np.dtype(dtype).itemsize * 8
    edge = np.array([0, 1, bits - 1, bits, bits + 1, 2 * bits + 3, -1, -bits], dtype=dtype)
    return np.concatenate([edge, rng.integers(-2, bits + 3, n - len(edge), dtype=dtype)])


OPS = {"&": (lambda a, b: a & b, np.bitwise_and), "|": (lambda a, b: a | b, np.bitwise_or),
       "^": (lambda a, b: a ^ b, np.bitwise_xor), "<<": (lambda a, b: a << b, np.left_shift),
       ">>": (lambda a, b: a >> b, np.right_shift)}
SHIFTS = ("<<", ">>")


def _check_everywhere(k, want, *xs):
    from polycomp.hw.cuda.simulator import simulate
    runs = [(t, lambda t=t: build(k, t)(*xs)) for t in CPU_TARGETS]
    runs += [("interpreter", lambda: interpret(k, *xs)),
             ("cuda simulator", lambda: simulate(compile_kernel(k, "cuda"), *xs)[0])]
    for name, run in runs:
        got = run()
        for g, w in zip(got if isinstance(want, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            assert g.dtype == w.dtype, name
            np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.mark.parametrize("da, db", [("int8", "int8"), ("int32", "int32"),
                                    ("int64", "int64"), ("int8", "int64")])
def test_bitwise_follows_numpy(da, db):
    """Every operator on edge values (0, -1, min, max) and random ones; shift counts in
    range, equal to the width, beyond it and negative; int8 op int64 promotes both to
    int64 as numpy does (an int8 shifted by 40 is defined there)."""
    rng = np.random.default_rng(11)
    n = 37
    a, b, c = _values(da, n, rng), _values(db, n, rng)[::-1].copy(), _counts(db, n, rng)
    want = tuple(ref(a.astype(db), c if op in SHIFTS else b) for op, (_, ref) in OPS.items())
    _check_everywhere(_all_ops(da, db), want, a, b, c)


CONSTANT_CASES = [
    (lambda a: a << 31, lambda x: x << 31),
    (lambda a: a << 32, lambda x: np.left_shift(x, 32)),
    (lambda a: a >> 40, lambda x: np.right_shift(x, 40)),
    (lambda a: 1 << (a & 7), lambda x: np.left_shift(np.int32(1), x & 7)),
    (lambda a: ~(a ^ 0x5A5A) & 0xFF, lambda x: ~(x ^ 0x5A5A) & 0xFF),
    (lambda a: (a | 1) - (a & -2), lambda x: (x | 1) - (x & -2)),
]


def test_constants_and_compositions():
    """Constant counts (31 on int32 used to raise: 2**31 does not fit int32), counts at
    and past the width, a constant shifted by an expression, compositions."""
    rng = np.random.default_rng(3)
    x = _values("int32", 19, rng)

    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "int32"]):
        def stage(j, e):
            return pc.compute((N,), lambda i: e(A[i]), name=f"out{j}")
        return tuple(stage(j, e) for j, (e, _) in enumerate(CONSTANT_CASES))
    _check_everywhere(k, tuple(ref(x).astype(np.int32) for _, ref in CONSTANT_CASES), x)


def test_bitwise_inside_a_float_kernel():
    """An integer bitwise mask selecting float values: the float loop stays vectorised
    on the CPU targets, the integer part scalar or per lane, same numbers."""
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"], M: pc.Tensor[(N,), "int32"]):
        return pc.compute((N,), lambda i: pc.select(pc.eq(M[i] & 4, 4), A[i] * 2.0, A[i]),
                          name="out")
    rng = np.random.default_rng(5)
    a = rng.standard_normal(29).astype(np.float32)
    m = rng.integers(-50, 50, 29).astype(np.int32)
    _check_everywhere(k, np.where((m & 4) == 4, a * 2, a).astype(np.float32), a, m)


@pytest.mark.parametrize("op, ref", [("&", np.logical_and), ("|", np.logical_or),
                                     ("^", np.logical_xor)])
def test_on_conditions_they_are_logical(op, ref):
    fn = OPS[op][0]

    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "int32"]):
        return pc.compute((N,), lambda i: pc.select(fn(A[i] > 0, A[i] < 5), 1.0, 0.0),
                          name="out")
    x = np.arange(-3, 9, dtype=np.int32)
    _check_everywhere(k, ref(x > 0, x < 5).astype(np.float32), x)


@pytest.mark.parametrize("op", list(OPS) + ["~"])
def test_float_operand_is_a_dtype_error(op):
    fn = (lambda a, b: ~a) if op == "~" else OPS[op][0]
    with pytest.raises(DTypeError, match=r"integer|~ needs"):
        compile_kernel(_binary(fn, "float32", "int32"), "c")
    if op != "~":
        with pytest.raises(DTypeError, match="integer"):
            compile_kernel(_binary(fn, "int32", "float32"), "c")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc absent")
def test_cuda_source_compiles():
    def fn(a, b):
        return ((a << b) ^ (a >> 3)) | (a & b)
    src = compile_kernel(_binary(fn, "int32", "int32"), "cuda").source
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/k.cu"
        open(path, "w").write(src)
        r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", f"{d}/k.cubin", path],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
