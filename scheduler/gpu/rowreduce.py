"""Pass: map stitched row groups onto CUDA threads with a mapping chosen from the shape.

Assumes: groups marked ``backbone:<n>`` of class ``rowreduce`` (``backbones(state)``) by
:class:`~polycomp.scheduler.common.pattern_schedule.PatternSchedulePass`: a row band
``B(r_0, .., r_{k-1})`` (``k <= 3`` row dimensions) above a sequence of statement
filters, each with a band over its own inner dimensions (a reduction's reduce axes, a
row-wise stage's columns) or none (reduction inits, row-wise values).

The mapping :class:`~polycomp.scheduler.gpu.rowplan.RowMapping` (``T`` threads per row,
``R`` rows per block, ``V`` columns per access, register cache or not) comes from the
cost model of :mod:`~polycomp.scheduler.gpu.rowplan` on the group's shape
(:func:`row_shape`), or from the option ``row_map``.  One kernel ``kernel:<n>`` per
group, blocks of ``(T, R)`` threads:

* row ``r_{k-1}`` goes to block ``bx<n> = floor(r_{k-1} / R)`` and block row
  ``ty<n> = r_{k-1} mod R``; ``r_{k-2}`` to ``by<n>``, ``r_{k-3}`` to ``bz<n>`` (filters
  above the row band, which becomes degenerate);
* within a row, the innermost member ``c`` of every inner band is dealt to the row's
  threads in vectors of ``V``: a filter ``floor(c / V) mod T = tx<n>`` above the band,
  whose member ``c`` becomes ``k = floor(c / (V T))`` and, for ``V > 1``, a second band
  ``v = c mod V`` below a mark ``row_vector:<i>`` (the ``V`` consecutive columns one
  aligned vector access touches; ``row_kernels(ctx).vectors[i]``).  Thread ``tx`` thus
  handles columns ``V (T k + tx) + v``: consecutive threads, consecutive vectors;
* every reduction's accumulator is *privatised*: the reads and writes of ``R[i]`` in the
  kernel go to a per-thread register (``local``, one element), initialised by every
  thread (the init statements are not thread-mapped), updated with the thread's
  columns, then combined by an extension statement ``allreduce_R`` grafted after the
  update band: a ``__shfl_xor_sync`` butterfly over the row's ``min(T, 32)`` lanes (for
  ``T < 32`` the member mask is the row's lane segment), and for ``T > 32`` the warps'
  results through a shared array (one element per warp) and a barrier, then a
  butterfly over the warps; every thread of the row ends with the row's result.  The
  row-wise consumers read it from that register (AStitch's register stitching); when
  ``R`` is live after the kernel, an extension statement ``store_R`` has thread 0 of the
  row store it;
* with the register cache, each row-long input read by the group is loaded once per
  row by an extension statement ``rowload_X`` (grafted before the row's first
  statement, dealt to the threads as above, its ``k`` loop unrolled) into the
  thread's registers ``X_row[k V + v]``; every statement's reads of ``X`` read that
  register instead (a ``Promotion`` with per-statement offsets), the statements' ``k``
  loops are unrolled too, so the registers are indexed by constants.

Row-wise temporaries that only the group reads (softmax's ``exp``, layernorm's centred
values) are recomputed where they are read (``ctx.inlined``) instead of being stored.

For a symbolic row length ``W`` the kernel may assume ``W mod V = 0`` and ``W <=
bound`` (``row_map`` with ``vector``/``bound``, as the multi-version dispatch of
:mod:`polycomp.scheduler.tuning.row_versions` compiles its versions): the AST context
is restricted accordingly and the kernel checks both at run time
(``row_kernels(ctx).kernels[n]``; the CUDA IR pass traps when they fail).

Guarantees: a row is processed by the ``T`` threads of one block row, whose threads
cover every column once (the filters partition the columns by ``floor(c/V) mod T``);
the combine makes the per-thread partial results (an associative, commutative
``+``/``max``/``min``) into the row's result in every thread of the row before any later
statement of the row reads it, since the statements of a row keep their order.  The
shuffles are executed by every lane of the member mask: they are not under a column
filter, and every guard above them depends on the row only (on ``bx``, ``by``, ``bz``,
``ty``), which is uniform over a row's lanes; the block class (``T > 32``) has one row
per block (``R = 1``), so its barrier is reached by the whole block.  A register cache
holds exactly the elements its thread reads later (the same filters deal the load's
and the readers' columns).  The packed and warp classes need no shared memory and no
barrier.  The summation order differs from the sequential one (a tree), as for any
parallel reduction.
"""
from __future__ import annotations

from dataclasses import replace

import islpy as isl

from polycomp import ir
from polycomp.errors import OptionError
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
from polycomp.scheduler.gpu.rowonline import find_online_pair, fuse_online, online_dependences
from polycomp.scheduler.gpu.rowplan import RowMapping, RowShape, choose
from polycomp.scheduler.gpu.rowstate import (
    OnlinePair,
    RowCache,
    RowKernel,
    RowVector,
    row_kernels,
)
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.gpu.tile import find_first
from polycomp.scheduler.promotion.copies import root_of
from polycomp.scheduler.promotion.footprint import Box
from polycomp.scheduler.promotion.record import CopyStmt, Promotion, WarpReduction, promotion_state
from polycomp.scheduler.promotion.sites import drop_statements, node_at, paths, prefix_points
from polycomp.state import CompileState

ROWREDUCE = "rowreduce"    # the fusion-group class of stitched row runs
LEVEL = "registers"        # the privatised accumulators' memory level
COMBINE = {"+": "+", "max": "max", "min": "min"}


def _is_rowreduce(n, ctx: CompileState) -> bool:
    return marks.is_kind(n, marks.BACKBONE) and backbones(ctx).of(n).kind == ROWREDUCE


class RowReductionMappingPass(Pass):
    name = "gpu-row-reduction"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        assert ctx.target.cuda is not None, ctx.target.name
        self.lanes = ctx.target.cuda.warp_size    # a warp's lanes take a row's columns
        launches = gpu_kernels(ctx).launches
        while True:
            mark = find_first(schedule, lambda n: _is_rowreduce(n, ctx) and not _done(n))
            if mark is None:
                return schedule
            n = len(launches)
            schedule, launch, kctx = self._map(mark, n, ctx)
            launches[n] = launch
            ctx.restrict_ast_context(kctx)
            rk = row_kernels(ctx).kernels[n]
            ctx.note(self.name, f"kernel {n}: {rk.mapping.label()} ({rk.mapping.kind} class: "
                                f"{rk.mapping.threads} threads per row, {rk.mapping.rows} "
                                f"rows per block); grid {[str(g) for g in launch.grid]}; "
                                f"model {rk.cost.describe()}")

    # ------------------------------------------------------------------ the kernel
    def _map(self, mark, n, ctx):
        ictx = mark.get_ctx()
        band = mark.child(0)
        if band.get_type() != isl.schedule_node_type.band or \
                not 1 <= band.band_n_member() <= 3:
            raise ValueError("row group without a row band of one to three members")
        rank = band.band_n_member()
        schedule = mark.insert_mark(marks.make(marks.KERNEL, n)).get_schedule()
        schedule = self._inline_rowwise(schedule, n, ctx)
        shape, info = row_shape(schedule, n, ctx, rank)
        names = _kernel_statement_names(schedule, n)
        stmts = [s for s in ctx.model.statements if s.name in names]
        pair = find_online_pair(stmts, ctx.inlined, _sequence_order(schedule, n)) \
            if ctx.cuda_options.row_online else None
        if pair is not None:
            shape = replace(shape, online=True)
        fixed = ctx.cuda_options.row_map
        if fixed is not None and fixed.bound is not None and shape.width is None:
            shape = replace(shape, bound=fixed.bound)
        mapping, cost = choose(shape, ctx.target, fixed)
        if mapping.vector > 1 and not shape.vector_ok:
            raise OptionError(f"option row_map.vector {mapping.vector}: a column access of "
                              f"kernel {n} is not unit-stride in the row (or its rows are "
                              f"not {mapping.vector}-aligned)")
        if mapping.vector * shape.itemsize > 16:
            raise OptionError(f"option row_map.vector {mapping.vector}: {mapping.vector} "
                              f"elements of {shape.itemsize} bytes are more than one 16-byte "
                              f"access")
        if mapping.vector > 1 and shape.width is not None and shape.width % mapping.vector:
            raise OptionError(f"option row_map.vector {mapping.vector}: kernel {n}'s rows have "
                              f"{shape.width} columns, not a multiple of {mapping.vector}")
        rec = RowKernel(mapping, shape, cost)
        row_kernels(ctx).kernels[n] = rec
        kctx = self._assumptions(rec, info, ictx)
        tx, ty = thread_param(0, n), thread_param(1, n)
        bparams = [block_param(a, n) for a in range(rank)]
        # rows -> blocks (and block rows)
        band = _row_band(schedule, n)
        dom = band.get_domain()
        part = band.band_get_partial_schedule()
        r = isl.Val.int_from_si(ictx, mapping.rows)
        grid, filt = [], None
        for a in range(rank):
            m = rank - 1 - a                       # x: the innermost row member
            rng = member_range(band, m)
            upa = part.get_union_pw_aff(m)
            last = rng.dim_max(0)
            if a == 0:
                g = last.div(isl.PwAff.val_on_domain(last.domain(), r)).floor() \
                    .add_constant_val(isl.Val.one(ictx))
                f = upa.scale_down_val(r).floor().sub(param_upa(dom, bparams[0])) \
                    .zero_union_set().intersect(
                        upa.mod_val(r).sub(param_upa(dom, ty)).zero_union_set())
                blocks = as_param(_block_range(rng, mapping.rows, ictx), bparams[0])
            else:
                g = last.add_constant_val(isl.Val.one(ictx))
                f = upa.sub(param_upa(dom, bparams[a])).zero_union_set()
                blocks = as_param(rng, bparams[a])
            grid.append(g)
            filt = f if filt is None else filt.intersect(f)
            kctx = intersect_params(kctx, blocks)
        kctx = intersect_params(kctx, isl.Set.read_from_str(
            ictx, f"[{ty}, {tx}] -> {{ : 0 <= {ty} < {mapping.rows} and "
                  f"0 <= {tx} < {mapping.threads} }}"))
        assert filt is not None  # a row has at least one dimension
        schedule = band.insert_filter(filt.intersect(dom)).get_schedule()
        if pair is not None and not mapping.cache:     # max and sum in one pass
            # the statements of inlined arrays (already out of ``names``) keep empty filters
            dropped = {s.name for s in ctx.model.statements if s.write.name in ctx.inlined}
            schedule = fuse_online(_row_sequence(schedule, n), pair, dropped).get_schedule()
            online_dependences(ctx.model, pair)
            ctx.note(self.name, f"kernel {n}: {pair[0].write.name} and {pair[1].write.name} "
                                f"in one pass (online max and sum)")
        else:
            pair = None
        schedule = self._deal_columns(schedule, n, mapping, ctx, tx)
        schedule = self._privatise(schedule, n, mapping, ctx, tx, ty, names, pair)
        if mapping.cache:
            schedule = self._cache(schedule, n, mapping, ctx, tx, info, rank, names)
        launch = KernelLaunch(grid, (mapping.threads, mapping.rows, 1), tuple(bparams),
                              (tx, ty))
        return schedule, launch, kctx

    @staticmethod
    def _assumptions(rec: RowKernel, info, ictx) -> isl.Set:
        """The parameter set the kernel's code assumes (a symbolic row length a multiple
        of the vector and within the bound), recorded for the run-time check."""
        m = rec.mapping
        w = info.width_param
        rec.symbol = w if rec.shape.width is None else None
        cond = isl.Set.read_from_str(ictx, "{ : }")
        if rec.shape.width is not None or w is None:
            return cond
        parts = []
        if m.vector > 1:
            parts.append(f"{w} mod {m.vector} = 0")
            rec.multiple_of = m.vector
        if m.bound is not None:
            parts.append(f"{w} <= {m.bound}")
            rec.bound = m.bound
        if parts:
            rec.width_param = w
            cond = isl.Set.read_from_str(ictx, f"[{w}] -> {{ : {' and '.join(parts)} }}")
        return cond

    # ------------------------------------------------------------------ inlining
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

    # ------------------------------------------------------------------ columns
    def _deal_columns(self, schedule, n, m: RowMapping, ctx, tx):
        """Deal the innermost member of every inner band to the row's threads in
        vectors of ``V`` (see the module docstring)."""
        rk = row_kernels(ctx)
        ictx = ctx.model.ctx
        vt = isl.Val.int_from_si(ictx, m.vector * m.threads)
        v = isl.Val.int_from_si(ictx, m.vector)
        t = isl.Val.int_from_si(ictx, m.threads)
        while True:
            inner = find_first(schedule, lambda x: x.get_type() == isl.schedule_node_type.band
                               and marks.kernel_of(x) == n and _parent_is_seq_filter(x))
            if inner is None:
                return schedule
            sched = inner.band_get_partial_schedule()
            last = inner.band_n_member() - 1
            c = sched.get_union_pw_aff(last)
            dom = inner.get_domain()
            col = c.scale_down_val(v).floor() if m.vector > 1 else c
            lane = col.mod_val(t).sub(param_upa(dom, tx)).zero_union_set()
            outer = sched.set_union_pw_aff(last, c.scale_down_val(vt).floor())
            leaf = inner.insert_filter(lane).child(0).delete()
            if m.vector > 1:
                vb = leaf.insert_partial_schedule(
                    isl.MultiUnionPwAff.from_union_pw_aff(c.mod_val(v)))
                leaf = vb.insert_mark(marks.make(marks.ROW_VECTOR, len(rk.vectors)))
                rk.vectors.append(RowVector(m.vector, n))
            ob = leaf.insert_partial_schedule(outer)
            if m.cache:        # cached rows: the registers must be indexed by constants
                ob = ob.band_member_set_ast_loop_type(last, isl.ast_loop_type.unroll)
            schedule = ob.get_schedule()

    # ------------------------------------------------------------------ reductions
    def _privatise(self, schedule, n, m: RowMapping, ctx, tx, ty, names, pair=None):
        model = ctx.model
        promos = promotion_state(ctx).promotions
        stmts = [s for s in model.statements if s.name in names]
        reductions = [s for s in stmts if s.kind == "update"]
        live_out = {b.name for b in model.live_out}
        made: dict[str, Promotion] = {}
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
            scratch = None
            if m.threads > self.lanes:
                scratch = ir.Buffer(f"{buf.name}_warps{k}", buf.dtype,
                                    (ir.IntImm(m.warps_per_row),), "shared")
            online = {}
            if pair is not None and upd is pair[1]:
                mx = made[pair[0].name]
                online = {"online_max": mx.local, "online_scratch": mx.warp.scratch}
                row_kernels(ctx).online.append(OnlinePair(n, pair[0].name, upd.name, mx.local))
            promo.warp = WarpReduction(COMBINE[upd.value.op], tx, width=m.segment,
                                       row_param=ty, warps=m.warps_per_row, scratch=scratch,
                                       **online)
            promos.append(promo)
            made[upd.name] = promo
        inlined = ctx.inlined
        for upd in reductions:
            if pair is not None and upd is pair[0]:
                continue                     # combined with its sum, as a pair
            group = [upd] if pair is None or upd is not pair[1] else [pair[0], upd]
            # graft the combine (and thread 0's stores) after the update's band
            seq_child = _statement_filter(schedule, {s.name for s in group}).child(0)
            prefix = seq_child.get_prefix_schedule_union_map()
            rows = _drop_ids(prefix_points(prefix).coalesce(), [tx])
            promo = made[upd.name]
            k = promos.index(promo)
            ar = f"allreduce_{upd.write.name}_{k}"
            promo.copies[ar] = CopyStmt("warp_allreduce", 1)
            ext = isl.Map.from_domain_and_range(
                rows, isl.Set.read_from_str(rows.get_ctx(), f"{{ {ar}[] }}"))
            tree = isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext))
            for r in group:
                buf = r.write
                readers_outside = any(a.kind == "read" and a.buffer.name == buf.name
                                      for s in model.statements
                                      if s.name not in names and s.write.name not in inlined
                                      for a in s.accesses)
                if buf.name in live_out or readers_outside:
                    pr = made[r.name]
                    st = f"store_{buf.name}_{promos.index(pr)}"
                    pr.copies[st] = CopyStmt("store_lane0", rows.dim(isl.dim_type.set))
                    ident = isl.Map.identity(isl.Space.map_from_set(rows.get_space())) \
                        .intersect_domain(rows)
                    ext2 = ident.range_product(ident).flatten_range() \
                        .set_tuple_name(isl.dim_type.out, st)
                    tree2 = isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext2))
                    seq_child = seq_child.graft_after(tree2)
            seq_child = seq_child.graft_after(tree)
            schedule = seq_child.get_schedule()
        return schedule

    # ------------------------------------------------------------------ register cache
    def _cache(self, schedule, n, m: RowMapping, ctx, tx, info, rank, names):
        """Keep each cacheable row input in the threads' registers (module docstring)."""
        model = ctx.model
        rk = row_kernels(ctx)
        ictx = model.ctx
        width = info.width if info.width is not None else m.bound
        assert width is not None, "a cached row needs a bounded row length"
        per_thread = m.per_thread(width) * m.vector
        for arr in info.cacheable:
            k = len(promotion_state(ctx).promotions)
            local = ir.Buffer(f"{arr.name}_row{k}", arr.dtype,
                              (ir.IntImm(1),) * rank + (ir.IntImm(per_thread),), "local")
            load = f"rowload_{arr.name}_{k}"
            promo = Promotion(arr, local, n, Box([], [1] * (rank + 1), [1] * (rank + 1)),
                              reason="row cache", level=LEVEL)
            readers = []
            for s in model.statements:
                if s.name not in names or arr.name not in info.reads_of.get(s.name, ()):
                    continue
                readers.append(s)
                nd = len(s.iters)
                vs = ", ".join(f"i{d}" for d in range(nd))
                col = f"i{nd - 1}"
                offs = [f"i{d}" for d in range(rank)] + \
                    [f"{col} - ({_local_index_text(m, tx, col)})"]
                promo.offsets[s.name] = [
                    isl.Aff.read_from_str(ictx, f"[{tx}] -> {{ {s.name}[{vs}] -> [({o})] }}")
                    .align_params(s.domain.get_space()) for o in offs]
            if not readers:
                continue
            # the load statement: { [rows] -> rowload[rows..., c] } for the row's columns
            seq = _row_sequence(schedule, n)
            prefix = seq.get_prefix_schedule_union_map()
            rows = prefix_points(prefix).coalesce()
            foot = None
            for s in readers:     # every reader reads X[rows..., c] at its own point
                sp = s.domain.get_space()
                same = isl.Map.identity(isl.Space.map_from_set(sp)).intersect_domain(s.domain) \
                    .set_tuple_name(isl.dim_type.out, load)
                per_row = prefix.intersect_domain(isl.UnionSet.from_set(s.domain)) \
                    .reverse().apply_range(isl.UnionMap.from_map(same))
                foot = per_row if foot is None else foot.union(per_row)
            assert foot is not None
            fmap = isl.Map.from_union_map(foot).coalesce()
            fmap = fmap.intersect_domain(rows.align_params(fmap.get_space()))
            cvs = ", ".join(f"i{d}" for d in range(rank + 1))
            index = isl.Aff.read_from_str(
                ictx, f"[{tx}] -> {{ {load}[{cvs}] -> "
                      f"[({_local_index_text(m, tx, f'i{rank}')})] }}")
            schedule = seq.child(0).child(0).graft_before(
                self._load_tree(fmap, m, tx, rank, rk, n)) \
                .get_schedule()
            rk.caches.append(RowCache(arr, local, n, load, index, rank))
            promotion_state(ctx).promotions.append(promo)
            ctx.note(self.name, f"kernel {n}: {arr.name} kept in registers "
                                f"({per_thread} per thread), read once per row")
        return schedule

    @staticmethod
    def _load_tree(fmap: isl.Map, m: RowMapping, tx: str, rank: int, rk, n):
        """``extension { [rows] -> rowload[rows, c] }`` with the column filter, the
        unrolled ``k`` band and (``V > 1``) the vector band below a ``row_vector`` mark."""
        leaf = isl.ScheduleNode.from_extension(isl.UnionMap.from_map(fmap)).child(0)
        cdom = isl.UnionSet.from_set(fmap.range())
        sp = fmap.range().get_space()
        name = fmap.get_tuple_name(isl.dim_type.out)
        vs = ", ".join(f"i{d}" for d in range(rank + 1))
        c = f"i{rank}"
        v, t = m.vector, m.threads

        def upa(expr):
            pw = isl.PwAff.read_from_str(sp.get_ctx(), f"[{tx}] -> {{ {name}[{vs}] -> "
                                                       f"[({expr})] }}")
            return isl.UnionPwAff.from_pw_aff(pw.align_params(sp)).intersect_domain(cdom)
        lane = upa(f"floor({c}/{v}) mod {t}").sub(param_upa(cdom, tx)).zero_union_set()
        leaf = leaf.insert_filter(lane).child(0)
        if v > 1:
            vb = leaf.insert_partial_schedule(
                isl.MultiUnionPwAff.from_union_pw_aff(upa(f"{c} mod {v}")))
            leaf = vb.insert_mark(marks.make(marks.ROW_VECTOR, len(rk.vectors)))
            rk.vectors.append(RowVector(v, n))
        ob = leaf.insert_partial_schedule(
            isl.MultiUnionPwAff.from_union_pw_aff(upa(f"floor({c}/{v * t})")))
        ob = ob.band_member_set_ast_loop_type(0, isl.ast_loop_type.unroll)
        return root_of(ob)


# --------------------------------------------------------------------------- analysis


class RowInfo:
    """What :func:`row_shape` found besides the shape: the symbolic row length's
    parameter, the constant row length, the row inputs that can be kept in registers,
    and the arrays each statement reads (after inlining)."""

    def __init__(self):
        self.width: int | None = None
        self.width_param: str | None = None
        self.cacheable: list[ir.Buffer] = []
        self.reads_of: dict[str, set[str]] = {}


def row_shape(schedule: isl.Schedule, n: int, ctx: CompileState, rank: int
              ) -> tuple[RowShape, RowInfo]:
    """The :class:`~polycomp.scheduler.gpu.rowplan.RowShape` of kernel ``n`` (a row
    group with ``rank`` row dimensions) and the facts the mapping needs besides.

    A statement's *columns* are its innermost dimension when it has more than ``rank``.
    An access is *row-long* when its index uses the column.  Vectors apply
    (``vector_ok``) when every row-long access indexes its array's last dimension by the
    column alone (coefficient 1, no other dimension uses it), that dimension's extent
    is a constant or the row length itself (rows stay aligned) and every statement's
    columns are the same range.  An input is cacheable when it is not written in the
    kernel, at least two statements read it and every read is ``X[rows..., c]``; the
    cache applies when the statements have one column dimension.
    """
    model = ctx.model
    names = _kernel_statement_names(schedule, n)
    stmts = [s for s in model.statements if s.name in names]
    scan = _ShapeScan(rank, {s.write.name for s in stmts})
    for s in stmts:
        if len(s.iters) > rank:
            scan.statement(s, _inlined_store(s, ctx.inlined))
    return scan.result(stmts), scan.info


class _ShapeScan:
    """The accumulating part of :func:`row_shape`."""

    def __init__(self, rank: int, written: set[str]):
        self.rank, self.written = rank, written
        self.info = RowInfo()
        self.widths: list[int] = []
        self.symbolic = False
        self.itemsize = 1
        self.passes = 0
        self.ins: set[str] = set()
        self.outs: set[str] = set()
        self.vector_ok = True
        self.cache_ok = True
        self.bad_cache: set[str] = set()
        self.buffers: dict[str, ir.Buffer] = {}

    def statement(self, s, store: ir.Store) -> None:
        rank = self.rank
        if len(s.iters) > rank + 1:
            self.cache_ok = False
        d = len(s.iters) - 1
        lo, hi = s.domain.dim_min(d), s.domain.dim_max(d)
        if not (lo.is_cst() and _const(lo) == 0):
            self.vector_ok = self.cache_ok = False
        if hi.is_cst():
            self.widths.append(_const(hi) + 1)
        else:
            self.symbolic = True
            p = _single_param_plus(hi, -1)
            if p is not None:
                w = self.info.width_param
                self.info.width_param = p if w in (None, p) else "?"
        reads_in = False
        for node, is_store in _accesses(store):
            reads_in |= self.access(s, node, is_store)
        self.passes += reads_in

    def access(self, s, node, is_store: bool) -> bool:
        """Note one access of statement ``s``; True for a read of a row-long input."""
        col, rows = s.iters[-1], s.iters[:self.rank]
        buf, idx = node.buffer, node.indices
        free = [ir.free_vars(i) for i in idx]
        by_row = any(r in f for r in rows for f in free)
        if not any(col in f for f in free):
            if not is_store and buf.name not in self.written and by_row:
                self.bad_cache.add(buf.name)          # read per row, not per column
            return False
        self.itemsize = max(self.itemsize, _itemsize(buf.dtype))
        last_ok = isinstance(idx[-1], ir.Var) and idx[-1] is col and \
            not any(col in f for f in free[:-1])
        ext = buf.shape[-1] if buf.shape else None
        aligned = isinstance(ext, ir.IntImm) or (
            isinstance(ext, ir.Var) and self.info.width_param == ext.name)
        if not (last_ok and aligned):
            self.vector_ok = False
        if is_store:
            self.outs.add(buf.name)
            return False
        if buf.name in self.written:
            return False
        self.buffers[buf.name] = buf
        if by_row:
            self.ins.add(buf.name)
        self.info.reads_of.setdefault(s.name, set()).add(buf.name)
        exact = len(idx) == self.rank + 1 and last_ok and \
            all(isinstance(i, ir.Var) and i is r for i, r in zip(idx, rows))
        if not exact:
            self.bad_cache.add(buf.name)
        return True

    def result(self, stmts) -> RowShape:
        info = self.info
        if info.width_param == "?":
            info.width_param = None
        if self.symbolic and info.width_param is None:
            self.vector_ok = False
        width = None if self.symbolic or not self.widths else max(self.widths)
        if width is not None and any(w != width for w in self.widths):
            self.vector_ok = False            # statements over different column ranges
        info.width = width
        count = {a: sum(a in r for r in info.reads_of.values()) for a in self.ins}
        info.cacheable = [self.buffers[a] for a in sorted(self.ins)
                          if a not in self.bad_cache and count[a] >= 2]
        if not info.cacheable:
            self.cache_ok = False
        nreduce = sum(1 for s in stmts if s.kind == "update")
        return RowShape(rows=_rows(stmts, self.rank), width=width, itemsize=self.itemsize,
                        inner_rows=_rows(stmts, self.rank, self.rank - 1), rank=self.rank,
                        passes=max(1, self.passes), in_arrays=max(1, len(self.ins)),
                        out_arrays=len(self.outs), reductions=max(1, nreduce),
                        vector_ok=self.vector_ok, cache_ok=self.cache_ok)


def _rows(stmts, rank, first: int = 0) -> int | None:
    """The number of rows (the product of the row extents from dimension ``first``)
    when constant."""
    total = 1
    s = stmts[0]
    for d in range(first, rank):
        hi = s.domain.dim_max(d)
        if not hi.is_cst():
            return None
        total *= _const(hi) + 1
    return total


def _const(pw: isl.PwAff) -> int:
    out = []
    pw.foreach_piece(lambda _s, aff: out.append(aff.get_constant_val().to_python()))
    return int(max(out)) if out else 0


def _single_param_plus(pw: isl.PwAff, k: int) -> str | None:
    """The parameter ``p`` when ``pw`` is ``p + k`` (one piece), else None."""
    pieces = []
    pw.foreach_piece(lambda _s, aff: pieces.append(aff))
    if len(pieces) != 1:
        return None
    aff = pieces[0]
    if aff.get_constant_val().to_python() != k or aff.dim(isl.dim_type.div):
        return None
    found = None
    for i in range(aff.dim(isl.dim_type.param)):
        c = aff.get_coefficient_val(isl.dim_type.param, i).to_python()
        if c == 0:
            continue
        if c != 1 or found is not None:
            return None
        found = aff.get_dim_name(isl.dim_type.param, i)
    for i in range(aff.dim(isl.dim_type.in_)):
        if aff.get_coefficient_val(isl.dim_type.in_, i).to_python() != 0:
            return None
    return found


def _itemsize(dtype: str) -> int:
    from polycomp import dtypes as dt
    return dt.itemsize(dtype)


def _inlined_store(s, inlined) -> ir.Store:
    """The statement's store with the loads of inlined arrays replaced by their
    producers' expressions (what lowering emits)."""
    class Inline(ir.Mutator):
        def visit_Load(self, e):
            idx = tuple(self.visit(i) for i in e.indices)
            st = inlined.get(e.buffer.name)
            if st is None:
                return ir.Load(e.buffer, idx, e.dtype, e.lanes) if idx != e.indices else e
            return self.visit(ir.substitute(st.body, dict(zip(st.iters, idx))))
    return Inline().visit(s.store())


def _accesses(store: ir.Store):
    """(node, is_store) for the store and every load in it."""
    out: list[tuple[ir.Store | ir.Load, bool]] = [(store, True)]
    ir.walk(store.value, lambda x: out.append((x, False)) if isinstance(x, ir.Load) else None)
    for i in store.indices:
        ir.walk(i, lambda x: out.append((x, False)) if isinstance(x, ir.Load) else None)
    return out


def _local_index_text(m: RowMapping, tx: str, c: str) -> str:
    """The register of column ``c`` in thread ``tx``'s row cache: ``V k + v`` for
    ``c = V (T k + tx) + v`` (isl syntax)."""
    v, t = m.vector, m.threads
    if v == 1:
        return f"floor(({c} - {tx})/{t})"
    return f"{v}*floor(({c} - {v}*{tx})/{v * t}) + ({c} mod {v})"


# --------------------------------------------------------------------------- tree helpers


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


def _kernel_node(schedule: isl.Schedule, n: int) -> isl.ScheduleNode:
    return node_at(schedule, paths(schedule.get_root(), lambda x: marks.kernel_number(x) == n)[0])


def _row_band(schedule: isl.Schedule, n: int) -> isl.ScheduleNode:
    """The row band of kernel ``n`` (below its kernel and backbone marks)."""
    node = _kernel_node(schedule, n).child(0)
    while node.get_type() != isl.schedule_node_type.band:
        node = node.child(0)
    return node


def _row_sequence(schedule: isl.Schedule, n: int) -> isl.ScheduleNode:
    """The sequence of the row's statements below kernel ``n``'s row band."""
    node = _row_band(schedule, n).child(0)
    while node.get_type() != isl.schedule_node_type.sequence:
        node = node.child(0)
    return node


def _kernel_statement_names(schedule: isl.Schedule, n: int) -> set[str]:
    """The statements scheduled below the ``kernel:<n>`` mark."""
    kn = _kernel_node(schedule, n)
    sub = kn.get_subtree_schedule_union_map() if kn.n_children() \
        else isl.UnionMap.empty(kn.get_domain().get_space())
    return {m.get_tuple_name(isl.dim_type.in_) for m in maps(sub)}


def _statement_filter(schedule: isl.Schedule, names: set[str]) -> isl.ScheduleNode:
    """The first filter node that selects exactly the statements ``names``."""
    path = paths(schedule.get_root(), lambda x: x.get_type() == isl.schedule_node_type.filter
                 and _filter_names(x) == names)[0]
    return node_at(schedule, path)


def _sequence_order(schedule: isl.Schedule, n: int) -> list[str]:
    """The statements of kernel ``n``'s row sequence, in order (one name per child)."""
    seq = _row_sequence(schedule, n)
    out = []
    for k in range(seq.n_children()):
        out.extend(sorted(_filter_names(seq.child(k))))
    return out


def _filter_names(n) -> set:
    return {x.get_tuple_name() for x in sets(n.filter_get_filter())}


def _parent_is_seq_filter(band) -> bool:
    """An inner band: the child of a statement filter of the row sequence."""
    p = band.parent()
    return p.get_type() == isl.schedule_node_type.filter and p.has_parent() and \
        p.parent().get_type() == isl.schedule_node_type.sequence


def _done(mark) -> bool:
    return mark.has_parent() and marks.is_kind(mark.parent(), marks.KERNEL)
