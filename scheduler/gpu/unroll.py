"""Pass: unroll each thread's point loops.

Assumes: the tree after GPU mapping and promotion: point bands below their
``tile:point`` mark and thread filter, tile configurations in
``gpu_kernels(ctx).tile_configs`` (copy loops are unrolled by the promotion pass that
creates them).

For every point band of a kernel with a register tile (register promotion) whose
per-thread trip count ``prod ceil(T_m / P_m)`` is no larger than ``max_unroll``
(unrolling elsewhere buys nothing and costs isl much AST-generation time), every member
gets the AST loop
type ``unroll``: isl generates one copy of the body per iteration, guarded only where a
partial tile may lack that iteration.  Register tiles (``local`` buffers from register
promotion) are then indexed by constants, which is what lets nvcc keep them in
registers.  Where the kernel's tile is full (``launch.full_tile``, a condition on the
block ids from :class:`~polycomp.scheduler.gpu.map.GpuMappingPass`), the *isolate* AST
option generates the full tiles' points separately, without any guard; partial tiles
keep their guards.  Isolation is set only where it pays: on a point band that a loop of
the kernel repeats or that holds a loop (:func:`_in_loop`: the reduction's update).  A
point band that each thread runs once (a contraction's initialisation, its epilogue)
keeps its guards in full tiles too: a few comparisons per thread, where isolating it
cost isl about 0.1 s of AST generation per band (unrolling the partial tiles' part
under isolation is the costly step).

Guarantees: only AST generation options change; the schedule (the order of every pair
of statement instances) is the same, so the pass is trivially legal.
"""
from __future__ import annotations

import islpy as isl

from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.gpu.tile import find_first, is_marked
from polycomp.scheduler.promotion.record import promotion_state
from polycomp.scheduler.promotion.registers import LEVEL as REGISTERS
from polycomp.state import CompileState


def _trip_bound(band, configs) -> int | None:
    """Iterations of a point band per thread: prod ceil(T_m / P_m) of its group's tile
    configuration (isl cannot take the domain of nodes below extension nodes)."""
    from polycomp.scheduler.gpu.tile import tile_group_of
    cfg = configs.get(tile_group_of(band))
    if cfg is None or len(cfg.block) != band.band_n_member():
        return None
    trips = 1
    for t, p in zip(cfg.block, cfg.threads):
        trips *= -(-t // p)
    return trips


def _kernel_has_register_tile(band, ctx) -> bool:
    """Did register promotion give the band's kernel a register tile (a group promoted
    to the ``registers`` level; a privatised warp reduction is no tile)?"""
    k = marks.kernel_of(band)
    return any(p.kernel == k and p.level == REGISTERS and p.warp is None
               for p in promotion_state(ctx).promotions)


def _full_tile(band, ctx):
    """The kernel's full-tile parameter condition (see GpuMappingPass), or None."""
    x = band
    while x.has_parent():
        x = x.parent()
        if marks.is_kind(x, marks.KERNEL):
            launch = gpu_kernels(ctx).launches.get(marks.kernel_number(x))
            return getattr(launch, "full_tile", None)
    return None


def _isolate(band, full: isl.Set):
    """Set the isolate AST option: the points of full tiles are generated separately
    (no guards) from those of partial tiles; both parts unrolled."""
    ictx = band.get_ctx()
    depth = band.get_schedule_depth()
    n = band.band_n_member()
    outer = ", ".join(f"o{d}" for d in range(depth))
    inner = ", ".join(f"p{d}" for d in range(n))
    iso = isl.Set.read_from_str(ictx, f"{{ isolate[[{outer}] -> [{inner}]] }}")
    iso = iso.align_params(full.get_space())
    iso = iso.intersect_params(full.align_params(iso.get_space()))
    band = band.band_set_ast_build_options(isl.UnionSet.from_set(iso))
    for m in range(n):
        band = band.band_member_set_isolate_ast_loop_type(m, isl.ast_loop_type.unroll)
    return band


def _in_loop(band) -> bool:
    """Does a loop of the kernel repeat ``band`` or run inside it: a band below it, or
    a band between it and its kernel mark other than the block band (the band below a
    ``tile:block`` mark, directly or through its filter: mapped to the block ids, no
    loop in the kernel).  Any other band is counted as a loop (conservative: the point
    band then stays isolated)."""
    if _has_band_below(band):
        return True
    x = band
    while x.has_parent():
        x = x.parent()
        if marks.is_kind(x, marks.KERNEL):
            return False
        if x.get_type() == isl.schedule_node_type.band and not _is_block_band(x):
            return True
    return False


def _is_block_band(band) -> bool:
    p = band.parent() if band.has_parent() else None
    if p is not None and p.get_type() == isl.schedule_node_type.filter and p.has_parent():
        p = p.parent()
    return p is not None and marks.is_kind(p, marks.TILE_BLOCK)


def _has_band_below(node) -> bool:
    for k in range(node.n_children()):
        c = node.child(k)
        if c.get_type() == isl.schedule_node_type.band or _has_band_below(c):
            return True
    return False


def _unrolled(band) -> bool:
    return all(band.band_member_get_ast_loop_type(m) == isl.ast_loop_type.unroll
               for m in range(band.band_n_member()))


class UnrollPointLoopsPass(Pass):
    name = "unroll-point-loops"

    def __init__(self, max_unroll: int = 64):
        self.max_unroll = max_unroll

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        done = set()
        while True:
            node = find_first(schedule, lambda n: n.get_type() == isl.schedule_node_type.band
                              and _is_point(n) and not _unrolled(n)
                              and _key(n) not in done)
            if node is None:
                return schedule
            done.add(_key(node))
            if not _kernel_has_register_tile(node, ctx):
                continue   # nothing to gain: no register tile indexed by these loops
            trips = _trip_bound(node, gpu_kernels(ctx).tile_configs)
            if trips is None or trips > self.max_unroll:
                ctx.note(self.name,
                         f"band {_key(node)} kept as loops ({trips} iterations per thread)")
                continue
            full = _full_tile(node, ctx) if ctx.cuda_options.isolate else None
            if full is not None and node.band_n_member() > 2:
                # isl's isolated AST generation grows steeply with the band's rank
                ctx.note(self.name, f"band {_key(node)}: {node.band_n_member()}-d tile not "
                                    f"isolated (guards kept)")
                full = None
            if full is not None and not _in_loop(node):
                ctx.note(self.name, f"band {_key(node)} runs once per thread: not isolated "
                                    f"(guards kept)")
                full = None
            if full is not None:   # first: the options replace the band's loop types
                node = _isolate(node, full)
            for m in range(node.band_n_member()):
                node = node.band_member_set_ast_loop_type(m, isl.ast_loop_type.unroll)
            schedule = node.get_schedule()


def _key(band) -> tuple:
    """The node's path from the root (setting loop types keeps the tree's shape)."""
    path = []
    n = band
    while n.has_parent():
        path.append(n.get_child_position())
        n = n.parent()
    return tuple(reversed(path))


def _is_point(band) -> bool:
    p = band.parent()
    return p.get_type() == isl.schedule_node_type.filter and is_marked(p, marks.TILE_POINT)
