"""Pass: multi-level tiling of a matmul backbone for the cube, as a schedule tree.

Assumes: the program-order tree, in which the (batch) matmul stage ``S`` (statements
``S_init[b?, i, j]`` and ``S_update[b?, i, j, k]``, a stage the cube path takes: see
:mod:`.build`) is the subtree ``band[b?, i, j] -> sequence[init, update -> band[k]]``
(under its filter when the kernel has other stages).

Guarantees: that subtree becomes, with the tile sizes fitted to L0A/L0B/L0C/L1 (and UB
for a vector epilogue) by :func:`~.cube.fit_cube_tiles` (or the ``cube_tile`` option)::

    band[b?, floor(i/m0), floor(j/n0)]                 output tiles (L0C), permutable
      sequence
        filter init:   band[i mod m0, j mod n0]
        filter update: band[floor(k/kL1)]              L1 stages
          mark npu_pingpong:L1                         (double buffering)
            band[floor((k mod kL1)/k0)]                L0A/L0B steps
              mark npu_pingpong:L0                     (double buffering)
                mark npu_cube:m0:n0:k0:kL1
                  band[i mod m0, j mod n0, k mod k0]   the cube's fractal products

Legality: the init of ``C[i, j]`` precedes its updates (the same output tile, the
earlier sequence child); the updates of one ``C[i, j]`` keep their ``k`` order (``k``
tile, then ``k`` step, then ``k mod k0``, all lexicographic); different ``C[i, j]`` are
independent.  The NPU program builder (:func:`tiles_of`) reads the tiling from the
``npu_cube`` mark of this tree (``CompileState.npu_schedule``).
"""
from __future__ import annotations

import islpy as isl

from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.state import CompileState

from .cube import CubeTiles


def _params(schedule: isl.Schedule) -> str:
    sp = schedule.get_domain().get_space()
    return "[" + ", ".join(str(sp.get_dim_name(isl.dim_type.param, k))
                           for k in range(sp.dim(isl.dim_type.param))) + "]"


def _mupa(ctx: isl.Context, params: str, members: list[dict[str, str]]) -> isl.MultiUnionPwAff:
    parts = ["{ " + "; ".join(f"{st} -> [({e})]" for st, e in m.items()) + " }"
             for m in members]
    return isl.MultiUnionPwAff.read_from_str(ctx, f"{params} -> [" + ", ".join(parts) + "]")


def _stage_node(schedule: isl.Schedule, update: str) -> isl.ScheduleNode | None:
    """The node right below the filter of the stage holding ``update`` (the domain's
    child for a one-stage kernel)."""
    node = schedule.get_root().child(0)
    if node.get_type() != isl.schedule_node_type.sequence:
        return node
    for k in range(node.n_children()):
        f = node.child(k)
        sets = f.filter_get_filter().get_set_list()
        if any(sets.get_at(i).get_tuple_name() == update for i in range(sets.n_set())):
            return f.child(0)
    return None


def tile_cube(schedule: isl.Schedule, stage: str, batched: bool, t: CubeTiles,
              double_buffer: bool) -> isl.Schedule:
    """The tree with ``stage``'s subtree tiled for the cube (module docstring)."""
    init, upd = f"{stage}_init", f"{stage}_update"
    node = _stage_node(schedule, upd)
    if node is None:
        return schedule
    p = _params(schedule)
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
    node = node.insert_mark(marks.make(marks.NPU_CUBE, t.m0, t.n0, t.k0, t.kl1))
    if double_buffer:
        node = node.insert_mark(marks.make(marks.NPU_PINGPONG, "L0"))
    node = node.insert_partial_schedule(_mupa(ctx, p, [{su: f"floor((k mod {t.kl1})/{t.k0})"}]))
    if double_buffer:
        node = node.insert_mark(marks.make(marks.NPU_PINGPONG, "L1"))
    node = node.insert_partial_schedule(_mupa(ctx, p, [{su: f"floor(k/{t.kl1})"}]))
    return node.get_schedule()


def tiles_of(schedule: isl.Schedule | None) -> CubeTiles | None:
    """The cube tiling recorded in ``schedule``'s ``npu_cube`` mark (None: no mark)."""
    if schedule is None:
        return None
    found: list[CubeTiles] = []

    def visit(node: isl.ScheduleNode) -> bool:
        if marks.is_kind(node, marks.NPU_CUBE):
            found.append(CubeTiles(*(int(v) for v in
                                     marks.argument(node, marks.NPU_CUBE).split(":"))))
        return True
    schedule.get_root().foreach_descendant_top_down(visit)
    return found[0] if found else None


class NpuCubeTilePass(Pass):
    """See the module docstring."""
    name = "npu-cube-tile"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        from .build import cube_plan
        plan = cube_plan(ctx.model, ctx.target, ctx.options)
        if plan is not None:
            stage, batched, tiles = plan
            db = bool(getattr(ctx.options, "double_buffer", True))
            schedule = tile_cube(schedule, stage, batched, tiles, db)
            ctx.note(self.name, f"{stage}: output tiles {tiles.m0}x{tiles.n0} (L0C), k steps "
                                f"of {tiles.k0} (L0A/L0B), L1 stages of {tiles.kl1}")
        ctx.npu_schedule = schedule
        return schedule
