"""``cpu-parallel`` (scheduler/cpu/parallel.py) on a GEMM with its fused epilogue below a
batch loop of one iteration (the graph layer's ``matmul -> add -> gelu`` at batch 1 with
constant shapes): tree in, tree out -- the elementwise epilogue runs on the GEMM's
register tiles, the stage after it gets its own ``cpu_parallel`` mark beside the GEMM's
(before, the whole epilogue ran on one thread) -- and the kernel still matches numpy.
The epilogue ends in a transpose of the rows (as the head split of a Q/K/V projection
did before graph/lower.py ``head_split`` folded it): without it the graph layer lowers
the group over flattened rows (``row_flat``), which has no batch loop at all."""
import re

import numpy as np

from polycomp.driver import build, compile_kernel
from polycomp.graph import GraphBuilder
from polycomp.graph.lower import group_kernel
from polycomp.graph.partition import partition


def _ffn(batch, m=7, k=16, n=24):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    g = GraphBuilder("ffn")
    x = g.input("x", (batch, m, k))
    y = g.relu(g.add(g.matmul(x, g.constant("w", w)), g.constant("b", b)))
    y = g.transpose(y, dim0=1, dim1=2)
    part = partition(g.build(y))
    assert len(part.groups) == 1
    return group_kernel(part, part.groups[0]).kernel, w, b


def _parallel_marks(ck) -> list[str]:
    """The first band below each cpu_parallel mark of the final tree."""
    text = ck.schedule.get_root().to_str()
    return re.findall(r'mark: "cpu_parallel".*?schedule: "([^"]*)"', text, re.S)


def _check(kernel, w, b, shape, target="c"):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got = build(kernel, target)(x, w, b)
    want = np.maximum(x @ w + b, 0).transpose(0, 2, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_epilogue_beside_a_tiled_gemm_gets_its_own_parallel_mark():
    kernel, w, b = _ffn(1, 64, 256, 512)   # target cpu: the backbone is tiled
    below = _parallel_marks(compile_kernel(kernel, "cpu"))
    # the GEMM's mark first, the bias and relu on its register tiles (the epilogue chain:
    # at batch 1 they read the product at index 0 of the batch axis, which is their own
    # point), then the transpose below a mark of its own: no epilogue stage runs on one
    # thread
    assert "s_matmul" in below[0], below
    assert "s_add" in below[0] and "s_relu" in below[0], below
    rest = below[1:]
    assert rest and all("s_matmul" not in m for m in rest), below
    assert any("s_transpose" in m for m in rest), below
    _check(kernel, w, b, (1, 64, 256), "cpu")


def test_no_parallel_mark_on_a_loop_of_one_iteration():
    """Batch 1: the mark goes on the row loop ``i1``, not on ``i0`` (one iteration);
    a symbolic batch keeps the mark on ``i0``."""
    kernel, w, b = _ffn(1)
    below = _parallel_marks(compile_kernel(kernel, "c"))
    assert below and all("-> [(i0)]" not in m for m in below), below
    assert any("-> [(i1)]" in m for m in below), below
    _check(kernel, w, b, (1, 7, 16))
    sym, _, _ = _ffn("B")
    below = _parallel_marks(compile_kernel(sym, "c"))
    assert below and all("-> [(i0)]" in m for m in below), below
