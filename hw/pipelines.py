"""Per-target compilation pipelines: schedule-tree passes, IR passes, code generation.

Each pipeline is a list of schedule passes (run by a
:class:`~polycomp.scheduler.PassManager`) and a function taking the lowered IR to
(final IR, source text).  Hardware issues extend these lists.
"""
from __future__ import annotations

from polycomp import ir
from polycomp.lowering.flatten import flatten
from polycomp.lowering.parallelize import parallelize
from polycomp.lowering.simplify import simplify
from polycomp.scheduler.gpu_baseline import GpuBaselineMappingPass
from polycomp.scheduler.isl_scheduler import IslSchedulerPass
from polycomp.scheduler.program_order import ProgramOrderPass

from .target import Target


def schedule_passes(target: Target, options: dict) -> list:
    passes = [ProgramOrderPass()]
    if options.get("isl_scheduler"):
        passes.append(IslSchedulerPass())
    if target.kind == "cuda":
        passes.append(GpuBaselineMappingPass())
    return passes


def _simplified(f: ir.LoweredFunc) -> ir.LoweredFunc:
    return f.with_body(simplify(f.body))


def ir_pipeline(func: ir.LoweredFunc, target: Target, options: dict) -> ir.LoweredFunc:
    """Target IR passes up to (not including) code generation; the result still runs
    in the IR interpreter (before flattening, for the reference checks)."""
    if target.kind == "cuda":
        from .cuda.mapping import map_gpu_loops
        return _simplified(map_gpu_loops(func))
    if target.kind == "c":
        f = _simplified(func)
        if options.get("parallel", True):
            f = parallelize(f)
        return f
    return _simplified(func)


def codegen(func: ir.LoweredFunc, target: Target, options: dict) -> tuple[ir.LoweredFunc, str]:
    flat = _simplified(flatten(func))
    if target.kind == "cuda":
        from .cuda.codegen import emit_cuda
        return flat, emit_cuda(flat)
    from .cpu.codegen import emit_c
    return flat, emit_c(flat)
