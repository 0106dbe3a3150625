"""The graph runtime's per-shape call plans (graph/runtime.py ``ShapePlan``) and the
per-shape one-thread decision (hw/cpu/build.py ``ONE_THREAD_BELOW_S``): a call of a
shape seen before reuses the evaluated sizes and the prepared kernel calls, yet gives
numpy's results at every shape (a second shape never reuses the first one's values),
keeps every guard on its inputs and the kernels' run-time flags."""
import numpy as np
import pytest

from polycomp.errors import ArgumentError, IndexOutOfRangeError, ShapeMismatchError
from polycomp.graph import GraphBuilder, compile_graph
from polycomp.graph.ir import dim
from polycomp.hw.cpu.build import ONE_THREAD_BELOW_S, PreparedCall


def _mlp(fuse: bool = False):
    g = GraphBuilder("mlp")
    x = g.input("x", ("B", "S", 7))
    w = g.constant("w", np.random.default_rng(1).standard_normal((7, 5)).astype(np.float32))
    b = g.constant("b", np.linspace(-1, 1, 5, dtype=np.float32))
    h = g.relu(g.add(g.matmul(x, w), b))
    r = g.reshape(h, shape=(dim("B"), -1))    # a view step in the chain
    y = g.add(r, r)
    return compile_graph(g.build(y), "cpu", fuse=fuse), w.const, b.const


def _ref(x, w, b):
    return (2 * np.maximum(x @ w + b, 0).reshape(x.shape[0], -1)).astype(np.float32)


@pytest.mark.parametrize("fuse", [False, True])
def test_shapes_alternate_and_match_numpy(fuse):
    cg, w, b = _mlp(fuse)
    rng = np.random.default_rng(0)
    shapes = [(3, 5), (3, 5), (1, 1), (2, 13), (3, 5), (1, 1), (7, 2)]
    for bb, s in shapes:
        x = rng.standard_normal((bb, s, 7)).astype(np.float32)
        np.testing.assert_allclose(cg(x), _ref(x, w, b), rtol=1e-5, atol=1e-5)
    assert len(cg._plans) == len(set(shapes))


def test_guards_hold_on_the_cached_path():
    cg, w, b = _mlp()
    x = np.ones((2, 3, 7), np.float32)
    cg(x)
    cg(x)                                      # the cached plan
    with pytest.raises(ArgumentError, match="must be float32"):
        cg(x.astype(np.float64))
    with pytest.raises(ShapeMismatchError, match="input 'x'"):
        cg(np.ones((2, 3, 6), np.float32))
    with pytest.raises(ShapeMismatchError):
        cg(x, x)
    # a non-contiguous input of a cached shape: same values as its copy
    big = np.random.default_rng(2).standard_normal((2, 7, 3)).astype(np.float32)
    xt = big.transpose(0, 2, 1)
    assert not xt.flags.c_contiguous
    np.testing.assert_allclose(cg(xt), _ref(np.ascontiguousarray(xt), w, b), rtol=1e-5)


@pytest.mark.parametrize("first_out", [False, True])
def test_out_arrays_take_the_cached_path(first_out):
    """``out=`` calls reuse the shape's plan (recorded by a call with or without
    ``out=``), write the caller's array in place and keep its checks: shape, dtype,
    contiguity, count; a graph output that is its input is copied into ``out``."""
    cg, w, b = _mlp()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 7)).astype(np.float32)
    o = np.empty((2, 20), np.float32)
    assert (cg(x, out=o) if first_out else cg(x)) is not None
    assert len(cg._plans) == 1
    for _ in range(2):
        x = rng.standard_normal((2, 4, 7)).astype(np.float32)
        assert cg(x, out=o) is o
        np.testing.assert_allclose(o, _ref(x, w, b), rtol=1e-5)
    assert len(cg._plans) == 1
    for bad in (np.empty((2, 21), np.float32), np.empty((2, 20), np.float64),
                np.empty((20, 2), np.float32).T):
        with pytest.raises(ShapeMismatchError, match=r"out\[0\] must be a C-contiguous"):
            cg(x, out=bad)
    with pytest.raises(ArgumentError, match="out= array"):
        cg(x, out=[o, o])
    ro = np.empty((2, 20), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ArgumentError, match=r"out\[0\] is read-only"):
        cg(x, out=ro)
    # an out= array that is the input: the checked path (the kernel copies the input)
    sq = GraphBuilder("sq")
    xs = sq.input("x", (3, 3))
    mm = compile_graph(sq.build(sq.matmul(xs, xs)), "cpu")
    a3 = rng.standard_normal((3, 3)).astype(np.float32)
    mm(a3)
    want = a3.astype(np.float64) @ a3
    assert mm(a3, out=a3) is a3
    np.testing.assert_allclose(a3, want, rtol=1e-5, atol=1e-6)
    g = GraphBuilder("pair")
    xi = g.input("x", (3,))
    both = compile_graph(g.build(xi, g.relu(xi)), "cpu")
    a = np.array([-1, 0, 2], np.float32)
    o1, o2 = np.empty(3, np.float32), np.empty(3, np.float32)
    for _ in range(2):
        both(a, out=[o1, o2])
        np.testing.assert_array_equal(o1, a)
        np.testing.assert_array_equal(o2, np.maximum(a, 0))


def test_kernel_flags_checked_on_the_cached_path():
    g = GraphBuilder("emb")
    w = g.input("w", (13, "D"))
    ids = g.input("ids", ("B",), "int64")
    cg = compile_graph(g.build(g.index(w, ids, axes=(0,))), target="cpu")
    wa = np.arange(13 * 3, dtype=np.float32).reshape(13, 3)
    ia = np.array([0, 12, 5])
    for _ in range(2):
        np.testing.assert_array_equal(cg(wa, ia), wa[ia])
    with pytest.raises(IndexOutOfRangeError):
        cg(wa, np.array([0, 13, 5]))           # same shape: the cached plan
    np.testing.assert_array_equal(cg(wa, ia), wa[ia])


def test_one_thread_decision_per_shape():
    g = GraphBuilder("mm")
    x = g.input("x", ("M", 64))
    w = g.constant("w", np.full((64, 64), 1 / 64, np.float32))
    cg = compile_graph(g.build(g.relu(g.matmul(x, w))), "cpu")
    small = np.ones((2, 64), np.float32)
    large = np.ones((4096, 64), np.float32)
    for a in (small, large, small):
        np.testing.assert_allclose(cg(a), np.maximum(a @ w.const, 0), rtol=1e-5)
    prepared = {sig[0][0][0]: [c.kernel for c in plan.calls if c.kernel is not None]
                for sig, plan in cg._plans.items()}
    assert all(isinstance(k, PreparedCall) for ks in prepared.values() for k in ks)
    # 2 rows: 16 kflop, 17 kB (~1 us): one thread; 4096 rows: 34 Mflop, 2 MB (~0.4 ms): both
    assert [k.one_thread for k in prepared[2]] == [True]
    assert [k.one_thread for k in prepared[4096]] == [False]
    text = cg.call_plan(small)
    assert "M=2" in text and "-> 1 thread" in text
    assert "-> all threads" in cg.call_plan(large)
    assert ONE_THREAD_BELOW_S > 0


def test_one_thread_call_restores_the_thread_count():
    """A step run on one thread leaves the OpenMP runtime's count as it found it (torch
    can share the runtime: its ``get_num_threads`` would read 1 afterwards, and every
    later kernel follows torch's count)."""
    from polycomp.hw.cpu.build import openmp_controls
    g = GraphBuilder("small")
    x = g.input("x", ("M", 8))
    cg = compile_graph(g.build(g.relu(x)), "cpu")
    a = np.ones((2, 8), np.float32)
    cg(a)
    cg(a)                                # the cached path, one thread
    plan = next(iter(cg._plans.values()))
    kernels = [c.kernel for c in plan.calls if c.kernel is not None]
    assert kernels and all(k.one_thread for k in kernels)
    controls = kernels[0].fn.openmp or openmp_controls(None)
    assert controls is not None
    before = controls.get()
    controls.set(2)
    try:
        cg(a)
        assert controls.get() == 2
    finally:
        controls.set(before)


@pytest.mark.slow
def test_dynamic_torch_sizes_alternate():
    """``dynamic=True``: one compilation, sizes alternating; a size read as a number
    (``x.shape[-1] ** 0.5``, guarded per shape) and a returned shape stay right."""
    import torch
    from torch import nn

    import polycomp.graph.dynamo  # noqa: F401  (registers the backend)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 6)

        def forward(self, x):
            h = torch.relu(self.lin(x)) / x.shape[1] ** 0.5
            return h + x, h.shape

    torch.manual_seed(0)
    m = M().eval()
    cm = torch.compile(m, backend="polycomp", dynamic=True)
    with torch.no_grad():
        for b, s in ((2, 3), (4, 5), (2, 3), (1, 7), (4, 5), (2, 3)):
            x = torch.randn(b, s, 6)
            got, shape = cm(x)
            want, wshape = m(x)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
            assert tuple(shape) == tuple(wshape)
