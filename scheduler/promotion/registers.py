"""Pass: promote per-thread reference groups of written arrays to registers.

Assumes: the tree of :class:`~polycomp.scheduler.gpu.map.GpuMappingPass` (thread
filters below the point bands of each ``kernel:<n>``).  The site is the child of the
kernel's block band: one register tile lives for the whole block's work of a thread.

For every array ``X`` written by a statement of the kernel, all references to ``X`` in
the kernel form one group.  It is promoted when

* every reference indexes ``X`` with exactly the output-band iterators of its statement
  (``X[o]``), so the thread filters ``o mod P = t`` give each element to exactly one
  thread — the group is *bijective per thread*; else refused ("shared between threads");
* it has reuse (an element is accessed by more than one statement instance, e.g. the
  accumulator of a reduction, or an epilogue temporary written and read); else refused
  ("no reuse");
* the thread's footprint ``{ [p] -> X[a] }`` (thread ids as parameters) has a strided box
  (stride ``P`` from the cyclic mapping) of at most ``max_registers`` elements (default
  64 per array, 128 per kernel); else refused ("over register budget").

The registers are a ``local`` buffer of the box size.  A ``copy_in`` extension
statement (before the site) loads the box when some read of ``X`` in the kernel may see
a value written before the kernel (a flow dependence from outside the kernel); a
``copy_out`` statement (after the site) stores it back when ``X`` is live after the
kernel (an output of the kernel graph, or read by another kernel).  A temporary that
lives entirely in registers is never allocated in global memory.  Registers are
private, so no barrier is needed; the copy loops are unrolled (the box has at most
``max_per_array`` elements) so the registers are indexed by constants.  Guarantees: every access to a promoted element goes
to the thread's register copy, which holds the element's current value, and the
global array holds the final value wherever it is live afterwards.
"""
from __future__ import annotations

import islpy as isl

from polycomp import ir
from polycomp.islutil import maps

from polycomp.scheduler.promotion.footprint import (Promotion, box_relation, footprint, prefix_space_map, pullback,
                        statement_prefix, strided_box_of)
from polycomp.scheduler.gpu.map import thread_param
from polycomp.scheduler.common.pass_base import Pass
from polycomp.state import CompileState
from polycomp.scheduler.promotion.shared import _is_kernel, _original_site, _paths, _root, node_at


class RegisterPromotionPass(Pass):
    name = "promote-registers"

    def __init__(self, max_per_array: int = 64, max_per_kernel: int = 128):
        self.max_per_array = max_per_array
        self.max_per_kernel = max_per_kernel

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        model = ctx.model
        promos = ctx.promotions
        launches = ctx.gpu.launches
        kpaths = _paths(schedule.get_root(), _is_kernel)
        for kpath in reversed(kpaths):
            kn = node_at(schedule, kpath)
            kernel = int(kn.mark_get_id().get_name().split(":")[1])
            launch = launches.get(kernel)
            if launch is None or not launch.thread_params:
                continue
            bands = _paths(kn, lambda n: n.get_type() == isl.schedule_node_type.band)
            if not bands:
                continue
            schedule = self._kernel(schedule, kpath + bands[0] + (0,), kernel, model, ctx, promos)
        return schedule

    def _thread_domain(self, site, kernel) -> isl.UnionSet:
        """The union of the thread filters below ``site``: statement instances -> thread."""
        out = None
        names = {thread_param(a, kernel) for a in range(3)}

        def walk(n):
            nonlocal out
            if n.get_type() == isl.schedule_node_type.filter:
                f = n.filter_get_filter()
                sp = f.get_space()
                if any(sp.find_dim_by_name(isl.dim_type.param, x) >= 0 for x in names):
                    out = f if out is None else out.union(f)
            for k in range(n.n_children()):
                walk(n.child(k))
        walk(site)
        return out

    def _kernel(self, schedule, path, kernel, model, ctx, promos):
        site = _original_site(node_at(schedule, path))
        tdom = self._thread_domain(site, kernel)
        if tdom is None:
            return schedule
        prefix = prefix_space_map(site)
        kstmts = {m.get_tuple_name(isl.dim_type.in_) for m in maps(prefix)}
        stmts = [s for s in model.statements if s.name in kstmts]
        nd = site.parent().band_n_member() if site.parent().get_type() == isl.schedule_node_type.band else 0
        written = []
        for s in stmts:
            if s.write.name not in [w.name for w in written]:
                written.append(s.write)
        used = 0
        already = {p.array.name for p in promos if p.kernel == kernel}
        for buf in written:
            if buf.name in already:   # privatised by an earlier pass (row reductions)
                continue
            refs = [(s, a) for s in stmts for a in s.accesses if a.buffer.name == buf.name]
            why = self._refuse(refs, nd)
            if why:
                ctx.note(self.name, f"kernel {kernel}: {buf.name} not promoted to registers: {why}")
                continue
            acc = None
            for s, a in refs:
                m = isl.UnionMap.from_map(a.index_relation)
                acc = m if acc is None else acc.union(m)
            acc = acc.intersect_domain(tdom)
            f = footprint(prefix, acc)
            box = strided_box_of(f) if f is not None else None
            if box is None:
                ctx.note(self.name, f"kernel {kernel}: {buf.name} not promoted to registers: "
                                    f"no strided box for the per-thread footprint")
                continue
            n = box.elements()
            if n > self.max_per_array or used + n > self.max_per_kernel:
                ctx.note(self.name, f"kernel {kernel}: {buf.name} not promoted to registers: over "
                                    f"register budget ({n} elements)")
                continue
            used += n
            schedule = self._apply(schedule, path, kernel, model, ctx, promos, buf, refs, prefix,
                                   box, stmts, f)
        return schedule

    def _refuse(self, refs, nd) -> str:
        count = 0
        for s, a in refs:
            iters = s.iters[:nd]
            if len(a.indices) != nd or any(i is not v for i, v in zip(a.indices, iters)):
                return "shared between threads (an access is not at the thread's own output point)"
            count += 1
        if count < 2:
            return "no reuse"
        return ""

    def _apply(self, schedule, path, kernel, model, ctx, promos, buf, refs, prefix, box, stmts,
               fp):
        ictx = schedule.get_ctx()
        k = len(promos)
        local = ir.Buffer(f"{buf.name}_reg{k}", buf.dtype, tuple(ir.IntImm(s) for s in box.sizes),
                          "local")
        promo = Promotion(buf, local, kernel, box, reason="registers")
        for s, _ in refs:
            pre = statement_prefix(prefix, s.name)
            promo.offsets[s.name] = [pullback(off, pre) for off in box.offsets]
        reads_from_outside = not model.flow.intersect_range(
            _stmt_set(model, [s for s, a in refs if a.kind == "read"])).subtract_domain(
            _stmt_set(model, stmts)).is_empty()
        live_after = buf.name in {b.name for b in model.live_out} or not model.flow.intersect_domain(
            _stmt_set(model, [s for s, a in refs if a.kind == "write"])).subtract_range(
            _stmt_set(model, stmts)).is_empty()
        prefix_set = _prefix_set(prefix)
        rel = box_relation(box, prefix_set, buf, model.params, ictx)
        # copy only the elements the thread accesses: the box over-approximates the
        # footprint (threads owning no element of an extent-1 dimension get a box too)
        fp = fp.reset_tuple_id(isl.dim_type.out).align_params(rel.get_space())
        rel = rel.align_params(fp.get_space()).intersect(fp)
        np_ = rel.dim(isl.dim_type.in_)
        site = _original_site(node_at(schedule, path))
        if reads_from_outside:
            name = f"load_{buf.name}_{k}"
            site = site.graft_before(self._copy_tree(prefix_set, rel, name))
            promo.copies[name] = ("copy_in", np_)
            site = _original_site(site)
        if live_after:
            name = f"store_{buf.name}_{k}"
            site = site.graft_after(self._copy_tree(prefix_set, rel, name))
            promo.copies[name] = ("copy_out", np_)
        promos.append(promo)
        ctx.note(self.name, f"kernel {kernel}: {buf.name} promoted to registers {list(box.sizes)} "
                            f"per thread (stride {list(box.strides)})"
                 + ("; loaded first" if reads_from_outside else "")
                 + ("; stored back" if live_after else "; never written to global memory"))
        return site.get_schedule()

    def _copy_tree(self, prefix_set, rel, name):
        ident = isl.Map.identity(isl.Space.map_from_set(prefix_set.get_space())).intersect_domain(prefix_set)
        ident = ident.align_params(rel.get_space())
        rel = rel.align_params(ident.get_space())
        ext = ident.range_product(rel).flatten_range().set_tuple_name(isl.dim_type.out, name)
        np_ = prefix_set.dim(isl.dim_type.set)
        sub = isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext))
        cdom = ext.range()
        band = isl.Map.identity(isl.Space.map_from_set(cdom.get_space())).project_out(
            isl.dim_type.out, 0, np_).reset_tuple_id(isl.dim_type.out)
        leaf = sub.child(0).insert_partial_schedule(isl.MultiUnionPwAff.from_union_map(
            isl.UnionMap.from_map(band)))
        for m in range(leaf.band_n_member()):  # constant register indices
            leaf = leaf.band_member_set_ast_loop_type(m, isl.ast_loop_type.unroll)
        return _root(leaf)


def _prefix_set(prefix: isl.UnionMap) -> isl.Set:
    rng = None
    for m in maps(prefix):
        r = m.range()
        rng = r if rng is None else rng.union(r)
    return rng.coalesce()


def _stmt_set(model, stmts) -> isl.UnionSet:
    out = isl.UnionSet.empty(model.context.get_space())
    for s in stmts:
        out = out.union(isl.UnionSet.from_set(s.domain))
    return out
