"""Dispatch guards of multi-version kernels (issue #12 item 4): DISC-style conditions on
the kernel's integer size parameters.

A :class:`Guard` on one symbol ``s`` holds when ``lo < s`` (``lo`` None: no lower bound),
``s <= hi`` (``hi`` None: no upper bound) and ``s % multiple_of == 0``.  A version's
guard is a conjunction of them; the dispatch rule is "the first version whose guard holds",
and the last version's guard is empty (it always holds), so every binding of the symbols
selects exactly one version.

The artifact's selector is IR: :meth:`Guard.expr` builds the condition as an IR
expression over the kernel's size parameters (:func:`condition` the conjunction), the
backend's printer prints it, and :mod:`polycomp.lowering.host_eval` evaluates the same
IR in Python.  :meth:`Guard.holds` is an independent Python statement of the rule that
tests compare the IR with.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from polycomp import ir


def _bool(op: str, a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return ir.Binary(op, a, b, "bool")


@dataclass(frozen=True)
class Guard:
    """``lo < symbol <= hi`` and ``symbol % multiple_of == 0`` (each part optional)."""
    symbol: str
    lo: int | None = None
    hi: int | None = None
    multiple_of: int = 1

    def holds(self, values: Mapping[str, int]) -> bool:
        v = int(values[self.symbol])
        return ((self.lo is None or self.lo < v) and (self.hi is None or v <= self.hi)
                and v % self.multiple_of == 0)

    def expr(self, var: ir.Var) -> ir.Expr:
        """The condition as an IR expression on ``var`` (the symbol's parameter);
        constant true for a guard without parts."""
        parts: list[ir.Expr] = []
        if self.lo is not None:
            parts.append(_bool("<", ir.IntImm(self.lo), var))
        if self.hi is not None:
            parts.append(_bool("<=", var, ir.IntImm(self.hi)))
        if self.multiple_of != 1:
            parts.append(_bool("==", ir.Binary("%", var, ir.IntImm(self.multiple_of),
                                               "int64"), ir.IntImm(0)))
        return conjunction(parts)

    def text(self) -> str:
        parts = []
        if self.lo is not None or self.hi is not None:
            rng = (f"{self.lo} < " if self.lo is not None else "") + self.symbol + \
                (f" <= {self.hi}" if self.hi is not None else "")
            parts.append(rng)
        if self.multiple_of != 1:
            parts.append(f"{self.symbol} % {self.multiple_of} == 0")
        return " and ".join(parts) or "true"


TRUE = ir.IntImm(1, "bool")


def conjunction(parts: list[ir.Expr]) -> ir.Expr:
    """``parts[0] && parts[1] && ...`` (constant true for none)."""
    out: ir.Expr | None = None
    for p in parts:
        if ir.is_const(p, 1):
            continue
        out = p if out is None else _bool("&&", out, p)
    return TRUE if out is None else out


def all_hold(guards: tuple[Guard, ...], values: Mapping[str, int]) -> bool:
    return all(g.holds(values) for g in guards)


def condition(guards: tuple[Guard, ...], params: Mapping[str, ir.Var]) -> ir.Expr:
    """The conjunction of ``guards`` as one IR expression over ``params`` (the kernel's
    size parameters by name)."""
    return conjunction([g.expr(params[g.symbol]) for g in guards])


def text(guards: tuple[Guard, ...]) -> str:
    return " and ".join(g.text() for g in guards) or "always"
