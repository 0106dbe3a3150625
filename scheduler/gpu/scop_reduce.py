"""A C SCoP's reduction into one element as a one-block parallel reduction (CUDA).

trisolv's ``x[i] -= L[i][j] * x[j]`` (``j < i``), durbin's ``sum += r[k-i-1] * y[i]``,
gramschmidt's ``nrm += A[k][i] * A[k][i]``: below the host loop of their pivot or step,
one statement accumulates into a single element, which the baseline mapping runs on
one thread (its loop carries the accumulation).  PPCG's answer, and this module's: the
instances are dealt to the ``T`` threads of one block, each thread accumulates its share
in a register, the block combines the partial results (a shuffle butterfly within each
warp, the warps' results through shared memory and one more butterfly:
:func:`polycomp.hw.cuda.rowreduce.allreduce`), and thread 0 stores the element.

Assumes: ``node`` is a band of the program-order (or isl's) tree below the host loops
of :class:`~polycomp.scheduler.gpu.scop_groups.ScopBaselinePass` (their variables are
the prefix schedule), with no coincident leading member, over one statement ``S`` (a
leaf below it) whose value is ``W[e] + f`` or ``W[e] - f``, the load ``W[e]`` the
element ``S`` writes, such that

* every instance below ``node`` with equal prefix writes the same element ``e(h)``
  (one element per host-loop iteration: a function of the prefix, one affine piece);
* no other read of ``S`` (in ``f``) reads an element some instance of the same prefix
  writes (``f`` does not depend on the accumulation; checked with the access
  relations);
* ``W`` has a floating-point or integer type and the option ``block_reduce`` is on.

Guarantees: the kernel ``kernel:<k>`` holds, for each prefix point with instances of
``S``, every one of the block's threads ``tx<k>`` (a parameter ``0 <= tx < T``):
``init`` (``acc = tx == 0 ? W[e] : 0``), then the instances of ``S`` whose last band
member ``m`` has ``m mod T = tx`` in the band's order (``floor(m / T)`` replaces ``m``)
with ``acc`` in place of ``W[e]``, then ``combine`` (every thread ends with the sum of
all ``acc``), then ``store`` (thread 0: ``W[e] = acc``).  Every instance is executed
once, by one thread; the sum is ``W[e] ± f_1 ± f_2 ...`` with the terms grouped per
thread and the groups combined as a tree: the same terms, **reassociated** (not
bitwise equal to the C order for floating point: a relative difference of the order
of ``log2(T)`` roundings of the partial sums; integers are exact).  A
one-member band below a host loop whose whole subtree is such a group (a row solve:
:func:`block_loop`) runs inside the kernel, by the whole block, every iteration starting
with a barrier (the stores thread 0 made in the previous iteration, which other threads'
terms read, are then visible; the scratch of the previous combine is no longer read).
With ``block_reduce=False`` the statement stays on one thread in the C order.  The extension
statements run in every thread (not under the thread filter), so the barrier and
shuffles of ``combine`` are reached by the whole block.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from polycomp import ir
from polycomp.islutil import maps, sets
from polycomp.model import Statement
from polycomp.scheduler.common import marks
from polycomp.scheduler.gpu.map import KernelLaunch, param_upa, thread_param
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.promotion.footprint import Box
from polycomp.scheduler.promotion.record import (
    CopyStmt,
    Promotion,
    WarpReduction,
    promotion_state,
)
from polycomp.scheduler.promotion.sites import prefix_points
from polycomp.state import CompileState

#: threads of the block that reduces one element
THREADS = 256
WARP = 32


@dataclass(frozen=True)
class BlockReduction:
    """Kernel ``kernel``'s statement ``statement`` accumulates into the register
    ``acc`` (``op``: ``+`` or ``-`` of its value ``W[e] op f``) instead of ``W[e]``."""
    kernel: int
    statement: str
    op: str
    acc: ir.Buffer


def _accumulation(s: Statement) -> tuple[str, ir.Expr, ir.Binary] | None:
    """``(op, f, sum)`` when ``s``'s value is ``W[e] op f`` (``op`` in ``+ -``; also
    ``f + W[e]``), possibly converted to ``W``'s type (C's ``int += long``), with
    ``W[e]`` the element ``s`` writes; ``sum`` is the ``Binary`` node."""
    v = s.value
    if isinstance(v, ir.Cast) and v.dtype == s.write.dtype:
        v = v.value
    if not isinstance(v, ir.Binary) or v.op not in ("+", "-"):
        return None
    def is_acc(e):
        return isinstance(e, ir.Load) and e.buffer.name == s.write.name and \
            len(e.indices) == len(s.write_indices) and \
            all(ir.structural_equal(a, b) for a, b in zip(e.indices, s.write_indices))
    if is_acc(v.a):
        return v.op, v.b, v
    if v.op == "+" and is_acc(v.b):
        return "+", v.a, v
    return None


def block_reduction_candidate(node: isl.ScheduleNode, model) -> Statement | None:
    """The statement ``S`` when the band at ``node`` is one this module maps (see the
    module doc), else None."""
    if node.get_type() != isl.schedule_node_type.band or \
            node.child(0).get_type() != isl.schedule_node_type.leaf:
        return None
    names = {x.get_tuple_name() for x in sets(node.get_domain())}
    if len(names) != 1:
        return None
    s = next(x for x in model.statements if x.name in names)
    if _accumulation(s) is None or len(s.writes) != 1:
        return None
    if not (s.write.dtype.startswith("float") or s.write.dtype.startswith("int")):
        return None
    dom = node.get_domain()
    prefix = node.get_prefix_schedule_union_map().intersect_domain(dom)
    same = prefix.apply_range(prefix.reverse()) if not prefix.is_empty() else \
        isl.UnionMap.from_domain_and_range(dom, dom)
    w = isl.UnionMap.from_map(s.writes[0].relation).intersect_domain(dom)
    if not same.is_subset(w.apply_range(w.reverse())):
        return None                      # not one element per prefix point
    acc_reads = 0
    for a in s.reads:
        if a.buffer.name != s.write.name:
            continue
        r = isl.UnionMap.from_map(a.relation).intersect_domain(dom)
        if r.is_equal(w) and acc_reads == 0:
            acc_reads += 1
            continue
        if not r.apply_range(w.reverse()).intersect(same).is_empty():
            return None                  # f reads the accumulated element
    if acc_reads != 1:
        return None
    return s


def _one_per_prefix(node: isl.ScheduleNode) -> bool:
    """The leaf at ``node`` runs at most one instance of each of its statements per
    point of its prefix schedule (a host loop's iteration)."""
    if node.get_type() != isl.schedule_node_type.leaf:
        return False
    prefix = node.get_prefix_schedule_union_map().intersect_domain(node.get_domain())
    if prefix.is_empty():
        return all(x.dim(isl.dim_type.set) == 0 for x in sets(node.get_domain()))
    return all(isl.UnionMap.from_map(m).is_injective() for m in maps(prefix))


def reduction_group(node: isl.ScheduleNode, model) -> tuple[int, Statement] | None:
    """For a sequence at ``node`` (grouped by :func:`group_reductions`): the child
    index of its one :func:`block_reduction_candidate` and its statement, when every
    other child is a leaf of one instance per prefix point; else None."""
    if node.get_type() != isl.schedule_node_type.sequence:
        return None
    found = None
    for c in range(node.n_children()):
        sub = node.child(c).child(0)
        s = block_reduction_candidate(sub, model)
        if s is not None and found is None:
            found = (c, s)
        elif not _one_per_prefix(sub):
            return None
    return found


def _runs(seq: isl.ScheduleNode, model) -> list[tuple[int, int]]:
    """The runs ``(a, b)`` of children of the sequence at ``seq`` that
    :func:`group_reductions` groups: a reduction candidate with the one-instance leaves
    right before and after it (at least one)."""
    n = seq.n_children()
    red = [block_reduction_candidate(seq.child(c).child(0), model) is not None
           for c in range(n)]
    one = [not red[c] and _one_per_prefix(seq.child(c).child(0)) for c in range(n)]
    runs: list[tuple[int, int]] = []
    for c in range(n):
        if not red[c]:
            continue
        a, b = c, c
        floor = runs[-1][1] + 1 if runs else 0
        while a - 1 >= floor and one[a - 1]:
            a -= 1
        while b + 1 < n and one[b + 1]:
            b += 1
        if b > a:
            runs.append((a, b))
    return runs


def grouped_children(seq: isl.ScheduleNode, model) -> set[int]:
    """The children of the sequence at ``seq`` that :func:`group_reductions` puts in a
    block-reduction kernel."""
    return {c for a, b in _runs(seq, model) for c in range(a, b + 1)}


def group_reductions(seq: isl.ScheduleNode, model) -> isl.ScheduleNode:
    """The sequence at ``seq`` (below a host loop) with each reduction candidate and the
    one-instance leaves right before and after it grouped into one child (a filter over
    a nested sequence of the same children), which :func:`map_block_reduction` maps as
    one kernel.  Executing the nested sequence in order is executing the old children
    in order: the schedule is unchanged.  Returns the new sequence node."""
    from polycomp.scheduler.common.tree import union_set_list
    from polycomp.scheduler.gpu.scop_singles import copy_subtree
    n = seq.n_children()
    runs = _runs(seq, model)
    if not runs:
        return seq
    groups: list[list[int]] = []
    c = 0
    for a, b in runs:
        groups += [[x] for x in range(c, a)] + [list(range(a, b + 1))]
        c = b + 1
    groups += [[x] for x in range(c, n)]
    ictx = seq.get_ctx()

    def filt(x):
        return seq.child(x).filter_get_filter()

    def union(xs):
        u = filt(xs[0])
        for x in xs[1:]:
            u = u.union(filt(x))
        return u
    leaf = seq.cut()
    node = leaf.insert_sequence(union_set_list(ictx, [union(g) for g in groups]))
    for i, g in enumerate(groups):
        at = node.child(i).child(0)
        if len(g) == 1:
            got = copy_subtree(seq.child(g[0]).child(0), at)
        else:
            inner = at.insert_sequence(union_set_list(ictx, [filt(x) for x in g]))
            for j, x in enumerate(g):
                sub = copy_subtree(seq.child(x).child(0), inner.child(j).child(0))
                assert sub is not None, "a leaf or a band over a leaf"
                inner = sub.parent().parent()
            got = inner
        assert got is not None, "a subtree of bands, marks, filters and sequences"
        node = got.parent().parent()
    return node


def map_block_reduction(node: isl.ScheduleNode, s: Statement, k: int,
                        ctx: CompileState, position: int = -1,
                        loop_up: int = 0) -> isl.ScheduleNode:
    """Map the band at ``node`` (a :func:`block_reduction_candidate` of statement ``s``),
    or the sequence at ``node`` whose child ``position`` is that band and whose other
    children are one-instance leaves (:func:`reduction_group`), as kernel ``k`` (see
    the module doc); returns the kernel mark's node.  ``loop_up > 0``: the kernel mark
    goes that many levels above ``node``, on a sequential loop that the whole block
    runs (:func:`block_loop`); every iteration then starts the reduction with a
    barrier, after which the previous iteration's stores by thread 0 are visible."""
    ictx = node.get_ctx()
    tx = thread_param(0, k)
    op = _accumulation(s)[0]  # type: ignore[index]
    path = []
    for _ in range(loop_up):
        path.append(node.get_child_position())
        node = node.parent()
    node = node.insert_mark(marks.make(marks.KERNEL, k)).child(0)
    for c in reversed(path):
        node = node.child(c)
    pre = 0
    if position >= 0:     # thread 0 runs the one-instance statements
        for c in range(node.n_children()):
            if c == position:
                continue
            leaf = node.child(c).child(0)
            zero = param_upa(leaf.get_domain(), tx).zero_union_set()
            node = leaf.insert_filter(zero).parent().parent()
        pre = position
        node = node.child(position).child(0)
    dom = node.get_domain()
    prefix = node.get_prefix_schedule_union_map().intersect_domain(dom)
    # the extension statements' domain: the prefix points with instances of S
    points = prefix_points(prefix).coalesce() if not prefix.is_empty() else None
    # deal the last member to the threads
    mupa = node.band_get_partial_schedule()
    last = node.band_n_member() - 1
    m = mupa.get_union_pw_aff(last)
    t = isl.Val.int_from_si(ictx, THREADS)
    lane = m.mod_val(t).sub(param_upa(dom, tx)).zero_union_set()
    perm = node.band_get_permutable()
    new = mupa.set_union_pw_aff(last, m.scale_down_val(t).floor())
    band = node.insert_filter(lane).child(0).delete().insert_partial_schedule(new)
    band = band.band_set_permutable(perm)
    # the register, the block's scratch, the element's place
    n = len(promotion_state(ctx).promotions)
    acc = ir.Buffer(f"{s.write.name}_acc{n}", s.write.dtype, (ir.IntImm(1),), "local")
    scratch = ir.Buffer(f"{s.write.name}_warps{n}", s.write.dtype,
                        (ir.IntImm(THREADS // WARP),), "shared")
    promo = Promotion(s.write, acc, k, Box([], [1], [1]), reason="block reduction",
                      level="registers")
    promo.warp = WarpReduction("+", tx, width=WARP, warps=THREADS // WARP, scratch=scratch)
    wmap = isl.UnionMap.from_map(s.writes[0].relation).intersect_domain(dom)
    if points is None:      # no host loop: the element is a constant
        npre = 0
        elem = sets(wmap.range())[0]
        ext_dom = isl.Set.universe(isl.Space.set_alloc(ictx, 0, 0))
        elem_map = isl.Map.from_domain_and_range(ext_dom, elem)
    else:
        npre = points.dim(isl.dim_type.set)
        elem_map = isl.Map.from_union_map(prefix.reverse().apply_range(wmap)).coalesce()
        ext_dom = points
    names = {kind: f"blockred_{kind}_{s.write.name}_{n}"
             for kind in ("sync", "init", "combine", "store")}
    promo.copies[names["init"]] = CopyStmt("copy_in_lane0", npre)
    promo.copies[names["combine"]] = CopyStmt("warp_allreduce", npre)
    promo.copies[names["store"]] = CopyStmt("store_lane0", npre)
    ident = isl.Map.identity(isl.Space.map_from_set(ext_dom.get_space())).intersect_domain(
        ext_dom)
    with_elem = ident.range_product(elem_map).flatten_range()

    def ext(name: str, with_element: bool) -> isl.ScheduleNode:
        mp = (with_elem if with_element else ident).set_tuple_name(isl.dim_type.out, name)
        return isl.ScheduleNode.from_extension(isl.UnionMap.from_map(mp))
    band = band.parent()                              # the thread filter
    if pre or loop_up:   # thread 0's earlier stores: seen by every thread
        promo.copies[names["sync"]] = CopyStmt("sync", npre)
        band = band.graft_before(ext(names["sync"], False))
    band = band.graft_before(ext(names["init"], True))
    band = band.graft_after(ext(names["store"], True))
    band = band.graft_after(ext(names["combine"], False))
    promotion_state(ctx).promotions.append(promo)
    promotion_state(ctx).promotions.append(
        Promotion(s.write, scratch, k, None, reason="block reduction scratch",
                  level="shared"))
    gpu_kernels(ctx).launches[k] = KernelLaunch([], (THREADS, 1, 1), (), (tx,))
    block_reductions(ctx).items[k] = BlockReduction(k, s.name, op, acc)
    ctx.restrict_ast_context(isl.Set.read_from_str(
        ictx, f"[{tx}] -> {{ : 0 <= {tx} < {THREADS} }}"))
    while not marks.is_kind(band, marks.KERNEL):
        band = band.parent()
    return band


def block_loop(node: isl.ScheduleNode, model) -> tuple[isl.ScheduleNode, int, Statement,
                                                       int] | None:
    """For a one-member band at ``node`` (a sequential loop below a host loop, such as
    the row solve ``j < i`` of cholesky and ludcmp) whose whole subtree is a reduction
    group (:func:`group_reductions`, :func:`reduction_group`) or a
    :func:`block_reduction_candidate`: ``(group node, position, statement, levels
    from the group up to the band)``, the arguments of :func:`map_block_reduction`
    that make the loop run inside one block-reduction kernel (one launch per outer
    iteration instead of one per iteration of this loop).  None otherwise."""
    if node.get_type() != isl.schedule_node_type.band or node.band_n_member() != 1:
        return None
    below = node.child(0)
    if below.get_type() == isl.schedule_node_type.sequence:
        below = group_reductions(below, model)
        if below.n_children() != 1:
            return None
        inner = below.child(0).child(0)
        group = reduction_group(inner, model)
        if group is None:
            return None
        return inner, group[0], group[1], 3
    s = block_reduction_candidate(below, model)
    return None if s is None else (below, -1, s, 1)


@dataclass(eq=False)
class BlockReductions:
    """The block reductions of a compile, by kernel number."""
    items: dict[int, BlockReduction] = field(default_factory=dict)


def block_reductions(state: CompileState) -> BlockReductions:
    return state.slot(BlockReductions)
