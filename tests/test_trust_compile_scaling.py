"""Compile-time fixes of issue #14 (timings live in ``polycomp bench compile_scaling``,
never in a test): the decisions they rely on are checked here.

* The dataflow analysis runs per array, on the program order restricted to the
  statements that access the array: the dependences equal the whole-program analysis.
* The AST is generated from a schedule whose objects all live on the build's parameter
  space (a filter on fewer parameters made isl realign every statement's map at each
  filter of a sequence: quadratic, 29 s of a 200-stage chain on cuda)."""
import islpy as isl
import pytest

from polycomp.benchmarks.compile_scaling import c_statements, make_case
from polycomp.driver import compile_kernel
from polycomp.frontend import ops
from polycomp.frontend.c_reader import read_c_kernel

_TWO_ARRAYS = """
void k(int N, float A[N], float B[N], float C[N]) {
  for (int i = 1; i < N; i++) {
    A[i] = A[i - 1] + B[i];
    B[i] = A[i] * C[i];
    C[i] = B[i - 1] + A[i];
  }
  for (int i = 0; i < N; i++)
    A[i] = A[i] + C[N - 1 - i];
}
"""


def _whole_program(m):
    """One analysis over the whole program; anti dependences end at the first write
    after the read (writes kill, issue #24: see polycomp.model)."""
    sched = m.initial_schedule

    def flow(sink, must=None, may=None, kill=None):
        info = isl.UnionAccessInfo.from_sink(sink)
        info = info.set_must_source(must) if must is not None else info.set_may_source(may)
        if kill is not None:
            info = info.set_kill(kill)
        return info.set_schedule(sched).compute_flow().get_may_dependence()
    return (flow(m.reads, must=m.writes), flow(m.writes, may=m.reads, kill=m.writes),
            flow(m.writes, must=m.writes))


_MIXED = """
void k(int N, float A[N], float B[N], float C[N]) {
  for (int i = 1; i < N; i++) {
    A[i] = A[i - 1] + B[i]; B[i] = A[i] * C[i]; C[i] = B[i - 1] + A[i];
  }
  for (int i = 0; i < N; i++) A[i] = A[i] + C[N - 1 - i];
  for (int i = 0; 2 * i < N; i++) A[2 * i] = B[i];
  for (int i = 0; i < N; i++) C[i] = A[i] + A[N - 1 - i];
  for (int i = 0; i < N; i++) { B[i] = C[i]; A[i] = B[i] * 2; }
  A[0] = B[N - 1];
}
"""


@pytest.mark.parametrize("kernel", [
    lambda: read_c_kernel(_TWO_ARRAYS), lambda: read_c_kernel(c_statements(7)),
    lambda: read_c_kernel(_MIXED), lambda: make_case("c-inplace-6"),
    lambda: make_case("c-depth2-5"),
    lambda: read_c_kernel(c_statements(5, own_loops=True)),
    lambda: ops.OPS["softmax"].factory("float32"),
    lambda: ops.OPS["layernorm"].factory("float32"),
    lambda: ops.OPS["matmul_bias_relu"].factory("float32"),
])
def test_per_array_dependences_equal_the_whole_program_analysis(kernel):
    m = kernel().polyhedral_model()
    flow, anti, out = _whole_program(m)
    assert m.flow.is_equal(flow) and m.anti.is_equal(anti) and m.output.is_equal(out)
    assert not m.flow.is_empty()


def _filters(tree) -> list:
    found = []

    def visit(n):
        if n.get_type() == isl.schedule_node_type.filter:
            found.append(n.filter_get_filter())
        return True
    tree.get_root().foreach_descendant_top_down(visit)
    return found


def test_ast_objects_share_the_build_parameters(monkeypatch):
    real_node = isl.AstBuild.node_from_schedule
    trees = []

    def node(build, schedule):
        trees.append(schedule)
        return real_node(build, schedule)
    monkeypatch.setattr(isl.AstBuild, "node_from_schedule", node)
    compile_kernel(make_case("dsl-chain-6"), "cuda")
    assert trees
    for tree in trees:
        space = tree.get_domain().get_space().params()
        filters = _filters(tree)
        assert len(filters) > 6  # the block filter and one per stage
        for f in filters:
            assert f.get_space().params().has_equal_params(space), f
