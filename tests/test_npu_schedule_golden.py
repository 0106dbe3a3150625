"""Golden schedule-tree tests of the NPU schedule pass (``npu-cube-tile``): a tree in,
the expected tree out, named by kernel and pass like the other targets' goldens —
``tests/golden/<case>.npu-cube-tile.in.isl`` (the program-order tree) and
``.out.isl``; the pass runs on the *stored* input and trees compare with
``isl.Schedule.plain_is_equal`` after a text round trip.  Every output is checked for
legality against the model's dependences, and the NPU program is built from the
tree's tiling (the ``npu_cube`` mark): changing the mark changes the program."""
import islpy as isl
import numpy as np
import pytest

from polycomp.driver import compile_kernel, interpret
from polycomp.frontend.ops import OPS
from polycomp.hw.npu.backend import program_of
from polycomp.hw.target import get_target
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.scheduler.npu.cube import CubeTiles
from polycomp.scheduler.npu.tile import NpuCubeTilePass, tile_cube, tiles_of
from polycomp.state import CompileState

CASES = {
    "npu_matmul_f16": ("matmul", "float16", "npu", {}),
    "npu_matmul_f16_single_buffer": ("matmul", "float16", "npu", {"double_buffer": False}),
    "npu-lite_batch_matmul_f32": ("batch_matmul", "float32", "npu-lite", {}),
    "npu-lite_matmul_cast_f16": ("matmul_same_dtype", "float16", "npu-lite", {}),
    "npu_matmul_bias_relu_f32": ("matmul_bias_relu", "float32", "npu", {}),  # UB fit
    "npu_softmax_untouched": ("softmax", "float16", "npu", {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_tree(case, goldens):
    op, dtype, target, opts = CASES[case]
    model = OPS[op].kernel(dtype).polyhedral_model()
    state = CompileState(model, get_target(target), opts)

    def same_as(tree):
        again = isl.Schedule.read_from_str(model.ctx, tree.to_str())
        return lambda text: again.plain_is_equal(isl.Schedule.read_from_str(model.ctx, text))
    tree_in = model.initial_schedule
    stored_in = goldens.expected(f"{case}.npu-cube-tile.in.isl", tree_in.to_str(),
                                 same_as(tree_in))
    assert same_as(tree_in)(stored_in)
    sched = NpuCubeTilePass().run(isl.Schedule.read_from_str(model.ctx, stored_in), state)
    expected = goldens.expected(f"{case}.npu-cube-tile.out.isl", sched.to_str(),
                                same_as(sched))
    assert same_as(sched)(expected), f"{case}:\n{sched.to_str()}"
    assert violated_dependences(sched, model.dependences).is_empty()
    assert state.npu_schedule is sched


def test_program_is_built_from_the_tree():
    """The builder reads the tiling of the tree: a tree tiled otherwise gives a program
    with those tiles (and still the right numbers)."""
    ck = compile_kernel(OPS["matmul"].kernel("float16"), "npu-lite")
    assert tiles_of(ck.state.npu_schedule) == CubeTiles(*(
        program_of(ck.state).tiling[k] for k in ("m0", "n0", "k0", "kL1")))
    model = ck.state.model
    other = CubeTiles(16, 32, 16, 32)
    ck.state.npu_schedule = tile_cube(model.initial_schedule, "matmul", False, other, True)
    from polycomp.hw.npu import backend
    backend._PROGRAMS.pop(ck.state, None)
    prog = program_of(ck.state)
    assert (prog.tiling["m0"], prog.tiling["n0"], prog.tiling["k0"], prog.tiling["kL1"]) == \
        (16, 32, 16, 32)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((37, 70)).astype(np.float16)
    b = rng.standard_normal((70, 45)).astype(np.float16)
    np.testing.assert_allclose(interpret(ck, a, b), a.astype(np.float64) @ b, rtol=1e-3,
                               atol=1e-3)
