"""IR pass ``local-tiles``: realise ``cpu_local`` marks — temporaries private to a subtree
live in a tile-sized buffer.

Assumes: the IR straight from the isl AST (not simplified yet: loop iterators still carry
isl's names ``c0, c1, ...`` = schedule dimensions, degenerate loops are lets), with
``AttrStmt("cpu_local", "<n>")`` marks placed by the chain passes and
``local_tiles(state).records[n]`` (:mod:`polycomp.scheduler.chain.local`): arrays whose
every access lies below the mark, inside a box ``origin(c_0..c_{d-1}) + [0, sizes)``
(or, for a record restricted to some statements, every access of theirs below it).

Guarantees: each record gets a new global buffer ``local`` (allocated around the whole
body, as lowering allocates temporaries): one leading *slot* dimension per enclosing
loop that may run concurrently (annotated coincident, parallel, or below a
``cpu_parallel`` mark), indexed by that loop's iteration, then the box; below the mark,
with ``o`` the origin evaluated on the loops around it, every ``Load``/``Store`` of an
array of the record indexes ``local[slot, x - o]`` instead of ``A[x]`` (arrays of one
record share ``local``, see :class:`~polycomp.scheduler.chain.local.LocalTile`; copies
of a mark that isl's AST repeats share it too), and the ``Allocate`` of such an array is
dropped, since nothing else accesses it.  Each iteration of the loops around the mark
touches only its own slot and box, which the statements below fully write before they
read (the arrays are temporaries produced below the mark), so every read returns the
value it read before and concurrent iterations never share storage.  The contraction
pass later drops the slot dimensions (one buffer per iteration) and the hoisting pass
moves a heap buffer to the top of the parallel loop's body (one per thread), as for
packed operands.  A record restricted to some ``statements`` (dead-store contraction,
:mod:`polycomp.scheduler.cpu.scop_dead_store`: only they access the arrays below the
mark) keeps the arrays and their ``Allocate``: the accesses outside the mark stay in
memory; what they write below the mark lives for one iteration of every loop around it
(the pass proved it), so a sequential enclosing loop that starts at a constant
``>= 0`` gets a slot dimension too, indexed by its iterator, which the contraction then
drops from the outside in (a time loop around a parallel one would otherwise keep one
buffer for all time steps); other sequential loops share the buffer between their
iterations (each iteration writes what it reads first).  A record's ``layout`` orders
the box's dimensions in the buffer.  Nothing else changes.
"""
from __future__ import annotations

from dataclasses import replace

from polycomp import ir
from polycomp.lowering.ast_to_ir import origin_to_ir
from polycomp.lowering.simplify import simplify
from polycomp.scheduler.chain.local import LocalTile, local_tiles
from polycomp.scheduler.common import marks
from polycomp.state import CompileState

__all__ = ["localize", "origin_to_ir"]

class _Redirect(ir.Mutator):
    """Accesses of the records' arrays -> their local buffers at ``index - origin``
    (its dimensions in the record's ``layout``)."""

    def __init__(self, table: dict):
        # array name -> (local buffer, origin IR, slot index, layout)
        self.table = table

    def _index(self, name, idx):
        local, origin, slot, layout = self.table[name]
        box = tuple(simplify(i - o) for i, o in zip(idx, origin))
        return local, slot + tuple(box[d] for d in layout)

    def visit_Load(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        if e.buffer.name not in self.table:
            return ir.Load(e.buffer, idx, e.dtype, e.lanes)
        local, new = self._index(e.buffer.name, idx)
        return ir.Load(local, new, e.dtype, e.lanes)

    def visit_Store(self, s):
        idx = tuple(self.visit(i) for i in s.indices)
        v = self.visit(s.value)
        if s.buffer.name not in self.table:
            return ir.Store(s.buffer, idx, v, s.lanes)
        local, new = self._index(s.buffer.name, idx)
        return ir.Store(local, new, v, s.lanes)


class _Localizer:
    def __init__(self, func: ir.LoweredFunc, state: CompileState):
        self.model = state.model
        self.records = local_tiles(state).records
        self.moved: set[str] = set()
        self.allocs: list[ir.Buffer] = []
        # a mark the AST repeats (full and partial tiles) reuses its records' buffers
        self.made: dict[int, list[ir.Buffer]] = {}

    # env: name -> Var of the enclosing iterators; loops: the enclosing loops and whether
    # their iterations may run concurrently (coincident, parallel, or below cpu_parallel)
    def stmt(self, s, env, loops, par):
        if isinstance(s, ir.For):
            env2 = dict(env, **{s.var.name: s.var})
            p = bool(s.annotation("coincident", False)) or par or s.kind == "parallel"
            return replace(s, body=self.stmt(s.body, env2, loops + [(s, p)],
                                             par or s.kind == "parallel"))
        if isinstance(s, ir.LetStmt):
            env2 = dict(env, **{s.var.name: s.var})
            return replace(s, body=self.stmt(s.body, env2, loops, par))
        if isinstance(s, ir.AttrStmt):
            body = self.stmt(s.body, env, loops, par or s.key == marks.CPU_PARALLEL)
            n = marks.attr_index(s, marks.CPU_LOCAL)
            if n is not None:
                return self.localize(self.records[n], body, env, loops)
            return ir.AttrStmt(s.key, s.value, body)
        if isinstance(s, ir.Block):
            return ir.Block(tuple(self.stmt(x, env, loops, par) for x in s.stmts))
        if isinstance(s, ir.IfThenElse):
            orelse = self.stmt(s.orelse, env, loops, par) if s.orelse is not None else None
            return ir.IfThenElse(s.cond, self.stmt(s.then, env, loops, par), orelse)
        if isinstance(s, ir.Allocate):
            return ir.Allocate(s.buffer, self.stmt(s.body, env, loops, par))
        return s

    def localize(self, tiles: list[LocalTile], body, env, loops):
        # records restricted to statements: their values live for one iteration of every
        # loop around the mark, so a sequential loop from a constant >= 0 gets a slot too,
        # indexed by its iterator itself (the contraction drops such a dimension; one it
        # kept would cost the loop's whole range), the others share the buffer
        every = any(t.statements is not None for t in tiles)
        slots = [(lp, p) for lp, p in loops if p or (every and _from_constant(lp))]
        inner = {lp.var for lp, _ in loops}
        if any(v in inner for lp, _ in slots for v in ir.free_vars(lp.extent)):
            return body      # a slot's extent varies with an enclosing loop: keep the arrays
        table = {}
        for t in tiles:
            assert t.origin is not None
            origin = origin_to_ir(t.origin, env, self.model)
            if origin is None:
                return body
            layout = t.layout if t.layout is not None else tuple(range(len(t.sizes)))
            shape = tuple(lp.extent if p else simplify(lp.min + lp.extent) for lp, p in slots) \
                + tuple(t.sizes[d] for d in layout)
            local = self._buffer(t, shape)
            slot = tuple(simplify(lp.var - lp.min) if p else lp.var for lp, p in slots)
            for a in t.arrays:
                table[a.name] = (local, origin, slot, layout)
            if t.statements is None:     # every access is below the mark
                self.moved.update(a.name for a in t.arrays)
        return _Redirect(table).visit(body)

    def _buffer(self, t: LocalTile, shape: tuple) -> ir.Buffer:
        """The buffer of record ``t`` with ``shape``: the one made at an earlier copy of
        the mark when the shapes agree, else a new one."""
        made = self.made.setdefault(id(t), [])
        for b in made:
            if len(b.shape) == len(shape) and all(
                    ir.structural_equal(x, y) for x, y in zip(b.shape, shape)):
                return b
        name = t.name if not made else f"{t.name}_{len(made) + 1}"
        local = ir.Buffer(name, t.dtype, shape)
        made.append(local)
        self.allocs.append(local)
        return local


def _from_constant(loop: ir.For) -> bool:
    return isinstance(loop.min, ir.IntImm) and loop.min.value >= 0


class _DropMoved(ir.Mutator):
    def __init__(self, moved):
        self.moved = moved

    def visit_Allocate(self, s):
        body = self.visit(s.body)
        if s.buffer.name in self.moved:
            return body
        return ir.Allocate(s.buffer, body)


def localize(func: ir.LoweredFunc, state: CompileState) -> ir.LoweredFunc:
    """Realise every ``cpu_local`` mark of ``func`` (see the module docstring)."""
    if not local_tiles(state).records:
        return func
    loc = _Localizer(func, state)
    body = loc.stmt(func.body, {}, [], False)
    if loc.moved:
        body = _DropMoved(loc.moved).visit(body)
    for b in reversed(loc.allocs):
        body = ir.Allocate(b, body)
    return func.with_body(body)
