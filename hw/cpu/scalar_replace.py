"""IR pass: replace single-assignment scalar temporaries by let-bound values.

Assumes: contracted temporaries (:mod:`polycomp.hw.cpu.contract`): ``Allocate`` of a
``local`` buffer with one element (shape ``()`` or all extents 1) around the statements
of one loop iteration.

Guarantees: when such a buffer's accesses in the Allocate's body are, in order, one
``Store`` at the top level of the body's statement list followed only by ``Load``s in
the statements after it, the Allocate disappears and the value becomes ``let t = v``
over those statements (each Load of the buffer becomes ``t``).  The stored value is read
only after it is written and never again written, so every read sees the same value.
A value that lives in a let (not in memory) is what lets the vectoriser keep fused
elementwise chains (``bias_add`` then ``gelu``) in registers.
"""
from __future__ import annotations

from dataclasses import replace

from polycomp import ir


class _Uses:
    """The buffers each IR node's subtree loads from and stores to, memoised per node
    (nodes are immutable; the memo keeps every node it has seen alive, so ids are not
    reused while it exists).  One memo per :func:`scalar_replace` call: each question
    ("does this statement touch ``T``?", "does anything after it store ``T``?") is a
    set lookup, and rewriting the loads of ``T`` skips the subtrees without one -- a
    chain of ``n`` fused stages has ``n`` temporaries, and walking the body once per
    temporary was quadratic."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[object, frozenset, frozenset]] = {}

    def of(self, node) -> tuple[frozenset, frozenset]:
        """``(ids of buffers loaded, ids of buffers stored)`` in ``node``'s subtree."""
        hit = self._memo.get(id(node))
        if hit is not None:
            return hit[1], hit[2]
        loads: frozenset = frozenset()
        stores: frozenset = frozenset()
        for c in ir.children(node):
            lc, sc = self.of(c)
            if lc:
                loads = lc if not loads else loads | lc
            if sc:
                stores = sc if not stores else stores | sc
        if isinstance(node, ir.Load) and id(node.buffer) not in loads:
            loads = loads | {id(node.buffer)}
        if isinstance(node, ir.Store) and id(node.buffer) not in stores:
            stores = stores | {id(node.buffer)}
        self._memo[id(node)] = (node, loads, stores)
        return loads, stores

    def loads(self, node, buf) -> bool:
        return id(buf) in self.of(node)[0]

    def stores(self, node, buf) -> bool:
        return id(buf) in self.of(node)[1]


def _scalar(buf: ir.Buffer) -> bool:
    return buf.scope == "local" and all(isinstance(d, ir.IntImm) and d.value == 1
                                        for d in buf.shape)


class _Loads(ir.Mutator):
    def __init__(self, buf, var, uses: _Uses):
        self.buf, self.var, self.uses = buf, var, uses

    def visit(self, node):
        if node is None or not self.uses.loads(node, self.buf):
            return node
        return super().visit(node)

    def visit_Load(self, e):
        if e.buffer is self.buf:
            return self.var
        return self.generic(e)


def _replace(buf: ir.Buffer, body, uses: _Uses):
    stmts = list(body.stmts) if isinstance(body, ir.Block) else [body]
    for k, s in enumerate(stmts):
        loads, stores = uses.loads(s, buf), uses.stores(s, buf)
        if not (loads or stores):
            continue
        # the one access of the statement: its own Store (nothing in it loads ``buf``)
        if not (isinstance(s, ir.Store) and s.buffer is buf and not loads):
            return None
        rest = stmts[k + 1:]
        if any(uses.stores(r, buf) for r in rest):
            return None
        var = ir.Var(buf.name, buf.dtype)
        tail = _Loads(buf, var, uses).visit(ir.seq(*rest)) if rest else ir.Block(())
        return ir.seq(*stmts[:k], ir.LetStmt(var, s.value, tail))
    return None


class _ScalarReplace(ir.Mutator):
    def __init__(self) -> None:
        self.uses = _Uses()

    def visit_Allocate(self, s):
        chain = [s]
        while isinstance(chain[-1].body, ir.Allocate):
            chain.append(chain[-1].body)
        body = self.visit(chain[-1].body)
        stmts = list(body.stmts) if isinstance(body, ir.Block) else [body]
        if any(isinstance(x, ir.Block) for x in stmts):
            return self._one_by_one(chain, body)
        return self._chain(chain, body, stmts)

    def _one_by_one(self, chain, body):
        """Each Allocate of the chain in turn, innermost first (see :func:`_replace`)."""
        for a in reversed(chain):
            out = _replace(a.buffer, body, self.uses) if _scalar(a.buffer) else None
            body = out if out is not None else (a if body is a.body else replace(a, body=body))
        return body

    def _chain(self, chain, body, stmts):
        """:meth:`_one_by_one` for a chain of directly nested Allocates around the
        statements ``stmts`` (``body``; none of them a Block) in one pass.

        Replacing the innermost buffer ``T`` (its Store at top-level index ``k``) turns
        the body into ``stmts[:k] + [let T = v in stmts[k+1:]]``; the next buffer out
        sees those statements, so one index ``cut`` (the statements still at the top
        level) and the first access and last store of each buffer among ``stmts``
        decide every buffer as the one-by-one walk would, and an Allocate that stays
        wraps the body, after which the walk replaces nothing more (the body is then
        one statement, that Allocate, which is not a Store).  One pass over the
        statements for the whole chain instead of one per buffer (quadratic: a fused
        chain of ``n`` stages has ``n`` scalar temporaries)."""
        first: dict[int, int] = {}
        last_store: dict[int, int] = {}
        for j, st in enumerate(stmts):
            loads, stores = self.uses.of(st)
            for i in loads | stores:
                first.setdefault(i, j)
            for i in stores:
                last_store[i] = j
        cut, let, out = len(stmts), None, None
        for a in reversed(chain):
            buf = a.buffer
            k = first.get(id(buf))
            if out is None and _scalar(buf) and k is not None and k < cut:
                st = stmts[k]
                if isinstance(st, ir.Store) and st.buffer is buf and \
                        not self.uses.loads(st, buf) and last_store.get(id(buf)) == k:
                    var = ir.Var(buf.name, buf.dtype)
                    rest = stmts[k + 1:cut] + ([let] if let is not None else [])
                    tail = _Loads(buf, var, self.uses).visit(ir.seq(*rest)) if rest \
                        else ir.Block(())
                    let, cut = ir.LetStmt(var, st.value, tail), k
                    continue
            if out is None:
                out = body if let is None else ir.seq(*stmts[:cut], let)
            out = a if out is a.body else replace(a, body=out)
        if out is None:
            out = body if let is None else ir.seq(*stmts[:cut], let)
        return out


def scalar_replace(func: ir.LoweredFunc) -> ir.LoweredFunc:
    return func.with_body(_ScalarReplace().visit(func.body))
