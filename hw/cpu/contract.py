"""IR pass: contract temporaries to the iteration of the loop that uses them.

Assumes: multi-dimensional (not yet flattened) IR; temporaries are ``Allocate`` nodes
of ``global`` scope (the lowering wraps the whole body in one per non-output stage).

Guarantees: for a temporary ``T`` and a loop ``for v`` such that every access to ``T``
in the whole program lies in that loop's body and indexes some dimension ``d`` of ``T``
with exactly ``v``, dimension ``d`` is dropped: ``T`` becomes ``T'`` (one dimension
fewer), allocated inside the loop body, and ``T[.., v, ..]`` becomes ``T'[.., ..]``.
Iteration ``v`` only ever touches slice ``v`` and nothing reads ``T`` after the loop, so
each iteration may use its own (or the same, reused) storage: values and dependences
inside an iteration are unchanged. Contraction stops at the first loop (from the outside
in) that does not contract ``T``: that loop's iterations may communicate through ``T``
(``T[v - 1]`` read in iteration ``v``), so ``T`` is allocated around it, never inside it
or deeper — a buffer allocated inside a loop body lives for one iteration only. Applied
repeatedly, a fused elementwise chain's intermediates become scalars and a fused row-
wise kernel's intermediates (softmax's exponentials, layernorm's centred row) become one
row per iteration, which stays in cache instead of going to memory. A contracted buffer
of constant size up to ``LOCAL_BYTES`` gets ``local`` scope (a stack array, registers
after the C compiler's scalar replacement); larger ones stay ``global`` (heap; see
:mod:`polycomp.hw.cpu.hoist_alloc` for one allocation per thread). A temporary that no
loop contracts stays allocated where it was, outside every loop (a GEMM's ``C`` with its
epilogue inside the product's parallel loop is one shared array, not one per thread).
"""
from __future__ import annotations

from dataclasses import replace

from polycomp import dtypes as dt
from polycomp import ir

LOCAL_BYTES = 16 * 1024


_NONE: frozenset = frozenset()


class _Touched:
    """Which buffers each subtree accesses (``Load``/``Store``), memoised per node.

    The contraction asks, for many subtrees and every temporary, whether (and how) the
    subtree accesses a buffer; one bottom-up pass per new subtree answers all of them,
    instead of one walk of the subtree per question.  Nodes are immutable, so a node's
    answer never changes; the memo keeps every node it has seen alive, so ids are not
    reused while it exists (one memo per :func:`contract` call)."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[object, frozenset]] = {}

    def ids(self, node) -> frozenset:
        """``id`` of every buffer that ``node``'s subtree loads from or stores to."""
        hit = self._memo.get(id(node))
        if hit is not None:
            return hit[1]
        out: frozenset = _NONE
        for c in ir.children(node):
            sub = self.ids(c)
            if sub:
                out = sub if not out else out | sub
        if isinstance(node, (ir.Load, ir.Store)) and id(node.buffer) not in out:
            out = out | {id(node.buffer)}
        self._memo[id(node)] = (node, out)
        return out

    def touches(self, node, buf) -> bool:
        return id(buf) in self.ids(node)

    def accesses(self, node, buf) -> list:
        """The ``Load``/``Store`` nodes of ``buf`` in ``node`` (subtrees that do not
        access ``buf`` are not visited)."""
        out = []
        stack = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, (ir.Load, ir.Store)) and n.buffer is buf:
                out.append(n)
            stack.extend(c for c in ir.children(n) if self.touches(c, buf))
        return out


class _Drop(ir.Mutator):
    """Rewrite accesses of each buffer ``old`` of ``drops`` (``id(old) -> (old, new,
    dim)``) to ``new`` without index ``dim`` (subtrees that access none of them are
    returned as they are: one traversal for all the buffers a loop contracts)."""

    def __init__(self, drops: dict, touched: _Touched):
        self.drops = drops
        self.touched = touched

    def visit(self, node):
        if node is None or not (self.touched.ids(node) & self.drops.keys()):
            return node
        return super().visit(node)

    def visit_Load(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        hit = self.drops.get(id(e.buffer))
        if hit is None or hit[0] is not e.buffer:
            return e if all(a is b for a, b in zip(idx, e.indices)) else replace(e, indices=idx)
        _, new, dim = hit
        return ir.Load(new, idx[:dim] + idx[dim + 1:], e.dtype, e.lanes)

    def visit_Store(self, s):
        idx = tuple(self.visit(i) for i in s.indices)
        v = self.visit(s.value)
        hit = self.drops.get(id(s.buffer))
        if hit is None or hit[0] is not s.buffer:
            return replace(s, indices=idx, value=v)
        _, new, dim = hit
        return ir.Store(new, idx[:dim] + idx[dim + 1:], v, s.lanes)


def _scope(shape, dtype) -> str:
    size = 1
    for d in shape:
        if not isinstance(d, ir.IntImm):
            return "global"
        size *= d.value
    return "local" if size * dt.itemsize(dtype) <= LOCAL_BYTES else "global"


class _Placer:
    """Places (contracts) the temporaries of one function body, sharing one
    :class:`_Touched` memo between all of them."""

    def __init__(self) -> None:
        self.touched = _Touched()

    def contract_dim(self, loop: ir.For, buf: ir.Buffer):
        """The dimension of ``buf`` that every access inside ``loop`` indexes with the
        loop variable, or None."""
        acc = self.touched.accesses(loop.body, buf)
        if not acc:
            return None
        for d in range(len(buf.shape)):
            if all(a.indices[d] is loop.var for a in acc):
                return d
        return None

    def place(self, node, bufs: list) -> ir.Stmt:
        """``node`` with the storage of each buffer of ``bufs`` (which only ``node``
        touches) contracted as far as possible: the new node, containing one Allocate
        of each buffer or of its contraction; of two Allocates that end up around the
        same node, the one of the earlier buffer is outside.

        All buffers are placed in one descent (a buffer's placement does not depend on
        another's: contraction rewrites only that buffer's accesses): placing them one
        at a time descended through the Allocates placed before, once per buffer
        (quadratic in a fused chain's ``n`` temporaries, which all end up in the
        chain's loop body)."""
        if not bufs:
            return node
        if isinstance(node, ir.For):
            return self._place_for(node, bufs)
        if isinstance(node, ir.Block):
            return self._place_block(node, bufs)
        if isinstance(node, (ir.LetStmt, ir.AttrStmt, ir.Allocate)):
            return replace(node, body=self.place(node.body, bufs))
        if isinstance(node, ir.IfThenElse):
            return self._place_if(node, bufs)
        return _allocate(bufs, node)

    def _place_for(self, node: ir.For, bufs: list) -> ir.Stmt:
        inner, here, drops = [], [], {}
        for buf in bufs:
            d = self.contract_dim(node, buf)
            if d is None:
                # The loop's iterations may pass values of ``buf`` to each other (a
                # shifted read ``T[v - 1]``, an accumulation over ``v``): storage
                # allocated inside its body would not outlive one iteration, so the
                # buffer is allocated here, around the loop.
                here.append(buf)
                continue
            shape = buf.shape[:d] + buf.shape[d + 1:]
            nb = ir.Buffer(buf.name, buf.dtype, shape, _scope(shape, buf.dtype), buf.flat)
            drops[id(buf)] = (buf, nb, d)
            inner.append(nb)
        body = _Drop(drops, self.touched).visit(node.body) if drops else node.body
        return _allocate(here, replace(node, body=self.place(body, inner)))

    def _place_block(self, node: ir.Block, bufs: list) -> ir.Stmt:
        """A buffer that one statement touches goes into it; others around the block
        (which statements touch which buffer: one pass over the statements)."""
        want = {id(b) for b in bufs}
        where: dict[int, list[int]] = {}
        for k, st in enumerate(node.stmts):
            for i in self.touched.ids(st) & want:
                where.setdefault(i, []).append(k)
        into: dict[int, list] = {}
        here = []
        for buf in bufs:
            ks = where.get(id(buf), [])
            if len(ks) == 1:
                into.setdefault(ks[0], []).append(buf)
            else:
                here.append(buf)
        if not into:
            return _allocate(here, node)
        stmts = list(node.stmts)
        for k, bs in into.items():
            stmts[k] = self.place(stmts[k], bs)
        return _allocate(here, ir.Block(tuple(stmts)))

    def _place_if(self, node: ir.IfThenElse, bufs: list) -> ir.Stmt:
        touches = self.touched.touches
        then, orelse, here = [], [], []
        for buf in bufs:
            if node.orelse is None or not touches(node.orelse, buf):
                then.append(buf)
            elif not touches(node.then, buf):
                orelse.append(buf)
            else:
                here.append(buf)
        out = node
        if then:
            out = replace(out, then=self.place(node.then, then))
        if orelse:
            out = replace(out, orelse=self.place(node.orelse, orelse))
        return _allocate(here, out)


def _allocate(bufs: list, node) -> ir.Stmt:
    """``node`` inside an Allocate of each of ``bufs``, the first outermost."""
    for buf in reversed(bufs):
        node = ir.Allocate(buf, node)
    return node


def contract(func: ir.LoweredFunc) -> ir.LoweredFunc:
    """Contract the temporaries allocated at the top of ``func``'s body."""
    body = func.body
    temps = []
    while isinstance(body, ir.Allocate) and body.buffer.scope == "global":
        temps.append(body.buffer)
        body = body.body
    placer = _Placer()
    return func.with_body(placer.place(body, [b for b in temps
                                              if placer.touched.touches(body, b)]))
