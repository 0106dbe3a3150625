"""Contraction of temporaries must not cut a value carried between loop iterations.

Regression for issue #14 (silent wrong result 1): a 3-d stencil along the middle axis
read ``T0[b - 1]`` from a ``float T0[3]`` allocated inside the innermost loop, i.e.
uninitialised stack.  A temporary may be allocated inside a loop body only if that
loop contracts it (see :mod:`polycomp.hw.cpu.contract`)."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import polycomp as pc
from polycomp import ir
from polycomp.driver import build, compile_kernel, interpret

N, K = pc.sym("N K")


def _shift(axis: int):
    """``T2 = T0 + T0 shifted by one along ``axis`` (zero at the border)``, with
    ``T0 = 2 A`` a temporary that the fused schedule computes in the same loop nest."""
    shape = (K, 3, N)

    def shifted(T0, a, b, c):
        idx = [a, b, c]
        cond = idx[axis] >= 1
        idx[axis] = idx[axis] - 1
        return pc.select(cond, T0[idx[0], idx[1], idx[2]], 0.0) + T0[a, b, c]

    @pc.tensor_expr
    def shift3d(A: pc.Tensor[shape, "float32"]):
        T0 = pc.compute(shape, lambda a, b, c: A[a, b, c] * 2.0, name="T0")
        return pc.compute(shape, lambda a, b, c: shifted(T0, a, b, c), name="T2")

    return shift3d


def _reference(A: np.ndarray, axis: int) -> np.ndarray:
    t0 = (A * 2.0).astype(np.float32)
    out = t0.copy()
    sl_dst = [slice(None)] * 3
    sl_src = [slice(None)] * 3
    sl_dst[axis], sl_src[axis] = slice(1, None), slice(None, -1)
    out[tuple(sl_dst)] += t0[tuple(sl_src)]
    return out


def _first(out):
    return out[0] if isinstance(out, (list, tuple)) else out


def test_issue_example_exact():
    """The issue's (2, 3, 2) input: every element right on c and cpu-avx2."""
    A = (np.arange(12, dtype=np.float32).reshape(2, 3, 2) + 1)
    kernel = _shift(1)
    for target in ("c", "cpu-avx2"):
        np.testing.assert_array_equal(_first(build(kernel, target)(A)), _reference(A, 1),
                                      err_msg=target)


def _allocates_inside_loop_that_reads_shifted(body) -> bool:
    """True when some ``Allocate`` of ``T0`` sits inside the ``c1`` loop (the loop over
    the shifted axis), which is what the bug produced."""
    found = False

    def walk(node, loops):
        nonlocal found
        if isinstance(node, ir.Allocate) and node.buffer.name == "T0" and "c1" in loops:
            found = True
        if isinstance(node, ir.For):
            loops = loops + (node.var.name,)
        for child in ir.children(node):
            walk(child, loops)

    walk(body, ())
    return found


def test_temporary_not_allocated_inside_carrying_loop():
    ck = compile_kernel(_shift(1), "c")
    assert not _allocates_inside_loop_that_reads_shifted(ck.final_ir.body)


@pytest.mark.parametrize("target", ["c", "cpu-avx2"])
@given(axis=st.sampled_from([0, 1, 2]), k=st.sampled_from([1, 2, 5]),
       n=st.sampled_from([1, 3, 7, 17]), data=st.data())
def test_shift_along_every_axis(target, axis, k, n, data):
    A = np.asarray(data.draw(st.lists(st.floats(-4, 4, width=32), min_size=k * 3 * n,
                                      max_size=k * 3 * n)), dtype=np.float32)
    A = A.reshape(k, 3, n)
    kernel = _shift(axis)
    ref = _reference(A, axis)
    np.testing.assert_allclose(_first(build(kernel, target)(A)), ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_first(interpret(compile_kernel(kernel, "c"), A)), ref,
                               rtol=1e-6, atol=1e-6)
