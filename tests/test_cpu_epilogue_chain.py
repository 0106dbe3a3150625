"""The GEMM epilogue as a chain (``scheduler/cpu/backbone_tile.py`` ``match_epilogue``
with ``before``): ``gelu(x @ w + b) + r`` lowered as one stage per operator runs every
stage after the product on each register tile, inside the product's one parallel loop
(tree: the stages' filters join the backbone's subtree, after the micro-kernel), and
matches numpy on odd / prime / symbolic shapes; a stage that reads the chain at
another point (a transpose) ends the chain."""
import math
import re

import numpy as np
import pytest

from polycomp.driver import compile_kernel
from polycomp.graph import GraphBuilder, compile_graph
from polycomp.graph.lower import group_kernel
from polycomp.graph.partition import partition

RNG = np.random.default_rng(3)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _graph(lead, k, n, transpose=False):
    w, b = _f32(k, n), _f32(n)
    g = GraphBuilder("chain")
    x = g.input("x", (*lead, k))
    r = g.input("r", (*lead, n))
    y = g.add(g.gelu(g.add(g.matmul(x, g.constant("w", w)), g.constant("b", b))), r)
    if transpose:
        y = g.transpose(y, dim0=-2, dim1=-1)
    return g.build(y), w, b


def test_chain_runs_on_each_register_tile_in_one_parallel_loop():
    graph, w, b = _graph((64,), 96, 131)
    part = partition(graph)
    (grp,) = [p for p in part.groups if p.kind != "view"]
    ck = compile_kernel(group_kernel(part, grp).kernel, "cpu")
    note = ck.notes["cpu-backbone-tile"][0]
    assert re.search(r"epilogue s_add, s_gelu, s_add_1 on each register tile", note), note
    tree = ck.schedule.get_root().to_str()
    # one cpu_parallel mark: no parallel pass over C after the product
    assert tree.count('mark: "cpu_parallel"') == 1, tree
    epi = tree[tree.index('mark: "cpu_microkernel"'):]
    assert all(f"s_{s}[" in epi for s in ("add", "gelu", "add_1"))


@pytest.mark.parametrize("lead,k,n,binds", [
    (("S",), 13, 7, [(1,), (9,)]),          # symbolic rows, primes
    ((1, 5), 17, 1, [()]),                  # extent-1 columns
    ((3, 11), 8, 33, [()]),                 # 3-d, rows flattened
])
def test_chain_matches_numpy(lead, k, n, binds):
    graph, w, b = _graph(lead, k, n)
    cg = compile_graph(graph, "cpu")
    syms = [d for d in lead if isinstance(d, str)]
    for bd in binds:
        env = dict(zip(syms, bd))
        shape = [env.get(d, d) for d in lead]
        x, r = _f32(*shape, k), _f32(*shape, n)
        want = _gelu(x.astype(np.float64) @ w + b) + r
        np.testing.assert_allclose(cg(x, r), want, rtol=1e-4, atol=1e-5)


def test_a_stage_reading_another_point_ends_the_chain():
    graph, w, b = _graph((2, 16), 24, 40, transpose=True)
    part = partition(graph)
    (grp,) = [p for p in part.groups if p.kind != "view"]
    ck = compile_kernel(group_kernel(part, grp).kernel, "cpu")
    note = ck.notes["cpu-backbone-tile"][0]
    assert "s_transpose" not in note.split("epilogue")[-1]
    x, r = _f32(2, 16, 24), _f32(2, 16, 40)
    want = (_gelu(x.astype(np.float64) @ w + b) + r).transpose(0, 2, 1)
    np.testing.assert_allclose(compile_graph(graph, "cpu")(x, r), want, rtol=1e-4, atol=1e-5)
