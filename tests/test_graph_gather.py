"""Gathers in the graph layer (issue 27 item 1): the ``index`` and ``gather`` graph ops,
the torch.fx importer's ``embedding`` / ``nn.Embedding``, ``index_select``,
``torch.gather`` and tensor indexing with int32 / int64 index tensors (negative indices
counted from the end, as torch does), and the ONNX importer's ``Gather`` /
``GatherElements``: against numpy / eager torch on odd, prime and extent-1 shapes, several
sizes from one compilation (``dynamic=True``), with repeated and boundary indices; an index
out of range raises ``IndexError`` (``IndexOutOfRangeError``) as eager torch does."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from polycomp.errors import DTypeError, IndexOutOfRangeError
from polycomp.graph import GraphBuilder, compile_graph
from polycomp.graph.dynamo import polycomp_backend


class Recorder:
    def __init__(self, strict=True):
        self.reports, self.strict = [], strict

    def __call__(self, gm, example_inputs):
        fn = polycomp_backend(gm, example_inputs, options={"target": "c",
                                                           "strict": self.strict})
        self.reports.append(fn.polycomp_report)
        return fn

    @property
    def eager(self):
        return [line for r in self.reports for line in r.eager]


def _ids(g, hi, shape, lo=0, dtype=torch.int64):
    t = torch.randint(lo, hi, shape, generator=g, dtype=dtype)
    flat = t.view(-1)
    flat[0] = hi - 1                          # boundary indices
    flat[-1] = lo
    if flat.numel() > 2:
        flat[1] = flat[0]                     # repeated
    return t


def _check(f, sizes, make):
    torch._dynamo.reset()
    rec = Recorder()
    cf = torch.compile(f, backend=rec, dynamic=True)
    g = torch.Generator().manual_seed(0)
    for n in sizes:
        args = make(n, g)
        with torch.no_grad():
            ref, got = f(*args), cf(*args)
        ref = ref if isinstance(ref, tuple) else (ref,)
        got = got if isinstance(got, tuple) else (got,)
        for r, o in zip(ref, got, strict=True):
            assert o.dtype == r.dtype and o.shape == r.shape, (o.dtype, r.dtype, o.shape,
                                                               r.shape)
            torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-5)
    assert not rec.eager, rec.eager
    assert all(r.compiled == r.pieces for r in rec.reports)
    return cf


# --------------------------------------------------------------------- builder level

def test_builder_index_and_gather_against_numpy():
    g = GraphBuilder("gat")
    w = g.input("w", (13, "D"))
    ids = g.input("ids", ("B", "S"), "int64")
    x = g.input("x", ("B", 7, 5))
    i = g.input("i", ("S", 1), "int32")
    j = g.input("j", (3,), "int64")
    e = g.index(w, ids, axes=(0,))                          # embedding
    adj = g.index(x, i, j, axes=(1, 2), wrap=True)          # x[:, i, j]
    apart = g.index(x, i, j, axes=(0, 2), wrap=True)        # x[i, :, j]
    k = g.input("k", ("B", 7, 2), "int64")
    ge = g.gather(x, k, axis=2)                             # torch.gather(x, 2, k)
    cg = compile_graph(g.build(e, adj, apart, ge), target="c")
    rng = np.random.default_rng(0)
    for b, s, d in ((2, 5, 3), (1, 1, 1), (3, 11, 4)):
        wa = rng.standard_normal((13, d)).astype(np.float32)
        ia = rng.integers(0, 13, (b, s))
        ia.reshape(-1)[0] = 12
        xa = rng.standard_normal((b, 7, 5)).astype(np.float32)
        ii = rng.integers(-min(b, 7), min(b, 7), (s, 1)).astype(np.int32)
        jj = np.array([-1, 0, 4])
        ka = rng.integers(0, 5, (b, 7, 2))
        oe, oa, op, og = cg(wa, ia, xa, ii, jj, ka)
        np.testing.assert_array_equal(oe, wa[ia])
        np.testing.assert_array_equal(oa, xa[:, ii, jj])
        np.testing.assert_array_equal(op, xa[ii, :, jj])
        np.testing.assert_array_equal(og, np.take_along_axis(xa, ka, 2))
        bad = ia.copy()
        bad.reshape(-1)[-1] = 13
        with pytest.raises(IndexOutOfRangeError):
            cg(wa, bad, xa, ii, jj, ka)
        with pytest.raises(IndexOutOfRangeError):           # no wrap: -1 is out of range
            cg(wa, -np.ones_like(ia), xa, ii, jj, ka)


def test_builder_rejects_float_indices():
    g = GraphBuilder("bad")
    with pytest.raises(DTypeError, match="int32 or int64"):
        g.index(g.input("w", (3, 4)), g.input("f", (2,)), axes=(0,))


# --------------------------------------------------------------------- torch.fx / Dynamo

@pytest.mark.slow      # Dynamo traces and gcc builds: ~5 s or more on a loaded 2-core host
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_embedding_function_and_module(dtype):
    emb = nn.Embedding(17, 6)

    def f(ids, w):
        return F.embedding(ids, w) * 2, emb(ids) + 1
    _check(f, [(2, 5), (1, 1), (3, 7)],
           lambda n, g: (_ids(g, 17, n, dtype=dtype), torch.randn(23, 4, generator=g)
                         [:17].contiguous()))


@pytest.mark.slow
def test_index_select_gather_and_tensor_indexing():
    def f(x, i, j, k, p):
        return (torch.index_select(x, 1, j), x.index_select(0, p.view(-1)),
                torch.gather(x, 2, k), x.gather(1, k),
                x[i], x[i, :, j[:1]], x[:, i, j[:1]], x[i, 2:5], x[:, 1:, j])

    def make(n, g):
        b, s = n
        x = torch.randn(b, 7, 5, generator=g)
        i = _ids(g, b, (s, 1), lo=-b)           # negative: counted from the end
        j = _ids(g, 5, (3,))
        k = _ids(g, 5, (b, 7, 2))
        return x, i, j, k, _ids(g, b, (s, 1))
    _check(f, [(2, 3), (1, 1), (3, 5)], make)


def test_out_of_range_raises_index_error_as_eager():
    def f(ids, w):
        return F.embedding(ids, w)
    torch._dynamo.reset()
    cf = torch.compile(f, backend=Recorder(), dynamic=True)
    w = torch.randn(5, 3)
    ok = torch.tensor([[0, 4, 2]])
    torch.testing.assert_close(cf(ok, w), f(ok, w))
    for bad in (torch.tensor([[0, 5, 2]]), torch.tensor([[-1, 0, 1]])):
        with pytest.raises(IndexError):
            f(bad, w)
        with pytest.raises(IndexError):
            cf(bad, w)


@pytest.mark.parametrize("f, words", [
    (lambda ids, w: F.embedding(ids, w, max_norm=1.0) + 1, "max_norm"),
    (lambda ids, w: w[ids[0], None] + 1, "mixing index tensors with None"),
])
def test_what_stays_eager_says_why(f, words):
    torch._dynamo.reset()
    rec = Recorder(strict=False)
    cf = torch.compile(f, backend=rec, dynamic=False)
    w = torch.randn(9, 4)
    ids = torch.tensor([[1, 8, 1]])
    torch.testing.assert_close(cf(ids, w.clone()), f(ids, w.clone()))
    assert any(words in line for line in rec.eager), rec.eager


# --------------------------------------------------------------------- ONNX

def test_onnx_gather_and_gather_elements():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from polycomp.graph.onnx_import import import_onnx
    w = np.random.default_rng(0).standard_normal((11, 5)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["W", "ids"], ["e"], axis=0),
             helper.make_node("GatherElements", ["x", "j"], ["ge"], axis=1),
             helper.make_node("Gather", ["x", "k"], ["gk"], axis=1)]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "S"]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 7]),
         helper.make_tensor_value_info("j", TensorProto.INT64, ["B", 3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("e", "ge", "gk")],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array(-1, np.int64), "k")])
    cg = compile_graph(import_onnx(helper.make_model(graph)), "c")
    assert onnx is not None
    rng = np.random.default_rng(1)
    for b, s in ((2, 3), (1, 1), (3, 5)):
        ids = rng.integers(-11, 11, (b, s))
        x = rng.standard_normal((b, 7)).astype(np.float32)
        j = rng.integers(-7, 7, (b, 3))
        e, ge, gk = cg(ids, x, j)
        np.testing.assert_array_equal(e, w[ids])
        np.testing.assert_array_equal(ge, np.take_along_axis(x, j % 7, 1))
        np.testing.assert_array_equal(gk, x[:, -1])


def test_onnx_export_of_an_embedding_model_imports_and_matches():
    import io
    import warnings

    onnx = pytest.importorskip("onnx")

    from polycomp.graph.onnx_import import import_onnx

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.proj = nn.Embedding(31, 8), nn.Linear(8, 4)

        def forward(self, ids):
            return torch.relu(self.proj(self.emb(ids)))
    torch.manual_seed(0)
    m = M().eval()
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.randint(0, 31, (2, 5)),), f, dynamo=False,
                          input_names=["ids"], output_names=["y"], opset_version=17,
                          dynamic_axes={"ids": {0: "B", 1: "S"}, "y": {0: "B", 1: "S"}})
    graph = import_onnx(onnx.load_from_string(f.getvalue()), "emb")
    assert graph.inputs[0].dtype == "int64"
    cg = compile_graph(graph, "c")
    for b, s in ((2, 3), (1, 1), (3, 7)):
        ids = torch.randint(0, 31, (b, s))
        ids[0, 0] = 30
        with torch.no_grad():
            torch.testing.assert_close(cg(ids), m(ids), rtol=1e-5, atol=1e-5)
