"""Golden schedule trees for the schedule passes that exist.

Each test runs passes on a kernel's schedule tree and compares the result, after a round
trip through isl's text form, with the expected tree in isl's schedule syntax, stored in
``tests/golden/test_golden_schedules/<name>.isl`` (``isl.Schedule.plain_is_equal``, in
polycomp's isl context; a quoted isl string may continue over several lines there).  The
expected trees are the documented guarantees of each pass spelled out on small kernels
(the comments at the cases say what each shows): when a pass changes on purpose, run
the tests with ``--update-goldens``, review the diff and say why in the commit.

Also: ``PassManager(debug=True)`` rejects a pass that reverses a reduction loop with
``IllegalScheduleError``, and ``dump=True`` records the tree after every pass.
"""
import textwrap
from pathlib import Path

import islpy as isl
import pytest

import polycomp as pc
from polycomp import islutil
from polycomp.errors import IllegalScheduleError
from polycomp.hw.target import get_target
from polycomp.islutil import sets
from polycomp.pass_manager import PassManager
from polycomp.scheduler import Pass
from polycomp.scheduler.common.isl_scheduler import IslSchedulerPass
from polycomp.scheduler.common.program_order import ProgramOrderPass
from polycomp.scheduler.common.tree import is_legal, tree_str
from polycomp.scheduler.gpu.baseline import GpuBaselineMappingPass
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.state import CompileState

N, M, K = pc.sym("N M K")
GOLDEN_DIR = Path(__file__).parent / "golden" / "test_golden_schedules"


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


def golden(name: str) -> str:
    """The expected tree ``tests/golden/test_golden_schedules/<name>.isl``."""
    return (GOLDEN_DIR / f"{name}.isl").read_text()


def assert_golden(goldens, actual: isl.Schedule, name: str) -> None:
    """``assert_tree`` against the golden ``name`` (rewritten by ``--update-goldens``
    when the tree changed)."""
    got = parse(tree_str(actual))
    expected = goldens.expected(f"test_golden_schedules/{name}.isl", tree_str(actual),
                                lambda text: got.plain_is_equal(parse(text)))
    assert_tree(actual, expected)


# --------------------------------------------------------------------------- program order


@pytest.mark.parametrize("kernel, expected", [
    (add2d, "po_add2d"), (rowsum, "po_rowsum"), (matmul_relu, "po_matmul_relu")],
    ids=["add2d", "rowsum", "matmul_relu"])
def test_program_order(kernel, expected, goldens):
    sched, _, model = run_passes(kernel, [ProgramOrderPass()])
    assert_golden(goldens, sched, expected)
    # the model's initial schedule is the same tree
    assert_tree(model.initial_schedule, golden(expected))


def test_golden_comparison_detects_a_difference():
    sched, _, _ = run_passes(add2d, [ProgramOrderPass()])
    po_add2d = golden("po_add2d")
    swapped = po_add2d.replace("[{ E[i, j] -> [(i)] }, { E[i, j] -> [(j)] }]",
                               "[{ E[i, j] -> [(j)] }, { E[i, j] -> [(i)] }]")
    assert swapped != po_add2d
    with pytest.raises(AssertionError):
        assert_tree(sched, swapped)


# --------------------------------------------------------------------------- isl scheduler


@pytest.mark.parametrize("kernel, expected", [
    # isl fuses the epilogue into the matmul band: D[i, j] runs at k = K, after the last
    # update of C[i, j]; i and j are coincident, the reduction dimension is not.
    (matmul_relu, "isl_matmul_relu"),
    # C[i] reads B[i] and B[i - 1]: fused into one loop, which then carries a dependence
    # (distance 1), so it is not coincident.
    (shifted_chain, "isl_shifted_chain"),
    # C[i, j] reads B[j, i]: isl interchanges B's loops so that both stages fuse with
    # zero dependence distance; both loops are parallel.
    (transpose_chain, "isl_transpose_chain")],
    ids=["matmul_relu", "shifted_chain", "transpose_chain"])
def test_isl_scheduler(kernel, expected, goldens):
    sched, _, model = run_passes(kernel, [IslSchedulerPass()])
    assert_golden(goldens, sched, expected)
    assert is_legal(sched, model.dependences)


# --------------------------------------------------------------------------- GPU baseline


@pytest.mark.parametrize("kernel, passes, options, expected", [
    # mapped tile and point bands are generated atomically (one loop per member, no
    # separation into several loops at the conditions of the statements below)
    (scale, [GpuBaselineMappingPass()], {}, "gpu_scale"),
    (add3d, [GpuBaselineMappingPass()], {}, "gpu_add3d"),
    # one kernel per stage; the reduction loop stays inside each thread
    (matmul_relu, [GpuBaselineMappingPass()], {}, "gpu_matmul_relu"),
    # options["block"] = (32, 8): the innermost dimension (j) goes to x with 8 threads
    (add2d, [GpuBaselineMappingPass()], {"block": (32, 8)}, "gpu_add2d_block"),
    # after the isl scheduler fuses the shifted chain, its only loop carries a
    # dependence: no block/thread mapping, the stage runs in one thread
    (shifted_chain, [IslSchedulerPass(), GpuBaselineMappingPass()], {},
     "gpu_shifted_chain_after_isl")],
    ids=["scale", "add3d", "matmul_relu", "add2d_block_32x8", "shifted_chain_after_isl"])
def test_gpu_baseline_mapping(kernel, passes, options, expected, goldens):
    sched, _, model = run_passes(kernel, passes, "cuda", options)
    assert_golden(goldens, sched, expected)
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
    assert_tree(parse(pm.records[1].tree), golden("po_matmul_relu"))
    assert_tree(parse(pm.records[2].tree), golden("isl_matmul_relu"))
    assert_tree(parse(pm.records[-1].tree), tree_str(sched))
    assert "gpu_blocks:0" in pm.records[-1].tree and "gpu_threads:0" in pm.records[-1].tree
    state = CompileState(matmul_relu.polyhedral_model(), get_target("cuda"), {})
    GpuBaselineMappingPass().run(parse(pm.records[2].tree), state)   # recorded, typed
    baseline = gpu_kernels(state).baseline[0]
    assert baseline.block_loops == 2 and len(baseline.threads) == 2


def test_no_dump_records_no_trees():
    model = add2d.polyhedral_model()
    ctx = CompileState(model, get_target("c"), {})
    pm = PassManager([ProgramOrderPass()], debug=False, dump=False)
    pm.run(model.initial_schedule, ctx)
    assert [r.name for r in pm.records] == ["program-order"]
    assert pm.records[0].tree is None
