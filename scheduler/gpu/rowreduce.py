"""Pass: map stitched row groups onto warps; reductions in registers and warp shuffles.

Assumes: groups marked ``backbone:<n>`` of class ``rowreduce`` (``backbones(state)``) by
:class:`~polycomp.scheduler.common.pattern_schedule.PatternSchedulePass`: a one-member row
band ``B(i)`` above a sequence of statement filters, each with a band over its own
inner dimensions (a reduction's reduce axes, a row-wise stage's columns) or none
(reduction inits).

Mapping (one kernel ``kernel:<n>`` per group, ``RB = rows_per_block`` warps per block):

* row ``i`` goes to block ``bx<n> = floor(i / RB)`` and warp ``ty<n> = i mod RB`` (a
  filter above the row band, which becomes degenerate);
* within a row, the innermost member ``c`` of every inner band is dealt to the warp's
  lanes cyclically: a filter ``c mod 32 = tx<n>`` above the band (consecutive lanes read
  consecutive columns: coalesced);
* every reduction's accumulator is *privatised*: the reads and writes of ``R[i]`` in the
  kernel go to a per-lane register (``local``, one element), initialised by every lane
  (the init statements are not lane-mapped), updated with the lane's columns, then
  combined by an extension statement ``allreduce_R`` grafted after the update band:
  a butterfly of ``__shfl_xor_sync`` over offsets 16, 8, 4, 2, 1 that leaves the row's
  result in every lane.  The row-wise consumers read it from that register (AStitch's
  register stitching: the reduced value never goes to memory); when ``R`` is live after
  the kernel, an extension statement ``store_R`` has lane 0 store it.

Row-wise temporaries that only the group reads (softmax's ``exp``, layernorm's centred
values) are recomputed where they are read (``ctx.inlined``) instead of being
stored: one read of the input per use, no intermediate tensor in memory.

Guarantees: a row is processed by exactly one warp, whose lanes cover every column
once; the butterfly makes the per-lane partial results (an associative, commutative
``+``/``max``/``min``) into the row's result in all lanes before any later statement of
the row reads it, since the statements of a row keep their order; the shuffles are
executed by all 32 lanes of the warp (they are not under a lane filter, and every
guard above them depends on the row, i.e. on ``bx`` and ``ty`` only).  The kernel is
warp-synchronous: no element is read by two threads (a column belongs to one lane of
one warp) and the lanes read consecutive columns, so it needs no shared memory and no
barrier.  Its only bands lie below the warp filter, so the kernel offers no
block-level promotion site and
:class:`~polycomp.scheduler.promotion.shared.SharedPromotionPass` leaves it alone
(for every row length: a constant one gives a bounded per-row footprint, which that
pass used to promote as if it were the block's).  The summation order differs from
the sequential one (a tree), as for any parallel reduction.
"""
from __future__ import annotations

import islpy as isl

from polycomp import ir
from polycomp.hw.target import CUDA_WARP_SIZE
from polycomp.islutil import intersect_params, maps, sets
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.pattern_schedule import backbones
from polycomp.scheduler.gpu.map import (
    KernelLaunch,
    as_param,
    block_param,
    member_range,
    param_upa,
    thread_param,
)
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.gpu.tile import find_first
from polycomp.scheduler.promotion.footprint import Box
from polycomp.scheduler.promotion.record import CopyStmt, Promotion, WarpReduction, promotion_state
from polycomp.scheduler.promotion.sites import drop_statements, node_at, paths, prefix_points
from polycomp.state import CompileState

ROWREDUCE = "rowreduce"    # the fusion-group class of stitched row runs
LEVEL = "registers"        # the privatised accumulators' memory level


def _is_rowreduce(n, ctx: CompileState) -> bool:
    return marks.is_kind(n, marks.BACKBONE) and backbones(ctx).of(n).kind == ROWREDUCE


class RowReductionMappingPass(Pass):
    name = "gpu-row-reduction"

    def __init__(self, rows_per_block: int = 8):
        self.rb = rows_per_block
        self.lanes = CUDA_WARP_SIZE

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        assert ctx.target.cuda is not None, ctx.target.name
        self.lanes = ctx.target.cuda.warp_size    # a warp's lanes take a row's columns
        launches = gpu_kernels(ctx).launches
        promos = promotion_state(ctx).promotions
        while True:
            mark = find_first(schedule, lambda n: _is_rowreduce(n, ctx) and not _done(n))
            if mark is None:
                return schedule
            n = len(launches)
            schedule, launch, kctx = self._map(mark, n, ctx, promos)
            launches[n] = launch
            ctx.restrict_ast_context(kctx)
            ctx.note(self.name, f"kernel {n}: rows -> {self.rb} warps per block, columns -> "
                                f"{self.lanes} lanes; grid {[str(g) for g in launch.grid]}")

    def _map(self, mark, n, ctx, promos):
        ictx = mark.get_ctx()
        band = mark.child(0)
        if band.get_type() != isl.schedule_node_type.band or band.band_n_member() != 1:
            raise ValueError("row group without a one-member row band")
        dom = band.get_domain()
        rng = member_range(band, 0)
        bx, ty, tx = block_param(0, n), thread_param(1, n), thread_param(0, n)
        rb = isl.Val.int_from_si(ictx, self.rb)
        last_row = rng.dim_max(0)
        grid = last_row.div(isl.PwAff.val_on_domain(last_row.domain(), rb)).floor() \
            .add_constant_val(isl.Val.one(ictx))
        kctx = isl.Set.read_from_str(
            ictx, f"[{ty}, {tx}] -> {{ : 0 <= {ty} < {self.rb} and 0 <= {tx} < {self.lanes} }}")
        blocks = as_param(_block_range(rng, self.rb, ictx), bx)
        kctx = intersect_params(kctx, blocks)
        row = band.band_get_partial_schedule().get_union_pw_aff(0)
        filt = row.scale_down_val(rb).floor().sub(param_upa(dom, bx)).zero_union_set() \
            .intersect(row.mod_val(rb).sub(param_upa(dom, ty)).zero_union_set())
        node = mark.insert_mark(marks.make(marks.KERNEL, n)).child(0).child(0)   # the row band
        node = node.insert_filter(filt.intersect(dom))
        schedule = self._inline_rowwise(node.get_schedule(), n, ctx)
        # lanes over the innermost member of every inner band
        while True:
            inner = find_first(schedule, lambda x: x.get_type() == isl.schedule_node_type.band
                               and marks.kernel_of(x) == n and _parent_is_seq_filter(x))
            if inner is None:
                break
            m = inner.band_n_member() - 1
            upa = inner.band_get_partial_schedule().get_union_pw_aff(m)
            lane = upa.mod_val(isl.Val.int_from_si(ictx, self.lanes)).sub(
                param_upa(inner.get_domain(), tx)).zero_union_set()
            schedule = inner.insert_filter(lane).get_schedule()
        schedule = self._privatise(schedule, n, ctx, promos, tx)
        return schedule, KernelLaunch([grid], (self.lanes, self.rb, 1), (bx,), (tx, ty)), kctx

    def _inline_rowwise(self, schedule, n, ctx):
        """Row-wise temporaries of the group that only the group reads are recomputed
        where they are read instead of being stored (``ctx.inlined``): their
        statements leave the tree, their expression replaces each load."""
        model = ctx.model
        names = _kernel_statement_names(schedule, n)
        stmts = [s for s in model.statements if s.name in names]
        live_out = {b.name for b in model.live_out}
        inlined = ctx.inlined
        for s in stmts:
            buf = s.write.name
            if s.kind != "compute" or buf in live_out:
                continue
            readers = {r.name for r in model.statements
                       if any(a.kind == "read" and a.buffer.name == buf for a in r.accesses)}
            if readers and readers <= names:
                inlined[buf] = s.stage
                schedule = drop_statements(schedule, [s])
                ctx.note(self.name,
                         f"kernel {n}: {buf} recomputed where it is read, never stored")
        return schedule

    def _privatise(self, schedule, n, ctx, promos, tx):
        model = ctx.model
        names = _kernel_statement_names(schedule, n)
        stmts = [s for s in model.statements if s.name in names]
        reductions = [s for s in stmts if s.kind == "update"]
        live_out = {b.name for b in model.live_out}
        for upd in reductions:
            buf = upd.write
            k = len(promos)
            rank = len(buf.shape)
            local = ir.Buffer(f"{buf.name}_part{k}", buf.dtype, (ir.IntImm(1),) * rank, "local")
            promo = Promotion(buf, local, n, Box([], [1] * rank, [1] * rank),
                              reason="row reduction", level=LEVEL)
            for s in stmts:   # every statement of the row (inlined expressions read R too)
                if len(s.iters) >= rank:
                    sp = s.domain.get_space()
                    ls = isl.LocalSpace.from_space(sp)
                    promo.offsets[s.name] = [isl.Aff.var_on_domain(ls, isl.dim_type.set, d)
                                             for d in range(rank)]
            inlined = ctx.inlined
            readers_outside = any(a.kind == "read" and a.buffer.name == buf.name
                                  for s in model.statements
                                  if s.name not in names and s.write.name not in inlined
                                  for a in s.accesses)
            promo.warp = WarpReduction({"+": "+", "max": "max", "min": "min"}[upd.value.op], tx)
            # graft the butterfly (and lane 0's store) after the update's band
            seq_child = _statement_filter(schedule, upd.name).child(0)   # the lane filter
            prefix = seq_child.get_prefix_schedule_union_map()
            rows = _drop_ids(prefix_points(prefix).coalesce(), [tx])
            ar = f"allreduce_{buf.name}_{k}"
            promo.copies[ar] = CopyStmt("warp_allreduce", 1)
            ext = isl.Map.from_domain_and_range(
                rows, isl.Set.read_from_str(rows.get_ctx(), f"{{ {ar}[] }}"))
            tree = isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext))
            if buf.name in live_out or readers_outside:
                st = f"store_{buf.name}_{k}"
                promo.copies[st] = CopyStmt("store_lane0", 1)
                ident = isl.Map.identity(isl.Space.map_from_set(rows.get_space())) \
                    .intersect_domain(rows)
                ext2 = ident.range_product(ident).flatten_range() \
                    .set_tuple_name(isl.dim_type.out, st)
                tree2 = isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext2))
                seq_child = seq_child.graft_after(tree2)
            seq_child = seq_child.graft_after(tree)
            schedule = seq_child.get_schedule()
            promos.append(promo)
        return schedule


def _block_range(rng: isl.Set, rb: int, ictx) -> isl.Set:
    """{ [b] : b = floor(i / rb) for some row i }."""
    m = isl.Map.read_from_str(ictx, f"{{ [i] -> [b] : b = floor(i / {rb}) }}")
    return rng.apply(m.align_params(rng.get_space()))


def _drop_ids(s: isl.Set, names) -> isl.Set:
    for name in names:
        pos = s.find_dim_by_name(isl.dim_type.param, name)
        if pos >= 0:
            s = s.project_out(isl.dim_type.param, pos, 1)
    return s


def _kernel_statement_names(schedule: isl.Schedule, n: int) -> set[str]:
    """The statements scheduled below the ``kernel:<n>`` mark."""
    kn = node_at(schedule, paths(schedule.get_root(), lambda x: marks.kernel_number(x) == n)[0])
    sub = kn.get_subtree_schedule_union_map() if kn.n_children() \
        else isl.UnionMap.empty(kn.get_domain().get_space())
    return {m.get_tuple_name(isl.dim_type.in_) for m in maps(sub)}


def _statement_filter(schedule: isl.Schedule, name: str) -> isl.ScheduleNode:
    """The first filter node that selects exactly statement ``name``."""
    path = paths(schedule.get_root(), lambda x: x.get_type() == isl.schedule_node_type.filter
                 and _filter_names(x) == {name})[0]
    return node_at(schedule, path)


def _filter_names(n) -> set:
    return {x.get_tuple_name() for x in sets(n.filter_get_filter())}


def _parent_is_seq_filter(band) -> bool:
    """An inner band: the child of a statement filter of the row sequence."""
    p = band.parent()
    return p.get_type() == isl.schedule_node_type.filter and p.has_parent() and \
        p.parent().get_type() == isl.schedule_node_type.sequence


def _done(mark) -> bool:
    return mark.has_parent() and marks.is_kind(mark.parent(), marks.KERNEL)
