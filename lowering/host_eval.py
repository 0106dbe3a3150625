"""Evaluate host functions of a :class:`~polycomp.ir.LoweredModule` in Python.

A multi-version kernel's selector is integer host code over the kernel's size symbols
(``Let``, ``if``, local tables, ``return``).  :func:`call_host` runs that same IR on
Python integers, so the Python answer ("which version runs at these sizes") comes from
the IR the backend prints, not from a second implementation of the rule.

Semantics are the IR's (:mod:`polycomp.ir`, docs/dsl.md): ``int64`` values wrap in two's
complement after every operation; ``//`` and ``%`` are floor division and modulo, with
``x // 0 == x % 0 == 0``; comparisons and ``&&``/``||`` give 0 or 1; ``Select``
evaluates only the chosen side.  Anything else (floats, vector lanes, global buffers,
calls of kernels) is not host code: it raises :class:`PolycompInternalError`.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from polycomp import ir
from polycomp.errors import PolycompInternalError

_MASK = (1 << 64) - 1


def _wrap(v: int) -> int:
    v &= _MASK
    return v - (1 << 64) if v >> 63 else v


class _Returned(Exception):
    def __init__(self, value):
        self.value = value


def _floordiv(a: int, b: int) -> int:
    return 0 if b == 0 else a // b


def _floormod(a: int, b: int) -> int:
    return 0 if b == 0 else a % b


_ARITH: dict[str, Callable[[int, int], int]] = {
          "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
          "//": _floordiv, "%": _floormod, "min": min, "max": max,
          "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b),
          ">": lambda a, b: int(a > b), ">=": lambda a, b: int(a >= b),
          "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
          "&": lambda a, b: a & b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b}


class _Eval:
    def __init__(self, func: ir.LoweredFunc, values: Mapping[str, int],
                 module: ir.LoweredModule | None):
        self.func = func
        self.module = module
        self.params = {p.name: int(values[p.name]) for p in func.params
                       if p.name in values}
        self.env: dict = {}
        self.tables: dict = {}

    def fail(self, what) -> PolycompInternalError:
        return PolycompInternalError(f"host function {self.func.name}: {what} is not host "
                                     f"code the Python evaluator runs")

    def expr(self, e) -> int:
        if isinstance(e, ir.IntImm):
            return int(e.value)
        if isinstance(e, ir.Var):
            if e in self.env:
                return self.env[e]
            if e.name in self.params:
                return self.params[e.name]
            raise PolycompInternalError(f"host function {self.func.name}: no value for "
                                        f"{e.name}")
        if isinstance(e, ir.Binary):
            if e.op == "&&":
                return int(bool(self.expr(e.a)) and bool(self.expr(e.b)))
            if e.op == "||":
                return int(bool(self.expr(e.a)) or bool(self.expr(e.b)))
            fn = _ARITH.get(e.op)
            if fn is None:
                raise self.fail(f"operator {e.op}")
            return _wrap(fn(self.expr(e.a), self.expr(e.b)))
        if isinstance(e, ir.Unary):
            v = self.expr(e.a)
            return _wrap(-v) if e.op == "neg" else int(not v)
        if isinstance(e, ir.Select):
            return self.expr(e.t) if self.expr(e.cond) else self.expr(e.f)
        if isinstance(e, ir.Cast) and e.dtype in ("int64", "bool"):
            v = self.expr(e.value)
            return int(bool(v)) if e.dtype == "bool" else v
        if isinstance(e, ir.Load) and e.buffer in self.tables:
            return self.tables[e.buffer][self.expr(e.indices[0])]
        if isinstance(e, ir.FuncCall) and self.module is not None:
            callee = self.module.function(e.func)
            if callee.role == ir.VERSION:
                raise self.fail(f"a call of the version {e.func}")
            r = call_host(callee.func, {**self.params, **{
                p.name: self.expr(a) for p, a in zip(callee.func.params, e.args)
                if isinstance(a, ir.Expr)}}, self.module)
            return 0 if r is None else r
        raise self.fail(type(e).__name__)

    def stmt(self, s) -> None:
        if s is None:
            return
        if isinstance(s, ir.Block):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, ir.LetStmt):
            self.env[s.var] = self.expr(s.value)
            self.stmt(s.body)
        elif isinstance(s, ir.IfThenElse):
            self.stmt(s.then if self.expr(s.cond) else s.orelse)
        elif isinstance(s, ir.Allocate) and s.buffer.scope == "local":
            size = 1
            for d in s.buffer.shape:
                size *= self.expr(d)
            self.tables[s.buffer] = [0] * size
            self.stmt(s.body)
        elif isinstance(s, ir.Store) and s.buffer in self.tables:
            self.tables[s.buffer][self.expr(s.indices[0])] = self.expr(s.value)
        elif isinstance(s, ir.Return):
            raise _Returned(None if s.value is None else self.expr(s.value))
        elif isinstance(s, ir.Evaluate):
            self.expr(s.value)
        else:
            raise self.fail(type(s).__name__)


def call_host(func: ir.LoweredFunc, values: Mapping[str, int],
              module: ir.LoweredModule | None = None) -> int | None:
    """The value ``func`` returns for the size symbols ``values`` (None when it returns
    nothing); calls of other host functions resolve in ``module``."""
    ev = _Eval(func, values, module)
    try:
        ev.stmt(func.body)
    except _Returned as r:
        return r.value
    return None
