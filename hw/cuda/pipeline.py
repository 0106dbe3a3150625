"""The CUDA pipeline: schedule passes, IR passes and code generation."""
from __future__ import annotations

from polycomp import ir
from polycomp.hw.target import Target
from polycomp.lowering.flatten import flatten
from polycomp.lowering.simplify import simplify
from polycomp.scheduler.gpu_baseline import GpuBaselineMappingPass
from polycomp.scheduler.gpu_map import GpuMappingPass
from polycomp.scheduler.gpu_rowreduce import RowReductionMappingPass
from polycomp.scheduler.gpu_tile import GpuTilingPass
from polycomp.scheduler.pattern_schedule import PatternSchedulePass
from polycomp.scheduler.gpu_unroll import UnrollPointLoopsPass
from polycomp.scheduler.promote_registers import RegisterPromotionPass
from polycomp.scheduler.promote_shared import SharedPromotionPass
from polycomp.scheduler.tc_map import TensorCoreMappingPass
from polycomp.scheduler.tc_tile import TensorCoreTilingPass


def schedule_passes(target: Target, options: dict) -> list:
    """Passes after the initial (program-order or isl) schedule.

    ``options["gpu"] == "baseline"`` selects the untiled baseline mapping (one point per
    thread, no promotion) — the reference the tiled pipeline is measured against.  It is
    also used for models without DSL stages (C SCoPs): the tiled passes work on the
    fusion groups of DSL stages."""
    model = options.get("_model")
    no_stages = model is not None and not getattr(model.graph, "stages", ())
    if options.get("gpu") == "baseline" or no_stages:
        return [GpuBaselineMappingPass()]
    passes = [] if options.get("isl_scheduler") else [PatternSchedulePass()]
    tensor_cores = not options.get("isl_scheduler") and options.get("tensor_cores", True) is not False
    if tensor_cores:  # f16/bf16 contractions: mma tiles (kernels mapped after the generic passes)
        passes.append(TensorCoreTilingPass())
    passes += [GpuTilingPass(), RowReductionMappingPass(), GpuMappingPass()]
    if options.get("promote", True):
        passes += [SharedPromotionPass(), RegisterPromotionPass()]
    if options.get("unroll", True):
        passes.append(UnrollPointLoopsPass())
    if tensor_cores:
        passes.append(TensorCoreMappingPass())
    return passes


def ir_passes(func: ir.LoweredFunc, target: Target, options: dict) -> ir.LoweredFunc:
    from .mapping import map_gpu_loops, wrap_kernels
    model = options.get("_model")
    if options.get("gpu") == "baseline" or (model is not None and not getattr(model.graph, "stages", ())):
        f = map_gpu_loops(func)
    else:
        from .async_pipeline import lower_pipelines
        from .tensorize import tensorize
        f = lower_pipelines(tensorize(func, options["_model"]))  # tensor-core kernels only
        f = wrap_kernels(f, options["_model"].context, options["_model"].params)
    return f.with_body(simplify(f.body))


def codegen(func: ir.LoweredFunc, target: Target, options: dict) -> tuple[ir.LoweredFunc, str]:
    from .codegen import emit_cuda
    flat = flatten(func)
    flat = flat.with_body(simplify(flat.body))
    return flat, emit_cuda(flat)
