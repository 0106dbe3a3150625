"""Linear layers over N-d inputs lowered as one GEMM over the flattened rows
(``graph/lower.py`` ``row_flat``): ``(*P, K) x (K, N)`` becomes ``(prod(P), K) x (K, N)``
with the fused epilogue (bias, gelu, residual, layernorm) in the same kernel and no batch
loop around the GEMM; checked against numpy on odd / prime / extent-1 / symbolic sizes."""
import math

import islpy as isl
import numpy as np
import pytest

from polycomp.graph import GraphBuilder, compile_graph
from polycomp.graph.lower import group_kernel, row_flat

RNG = np.random.default_rng(7)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _gelu(x):
    erf = np.vectorize(math.erf)
    return (0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))).astype(np.float32)


def _ln(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def _ffn(lead, k, n, layernorm=True):
    """``layernorm(gelu(x @ w + b) + r)``, ``x (*lead, k)``; returns graph and numpy ref."""
    g = GraphBuilder("rows")
    x = g.input("x", (*lead, k))
    r = g.input("r", (*lead, n))
    w, b = _f32(k, n), _f32(n)
    gam, bet = _f32(n), _f32(n)
    y = g.add(g.gelu(g.add(g.matmul(x, g.constant("w", w)), g.constant("b", b))), r)
    if layernorm:
        y = g.layernorm(y, g.constant("gam", gam), g.constant("bet", bet), eps=1e-5)

    def ref(xa, ra):
        h = _gelu(xa @ w + b) + ra
        return _ln(h, gam, bet) if layernorm else h
    return g.build(y), ref


def _backbone(cg):
    return next(s for s in cg.steps if any(n.op == "matmul" for n in s.group.nodes))


@pytest.mark.parametrize("lead,k,n,binds", [
    (("B", "S"), 13, 7, [(1, 1), (3, 5), (2, 17)]),            # symbolic, odd / prime
    ((4, 11), 17, 5, [()]),                                     # integer 3-d
    ((1, 7), 9, 3, [()]),                                       # extent-1 batch
    (("A", 3, "S"), 5, 11, [(2, 1), (1, 6)]),                   # 4-d, mixed
])
def test_rows_match_numpy_one_kernel(lead, k, n, binds):
    graph, ref = _ffn(lead, k, n)
    cg = compile_graph(graph, "c")
    assert cg.kernel_count == 1 and len(cg.steps) == 1      # epilogue + layernorm fused
    st = _backbone(cg)
    assert {v.name for v in st.arg_shapes} == {"x", "r", cg.graph.outputs[0].name}
    assert "over flattened rows" in cg.explain()
    syms = [d for d in lead if isinstance(d, str)]
    for bind in binds:
        env = dict(zip(syms, bind))
        shape = tuple(env.get(d, d) for d in lead)
        xa, ra = _f32(*shape, k), _f32(*shape, n)
        np.testing.assert_allclose(cg(xa, ra), ref(xa, ra), rtol=1e-4, atol=1e-4)


def test_kernel_has_no_batch_loop():
    """The traced kernel's statements are 2-D rows x columns (plus the contraction): no
    batch dimension; ``B*S`` is one parameter."""
    graph, _ = _ffn(("B", "S"), 8, 6)
    cg = compile_graph(graph, "c")
    gk = group_kernel(cg.partition, _backbone(cg).group)
    m = gk.kernel.polyhedral_model()
    dims = {st.name: st.domain.dim(isl.dim_type.set) for st in m.statements}
    assert dims["s_matmul_update"] == 3 and dims["s_matmul_init"] == 2
    assert all(d <= 3 for d in dims.values())
    assert [str(e) for e in gk.params.exprs.values()] == ["B*S"]


def test_softmax_last_axis_by_positive_index():
    g = GraphBuilder("sm")
    x = g.input("x", ("B", "S", 6))
    w = _f32(6, 5)
    y = g.softmax(g.matmul(x, g.constant("w", w)), axis=2)
    cg = compile_graph(g.build(y), "c")
    assert _backbone(cg).arg_shapes and cg.kernel_count == 1
    xa = _f32(3, 7, 6)
    h = xa @ w
    e = np.exp(h - h.max(-1, keepdims=True))
    np.testing.assert_allclose(cg(xa), e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("case", ["transpose_prologue", "row_broadcast", "seq_operand",
                                  "softmax_axis1"])
def test_not_row_wise_keeps_nd_kernel(case):
    """Groups that mix rows (a transpose, a ``(B, 1, N)`` or ``(S, N)`` operand, a softmax
    over a leading axis) are not flattened, and stay correct."""
    g = GraphBuilder(case)
    x = g.input("x", ("B", "S", 4)) if case != "transpose_prologue" else None
    w = _f32(4, 3)
    wc = g.constant("w", w)
    xa = _f32(2, 5, 4)
    if case == "transpose_prologue":
        xt = g.input("xt", ("B", 4, "S"))
        y = g.matmul(g.transpose(xt, dim0=1, dim1=2), wc)
        args, want = (np.ascontiguousarray(xa.transpose(0, 2, 1)),), xa @ w
    elif case == "row_broadcast":
        c = g.input("c", ("B", 1, 3))
        y = g.add(g.matmul(x, wc), c)
        ca = _f32(2, 1, 3)
        args, want = (xa, ca), xa @ w + ca
    elif case == "seq_operand":
        p = _f32(5, 3)
        y = g.add(g.matmul(x, wc), g.constant("p", p))
        args, want = (xa,), xa @ w + p
    else:
        y = g.softmax(g.matmul(x, wc), axis=1)
        h = xa @ w
        e = np.exp(h - h.max(1, keepdims=True))
        args, want = (xa,), e / e.sum(1, keepdims=True)
    graph = g.build(y)
    cg = compile_graph(graph, "c")
    st = _backbone(cg)
    assert row_flat(st.group) is None and not st.arg_shapes
    np.testing.assert_allclose(cg(*args), want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_linear_through_torch_dynamic():
    """``nn.Linear`` + gelu + residual + LayerNorm imported with symbolic (B, S): one
    kernel over flattened rows; it and ``torch.compile(dynamic=True)`` match eager at
    several (batch, seq) sizes."""
    torch = pytest.importorskip("torch")
    from polycomp.graph.fx import import_module

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(12, 12)
            self.ln = torch.nn.LayerNorm(12)

        def forward(self, x):
            return self.ln(torch.nn.functional.gelu(self.fc(x)) + x)

    torch.manual_seed(0)
    m = Block().eval()
    cg = compile_graph(import_module(m, [("B", "S", 12)], "blk"), "c")
    assert cg.kernel_count == 1 and _backbone(cg).arg_shapes
    for b, s in ((1, 1), (3, 7), (2, 13)):
        x = torch.randn(b, s, 12)
        with torch.no_grad():
            torch.testing.assert_close(cg(x), m(x), rtol=1e-4, atol=1e-5)
    cm = torch.compile(m, backend="polycomp", dynamic=True, options={"strict": True})
    for b, s in ((2, 5), (3, 11), (1, 1)):
        x = torch.randn(b, s, 12)
        with torch.no_grad():
            torch.testing.assert_close(cm(x), m(x), rtol=1e-4, atol=1e-5)
