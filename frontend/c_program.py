"""The data a C SCoP is read into (:mod:`polycomp.frontend.c_scop` builds it,
:mod:`polycomp.frontend.c_model` turns it into a polyhedral model).

A :class:`CProgram` holds the :class:`CGraph` (parameters, arrays split into inputs and
in-out outputs), the :class:`CStmt` assignments with the isl constraint texts of their
enclosing loops and conditions, and the loop tree (:class:`CSeq`, :class:`CLoop`,
:class:`CIf`, :class:`CStmt` leaves) the initial schedule tree is built from.
"""
from __future__ import annotations

import linecache
import os
from dataclasses import dataclass

from polycomp import ir
from polycomp.errors import SourceLocation, UnsupportedConstructError

from .buffer_view import BufferView

__all__ = ["CParseError", "CArray", "CStatementSource", "CStmt", "CLoop", "CSeq", "CIf",
           "CGraph", "CProgram", "source_location"]


class CParseError(UnsupportedConstructError):
    """The C preprocessor or parser rejected the file (the message has its diagnostic)."""


@dataclass(eq=False)
class CArray(BufferView):
    """An array parameter of a C kernel (duck-types the DSL's Tensor: ``.buffer``)."""
    buffer: ir.Buffer
    location: SourceLocation | None = None


@dataclass(eq=False)
class CStatementSource:
    """Where a model statement came from (stored in ``Statement.stage``): its name, C
    line and text, and ``iters``, the enclosing loop iterators (outermost first; what
    passes that read ``stage.iters`` of a DSL stage see)."""
    name: str
    location: SourceLocation | None
    text: str = ""
    iters: tuple = ()

@dataclass(eq=False)
class CStmt:
    """One assignment of the SCoP: ``write[write_indices] = value`` for every point of
    the conjunction of ``constraints`` (isl text over ``isl_names``)."""
    name: str
    iters: tuple                  # ir.Var per enclosing loop, outermost first
    isl_names: dict               # ir.Var (iterators and params) -> isl name
    constraints: tuple            # isl constraint texts from enclosing loops and ifs
    write: ir.Buffer
    write_indices: tuple
    value: ir.Expr
    source: CStatementSource

@dataclass(eq=False)
class CLoop:
    """A ``for`` loop of the SCoP: ``var`` advances by ``step`` (negative: downwards)."""
    var: ir.Var
    depth: int
    step: int
    body: object
    location: SourceLocation | None = None

@dataclass(eq=False)
class CSeq:
    children: list

@dataclass(eq=False)
class CIf:
    then: object
    orelse: object = None

@dataclass(eq=False)
class CGraph:
    """The front-end graph of a C kernel, as the model and the lowering read it.

    ``inputs`` are arrays only read, ``outputs`` arrays written (in-out: their initial
    contents come from the caller, named in ``inout``); both in C parameter order.
    A scalar floating-point parameter is a zero-dimensional input array.  There are no
    stages; ``temporaries`` are the SCoP's local scalars and arrays.
    """
    name: str
    params: tuple                 # ir.Var (is_param), C parameter order
    inputs: tuple                 # CArray
    outputs: tuple                # CArray
    arrays: tuple                 # every CArray, C parameter order
    location: SourceLocation | None = None
    source: str = "c"
    stages: tuple = ()
    temporaries: tuple = ()       # CArray: local scalars (0-d) and local arrays
    signature: tuple = ()         # every parameter's name, C parameter order

    @property
    def inout(self) -> tuple:
        return tuple(a.name for a in self.outputs)

@dataclass(eq=False)
class CProgram:
    """What the reader extracts from one function: the graph, statements and loop tree."""
    graph: CGraph
    statements: list
    tree: object                  # CSeq / CLoop / CIf / CStmt


def source_location(file, line, lines, filename) -> SourceLocation:
    """The location of ``file:line``, with the line's text from ``lines`` (the source
    being read, named ``filename``) or from disk."""
    text = ""
    if file == filename and 1 <= line <= len(lines):
        text = lines[line - 1]
    elif file and os.path.exists(file):
        text = linecache.getline(file, line)
    return SourceLocation(file or filename, line, text)
