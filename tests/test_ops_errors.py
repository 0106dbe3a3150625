"""Misused operators raise a PolycompError subclass naming the operator and the
caller's line (not a line inside the operator library)."""
import pytest

import polycomp as pc
from polycomp.errors import DSLError, DTypeError, ShapeMismatchError
from polycomp.frontend import ops

N, M, K = pc.sym("N M K")


def _trace(fn, **types):
    return pc.Kernel(fn, "bad", types).graph


@pytest.mark.parametrize("fn,types,err,words", [
    (lambda a, b: ops.add(a, b), dict(a=pc.Tensor[(N, M)], b=pc.Tensor[(N, K)]),
     ShapeMismatchError, "cannot broadcast shapes (N, M) and (N, K)"),
    (lambda a, b: ops.matmul(a, b), dict(a=pc.Tensor[(N, K)], b=pc.Tensor[(M, N)]),
     ShapeMismatchError, "matmul(): extents do not match"),
    (lambda a: ops.matmul(a, a), dict(a=pc.Tensor[(N,)]), ShapeMismatchError,
     "matmul() needs 2-d tensors"),
    (lambda a: ops.softmax(a, axis=2), dict(a=pc.Tensor[(N, M)]), ShapeMismatchError,
     "softmax(): axis 2 is out of range"),
    (lambda a: ops.gelu(a), dict(a=pc.Tensor[(N, M), "int32"]), DTypeError,
     "gelu() needs a float tensor"),
    (lambda a: ops.transpose(a, (0, 0)), dict(a=pc.Tensor[(N, M)]), ShapeMismatchError,
     "is not a permutation"),
    (lambda a, b: ops.bias_add(a, b, axis=0), dict(a=pc.Tensor[(N, M)], b=pc.Tensor[(M,)]),
     ShapeMismatchError, "bias_add(): extents do not match"),
    (lambda a, g: ops.layernorm(a, g, g), dict(a=pc.Tensor[(N, M)], g=pc.Tensor[(N,)]),
     ShapeMismatchError, "layernorm() gamma"),
    (lambda x, w: ops.conv2d_nchw(x, w, stride=0),
     dict(x=pc.Tensor[(N, M, K, K)], w=pc.Tensor[(N, M, 3, 3)]), DSLError,
     "stride and dilation must be >= 1"),
    (lambda a: ops.reduce_sum(a, axis=(1, 1)), dict(a=pc.Tensor[(N, M)]), ShapeMismatchError,
     "listed twice"),
    (lambda a: ops.add(2, 3), dict(a=pc.Tensor[(N, M)]), DSLError, "at least one Tensor"),
])
def test_operator_misuse_is_reported_at_the_callers_line(fn, types, err, words):
    with pytest.raises(err) as info:
        _trace(fn, **types)
    assert words in str(info.value)
    loc = info.value.location
    assert loc is not None and loc.filename == __file__, loc


def test_division_of_integers_is_refused():
    with pytest.raises(DTypeError, match="true division"):
        _trace(lambda a, b: ops.div(a, b), a=pc.Tensor[(N,), "int32"], b=pc.Tensor[(N,), "int32"])


def test_conv2d_output_extent_is_quasi_affine():
    """The symbolic output extent converts to isl and evaluates to the textbook formula."""
    from polycomp.affine import to_isl
    from polycomp.shapes import eval_int
    H, KH = pc.sym("H KH")
    e = ops.conv2d_output_extent(H, KH, stride=2, padding=1, dilation=2)
    assert "floor" in to_isl(e, {H: "H", KH: "KH"})
    for h in range(1, 20):
        for kh in range(1, 5):
            want = (h + 2 - 2 * (kh - 1) - 1) // 2 + 1
            assert eval_int(e, {"H": h, "KH": kh}) == want


def test_filter_larger_than_input_is_a_shape_error_on_every_path():
    """The conv2d output extent H - KH + 1 is 0 here: a ShapeMismatchError naming the
    extent, not an empty result or numpy's 'negative dimensions' ValueError."""
    import numpy as np

    from polycomp.driver import build, compile_kernel, interpret
    k = ops.OPS["conv2d"].kernel("float32")
    x = np.ones((1, 1, 2, 5), np.float32)
    for w in (np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 5, 3), np.float32)):
        for run in (build(k, "c"), lambda *a: interpret(k, *a),
                    lambda *a: interpret(compile_kernel(k, "cuda"), *a)):
            with pytest.raises(ShapeMismatchError, match=r"extent H - KH \+ 1 of 'conv2d' is"):
                run(x, w)
