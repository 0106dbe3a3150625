"""IR pass: reuse vector values within one loop iteration (store-to-load forwarding and
repeated loads), so a fused loop body reads each element once.

Assumes: vectorised, flattened IR (:mod:`polycomp.lowering.vectorize`); distinct
:class:`~polycomp.ir.Buffer` objects are distinct memory (the C entry point's pointers
are ``restrict``, temporaries are separate allocations).

Guarantees: in a *run* -- the consecutive ``Store`` statements of one ``Block`` (a loop
body, a ``LetStmt`` body or a ``vector_mask`` tail's body; any other statement ends a
run) holding at least one vector store (``lanes > 1``) and a load of a value stored
earlier in it (other runs are left as they are) -- a ``Load`` of buffer ``B`` at
index ``e`` with ``lanes`` ``L`` becomes a let-bound variable when

* an earlier statement of the run stores ``B[e]`` with ``L`` lanes and no statement
  between stores ``B`` (the load reads exactly the stored value): the store becomes
  ``let v = value; B[e] = v`` and the load ``v``; or
* an earlier statement of the run loads the same ``B[e]`` (structurally equal index,
  same lanes and dtype) and no statement in between (nor that one) stores ``B``: the
  first load becomes ``let v = B[e]`` before its statement, later ones ``v``.

In a ``vector_mask`` tail only repeated loads are shared: a masked load reads zero in
the inactive lanes, a stored value need not hold zero there.  A store to ``B`` at any
index forgets every value of ``B`` (indices are not compared
for overlap).  Loads within one statement run before its store, so a statement's own
loads of ``B[e]`` are never replaced by its store.  Values are bitwise those the loads
would read; no statement is reordered.  Why: gcc does not see ``restrict`` through an
OpenMP-outlined loop body, so it reloads ``hz[i][j]`` after a store to ``ey`` and
reloads ``ey[i][j]`` right after storing it, a store-to-load forward that stalls when
the vector crosses a cache line (fdtd-2d's fused row: 1.8x slower than with the values
kept in registers).
"""
from __future__ import annotations

import itertools
from dataclasses import replace

from polycomp import ir
from polycomp.scheduler.common import marks


def _loads(e, out: list) -> list:
    """The Loads in expression ``e`` (outermost first, left to right)."""
    if isinstance(e, ir.Load):
        out.append(e)
        return out
    for c in ir.children(e):
        if isinstance(c, ir.Expr):
            _loads(c, out)
    return out


def _same(a: ir.Load, buf: ir.Buffer, index, lanes: int, dtype: str) -> bool:
    return (a.buffer is buf and a.lanes == lanes and a.dtype == dtype
            and len(a.indices) == 1 and ir.structural_equal(a.indices[0], index))


def _replace(e, subst: list):
    """``e`` with each Load matching an entry ``(load-like key, var)`` of ``subst``
    replaced by its var."""
    if isinstance(e, ir.Load):
        for (buf, index, lanes, dtype), v in subst:
            if _same(e, buf, index, lanes, dtype):
                return v
        return e
    if not ir.children(e):
        return e
    return _rebuild(e, subst)


def _rebuild(e, subst: list):
    changed = {}
    for f in getattr(e, "__dataclass_fields__", {}):
        x = getattr(e, f)
        if isinstance(x, ir.Expr):
            y = _replace(x, subst)
            if y is not x:
                changed[f] = y
        elif isinstance(x, tuple) and any(isinstance(p, ir.Expr) for p in x):
            ys = tuple(_replace(p, subst) if isinstance(p, ir.Expr) else p for p in x)
            if any(p is not q for p, q in zip(x, ys)):
                changed[f] = ys
    return replace(e, **changed) if changed else e


class _Forward:
    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.masked = False     # inside a vector_mask tail: no store-to-load forwarding

    def var(self, dtype: str) -> ir.Var:
        return ir.Var(f"pc_fw{next(self.ids)}", dtype)

    def stmt(self, s):
        if isinstance(s, ir.Block):
            return self.block(list(s.stmts))
        if isinstance(s, ir.For):
            return replace(s, body=self.stmt(s.body))
        if isinstance(s, ir.LetStmt):
            return replace(s, body=self.stmt(s.body))
        if isinstance(s, ir.AttrStmt):
            outer = self.masked
            self.masked = outer or s.key == marks.VECTOR_MASK
            try:
                return replace(s, body=self.stmt(s.body))
            finally:
                self.masked = outer
        if isinstance(s, ir.IfThenElse):
            return replace(s, then=self.stmt(s.then),
                           orelse=None if s.orelse is None else self.stmt(s.orelse))
        if isinstance(s, ir.Allocate):
            return replace(s, body=self.stmt(s.body))
        return s

    def block(self, stmts: list):
        out: list = []
        run: list = []
        for s in stmts:
            if isinstance(s, ir.Store) and len(s.indices) == 1:
                run.append(s)
                continue
            out.extend(self.run(run))
            run = []
            out.append(self.stmt(s))
        out.extend(self.run(run))
        return ir.seq(*out) if out else ir.Block(())

    def run(self, stmts: list) -> list:
        """The run ``stmts`` (Stores) with reused values let-bound (module docstring)."""
        if len(stmts) < 2 or not any(s.lanes > 1 for s in stmts):
            return stmts
        n = len(stmts)
        loads = [_loads(s.value, []) for s in stmts]

        def used_later(i: int, buf, index, lanes, dtype) -> bool:
            """Whether a statement after ``i`` loads ``buf[index]`` before any store to
            ``buf`` (its own loads come before its store)."""
            for j in range(i + 1, n):
                if any(_same(ld, buf, index, lanes, dtype) for ld in loads[j]):
                    return True
                if stmts[j].buffer is buf:
                    return False
            return False

        avail: list = []   # ((buf, index, lanes, dtype), var)
        # each statement: (lets before it, the store, the let of its value or None)
        plan: list = []
        for i, s in enumerate(stmts):
            lets = []
            for ld in loads[i]:
                key = (ld.buffer, ld.indices[0], ld.lanes, ld.dtype)
                if any(_same(ld, *k) for k, _ in avail):
                    continue
                if used_later(i, *key) and ld.buffer is not s.buffer:
                    v = self.var(ld.dtype)
                    lets.append((v, ld))
                    avail.append((key, v))
            value = _replace(s.value, avail) if avail else s.value
            avail = [(k, v) for k, v in avail if k[0] is not s.buffer]
            own = None
            key = (s.buffer, s.indices[0], s.lanes, s.buffer.dtype)
            if not self.masked and used_later(i, *key) and \
                    s.value.dtype == s.buffer.dtype:
                own = self.var(s.buffer.dtype)
                avail.append((key, own))
            plan.append((lets, replace(s, value=value), own))
        if all(own is None for _, _, own in plan):
            # no stored value read back: leave the run to gcc (its loads, repeated or
            # not, are what they were; the pass targets fused rows like fdtd-2d's)
            return stmts
        # nest from the end: let v = value in (store; rest)
        body: ir.Stmt | None = None
        for lets, st, own in reversed(plan):
            if own is not None:
                stored = replace(st, value=own)
                inner = stored if body is None else ir.seq(stored, body)
                cur: ir.Stmt = ir.LetStmt(own, st.value, inner)
            else:
                cur = st if body is None else ir.seq(st, body)
            for v, ld in reversed(lets):
                cur = ir.LetStmt(v, ld, cur)
            body = cur
        assert body is not None
        return [body]


def forward_loads(f: ir.LoweredFunc) -> ir.LoweredFunc:
    """``f`` with the values of each run reused (see the module docstring)."""
    return replace(f, body=_Forward().stmt(f.body))
