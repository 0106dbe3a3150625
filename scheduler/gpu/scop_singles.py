"""Pass: recompute a C SCoP's one-instance scalar definitions where they are read (CUDA).

PolyBench's adi and deriche open with a run of scalar assignments outside every loop
(``DX = 1.0 / n; ... a = -mul1 / 2.0;``, ``k = (1.0f - expf(-alpha)) * ...; a1 = a5 =
k;``); correlation sets ``eps = 0.1``.  Each is one statement instance, which the
baseline mapping would run as a kernel of a single thread.  PPCG runs such statements
in the host code and passes the scalars to the kernels by value; polycomp's host
program launches kernels only, so the value is recomputed by every thread that reads
it instead (the expression is a handful of operations on parameters and read-only
values): the statement leaves the tree, and a load of its scalar in any kernel becomes
the statement's expression (``ctx.inlined``, lowered by
:func:`polycomp.hw.cuda.promoted.promoted_builders`).

Assumes: the program-order tree of a :class:`~polycomp.frontend.c_model.CScopModel`
(``domain`` -> optional ``sequence``/``set`` of filters -> per top-level nest a subtree of
``band``, ``mark``, ``filter``, ``sequence``/``set`` and ``leaf`` nodes).

A statement ``S`` (top-level nest ``c``) is recomputed when

* its domain is zero-dimensional and holds for every parameter value of the context
  (``{ S[] }``: it always executes, exactly once);
* it writes a zero-dimensional local scalar (a temporary of the SCoP, not live out)
  that no other statement writes;
* every value it reads (loads of scalars or array elements) is written by no statement
  of the SCoP, or is itself a recomputed scalar (chains such as ``a1 = a5 = k`` and
  ``mul1 = B1 * DT / (DX * DX)``): so the expression has the same value wherever it is
  evaluated;
* every statement that reads the scalar lies in a top-level nest after ``c``: it
  executes after ``S`` and reads exactly ``S``'s value (the only write).

Then (option ``block_reduce``) a top-level reduction into one element with the
one-instance statements right before and after it is grouped into one nest
(:func:`~polycomp.scheduler.gpu.scop_reduce.group_reductions`: the same order), which
the baseline mapping makes one block-reduction kernel; and every other one-instance
top-level statement moves into the outer band of an adjacent nest
(:func:`merge_singles`: checked by isl, the band's point ``lexmin(range ∪ {0})``).

Guarantees: the new tree is the old one without the recomputed statements' nests
(their filters dropped from the root sequence, every other node copied unchanged), so
every dependence between the remaining statements is respected as before; each read of
a recomputed scalar evaluates ``(T) e`` (``T`` the scalar's type, ``e`` the expression
as C wrote it), which is the value the C program stored and read back: the results are
bitwise those of the program order (with ``fp_exact`` too), given the same math
functions (the device's ``expf`` is not glibc's).  A statement that does not meet every
condition is left in the tree (a single-thread kernel, as before), noted.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polycomp import ir
from polycomp.islutil import sets
from polycomp.model import Statement
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import band_coincidence, is_legal, union_set_list
from polycomp.state import CompileState


@dataclass(frozen=True)
class Recomputed:
    """What a load of a recomputed scalar becomes: ``body`` (no iterators; the shape
    :class:`~polycomp.hw.cuda.promoted.promoted_builders` reads of an inlined stage)."""
    body: ir.Expr
    iters: tuple = ()


def _loads(e: ir.Expr) -> list[ir.Load]:
    out: list[ir.Load] = []
    ir.walk(e, lambda n: out.append(n) if isinstance(n, ir.Load) else None)
    return out


def _top_index(schedule: isl.Schedule) -> dict[str, int]:
    """The top-level nest of every statement (its child index of the root sequence)."""
    top = schedule.get_root().child(0)
    if top.get_type() not in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
        return {x.get_tuple_name(): 0 for x in sets(schedule.get_domain())}
    out = {}
    for k in range(top.n_children()):
        for x in sets(top.child(k).filter_get_filter()):
            out[x.get_tuple_name()] = k
    return out


def recomputable(schedule: isl.Schedule, model) -> list[Statement]:
    """The statements of ``model`` this pass recomputes (see the module doc), in
    program order."""
    top = schedule.get_root().child(0)
    if top.get_type() not in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
        return []
    where = _top_index(schedule)
    temps = {b.name for b in model.temporaries if not b.shape}
    writers: dict[str, list[Statement]] = {}
    for s in model.statements:
        writers.setdefault(s.write.name, []).append(s)
    ctx_set = model.context
    chosen: list[Statement] = []
    names: set[str] = set()
    for s in model.statements:
        buf = s.write.name
        if s.iters or buf not in temps or len(writers[buf]) != 1 or s.name not in where:
            continue
        always = isl.Set.universe(s.domain.get_space()).intersect_params(ctx_set)
        if not always.is_subset(s.domain):
            continue
        if top.child(where[s.name]).child(0).get_type() != isl.schedule_node_type.leaf:
            continue
        if any(ld.buffer.name in writers and ld.buffer.name not in names
               for ld in _loads(s.value)):
            continue
        readers = [r for r in model.statements if r is not s
                   and any(a.kind == "read" and a.buffer.name == buf for a in r.accesses)]
        if any(where.get(r.name, -1) <= where[s.name] for r in readers):
            continue
        chosen.append(s)
        names.add(buf)
    return chosen


def copy_subtree(src: isl.ScheduleNode, dst: isl.ScheduleNode) -> isl.ScheduleNode | None:
    """Insert a copy of the subtree at ``src`` at the leaf ``dst`` (bands with their
    permutability, coincidence and AST loop types, marks, filters, sequences and sets);
    returns the node at the copy's top, or None for another node type."""
    t = src.get_type()
    if t == isl.schedule_node_type.leaf:
        return dst
    if t == isl.schedule_node_type.band:
        node = dst.insert_partial_schedule(src.band_get_partial_schedule())
        node = node.band_set_permutable(src.band_get_permutable())
        for m in range(src.band_n_member()):
            node = node.band_member_set_coincident(m, src.band_member_get_coincident(m))
            node = node.band_member_set_ast_loop_type(m, src.band_member_get_ast_loop_type(m))
    elif t == isl.schedule_node_type.mark:
        node = dst.insert_mark(src.mark_get_id())
    elif t == isl.schedule_node_type.filter:
        node = dst.insert_filter(src.filter_get_filter())
    elif t in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
        filters = union_set_list(src.get_ctx(), [src.child(k).filter_get_filter()
                                                 for k in range(src.n_children())])
        node = dst.insert_sequence(filters) if t == isl.schedule_node_type.sequence \
            else dst.insert_set(filters)
        for k in range(src.n_children()):
            got = copy_subtree(src.child(k).child(0), node.child(k).child(0))
            if got is None:
                return None
            node = got.parent().parent()
        return node
    else:
        return None
    got = copy_subtree(src.child(0), node.child(0))
    return None if got is None else got.parent()


def without_nests(schedule: isl.Schedule, drop: set[int]) -> isl.Schedule | None:
    """``schedule`` without the top-level nests ``drop`` (child indices of the root
    sequence or set); None when a subtree holds a node :func:`copy_subtree` does not
    copy."""
    top = schedule.get_root().child(0)
    keep = [k for k in range(top.n_children()) if k not in drop]
    filters = [top.child(k).filter_get_filter() for k in keep]
    domain = isl.UnionSet.empty(schedule.get_domain().get_space())
    for f in filters:
        domain = domain.union(f)
    domain = schedule.get_domain().intersect(domain)
    leaf = isl.Schedule.from_domain(domain).get_root().child(0)
    if len(keep) == 1:
        got = copy_subtree(top.child(keep[0]).child(0), leaf)
        return None if got is None else got.get_schedule()
    seq = leaf.insert_sequence(union_set_list(schedule.get_ctx(), filters)) \
        if top.get_type() == isl.schedule_node_type.sequence else \
        leaf.insert_set(union_set_list(schedule.get_ctx(), filters))
    for i, k in enumerate(keep):
        got = copy_subtree(top.child(k).child(0), seq.child(i).child(0))
        if got is None:
            return None
        seq = got.parent().parent()
    return seq.get_schedule()


def _single(seq: isl.ScheduleNode, k: int) -> bool:
    """Is child ``k`` of the sequence at ``seq`` a leaf of one statement with at most
    one instance per point of its prefix schedule (a zero-dimensional statement at the
    top level, one instance per host-loop iteration below one)?"""
    f = seq.child(k)
    if f.child(0).get_type() != isl.schedule_node_type.leaf:
        return False
    got = sets(f.filter_get_filter())
    if len(got) != 1:
        return False
    prefix = f.child(0).get_prefix_schedule_union_map().intersect_domain(
        f.child(0).get_domain())
    if prefix.is_empty():
        return got[0].dim(isl.dim_type.set) == 0
    return prefix.is_injective()


def _point_schedule(band: isl.ScheduleNode, single: isl.UnionSet) -> isl.MultiUnionPwAff:
    """The band's partial schedule extended to the statement ``single`` (one instance
    per prefix point): it takes the point ``p = lexmin(range ∪ {0})`` of the band's
    members (a point inside the band's range when 0 is)."""
    um = band.band_get_partial_schedule_union_map().intersect_domain(band.get_domain())
    rng = sets(um.range())
    assert len(rng) == 1, "a band's members span one space"
    zero = isl.Set.universe(rng[0].get_space())
    for d in range(zero.dim(isl.dim_type.set)):
        zero = zero.fix_val(isl.dim_type.set, d, isl.Val.zero(zero.get_ctx()))
    point = rng[0].union(zero).lexmin()
    one = sets(single)[0]
    pma = isl.Map.from_domain_and_range(one, point).as_pw_multi_aff()
    mupa = band.band_get_partial_schedule()
    for m in range(band.band_n_member()):
        upa = isl.UnionPwAff.from_pw_aff(pma.get_pw_aff(m))
        mupa = mupa.set_union_pw_aff(m, mupa.get_union_pw_aff(m).union_add(upa))
    return mupa


def merged_single(seq: isl.ScheduleNode, k: int, j: int) -> isl.ScheduleNode | None:
    """The sequence at ``seq`` with its one-instance child ``k`` moved into the band at
    the root of the adjacent child ``j``: the band's schedule extended to it
    (:func:`_point_schedule`), the statement first or last (program order) in the
    sequence below the band (one made when there is none).  Returns the new sequence
    node (or the band, when it is the only child left), None when child ``j`` does not
    start with a band or holds a node :func:`copy_subtree` does not copy."""
    band = seq.child(j).child(0)
    if band.get_type() != isl.schedule_node_type.band:
        return None
    fk, fj = seq.child(k).filter_get_filter(), seq.child(j).filter_get_filter()
    keep = [x for x in range(seq.n_children()) if x != k]
    filters = [fj.union(fk) if x == j else seq.child(x).filter_get_filter() for x in keep]
    ictx = seq.get_ctx()
    leaf = seq.cut()
    node = leaf.insert_sequence(union_set_list(ictx, filters)) if len(keep) > 1 else leaf
    for i, x in enumerate(keep):
        at = node.child(i).child(0) if len(keep) > 1 else node
        if x != j:
            got = copy_subtree(seq.child(x).child(0), at)
        else:
            got = _merged_band(band, fk, k > j, at)
        if got is None:
            return None
        node = got.parent().parent() if len(keep) > 1 else got
    return node


def _merged_band(band: isl.ScheduleNode, fk: isl.UnionSet, after: bool,
                 at: isl.ScheduleNode) -> isl.ScheduleNode | None:
    """A copy of ``band`` at the leaf ``at`` with the statement ``fk`` added at a point
    of the band, first (``after`` false) or last in the sequence below it."""
    ictx = band.get_ctx()
    b = at.insert_partial_schedule(_point_schedule(band, fk))
    b = b.band_set_permutable(band.band_get_permutable())
    below = band.child(0)
    if below.get_type() == isl.schedule_node_type.sequence:   # one more child
        olds = [below.child(c) for c in range(below.n_children())]
        fs = [o.filter_get_filter() for o in olds]
        fs = fs + [fk] if after else [fk] + fs
        seq = b.child(0).insert_sequence(union_set_list(ictx, fs))
        for c, o in enumerate(olds):
            pos = c if after else c + 1
            got = copy_subtree(o.child(0), seq.child(pos).child(0))
            if got is None:
                return None
            seq = got.parent().parent()
        return seq.parent()
    fj = isl.UnionSet.empty(fk.get_space())
    for x in sets(band.get_domain()):
        fj = fj.union(isl.UnionSet.from_set(isl.Set.universe(x.get_space())))
    seq = b.child(0).insert_sequence(union_set_list(ictx, [fj, fk] if after else [fk, fj]))
    inner = copy_subtree(below, seq.child(0 if after else 1).child(0))
    return None if inner is None else inner.parent().parent().parent()


def merge_singles(seq: isl.ScheduleNode, model, parallel_only: bool = False,
                  skip: set[int] | None = None) -> tuple[isl.ScheduleNode, list[str]]:
    """Move one-instance children of the sequence at ``seq`` into an adjacent child's
    outer band (the previous child first), each move checked by isl: every dependence
    respected (:func:`~polycomp.scheduler.common.tree.is_legal`, on the whole tree) and
    the band's outer member coincident afterwards when it was before (a parallel nest
    stays parallel) or when ``parallel_only``.  Children in ``skip`` stay.  Returns the
    sequence node and the names of the statements moved."""
    moved: list[str] = []
    deps = model.dependences
    skip = set(skip or ())
    while seq.get_type() == isl.schedule_node_type.sequence:
        done = False
        for k in range(seq.n_children()):
            if k in skip or not _single(seq, k):
                continue
            for j in (k - 1, k + 1):
                if not 0 <= j < seq.n_children() or j in skip or _single(seq, j):
                    continue
                band = seq.child(j).child(0)
                if band.get_type() != isl.schedule_node_type.band:
                    continue
                before = band_coincidence(band, deps)[0]
                if parallel_only and not before:
                    continue
                new = merged_single(seq, k, j)
                if new is None or not is_legal(new.get_schedule(), deps):
                    continue
                nb = new.child(j if j < k else j - 1).child(0) \
                    if new.get_type() == isl.schedule_node_type.sequence else new
                if before and not band_coincidence(nb, deps)[0]:
                    continue
                moved.append(sets(seq.child(k).filter_get_filter())[0].get_tuple_name())
                skip = {x if x < k else x - 1 for x in skip}
                seq, done = new, True
                break
            if done:
                break
        if not done:
            break
    return seq, moved


class ScopSinglesPass(Pass):
    """See the module doc."""
    name = "scop-gpu-singles"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        model = ctx.model
        schedule = self._recompute(schedule, ctx)
        top = schedule.get_root().child(0)
        if top.get_type() != isl.schedule_node_type.sequence:
            return schedule
        if ctx.cuda_options.block_reduce:   # a reduction's neighbours stay with it
            from polycomp.scheduler.gpu.scop_reduce import group_reductions
            top = group_reductions(top, model)
        node, moved = merge_singles(top, model)
        schedule = node.get_schedule()
        if moved:
            ctx.note(self.name, f"one-instance statement(s) {', '.join(moved)} moved into "
                                f"the outer parallel band of an adjacent nest")
        return schedule

    def _recompute(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        model = ctx.model
        chosen = recomputable(schedule, model)
        if not chosen:
            return schedule
        where = _top_index(schedule)
        drop = {where[s.name] for s in chosen}
        if drop == set(where.values()):
            return schedule          # nothing would be left to launch
        new = without_nests(schedule, drop)
        if new is None:
            ctx.note(self.name, "one-instance scalar definitions kept: the tree holds a "
                                "node the rewrite does not copy")
            return schedule
        for s in chosen:
            value = s.value if s.value.dtype == s.write.dtype else ir.Cast(s.value, s.write.dtype)
            ctx.inlined[s.write.name] = Recomputed(value)
        ctx.note(self.name, f"{len(chosen)} one-instance scalar definition(s) recomputed "
                            f"where they are read (no single-thread kernel): "
                            f"{', '.join(s.write.name for s in chosen)}")
        return new
