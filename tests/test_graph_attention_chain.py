"""``scaled_dot_product_attention`` through the graph layer as the fused attention chain
(``attention`` node, ``chain`` group, ``scheduler/chain`` fuses its kernel): the group's
kernel really is fused (a chain plan), and the results match torch on odd / prime /
extent-1 / symbolic shapes, with additive and bool masks of several broadcast shapes,
``is_causal`` and ``scale``."""
import numpy as np
import pytest
import torch
import torch.fx
import torch.nn.functional as F

from polycomp.driver import compile_kernel
from polycomp.graph import compile_graph
from polycomp.graph.fx import import_fx, import_module
from polycomp.graph.lower import group_kernel
from polycomp.graph.partition import partition
from polycomp.scheduler.chain.plan import chain_plans


class _Sdpa(torch.nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.kw = kw

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **self.kw)


class _MaskedSdpa(_Sdpa):
    def forward(self, q, k, v, m):  # type: ignore[override]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, **self.kw)


def _graph(kw, shapes, dtypes=None):
    mod = (_MaskedSdpa if len(shapes) > 3 else _Sdpa)(**kw)
    if not dtypes:
        return import_module(mod, shapes)
    gm = torch.fx.symbolic_trace(mod.eval())
    ex = [torch.zeros((1,) * len(s), dtype=getattr(torch, d)) for s, d in zip(shapes, dtypes)]
    return import_fx(gm, input_shapes=shapes, example_inputs=ex, name="sdpa")


def _chain_groups(graph):
    part = partition(graph)
    return part, [g for g in part.groups if g.kind == "chain"]


def test_plain_sdpa_is_one_chain_group_and_its_kernel_is_fused():
    graph = _graph({}, [("B", 3, "L", 5), ("B", 3, "S", 5), ("B", 3, "S", 7)])
    part, chains = _chain_groups(graph)
    assert len(part.groups) == 1 and len(chains) == 1
    assert [n.op for n in chains[0].nodes] == ["attention"]
    ck = compile_kernel(group_kernel(part, chains[0]).kernel, "c")
    assert chain_plans(ck.state).programs, ck.state.remarks


def test_masked_sdpa_kernel_is_fused_with_a_batch_mask():
    """A (B, 1, L, S) additive mask is expanded to (B, H, L, S) so that the chain reads
    it by its iterators; the attention group is still fused."""
    graph = _graph({}, [("B", 2, "L", 4), ("B", 2, "S", 4), ("B", 2, "S", 4),
                        ("B", 1, "L", "S")])
    part, chains = _chain_groups(graph)
    assert len(chains) == 1
    ck = compile_kernel(group_kernel(part, chains[0]).kernel, "c")
    assert chain_plans(ck.state).programs, ck.state.remarks


def _ref(q, k, v, mask, kw):
    args = [torch.from_numpy(a) for a in (q, k, v)]
    if mask is not None:
        args.append(torch.from_numpy(mask))
    return F.scaled_dot_product_attention(*args, **kw).numpy()


MASKS = {  # name -> (symbolic mask shape, concrete shape maker (b, h, l, s))
    "none": (None, None),
    "rows_bool": (("B", 1, 1, "S"), lambda b, h, l, s: (b, 1, 1, s)),
    "full_add": (("B", 1, "L", "S"), lambda b, h, l, s: (b, 1, l, s)),
    "shared_add": (("L", "S"), lambda b, h, l, s: (l, s)),
    "per_head_bool": (("B", "H", "L", "S"), lambda b, h, l, s: (b, h, l, s)),
}


@pytest.mark.slow
@pytest.mark.parametrize("mask", list(MASKS))
def test_sdpa_chain_matches_torch_on_odd_and_extent_one_shapes(mask):
    sym, make = MASKS[mask]
    kw = {"scale": 0.3} if mask == "shared_add" else {}
    shapes = [("B", "H", "L", 3), ("B", "H", "S", 3), ("B", "H", "S", 5)]
    dtypes = None
    if sym is not None:
        shapes.append(sym)
        if "bool" in mask:
            dtypes = ["float32"] * 3 + ["bool"]
    cg = compile_graph(_graph(kw, shapes, dtypes), target="c")
    rng = np.random.default_rng(0)
    for b, h, l, s in ((2, 3, 7, 11), (1, 1, 1, 1), (1, 2, 13, 1), (3, 1, 5, 97)):
        q, k, v = (rng.standard_normal(sh).astype(np.float32)
                   for sh in ((b, h, l, 3), (b, h, s, 3), (b, h, s, 5)))
        m = None
        if make is not None:
            ms = make(b, h, l, s)
            if "bool" in mask:
                m = rng.random(ms) > 0.3
                m.reshape(-1, ms[-1])[0] = False   # a row with every key masked: 0
            else:
                m = np.where(rng.random(ms) > 0.3, rng.standard_normal(ms),
                             -np.inf).astype(np.float32)
        got = cg(q, k, v) if m is None else cg(q, k, v, m)
        ref = _ref(q, k, v, m, kw)
        np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-5)


@pytest.mark.slow
def test_sdpa_causal_with_longer_keys_and_float64():
    """is_causal (top-left aligned, L != S) in the chain; float64 keeps the attention
    node (not fused by the CPU chain kernel, which takes float32) and matches torch."""
    for d in ("float32", "float64"):
        shapes = [(2, "H", "L", 4), (2, "H", "S", 4), (2, "H", "S", 4)]
        cg = compile_graph(_graph({"is_causal": True}, shapes, [d] * 3), target="c")
        rng = np.random.default_rng(1)
        for h, l, s in ((3, 5, 9), (1, 1, 1), (2, 17, 17)):
            q, k, v = (rng.standard_normal(sh).astype(d)
                       for sh in ((2, h, l, 4), (2, h, s, 4), (2, h, s, 4)))
            got = cg(q, k, v)
            assert got.dtype == np.dtype(d)
            np.testing.assert_allclose(got, _ref(q, k, v, None, {"is_causal": True}),
                                       rtol=2e-4 if d == "float32" else 1e-10, atol=1e-6)


def test_sdpa_nan_input_propagates_only_to_its_rows():
    """A NaN in q makes its row NaN, as the math definition (numpy) does; torch's fused
    CPU kernel returns finite values for that row (its running max skips the NaN): this
    is the one documented difference from eager."""
    cg = compile_graph(_graph({}, [(1, 2, "L", 4), (1, 2, "L", 4), (1, 2, "L", 4)]),
                       target="c")
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 2, 6, 4)).astype(np.float32) for _ in range(3))
    q[0, 1, 2, 0] = np.nan
    got = cg(q, k, v)
    s = q @ k.transpose(0, 1, 3, 2) * 0.5
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        ref = (e / e.sum(-1, keepdims=True)) @ v
    np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-5, equal_nan=True)
    assert np.isnan(got[0, 1, 2]).all() and not np.isnan(got[0, 0]).any()
    assert np.isnan(got).sum() == 4


class _Block(torch.nn.Module):
    """Heads split from a projection, SDPA with a padding (row) mask, heads merged, a
    second projection: BERT's self-attention shape."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)
        self.out = torch.nn.Linear(8, 8)

    def forward(self, x, m):
        h = self.qkv(x)
        q, k, v = (h[:, :, 8 * j:8 * j + 8].reshape(2, -1, 2, 4).transpose(1, 2)
                   for j in range(3))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        return self.out(a.transpose(1, 2).reshape(2, -1, 8)) + x


def test_attention_group_takes_no_prologue_or_epilogue():
    """The projections keep their epilogues (bias, head split) and prologues (head
    merge); the chain group is the attention node alone; the result matches torch."""
    torch.manual_seed(0)
    blk = _Block().eval()
    graph = import_module(blk, [(2, "S", 8), (2, 1, 1, "S")])
    part, chains = _chain_groups(graph)
    assert len(chains) == 1 and [n.op for n in chains[0].nodes] == ["attention"]
    assert chains[0].nodes[0].attrs["rowless"]
    owner = {n.output: g for g in part.groups for n in g.nodes}
    att = chains[0].nodes[0]
    for v in att.inputs[:3]:   # q, k, v: written by their projection's group
        assert any(n.op == "matmul" for n in owner[v].nodes)


@pytest.mark.slow
def test_attention_block_matches_torch():
    torch.manual_seed(0)
    blk = _Block().eval()
    graph = import_module(blk, [(2, "S", 8), (2, 1, 1, "S")])
    cg = compile_graph(graph, target="c")
    x = torch.randn(2, 5, 8)
    m = torch.zeros(2, 1, 1, 5)
    m[1, ..., 3:] = float("-inf")
    with torch.no_grad():
        ref = blk(x, m).numpy()
    np.testing.assert_allclose(cg(x.numpy(), m.numpy()), ref, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("dtype,mdtype", [("float16", "float16"), ("bfloat16", "bool")])
def test_low_precision_sdpa_computes_in_float32_and_matches_torch(dtype, mdtype):
    """float16 / bfloat16 q, k, v (a ``model.half()`` transformer) are compiled, not run
    eagerly: cast to float32, the float32 attention chain (float mask cast too, a bool mask
    as it is), the result rounded once to the low dtype -- as torch's CPU kernels compute
    (float accumulation).  Agrees with float32 attention of the same values to the low
    dtype's rounding and with torch's own low-precision kernel."""
    td = getattr(torch, dtype)
    shapes = [("B", 2, "L", 8), ("B", 2, "L", 8), ("B", 2, "L", 8), ("B", 1, 1, "L")]
    graph = _graph({}, shapes, [dtype] * 3 + [mdtype])
    assert graph.outputs[0].dtype == dtype
    assert [n.op for n in graph.nodes if n.op == "attention"] == ["attention"]
    cg = compile_graph(graph, target="c")
    g = torch.Generator().manual_seed(3)
    for b, s in ((2, 7), (1, 1)):
        q, k, v = (torch.randn(b, 2, s, 8, generator=g).to(td) for _ in range(3))
        keep = torch.ones(b, 1, 1, s, dtype=torch.bool)
        keep[-1, ..., s // 2 + 1:] = False
        m = keep if mdtype == "bool" else torch.zeros(b, 1, 1, s).masked_fill(
            ~keep, float("-inf")).to(td)
        got = cg(q, k, v, m)
        assert got.dtype == td
        exact = F.scaled_dot_product_attention(
            q.float(), k.float(), v.float(),
            attn_mask=m if mdtype == "bool" else m.float())
        ulp = torch.finfo(td).eps  # (one rounding of float32 values that may differ
        torch.testing.assert_close(got, exact.to(td), rtol=ulp, atol=1e-6)  # in ulps)
        eager = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        torch.testing.assert_close(got.float(), eager.float(),
                                   rtol=2e-2 if dtype == "bfloat16" else 2e-3, atol=2e-3)
