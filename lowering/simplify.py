"""IR simplification: constant folding, affine normalisation, trivial-control removal.

Integer expressions built from ``+ - *const neg`` are normalised to a sum of
``coefficient * atom`` plus a constant (atoms are Vars or simplified non-linear
sub-expressions, kept in first-appearance order), which folds ``i + 1 - 1``, ``2*(i+1)
- 2*i`` and the like.  ``min``/``max``/comparisons of expressions whose difference is a
constant are decided.  Statements: loops of extent 1 become substitutions, loops of
constant extent <= 0 and ``if`` with a constant-false condition disappear, lets of
affine values are substituted, nested blocks are flattened.

Integer semantics (docs/dsl.md, "Integer arithmetic"): every integer dtype wraps around
like numpy (two's complement modulo ``2**bits``).  The rewrites keep that:

* the normal form is a ring identity modulo ``2**bits``, so it holds for any value:
  coefficients and constants are reduced to the dtype (``x + 127 + 1`` of int8 is
  ``x - 128``), and a sub-expression of another width is an atom (it wraps at its own
  width, so ``(int32 x + 1) + int64 y`` is not ``x + y + 1``);
* constant folding wraps to the dtype (``INT64_MAX + 1`` folds to ``INT64_MIN``) and
  follows numpy for ``//`` and ``%`` by zero (0);
* the order-dependent decisions -- ``< <= > >=``, ``min``/``max`` and the ``//``/``%``
  rules -- assume the values do not wrap, which holds only for *index arithmetic*:
  int64 expressions over iterators, symbols and constants (:func:`is_index`; polycomp
  keeps sizes and indices far from ``2**63``).  On data (a load, a call, a cast, a
  let-bound value) ``A[i] + 1 > A[i]`` stays a comparison: it is false at
  ``INT64_MAX``.  ``==``/``!=`` of a constant difference are decided on data too
  (``a - b == d`` modulo ``2**bits`` is exact).

The simplifier never changes floating-point evaluation order, and never decides a
float comparison (``x + 1 > x`` is false at inf, NaN and 1e20).
"""
from __future__ import annotations

import numpy as np

from polycomp import dtypes as dt
from polycomp import ir

# --------------------------------------------------------------------------- linear forms


def wrap(v: int, dtype: str) -> int:
    """``v`` as a value of the integer ``dtype``: two's complement modulo ``2**bits``
    (numpy's wrap-around); other dtypes pass ``v`` through."""
    if dtype not in dt.INTS:
        return v
    m = 1 << dt.bits(dtype)
    v &= m - 1
    return v - m if v >= m >> 1 else v


def is_index(e, data_vars=frozenset(), index_calls=frozenset(), selects=False) -> bool:
    """Whether ``e`` is index arithmetic: int64, built from integer constants and int64
    Vars (iterators, symbols, lets of index values; not those in ``data_vars``) with
    ``+ - * // % min max`` and negation.  polycomp's contract is that such expressions
    never overflow (sizes and indices stay far from ``2**63``), so comparisons of them
    may be decided by their difference; loads, casts, calls and selects are data, which
    wraps (see the module docstring).  ``index_calls``: names of pure calls that are
    index arithmetic of index arguments too (a backend's printer: the CUDA swizzle's
    ``pc_xor``); with ``selects``, a select of two index values is one (the printers:
    it cannot overflow; the simplifier keeps selects as data atoms).  A gather index
    (:func:`polycomp.ir.gather_index`) is an index value: it lies in ``[0, extent)``."""
    if e.dtype != "int64":
        return False
    if isinstance(e, ir.IntImm):
        return True
    if isinstance(e, ir.Var):
        return e not in data_vars
    if isinstance(e, ir.Binary) and e.op in ("+", "-", "*", "//", "%", "min", "max"):
        return is_index(e.a, data_vars, index_calls, selects) and \
            is_index(e.b, data_vars, index_calls, selects)
    if isinstance(e, ir.Unary) and e.op == "neg":
        return is_index(e.a, data_vars, index_calls, selects)
    if ir.is_gather_index(e):       # a checked gather index: in [0, extent)
        return True
    if isinstance(e, ir.Call) and e.name in index_calls:
        return all(is_index(a, data_vars, index_calls, selects) for a in e.args)
    if selects and isinstance(e, ir.Select):
        return is_index(e.t, data_vars, index_calls, selects) and \
            is_index(e.f, data_vars, index_calls, selects)
    return False


def linear(e, dtype: str | None = None, forms: dict | None = None):
    """(terms: dict atom->coeff (insertion ordered), const) of ``e`` as a ``dtype``
    value (default its own), or None if not integer.  The form is exact modulo
    ``2**bits``; a sub-expression of another integer dtype is an atom.

    ``forms``: ``id(node) -> (node, linear(node))`` of nodes of their own dtype whose
    form is known (:meth:`Simplifier.visit_Binary` records those of the sums it builds);
    a node found there is not walked again.  The returned terms may then be a dict
    held by ``forms``: callers copy before changing it (every caller here does)."""
    if e.dtype not in dt.INTS:
        return None
    if dtype is None:
        dtype = e.dtype
    if isinstance(e, ir.IntImm):
        return {}, e.value
    if e.dtype != dtype:
        return {e: 1}, 0
    if forms is not None:
        hit = forms.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
    if isinstance(e, ir.Binary) and e.op in ("+", "-"):
        a, b = linear(e.a, dtype, forms), linear(e.b, dtype, forms)
        if a is None or b is None:
            return None
        s = -1 if e.op == "-" else 1
        terms = dict(a[0])
        for k, c in b[0].items():
            terms[k] = terms.get(k, 0) + s * c
        return terms, a[1] + s * b[1]
    if isinstance(e, ir.Binary) and e.op == "*":
        a, b = linear(e.a, dtype, forms), linear(e.b, dtype, forms)
        if a is None or b is None:
            return None
        if not a[0]:
            a, b = b, a
        if not b[0]:
            c = b[1]
            return {k: v * c for k, v in a[0].items()}, a[1] * c
        return {e: 1}, 0
    if isinstance(e, ir.Unary) and e.op == "neg":
        a = linear(e.a, dtype, forms)
        if a is None:
            return None
        return {k: -v for k, v in a[0].items()}, -a[1]
    return {e: 1}, 0


def _key(atom):
    return atom if isinstance(atom, ir.Var) else ("expr", id(atom))




def _from_linear(terms, const, dtype) -> ir.Expr:
    """The expression of a linear form; coefficients and the constant are reduced to
    ``dtype`` (exact modulo ``2**bits``; the dtype's minimum is added, never negated)."""
    return _from_linear_and_form(terms, const, dtype)[0]


def _from_linear_and_form(terms, const, dtype):
    """(:func:`_from_linear`, its own :func:`linear` form or None for a constant).
    The form is what :func:`linear` reads back from the expression built here: the
    atoms of positive coefficient (and of the dtype's minimum) first, then the
    negative ones, each with its wrapped coefficient, zeros dropped; the wrapped
    constant.  (Each atom is a node :func:`linear` maps to ``{atom: 1}``: a Var, a
    non-linear product, a node of another dtype or of another kind.)"""
    lowest = -(1 << (dt.bits(dtype) - 1))
    pos: list[tuple[ir.Expr, int]] = []
    neg: list[tuple[ir.Expr, int]] = []
    for atom, c in terms.items():
        c = wrap(c, dtype)
        if c == 0:
            continue
        (pos if c > 0 or c == lowest else neg).append((atom, abs(c) if c != lowest else c))
    out = None
    form: dict = {}

    def term(atom, c):
        return atom if c == 1 else ir.Binary("*", atom, ir.IntImm(c, dtype), dtype)
    for atom, c in pos:
        t = term(atom, c)
        out = t if out is None else ir.Binary("+", out, t, dtype)
        form[atom] = c
    for atom, c in neg:
        t = term(atom, c)
        out = ir.Binary("-", out, t, dtype) if out is not None else ir.Unary("neg", t, dtype)
        form[atom] = -c
    const = wrap(const, dtype)
    if out is None:
        return ir.IntImm(const, dtype), None
    if const > 0 or const == lowest:
        out = ir.Binary("+", out, ir.IntImm(const, dtype), dtype)
    elif const < 0:
        out = ir.Binary("-", out, ir.IntImm(-const, dtype), dtype)
    return out, (form, const)


def _merge_atoms(terms):
    """Combine structurally equal atoms (e.g. two copies of ``x // 4``).  A Var equals
    only itself (:func:`polycomp.ir.structural_equal`), and the keys of ``terms`` are
    distinct objects, so only the other atoms are compared, with each other (comparing
    every atom with every key made a sum of ``n`` Vars cost ``n**2`` at each level)."""
    out: dict = {}
    others: list = []           # the keys of ``out`` that are not Vars, in order
    for atom, c in terms.items():
        if isinstance(atom, ir.Var):
            out[atom] = c
            continue
        for k in others:
            if k is atom or ir.structural_equal(k, atom):
                out[k] += c
                break
        else:
            out[atom] = c
            others.append(atom)
    return out


def const_difference(a: ir.Expr, b: ir.Expr):
    """``a - b`` if it is a known constant, else None."""
    la, lb = linear(a), linear(b)
    if la is None or lb is None:
        return None
    terms = dict(la[0])
    for k, c in lb[0].items():
        terms[k] = terms.get(k, 0) - c
    terms = _merge_atoms(terms)
    if any(c != 0 for c in terms.values()):
        return None
    return la[1] - lb[1]


# --------------------------------------------------------------------------- exprs


def _fold(op, a, b):
    """``a op b`` of two integer constants, exact (the caller wraps it to the dtype);
    ``//`` and ``%`` by zero give 0 (numpy)."""
    if op == "+": return a + b
    if op == "-": return a - b
    if op == "*": return a * b
    if op == "//": return a // b if b else 0
    if op == "%": return a % b if b else 0
    if op == "min": return min(a, b)
    if op == "max": return max(a, b)
    if op == "<": return a < b
    if op == "<=": return a <= b
    if op == ">": return a > b
    if op == ">=": return a >= b
    if op == "==": return a == b
    if op == "!=": return a != b
    return None


def upper_bound(e):
    """A constant upper bound of an integer expression built from constants, min, +1."""
    if isinstance(e, ir.IntImm):
        return e.value
    if isinstance(e, ir.Binary) and e.op == "min":
        ua, ub = upper_bound(e.a), upper_bound(e.b)
        return ub if ua is None else ua if ub is None else min(ua, ub)
    if isinstance(e, ir.Binary) and e.op == "+":
        ua, ub = upper_bound(e.a), upper_bound(e.b)
        return None if ua is None or ub is None else ua + ub
    return None


class Simplifier(ir.Mutator):
    """See the module docstring; ``bounds`` holds the constant ranges of enclosing loop
    variables, used to decide ``(q*x + r) // q == x`` when ``0 <= r < q``."""

    def __init__(self, remember_forms: bool = True):
        self.bounds: dict = {}
        # id(simplified allocation chain) -> (that node, the buffers it uses)
        self._uses: dict = {}
        # int64 Vars let-bound to data (their arithmetic wraps: not index arithmetic)
        self.data_vars: set = set()
        # id(sum built by visit_Binary) -> (that node, its linear form): the sum one
        # level up reads its operands' forms here instead of walking them again
        # (quadratic in the depth of a sum); None: no memo (every form recomputed)
        self._forms: dict | None = {} if remember_forms else None

    def _index(self, *es) -> bool:
        return all(is_index(e, self.data_vars) for e in es)

    def _buffers(self, node) -> set:
        """The buffers loaded, stored or allocated in ``node`` (as :func:`ir.buffers_of`),
        reusing the sets of the allocation chains simplified inside it."""
        out: set = set()
        stack = [node]
        while stack:
            n = stack.pop()
            hit = self._uses.get(id(n))
            if hit is not None and hit[0] is n:
                out |= hit[1]
                continue
            if isinstance(n, (ir.Load, ir.Store, ir.Allocate)):
                out.add(n.buffer)
            stack.extend(ir.children(n))
        return out

    def _range(self, terms, const):
        lo = hi = const
        for atom, c in terms.items():
            b = self.bounds.get(atom)
            if b is None:
                return None
            lo += min(c * b[0], c * b[1])
            hi += max(c * b[0], c * b[1])
        return lo, hi

    def _split_div(self, lin, q):
        """(quotient terms, const) if lin = q*x + r with 0 <= r < q provably, else None."""
        terms, const = lin
        quot = {k: c // q for k, c in terms.items() if c % q == 0}
        rest = {k: c for k, c in terms.items() if c % q != 0}
        rng = self._range(rest, const % q)
        if rng is None or rng[0] < 0 or rng[1] >= q:
            return None
        return quot, const // q, rest, const % q

    def visit_Binary(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        op = e.op
        if isinstance(a, ir.IntImm) and isinstance(b, ir.IntImm) and e.dtype in dt.INTS + ("bool",):
            if op in ("&&", "||"):
                v = (a.value and b.value) if op == "&&" else (a.value or b.value)
                return ir.IntImm(int(bool(v)), "bool")
            v = _fold(op, a.value, b.value)
            if v is not None:
                return ir.IntImm(wrap(int(v), e.dtype), e.dtype)
        if op in ("&&", "||"):
            for x, y in ((a, b), (b, a)):
                if isinstance(x, ir.IntImm):
                    if op == "&&":
                        return y if x.value else ir.IntImm(0, "bool")
                    return ir.IntImm(1, "bool") if x.value else y
            return ir.Binary(op, a, b, "bool")
        if e.dtype in dt.INTS:
            if op in ("+", "-", "*"):
                lin = linear(ir.Binary(op, a, b, e.dtype), forms=self._forms)
                if lin is not None:
                    out, form = _from_linear_and_form(_merge_atoms(lin[0]), lin[1], e.dtype)
                    # (a lone atom of another dtype is no form of its own dtype)
                    if form is not None and self._forms is not None and out.dtype == e.dtype:
                        self._forms[id(out)] = (out, form)
                    return out
            if op in ("min", "max") and self._index(a, b):
                d = const_difference(a, b)
                if d is not None:
                    return (a if d <= 0 else b) if op == "min" else (a if d >= 0 else b)
            if op in ("//", "%") and isinstance(b, ir.IntImm) and b.value > 0 \
                    and self._index(a):
                lin = linear(a)
                sp = self._split_div((_merge_atoms(lin[0]), lin[1]), b.value) if lin else None
                if sp is not None:
                    if op == "//":
                        return _from_linear(sp[0], sp[1], e.dtype)
                    return _from_linear(sp[2], sp[3], e.dtype)
            if op == "//" and isinstance(b, ir.IntImm):
                if b.value == 1:
                    return a
                lin = linear(a) if self._index(a) else None
                if lin is not None and b.value > 0 and \
                        all(c % b.value == 0 for c in lin[0].values()):
                    # (b*x + c) // b == x + c // b
                    q = {k: c // b.value for k, c in lin[0].items()}
                    return _from_linear(q, lin[1] // b.value, e.dtype)
            if op == "%" and isinstance(b, ir.IntImm):
                if b.value == 1:
                    return ir.IntImm(0, e.dtype)
                lin = linear(a) if self._index(a) else None
                if lin is not None and b.value > 0 and \
                        all(c % b.value == 0 for c in lin[0].values()):
                    return ir.IntImm(lin[1] % b.value, e.dtype)
        if e.dtype == "bool" and op in ("<", "<=", ">", ">=", "==", "!=") \
                and a.dtype in dt.INTS and b.dtype in dt.INTS:
            d = const_difference(a, b)
            if d is not None and self._index(a, b):
                return ir.IntImm(int(_fold(op, d, 0)), "bool")
            if d is not None and op in ("==", "!=") and a.dtype == b.dtype:
                # exact modulo 2**bits: a == b iff a - b wraps to 0
                return ir.IntImm(int(_fold(op, wrap(d, a.dtype), 0)), "bool")
        if dt.is_float(e.dtype):
            # only exact identities: x*1, x+0 is not exact for -0.0, skip it
            if op == "*" and ir.is_const(b, 1.0):
                return a
            if op == "*" and ir.is_const(a, 1.0):
                return b
        if a is e.a and b is e.b:
            return e
        return ir.Binary(op, a, b, e.dtype)

    def visit_Unary(self, e):
        a = self.visit(e.a)
        if e.op == "neg" and isinstance(a, ir.IntImm):
            return ir.IntImm(wrap(-a.value, a.dtype), a.dtype)
        if e.op == "neg" and isinstance(a, ir.FloatImm):
            return ir.FloatImm(-a.value, a.dtype)
        if e.op == "!" and isinstance(a, ir.IntImm):
            return ir.IntImm(0 if a.value else 1, "bool")
        return e if a is e.a else ir.Unary(e.op, a, e.dtype)

    def visit_Select(self, e):
        c = self.visit(e.cond)
        if isinstance(c, ir.IntImm):
            return self.visit(e.t if c.value else e.f)
        t, f = self.visit(e.t), self.visit(e.f)
        if c is e.cond and t is e.t and f is e.f:
            return e
        return ir.Select(c, t, f, e.dtype)

    def visit_Cast(self, e):
        v = self.visit(e.value)
        if v.dtype == e.dtype:
            return v
        if isinstance(v, ir.IntImm) and e.dtype in ("float32", "float64"):
            # rounded once, to the target type (float(int) then float32 rounds twice)
            return ir.FloatImm(float(np.asarray(v.value, np.int64).astype(dt.to_numpy(e.dtype))),
                               e.dtype)
        if isinstance(v, ir.IntImm) and e.dtype in dt.INTS:
            return ir.IntImm(wrap(v.value, e.dtype), e.dtype)
        if isinstance(v, ir.FloatImm) and dt.is_float(e.dtype) and \
                e.dtype in ("float32", "float64"):
            return ir.FloatImm(v.value, e.dtype)
        return e if v is e.value else ir.Cast(v, e.dtype)

    # ------------------------------------------------------------------ statements
    def visit_For(self, s):
        mn, ext = self.visit(s.min), self.visit(s.extent)
        if isinstance(ext, ir.IntImm) and ext.value <= 0:
            return None
        if isinstance(ext, ir.IntImm) and ext.value == 1 and \
                s.kind in ("serial", "unrolled", "parallel"):
            return self.visit(ir.substitute(s.body, {s.var: mn}))
        lo, ub = (mn.value if isinstance(mn, ir.IntImm) else None), upper_bound(ext)
        if lo is not None and ub is not None:
            self.bounds[s.var] = (lo, lo + ub - 1)
        body = self.visit(s.body)
        self.bounds.pop(s.var, None)
        if body is None:
            return None
        if mn is s.min and ext is s.extent and body is s.body:
            return s
        return ir.For(s.var, mn, ext, s.kind, body, s.annotations)

    def visit_IfThenElse(self, s):
        c = self.visit(s.cond)
        if isinstance(c, ir.IntImm):
            return self.visit(s.then) if c.value else self.visit(s.orelse)
        t, e = self.visit(s.then), self.visit(s.orelse)
        if t is None and e is None:
            return None
        if t is None:
            return ir.IfThenElse(ir.Unary("!", c, "bool"), e, None)
        return ir.IfThenElse(c, t, e)

    def visit_LetStmt(self, s):
        v = self.visit(s.value)
        if v.dtype in dt.INTS and linear(v) is not None and _is_cheap(v):
            return self.visit(ir.substitute(s.body, {s.var: v}))
        if not self._index(v):
            self.data_vars.add(s.var)
        b = self.visit(s.body)
        if b is None:
            return None
        return ir.LetStmt(s.var, v, b)

    def visit_Block(self, s):
        out = [self.visit(x) for x in s.stmts]
        out = [x for x in out if x is not None]
        if not out:
            return None
        return ir.seq(*out)

    def visit_Allocate(self, s):
        """An allocation whose buffer the simplified body no longer uses (dead after
        promotion) is dropped.  A chain of directly nested allocations (one per
        temporary) is handled at once: the innermost body is simplified and scanned
        for its buffers once (reusing the scans of chains nested deeper), and the kept
        allocations use nothing else."""
        chain = [s]
        while isinstance(chain[-1].body, ir.Allocate):
            chain.append(chain[-1].body)
        b = self.visit(chain[-1].body)
        if b is None:
            return None
        used = self._buffers(b)
        for a in reversed(chain):
            if a.buffer in used:
                b = a if b is a.body else ir.Allocate(a.buffer, b)
        self._uses[id(b)] = (b, used)
        return b

    def visit_AttrStmt(self, s):
        b = self.visit(s.body)
        if b is None:
            return None
        return s if b is s.body else ir.AttrStmt(s.key, s.value, b)


def _is_cheap(e) -> bool:
    """Affine in Vars with no division: substituting it never duplicates real work."""
    lin = linear(e)
    return lin is not None and all(isinstance(a, ir.Var) for a in lin[0])


def simplify(node):
    """Simplify an expression or statement (may return None for an empty statement)."""
    out = Simplifier().visit(node)
    if out is None and isinstance(node, ir.Stmt):
        return ir.Block(())
    return out
