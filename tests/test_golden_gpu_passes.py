"""Golden schedule-tree tests for the GPU passes: a tree in, the expected tree out.

For each kernel below, the CUDA pipeline's passes run in order; before every pass the
current tree must equal the stored input tree, and the pass applied to the *stored*
input (parsed from isl text) must give the stored output tree.  Trees compare with
``isl.Schedule.plain_is_equal`` after a text round trip.  The files are named by kernel
and pass, ``tests/golden/<kernel>.<pass>.in.isl`` and ``.out.isl`` (``<pass>.2`` for a
pass's second occurrence in the pipeline), so adding a pass adds files without renaming
the others.  After an intentional change, regenerate with
``python -m pytest tests/test_golden_gpu_passes.py --update-goldens`` and review the
diff of tests/golden/.
"""
import islpy as isl
import pytest
from gpu_kernels import add_row, conv_pad, matmul_bias_relu, row_softmax

from polycomp.driver import schedule_passes
from polycomp.hw.target import get_target
from polycomp.islutil import context
from polycomp.state import CompileState

KERNELS = {"matmul_bias_relu": matmul_bias_relu, "add_row": add_row, "row_softmax": row_softmax,
           "conv_pad": conv_pad}


def _read(text):
    return isl.Schedule.read_from_str(context(), text)


def _same(a: isl.Schedule, text: str) -> bool:
    return _read(a.to_str()).plain_is_equal(_read(text))


def _golden(goldens, kernel, step, which, tree):
    """The stored tree ``tests/golden/<kernel>.<step>.<which>.isl``."""
    return goldens.expected(f"{kernel}.{step}.{which}.isl", tree.to_str(),
                            lambda stored: _same(tree, stored))


def _schedule_passes(model):
    return schedule_passes(CompileState(model, get_target("cuda"), {}))


def pass_steps(names) -> list[str]:
    """A name per pass of a pipeline: the pass's name, with ``.2``, ``.3`` ... for its
    second, third ... occurrence."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}.{seen[n]}")
    return out


CASES = []
for _name in KERNELS:
    _passes = _schedule_passes(KERNELS[_name].polyhedral_model())
    _steps = pass_steps(p.name for p in _passes)
    CASES += [(_name, k, p.name, step) for k, (p, step) in enumerate(zip(_passes, _steps))]


def test_pass_steps_name_repeated_passes():
    assert pass_steps(["a", "b", "a", "a"]) == ["a", "b", "a.2", "a.3"]


@pytest.mark.parametrize("kernel,index,pass_name,step", CASES,
                         ids=[f"{k}-{s}" for k, _, _, s in CASES])
def test_pass_golden(kernel, index, pass_name, step, goldens):
    model = KERNELS[kernel].polyhedral_model()
    target = get_target("cuda")
    ctx = CompileState(model, target, {})
    passes = _schedule_passes(model)
    sched = model.initial_schedule
    for p in passes[:index]:
        sched = p.run(sched, ctx)
    p = passes[index]
    assert p.name == pass_name
    expected_in = _golden(goldens, kernel, step, "in", sched)
    assert _same(sched, expected_in), f"the tree before {p.name} changed"
    out = p.run(_read(expected_in), ctx)
    expected_out = _golden(goldens, kernel, step, "out", out)
    assert _same(out, expected_out), f"{p.name} produced a different tree"
