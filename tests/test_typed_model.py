"""The model's two typed origins and the typed marks.

* A ``@tensor_expr`` kernel's model is a :class:`DslModel` (``graph``: its
  ``KernelGraph``), a C kernel's a :class:`CScopModel` (``graph``: its ``CGraph``);
  ``isinstance`` is the one predicate of each, and both provide the
  :class:`~polycomp.model.KernelSignature` lowering reads (name, arrays, temporaries,
  in-out outputs).
* Marks are ``<declared kind>[:<n>]``: lowering splits a name at its declared kind, IR
  passes read ``n`` with ``attr_index``, and a ``backbone:<n>`` mark's payload (the
  group's class) lives in the compile state, not in the name.
"""
import numpy as np
import pytest
from gpu_kernels import matmul_bias_relu, row_softmax

from polycomp import ir
from polycomp.driver import compile_kernel, interpret
from polycomp.frontend.c_model import CScopModel
from polycomp.frontend.c_reader import read_c_kernel
from polycomp.frontend.dsl_model import DslModel
from polycomp.hw.target import get_target
from polycomp.lowering.ast_to_ir import lower_schedule
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.classify import fusion_groups
from polycomp.scheduler.common.pattern_schedule import PatternSchedulePass, backbones
from polycomp.scheduler.gpu.tile import backbone_marks
from polycomp.state import CompileState

GEMV = r"""
void gemv(int N, int M, float A[N][M], float x[M], float y[N]) {
#pragma scop
  for (int i = 0; i < N; i++) {
    float t = 0.0f;
    for (int j = 0; j < M; j++)
      t += A[i][j] * x[j];
    y[i] = y[i] + t;
  }
#pragma endscop
}
"""


def test_dsl_kernels_build_a_dsl_model():
    m = row_softmax.polyhedral_model()
    assert isinstance(m, DslModel) and not isinstance(m, CScopModel)
    assert [s.name for s in m.graph.stages] == ["mx", "e", "s", "y"]
    assert m.name == "row_softmax" and m.inout == ()
    assert [b.name for b in m.live_in] == ["X"] and [b.name for b in m.live_out] == ["y"]
    assert [b.name for b in m.temporaries] == ["mx", "e", "s"]
    assert {s.kind for s in m.statements} == {"init", "update", "compute"}


def test_c_kernels_build_a_c_scop_model():
    m = read_c_kernel(GEMV).polyhedral_model()
    assert isinstance(m, CScopModel) and not isinstance(m, DslModel)
    assert m.graph.stages == ()                   # the C graph has no DSL stages
    assert m.name == "gemv" and m.inout == ("y",)
    assert [b.name for b in m.live_in] == ["A", "x"]
    assert [b.name for b in m.live_out] == ["y"]
    assert [b.name for b in m.temporaries] == ["t"]
    assert {s.kind for s in m.statements} == {"assign"}


def test_lowering_reads_the_signature_of_either_origin():
    c = read_c_kernel(GEMV).polyhedral_model()
    f = lower_schedule(c, c.initial_schedule)
    assert f.name == "gemv" and f.inout == ("y",)
    assert [b.name for b in f.inputs] == ["A", "x"] and [b.name for b in f.outputs] == ["y"]
    assert isinstance(f.body, ir.Allocate) and f.body.buffer.name == "t"
    d = row_softmax.polyhedral_model()
    g = lower_schedule(d, d.initial_schedule)
    assert g.inout == () and [b.name for b in g.outputs] == ["y"]


@pytest.mark.parametrize("target", ["c", "cpu-avx2", "cuda"])
def test_c_scop_passes_follow_the_origin(target):
    """The C-SCoP passes run on a CScopModel (and the DSL passes on a DslModel)."""
    ck = compile_kernel(read_c_kernel(GEMV), target)
    names = {r.name for r in ck.records}
    dsl = {r.name for r in compile_kernel(row_softmax, target).records}
    if target == "cuda":
        assert "scop-gpu-groups" in names and "pattern-schedule" not in names
        assert "pattern-schedule" in dsl and "scop-gpu-groups" not in dsl
    else:
        assert "scop-parallel" in names and {"cpu-fuse", "cpu-parallel"}.isdisjoint(names)
        assert {"cpu-fuse", "cpu-parallel"} <= dsl and "scop-parallel" not in dsl
    rng = np.random.default_rng(1)
    A, x, y = (rng.standard_normal(s).astype(np.float32) for s in ((7, 5), (5,), (7,)))
    got = interpret(ck, A, x, y)
    np.testing.assert_allclose(got, y + A @ x, rtol=1e-5, atol=1e-5)


def test_marks_split_at_their_declared_kind():
    assert marks.split("tile:block:3") == ("tile:block", "3")
    assert marks.split("tile:point") == ("tile:point", "")
    assert marks.split("tc:mma:0") == ("tc:mma", "0")
    assert marks.split("kernel:12") == ("kernel", "12")
    assert marks.split("cpu_pack_request:2") == ("cpu_pack_request", "2")
    assert marks.split("cpu_pack:2") == ("cpu_pack", "2")
    assert marks.split("copy:copy_A_0") == ("copy", "copy_A_0")
    assert marks.split("cpu_parallel") == ("cpu_parallel", "")
    assert marks.split("undeclared:a:b") == ("undeclared", "a:b")    # first ':' otherwise
    for kind in marks.KINDS:
        name = marks.make(kind, 7).get_name()
        assert marks.split(name) == (kind, "7") and marks.index_of(name, kind) == 7
        assert marks.attr_index(ir.AttrStmt(*marks.split(name), ir.Evaluate(ir.IntImm(0))),
                                kind) == 7


def test_backbone_marks_index_their_class():
    model = matmul_bias_relu.polyhedral_model()
    state = CompileState(model, get_target("cuda"), {})
    sched = PatternSchedulePass().run(model.initial_schedule, state)
    names = backbone_marks(sched)
    assert names == [f"backbone:{k}" for k in range(len(names))]
    kinds = [backbones(state).of(n).kind for n in names]
    assert kinds == [g.kind for g in fusion_groups(model.graph)] == ["contraction"]
    # the tree, printed, carries only the index
    assert "backbone:contraction" not in sched.to_str()


def test_a_backbone_comment_in_cuda_still_names_its_class():
    from polycomp.frontend.ops import layernorm_kernel
    src = compile_kernel(layernorm_kernel("float32"), "cuda").source
    assert "// backbone: rowreduce" in src and "// backbone: 0" not in src
