"""Pass: promote read-only reference groups to shared memory (PPCG-style).

Assumes: the tree of :class:`~polycomp.scheduler.gpu.map.GpuMappingPass`: kernels
``kernel:<n>`` with launch information in ``ctx.gpu.launches``; a promotion
*site* is the child of a ``tile:reduce`` band (one tile of the reduction loop) or,
in kernels without one, the child of the block band.  A site must be *block-level*:
the statement instances that reach it do not depend on the thread ids (no thread
filter above it), since its shared buffer, copy and barriers belong to the whole
block.  A site below a thread filter is refused ("below the kernel's thread
mapping"): the first band of a row-reduction kernel
(:class:`~polycomp.scheduler.gpu.rowreduce.RowReductionMappingPass`) is one warp's
row, so a box there would be one warp's footprint in a block-wide buffer, copied by
the threads the block-wide copy filter picks and followed by a barrier under the
per-row guard.

For each array that is only read by the statements below a site (arrays written in
the kernel are left to register promotion), all its references there form one group
(read-only references never conflict, so merging them only widens the box).  The group
is promoted when

* its per-tile footprint ``{ [p] -> A[a] }`` has a constant-size box (else refused:
  "unbounded footprint"), and
* it has reuse (two instances of one tile read the same element) or its global
  accesses are not coalesced (the innermost array index does not follow the
  innermost thread-mapped iterator with stride 1); else refused ("no reuse, coalesced"),
* and all promoted groups of the kernel fit ``target.shared_memory_per_block`` (else the
  largest are refused: "over budget").

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
the same element (``ctx.promotions`` records the offsets the lowering uses),
the copy completes before any read (barrier) and is not overwritten before all reads
of the tile completed (barrier), so the kernel computes the same values.  Decisions
are noted for ``polycomp explain``.
"""
from __future__ import annotations

import islpy as isl

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.islutil import maps, param_id

from polycomp.scheduler.promotion.footprint import (Promotion, box_of, box_relation, footprint, has_reuse,
                        prefix_space_map, pullback, statement_prefix)
from polycomp.scheduler.gpu.map import thread_param
from polycomp.scheduler.gpu.tile import is_marked
from polycomp.scheduler.common.pass_base import Pass
from polycomp.state import CompileState


def _kernel_of(node) -> int:
    x = node
    while x.has_parent():
        x = x.parent()
        if x.get_type() == isl.schedule_node_type.mark:
            name = x.mark_get_id().get_name()
            if name.startswith("kernel:"):
                return int(name.split(":")[1])
    return -1


def _paths(node, pred, path=()):
    """Paths (child indices from ``node``) of the descendants satisfying pred, pre-order."""
    out = [path] if pred(node) else []
    for k in range(node.n_children()):
        out += _paths(node.child(k), pred, path + (k,))
    return out


def _is_kernel(n):
    return n.get_type() == isl.schedule_node_type.mark and \
        n.mark_get_id().get_name().startswith("kernel:")


def _sites(schedule):
    """Promotion sites: the child of every ``tile:reduce`` band; in a kernel without one,
    the child of the block band (the first band of the kernel)."""
    out = []
    root = schedule.get_root()
    for kpath in _paths(root, _is_kernel):
        kn = node_at(schedule, kpath)
        red = _paths(kn, lambda n: n.get_type() == isl.schedule_node_type.band
                     and is_marked(n, "tile:reduce"))
        if red:
            out += [kpath + r + (0,) for r in red]
            continue
        bands = _paths(kn, lambda n: n.get_type() == isl.schedule_node_type.band)
        if bands:
            out.append(kpath + bands[0] + (0,))
    return out


def _thread_dependent(site, kernel: int) -> bool:
    """Do the statement instances that reach ``site`` depend on the thread ids (a thread
    filter above it, e.g. a row reduction's ``floor(i / RB) = bx and i mod RB = ty``)?

    A shared buffer, its copy and its barriers belong to the whole block: every thread
    must see the same prefix points at the site, i.e. the site's domain must not
    constrain ``tx/ty/tz<kernel>``.  Below a thread filter the footprint of one prefix
    point is one thread group's (one warp's row), the block-wide copy filter would
    leave it to the threads of one group and the barrier would sit under that group's
    guard."""
    names = [thread_param(a, kernel) for a in range(3)]
    for s in _sets(site.get_domain()):
        for name in names:
            pos = s.find_dim_by_name(isl.dim_type.param, name)
            if pos >= 0 and s.involves_dims(isl.dim_type.param, pos, 1):
                return True
    return False


def node_at(schedule, path):
    n = schedule.get_root()
    for k in path:
        n = n.child(k)
    return n


def _inside_loop(site) -> bool:
    """Is the site below a band of its kernel other than the (degenerate) block band?"""
    x = site
    while x.has_parent():
        x = x.parent()
        if x.get_type() == isl.schedule_node_type.band and is_marked(x, "tile:reduce"):
            return True
        if x.get_type() == isl.schedule_node_type.mark and \
                x.mark_get_id().get_name().startswith("tile:block"):
            return False
    return False


class SharedPromotionPass(Pass):
    name = "promote-shared"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        model = ctx.model
        promos = ctx.promotions
        launches = ctx.gpu.launches
        budget = ctx.target.shared_memory_per_block
        used: dict = {}
        counter = [0]
        for path in reversed(_sites(schedule)):  # reversed: grafts keep earlier paths valid
            site = node_at(schedule, path)
            kernel = _kernel_of(site)
            if kernel not in launches:
                continue
            if _thread_dependent(site, kernel):
                ctx.note(self.name, f"kernel {kernel}: no shared promotion: the site lies below "
                                    f"the kernel's thread mapping (not one per block)")
                continue
            schedule = self._promote_site(schedule, path, kernel, launches[kernel], model, ctx,
                                          promos, used, budget, counter)
        return schedule

    # ------------------------------------------------------------------ one site
    def _promote_site(self, schedule, path, kernel, launch, model, ctx, promos, used, budget, counter):
        site = node_at(schedule, path)
        prefix = prefix_space_map(site)
        stmt_names = {m.get_tuple_name(isl.dim_type.in_) for m in maps(prefix)}
        stmts = [s for s in model.statements if s.name in stmt_names]
        written_in_kernel = self._written_in_kernel(site, model)
        arrays: dict = {}
        for s in stmts:
            for a in s.reads:
                if a.buffer.name in written_in_kernel:
                    continue
                arrays.setdefault(a.buffer.name, (a.buffer, []))[1].append((s, a))
        plans = []
        for name, (buf, refs) in arrays.items():
            acc = None
            for s, a in refs:
                m = isl.UnionMap.from_map(a.index_relation)
                acc = m if acc is None else acc.union(m)
            acc = acc.intersect_domain(site.get_domain())
            f = footprint(prefix, acc)
            if f is None:
                continue
            f = _drop_thread_params(f, kernel)
            box = box_of(f)
            if box is None:
                ctx.note(self.name, f"kernel {kernel}: {name} not promoted: unbounded footprint")
                continue
            reuse = has_reuse(_drop_thread_params_u(prefix, kernel),
                              _drop_thread_params_u(acc, kernel))
            coalesced = all(_coalesced(s, a) for s, a in refs)
            if not reuse and coalesced:
                ctx.note(self.name, f"kernel {kernel}: {name} not promoted: no reuse within a "
                                    f"tile and accesses already coalesced")
                continue
            nbytes = box.elements() * dt.itemsize(buf.dtype)
            plans.append((nbytes, name, buf, refs, f, box, "reuse" if reuse else "uncoalesced"))
        plans.sort(key=lambda p: p[0])
        fusable = _fusable_prologue_producers(model, stmts)
        applied = []
        for nbytes, name, buf, refs, f, box, why in plans:
            if used.get(kernel, 0) + nbytes > budget:
                ctx.note(self.name, f"kernel {kernel}: {name} not promoted: over budget "
                                    f"({used.get(kernel, 0) + nbytes} > {budget} bytes of shared memory)")
                continue
            used[kernel] = used.get(kernel, 0) + nbytes
            k = counter[0]
            counter[0] += 1
            schedule = self._apply(schedule, path, kernel, launch, model, ctx, promos, name,
                                   buf, refs, prefix, box, why, nbytes, k)
            applied.append(promos[-1])
            if name in fusable:
                promos[-1].producer = fusable[name]
                schedule = _drop_statements(schedule, [s for s in model.statements
                                                       if s.stage is fusable[name]])
                ctx.note(self.name, f"kernel {kernel}: prologue {name} fused into the copy of "
                                    f"{name}: it is computed while copying and never stored "
                                    f"in global memory")
        if applied:
            schedule = self._barriers(schedule, path, prefix, applied, counter)
        return schedule

    def _barriers(self, schedule, path, prefix, applied, counter):
        """One barrier after all copies of the site (the copies' writes must be visible
        to every thread's reads); one after the site when it is inside a loop (the next
        iteration's copies must not overwrite elements still being read)."""
        k = counter[0]
        counter[0] += 1
        site = _original_site(node_at(schedule, path))
        ictx = schedule.get_ctx()
        prefix_set = _union_range(prefix, applied[-1].kernel)
        site = site.graft_before(self._sync_tree(prefix_set, f"sync{k}_in", ictx))
        applied[-1].copies[f"sync{k}_in"] = ("sync", prefix_set.dim(isl.dim_type.set))
        if _inside_loop(site):
            site = site.graft_after(self._sync_tree(prefix_set, f"sync{k}_out", ictx))
            applied[-1].copies[f"sync{k}_out"] = ("sync", prefix_set.dim(isl.dim_type.set))
        return site.get_schedule()

    def _written_in_kernel(self, site, model) -> set:
        x = site
        while x.has_parent() and not (x.get_type() == isl.schedule_node_type.mark and
                                      x.mark_get_id().get_name().startswith("kernel:")):
            x = x.parent()
        dom_names = {s.get_tuple_name() for s in _sets(x.get_domain())}
        out = set()
        for s in model.statements:
            if s.name in dom_names:
                out.add(s.write.name)
        return out

    def _apply(self, schedule, path, kernel, launch, model, ctx, promos, name, buf, refs,
               prefix, box, why, nbytes, k):
        ictx = schedule.get_ctx()
        site = node_at(schedule, path)
        local = ir.Buffer(f"{name}_shared{k}", buf.dtype, tuple(ir.IntImm(s) for s in box.sizes),
                          "shared")
        promo = Promotion(buf, local, kernel, box, reason=why)
        for s, a in refs:
            pre = statement_prefix(prefix, s.name)
            promo.offsets[s.name] = [pullback(off, pre) for off in box.offsets]
        prefix_set = _union_range(prefix, kernel)
        rel = box_relation(box, prefix_set, buf, model.params, ictx)
        np_ = rel.dim(isl.dim_type.in_)
        copy_name = f"copy_{name}_{k}"
        # extension { [p] -> copy[p, a] }
        ident = isl.Map.identity(isl.Space.map_from_set(prefix_set.get_space())).intersect_domain(prefix_set)
        ext = ident.range_product(rel).flatten_range().set_tuple_name(isl.dim_type.out, copy_name)
        promo.copies[copy_name] = ("copy_in", np_)
        sub = isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext))
        leaf = sub.child(0)
        # band over the copied element coordinates, threads cyclically over the innermost dims
        cdom = ext.range()
        band_um = isl.Map.identity(isl.Space.map_from_set(cdom.get_space())).project_out(
            isl.dim_type.out, 0, np_).reset_tuple_id(isl.dim_type.out)
        tf = _linear_copy_filter(cdom, np_, box, launch, kernel)
        if tf is not None:
            leaf = leaf.insert_filter(tf).child(0)
        leaf = leaf.insert_partial_schedule(isl.MultiUnionPwAff.from_union_map(
            isl.UnionMap.from_map(band_um)))
        nthreads = launch.block[0] * launch.block[1] * launch.block[2]
        per_thread = -(-box.elements() // nthreads)
        if per_thread <= 16:  # each thread's copies unrolled (constant offsets)
            for m in range(leaf.band_n_member()):
                leaf = leaf.band_member_set_ast_loop_type(m, isl.ast_loop_type.unroll)
        copy_tree = leaf.insert_mark(isl.Id(f"copy:{copy_name}"))
        site = site.graft_before(_root(copy_tree))
        promos.append(promo)
        ctx.note(self.name, f"kernel {kernel}: {name} promoted to shared memory "
                            f"{list(box.sizes)} ({nbytes} bytes; {why})")
        return site.get_schedule()

    def _sync_tree(self, prefix_set, name, ictx):
        m = isl.Map.from_domain_and_range(prefix_set, isl.Set.read_from_str(ictx, f"{{ {name}[] }}"))
        return isl.ScheduleNode.from_extension(isl.UnionMap.from_map(m))


def _original_site(node):
    """The site after grafts: grafting wraps it as ``extension -> sequence [.., filter ->
    site]``; follow that down to the original node."""
    while node.get_type() == isl.schedule_node_type.extension:
        seq = node.child(0)
        node = seq.child(seq.n_children() - 1).child(0)
    return node


def _fusable_prologue_producers(model, site_stmts) -> dict:
    """Arrays produced by a prologue stage (see classify.fusion_groups) that only the
    statements of this site read and that are not kernel outputs: their promotion copy
    can evaluate the producer instead of loading the array."""
    from polycomp.scheduler.common.classify import fusion_groups
    out = {}
    names = {s.name for s in site_stmts}
    live_out = {b.name for b in model.live_out}
    for g in fusion_groups(model.graph):
        for st in g.prologue:
            arr = st.output.buffer.name
            if st.is_reduction or arr in live_out:
                continue
            readers = {s.name for s in model.statements
                       if any(a.kind == "read" and a.buffer.name == arr for a in s.accesses)}
            if readers and readers <= names:
                out[arr] = st
    return out


def _drop_statements(schedule, stmts):
    """Execute none of ``stmts``: an empty filter below the filter that holds them."""
    names = {s.name for s in stmts}

    def holds(n):
        if n.get_type() != isl.schedule_node_type.filter:
            return False
        got = {x.get_tuple_name() for x in _sets(n.filter_get_filter())}
        return bool(got) and got <= names
    for path in _paths(schedule.get_root(), holds):
        node = node_at(schedule, path)
        empty = isl.UnionSet.empty(node.filter_get_filter().get_space())
        schedule = node.child(0).insert_filter(empty).get_schedule()
        break
    return schedule


def _root(node):
    while node.has_parent():
        node = node.parent()
    return node


def _linear_copy_filter(cdom: isl.Set, np_: int, box, launch, kernel) -> isl.UnionSet | None:
    """``{ copy[p, a] : flat(a - offset(p)) mod T = tid }``: the box is copied in
    row-major order by the block's ``T`` threads, thread ``tid = tx + bx*(ty + by*tz)``
    taking elements ``tid, tid + T, ...`` — consecutive threads touch consecutive
    elements of the innermost dimension, so global loads are coalesced and the shared
    stores of a warp hit 32 consecutive words (no bank conflict)."""
    if not launch.thread_params:
        return None
    sp = cdom.get_space()
    ls = isl.LocalSpace.from_space(sp)
    ictx = cdom.get_ctx()
    prefix_vars = isl.AffList.alloc(ictx, np_)
    for i in range(np_):
        prefix_vars = prefix_vars.add(isl.Aff.var_on_domain(ls, isl.dim_type.set, i))
    nd = len(box.sizes)
    flat = isl.Aff.zero_on_domain(ls)
    for d in range(nd):
        coef = 1
        for s2 in box.sizes[d + 1:]:
            coef *= s2
        off = box.offsets[d]
        proj_space = isl.Space.map_from_domain_and_range(
            sp, isl.Space.set_from_params(sp.params()).add_dims(isl.dim_type.set, np_))
        proj = isl.MultiAff.from_aff_list(proj_space.align_params(off.get_space()),
                                          _aligned_list(prefix_vars, off.get_space(), ictx))
        off_c = off.align_params(proj.get_space()).pullback_multi_aff(proj)
        term = _aligned(isl.Aff.var_on_domain(ls, isl.dim_type.set, np_ + d), off_c, "sub")
        flat = _aligned(flat, term.scale_val(isl.Val.int_from_si(ictx, coef)), "add")
    total = launch.block[0] * launch.block[1] * launch.block[2]
    tid = isl.Aff.zero_on_domain(isl.LocalSpace.from_space(flat.get_domain_space()))
    scale = 1
    for axis, name in enumerate(launch.thread_params):
        pid = param_id(ictx, name)
        dspace = flat.get_domain_space()
        if dspace.find_dim_by_name(isl.dim_type.param, name) < 0:
            dspace = dspace.align_params(isl.Set.read_from_str(ictx, f"[{name}] -> {{ : }}").get_space())
        t = isl.Aff.param_on_domain_space_id(dspace, pid)
        tid = _aligned(tid, t.scale_val(isl.Val.int_from_si(ictx, scale)), "add")
        scale *= launch.block[axis]
    cond = _aligned(flat.mod_val(isl.Val.int_from_si(ictx, total)), tid, "sub").zero_basic_set()
    return isl.UnionSet.from_set(isl.Set.from_basic_set(cond))


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


def _coord(s: isl.Set, d: int) -> isl.PwAff:
    """The PwAff ``x -> x_d`` on set ``s``."""
    sp = s.get_space()
    aff = isl.Aff.var_on_domain(isl.LocalSpace.from_space(sp), isl.dim_type.set, d)
    return isl.PwAff.from_aff(aff).intersect_domain(s)


def _sets(us):
    from polycomp.islutil import sets
    return sets(us)


def _union_range(prefix: isl.UnionMap, kernel: int | None = None) -> isl.Set:
    """The prefix points of a site; with ``kernel``, for all threads of the block (the
    thread ids are eliminated), so copies and barriers are executed by every thread."""
    rng = None
    for m in maps(prefix):
        r = m.range()
        rng = r if rng is None else rng.union(r)
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
    from polycomp.lowering.simplify import _linear
    iters = stmt.stage.iters if stmt.stage is not None else ()
    if not iters or not access.indices:
        return True
    inner = iters[-1]
    lin = _linear(access.indices[-1])
    if lin is None or lin[0].get(inner, 0) != 1:
        return False
    for idx in access.indices[:-1]:
        l2 = _linear(idx)
        if l2 is None or l2[0].get(inner, 0) != 0:
            return False
    return True
