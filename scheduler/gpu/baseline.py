"""Pass: baseline GPU mapping — tile each stage's outer coincident band onto blocks and
threads.

Assumes: the tree is the program-order tree (``domain`` -> optional ``sequence`` of
stage filters -> per stage an outer band), and ``ctx.model`` holds the dependences.
Guarantees: every top-level stage subtree is wrapped in a mark ``kernel:<k>`` (one CUDA
kernel each; kernels run in sequence, which is the global synchronisation between
stages).  In each, the leading coincident members of the outer band (at most 3, the
innermost first onto x) are split off and tiled with ``ctx.options.block`` (default
16x16 for two members, 256 for one, 8x8x4 for three): the tile band is marked
``gpu_blocks:<n>`` and the point band ``gpu_threads:<sizes>``.  Only members whose
joint range over the domain is a box (for each value of the outer schedule, e.g. a
host loop's variable) are mapped (a triangular nest maps its outer
member only), since a CUDA grid cannot depend on the block index; both bands are
generated atomically (isl's AST generator emits one loop per member, with guards
inside, instead of separating it into several loops), since the mapping turns each
member below a mark into exactly one block/thread loop.  Non-coincident members
and inner bands stay below, executed sequentially per thread.  A stage without a
coincident member runs in a single thread (``gpu_blocks:0``).  Tiling and marks do not
change the execution order of dependent instances within a thread, and instances in
different threads are independent by coincidence, so the schedule stays legal.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polycomp.islutil import sets
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import band_coincidence
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.state import CompileState

DEFAULT_BLOCK = {1: (256,), 2: (16, 16), 3: (4, 8, 8)}


def _stage_roots(schedule: isl.Schedule) -> list[int]:
    root = schedule.get_root()
    child = root.child(0)
    if child.get_type() == isl.schedule_node_type.sequence:
        return list(range(child.n_children()))
    return [-1]


@dataclass(frozen=True)
class BaselineMapping:
    """How kernel ``k``'s loops are mapped: the first ``block_loops`` loops below the
    ``gpu_blocks:<k>`` mark onto blocks, the point loops below ``gpu_threads:<k>`` onto
    ``threads`` threads per dimension (``gpu_kernels(state).baseline[k]``)."""
    block_loops: int
    threads: tuple[int, ...]


class GpuBaselineMappingPass(Pass):
    name = "gpu-baseline-mapping"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        deps = ctx.model.dependences
        roots = _stage_roots(schedule)
        for k in roots:
            node = schedule.get_root().child(0)
            if k >= 0:
                node = node.child(k).child(0)
            node = self._map_stage(node, deps, ctx, k if k >= 0 else 0)
            schedule = node.get_schedule()
        return schedule

    def _map_stage(self, node, deps, ctx, k):
        node = node.insert_mark(marks.make(marks.KERNEL, k)).child(0)
        gpu_kernels(ctx).baseline[k] = BaselineMapping(0, ())
        if node.get_type() != isl.schedule_node_type.band:
            return node.insert_mark(marks.make(marks.GPU_BLOCKS, k))
        coinc = band_coincidence(node, deps)
        n = 0
        while n < len(coinc) and coinc[n] and n < 3:
            n += 1
        while n > 1 and not _rectangular(node, n):  # e.g. a triangular C loop nest
            n -= 1
        if n == 0:
            return node.insert_mark(marks.make(marks.GPU_BLOCKS, k))
        if n < node.band_n_member():
            node = node.band_split(n)
        sizes = tuple(ctx.options.block or DEFAULT_BLOCK[n])[-n:]
        if len(sizes) != n:
            sizes = DEFAULT_BLOCK[n]
        for m in range(n):
            node = node.band_member_set_coincident(m, 1)
        mv = isl.MultiVal.zero(node.band_get_space())
        for m, s in enumerate(sizes):
            mv = mv.set_val(m, isl.Val.int_from_si(node.get_ctx(), s))
        node = node.band_tile(mv)  # tile band, child = point band
        node = _atomic(node).child(0)
        node = _atomic(node).parent()
        gpu_kernels(ctx).baseline[k] = BaselineMapping(n, tuple(sizes))
        node = node.insert_mark(marks.make(marks.GPU_BLOCKS, k)).child(0)
        return node.child(0).insert_mark(marks.make(marks.GPU_THREADS, k))


def _rectangular(node: isl.ScheduleNode, n: int) -> bool:
    """Is the range of the band's first ``n`` members over its domain a box for every
    value of the outer schedule (prefix: a host loop's variable, for all parameter
    values)?  Only then is the number of tiles along one member independent of the tile
    index along another, as a CUDA grid requires (it may depend on a host loop)."""
    um = node.band_get_partial_schedule_union_map().intersect_domain(node.get_domain())
    prefix = node.get_prefix_schedule_union_map().intersect_domain(node.get_domain())
    ranges = sets(prefix.flat_range_product(um).range())
    if not ranges:
        return True
    for r in ranges:
        total = r.dim(isl.dim_type.set)
        p = total - node.band_n_member()
        r = r.project_out(isl.dim_type.set, p + n, total - p - n)
        box = None
        for k in range(n):     # (prefix, member k), the other members unconstrained
            rk = r.project_out(isl.dim_type.set, p + k + 1, n - k - 1)
            rk = rk.project_out(isl.dim_type.set, p, k)
            rk = rk.insert_dims(isl.dim_type.set, p, k).add_dims(isl.dim_type.set, n - k - 1)
            box = rk if box is None else box.intersect(rk)
        assert box is not None, "a band of at least one member"
        if not box.is_equal(r):
            return False
    return True


def _atomic(node: isl.ScheduleNode) -> isl.ScheduleNode:
    """Generate each member of the band as one loop (with guards inside), not as several
    loops split at the conditions of the statements below (``i != j``), since each
    mapped member must be exactly one loop below its mark."""
    for m in range(node.band_n_member()):
        node = node.band_member_set_ast_loop_type(m, isl.ast_loop_type.atomic)
    return node
