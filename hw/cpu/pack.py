"""IR pass: realise ``cpu_pack`` marks — copy an operand's tile into a packed buffer and
read it from there.

Assumes: the IR straight from the isl AST (not simplified yet: loop iterators still
carry isl's names ``c0, c1, ...`` = schedule dimensions, degenerate loops are lets), with
``AttrStmt("cpu_pack", "<n>")`` marks from :mod:`polycomp.scheduler.promotion.cpu_pack`;
``promotion_state(state).packs[n]`` is the typed
:class:`~polycomp.scheduler.promotion.record.PackedOperand` of the mark: the array, the
box (sizes ``s``, piecewise offsets ``origin`` on the prefix schedule ``c_0 ..
c_{d-1}``) and the packed-panel layout (dimension ``p`` in panels of ``w``).

Guarantees: at each mark, with ``o = origin(c_0, .., c_{d-1})`` evaluated on the loops
around it, the body becomes

    copy:  P[slot, x_p // w, x_0.., x_{p-1}, x_{p+1}.., x_p mod w] = A[o + x]
           for every x in the box clipped to A's extents
    body:  with every read A[e] replaced by P[slot, layout(e - o)]

``P`` is a new global buffer: one leading *slot* dimension per enclosing loop that may run
in parallel (annotated coincident, or the first loop below a ``cpu_parallel`` mark:
the loops nested in that one run in sequence in its thread), indexed by that loop's
iteration, so concurrent iterations never share a copy (a coincident loop whose
extent varies with an outer loop gets no slot when it is not the loop right below a
``cpu_parallel`` mark, the one ``omp-parallel`` may make parallel: a triangle's ``j``
tiles run in sequence inside a thread; the contraction pass later
gives each thread its own, smaller buffer), then the panel layout.  Reads below the
mark only touch elements of the footprint, which the box contains and the copy
filled in this iteration, so every read returns the value it read before.  ``layout``
splits ``e_p - o_p`` into panel and lane with range analysis of the enclosing loops
(``64*c4 + c7`` with ``0 <= c7 < 64`` gives panel ``c4``, lane ``c7``) and falls back to
``//`` and ``%``.  When the mark is outside every parallel loop, the copy loop nest is
wrapped in a ``cpu_parallel`` mark.  The element values and every other access are
unchanged.

Packings for a dot-product unit (a layout with a *group*, an ``offset``, a
``compensate``; see :class:`~polycomp.scheduler.promotion.record.PackRequest`) copy with
:meth:`_Packer.copy_grouped` instead: whole panels and whole groups, zero beyond the
array (the unit multiplies the padding); an ``offset`` stores ``x ^ -offset`` (the
unsigned byte ``x + offset``) and the reads decode it (``P ^ -offset``), so values are
unchanged; ``compensate`` also writes the lanes' column sums ``S = -c * sum y`` and
rewrites each micro-kernel nest below the mark (:class:`_Compensate`): ``C += S`` over
the nest's output points, then the product ``(x + c) * y``, which adds the same to every
output element.  :func:`packed_buffers` records each packed buffer's array and layout
for the micro-kernel pass.

A *filled* operand (:class:`PackedOperand` ``fill``, a few-row GEMM's ``Y``) gets the
buffer but no copy: :func:`fill_first_row` gives each micro-kernel mark of the first
iteration of the register-row loop a fill nest ``for k: for jj: P[layout(e - o)] =
A[e]`` over the tile's own ranges (the later iterations read what it stored); where
the body is not of the form it assumes it returns None and the copy is made.  With
``stream`` (a ``Y`` from memory) every mark of the register-row loop also gets a
prefetch nest of the next block's lines (:class:`NextBlock`), which the micro-kernel
pass moves into the tile's ``k`` loop: the next block arrives during this one's FMAs.

A *pre-packed* operand (:class:`PackedOperand` ``prepacked``, option ``prepack``: an
input the caller packs once, :class:`~polycomp.scheduler.promotion.record.PrepackedInput`)
gets no copy and no buffer: the input argument ``A`` is replaced among the function's
inputs by a buffer of the same name holding the whole array in the packing's layout
(``layout.shape(A's extents)``), and the reads below the mark become ``P[layout(e)]``
(origin 0).  Every read of ``A`` must be below such a mark (the scheduler checks it;
a read left over is an internal error, never a silent read of the wrong layout).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import islpy as isl

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import PolycompInternalError
from polycomp.hw.cpu.prefetch import LINE_BYTES
from polycomp.lowering.ast_to_ir import origin_to_ir
from polycomp.lowering.simplify import const_difference, simplify, upper_bound
from polycomp.scheduler.common import marks
from polycomp.scheduler.promotion.footprint import Layout
from polycomp.scheduler.promotion.record import PackedOperand, promotion_state
from polycomp.state import CompileState

# --------------------------------------------------------------------------- affine helpers


def _linear(e):
    """``({Var: coeff}, const)`` for a sum of integer multiples of Vars, else None."""
    if isinstance(e, ir.IntImm):
        return {}, e.value
    if isinstance(e, ir.Var):
        return {e: 1}, 0
    if isinstance(e, ir.Binary) and e.op in ("+", "-"):
        a, b = _linear(e.a), _linear(e.b)
        if a is None or b is None:
            return None
        s = 1 if e.op == "+" else -1
        t = dict(a[0])
        for v, c in b[0].items():
            t[v] = t.get(v, 0) + s * c
        return t, a[1] + s * b[1]
    if isinstance(e, ir.Binary) and e.op == "*":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, ir.IntImm):
                a = _linear(x)
                if a is None:
                    return None
                return {v: c * y.value for v, c in a[0].items()}, a[1] * y.value
        return None
    if isinstance(e, ir.Unary) and e.op == "neg":
        a = _linear(e.a)
        return None if a is None else ({v: -c for v, c in a[0].items()}, -a[1])
    return None


def _nonneg(e, loops) -> bool:
    """Whether ``e`` is ``sum(c * v) + c0`` with every ``c``, ``c0 >= 0`` and every ``v``
    the variable of one of the For ``loops`` whose minimum is a constant ``>= 0`` (so
    ``e >= 0`` wherever it is evaluated below them)."""
    lin = _linear(simplify(e))
    if lin is None:
        return False
    terms, const = lin
    mins = {lp.var: lp.min for lp in loops}
    return const >= 0 and all(
        c >= 0 and v in mins and isinstance(mins[v], ir.IntImm) and mins[v].value >= 0
        for v, c in terms.items())


def _bound_over(e: ir.Expr, ranges: dict) -> int | None:
    """A constant upper bound of ``e``: :func:`upper_bound`'s, else, for ``e`` affine in
    Vars of ``ranges`` (Var -> (lo, hi) inclusive), its maximum over those ranges."""
    ub = upper_bound(e)
    if ub is not None:
        return ub
    lin = _linear(e)
    if lin is None or any(v not in ranges for v in lin[0]):
        return None
    terms, const = lin
    return const + sum(max(c * ranges[v][0], c * ranges[v][1]) for v, c in terms.items())


def _build(terms: dict, const: int) -> ir.Expr:
    out: ir.Expr = ir.IntImm(const)
    for v, c in terms.items():
        if c:
            out = out + (v if c == 1 else v * c)
    return simplify(out)


def divmod_ranged(e: ir.Expr, w: int, ranges: dict):
    """``(e // w, e mod w)`` simplified when the terms of ``e`` not divisible by ``w``
    provably stay in ``[0, w)`` over ``ranges`` (Var -> (lo, hi) inclusive)."""
    e = simplify(e)
    lin = _linear(e)
    if lin is not None:
        terms, const = lin
        q = {v: c // w for v, c in terms.items() if c % w == 0}
        r = {v: c for v, c in terms.items() if c % w != 0}
        cq, cr = divmod(const, w)
        lo = hi = cr
        ok = True
        for v, c in r.items():
            if v not in ranges:
                ok = False
                break
            a, b = ranges[v]
            lo += min(c * a, c * b)
            hi += max(c * a, c * b)
        if ok and lo >= 0 and hi < w:
            return _build(q, cq), _build(r, cr)
    return simplify(e // w), simplify(e % w)


# --------------------------------------------------------------------------- the pass

#: the IR attribute around a packing copy of 16-bit floats: each store copies the bits
#: it loads (or a zero), so the printer may copy them without widening to float and
#: rounding back (:class:`polycomp.hw.cpu.vector_printer.VectorPrinter`)
RAW_COPY = "raw_copy"

#: panels at most this wide across the rows of a 2-d array are copied reading their
#: rows side by side (:meth:`_Packer.copy`)
ROWS_INTERLEAVED_MAX = 16


@dataclass(eq=False)
class PackedBuffers:
    """What the packing pass made, for the code-generation passes, by packed buffer
    name (names are unique in a function): the array it holds and its layout."""
    arrays: dict[str, str] = field(default_factory=dict)
    layouts: dict[str, Layout] = field(default_factory=dict)


def packed_buffers(state: CompileState) -> PackedBuffers:
    """The packed buffers of ``state``'s compile (the C backend's typed state)."""
    return state.slot(PackedBuffers)


#: ``par`` right below a ``cpu_parallel`` mark (parallel_marks: the first ``For`` there
#: becomes an OpenMP loop when coincident, no loop inside it does)
_MARK = "mark"


class _Packer:
    def __init__(self, func: ir.LoweredFunc, state: CompileState):
        self.func = func
        self.model = state.model
        self.packs = promotion_state(state).packs
        self.records = promotion_state(state).prepacked
        self.made = packed_buffers(state)
        self.buffers = {b.name: b for b in func.args}
        ir.walk(func.body, self._collect)
        self.allocs: list = []
        self.claimed: set = set()    # ids of the loops omp-parallel may make parallel
        self.count = 0
        self.filled = 0              # packings filled by their first row tile (no copy)
        # pre-packed inputs: array name -> (the argument buffer, the packed buffer that
        # replaces it among the function's inputs)
        self.prepacked: dict[str, tuple[ir.Buffer, ir.Buffer]] = {}
        import os
        order = os.environ.get("POLYCOMP_PACK_ORDER", "rows4")
        self.rows_outer = int(order[4:]) if order.startswith("rows") else 0

    def _collect(self, n):
        if isinstance(n, ir.Allocate):
            self.buffers.setdefault(n.buffer.name, n.buffer)

    def run(self):
        body = self.stmt(self.func.body, {}, [], False)
        aliases = {id(p.alias): self.buffers[p.array] for p in self.packs
                   if p.alias is not None and p.array in self.buffers}
        if aliases:     # loads of one-reference packings left unpacked: the array again
            body = _Unalias(aliases).visit(body)
        for b in self.allocs:
            body = ir.Allocate(b, body)
        for rec in self.records:    # a pre-packed input no mark reached (an empty product)
            arr = self.buffers.get(rec.name)
            if rec.name not in self.prepacked and arr is not None:
                self.prepacked[rec.name] = (arr, ir.Buffer(
                    arr.name, arr.dtype, tuple(ir.IntImm(n) for n in rec.packed_shape),
                    arr.scope))
        if not self.prepacked:
            return self.func.with_body(body)
        old = {id(a): p for a, p in self.prepacked.values()}
        left: list = []
        ir.walk(body, lambda n: left.append(n.buffer.name) if isinstance(n, ir.Load)
                and id(n.buffer) in old else None)
        if left:
            raise PolycompInternalError(f"pre-packed input {left[0]!r} is also read outside "
                                        f"the product that reads it packed")
        return replace(self.func, body=body,
                       inputs=tuple(old.get(id(b), b) for b in self.func.inputs))

    # env: name -> Var of enclosing iterators; loops: enclosing For and whether they
    # may run concurrently (coincident, or parallel); par: below a cpu_parallel mark
    # (MARK right below it: the next For is the one omp-parallel may make parallel)
    def stmt(self, s, env, loops, par):
        if isinstance(s, ir.For):
            env2 = dict(env, **{s.var.name: s.var})
            coincident = bool(s.annotation("coincident", False))
            # below a cpu_parallel mark only the first loop may become the parallel one
            # (hw/cpu/parallel_marks): a loop nested in it runs in sequence in one thread
            p = coincident or par is _MARK or s.kind == "parallel"
            if s.kind == "parallel" or (par is _MARK and coincident):
                self.claimed.add(id(s))
            return ir.For(s.var, s.min, s.extent, s.kind,
                          self.stmt(s.body, env2, loops + [(s, p)],
                                    bool(par) or s.kind == "parallel"), s.annotations)
        if isinstance(s, ir.LetStmt):
            env2 = dict(env, **{s.var.name: s.var})
            return ir.LetStmt(s.var, s.value, self.stmt(s.body, env2, loops, par))
        if isinstance(s, ir.AttrStmt):
            if s.key == marks.CPU_PACK:
                return self.pack(s, env, loops, par)
            mark = _MARK if s.key == marks.CPU_PARALLEL and not par else par
            return ir.AttrStmt(s.key, s.value, self.stmt(s.body, env, loops, mark))
        if isinstance(s, ir.Block):
            return ir.Block(tuple(self.stmt(x, env, loops, par) for x in s.stmts))
        if isinstance(s, ir.IfThenElse):
            orelse = self.stmt(s.orelse, env, loops, par) if s.orelse is not None else None
            return ir.IfThenElse(s.cond, self.stmt(s.then, env, loops, par), orelse)
        if isinstance(s, ir.Allocate):
            return ir.Allocate(s.buffer, self.stmt(s.body, env, loops, par))
        return s

    def origin(self, origin: isl.MultiPwAff, env) -> list | None:
        return origin_to_ir(origin, env, self.model)

    def pack(self, s: ir.AttrStmt, env, loops, par):
        spec: PackedOperand = self.packs[int(s.value)]
        fp = spec.footprint
        arr = self.buffers.get(spec.array)
        body = self.stmt(s.body, env, loops, par)
        if arr is None:
            return body
        if spec.prepacked:
            return self.read_prepacked(spec, arr, body, [lp for lp, _ in loops])
        origin = self.origin(fp.origin(), env)
        if origin is None or len(origin) != len(arr.shape):
            return body
        slots = []
        # (a strided loop's variable is let-bound from its normalised counter)
        inner = {x.var for x, _ in loops} | set(env.values())
        for lp, p in loops:
            if not p:
                continue
            if any(v in inner for v in ir.free_vars(lp.extent)):
                if id(lp) in self.claimed:
                    return body   # slot extent varies with an outer loop: do not pack
                # (a triangle's j tiles: coincident, but no thread runs them
                # concurrently, so they share the copy of the parallel loop around)
                continue
            slots.append(lp)
        self.count += 1
        shape = tuple(lp.extent for lp in slots) + tuple(ir.IntImm(n) for n in fp.shape)
        pbuf = ir.Buffer(f"{arr.name}_pk{self.count}", arr.dtype, shape)
        self.allocs.append(pbuf)
        self.made.arrays[pbuf.name] = arr.name
        self.made.layouts[pbuf.name] = fp.layout
        slot_idx = tuple(ir.Binary("-", lp.var, lp.min, "int64") for lp in slots)
        sums = None
        if spec.compensate:
            # the column sums of the packed block: one int32 per lane of each panel
            p, w = fp.layout.dim, fp.layout.width
            sums = ir.Buffer(f"{arr.name}_pk{self.count}_sum", "int32", tuple(
                lp.extent for lp in slots) + (ir.IntImm(-(-fp.box.sizes[p] // w)), ir.IntImm(w)))
            self.allocs.append(sums)
        if spec.fill and fp.layout.group == 1 and not spec.offset and sums is None and \
                _common_factor(body, spec.alias or arr, self.func.body) is None:
            stream = _next_block(origin, fp.box.sizes, arr, [lp for lp, _ in loops],
                                 spec.stream_aim) if spec.stream else None
            filled = fill_first_row(body, spec.alias or arr, pbuf, fp.layout, origin,
                                    slot_idx, f"c{len(origin_dims(fp.origin()))}", stream)
            if filled is not None:
                self.filled += 1
                return filled
        if fp.layout.group > 1 or spec.offset or sums is not None:
            copy = self.copy_grouped(arr, pbuf, fp.layout, fp.box.sizes, origin, slot_idx,
                                     spec.offset, sums, spec.compensate)
        else:
            scale = _common_factor(body, spec.alias or arr, self.func.body)
            if scale is not None:     # every read is f * A[e]: pack f * A, read P
                body = _Unscale(spec.alias or arr, scale).visit(body)
            copy = self.copy(arr, pbuf, fp.layout, fp.box.sizes, origin, slot_idx,
                             [lp for lp, _ in loops], scale, spec.prefetch_rows)
        if not par:
            copy = ir.AttrStmt(marks.CPU_PARALLEL, "", copy)
        body = _Redirect(spec.alias or arr, pbuf, fp.layout, origin, slot_idx,
                         spec.offset).visit(body)
        if sums is not None:
            body = _Compensate(pbuf, sums, len(slot_idx), len(arr.shape),
                               spec.compensate).visit(body)
        return ir.seq(copy, body)

    def read_prepacked(self, spec: PackedOperand, arr: ir.Buffer, body: ir.Stmt,
                       loops: Sequence[ir.For] = ()) -> ir.Stmt:
        """A pre-packed input (:class:`PackedOperand` ``prepacked``): no copy; the reads
        of ``arr`` below the mark read the argument that replaces it, the whole array in
        the packing's layout (origin 0: ``A[e]`` -> ``P[layout(e)]``, the panel and
        lane split with the ranges of the loops around the mark, ``loops``, and below
        it: a thread's share of the ``j`` tiles, ``c1 * NC + c4 * NR + c7`` with ``c4 <
        3 - c1``, splits into ``c1``, ``c4``, ``c7`` only with ``c1``'s range known)."""
        rec = next(r for r in self.records if r.name == arr.name)
        lay = rec.layout
        got = self.prepacked.get(arr.name)
        if got is None:
            pbuf = ir.Buffer(arr.name, arr.dtype, tuple(ir.IntImm(n) for n in rec.packed_shape),
                             arr.scope)
            self.prepacked[arr.name] = (arr, pbuf)
            self.made.arrays[pbuf.name] = arr.name
            self.made.layouts[pbuf.name] = lay
        else:
            pbuf = got[1]
        zero = [ir.IntImm(0)] * len(arr.shape)
        red = _Redirect(spec.alias or arr, pbuf, lay, zero, (), bounded=True)
        for lp in loops:     # outermost first: each extent bounded over the outer ranges
            red.enter(lp)
        return red.visit(body)

    def copy_grouped(self, arr, pbuf, layout: Layout, box, origin, slot_idx, offset: int,
                     sums, compensate: int):
        """The copy of a packing for a dot-product unit: whole panels (lanes beyond the
        array zero) and whole groups of the grouped dimension (zero beyond the array),
        each element ``x`` stored as ``x ^ -offset`` (its byte read unsigned is ``x +
        offset``); with ``sums``, ``sums[slot, panel, lane] = -compensate * (the sum of
        the lane's elements over the other dimensions)``.  Per panel: the lanes and
        groups inside the array without conditions (the array's contiguous dimension
        read in order: lanes outside the group when it is the panel dimension, inside
        when it is the grouped one; the ``group`` elements of a lane stored together),
        then the last, partial group under a condition, then the lanes beyond the array
        as zeros.  A 16-bit float copy is wrapped in ``AttrStmt("raw_copy")``: the
        printer copies the stored bits (no widening and rounding back)."""
        p, w = layout.dim, layout.width
        gd, G = (layout.group_dim, layout.group) if layout.group > 1 else (-1, 1)
        n = len(arr.shape)
        c = self.count
        xs = [ir.Var(f"pk{c}_x{d}") for d in range(n)]
        # the box starts at the first element read (origin = the footprint's minimum,
        # and every access of the model stays in bounds): it starts inside the array
        lo = [ir.IntImm(0)] * n
        hi = [simplify(ir.min_(ir.IntImm(box[d]), arr.shape[d] - origin[d])) for d in range(n)]
        q, lane, pg, g = (ir.Var(f"pk{c}_{v}") for v in ("q", "l", "p", "g"))
        xpos: list = list(xs)
        xpos[p] = q * w + lane
        if gd >= 0:
            xpos[gd] = pg * G + g
        idx_arr = tuple(simplify(origin[d] + xpos[d]) for d in range(n))
        load: ir.Expr = ir.Load(arr, idx_arr, arr.dtype)
        value = ir.bitwise("^", load, ir.IntImm(-offset, arr.dtype)) if offset else load
        zero: ir.Expr = ir.IntImm(0, arr.dtype) if arr.dtype in dt.INTS \
            else ir.FloatImm(0.0, arr.dtype)
        ranges = {lane: (0, w - 1), g: (0, G - 1)}
        at = slot_idx + tuple(layout.index([simplify(x) for x in xpos],
                                           lambda e, m: divmod_ranged(e, m, ranges)))
        at_sum = slot_idx + (q, lane)
        acc = sums is None      # the sums accumulate over the non-panel dimensions

        def element(cond=None) -> ir.Stmt:
            v = value if cond is None else ir.Select(cond, value, zero, arr.dtype)
            st: ir.Stmt = ir.Store(pbuf, at, v)
            if sums is not None:
                add: ir.Expr = ir.Cast(load, "int32")
                if cond is not None:
                    add = ir.Select(cond, add, ir.IntImm(0, "int32"), "int32")
                st = ir.seq(st, ir.Store(sums, at_sum, ir.Binary(
                    "+", ir.Load(sums, at_sum, "int32"), add, "int32")))
            return st

        def loop(v, ext, b, coincident=True, mn=None):
            return ir.For(v, mn if mn is not None else ir.IntImm(0), simplify(ext), "serial",
                          b, (("coincident", coincident),))
        others = [d for d in range(n) if d not in (p, gd)]

        def around(b, coincident):
            for d in reversed(others):
                b = ir.For(xs[d], lo[d], simplify(hi[d] - lo[d]), "serial", b,
                           (("coincident", coincident),))
            return b
        lanes_q = ir.min_(ir.IntImm(w), hi[p] - q * w)      # the lanes inside the array
        n_q = simplify((hi[p] + (w - 1)) // w)
        parts: list[ir.Stmt] = []
        if gd < 0:
            parts.append(around(loop(lane, lanes_q, element()), True))
            pad = loop(lane, ir.IntImm(w) - lanes_q, ir.Store(pbuf, at, zero), mn=lanes_q)
        else:
            full, n_pg = simplify(hi[gd] // G), simplify((hi[gd] + (G - 1)) // G)
            last = ir.Binary("<", xpos[gd], hi[gd], "bool")

            def groups(pgs, body):
                if p == n - 1:      # the panel dimension is contiguous: lanes inside
                    return loop(pg, pgs, loop(lane, lanes_q, loop(g, ir.IntImm(G), body,
                                                                  acc)), acc)
                return loop(lane, lanes_q, loop(pg, pgs, loop(g, ir.IntImm(G), body, acc),
                                                acc))
            parts.append(around(groups(full, element()), acc))
            tail = ir.LetStmt(pg, full, loop(lane, lanes_q, loop(g, ir.IntImm(G),
                                                                  element(last), acc)))
            parts.append(ir.IfThenElse(ir.Binary(">", hi[gd] % G, ir.IntImm(0), "bool"),
                                       around(tail, acc)))
            pad = loop(pg, n_pg, loop(lane, ir.IntImm(w) - lanes_q, loop(
                g, ir.IntImm(G), ir.Store(pbuf, at, zero)), mn=lanes_q))
        if others:
            pad = around(pad, True)
        parts.append(pad)
        nest: ir.Stmt = loop(q, n_q, ir.seq(*parts))
        if arr.dtype in ("float16", "bfloat16"):
            nest = ir.AttrStmt(RAW_COPY, "", nest)
        if sums is None:
            return nest
        zero_sums = loop(q, n_q, loop(lane, ir.IntImm(w),
                                      ir.Store(sums, at_sum, ir.IntImm(0, "int32"))))
        scale = loop(q, n_q, loop(lane, ir.IntImm(w), ir.Store(sums, at_sum, ir.Binary(
            "*", ir.Load(sums, at_sum, "int32"), ir.IntImm(-compensate, "int32"), "int32"))))
        return ir.seq(zero_sums, nest, scale)

    def copy(self, arr, pbuf, layout: Layout, box, origin, slot_idx, loops=(), scale=None,
             prefetch_rows: int = 0):
        """The loop nest filling the packed buffer (panel, other dimensions, lane);
        ``loops``: the For loops around the mark (an origin that is a non-negative
        combination of loop variables counting up from non-negative minimums starts
        the copy at 0, not at ``max(0, -origin)``); ``scale``: the factor each element
        is multiplied by (see :func:`_common_factor`); ``prefetch_rows``: in the
        row-block copy, each row of the first panel starts by prefetching (for
        reading) the lines of the box's row that many rows on (clamped to the array's
        last row and column)."""
        p, w = layout.dim, layout.width
        n = len(arr.shape)
        xs = [ir.Var(f"pk{self.count}_x{d}") for d in range(n)]
        lo = [ir.IntImm(0) if _nonneg(origin[d], loops) else
              simplify(ir.max_(ir.IntImm(0), ir.Unary("neg", origin[d], "int64")))
              for d in range(n)]
        hi = [simplify(ir.min_(ir.IntImm(box[d]), arr.shape[d] - origin[d])) for d in range(n)]
        q = ir.Var(f"pk{self.count}_q")
        lane = ir.Var(f"pk{self.count}_l")
        xp = q * w + lane
        idx_arr = tuple(simplify(origin[d] + (xp if d == p else xs[d])) for d in range(n))
        idx_p = slot_idx + (q,) + tuple(xs[d] for d in range(n) if d != p) + (lane,)
        value: ir.Expr = ir.Load(arr, idx_arr, arr.dtype)
        if scale is not None:
            value = ir.Binary("*", scale, value, arr.dtype)
        st = ir.Store(pbuf, idx_p, value)
        lane_lo = simplify(ir.max_(lo[p] - q * w, ir.IntImm(0)))
        lane_hi = simplify(ir.min_(ir.IntImm(w), hi[p] - q * w))
        def lane_loop(b):
            return ir.For(lane, lane_lo, simplify(lane_hi - lane_lo), "serial", b,
                          (("coincident", True),))
        others = [d for d in range(n) if d != p]
        n_q = simplify((hi[p] + (w - 1)) // w)
        if p == n - 1 and self.rows_outer > 0 and len(others) == 1:
            # the array's contiguous dimension is the panel: blocks of RB rows of the box
            # are read left to right into all panels (row block, panel, row, lanes): RB
            # sequential streams instead of one line per row and panel (a new page per
            # row when the rows are long), and RB consecutive rows of each panel written
            # together (all panels of one row at once would be as many write streams,
            # one panel apart: the same L1 set)
            d = others[0]
            RB = self.rows_outer
            xb, r = ir.Var(f"pk{self.count}_xb"), ir.Var(f"pk{self.count}_r")
            ext = simplify(hi[d] - lo[d])
            row_body: ir.Stmt = lane_loop(st)
            if prefetch_rows > 0 and isinstance(box[p], int):
                per_line = max(1, LINE_BYTES // dt.itemsize(arr.dtype))
                ahead = simplify(ir.min_(origin[d] + xs[d] + prefetch_rows,
                                         arr.shape[d] - 1))
                cols = sorted(set(range(0, box[p], per_line)) | {box[p] - 1})
                pf = [ir.Evaluate(ir.Call("prefetch", (ir.Load(arr, tuple(
                    ahead if e == d else simplify(ir.min_(origin[p] + c, arr.shape[p] - 1))
                    for e in range(n)), arr.dtype), ir.IntImm(0)), "int32", pure=False))
                    for c in cols]
                row_body = ir.seq(ir.IfThenElse(ir.Binary("==", q, ir.IntImm(0), "bool"),
                                                ir.seq(*pf), None), row_body)
            rows = ir.For(r, ir.IntImm(0), simplify(ir.min_(ir.IntImm(RB), ext - xb * RB)),
                          "serial", ir.LetStmt(xs[d], simplify(lo[d] + xb * RB + r),
                                               row_body), (("coincident", True),))
            panels = ir.For(q, ir.IntImm(0), n_q, "serial", rows, (("coincident", True),))
            return ir.For(xb, ir.IntImm(0), simplify((ext + (RB - 1)) // RB), "serial", panels,
                          (("coincident", True),))
        if p == n - 1:        # the array's contiguous dimension is the panel: lanes innermost
            body = lane_loop(st)
            for d in reversed(others):
                body = ir.For(xs[d], lo[d], simplify(hi[d] - lo[d]), "serial", body,
                              (("coincident", True),))
        elif len(others) == 1 and w <= ROWS_INTERLEAVED_MAX and ir.is_const(lo[p], 0):
            # narrow panels across the rows of a 2-d array (X of a GEMM, MR rows): the
            # full panels read their w rows side by side (w sequential read streams, the
            # panel written in order), the last, partial panel as below; reading one
            # row after the other touches a new page for each short row segment, which
            # the hardware prefetchers pick up too late (X's copy was ~8% of a 1024^3
            # product on Zen 4)
            d = others[0]
            full = simplify(hi[p] // w)
            xd = ir.For(xs[d], lo[d], simplify(hi[d] - lo[d]), "serial",
                        ir.For(lane, ir.IntImm(0), ir.IntImm(w), "unrolled", st,
                               (("coincident", True), ("unroll", w))), (("coincident", True),))
            head = ir.For(q, ir.IntImm(0), full, "serial", xd, (("coincident", True),))
            tail = ir.For(xs[d], lo[d], simplify(hi[d] - lo[d]), "serial", st,
                          (("coincident", True),))
            tail = ir.For(q, full, simplify(n_q - full), "serial", lane_loop(tail),
                          (("coincident", True),))
            return ir.seq(head, tail)
        else:                 # keep the array's last dimension innermost for reading
            body = st
            for d in reversed(others):
                body = ir.For(xs[d], lo[d], simplify(hi[d] - lo[d]), "serial", body,
                              (("coincident", True),))
            body = lane_loop(body)
        return ir.For(q, ir.IntImm(0), n_q, "serial", body, (("coincident", True),))


class _Redirect(ir.Mutator):
    """Reads of ``arr`` below the mark -> the packed buffer (ranges of loops tracked);
    with an ``offset``, the packed element decoded (``P ^ -offset``, see
    :meth:`_Packer.copy_grouped`)."""

    def __init__(self, arr, pbuf, layout: Layout, origin, slot_idx, offset: int = 0,
                 bounded: bool = False):
        self.arr, self.pbuf, self.layout = arr, pbuf, layout
        self.bounded = bounded   # ranges also from loops of bounded, non-constant extent
        self.origin, self.slot = origin, slot_idx
        self.offset = offset
        self.ranges: dict = {}

    def enter(self, s: ir.For) -> None:
        """Record the range of the loop ``s`` (as :meth:`visit_For` does for the loops
        below the mark), when known."""
        mn, ext = simplify(s.min), simplify(s.extent)
        ub = _bound_over(ext, self.ranges) if self.bounded else \
            (ext.value if isinstance(ext, ir.IntImm) else None)
        if isinstance(mn, ir.IntImm) and ub is not None and ub > 0:
            self.ranges[s.var] = (mn.value, mn.value + ub - 1)

    def visit_For(self, s):
        saved = self.ranges.get(s.var)
        self.enter(s)
        body = self.visit(s.body)
        if saved is None:
            self.ranges.pop(s.var, None)
        else:
            self.ranges[s.var] = saved
        return ir.For(s.var, s.min, s.extent, s.kind, body, s.annotations)

    def visit_Load(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        if e.buffer is not self.arr:
            return ir.Load(e.buffer, idx, e.dtype, e.lanes)
        rel = [simplify(idx[d] - self.origin[d]) for d in range(len(idx))]
        new = self.slot + self.layout.index(rel, lambda x, w: divmod_ranged(x, w, self.ranges))
        out: ir.Expr = ir.Load(self.pbuf, new, e.dtype, e.lanes)
        if self.offset:
            out = ir.bitwise("^", out, ir.IntImm(-self.offset, e.dtype))
        return out


def _invariant_scalar(e, stored: set) -> bool:
    """``e`` is a scalar with no loop variable, reading only buffers nothing stores to
    (``alpha[0]``): the same value wherever in the function it is evaluated."""
    if getattr(e, "lanes", 1) != 1 or ir.free_vars(e):
        return False
    ok = [True]

    def visit(n):
        if isinstance(n, ir.Load) and n.buffer.name in stored:
            ok[0] = False
        elif isinstance(n, ir.Call) and not n.pure:
            ok[0] = False
    ir.walk(e, visit)
    return ok[0]


def _common_factor(body, arr, func_body):
    """The factor ``f`` when every read of ``arr`` in ``body`` is an operand of a
    product ``f * arr[e]`` (or ``arr[e] * f``) with the same loop-invariant scalar ``f``
    (PolyBench gemm's ``alpha * A[i][k]``), else None.  Packing ``f * A`` then reading
    the packed element in place of the product gives every use the same value, bit for
    bit (one rounding, the same one), and takes a scalar multiply and a broadcast
    from a register out of each row of the micro-kernel's ``k`` loop."""
    stored = set()
    ir.walk(func_body, lambda n: stored.add(n.buffer.name) if isinstance(n, ir.Store) else None)
    loads, scaled, factors = [0], [0], []

    def visit(n):
        if isinstance(n, ir.Load) and n.buffer is arr:
            loads[0] += 1
        elif isinstance(n, ir.Binary) and n.op == "*" and n.dtype == arr.dtype:
            for a, f in ((n.a, n.b), (n.b, n.a)):
                if isinstance(a, ir.Load) and a.buffer is arr and a.lanes == 1 and \
                        _invariant_scalar(f, stored):
                    scaled[0] += 1
                    factors.append(f)
                    break
    ir.walk(body, visit)
    if not factors or scaled[0] != loads[0] or \
            any(not ir.structural_equal(f, factors[0]) for f in factors[1:]):
        return None
    return factors[0]


class _Unscale(ir.Mutator):
    """``f * arr[e]`` -> ``arr[e]`` (its packed read then holds ``f * arr[e]``)."""

    def __init__(self, arr, factor):
        self.arr, self.factor = arr, factor

    def visit_Binary(self, e):
        if e.op == "*":
            for a, f in ((e.a, e.b), (e.b, e.a)):
                if isinstance(a, ir.Load) and a.buffer is self.arr and \
                        ir.structural_equal(f, self.factor):
                    return a
        return self.generic(e)


class _Unalias(ir.Mutator):
    """Loads of a one-reference packing's alias buffer (:class:`PackedOperand` ``alias``)
    that no packing redirected (a branch outside the mark, a refused copy) -> loads of
    the array itself."""

    def __init__(self, aliases: dict):
        self.aliases = aliases

    def visit_Load(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        return ir.Load(self.aliases.get(id(e.buffer), e.buffer), idx, e.dtype, e.lanes)


class _Alias(ir.Mutator):
    """Loads of the references in ``swaps`` (``(Access, alias buffer)``) -> the alias."""

    def __init__(self, swaps: list):
        self.swaps = swaps

    def visit_Load(self, e):
        for a, alias in self.swaps:
            if e.buffer is a.buffer and len(e.indices) == len(a.indices) and all(
                    ir.structural_equal(x, y) for x, y in zip(e.indices, a.indices)):
                return ir.Load(alias, e.indices, e.dtype, e.lanes)
        return e


def aliased_statement_builders(state: CompileState, var) -> dict:
    """Statement builders for lowering (:meth:`Backend.lowering_statements`): each
    statement with a reference packed on its own (a :class:`PackedOperand` with an
    ``alias``) reads that reference from the alias buffer (same array, a distinct
    object), so :class:`_Redirect` of that packing rewrites exactly its loads; every
    other statement is left to the model's builders."""
    packs = [p for p in promotion_state(state).packs if p.alias is not None]
    if not packs:
        return {}
    out = {}
    for st in state.model.statements:
        swaps = []
        for p in packs:
            for a in st.reads:
                if a.tag == p.reference:
                    swaps.append((a, p.alias))
        if not swaps:
            continue

        def make(args, st=st, swaps=swaps):
            value = _Alias(swaps).visit(st.value)
            return ir.substitute(ir.Store(st.write, st.write_indices, value),
                                 dict(zip(st.iters, args)))
        out[st.name] = make
    return out


class _Compensate(ir.Mutator):
    """Below a packing with column sums (``compensate`` = c): in each micro-kernel nest
    (``AttrStmt cpu_microkernel``) whose one store is ``C[o] = C[o] + x * y`` with ``y``
    reading the packed buffer, the product becomes ``(x + c) * y`` and a nest over the
    same output points, ``C[o] = C[o] + sums[slot, panel, lane]`` (``sums = -c * sum of
    y``, see :meth:`_Packer.copy_grouped`), runs first: per output element the nest adds
    ``sum (x + c) y - c sum y = sum x y`` as before.  A nest of another shape is left
    as it is (its values are unchanged either way)."""

    def __init__(self, pbuf, sums, n_slots: int, ndim: int, c: int):
        self.pbuf, self.sums, self.ns, self.ndim, self.c = pbuf, sums, n_slots, ndim, c

    def visit_AttrStmt(self, s):
        if s.key != marks.CPU_MICROKERNEL:
            return self.generic(s)
        stores: list = []
        ir.walk(s.body, lambda n: stores.append(n) if isinstance(n, ir.Store) else None)
        if len(stores) != 1:
            return s
        st = stores[0]
        v = st.value
        if not (isinstance(v, ir.Binary) and v.op == "+" and isinstance(v.a, ir.Load)
                and v.a.buffer is st.buffer and isinstance(v.b, ir.Binary) and v.b.op == "*"):
            return s
        prod = v.b
        y_load = x = y = None
        for xx, yy in ((prod.a, prod.b), (prod.b, prod.a)):
            ys = [n for n in _loads(yy) if n.buffer is self.pbuf]
            if len(ys) == 1 and not [n for n in _loads(xx) if n.buffer is self.pbuf]:
                y_load, x, y = ys[0], xx, yy
                break
        if y_load is None or x is None or y is None:
            return s
        ns = self.ns
        at = tuple(y_load.indices[:ns]) + (y_load.indices[ns], y_load.indices[ns + self.ndim])
        kept = {v for ix in st.indices for v in ir.free_vars(ix)}
        at_vars = {v for ix in at for v in ir.free_vars(ix)}
        fresh: dict = {}

        def correction(node):
            """The loops around the store that its output index uses (not the reduction
            loops), with fresh iterators, around ``C[o] += sums[..]``."""
            if isinstance(node, ir.For):
                inner = correction(node.body)
                if inner is None:
                    return None
                if node.var not in kept:
                    return None if node.var in at_vars else inner
                nv = fresh.setdefault(node.var, ir.Var(node.var.name + "_cs", node.var.dtype))
                return ir.For(nv, node.min, node.extent, node.kind, inner, node.annotations)
            if isinstance(node, ir.LetStmt):
                inner = correction(node.body)
                return None if inner is None else ir.LetStmt(node.var, node.value, inner)
            if node is st:
                add = ir.Load(self.sums, at, "int32")
                return ir.Store(st.buffer, st.indices, ir.Binary(
                    "+", ir.Load(st.buffer, st.indices, st.buffer.dtype), ir.Cast(
                        add, st.buffer.dtype) if st.buffer.dtype != "int32" else add,
                    st.buffer.dtype))
            return None
        corr = correction(s.body)
        if corr is None:
            return s
        corr = ir.substitute(corr, fresh)
        c = ir.IntImm(self.c, x.dtype)
        new_prod = ir.Binary("*", ir.Binary("+", x, c, x.dtype), y, prod.dtype)
        new_store = ir.Store(st.buffer, st.indices, ir.Binary("+", v.a, new_prod, v.dtype),
                             st.lanes)
        body = _ReplaceStmt(st, new_store).visit(s.body)
        return ir.AttrStmt(s.key, s.value, ir.seq(corr, body))


class _ReplaceStmt(ir.Mutator):
    def __init__(self, old, new):
        self.old, self.new = old, new

    def visit_Store(self, s):
        return self.new if s is self.old else s


def _loads(e) -> list:
    out: list = []
    ir.walk(e, lambda n: out.append(n) if isinstance(n, ir.Load) else None)
    return out


def pack(func: ir.LoweredFunc, state: CompileState) -> ir.LoweredFunc:
    """Realise every ``cpu_pack`` mark of ``func`` from ``promotion_state(state).packs``
    (see the module docstring)."""
    p = _Packer(func, state)
    out = p.run()
    return out.counted(filled_packs=p.filled) if p.filled else out


# --------------------------------------------------------------------------- fill


def _loads_of(node, buf) -> list:
    out: list = []
    ir.walk(node, lambda n: out.append(n) if isinstance(n, ir.Load) and n.buffer is buf
            else None)
    return out


def _micro_marks(node) -> list:
    out: list = []
    ir.walk(node, lambda n: out.append(n) if isinstance(n, ir.AttrStmt)
            and n.key == marks.CPU_MICROKERNEL and n.value in ("", None) else None)
    return out


def _row_loop(body, arr, name: str):
    """The outermost ``For`` (or ``LetStmt``: a loop of one iteration) of ``body``
    binding the variable ``name`` (the register-row tile loop of the GEMM tree right
    below a ``Y`` pack mark: schedule dimension ``c<d>``, ``d`` the mark's depth) that
    holds a micro-kernel mark reading ``arr``."""
    stack = [body]
    while stack:
        n = stack.pop(0)
        if isinstance(n, (ir.For, ir.LetStmt)) and n.var.name == name:
            if any(_loads_of(m, arr) for m in _micro_marks(n.body)):
                return n
            continue
        stack.extend(c for c in ir.children(n) if isinstance(c, ir.Stmt))
    return None


def _tile_loops(mark: ir.AttrStmt):
    """``(k loops, row loop, column loop, store)`` of a micro-kernel mark's nest (the
    form :func:`polycomp.hw.cpu.microkernel._match` takes), or None."""
    loops = []
    node = mark.body
    while isinstance(node, ir.For):
        loops.append(node)
        node = node.body
    if len(loops) < 3 or not isinstance(node, ir.Store) or node.lanes != 1:
        return None
    return loops[:-2], loops[-2], loops[-1], node


@dataclass(frozen=True)
class NextBlock:
    """Where the block after the current one of a packed 2-d array lies (the next
    iteration of the innermost loop around the pack whose variable the block's origin
    uses, wrapping to the next block of the other dimension): ``dim`` the dimension
    that loop steps, ``origin`` the current block's origin, ``sizes`` the block's box,
    ``extents`` the array's (constant) extents.  Where that loop does not start at 0
    (a thread's own chunk of ``j`` tiles, the few-row split's ``k``-outer order,
    :func:`polycomp.scheduler.cpu.backbone_tile.thread_k_outer`) it wraps at its own
    last iteration (``last``) to its first iteration's block (``first``: ``origin[dim]``
    there) instead of at the array's end.  ``aim``: how many elements past the first of
    each prefetched line the prefetch's address lies (``PackedOperand.stream_aim``)."""
    dim: int
    origin: tuple
    sizes: tuple[int, ...]
    extents: tuple[int, ...]
    last: ir.Expr | None = None
    first: ir.Expr | None = None
    aim: int = 0

    def index(self, e: Sequence[ir.Expr]) -> tuple:
        """``e`` (an element of the current block) moved to the same place in the next
        block, clamped into the array (an address that always exists: a prefetch there
        is harmless where the next block is partial or there is none)."""
        p, q = self.dim, 1 - self.dim
        wrap = self.last if self.last is not None else ir.Binary(
            ">=", self.origin[p] + self.sizes[p], ir.IntImm(self.extents[p]), "bool")
        back = self.origin[p] if self.first is None else self.origin[p] - self.first
        if len(e) == 1:     # the flat (row-major) index of the 2-d array
            stride = (self.extents[1], 1)
            step = ir.Select(wrap, ir.IntImm(self.sizes[q] * stride[q]) -
                             back * stride[p], ir.IntImm(self.sizes[p] * stride[p]),
                             "int64")
            return (simplify(ir.min_(e[0] + step,
                                     ir.IntImm(self.extents[0] * self.extents[1] - 1))),)
        out: list[ir.Expr] = [ir.IntImm(0), ir.IntImm(0)]
        out[p] = ir.min_(ir.Select(wrap, e[p] - back, e[p] + self.sizes[p], "int64"),
                         ir.IntImm(self.extents[p] - 1))
        out[q] = ir.min_(ir.Select(wrap, e[q] + self.sizes[q], e[q], "int64"),
                         ir.IntImm(self.extents[q] - 1))
        return tuple(simplify(x) for x in out)


def _next_block(origin, sizes, arr: ir.Buffer, loops, aim: int = 0) -> NextBlock | None:
    """The :class:`NextBlock` of a 2-d packed ``arr`` of constant extents whose block
    ``origin`` (one expression per dimension) is a function of the enclosing ``loops``
    (outermost first): the innermost of them used by one dimension's origin is the loop
    that steps to the next block; None when there is no such loop (one block) or the
    array is not of that form.  A stepping loop that starts at 0 wraps at the array's
    end; one that starts elsewhere (a thread's chunk) at its own last iteration.
    ``aim``: :attr:`NextBlock.aim`."""
    if len(origin) != 2 or len(sizes) != 2 or \
            not all(isinstance(d, ir.IntImm) for d in arr.shape):
        return None
    for lp in reversed(loops):
        dims = [d for d in range(2) if uses_var(origin[d], lp.var)]
        if len(dims) == 1:
            last = first = None
            if not (isinstance(lp.min, ir.IntImm) and lp.min.value == 0):
                last = ir.Binary(">=", lp.var + 1, lp.min + lp.extent, "bool")
                first = simplify(ir.substitute(origin[dims[0]], {lp.var: lp.min}))
            return NextBlock(dims[0], tuple(origin), tuple(int(x) for x in sizes),
                             tuple(d.value for d in arr.shape), last, first, aim)
        if dims:
            return None
    return None


class _Fill(ir.Mutator):
    """Each micro-kernel mark below the row loop: ``if (first) <fill nest>`` prefixed to
    its body (see :func:`fill_first_row`); ``fills`` counts them.  With ``stream``
    (``(NextBlock, row)``, ``row`` the register row tile's number from 0) each mark
    also gets ``for k..: prefetch(A[next(e)])`` after the fill nest, at the column of
    line ``row mod lines`` of the tile's row segment (``lines`` cache lines; the
    address ``NextBlock.aim`` elements past that line's first); with
    ``tiles`` (the row loop's constant extent) below ``lines``, ``each = ceil(lines /
    tiles)`` prefetches per ``k``, lines ``(row * each + n) mod lines``."""

    def __init__(self, arr, source, first: ir.Expr, stream=None):
        self.arr, self.source, self.first, self.stream = arr, source, first, stream
        self.fills = 0
        self.streams = 0
        self.bad = False

    def visit_AttrStmt(self, s):
        if s.key != marks.CPU_MICROKERNEL or s.value not in ("", None):
            return self.generic(s)
        reads = _loads_of(s.body, self.arr)
        if not reads:
            return s
        m = _tile_loops(s)
        if m is None:
            self.bad = True
            return s
        lk, li, lj, _st = m
        ld = reads[0]
        if any(not all(_same(a, b) for a, b in zip(r.indices, ld.indices)) for r in reads) \
                or any(uses_var(ix, li.var) for ix in ld.indices) \
                or not any(uses_var(ix, lj.var) for ix in ld.indices):
            self.bad = True
            return s
        # fresh loop variables (each For binds its own); the same ranges as the tile's
        fresh = {lp.var: ir.Var(f"{lp.var.name}_f", lp.var.dtype) for lp in (*lk, lj)}
        src = ir.Load(self.source, tuple(ir.substitute(ix, fresh) for ix in ld.indices),
                      ld.dtype)
        nest: ir.Stmt = ir.Store(self.arr, (), src)      # F[] = A[e]: _FillRedirect's
        for lp in (*lk, lj)[::-1]:
            nest = ir.For(fresh[lp.var], lp.min, lp.extent, "serial", nest,
                          (("coincident", lp is lj),))
        self.fills += 1
        pf = self.prefetches(lk, lj, ld)
        return ir.AttrStmt(s.key, s.value, ir.Block(
            (ir.IfThenElse(self.first, nest),) + ((pf,) if pf is not None else ()) +
            (s.body,)))

    def prefetches(self, lk, lj, ld) -> ir.Stmt | None:
        """``for k..: prefetch(A[next(e)])`` (see the class) or None."""
        width = simplify(lj.extent)
        if self.stream is None or not isinstance(width, ir.IntImm) or len(ld.indices) > 2:
            return None
        nxt, row, tiles = self.stream
        per_line = max(1, LINE_BYTES // dt.itemsize(ld.dtype))
        lines = max(1, -(-width.value // per_line))
        # fewer row tiles than lines: each prefetches ceil(lines / tiles) lines
        each = -(-lines // tiles) if isinstance(tiles, int) and 0 < tiles < lines else 1
        fresh = {lp.var: ir.Var(f"{lp.var.name}_p", lp.var.dtype) for lp in lk}
        calls = []
        for n in range(each):
            line = ir.Binary("%", row * each + n if each > 1 else row, ir.IntImm(lines),
                             "int64")
            col = ir.Binary("*", line, ir.IntImm(per_line), "int64")
            if nxt.aim:
                col = ir.Binary("+", col, ir.IntImm(nxt.aim), "int64")
            at = nxt.index([ir.substitute(ix, {**fresh, lj.var: col}) for ix in ld.indices])
            calls.append(ir.Evaluate(ir.Call(
                "prefetch", (ir.Load(self.source, at, ld.dtype), ir.IntImm(0)), "int32",
                pure=False)))
        nest: ir.Stmt = calls[0] if len(calls) == 1 else ir.Block(tuple(calls))
        for lp in lk[::-1]:
            nest = ir.For(fresh[lp.var], lp.min, lp.extent, "serial", nest)
        self.streams += 1
        return nest


def _same(a, b) -> bool:
    d = const_difference(a, b)
    return d == 0


def uses_var(e, v) -> bool:
    return v in ir.free_vars(e)


class _FillRedirect(_Redirect):
    """:class:`_Redirect`, and each fill store ``A[] = A'[e]`` (``A`` the array, no
    index; ``A'`` its source alias) becomes ``P[layout(e - o)] = A'[e]``."""

    def visit_Store(self, s):
        if s.buffer is self.arr and not s.indices:
            ld = s.value
            packed = self.visit_Load(ir.Load(self.arr, ld.indices, ld.dtype))
            return ir.Store(self.pbuf, packed.indices, ld, s.lanes)
        return self.generic(s)


def fill_first_row(body: ir.Stmt, arr: ir.Buffer, pbuf: ir.Buffer, layout: Layout,
                   origin, slot_idx, row_name: str,
                   stream: NextBlock | None = None) -> ir.Stmt | None:
    """The body of a ``fill`` packing (:class:`PackedOperand` ``fill``) with no copy
    pass, or None where the body is not of the form assumed (the caller then copies).

    Assumes ``body`` (the IR below the mark) holds a loop ``R`` (the register-row tile
    loop, :func:`_row_loop`, at least one iteration) that contains every read of
    ``arr`` but those in the statements after it in its block (the partial row tile
    of an isolated band, reading the same columns and ``k``), each inside a
    micro-kernel mark over ``for k..: for ii: for jj: C[..] = ..`` whose reads of
    ``arr`` are one index ``e``, free of ``ii`` and using ``jj``; no ``cpu_parallel``
    mark below (``R`` runs in sequence in one thread) and no loop bound or condition
    inside ``R`` depends on ``R``'s variable (every iteration runs the same tiles over
    the same columns and ``k``).

    Guarantees: each such mark's body becomes ``if (r == r_min) <fill>; <nest>`` with
    ``<fill> = for k..: for jj: P[layout(e - o)] = A[e]`` over the nest's own ranges
    (its ``k`` and ``jj`` loops), and every read of ``arr`` below the mark reads ``P``
    (as the copy's redirect).  In ``R``'s first iteration each tile writes exactly the
    packed elements it then reads; the later iterations read the same elements (the
    same loops, ``e`` free of ``ii`` and ``r``), so every read returns ``A[e]`` as
    with the copy.  The micro-kernel pass fuses the fill into the tile's ``k`` loop
    (:func:`polycomp.hw.cpu.microkernel._fixed_tile`'s ``fill``); unfused, the fill
    nest runs before the tile (a vector copy of the tile's panel).

    ``stream`` (where the next block lies, :class:`NextBlock`; packings with
    :class:`PackedOperand` ``stream``): in the loop ``R`` case each mark's body also
    gets, between the fill nest and the nest, ``for k..: prefetch(A[n])``, ``n`` the
    element of the next block at the tile's ``k`` and at line ``(r - r_min) mod lines``
    of the tile's row segment (clamped into the array): prefetches change no value."""
    bad: list = []
    ir.walk(body, lambda n: bad.append(n) if isinstance(n, ir.AttrStmt)
            and n.key == marks.CPU_PARALLEL else None)
    row = _row_loop(body, arr, row_name)
    if not bad and row is None and not _binds(body, row_name):
        # isl left no loop for the row tiles (one full row tile, then maybe a partial
        # one): the first statement reading arr fills, the later ones read
        piece = _first_piece(body, arr)
        if piece is None or len(_loads_of(piece, arr)) + len(_after(body, piece, arr)) != \
                len(_loads_of(body, arr)):
            return None
        f = _Fill(arr, ir.Buffer(arr.name, arr.dtype, arr.shape, arr.scope, arr.flat),
                  ir.IntImm(1, "bool"))
        new_piece = f.visit(piece)
        if f.bad or not f.fills:
            return None
        out = _FillRedirect(arr, pbuf, layout, origin, slot_idx).visit(
            _ReplaceLoop(piece, new_piece).visit(body))
        return _Unalias({id(f.source): arr}).visit(out)
    if bad or row is None or len(_loads_of(row, arr)) + len(_after(body, row, arr)) != \
            len(_loads_of(body, arr)):
        return None
    r = row.var
    if isinstance(row, ir.LetStmt):     # one row tile: each tile fills what it reads
        f = _Fill(arr, ir.Buffer(arr.name, arr.dtype, arr.shape, arr.scope, arr.flat),
                  ir.Binary("==", r, row.value, "bool"))
        new_body = f.visit(row.body)
        if f.bad or not f.fills:
            return None
        out = _FillRedirect(arr, pbuf, layout, origin, slot_idx).visit(
            _replace_stmt(body, row, ir.LetStmt(r, row.value, new_body)))
        return _Unalias({id(f.source): arr}).visit(out)

    def varies(n):
        if isinstance(n, ir.For) and (uses_var(n.min, r) or uses_var(n.extent, r)) or \
                isinstance(n, ir.IfThenElse) and uses_var(n.cond, r):
            bad.append(n)
    ir.walk(row.body, varies)
    if bad:
        return None
    source = ir.Buffer(arr.name, arr.dtype, arr.shape, arr.scope, arr.flat)
    f = _Fill(arr, source, ir.Binary("==", r, row.min, "bool"),
              None if stream is None else (stream, ir.Binary("-", r, row.min, "int64"),
                                           _const_extent(row.extent)))
    new_row = f.visit(row.body)
    if f.bad or not f.fills:
        return None
    body = _replace_stmt(body, row, ir.For(r, row.min, row.extent, row.kind, new_row,
                                           row.annotations))
    out = _FillRedirect(arr, pbuf, layout, origin, slot_idx).visit(body)
    return _Unalias({id(source): arr}).visit(out)


def _const_extent(e) -> int | None:
    e = simplify(e)
    return e.value if isinstance(e, ir.IntImm) else None


def _first_piece(node, arr):
    """The first statement of a block of ``node`` that reads ``arr`` (down a chain of
    allocations and marks), or ``node`` itself when it is no block; None if none."""
    while isinstance(node, ir.Allocate) or \
            (isinstance(node, ir.AttrStmt) and node.key != marks.CPU_MICROKERNEL):
        node = node.body
    if isinstance(node, ir.Block):
        return next((x for x in node.stmts if _loads_of(x, arr)), None)
    return node if _loads_of(node, arr) else None


def _binds(body, name: str) -> bool:
    """Whether a loop or let of ``body`` binds a variable called ``name``."""
    found: list = []
    ir.walk(body, lambda n: found.append(n) if isinstance(n, (ir.For, ir.LetStmt))
            and n.var.name == name else None)
    return bool(found)


def _after(body, row: ir.For, arr) -> list:
    """The reads of ``arr`` in the statements after ``row`` in the block holding it (the
    partial register row tile of an isolated band, run after the full ones)."""
    out: list = []

    def visit(n):
        if isinstance(n, ir.Block) and any(x is row for x in n.stmts):
            q = next(i for i, x in enumerate(n.stmts) if x is row)
            for x in n.stmts[q + 1:]:
                out.extend(_loads_of(x, arr))
    ir.walk(body, visit)
    return out


class _ReplaceLoop(ir.Mutator):
    def __init__(self, old, new):
        self.old, self.new = old, new

    def visit_For(self, s):
        return self.new if s is self.old else self.generic(s)

    def visit_LetStmt(self, s):
        return self.new if s is self.old else self.generic(s)

    def visit_Block(self, s):
        return ir.Block(tuple(self.new if x is self.old else self.visit(x) for x in s.stmts))


def origin_dims(origin: isl.MultiPwAff) -> range:
    """The prefix schedule dimensions ``c_0 .. c_{d-1}`` a pack's origin is a function
    of (``d``: the depth of its mark)."""
    return range(origin.get_space().dim(isl.dim_type.in_))


def _replace_stmt(root, old, new):
    return _ReplaceLoop(old, new).visit(root)
