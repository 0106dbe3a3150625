"""Chain fusion for the CUDA targets: the plan with the CUDA tiles, the schedule pass
``chain-fuse`` (:class:`CudaChainFusePass`: the fused tree of
:func:`~polycomp.scheduler.chain.tree.fused_tree` with the CUDA kernel's ``TM x TL``,
notes on the shared level) and the IR pass ``chain-cuda``.

IR pass ``chain-cuda``: the ``chain_fused`` mark becomes the fused CUDA kernel of
:mod:`.cuda_kernel` (float32 chains, CUDA cores) or :mod:`.tc_kernel` (float16 /
bfloat16 chains, Tensor Cores) (a ``kernel`` mark around its block and thread loops), and the
temporaries only the marked nest used (the intermediate, the softmax's arrays) are no
longer allocated.

Assumes: the schedule was produced by ``chain-fuse`` alone (the model is exactly one
chain, :func:`~polycomp.scheduler.chain.tree.plan_for`), so the marked nest computes the
chain's output ``O`` from ``X, Y, Z`` (and the elementwise stages' inputs) and writes
nothing else that outlives it.  Guarantees: the function's body is one ``kernel`` region
computing the same ``O`` (sums reassociated tile-wise and by the online softmax, within
float32 tolerance), or with the ``l`` loop split (:func:`.cuda_kernel.split_count`) two
kernels (partial tiles in global temporaries, then their combination), with no
statement outside a kernel, as
:func:`polycomp.hw.cuda.codegen.split_kernels` expects.
"""
from __future__ import annotations

import dataclasses
from typing import TypeAlias

from polycomp import ir
from polycomp.hw.cuda.target import STATIC_SHARED
from polycomp.scheduler.chain.call_lowering import replace_marked_nest
from polycomp.scheduler.chain.cuda_gate import why_not_fuse
from polycomp.scheduler.chain.cuda_kernel import ALPHA, CudaChainTiles, build_kernel, cuda_tiles
from polycomp.scheduler.chain.movement_model import plan_levels
from polycomp.scheduler.chain.plan import ChainPlan
from polycomp.scheduler.chain.tc_kernel import TcChainTiles, build_tc_kernel, tc_tiles
from polycomp.scheduler.chain.tree import MARK, fused_tree, plan_for
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import is_legal

__all__ = ["chain_kernels", "cuda_plan", "CudaChainFusePass"]


Tiles: TypeAlias = CudaChainTiles | TcChainTiles


def cuda_plan(state) -> tuple[ChainPlan, Tiles] | tuple[None, str]:
    """The model's chain plan with the CUDA kernel's tiles (``TM, TL``) and the shared
    level's optimum (``alpha = 16``; in 16-bit elements for the Tensor Core kernel) in
    place of the CPU levels, or None and why not."""
    plan, why = plan_for(state)
    if plan is None:
        return None, why
    half = plan.match.dtype != "float32"
    tiles: Tiles
    if half:
        tiles = tc_tiles(plan, STATIC_SHARED, state.cuda_options.chain_tiles)
    else:
        tiles = cuda_tiles(plan, STATIC_SHARED, state.cuda_options.chain_tiles,
                           state.target.cuda.sms)
        if state.cuda_options.chain != "force":      # the float32 kernel's rule
            why = why_not_fuse(plan, tiles, state.target.cuda.sms)
            if why is not None:
                return None, why
    levels = tuple(plan_levels(plan.dims, [("shared", STATIC_SHARED * (2 if half else 1))],
                               ALPHA, plan.match.has_softmax))
    return dataclasses.replace(plan, levels=levels, level="shared", tm=tiles.tm,
                               tl=tiles.tl, mr=1, nv=1, vw=1), tiles


class CudaChainFusePass(Pass):
    """``chain-fuse`` for the CUDA targets: as
    :class:`~polycomp.scheduler.chain.tree.ChainFusePass` (same assumptions and tree
    shape, checked legal with isl; else the input schedule is kept with a note), with the
    CUDA kernel's tiles in the tree and the ``chain_fused`` mark."""
    name = "chain-fuse"

    def run(self, schedule, ctx):
        plan, tiles = cuda_plan(ctx)
        if plan is None:
            ctx.note(self.name, f"no chain fused: {tiles}")
            return schedule
        assert isinstance(tiles, (CudaChainTiles, TcChainTiles))
        fused = fused_tree(plan, ctx.model)
        if not is_legal(fused, ctx.model.dependences):
            ctx.note(self.name, "no chain fused: the fused tree would violate a dependence")
            return schedule
        half = isinstance(tiles, TcChainTiles)
        for line in plan.describe()[:1] + plan.describe()[2:]:
            ctx.note(self.name, line.replace(" floats)", " 16-bit elements)") if half else line)
        where = ("mma accumulator fragments (Tensor Cores, " + plan.match.dtype + ")"
                 if half else "registers and shared memory")
        ctx.note(self.name, f"block order (b, m, l, k | n): intermediate {plan.match.t.name} "
                            f"tile {tiles.tm} x {tiles.tl} in {where} "
                            f"(CUDA kernel, {tiles.threads} threads per block)")
        return fused


def chain_kernels(func: ir.LoweredFunc, state) -> ir.LoweredFunc:
    """Replace the ``chain_fused`` mark's nest by the fused kernel (module docstring)."""
    plan, tiles = cuda_plan(state)
    if plan is None or not isinstance(tiles, (CudaChainTiles, TcChainTiles)):
        return func
    kernel = build_tc_kernel(plan, tiles) if isinstance(tiles, TcChainTiles) \
        else build_kernel(plan, tiles)
    # only global allocations are dropped (shared and local ones stay as they are)
    body, count = replace_marked_nest(func.body, MARK, kernel,
                                      lambda b: b.scope == "global")
    if count != 1:
        return func
    if isinstance(tiles, TcChainTiles):
        state.note("chain-cuda", f"fused Tensor Core kernel ({tiles.dtype}, mma.sync m16n8k16, "
                                 f"f32 accumulators): TM={tiles.tm} TL={tiles.tl} "
                                 f"KC={tiles.kc} TN={tiles.tn}, {tiles.threads} threads "
                                 f"(one warp per 16 rows), {tiles.stages}-stage cp.async "
                                 f"ring{', X resident' if tiles.x_resident else ''}, "
                                 f"{tiles.shared_bytes} B shared (model's shared-level "
                                 f"T_M={tiles.model_tm} T_L={tiles.model_tl} in 16-bit "
                                 f"elements, alpha=16)")
        return dataclasses.replace(func, body=body)
    split = (f"; l split in {tiles.splits} blocks per O tile, then a kernel combining "
             f"them" if tiles.splits > 1 else "")
    state.note("chain-cuda", f"fused CUDA kernel: TM={tiles.tm} TL={tiles.tl} TK={tiles.tk} "
                             f"TN={tiles.tn}, {tiles.threads} threads, {tiles.es}+{tiles.eo} "
                             f"accumulators per thread, {tiles.shared_floats * 4} B shared "
                             f"(model's shared-level T_M={tiles.model_tm} "
                             f"T_L={tiles.model_tl}, alpha=16){split}")
    return dataclasses.replace(func, body=body)
