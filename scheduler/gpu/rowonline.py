"""The online max-and-sum softmax of an uncached row group (Milakov and Gimelshein's
online normaliser): the row maximum ``m`` and the sum ``s = sum_j exp(A_j - m)`` in one
pass over the row instead of two.

Assumes: a row group (:mod:`.rowreduce`) after its row-wise temporaries were inlined,
holding a maximum ``R1[rows] = max_j A(rows, j)`` (``R1_update``) and a sum
``R2[rows] = sum_j exp(A(rows, j) - R1[rows])`` (``R2_update``, the ``exp`` inlined)
over the same columns, ``R2_init`` the only statement between the two updates (the
others there were inlined away).  Softmax over any rows, with any row-wise scale or mask
folded into ``A``, has this form.

The rewrite (:func:`fuse_online`): the row sequence gets one child for both updates — a
band over their columns with the sequence ``[R2_update, R1_update]`` below — after both
inits; ``R2_update`` becomes (lowering, :func:`polycomp.hw.cuda.rowreduce.online_value`)

    ``mn = max(m, A);  s = s * f(m, mn) + f(A, mn);``  then ``R1_update``: ``m = mn``

with ``f(a, mn) = (mn == -inf) ? 0 : exp(a - mn)`` (a row of ``-inf`` keeps ``s = 0``;
``+inf`` and NaN propagate as in numpy's two-pass form).  Per thread the pair ``(m, s)``
is the two-pass result over the thread's columns; the threads' pairs are combined by
``max`` and the rescaled sum (:func:`polycomp.hw.cuda.rowreduce.allreduce`), which is
associative and commutative up to rounding.  The model's dependences between the two
updates are replaced by those of the rewritten statements (``R1_update(c')`` before
``R2_update(c)`` for ``c' < c``: the running maximum; ``R2_update(c)`` before
``R1_update(c')`` for ``c' >= c``), so the legality check of debug mode checks the
fused order against what the code computes.

Guarantees: the row is read once for both reductions (twice for the whole softmax:
this pass and the output); the reductions' results are those of the two-pass form up to
rounding (the sum in a different order, scaled by ``exp`` of differences of maxima).
"""
from __future__ import annotations

import islpy as isl

from polycomp import ir
from polycomp.errors import PolycompInternalError
from polycomp.scheduler.common.tree import union_set_list

__all__ = ["find_online_pair", "fuse_online", "online_dependences"]


def _strip(e: ir.Expr) -> ir.Expr:
    while isinstance(e, ir.Cast):
        e = e.value
    return e


def _row_load(e: ir.Expr, buf_name: str, rows) -> bool:
    e = _strip(e)
    return isinstance(e, ir.Load) and e.buffer.name == buf_name and \
        len(e.indices) == len(rows) and all(a is b for a, b in zip(e.indices, rows))


def find_online_pair(stmts, inlined, order: list[str]):
    """``(R1_update, R2_update)`` of the module docstring among ``stmts`` (the
    kernel's statements; ``order``: the names of the row sequence's statements in
    order), or None."""
    from polycomp.scheduler.gpu.rowreduce import _inlined_store
    by_buf = {s.write.name: s for s in stmts if s.kind == "update"}
    for s2 in stmts:
        if s2.kind != "update" or not isinstance(s2.value, ir.Binary) or s2.value.op != "+":
            continue
        rank = len(s2.write_indices)
        rows = s2.iters[:rank]
        if len(s2.iters) != rank + 1:
            continue
        v = _inlined_store(s2, inlined).value
        if not (isinstance(v, ir.Binary) and v.op == "+" and _row_load(v.a, s2.write.name, rows)):
            continue
        ex = v.b
        if not (isinstance(ex, ir.Call) and ex.name == "exp" and len(ex.args) == 1):
            continue
        d = ex.args[0]
        if not (isinstance(d, ir.Binary) and d.op == "-"):
            continue
        m = _strip(d.b)
        if not isinstance(m, ir.Load) or m.buffer.name not in by_buf:
            continue
        s1 = by_buf[m.buffer.name]
        if not _row_load(m, s1.write.name, rows) or len(s1.iters) != rank + 1:
            continue
        v1 = _inlined_store(s1, inlined).value
        if not (isinstance(v1, ir.Binary) and v1.op == "max" and
                _row_load(v1.a, s1.write.name, s1.iters[:rank])):
            continue
        renamed = ir.substitute(v1.b, dict(zip(s1.iters, s2.iters)))
        if not ir.structural_equal(_strip(renamed), _strip(d.a)):
            continue
        dom1 = s1.domain.set_tuple_name(s2.name)
        if not dom1.is_equal(s2.domain):
            continue
        i1, i2 = order.index(s1.name), order.index(s2.name)
        between = order[i1 + 1:i2]
        init2 = f"{s2.name[:-len('_update')]}_init" if s2.name.endswith("_update") else None
        live = {s.name for s in stmts}
        if i1 > i2 or any(n != init2 and n in live for n in between):
            continue
        return s1, s2
    return None


def fuse_online(seq: isl.ScheduleNode, pair, dropped: set[str]) -> isl.ScheduleNode:
    """Rebuild the row sequence ``seq`` with one child for both updates of ``pair``
    (see the module docstring); ``dropped``: statements whose filters hold an empty
    filter (inlined), kept as they are.  Returns the new sequence node."""
    s1, s2 = pair
    ictx = seq.get_ctx()
    children = []
    for k in range(seq.n_children()):
        f = seq.child(k)
        names = {x.get_tuple_name() for x in _sets(f.filter_get_filter())}
        sub = f.child(0)
        band = sub.band_get_partial_schedule() if sub.get_type() == \
            isl.schedule_node_type.band else None
        children.append((f.filter_get_filter(), names, band))
    init2 = next((c for c in children if c[1] == {f"{s2.name[:-len('_update')]}_init"}), None)
    out = []
    for c in children:
        if c[1] == {s2.name} or c is init2:
            continue
        if c[1] == {s1.name}:
            if init2 is not None:
                out.append(init2)
            other = next(x for x in children if x[1] == {s2.name})
            if c[2] is None or other[2] is None:
                raise PolycompInternalError(
                    f"online sum: {s1.name} or {s2.name} has no column band")
            out.append((c[0].union(other[0]), {s1.name, s2.name}, c[2].union_add(other[2])))
            continue
        out.append(c)
    leaf = seq.cut()
    node = leaf.insert_sequence(union_set_list(ictx, [c[0] for c in out]))
    depth = node.get_tree_depth()
    for k, (filt, names, band) in enumerate(out):
        child = node.child(k).child(0)
        if names & dropped:
            child = child.insert_filter(isl.UnionSet.empty(filt.get_space()))
        elif names == {s1.name, s2.name} and band is not None:
            fs = [isl.UnionSet.from_set(isl.Set.universe(s.domain.get_space()))
                  for s in (s2, s1)]
            child = child.insert_sequence(union_set_list(ictx, fs))
            child = child.insert_partial_schedule(band)
        elif band is not None:
            child = child.insert_partial_schedule(band)
        node = child
        while node.get_tree_depth() > depth:
            node = node.parent()
    return node


def _sets(u):
    from polycomp.islutil import sets
    return sets(u)


def online_dependences(model, pair) -> None:
    """Replace the model's dependences between the two updates of ``pair`` by those of
    the rewritten statements (module docstring)."""
    s1, s2 = pair
    rank = len(s2.write_indices)
    sp1, sp2 = s1.domain.get_space(), s2.domain.get_space()
    between = isl.UnionMap.from_map(isl.Map.from_domain_and_range(s1.domain, s2.domain)) \
        .union(isl.UnionMap.from_map(isl.Map.from_domain_and_range(s2.domain, s1.domain)))
    rows = " and ".join(f"a{d} = b{d}" for d in range(rank))
    av = ", ".join(f"a{d}" for d in range(rank + 1))
    bv = ", ".join(f"b{d}" for d in range(rank + 1))
    ictx = model.ctx
    flow = isl.Map.read_from_str(ictx, f"{{ {s1.name}[{av}] -> {s2.name}[{bv}] : {rows} "
                                       f"and a{rank} < b{rank} }}")
    anti = isl.Map.read_from_str(ictx, f"{{ {s2.name}[{bv}] -> {s1.name}[{av}] : {rows} "
                                       f"and a{rank} >= b{rank} }}")
    flow = flow.align_params(sp1).intersect_domain(s1.domain).intersect_range(s2.domain)
    anti = anti.align_params(sp2).intersect_domain(s2.domain).intersect_range(s1.domain)
    model.flow = model.flow.subtract(between).union(isl.UnionMap.from_map(flow)).coalesce()
    model.anti = model.anti.subtract(between).union(isl.UnionMap.from_map(anti)).coalesce()
    model.output = model.output.subtract(between).coalesce()
