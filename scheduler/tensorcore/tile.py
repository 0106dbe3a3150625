"""Pass: hardware-aligned tiling of contraction groups for Tensor Cores (mma.m16n8k16).

Assumes: the tree of :class:`~polycomp.scheduler.common.pattern_schedule.PatternSchedulePass`
(``backbone:<n>`` mark -> output band ``B(o)`` -> sequence of the group's statements,
the update's filter holding the reduce band ``R(r)``), and no earlier tiling.

A group is *eligible* (:func:`gemm_view`) when ``options["tensor_cores"]`` is not
``False`` and its backbone is a ``sum`` reduction ``C[o] += fa * fb`` in float32 whose
factors are float16 (or both bfloat16) loads converted to float32, a factor possibly
under ``select(cond, ., 0)`` (padding), every domain starting at 0, and no prologue.
The *GEMM view* of ``C``: the operand ``B`` is the factor that uses the innermost
output dimension ``o_n`` (and the other factor does not), ``A`` the other one; ``o_m``
is the innermost output dimension that only ``A`` uses; ``r_k`` is the first reduce
axis (channels for a convolution).  Every output dimension must be used by a factor
(both: a batch dimension) and every reduce axis by both.  The other output dimensions
and reduce axes keep tile 1 (implicit GEMM: a convolution's ``n, y`` and filter window
``kh, kw`` are loops around the GEMM tiles).

On a C SCoP the GEMM views are those of the nests that
:class:`~polycomp.scheduler.tensorcore.scop.ScopTensorCorePass` rewrote (same tree shape,
one reduce axis; kernel numbers after every nest's, see
:func:`~polycomp.scheduler.tensorcore.scop.scop_kernel_base`).

Configuration (``options["tc_tile"]``, a :class:`TcConfig` or a dict with ``block``,
``warp``, ``k``, ``stages``, ``swizzle``): the tile tuple ⟨block BM x BN⟩⟨warp WM x WN⟩
⟨instruction 16 x 8 x 16⟩ with BM, BN multiples of WM, WN, WM a multiple of 16, WN of 16,
a K tile KT of 32 or 64 and 1-4 pipeline stages.  Default (:func:`default_config`)
128x128 / 64x64 / KT 32 / 3 stages (64x128 / 32x32 for gathered operands).  The
shared-memory footprint of all stages, ``stages * (BM*KT + KT*BN) * 2`` bytes, must fit
the target's opt-in per-block limit: the staging of ``A`` and ``B`` is decided by the
promotion engine (:func:`~polycomp.scheduler.tensorcore.staging.stage_operands`: reference
groups, ``BM x KT`` / ``KT x BN`` footprints with a swizzled ``stages``-deep layout,
level ``shared`` by the ``async`` copy rule), and a decision refused over budget is
noted and raised as :class:`~polycomp.errors.ResourceLimitError`; past 48 KiB the code
generator uses dynamic shared memory with the opt-in attribute.

Result, for each eligible group ``g`` (kernel number ``n = #groups + index``):

* ``kernel:<n>`` -> ``tc:block:<g>`` -> the *block band*
  ``[.., floor(o_m/BM), .., floor(o_n/BN), ..]`` (other members ``o_d``; coincident flags
  from the dependences) -> the group's sequence, where
* the init and every epilogue filter hold ``tc:frag:<g>`` -> ``[o_m mod BM, o_n mod BN]``,
* the update filter holds ``[r_d : d != k]`` (if any) -> ``pipeline:<stages>`` ->
  ``[floor(r_k/KT)]`` (the K-tile loop) -> ``tc:mma:<g>`` -> ``[o_m mod BM, o_n mod BN,
  r_k mod KT]``.

Nothing is mapped to threads in the tree: the marked point bands (one block tile, or
one block tile x one K tile) are expanded by :mod:`polycomp.hw.cuda.tensorize` into
warp-level code (fragments, ``ldmatrix``, ``mma``, ``cp.async`` copies), so every loop
of the kernel above the marks is executed uniformly by the whole thread block (the
barriers of the copies need that).  The launch geometry is registered by
:class:`~polycomp.scheduler.tensorcore.map.TensorCoreMappingPass` only after the generic GPU
passes ran, so they leave these kernels alone.  ``gpu_kernels(ctx).tc_plans[g]`` holds the
:class:`TcPlan` (with its staging decisions, also noted as remarks after the group's
line).

Legality: for matmul-like groups (one reduce axis) the order of every pair of
dependent instances is kept (the K tile and intra-tile members split ``r_k`` in
order).  With several reduce axes (convolutions) the filter-window loops are moved
outside the channel tiles: a reordering of the ``+`` reduction, legal up to rounding
(as is the summation order inside ``mma``) but not under isl's exact dependences, so
debug-mode legality checking reports those update -> update dependences.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import islpy as isl

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import ResourceLimitError, ScheduleError
from polycomp.frontend.dsl_model import DslModel
from polycomp.hw.target import CUDA_MAX_THREADS_PER_BLOCK, CUDA_WARP_SIZE
from polycomp.model import Statement
from polycomp.scheduler.common import contraction, marks
from polycomp.scheduler.common.classify import FusionGroup, fusion_groups
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import mark_coincidence
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.gpu.tile import backbone_marks, nth_backbone, output_band
from polycomp.scheduler.tensorcore import hopper
from polycomp.scheduler.tensorcore.staging import (
    TcStaging,
    shared_limit,
    stage_operands,
    stage_operands_tma,
)
from polycomp.state import CompileState

TC_DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class TcConfig:
    block: tuple = (128, 128)     # BM, BN
    warp: tuple = (64, 64)        # WM, WN
    k: int = 32                   # KT
    stages: int = 3
    swizzle: bool = True

    @property
    def warps(self) -> tuple:
        """(warps along M, warps along N)."""
        return self.block[0] // self.warp[0], self.block[1] // self.warp[1]

    @property
    def threads(self) -> int:
        return CUDA_WARP_SIZE * self.warps[0] * self.warps[1]

    def shared_bytes(self, itemsize: int = 2) -> int:
        bm, bn = self.block
        return self.stages * (bm * self.k + self.k * bn) * itemsize

    def check(self) -> "TcConfig":
        (bm, bn), (wm, wn) = self.block, self.warp
        if wm % 16 or wn % 16 or wm <= 0 or wn <= 0 or bm % wm or bn % wn:
            raise ScheduleError(f"tensor-core tile {self.block} / warp tile {self.warp}: warp "
                                f"tiles must be multiples of 16 dividing the block tile")
        if self.k not in (32, 64):
            raise ScheduleError(f"tensor-core K tile must be 32 or 64, got {self.k}")
        if not 1 <= self.stages <= 4:
            raise ScheduleError(f"mma.sync pipeline stages must be 1..4, got {self.stages}")
        if self.threads > CUDA_MAX_THREADS_PER_BLOCK:
            raise ResourceLimitError(f"tensor-core tiling uses {self.threads} threads per block")
        return self


def default_config(view=None) -> TcConfig:
    """128x128 / 64x64 warp tiles (4 warps) / KT 32 / 3 stages; 64x128 / 32x32 (8 warps)
    for a group whose operand copies are gathers (convolutions, padding selects): their
    address arithmetic needs registers (no spills on sm_80/sm_90 either way)."""
    gather = view is not None and (view.group.kind == "conv" or view.a.guard is not None
                                   or view.b.guard is not None)
    return TcConfig(block=(64, 128), warp=(32, 32)) if gather else TcConfig()


def tc_config(opt, view=None) -> TcConfig:
    if opt is None:
        return default_config(view).check()
    if isinstance(opt, TcConfig):
        return opt.check()
    base = default_config(view)  # opt: a TensorCoreTileOption; missing parts: defaults
    return TcConfig(tuple(opt.block or base.block), tuple(opt.warp or base.warp),
                    int(opt.k or base.k), int(opt.stages or base.stages),
                    base.swizzle if opt.swizzle is None else bool(opt.swizzle)).check()


@dataclass(eq=False)
class Factor:
    """One factor of the product: ``cast(load)`` (f16/bf16 -> f32), maybe guarded."""
    expr: ir.Expr          # the factor as written (float32)
    load: ir.Load
    guard: ir.Expr | None
    dims: set              # iterators it uses


@dataclass(eq=False)
class GemmView:
    """The backbone of a group seen as ``C[m, n] += A[m, k] * B[k, n]``."""
    group: FusionGroup
    stage: Any             # the backbone's frontend Stage
    init: Statement
    update: Statement
    epilogue: list[Statement]   # in order
    a: Factor
    b: Factor
    m_dim: int             # index into stage.iters
    n_dim: int
    k_dim: int             # index into the reduce axes
    in_dtype: str

    @property
    def out_extents(self) -> tuple:
        return tuple(self.stage.output.buffer.shape)

    @property
    def red_extents(self) -> tuple:
        return tuple(a.extent for a in self.stage.reduce_axes)


@dataclass(eq=False)
class TcPlan:
    """The Tensor Core tiling of group ``group`` (kernel ``kernel``): its GEMM view, its
    configuration and the engine's staging decisions of the operands (set once the
    tree is tiled; :mod:`polycomp.scheduler.tensorcore.staging`)."""
    view: GemmView
    config: TcConfig
    kernel: int
    group: int
    notes: list = field(default_factory=list)
    staging: TcStaging | None = None
    # sm_90a wgmma plans (config a WgmmaConfig): the TMA forms of A and B
    tma: tuple | None = None


def _factor(f: contraction.Factor) -> Factor | None:
    """The Tensor Core form of a factor of the shared matcher: ``cast(load)`` or
    ``select(guard, cast(load), 0)`` with a float16/bfloat16 load widened to float32
    (the iterators of the guard count as used)."""
    load: ir.Load = f.load
    inner = f.expr.t if isinstance(f.expr, ir.Select) else f.expr
    if not (isinstance(inner, ir.Cast) and inner.dtype == "float32"
            and inner.value is load and load.dtype in TC_DTYPES):
        return None
    dims = set(f.dims)
    if f.guard is not None:
        dims |= contraction.iterators_of(f.guard)
    full = inner if f.guard is None else \
        ir.Select(f.guard, inner, ir.FloatImm(0.0), "float32")
    return Factor(full, load, f.guard, dims)


def gemm_view(group, model) -> GemmView | str:
    """The GEMM view of ``group`` or the reason it has none (see the module docstring)."""
    st = group.backbone
    if group.kind not in ("contraction", "conv"):
        return f"{group.kind} backbone"
    if group.prologue:
        return "the group has a prologue"
    if getattr(st, "reduce_op", None) != "sum" or st.output.buffer.dtype != "float32":
        return "not a float32 sum"
    body = st.body
    if not (isinstance(body, ir.Binary) and body.op == "*"):
        return "the reduction body is not a product"
    c = contraction.match_contraction(st)   # the shared matcher; below, the mma's conditions
    if isinstance(c, str):
        return c
    fa, fb = _factor(c.a), _factor(c.b)
    if fa is None or fb is None:
        return "the factors are not float16/bfloat16 loads converted to float32"
    if fa.load.dtype != fb.load.dtype:
        return "the factors have different dtypes"
    iters = list(st.iters)
    red = [a.var for a in st.reduce_axes]
    if not iters or not red:
        return "no output or reduce dimension"
    if any(not ir.is_const(a.lo, 0) for a in st.reduce_axes):
        return "a reduce axis does not start at 0"
    n_var = iters[-1]
    if (n_var in fa.dims) == (n_var in fb.dims):
        return "the innermost output dimension is used by both or neither factor"
    if n_var in fa.dims:
        fa, fb = fb, fa
    m_cands = [k for k, v in enumerate(iters) if v in fa.dims and v not in fb.dims]
    if not m_cands:
        return "no output dimension used by the A factor only"
    for v in iters:
        if v not in fa.dims and v not in fb.dims:
            return f"output dimension {v.name} is used by no factor"
    for v in red:
        if v not in fa.dims or v not in fb.dims:
            return f"reduce axis {v.name} is not used by both factors"
    stmts: dict[Any, list[Statement]] = {s.stage: [] for s in model.statements}
    for s in model.statements:
        stmts[s.stage].append(s)
    init = next(s for s in stmts[st] if s.kind == "init")
    update = next(s for s in stmts[st] if s.kind == "update")
    epi = [s for e in group.epilogue for s in stmts[e]]
    return GemmView(group, st, init, update, epi, fa, fb, m_cands[-1], len(iters) - 1, 0,
                    fa.load.dtype)


def _params(model) -> str:
    return "[" + ", ".join(p.name for p in model.params) + "] -> " if model.params else ""


def _mupa(model, stmt_exprs: list) -> isl.MultiUnionPwAff:
    """A band's partial schedule from ``[(statement, [expr per member, in its dims])]``."""
    parts = []
    for s, exprs in stmt_exprs:
        dims = ", ".join(f"d{k}" for k in range(len(s.iters)))
        parts.append(f"{s.name}[{dims}] -> [{', '.join(exprs)}]")
    um = isl.UnionMap.read_from_str(model.ctx, _params(model) + "{ " + "; ".join(parts) + " }")
    return isl.MultiUnionPwAff.from_union_map(um)


class TensorCoreTilingPass(Pass):
    name = "tc-tiling"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        if not ctx.cuda_options.tensor_cores:
            return schedule
        model = ctx.model
        marks = backbone_marks(schedule)
        if not isinstance(model, DslModel):   # C nests rewritten by scop-tensor-cores
            from polycomp.scheduler.tensorcore.scop import scop_kernel_base, tensor_core_views
            views = tensor_core_views(ctx).views
            base = scop_kernel_base(schedule, ctx)
            for k, name in enumerate(marks):
                view = views.get(name)
                if view is not None:
                    schedule = self._plan(schedule, k, view.group, view, ctx,
                                          base + len(gpu_kernels(ctx).tc_plans))
            return schedule
        groups = fusion_groups(model.graph)
        plans = gpu_kernels(ctx).tc_plans
        for k in range(len(marks)):
            g = _group_at(nth_backbone(schedule, k), groups, model)
            if g is None:
                continue
            view = gemm_view(g, model)
            if isinstance(view, str):
                if g.kind in ("contraction", "conv"):
                    ctx.note(self.name, f"group {k} ({g.backbone.name}): no tensor cores: {view}")
                continue
            schedule = self._plan(schedule, k, g, view, ctx, len(marks) + len(plans))
        return schedule

    def _plan(self, schedule, k, g, view, ctx, kernel):
        """Tile group ``k`` (GEMM view ``view``) as Tensor Core kernel ``kernel``: the
        wgmma form on sm_90a where its operands have TMA forms, else mma.sync."""
        model = ctx.model
        plans = gpu_kernels(ctx).tc_plans
        if hopper.wgmma_unit(ctx.target) is not None:
            ops = hopper.tma_operands(view, model)
            if not isinstance(ops, str):
                return self._tile_wgmma(schedule, k, g, view, ops, ctx, kernel)
            ctx.note(self.name, f"group {k} ({g.backbone.name}): no wgmma: {ops}; "
                                f"mma.sync")
        cfg = tc_config(ctx.cuda_options.tc_tile, view)
        need = cfg.shared_bytes(dt.itemsize(view.in_dtype))
        plan = TcPlan(view, cfg, kernel, k)
        schedule = self._tile(schedule, k, plan, ctx)
        plan.staging = stage_operands(schedule, plan, ctx.target)
        if plan.staging.refused:
            for d in plan.staging.refused:
                ctx.note(self.name, d.remark())
            limit = shared_limit(ctx.target)
            raise ResourceLimitError(
                f"tensor-core tiling of {g.backbone.name}: {cfg.stages} stage(s) of "
                f"{cfg.block[0]}x{cfg.k} + {cfg.k}x{cfg.block[1]} tiles need {need} bytes "
                f"of shared memory; {ctx.target.name} allows {limit} per block (with "
                f"the opt-in limit; fewer stages or smaller tiles fit)")
        plans[k] = plan
        ctx.note(self.name, f"group {k} ({g.backbone.name}): tensor cores {view.in_dtype} "
                            f"mma.m16n8k16, block {cfg.block}, warp {cfg.warp}, K tile "
                            f"{cfg.k}, {cfg.stages} stage(s), {need} B shared; M = "
                            f"{view.stage.iters[view.m_dim].name}, N = "
                            f"{view.stage.iters[view.n_dim].name}, K = "
                            f"{view.stage.reduce_axes[view.k_dim].var.name}")
        for d in plan.staging.decisions:
            ctx.note(self.name, d.remark())
        return schedule

    def _tile_wgmma(self, schedule, k, g, view, ops, ctx, kernel):
        """The sm_90a form (:mod:`.hopper`): the same tree, a ``wgmma`` plan whose
        stages come from the per-stage footprint of the staging decisions."""
        target = ctx.target
        opt = ctx.cuda_options.tc_tile

        def stage_bytes(cfg):
            trial = TcPlan(view, cfg, kernel, k, tma=ops)
            tiled = self._tile(schedule, k, trial, ctx)
            return sum(d.footprint.bytes() for d in
                       stage_operands_tma(tiled, trial, target, stages=1).decisions)
        cfg = hopper.wgmma_config(opt, view, ops, target, stage_bytes)
        plan = TcPlan(view, cfg, kernel, k, tma=ops)
        schedule = self._tile(schedule, k, plan, ctx)
        plan.staging = stage_operands_tma(schedule, plan, target)
        if plan.staging.refused:
            for d in plan.staging.refused:
                ctx.note(self.name, d.remark())
            raise ResourceLimitError(f"wgmma tiling of {g.backbone.name}: the staged tiles "
                                     f"exceed {target.name}'s shared memory")
        gpu_kernels(ctx).tc_plans[k] = plan
        st = view.stage
        cm, cn = cfg.warps
        ctx.note(self.name, f"group {k} ({g.backbone.name}): tensor cores {view.in_dtype} "
                            f"wgmma.m64n{cfg.warp[1]}k16, block {cfg.block}, {cfg.consumers} "
                            f"consumer warpgroup(s) ({cm}x{cn}) of {cfg.warp} + 1 producer "
                            f"(TMA), K tile {cfg.k}, {cfg.stages} stage(s) of "
                            f"{cfg.stage_bytes(dt.itemsize(view.in_dtype))} B in an mbarrier "
                            f"ring, {cfg.swizzle}-byte swizzle, "
                            f"{'persistent' if cfg.persistent else 'one tile per block'}, "
                            f"registers {cfg.producer_registers}/{cfg.consumer_registers} "
                            f"(setmaxnreg); M = {st.iters[view.m_dim].name}, N = "
                            f"{st.iters[view.n_dim].name}, K = "
                            f"{st.reduce_axes[view.k_dim].var.name}; A "
                            f"{'M' if ops[0].mn_major else 'K'}-major, B "
                            f"{'N' if ops[1].mn_major else 'K'}-major")
        for d in plan.staging.decisions:
            ctx.note(self.name, d.remark())
        return schedule

    def _tile(self, schedule, k, plan, ctx):
        view, cfg, model = plan.view, plan.config, ctx.model
        mark = nth_backbone(schedule, k)
        band = output_band(mark)
        if band is None:
            raise ScheduleError(f"group {k}: no output band to tile for tensor cores")
        nout = len(view.stage.iters)
        bm, bn = cfg.block
        stmts = [view.init, view.update] + view.epilogue

        def block_exprs(s):
            out = []
            for d in range(nout):
                t = bm if d == view.m_dim else bn if d == view.n_dim else 1
                out.append(f"floor(d{d}/{t})" if t > 1 else f"d{d}")
            return out
        point = lambda: [f"d{view.m_dim} mod {bm}", f"d{view.n_dim} mod {bn}"]  # noqa: E731
        block = _mupa(model, [(s, block_exprs(s)) for s in stmts])
        seq = band.delete()                      # the group's sequence
        node = seq.insert_partial_schedule(block).band_set_permutable(1)
        node = mark_coincidence(node, model.dependences)
        node = node.insert_mark(marks.make(marks.TC_BLOCK, k))
        node = node.insert_mark(marks.make(marks.KERNEL, plan.kernel))
        seq = node.child(0).child(0).child(0)    # kernel -> tc:block -> band -> sequence
        if seq.get_type() != isl.schedule_node_type.sequence:
            raise ScheduleError(f"group {k}: expected the init/update sequence below the band")
        names = {s.name: s for s in stmts}
        kred = view.k_dim
        nred = len(view.stage.reduce_axes)
        for c in range(seq.n_children()):
            filt = seq.child(c)
            sname = [s.get_tuple_name() for s in _sets(filt.filter_get_filter())][0]
            s = names[sname]
            below = filt.child(0)
            depth = below.get_tree_depth()
            if s is view.update:
                if below.get_type() == isl.schedule_node_type.band:
                    below = below.delete()
                kd = nout + kred
                pt = _mupa(model, [(s, point() + [f"d{kd} mod {cfg.k}"])])
                n = below.insert_partial_schedule(pt)
                n = n.insert_mark(marks.make(marks.TC_MMA, k))
                n = n.insert_partial_schedule(_mupa(model, [(s, [f"floor(d{kd}/{cfg.k})"])]))
                n = n.insert_mark(marks.make(marks.PIPELINE, k))  # stages: the plan's
                outer = [f"d{nout + r}" for r in range(nred) if r != kred]
                if outer:
                    n = n.insert_partial_schedule(_mupa(model, [(s, outer)]))
            else:
                n = below.insert_partial_schedule(_mupa(model, [(s, point())]))
                n = n.insert_mark(marks.make(marks.TC_FRAG, k))
            while n.get_tree_depth() > depth - 1:
                n = n.parent()
            seq = n.parent()
        return seq.get_schedule()


def _group_at(mark, groups, model):
    """The fusion group whose backbone's statements are below ``mark`` (None if not one)."""
    names = {x.get_tuple_name() for x in _sets(mark.get_domain())}
    for g in groups:
        own = {s.name for s in model.statements if s.stage is g.backbone}
        if own and own <= names:
            return g
    return None


def _sets(us):
    from polycomp.islutil import sets
    return sets(us)
