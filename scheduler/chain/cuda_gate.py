"""When the float32 CUDA chain kernel pays: the rule option ``chain=True`` applies.

The data-movement model (:mod:`.movement_model`) always prefers the fused chain: it
moves the intermediate nowhere.  On a GPU that is not the whole story.  The fused kernel
(:mod:`.cuda_kernel`) gives each block a ``TM x TN`` tile of ``O`` and walks the whole
``L`` loop in it, so its grid has only ``batch * ceil(M/TM) * ceil(N/TN)`` blocks, and
the unfused pipeline's tiled GEMMs, with the intermediate in the (40-60 MB) L2 cache,
are close to the fp32 throughput of the whole device.  Measured on an H200 (132 SMs,
2026-11-27, ``scripts/gpu_bundle_bench.py`` cases, docs/fusion.md):

* with a softmax or elementwise stages between the products, fusion won wherever the
  fused grid had at least 48 blocks (attention at DETR, ViT-B, ViT-H, SETR: 1.13-2.15x;
  bmm+softmax G1, G2: 1.45x, 2.0x) and lost with 8 and 16 blocks (G10, G12: 0.71x,
  0.63x): the unfused softmax's passes over the intermediate are the traffic fusion
  saves, and a grid that fills too few SMs loses more than that;
* with nothing between the products it lost at every shape (0.20-0.47x, 8 to 96
  blocks): two tiled GEMMs with the intermediate in L2 are faster than one kernel that
  serialises the whole ``L`` loop per block.

Since then the kernel splits the ``l`` loop across blocks when its grid is small
(flash-decoding, :func:`~.cuda_kernel.split_count`: up to one block per SM, at least
two ``l`` tiles per split, a second kernel combining the partial tiles), so the grid
counted here is the split one, ``batch * ceil(M/TM) * ceil(N/TN) * S``.  The split
kernels have **not been timed on a GPU**; the threshold is the measured one for
unsplit grids (G10 at ``(1, 512, 64, 64, 256)`` gets ``S = 4``, 32 blocks: still below
it on both targets; G12 ``S = 6`` on ``cuda``, 96 blocks, and ``S = 8`` on
``cuda-sm90``, 128 blocks: fused).  Splitting does not change the rule for chains with
nothing between the products: they lost at 96 unsplit blocks (G2) as well, where the
grid is not the problem.

So ``chain=True`` (the default) fuses on CUDA when a stage sits between the products
*and* the fused grid, after splitting, fills at least a third of the SMs
(:data:`MIN_SM_FRACTION`);
``chain="force"`` fuses whenever the chain is legal (tests, measurements), and
``chain=False`` never does.  Symbolic extents count as the plan's ``BIG`` (4096), so a
kernel of symbolic shape is fused when it has a middle stage.
"""
from __future__ import annotations

from polycomp.scheduler.chain.cuda_kernel import CudaChainTiles
from polycomp.scheduler.chain.plan import ChainPlan

__all__ = ["MIN_SM_FRACTION", "fused_blocks", "why_not_fuse"]

#: the fused grid must have at least this fraction of the device's SMs in blocks
MIN_SM_FRACTION = 1 / 3


def fused_blocks(plan: ChainPlan, tiles: CudaChainTiles) -> int:
    """Blocks of the fused kernel's grid: ``batch * ceil(M/TM) * ceil(N/TN) * S``
    (``S = tiles.splits``, the ``l`` splits)."""
    d = plan.dims
    return d.batch * -(-d.m // tiles.tm) * -(-d.n // tiles.tn) * tiles.splits


def why_not_fuse(plan: ChainPlan, tiles: CudaChainTiles, sms: int) -> str | None:
    """None where the rule of the module docstring fuses the chain, else why not."""
    m = plan.match
    if not m.elementwise and not m.has_softmax:
        return ("nothing between the products: two tiled GEMMs with the intermediate in "
                "L2 beat the fused float32 kernel (0.20-0.47x on an H200); "
                "chain='force' fuses anyway")
    blocks = fused_blocks(plan, tiles)
    need = -(-sms // int(round(1 / MIN_SM_FRACTION)))
    if blocks < need:
        split = f" ({tiles.splits} l splits)" if tiles.splits > 1 else ""
        return (f"the fused grid has {blocks} blocks{split} for {sms} SMs (at least {need} pay "
                f"for the lost parallelism); chain='force' fuses anyway")
    return None
