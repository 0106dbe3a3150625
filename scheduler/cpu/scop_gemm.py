"""Pass ``scop-gemm``: GEMM-like statements of C SCoPs onto the packed micro-kernel.

A C SCoP (every statement ``kind == "assign"``, :mod:`polycomp.frontend.c_model`) has no
DSL reduction stages, so :mod:`.backbone_tile` never sees it.  This pass recognises, in
each top-level child of the program-order tree, the statement pair of a GEMM
(:func:`match_scop_gemm`):

* an *update* ``U[b.., i, j, k]``: ``W[b.., i, j] = W[b.., i, j] + X * Y`` where the
  write subscripts are distinct plain iterators (``j`` the last), ``k`` the one domain
  dimension not among them, ``Y`` a load with exactly ``j`` in one subscript (the
  last: ``B[k][j]``, or another: the transposed ``B[j][k]``, packed in panels along
  that dimension) and no ``i``, ``X`` an expression (a load times loop-invariant
  factors: ``alpha * A[i][k]``) that does not use ``j``; ``X``'s and ``Y``'s arrays are
  not written in the child (one array for both is allowed when they are two distinct
  references, syrk's ``A[i][k] * A[j][k]``: each reference is packed on its own,
  ``PackRequest.reference``), ``W`` another; float32/float64 throughout.  The domain
  is the product of its output points and its ``k`` range (``dom = proj_{b,i,j}(dom) x
  proj_k(dom)``): every element reduces over the same ``k`` range, so its first update
  is in the first ``k`` tile it meets; the output points may form any set (syrk's
  triangle ``j <= i``: the register tiles wholly inside it are isolated for the
  micro-kernel, the ones crossing the diagonal take its row-masked variant,
  :mod:`polycomp.hw.cpu.microkernel`).
* an optional *init* ``I[b.., i, j]`` (in the same child, textually before the
  update): ``W[b.., i, j] = f`` reading ``W`` at most at its own point, whose domain is
  the update's projected onto the write dimensions (``C[i][j] = 0``,
  ``C[i][j] *= beta``); no other statement in the child.

Loop order in the C text does not matter (``i, k, j`` as PolyBench's gemm writes it):
every schedule function is built per statement from the position of ``i``, ``j``,
``k`` in its own domain.

Assumes: the program-order tree (``domain -> sequence`` of top-level filters, or one
subtree), ``ctx.model`` with the C statements, a target with vector registers.

Guarantees: a matched child's subtree becomes, with ``(MR, NR, MC, NC, KC)`` from
:func:`polycomp.scheduler.cpu.backbone_tile.choose_blocking` (the target's register
count, L1 and L2 capacities, threads),

    mark cpu_parallel -> [band[b..]] band[floor(i/MC)]
      band[floor(k/KC)]                      (init: 0)
        mark cpu_pack_request (X's array, panels of MR along i, L1)
          band[floor(j/NC)]
            mark cpu_pack_request (Y's array, panels of NR along j, L2)
              band[floor((i mod MC)/MR), floor((j mod NC)/NR)]  isolate: full tiles
                                   (not isolated for symbolic sizes over a rectangle:
                                    backbone_tile.partial_tiles)
                sequence
                  filter init:   band[i mod MR, j mod NR]
                  filter update: mark cpu_microkernel -> band[k mod KC]
                                                          -> band[i mod MR, j mod NR]

With several threads and a triangle of output points (:func:`cyclic_tiles`) the
parallel loop is a band ``[floor(i/MC) mod T]`` (AST loop type atomic) above the ``i``
tiles, which then run ``t, t + T, ..`` in thread ``t``: the triangle's tiles dealt
cyclically, so each thread gets about the same area (contiguous blocks of tiles gave
the last thread the largest rows).  The register tiles' isolate option names that band
as a free first dimension (whether a tile is full does not depend on it).

With several threads, a rectangle of output points, no batch dimensions and a row
count that is not a constant (:func:`row_ranges`) the ``i`` tiles give way to *row
ranges* cut at run time (their count and bounds depend on the row count)::

    mark cpu_row_ranges:<n> -> mark cpu_parallel
      filter { lo <= i < hi } with first <= lo < hi <= lo + MC, hi <= last + 1
        band[floor(k/KC)] -> .. (as above, register rows floor((i - lo)/MR))

(``MC``, ``NC``: :func:`range_blocking`, both packed blocks of a range within L2;
``X`` read in place, no pack request, when every product is a bare ``X * Y`` with
``X[.., i, k]``, :func:`range_x_in_place`.)  ``lo``, ``hi`` are isl parameters of the
whole schedule (their bounds also restrict
the AST context, :meth:`~polycomp.state.CompileState.restrict_ast_context`); the
payload :class:`~polycomp.scheduler.cpu.state.RowRanges` tells the IR pass
:mod:`polycomp.hw.cpu.row_ranges` how to bind them, one parallel iteration per range.
isl checks the range's tree for every ``lo``, ``hi`` and that every dependence of the
product relates instances of one row (:func:`_same_rows`): ranges are independent.

Legality (isl terms): for a fixed ``(b, i, j)`` the updates run in increasing ``k``
(``floor(k/KC)`` then ``k mod KC`` is lexicographically monotone in ``k``) and the
init instance precedes them (``kt = 0`` is at or before every update's tile, same
``jt`` and register tile, earlier sequence child); instances of different ``(b, i, j)`` touch
different ``W`` elements and only read ``X``/``Y`` arrays nobody in the child writes.
So every flow/anti/output dependence stays lexicographically positive and each
element receives the same additions in the same order: results are bitwise those of
the C loop nest up to FMA contraction.  The pass re-checks this with isl
(:func:`polycomp.scheduler.common.tree.violated_dependences` on the dependences of
the child) and keeps the program order, with a note, if it fails.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

import islpy as isl

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.model import Statement
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.cpu import tree as T
from polycomp.scheduler.cpu.backbone_tile import (
    Blocking,
    OuterProduct,
    _extent,
    choose_blocking,
    dim_aff,
    floor_div_aff,
    isolate_full_tiles,
    loop_vars,
    mod_aff,
    partial_tiles,
    to_upa,
)
from polycomp.scheduler.cpu.scop_stages import ScopStages
from polycomp.scheduler.cpu.state import RowRanges, cpu_row_ranges
from polycomp.scheduler.promotion.cpu_pack import request_mark
from polycomp.scheduler.promotion.record import PackRequest, promotion_state
from polycomp.state import CompileState


@dataclass(frozen=True, eq=False)
class ScopGemm:
    """A matched GEMM: the update and optional init statements, the positions of
    ``i``, ``j``, ``k`` and the batch dimensions in each one's domain, and the loads
    of the two operands (``x``: without ``j``; ``y``: with ``j`` in one subscript) of
    each product."""
    update: Statement
    init: Statement | None
    upd_pos: dict            # "i", "j", "k" -> position; "b" -> list of positions
    init_pos: dict | None
    x: ir.Load
    y: ir.Load
    dtype: str
    #: every product ``(X, Y)`` of the update's sum (syr2k: two), ``(x, y)`` first
    pairs: tuple = ()

    def outer_product(self) -> OuterProduct:
        """The :class:`OuterProduct` view :func:`choose_blocking` sizes."""
        p = self.upd_pos
        return OuterProduct(self.init, self.update, list(p["b"]), p["i"], p["j"], [p["k"]],
                            self.x, self.y, self.dtype, False)


def _plain_iter(e: ir.Expr, iters: tuple) -> ir.Var | None:
    return e if isinstance(e, ir.Var) and e in iters else None


def _loads(e: ir.Expr) -> list[ir.Load]:
    out: list[ir.Load] = []
    ir.walk(e, lambda n: out.append(n) if isinstance(n, ir.Load) else None)
    return out


def _factor_terms(e: ir.Expr) -> list[ir.Expr]:
    """The multiplicands of a product tree ``a * b * c`` (one term if not a product)."""
    if isinstance(e, ir.Binary) and e.op == "*":
        return _factor_terms(e.a) + _factor_terms(e.b)
    return [e]


def _tag(s: Statement, ld: ir.Load) -> str | None:
    """The access tag of the read reference ``ld`` of ``s``."""
    for a in s.reads:
        if a.buffer is ld.buffer and len(a.indices) == len(ld.indices) and all(
                ir.structural_equal(x, y) for x, y in zip(a.indices, ld.indices)):
            return a.tag
    return None


def _j_dim(y: ir.Load, j: ir.Var) -> int | None:
    """The subscript of ``y`` that is exactly ``j`` when no other one uses ``j``."""
    dims = [d for d, ix in enumerate(y.indices) if j in loop_vars(ix)]
    if len(dims) == 1 and ir.structural_equal(y.indices[dims[0]], j):
        return dims[0]
    return None


def _separable(domain: isl.Set, kp: int) -> bool:
    """Whether ``domain`` is the product of its projection without dimension ``kp`` and
    its projection on ``kp`` (for ``k``: every output point ``(b.., i, j)`` reduces over
    the same ``k`` range, while the output points themselves may form any set, a
    triangle ``j <= i`` as in syrk; for ``j``: the ``j`` range is the same in every row)."""
    n = domain.dim(isl.dim_type.set)
    name = domain.get_tuple_name()
    outer = domain.project_out(isl.dim_type.set, kp, 1).insert_dims(isl.dim_type.set, kp, 1)
    kproj = domain.project_out(isl.dim_type.set, kp + 1, n - kp - 1) \
        .project_out(isl.dim_type.set, 0, kp).insert_dims(isl.dim_type.set, 0, kp) \
        .add_dims(isl.dim_type.set, n - kp - 1)
    prod = outer.set_tuple_name(name).intersect(kproj.set_tuple_name(name))
    return prod.is_equal(domain)


def _match_update(s: Statement) -> tuple[dict, tuple] | str:
    iters = tuple(s.iters)
    if s.write.dtype not in ("float32", "float64"):
        return "not float32/float64"
    w = [_plain_iter(ix, iters) for ix in s.write_indices]
    if len(w) < 2 or any(v is None for v in w) or len(set(w)) != len(w):
        return "the written element is not indexed by distinct loop iterators"
    if len(iters) != len(w) + 1:
        return "not exactly one reduction loop"
    k = next(v for v in iters if v not in w)
    v = s.value
    if not (isinstance(v, ir.Binary) and v.op == "+"):
        return "not an accumulation W += X * Y"
    rest = None
    for acc, other in ((v.a, v.b), (v.b, v.a)):
        if isinstance(acc, ir.Load) and acc.buffer is s.write and \
                all(ir.structural_equal(a, b) for a, b in zip(acc.indices, s.write_indices)):
            rest = other
    if rest is None:
        return "not an accumulation W += X * Y"
    if any(ld.buffer is s.write for ld in _loads(rest)):
        return "the product reads the accumulated array"
    j = w[-1]
    assert j is not None
    pairs = []
    pos: dict | None = None
    for summand in _sum_terms(rest):
        m = _match_product(s, summand, w, j, k)
        if m is None:
            return "no operand Y indexed by j in one subscript with X free of j"
        p, x, y = m
        if pos is not None and p != pos:
            return "the products of the sum have different output rows"
        pos = p
        pairs.append((x, y))
    assert pos is not None
    refs = [ld for xy in pairs for ld in xy]
    for ld in refs:
        if any(o is not ld and o.buffer is ld.buffer for o in refs) and _tag(s, ld) is None:
            return "an operand read twice at the same element"
    return pos, tuple(pairs)


def _sum_terms(e: ir.Expr) -> list[ir.Expr]:
    """The summands of a sum tree ``a + b + c`` (one term if not a sum)."""
    if isinstance(e, ir.Binary) and e.op == "+":
        return _sum_terms(e.a) + _sum_terms(e.b)
    return [e]


def _match_product(s: Statement, e: ir.Expr, w: list, j: ir.Var, k: ir.Var):
    """``(positions, X, Y)`` of one product ``X * Y`` (times loop-invariant factors)."""
    iters = tuple(s.iters)
    terms = _factor_terms(e)
    ys = [t for t in terms if isinstance(t, ir.Load) and t.dtype == s.write.dtype and
          _j_dim(t, j) is not None]
    # Y[.., j] (unit stride in j) first, then a transposed Y[j, ..]
    ys.sort(key=lambda t: _j_dim(t, j) != len(t.indices) - 1)
    for y in ys:
        others = [t for t in terms if t is not y]
        if any(j in loop_vars(t) for t in others):
            continue
        xl = [ld for t in others for ld in _loads(t) if k in loop_vars(ld)]
        if len(xl) != 1 or xl[0].dtype != s.write.dtype:
            continue
        x = xl[0]
        xv = set().union(*(loop_vars(ix) for ix in x.indices))
        yv = set().union(*(loop_vars(ix) for ix in y.indices))
        if k not in yv:
            continue
        cands = [t for t in w[:-1] if t in xv and t not in yv]
        if not cands:
            continue
        i = cands[-1]
        batch = [t for t in w[:-1] if t is not i]
        pos = {"i": iters.index(i), "j": iters.index(j), "k": iters.index(k),
               "b": [iters.index(b) for b in batch]}
        return pos, x, y
    return None


def _match_init(s: Statement, upd: Statement, upd_pos: dict) -> dict | None:
    """The positions of ``b.., i, j`` in the init ``s``'s domain, or None."""
    iters = tuple(s.iters)
    if s.write is not upd.write or len(iters) != len(s.write_indices):
        return None
    w = [_plain_iter(ix, iters) for ix in s.write_indices]
    if any(v is None for v in w) or len(set(w)) != len(w):
        return None
    for ld in _loads(s.value):
        if ld.buffer is s.write and not all(
                ir.structural_equal(a, b) for a, b in zip(ld.indices, s.write_indices)):
            return None
    # write position d of the update <-> write position d of the init
    uw = [tuple(upd.iters).index(v) for v in upd.write_indices]
    iw = [iters.index(v) for v in w]
    to = dict(zip(uw, iw))
    pos = {"i": to[upd_pos["i"]], "j": to[upd_pos["j"]], "b": [to[b] for b in upd_pos["b"]]}
    # its domain is the update's projected onto the written dimensions
    udom = upd.domain
    kp = upd_pos["k"]
    proj = udom.project_out(isl.dim_type.set, kp, 1)
    # reorder the projected dims (update's write order) to the init's dimension order
    order = [p for p in range(udom.dim(isl.dim_type.set)) if p != kp]
    perm = [order.index(u) for u in sorted(uw, key=lambda u: to[u])]
    sp = s.domain.get_space()
    m = isl.Map.from_domain_and_range(proj.set_tuple_name("U"), isl.Set.universe(sp))
    for dst, src in enumerate(perm):
        m = m.equate(isl.dim_type.in_, src, isl.dim_type.out, dst)
    try:
        return pos if m.range().is_equal(s.domain) else None
    except isl.Error:
        return None


def match_scop_gemm(statements: list[Statement], written_elsewhere=()) -> ScopGemm | str:
    """The :class:`ScopGemm` of one top-level child's statements (textual order), or the
    reason it is none (a short phrase for ``explain``)."""
    if not statements or len(statements) > 2:
        return "not one accumulation (with an optional init)"
    upd = statements[-1]
    m = _match_update(upd)
    if isinstance(m, str):
        return m
    pos, pairs = m
    x, y = pairs[0]
    if not _separable(upd.domain, pos["k"]):
        return "the reduction range depends on the output point"
    init = None
    ipos = None
    if len(statements) == 2:
        init = statements[0]
        ipos = _match_init(init, upd, pos)
        if ipos is None:
            return "the other statement is not an init of the accumulated element"
    written = {s.write.name for s in statements}
    if any(ld.buffer.name in written for xy in pairs for ld in xy):
        return "an operand is written in the same loop nest"
    return ScopGemm(upd, init, pos, ipos, x, y, upd.write.dtype, pairs)


def param_aff(space: isl.Space, name: str) -> isl.Aff:
    """The parameter ``name`` as an affine function on ``space`` (added to its
    parameters when it is not one of them yet)."""
    if space.find_dim_by_name(isl.dim_type.param, name) < 0:
        k = space.dim(isl.dim_type.param)
        space = space.add_dims(isl.dim_type.param, 1).set_dim_id(
            isl.dim_type.param, k, isl.Id(name))
    return isl.Aff.param_on_domain_space_id(space, isl.Id(name))


def _affs(space: isl.Space, pos: dict, b: Blocking, k: isl.Aff | None,
          origin: tuple = (), rows: tuple = ()) -> dict:
    i, j = dim_aff(space, pos["i"]), dim_aff(space, pos["j"])
    if origin:     # tiles counted from (oi, oj) on
        i, j = i.sub(origin[0]), j.sub(origin[1])
    if rows:       # register rows counted from the range's first row, the parameter lo
        lo = param_aff(space, rows[0])
        wide = lo.get_space()
        i, j = i.align_params(wide).sub(lo), j.align_params(wide)
        k = None if k is None else k.align_params(wide)
        space = lo.get_domain_space()
    zero = isl.Aff.zero_on_domain(isl.LocalSpace.from_space(space))
    kk = zero if k is None else k
    return {"b": [dim_aff(space, t) for t in pos["b"]],
            "it": floor_div_aff(i, b.MC), "jt": floor_div_aff(j, b.NC),
            "kt": floor_div_aff(kk, b.KC),
            "ir": floor_div_aff(i if rows else mod_aff(i, b.MC), b.MR),
            "jr": floor_div_aff(mod_aff(j, b.NC), b.NR),
            "ii": mod_aff(i, b.MR), "jj": mod_aff(j, b.NR)}



def _row_lengths(dom: isl.Set, ip: int, jp: int) -> int | None:
    """``+1`` when the number of ``j`` points of row ``i`` grows by one per row (a lower
    triangle ``j <= i``), ``-1`` when it shrinks by one (an upper triangle ``j >= i``),
    None otherwise (a rectangle, or any other shape): from the lexicographic extremes of
    ``j`` as piecewise affine functions of ``i`` (every piece must agree)."""
    n = dom.dim(isl.dim_type.set)
    proj = dom
    for d in reversed(range(n)):
        if d not in (ip, jp):
            proj = proj.project_out(isl.dim_type.set, d, 1)
    # { [i] -> [j] } (i the first of the two kept dimensions, or the second)
    rows = isl.Map.from_range(proj).move_dims(isl.dim_type.in_, 0, isl.dim_type.out,
                                              0 if ip < jp else 1, 1)
    try:
        length = rows.lexmax_pw_multi_aff().get_pw_aff(0).sub(
            rows.lexmin_pw_multi_aff().get_pw_aff(0))
    except isl.Error:
        return None
    slopes = set()
    for _, aff in length.get_pieces():
        if any(not aff.get_coefficient_val(isl.dim_type.div, d).is_zero()
               for d in range(aff.dim(isl.dim_type.div))):
            return None
        slopes.add(aff.get_coefficient_val(isl.dim_type.in_, 0).to_python())
    return slopes.pop() if len(slopes) == 1 and slopes <= {1, -1} else None


def cyclic_tiles(dom: isl.Set, ip: int, jp: int, threads: int) -> bool:
    """Whether the ``i`` tiles of a product over ``dom`` go to the threads cyclically
    (tile ``t`` to thread ``t mod T``) instead of in contiguous blocks: when the output
    points form a triangle (:func:`_row_lengths`) and several threads are planned.
    Tile ``t`` of a lower triangle holds about ``MC^2 (t + 1/2)`` points, so contiguous
    blocks of tiles give the last thread the largest share (7 tiles of 192 rows of
    PolyBench's 1200-row syrk over 2 threads: 41 % / 59 % of the points); dealt
    cyclically every thread gets one tile of each round of ``T`` (46 % / 54 %, and
    the difference shrinks with more tiles), while each tile keeps its rows
    contiguous, so its packed ``X`` block keeps the origin ``MC * t`` (no piecewise
    origin in the micro-kernel's address arithmetic)."""
    return threads > 1 and _row_lengths(dom, ip, jp) is not None


def _free_outer_dim(iso: isl.UnionSet) -> isl.UnionSet:
    """``{ isolate[[p, prefix] -> [tile]] }`` (``p`` unconstrained) from ``iso`` =
    ``{ isolate[[prefix] -> [tile]] }``."""
    s = isl.Set.from_union_set(iso)
    m = s.unwrap()
    m = m.insert_dims(isl.dim_type.in_, 0, 1)
    return isl.UnionSet.from_set(m.wrap().set_tuple_name("isolate"))


def scop_gemm_tree(g: ScopGemm, b: Blocking, requests: list, outer: tuple = (),
                   parallel_regs: bool = False, origin: tuple = (), k_tiles: bool = False,
                   threads: int = 1, pack_x: bool = True, pack_y: bool = True,
                   rows: tuple = (), shared_packs: bool = False):
    """The subtree of the module docstring for ``g`` (pack requests appended to
    ``requests``, i.e. ``promotion_state(state).pack_requests``); ``outer``: the
    members (UnionPwAff on the update) of the bands the subtree will sit below, which
    the isolate option of the register tiles names first; ``parallel_regs``: the
    ``cpu_parallel`` mark right above the register-tile band instead of at the top
    (threads split one block's register tiles and share its packed copies: for a
    subtree below a sequential loop that the ``i`` tiles' range varies with);
    ``origin``: affs ``(oi, oj)`` on the update's domain (no init) from which the ``i``
    and ``j`` tiles are counted (``floor((i - oi)/MC)``, ...; default 0); ``k_tiles``:
    keep the ``floor(k/KC)`` band below ``outer`` (outer bands that do not fix the ``k``
    block, :mod:`.scop_trmm`'s row steps; the caller makes every step's ``k`` range
    start at a multiple of ``KC``); ``threads``: the planned threads (a triangle of
    output points over several takes :func:`cyclic_tiles`' band, at the top level
    only); ``pack_x`` / ``pack_y``: request the packed copies of ``X`` / ``Y`` (off:
    the micro-kernel reads that operand in place, :mod:`.scop_symm`'s row steps,
    whose blocks are too small to repay a copy); ``rows``: the names ``(lo, hi)`` of two
    parameters: the tree is that of one *row range* (:func:`row_ranges`), ``cpu_parallel
    -> filter { lo <= i < hi <= lo + MC } -> band[floor(k/KC)] -> ..``, no ``i`` tile
    band, the register rows counted from ``lo`` (for a rectangle of output points with
    a symbolic row count, no ``outer``, ``origin`` or batch dimensions);
    ``shared_packs``: the ``i`` tile band is not marked coincident (below an outer
    parallel loop, one thread runs a subtree's ``i`` tiles in turn, each refilling the
    one packed ``Y`` block the thread holds; :mod:`.scop_symm`'s mirror)."""
    sp = g.update.domain.get_space()
    u = _affs(sp, g.upd_pos, b, dim_aff(sp, g.upd_pos["k"]), origin, rows)
    parts = [u]
    if g.init is not None:
        assert g.init_pos is not None
        z = _affs(g.init.domain.get_space(), g.init_pos, b, None, rows=rows)
        parts.append(z)

    def member(name: str, d: int | None = None):
        return T.union_members([to_upa(q[name] if d is None else q[name][d]) for q in parts])
    batch = [member("b", d) for d in range(len(g.upd_pos["b"]))]
    it, kt, jt, ir_, jr = (member(n) for n in ("it", "kt", "jt", "ir", "jr"))
    kk = to_upa(mod_aff(dim_aff(sp, g.upd_pos["k"]), b.KC))
    ii, jj = to_upa(u["ii"]), to_upa(u["jj"])
    # with outer bands that fix the k block (scop-factor's steps: KC = the block) the
    # kt band is left out (isl would generate no loop for it, and the packs' origins
    # must be functions of the generated loops)
    tiles = ("kt", "jt") if rows else ("it", "kt", "jt") if not outer or k_tiles else \
        ("it", "jt")
    # a triangle of output points over several threads: the i tiles dealt to the
    # threads cyclically (cyclic_tiles), the parallel loop over tile mod T above them
    part = None
    if threads > 1 and not outer and not parallel_regs and not origin and not batch and \
            cyclic_tiles(g.update.domain, g.upd_pos["i"], g.upd_pos["j"], threads):
        part = T.union_members([to_upa(mod_aff(q["it"], threads)) for q in parts])
    upd_prefix = list(outer) + [to_upa(a) for a in u["b"]] + [to_upa(u[n]) for n in tiles]
    dom, ip, jp = g.update.domain, g.upd_pos["i"], g.upd_pos["j"]
    # symbolic sizes over a rectangle: every register tile, partial ones included, is the
    # micro-kernel's (backbone_tile.partial_tiles); a triangle (syrk) isolates its full
    # tiles, the ones crossing the diagonal take the generic nest
    boxed = partial_tiles(dom, ip, jp) and _separable(dom, ip) and _separable(dom, jp)
    iso = None if boxed else isolate_full_tiles(
        upd_prefix, [to_upa(u["ir"]), to_upa(u["jr"])], [ii, jj], (b.MR, b.NR), dom)
    if iso is not None and part is not None:
        # a register tile lies in one i tile, so in one part: whether it is full does not
        # depend on the part, a free dimension in front of the prefix (isl's isolation
        # of the full tiles with the part in the prefix can take minutes)
        iso = _free_outer_dim(iso)
    micro = T.Mark(marks.CPU_MICROKERNEL,
                   T.Band([kk], T.Band([ii, jj], permutable=True, coincident=[True, True]),
                          permutable=True))
    body: object = micro
    if g.init is not None:
        zero_tile = T.Band([to_upa(z["ii"]), to_upa(z["jj"])], permutable=True,
                           coincident=[True, True])
        body = T.Sequence([
            T.Filter(isl.UnionSet.from_set(isl.Set.universe(g.init.domain.get_space())),
                     zero_tile),
            T.Filter(isl.UnionSet.from_set(isl.Set.universe(sp)), micro)])
    regs: object = T.Band([ir_, jr], body, permutable=True, coincident=[True, True],
                          options=iso)
    if parallel_regs:
        regs = T.Mark(marks.CPU_PARALLEL, regs)
    # one request per operand reference; an array read by several of them (syrk's
    # A[i][k] * A[j][k], syr2k's two products) or also accumulated into (trmm's B[k][j]
    # beside B[i][j], scop_trmm) is packed per reference
    refs = [ld for xy in g.pairs for ld in xy]
    vi, vj = g.update.iters[g.upd_pos["i"]], g.update.iters[g.upd_pos["j"]]

    def ref_tag(ld: ir.Load) -> str:
        shared = ld.buffer is g.update.write or \
            any(o is not ld and o.buffer is ld.buffer for o in refs)
        return (_tag(g.update, ld) or "") if shared else ""

    def request(ld: ir.Load, dim: int, width: int, level: str) -> str:
        return request_mark(requests, PackRequest(ld.buffer, dim, width, level,
                                                  reference=ref_tag(ld)))
    y_marks = []
    for _, y in (g.pairs if pack_y else ()):
        y_dim = _j_dim(y, vj)
        assert y_dim is not None
        y_marks.append(request(y, y_dim, b.NR, "L2"))
    x_marks = []
    for x, _ in (g.pairs if pack_x else ()):
        x_dim = next((d for d, ix in enumerate(x.indices) if vi in loop_vars(ix)), 0)
        x_marks.append(request(x, x_dim, b.MR, "L1"))
    inner: object = regs
    for mk in reversed(y_marks):
        inner = T.Mark(mk, inner)
    # the j tiles are coincident, but in a triangle their number varies with i: a loop
    # not marked so needs no slot of its own in the packed Y buffer (cpu-pack)
    rect = _separable(g.update.domain, g.upd_pos["j"])
    jband: object = T.Band([jt], inner, coincident=[rect])
    for mk in reversed(x_marks):
        jband = T.Mark(mk, jband)
    top: object = T.Band([kt], jband) if "kt" in tiles else jband
    if rows:
        return T.Mark(marks.CPU_PARALLEL, T.Filter(_range_filter(g, rows, b.MC), top))
    return _row_tiles(top, it, batch, part, parallel_regs, not shared_packs)


def _row_tiles(top, it, batch: list, part, parallel_regs: bool, coincident: bool = True):
    """``top`` below the ``i`` tile band ``it`` (``coincident`` or not), the batch bands
    and the cyclic part band (when given), under a ``cpu_parallel`` mark unless
    ``parallel_regs``."""
    top = T.Band([it], top, permutable=True, coincident=[coincident])
    if batch:
        top = T.Band(batch, top, permutable=True, coincident=[True] * len(batch))
    if part is not None:
        top = T.Band([part], top, coincident=[True], loop_types=[isl.ast_loop_type.atomic])
    return top if parallel_regs else T.Mark(marks.CPU_PARALLEL, top)


def range_params(g: ScopGemm, rows: tuple, MC: int) -> isl.Set:
    """``{ : first <= lo < hi <= lo + MC and hi <= last + 1 }`` (``rows`` = the names of
    ``lo`` and ``hi``; ``first``, ``last``: the product's first and last row): what
    every range of :class:`~polycomp.scheduler.cpu.state.RowRanges` satisfies.  In the
    range's filter, the bounds make its first row ``lo`` itself (not ``max(lo,
    first)``: the packed ``X`` block's origin, read in the micro-kernel's address
    arithmetic) and the block at most ``MC`` rows; in the AST context they leave the
    generated code without guards on them."""
    dom, ip = g.update.domain, g.upd_pos["i"]
    first, last = dom.dim_min(ip), dom.dim_max(ip)
    psp = first.get_domain_space()
    lo = isl.PwAff.from_aff(param_aff(psp, rows[0]))
    hi = isl.PwAff.from_aff(param_aff(lo.get_domain_space(), rows[1]))
    wide = hi.get_space()
    lo = lo.align_params(wide)
    one = isl.Val.int_from_si(dom.get_ctx(), 1)
    mc = isl.Val.int_from_si(dom.get_ctx(), MC)
    return lo.ge_set(first.align_params(wide)) \
        .intersect(hi.le_set(last.align_params(wide).add_constant_val(one))) \
        .intersect(lo.lt_set(hi)).intersect(hi.le_set(lo.add_constant_val(mc)))


def _range_filter(g: ScopGemm, rows: tuple, MC: int) -> isl.UnionSet:
    """``{ S[..] : lo <= i < hi }`` and :func:`range_params` for the update and the
    init of ``g``."""
    bounds = range_params(g, rows, MC)
    out = None
    for s, pos in ((g.update, g.upd_pos), (g.init, g.init_pos)):
        if s is None:
            continue
        assert pos is not None
        sp = s.domain.get_space()
        lo = param_aff(sp, rows[0])
        hi = param_aff(lo.get_domain_space(), rows[1])
        lo = lo.align_params(hi.get_space())
        i = dim_aff(sp, pos["i"]).align_params(hi.get_space())
        f = isl.UnionSet.from_set(i.ge_set(lo).intersect(i.lt_set(hi))
                                  .intersect_params(bounds))
        out = f if out is None else out.union(f)
    assert out is not None
    return out


#: the fewest multiply-adds a row range gets (:class:`~.state.RowRanges` ``min_work``):
#: about 10 us of a core's micro-kernel; PolyBench's SMALL gemm (60 x 70 x 80, 336 000)
#: stays on one thread, as it was with one 192-row tile
RANGE_MIN_WORK = 1 << 18


def _same_rows(deps: isl.UnionMap, g: ScopGemm) -> bool:
    """Whether every dependence of ``deps`` relates two instances of the same output
    row ``i`` (the update's or the init's), so that row ranges may run in any order or
    at once: within a range the tree's order is checked by isl (``stages.legal``, for
    any ``lo``, ``hi``), across ranges there is nothing to order."""
    rows = None
    for s, pos in ((g.update, g.upd_pos), (g.init, g.init_pos)):
        if s is None:
            continue
        assert pos is not None
        m = isl.UnionMap.from_map(isl.Map.from_pw_aff(isl.PwAff.from_aff(
            dim_aff(s.domain.get_space(), pos["i"]))))
        rows = m if rows is None else rows.union(m)
    assert rows is not None
    same = rows.apply_range(rows.reverse())
    return deps.is_subset(same)


def row_ranges(g: ScopGemm, b: Blocking, threads: int) -> bool:
    """Whether the product ``g`` runs by *row ranges* (mark ``cpu_row_ranges``,
    :class:`~polycomp.scheduler.cpu.state.RowRanges`): several threads, a rectangle of
    output points (no batch dimensions) whose row count is a parameter expression.
    Such rows were cut at multiples of ``MC`` (32 register rows) and the row tiles
    dealt to the threads in contiguous blocks: PolyBench's 800 rows made 5 tiles, 3
    and 2 per thread, 576 and 224 rows (1000 rows: 576 and 424).  The ranges are cut
    at run time instead, ``threads * ceil(n / (threads * MC))`` of them (each at most
    ``MC`` rows), so the threads' shares differ by less than a register row while every
    range packs ``Y`` once per ``k`` and ``j`` tile for up to ``MC`` rows.  ``MC`` and
    ``NC`` are then :func:`range_blocking`'s (510 fp64 rows: PolyBench's 800 rows are 2
    ranges of 402 and 398 rows, one a thread; with the nominal 192, 6 ranges of 132 or
    138), and ``X`` is read in place when :func:`range_x_in_place` says so.  (A constant
    row count already gets ``MC`` from the threads,
    :func:`~.backbone_tile.choose_blocking`.)"""
    dom, ip, jp = g.update.domain, g.upd_pos["i"], g.upd_pos["j"]
    return threads > 1 and not g.upd_pos["b"] and _extent(dom, ip) is None and \
        partial_tiles(dom, ip, jp) and _separable(dom, ip) and _separable(dom, jp) and \
        _separable(dom, g.upd_pos["k"])


#: a row range's packed ``X`` block (``MC x KC``) takes at most this share of L2 and
#: its packed ``Y`` block (``KC x NC``) at most :data:`RANGE_Y_L2` (:func:`range_blocking`)
RANGE_X_L2 = 5 / 8
RANGE_Y_L2 = 1 / 4


def range_blocking(b: Blocking, size: int, l2_bytes: int, tiles_given: bool) -> Blocking:
    """The blocking of a product that runs by row ranges (:func:`row_ranges`): ``MC``
    (the most rows a range takes) as many register rows as keep the range's packed
    ``X`` block within :data:`RANGE_X_L2` of L2, ``NC`` as many ``NR`` panels as keep
    the packed ``Y`` block within :data:`RANGE_Y_L2` (never more than ``b``'s), so that
    both blocks stay in L2 while the micro-kernels stream ``X``'s register rows across
    ``Y``'s block.  Each range packs the whole ``KC x n_j`` panel of ``Y`` once per
    ``k`` tile, so the fewer ranges a thread runs the fewer copies of ``Y`` it makes:
    with the nominal symbolic-extent ``MC`` of 32 register rows (192 fp64 rows)
    PolyBench's 800- and 900-row products took 3 ranges a thread and the copies were
    ~12 % of the CPU samples of each product (``perf``, one thread, 3mm at LARGE);
    with ``MC`` = 510 (fp64, ``KC`` = 160, 1 MiB L2) they take one range a thread.
    Unchanged with ``gemm_tiles`` given, and with ``POLYCOMP_RANGE_BLOCKING=0`` (the
    nominal blocking, for same-process comparisons)."""
    if tiles_given or os.environ.get("POLYCOMP_RANGE_BLOCKING", "1") == "0":
        return b
    panel = b.KC * size
    mc = b.MR * max(1, int(l2_bytes * RANGE_X_L2) // (panel * b.MR))
    nc = b.NR * max(1, int(l2_bytes * RANGE_Y_L2) // (panel * b.NR))
    return replace(b, MC=max(b.MC, mc), NC=min(b.NC, nc))


def range_x_in_place(g: ScopGemm) -> bool:
    """Whether a product that runs by row ranges reads ``X`` where it lies (no packed
    copy; the micro-kernel broadcasts ``X[i][k]`` from the array's ``MR`` rows, as
    :mod:`.scop_symm`'s register tiles do): every product of the update is a bare ``X *
    Y`` (no loop-invariant factor: a packed copy holds ``alpha * X``, which spares the
    micro-kernel a multiply per broadcast) and each ``X`` is read ``X[.., i, k]`` with
    ``k`` the last subscript (its rows are the ranges' rows, the broadcasts of a register
    tile ``MR`` sequential streams).  The copy was a scalar, strided gather of ``MR``
    rows per register row and ``k`` tile, ~4 % of the CPU samples of each of 3mm's
    products at LARGE after :func:`range_blocking` (``perf``, two threads), and the
    busiest thread ran ~10 % longer with it (3mm; gemm, whose ``X`` carries ``alpha``,
    ran ~10 % longer in place).  ``POLYCOMP_RANGE_X_IN_PLACE=0``: always packed."""
    if os.environ.get("POLYCOMP_RANGE_X_IN_PLACE", "1") == "0":
        return False
    v = g.update.value
    if not isinstance(v, ir.Binary) or v.op != "+":
        return False
    rest = v.b if isinstance(v.a, ir.Load) and v.a.buffer is g.update.write else v.a
    iters = tuple(g.update.iters)
    i, k = iters[g.upd_pos["i"]], iters[g.upd_pos["k"]]
    for term, (x, _) in zip(_sum_terms(rest), g.pairs):
        if len(_factor_terms(term)) != 2:
            return False
        if not x.indices or _plain_iter(x.indices[-1], iters) is not k or \
                not any(_plain_iter(ix, iters) is i for ix in x.indices[:-1]):
            return False
    return True


class ScopGemmPass(Pass):
    """See the module docstring."""
    name = "scop-gemm"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        stages = ScopStages.of(schedule, ctx)
        if stages is None:
            return schedule
        ranges = cpu_row_ranges(ctx)
        for st in stages:
            g = match_scop_gemm(st.group)
            if isinstance(g, str):
                ctx.note(self.name, f"{'+'.join(st.names)}: no GEMM ({g})")
                continue
            if ctx.target.vector_lanes(g.dtype) <= 1:
                continue
            b = choose_blocking(g.outer_product(), ctx.target, ctx.cpu_options)
            requests = list(promotion_state(ctx).pack_requests)
            threads = ctx.target.cpu.threads
            by_rows = row_ranges(g, b, threads) and \
                _same_rows(stages.dependences(st), g)
            x_here = False
            if by_rows:
                x_here = range_x_in_place(g)
                b = range_blocking(b, dt.itemsize(g.dtype), ctx.target.l2_bytes,
                                   bool(ctx.cpu_options.gemm_tiles))
                n = len(ranges.ranges)
                names = (f"pc_lo{n}", f"pc_hi{n}")
                new = T.Mark(marks.make(marks.CPU_ROW_RANGES, n).get_name(),
                             scop_gemm_tree(g, b, requests, rows=names,
                                            pack_x=not x_here))
            else:
                new = scop_gemm_tree(g, b, requests, threads=threads)
            if not stages.legal(st, new):
                ctx.note(self.name, f"{g.update.name}: GEMM-like but the tiled tree would "
                                    f"violate a dependence; program order kept")
                continue
            promotion_state(ctx).pack_requests[:] = requests
            stages.replace(st, new)
            if by_rows:
                ctx.restrict_ast_context(range_params(g, names, b.MC))
                dom = g.update.domain
                one = isl.Val.int_from_si(dom.get_ctx(), 1)
                inner = tuple(dom.dim_max(p).sub(dom.dim_min(p)).add_constant_val(one)
                              for p in (g.upd_pos["j"], g.upd_pos["k"]))
                ranges.add(RowRanges(names[0], names[1], dom.dim_min(g.upd_pos["i"]),
                                     dom.dim_max(g.upd_pos["i"]), b.MR, b.MC, threads,
                                     inner, RANGE_MIN_WORK))
            init = f" (init {g.init.name})" if g.init is not None else ""
            cyc = " (a triangle: dealt to the threads cyclically)" if cyclic_tiles(
                g.update.domain, g.upd_pos["i"], g.upd_pos["j"], ctx.target.cpu.threads) \
                and not g.upd_pos["b"] else ""
            prods = " + ".join(f"{x.buffer.name} * {y.buffer.name}" for x, y in g.pairs)
            xs = ", ".join(x.buffer.name for x, _ in g.pairs)
            ys = ", ".join(y.buffer.name for _, y in g.pairs)
            how = f"{xs} read in place, {ys} packed" if x_here else \
                f"packed {xs} (L1) and {ys}"
            ctx.note(self.name, f"{g.update.name}{init}: GEMM {g.update.write.name} += "
                                f"{prods}; register block "
                                f"{b.MR}x{b.NR}, tiles MC={b.MC} NC={b.NC} KC={b.KC}, "
                                f"{how} (L2), parallel over "
                                f"{'row ranges (balanced at run time)' if by_rows else 'i tiles'}"
                                f"{cyc}")
        out = stages.schedule()
        if ranges.ranges:
            # the ranges' parameters belong to the whole schedule (isl's AST generation
            # allows no filter that introduces a parameter)
            sp = out.get_domain().get_space()
            for r in ranges.ranges:
                for name in (r.lo, r.hi):
                    if sp.find_dim_by_name(isl.dim_type.param, name) < 0:
                        k = sp.dim(isl.dim_type.param)
                        sp = sp.add_dims(isl.dim_type.param, 1).set_dim_id(
                            isl.dim_type.param, k, isl.Id(name))
            out = out.align_params(sp)
        return out
