"""Pass: C loop nests that are half-precision GEMMs, rewritten for the Tensor Core tiling.

Assumes: the tree of :class:`~polycomp.scheduler.gpu.scop_groups.ScopGroupingPass` on a
:class:`~polycomp.frontend.c_model.CScopModel` (each top-level nest a child of the root's
sequence, or the root's only child; a tiled nest under a ``backbone:<n>`` mark whose
payload kind is ``contraction``), made of band, sequence, set, filter, mark and leaf nodes.

A nest *matches* (:func:`match_scop_gemm`) when its statements are

* one *update* ``U`` with three loop iterators ``x`` whose domain is the box
  ``{ U[x] : 0 <= x_d < e_d }`` (isl: the domain equals the box of its bounds, so a
  strided or triangular loop does not match), writing ``C[m][n]`` (two distinct
  iterators, ``n`` the contiguous one) with the value ``C[m][n] + s * a * b`` (any
  order of the factors, possibly under a cast to ``C``'s type) where ``a``, ``b`` are
  loads of ``float16`` (or both ``bfloat16``) arrays, maybe converted to ``float``,
  whose access relations (isl) are the projections ``U[x] -> A[m, k]`` /
  ``A[k, m]`` and ``U[x] -> B[k, n]`` / ``B[n, k]`` (``k`` the third iterator; the
  transposed forms are the ``B[j][k]`` of ``A * B^T``), and ``s`` a product of scalars
  (zero-dimensional arrays, constants);
* and optionally, before it, one *scale* statement ``S0`` over the box of ``(m, n)``
  writing ``C[m][n]`` from ``C[m][n]`` (its own element), scalars and constants only
  (PolyBench's ``C[i][j] *= beta``, or ``C[i][j] = 0``), running (isl) before every
  update of its element;
* and optionally, after it, up to :data:`MAX_EPILOGUE` elementwise statements over the
  same ``(m, n)`` box, each writing its own element of an array nothing before it in
  the nest wrote and reading arrays at that element only, none running (isl) before an
  update of its element: isl's scheduler fuses a following ``D = f(C)`` nest in.

``C`` is ``float`` or ``_Float16``; anything else (integer types, ``double``, other
reads) does not match and the nest keeps the CUDA-core tiled path with a note naming
the reason.

Rewrite of a matching nest (the model's statements ``S0``, ``U`` are replaced; the
other statements and their accesses are unchanged; the dependences are recomputed
under the rewritten tree, which becomes the new model's ``initial_schedule``):

* ``U_tc_init[m, n]: T[m, n] = 0`` (``T`` a float32 accumulator that only the Tensor
  Core fragments hold: no memory is allocated for it),
* ``U_tc[m, n, k]: T[m, n] = T[m, n] + float(a) * float(b)``, its domain ``U``'s
  with the iterators permuted to ``(m, n, k)``, its access relations ``U``'s composed
  with that permutation,
* ``U_tc_out[m, n]: C[m][n] = c0 + s * T[m, n]`` with ``c0`` the scale statement's
  value (``C[m][n]`` without one), rounded to ``C``'s type once, then the elementwise
  statements after the update, unchanged;

and the nest's subtree becomes the tree the Tensor Core tiling reads for a DSL
contraction: ``backbone:<n>`` -> band ``[m, n]`` -> sequence (init, update -> band
``[k]``, the epilogue statements).  ``tensor_core_views(state)`` holds the
:class:`~polycomp.scheduler.tensorcore.tile.GemmView` of each rewritten nest, keyed by
its backbone mark's name.

Guarantees: ``C``'s final value is ``c0 + s * sum_k a*b`` where the C code computes
``c0 + sum_k s*a*b`` in the loop order: equal in exact arithmetic, not bitwise (the
Tensor Cores add the products in fp32 in their own order; with ``C`` in ``_Float16`` the
result is rounded once instead of at every step).  That is the precision contract
noted for each such nest; ``fp_exact`` switches ``tensor_cores`` off, so the nest
keeps the CUDA-core path bitwise equal to ``gcc -O0``.  The rest of the tree is copied
unchanged.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import islpy as isl

from polycomp import ir
from polycomp.affine import aff_to_ir
from polycomp.errors import PolycompError
from polycomp.islutil import pieces, sets
from polycomp.model import Access, Statement, compute_accesses_and_dependences
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.pattern_schedule import backbones
from polycomp.state import CompileState

TC_DTYPES = ("float16", "bfloat16")
C_DTYPES = ("float32", "float16")
#: Elementwise statements after the update that a matched nest may hold (isl's
#: scheduler fuses a following ``D[i][j] = f(C[i][j])`` nest into the GEMM nest).
MAX_EPILOGUE = 4


@dataclass(frozen=True)
class ScopAxis:
    """An axis of a rewritten nest: ``lo <= var < lo + extent`` (``lo`` always 0)."""
    var: ir.Var
    extent: ir.Expr
    lo: ir.Expr = ir.IntImm(0)


@dataclass(frozen=True)
class ScopOutput:
    buffer: ir.Buffer


@dataclass(eq=False)
class ScopContraction:
    """The DSL-stage view of a rewritten nest that the Tensor Core passes read:
    ``iters`` ``(m, n)``, one reduce axis ``k``, the accumulator ``T`` as output."""
    name: str
    iters: tuple
    reduce_axes: tuple
    output: ScopOutput


@dataclass(eq=False)
class ScopGroup:
    """A rewritten nest as a fusion group (``kind``, ``backbone``)."""
    backbone: ScopContraction
    kind: str = "contraction"


@dataclass(eq=False)
class ScopGemm:
    """A matched nest (see the module docstring)."""
    update: Statement
    scale: Statement | None
    c: ir.Buffer
    m: int                   # positions of m, n, k among the update's iterators
    n: int
    k: int
    a: ir.Load
    b: ir.Load
    factor: list             # the scalar factors s
    in_dtype: str
    extents: tuple           # ir extents of m, n, k
    epilogue: list = field(default_factory=list)   # statements after the update


@dataclass(eq=False)
class TensorCoreViews:
    """The GEMM views of the C nests rewritten for Tensor Cores, by backbone mark name
    (a slot of the compile state)."""
    views: dict[str, Any] = field(default_factory=dict)


def tensor_core_views(state: CompileState) -> TensorCoreViews:
    return state.slot(TensorCoreViews)


# --------------------------------------------------------------------------- matching

def _strip_cast(e: ir.Expr) -> ir.Expr:
    while isinstance(e, ir.Cast):
        e = e.value
    return e


def _product(e: ir.Expr) -> list:
    e = e.value if isinstance(e, ir.Cast) and e.dtype in ("float32", "float16") else e
    if isinstance(e, ir.Binary) and e.op == "*":
        return _product(e.a) + _product(e.b)
    return [e]


def _is_scalar(e: ir.Expr) -> bool:
    e = _strip_cast(e)
    if isinstance(e, (ir.FloatImm, ir.IntImm)):
        return True
    return isinstance(e, ir.Load) and not e.indices


def _same_point(load: ir.Load, idx: tuple) -> bool:
    return len(load.indices) == len(idx) and all(a is b for a, b in zip(load.indices, idx))


def _box(dom: isl.Set) -> tuple | str:
    """The extents (PwAffs of the parameters) of a domain that is the box
    ``0 <= x_d < e_d``: isl checks that the domain equals the box of its own bounds,
    so a strided, triangular or shifted loop does not match."""
    sp = dom.get_space()
    nd = dom.dim(isl.dim_type.set)
    ls = isl.LocalSpace.from_space(sp)
    zero = isl.PwAff.from_aff(isl.Aff.zero_on_domain(ls))
    box = isl.Set.universe(sp)
    ext = []
    for d in range(nd):
        lo, hi = dom.dim_min(d), dom.dim_max(d)
        if len(pieces(lo)) != 1 or len(pieces(hi)) != 1:
            return "the loop domain is not a rectangle 0 <= x < extent (a bound is a min or max)"
        ext.append(hi.add_constant_val(isl.Val.one(dom.get_ctx())))
        var = isl.PwAff.from_aff(isl.Aff.var_on_domain(ls, isl.dim_type.set, d))
        hi_on = hi.add_dims(isl.dim_type.in_, nd).set_tuple_id(
            isl.dim_type.in_, sp.get_tuple_id(isl.dim_type.set))
        box = box.intersect(var.ge_set(zero)).intersect(var.le_set(hi_on))
    if not box.intersect_params(dom.params()).is_equal(dom):
        return "the loop domain is not a rectangle 0 <= x < extent with unit strides"
    return tuple(ext)


def _projection(stmt: Statement, dims: tuple, array: str) -> isl.Map:
    """``{ S[x] -> array[x_dims] }`` restricted to the statement's domain."""
    n = len(stmt.iters)
    xs = ", ".join(f"x{d}" for d in range(n))
    ys = ", ".join(f"x{d}" for d in dims)
    m = isl.Map.read_from_str(stmt.domain.get_ctx(), f"{{ {stmt.name}[{xs}] -> {array}[{ys}] }}")
    m = m.align_params(stmt.domain.get_space())
    return m.intersect_domain(stmt.domain)


def _access(stmt: Statement, buffer_name: str, kind: str):
    return [a for a in stmt.accesses if a.buffer.name == buffer_name and a.kind == kind]


def match_scop_gemm(stmts: list, model) -> ScopGemm | str:
    """The GEMM form of a nest's statements (program order), or why it has none."""
    upd = [s for s in stmts if len(s.iters) == 3]
    if len(upd) != 1 or len(stmts) - stmts.index(upd[0]) > 1 + MAX_EPILOGUE \
            or stmts.index(upd[0]) > 1:
        return (f"not one update statement in a 3-deep loop nest (at most one scaling "
                f"before it, {MAX_EPILOGUE} elementwise statements after it)")
    u = upd[0]
    scale = stmts[0] if stmts[0] is not u else None
    after = stmts[stmts.index(u) + 1:]
    c = u.write
    if c.dtype not in C_DTYPES:
        return f"{c.name} is {c.dtype} (Tensor Cores accumulate float or _Float16 outputs)"
    widx = tuple(u.write_indices)
    if len(widx) != 2 or not all(isinstance(i, ir.Var) and i in u.iters for i in widx) \
            or widx[0] is widx[1]:
        return f"{c.name} is not written at two loop iterators"
    m, n = u.iters.index(widx[0]), u.iters.index(widx[1])
    k = 3 - m - n
    rest = _accumulated(u.value, c, widx)
    if isinstance(rest, str):
        return rest
    ops = _operands(rest, u, (m, n, k))
    if isinstance(ops, str):
        return ops
    a, b, scalars = ops
    if a.buffer is c or b.buffer is c:
        return f"an operand is {c.name} itself"
    ext = _box(u.domain)
    if isinstance(ext, str):
        return ext
    bad = _access_problem(u, a, b, c, (m, n))
    if bad:
        return bad
    if scale is not None:
        bad = _scale_problem(scale, u, c, (m, n)) or _scale_after_update(scale, u, model)
        if bad:
            return bad
    written = {c.name, a.buffer.name, b.buffer.name}
    for e in after:
        bad = _epilogue_problem(e, u, written, (m, n), model)
        if bad:
            return bad
        written.add(e.write.name)
    params = {p.name: p for p in model.params}
    try:
        ir_ext = tuple(_single_aff_ir(e, params) for e in ext)
    except PolycompError as e:     # a bound whose parameters have no IR value
        return f"a loop bound has no IR form ({e})"
    return ScopGemm(u, scale, c, m, n, k, a, b, scalars, a.dtype,
                    (ir_ext[m], ir_ext[n], ir_ext[k]), after)


def _own_load(e: ir.Expr, c: ir.Buffer, widx: tuple) -> bool:
    e = _strip_cast(e)
    return isinstance(e, ir.Load) and e.buffer is c and _same_point(e, widx)


def _accumulated(value: ir.Expr, c: ir.Buffer, widx: tuple) -> ir.Expr | str:
    """``rest`` of an update ``C[w] = C[w] + rest`` (either order, maybe under a cast)."""
    if isinstance(value, ir.Cast):
        value = value.value
    if not (isinstance(value, ir.Binary) and value.op == "+"):
        return "the update is not an accumulation C += ..."
    if _own_load(value.a, c, widx):
        return value.b
    if _own_load(value.b, c, widx):
        return value.a
    return "the update does not add to its own element"


def _operands(rest: ir.Expr, u: Statement, mnk: tuple) -> tuple | str:
    """``(A load, B load, scalar factors)`` of ``rest = s * a * b`` (module docstring)."""
    factors = _product(rest)
    ops = [f for f in factors if not _is_scalar(f)]
    scalars = [f for f in factors if _is_scalar(f)]
    if len(ops) != 2:
        return "the accumulated value is not a product of two array elements (and scalars)"
    loads: list[ir.Load] = []
    for f in ops:
        ld = _strip_cast(f)
        if not isinstance(ld, ir.Load):
            return "an operand is not an array element"
        if ld.dtype not in TC_DTYPES:
            return (f"operand {ld.buffer.name} is {ld.dtype} (Tensor Cores take float16 / "
                    f"bfloat16)")
        if f is not ld and not (isinstance(f, ir.Cast) and f.dtype == "float32"):
            return f"operand {ld.buffer.name} is converted to {f.dtype}"
        loads.append(ld)
    if loads[0].dtype != loads[1].dtype:
        return "the operands have different types"
    mv, nv, kv = (u.iters[d] for d in mnk)
    use = [set(ld.indices) for ld in loads]
    a_i = next((i for i in range(2) if use[i] == {mv, kv}), None)
    b_i = next((i for i in range(2) if i != a_i and use[i] == {kv, nv}), None)
    if a_i is None or b_i is None:
        return "the operands are not indexed [m][k] / [k][n] (or transposed)"
    return loads[a_i], loads[b_i], scalars


def _access_problem(u: Statement, a: ir.Load, b: ir.Load, c: ir.Buffer, mn: tuple
                    ) -> str | None:
    """isl: each operand's access relation is the unit-stride projection of the loops
    its indices name, and ``C`` is read and written at ``(m, n)``."""
    for ld in (a, b):
        dims = tuple(u.iters.index(i) for i in ld.indices)
        acc = _access(u, ld.buffer.name, "read")
        want = _projection(u, dims, ld.buffer.name)
        if len(acc) != 1 or not acc[0].index_relation.intersect_domain(u.domain).is_equal(want):
            return f"the access to {ld.buffer.name} is not a unit-stride projection of the loops"
    for kind in ("read", "write"):
        acc = _access(u, c.name, kind)
        if len(acc) != 1 or not acc[0].relation.is_equal(_projection(u, mn, c.name)):
            return f"the accesses to {c.name} are not one element per (m, n)"
    return None


def _single_aff_ir(pw: isl.PwAff, params: dict) -> ir.Expr:
    return aff_to_ir(pieces(pw)[0][1], [], params)


def _scale_problem(s: Statement, u: Statement, c: ir.Buffer, mn: tuple) -> str | None:
    """The scaling writes ``C[m][n]`` from its own element and scalars, over the update's
    ``(m, n)`` box."""
    if s.write is not c:
        return f"statement {s.name} before the update does not write {c.name}"
    bad: list = []
    ir.walk(s.value, lambda e: bad.append(e.buffer.name) if isinstance(e, ir.Load)
            and e.indices and e.buffer is not c else None)
    if bad:
        return f"statement {s.name} reads {bad[0]} (a scaling reads only {c.name} and scalars)"
    return _own_point_problem(s, u, mn, "the scaling")


def _own_point_problem(s: Statement, u: Statement, mn: tuple, what: str) -> str | None:
    """``s`` writes its own element ``X[m][n]`` (its iterators in that order), reads
    arrays at that element only, and its domain is the update's ``(m, n)`` box."""
    if len(s.iters) != 2 or not all(a is b for a, b in zip(s.write_indices, s.iters)) \
            or len(s.write_indices) != 2:
        return f"statement {s.name} ({what}) does not write element [m][n] of its array"
    bad: list = []

    def fn(e):
        if isinstance(e, ir.Load) and e.indices and not _same_point(e, tuple(s.iters)):
            bad.append(e.buffer.name)
    ir.walk(s.value, fn)
    if bad:
        return f"statement {s.name} ({what}) reads {bad[0]} at another element"
    want = _permute_set(u.domain, (mn[0], mn[1], 3 - mn[0] - mn[1]), s.name)
    want = want.project_out(isl.dim_type.set, 2, 1).set_tuple_name(s.name)
    if not s.domain.is_equal(want):
        return f"statement {s.name} ({what}) does not cover exactly the elements of the update"
    return None


def _epilogue_problem(e: Statement, u: Statement, written: set, mn: tuple, model
                      ) -> str | None:
    """A statement after the update: elementwise over the update's ``(m, n)`` box,
    writing an array that nothing before it in the nest wrote or read as an operand,
    and (isl) running after every update of the element it reads."""
    if e.write.name in written:
        return f"statement {e.name} after the update writes {e.write.name} again"
    bad = _own_point_problem(e, u, mn, "after the update")
    if bad:
        return bad
    sm = model.initial_schedule.get_map()
    wu = isl.UnionMap.from_map(_access(u, u.write.name, "write")[0].relation)
    pt = _projection(e, (0, 1), u.write.name)                    # E[m, n] -> C[m, n]
    same = isl.UnionMap.from_map(pt).apply_range(wu.reverse())   # E -> U on one element
    if not same.intersect(sm.lex_lt_union_map(sm)).is_empty():
        return f"statement {e.name} runs before an update of its element"
    return None


def _scale_after_update(s: Statement, u: Statement, model) -> str | None:
    """isl: no update of an element runs before the scaling of that element in the
    program's order (the rewrite applies the scaling first)."""
    sm = model.initial_schedule.get_map()
    wu = isl.UnionMap.from_map(_access(u, u.write.name, "write")[0].relation)
    ws = isl.UnionMap.from_map(_access(s, s.write.name, "write")[0].relation)
    same = wu.apply_range(ws.reverse())            # U -> S0 on one element
    before = sm.lex_lt_union_map(sm)               # a -> b: a runs before b
    if not same.intersect(before).is_empty():
        return f"statement {s.name} scales an element after an update of it"
    return None


def _permute_set(dom: isl.Set, order: tuple, name: str) -> isl.Set:
    """``{ name[x_order] : x in dom }``."""
    n = dom.dim(isl.dim_type.set)
    xs = ", ".join(f"x{d}" for d in range(n))
    ys = ", ".join(f"x{d}" for d in order)
    perm = isl.Map.read_from_str(dom.get_ctx(), f"{{ [{xs}] -> {name}[{ys}] }}")
    perm = perm.align_params(dom.get_space()).set_tuple_id(
        isl.dim_type.in_, dom.get_tuple_id())
    return dom.apply(perm)


# --------------------------------------------------------------------------- rewriting

def _accesses(stmt: Statement, location) -> list:
    """The accesses of a rewritten statement (every index a plain iterator): reads in
    textual order, then the write."""
    out = []
    loads: list = []
    ir.walk(stmt.value, lambda e: loads.append(e) if isinstance(e, ir.Load) else None)
    refs = [(ld.buffer, tuple(ld.indices), "read") for ld in loads] + \
        [(stmt.write, tuple(stmt.write_indices), "write")]
    for r, (buf, idx, kind) in enumerate(refs):
        dims = tuple(stmt.iters.index(i) for i in idx)
        rel = _projection(stmt, dims, buf.name)
        out.append(Access(f"{stmt.name}_ref{r}", buf, idx, kind, rel, location, rel))
    return out


def rewrite(model, g: ScopGemm, tag: str):
    """``(new model, init, update, epilogue, accumulator)`` (module docstring); the
    caller sets the new model's tree and computes its dependences."""
    u = g.update
    mv, nv, kv = u.iters[g.m], u.iters[g.n], u.iters[g.k]
    taken = {b.name for s in model.statements for b in [s.write] + [a.buffer for a in s.reads]}
    name = f"{g.c.name}_acc{tag}"
    while name in taken:          # (a user array of that name)
        name += "_"
    acc = ir.Buffer(name, "float32", (g.extents[0], g.extents[1]))
    location = next((a.location for a in u.accesses), None)
    dom3 = _permute_set(u.domain, (g.m, g.n, g.k), f"{u.name}_tc")
    dom2 = dom3.project_out(isl.dim_type.set, 2, 1)

    def stmt(name, iters, dom, write, widx, value):
        s = Statement(name, u.stage, "assign", iters, dom.set_tuple_name(name), write, widx,
                      value)
        s.accesses = _accesses(s, location)
        return s
    T = lambda: ir.Load(acc, (mv, nv), "float32")  # noqa: E731
    init = stmt(f"{u.name}_tc_init", (mv, nv), dom2, acc, (mv, nv), ir.FloatImm(0.0, "float32"))
    fa = ir.Cast(g.a, "float32")
    fb = ir.Cast(g.b, "float32")
    upd = stmt(f"{u.name}_tc", (mv, nv, kv), dom3, acc, (mv, nv),
               ir.Binary("+", T(), ir.Binary("*", fa, fb, "float32"), "float32"))
    if g.scale is not None:
        s = g.scale
        base = ir.substitute(s.value, dict(zip(s.iters, (mv, nv))))
    else:
        base = ir.Load(g.c, (mv, nv), g.c.dtype)
    if base.dtype != "float32":
        base = ir.Cast(base, "float32")
    prod: ir.Expr = T()
    for f in g.factor:
        f32 = f if f.dtype == "float32" else ir.Cast(f, "float32")
        prod = ir.Binary("*", f32, prod, "float32")
    value: ir.Expr = ir.Binary("+", base, prod, "float32")
    if g.c.dtype != "float32":
        value = ir.Cast(value, g.c.dtype)
    out = stmt(f"{u.name}_tc_out", (mv, nv), dom2, g.c, (mv, nv), value)
    gone = {u.name} | ({g.scale.name} if g.scale is not None else set())
    new = copy.copy(model)
    stmts = []
    for s in model.statements:
        if s.name in gone:
            if s is u:
                stmts += [init, upd, out]
            continue
        stmts.append(s)
    for e in g.epilogue:          # (kept as they are, after the rewritten update)
        stmts.remove(e)
        stmts.insert(stmts.index(out) + 1 + g.epilogue.index(e), e)
    new.statements = stmts
    domain = isl.UnionSet.empty(model.context.get_space())
    for s in stmts:
        domain = domain.union(isl.UnionSet.from_set(s.domain))
    new.domain = domain     # (dependences: once the tree holds the new statements)
    return new, init, upd, out, acc


# --------------------------------------------------------------------------- the tree

class _Unsupported(Exception):
    pass


def _translate(us: isl.UnionSet, gone: set, new_sets: list) -> isl.UnionSet:
    out = isl.UnionSet.empty(us.get_space())
    hit = False
    for s in sets(us):
        if s.get_tuple_name() in gone:
            hit = True
            continue
        out = out.union(isl.UnionSet.from_set(s))
    if hit:
        for s in new_sets:
            out = out.union(isl.UnionSet.from_set(s))
    return out


def _copy(dst: isl.ScheduleNode, src: isl.ScheduleNode, ctx) -> isl.ScheduleNode:
    """Copy the subtree ``src`` to the leaf ``dst``; returns the node at ``dst``'s place
    (``ctx``: the replacement of the matched nests)."""
    depth = dst.get_tree_depth()
    t = src.get_type()
    T = isl.schedule_node_type
    if t == T.leaf:
        return dst
    if t == T.mark and src.mark_get_id().get_name() in ctx.replace:
        n = ctx.replace[src.mark_get_id().get_name()](dst)
    elif t == T.mark:
        n = _copy(dst.insert_mark(src.mark_get_id()).child(0), src.child(0), ctx)
    elif t == T.band:
        mupa = src.band_get_partial_schedule()
        mupa = mupa.intersect_domain(_translate(src.get_domain(), ctx.gone, []))
        n = dst.insert_partial_schedule(mupa)
        n = n.band_set_permutable(int(src.band_get_permutable()))
        for mm in range(src.band_n_member()):
            n = n.band_member_set_coincident(mm, int(src.band_member_get_coincident(mm)))
        n = _copy(n.child(0), src.child(0), ctx)
    elif t == T.filter:
        n = dst.insert_filter(_translate(src.filter_get_filter(), ctx.gone, ctx.new_sets))
        n = _copy(n.child(0), src.child(0), ctx)
    elif t in (T.sequence, T.set):
        filters = isl.UnionSetList.alloc(dst.get_ctx(), src.n_children())
        for c in range(src.n_children()):
            filters = filters.add(_translate(src.child(c).filter_get_filter(), ctx.gone,
                                             ctx.new_sets))
        n = dst.insert_sequence(filters) if t == T.sequence else dst.insert_set(filters)
        for c in range(src.n_children()):
            n = _copy(n.child(c).child(0), src.child(c).child(0), ctx)
            while n.get_tree_depth() > depth:
                n = n.parent()
    else:
        raise _Unsupported(f"a {t} node in the tree")
    while n.get_tree_depth() > depth:
        n = n.parent()
    return n


@dataclass(eq=False)
class _Replacement:
    replace: dict
    gone: set
    new_sets: list


def _nest_tree(mark_id, model, init, upd, tail):
    """The replacement of a nest: ``backbone`` -> ``[m, n]`` -> sequence (init, update ->
    ``[k]``, the epilogue statements ``tail`` in order)."""
    prm = "[" + ", ".join(p.name for p in model.params) + "] -> " if model.params else ""

    def mupa(text):
        um = isl.UnionMap.read_from_str(model.ctx, prm + "{ " + text + " }")
        return isl.MultiUnionPwAff.from_union_map(um)
    outer = mupa("; ".join([f"{upd.name}[m, n, k] -> [m, n]"] +
                           [f"{s.name}[m, n] -> [m, n]" for s in [init] + tail]))
    inner = mupa(f"{upd.name}[m, n, k] -> [k]")

    def build(dst):
        n = dst.insert_mark(mark_id).child(0)
        n = n.insert_partial_schedule(outer).child(0)
        filters = isl.UnionSetList.alloc(dst.get_ctx(), 2 + len(tail))
        for s in [init, upd] + tail:
            filters = filters.add(isl.UnionSet.from_set(s.domain))
        n = n.insert_sequence(filters)
        n = n.child(1).child(0).insert_partial_schedule(inner)
        return n
    return build


class ScopTensorCorePass(Pass):
    """See the module docstring."""
    name = "scop-tensor-cores"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        from polycomp.scheduler.gpu.scop_groups import nest_roots
        from polycomp.scheduler.tensorcore.tile import Factor, GemmView
        o = ctx.cuda_options
        if not o.tensor_cores:
            if o.fp_exact:
                ctx.note(self.name, "fp_exact: Tensor Cores off; contractions stay on CUDA "
                                    "cores in the C code's summation order")
            return schedule
        model = ctx.model
        by_name = {s.name: s for s in model.statements}
        order = {s.name: k for k, s in enumerate(model.statements)}
        matched = []
        for index, root in enumerate(nest_roots(schedule)):
            names = sorted({s.get_tuple_name() for s in sets(root.get_domain())},
                           key=order.__getitem__)
            stmts = [by_name[x] for x in names]
            if not (root.get_type() == isl.schedule_node_type.mark
                    and marks.is_kind(root, marks.BACKBONE)
                    and backbones(ctx).of(root).kind == "contraction"):
                if _reads_16bit(stmts):
                    ctx.note(self.name, f"loop nest {index}: no Tensor Cores: not a GEMM-like "
                                        f"contraction on the tiled path (see scop-gpu-groups)")
                continue
            g = match_scop_gemm(stmts, model)
            if isinstance(g, str):
                ctx.note(self.name, f"loop nest {index}: no Tensor Cores: "
                                    f"{g}; CUDA cores")
                continue
            matched.append((index, root.mark_get_id(), g))
        if not matched:
            return schedule
        views = tensor_core_views(ctx)
        replace: dict = {}
        gone: set = set()
        new_sets: list = []
        staged = []
        for index, mark_id, g in matched:
            model, init, upd, out, acc = rewrite(model, g, str(index))
            replace[mark_id.get_name()] = _nest_tree(mark_id, model, init, upd,
                                                     [out] + g.epilogue)
            gone |= {g.update.name} | ({g.scale.name} if g.scale is not None else set())
            gone |= {e.name for e in g.epilogue}
            new_sets += [init.domain, upd.domain, out.domain] + [e.domain for e in g.epilogue]
            staged.append((index, mark_id, g, init, upd, out, acc))
        try:
            new = isl.Schedule.from_domain(model.domain)
            top = schedule.get_root().child(0)
            node = _copy(new.get_root().child(0), top, _Replacement(replace, gone, new_sets))
            new = node.get_schedule()
        except (_Unsupported, isl.Error) as e:
            ctx.note(self.name, f"no Tensor Cores: the tree cannot be rewritten ({e})")
            return schedule
        model.initial_schedule = new      # the order the dependences are computed under
        compute_accesses_and_dependences(model)
        ctx.model = model
        for index, mark_id, g, init, upd, out, acc in staged:
            mv, nv, kv = upd.iters
            st = ScopContraction(g.update.name, (mv, nv), (ScopAxis(kv, g.extents[2]),),
                                 ScopOutput(acc))
            # the factors: the update's own expressions (the staging finds their loads)
            prod = upd.value.b
            fa = Factor(prod.a, prod.a.value, None, set(g.a.indices))
            fb = Factor(prod.b, prod.b.value, None, set(g.b.indices))
            views.views[mark_id.get_name()] = GemmView(ScopGroup(st), st, init, upd,
                                                       [out] + g.epilogue, fa, fb, 0, 1, 0,
                                                       g.in_dtype)
            scal = " * ".join(_text(f) for f in g.factor)
            ctx.note(self.name, f"loop nest {index}: Tensor Cores: "
                                f"{g.c.name}[{mv.name}][{nv.name}] = "
                                f"{'c0' if g.scale is not None else g.c.name} + "
                                f"{scal + ' * ' if scal else ''}sum_{kv.name} "
                                f"{g.a.buffer.name} * {g.b.buffer.name} ({g.in_dtype}); "
                                f"precision: the products are summed in fp32 in the Tensor "
                                f"Cores' order (not bitwise equal to gcc -O0; option fp_exact "
                                f"keeps the CUDA-core path)")
        return new


def _reads_16bit(stmts: list) -> bool:
    return any(a.buffer.dtype in TC_DTYPES for s in stmts for a in s.reads)


def _text(e: ir.Expr) -> str:
    e = _strip_cast(e)
    if isinstance(e, ir.Load):
        return e.buffer.name
    if isinstance(e, (ir.FloatImm, ir.IntImm)):
        return str(e.value)
    return "s"


def scop_kernel_base(schedule: isl.Schedule, ctx: CompileState) -> int:
    """The first number for the Tensor Core kernels of a C SCoP: past every number the
    nests, the baseline kernels (host loops take numbers after the nests') and the
    tiled nests that ``gpu-mapping`` numbers later (from the smallest free one) may take."""
    from polycomp.scheduler.gpu.scop_groups import nest_roots
    from polycomp.scheduler.gpu.state import gpu_kernels
    from polycomp.scheduler.gpu.tile import backbone_marks
    taken = set(gpu_kernels(ctx).baseline) | set(gpu_kernels(ctx).launches)
    top = max([len(nest_roots(schedule)) - 1] + sorted(taken)) + 1
    return top + len(backbone_marks(schedule))
