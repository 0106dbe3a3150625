"""The compiler driver: kernel -> model -> schedule passes -> IR -> target source.

``compile_kernel`` asks the target registry (:mod:`polycomp.hw.registry`) for the
target's backend, validates the options with the backend's options class, and runs
every step through one :class:`~polycomp.pass_manager.PassManager`: the schedule
passes, lowering (isl AST -> IR), the IR passes (whose result the interpreter or
simulator runs), the code-generation passes and emission.  It returns a
:class:`CompiledKernel` with every intermediate product (the model, the final schedule
tree, the IR before and after code-generation passes, the source, the step records
and the typed compile state), so tests and ``polycomp explain`` can look at each.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import islpy as isl

from polycomp import ir
from polycomp.compiled import CompiledKernel
from polycomp.errors import (
    PolycompError,
    PolycompInternalError,
    TargetError,
    UnsupportedConstructError,
    deep_recursion,
)
from polycomp.hw.registry import backend_for
from polycomp.hw.target import Target, get_target
from polycomp.lowering.ast_to_ir import lower_schedule
from polycomp.model import FrontEndKernel
from polycomp.options import Options
from polycomp.pass_manager import PassManager
from polycomp.scheduler.common.pass_base import Pass
from polycomp.state import CompileState


def compile_kernel(kernel: FrontEndKernel, target: str | Target = "c",
                   options: Mapping[str, Any] | Options | None = None,
                   debug: bool = False, dump: bool = False,
                   dump_dir: str | None = None) -> CompiledKernel:
    """Compile ``kernel`` for ``target``; see the module docstring.

    ``options``: a mapping (or the target's options object) checked by the target's
    options class (unknown keys and bad values raise
    :class:`~polycomp.errors.OptionError`).  ``debug`` checks every schedule pass for
    legality; ``dump`` keeps each step's output in the records; ``dump_dir`` also
    writes them as numbered files.
    """
    if not hasattr(kernel, "polyhedral_model"):
        raise TargetError(f"compile_kernel() takes a @tensor_expr kernel (or a front-end "
                          f"kernel with polyhedral_model()), got {type(kernel).__name__}")
    tgt = get_target(target)
    backend = backend_for(tgt)
    opts = backend.options_class.from_mapping(options, tgt.name)
    pm = PassManager(debug=debug, dump=dump, dump_dir=dump_dir,
                     source_suffix=backend.suffix.lstrip("."))
    try:
        with deep_recursion():
            return _compile(kernel, tgt, backend, opts, pm)
    except PolycompError:
        raise
    except RecursionError:
        raise UnsupportedConstructError(f"{kernel.name}: an expression nested too deeply to "
                                        f"compile") from None
    except isl.Error as e:
        raise PolycompInternalError(f"isl error while compiling {kernel.name}: {e}") from None


def _compile(kernel: FrontEndKernel, tgt: Target, backend, opts, pm: PassManager) -> CompiledKernel:
    """The steps of :func:`compile_kernel` (model, schedule, lower, IR, codegen, emit)."""
    model = pm.step("model", "model", kernel.polyhedral_model, str)
    state = CompileState(model, tgt, opts)
    schedule = pm.run(model.initial_schedule, state, schedule_passes(state))
    # (a schedule pass may have replaced the model by an equivalent one: scop-tensor-cores)
    func = pm.step("lower", "lower", lambda: lower_schedule(
        state.model, schedule, simplify_body=False,
        context_parts=state.ast_context_parts,
        statement_hook=lambda var: backend.lowering_statements(state, var)), _func_str)
    func = pm.run_ir(func, state, backend.ir_passes(state), "ir")
    final = pm.run_ir(func, state, backend.codegen_passes(state), "codegen")
    final = pm.run_target(final, state, backend.target_passes(state))
    source = pm.step("emit", "emit", lambda: backend.emit(final, state), str)
    return CompiledKernel(kernel, tgt, model, schedule, func, final, source, pm.records, state)


def schedule_passes(state: CompileState) -> list[Pass]:
    """The schedule passes of a compile: program order (and isl's scheduler when
    ``options.isl_scheduler``), then the target backend's passes."""
    from polycomp.scheduler.common.isl_scheduler import IslSchedulerPass
    from polycomp.scheduler.common.program_order import ProgramOrderPass
    passes: list[Pass] = [ProgramOrderPass()]
    if state.options.isl_scheduler:
        passes.append(IslSchedulerPass())
    return passes + backend_for(state.target).schedule_passes(state)


def _func_str(f: ir.LoweredFunc) -> str:
    from polycomp.lowering.printer import func_str
    return func_str(f)


def build(kernel: FrontEndKernel, target: str | Target = "c",
          options: Mapping[str, Any] | Options | None = None):
    """Compile and load ``kernel``; returns a callable taking numpy arrays.

    C targets are built with gcc (cached); CUDA needs pycuda and a GPU (else a clear
    :class:`~polycomp.errors.TargetError`; ``polycomp run`` falls back to the simulator).
    """
    ck = compile_kernel(kernel, target, options)
    return ck.backend.load(ck)


def interpret(kernel_or_compiled, *inputs, **params):
    """Run a kernel with the reference semantics of its IR.

    Given a Kernel, its program-order IR is interpreted; given a CompiledKernel, the
    IR after the target's IR passes is run by the backend's executor — the IR
    interpreter for C targets, the GPU-semantics simulator for CUDA targets
    (:func:`polycomp.hw.cuda.simulator.simulate`, strict: races, divergent barriers and
    out-of-bounds accesses raise).
    """
    ck = kernel_or_compiled if isinstance(kernel_or_compiled, CompiledKernel) else \
        compile_kernel(kernel_or_compiled, "c", {"parallel": False})
    return ck.backend.execute(ck, inputs, params)
