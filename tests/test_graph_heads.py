"""The attention head split and merge folded into the projection GEMMs (graph/lower.py
``head_split``, ``folded_layout``; docs/graph.md "Head split and merge").

One compilation of a small self-attention graph with symbolic batch and sequence, odd
sizes (3 heads of 5, 11 input features): the Q, K and V projections' ``matmul -> add ->
reshape -> transpose`` are stacked into one GEMM stage writing ``(3, B, H, S, D)`` with
the bias as its epilogue (no stage, no temporary for the reshape or the transpose; q, k
and v zero-copy views of it), the output projection reads the merged heads in place;
results match numpy at batch 1 and 3, sequence 7 and 1.
"""
from __future__ import annotations

import numpy as np
import pytest

from polycomp import ir
from polycomp.graph import GraphBuilder, compile_graph
from polycomp.graph.lower import folded_layout, head_split

H, D, K = 3, 5, 11
N = H * D


def _graph(rng):
    """BERT's self-attention: three head-split projections of ``x`` (stacked into one
    GEMM, ``graph/rewrite.py`` ``stack_projections``), attention, the output projection
    reading the merged heads."""
    g = GraphBuilder("heads")
    x = g.input("x", ("B", "S", K))
    consts = []
    b, s = x.shape[:2]
    qkv = []
    for t in "qkv":
        w = g.constant(f"w{t}", rng.standard_normal((K, N)).astype(np.float32))
        bias = g.constant(f"b{t}", rng.standard_normal(N).astype(np.float32))
        consts += [w, bias]
        qkv.append(g.transpose(g.reshape(g.add(g.matmul(x, w), bias), shape=(b, s, H, D)),
                               dim0=1, dim1=2))
    wo = g.constant("wo", rng.standard_normal((N, K)).astype(np.float32))
    bo = g.constant("bo", rng.standard_normal(K).astype(np.float32))
    p = g.attention(*qkv, scale=0.5, causal=False)   # (B, H, S, D): its own group
    merged = g.reshape(g.transpose(p, dim0=1, dim1=2), shape=(b, s, N))
    return g.build(g.add(g.matmul(merged, wo), bo)), (*consts, wo, bo)


def _reference(x, wq, bq, wk, bk, wv, bv, wo, bo):
    b, s, _ = x.shape
    q, k, v = ((x @ w + c).reshape(b, s, H, D).transpose(0, 2, 1, 3)
               for w, c in ((wq, bq), (wk, bk), (wv, bv)))
    t = 0.5 * q @ k.transpose(0, 1, 3, 2)
    e = np.exp(t - t.max(-1, keepdims=True))
    p = (e / e.sum(-1, keepdims=True)) @ v
    return p.transpose(0, 2, 1, 3).reshape(b, s, N) @ wo + bo


def _stores(step) -> set[str]:
    """The arrays the step's kernel writes (its stages' buffers)."""
    names: set[str] = set()
    ir.walk(step.fn.func.body,
            lambda n: names.add(n.buffer.name) if isinstance(n, ir.Store) else None)
    return names


@pytest.fixture(scope="module")
def compiled():
    rng = np.random.default_rng(7)
    graph, consts = _graph(rng)
    return compile_graph(graph, "cpu"), [np.asarray(c.const).copy() for c in consts]


def test_head_split_and_merge_have_no_stage(compiled):
    cg, _ = compiled
    split = [s for s in cg.steps if s.folded == "split"]
    merge = [s for s in cg.steps if s.folded and s.folded != "split"]
    assert len(split) == 1 and len(merge) == 1, cg.explain()
    hs = head_split(split[0].group, split[0].outputs)
    # q, k and v stacked: one GEMM writing (3, B, H, S, D), each part a zero-copy view
    assert hs is not None and hs.parts == 3 and hs.heads == H and hs.dim == D
    views = [s for s in cg.steps if s.fn is None]
    assert [s.group.nodes[0].op for s in views] == ["select"] * 3, cg.explain()
    assert sum(s.fn is not None for s in cg.steps) == 3   # projection, attention, output
    # the projection writes the head layout straight from its GEMM: only the product
    # and its bias epilogue store, no reshape / transpose stage or temporary
    st = _stores(split[0])
    assert not any("reshape" in n or "transpose" in n for n in st), st
    assert any("matmul" in n for n in st) and any("add" in n for n in st), st
    # the output projection reads the attention output through the layout's index map
    folded = folded_layout(merge[0].group, merge[0].outputs)
    assert {n.op for n in folded} == {"reshape", "transpose"}
    st = _stores(merge[0])
    assert not any("reshape" in n or "transpose" in n for n in st), st
    text = cg.explain()
    assert "head split folded into the GEMM" in text
    assert "read in place by the GEMM's operand" in text


@pytest.mark.parametrize("batch, seq", [(1, 7), (3, 7), (3, 1)])
def test_folded_heads_match_numpy(compiled, batch, seq):
    cg, consts = compiled
    x = np.random.default_rng(batch * 10 + seq).standard_normal((batch, seq, K)).astype(
        np.float32)
    got = cg(x)
    np.testing.assert_allclose(got, _reference(x.astype(np.float64), *consts),
                               rtol=1e-4, atol=1e-4)


def test_fold_off_keeps_the_stages(monkeypatch):
    """``POLYCOMP_HEAD_FOLD=0``: the former lowering (a stage per layout operator)."""
    from polycomp.graph.lower import group_kernel
    from polycomp.graph.partition import partition
    monkeypatch.setenv("POLYCOMP_HEAD_FOLD", "0")
    graph, _ = _graph(np.random.default_rng(0))
    part = partition(graph)
    kinds = [group_kernel(part, g).folded for g in part.groups if g.kind != "view"]
    assert kinds and not any(kinds)


def _fused_qkv(rng):
    """GPT-2's ``c_attn``: rows ``view(B*S, K)``, one ``addmm`` to ``3*H*D`` columns,
    ``view(B, S, 3*H*D)``, ``split`` into q, k, v; k and v split into heads, q returned
    as it is."""
    g = GraphBuilder("qkv")
    x = g.input("x", ("B", "S", K))
    b, s = x.shape[:2]
    w = g.constant("w", rng.standard_normal((K, 3 * N)).astype(np.float32))
    bias = g.constant("b", rng.standard_normal(3 * N).astype(np.float32))
    rows = g.reshape(x, shape=(-1, K))
    full = g.reshape(g.add(g.matmul(rows, w), bias), shape=(b, s, 3 * N))
    q, k, v = (g.slice(full, axis=2, start=t * N, end=(t + 1) * N) for t in range(3))
    heads = [g.transpose(g.reshape(t, shape=(b, s, H, D)), dim0=1, dim1=2) for t in (k, v)]
    return g.build(q, *heads), (w, bias)


def test_fused_qkv_projection_is_split_and_folded():
    from polycomp.graph.rewrite import split_projections
    rng = np.random.default_rng(3)
    graph, (w, bias) = _fused_qkv(rng)
    wa, ba = np.asarray(w.const).copy(), np.asarray(bias.const).copy()
    assert split_projections(graph) == 1
    ops = [n.op for n in graph.nodes]
    assert ops.count("matmul") == 3 and "slice" not in ops, ops
    assert w not in graph.constants and bias not in graph.constants
    cg = compile_graph(graph, "cpu")
    # k and v (both split into heads) stacked into one GEMM; q, returned flat, its own
    split = [s for s in cg.steps if s.folded == "split"]
    assert len(split) == 1 and split[0].group.nodes[-1].output.shape[0] == 2, cg.explain()
    for batch, seq in ((1, 7), (3, 7)):
        x = np.random.default_rng(batch).standard_normal((batch, seq, K)).astype(np.float32)
        full = x.astype(np.float64) @ wa + ba
        want = [full[..., :N]] + [full[..., t * N:(t + 1) * N].reshape(
            batch, seq, H, D).transpose(0, 2, 1, 3) for t in (1, 2)]
        for got, ref in zip(cg(x), want):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_batch_one_rows_read_in_place():
    """Constant batch 1 (``dynamic=False``): the stacked projection takes its rows as the
    2-d ``(S, K)`` reshape and reads them where they lie (no pack of ``x``: one copy per
    call less); the results match numpy."""
    rng = np.random.default_rng(11)
    g = GraphBuilder("heads1")
    x = g.input("x", (1, 7, K))
    ws = [rng.standard_normal(s).astype(np.float32) for _ in "qk" for s in ((K, N), (N,))]
    outs = [g.transpose(g.reshape(g.add(g.matmul(x, g.constant(f"w{t}", ws[2 * t])),
                                        g.constant(f"b{t}", ws[2 * t + 1])),
                                  shape=(1, 7, H, D)), dim0=1, dim1=2) for t in range(2)]
    cg = compile_graph(g.build(*outs), "cpu")
    (step,) = [s for s in cg.steps if s.folded == "split"]
    assert step.arg_shapes[step.group.nodes[0].inputs[0]] == (7, K), cg.explain()
    assert not any(n.startswith("t_x_pk") for n in _stores(step)), _stores(step)
    xv = rng.standard_normal((1, 7, K)).astype(np.float32)
    for t, got in enumerate(cg(xv)):
        ref = (xv.astype(np.float64) @ ws[2 * t] + ws[2 * t + 1]).reshape(1, 7, H, D)
        np.testing.assert_allclose(got, ref.transpose(0, 2, 1, 3), rtol=1e-4, atol=1e-4)
