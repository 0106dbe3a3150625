"""Calls of built kernels with bad arguments get clear errors; ``out=`` that aliases an
input gives the right answer; a temporary that cannot be allocated is a
ResourceLimitError, not a crash (issue #14)."""
import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import build
from polycomp.errors import ArgumentError, ResourceLimitError, ShapeMismatchError

N, M = pc.sym("N M")


@pc.tensor_expr
def transpose1(X: pc.Tensor[(N, N), "float32"]):
    return pc.compute((N, N), lambda i, j: X[j, i] + 1.0, name="Y")


@pc.tensor_expr
def widen(X: pc.Tensor[(N,), "float32"]):
    return pc.compute((N, M), lambda i, j: X[i] * 2.0, name="Z")


@pc.tensor_expr
def outer_max(a: pc.Tensor[(N,), "float32"]):
    """A temporary of N*N elements that no loop contracts (read in two orders)."""
    T = pc.compute((N, N), lambda i, j: a[i] * a[j], name="T")
    i = pc.reduce_axis(N, "i")
    C = pc.compute((N,), lambda j: pc.max(T[i, j], axis=i), name="C")
    k = pc.reduce_axis(N, "k")
    S = pc.compute((N,), lambda j: pc.sum(T[j, k], axis=k), name="S")
    return pc.compute((N,), lambda j: S[j] + C[j], name="R")


TARGETS = ["c", "cpu-avx2"]


@pytest.mark.parametrize("target", TARGETS)
def test_out_aliasing_an_input_reads_the_callers_values(target):
    f = build(transpose1, target)
    x = np.arange(49, dtype=np.float32).reshape(7, 7)
    ref = x.T + 1.0
    f(x, out=[x])
    np.testing.assert_array_equal(x, ref)


@pytest.mark.parametrize("kw, message", [
    (dict(M=3.7), "size M must be an integer, got 3.7"),
    (dict(M="5"), "size M must be an integer, got '5'"),
    (dict(M=True), "size M must be an integer, got True"),
    (dict(M=3, Q=1), "unknown size keyword Q=1"),
    (dict(M=2 ** 62), "more than a kernel can index"),
])
def test_size_keywords_validated(kw, message):
    f = build(widen, "c")
    with pytest.raises(ArgumentError, match=message.replace("(", r"\(")):
        f(np.ones(3, np.float32), **kw)


def test_output_larger_than_memory_is_a_resource_error():
    f = build(widen, "c")
    with pytest.raises(ResourceLimitError, match="more than this machine's memory"):
        f(np.ones(3, np.float32), M=2 ** 50)


@pytest.mark.parametrize("out, error, message", [
    ([], ArgumentError, "must hold 1 array"),
    ([None], ArgumentError, r"out\[0\] must be a numpy array"),
    (5, ArgumentError, "out= must be a list"),
    ([np.zeros((3, 3), np.float32)], ShapeMismatchError, "of shape"),
    ([np.zeros((4, 4), np.float64)], ShapeMismatchError, "float32"),
])
def test_bad_out(out, error, message):
    f = build(transpose1, "c")
    with pytest.raises(error, match=message):
        f(np.ones((4, 4), np.float32), out=out)


def test_read_only_out_rejected(tmp_path):
    f = build(transpose1, "c")
    ro = np.zeros((4, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        f(np.ones((4, 4), np.float32), out=[ro])
    path = tmp_path / "m.dat"
    np.zeros((4, 4), np.float32).tofile(path)
    mm = np.memmap(path, dtype=np.float32, mode="r", shape=(4, 4))
    with pytest.raises(ArgumentError, match="read-only"):
        f(np.ones((4, 4), np.float32), out=[mm])


def test_single_array_out_accepted():
    f = build(transpose1, "c")
    o = np.empty((3, 3), np.float32)
    x = np.arange(9, dtype=np.float32).reshape(3, 3)
    assert f(x, out=o) is o
    np.testing.assert_array_equal(o, x.T + 1.0)


@pytest.mark.parametrize("target", TARGETS)
def test_failed_temporary_allocation_is_an_error(target):
    f = build(outer_max, target)
    a = np.random.default_rng(0).random(5).astype(np.float32)
    T = np.outer(a, a)
    np.testing.assert_allclose(f(a), T.sum(1) + T.max(0), rtol=1e-6)
    with pytest.raises(ResourceLimitError, match="could not be allocated"):
        f(np.ones(2 ** 21, np.float32))     # T would need 16 TiB
    np.testing.assert_allclose(f(a), T.sum(1) + T.max(0), rtol=1e-6)   # flag cleared


def test_repeated_calls_skip_no_check():
    """After a checked call the kernel remembers its arrays' signature and skips the
    checks for calls of the same kind (hw/cpu/build.py ``_Signature``); every call that
    differs still gets them: another size, an aliasing or overlapping ``out``, a
    strided input, a read-only ``out``, another dtype."""
    from polycomp.errors import DTypeError
    f = build(transpose1, "c")
    x = np.arange(49, dtype=np.float32).reshape(7, 7)
    o = np.empty((7, 7), np.float32)
    for _ in range(2):      # the first call records, the second takes the short path
        assert f(x, out=[o]) is o
        np.testing.assert_array_equal(o, x.T + 1.0)
    assert f._signature is not None
    y = np.arange(25, dtype=np.float32).reshape(5, 5)       # another N
    o5 = np.empty((5, 5), np.float32)
    f(y, out=[o5])
    np.testing.assert_array_equal(o5, y.T + 1.0)
    z = x.copy()
    f(z, out=[z])                                          # out is the input
    np.testing.assert_array_equal(z, x.T + 1.0)
    buf = np.arange(60, dtype=np.float32)
    inp, out = buf[:49].reshape(7, 7), buf[11:60].reshape(7, 7)   # partly overlapping
    ref = inp.T + 1.0
    f(inp, out=[out])
    np.testing.assert_array_equal(out, ref)
    wide = np.arange(98, dtype=np.float32).reshape(7, 14)[:, ::2]  # strided input
    f(wide, out=[o])
    np.testing.assert_array_equal(o, wide.T + 1.0)
    f(x, out=[o])
    ro = np.zeros((7, 7), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        f(x, out=[ro])
    with pytest.raises(DTypeError, match="float32"):
        f(x.astype(np.float64), out=[o])
    with pytest.raises(ShapeMismatchError, match="of shape"):
        f(x, out=[np.empty((7, 7), np.float64)])
    f(x, out=o)                                           # one array, not a list
    np.testing.assert_array_equal(o, x.T + 1.0)
