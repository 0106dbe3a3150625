"""Model-level semantics of ``torch.compile(backend="polycomp")`` and the graph runtime
(issue 24, third trust round; issue 27 item 2): in-place ops and input mutation follow
eager, training mode and autograd run eagerly with a reason, DLPack tensors with lazy
negation/conjugation are read with their sign, multi-output graphs, float16 / bfloat16 /
float64 / integer / bool models, and one clear error line for what cannot be read."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from polycomp.errors import ArgumentError
from polycomp.graph import GraphBuilder, compile_graph
from polycomp.graph.dynamo import polycomp_backend
from polycomp.graph.fx import import_module


class Recorder:
    """A Dynamo backend that calls polycomp's (target ``c``) and keeps its reports."""

    def __init__(self):
        self.reports = []

    def __call__(self, gm, example_inputs):
        fn = polycomp_backend(gm, example_inputs, options={"target": "c"})
        self.reports.append(fn.polycomp_report)
        return fn

    @property
    def eager(self):
        return [line for r in self.reports for line in r.eager]

    @property
    def compiled(self):
        return sum(r.compiled for r in self.reports)


def _compile(f):
    torch._dynamo.reset()
    rec = Recorder()
    return torch.compile(f, backend=rec), rec


def _twins(*args):
    return ([a.clone() for a in args], [a.clone() for a in args])


# ----------------------------------------------------------------------- in-place ops

def _mul_input(x):
    x.mul_(2)
    return x + 1


def _iadd_input(x):
    x += 1
    return x * 3


def _relu_input_inplace(x):
    F.relu(x, inplace=True)
    return x - 1


def _mutate_and_return(x, y):
    x.add_(y)
    return x


def _inplace_intermediate(x):
    y = x * 3
    y.add_(1)
    z = torch.sigmoid(y)
    z.mul_(y)
    return z.relu(), y


@pytest.mark.parametrize("f, make", [
    (_mul_input, lambda: (torch.randn(4, 8),)),
    (_iadd_input, lambda: (torch.randn(3, 5),)),
    (_relu_input_inplace, lambda: (torch.randn(6),)),
    (_mutate_and_return, lambda: (torch.randn(2, 7), torch.randn(7))),
    (_inplace_intermediate, lambda: (torch.randn(5, 3),)),
    (_mul_input, lambda: (torch.arange(12).reshape(3, 4),)),   # int64 in place
])
def test_inplace_ops_follow_eager(f, make):
    cf, rec = _compile(f)
    ref_args, args = _twins(*make())
    with torch.no_grad():
        ref, out = f(*ref_args), cf(*args)
    ref = ref if isinstance(ref, tuple) else (ref,)
    out = out if isinstance(out, tuple) else (out,)
    for r, o in zip(ref, out):
        assert o.dtype == r.dtype
        torch.testing.assert_close(o, r)
    for r, a in zip(ref_args, args):  # the caller's tensors are mutated as eagerly
        torch.testing.assert_close(a, r)
    assert rec.compiled == 1 and rec.eager == []


class _InplaceAct(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(8, 8), nn.Linear(8, 8)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        h = self.l1(x)
        self.act(h)            # h is rectified in place: both uses below see it
        return h + self.l2(h)


def test_inplace_relu_module():
    m = _InplaceAct().eval()
    x = torch.randn(3, 8)
    cg = compile_graph(import_module(m, [("B", 8)]), "c")  # symbolic_trace: call_module
    with torch.no_grad():
        torch.testing.assert_close(cg(x), m(x), rtol=1e-5, atol=1e-6)


def test_mutated_input_through_compile_graph_is_written_back():
    class M(nn.Module):
        def forward(self, x):
            x.mul_(2)
            return x + 1
    cg = compile_graph(import_module(M(), [("B", 4)]), "c")
    assert [v.name for v, _ in cg.graph.mutations] == ["x"]
    x = torch.randn(3, 4)
    x0 = x.clone()
    torch.testing.assert_close(cg(x), x0 * 2 + 1)
    torch.testing.assert_close(x, x0 * 2)
    xn = x0.numpy().copy()
    cg(xn)
    np.testing.assert_allclose(xn, x0.numpy() * 2)
    ro = x0.numpy().copy()
    ro.flags.writeable = False
    with pytest.raises(ArgumentError, match="updated in place"):
        cg(ro)


def _view_then_mutate(x):
    v = x.view(-1)
    x.mul_(2)
    return v + 1


def _mutate_a_view(x):
    x[0].add_(1)
    return x * 2


def _setitem(x):
    y = x * 1
    y[0] = 3.0
    return y + x


def _mutate_a_split_piece(x):
    qkv = x * 2
    q, k = qkv.split(2, -1)  # q and k are views of qkv
    q.add_(1)
    return qkv + 0, k * 1


@pytest.mark.parametrize("f", [_view_then_mutate, _mutate_a_view, _setitem,
                               _mutate_a_split_piece])
def test_mutation_through_views_runs_eagerly_with_a_reason(f, capsys):
    cf, rec = _compile(f)
    ref_args, args = _twins(torch.randn(3, 4))
    with torch.no_grad():
        ref, out = f(*ref_args), cf(*args)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(args[0], ref_args[0])
    assert rec.compiled == 0 and len(rec.eager) == 1
    assert "view" in rec.eager[0]
    assert capsys.readouterr().err.count("polycomp: running") == 1


def test_mutated_input_aliasing_another_input_runs_eagerly():
    def f(a, b):
        a.mul_(2)
        return b + 1
    cf, rec = _compile(f)
    base, ref_base = torch.randn(4, 4), None
    ref_base = base.clone()
    with torch.no_grad():
        ref = f(ref_base, ref_base[1])
        out = cf(base, base[1])
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(base, ref_base)


# ----------------------------------------------------------------------- training mode

def test_dropout_train_runs_eagerly_eval_is_identity():
    def f(x):
        return F.dropout(torch.relu(x), 0.5, training=True) * 2

    def g(x):
        return F.dropout(torch.relu(x), 0.5, training=False) * 2
    x = torch.randn(64, 32)
    cf, rec = _compile(f)
    with torch.no_grad():
        torch.manual_seed(1)
        ref = f(x)
        torch.manual_seed(1)
        out = cf(x)
    torch.testing.assert_close(out, ref)  # the same random mask: torch drew it
    assert (out == 0).float().mean() > 0.3  # and it did drop
    assert len(rec.eager) == 1 and "dropout in training mode" in rec.eager[0]
    cg, rec = _compile(g)
    with torch.no_grad():
        torch.testing.assert_close(cg(x), g(x))
    assert rec.compiled == 1 and rec.eager == []


def test_batch_norm_train_updates_statistics_eagerly():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.ReLU()).train()
    ref = nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.ReLU()).train()
    ref.load_state_dict(m.state_dict())
    cm, rec = _compile(m)
    x = torch.randn(8, 6)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), ref(x))
    torch.testing.assert_close(m[1].running_mean, ref[1].running_mean)
    assert int(m[1].num_batches_tracked) == int(ref[1].num_batches_tracked) == 1
    assert any("batch_norm in training mode" in e for e in rec.eager)


def test_autograd_runs_eagerly_with_a_reason_and_keeps_gradients():
    torch.manual_seed(0)
    lin = nn.Linear(8, 4)
    cf, rec = _compile(lambda x: torch.relu(lin(x)).sum(-1))
    x = torch.randn(3, 8, requires_grad=True)
    y = cf(x)
    assert y.requires_grad
    y.sum().backward()
    gx, gw = x.grad.clone(), lin.weight.grad.clone()
    x.grad, lin.weight.grad = None, None
    torch.relu(lin(x)).sum(-1).sum().backward()
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gw, lin.weight.grad)
    assert len(rec.eager) == 1 and "autograd" in rec.eager[0]
    with torch.no_grad():  # grad mode off: compiled (Dynamo guards on grad mode)
        torch.testing.assert_close(cf(x), torch.relu(lin(x)).sum(-1))
    assert rec.compiled == 1


def test_compiled_graph_refuses_a_tensor_that_requires_grad():
    g = GraphBuilder("r")
    x = g.input("x", ("N",))
    cg = compile_graph(g.build(g.relu(x)), "c")
    t = torch.randn(5, requires_grad=True)
    with pytest.raises(ArgumentError, match="requires grad"):
        cg(t)
    with torch.no_grad():
        torch.testing.assert_close(cg(t), torch.relu(t))


# ----------------------------------------------------------------------- DLPack

@pytest.fixture(scope="module")
def relu_graph():
    g = GraphBuilder("relu")
    x = g.input("x", ("N", "M"))
    return compile_graph(g.build(g.relu(g.add(x, x))), "c")


def test_dlpack_negative_and_conjugate_bits(relu_graph):
    z = torch.randn(3, 4, dtype=torch.complex64)
    zi = z.conj().imag  # the negative bit
    assert zi.is_neg()
    torch.testing.assert_close(relu_graph(zi), torch.relu(2 * zi))
    x = torch.randn(3, 4)
    xn = torch._neg_view(x)
    assert xn.is_neg()
    torch.testing.assert_close(relu_graph(xn), torch.relu(-2 * x))
    from polycomp.driver import build
    from polycomp.frontend import ops
    add = build(ops.binary_kernel("add"), "c")
    torch.testing.assert_close(add(xn, x), torch.zeros(3, 4))
    with pytest.raises(ArgumentError, match="complex64") as e:  # conj resolved, then
        relu_graph(z.conj())                                    # a clear dtype error
    assert "\n" not in e.value.message
    with pytest.raises(ArgumentError, match="negative bit"):
        relu_graph(x, out=torch._neg_view(torch.empty(3, 4)))


class _BadDLPack:
    def __dlpack__(self, *a, **k):
        raise RuntimeError("device lost")

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("make, words", [
    (lambda: torch.empty(3, 4, device="meta"), "meta"),
    (lambda: torch.eye(3, 4).to_sparse(), "sparse"),
    (lambda: _BadDLPack(), "device lost"),
])
def test_unreadable_inputs_give_one_clear_line(relu_graph, make, words):
    with pytest.raises(ArgumentError, match=words) as e:
        relu_graph(make())
    assert "\n" not in e.value.message and "argument 1" in e.value.message


def test_dtype_mismatch_message_is_readable(relu_graph):
    with pytest.raises(ArgumentError) as e:
        relu_graph(torch.randn(4, 16).half())
    assert e.value.message.startswith("input 'x' (argument 1) must be float32, got float16")
    g = GraphBuilder("fixed")
    x = g.input("x", (4, 16))
    cg = compile_graph(g.build(g.relu(x)), "c")
    from polycomp.errors import ShapeMismatchError
    with pytest.raises(ShapeMismatchError) as e2:
        cg(np.ones((4, 15), np.float32))
    assert " with ," not in e2.value.message and "(4, 15)" in e2.value.message


# ----------------------------------------------------------------------- outputs, dtypes

def test_several_outputs_with_torch_tensors():
    g = GraphBuilder("two")
    x = g.input("x", ("N", 8))
    cg = compile_graph(g.build(g.relu(x), g.softmax(x), g.exp(x)), "c")
    t = torch.randn(5, 8)
    a, b, c = cg(t)
    assert all(isinstance(v, torch.Tensor) for v in (a, b, c))
    torch.testing.assert_close(a, t.relu())
    torch.testing.assert_close(b, t.softmax(-1))
    torch.testing.assert_close(c, t.exp())
    cf, rec = _compile(lambda x: (x.relu(), x * 2, x.exp().sum(-1)))
    with torch.no_grad():
        out = cf(t)
    for o, r in zip(out, (t.relu(), t * 2, t.exp().sum(-1))):
        torch.testing.assert_close(o, r)
    assert rec.compiled == 1


class _Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(16, 32), nn.Linear(32, 8)
        self.ln = nn.LayerNorm(32)

    def forward(self, x):
        return torch.softmax(self.l2(F.gelu(self.ln(self.l1(x)))), -1)


@pytest.mark.parametrize("dtype, tol", [(torch.bfloat16, 2e-2), (torch.float16, 2e-3),
                                        (torch.float64, 1e-12)])
def test_low_and_high_precision_models(dtype, tol):
    torch.manual_seed(0)
    m = _Mlp().to(dtype).eval()
    cm, rec = _compile(m)
    x = torch.randn(4, 16).to(dtype)
    with torch.no_grad():
        out, ref = cm(x), m(x)
        exact = m.double()(x.double())
    assert out.dtype == dtype and rec.compiled == 1 and rec.eager == []
    # as close to the float64 result as eager torch is (float32 accumulation)
    err = (out.double() - exact).abs().max().item()
    err_eager = (ref.double() - exact).abs().max().item()
    assert err <= 2 * err_eager + tol * 0.1


def test_low_precision_contraction_accumulates_in_float32():
    g = GraphBuilder("mm")
    a, b = g.input("a", (8, 512), "bfloat16"), g.input("b", (512, 16), "bfloat16")
    cg = compile_graph(g.build(g.matmul(a, b)), "c")
    ta, tb = torch.randn(8, 512).bfloat16(), torch.randn(512, 16).bfloat16()
    want = (ta.float() @ tb.float()).bfloat16()  # float32 sums, rounded once
    torch.testing.assert_close(cg(ta, tb), want, rtol=0, atol=0)


def test_integer_and_bool_inputs_compile():
    def f(x, pos, mask):
        h = x + pos                      # int64 position ids into a float model
        h = h * mask                     # a bool mask
        return h.softmax(-1), pos * 2 + 1, (pos / 2).relu()
    cf, rec = _compile(f)
    x, pos, mask = torch.randn(2, 6), torch.arange(6), torch.rand(2, 6) > 0.3
    with torch.no_grad():
        out, ref = cf(x, pos, mask), f(x, pos, mask)
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype
        torch.testing.assert_close(o, r)
    assert rec.compiled == 1 and rec.eager == []


def test_float_method_is_a_cast():
    def f(x):
        return x.float() / 3, x.long() * 2
    cf, rec = _compile(f)
    x = torch.tensor([[1.7, -2.5, 3.0]], dtype=torch.float64)
    with torch.no_grad():
        for o, r in zip(cf(x), f(x)):
            assert o.dtype == r.dtype
            torch.testing.assert_close(o, r)
    assert rec.compiled == 1


def test_value_read_at_compile_time_is_guarded():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(8, eps=1e-5)

        def forward(self, x):
            return self.ln(x) * 2
    m = Scaled().eval()
    torch._dynamo.reset()
    rec = Recorder()
    cm = torch.compile(m, backend=rec, dynamic=True)
    x = torch.randn(3, 8) * 1e-3
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x))
        m.ln.eps = 1.0  # Dynamo passes the float as a 0-d tensor: no recompilation
        torch.testing.assert_close(cm(x), m(x))
    assert rec.compiled >= 1


def test_internal_errors_run_eagerly_not_crash(monkeypatch, capsys):
    import polycomp.graph.dynamo as dyn

    def broken(*a, **k):
        raise KeyError("bug")
    monkeypatch.setattr(dyn, "compile_graph", broken)
    cf, rec = _compile(lambda x: x.relu() + 1)
    x = torch.randn(3)
    with torch.no_grad():
        torch.testing.assert_close(cf(x), x.relu() + 1)
    assert "internal error (KeyError" in capsys.readouterr().err
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="bug"):
        torch._dynamo.reset()
        torch.compile(lambda x: x.relu() + 2, backend="polycomp",
                      options={"strict": True})(x)


# ----------------------------------------------------------------------- dynamic shapes

def test_sizes_used_as_numbers_under_dynamic_shapes():
    import math

    def f(x):
        B, S, D = x.shape
        y = torch.relu(x)
        return y / math.sqrt(D) + S, y.view(B * S, D) * S, x.size(1)
    torch._dynamo.reset()
    rec = Recorder()
    cf = torch.compile(f, backend=rec, dynamic=True)
    for shape in ((2, 3, 4), (3, 5, 4), (2, 6, 9)):  # D changes last: sqrt(D) is guarded
        x = torch.randn(*shape)
        with torch.no_grad():
            out, ref = cf(x), f(x)
        torch.testing.assert_close(out[0], ref[0])
        torch.testing.assert_close(out[1], ref[1])
        assert out[2] == ref[2]
    assert rec.compiled == 1 and rec.eager == [] and len(rec.reports) == 1


class _PreLN(nn.Module):
    """issue 27: qkv(...).split(d, -1), views, ** 0.5, gelu under dynamic=True."""

    def __init__(self, d=16, h=2):
        super().__init__()
        self.d, self.h = d, h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.f1, self.f2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, S, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(self.d, -1)
        q = q.view(B, S, self.h, D // self.h).transpose(1, 2)
        k = k.view(B, S, self.h, D // self.h).transpose(1, 2)
        v = v.view(B, S, self.h, D // self.h).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-1, -2) / (D // self.h) ** 0.5, -1)
        x = x + self.o((a @ v).transpose(1, 2).reshape(B, S, D))
        return x + self.f2(F.gelu(self.f1(self.ln2(x))))


def test_dynamic_pre_ln_block_with_split_compiles_as_one_piece():
    torch.manual_seed(0)
    m = _PreLN().eval()
    torch._dynamo.reset()
    rec = Recorder()
    cm = torch.compile(m, backend=rec, dynamic=True)
    with torch.no_grad():
        for b, s in ((2, 5), (3, 7), (2, 4)):
            x = torch.randn(b, s, 16)
            torch.testing.assert_close(cm(x), m(x), rtol=1e-4, atol=1e-5)
    assert not rec.eager, rec.eager  # .split of the weight's extent is compiled (#27)
    assert all(r.compiled == r.pieces == 1 for r in rec.reports)


# ----------------------------------------------------------------------- fuzzer findings

def _dead_code(x, w):
    _ = x @ w             # unused: no kernel may be built for it
    v2 = torch.softmax(w, 1)
    return torch.sigmoid(v2),


def _inplace_on_fresh_values(x, a, w):
    v = x.double()        # int64 -> float64: a new tensor, not a view of x
    v.sub_(1)
    m = torch.matmul(a, w)  # 3-d @ 2-d: a view of a temporary inside matmul
    m *= m
    return v, m


def _bool_arithmetic(a, b):
    return a + b, a * b, torch.maximum(a, b), (a + b).float() * 2


@pytest.mark.parametrize("f, make", [
    (_dead_code, lambda: (torch.randn(3, 4), torch.randn(4, 5))),
    (_inplace_on_fresh_values, lambda: (torch.arange(6).reshape(2, 3), torch.randn(2, 3, 4),
                                        torch.randn(4, 5))),
    (_bool_arithmetic, lambda: (torch.rand(4, 5) > 0.5, torch.rand(5) > 0.5)),
])
def test_fuzzer_findings_compile_and_match(f, make):
    cf, rec = _compile(f)
    args = make()
    with torch.no_grad():
        out, ref = cf(*[a.clone() for a in args]), f(*[a.clone() for a in args])
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype
        torch.testing.assert_close(o, r)
    assert rec.compiled == 1 and rec.eager == []


def test_updated_parameters_are_not_stale():
    torch.manual_seed(0)
    lin = nn.Linear(6, 4).eval()
    cf, rec = _compile(lambda x: torch.relu(lin(x)))
    x = torch.randn(3, 6)
    with torch.no_grad():
        torch.testing.assert_close(cf(x), torch.relu(lin(x)))
        lin.weight.mul_(-2)                           # in place (an optimizer step)
        torch.testing.assert_close(cf(x), torch.relu(lin(x)))
        lin.load_state_dict({"weight": torch.randn(4, 6), "bias": torch.randn(4)})
        torch.testing.assert_close(cf(x), torch.relu(lin(x)))
        torch.testing.assert_close(cf(x), torch.relu(lin(x)))  # no further recompile
    assert sum("parameters changed" in e for e in rec.eager) == 2


def _shape_across_pieces(x):
    s = x.size()
    h = (x * 2).relu()
    y = torch.cumsum(h, 1)   # runs eagerly: the pieces before and after hand on s and S
    return (y * 2).reshape(-1).view(s) + h, s[1]


@pytest.mark.parametrize("dynamic", [False, True])
def test_pieces_of_a_split_graph_hand_on_shapes(dynamic):
    torch._dynamo.reset()
    rec = Recorder()
    cf = torch.compile(_shape_across_pieces, backend=rec, dynamic=dynamic)
    for shape in ((2, 3), (3, 5)):
        x = torch.randn(*shape)
        with torch.no_grad():
            out, ref = cf(x), _shape_across_pieces(x)
        torch.testing.assert_close(out[0], ref[0])
        assert out[1] == ref[1]
    assert all(r.compiled == 2 and r.pieces == 3 for r in rec.reports)


def _two_eager_ops_in_a_row(x):
    y = torch.cumsum(x, 1)           # runs eagerly
    z = (y * 2).relu() ** 3
    w = torch.cumprod(z, 1)          # also eager: the first import did not reach it
    return (w + 1).exp()


def test_a_piece_with_another_unsupported_op_is_split_again(capsys):
    cf, rec = _compile(_two_eager_ops_in_a_row)
    x = torch.rand(3, 4) * 0.5
    with torch.no_grad():
        torch.testing.assert_close(cf(x), _two_eager_ops_in_a_row(x))
    (r,) = rec.reports
    assert (r.compiled, r.pieces) == (2, 4)
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and "cumsum" in line and "cumprod" in line


def _split_after_an_eager_op(x):
    y = torch.cumsum(x, 1)           # runs eagerly
    a, b = (y * 2).split(3, 1)       # compiled; its unpacking belongs with the split
    z = torch.cumprod(a, 1)          # eager again (found when the piece is imported)
    return z + b


def test_unpacking_a_split_downstream_of_an_eager_op_stays_with_the_split(capsys):
    """The getitems of a ``split`` that an eager op feeds are not eager themselves (only
    the unpacking of an eager op's tuple is): otherwise the piece holding the split
    returned a tuple and ran eagerly (GPT-2 in float16 with an eager attention: 3 of 7
    pieces compiled, "the graph returns a tuple, not a tensor")."""
    cf, rec = _compile(_split_after_an_eager_op)
    x = torch.rand(2, 6) * 0.5
    with torch.no_grad():
        torch.testing.assert_close(cf(x), _split_after_an_eager_op(x))
    (r,) = rec.reports
    line = capsys.readouterr().err.strip()
    assert "tuple" not in line and "cumsum" in line and "cumprod" in line, line
    assert (r.compiled, r.pieces) == (2, 4), line


# ----------------------------------------------------------------------- Hugging Face findings

class _PositionSlice(nn.Module):
    """BERT's ``position_ids[:, 0:seq_length]`` of a buffer: under ``dynamic=True`` the
    slice's stop is a size node of the graph (a SymInt), not a number."""

    def __init__(self):
        super().__init__()
        self.register_buffer("pos", torch.arange(16.0).view(1, 16))

    def forward(self, x):
        return x * 2 + self.pos[:, :x.shape[1]]


def test_slice_bound_by_a_size_node_compiles():
    torch._dynamo.reset()
    rec = Recorder()
    m = _PositionSlice()
    cm = torch.compile(m, backend=rec, dynamic=True)
    for b, s in ((2, 5), (3, 7), (2, 11)):
        x = torch.randn(b, s)
        with torch.no_grad():
            torch.testing.assert_close(cm(x), m(x))
    assert rec.eager == [] and all(r.compiled == r.pieces == 1 for r in rec.reports)


class _UnboundSize(nn.Module):
    """The piece before ``cumsum`` (eager) slices a buffer by ``ids``'s length but does not
    take ``ids`` itself: no input of that piece binds the size."""

    def __init__(self):
        super().__init__()
        self.register_buffer("pos", torch.arange(16.0).view(1, 16))

    def forward(self, x):
        p = self.pos[:, :x.shape[1]] * 3
        return torch.cumsum(p, 1) + 1


def test_a_piece_whose_size_no_input_binds_runs_eagerly_with_a_reason(capsys):
    torch._dynamo.reset()
    reports = []

    def backend(gm, ex):  # strict: an internal error fails the test
        fn = polycomp_backend(gm, ex, options={"target": "c", "strict": True})
        reports.append(fn.polycomp_report)
        return fn
    m = _UnboundSize()
    cm = torch.compile(m, backend=backend, dynamic=True)
    for s in (5, 7, 9):
        x = torch.randn(2, s)
        with torch.no_grad():
            torch.testing.assert_close(cm(x), m(x))
    said = capsys.readouterr().err
    assert all("internal error" not in r for rep in reports for r in rep.eager), said
    assert any("cumsum" in r for rep in reports for r in rep.eager)


def test_a_graph_may_return_a_number_read_at_compile_time():
    """``eps.item()`` (Dynamo hands unspecialised floats over as 0-d tensors): a piece of a
    split graph returns it to the next piece; the value is guarded."""
    from polycomp.graph.fx import import_fx

    class F(nn.Module):
        def forward(self, x, t):
            return torch.relu(x), t.item()
    gm = torch.fx.symbolic_trace(F())
    eps = torch.tensor(1e-5, dtype=torch.float64)
    cg = compile_graph(import_fx(gm, example_inputs=[torch.randn(4), eps]), "c")
    x = torch.randn(4)
    y, v = cg(x, eps)
    torch.testing.assert_close(y, torch.relu(x))
    assert isinstance(v, float) and v == 1e-5
    with pytest.raises(ArgumentError, match="compile again"):
        cg(x, torch.tensor(2e-5, dtype=torch.float64))
