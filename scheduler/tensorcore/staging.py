"""Tensor Core operand staging as a use of the promotion engine.

For the group of a :class:`~polycomp.scheduler.tensorcore.tile.TcPlan` the operands
``A`` and ``B`` of the GEMM view are staged, per block tile and K tile, in shared
memory by a multi-stage ``cp.async`` pipeline.  This module states that staging with
the engine's objects (:mod:`polycomp.scheduler.promotion`):

* the :class:`~polycomp.scheduler.promotion.reference.ReferenceGroup` of each factor:
  the update's read references of the factor's load, restricted to the update's
  instances;
* its :class:`~polycomp.scheduler.promotion.footprint.ScopedFootprint` at the
  ``tc:mma`` mark (scope: one block tile x one K tile; prefix ``p`` = block band,
  other reduce axes, K tile): ``relation = { [p] -> A[a] }`` is the array footprint
  computed by isl, and the ``box`` is the staged tile in the GEMM view's coordinates —
  ``BM x KT`` at ``(m0(p), k0(p))`` for ``A``, ``KT x BN`` at ``(k0(p), n0(p))`` for
  ``B`` (the offsets are isl's lexmin of the instances' GEMM coordinates, the sizes
  those of :class:`~polycomp.scheduler.tensorcore.tile.TcConfig`: partial tiles are
  zero-filled, so the box is always full).  The staged elements are the factor
  evaluated on the box: for implicit GEMM (convolutions, padding selects) a gather of
  the array footprint, not an array box;
* a ``swizzled`` :class:`~polycomp.scheduler.promotion.footprint.Layout` (rows of KT
  for ``A``, BN for ``B``; 16-byte chunks; ``stages`` copies; no XOR when
  ``TcConfig.swizzle`` is off);
* a :class:`~polycomp.scheduler.promotion.decision.PromotionDecision` to level
  ``shared`` with the target's copy rule global -> shared ``async`` (cp.async), refused
  :attr:`~polycomp.scheduler.promotion.decision.Refusal.OVER_BUDGET` when the staged
  bytes so far (A, then A + B: all stages) exceed the per-block limit
  ``max(capacity("shared"), cuda.shared_memory_optin)``.

:mod:`polycomp.hw.cuda.tensorize` takes the shared tiles' shapes and layouts from
these decisions and records its buffers from them; the register fragments
(accumulators, ``ldmatrix`` operands) are recorded at :attr:`TcStaging.fragments`.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polycomp import dtypes as dt
from polycomp.errors import PolycompInternalError
from polycomp.islutil import maps
from polycomp.scheduler.common import marks
from polycomp.scheduler.promotion.decision import PromotionDecision, Refusal
from polycomp.scheduler.promotion.footprint import (
    Box,
    Layout,
    ScopedFootprint,
    box_of,
    footprint,
    prefix_space_map,
)
from polycomp.scheduler.promotion.reference import Reference, make_group
from polycomp.scheduler.promotion.sites import node_at, paths

CHUNK_BYTES = 16          # one cp.async / one ldmatrix row


@dataclass(eq=False)
class TcStaging:
    """The engine's decisions for one Tensor Core group: ``a`` (``As``) and ``b``
    (``Bs``) at level ``shared``; ``fragments``: the memory level of the per-thread
    fragments (accumulators, ``ldmatrix`` operands, epilogue values)."""
    a: PromotionDecision
    b: PromotionDecision
    fragments: str = "registers"

    @property
    def decisions(self) -> tuple[PromotionDecision, PromotionDecision]:
        return self.a, self.b

    @property
    def refused(self) -> list[PromotionDecision]:
        return [d for d in self.decisions if not d.promoted]

    def footprint(self, d: PromotionDecision) -> ScopedFootprint:
        if d.footprint is None:
            raise PolycompInternalError(f"{d.group.name}: a staging decision without a footprint")
        return d.footprint


def shared_limit(target) -> int:
    """Bytes of shared memory one block may use: the static capacity of the ``shared``
    level, or the CUDA opt-in limit when larger (dynamic shared memory)."""
    return max(target.capacity("shared"), target.cuda.shared_memory_optin)


def stage_operands(schedule: isl.Schedule, plan, target) -> TcStaging:
    """The staging decisions of ``plan``'s operands in the tiled ``schedule`` (the tree
    :class:`~polycomp.scheduler.tensorcore.tile.TensorCoreTilingPass` built, with the
    mark ``tc:mma:<plan.group>``); see the module docstring."""
    view, cfg = plan.view, plan.config
    node = _mma_node(schedule, plan.group)
    prefix = prefix_space_map(node).intersect_domain(
        isl.UnionSet.from_set(view.update.domain))
    nout = len(view.stage.iters)
    kd = nout + view.k_dim
    bm, bn = cfg.block
    chunk = CHUNK_BYTES // dt.itemsize(view.in_dtype)
    rule = target.memory.copy_rule("global", "shared", "async")
    scope = f"kernel {plan.kernel}"
    limit = shared_limit(target)
    out = []
    used = 0
    for factor, dims, sizes, row in ((view.a, (view.m_dim, kd), (bm, cfg.k), cfg.k),
                                     (view.b, (kd, view.n_dim), (cfg.k, bn), bn)):
        group = _factor_group(view.update, factor.load)
        rel = footprint(prefix, group.access)
        box = _gemm_box(prefix, view.update, dims, sizes)
        if rel is None or box is None:
            raise PolycompInternalError(f"{group.name}: no Tensor Core staging footprint")
        layout = Layout.swizzled(row, chunk, cfg.stages, cfg.swizzle)
        fp = ScopedFootprint(group, rel, box, layout)
        d = PromotionDecision(group, "shared", scope, fp, motive="tensor cores", copy=rule)
        used += fp.bytes()
        if used > limit:
            d.refuse(Refusal.OVER_BUDGET, used, limit)
        out.append(d)
    return TcStaging(out[0], out[1])


def stage_operands_tma(schedule: isl.Schedule, plan, target,
                       stages: int | None = None) -> TcStaging:
    """The staging decisions of a ``wgmma`` plan (:mod:`.hopper`): the footprints as in
    :func:`stage_operands` (boxes ``BM x KT`` of ``A`` and ``KT x BN`` of ``B`` in the
    GEMM view's coordinates), each stored as the tensor copy engine writes it, a
    ``tma-swizzled`` layout: panels of one swizzle span (``k`` elements for the
    ``swizzle`` span of the plan) along the operand's contiguous GEMM dimension (K, or
    M/N for an MN-major operand), ``stages`` copies (the plan's, or 1: the per-stage
    footprint the plan's stage count is computed from), level ``shared`` by the
    target's copy rule global -> shared ``tma``; refused over budget as in
    :func:`stage_operands`."""
    view, cfg = plan.view, plan.config
    a_op, b_op = plan.tma
    node = _mma_node(schedule, plan.group)
    prefix = prefix_space_map(node).intersect_domain(
        isl.UnionSet.from_set(view.update.domain))
    nout = len(view.stage.iters)
    kd = nout + view.k_dim
    bm, bn = cfg.block
    item = dt.itemsize(view.in_dtype)
    width = cfg.swizzle // item
    chunk = CHUNK_BYTES // item
    nst = cfg.stages if stages is None else stages
    rule = target.memory.copy_rule("global", "shared", "tma")
    scope = f"kernel {plan.kernel}"
    limit = shared_limit(target)
    out = []
    used = 0
    # A: box (m, k), contiguous k (dim 1) or m (dim 0); B: box (k, n), n (dim 1) or k (0)
    for factor, dims, sizes, cdim in (
            (view.a, (view.m_dim, kd), (bm, cfg.k), 0 if a_op.mn_major else 1),
            (view.b, (kd, view.n_dim), (cfg.k, bn), 1 if b_op.mn_major else 0)):
        group = _factor_group(view.update, factor.load)
        rel = footprint(prefix, group.access)
        box = _gemm_box(prefix, view.update, dims, sizes)
        if rel is None or box is None:
            raise PolycompInternalError(f"{group.name}: no TMA staging footprint")
        layout = Layout.tma_swizzled(cdim, width, sizes[1 - cdim], chunk, nst)
        fp = ScopedFootprint(group, rel, box, layout)
        d = PromotionDecision(group, "shared", scope, fp, motive="wgmma operand", copy=rule)
        used += fp.bytes()
        if used > limit:
            d.refuse(Refusal.OVER_BUDGET, used, limit)
        out.append(d)
    return TcStaging(out[0], out[1])


def _mma_node(schedule: isl.Schedule, group: int) -> isl.ScheduleNode:
    name = marks.make(marks.TC_MMA, group).get_name()
    found = paths(schedule.get_root(), lambda n: marks.name_of(n) == name)
    if len(found) != 1:
        raise PolycompInternalError(f"{len(found)} marks {name} in the Tensor Core tree")
    return node_at(schedule, found[0])


def _factor_group(update, load):
    """The update's read references of ``load`` (all reads of its array when the
    model's accesses do not keep the load's indices)."""
    reads = [a for a in update.reads if a.buffer.name == load.buffer.name]
    same = [a for a in reads if tuple(a.indices) == tuple(load.indices)]
    refs = [Reference(update, a) for a in (same or reads)]
    return make_group(load.buffer, refs, isl.UnionSet.from_set(update.domain))


def _gemm_box(prefix: isl.UnionMap, update, dims: tuple[int, int],
              sizes: tuple[int, int]) -> Box | None:
    """The staged tile: offsets from isl (the lexmin of the instances' coordinates
    ``dims`` at each prefix point), sizes ``sizes`` (the full tile)."""
    n = update.domain.dim(isl.dim_type.set)
    it = ", ".join(f"d{k}" for k in range(n))
    sel = ", ".join(f"d{k}" for k in dims)
    space = update.domain.get_space()
    coords = isl.Map.read_from_str(space.get_ctx(), f"{{ {update.name}[{it}] -> [{sel}] }}")
    coords = coords.align_params(space)
    gemm = prefix.reverse().apply_range(isl.UnionMap.from_map(coords))
    ms = maps(gemm)
    if len(ms) != 1:
        return None
    box = box_of(ms[0].coalesce())
    if box is None or any(s > t for s, t in zip(box.sizes, sizes)):
        return None
    return Box(box.offsets, list(sizes), [1, 1])
