"""Pass ``scop-push``: integer max/min reductions reordered so that a finished element
*pushes* its contribution along a row (the inner loop unit-stride), instead of each
element *pulling* its operands down a column.

Nussinov's kernel (PolyBench's ``nussinov``) fills a triangle row by row, bottom row
first::

    for i (decreasing): for j > i:
        t[i][j] = max(t[i][j], t[i][j-1]); ...            (the cell statements S)
        for k in (i, j): t[i][j] = max(t[i][j], t[i][k] + t[k+1][j])     (U)

``U``'s innermost loop walks ``t[k+1][j]`` down a column (stride ``n``, a cache miss per
iteration).  Every statement of the nest is an update ``t[i][j] = max(t[i][j], e)`` of
the element it writes, ``e`` never reading that element: the element's final value is
the maximum of its initial value and all its ``e`` -- in any order, exactly, for
integers.  So ``U`` may run as ``for k: for j > k: t[i][j] = max(t[i][j], t[i][k] +
t[k+1][j])`` once ``t[i][k]`` is final: the inner ``j`` loop reads ``t[k+1][*]`` and
writes ``t[i][*]`` along rows (gcc vectorises it), ``t[i][k]`` is invariant in it.

Matching (:func:`match_push`), one top-level child of the program-order tree (a
*stage*) whose subtree is a band: every statement is a *reduction update*
(:func:`reduction_update`) ``A[d0][d1] = op(A[d0][d1], e)`` of one 2-D integer array
``A``, with the same ``op`` (``max`` or ``min``: ``Binary`` max/min or a ``Select``
``(p cmp q) ? p : q`` with ``{p, q} = {A[d0][d1], e}``), ``d0, d1`` the statement's first
two loop iterators; exactly one statement ``U`` has a third iterator ``k`` (the others,
the cells ``S``, have two); every read access of a statement to ``A`` either is the
accumulator (its relation equals the write's, as many as the value's structural
``A[d0][d1]`` loads) or never touches the written element (``read ∩ write = ∅`` as
isl maps: ``e`` does not read it); some read of ``U`` moves along a non-last subscript
when ``k`` steps (a column walk), and every read of ``U`` moves by ``0`` or by one in
the last subscript only when ``d1`` steps (isl ``deltas`` of ``r⁻¹ ∘ shift ∘ r``).

Schedule: with ``o`` the stage band's first member (the C row loop, ``-i``)::

    band [o]
      band [c]                c = d1 for S, k for U
        sequence
          filter S_1 .. S_m   (program order)
          filter U:  band [d1]     (coincident)

so a row runs column by column: column ``c``'s cell statements, then ``U``'s updates
with ``k = c`` for every later column.  That is the shape without option ``parallel``;
with it (the default) the ``(d0, d1)`` triangle is cut into ``B x B`` tiles
(:data:`TILE`), ``I = floor(d0/B)``, ``J = floor(d1/B)``, run by wavefronts ``w = J -
I`` with the tiles of a wavefront in parallel (Pluto's tiled wavefront for this
recurrence)::

    mark cpu_wavefront
      band [w, I]                         (I coincident)
        sequence
          filter G:       band [k, d0, d1]            (the products between tiles)
          filter S, U-G:  band [o, d1]                (the C order inside the tile)
                            sequence { S_1 .. S_m; U - G: band [k] }

where ``G = { U : floor((k+1)/B) > I and floor(k/B) < J }``: the updates whose operands
``A[d0][k]`` (tile ``(I, floor(k/B))``) and ``A[k+1][d1]`` (tile ``(floor((k+1)/B),
J)``) lie in earlier wavefronts, so a tile first takes all of them (``d1``
innermost over the whole tile row, unit-stride) and then finishes in the C order with
the operands inside itself or the diagonal tile.  The tiles of one wavefront are
parallel when no required dependence (below) relates two of them (isl:
``restrict_equal`` on ``w``, then no difference in ``I``).

Legality (isl terms): let ``W``, ``R`` be the stage's write and read relations on
``A`` and ``<`` the program order (``lex_lt`` of the input schedule map).  The
*memory* dependences ``(W ∘ R⁻¹ ∪ R ∘ W⁻¹) ∩ <`` (every pair, not isl's transitively
reduced flow/anti/output relations of ``ctx.model``, since the relaxed pairs below are
links of those chains) minus the *relaxed* pairs ``W ∘ W⁻¹`` (two updates of one
element: they touch it only as accumulators, so they commute), together with the
model's dependences of the stage minus the relaxed pairs, must all be respected by the
new tree (:func:`~polycomp.scheduler.common.tree.violated_dependences` empty), else the
stage keeps its schedule with a note.  Respecting them means every read of an element
of ``A`` by some ``e`` still sees exactly the updates of that element that preceded
it in C; since ``op`` is associative and commutative on integers, every ``e`` and
every final element equal the C order's, **bitwise** (also with wrapping ``int``
addition in ``e``: each ``e`` is computed from the same values).

Assumes: the program-order tree (``domain -> sequence`` of top-level filters, or one
subtree), ``ctx.model`` a C SCoP model, a target with vector instructions (the pass is
in the ``cpu`` targets' list before ``scop-stencil``).  ``ctx.model.dependences`` is
not changed: later passes that test the whole tree (``scop-split``) or the stage
(``scop-tile``) against it find the relaxed pairs reversed and leave it alone;
``scop-parallel`` only tests dependences with equal outer schedule, and the inner
``d1`` loop it could mark is one loop deep (not worth a fork).  The relaxed and the
required dependences are recorded in the state slot
:class:`~polycomp.scheduler.common.tree.RelaxedDependences`, which the debug legality
check after every pass (``compile_kernel(..., debug=True)``) applies.

Guarantees: the matched stages' subtrees replaced by the tiled wavefront (with
``parallel``, when legal) or the push tree (when legal), a note per stage saying
which, every other stage unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.islutil import restrict_equal, some_differ
from polycomp.model import Statement
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import (
    RelaxedDependences,
    schedule_map,
    violated_dependences,
)
from polycomp.scheduler.cpu import tree as T
from polycomp.scheduler.cpu.scop_stages import ScopStages, Stage
from polycomp.state import CompileState

#: the side of the square tiles of the ``(d0, d1)`` triangle (the tiled wavefront): a
#: tile of ``int`` is 64 KiB (L2), a row of it 512 bytes (8 AVX-512 vectors per
#: unit-stride loop).  Measured on nussinov at LARGE (2 threads, loaded host, best of
#: 3): tiles of 64 0.69 s, 128 0.56 s, 256 0.61 s
TILE = 128

#: the loop order of the products between tiles (``U``'s iterators ``d0, d1, k``):
#: ``k, d0, d1`` (``d0, k, d1`` measured 1.26-1.36x slower)
GEMM_ORDER = (2, 0, 1)

#: comparison -> whether ``(p cmp q) ? p : q`` is the maximum of ``p`` and ``q``
_KEEPS_LARGER = {">=": True, ">": True, "<=": False, "<": False}


def _is_acc(e: ir.Expr, s: Statement) -> bool:
    """``e`` is a load of the element ``s`` writes (the same subscripts)."""
    return isinstance(e, ir.Load) and e.buffer is s.write and \
        len(e.indices) == len(s.write_indices) and \
        all(ir.structural_equal(a, b) for a, b in zip(e.indices, s.write_indices))


def reduction_update(s: Statement) -> tuple[str, ir.Expr] | None:
    """``(op, e)`` when ``s`` is ``W = op(W, e)`` syntactically (``op`` ``max`` or
    ``min``; see the module docstring) on an integer array, ``e`` of the array's
    dtype and without a structural load of ``W``; else None.  Whether ``e`` reads the
    element through another subscript is checked by :func:`match_push` in isl."""
    if not dt.is_int(s.write.dtype) or s.value.dtype != s.write.dtype:
        return None
    v = s.value
    if isinstance(v, ir.Binary) and v.op in ("max", "min"):
        op, p, q = v.op, v.a, v.b
    elif isinstance(v, ir.Select) and isinstance(v.cond, ir.Binary) and \
            v.cond.op in _KEEPS_LARGER:
        p, q = v.cond.a, v.cond.b
        if ir.structural_equal(v.t, p) and ir.structural_equal(v.f, q):
            first = True
        elif ir.structural_equal(v.t, q) and ir.structural_equal(v.f, p):
            first = False
        else:
            return None
        op = "max" if _KEEPS_LARGER[v.cond.op] == first else "min"
    else:
        return None
    if _is_acc(p, s) and not _is_acc(q, s):
        e = q
    elif _is_acc(q, s) and not _is_acc(p, s):
        e = p
    else:
        return None
    if e.dtype != s.write.dtype or _acc_loads(e, s):
        return None
    return op, e


def _acc_loads(e, s: Statement) -> int:
    n = [0]

    def fn(x):
        if _is_acc(x, s):
            n[0] += 1
    ir.walk(e, fn)
    return n[0]


@dataclass(frozen=True, eq=False)
class PushMatch:
    """A matched stage: the reduction ``op``, the statement ``update`` with the third
    iterator (``U``) and the ``cells`` (program order)."""
    op: str
    update: Statement
    cells: list


def _array(s: Statement) -> str:
    return s.writes[0].relation.get_tuple_name(isl.dim_type.out)


def _step(s: Statement, p: int) -> isl.Map:
    """``S[x] -> S[x + e_p]`` on ``s``'s domain space."""
    sp = s.domain.get_space()
    n = sp.dim(isl.dim_type.set)
    names = [f"x{q}" for q in range(n)]
    out = [f"x{q} + 1" if q == p else f"x{q}" for q in range(n)]
    m = isl.Map(f"{{ {s.name}[{', '.join(names)}] -> {s.name}[{', '.join(out)}] }}",
                context=sp.get_ctx())
    return m.align_params(sp)


def _moves(r: isl.Map, step: isl.Map) -> isl.Set:
    """The subscript deltas of access ``r`` when its iteration steps by ``step``."""
    r = r.align_params(step.get_space())
    return r.reverse().apply_range(step.apply_range(r)).deltas()


def _deltas_within(d: isl.Set, cond: str) -> bool:
    """Every delta in ``d`` (subscripts ``e0, e1, ..``) satisfies ``cond``."""
    n = d.dim(isl.dim_type.set)
    name = d.get_tuple_name() if d.has_tuple_name() else ""
    box = isl.Set(f"{{ {name}[{', '.join(f'e{q}' for q in range(n))}] : {cond} }}",
                  context=d.get_ctx()).align_params(d.get_space())
    return d.align_params(box.get_space()).is_subset(box)


def _accesses_ok(s: Statement) -> bool:
    """The accumulator reads of ``s`` are exactly its value's structural ones, and its
    other reads of the written array never touch the written element."""
    w = s.writes[0].relation
    acc = 0
    for a in s.reads:
        r = a.relation
        if r.get_tuple_name(isl.dim_type.out) != w.get_tuple_name(isl.dim_type.out):
            continue
        r, ww = r.align_params(w.get_space()), w.align_params(r.get_space())
        if r.is_equal(ww):
            acc += 1
        elif not r.intersect(ww).is_empty():
            return False
    return acc == _acc_loads(s.value, s)


def match_push(group: list) -> PushMatch | str:
    """The :class:`PushMatch` of a stage's statements, or why not (a string)."""
    if not group:
        return "no statements"
    ops = set()
    for s in group:
        r = reduction_update(s)
        if r is None:
            return f"{s.name} is not an integer max/min update of the element it writes"
        ops.add(r[0])
        if len(s.write_indices) != 2 or len(s.iters) not in (2, 3) or \
                not all(ir.structural_equal(ix, v)
                        for ix, v in zip(s.write_indices, s.iters[:2])):
            return f"{s.name} does not write A[d0][d1] at its first two iterators"
    if len(ops) != 1 or len({_array(s) for s in group}) != 1:
        return "the updates mix operations or arrays"
    upd = [s for s in group if len(s.iters) == 3]
    if len(upd) != 1:
        return "not exactly one update with a reduction iterator"
    u = upd[0]
    if not all(_accesses_ok(s) for s in group):
        return "an operand reads the element its statement updates"
    arr = _array(u)
    along_k, along_j = _step(u, 2), _step(u, 1)
    column = False
    for a in u.reads:
        n = a.relation.dim(isl.dim_type.out)
        lead = " and ".join([f"e{q} = 0" for q in range(n - 1)] + [f"0 <= e{n - 1} <= 1"])
        if not _deltas_within(_moves(a.relation, along_j), lead):
            return f"{u.name}: a read is not unit-stride along its second iterator"
        if a.relation.get_tuple_name(isl.dim_type.out) == arr and n > 1 and \
                not _deltas_within(_moves(a.relation, along_k), "e0 = 0"):
            column = True
    if not column:
        return f"{u.name} reads no column along its reduction iterator"
    return PushMatch(ops.pop(), u, [s for s in group if s is not u])


def _var(s: Statement, p: int) -> isl.UnionPwAff:
    ls = isl.LocalSpace.from_space(s.domain.get_space())
    aff = isl.Aff.var_on_domain(ls, isl.dim_type.set, p)
    return isl.UnionPwAff.from_pw_aff(isl.PwAff.from_aff(aff).intersect_domain(s.domain))


def push_tree(m: PushMatch, outer: isl.UnionPwAff):
    """The stage subtree of the module docstring (``outer``: the band member ``o``)."""
    c = T.union_members([_var(s, 1) for s in m.cells] + [_var(m.update, 2)])
    kids = [T.Filter(isl.UnionSet.from_set(s.domain)) for s in m.cells]
    kids.append(T.Filter(isl.UnionSet.from_set(m.update.domain),
                         T.Band([_var(m.update, 1)], coincident=[True])))
    return T.Band([outer], T.Band([c], T.Sequence(kids)))


def _pa(s: Statement, p: int) -> isl.PwAff:
    ls = isl.LocalSpace.from_space(s.domain.get_space())
    return isl.PwAff.from_aff(isl.Aff.var_on_domain(ls, isl.dim_type.set, p))


def _floor(pa: isl.PwAff, b: int) -> isl.PwAff:
    return pa.scale_down_val(isl.Val.int_from_si(pa.get_ctx(), b)).floor()


def _upa(stmts: list, f) -> isl.UnionPwAff:
    return T.union_members([isl.UnionPwAff.from_pw_aff(f(s).intersect_domain(s.domain))
                            for s in stmts])


def wavefront_tree(m: PushMatch, outer: isl.UnionPwAff, b: int):
    """The tiled wavefront subtree of the module docstring (tiles ``b x b`` of the
    ``(d0, d1)`` triangle); returns ``(tree, w, tile)``, the wavefront and tile members
    (for the coincidence check)."""
    stmts = m.cells + [m.update]
    w = _upa(stmts, lambda s: _floor(_pa(s, 1), b).sub(_floor(_pa(s, 0), b)))
    tile = _upa(stmts, lambda s: _floor(_pa(s, 0), b))
    u = m.update
    i, j, k = (_pa(u, p) for p in range(3))
    one = isl.PwAff.from_aff(isl.Aff.val_on_domain(
        isl.LocalSpace.from_space(u.domain.get_space()), isl.Val.one(u.domain.get_ctx())))
    g = _floor(k.add(one), b).gt_set(_floor(i, b)) \
        .intersect(_floor(k, b).lt_set(_floor(j, b))).intersect(u.domain)
    rest = u.domain.subtract(g)
    gemm = T.Band([_var(u, p) for p in GEMM_ORDER],
                  coincident=[False, True, True])
    kids = [T.Filter(isl.UnionSet.from_set(s.domain)) for s in m.cells]
    kids.append(T.Filter(isl.UnionSet.from_set(rest),
                         T.Band([_var(u, 1)], coincident=[True])))
    c = T.union_members([_var(s, 1) for s in m.cells] + [_var(u, 2)])
    cells = T.Band([outer, c], T.Sequence(kids))
    cell_dom = isl.UnionSet.from_set(rest)
    for s in m.cells:
        cell_dom = cell_dom.union(isl.UnionSet.from_set(s.domain))
    seq = T.Sequence([T.Filter(isl.UnionSet.from_set(g), gemm), T.Filter(cell_dom, cells)])
    band = T.Band([w, tile], seq, coincident=[False, True])
    return T.Mark(marks.CPU_WAVEFRONT, band), w, tile


def tiles_parallel(required: isl.UnionMap, w: isl.UnionPwAff, tile: isl.UnionPwAff) -> bool:
    """No required dependence relates two tiles of one wavefront (equal ``w``,
    different ``tile``): the wavefront's tiles may run in parallel."""
    same = restrict_equal(required, isl.UnionMap.from_union_pw_aff(w))
    return not some_differ(same, isl.UnionMap.from_union_pw_aff(tile))


def required_dependences(stages: ScopStages, stage: Stage) \
        -> tuple[isl.UnionMap, isl.UnionMap]:
    """``(required, relaxed)``: the dependences the reordered stage must respect
    (memory dependences on ``A`` and the model's, minus the relaxed pairs) and the
    relaxed pairs (module docstring)."""
    writes = [s.writes[0].relation for s in stage.group]
    arr = writes[0].get_tuple_name(isl.dim_type.out)
    reads = [a.relation for s in stage.group for a in s.reads
             if a.relation.get_tuple_name(isl.dim_type.out) == arr]
    space = stages.domain.get_space()
    W = isl.UnionMap.empty(space)
    R = isl.UnionMap.empty(space)
    for w in writes:
        W = W.union(isl.UnionMap.from_map(w))
    for r in reads:
        R = R.union(isl.UnionMap.from_map(r))
    order = schedule_map(stages.original).intersect_domain(stage.filter)
    before = order.lex_lt_union_map(order)
    conflicts = W.apply_range(R.reverse()).union(R.apply_range(W.reverse())) \
        .intersect(before)
    relaxed = W.apply_range(W.reverse())
    return conflicts.union(stages.dependences(stage)).subtract(relaxed), relaxed


class ScopPushPass(Pass):
    """See the module docstring."""
    name = "scop-push"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        stages = ScopStages.of(schedule, ctx)
        if stages is None:
            return schedule
        for st, m in stages.matched(match_push):
            if not isinstance(st.sub, T.Band) or not st.sub.members:
                continue
            outer = st.sub.members[0]
            deps, relaxed = required_dependences(stages, st)
            done = None
            if ctx.cpu_options.parallel:
                node, w, tile = wavefront_tree(m, outer, TILE)
                if not violated_dependences(stages.trial(st, node), deps).is_empty():
                    ctx.note(self.name, f"{m.update.name}: tiled wavefront not made: it "
                                        "would violate a dependence")
                elif not tiles_parallel(deps, w, tile):
                    ctx.note(self.name, f"{m.update.name}: tiled wavefront not made: "
                                        "tiles of one wavefront depend on each other")
                else:
                    done = node, f"{TILE}x{TILE} tiles by wavefronts (parallel), the " \
                                 f"products between tiles rows pushed"
            if done is None:
                node = push_tree(m, outer)
                if violated_dependences(stages.trial(st, node), deps).is_empty():
                    done = node, f"rows pushed, {m.update.name}'s reduction iterator " \
                                 f"outside its unit-stride loop"
            if done is None:
                ctx.note(self.name, f"{m.update.name}: push order not made: it would "
                                    "violate a dependence")
                continue
            stages.replace(st, done[0])
            ctx.slot(RelaxedDependences).add(relaxed, deps)
            ctx.note(self.name, f"{op_text(m)}: {done[1]}")
        return stages.schedule()


def op_text(m: PushMatch) -> str:
    return f"{m.op} reduction into {m.update.write.name} " \
        f"({'+'.join(s.name for s in m.cells + [m.update])})"


__all__ = ["ScopPushPass", "match_push", "push_tree", "reduction_update",
           "required_dependences", "PushMatch"]
