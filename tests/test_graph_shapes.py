"""polycomp.graph: builder, symbolic shape propagation, constraints, partition, runtime."""
import numpy as np
import pytest
import sympy

from polycomp.errors import ShapeMismatchError, UnsupportedOpError
from polycomp.graph import GraphBuilder, compile_graph, partition
from polycomp.graph.ir import dim
from polycomp.graph.runtime import plan_buffers

B, S = dim("B"), dim("S")


def test_view_keeps_relation_to_B_and_S():
    g = GraphBuilder("v")
    x = g.input("x", ("B", "S", 16))
    flat = g.reshape(x, shape=(B * S, 16))
    back = g.reshape(g.relu(flat), shape=(-1, S, 4, 4))
    graph = g.build(back)
    assert flat.shape == (B * S, 16)
    assert back.shape == (B, S, 4, 4)  # -1 solved as B*S*16 / (S*16)
    assert graph.constraints.recorded == []


def test_dim_equality_substitutes_and_is_guarded():
    g = GraphBuilder("eq")
    x = g.input("x", ("B", "S", 8))
    m = g.input("m", ("B", "T", 8))
    y = g.add(x, m)
    graph = g.build(y)
    assert y.shape == (B, S, 8) and m.shape == (B, S, 8)  # T := S
    cg = compile_graph(graph, "c")
    a = np.ones((2, 3, 8), np.float32)
    np.testing.assert_allclose(cg(a, a), 2 * a)
    with pytest.raises(ShapeMismatchError, match="input 'm'"):
        cg(a, np.ones((2, 4, 8), np.float32))


def test_mismatch_names_both_producers():
    g = GraphBuilder("bad")
    x = g.input("x", ("B", 8))
    w = g.constant("w", np.ones((8, 5), np.float32))
    h = g.matmul(x, w, name="proj")
    with pytest.raises(ShapeMismatchError) as e:
        g.add(h, g.relu(x, name="act"))
    msg = str(e.value)
    assert "matmul 'proj'" in msg and "relu 'act'" in msg and "5 != 8" in msg


def test_unknown_op():
    with pytest.raises(UnsupportedOpError, match="cumsum"):
        GraphBuilder().op("cumsum", GraphBuilder().input("x", (3,)))


def _mlp(H=16):
    rng = np.random.default_rng(0)
    g = GraphBuilder("mlp")
    x = g.input("x", ("B", "S", H))
    w = g.constant("w", rng.standard_normal((H, 2 * H)).astype(np.float32))
    gm = g.constant("gm", np.ones(2 * H, np.float32))
    bt = g.constant("bt", np.zeros(2 * H, np.float32))
    h = g.gelu(g.matmul(x, w))
    flat = g.reshape(h, shape=(-1, 2 * H))            # runtime view: B*S rows
    y = g.softmax(g.layernorm(flat, gm, bt), axis=-1)
    return g.build(y), w.const


def test_partition_and_runtime_one_compilation_many_lengths():
    graph, w = _mlp()
    part = partition(graph)
    assert [gr.kind for gr in part.groups] == ["backbone", "view", "reduce"]
    assert [n.op for n in part.groups[0].nodes] == ["matmul", "gelu"]
    dot = part.dot()
    assert dot.count("subgraph cluster_") == 3
    cg = compile_graph(graph, "c")
    import torch
    for b, s in ((1, 3), (2, 7), (3, 1)):
        x = np.random.default_rng(s).standard_normal((b, s, 16)).astype(np.float32)
        t = torch.nn.functional.gelu(torch.from_numpy(x) @ torch.from_numpy(w))
        t = torch.softmax(torch.nn.functional.layer_norm(t.reshape(-1, 32), (32,)), -1)
        np.testing.assert_allclose(cg(x), t.numpy(), rtol=1e-4, atol=1e-5)


def test_buffer_plan_reuses_slots():
    rng = np.random.default_rng(1)
    g = GraphBuilder("chain")
    x = g.input("x", ("N", 8))
    v = x
    for k in range(4):  # four unfused backbones: intermediates die one after another
        v = g.matmul(v, g.constant(f"w{k}", rng.standard_normal((8, 8)).astype(np.float32)))
    graph = g.build(v)
    cg = compile_graph(graph, "c")
    plan = plan_buffers(graph, cg.steps)
    assert len(plan.slot_of) == 3 and plan.nslots == 2
    xv = rng.standard_normal((5, 8)).astype(np.float32)
    ref = xv
    for c in graph.constants:
        ref = ref @ c.const
    np.testing.assert_allclose(cg(xv), ref, rtol=1e-4, atol=1e-5)
    assert cg.kernel_count == 1  # four identical groups, one build
    assert isinstance(sympy.Symbol("N", positive=True, integer=True), sympy.Symbol)


def test_docs_examples_run_and_explain_cli(tmp_path, capsys):
    import os
    import re

    from polycomp.cli import main
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "graph.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert blocks
    ns: dict = {}
    for b in blocks:
        exec(compile(b, "docs/graph.md", "exec"), ns)
    src = tmp_path / "g.py"
    src.write_text("import numpy as np\nfrom polycomp.graph import GraphBuilder\n"
                   "b = GraphBuilder('tiny')\nx = b.input('x', ('N', 8))\n"
                   "graph = b.build(b.softmax(b.relu(x)))\n")
    capsys.readouterr()
    assert main(["explain", str(src)]) == 0
    out = capsys.readouterr().out
    assert "g0 [reduce] relu -> softmax" in out and "subgraph cluster_0" in out
