"""The CPU (C) pipeline: schedule passes, IR passes and code generation."""
from __future__ import annotations

from polycomp import ir
from polycomp.hw.target import Target
from polycomp.lowering.flatten import flatten
from polycomp.lowering.parallelize import parallelize
from polycomp.lowering.simplify import simplify


def schedule_passes(target: Target, options: dict) -> list:
    """Passes after the initial (program-order or isl) schedule."""
    return []


def ir_passes(func: ir.LoweredFunc, target: Target, options: dict) -> ir.LoweredFunc:
    """IR passes whose result the IR interpreter still runs (before flattening)."""
    f = func.with_body(simplify(func.body))
    if options.get("parallel", True):
        f = parallelize(f)
    return f


def codegen(func: ir.LoweredFunc, target: Target, options: dict) -> tuple[ir.LoweredFunc, str]:
    from .codegen import emit_c
    flat = flatten(func)
    flat = flat.with_body(simplify(flat.body))
    return flat, emit_c(flat)
