"""When the float32 CUDA chain kernel pays: the rule option ``chain=True`` applies.

The data-movement model (:mod:`.movement_model`) always prefers the fused chain: it
moves the intermediate nowhere.  On a GPU that is not the whole story: the fused
float32 kernel (:mod:`.cuda_kernel`) is a CUDA-core kernel at one or two blocks per SM,
each block walking its share of the ``L`` loop serially, while the unfused pipeline's
tiled GEMMs keep the intermediate in the (40-60 MB) L2 cache.  The rule below is what
three runs on an H200 (132 SMs, 2026-11-27, ``scripts/gpu_bundle_bench.py`` cases,
docs/fusion.md "Timed on an NVIDIA H200") showed, fused / unfused time:

* **A stage between the products** (softmax, scale, mask): won wherever the grid had
  enough blocks: attention DETR, ViT-B, ViT-H, SETR 1.09-2.09x unsplit (48-192 blocks),
  ViT-B 2.33x with ``l`` split in 2; bmm+softmax G1, G2 1.44x, 2.01x (64, 96 blocks);
  G10 and G12 lost unsplit (8 and 16 blocks: 0.74x, 0.63x) and won split (``S = 4``,
  32 blocks: 1.78x; ``S = 8``: 2.51x; G12 ``S = 6``, 96 blocks: 2.51x).  Lost at long
  rows: attention ``s = 4096, d = 64`` 0.92x (1024 blocks), and ``s = 2048, d = 128``
  0.48x, where ``N = 128 > TN = 64`` makes each of two n-blocks recompute the scores
  (``s = 2048, d = 64``: 1.26x; ViT-H's ``N = 80`` at ``s = 257``: 1.60x).
* **Nothing between the products**: lost unsplit at every shape (G1, G2, G10, G12:
  0.20-0.47x, 8-96 blocks) and won split: G10 ``S = 4`` 1.10x, G12 ``S = 6`` 1.35x.

So ``chain=True`` (the default) fuses a float32 chain on CUDA when

1. the grid, after splitting ``l`` (:func:`~.cuda_kernel.split_count`), has at least a
   fifth of the SMs in blocks (:data:`MIN_SM_FRACTION`: between the losing 16 and the
   winning 32 on 132 SMs);
2. with nothing between the products, ``l`` is split at least :data:`MIN_PLAIN_SPLITS`
   ways (less serial work per block is what made the plain chains win);
3. the rows are not long: ``L <= 2048``, and ``L <= 512`` where ``N`` needs more than
   one n-block (each recomputes the scores).

``chain="force"`` fuses whenever the chain is legal (tests, measurements), and
``chain=False`` never does.  Symbolic extents count as the plan's ``BIG`` (4096), so a
float32 chain of symbolic shape is not fused on CUDA by default (rule 3).  The
thresholds are measured on one GPU at 26 shapes, not derived; the Tensor Core kernel
(float16/bfloat16) has no rule: it won at every shape measured (1.9-12.5x).
"""
from __future__ import annotations

from polycomp.scheduler.chain.cuda_kernel import CudaChainTiles
from polycomp.scheduler.chain.plan import ChainPlan

__all__ = ["MAX_L", "MAX_L_RECOMPUTE", "MIN_PLAIN_SPLITS", "MIN_SM_FRACTION", "fused_blocks",
           "why_not_fuse"]

#: the fused grid (after splitting ``l``) must have at least this fraction of the SMs
MIN_SM_FRACTION = 1 / 5
#: with nothing between the products, ``l`` must be split at least this many ways
MIN_PLAIN_SPLITS = 4
#: rows longer than this are not fused; with more than one n-block, longer than
#: :data:`MAX_L_RECOMPUTE`
MAX_L = 2048
MAX_L_RECOMPUTE = 512


def fused_blocks(plan: ChainPlan, tiles: CudaChainTiles) -> int:
    """Blocks of the fused kernel's grid: ``batch * ceil(M/TM) * ceil(N/TN) * S``
    (``S = tiles.splits``, the ``l`` splits)."""
    d = plan.dims
    return d.batch * -(-d.m // tiles.tm) * -(-d.n // tiles.tn) * tiles.splits


def why_not_fuse(plan: ChainPlan, tiles: CudaChainTiles, sms: int) -> str | None:
    """None where the rule of the module docstring fuses the chain, else why not."""
    m, d = plan.match, plan.dims
    force = "; chain='force' fuses anyway"
    n_blocks = -(-d.n // tiles.tn)
    if d.l > MAX_L or (n_blocks > 1 and d.l > MAX_L_RECOMPUTE):
        why = (f"{n_blocks} n-blocks each recompute rows of L={d.l} "
               f"(> {MAX_L_RECOMPUTE})" if d.l <= MAX_L else f"rows of L={d.l} (> {MAX_L})")
        return (f"{why}: the unfused GEMMs win at such lengths (0.48-0.92x on an H200)"
                + force)
    if not m.elementwise and not m.has_softmax and tiles.splits < MIN_PLAIN_SPLITS:
        return (f"nothing between the products and l split {tiles.splits} way(s) (< "
                f"{MIN_PLAIN_SPLITS}): two tiled GEMMs with the intermediate in L2 win "
                f"(0.20-0.47x on an H200)" + force)
    blocks = fused_blocks(plan, tiles)
    need = -(-sms // int(round(1 / MIN_SM_FRACTION)))
    if blocks < need:
        split = f" ({tiles.splits} l splits)" if tiles.splits > 1 else ""
        return (f"the fused grid has {blocks} blocks{split} for {sms} SMs (at least {need} "
                f"pay for the lost parallelism)" + force)
    return None
