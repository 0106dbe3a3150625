"""Hostile but fair DSL input (issue #14): every case computes the right answer or ends
in a clear PolycompError subclass at the user's line — never a raw traceback, an
internal error or a silently wrong result."""
import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import build, compile_kernel, interpret
from polycomp.errors import (
    DSLError,
    DTypeError,
    ShapeMismatchError,
    UnsupportedConstructError,
    UserCodeError,
)

N = pc.sym("N")


def _elementwise(op, dtype="float32"):
    @pc.tensor_expr
    def kern(A: pc.Tensor[(N,), dtype]):
        return pc.compute((N,), lambda i: op(A[i]), name="out")
    return kern


def _kernel_from_source(body: str):
    ns: dict = {}
    exec(compile("import polycomp as pc\nN = pc.sym('N')\n@pc.tensor_expr\n"
                 "def kern(A: pc.Tensor[(N,), 'float32']):\n" + body, "<user>", "exec"), ns)
    return ns["kern"]


@pytest.mark.parametrize("name", ["floor", "mod", "min", "max", "exists", "infty", "NaN",
                                  "nan", "div", "é", "ceil", "rat"])
def test_any_lambda_parameter_name_works(name):
    """isl keywords and non-ASCII letters as index names (``NaN`` used to compile into
    a wrong result)."""
    k = _kernel_from_source(f"    return pc.compute((N,), lambda {name}: A[{name}] * 2.0 "
                            f"+ 1.0, name='out')\n")
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(build(k, "c")(x), x * 2 + 1)


@pytest.mark.parametrize("name", ["nan", "NaN", "INFINITY", "infty", "floor", "é"])
def test_symbols_isl_cannot_read_are_rejected(name):
    with pytest.raises(DSLError, match="symbol name"):
        pc.sym(name)


def test_sym_needs_a_string():
    with pytest.raises(DSLError, match="sym\\(\\) takes a string"):
        pc.sym(5)


def test_bool_dimension_rejected():
    with pytest.raises(ShapeMismatchError, match="got True"):
        pc.Tensor[(True,), "float32"]


def test_star_kwargs_lambda_rejected():
    with pytest.raises(DSLError, match="positional index"):
        compile_kernel(_kernel_from_source("    return pc.compute((N,), lambda **kw: 1.0)\n"),
                       "c")


def test_typo_is_the_users_error_at_the_users_line():
    k = _kernel_from_source("    return pc.compute((N,), lambda i: A[i] + undefined_name)\n")
    with pytest.raises(UserCodeError, match="NameError.*undefined_name") as e:
        compile_kernel(k, "c")
    assert e.value.location is not None and e.value.location.filename == "<user>"
    assert e.value.location.lineno == 5


@pytest.mark.parametrize("op, dtype, ref", [
    (lambda a: abs(a), "float32", np.abs),
    (lambda a: ~a, "int32", np.invert),
    (lambda a: ~a, "int8", np.invert),
    (lambda a: ~a, "int64", np.invert),
    (lambda a: a << 3, "int32", lambda x: x << 3),
    (lambda a: a >> 1, "int32", lambda x: x >> 1),
    (lambda a: a >> 2, "int64", lambda x: x >> 2),
    (lambda a: a ^ 3, "int32", lambda x: x ^ 3),
    (lambda a: a << 40, "int32", lambda x: np.left_shift(x, 40)),
])
def test_operators_follow_numpy(op, dtype, ref):
    info = np.iinfo(dtype) if dtype.startswith("int") else None
    if info is not None:
        x = np.array([0, 1, -1, 5, -7, info.max, info.min], dtype=dtype)
    else:
        x = np.array([0.0, 1.5, -2.5, -0.0], dtype=dtype)
    k = _elementwise(op, dtype)
    want = ref(x)
    for target in ("c", "cpu-avx2"):
        np.testing.assert_array_equal(build(k, target)(x), want, err_msg=target)
    np.testing.assert_array_equal(interpret(compile_kernel(k, "c"), x), want)


@pytest.mark.parametrize("op, dtype, error, message", [
    (lambda a: round(a), "float32", UnsupportedConstructError, "round"),
    (lambda a: a @ a, "float32", UnsupportedConstructError, "@"),
    (lambda a: a << 1, "float32", DTypeError, "integer or bool operands"),
    (lambda a: ~a, "float32", DTypeError, "~ needs"),
    (lambda a: a ** 0.5, "int32", DTypeError, "float base"),
    (lambda a: a + 2 ** 70, "int64", DTypeError, "does not fit int64"),
    (lambda a: a + 2 ** 63, "int64", DTypeError, "does not fit int64"),
    (lambda a: a + 1000, "int8", DTypeError, "does not fit int8"),
])
def test_operators_without_meaning_rejected(op, dtype, error, message):
    with pytest.raises(error, match=message):
        compile_kernel(_elementwise(op, dtype), "c")


@pytest.mark.parametrize("terms", [500, 2000])
def test_deep_expression_compiles(terms):
    def body(A, i):
        e = A[i]
        for _ in range(terms):
            e = e + A[i]
        return e

    @pc.tensor_expr
    def kern(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: body(A, i), name="out")
    np.testing.assert_array_equal(build(kern, "c")(np.ones(3, np.float32)),
                                  np.full(3, terms + 1, np.float32))
