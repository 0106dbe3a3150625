"""BERT / ViT / GPT-2 blocks through the torch.fx importer and Dynamo, against PyTorch
eager (fp32, rtol 1e-4) for several sequence lengths from one compilation; partitions
golden-tested; DLPack interop with torch and numpy, including ``out=``."""
import numpy as np
import pytest
import torch

from polycomp.graph import compile_graph
from polycomp.graph.fx import import_module
from polycomp.graph.models import MODELS

H, HEADS, FFN = 32, 4, 64


def _model(name):
    kw = {"max_seq": 16} if name == "gpt2" else {}
    return MODELS[name](H, HEADS, FFN, **kw)


@pytest.fixture(scope="module")
def compiled():
    out = {}
    for name in MODELS:
        m = _model(name)
        out[name] = (m, compile_graph(import_module(m, [("B", "S", H)], name), "c"))
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_eager(compiled, name, goldens):
    m, cg = compiled[name]
    for b, s in ((1, 3), (2, 8), (1, 13)):
        x = torch.randn(b, s, H)
        with torch.no_grad():
            ref = m(x)
        y = cg(x)
        assert isinstance(y, torch.Tensor)
        torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-5)
    assert cg.kernel_count < len(cg.graph.nodes) // 3
    goldens.expected(f"graph/{name}_partition.txt", cg.explain() + "\n")


def test_guards_reject_a_sequence_beyond_the_causal_mask(compiled):
    from polycomp.errors import ShapeMismatchError
    _, cg = compiled["gpt2"]
    with pytest.raises(ShapeMismatchError, match="shape constraint"):
        cg(torch.randn(1, 17, H))  # the mask buffer holds 16 positions
    with pytest.raises(ShapeMismatchError, match="input 'x'"):
        cg(torch.randn(1, 4, H + 1))


def test_dynamo_backend_one_compilation(capsys):
    import polycomp.graph.dynamo as dyn
    calls = []
    orig = dyn.polycomp_backend

    def counting(gm, ex, **kw):
        calls.append(1)
        return orig(gm, ex, **kw)
    m = _model("bert")
    cm = torch.compile(m, backend=counting, dynamic=True, options={"target": "c"})
    with torch.no_grad():
        for s in (4, 9):
            x = torch.randn(2, s, H)
            torch.testing.assert_close(cm(x), m(x), rtol=1e-4, atol=1e-5)
    assert len(calls) == 1
    assert "eagerly" not in capsys.readouterr().err

    class Partly(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x):
            h = torch.cumsum(torch.nn.functional.gelu(self.l1(x)), 1)  # cumsum: eager
            return torch.softmax(self.l2(h), -1)
    torch._dynamo.reset()
    p = Partly().eval()
    cp = torch.compile(p, backend="polycomp", dynamic=True, options={"target": "c"})
    with torch.no_grad():
        for s in (3, 6):
            x = torch.randn(2, s, 8)
            torch.testing.assert_close(cp(x), p(x), rtol=1e-4, atol=1e-6)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cumsum" in err[0] and "2 of 3 pieces" in err[0]


def test_dlpack_kernels_and_graphs_out():
    from polycomp.driver import build
    from polycomp.frontend import ops
    fn = build(ops.binary_kernel("add"), "c")
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    y = fn(a, b)
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, a + b)
    o = torch.empty(3, 4)
    assert fn(a, b, out=[o])[0] is o
    torch.testing.assert_close(o, a + b)
    on = np.empty((3, 4), np.float32)
    fn(a.numpy(), b, out=[on])
    np.testing.assert_allclose(on, (a + b).numpy(), rtol=1e-6)
    fn(a, b, out=[o[:, :]])  # a view of the caller's buffer is written zero-copy
    # compiled graph: torch in -> torch out, out= writes the caller's tensor
    from polycomp.graph import GraphBuilder
    g = GraphBuilder("sm")
    x = g.input("x", ("N", 4))
    cg = compile_graph(g.build(g.softmax(x)), "c")
    xt = torch.randn(5, 4)
    res = torch.empty(5, 4)
    assert cg(xt, out=res) is res
    torch.testing.assert_close(res, torch.softmax(xt, -1))
    assert isinstance(cg(xt.numpy()), np.ndarray)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_model_through_cuda_simulator(name):
    """Every group compiled for ``cuda`` and run by the GPU-semantics simulator (strict
    races/bounds checks), two sequence lengths from one compilation."""
    m = MODELS[name](16, 2, 32, **({"max_seq": 8} if name == "gpt2" else {}))
    cg = compile_graph(import_module(m, [("B", "S", 16)], name), "cuda", simulate=True)
    for s in (2, 5):
        x = torch.randn(1, s, 16)
        with torch.no_grad():
            torch.testing.assert_close(cg(x), m(x), rtol=1e-4, atol=1e-5)


def test_onnx_import_three_models():
    """torch -> ONNX (symbolic B, S) -> polycomp: the same blocks match eager."""
    import io
    import warnings

    import onnx

    from polycomp.graph.onnx_import import import_onnx
    for name in MODELS:
        m = _model(name)
        f = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(m, (torch.randn(2, 5, H),), f, dynamo=False, input_names=["x"],
                              output_names=["y"], opset_version=17,
                              dynamic_axes={"x": {0: "B", 1: "S"}, "y": {0: "B", 1: "S"}})
        graph = import_onnx(onnx.load_from_string(f.getvalue()), name)
        assert [str(d) for d in graph.inputs[0].shape] == ["B", "S", str(H)]
        cg = compile_graph(graph, "c")
        for s in (3, 9):
            x = torch.randn(2, s, H)
            with torch.no_grad():
                torch.testing.assert_close(cg(x), m(x), rtol=1e-4, atol=1e-5)


def test_onnx_unsupported_op_listed_and_model_given_as_bytes_or_path(tmp_path):
    """An unsupported op's missing output does not flow on into its consumers (it became
    a bogus constant and a ``ShapeMismatchError`` at the ``MatMul``, hiding the list of
    unsupported ops); ``import_onnx`` reads a ModelProto, ``bytes`` (``f.getvalue()``
    after ``torch.onnx.export`` into a ``BytesIO``), a path (``str`` or ``Path``) or a
    binary file, and refuses anything else with one ``UsageError`` line."""
    from onnx import TensorProto, helper, numpy_helper

    from polycomp.errors import UnsupportedOpError, UsageError
    from polycomp.graph.onnx_import import import_onnx
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    axis = numpy_helper.from_array(np.array(1, np.int64), "axis")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 3])
    ok = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "ok", [x], [y], [w]))
    for given in (ok.SerializeToString(), ok):
        assert [str(d) for d in import_onnx(given).inputs[0].shape] == ["B", "4"]
    path = tmp_path / "ok.onnx"
    path.write_bytes(ok.SerializeToString())
    for given in (path, str(path)):
        assert import_onnx(given).outputs[0].shape[1] == 3
    with open(path, "rb") as f:
        assert import_onnx(f).outputs[0].shape[1] == 3
    with pytest.raises(UsageError, match="not a int"):
        import_onnx(3)
    bad = helper.make_model(helper.make_graph(
        [helper.make_node("CumSum", ["x", "axis"], ["c"]),
         helper.make_node("MatMul", ["c", "w"], ["y"])], "bad", [x], [y], [w, axis]))
    with pytest.raises(UnsupportedOpError, match="ONNX op CumSum$"):
        import_onnx(bad.SerializeToString())


class _MaskedAttention(torch.nn.Module):
    """What transformers' exported models build their masks and attention from: a causal
    mask from ``arange`` ANDed with a padding mask, expanded over heads, a fused
    projection split three ways, heads shaped from ``x.shape[:-1]``, SDPA with a bool
    mask, a class token concatenated, ``ones`` of a symbolic shape, a sum, a squeeze."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)
        self.cls = torch.nn.Parameter(torch.randn(1, 1, 8))

    def forward(self, x, mask):
        b, s = x.shape[0], x.shape[1]
        pos = torch.arange(s)
        keep = (pos[None, :] <= pos[:, None])[None, None] & mask[:, None, None, :].bool()
        keep = keep.expand(b, 2, s, s)
        q, k, v = (t.reshape(*t.shape[:-1], 2, 4).transpose(1, 2)
                   for t in self.qkv(x).split(8, -1))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        y = torch.cat([self.cls.expand(b, 1, 8), a.transpose(1, 2).reshape(b, s, 8)], 1)
        ones = torch.ones(y.shape[:2])
        return (y * ones[..., None]).sum(-1, keepdim=True).squeeze(-1) + y[..., 0]


def test_onnx_mask_and_attention_ops_of_an_export():
    """The ONNX ops of an exported mask builder and attention import (``Range``,
    ``LessOrEqual``, ``Cast``, ``And``, ``Expand``, ``ConstantOfShape`` of a symbolic
    shape, ``Split`` with several outputs, ``Slice`` of a shape, ``Concat`` of tensors,
    ``Where``, ``IsNaN``, ``ReduceSum``, ``Squeeze``) and match eager at several sizes,
    a sequence whose every key is masked included (SDPA's NaN row becomes 0)."""
    import io
    import warnings

    from polycomp.graph.onnx_import import import_onnx
    torch.manual_seed(0)
    m = _MaskedAttention().eval()
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.randn(2, 5, 8), torch.ones(2, 5, dtype=torch.long)), f,
                          input_names=["x", "mask"], output_names=["y"], opset_version=17,
                          dynamo=False, dynamic_axes={"x": {0: "B", 1: "S"},
                                                      "mask": {0: "B", 1: "S"},
                                                      "y": {0: "B", 1: "S"}})
    graph = import_onnx(f.getvalue())
    assert [v.dtype for v in graph.inputs] == ["float32", "int64"]
    cg = compile_graph(graph, "c")
    for b, s in ((2, 7), (1, 1), (3, 4)):
        x, mask = torch.randn(b, s, 8), torch.ones(b, s, dtype=torch.long)
        mask[-1, s // 2:] = 0
        mask[0, 0] = 0 if b == 3 else 1  # row 0 of sequence 0: its only key masked
        with torch.no_grad():
            ref = m(x, mask)
        got = torch.as_tensor(cg(x.numpy(), mask.numpy()))
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
