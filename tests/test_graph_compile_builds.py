"""The gcc builds of a graph's kernels run beside its compilation
(``graph/compile.py`` :class:`KernelBuilds`; ``POLYCOMP_PARALLEL_BUILD=0``: one after
another): the same kernels and results either way, against numpy, and a build that fails
on the pool raises its error from ``compile_graph``."""
import numpy as np
import pytest

from polycomp.errors import BuildError
from polycomp.graph import GraphBuilder, compile_graph
from polycomp.hw.cpu.backend import CpuBackend


def _graph():
    g = GraphBuilder("three")
    x = g.input("x", ("B", 7))
    w = g.constant("w", np.linspace(-1, 1, 7 * 5, dtype=np.float32).reshape(7, 5))
    h = g.softmax(g.matmul(x, w), axis=-1)
    y = g.relu(g.add(g.transpose(h, dim0=0, dim1=1), g.constant("c", np.float32(0.1))))
    return g.build(y)


def _ref(x):
    w = np.linspace(-1, 1, 7 * 5, dtype=np.float32).reshape(7, 5)
    m = x @ w
    e = np.exp(m - m.max(-1, keepdims=True))
    return np.maximum((e / e.sum(-1, keepdims=True)).T + np.float32(0.1), 0)


@pytest.mark.parametrize("parallel", ["1", "0"])
def test_parallel_and_serial_builds_give_the_same_kernels(parallel, monkeypatch):
    monkeypatch.setenv("POLYCOMP_PARALLEL_BUILD", parallel)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")   # a pool of two build threads
    cg = compile_graph(_graph(), "c", fuse=False)  # one kernel per operator
    assert cg.kernel_count >= 3 and all(s.fn is not None and callable(s.fn) for s in cg.steps)
    rng = np.random.default_rng(0)
    for b in (1, 3):
        x = rng.standard_normal((b, 7)).astype(np.float32)
        np.testing.assert_allclose(cg(x), _ref(x), rtol=1e-5, atol=1e-6)


def test_a_build_failing_on_the_pool_raises_from_compile_graph(monkeypatch):
    monkeypatch.setenv("POLYCOMP_PARALLEL_BUILD", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    calls = []
    real = CpuBackend.load

    def load(self, ck):
        calls.append(ck.kernel.name)
        if len(calls) == 2:     # the first build runs in the caller; the second on the pool
            raise BuildError(f"gcc failed on {ck.kernel.name} (injected)")
        return real(self, ck)
    monkeypatch.setattr(CpuBackend, "load", load)
    with pytest.raises(BuildError, match="injected"):
        compile_graph(_graph(), "c", fuse=False)
