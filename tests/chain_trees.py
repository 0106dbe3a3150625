"""Checks shared by the golden tests of the CUDA chain program trees
(scheduler/chain/cuda_tree.py): the tree against its golden file, the steps' roles,
legality for the dependences the program keeps, and the marks' payloads."""
import islpy as isl

from polycomp.hw.target import get_target
from polycomp.scheduler.chain.cuda_tree import (
    CudaChainFusePass,
    CudaChainProgram,
    chain_program,
    checked_dependences,
    program_tree,
)
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.state import CompileState


def mark_names(sched: isl.Schedule) -> list[str]:
    """The marks of ``sched`` in tree order."""
    out: list[str] = []

    def visit(n):
        name = marks.name_of(n)
        if name is not None:
            out.append(name)
        return True
    sched.get_root().foreach_descendant_top_down(visit)
    return out


def check_golden_tree(kernel, target: str, options: dict, golden: str, goldens,
                      roles: list[str]) -> isl.Schedule:
    """``chain-fuse``'s tree of ``kernel`` equals the golden file (isl's plain equality),
    its steps have ``roles`` in tree order (kernel 0), every mark indexes its payload, and
    the tree without its extension nodes satisfies ``checked_dependences``."""
    model = kernel.polyhedral_model()
    ctx = CompileState(model, get_target(target), options)
    sched = CudaChainFusePass().run(model.initial_schedule, ctx)
    again = isl.Schedule.read_from_str(model.ctx, sched.to_str())

    def same(text):
        return again.plain_is_equal(isl.Schedule.read_from_str(model.ctx, text))
    expected = goldens.expected(golden, sched.to_str(), same)
    assert same(expected), sched.to_str()
    prog = chain_program(ctx)
    assert [s.role.value for s in prog.steps if s.kernel == 0] == roles
    names = mark_names(sched)
    steps = [marks.index_of(n, marks.CHAIN_STEP) for n in names
             if marks.is_kind(n, marks.CHAIN_STEP)]
    assert steps == list(range(len(prog.steps)))
    assert [marks.index_of(n, marks.CHAIN_RING) for n in names
            if marks.is_kind(n, marks.CHAIN_RING)] == [0]
    assert {marks.kernel_number(n) for n in names if marks.is_kind(n, marks.KERNEL)} \
        == set(prog.kernels)
    assert prog.plan is not None
    _, _, core = program_tree(prog.plan, prog.tiles, model, CudaChainProgram())
    assert violated_dependences(core, checked_dependences(prog.plan, model)).is_empty()
    return sched
