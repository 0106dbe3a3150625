"""Pass: map the block bands of tensor-core kernels onto CUDA blocks; register launches.

Assumes: the tree of :class:`~polycomp.scheduler.tensorcore.tile.TensorCoreTilingPass` (after
the generic GPU passes, which skip these kernels because they have no launch yet):
``kernel:<n>`` -> ``tc:block:<g>`` -> block band, with the :class:`TcPlan` of group ``g``
in ``gpu_kernels(ctx).tc_plans``.

For each plan: the last (at most three) coincident block-band members ``b_m`` are mapped
to block parameters ``bx<n>`` (innermost), ``by<n>``, ``bz<n>`` by the filter
``{ S : b_m(S) = b<axis><n> }`` right above the block band (as
:class:`~polycomp.scheduler.gpu.map.GpuMappingPass` does); ``gpu_kernels(ctx).launches[n]``
gets the grid (isl ``PwAff`` ``1 + max b_m`` over the domain) and the thread block
``(32, warps along N, warps along M)`` with thread parameters ``tx<n>`` (lane),
``ty<n>``, ``tz<n>`` (warp coordinates), which only the tensorized IR uses;
``ctx.ast_context`` gets ``0 <= b < grid``.

Guarantees: each block-tile instance set is executed by exactly one block (the filters
partition the instances over the block parameters, which range over the grid); the
order inside a block is unchanged.

A ``wgmma`` plan (sm_90a, :mod:`polycomp.scheduler.tensorcore.hopper`) is not mapped by
filters: the mark ``tc:persistent:<g>`` goes between ``tc:block:<g>`` and the block
band, whose members stay loops (the AST enumerates every block tile); its launch has no
block parameters (``hw/cuda/hopper.py`` deals the tile loop nest's iterations over a
persistent grid of ``min(tiles, SMs)`` blocks) and the thread block ``(128, 1 +
consumers, 1)``: ``tx<n>`` the thread in its warpgroup, ``ty<n>`` the warpgroup (0 the
producer).  Guarantees: the tree below is unchanged (every tile is still executed,
once, in the AST's order, by whichever block the IR pass deals it to).
"""
from __future__ import annotations

import islpy as isl

from polycomp.errors import ScheduleError
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.gpu.map import KernelLaunch, map_block_members, thread_param
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.gpu.tile import find_first
from polycomp.scheduler.tensorcore.hopper import is_wgmma
from polycomp.state import CompileState


class TensorCoreMappingPass(Pass):
    name = "tc-mapping"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        plans = gpu_kernels(ctx).tc_plans
        launches = gpu_kernels(ctx).launches
        for g, plan in sorted(plans.items()):
            block_mark = marks.make(marks.TC_BLOCK, g).get_name()
            mark = find_first(schedule, lambda x, name=block_mark: marks.name_of(x) == name)
            if mark is None:
                raise ScheduleError(f"tensor-core group {g} lost its tc:block mark")
            if is_wgmma(plan.config):
                schedule = mark.child(0).insert_mark(
                    marks.make(marks.TC_PERSISTENT, g)).get_schedule()
                cfg = plan.config
                n = plan.kernel
                launches[n] = KernelLaunch([], (128, 1 + cfg.consumers, 1), (),
                                           tuple(thread_param(a, n) for a in range(3)))
                grid = "persistent grid of min(tiles, SMs)" if cfg.persistent else \
                    "one block per tile"
                ctx.note(self.name, f"kernel {n}: {grid}, block (128, {1 + cfg.consumers}, "
                                    f"1) (1 producer + {cfg.consumers} consumer warpgroups)")
                continue
            schedule, launch, kctx = self._map(mark.child(0), plan)
            launches[plan.kernel] = launch
            ctx.restrict_ast_context(kctx)
            ctx.note(self.name, f"kernel {plan.kernel}: grid {[str(x) for x in launch.grid]}, "
                                f"block {launch.block} ({plan.config.warps[0]}x"
                                f"{plan.config.warps[1]} warps)")
        return schedule

    def _map(self, band, plan):
        n = plan.kernel
        nb = band.band_n_member()
        mapped = [m for m in range(nb) if band.band_member_get_coincident(m)][-3:]
        blocks = map_block_members(band, mapped, n)
        if blocks.filter is not None:
            band = band.insert_filter(blocks.filter)
        wm, wn = plan.config.warps
        launch = KernelLaunch(blocks.grid, (32, wn, wm), tuple(blocks.params),
                              tuple(thread_param(a, n) for a in range(3)))
        return band.get_schedule(), launch, blocks.context
