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

from polycomp.driver import schedule_passes
from polycomp.hw.target import get_target
from polycomp.islutil import context
from polycomp.state import CompileState

from gpu_kernels import add_row, conv_pad, matmul_bias_relu, row_softmax

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")
UPDATE = os.environ.get("POLYCOMP_UPDATE_GOLDEN") == "1"

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
def _schedule_passes(model):
    return schedule_passes(CompileState(model, get_target("cuda"), {}))


for _name in KERNELS:
    _passes = _schedule_passes(KERNELS[_name].polyhedral_model())
    CASES += [(_name, k, p.name) for k, p in enumerate(_passes)]


@pytest.mark.parametrize("kernel,index,pass_name", CASES,
                         ids=[f"{k}-{i}-{p}" for k, i, p in CASES])
def test_pass_golden(kernel, index, pass_name):
    model = KERNELS[kernel].polyhedral_model()
    target = get_target("cuda")
    ctx = CompileState(model, target, {})
    passes = _schedule_passes(model)
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
