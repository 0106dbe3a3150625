"""IR pass: software prefetch of the next row in row-wise vector loop nests.

A row-wise kernel (softmax, layernorm, a row reduction) makes several vector passes
over one row of its input and then moves to the next row.  When a row spans a few
pages or less, the hardware prefetchers (which follow streams within a 4 KiB page)
start cold on every row: the first pass over a row waits for memory, while the
compute-heavy pass (softmax's ``exp``) leaves the memory system idle.  This pass
makes the compute-heavy pass fetch the next row, so memory and arithmetic overlap.

Assumes: flattened and vectorised IR (vector loads have ``Ramp`` indices; the
vectoriser's loops carry the ``vectorized`` annotation); run just before printing.

Let ``R`` be a loop (variable ``r``, not itself a vector loop) and ``V1 .. Vk`` the
vector loops directly in its body (not inside a deeper loop or a condition).  A *row*
is the part of an argument a ``Vi`` with a constant extent ``T`` touches in row ``r``:
its unit-stride vector loads of an input (or stores to an output) at
``Ramp(s*r + c*v + e, 1, L)`` with ``s``, ``c`` positive constants, ``v`` the loop's
variable, ``e`` free of ``r``, ``v`` and every variable bound inside ``R``, and
``T*c <= s`` (rows do not overlap): ``T*c`` elements from ``s*r + e`` (the smallest
``e`` of the group).  Nothing happens when no row is found; when the rows add up to
more than ``max_bytes`` (they would not stay cached until used); when ``R``'s body
makes a single vector pass over the row (its main vector loop, with or without the
``vector_remainder`` loop after it: one pass over consecutive rows is one continuous
stream, which the hardware prefetchers follow by themselves); when no ``Vi`` has a
constant positive extent; or when the chosen loop is too short to spread the rows
(more than :data:`MAX_PER_ITERATION` prefetches per row, or twice that in all, per
iteration).

Guarantees: the busiest main (not ``vector_remainder``) ``Vi`` with a constant extent
(floating-point calls count ten, floating-point operators one) starts each iteration
with prefetches of every row, in row ``r' = min(r + 1, last r)``: inputs for reading
(``__builtin_prefetch(ptr, 0, 3)``), outputs for writing (``__builtin_prefetch(ptr, 1,
3)``); a row's 64-byte lines are spread evenly over the loop's iterations and the line
numbers clamped to the row, so every address lies inside its array.  A prefetch never
faults and changes no value: the results are those of the input IR.
``counts.prefetched_loops`` counts the loops that received prefetches.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.lowering.simplify import simplify
from polycomp.lowering.vectorize_analysis import affine_in, uses
from polycomp.scheduler.common import marks

LINE_BYTES = 64


def _is_vector_loop(s) -> bool:
    return isinstance(s, ir.For) and s.annotation("vectorized", None) is not None


#: at most this many prefetches per iteration of the loop that issues them (a core
#: tracks only about ten outstanding misses; longer bursts would mostly be dropped)
MAX_PER_ITERATION = 8


def _work(stmt) -> int:
    """Floating-point work of ``stmt``: calls (``exp``, ...) count ten, arithmetic
    operators one; integer (address) arithmetic does not count."""
    n = [0]

    def fn(e):
        if isinstance(e, ir.Call) and e.dtype in ("float32", "float64"):
            n[0] += 10
        elif isinstance(e, (ir.Binary, ir.Unary)) and e.dtype in ("float32", "float64"):
            n[0] += 1
    ir.walk(stmt, fn)
    return n[0]


def _bound_inside(stmt) -> set:
    """Variables bound inside ``stmt`` (loop variables and lets)."""
    out = set()
    ir.walk(stmt, lambda n: out.add(n.var) if isinstance(n, (ir.For, ir.LetStmt)) else None)
    return out


@dataclass
class _Row:
    """The part of a row a vector loop reads (``write`` False) or writes: elements
    ``[start, start + elems)`` of ``buffer`` in row ``r``, ``start = s*r + ...``."""
    buffer: ir.Buffer
    write: bool
    start: ir.Expr
    elems: int


def _rows(vloop: ir.For, r: ir.Var, inputs: frozenset, outputs: frozenset,
          bound: set) -> list:
    """The input rows ``vloop`` reads and the output rows it writes in row ``r``: its
    unit-stride vector accesses at ``Ramp(s*r + c*v + e, 1, L)`` (``s``, ``c`` positive
    constants, ``v`` its variable, ``e`` free of the variables in ``bound``: those
    bound inside the row loop) whose ``extent * c`` elements per row do not reach the
    next row (``<= s``)."""
    if not isinstance(vloop.extent, ir.IntImm):
        return []
    inner = bound - {vloop.var}
    groups: dict = {}

    def fn(n):
        if isinstance(n, ir.Load) and n.buffer in inputs:
            write = False
        elif isinstance(n, ir.Store) and n.buffer in outputs:
            write = True
        else:
            return
        idx = n.indices[0]
        if not (isinstance(idx, ir.Ramp) and ir.is_const(idx.stride, 1)):
            return
        a, b = affine_in(idx.base, r), affine_in(idx.base, vloop.var)
        if a is None or b is None or not isinstance(a[0], int) or not isinstance(b[0], int) \
                or a[0] <= 0 or b[0] <= 0:
            return
        if any(uses(idx.base, v) for v in inner):
            return
        start = simplify(ir.substitute(idx.base, {vloop.var: vloop.min}))
        groups.setdefault((n.buffer, write, a[0], b[0]), []).append(start)
    ir.walk(vloop.body, fn)
    out = []
    for (buf, write, s, c), starts in groups.items():
        offs = [simplify(x - starts[0]) for x in starts]
        if not all(isinstance(o, ir.IntImm) for o in offs):
            continue
        elems = vloop.extent.value * c
        if elems > s:
            continue
        lo = min(o.value for o in offs)
        out.append(_Row(buf, write, simplify(starts[0] + lo), elems))
    return out


def _prefetches(vloop: ir.For, r: ir.Var, last_r: ir.Expr, row: _Row) -> list:
    """Prefetches of ``row`` in row ``min(r + 1, last_r)`` spread over ``vloop``'s
    iterations: each iteration asks for the next ``q`` of the row's cache lines (the
    line numbers clamped to the row, so every address lies inside the array)."""
    esize = dt.itemsize(row.buffer.dtype)
    per_line = max(1, LINE_BYTES // esize)
    lines = -(-row.elems * esize // LINE_BYTES)
    assert isinstance(vloop.extent, ir.IntImm)       # _rows only finds rows of such loops
    q = -(-lines // vloop.extent.value)
    nxt = simplify(ir.substitute(row.start, {r: ir.Binary("min", r + 1, last_r, "int64")}))
    out = []
    for j in range(q):
        line = ir.Binary("min", (vloop.var - vloop.min) * q + j, ir.IntImm(lines - 1), "int64")
        at = simplify(nxt + line * per_line)
        out.append(ir.Evaluate(ir.Call(
            "prefetch", (ir.Load(row.buffer, (at,), row.buffer.dtype), ir.IntImm(int(row.write))),
            "int32", pure=False)))
    return out


class _Prefetch(ir.Mutator):
    def __init__(self, inputs: frozenset, outputs: frozenset, max_bytes: int):
        self.inputs, self.outputs, self.max_bytes = inputs, outputs, max_bytes
        self.count = 0

    def visit_For(self, s):
        body = self.visit(s.body)
        s = s if body is s.body else replace(s, body=body)
        if _is_vector_loop(s):
            return s
        stack, vloops = [s.body], []
        while stack:                 # vector loops in s's body, not inside another loop
            n = stack.pop()          # or a condition (they would run in every row)
            if _is_vector_loop(n):
                vloops.append(n)
            elif not isinstance(n, (ir.For, ir.IfThenElse)):
                stack.extend(c for c in ir.children(n) if isinstance(c, ir.Stmt))
        passes = [v for v in vloops if not v.annotation("vector_remainder", False)]
        if len(passes) < 2:
            return s
        bound = _bound_inside(s.body)
        rows: dict = {}
        for v in vloops:
            for row in _rows(v, s.var, self.inputs, self.outputs, bound):
                key = (row.buffer, row.write)
                if key not in rows or rows[key].elems < row.elems:
                    rows[key] = row
        nbytes = sum(w.elems * dt.itemsize(w.buffer.dtype) for w in rows.values())
        busy = [v for v in passes if isinstance(v.extent, ir.IntImm) and v.extent.value > 0]
        if not rows or nbytes > self.max_bytes or not busy:
            return s
        best = max(busy, key=lambda v: _work(v.body))
        last = simplify(s.min + s.extent - 1)
        pre = [p for row in rows.values() for p in _prefetches(best, s.var, last, row)]
        if len(pre) > MAX_PER_ITERATION * len(rows) or len(pre) > 2 * MAX_PER_ITERATION:
            return s                 # the busy loop is too short for the rows
        self.count += 1
        new = replace(best, body=ir.seq(*pre, best.body))
        return replace(s, body=_replace_stmt(s.body, best, new))


def _replace_stmt(root, old, new):
    class _R(ir.Mutator):
        def visit(self, n):
            return new if n is old else super().visit(n)
    return _R().visit(root)


def prefetch_next_rows(func: ir.LoweredFunc, max_bytes: int = 512 * 1024) -> ir.LoweredFunc:
    """Make the busiest vector loop of each row-wise loop nest prefetch the next row of
    the inputs it reads (module docstring)."""
    m = _Prefetch(frozenset(func.inputs), frozenset(func.outputs), max_bytes)
    out = func.with_body(m.visit(func.body))
    out = out.counted(prefetched_loops=m.count)
    return out


#: how many rows ahead :func:`prefetch_marked_rows` asks for (1-4 measured alike on the
#: Zen 3 host: docs/c_frontend.md "AVX2 fp64: where symm's remaining time goes")
MARKED_ROWS_AHEAD = 2


class _MarkedRows(ir.Mutator):
    def __init__(self, outputs: frozenset, enabled: bool):
        self.outputs, self.enabled = outputs, enabled
        self.count = 0

    def visit_AttrStmt(self, s):
        if s.key != marks.CPU_PREFETCH_ROWS:
            return self.generic(s)
        body = self.visit(s.body)
        return _RowLoop(self).visit(body) if self.enabled else body


class _RowLoop(ir.Mutator):
    """The first (outermost) serial loops below the mark: their vector loops get the
    prefetches."""
    def __init__(self, owner: _MarkedRows):
        self.owner = owner

    def visit_For(self, s):
        if _is_vector_loop(s):
            return s
        last = simplify(s.min + s.extent - 1)
        bound = _bound_inside(s.body)
        return replace(s, body=_VectorStores(self.owner, s.var, last, bound).visit(s.body))


class _VectorStores(ir.Mutator):
    def __init__(self, owner: _MarkedRows, r: ir.Var, last: ir.Expr, bound: set):
        self.owner, self.r, self.last, self.bound = owner, r, last, bound

    def visit_For(self, s):
        if not _is_vector_loop(s):
            return self.generic(s)
        inner = self.bound - {s.var}
        starts: dict = {}

        def fn(n):
            if not (isinstance(n, ir.Store) and n.buffer in self.owner.outputs):
                return
            idx = n.indices[0]
            if not (isinstance(idx, ir.Ramp) and ir.is_const(idx.stride, 1)):
                return
            a = affine_in(idx.base, self.r)
            if a is None or (isinstance(a[0], int) and a[0] <= 0) \
                    or any(uses(idx.base, v) for v in inner):
                return
            starts.setdefault((n.buffer, str(idx.base)), (n.buffer, idx.base))
        ir.walk(s.body, fn)
        if not starts:
            return s
        ahead = ir.Binary("min", self.r + MARKED_ROWS_AHEAD, self.last, "int64")
        pre = []
        for buf, base in starts.values():
            at = simplify(ir.substitute(base, {self.r: ahead}))
            pre.append(ir.Evaluate(ir.Call(
                "prefetch", (ir.Load(buf, (at,), buf.dtype), ir.IntImm(1)), "int32",
                pure=False)))
        self.owner.count += 1
        return replace(s, body=ir.seq(*pre, s.body))


def prefetch_marked_rows(func: ir.LoweredFunc, enabled: bool = True) -> ir.LoweredFunc:
    """IR pass ``prefetch-marked-rows``: below each ``AttrStmt(cpu_prefetch_rows)``
    (placed by ``scop-symm`` on its phase 2, AVX2 fp64 only), every vector loop of the
    first serial loop (variable ``r``, ``r`` in ``[lo, last]``) that stores to an output
    at ``Ramp(base, 1, L)`` with ``base`` affine in ``r`` (a positive or symbolic
    coefficient: a row of a wider array) and free of the loops bound between starts
    each iteration with ``__builtin_prefetch(&out[base(min(r + 2, last))], 1, 3)``.

    Why: such a loop's rows are short segments of long rows (symm's 32-column panels of
    ``C``, 256 bytes every 9.6 KB at LARGE); the hardware prefetchers do not follow them
    and the loop is the first to touch them, so every row waited for memory.  The
    addresses are those of the loop's own stores in a later row of the same loop (inside
    the array); a prefetch changes no value.  ``enabled`` False: only the marks dropped.
    ``counts.prefetched_loops`` adds the vector loops that received prefetches."""
    m = _MarkedRows(frozenset(func.outputs), enabled)
    out = func.with_body(m.visit(func.body))
    if m.count:
        out = out.counted(prefetched_loops=(func.counts.prefetched_loops or 0) + m.count)
    return out
