"""The C SCoP front end: affine C loop nests -> :class:`CKernel` -> polyhedral model.

Input is a C function whose parameters are integer sizes (they become isl parameters),
arrays declared as C99 VLA parameters (``float A[restrict N][K]``) and read-only
floating-point scalars passed by value (``double alpha``: zero-dimensional inputs).  The SCoP is the
region between ``#pragma scop`` and ``#pragma endscop`` in the function's outermost
block, or the whole body when there is no such pragma.  The SCoP may contain

* ``for (int i = lb; i < ub; i++)`` loops (also ``<=``, ``>``/``>=`` with ``i--``,
  ``++i``, ``i += c``, ``i = i + c`` for an integer constant ``c != 0``), with affine
  bounds in the parameters and outer iterators; ``min``/``max`` may be written as
  ternaries (so ``MIN``/``MAX`` macros work) or as ``min``/``max`` calls.  Loop
  iterators may also be declared up front (``int i, j;``) and assigned in the ``for``;
* ``if``/``else`` with affine conditions (``&&``, ``||``, ``!``, comparisons);
* assignments ``A[i][j] = e;`` and ``+=``, ``-=``, ``*=``, ``/=``, ``A[i]++``, where
  ``e`` uses array elements (affine subscripts), iterators, parameters, literals,
  ``+ - * /``, comparisons, ternaries (a data-dependent ``max`` such as
  ``x > 0 ? x : 0``), casts and the pure math functions in :data:`MATH_FUNCTIONS`;
* local scalars (``double nrm;``, zero-dimensional temporaries) and local arrays
  (``double z[N];``), assigned and read like array elements (see
  :mod:`~polycomp.frontend.c_expand` for their renaming and expansion);
* ``typedef`` names of the element types and ``char`` elements.

Everything else (``while``, ``goto``, ``break``, pointer arithmetic, calls of unknown
functions, local pointers, unsigned element types, integer ``/`` and ``%``, bitwise
operators) is
rejected with a :class:`~polycomp.errors.PolycompError` subclass naming the construct and
the C source line.  The file is run through ``gcc -E`` first (so ``#define`` and local
``#include "..."`` work); ``#include <...>`` of system headers is dropped and a small
prelude supplies the ``<stdint.h>`` typedefs and ``INFINITY``/``NAN``/``FLT_MAX``/``M_PI``.

Types: literals are *weakly typed* as in numpy (``0.5 * A[i]`` with a ``float`` array
computes in ``float``, not ``double`` as C would); an assignment converts the value to
the array's element type as C does.  Math functions compute in their argument's type
(``exp`` of a ``float`` is ``expf``).

The result of reading is a :class:`CKernel`; its :meth:`CKernel.polyhedral_model`
(built by :mod:`polycomp.frontend.c_model`) is what ``compile_kernel`` compiles.
Calling convention of compiled C kernels: every array parameter is an argument;
arrays the SCoP only reads are *inputs*, arrays it writes are *in-out outputs*: the
caller passes their initial contents after the inputs (C parameter order within each
group) and gets the updated arrays back (see ``docs/c_frontend.md``).

Modules: this one (API, preprocessing, parsing), :mod:`~polycomp.frontend.c_scop`
(statements and control flow), :mod:`~polycomp.frontend.c_expr` (expressions, affine isl
text), :mod:`~polycomp.frontend.c_program` (the data read),
:mod:`~polycomp.frontend.c_expand` (webs and expansion of local scalars) and
:mod:`~polycomp.frontend.c_model` (the polyhedral model).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess

from polycomp.errors import (
    SourceLocation,
    UnknownSymbolError,
    UnsupportedConstructError,
    deep_recursion,
)

from .c_expand import expand_arrays, expand_scalars
from .c_expr import HALF_WORDS, MATH_FUNCTIONS
from .c_model import CScopModel, size_local_arrays
from .c_program import (
    CArray,
    CGraph,
    CIf,
    CLoop,
    CParseError,
    CProgram,
    CSeq,
    CStatementSource,
    CStmt,
    source_location,
)
from .c_scop import ScopReader, find_pragma

__all__ = ["CKernel", "CParseError", "read_c_kernels", "read_c_kernel", "load_c_kernels",
           "load_c_kernel", "MATH_FUNCTIONS", "CArray", "CGraph", "CProgram", "CStmt",
           "CLoop", "CSeq", "CIf", "CStatementSource"]

_PRELUDE = r"""typedef signed char int8_t; typedef short int16_t; typedef int int32_t;
typedef long long int64_t; typedef unsigned char uint8_t; typedef unsigned short uint16_t;
typedef unsigned int uint32_t; typedef unsigned long long uint64_t;
typedef unsigned long size_t; typedef long ptrdiff_t; typedef long ssize_t;
typedef long intptr_t; typedef _Bool bool;
typedef float _Float16; typedef float __fp16;
#define __restrict restrict
#define __restrict__ restrict
#define INFINITY (__builtin_inff())
#define NAN (__builtin_nanf(""))
#define FLT_MAX 3.40282347e+38F
#define DBL_MAX 1.7976931348623157e+308
#define M_PI 3.14159265358979323846
"""

_SYSTEM_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<[^>\n]*>[^\n]*$", re.M)


# --------------------------------------------------------------------------- kernels


class CKernel:
    """An affine C function read as a polycomp kernel.

    ``params`` are the names of its integer size parameters, ``inputs`` the arrays it
    only reads and ``outputs`` the arrays it writes (in-out), each in C parameter order.
    ``polyhedral_model()`` builds the :class:`~polycomp.frontend.c_model.CScopModel` the
    driver compiles; ``model.initial_schedule`` is the schedule tree of the C loop
    structure.
    """

    def __init__(self, program: CProgram):
        self.program = program
        self.graph = program.graph
        self.name = program.graph.name
        self.location = program.graph.location
        self.__name__ = self.name
        # the model the reader built to report model-level errors, handed to the first
        # polyhedral_model() call (no one else holds it, so it is that caller's own)
        self._checked_model: CScopModel | None = None

    @property
    def params(self) -> tuple:
        return tuple(p.name for p in self.graph.params)

    @property
    def inputs(self) -> tuple:
        return tuple(a.name for a in self.graph.inputs)

    @property
    def outputs(self) -> tuple:
        return tuple(a.name for a in self.graph.outputs)

    @property
    def statements(self) -> list:
        return self.program.statements

    def polyhedral_model(self) -> CScopModel:
        """A fresh :class:`~polycomp.frontend.c_model.CScopModel` of this kernel: each
        call's own object (schedule passes may change the model they compile).  The
        first call after reading returns the model the reader built from the same
        program (:meth:`check_model`) instead of building it again."""
        model, self._checked_model = self._checked_model, None
        if model is not None:
            return model
        from .c_model import build_c_model
        return build_c_model(self.program)

    def check_model(self, model: CScopModel | None = None) -> None:
        """Build the model now (raising its errors, such as out-of-bounds accesses)
        and keep it for the next :meth:`polyhedral_model` call; ``model``: one already
        built from this kernel's program as it is (array privatisation's), kept
        instead."""
        self._checked_model = model if model is not None else self.polyhedral_model()

    def __repr__(self):
        return (f"<polycomp C kernel {self.name}({', '.join(self.params)}; in: "
                f"{', '.join(self.inputs)}; inout: {', '.join(self.outputs)})>")


# --------------------------------------------------------------------------- public API


def load_c_kernels(path: str, include_dirs=()) -> list[CKernel]:
    """Read every kernel of a C file (see :func:`read_c_kernels`)."""
    try:
        # bytes that are not UTF-8 (a Latin-1 comment) must not stop the reader: they
        # are replaced, and an identifier containing one is rejected by the parser
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise CParseError(f"cannot read C file {path!r}: {e.strerror}") from None
    dirs = (os.path.dirname(os.path.abspath(path)),) + tuple(include_dirs)
    return read_c_kernels(text, filename=path, include_dirs=dirs)

def load_c_kernel(path: str, name: str | None = None, include_dirs=()) -> CKernel:
    """The kernel ``name`` of a C file (or its only kernel)."""
    return _pick(load_c_kernels(path, include_dirs), name, path)

def read_c_kernel(source: str, name: str | None = None, filename: str = "<c-source>",
                  include_dirs=()) -> CKernel:
    """The kernel ``name`` of C source text (or its only kernel)."""
    return _pick(read_c_kernels(source, filename, include_dirs), name, filename)

def read_c_kernels(source: str, filename: str = "<c-source>", include_dirs=()) -> list[CKernel]:
    """Read the kernels of C source text.

    When some function contains ``#pragma scop``, the kernels are exactly those
    functions; otherwise every function definition is a kernel.
    """
    with deep_recursion():
        try:
            return _read_c_kernels(source, filename, include_dirs)
        except RecursionError:
            raise UnsupportedConstructError(
                f"{filename}: an expression nested too deeply to read") from None


def _read_c_kernels(source: str, filename: str, include_dirs) -> list[CKernel]:
    from pycparser import c_ast
    tu = _parse(source, filename, include_dirs)
    funcs = [e for e in tu.ext if isinstance(e, c_ast.FuncDef)]
    lines = source.splitlines()
    with_scop = [f for f in funcs if find_pragma(f.body, "scop")]
    chosen = with_scop or funcs
    if not chosen:
        raise UnsupportedConstructError(f"{filename} defines no C function to compile")
    typedefs = _typedefs(tu)
    out = []
    for f in chosen:
        program = ScopReader(f, filename, lines, typedefs).read()
        size_local_arrays(program)
        expand_scalars(program)
        model = expand_arrays(program)    # its model of the program, if it built one
        k = CKernel(program)
        k.check_model(model)  # report model-level errors (out-of-bounds accesses) now
        out.append(k)
    return out

def _typedefs(tu) -> dict:
    """``typedef`` names of plain arithmetic types -> their type words (``typedef char
    base;`` gives ``{"base": ("char",)}``); other typedefs (structs, pointers, arrays)
    are not listed, so using them stays an error naming the type."""
    from pycparser import c_ast

    from .c_expr import resolve_typedefs, type_words
    out: dict = {}
    for e in tu.ext:
        if isinstance(e, c_ast.Typedef) and e.name in HALF_WORDS:
            continue        # the prelude's stand-ins: kept as the element type's word
        if isinstance(e, c_ast.Typedef) and isinstance(e.type, c_ast.TypeDecl) and \
                isinstance(e.type.type, c_ast.IdentifierType):
            out[e.name] = resolve_typedefs(type_words(e.type), out)
    return out

def _pick(kernels, name, where) -> CKernel:
    if name is None:
        if len(kernels) != 1:
            raise UnsupportedConstructError(
                f"{where} has {len(kernels)} kernels ({', '.join(k.name for k in kernels)}); "
                f"name the one to read")
        return kernels[0]
    for k in kernels:
        if k.name == name:
            return k
    raise UnknownSymbolError(f"{where} has no kernel named {name!r} (it has "
                             f"{', '.join(k.name for k in kernels)})")


# --------------------------------------------------------------------------- parsing


def _preprocess(source: str, filename: str, include_dirs) -> str:
    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        raise CParseError(f"the C front end needs a C preprocessor: {cc!r} not found (set CC)")
    if "\0" in source:
        raise CParseError(f"{filename} is not C source text: it contains NUL bytes (a "
                          f"binary file?)")
    body = _SYSTEM_INCLUDE.sub("", source)
    text = _PRELUDE + f'#line 1 "{_c_string(filename)}"\n' + body
    cmd = [cc, "-E", "-nostdinc", "-x", "c", "-std=gnu11"]
    for d in include_dirs:
        cmd += ["-I", d]
    r = subprocess.run(cmd + ["-"], input=text.encode("utf-8", "surrogateescape"),
                       capture_output=True)
    # included headers are bytes too: what is not UTF-8 (a Latin-1 string) is replaced,
    # as in the C file itself; a binary file is refused below with a clear message
    err = r.stderr.decode("utf-8", "replace")
    if r.returncode != 0:
        raise CParseError(f"the C preprocessor rejected {filename}:\n{err.strip()[-2000:]}")
    binary = re.search(r"^(.*?):(\d+):\d+: warning: null character", err, re.M)
    if binary:
        raise CParseError(f"{binary.group(1)} is not C source text: it contains NUL "
                          f"bytes (a binary file?)",
                          SourceLocation(binary.group(1), int(binary.group(2))))
    return r.stdout.decode("utf-8", "replace")

def _c_string(s: str) -> str:
    """``s`` as the contents of a C string literal (a file name with a newline or a
    quote stays one ``#line`` directive)."""
    return (s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            .replace("\r", "\\r"))

def _parse(source: str, filename: str, include_dirs):
    from pycparser import c_parser
    text = _preprocess(source, filename, include_dirs)
    parser = c_parser.CParser()
    try:
        return parser.parse(text, filename)
    except Exception as e:  # pycparser.c_parser.ParseError (and lexer errors)
        msg = str(e)
        loc = None
        m = re.match(r"^(.*?):(\d+):(?:\d+:)?\s*(.*)$", msg, re.S)
        if m:
            loc = source_location(m.group(1), int(m.group(2)), source.splitlines(), filename)
            msg = m.group(3)
        else:
            # pycparser 3 reports some errors ("Invalid expression") with the file name
            # only: locate them at the token the parser stopped before
            tok = _next_token(parser)
            if tok is not None:
                loc = source_location(tok.filename or filename, tok.lineno,
                                      source.splitlines(), filename)
                msg = f"{msg.split(': ', 1)[-1]} before `{tok.value}`"
        raise CParseError(f"C syntax not understood ({msg}); polycomp reads C99 functions "
                          f"with affine loop nests", loc) from None


def _next_token(parser):
    """The token a failed pycparser 3 parse stopped before (None on pycparser 2, whose
    messages carry the line, or when there is none)."""
    peek = getattr(parser, "_peek", None)
    if peek is None:
        return None
    try:
        tok = peek()
    except Exception:  # the parser's state after an error: best effort only
        return None
    return tok if isinstance(getattr(tok, "lineno", None), int) else None
