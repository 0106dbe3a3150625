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
private: the target's copy rule between global memory and registers has no sync, so
no barrier is inserted; the copy loops are unrolled (the box has at most
``max_per_array`` elements) so the registers are indexed by constants.

Each group's fate is a :class:`~polycomp.scheduler.promotion.decision.PromotionDecision`
(level ``registers``), noted with its remark.  Guarantees: every access to a promoted
element goes to the thread's register copy, which holds the element's current value, and the
global array holds the final value wherever it is live afterwards.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polycomp import ir
from polycomp.errors import PolycompInternalError
from polycomp.islutil import param_id, tuple_names
from polycomp.model import Statement
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.gpu.map import thread_param
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.promotion.copies import NameAllocator, copy_subtree, needs_sync
from polycomp.scheduler.promotion.decision import PromotionDecision, Refusal
from polycomp.scheduler.promotion.footprint import (
    ScopedFootprint,
    box_relation,
    footprint,
    prefix_space_map,
    pullback,
    statement_prefix,
    strided_box_of,
)
from polycomp.scheduler.promotion.record import CopyStmt, Promotion, promotion_state
from polycomp.scheduler.promotion.reference import (
    Reference,
    array_references,
    make_group,
    thread_private_refusal,
    written_arrays,
)
from polycomp.scheduler.promotion.sites import (
    is_kernel,
    node_at,
    original_site,
    paths,
    prefix_points,
    statements_below,
)
from polycomp.state import CompileState

LEVEL = "registers"
SOURCE = "global"


@dataclass(eq=False)
class _Site:
    """The register site of a kernel (the child of its block band): the prefix schedule
    ``{ S[i] -> [p] }`` below it, the statements, the thread filters' union ``tdom``
    (instances -> the thread executing them) and the number of output-band members."""
    path: tuple[int, ...]
    kernel: int
    prefix: isl.UnionMap
    stmts: list[Statement]
    tdom: isl.UnionSet
    n_band: int

    @property
    def scope(self) -> str:
        return f"kernel {self.kernel}"


@dataclass
class _Budget:
    """Registers per thread, in elements: at most ``per_array`` for one group and
    ``per_kernel`` for all groups of the kernel."""
    per_array: int
    per_kernel: int
    used: int = 0

    def fits(self, n: int) -> bool:
        return n <= self.per_array and self.used + n <= self.per_kernel


class RegisterPromotionPass(Pass):
    name = "promote-registers"

    def __init__(self, max_per_array: int = 64, max_per_kernel: int = 128):
        self.max_per_array = max_per_array
        self.max_per_kernel = max_per_kernel

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        # the register buffers are numbered after every promotion recorded so far
        names = NameAllocator(len(promotion_state(ctx).promotions))
        for kpath in reversed(paths(schedule.get_root(), is_kernel)):
            kn = node_at(schedule, kpath)
            kernel = marks.kernel_number(kn)
            launch = None if kernel is None else gpu_kernels(ctx).launches.get(kernel)
            if kernel is None or launch is None or not launch.thread_params:
                continue
            bands = paths(kn, lambda n: n.get_type() == isl.schedule_node_type.band)
            if not bands:
                continue
            site = _site_at(schedule, kpath + bands[0] + (0,), kernel, ctx)
            if site is not None:
                schedule = self._kernel(schedule, site, ctx, names)
        return schedule

    def _kernel(self, schedule, site: _Site, ctx: CompileState, names: NameAllocator):
        budget = _Budget(self.max_per_array, self.max_per_kernel)
        already = {p.array.name for p in promotion_state(ctx).promotions if p.kernel == site.kernel}
        for buf in written_arrays(site.stmts):
            if buf.name in already or buf.name in ctx.inlined:
                continue   # privatised or recomputed where read (row reductions)
            d = decide(buf, site, budget, ctx.model)
            if not d.promoted:
                ctx.note(self.name, d.remark())
                continue
            budget.used += d.footprint.elements()
            schedule = self._apply(schedule, site, d, names.take(), ctx)
        return schedule

    def _apply(self, schedule, site: _Site, d: PromotionDecision, k: int, ctx: CompileState):
        """Graft the load before and the store after the site as the decision needs."""
        if needs_sync(ctx.target.memory, SOURCE, LEVEL):   # registers are thread-private
            raise PolycompInternalError("register promotion assumes copies without barriers")
        model = ctx.model
        fp = d.footprint
        buf, box = fp.group.array, fp.box
        local = ir.Buffer(f"{buf.name}_reg{k}", buf.dtype, tuple(ir.IntImm(s) for s in fp.shape),
                          "local")
        promo = Promotion(buf, local, site.kernel, box, reason="registers", level=LEVEL)
        for r in fp.group.refs:
            pre = statement_prefix(site.prefix, r.stmt.name)
            promo.offsets[r.stmt.name] = [pullback(off, pre) for off in box.offsets]
        prefix_set = _prefix_set(site.prefix)
        rel = box_relation(box, prefix_set, buf, model.params, schedule.get_ctx())
        # copy only the elements the thread accesses: the box over-approximates the
        # footprint (threads owning no element of an extent-1 dimension get a box too)
        f = fp.relation.reset_tuple_id(isl.dim_type.out).align_params(rel.get_space())
        rel = rel.align_params(f.get_space()).intersect(f)
        n_prefix = rel.dim(isl.dim_type.in_)
        node = original_site(node_at(schedule, site.path))
        if d.loads:
            name = f"load_{buf.name}_{k}"
            node = node.graft_before(copy_subtree(prefix_set, rel, name, align=True))
            promo.copies[name] = CopyStmt("copy_in", n_prefix)
            node = original_site(node)
        if d.stores:
            name = f"store_{buf.name}_{k}"
            node = node.graft_after(copy_subtree(prefix_set, rel, name, align=True))
            promo.copies[name] = CopyStmt("copy_out", n_prefix)
        promotion_state(ctx).promotions.append(promo)
        ctx.note(self.name, d.remark())
        return node.get_schedule()


def _site_at(schedule, path, kernel: int, ctx: CompileState) -> _Site | None:
    node = original_site(node_at(schedule, path))
    tdom = _thread_domain(node, kernel)
    if tdom is None:
        return None
    prefix = prefix_space_map(node)
    parent = node.parent()
    n_band = parent.band_n_member() if parent.get_type() == isl.schedule_node_type.band else 0
    return _Site(path, kernel, prefix, statements_below(prefix, ctx.model), tdom, n_band)


def decide(buf: ir.Buffer, site: _Site, budget: _Budget, model) -> PromotionDecision:
    """Promote all references to the written array ``buf`` to registers?  The group must
    be bijective per thread with reuse, its per-thread footprint (thread ids as
    parameters) must have a strided box within the register budget.  A promoted
    decision says whether the registers are loaded first (a read may see a value
    written before the kernel) and stored back (``buf`` is live after the kernel)."""
    refs = array_references(site.stmts, buf.name)
    group = make_group(buf, refs, site.tdom)
    d = PromotionDecision(group, LEVEL, site.scope)
    why = thread_private_refusal(refs, site.n_band)
    f = footprint(site.prefix, group.access)
    if why is Refusal.SHARED_BETWEEN_THREADS and len(refs) >= 2 and f is not None \
            and private_per_thread(f, site.kernel):
        why = None    # e.g. C[i][j] in S[i, k, j] of a C loop nest (k outside j)
    if why is not None:
        return d.refuse(why)
    box = strided_box_of(f) if f is not None else None
    if box is None:
        return d.refuse(Refusal.NO_STRIDED_BOX)
    n = box.elements()
    if not budget.fits(n):
        return d.refuse(Refusal.OVER_BUDGET, n, budget.per_kernel - budget.used)
    d.footprint = ScopedFootprint(group, f, box)
    d.loads = _reads_from_outside(model, refs, site.stmts)
    d.stores = _live_after(model, buf, refs, site.stmts)
    return d


def private_per_thread(f: isl.Map, kernel: int) -> bool:
    """No element of the footprint ``f = { [p] -> X[a] }`` (thread ids of ``kernel`` as
    parameters, ``p`` the block's prefix) is accessed by two threads or at two prefixes:
    joining ``f`` with a copy whose thread ids are renamed on the element implies equal
    prefixes and equal ids.
    The general form of the per-thread bijectivity that ``thread_private_refusal``
    checks on the index expressions (``X[o]``); it admits references whose statement
    iterators are in another order than the output band, as in C loop nests."""
    ictx = f.get_ctx()
    names = [thread_param(a, kernel) for a in range(3)
             if f.find_dim_by_name(isl.dim_type.param, thread_param(a, kernel)) >= 0]
    if not names:
        return False
    g = f
    for nm in names:
        k = g.find_dim_by_name(isl.dim_type.param, nm)
        g = g.set_dim_id(isl.dim_type.param, k, param_id(ictx, f"{nm}_other"))
    f2 = f.align_params(g.get_space())
    g = g.align_params(f2.get_space())
    # { [p] -> [p'] : some element is in the footprint of thread t at prefix p and of
    # thread t' at prefix p' }: only p = p' and t = t' may occur (another block, like
    # another thread, must not touch the thread's elements)
    meet = f2.apply_range(g.reverse())
    eq = " and ".join(f"{nm} = {nm}_other" for nm in names)
    params = ", ".join(names + [f"{nm}_other" for nm in names])
    same = isl.Set.read_from_str(ictx, f"[{params}] -> {{ : {eq} }}")
    ident = isl.Map.identity(meet.get_space())
    ident = ident.intersect_params(same.align_params(ident.get_space()))
    return meet.is_subset(ident)


def _reads_from_outside(model, refs: list[Reference], stmts) -> bool:
    """Some read of the group may see a value written before the kernel: a flow
    dependence from a statement outside the kernel, or a read that no write of the
    kernel precedes (the array's initial contents, e.g. a C SCoP's in-out array in
    ``C[i][j] *= beta``)."""
    reads = _stmt_set(model, [r.stmt for r in refs if r.is_read])
    if not model.flow.intersect_range(reads).subtract_domain(_stmt_set(model, stmts)).is_empty():
        return True
    space = model.context.get_space()
    sink, source = isl.UnionMap.empty(space), isl.UnionMap.empty(space)
    for r in refs:
        um = isl.UnionMap.from_map(r.access.relation)
        if r.is_read:
            sink = sink.union(um)
        else:
            source = source.union(um)
    if sink.is_empty():
        return False
    # the program order of these statements only (the whole schedule tree cost time in
    # the size of the program for each group: quadratic in a 100-statement C kernel)
    names = tuple_names(sink.domain()) | tuple_names(source.domain())
    flow = isl.UnionAccessInfo.from_sink(sink).set_must_source(source) \
        .set_schedule_map(model.program_order(names)).compute_flow()
    return not flow.get_may_no_source().is_empty()


def _live_after(model, buf, refs: list[Reference], stmts) -> bool:
    """``buf`` is an output of the kernel graph, or read by a statement outside the kernel."""
    writes = _stmt_set(model, [r.stmt for r in refs if r.is_write])
    return buf.name in {b.name for b in model.live_out} or not model.flow.intersect_domain(
        writes).subtract_range(_stmt_set(model, stmts)).is_empty()


def _thread_domain(site, kernel) -> isl.UnionSet | None:
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


def _prefix_set(prefix: isl.UnionMap) -> isl.Set:
    return prefix_points(prefix).coalesce()


def _stmt_set(model, stmts) -> isl.UnionSet:
    out = isl.UnionSet.empty(model.context.get_space())
    for s in stmts:
        out = out.union(isl.UnionSet.from_set(s.domain))
    return out
