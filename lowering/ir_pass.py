"""The interface of IR passes: ``run(func, state) -> func`` on a
:class:`~polycomp.ir.LoweredFunc`, with the compile's typed
:class:`~polycomp.state.CompileState` to read the model, target, options and the
facts schedule passes recorded.

Most IR passes are plain functions of the IR; :func:`ir_pass` wraps one as a named
pass so the pass manager can time and dump it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from polycomp import ir
    from polycomp.state import CompileState


class IRPass:
    """An IR rewrite.  Subclasses set ``name`` and document what they assume and
    guarantee of the IR."""
    name: str = "ir-pass"

    def run(self, func: ir.LoweredFunc, state: CompileState) -> ir.LoweredFunc:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<IR pass {self.name}>"


class FunctionPass(IRPass):
    """An IR pass made of a function ``fn(func, state) -> func``."""

    def __init__(self, name: str, fn: Callable[[ir.LoweredFunc, CompileState], ir.LoweredFunc]):
        self.name = name
        self.fn = fn
        self.__doc__ = fn.__doc__

    def run(self, func: ir.LoweredFunc, state: CompileState) -> ir.LoweredFunc:
        return self.fn(func, state)


def ir_pass(name: str, fn: Callable[[ir.LoweredFunc, CompileState], ir.LoweredFunc]) -> IRPass:
    return FunctionPass(name, fn)


def body_pass(name: str, fn: Callable[[ir.Stmt], ir.Stmt]) -> IRPass:
    """A pass that rewrites the function body with ``fn(body)`` (e.g. simplify)."""
    return FunctionPass(name, lambda f, _state: f.with_body(fn(f.body)))
