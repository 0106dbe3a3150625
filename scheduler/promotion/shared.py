"""Pass: promote read-only reference groups to shared memory (PPCG-style).

Assumes: the tree of :class:`~polycomp.scheduler.gpu.map.GpuMappingPass`: kernels
``kernel:<n>`` with launch information in ``gpu_kernels(ctx).launches``; a promotion
*site* is the child of a ``tile:reduce`` band (one tile of the reduction loop) or,
in kernels without one, the child of the block band.  A site must be *block-level*:
the statement instances that reach it do not depend on the thread ids (no thread
filter above it), since its shared buffer, copy and barriers belong to the whole
block.  A site below a thread filter is refused ("below the kernel's thread
mapping"): the first band of a row-reduction kernel
(:class:`~polycomp.scheduler.gpu.rowreduce.RowReductionMappingPass`) is one warp's
row, so a box there would be one warp's footprint in a block-wide buffer, copied by
the threads the block-wide copy filter picks and followed by a barrier under the
per-row guard.  A kernel of :class:`~polycomp.scheduler.gpu.baseline.GpuBaselineMappingPass`
(C SCoPs: a stencil's nests below a host loop) has no launch record and no thread
parameters: its site is its ``gpu_threads`` mark (the prefix is the host loops and the
block band, the threads are the point loops below the mark), and its copy is
:func:`~polycomp.scheduler.promotion.copies.thread_tiled_copy_subtree` (the box tiled by
the block, the points below a ``gpu_threads:<n>`` mark of the copy) instead of the
linear thread filter; a box of lower rank than the block is refused ("fewer array
dimensions than thread dimensions").  This is PPCG's rule for stencil halos: the
block's footprint ``{ [p] -> A[a] }`` (jacobi-2d: the block plus a one-wide halo) is a
fixed box and elements are read by several threads.

For each array that is only read by the statements below a site (arrays written in
the kernel are left to register promotion), all its references there form one group
(read-only references never conflict, so merging them only widens the box).  The group
is promoted when

* its per-tile footprint ``{ [p] -> A[a] }`` has a constant-size box (else refused:
  "unbounded footprint"), and
* it has reuse (two instances of one tile read the same element) or its global
  accesses are not coalesced (the innermost array index does not follow the
  innermost thread-mapped iterator with stride 1); else refused ("no reuse, coalesced"),
* and all promoted groups of the kernel fit the ``shared`` level of the target's memory
  hierarchy (else the largest are refused: "over budget").

A promoted group gets a ``__shared__`` buffer of the box size and an extension subtree
grafted before the site: ``copy_<A>_<n>[p, a]`` for ``a`` in the box (intersected with
the array's extent), the box's row-major elements dealt to the block's threads in
turn (a warp reads consecutive elements: coalesced, and writes 32 consecutive words:
no bank conflict), followed by a ``sync`` statement.  A
second ``sync`` is grafted after the site when the site lies inside a loop of the
kernel (the next iteration's copies would overwrite data still being read) — only the
barriers these two dependences need.  If the array is produced by a fused *prologue*
stage (e.g. padding), the copy evaluates the producer's expression instead of loading
the array and the prologue statements are removed from the tree: the padded tensor is
never materialised.

Guarantees: every read of a promoted array below the site reads the shared copy of
the same element (``promotion_state(ctx).promotions`` records the offsets the lowering uses),
the copy completes before any read (barrier) and is not overwritten before all reads
of the tile completed (barrier), so the kernel computes the same values.  Decisions
are noted for ``polycomp explain``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from polycomp import ir
from polycomp.frontend.dsl_model import DslModel
from polycomp.islutil import param_id, sets
from polycomp.model import PolyModel, Statement
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.gpu.map import KernelLaunch, thread_param
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.promotion.copies import (
    NameAllocator,
    copy_subtree,
    needs_sync,
    sync_subtree,
    thread_tiled_copy_subtree,
)
from polycomp.scheduler.promotion.decision import PromotionDecision, Refusal
from polycomp.scheduler.promotion.footprint import (
    ScopedFootprint,
    box_of,
    box_relation,
    footprint,
    has_reuse,
    prefix_space_map,
    pullback,
    statement_prefix,
)
from polycomp.scheduler.promotion.record import CopyStmt, Promotion, promotion_state
from polycomp.scheduler.promotion.reference import ReferenceGroup, read_only_groups
from polycomp.scheduler.promotion.sites import (
    drop_statements,
    inside_loop,
    kernel_node,
    node_at,
    original_site,
    prefix_points,
    shared_sites,
    statements_below,
    thread_dependent,
)
from polycomp.state import CompileState

LEVEL = "shared"
SOURCE = "global"


@dataclass(eq=False)
class _Site:
    """One promotion site of a kernel: its path, its kernel and launch, the prefix
    schedule ``{ S[i] -> [p] }`` of the instances below it and their statements."""
    path: tuple[int, ...]
    kernel: int
    launch: KernelLaunch | None     # None: a baseline kernel (``threads`` below)
    prefix: isl.UnionMap
    domain: isl.UnionSet
    stmts: list[Statement]
    written: set[str]          # arrays written anywhere in the kernel
    threads: tuple[int, ...] = ()   # a baseline kernel's block (outermost first)

    @property
    def scope(self) -> str:
        return f"kernel {self.kernel}"


@dataclass
class _Budget:
    """Shared memory per kernel: ``capacity`` bytes each, ``used`` so far."""
    capacity: int
    used: dict[int, int] = field(default_factory=dict)

    def request(self, kernel: int, nbytes: int) -> int:
        """The bytes the kernel would use with ``nbytes`` more."""
        return self.used.get(kernel, 0) + nbytes

    def take(self, kernel: int, nbytes: int) -> None:
        self.used[kernel] = self.request(kernel, nbytes)


class SharedPromotionPass(Pass):
    name = "promote-shared"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        budget = _Budget(ctx.target.memory.capacity(LEVEL))
        names = NameAllocator()
        prologue: list | None = None   # the model's prologue producers, found once
        for path in reversed(shared_sites(schedule)):  # reversed: grafts keep earlier paths valid
            site = _site_at(schedule, path, ctx)
            if site is None:
                continue
            if thread_dependent(node_at(schedule, path), site.kernel):
                ctx.note(self.name, f"kernel {site.kernel}: no shared promotion: the site lies "
                                    f"below the kernel's thread mapping (not one per block)")
                continue
            if prologue is None:
                prologue = _prologue_producers(ctx.model)
            schedule = self._promote_site(schedule, site, ctx, budget, names, prologue)
        return schedule

    # ------------------------------------------------------------------ one site
    def _promote_site(self, schedule, site: _Site, ctx: CompileState, budget: _Budget,
                      names: NameAllocator, prologue: list):
        candidates = []
        for group in read_only_groups(site.stmts, site.domain, site.written):
            d = decide(group, site)
            if d.reason is Refusal.EMPTY:
                continue
            if not d.promoted:
                ctx.note(self.name, d.remark())
                continue
            candidates.append(d)
        candidates.sort(key=lambda d: d.footprint.bytes())
        fusable = _fusable_prologue_producers(prologue, site.stmts)
        applied = []
        for d in candidates:
            nbytes = d.footprint.bytes()
            if budget.request(site.kernel, nbytes) > budget.capacity:
                d.refuse(Refusal.OVER_BUDGET, budget.request(site.kernel, nbytes), budget.capacity)
                ctx.note(self.name, d.remark())
                continue
            budget.take(site.kernel, nbytes)
            schedule, promo = _apply(schedule, site, d, names.take(), ctx.model)
            promotion_state(ctx).promotions.append(promo)
            ctx.note(self.name, d.remark())
            applied.append(promo)
            name = d.group.name
            if name in fusable:
                promo.producer = fusable[name]
                schedule = drop_statements(schedule, [s for s in ctx.model.statements
                                                      if s.stage is fusable[name]])
                ctx.note(self.name, f"kernel {site.kernel}: prologue {name} fused into the copy of "
                                    f"{name}: it is computed while copying and never stored "
                                    f"in global memory")
        if applied and needs_sync(ctx.target.memory, SOURCE, LEVEL):
            schedule = _barriers(schedule, site, applied, names.take())
        return schedule


def _site_at(schedule, path, ctx: CompileState) -> _Site | None:
    node = node_at(schedule, path)
    kernel = marks.kernel_of(node)
    launch = gpu_kernels(ctx).launches.get(kernel)
    threads: tuple[int, ...] = ()
    if launch is None:      # a baseline kernel: the site must be its gpu_threads mark
        base = gpu_kernels(ctx).baseline.get(kernel)
        if base is None or not base.threads or not marks.is_kind(node, marks.GPU_THREADS):
            return None
        threads = base.threads
    prefix = prefix_space_map(node)
    return _Site(path, kernel, launch, prefix, node.get_domain(),
                 statements_below(prefix, ctx.model), _written_in_kernel(node, ctx.model),
                 threads)


def decide(group: ReferenceGroup, site: _Site) -> PromotionDecision:
    """Promote ``group`` to shared memory at ``site``?  Refused for a zero-dimensional
    array (one value: nothing to tile), when the footprint of the
    block (thread ids eliminated) has no constant-size box, or when the group has no
    reuse within a tile and its global accesses are coalesced anyway; the budget is
    checked by the caller, over all groups of the kernel."""
    d = PromotionDecision(group, LEVEL, site.scope)
    if not group.array.shape:     # PolyBench's alpha, beta: a 0-d input
        return d.refuse(Refusal.SCALAR)
    f = footprint(site.prefix, group.access)
    if f is None:
        return d.refuse(Refusal.EMPTY)
    f = _drop_thread_params(f, site.kernel)
    box = box_of(f)
    if box is None:
        return d.refuse(Refusal.UNBOUNDED)
    if site.launch is None and len(box.sizes) < len(site.threads):
        return d.refuse(Refusal.COPY_RANK)
    reuse = has_reuse(_drop_thread_params_u(site.prefix, site.kernel),
                      _drop_thread_params_u(group.access, site.kernel))
    coalesced = all(_coalesced(r.stmt, r.access) for r in group.refs)
    if not reuse and coalesced:
        return d.refuse(Refusal.NO_REUSE_COALESCED)
    d.footprint = ScopedFootprint(group, f, box)
    d.motive = "reuse" if reuse else "uncoalesced"
    return d


def _written_in_kernel(site, model) -> set[str]:
    dom_names = {s.get_tuple_name() for s in sets(kernel_node(site).get_domain())}
    return {s.write.name for s in model.statements if s.name in dom_names}


def _apply(schedule, site: _Site, d: PromotionDecision, k: int, model):
    """Graft the copy-in of ``d``'s box before the site; the record lowering uses."""
    fp = d.footprint
    buf, box = fp.group.array, fp.box
    local = ir.Buffer(f"{buf.name}_shared{k}", buf.dtype, tuple(ir.IntImm(s) for s in fp.shape),
                      "shared")
    promo = Promotion(buf, local, site.kernel, box, reason=d.motive, level=LEVEL)
    for r in fp.group.refs:
        pre = statement_prefix(site.prefix, r.stmt.name)
        promo.offsets[r.stmt.name] = [pullback(off, pre) for off in box.offsets]
    prefix_set = _union_range(site.prefix, site.kernel)
    rel = box_relation(box, prefix_set, buf, model.params, schedule.get_ctx())
    n_prefix = rel.dim(isl.dim_type.in_)
    copy_name = f"copy_{buf.name}_{k}"
    promo.copies[copy_name] = CopyStmt("copy_in", n_prefix)
    launch = site.launch
    if launch is None:      # baseline: tiled by the block, the tile's points on threads
        tree = thread_tiled_copy_subtree(
            prefix_set, rel, copy_name, lambda cdom: _local_affs(cdom, n_prefix, box),
            site.threads, site.kernel)
        node = node_at(schedule, site.path).graft_before(tree)
        return node.get_schedule(), promo
    nthreads = launch.block[0] * launch.block[1] * launch.block[2]
    per_thread = -(-box.elements() // nthreads)
    tree = copy_subtree(prefix_set, rel, copy_name,
                        distribute=lambda cdom: _linear_copy_filter(cdom, n_prefix, box, launch,
                                                                    site.kernel),
                        unroll=per_thread <= 16,   # each thread's copies unrolled
                        mark=True)
    node = node_at(schedule, site.path).graft_before(tree)
    return node.get_schedule(), promo


def _barriers(schedule, site: _Site, applied: list[Promotion], k: int):
    """One barrier after all copies of the site (the copies' writes must be visible
    to every thread's reads); one after the site when it is inside a loop (the next
    iteration's copies must not overwrite elements still being read)."""
    node = original_site(node_at(schedule, site.path))
    prefix_set = _union_range(site.prefix, applied[-1].kernel)
    n_prefix = prefix_set.dim(isl.dim_type.set)
    node = node.graft_before(sync_subtree(prefix_set, f"sync{k}_in"))
    applied[-1].copies[f"sync{k}_in"] = CopyStmt("sync", n_prefix)
    if inside_loop(node):
        node = node.graft_after(sync_subtree(prefix_set, f"sync{k}_out"))
        applied[-1].copies[f"sync{k}_out"] = CopyStmt("sync", n_prefix)
    return node.get_schedule()


def _prologue_producers(model: PolyModel) -> list:
    """``[(array, stage, names of the statements that read it)]`` for the prologue stages
    (see classify.fusion_groups) that are not reductions and whose array is not a kernel
    output (DSL programs only: a C SCoP has no stages).  The same for every site of a
    compile: computed once per pass run, not once per site."""
    from polycomp.scheduler.common.classify import fusion_groups
    out: list = []
    if not isinstance(model, DslModel):
        return out
    live_out = {b.name for b in model.live_out}
    for g in fusion_groups(model.graph):
        for st in g.prologue:
            arr = st.output.buffer.name
            if st.is_reduction or arr in live_out:
                continue
            readers = {s.name for s in model.statements
                       if any(a.kind == "read" and a.buffer.name == arr for a in s.accesses)}
            out.append((arr, st, readers))
    return out


def _fusable_prologue_producers(prologue: list, site_stmts) -> dict:
    """Arrays produced by a prologue stage (``prologue``: :func:`_prologue_producers`)
    that only the statements of this site read and that are not kernel outputs: their
    promotion copy can evaluate the producer instead of loading the array."""
    names = {s.name for s in site_stmts}
    out: dict = {}
    for arr, st, readers in prologue:
        if readers and readers <= names:
            out[arr] = st
    return out


def _linear_copy_filter(cdom: isl.Set, np_: int, box, launch, kernel) -> isl.UnionSet | None:
    """``{ copy[p, a] : flat(a - offset(p)) mod T = tid }``: the box is copied in
    row-major order by the block's ``T`` threads, thread ``tid = tx + bx*(ty + by*tz)``
    taking elements ``tid, tid + T, ...`` — consecutive threads touch consecutive
    elements of the innermost dimension, so global loads are coalesced and the shared
    stores of a warp hit 32 consecutive words (no bank conflict)."""
    if not launch.thread_params:
        return None
    ls = isl.LocalSpace.from_space(cdom.get_space())
    ictx = cdom.get_ctx()
    flat = isl.Aff.zero_on_domain(ls)
    for d, term in enumerate(_local_affs(cdom, np_, box)):
        coef = 1
        for s2 in box.sizes[d + 1:]:
            coef *= s2
        flat = _aligned(flat, term.scale_val(isl.Val.int_from_si(ictx, coef)), "add")
    total = launch.block[0] * launch.block[1] * launch.block[2]
    tid = isl.Aff.zero_on_domain(isl.LocalSpace.from_space(flat.get_domain_space()))
    scale = 1
    for axis, name in enumerate(launch.thread_params):
        pid = param_id(ictx, name)
        dspace = flat.get_domain_space()
        if dspace.find_dim_by_name(isl.dim_type.param, name) < 0:
            params = isl.Set.read_from_str(ictx, f"[{name}] -> {{ : }}").get_space()
            dspace = dspace.align_params(params)
        t = isl.Aff.param_on_domain_space_id(dspace, pid)
        tid = _aligned(tid, t.scale_val(isl.Val.int_from_si(ictx, scale)), "add")
        scale *= launch.block[axis]
    cond = _aligned(flat.mod_val(isl.Val.int_from_si(ictx, total)), tid, "sub").zero_basic_set()
    return isl.UnionSet.from_set(isl.Set.from_basic_set(cond))


def _local_affs(cdom: isl.Set, np_: int, box) -> list[isl.Aff]:
    """``l_d = a_d - offset_d(p)`` on the copy domain ``copy[p, a]`` (``np_`` prefix
    dimensions): the coordinates of a copy instance in the local buffer."""
    sp = cdom.get_space()
    ls = isl.LocalSpace.from_space(sp)
    ictx = cdom.get_ctx()
    prefix_vars = isl.AffList.alloc(ictx, np_)
    for i in range(np_):
        prefix_vars = prefix_vars.add(isl.Aff.var_on_domain(ls, isl.dim_type.set, i))
    out = []
    for d, off in enumerate(box.offsets):
        proj_space = isl.Space.map_from_domain_and_range(
            sp, isl.Space.set_from_params(sp.params()).add_dims(isl.dim_type.set, np_))
        proj = isl.MultiAff.from_aff_list(proj_space.align_params(off.get_space()),
                                          _aligned_list(prefix_vars, off.get_space(), ictx))
        off_c = off.align_params(proj.get_space()).pullback_multi_aff(proj)
        out.append(_aligned(isl.Aff.var_on_domain(ls, isl.dim_type.set, np_ + d), off_c, "sub"))
    return out


def _aligned(a: isl.Aff, b: isl.Aff, op: str) -> isl.Aff:
    """``a op b`` after aligning the parameters of both."""
    a = a.align_params(b.get_space())
    b = b.align_params(a.get_space())
    return getattr(a, op)(b)


def _aligned_list(lst, space, ictx):
    out = isl.AffList.alloc(ictx, lst.n_aff())
    for i in range(lst.n_aff()):
        out = out.add(lst.get_at(i).align_params(space))
    return out


def _union_range(prefix: isl.UnionMap, kernel: int | None = None) -> isl.Set:
    """The prefix points of a site; with ``kernel``, for all threads of the block (the
    thread ids are eliminated), so copies and barriers are executed by every thread."""
    rng = prefix_points(prefix)
    if kernel is not None:
        for axis in range(3):
            pos = rng.find_dim_by_name(isl.dim_type.param, thread_param(axis, kernel))
            if pos >= 0:
                rng = rng.project_out(isl.dim_type.param, pos, 1)
    return rng.coalesce()


def _drop_thread_params(m: isl.Map, kernel: int) -> isl.Map:
    """Eliminate the thread ids: the union of all threads' footprints (the block's)."""
    for axis in range(3):
        name = thread_param(axis, kernel)
        pos = m.find_dim_by_name(isl.dim_type.param, name)
        if pos >= 0:
            m = m.project_out(isl.dim_type.param, pos, 1)
    return m


def _drop_thread_params_u(um: isl.UnionMap, kernel: int) -> isl.UnionMap:
    for axis in range(3):
        name = thread_param(axis, kernel)
        space = um.get_space()
        if space.find_dim_by_name(isl.dim_type.param, name) >= 0:
            um = um.project_out_param_id(param_id(um.get_ctx(), name))
    return um


def _coalesced(stmt, access) -> bool:
    """The innermost index follows the stage's innermost iterator with stride 1 (and no
    other index depends on it): consecutive threads read consecutive elements."""
    from polycomp.lowering.simplify import linear
    iters = stmt.stage.iters if stmt.stage is not None else ()
    if not iters or not access.indices:
        return True
    inner = iters[-1]
    lin = linear(access.indices[-1])
    if lin is None or lin[0].get(inner, 0) != 1:
        return False
    for idx in access.indices[:-1]:
        l2 = linear(idx)
        if l2 is None or l2[0].get(inner, 0) != 0:
            return False
    return True
