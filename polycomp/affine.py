"""Conversion of IR index/bound expressions to isl's quasi-affine syntax.

An expression is quasi-affine when it is built from integer constants, iterators,
symbolic dimensions, ``+``, ``-``, multiplication where one side is a constant, and
floor division / modulo by a positive constant (and ``min``/``max`` of such).  Anything
else (``i*j``, an index read from a tensor, a float) raises
:class:`~polycomp.errors.NonAffineIndexError` naming the offending sub-expression.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any, NoReturn

from polycomp import ir
from polycomp.errors import NonAffineIndexError


def _const_value(e):
    """The integer value of a constant-foldable expression, or None."""
    if isinstance(e, ir.IntImm):
        return e.value
    if isinstance(e, ir.Unary) and e.op == "neg":
        v = _const_value(e.a)
        return None if v is None else -v
    if isinstance(e, ir.Binary) and e.op in ("+", "-", "*", "//", "%", "min", "max"):
        a, b = _const_value(e.a), _const_value(e.b)
        if a is None or b is None:
            return None
        if e.op in ("//", "%") and b == 0:
            return None
        return {"+": a + b, "-": a - b, "*": a * b,
                "//": a // b if b else 0, "%": a % b if b else 0,
                "min": min(a, b), "max": max(a, b)}[e.op]
    return None


def to_isl(e: ir.Expr, names: dict, what: str = "index", location=None) -> str:
    """isl text for ``e``; ``names`` maps the allowed Vars to their isl names."""
    from polycomp.lowering.printer import expr_str

    def bad(sub, why) -> NoReturn:
        raise NonAffineIndexError(
            f"{what} `{expr_str(e)}` is not affine: {why} (in `{expr_str(sub)}`); polycomp "
            f"needs quasi-affine indices (constants, iterators, symbols, +, -, *constant, "
            f"//constant, %constant)", location)

    def go(x) -> str:
        c = _const_value(x)
        if c is not None:
            return f"({c})"
        if isinstance(x, ir.Var):
            if x not in names:
                bad(x, f"{x.name!r} is not an iterator or symbol in scope here")
            return names[x]
        if isinstance(x, ir.IntImm):
            return f"({x.value})"
        if isinstance(x, ir.Unary) and x.op == "neg":
            return f"(-{go(x.a)})"
        if isinstance(x, ir.Binary):
            if x.op in ("+", "-"):
                return f"({go(x.a)} {x.op} {go(x.b)})"
            if x.op == "*":
                ca, cb = _const_value(x.a), _const_value(x.b)
                if ca is None and cb is None:
                    bad(x, "a product of two non-constant terms")
                return f"({ca}*{go(x.b)})" if ca is not None else f"({cb}*{go(x.a)})"
            if x.op in ("//", "%"):
                cb = _const_value(x.b)
                if cb is None or cb <= 0:
                    bad(x, "division or modulo by a non-constant or non-positive value")
                if x.op == "//":
                    return f"floor({go(x.a)}/{cb})"
                return f"(({go(x.a)}) mod {cb})"
            if x.op in ("min", "max"):
                return f"{x.op}({go(x.a)}, {go(x.b)})"
            bad(x, f"operator {x.op!r}")
        if isinstance(x, ir.Load):
            bad(x, f"it reads tensor {x.buffer.name!r} (indirect indexing)")
        if isinstance(x, ir.Cast):
            if x.dtype in ("int32", "int64") and x.value.dtype in ("int8", "int32", "int64"):
                return go(x.value)
            bad(x, f"a cast to {x.dtype}")
        if isinstance(x, ir.FloatImm) or (hasattr(x, "dtype") and x.dtype not in
                                           ("int8", "int32", "int64")):
            bad(x, f"a {getattr(x, 'dtype', '?')} value")
        bad(x, f"{type(x).__name__} is not allowed")

    return go(e)


def cond_to_isl(c: ir.Expr, names: dict, location=None) -> str | None:
    """isl constraint text for an affine condition, or None when it is not affine."""
    try:
        return _cond(c, names, location)
    except NonAffineIndexError:
        return None


def and_conditions(a: str | None, b: str | None) -> str | None:
    """The conjunction of two isl constraint texts, where None stands for "true"
    (no condition): ``(a) and (b)``, or the one that is not None, or None."""
    if a is None:
        return b
    if b is None:
        return a
    return f"({a}) and ({b})"


def _cond(c, names, location) -> str:
    if isinstance(c, ir.IntImm) and c.dtype == "bool":
        return "1 = 1" if c.value else "1 = 0"
    if isinstance(c, ir.Binary):
        if c.op in ("&&", "||"):
            j = " and " if c.op == "&&" else " or "
            return f"(({_cond(c.a, names, location)}){j}({_cond(c.b, names, location)}))"
        if c.op in ("<", "<=", ">", ">=", "==", "!="):
            a = to_isl(c.a, names, "condition", location)
            b = to_isl(c.b, names, "condition", location)
            op = {"==": "=", "!=": "!="}.get(c.op, c.op)
            if op == "!=":
                return f"({a} < {b} or {a} > {b})"
            return f"{a} {op} {b}"
    if isinstance(c, ir.Unary) and c.op == "!":
        return f"not ({_cond(c.a, names, location)})"
    raise NonAffineIndexError("condition is not affine", location)


# --------------------------------------------------------------------------- isl -> IR


def _fraction(v) -> Fraction:
    """An isl Val as an exact Fraction."""
    return Fraction(str(v.to_str() if hasattr(v, "to_str") else v))


def aff_to_ir(aff, in_vars, params: dict) -> ir.Expr:
    """An integer IR expression equal to ``floor(aff)`` (``aff`` an isl Aff).

    ``in_vars`` are the IR expressions of the aff's input dimensions, ``params`` maps
    parameter names to IR expressions.  Integer divisions of the aff (``floor(e/d)``)
    become ``//``.  (:class:`AffForm` reads the aff once for many conversions.)
    """
    return AffForm(aff).to_ir(in_vars, params)


class AffForm:
    """The integer form of an isl Aff read once (its coefficients, divisions and
    denominator), converted to IR for any inputs by :meth:`to_ir`: ``AffForm(aff).
    to_ir(v, p)`` is :func:`aff_to_ir` ``(aff, v, p)``, built by the same operations in
    the same order.  A statement builder called once per generated instance (the
    unrolled copies of a promotion) reads its affs once instead of at every call."""

    def __init__(self, aff) -> None:
        from math import lcm

        import islpy as isl
        # (kind, payload, coefficient): "in" -> input index, "param" -> name,
        # "div" -> the division's AffForm
        terms: list[tuple[str, Any, Fraction]] = []
        for i in range(aff.dim(isl.dim_type.in_)):
            c = _fraction(aff.get_coefficient_val(isl.dim_type.in_, i))
            if c:
                terms.append(("in", i, c))
        for i in range(aff.dim(isl.dim_type.param)):
            c = _fraction(aff.get_coefficient_val(isl.dim_type.param, i))
            if c:
                terms.append(("param", aff.get_dim_name(isl.dim_type.param, i), c))
        for i in range(aff.dim(isl.dim_type.div)):
            c = _fraction(aff.get_coefficient_val(isl.dim_type.div, i))
            if c:
                terms.append(("div", AffForm(aff.get_div(i)), c))
        const = _fraction(aff.get_constant_val())
        den = 1
        for _, _, c in terms:
            den = lcm(den, c.denominator)
        den = lcm(den, const.denominator)
        self.den = den
        self.const = int(const * den)
        self.terms = [(kind, x, int(c * den)) for kind, x, c in terms]

    def to_ir(self, in_vars, params: dict) -> ir.Expr:
        atoms = []
        for kind, x, k in self.terms:       # in aff_to_ir's order (its errors first)
            if kind == "in":
                atoms.append((in_vars[x], k))
            elif kind == "param":
                if x not in params:
                    raise NonAffineIndexError(f"parameter {x!r} has no IR value here")
                atoms.append((params[x], k))
            else:
                atoms.append((x.to_ir(in_vars, params), k))
        out: ir.Expr = ir.IntImm(self.const)
        for atom, k in atoms:
            out = out + (atom if k == 1 else atom * k)
        return out if self.den == 1 else out // self.den
