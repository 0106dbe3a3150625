"""Golden schedule trees for the schedule passes that exist.

Each test runs passes on a kernel's schedule tree and compares the result, after a round
trip through isl's text form, with the expected tree written below in isl's schedule
syntax (``isl.Schedule.plain_is_equal``, in polycomp's isl context).  The expected trees
are the documented guarantees of each pass spelled out on small kernels: when a pass
changes on purpose, update the tree here and say why in the commit.

Also: ``PassManager(debug=True)`` rejects a pass that reverses a reduction loop with
``IllegalScheduleError``, and ``dump=True`` records the tree after every pass.
"""
import textwrap

import islpy as isl
import pytest

import polycomp as pc
from polycomp import islutil
from polycomp.islutil import sets
from polycomp.errors import IllegalScheduleError
from polycomp.hw.target import get_target
from polycomp.pass_manager import PassManager
from polycomp.scheduler import Pass
from polycomp.state import CompileState
from polycomp.scheduler.gpu.baseline import GpuBaselineMappingPass
from polycomp.scheduler.common.isl_scheduler import IslSchedulerPass
from polycomp.scheduler.common.program_order import ProgramOrderPass
from polycomp.scheduler.common.tree import is_legal, tree_str

N, M, K = pc.sym("N M K")


# --------------------------------------------------------------------------- kernels


@pc.tensor_expr
def add2d(A: pc.Tensor[(N, M), "float32"], B: pc.Tensor[(N, M), "float32"]):
    return pc.compute((N, M), lambda i, j: A[i, j] + B[i, j], name="E")


@pc.tensor_expr
def scale(A: pc.Tensor[(N,), "float32"]):
    return pc.compute((N,), lambda i: A[i] * 2.0, name="S")


@pc.tensor_expr
def add3d(A: pc.Tensor[(N, M, K), "float32"]):
    return pc.compute((N, M, K), lambda i, j, k: A[i, j, k] + 1.0, name="E")


@pc.tensor_expr
def rowsum(A: pc.Tensor[(N, K), "float32"]):
    k = pc.reduce_axis(K, "k")
    return pc.compute((N,), lambda i: pc.sum(A[i, k], axis=k), name="R")


@pc.tensor_expr
def matmul_relu(A: pc.Tensor[(N, K), "float32"], B: pc.Tensor[(K, M), "float32"]):
    k = pc.reduce_axis(K, "k")
    C = pc.compute((N, M), lambda i, j: pc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return pc.compute((N, M), lambda i, j: pc.max(C[i, j], 0.0), name="D")


@pc.tensor_expr
def shifted_chain(A: pc.Tensor[(N,), "float32"]):
    B = pc.compute((N,), lambda i: A[i] * 2.0, name="B")
    return pc.compute((N,), lambda i: B[i] + pc.select(i > 0, B[i - 1], 0.0), name="C")


@pc.tensor_expr
def transpose_chain(A: pc.Tensor[(N, N), "float32"]):
    B = pc.compute((N, N), lambda i, j: A[i, j] * 2.0, name="B")
    return pc.compute((N, N), lambda i, j: B[j, i] + 1.0, name="C")


# --------------------------------------------------------------------------- helpers


def run_passes(kernel, passes, target="cuda", options=None, debug=True):
    model = kernel.polyhedral_model()
    ctx = CompileState(model, get_target(target), dict(options or {}))
    pm = PassManager(passes, debug=debug, dump=True)
    return pm.run(model.initial_schedule, ctx), pm, model


def parse(text: str) -> isl.Schedule:
    """Read a schedule tree; a quoted isl string may continue over several lines here
    (isl's YAML reader wants it on one line, so continuation lines are joined)."""
    lines = []
    for ln in textwrap.dedent(text).strip().splitlines():
        if lines and lines[-1].count('"') % 2 == 1:
            lines[-1] += " " + ln.strip()
        else:
            lines.append(ln)
    return isl.Schedule.read_from_str(islutil.context(), "\n".join(lines) + "\n")


def assert_tree(actual: isl.Schedule, expected_text: str) -> None:
    got = parse(tree_str(actual))            # round trip through isl's text form
    want = parse(expected_text)
    assert got.plain_is_equal(want), (f"schedule tree differs\n--- got ---\n{tree_str(got)}"
                                      f"\n--- expected ---\n{tree_str(want)}")


# --------------------------------------------------------------------------- program order


PO_ADD2D = """
    domain: "[N, M] -> { E[i, j] : 0 <= i < N and 0 <= j < M }"
    child:
      schedule: "[N, M] -> [{ E[i, j] -> [(i)] }, { E[i, j] -> [(j)] }]"
      permutable: 1
"""

PO_ROWSUM = """
    domain: "[N, K] -> { R_init[i] : 0 <= i < N and K > 0; R_update[i, k] : 0 <= i < N and 0 <= k < K }"
    child:
      schedule: "[N, K] -> [{ R_init[i] -> [(i)]; R_update[i, k] -> [(i)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "{ R_init[i] }"
        - filter: "{ R_update[i, k] }"
          child:
            schedule: "[N, K] -> [{ R_update[i, k] -> [(k)] }]"
"""

PO_MATMUL_RELU = """
    domain: "[N, K, M] -> { C_init[i, j] : 0 <= i < N and 0 <= j < M and K > 0;
                            C_update[i, j, k] : 0 <= i < N and 0 <= j < M and 0 <= k < K;
                            D[i, j] : 0 <= i < N and 0 <= j < M and K > 0 }"
    child:
      sequence:
      - filter: "{ C_init[i, j]; C_update[i, j, k] }"
        child:
          schedule: "[N, K, M] -> [{ C_init[i, j] -> [(i)]; C_update[i, j, k] -> [(i)] },
                                   { C_init[i, j] -> [(j)]; C_update[i, j, k] -> [(j)] }]"
          permutable: 1
          child:
            sequence:
            - filter: "{ C_init[i, j] }"
            - filter: "{ C_update[i, j, k] }"
              child:
                schedule: "[N, K, M] -> [{ C_update[i, j, k] -> [(k)] }]"
      - filter: "{ D[i, j] }"
        child:
          schedule: "[N, K, M] -> [{ D[i, j] -> [(i)] }, { D[i, j] -> [(j)] }]"
          permutable: 1
"""


@pytest.mark.parametrize("kernel, expected", [
    (add2d, PO_ADD2D), (rowsum, PO_ROWSUM), (matmul_relu, PO_MATMUL_RELU)],
    ids=["add2d", "rowsum", "matmul_relu"])
def test_program_order(kernel, expected):
    sched, _, model = run_passes(kernel, [ProgramOrderPass()])
    assert_tree(sched, expected)
    # the model's initial schedule is the same tree
    assert_tree(model.initial_schedule, expected)


def test_golden_comparison_detects_a_difference():
    sched, _, _ = run_passes(add2d, [ProgramOrderPass()])
    swapped = PO_ADD2D.replace("[{ E[i, j] -> [(i)] }, { E[i, j] -> [(j)] }]",
                               "[{ E[i, j] -> [(j)] }, { E[i, j] -> [(i)] }]")
    assert swapped != PO_ADD2D
    with pytest.raises(AssertionError):
        assert_tree(sched, swapped)


# --------------------------------------------------------------------------- isl scheduler


# isl fuses the epilogue into the matmul band: D[i, j] runs at k = K, after the last
# update of C[i, j]; i and j are coincident, the reduction dimension is not.
ISL_MATMUL_RELU = """
    domain: "[N, K, M] -> { C_init[i, j] : 0 <= i < N and 0 <= j < M and K > 0;
                            C_update[i, j, k] : 0 <= i < N and 0 <= j < M and 0 <= k < K;
                            D[i, j] : 0 <= i < N and 0 <= j < M and K > 0 }"
    child:
      schedule: "[N, K, M] -> [{ C_init[i, j] -> [(i)]; C_update[i, j, k] -> [(i)]; D[i, j] -> [(i)] },
                               { C_init[i, j] -> [(j)]; C_update[i, j, k] -> [(j)]; D[i, j] -> [(j)] },
                               { C_init[i, j] -> [(0)]; C_update[i, j, k] -> [(k)]; D[i, j] -> [(K)] }]"
      permutable: 1
      coincident: [ 1, 1, 0 ]
      child:
        set:
        - filter: "{ C_init[i, j]; C_update[i, j, k] }"
          child:
            sequence:
            - filter: "{ C_init[i, j] }"
            - filter: "{ C_update[i, j, k] }"
        - filter: "{ D[i, j] }"
"""

# C[i] reads B[i] and B[i - 1]: fused into one loop, which then carries a dependence
# (distance 1), so it is not coincident.
ISL_SHIFTED_CHAIN = """
    domain: "[N] -> { B[i] : 0 <= i < N; C[i] : 0 <= i < N }"
    child:
      schedule: "[N] -> [{ B[i] -> [(i)]; C[i] -> [(i)] }]"
      permutable: 1
      child:
        sequence:
        - filter: "{ B[i] }"
        - filter: "{ C[i] }"
"""

# C[i, j] reads B[j, i]: isl interchanges B's loops so that both stages fuse with
# zero dependence distance; both loops are parallel.
ISL_TRANSPOSE_CHAIN = """
    domain: "[N] -> { B[i, j] : 0 <= i < N and 0 <= j < N; C[i, j] : 0 <= i < N and 0 <= j < N }"
    child:
      schedule: "[N] -> [{ B[i, j] -> [(j)]; C[i, j] -> [(i)] }, { B[i, j] -> [(i)]; C[i, j] -> [(j)] }]"
      permutable: 1
      coincident: [ 1, 1 ]
      child:
        sequence:
        - filter: "{ B[i, j] }"
        - filter: "{ C[i, j] }"
"""


@pytest.mark.parametrize("kernel, expected", [
    (matmul_relu, ISL_MATMUL_RELU), (shifted_chain, ISL_SHIFTED_CHAIN),
    (transpose_chain, ISL_TRANSPOSE_CHAIN)],
    ids=["matmul_relu", "shifted_chain", "transpose_chain"])
def test_isl_scheduler(kernel, expected):
    sched, _, model = run_passes(kernel, [IslSchedulerPass()])
    assert_tree(sched, expected)
    assert is_legal(sched, model.dependences)


# --------------------------------------------------------------------------- GPU baseline


# mapped tile and point bands are generated atomically (one loop per member, no
# separation into several loops at the conditions of the statements below)
GPU_SCALE = """
    domain: "[N] -> { S[i] : 0 <= i < N }"
    child:
      mark: "kernel:0"
      child:
        mark: "gpu_blocks:1"
        child:
          schedule: "[N] -> [{ S[i] -> [(floor((i)/256))] }]"
          permutable: 1
          coincident: [ 1 ]
          options: "{ atomic[i0] : 0 <= i0 <= 0 }"
          child:
            mark: "gpu_threads:256"
            child:
              schedule: "[N] -> [{ S[i] -> [((i) mod 256)] }]"
              permutable: 1
              coincident: [ 1 ]
              options: "{ atomic[i0] : 0 <= i0 <= 0 }"
"""

GPU_ADD3D = """
    domain: "[N, M, K] -> { E[i, j, k] : 0 <= i < N and 0 <= j < M and 0 <= k < K }"
    child:
      mark: "kernel:0"
      child:
        mark: "gpu_blocks:3"
        child:
          schedule: "[N, M, K] -> [{ E[i, j, k] -> [(floor((i)/4))] }, { E[i, j, k] -> [(floor((j)/8))] },
                                   { E[i, j, k] -> [(floor((k)/8))] }]"
          permutable: 1
          coincident: [ 1, 1, 1 ]
          options: "{ atomic[i0] : 0 <= i0 <= 2 }"
          child:
            mark: "gpu_threads:4,8,8"
            child:
              schedule: "[N, M, K] -> [{ E[i, j, k] -> [((i) mod 4)] }, { E[i, j, k] -> [((j) mod 8)] },
                                       { E[i, j, k] -> [((k) mod 8)] }]"
              permutable: 1
              coincident: [ 1, 1, 1 ]
              options: "{ atomic[i0] : 0 <= i0 <= 2 }"
"""

# one kernel per stage; the reduction loop stays inside each thread
GPU_MATMUL_RELU = """
    domain: "[N, K, M] -> { C_init[i, j] : 0 <= i < N and 0 <= j < M and K > 0;
                            C_update[i, j, k] : 0 <= i < N and 0 <= j < M and 0 <= k < K;
                            D[i, j] : 0 <= i < N and 0 <= j < M and K > 0 }"
    child:
      sequence:
      - filter: "{ C_init[i, j]; C_update[i, j, k] }"
        child:
          mark: "kernel:0"
          child:
            mark: "gpu_blocks:2"
            child:
              schedule: "[N, K, M] -> [{ C_init[i, j] -> [(floor((i)/16))]; C_update[i, j, k] -> [(floor((i)/16))] },
                                       { C_init[i, j] -> [(floor((j)/16))]; C_update[i, j, k] -> [(floor((j)/16))] }]"
              permutable: 1
              coincident: [ 1, 1 ]
              options: "{ atomic[i0] : 0 <= i0 <= 1 }"
              child:
                mark: "gpu_threads:16,16"
                child:
                  schedule: "[N, K, M] -> [{ C_init[i, j] -> [((i) mod 16)]; C_update[i, j, k] -> [((i) mod 16)] },
                                           { C_init[i, j] -> [((j) mod 16)]; C_update[i, j, k] -> [((j) mod 16)] }]"
                  permutable: 1
                  coincident: [ 1, 1 ]
                  options: "{ atomic[i0] : 0 <= i0 <= 1 }"
                  child:
                    sequence:
                    - filter: "{ C_init[i, j] }"
                    - filter: "{ C_update[i, j, k] }"
                      child:
                        schedule: "[N, K, M] -> [{ C_update[i, j, k] -> [(k)] }]"
      - filter: "{ D[i, j] }"
        child:
          mark: "kernel:1"
          child:
            mark: "gpu_blocks:2"
            child:
              schedule: "[N, K, M] -> [{ D[i, j] -> [(floor((i)/16))] }, { D[i, j] -> [(floor((j)/16))] }]"
              permutable: 1
              coincident: [ 1, 1 ]
              options: "{ atomic[i0] : 0 <= i0 <= 1 }"
              child:
                mark: "gpu_threads:16,16"
                child:
                  schedule: "[N, K, M] -> [{ D[i, j] -> [((i) mod 16)] }, { D[i, j] -> [((j) mod 16)] }]"
                  permutable: 1
                  coincident: [ 1, 1 ]
                  options: "{ atomic[i0] : 0 <= i0 <= 1 }"
"""

# options["block"] = (32, 8): the innermost dimension (j) goes to x with 8 threads
GPU_ADD2D_BLOCK = """
    domain: "[N, M] -> { E[i, j] : 0 <= i < N and 0 <= j < M }"
    child:
      mark: "kernel:0"
      child:
        mark: "gpu_blocks:2"
        child:
          schedule: "[N, M] -> [{ E[i, j] -> [(floor((i)/32))] }, { E[i, j] -> [(floor((j)/8))] }]"
          permutable: 1
          coincident: [ 1, 1 ]
          options: "{ atomic[i0] : 0 <= i0 <= 1 }"
          child:
            mark: "gpu_threads:32,8"
            child:
              schedule: "[N, M] -> [{ E[i, j] -> [((i) mod 32)] }, { E[i, j] -> [((j) mod 8)] }]"
              permutable: 1
              coincident: [ 1, 1 ]
              options: "{ atomic[i0] : 0 <= i0 <= 1 }"
"""

# after the isl scheduler fuses the shifted chain, its only loop carries a dependence:
# no block/thread mapping, the stage runs in one thread
GPU_SHIFTED_CHAIN_AFTER_ISL = """
    domain: "[N] -> { B[i] : 0 <= i < N; C[i] : 0 <= i < N }"
    child:
      mark: "kernel:0"
      child:
        mark: "gpu_blocks:0"
        child:
          schedule: "[N] -> [{ B[i] -> [(i)]; C[i] -> [(i)] }]"
          permutable: 1
          child:
            sequence:
            - filter: "{ B[i] }"
            - filter: "{ C[i] }"
"""


@pytest.mark.parametrize("kernel, passes, options, expected", [
    (scale, [GpuBaselineMappingPass()], {}, GPU_SCALE),
    (add3d, [GpuBaselineMappingPass()], {}, GPU_ADD3D),
    (matmul_relu, [GpuBaselineMappingPass()], {}, GPU_MATMUL_RELU),
    (add2d, [GpuBaselineMappingPass()], {"block": (32, 8)}, GPU_ADD2D_BLOCK),
    (shifted_chain, [IslSchedulerPass(), GpuBaselineMappingPass()], {},
     GPU_SHIFTED_CHAIN_AFTER_ISL)],
    ids=["scale", "add3d", "matmul_relu", "add2d_block_32x8", "shifted_chain_after_isl"])
def test_gpu_baseline_mapping(kernel, passes, options, expected):
    sched, _, model = run_passes(kernel, passes, "cuda", options)
    assert_tree(sched, expected)
    assert is_legal(sched, model.dependences)


# --------------------------------------------------------------------------- pass manager


class ReverseReductionPass(Pass):
    """A deliberately illegal pass: runs every reduce-axis band backwards (k -> -k)."""
    name = "reverse-reduction"

    def run(self, schedule, ctx):
        def cb(node):
            # in a program-order tree, the bands over update statements only are the
            # reduce-axis bands
            if node.get_type() == isl.schedule_node_type.band and all(
                    s.get_tuple_name().endswith("_update") for s in sets(node.get_domain())):
                return node.delete().insert_partial_schedule(
                    node.band_get_partial_schedule().neg())
            return node
        return schedule.get_root().map_descendant_bottom_up(cb).get_schedule()


class UpdateBeforeInitPass(Pass):
    """A deliberately illegal pass: in every row, the reduction's updates run before its
    initialisation (which then overwrites the sum)."""
    name = "update-before-init"

    def run(self, schedule, ctx):
        node = schedule.get_root().child(0)            # the row band (one stage)
        while node.get_type() != isl.schedule_node_type.sequence:
            node = node.child(0)
        dom = node.get_domain()
        upd = isl.UnionSet.empty(dom.get_space())
        for x in sets(dom):
            if x.get_tuple_name().endswith("_update"):
                upd = upd.union(isl.UnionSet.from_set(x))
        return node.order_before(upd).get_schedule()


def test_debug_mode_rejects_an_illegal_pass():
    model = rowsum.polyhedral_model()
    ctx = CompileState(model, get_target("c"), {})
    pm = PassManager([ProgramOrderPass(), UpdateBeforeInitPass()], debug=True)
    with pytest.raises(IllegalScheduleError) as ei:
        pm.run(model.initial_schedule, ctx)
    assert "update-before-init" in ei.value.message
    assert "R_init" in ei.value.message and "R_update" in ei.value.message


def test_illegal_pass_is_only_caught_in_debug_mode():
    model = rowsum.polyhedral_model()
    ctx = CompileState(model, get_target("c"), {})
    sched = PassManager([ProgramOrderPass(), UpdateBeforeInitPass()], debug=False) \
        .run(model.initial_schedule, ctx)
    assert not is_legal(sched, model.dependences)


def test_debug_mode_lets_a_reduction_be_reordered():
    """Reversing a reduction loop only reorders an associative sum: accepted (the check
    ignores the dependences between instances of one reduction update)."""
    model = rowsum.polyhedral_model()
    ctx = CompileState(model, get_target("c"), {})
    sched = PassManager([ProgramOrderPass(), ReverseReductionPass()], debug=True) \
        .run(model.initial_schedule, ctx)
    assert "(-k)" in tree_str(sched)
    assert not is_legal(sched, model.dependences)   # strictly, the order did change


def test_dump_records_a_tree_per_pass():
    sched, pm, _ = run_passes(matmul_relu, [ProgramOrderPass(), IslSchedulerPass(),
                                            GpuBaselineMappingPass()])
    names = [r.name for r in pm.records]
    assert names == ["initial", "program-order", "isl-scheduler", "gpu-baseline-mapping"]
    assert all(r.seconds >= 0 for r in pm.records)
    assert_tree(parse(pm.records[1].tree), PO_MATMUL_RELU)
    assert_tree(parse(pm.records[2].tree), ISL_MATMUL_RELU)
    assert_tree(parse(pm.records[-1].tree), tree_str(sched))
    assert "gpu_blocks:2" in pm.records[-1].tree


def test_no_dump_records_no_trees():
    model = add2d.polyhedral_model()
    ctx = CompileState(model, get_target("c"), {})
    pm = PassManager([ProgramOrderPass()], debug=False, dump=False)
    pm.run(model.initial_schedule, ctx)
    assert [r.name for r in pm.records] == ["program-order"]
    assert pm.records[0].tree is None
