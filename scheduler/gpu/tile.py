"""Pass: multi-level tiling of each fusion group's output band for the GPU.

Assumes: the tree of :class:`~polycomp.scheduler.common.pattern_schedule.PatternSchedulePass`:
under each ``backbone:<n>`` mark an (optional prologue sequence and an) output band
``B(o)`` whose child is a leaf or a sequence of the group's statements, the update
statement's filter holding a band over the reduce axes ``R(r)``.

Tile configuration (``ctx.options.tile``, else :func:`default_tile_config`): a block
tile ``T`` per output dimension, a thread block ``P`` (threads per dimension, ``T`` a
multiple of ``P``) and a reduction tile ``KT`` for the first reduce axis of a
contraction/conv.  The instruction level is one element per thread per step on CUDA
cores (Tensor Core tiles are the next level, added by the tensor-core pass).

Result, per group:

* ``B(o)`` becomes the *block band* ``[floor(o/T)]`` (mark ``tile:block``),
* the *point band* ``[o mod T]`` (mark ``tile:point``) is sunk into every statement
  filter of the group (so each child executes its statements for all points of the
  block tile),
* in the update filter the reduce band becomes ``[floor(r0/KT)]`` (mark ``tile:reduce``)
  above ``[r0 mod KT, r1, ...]`` above the point band: the order block → K-tile →
  intra-tile reduction → point that shared-memory promotion (copies per K tile) and
  register tiling (an outer product per reduction step) need.

Partial tiles need no special code: the tile bands keep the original (symbolic) domain,
so isl's AST generation emits ``min`` bounds/guards for the last tiles.  Tiling a
permutable band and sinking coincident point loops below a serial K-tile loop
reorders only independent instances (the point members are coincident), so every
dependence is preserved.  Each decision (sizes, per-thread work) is noted for
``polycomp explain``.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polycomp.errors import ResourceLimitError, ScheduleError
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.pattern_schedule import backbones
from polycomp.scheduler.common.tree import band_coincidence
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.state import CompileState


@dataclass(frozen=True)
class TileConfig:
    block: tuple          # tile size per output dimension (outermost first)
    threads: tuple        # threads per output dimension (1 for unmapped dims)
    k: int = 0            # reduction tile (0: none)

    def per_thread(self) -> int:
        n = 1
        for t, p in zip(self.block, self.threads):
            n *= -(-t // p)
        return n


def default_tile_config(kind: str, ndims: int, target) -> TileConfig:
    """Heuristic sizes: 64x64 block tiles, 16x16 threads, K tile 16 for contractions
    (4x4 accumulators per thread); 32x32 tiles with 8x32 threads for 2-D elementwise;
    256 per block for 1-D stages; outer dimensions of higher-rank outputs get tile 1."""
    if ndims == 0:
        return TileConfig((), (), 0)
    if kind == "conv" and ndims == 4:   # (n, f, oh, ow): 32 filters x 4x16 pixels
        return TileConfig((1, 32, 4, 16), (1, 8, 1, 16), 8)
    if kind in ("contraction", "conv"):
        inner = ((64, 64), (16, 16)) if ndims >= 2 else ((128,), (128,))
        k = 16 if kind == "contraction" else 8
    elif kind == "reduce":
        inner = ((32, 32), (8, 32)) if ndims >= 2 else ((128,), (128,))
        k = 0
    else:
        inner = ((32, 32), (8, 32)) if ndims >= 2 else ((256,), (256,))
        k = 0
    n_in = len(inner[0])
    block = (1,) * (ndims - n_in) + inner[0]
    threads = (1,) * (ndims - n_in) + inner[1]
    return TileConfig(block, threads, k)


def tile_config_from_options(opt, kind, ndims, target) -> TileConfig:
    if opt is None:
        return default_tile_config(kind, ndims, target)
    # a TileOption (polycomp.options): missing parts take the defaults
    base = default_tile_config(kind, ndims, target)
    cfg = TileConfig(tuple(opt.block or base.block), tuple(opt.threads or base.threads),
                     int(opt.k or base.k))
    if len(cfg.block) < ndims:  # sizes given for the innermost dims only
        pad = ndims - len(cfg.block)
        cfg = TileConfig((1,) * pad + cfg.block, (1,) * pad + cfg.threads, cfg.k)
    cfg = TileConfig(cfg.block[-ndims:] if ndims else (), cfg.threads[-ndims:] if ndims else (),
                     cfg.k)
    for t, p in zip(cfg.block, cfg.threads):
        if t < 1 or p < 1 or t % p:
            raise ScheduleError(f"tile {cfg.block} is not a multiple of the thread block "
                                f"{cfg.threads}")
    nthreads = 1
    for p in cfg.threads:
        nthreads *= p
    if nthreads > target.cuda.max_threads_per_block:
        raise ResourceLimitError(f"tile configuration uses {nthreads} threads per block; "
                                 f"{target.name} allows {target.cuda.max_threads_per_block}")
    return cfg


def _find(node, pred):
    """First descendant (pre-order, including node) satisfying pred, or None."""
    if pred(node):
        return node
    for k in range(node.n_children()):
        r = _find(node.child(k), pred)
        if r is not None:
            return r
    return None


def backbone_marks(schedule: isl.Schedule) -> list[str]:
    out = []

    def fn(n):
        if n.get_type() == isl.schedule_node_type.mark and \
                marks.is_kind(n, marks.BACKBONE):
            out.append(n.mark_get_id().get_name())
        return True
    schedule.get_root().foreach_descendant_top_down(fn)
    return out


def nth_backbone(schedule: isl.Schedule, k: int) -> isl.ScheduleNode:
    """The k-th ``backbone:`` mark node, pre-order."""
    found: list = []

    def walk(n):
        if len(found) > k:
            return
        if n.get_type() == isl.schedule_node_type.mark and \
                marks.is_kind(n, marks.BACKBONE):
            found.append(n)
            return
        for c in range(n.n_children()):
            walk(n.child(c))
    walk(schedule.get_root())
    if len(found) <= k:
        raise ScheduleError(f"no backbone mark number {k} in the schedule")
    return found[k]


def output_band(mark: isl.ScheduleNode) -> isl.ScheduleNode | None:
    """The output band of a group: right below its mark, or below the last child of the
    prologue sequence.  None for a group without output dimensions (its mark's child is
    the init/update sequence, whose bands are reduction bands)."""
    n = mark.child(0)
    if n.get_type() == isl.schedule_node_type.sequence:
        first = n.child(0).child(0)
        if not (first.get_type() == isl.schedule_node_type.mark and
                marks.name_of(first) == marks.PROLOGUE):
            return None
        n = n.child(n.n_children() - 1).child(0)
    return n if n.get_type() == isl.schedule_node_type.band else None


def _mv(space, sizes, ctx):
    mv = isl.MultiVal.zero(space)
    for m, s in enumerate(sizes):
        mv = mv.set_val(m, isl.Val.int_from_si(ctx, int(s)))
    return mv


def _member_last(band, m) -> isl.PwAff:
    """The largest value of band member ``m`` over the band's domain (a PwAff of the
    parameters)."""
    upa = band.band_get_partial_schedule().get_union_pw_aff(m)
    rng = isl.UnionMap.from_union_pw_aff(upa).intersect_domain(band.get_domain()).range()
    return isl.Set.from_union_set(rng).dim_max(0)


def find_first(schedule: isl.Schedule, pred) -> isl.ScheduleNode | None:
    """The first node (pre-order) of ``schedule`` satisfying ``pred(node)``."""
    return _find(schedule.get_root(), pred)


def is_marked(node, kind: str) -> bool:
    """Is ``node``'s parent a mark of ``kind`` (:mod:`~polycomp.scheduler.common.marks`)?"""
    return node.has_parent() and marks.is_kind(node.parent(), kind)


def under_mark(node, kind: str) -> bool:
    """Does ``node`` have an ancestor mark of ``kind``?"""
    n = node
    while n.has_parent():
        n = n.parent()
        if marks.is_kind(n, kind):
            return True
    return False


def _is_band(n):
    return n.get_type() == isl.schedule_node_type.band


def _child_is_leaf(n):
    return n.n_children() == 1 and n.child(0).get_type() == isl.schedule_node_type.leaf


class GpuTilingPass(Pass):
    name = "gpu-tiling"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        kinds = [backbones(ctx).of(m).kind for m in backbone_marks(schedule)]
        reduce_tiles = {}
        # 1. block tiles of every group's output band
        for k, kind in enumerate(kinds):
            if kind == "rowreduce":   # mapped by RowReductionMappingPass
                continue
            band = output_band(nth_backbone(schedule, k))
            if band is None:
                ctx.note(self.name, f"group {k} ({kind}): no output band, not tiled")
                continue
            cfg = tile_config_from_options(ctx.cuda_options.tile, kind, band.band_n_member(),
                                           ctx.target)
            gpu_kernels(ctx).tile_configs[k] = cfg
            # the last index of every output dimension (for full-tile isolation)
            gpu_kernels(ctx).output_last[k] = [
                _member_last(band, m) for m in range(band.band_n_member())]
            coinc = band_coincidence(band, ctx.model.dependences)
            node = band.band_tile(_mv(band.band_get_space(), cfg.block, band.get_ctx()))
            for m, c in enumerate(coinc):
                node = node.band_member_set_coincident(m, int(c))
            point = node.child(0)
            for m, c in enumerate(coinc):
                point = point.band_member_set_coincident(m, int(c))
            node = point.parent().insert_mark(marks.make(marks.TILE_BLOCK, k)).child(0)
            # 2. sink the point band into every statement child of the group
            point = node.child(0)
            if point.child(0).get_type() != isl.schedule_node_type.leaf:
                point = point.band_sink()
            schedule = point.get_schedule()
            reduce_tiles[k] = cfg.k
            ctx.note(self.name, f"group {k} ({kind}): block tile {cfg.block}, threads "
                                f"{cfg.threads}, {cfg.per_thread()} point(s) per thread"
                     + (f", K tile {cfg.k}" if cfg.k else ""))
        # 3. mark the point bands (bands directly above a leaf inside a tiled group)
        while True:
            n = find_first(schedule, lambda n: _is_band(n) and _child_is_leaf(n)
                           and not is_marked(n, marks.TILE) and under_mark(n, marks.TILE_BLOCK))
            if n is None:
                break
            schedule = n.insert_mark(marks.make(marks.TILE_POINT)).get_schedule()
        # 4. K tiles: a reduce band directly above a point mark
        while True:
            n = find_first(schedule, lambda n: _is_band(n) and not is_marked(n, marks.TILE)
                           and n.child(0).get_type() == isl.schedule_node_type.mark
                           and marks.name_of(n.child(0)) == marks.TILE_POINT
                           and not _under_reduce_tile(n)
                           and reduce_tiles.get(tile_group_of(n), 0) > 0)
            if n is None:
                break
            schedule = self._tile_reduce(n, reduce_tiles[tile_group_of(n)]).get_schedule()
        return schedule

    def _tile_reduce(self, red, kt):
        """``R(r) -> mark -> P -> leaf``  becomes
        ``[floor(r0/KT)] -> [r0 mod KT, r1, ...] -> mark -> P -> leaf``: the point band
        innermost, so that each step of the reduction updates the thread's whole point
        tile (an outer product once the point loops are unrolled)."""
        sched = red.band_get_partial_schedule()
        v = isl.Val.int_from_si(red.get_ctx(), kt)
        r0 = sched.get_union_pw_aff(0)
        ktile = isl.MultiUnionPwAff.from_union_pw_aff(r0).scale_down_val(v).floor()
        intra = sched.set_union_pw_aff(0, r0.mod_val(v))
        mark = red.delete()                          # the tile:point mark
        mark = mark.insert_partial_schedule(intra)   # intra-tile band above the mark
        band = mark.insert_partial_schedule(ktile)   # K-tile band above that
        return band.insert_mark(marks.make(marks.TILE_REDUCE))


def _under_reduce_tile(band) -> bool:
    """Is ``band`` the intra-tile band of an already tiled reduction?"""
    p = band.parent()
    return p.get_type() == isl.schedule_node_type.band and is_marked(p, marks.TILE_REDUCE)


def tile_group_of(node) -> int:
    n = node
    while n.has_parent():
        n = n.parent()
        if marks.is_kind(n, marks.TILE_BLOCK):
            return marks.index_of(n, marks.TILE_BLOCK)
    return -1
