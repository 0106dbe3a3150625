"""Golden schedule-tree tests for the GPU passes: a tree in, the expected tree out.

For each kernel below, the CUDA pipeline's passes run in order; before every pass the
current tree must equal the stored input tree, and the pass applied to the *stored*
input (parsed from isl text) must give the stored output tree.  Trees compare with
``isl.Schedule.plain_is_equal`` after a text round trip.  After an intentional change,
regenerate with ``POLYCOMP_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_gpu_passes.py``
and review the diff of tests/golden/.
"""
import os

import islpy as isl
import pytest

import polycomp as pc
from polycomp.hw import pipelines
from polycomp.hw.target import get_target
from polycomp.islutil import context
from polycomp.scheduler import ScheduleContext

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")
UPDATE = os.environ.get("POLYCOMP_UPDATE_GOLDEN") == "1"

N, M, K = pc.sym("N M K")


@pc.tensor_expr
def matmul_bias_relu(A: pc.Tensor[(N, K), "float32"], B: pc.Tensor[(K, M), "float32"],
                     bias: pc.Tensor[(M,), "float32"]):
    k = pc.reduce_axis(K, "k")
    C = pc.compute((N, M), lambda i, j: pc.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = pc.compute((N, M), lambda i, j: C[i, j] + bias[j], name="D")
    return pc.compute((N, M), lambda i, j: pc.max(D[i, j], 0.0), name="E")


@pc.tensor_expr
def add_row(X: pc.Tensor[(N, M), "float32"], b: pc.Tensor[(M,), "float32"]):
    return pc.compute((N, M), lambda i, j: X[i, j] + b[j], name="Y")


@pc.tensor_expr
def row_softmax(X: pc.Tensor[(N, M), "float32"]):
    j = pc.reduce_axis(M, "j")
    mx = pc.compute((N,), lambda i: pc.max(X[i, j], axis=j), name="mx")
    e = pc.compute((N, M), lambda i, c: pc.exp(X[i, c] - mx[i]), name="e")
    j2 = pc.reduce_axis(M, "j2")
    s = pc.compute((N,), lambda i: pc.sum(e[i, j2], axis=j2), name="s")
    return pc.compute((N, M), lambda i, c: e[i, c] / s[i], name="y")


Nb, C, H, W, F = pc.sym("Nb C H W F")


@pc.tensor_expr
def conv_pad(X: pc.Tensor[(Nb, C, H, W), "float32"], Wt: pc.Tensor[(F, C, 3, 3), "float32"]):
    P = pc.compute((Nb, C, H + 2, W + 2), lambda n, c, h, w: pc.select(
        (h >= 1) & (h < H + 1) & (w >= 1) & (w < W + 1), X[n, c, h - 1, w - 1], 0.0), name="P")
    rc, rh, rw = pc.reduce_axis(C, "rc"), pc.reduce_axis(3, "rh"), pc.reduce_axis(3, "rw")
    return pc.compute((Nb, F, H, W), lambda n, f, h, w: pc.sum(
        P[n, rc, h + rh, w + rw] * Wt[f, rc, rh, rw], axis=[rc, rh, rw]), name="Y")


KERNELS = {"matmul_bias_relu": matmul_bias_relu, "add_row": add_row, "row_softmax": row_softmax,
           "conv_pad": conv_pad}


def _read(text):
    return isl.Schedule.read_from_str(context(), text)


def _same(a: isl.Schedule, text: str) -> bool:
    return _read(a.to_str()).plain_is_equal(_read(text))


def _golden(kernel, k, which, tree):
    path = os.path.join(GOLDEN, f"{kernel}.{k:02d}.{which}.isl")
    if UPDATE:
        with open(path, "w") as f:
            f.write(tree.to_str() + "\n")
    with open(path) as f:
        return f.read().strip()


CASES = []
for _name in KERNELS:
    _passes = pipelines.schedule_passes(get_target("cuda"), {})
    CASES += [(_name, k, p.name) for k, p in enumerate(_passes)]


@pytest.mark.parametrize("kernel,index,pass_name", CASES,
                         ids=[f"{k}-{i}-{p}" for k, i, p in CASES])
def test_pass_golden(kernel, index, pass_name):
    model = KERNELS[kernel].polyhedral_model()
    target = get_target("cuda")
    ctx = ScheduleContext(model, target, {})
    passes = pipelines.schedule_passes(target, {})
    sched = model.initial_schedule
    for p in passes[:index]:
        sched = p.run(sched, ctx)
    p = passes[index]
    assert p.name == pass_name
    expected_in = _golden(kernel, index, "in", sched)
    assert _same(sched, expected_in), f"the tree before {p.name} changed"
    out = p.run(_read(expected_in), ctx)
    expected_out = _golden(kernel, index, "out", out)
    assert _same(out, expected_out), f"{p.name} produced a different tree"
