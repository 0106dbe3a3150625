"""``polycomp run``'s reference check at large shapes (issue #14: a 1024^3 matmul_relu
was OOM-killed, the reference being the IR interpreter): op-library kernels are checked
against their numpy reference, the interpreter's work is bounded (beyond the bound the
outputs are reported NOT CHECKED), and long checks report progress."""
import textwrap

import numpy as np
import pytest

import polycomp as pc
from polycomp import cli
from polycomp.lowering import interpreter
from polycomp.lowering.ast_to_ir import lower_schedule

EXAMPLE = "examples/matmul_relu.py"


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


def test_op_library_kernel_uses_its_numpy_reference(tmp_path, capsys, monkeypatch):
    path = _write(tmp_path, "mm.py", """
        from polycomp.frontend import ops
        matmul = ops.OPS["matmul"].factory("float32")
    """)
    monkeypatch.setattr(interpreter, "run_func", None)  # the interpreter must not run
    rc = cli.main(["run", path, "-t", "c", "-s", "N=300,M=200,K=250", "--repeat", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "the op library's numpy reference" in out and " OK" in out


def test_numpy_reference_catches_a_wrong_kernel(tmp_path, capsys):
    """The tag is the op's semantics: a kernel computing something else fails."""
    path = _write(tmp_path, "bad.py", """
        from polycomp.frontend import ops
        relu = ops.OPS["gelu"].factory("float32")
        relu.numpy_reference = ops.OPS["relu"].reference
    """)
    rc = cli.main(["run", path, "-t", "c", "-s", "M=31,N=7", "--repeat", "1"])
    assert rc == 1 and "FAIL" in capsys.readouterr().out


def test_interpreter_work_is_bounded(capsys):
    rc = cli.main(["run", EXAMPLE, "-t", "c", "-s", "N=1024,M=1024,K=200", "--repeat", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "reference: none: the IR interpreter would run 2.12e+08" in out
    assert "output D float32[1024, 1024]: NOT CHECKED" in out
    rc = cli.main(["run", EXAMPLE, "-t", "c", "-s", "N=20,M=10,K=30",
                   "--max-reference-work", "1000", "--repeat", "1"])
    assert rc == 0 and "NOT CHECKED" in capsys.readouterr().out
    rc = cli.main(["run", EXAMPLE, "-t", "c", "-s", "N=20,M=10,K=30",
                   "--max-reference-work", "20000", "--repeat", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "(6.4e+03 instances)" in out and " OK" in out


N, M, K = pc.sym("N M K")


@pc.tensor_expr
def mm_relu_tri(A: pc.Tensor[(N, K), "float32"], B: pc.Tensor[(K, M), "float32"]):
    k = pc.reduce_axis(K, "k")
    C = pc.compute((N, M), lambda i, j: pc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return pc.compute((N, M), lambda i, j: pc.max(C[i, j], 0.0), name="D")


@pytest.mark.parametrize("limit", [1 << 23, 5])
def test_progress_counts_every_statement_instance(monkeypatch, limit):
    """The progress callback sums to the instances the bound estimates: C init N*M, C
    update N*M*K (in reduction chunks of any size), D N*M."""
    from polycomp.driver import compile_kernel
    monkeypatch.setattr(interpreter, "MAX_REDUCTION_LANES", limit)
    ck = compile_kernel(mm_relu_tri, "c")
    params = {"N": 6, "M": 5, "K": 7}
    assert interpreter.statement_instances(ck.model, params) == 6 * 5 * (7 + 2)
    f = lower_schedule(ck.model, ck.model.initial_schedule)
    seen = []
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 7)).astype(np.float32)
    b = rng.standard_normal((7, 5)).astype(np.float32)
    outs = interpreter.run_func(f, {"A": a, "B": b}, params, progress=seen.append)
    assert sum(seen) == 6 * 5 * (7 + 2)
    np.testing.assert_allclose(outs["D"], np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)


def test_long_check_shows_a_progress_bar(capsys, monkeypatch):
    monkeypatch.setattr(cli, "PROGRESS_WORK", 100)
    rc = cli.main(["run", EXAMPLE, "-t", "c", "-s", "N=8,M=8,K=8", "--repeat", "1"])
    captured = capsys.readouterr()
    assert rc == 0, captured.out
    assert "reference (IR interpreter)" in captured.err and "640/640" in captured.err
