"""Bad input gets a clear PolycompError subclass naming the construct and the user's line.

Each test writes a faulty kernel (or call) on a line carrying a ``# E:<tag>`` marker and
asserts (1) the exception type, (2) that the message names the construct, (3) that the
error's location is this file at the marked line.  No isl error may reach the user.
"""
import math
import os

import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import build, compile_kernel, interpret
from polycomp.errors import (
    DSLError,
    DTypeError,
    NonAffineIndexError,
    PolycompError,
    PolycompInternalError,
    ReduceAxisError,
    ShapeMismatchError,
    TargetError,
    UnknownSymbolError,
    UnsupportedConstructError,
)
from polycomp.frontend.dsl import placeholder

HERE = os.path.abspath(__file__)
N, M = pc.sym("N M")


def line_of(tag: str) -> int:
    """The line of this file carrying the marker ``# E:<tag>`` (exactly one)."""
    with open(HERE) as f:
        hits = [k for k, ln in enumerate(f, 1) if ln.rstrip().endswith(f"# E:{tag}")]
    assert len(hits) == 1, f"marker {tag} found {len(hits)} times"
    return hits[0]


def check(exc: PolycompError, tag: str, *words: str) -> None:
    """``exc`` is located at marker ``tag`` and its message names every word."""
    assert not isinstance(exc, PolycompInternalError), exc
    for w in words:
        assert w in exc.message, f"{w!r} not in {exc.message!r}"
    assert exc.location is not None, f"no location on {type(exc).__name__}: {exc}"
    assert os.path.abspath(exc.location.filename) == HERE
    assert exc.location.lineno == line_of(tag), (str(exc.location), line_of(tag))
    text = str(exc)
    assert "isl_" not in text and "Traceback" not in text
    assert f"test_errors.py:{line_of(tag)}" in text  # the printed message carries file:line


def compile_fails(kernel, exc_type, target="c"):
    with pytest.raises(exc_type) as ei:
        compile_kernel(kernel, target)
    return ei.value


# --------------------------------------------------------------------------- non-affine


def test_product_of_iterators_is_not_affine():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N, N), "float32"]):
        return pc.compute((N, N), lambda i, j: A[i * j, j])  # E:prod

    check(compile_fails(k, NonAffineIndexError), "prod", "i * j", "A", "not affine")


def test_float_index_read_from_a_tensor_is_rejected():
    # an integer index read from a tensor is a gather (tests/test_gather.py); a float
    # one is no index at all
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"], B: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: A[B[i]])  # E:indirect

    check(compile_fails(k, NonAffineIndexError), "indirect", "index 0 of 'A'", "integer")


def test_division_by_a_symbol_is_not_affine():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: A[i // N])  # E:divsym

    check(compile_fails(k, NonAffineIndexError), "divsym", "i // N", "division")


def test_symbol_times_iterator_is_not_affine():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N, M), "float32"]):
        return pc.compute((N, M), lambda i, j: A[i, (M * j) % M])  # E:symprod

    check(compile_fails(k, NonAffineIndexError), "symprod", "M * j")


def test_float_index_is_rejected():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: A[i * 0.5])  # E:floatidx

    check(compile_fails(k, NonAffineIndexError), "floatidx", "index 0", "'A'", "integer")


def test_tensor_as_index_is_rejected():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"], B: pc.Tensor[(N,), "int32"]):
        return pc.compute((N,), lambda i: A[B])  # E:tensoridx

    check(compile_fails(k, NonAffineIndexError), "tensoridx", "'B'", "index")


# --------------------------------------------------------------------------- shapes


def test_wrong_number_of_indices():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N, M), "float32"]):
        return pc.compute((N,), lambda i: A[i])  # E:nidx

    check(compile_fails(k, ShapeMismatchError), "nidx", "'A'", "2 dimension", "1 index")


def test_out_of_bounds_read_points_at_the_indexing_line():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute(
            (N,),
            lambda i: A[i] * 2.0
            + A[i + 1],  # E:oob
            name="B")

    e = compile_fails(k, ShapeMismatchError)
    check(e, "oob", "A[i + 1]", "out of bounds", "select()")


def test_out_of_bounds_constant_index():
    @pc.tensor_expr
    def k(A: pc.Tensor[(4, N), "float32"]):
        return pc.compute((N,), lambda j: A[4, j])  # E:oobconst

    check(compile_fails(k, ShapeMismatchError), "oobconst", "A[4, j]", "out of bounds")


def test_guarded_read_is_in_bounds():
    # the same access under a select() guard is legal (padding): no error, right values
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: pc.select(i + 1 < N, A[i + 1], 0.0))

    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(interpret(k, x), [1, 2, 3, 4, 0])


def test_compute_function_arity_mismatch():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N, M), "float32"]):
        return pc.compute((N, M), lambda i: A[i, 0])  # E:arity

    check(compile_fails(k, ShapeMismatchError), "arity", "2-d shape", "1 index")


def test_non_positive_extent():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((0,), lambda i: A[i])  # E:zero

    check(compile_fails(k, ShapeMismatchError), "zero", "extent", ">= 1", "0")


def _add_kernel():
    @pc.tensor_expr
    def add(A: pc.Tensor[(N,), "float32"], B: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: A[i] + B[i])
    return add


def test_runtime_wrong_rank():
    f = build(_add_kernel(), "c")
    x = np.zeros(3, np.float32)
    with pytest.raises(ShapeMismatchError) as ei:
        f(np.zeros((3, 3), np.float32), x)  # E:rank
    check(ei.value, "rank", "'A'", "1 dimension", "(3, 3)")


def test_runtime_inconsistent_symbol():
    f = build(_add_kernel(), "c")
    with pytest.raises(ShapeMismatchError) as ei:
        f(np.zeros(3, np.float32), np.zeros(4, np.float32))  # E:incons
    check(ei.value, "incons", "N", "'B'", "4")


def test_runtime_wrong_derived_extent_in_interpreter():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"], B: pc.Tensor[(2 * N,), "float32"]):
        return pc.compute((N,), lambda i: A[i] + B[2 * i + 1])

    with pytest.raises(ShapeMismatchError) as ei:
        interpret(k, np.zeros(3, np.float32), np.zeros(5, np.float32))  # E:derived
    check(ei.value, "derived", "'B'", "(6,)", "(5,)")


def test_runtime_wrong_argument_count():
    with pytest.raises(ShapeMismatchError) as ei:
        interpret(_add_kernel(), np.zeros(3, np.float32))  # E:argc
    check(ei.value, "argc", "2 input", "got 1")


# --------------------------------------------------------------------------- unknown symbols


def test_string_dimension_is_unknown_symbol():
    with pytest.raises(UnknownSymbolError) as ei:
        pc.Tensor[("N",), "float32"]  # E:strdim
    check(ei.value, "strdim", "'N'", "polycomp.sym")


def test_iterator_of_another_compute_is_unknown():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        leaked = []
        B = pc.compute((N,), lambda i: leaked.append(i) or A[i])
        return pc.compute((N,), lambda j: B[j] + A[leaked[0]])  # E:leak

    check(compile_fails(k, UnknownSymbolError), "leak", "'i'", "neither")


def test_two_symbols_with_one_name():
    N2 = pc.sym("N")

    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"], B: pc.Tensor[(N2,), "float32"]):  # E:twoN
        return pc.compute((N,), lambda i: A[i])

    # the kernel's location is its `def` line
    e = compile_fails(k, UnknownSymbolError)
    assert "two different symbols" in e.message and "'N'" in e.message
    assert e.location.filename == HERE and e.location.lineno == line_of("twoN") - 1


def test_reduce_extent_using_an_iterator():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N, N), "float32"]):
        return pc.compute((N,), lambda i: pc.sum(A[i, 0], axis=pc.reduce_axis(i)))  # E:tri

    check(compile_fails(k, UnknownSymbolError), "tri", "reduce axis extent", "'i'")


def test_runtime_symbol_not_inferable():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((M,), lambda j: A[0] + 1.0)

    with pytest.raises(UnknownSymbolError) as ei:
        interpret(k, np.zeros(3, np.float32))  # E:infer
    check(ei.value, "infer", "M", "keyword")
    np.testing.assert_array_equal(interpret(k, np.ones(3, np.float32), M=2), [2, 2])


# --------------------------------------------------------------------------- reduce axes


def test_reduce_axis_outside_a_reduction():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        r = pc.reduce_axis(N, "r")
        return pc.compute((N,), lambda i: A[r])  # E:outside

    check(compile_fails(k, ReduceAxisError), "outside", "'r'", "outside a reduction")


def test_unnamed_reduce_axis_is_described_by_its_line():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        r = pc.reduce_axis(N)  # E:unnamed_axis
        return pc.compute((N,), lambda i: A[r])  # E:unnamed_use

    e = compile_fails(k, ReduceAxisError)
    check(e, "unnamed_use", "outside a reduction", f"test_errors.py:{line_of('unnamed_axis')}")


def test_reduction_nested_in_an_expression():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        r = pc.reduce_axis(N, "r")
        return pc.compute((N,), lambda i: pc.sum(A[r], axis=r) + A[i])  # E:nested

    check(compile_fails(k, ReduceAxisError), "nested", "whole body", "own stage")


def test_axis_reduced_twice():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        r = pc.reduce_axis(N, "r")
        return pc.compute((1,), lambda i: pc.sum(pc.sum(A[r], axis=r), axis=r))  # E:twice

    check(compile_fails(k, ReduceAxisError), "twice", "'r'", "reduced twice")


def test_axis_listed_twice():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        r = pc.reduce_axis(N, "r")
        return pc.compute((1,), lambda i: pc.sum(A[r], axis=[r, r]))  # E:listed

    check(compile_fails(k, ReduceAxisError), "listed", "'r'", "listed twice")


def test_reduction_without_axis():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((1,), lambda i: pc.sum(A[i]))  # E:noaxis

    check(compile_fails(k, ReduceAxisError), "noaxis", "axis=")


def test_iterator_as_reduce_axis():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: pc.sum(A[i], axis=i))  # E:iteraxis

    check(compile_fails(k, ReduceAxisError), "iteraxis", "reduce_axis()")


def test_reduction_of_a_whole_tensor():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        r = pc.reduce_axis(N, "r")
        return pc.compute((1,), lambda i: pc.sum(A, axis=r))  # E:wholesum

    check(compile_fails(k, ReduceAxisError), "wholesum", "whole tensor", "'A'")


# --------------------------------------------------------------------------- dtypes


def test_unknown_dtype_in_annotation():
    with pytest.raises(DTypeError) as ei:
        pc.Tensor[(N,), "float99"]  # E:dtype
    check(ei.value, "dtype", "'float99'", "float32")


def test_unknown_dtype_in_cast():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: pc.cast(A[i], "float128"))  # E:cast

    check(compile_fails(k, DTypeError), "cast", "'float128'")


def test_unsupported_dtype_operation():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "int32"]):
        return pc.compute((N,), lambda i: pc.exp(A[i]))  # E:expint

    check(compile_fails(k, DTypeError), "expint", "exp()", "float", "int32")


def test_true_division_of_integers():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "int32"]):
        return pc.compute((N,), lambda i: A[i] / 2)  # E:truediv

    check(compile_fails(k, DTypeError), "truediv", "'/'", "'//'")


def test_sum_of_bools():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        r = pc.reduce_axis(N, "r")
        return pc.compute((1,), lambda i: pc.sum(A[r] > 0.0, axis=r))  # E:boolsum

    check(compile_fails(k, DTypeError), "boolsum", "bool", "cast()")


def test_runtime_wrong_dtype():
    f = build(_add_kernel(), "c")
    x = np.zeros(3, np.float32)
    with pytest.raises(DTypeError) as ei:
        f(np.zeros(3, np.float64), x)  # E:rtdtype
    check(ei.value, "rtdtype", "'A'", "float32", "float64")


# --------------------------------------------------------------------------- unsupported


def test_slice_is_unsupported():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: A[1:])  # E:slice

    check(compile_fails(k, UnsupportedConstructError), "slice", "slices", "'A'")


def test_item_assignment_is_unsupported():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        A[0] = 1.0  # E:setitem
        return pc.compute((N,), lambda i: A[i])

    check(compile_fails(k, UnsupportedConstructError), "setitem", "assignment", "immutable")


def test_iterating_a_tensor_is_unsupported():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        total = sum(A)  # E:iter
        return pc.compute((N,), lambda i: A[i] + total)

    check(compile_fails(k, UnsupportedConstructError), "iter", "iterating", "'A'")


def test_python_if_on_an_expression_is_unsupported():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: A[i] if A[i] > 0.0 else 0.0)  # E:pyif

    check(compile_fails(k, UnsupportedConstructError), "pyif", "truth value", "select()")


def test_math_function_on_an_expression_is_unsupported():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: math.exp(A[i]))  # E:math

    check(compile_fails(k, UnsupportedConstructError), "math", "not a Python number")


def test_numpy_function_on_an_expression_is_unsupported():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: np.exp(A[i]))  # E:npexp

    check(compile_fails(k, UnsupportedConstructError), "npexp", "np.exp", "polycomp")


def test_numpy_scalars_still_build_expressions():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: np.float32(2.0) * A[i] + np.float32(1.0))

    np.testing.assert_array_equal(interpret(k, np.arange(3, dtype=np.float32)), [1, 3, 5])


def test_python_range_over_a_symbol_is_unsupported():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((1,), lambda i: A[0] + len(range(N)))  # E:range

    check(compile_fails(k, UnsupportedConstructError), "range", "range()")


# --------------------------------------------------------------------------- other DSL misuse


def test_compute_outside_a_kernel():
    with pytest.raises(DSLError) as ei:
        pc.compute((4,), lambda i: i)  # E:outsidek
    check(ei.value, "outsidek", "@tensor_expr")


def test_reserved_symbol_name():
    with pytest.raises(DSLError) as ei:
        pc.sym("mod")  # E:reserved
    check(ei.value, "reserved", "'mod'")


def test_returning_an_input_is_an_error():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):  # E:retin
        return A

    e = compile_fails(k, DSLError)
    assert "returns its input" in e.message
    assert e.location.filename == HERE and e.location.lineno == line_of("retin") - 1


def test_unknown_target():
    with pytest.raises(TargetError) as ei:
        compile_kernel(_add_kernel(), "tpu")
    assert "'tpu'" in ei.value.message and "cuda" in ei.value.message


def test_placeholder_dims_are_checked():
    with pytest.raises(ShapeMismatchError) as ei:
        placeholder((N, -3), "float32", "X")  # E:negdim
    check(ei.value, "negdim", "-3")



def test_python_equality_in_select_is_caught():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: pc.select(i == 0, A[i], 0.0))  # E:eqeq

    check(compile_fails(k, UnsupportedConstructError), "eqeq", "Python bool", "polycomp.eq")


def test_eq_and_ne_build_conditions():
    @pc.tensor_expr
    def k(A: pc.Tensor[(N,), "float32"]):
        return pc.compute((N,), lambda i: pc.select(pc.eq(i % 2, 0), A[i], 0.0)
                          + pc.select(pc.ne(i, 1), 0.0, 10.0))

    np.testing.assert_array_equal(interpret(k, np.arange(5, dtype=np.float32)),
                                  [0, 10, 2, 0, 4])
