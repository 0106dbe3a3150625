"""The compiler driver: kernel -> model -> schedule passes -> IR -> target source.

``compile_kernel`` returns a :class:`CompiledKernel` with every intermediate product (the
model, the final schedule tree, the IR before and after code-generation passes, the
source and the pass records), so tests and ``polycomp explain`` can look at each.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from polycomp.errors import (PolycompError, PolycompInternalError, TargetError)
from polycomp.frontend.dsl import Kernel
from polycomp.hw import pipelines
from polycomp.hw.target import Target, get_target
from polycomp.lowering.ast_to_ir import lower_schedule
from polycomp.model import PolyModel
from polycomp.scheduler import PassManager, ScheduleContext


@dataclass(eq=False)
class CompiledKernel:
    kernel: Kernel
    target: Target
    model: PolyModel
    schedule: isl.Schedule
    ir: object            # LoweredFunc after target IR passes (interpretable)
    final_ir: object      # LoweredFunc as printed (flattened)
    source: str
    records: list = field(default_factory=list)
    notes: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.final_ir.name

    def suffix(self) -> str:
        return ".cu" if self.target.kind == "cuda" else ".c"


def compile_kernel(kernel: Kernel, target="c", options: dict | None = None,
                   debug: bool = False, dump: bool = False) -> CompiledKernel:
    """Compile ``kernel`` for ``target``; see the module docstring."""
    if not hasattr(kernel, "polyhedral_model"):
        raise TargetError(f"compile_kernel() takes a @tensor_expr kernel (or a front-end "
                          f"kernel with polyhedral_model()), got {type(kernel).__name__}")
    tgt = get_target(target)
    opts = dict(options or {})
    try:
        model = kernel.polyhedral_model()
        ctx = ScheduleContext(model, tgt, opts)
        pm = PassManager(pipelines.schedule_passes(tgt, dict(opts, _model=model)),
                         debug=debug, dump=dump)
        schedule = pm.run(model.initial_schedule, ctx)
        func = lower_schedule(model, schedule, simplify_body=False,
                              extra_context=ctx.attrs.get("ast_context"),
                              promotions=ctx.attrs.get("promotions"),
                              inlined=ctx.attrs.get("inlined"))
        func.attrs.update(ctx.attrs)
        func = pipelines.ir_pipeline(func, tgt, dict(opts, _model=model))
        final, source = pipelines.codegen(func, tgt, opts)
    except PolycompError:
        raise
    except isl.Error as e:
        raise PolycompInternalError(f"isl error while compiling {kernel.name}: {e}") from None
    return CompiledKernel(kernel, tgt, model, schedule, func, final, source, pm.records, ctx.notes)


def build(kernel: Kernel, target="c", options: dict | None = None):
    """Compile and load ``kernel``; returns a callable taking numpy arrays.

    C targets are built with gcc (cached); CUDA needs pycuda and a GPU.
    """
    ck = compile_kernel(kernel, target, options)
    if ck.target.kind == "c":
        from polycomp.hw.cpu.build import CFunction, build_shared
        return CFunction(ck.final_ir, build_shared(ck.source))
    if ck.target.kind == "cuda":
        from polycomp.hw.cuda.launcher import CudaFunction
        return CudaFunction(ck)
    raise TargetError(f"no runner for target {ck.target.name}")


def interpret(kernel_or_compiled, *inputs, **params):
    """Run a kernel through the IR interpreter (the reference executor).

    Given a Kernel, its program-order IR is interpreted; given a CompiledKernel, the
    IR after the target's passes is — for CUDA targets through the GPU-semantics
    simulator (:func:`polycomp.hw.cuda.simulator.simulate`, strict: races, divergent
    barriers and out-of-bounds accesses raise), since that IR uses per-block shared
    memory, per-thread registers and barriers.
    """
    from polycomp.lowering.interpreter import run_func
    from polycomp.shapes import checked_arguments
    ck = kernel_or_compiled if isinstance(kernel_or_compiled, CompiledKernel) else \
        compile_kernel(kernel_or_compiled, "c", {"parallel": False})
    if ck.target.kind == "cuda":
        from polycomp.hw.cuda.simulator import simulate
        outs, _ = simulate(ck, *inputs, **params)
        return outs
    f = ck.ir
    expected, arrays, values = checked_arguments(f, inputs, params)
    n = len(f.inputs)
    outs = run_func(f, {b.name: a for b, a in zip(f.inputs, arrays[:n])}, values,
                    {b.name: a for b, a in zip(expected[n:], arrays[n:])})
    res = tuple(outs[b.name] for b in f.outputs)
    return res[0] if len(res) == 1 else res
