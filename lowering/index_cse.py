"""IR pass ``index-cse``: every repeated index subexpression is computed once, in a
``let`` at the innermost statement that holds all its uses.

Why: the masked register tiles of triangles and symmetric products (a tile crossing the
diagonal, :func:`polycomp.hw.cpu.microkernel._fixed_tile` with ``lo``/``hi``) print
each lane range (``vlane_range(0, n, L)``) and each clamped row of ``X`` as nested
``min``/``max``/``select`` expressions over the tile's bounds, once per accumulator
vector and statement: syr2k's AVX2 C was 250 KB, 26 s of gcc ``-O3``.  gcc finds the
common subexpressions itself, but only after parsing, folding and gimplifying every
copy; bound once, the C is a fraction of the size and the build a fraction of the time,
while the computation is the same (gcc's value numbering makes the same SSA values of
both forms).

Assumes: flattened IR about to be printed (the last passes before the printer; nothing
after this pass pattern-matches index expressions, except the ``dot_groups`` loop
extent ``a // c`` of :mod:`polycomp.hw.cpu.vector_printer`, which is kept whole).
*Index expressions* are int64 expressions built from integer constants, loop variables,
symbolic sizes and ``let`` variables bound to index expressions, with ``+ - * min max``,
negation, ``//`` and ``%`` by a non-zero constant and ``select`` of a condition; and
bool conditions built from comparisons of index expressions with ``&& || !``.  Such an
expression is pure: it reads no memory, calls nothing and cannot trap (no division by
a variable), and index arithmetic never overflows (polycomp's contract,
:func:`polycomp.lowering.simplify.is_index`), so evaluating it earlier, or where a
branch would have skipped it, changes nothing.

Guarantees: two occurrences are *the same expression* when they have the same
structure and each variable in them is bound by the same binder (the same ``For`` or
``LetStmt`` at the same position of the tree; a symbolic size by name) and lie in
the same outlined body (an ``outline`` attribute, printed as a function of its own: its
expressions are bound inside it).  Every index
expression of at least ``min_nodes`` nodes (``Var``, constant and operator nodes) that
the printed text would repeat -- it occurs at two places or more that are not inside a
larger such expression bound once -- becomes ``let ix<n> = e`` wrapped around the
innermost statement holding all its occurrences (a ``For``, ``IfThenElse``,
``LetStmt``, ``AttrStmt`` or ``Block``; inside every binder of its variables), and each
occurrence reads ``ix<n>``.  The smaller of two nested bound expressions is bound
outside the larger; the ``n`` follow the first occurrence in a pre-order walk, so the
result is deterministic.  Each statement computes the same values on the same operands
in the same order (only index values are named), so results are bit-identical; in the
polyhedral sense the domain, schedule and access relations of every statement are
unchanged.  Loads, vector expressions, calls and data arithmetic are never bound.
Without index expressions repeated, the function is returned unchanged (the same
object).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from polycomp import ir
from polycomp.lowering.simplify import is_index
from polycomp.lowering.vectorize import OUTLINE

#: the smallest expression bound (nodes): ``(c3 % 3) * 2`` has 5, ``c5 * 8`` 3
MIN_NODES = 5

#: the loop annotation whose extent ``a // c`` the vector printer matches (kept whole)
_DOT_GROUPS = "dot_groups"

_INT_OPS = ("+", "-", "*", "min", "max")
_DIV_OPS = ("//", "%")


@dataclass
class _Entry:
    """One distinct index expression (an interned key)."""
    expr: ir.Expr          # its first occurrence
    nodes: int             # its size in nodes
    first: int             # the order of its first occurrence
    lca: int = -1          # the innermost statement position holding every occurrence
    parents: set = field(default_factory=set)   # (parent key, slot) of its occurrences
    roots: int = 0         # occurrences not inside another index expression


class _Walk:
    """Walks a function body in a fixed pre-order, numbering statement positions (the
    same numbers in both phases, so a shared subtree at two places is two positions)
    and interning index expressions by structure and binder."""

    def __init__(self) -> None:
        self.keys: dict[tuple, int] = {}
        self.entries: list[_Entry] = []
        self.parent: list[int] = []
        self.depth: list[int] = []
        self.pos = -1
        self.binder: dict[ir.Var, int] = {}     # Var -> position of its binder
        self.index_vars: set[ir.Var] = set()    # let variables bound to index values
        self.blocks: list[bool] = []            # whether the statement is a Block
        self.scope = -1     # the outlined body (``outline`` attribute) the walk is in

    def place(self, k: int) -> int:
        """Where the let of key ``k`` goes: the innermost statement holding every
        occurrence, or the block around it when it is a statement of a block (the let
        then heads a loop's or branch's body: no C block of its own)."""
        at = self.entries[k].lca
        up = self.parent[at]
        return up if up >= 0 and self.blocks[up] else at

    # ------------------------------------------------------------ expressions
    def key(self, e: ir.Expr, site: int, top: bool = True) -> tuple[int | None, int]:
        """(key, nodes) of ``e`` (key None: not an index expression), recording its
        occurrence at statement position ``site``; sub-expressions of a non-index
        expression are visited for their own occurrences (``top``: ``e`` is not inside
        an index expression)."""
        k, n = self._key(e, site)
        if k is not None and top:
            self.entries[k].roots += 1
        return k, n

    def _intern(self, parts: tuple, e: ir.Expr, nodes: int, site: int) -> int:
        parts += (self.scope,)
        k = self.keys.get(parts)
        if k is None:
            k = self.keys[parts] = len(self.entries)
            self.entries.append(_Entry(e, nodes, k, site))
        else:
            ent = self.entries[k]
            ent.lca = self.lca(ent.lca, site)
        return k

    def _children(self, e: ir.Expr, site: int) -> None:
        """The occurrences below ``e``, which is not bound itself."""
        for c in ir.children(e):
            if isinstance(c, ir.Expr):
                self.key(c, site)

    def _key(self, e: ir.Expr, site: int) -> tuple[int | None, int]:
        if e.dtype not in ("int64", "bool") or isinstance(e, (ir.Ramp, ir.Broadcast)) or \
                getattr(e, "lanes", 1) != 1:
            self._children(e, site)
            return None, 0
        if isinstance(e, ir.IntImm):
            return self._intern(("i", e.value, e.dtype), e, 1, site), 1
        if isinstance(e, ir.Var):
            if e.dtype != "int64" or (e in self.binder and e not in self.index_vars):
                return None, 0
            b = self.binder.get(e)
            var: tuple = ("v", e.name) if b is None else ("w", b)
            return self._intern(var, e, 1, site), 1
        parts: tuple | None = None
        subs: list[tuple[int | None, int]] = []
        if isinstance(e, ir.Binary):
            subs = [self._key(e.a, site), self._key(e.b, site)]
            if _index_binary(e, subs[0][0], subs[1][0]):
                parts = ("b", e.op, subs[0][0], subs[1][0])
        elif isinstance(e, ir.Unary):
            subs = [self._key(e.a, site)]
            if subs[0][0] is not None and e.a.dtype == e.dtype and \
                    (e.op == "neg") == (e.dtype == "int64"):
                parts = ("u", e.op, subs[0][0])
        elif isinstance(e, ir.Select) and e.dtype == "int64":
            subs = [self._key(e.cond, site), self._key(e.t, site), self._key(e.f, site)]
            if all(k is not None for k, _ in subs) and e.cond.dtype == "bool":
                parts = ("s", subs[0][0], subs[1][0], subs[2][0])
        else:
            self._children(e, site)
            return None, 0
        if parts is None:       # its index sub-expressions occur at the top
            for k, _ in subs:
                if k is not None:
                    self.entries[k].roots += 1
            return None, 0
        me = self._intern(parts, e, 1 + sum(n for _, n in subs), site)
        for slot, (k, _) in enumerate(subs):
            assert k is not None
            self.entries[k].parents.add((me, slot))
        return me, self.entries[me].nodes

    # ------------------------------------------------------------ statement positions
    def lca(self, a: int, b: int) -> int:
        if a < 0:
            return b
        while self.depth[a] > self.depth[b]:
            a = self.parent[a]
        while self.depth[b] > self.depth[a]:
            b = self.parent[b]
        while a != b:
            a, b = self.parent[a], self.parent[b]
        return a

    def enter(self, parent: int) -> int:
        self.pos += 1
        self.parent.append(parent)
        self.depth.append(0 if parent < 0 else self.depth[parent] + 1)
        return self.pos

    def stmt(self, s: ir.Stmt, parent: int) -> None:
        me = self.enter(parent)
        self.blocks.append(isinstance(s, ir.Block))
        keys: list[int | None] = []
        for e, whole in _exprs(s):
            if whole:
                keys.append(self.key(e, me)[0])
            else:
                self._children(e, me)
                keys.append(None)
        _note_binding(s, me, keys, self.binder, self.index_vars)
        scope = self.scope
        if _outlined(s):
            self.scope = me
        for c in _stmts(s):
            self.stmt(c, me)
        self.scope = scope


def _note_binding(s: ir.Stmt, me: int, keys: list, binder: dict[ir.Var, int],
                  index_vars: set[ir.Var]) -> None:
    """Record the variable ``s`` binds at position ``me`` (a loop's, or a ``let``'s whose
    value is index arithmetic: ``keys[0]`` not None) in a walk's ``binder`` and
    ``index_vars``; shared by the counting walk and the rewrite, which must agree."""
    if isinstance(s, ir.For):
        binder[s.var] = me
        index_vars.add(s.var)
    elif isinstance(s, ir.LetStmt):
        binder[s.var] = me
        if keys[0] is not None and _index_value(s.value):
            index_vars.add(s.var)
        else:
            index_vars.discard(s.var)


def _outlined(s: ir.Stmt) -> bool:
    """Whether ``s``'s body is printed as a function of its own (the vector printer's
    ``outline`` attribute: a dot-product register tile).  Its index expressions are
    bound inside it (the printer passes the body's free variables, which it finds
    in the body's statements and expressions, not in attribute values)."""
    return isinstance(s, ir.AttrStmt) and s.key == OUTLINE


def _index_binary(e: ir.Binary, a: int | None, b: int | None) -> bool:
    """Whether ``e``, whose operands have the keys ``a`` and ``b`` (None: not index
    expressions), is an index expression."""
    if a is None or b is None:
        return False
    ints = e.a.dtype == "int64" and e.b.dtype == "int64"
    if e.dtype == "int64":
        return ints and (e.op in _INT_OPS or (e.op in _DIV_OPS and isinstance(e.b, ir.IntImm)
                                              and e.b.value != 0))
    return e.dtype == "bool" and ((e.op in ir.CMP_OPS and ints) or (
        e.op in ir.LOGIC_OPS and e.a.dtype == e.b.dtype == "bool"))


def _exprs(s: ir.Stmt) -> list[tuple[ir.Expr, bool]]:
    """The expressions of statement ``s`` itself, each with whether it may be bound
    whole (not the ``dot_groups`` extent ``a // c``)."""
    if isinstance(s, ir.For):
        return [(s.extent, not s.annotation(_DOT_GROUPS, False)), (s.min, True)]
    if isinstance(s, ir.LetStmt):
        return [(s.value, True)]
    if isinstance(s, ir.IfThenElse):
        return [(s.cond, True)]
    if isinstance(s, ir.Store):
        return [(x, True) for x in (*s.indices, s.value)]
    if isinstance(s, (ir.Evaluate, ir.Return)) and s.value is not None:
        return [(s.value, True)]
    if isinstance(s, ir.AttrStmt) and _mask_count(s) is not None:
        return [(s.value[0], True)]
    return []


def _stmts(s: ir.Stmt) -> list[ir.Stmt]:
    """The statements directly inside ``s``."""
    if isinstance(s, ir.Block):
        return list(s.stmts)
    if isinstance(s, ir.IfThenElse):
        return [s.then] + ([s.orelse] if s.orelse is not None else [])
    if isinstance(s, (ir.For, ir.LetStmt, ir.AttrStmt, ir.Allocate)):
        return [s.body]
    return []


def _rebuilt(s: ir.Stmt, exprs: list, stmts: list) -> ir.Stmt:
    """``s`` with its expressions and statements replaced (``s`` itself when none
    changed)."""
    if all(a is b for a, b in zip(exprs, (e for e, _ in _exprs(s)))) and \
            all(a is b for a, b in zip(stmts, _stmts(s))):
        return s
    if isinstance(s, ir.Block):
        return ir.Block(tuple(stmts))
    if isinstance(s, ir.For):
        return ir.For(s.var, exprs[1], exprs[0], s.kind, stmts[0], s.annotations)
    if isinstance(s, ir.LetStmt):
        return ir.LetStmt(s.var, exprs[0], stmts[0])
    if isinstance(s, ir.IfThenElse):
        return ir.IfThenElse(exprs[0], stmts[0], stmts[1] if len(stmts) > 1 else None)
    if isinstance(s, ir.Store):
        return ir.Store(s.buffer, tuple(exprs[:-1]), exprs[-1], s.lanes)
    if isinstance(s, ir.Evaluate):
        return ir.Evaluate(exprs[0])
    if isinstance(s, ir.Return):
        return ir.Return(exprs[0])
    if isinstance(s, ir.AttrStmt):
        value = (exprs[0], *s.value[1:]) if exprs else s.value
        return ir.AttrStmt(s.key, value, stmts[0])
    assert isinstance(s, ir.Allocate)
    return ir.Allocate(s.buffer, stmts[0])


def _index_value(e: ir.Expr) -> bool:
    """Whether a let of the index expression ``e`` binds an index variable (an int64
    one: the printers' :func:`~polycomp.lowering.simplify.is_index`)."""
    return e.dtype == "int64" and is_index(e, selects=True)


def _mask_count(s: ir.AttrStmt):
    """The lane count of a ``vector_mask`` attribute (``(count, L)``), else None."""
    from polycomp.scheduler.common import marks
    if s.key == marks.VECTOR_MASK and isinstance(s.value, tuple) and \
            isinstance(s.value[0], ir.Expr):
        return s.value[0]
    return None


def _chosen(w: _Walk, min_nodes: int) -> list[int]:
    """The keys to bind: at least ``min_nodes`` nodes, referenced twice or more (by
    distinct enclosing index expressions or at the top)."""
    return [k for k, e in enumerate(w.entries)
            if e.nodes >= min_nodes and e.roots + len(e.parents) >= 2]


class _Rewrite(ir.Mutator):
    """The second walk: the same positions and keys as :class:`_Walk`, each bound
    expression replaced by its variable and the ``let`` s wrapped around their
    statements (their values taken in the scope the ``let`` lives in)."""

    def __init__(self, w: _Walk, bound: dict[int, ir.Var], at: dict[int, list[int]]):
        self.w, self.bound, self.at, self.keys = w, bound, at, w.keys
        self.pos = -1
        self.binder: dict[ir.Var, int] = {}
        self.index_vars: set[ir.Var] = set()
        self.scope = -1

    def get(self, parts: tuple) -> int | None:
        """The key of an expression of ``parts`` in the current scope (as interned)."""
        return self.keys.get(parts + (self.scope,))

    # ------------------------------------------------------------ expressions
    def visit(self, node):
        if isinstance(node, ir.Expr):
            return self.rw(node)[0]
        return super().visit(node)

    def rw(self, e: ir.Expr, own: int | None = None) -> tuple[ir.Expr, int | None]:
        """(``e`` with its bound sub-expressions read from their variables, its key or
        None); ``own``: a key not replaced at the top (a let's own value)."""
        if e.dtype not in ("int64", "bool") or isinstance(e, (ir.Ramp, ir.Broadcast)) or \
                getattr(e, "lanes", 1) != 1:
            return self.generic(e), None
        k: int | None = None
        out: ir.Expr = e
        if isinstance(e, ir.IntImm):
            k = self.get(("i", e.value, e.dtype))
        elif isinstance(e, ir.Var):
            if e.dtype == "int64" and not (e in self.binder and e not in self.index_vars):
                b = self.binder.get(e)
                k = self.get(("v", e.name) if b is None else ("w", b))
        elif isinstance(e, ir.Binary):
            (a, ka), (b_, kb) = self.rw(e.a), self.rw(e.b)
            if ka is not None and kb is not None:
                k = self.get(("b", e.op, ka, kb))
            if a is not e.a or b_ is not e.b:
                out = ir.Binary(e.op, a, b_, e.dtype)
        elif isinstance(e, ir.Unary):
            a, ka = self.rw(e.a)
            if ka is not None:
                k = self.get(("u", e.op, ka))
            if a is not e.a:
                out = ir.Unary(e.op, a, e.dtype)
        elif isinstance(e, ir.Select):
            (c, kc), (t, kt), (f, kf) = self.rw(e.cond), self.rw(e.t), self.rw(e.f)
            if e.dtype == "int64" and kc is not None and kt is not None and kf is not None:
                k = self.get(("s", kc, kt, kf))
            if c is not e.cond or t is not e.t or f is not e.f:
                out = ir.Select(c, t, f, e.dtype)
        else:
            return self.generic(e), None
        if k is not None and k != own and k in self.bound:
            return self.bound[k], k
        return out, k

    def stmt(self, s: ir.Stmt) -> ir.Stmt:
        self.pos += 1
        me = self.pos
        lets = [(self.bound[k], self.rw(self.w.entries[k].expr, own=k)[0])
                for k in self.at.get(me, ())]
        exprs = []
        keys = []
        for e, whole in _exprs(s):
            new, k = self.rw(e) if whole else (self.generic(e), None)
            exprs.append(new)
            keys.append(k)
        _note_binding(s, me, keys, self.binder, self.index_vars)
        scope = self.scope
        if _outlined(s):
            self.scope = me
        out = _rebuilt(s, exprs, [self.stmt(c) for c in _stmts(s)])
        self.scope = scope
        for var, value in reversed(lets):
            out = ir.LetStmt(var, value, out)
        return out


def index_cse(func: ir.LoweredFunc, min_nodes: int = MIN_NODES,
              enabled: bool = True) -> ir.LoweredFunc:
    """The pass of the module docstring (``enabled`` False: ``func`` unchanged)."""
    if not enabled:
        return func
    w = _Walk()
    w.stmt(func.body, -1)
    chosen = _chosen(w, min_nodes)
    if not chosen:
        return func
    bound = {k: ir.Var(f"ix{i + 1}", w.entries[k].expr.dtype)
             for i, k in enumerate(sorted(chosen, key=lambda k: w.entries[k].first))}
    at: dict[int, list[int]] = {}
    for k in sorted(chosen, key=lambda k: (w.entries[k].nodes, w.entries[k].first)):
        at.setdefault(w.place(k), []).append(k)
    body = _Rewrite(w, bound, at).stmt(func.body)
    from dataclasses import replace
    return replace(func, body=body)
