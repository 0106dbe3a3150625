"""Golden schedule-tree tests of the NPU schedule passes ``npu-map`` and
``npu-cube-tile``: a tree in, the expected tree out, named by kernel and pass like the
other targets' goldens — ``tests/golden/<case>.npu-map.in.isl`` (the program-order
tree), ``<case>.npu-map.out.isl`` (the marks) and ``<case>.npu-cube-tile.out.isl``
(the cube tiling, run on the *stored* ``npu-map`` output); trees compare with
``isl.Schedule.plain_is_equal`` after a text round trip.  Every output is checked for
legality against the model's dependences, and each mark's payload is checked in the
compile state (``npu_plans``): marks carry an index, never data."""
import dataclasses

import islpy as isl
import numpy as np
import pytest

from polycomp.driver import compile_kernel, interpret
from polycomp.errors import TargetError
from polycomp.frontend.ops import OPS
from polycomp.hw.npu.backend import run_module
from polycomp.hw.npu.lower import LoweringModel, NpuLowerPass
from polycomp.hw.npu.passes import npu_passes
from polycomp.hw.target import get_target
from polycomp.lowering.ast_to_ir import lower_schedule
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.program_order import ProgramOrderPass
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.scheduler.npu.cube import CubeTiles
from polycomp.scheduler.npu.map import NpuMapPass, find_mark, iter_marks
from polycomp.scheduler.npu.plan import npu_plans
from polycomp.scheduler.npu.tile import NpuCubeTilePass
from polycomp.state import CompileState

#: case -> (op, dtype, target, options, {mark kind: count}, the cube plans' tiles)
CASES = {
    "npu_matmul_f16": ("matmul", "float16", "npu", {}, {"npu_cube": 1},
                       [(128, 128, 64, 256)]),        # two 64 KiB L0C tiles fill 128 KiB
    "npu_matmul_f16_single_buffer": ("matmul", "float16", "npu", {"double_buffer": False},
                                     {"npu_cube": 1}, [(128, 256, 64, 512)]),
    "npu-lite_batch_matmul_f32": ("batch_matmul", "float32", "npu-lite", {},
                                  {"npu_cube": 1}, [(64, 32, 16, 64)]),
    "npu-lite_matmul_cast_f16": ("matmul_same_dtype", "float16", "npu-lite", {},
                                 {"npu_cube": 1}, [(64, 32, 32, 128)]),
    "npu_matmul_bias_relu_f32": ("matmul_bias_relu", "float32", "npu", {}, {"npu_cube": 1},
                                 [(128, 128, 64, 128)]),         # L0A/L0B/L1 fit
    "npu_softmax_untouched": ("softmax", "float16", "npu", {}, {"npu_vector": 1}, []),
    "npu-lite_conv2d_bias_relu_f16": ("conv2d_bias_relu", "float16", "npu-lite", {},
                                      {"npu_conv": 1}, []),
    "npu-lite_attention_f32": ("attention", "float32", "npu-lite", {},
                               {"npu_phases": 1, "npu_cube": 2, "npu_vector": 2},
                               [(64, 32, 16, 64), (64, 32, 16, 64)]),
}


def _same_as(model, tree):
    again = isl.Schedule.read_from_str(model.ctx, tree.to_str())
    return lambda text: again.plain_is_equal(isl.Schedule.read_from_str(model.ctx, text))


def _kinds(tree) -> dict:
    out: dict = {}

    def visit(node):
        name = marks.name_of(node)
        if name is not None and name.startswith("npu_"):
            kind = name.split(":")[0]
            out.setdefault(kind, set()).add(marks.index_of(node, kind))
        return True
    tree.get_root().foreach_descendant_top_down(visit)
    return {k: len(v) for k, v in out.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_tree(case, goldens):
    op, dtype, target, opts, kinds, tiles = CASES[case]
    model = OPS[op].kernel(dtype).polyhedral_model()
    state = CompileState(model, get_target(target), opts)
    tree_in = model.initial_schedule
    stored_in = goldens.expected(f"{case}.npu-map.in.isl", tree_in.to_str(),
                                 _same_as(model, tree_in))
    assert _same_as(model, tree_in)(stored_in)
    mapped = NpuMapPass(LoweringModel()).run(isl.Schedule.read_from_str(model.ctx, stored_in),
                                             state)
    stored_map = goldens.expected(f"{case}.npu-map.out.isl", mapped.to_str(),
                                  _same_as(model, mapped))
    assert _same_as(model, mapped)(stored_map)
    assert violated_dependences(mapped, model.dependences).is_empty()
    sched = NpuCubeTilePass().run(isl.Schedule.read_from_str(model.ctx, stored_map), state)
    expected = goldens.expected(f"{case}.npu-cube-tile.out.isl", sched.to_str(),
                                _same_as(model, sched))
    assert _same_as(model, sched)(expected), f"{case}:\n{sched.to_str()}"
    assert violated_dependences(sched, model.dependences).is_empty()
    # the marks index typed plans of the right kinds; the cube plans hold the tiles
    plans = npu_plans(state)
    assert _kinds(sched) == {**kinds, **({"npu_pingpong": 2 * len(tiles)}
                                         if tiles and opts.get("double_buffer", True) else {})}
    assert [tuple(vars(p.tiles).values()) for p in plans.cubes] == tiles
    for n in iter_marks(sched, marks.NPU_PINGPONG):
        assert plans.pingpongs[n].level in ("L1", "L0") and plans.pingpongs[n].copies == 2
    if "npu_vector" in kinds:
        assert {s for v in plans.vectors for s in v.stages} <= {s.name for s in
                                                               model.graph.stages}


def test_program_is_built_from_the_plans():
    """The lowering builds the program from the plan the mark indexes: a plan with
    other tiles gives a tree tiled with them, a program with those tiles (and still
    the right numbers)."""
    model = OPS["matmul"].kernel("float16").polyhedral_model()
    state = CompileState(model, get_target("npu-lite"), {})
    tree = ProgramOrderPass().run(model.initial_schedule, state)
    tree = NpuMapPass(LoweringModel()).run(tree, state)
    plans = npu_plans(state)
    other = CubeTiles(16, 32, 16, 32)
    plans.cubes[0] = dataclasses.replace(plans.cubes[0], tiles=other)
    tree = NpuCubeTilePass().run(tree, state)
    node = find_mark(tree, marks.NPU_CUBE, 0)
    assert node is not None and "mod 16" in node.child(0).band_get_partial_schedule().to_str()
    mod = NpuLowerPass().run(lower_schedule(model, tree), state)
    for p in npu_passes():
        mod = p.run(mod, state)
    t = dict(mod.program.tiling.tiles)
    assert (t["m0"], t["n0"], t["k0"], t["kL1"]) == (16, 32, 16, 32)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((37, 70)).astype(np.float16)
    b = rng.standard_normal((70, 45)).astype(np.float16)
    out, _ = run_module(mod, state.target, a, b)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-3, atol=1e-3)
    ck = compile_kernel(OPS["matmul"].kernel("float16"), "npu-lite")   # the default tiles
    np.testing.assert_allclose(interpret(ck, a, b), out, rtol=1e-5, atol=1e-5)


def test_isl_scheduler_fusing_stages_is_refused_clearly():
    """With option isl_scheduler, isl may fuse the matmul with its epilogue; the NPU
    mapping needs the stage apart and says so (it was an isl internal error)."""
    with pytest.raises(TargetError, match="not a subtree of its own"):
        compile_kernel(OPS["matmul_bias_relu"].kernel("float16"), "npu-lite",
                       {"isl_scheduler": True})
    assert compile_kernel(OPS["attention"].kernel("float32"), "npu-lite",
                          {"isl_scheduler": True}).source
