"""The CUDA pipeline: schedule passes, IR passes and code generation."""
from __future__ import annotations

from polycomp import ir
from polycomp.hw.target import Target
from polycomp.lowering.flatten import flatten
from polycomp.lowering.simplify import simplify
from polycomp.scheduler.gpu_baseline import GpuBaselineMappingPass


def schedule_passes(target: Target, options: dict) -> list:
    """Passes after the initial (program-order or isl) schedule."""
    return [GpuBaselineMappingPass()]


def ir_passes(func: ir.LoweredFunc, target: Target, options: dict) -> ir.LoweredFunc:
    from .mapping import map_gpu_loops
    f = map_gpu_loops(func)
    return f.with_body(simplify(f.body))


def codegen(func: ir.LoweredFunc, target: Target, options: dict) -> tuple[ir.LoweredFunc, str]:
    from .codegen import emit_cuda
    flat = flatten(func)
    flat = flat.with_body(simplify(flat.body))
    return flat, emit_cuda(flat)
