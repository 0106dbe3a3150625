"""Pass: the initial schedule tree in program order."""
from __future__ import annotations

import islpy as isl

from polycomp.scheduler.common.pass_base import Pass
from polycomp.state import CompileState


class ProgramOrderPass(Pass):
    """Return the program-order schedule tree of ``ctx.model`` (ignores its input).

    Assumes: nothing about the input schedule; ``ctx.model.initial_schedule`` is the
    program-order tree its front end built
    (:func:`~polycomp.scheduler.common.tree.build_program_order` for DSL models,
    the loop structure of the C code for C SCoPs, see :mod:`polycomp.frontend.c_model`).
    Guarantees, for DSL models: ``domain`` -> ``sequence`` of stage filters (one child
    per stage, in program order; no sequence for a single stage) -> a permutable band
    over the stage's output dimensions (init and update of a reduction share it) -> for
    a reduction a ``sequence [init, update]`` whose update child holds a band over the
    reduce axes.  Executing it is the sequential semantics of the kernel, so it is
    legal by construction.
    """
    name = "program-order"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        return ctx.model.initial_schedule
