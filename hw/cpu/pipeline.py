"""The CPU (C) pipeline: schedule passes, IR passes and code generation.

Targets ``c`` (scalar C), ``cpu`` (this machine), ``cpu-avx2`` and ``cpu-avx512``.

* Schedule passes (after program order): ``cpu-backbone-tile`` and ``cpu-pack`` (vector
  targets: matmul-like and convolution backbones get cache/register tiles, packing
  requests and micro-kernel marks), ``cpu-reduce-interchange`` (vector targets: column
  reductions), ``cpu-fuse``, ``cpu-parallel``.
* IR passes (interpretable): packing (:mod:`.pack`, before simplification, while the
  loops still carry isl's iterator names), simplification, ``cpu_parallel`` marks to
  OpenMP loops.
* Code generation: contraction of temporaries, per-thread heap buffers, scalar
  replacement, flattening; for vector targets the micro-kernels, the vectoriser
  (:mod:`polycomp.lowering.vectorize`), next-row prefetches (:mod:`.prefetch`) and the
  AVX2/AVX-512 printer
  (:mod:`polycomp.hw.cpu.vector_printer`).

Options (``compile_kernel(..., options=...)``): ``parallel``, ``fuse``, ``microkernel``,
``interchange``, ``contract``, ``vectorize`` (all default True), ``tail`` (``"mask"``,
the default, or ``"scalar"``: how the last ``n mod L`` iterations of a vector loop run),
``reduce_unroll`` (vector accumulators per reduction, default 4), ``reciprocal``
(default True: vector division by a loop-invariant value multiplies by its reciprocal),
``prefetch`` (default True: the busiest vector loop of a row-wise loop nest prefetches
the next row of its inputs), ``gemm_tiles=(MC, NC, KC)``, ``gemm_register=(MR, NI)``,
``gemm_epilogue`` (default True: an elementwise stage after a product runs on each
register tile).
"""
from __future__ import annotations

from polycomp import ir
from polycomp.hw.target import Target
from polycomp.lowering.flatten import flatten
from polycomp.lowering.simplify import simplify


def schedule_passes(target: Target, options: dict) -> list:
    """Passes after the initial (program-order or isl) schedule: fusion of memory-bound
    stage chains, then the choice of parallel loops."""
    from polycomp.scheduler.cpu_backbone_tile import CpuBackboneTilePass
    from polycomp.scheduler.cpu_fuse import CpuFusePass
    from polycomp.scheduler.cpu_pack import CpuPackPass
    from polycomp.scheduler.cpu_parallel import CpuParallelPass
    from polycomp.scheduler.cpu_reduce_interchange import CpuReduceInterchangePass
    passes = []
    if target.isa and options.get("microkernel", True):
        passes += [CpuBackboneTilePass(), CpuPackPass()]
    if target.isa and options.get("interchange", True):
        passes.append(CpuReduceInterchangePass())
    if options.get("fuse", True):
        passes.append(CpuFusePass())
    if options.get("parallel", True):
        passes.append(CpuParallelPass())
    return passes


def ir_passes(func: ir.LoweredFunc, target: Target, options: dict) -> ir.LoweredFunc:
    """IR passes whose result the IR interpreter still runs (before flattening)."""
    from .pack import pack
    from .parallel_marks import parallelize_marked
    if options.get("_model") is not None:
        func = pack(func, options["_model"])   # needs isl's iterator names: before simplify
    f = func.with_body(simplify(func.body))
    if options.get("parallel", True):
        f = parallelize_marked(f)
    return f


def codegen(func: ir.LoweredFunc, target: Target, options: dict) -> tuple[ir.LoweredFunc, str]:
    from .codegen import emit_c
    from .contract import contract
    from .hoist_alloc import hoist_allocations
    from .scalar_replace import scalar_replace
    if options.get("contract", True):
        func = scalar_replace(hoist_allocations(contract(func)))
    flat = flatten(func)
    flat = flat.with_body(simplify(flat.body))
    if not target.isa or not options.get("vectorize", True):
        return flat, emit_c(flat)
    from polycomp.lowering.vectorize import vectorize

    from .vector_prelude import prelude
    from .vector_printer import printer_for
    from .microkernel import microkernels
    flat = microkernels(flat, target.vector_lanes)
    flat = vectorize(flat, target.vector_lanes, tail=options.get("tail", "mask"),
                     reduce_unroll=int(options.get("reduce_unroll", 4)),
                     reciprocal=bool(options.get("reciprocal", True)))
    if options.get("prefetch", True):
        from .prefetch import prefetch_next_rows
        flat = prefetch_next_rows(flat, max_bytes=target.l2_bytes // 4)
    return flat, emit_c(flat, printer_for(target.isa, target.has_fma), prelude(target.isa))
