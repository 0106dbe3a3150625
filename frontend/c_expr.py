"""C expressions -> polycomp IR, and affine expressions/conditions -> isl text.

:class:`ExprReader` converts pycparser expressions of a SCoP into IR (``ir.Load`` for
array elements, ``ir.Var`` for iterators and integer parameters, ``ir.Select`` for
ternaries, ``ir.Call`` for the pure math functions of :data:`MATH_FUNCTIONS`); it is the
base of :class:`polycomp.frontend.c_scop.ScopReader`.  Literals stay Python numbers until
they meet a typed operand (weak typing, as in numpy).  :func:`affine_pieces` and
:func:`cond_text` turn affine IR (possibly with ternaries whose conditions are affine,
i.e. ``MIN``/``MAX`` macros) into isl text; they raise
:class:`~polycomp.errors.NonAffineIndexError` naming the C source line.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, NoReturn

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.affine import and_conditions, to_isl
from polycomp.errors import (
    NonAffineIndexError,
    PolycompError,
    ShapeMismatchError,
    SourceLocation,
    UnknownSymbolError,
    UnsupportedConstructError,
)

from .c_program import source_location

__all__ = ["ExprReader", "Scope", "MATH_FUNCTIONS", "ELEMENT_TYPES", "INT_WORDS",
           "ISL_KEYWORDS", "affine_pieces", "cond_text", "guarded", "isl_name",
           "param_prefix", "type_words", "resolve_typedefs", "c_text", "node_kind"]


ELEMENT_TYPES = {
    ("float",): "float32", ("double",): "float64",
    ("int",): "int32", ("signed", "int"): "int32", ("int32_t",): "int32",
    ("long",): "int64", ("long", "int"): "int64", ("long", "long"): "int64",
    ("long", "long", "int"): "int64", ("int64_t",): "int64",
    ("int8_t",): "int8", ("signed", "char"): "int8",
    # plain char is signed on the x86-64 and AArch64-Linux ABIs polycomp targets' gcc uses
    ("char",): "int8",
    ("_Bool",): "bool", ("bool",): "bool",
    # the half-precision types of gcc and clang (the reader's prelude declares them as
    # typedef names for pycparser; they stay these words)
    ("_Float16",): "float16", ("__fp16",): "float16",
}

#: the words of the half-precision element types
HALF_WORDS = ("_Float16", "__fp16")

#: integer dtypes C promotes to ``int`` before arithmetic
_PROMOTED_TO_INT = ("int8", "bool")

INT_WORDS = {"int", "long", "short", "signed", "unsigned", "char", "int8_t", "int16_t",
              "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t",
              "size_t", "ptrdiff_t", "intptr_t", "ssize_t"}

MATH_FUNCTIONS = {
    "expf": ("exp", 1, "float32"), "exp": ("exp", 1, "float64"),
    "logf": ("log", 1, "float32"), "log": ("log", 1, "float64"),
    "sqrtf": ("sqrt", 1, "float32"), "sqrt": ("sqrt", 1, "float64"),
    "tanhf": ("tanh", 1, "float32"), "tanh": ("tanh", 1, "float64"),
    "erff": ("erf", 1, "float32"), "erf": ("erf", 1, "float64"),
    "fabsf": ("abs", 1, "float32"), "fabs": ("abs", 1, "float64"), "abs": ("abs", 1, None),
    "floorf": ("floor", 1, "float32"), "floor": ("floor", 1, "float64"),
    "ceilf": ("ceil", 1, "float32"), "ceil": ("ceil", 1, "float64"),
    "powf": ("pow", 2, "float32"), "pow": ("pow", 2, "float64"),
    "fmaxf": ("max", 2, None), "fmax": ("max", 2, None), "max": ("max", 2, None),
    "MAX": ("max", 2, None), "fminf": ("min", 2, None), "fmin": ("min", 2, None),
    "min": ("min", 2, None), "MIN": ("min", 2, None),
}

#: math functions whose double result of a float argument is a float value (exact), so
#: the argument need not be converted (`sqrt` is not: its double result feeds double
#: arithmetic unrounded in C)
_EXACT_IN_ANY_TYPE = ("abs", "floor", "ceil", "min", "max")

ISL_KEYWORDS = {"and", "or", "not", "exists", "mod", "floor", "ceil", "min", "max",
                 "infty", "NaN", "true", "false", "domain", "floord", "ceild", "implies"}


# --------------------------------------------------------------------------- scope and reader


@dataclass(eq=False)
class Scope:
    """The loops and conditions enclosing the statement being read, and the local
    variables visible there (C name -> CArray; block-scoped as in C)."""
    loops: list = field(default_factory=list)        # ir.Var, outermost first
    constraints: list = field(default_factory=list)  # isl texts
    locals: dict = field(default_factory=dict)       # C name -> CArray
    block_names: set = field(default_factory=set)    # locals declared in this block

    def inner(self, loops=None, constraints=None) -> Scope:
        """The same block with other loops/constraints (a loop or branch body)."""
        return Scope(list(self.loops) if loops is None else loops,
                     list(self.constraints) if constraints is None else constraints,
                     self.locals, self.block_names)

    def block(self) -> Scope:
        """A nested ``{ ... }`` block: sees the enclosing locals, declares its own."""
        return Scope(self.loops, self.constraints, dict(self.locals), set())


class ExprReader:
    """Expression conversion for one C function.  Subclasses set ``name`` (the
    function), ``filename``, ``lines`` (its source), ``params`` (name -> ir.Var),
    and ``arrays`` (name -> CArray)."""
    name: str
    filename: str
    lines: list[str]
    params: dict[str, ir.Var]
    arrays: dict[str, Any]
    typedefs: dict[str, tuple]

    @property
    def c_literal_types(self) -> bool:
        """Whether floating literals and math-function arguments take their C types
        (``0.1`` double, ``0.1f`` float; ``exp(float)`` in double), as gcc computes them;
        ``POLYCOMP_C_LITERAL_TYPES=0`` reads them weakly typed instead (a literal takes
        the type of the array it meets, ``exp`` of a float is ``expf``), as before."""
        return os.environ.get("POLYCOMP_C_LITERAL_TYPES", "1") != "0"

    def words(self, node) -> tuple:
        """:func:`type_words` of ``node`` with ``typedef`` names resolved (a name
        declared by ``typedef char base;`` becomes ``("char",)``)."""
        return resolve_typedefs(type_words(node), getattr(self, "typedefs", {}))

    def loc(self, node) -> SourceLocation | None:
        c = getattr(node, "coord", None)
        if c is None or c.line is None:
            return None
        return source_location(c.file, c.line, self.lines, self.filename)

    def c_files(self) -> set:
        """The files the function's nodes come from (the C file, included headers)."""
        files = getattr(self, "_c_files", None)
        if files is None:
            files = {self.filename}
            stack = [getattr(self, "func", None)]
            while stack:
                n = stack.pop()
                if n is None:
                    continue
                c = getattr(n, "coord", None)
                if c is not None and c.file:
                    files.add(c.file)
                stack.extend(child for _, child in n.children())
            self._c_files = files
        return files

    def relocate(self, e: PolycompError, node) -> PolycompError:
        """``e`` at ``node``'s C line when it names no line of the C source: the IR
        builders (``ir.binary`` checking that a literal fits its dtype, ...) locate
        their errors at the Python caller, which for C input is polycomp's caller."""
        loc = e.location
        if loc is not None and loc.filename in self.c_files():
            return e
        here = self.loc(node)
        if here is None:
            return e
        e.location = here
        e.args = (f"{e.message}\n  at {here}",)
        return e

    def unsupported(self, what, node, hint="") -> NoReturn:
        raise UnsupportedConstructError(
            f"{what} is not supported in a SCoP of C function {self.name!r}"
            + (f"; {hint}" if hint else ""), self.loc(node))

    def names(self, scope) -> dict:
        out = {v: isl_name(v.name) for v in self.params.values()}
        for v in scope.loops:
            out[v] = isl_name(v.name)
        return out

    def affine(self, node, scope, what):
        e = self.expr(node, scope, affine=True)
        e = ir.const(e) if not isinstance(e, ir.Expr) else e
        if not dt.is_int(e.dtype):
            raise NonAffineIndexError(f"{what} `{c_text(node)}` is not an integer expression",
                                      self.loc(node))
        pieces = affine_pieces(e, self.names(scope), self.loc(node), f"{what} `{c_text(node)}`")
        for _guard, p in pieces:
            to_isl(p, self.names(scope), what, self.loc(node))
        return e

    def condition(self, node, scope, what) -> str:
        """isl constraint text of an affine condition."""
        e = self.expr(node, scope, affine=True)
        e = _truth(e)
        return cond_text(e, self.names(scope), self.loc(node), what, c_text(node))

    def array_ref(self, node, scope) -> ir.Load:
        from pycparser import c_ast
        subs = []
        base = node
        while isinstance(base, c_ast.ArrayRef):
            subs.append(base.subscript)
            base = base.name
        subs.reverse()
        loc = self.loc(node)
        if not isinstance(base, c_ast.ID):
            self.unsupported(f"subscripted expression `{c_text(node)}`", node,
                             "only array parameters may be subscripted")
        arr = scope.locals.get(base.name) or self.arrays.get(base.name)
        if arr is None:
            if base.name in self.params or any(v.name == base.name for v in scope.loops):
                self.unsupported(f"subscripting the integer {base.name!r}", node)
            raise UnknownSymbolError(f"unknown array {base.name!r} in `{c_text(node)}` (arrays "
                                     f"must be parameters of {self.name!r})", loc)
        buf = arr.buffer
        if len(subs) != len(buf.shape):
            raise ShapeMismatchError(
                f"array {buf.name!r} has {len(buf.shape)} dimension(s) but `{c_text(node)}` "
                f"uses {len(subs)} subscript(s); polycomp needs a full element reference",
                loc)
        idx = []
        for k, s in enumerate(subs):
            e = self.affine(s, scope, f"subscript {k} of {buf.name!r}")
            idx.append(e)
        return ir.Load(buf, tuple(idx), buf.dtype)

    def arith(self, op, a, b, node, affine=False, scope=None):
        """``a op b`` with literals weakly typed (see the module docstring)."""
        if not isinstance(a, ir.Expr) and not isinstance(b, ir.Expr):
            if op in ("+", "-", "*"):
                return {"+": a + b, "-": a - b, "*": a * b}[op]
            if op == "/" and (isinstance(a, float) or isinstance(b, float)):
                if b == 0:
                    self.unsupported("division by the constant zero", node)
                return a / b
        # C's integer promotions: char and _Bool operands are computed in int
        if isinstance(a, ir.Expr) and a.dtype in _PROMOTED_TO_INT:
            a = ir.cast(a, "int32")
        if isinstance(b, ir.Expr) and b.dtype in _PROMOTED_TO_INT:
            b = ir.cast(b, "int32")
        da = a.dtype if isinstance(a, ir.Expr) else ("float32" if isinstance(a, float) else "int64")
        db = b.dtype if isinstance(b, ir.Expr) else ("float32" if isinstance(b, float) else "int64")
        if op in ("/", "%") and not dt.is_float(da) and not dt.is_float(db):
            return self.truncating(op, a, b, node, affine, scope)
        if op == "%":
            self.unsupported(f"floating-point remainder `{c_text(node)}`", node)
        return ir.binary(op, a, b)

    def truncating(self, op, a, b, node, affine=False, scope=None):
        """C's integer ``a / b`` (truncated towards zero) or ``a % b`` (the sign of
        ``a``) in polycomp's floor division ``//`` and modulo ``%``: the two differ by
        one step exactly when the remainder is non-zero and the signs of ``a`` and ``b``
        differ, which is a select on an affine condition when ``b`` is a constant (so
        ``n / 2``, ``A[i / 2]`` and ``if (i % 3 == 0)`` stay quasi-affine, case-split
        by isl; nothing overflows: ``a // b + 1`` and ``a % b - b`` lie between ``0``
        and ``a``).  A division by the constant 0 is an error; by a value that is 0 at
        run time it gives 0 (numpy's value; C leaves it undefined)."""
        if not isinstance(b, ir.Expr) and b == 0:
            self.unsupported(f"integer {'division' if op == '/' else 'remainder'} by the "
                             f"constant zero `{c_text(node)}`", node)
        what = "division" if op == "/" else "remainder"
        if not isinstance(a, ir.Expr) and not isinstance(b, ir.Expr):
            q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
            return q if op == "/" else a - b * q
        if affine and isinstance(b, ir.Expr):
            raise NonAffineIndexError(
                f"integer {what} `{c_text(node)}` by a non-constant is not quasi-affine; "
                f"bounds, subscripts and conditions may divide only by integer constants",
                self.loc(node))
        if not isinstance(b, ir.Expr) and b < 0:
            # C: a / -c == -(a / c) and a % -c == a % c (isl divides by positives only)
            t = self.truncating(op, a, -b, node, affine, scope)
            return t if op == "%" else (-t if not isinstance(t, ir.Expr)
                                        else ir.Unary("neg", t, t.dtype))
        q = ir.binary("//", a, b)
        r = ir.binary("%", a, b)
        if not isinstance(b, ir.Expr) and scope is not None and \
                self.never_negative(a, scope):
            return q if op == "/" else r     # floor and truncation agree
        a_expr = a if isinstance(a, ir.Expr) else ir.const(a)
        if isinstance(b, ir.Expr):
            # b's sign is known only at run time; floor-mod r != 0 implies a != 0
            sign_differs = ir.select(ir.binary("<", b, 0), ir.binary(">", a_expr, 0),
                                     ir.binary("<", a_expr, 0))
        else:
            sign_differs = ir.binary("<" if b > 0 else ">", a_expr, 0)
        differ = ir.Binary("&&", ir.binary("!=", r, 0), sign_differs, "bool")
        return ir.select(differ, q + 1, q) if op == "/" else ir.select(differ, r - b, r)

    def never_negative(self, e, scope) -> bool:
        """Whether the affine integer expression ``e`` is ``>= 0`` wherever the enclosing
        loops and conditions hold, for every size ``>= 1`` (isl; False when ``e`` is
        not affine or that cannot be shown)."""
        ctx = getattr(self, "ctx", None)
        if ctx is None or not isinstance(e, ir.Expr) or not dt.is_int(e.dtype):
            return False
        import islpy as isl
        names = self.names(scope)
        try:
            text = to_isl(e, names, "dividend", None)
        except PolycompError:
            return False
        dims = ", ".join(names[v] for v in scope.loops)
        sizes = [f"{isl_name(p)} >= 1" for p in self.params]
        where = " and ".join(f"({c})" for c in [*scope.constraints, *sizes, f"{text} < 0"])
        try:
            negative = isl.Set.read_from_str(
                ctx, f"{param_prefix(self.params.values())}{{ [{dims}] : {where} }}")
        except isl.Error:  # pragma: no cover - texts come from to_isl
            return False
        return bool(negative.is_empty())

    def expr(self, node, scope, affine=False):
        """IR for a C expression; integer and float literals stay Python numbers until
        they meet a typed operand (weak typing).  An error is located at the innermost
        C expression that raised it (:meth:`relocate`)."""
        try:
            return self._expr(node, scope, affine)
        except PolycompError as e:
            raise self.relocate(e, node) from None

    def _expr(self, node, scope, affine=False):
        from pycparser import c_ast
        loc = self.loc(node)
        if isinstance(node, c_ast.Constant):
            value = _literal(node, loc)
            if isinstance(value, float) and self.c_literal_types:
                # C: `0.1` is a double, `0.1f` a float (`x * 0.1` with a float `x` is
                # computed in double and rounded when stored)
                return ir.FloatImm(value, "float32" if node.value[-1] in "fF" else "float64")
            return value
        if isinstance(node, c_ast.ID):
            for v in reversed(scope.loops):
                if v.name == node.name:
                    return v
            if node.name in self.params:
                return self.params[node.name]
            arr = scope.locals.get(node.name) or self.arrays.get(node.name)
            if arr is not None and not arr.buffer.shape:   # a scalar: zero-dimensional
                if affine:
                    raise NonAffineIndexError(
                        f"`{c_text(node)}` uses the floating-point or local scalar "
                        f"{node.name!r} where an affine integer expression is needed "
                        f"(bounds, subscripts and conditions depend only on iterators and "
                        f"integer parameters)", loc)
                return ir.Load(arr.buffer, (), arr.buffer.dtype)
            if arr is not None:
                self.unsupported(f"array {node.name!r} used without subscripts", node)
            if node.name in getattr(self, "declared_iters", ()):
                raise UnknownSymbolError(
                    f"loop iterator {node.name!r} read outside its loops in "
                    f"`{c_text(node)}`: an iterator's value after its loop is not modelled; "
                    f"compute it from the bounds (e.g. `n` after `for (i = 0; i < n; i++)`)",
                    loc)
            raise UnknownSymbolError(f"unknown identifier {node.name!r} in `{c_text(node)}` "
                                     f"(not a loop iterator or a parameter of "
                                     f"{self.name!r})", loc)
        if isinstance(node, c_ast.ArrayRef):
            return self.array_ref(node, scope)
        if isinstance(node, c_ast.BinaryOp):
            op = node.op
            if op in ("&", "|", "^", "<<", ">>"):
                self.unsupported(f"bitwise operator {op!r} in `{c_text(node)}`", node)
            a = self.expr(node.left, scope, affine)
            b = self.expr(node.right, scope, affine)
            if op in ("&&", "||"):
                return ir.Binary(op, _truth(a), _truth(b), "bool")
            if op in ("<", "<=", ">", ">=", "==", "!="):
                if not isinstance(a, ir.Expr) and not isinstance(b, ir.Expr):
                    a = ir.const(a)
                return ir.binary(op, a, b)
            if op in ("+", "-", "*", "/", "%"):
                return self.arith(op, a, b, node, affine, scope)
            self.unsupported(f"operator {op!r} in `{c_text(node)}`", node)
        if isinstance(node, c_ast.UnaryOp):
            op = node.op
            if op in ("++", "--", "p++", "p--"):
                self.unsupported(f"`{c_text(node)}` inside an expression", node,
                                 "side effects are only allowed as statements")
            if op in ("*", "&"):
                self.unsupported(f"pointer {'dereference' if op == '*' else 'address-of'} "
                                 f"`{c_text(node)}`", node, "use array subscripts")
            if op == "sizeof":
                self.unsupported("sizeof", node)
            a = self.expr(node.expr, scope, affine)
            if op == "+":
                return a
            if op == "-":
                return -a if not isinstance(a, ir.Expr) else ir.Unary("neg", a, a.dtype)
            if op == "!":
                return ir.Unary("!", _truth(a), "bool")
            self.unsupported(f"operator {op!r} in `{c_text(node)}`", node)
        if isinstance(node, c_ast.TernaryOp):
            c = _truth(self.expr(node.cond, scope, affine))
            t = self.expr(node.iftrue, scope, affine)
            f = self.expr(node.iffalse, scope, affine)
            if not isinstance(t, ir.Expr) and not isinstance(f, ir.Expr):
                # two literals: C's type (``c ? 1 : 0`` is an int), so that ``x + (c ?
                # 1 : 0)`` stays int arithmetic as in C (it wraps there, not in int64)
                both_int = all(isinstance(v, int) and not isinstance(v, bool)
                               and -2**31 <= v < 2**31 for v in (t, f))
                t = ir.const(t, "int32" if both_int else None)
            return ir.select(c, t, f)
        if isinstance(node, c_ast.Cast):
            words = tuple(w for w in self.words(node.to_type) if w != "const")
            dtype = ELEMENT_TYPES.get(words)
            if dtype is None and words and all(w in INT_WORDS for w in words):
                dtype = "int64"
            if dtype is None:
                self.unsupported(f"cast to `{' '.join(words) or c_text(node.to_type)}`", node)
            v = self.expr(node.expr, scope, affine)
            return ir.cast(ir.const(v, dtype) if not isinstance(v, ir.Expr) else v, dtype)
        if isinstance(node, c_ast.FuncCall):
            return self.call(node, scope, affine)
        if isinstance(node, c_ast.Assignment):
            self.unsupported(f"assignment inside an expression `{c_text(node)}`", node)
        if isinstance(node, c_ast.ExprList):
            self.unsupported(f"comma operator `{c_text(node)}`", node)
        self.unsupported(f"{node_kind(node)} `{c_text(node)}`", node)

    def call(self, node, scope, affine):
        from pycparser import c_ast
        if not isinstance(node.name, c_ast.ID):
            self.unsupported(f"call through `{c_text(node.name)}`", node)
        fname = node.name.name
        args = list(node.args.exprs) if node.args is not None else []
        if fname in ("__builtin_inff", "__builtin_inf") and not args:
            return ir.FloatImm(float("inf"), "float32")
        if fname in ("__builtin_nanf", "__builtin_nan"):
            return ir.FloatImm(float("nan"), "float32")
        spec = MATH_FUNCTIONS.get(fname)
        if spec is None:
            self.unsupported(f"call of function {fname!r}", node,
                             f"only pure math functions are allowed "
                             f"({', '.join(sorted(MATH_FUNCTIONS))})")
        op, nargs, fdtype = spec
        if len(args) != nargs:
            raise UnsupportedConstructError(f"{fname}() takes {nargs} argument(s), got "
                                            f"{len(args)}", self.loc(node))
        vals = [self.expr(a, scope, affine) for a in args]
        if op in ("min", "max"):
            if not isinstance(vals[0], ir.Expr) and not isinstance(vals[1], ir.Expr):
                return (min if op == "min" else max)(vals[0], vals[1])
            return ir.binary(op, vals[0], vals[1])
        out = []
        for v in vals:
            if not isinstance(v, ir.Expr):
                v = ir.FloatImm(float(v), fdtype or "float32")
            if fdtype is not None and not dt.is_float(v.dtype):
                v = ir.cast(v, fdtype)
            elif fdtype is not None and v.dtype != fdtype and op not in _EXACT_IN_ANY_TYPE \
                    and self.c_literal_types:
                # C converts the argument to the parameter's type: `exp` of a float is
                # computed in double (`expf` of a double in float)
                v = ir.cast(v, fdtype)
            out.append(v)
        if op == "abs" and not dt.is_float(out[0].dtype):
            return ir.Call("abs", (out[0],), out[0].dtype)
        if op == "pow":
            d = dt.promote(out[0].dtype, out[1].dtype)
            out = [ir.cast(v, d) for v in out]
        return ir.Call(op, tuple(out), out[0].dtype)


# --------------------------------------------------------------------------- affine text


def isl_name(name: str) -> str:
    return name + "_" if name in ISL_KEYWORDS else name

def param_prefix(params) -> str:
    params = list(params)
    return "[" + ", ".join(isl_name(p.name) for p in params) + "] -> " if params else ""

def _literal(node, loc):
    v = node.value
    if node.type in ("int", "long", "long int", "unsigned int", "long long int",
                     "unsigned long int", "unsigned long long int") or \
            re.fullmatch(r"(0[xX][0-9a-fA-F]+|[0-9]+)[uUlL]*", v):
        s = v.rstrip("uUlL")
        try:
            return int(s, 0) if not re.fullmatch(r"0[0-7]+", s) else int(s, 8)
        except ValueError:
            pass
    if node.type in ("float", "double", "long double") or \
            re.fullmatch(r"[0-9.eE+\-pPxX]+[fFlL]?", v):
        try:
            return float(v.rstrip("fFlL")) if not v.lower().startswith("0x") else \
                float.fromhex(v.rstrip("fFlL"))
        except ValueError:
            pass
    raise UnsupportedConstructError(f"constant {v} ({node.type}) is not supported", loc)

def _truth(e) -> ir.Expr:
    """``e`` as a condition (C: non-zero is true)."""
    if not isinstance(e, ir.Expr):
        return ir.IntImm(1 if e else 0, "bool")
    if e.dtype == "bool":
        return e
    return ir.binary("!=", e, 0)

def guarded(guard, text) -> str:
    return f"(({guard}) and {text})" if guard else f"({text})"

def affine_pieces(e: ir.Expr, names, loc, what="expression") -> list:
    """``e`` as a list of ``(guard, select-free expr)``: the guards (isl texts, None for
    true) partition the space; ternaries with affine conditions are case-split."""
    if isinstance(e, ir.Select):
        c = cond_text(e.cond, names, loc, f"{what}: the condition of a ternary", None)
        out = []
        for g, x in affine_pieces(e.t, names, loc, what):
            out.append((and_conditions(c, g), x))
        for g, x in affine_pieces(e.f, names, loc, what):
            out.append((and_conditions(f"not ({c})", g), x))
        return out
    if isinstance(e, ir.Binary):
        return [(and_conditions(ga, gb), ir.Binary(e.op, a, b, e.dtype))
                for ga, a in affine_pieces(e.a, names, loc, what)
                for gb, b in affine_pieces(e.b, names, loc, what)]
    if isinstance(e, ir.Unary):
        return [(g, ir.Unary(e.op, a, e.dtype)) for g, a in affine_pieces(e.a, names, loc, what)]
    if isinstance(e, ir.Cast):
        return [(g, ir.Cast(a, e.dtype)) for g, a in affine_pieces(e.value, names, loc, what)]
    return [(None, e)]

def cond_text(c: ir.Expr, names, loc, what, source) -> str:
    """isl text of an affine condition (comparisons of affine expressions, possibly
    with affine ternaries, combined with ``&&``, ``||``, ``!``)."""
    from polycomp.lowering.printer import expr_str
    if isinstance(c, ir.IntImm):
        return "1 = 1" if c.value else "1 = 0"
    if isinstance(c, ir.Binary) and c.op in ("&&", "||"):
        j = " and " if c.op == "&&" else " or "
        return (f"(({cond_text(c.a, names, loc, what, source)}){j}"
                f"({cond_text(c.b, names, loc, what, source)}))")
    if isinstance(c, ir.Unary) and c.op == "!":
        return f"not ({cond_text(c.a, names, loc, what, source)})"
    if isinstance(c, ir.Binary) and c.op in ("<", "<=", ">", ">=", "==", "!="):
        shown = source or expr_str(c)
        alts = []
        for ga, a in affine_pieces(c.a, names, loc, what):
            for gb, b in affine_pieces(c.b, names, loc, what):
                for x in (a, b):
                    if not dt.is_int(x.dtype) and x.dtype != "bool":
                        raise NonAffineIndexError(
                            f"{what} `{shown}` is not affine: it compares {x.dtype} values; "
                            f"control flow and subscripts may depend only on iterators and "
                            f"integer parameters (a ternary in a value expression may "
                            f"depend on data)", loc)
                ta = to_isl(a, names, what, loc)
                tb = to_isl(b, names, what, loc)
                if c.op == "!=":
                    t = f"({ta} < {tb} or {ta} > {tb})"
                else:
                    t = f"{ta} {'=' if c.op == '==' else c.op} {tb}"
                alts.append(guarded(and_conditions(ga, gb), t))
        return "(" + " or ".join(alts) + ")"
    shown = source or expr_str(c)
    raise NonAffineIndexError(f"{what} `{shown}` is not an affine condition", loc)


# --------------------------------------------------------------------------- pycparser nodes


def type_words(node) -> tuple:
    """The words of a pycparser type (``IdentifierType.names``), without qualifiers."""
    from pycparser import c_ast
    while isinstance(node, (c_ast.TypeDecl, c_ast.Typename)):
        node = node.type
    if isinstance(node, c_ast.IdentifierType):
        return tuple(node.names)
    return ()

def resolve_typedefs(words: tuple, typedefs: dict) -> tuple:
    """``words`` with a typedef name replaced by the words of its type (repeatedly;
    qualifiers kept)."""
    seen: set = set()
    while True:
        quals = tuple(w for w in words if w in ("const", "volatile"))
        rest = tuple(w for w in words if w not in ("const", "volatile"))
        if len(rest) != 1 or rest[0] not in typedefs or rest[0] in seen:
            return words
        seen.add(rest[0])
        words = quals + typedefs[rest[0]]

def node_kind(node) -> str:
    names = {"While": "while loop", "DoWhile": "do-while loop", "Goto": "goto",
             "Label": "label", "Switch": "switch", "Break": "break",
             "Continue": "continue", "Return": "return statement", "Case": "case",
             "Default": "default", "StructRef": "struct member access",
             "FuncCall": "function call", "Decl": "declaration",
             "ExprList": "comma expression", "Typedef": "typedef",
             "CompoundLiteral": "compound literal", "InitList": "initializer list"}
    return names.get(type(node).__name__, type(node).__name__)

def c_text(node) -> str:
    """C source text of a pycparser node (for messages)."""
    from pycparser import c_generator
    try:
        return c_generator.CGenerator().visit(node).strip()
    except Exception:  # pragma: no cover - message only
        return type(node).__name__
