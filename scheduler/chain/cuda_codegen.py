"""IR pass ``chain-cuda`` (CUDA targets): the ``chain_fused`` mark placed by
:class:`~polycomp.scheduler.chain.tree.ChainFusePass` becomes the fused CUDA kernel of
:mod:`.cuda_kernel` (a ``kernel`` mark around its block and thread loops), and the
temporaries only the marked nest used (the intermediate, the softmax's arrays) are no
longer allocated.

Assumes: the schedule was produced by ``chain-fuse`` alone (the model is exactly one
chain, :func:`~polycomp.scheduler.chain.tree.plan_for`), so the marked nest computes the
chain's output ``O`` from ``X, Y, Z`` (and the elementwise stages' inputs) and writes
nothing else that outlives it.  Guarantees: the function's body is one ``kernel`` region
computing the same ``O`` (sums reassociated tile-wise and by the online softmax, within
float32 tolerance) with no statement outside a kernel, as
:func:`polycomp.hw.cuda.codegen.split_kernels` expects.
"""
from __future__ import annotations

import dataclasses

from polycomp import ir
from polycomp.hw.cuda.target import STATIC_SHARED
from polycomp.scheduler.chain.cuda_kernel import CudaChainTiles, build_kernel, cuda_tiles
from polycomp.scheduler.chain.tree import MARK, plan_for

__all__ = ["chain_kernels", "tiles_for"]


def tiles_for(state) -> CudaChainTiles | None:
    plan, _ = plan_for(state)
    return None if plan is None else cuda_tiles(plan, STATIC_SHARED, state.cuda_options.chain_tiles)


def _buffers_used(s: ir.Stmt) -> set[str]:
    used: set[str] = set()

    def visit(n):
        if isinstance(n, (ir.Load, ir.Store)):
            used.add(n.buffer.name)
    ir.walk(s, visit)
    return used


def chain_kernels(func: ir.LoweredFunc, state) -> ir.LoweredFunc:
    """Replace the ``chain_fused`` mark's nest by the fused kernel (module docstring)."""
    plan, _ = plan_for(state)
    if plan is None:
        return func
    tiles = cuda_tiles(plan, STATIC_SHARED, state.cuda_options.chain_tiles)
    kernel = build_kernel(plan, tiles)

    class _Replace(ir.Mutator):
        count = 0

        def visit_AttrStmt(self, s):
            if s.key != MARK:
                return self.generic(s)
            self.count += 1
            return kernel

    r = _Replace()
    body = r.visit(func.body)
    if r.count != 1:
        return func
    used = _buffers_used(body)

    class _DropAlloc(ir.Mutator):
        def visit_Allocate(self, s):
            inner = self.visit(s.body)
            if s.buffer.scope == "global" and s.buffer.name not in used:
                return inner
            return ir.Allocate(s.buffer, inner)

    body = _DropAlloc().visit(body)
    state.note("chain-cuda", f"fused CUDA kernel: TM={tiles.tm} TL={tiles.tl} TK={tiles.tk} "
                             f"TN={tiles.tn}, {tiles.threads} threads, {tiles.es}+{tiles.eo} "
                             f"accumulators per thread, {tiles.shared_floats * 4} B shared "
                             f"(model's shared-level T_M={tiles.model_tm} "
                             f"T_L={tiles.model_tl}, alpha=16)")
    return dataclasses.replace(func, body=body)
