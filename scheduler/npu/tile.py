"""Pass ``npu-cube-tile``: multi-level tiling of a matmul backbone for the cube, as a
schedule tree.

Assumes: the tree after ``npu-map``, in which each ``npu_cube:<n>`` mark sits above the
program-order subtree ``band[b?, i, j] -> sequence[init, update -> band[k]]`` of a
(batch) matmul stage ``S`` (statements ``S_init[b?, i, j]`` and ``S_update[b?, i, j,
k]``); ``npu_plans(state).cubes[n]`` (:class:`~.plan.CubePlan`) holds its tiles, fitted
to L0A/L0B/L0C/L1 (and UB for a vector epilogue) by :func:`~.cube.fit_cube_tiles` or
given by option ``cube_tile``.

Guarantees: the mark and that subtree become::

    band[b?, floor(i/m0), floor(j/n0)]                 output tiles (L0C), permutable
      sequence
        filter init:   band[i mod m0, j mod n0]
        filter update: band[floor(k/kL1)]              L1 stages
          mark npu_pingpong:<p>                        (double buffering: PingPong L1)
            band[floor((k mod kL1)/k0)]                L0A/L0B steps
              mark npu_pingpong:<q>                    (double buffering: PingPong L0)
                mark npu_cube:<n>
                  band[i mod m0, j mod n0, k mod k0]   the cube's fractal products

Legality: the init of ``C[i, j]`` precedes its updates (the same output tile, the
earlier sequence child); the updates of one ``C[i, j]`` keep their ``k`` order (``k``
tile, then ``k`` step, then ``k mod k0``, all lexicographic); different ``C[i, j]`` are
independent.  The NPU lowering finds ``npu_cube:<n>`` in the lowered function and
builds the cube program with the plan's tiles.
"""
from __future__ import annotations

import islpy as isl

from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.state import CompileState

from .cube import CubeTiles
from .map import find_mark, iter_marks
from .plan import NpuPlans, PingPong, npu_plans


def _params(schedule: isl.Schedule) -> str:
    sp = schedule.get_domain().get_space()
    return "[" + ", ".join(str(sp.get_dim_name(isl.dim_type.param, k))
                           for k in range(sp.dim(isl.dim_type.param))) + "]"


def _mupa(ctx: isl.Context, params: str, members: list[dict[str, str]]) -> isl.MultiUnionPwAff:
    parts = ["{ " + "; ".join(f"{st} -> [({e})]" for st, e in m.items()) + " }"
             for m in members]
    return isl.MultiUnionPwAff.read_from_str(ctx, f"{params} -> [" + ", ".join(parts) + "]")


def tile_cube(node: isl.ScheduleNode, stage: str, batched: bool, t: CubeTiles,
              mark: int, pingpong: tuple[int, int] | None) -> isl.Schedule:
    """The tree of ``node`` (the ``npu_cube:<mark>`` mark above ``stage``'s subtree)
    with that subtree tiled for the cube (module docstring); ``pingpong``: the indices
    of the L1 and L0 ``npu_pingpong`` marks (None: single buffers)."""
    init, upd = f"{stage}_init", f"{stage}_update"
    p = _params(node.get_schedule())
    bi, bu = ("b, i, j", "b, i, j, k") if batched else ("i, j", "i, j, k")
    si, su = f"{init}[{bi}]", f"{upd}[{bu}]"
    node = node.cut()
    ctx = node.get_ctx()
    outer = ([{si: "b", su: "b"}] if batched else []) + \
        [{si: f"floor(i/{t.m0})", su: f"floor(i/{t.m0})"},
         {si: f"floor(j/{t.n0})", su: f"floor(j/{t.n0})"}]
    node = node.insert_partial_schedule(_mupa(ctx, p, outer))
    node = node.band_set_permutable(1)
    filters = isl.UnionSetList.alloc(ctx, 2)
    filters = filters.add(isl.UnionSet.read_from_str(ctx, f"{p} -> {{ {si} }}")).add(
        isl.UnionSet.read_from_str(ctx, f"{p} -> {{ {su} }}"))
    node = node.child(0).insert_sequence(filters)
    node = node.child(0).child(0).insert_partial_schedule(
        _mupa(ctx, p, [{si: f"i mod {t.m0}"}, {si: f"j mod {t.n0}"}]))
    node = node.parent().parent().child(1).child(0)
    node = node.insert_partial_schedule(_mupa(ctx, p, [{su: f"i mod {t.m0}"}, {su: f"j mod {t.n0}"},
                                                  {su: f"k mod {t.k0}"}]))
    node = node.insert_mark(marks.make(marks.NPU_CUBE, mark))
    if pingpong is not None:
        node = node.insert_mark(marks.make(marks.NPU_PINGPONG, pingpong[1]))
    node = node.insert_partial_schedule(_mupa(ctx, p, [{su: f"floor((k mod {t.kl1})/{t.k0})"}]))
    if pingpong is not None:
        node = node.insert_mark(marks.make(marks.NPU_PINGPONG, pingpong[0]))
    node = node.insert_partial_schedule(_mupa(ctx, p, [{su: f"floor(k/{t.kl1})"}]))
    return node.get_schedule()


class NpuCubeTilePass(Pass):
    """See the module docstring."""
    name = "npu-cube-tile"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        plans = npu_plans(ctx)
        db = ctx.npu_options.double_buffer
        for n in list(iter_marks(schedule, marks.NPU_CUBE)):
            node = find_mark(schedule, marks.NPU_CUBE, n)
            assert node is not None
            plan = plans.cubes[n]
            pp = (NpuPlans.push(plans.pingpongs, PingPong("L1", 2)),
                  NpuPlans.push(plans.pingpongs, PingPong("L0", 2))) if db else None
            schedule = tile_cube(node, plan.stage, plan.batched, plan.tiles, n, pp)
            t = plan.tiles
            ctx.note(self.name, f"{plan.stage}: output tiles {t.m0}x{t.n0} (L0C), k steps of "
                                f"{t.k0} (L0A/L0B), L1 stages of {t.kl1}")
        return schedule
