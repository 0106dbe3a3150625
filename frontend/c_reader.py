"""The C SCoP front end: affine C loop nests -> :class:`CKernel` -> polyhedral model.

Input is a C function whose parameters are integer sizes (they become isl parameters)
and arrays declared as C99 VLA parameters (``float A[restrict N][K]``).  The SCoP is the
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
  ``x > 0 ? x : 0``), casts and the pure math functions in :data:`MATH_FUNCTIONS`.

Everything else (``while``, ``goto``, ``break``, pointer arithmetic, calls of unknown
functions, local scalar variables, integer ``/`` and ``%``, bitwise operators) is
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
"""
from __future__ import annotations

import linecache
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

import islpy as isl

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.affine import to_isl
from polycomp.errors import (DTypeError, NonAffineIndexError, ShapeMismatchError, SourceLocation, UnknownSymbolError,
                             UnsupportedConstructError)

__all__ = ["CKernel", "CParseError", "read_c_kernels", "read_c_kernel", "load_c_kernels",
           "load_c_kernel", "MATH_FUNCTIONS"]


class CParseError(UnsupportedConstructError):
    """The C preprocessor or parser rejected the file (the message has its diagnostic)."""


# --------------------------------------------------------------------------- types

_ELEMENT_TYPES = {
    ("float",): "float32", ("double",): "float64",
    ("int",): "int32", ("signed", "int"): "int32", ("int32_t",): "int32",
    ("long",): "int64", ("long", "int"): "int64", ("long", "long"): "int64",
    ("long", "long", "int"): "int64", ("int64_t",): "int64",
    ("int8_t",): "int8", ("signed", "char"): "int8",
    ("_Bool",): "bool", ("bool",): "bool",
}
_INT_WORDS = {"int", "long", "short", "signed", "unsigned", "char", "int8_t", "int16_t",
              "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t",
              "size_t", "ptrdiff_t", "intptr_t", "ssize_t"}

# C function name -> (polycomp math function, number of arguments, float dtype of an
# integer argument).  fmax/fmin/max/min map to the IR's min/max operators.
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

_ISL_KEYWORDS = {"and", "or", "not", "exists", "mod", "floor", "ceil", "min", "max",
                 "infty", "NaN", "true", "false", "domain", "floord", "ceild", "implies"}

_PRELUDE = r"""typedef signed char int8_t; typedef short int16_t; typedef int int32_t;
typedef long long int64_t; typedef unsigned char uint8_t; typedef unsigned short uint16_t;
typedef unsigned int uint32_t; typedef unsigned long long uint64_t;
typedef unsigned long size_t; typedef long ptrdiff_t; typedef long ssize_t;
typedef long intptr_t; typedef _Bool bool;
#define __restrict restrict
#define __restrict__ restrict
#define INFINITY (__builtin_inff())
#define NAN (__builtin_nanf(""))
#define FLT_MAX 3.40282347e+38F
#define DBL_MAX 1.7976931348623157e+308
#define M_PI 3.14159265358979323846
"""
_SYSTEM_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<[^>\n]*>[^\n]*$", re.M)


# --------------------------------------------------------------------------- results


@dataclass(eq=False)
class CArray:
    """An array parameter of a C kernel (duck-types the DSL's Tensor: ``.buffer``)."""
    buffer: ir.Buffer
    location: SourceLocation | None = None

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def shape(self) -> tuple:
        return self.buffer.shape

    @property
    def dtype(self) -> str:
        return self.buffer.dtype


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
    There are no stages and no temporaries.
    """
    name: str
    params: tuple                 # ir.Var (is_param), C parameter order
    inputs: tuple                 # CArray
    outputs: tuple                # CArray
    arrays: tuple                 # every CArray, C parameter order
    location: SourceLocation | None = None
    source: str = "c"
    stages: tuple = ()
    temporaries: tuple = ()

    @property
    def inout(self) -> tuple:
        return tuple(a.name for a in self.outputs)


@dataclass(eq=False)
class CProgram:
    """What the reader extracts from one function: the graph, statements and loop tree."""
    graph: CGraph
    statements: list
    tree: object                  # CSeq / CLoop / CIf / CStmt


class CKernel:
    """An affine C function read as a polycomp kernel.

    ``params`` are the names of its integer size parameters, ``inputs`` the arrays it
    only reads and ``outputs`` the arrays it writes (in-out), each in C parameter order.
    ``polyhedral_model()`` builds the :class:`~polycomp.model.PolyModel` the driver
    compiles; ``model.initial_schedule`` is the schedule tree of the C loop structure.
    """

    def __init__(self, program: CProgram):
        self.program = program
        self.graph = program.graph
        self.name = program.graph.name
        self.location = program.graph.location
        self.__name__ = self.name

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

    def polyhedral_model(self):
        """A fresh :class:`~polycomp.model.PolyModel` of this kernel."""
        from .c_model import build_c_model
        return build_c_model(self.program)

    def __repr__(self):
        return (f"<polycomp C kernel {self.name}({', '.join(self.params)}; in: "
                f"{', '.join(self.inputs)}; inout: {', '.join(self.outputs)})>")


# --------------------------------------------------------------------------- public API


def load_c_kernels(path: str, include_dirs=()) -> list[CKernel]:
    """Read every kernel of a C file (see :func:`read_c_kernels`)."""
    try:
        with open(path) as f:
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
    from pycparser import c_ast
    tu = _parse(source, filename, include_dirs)
    funcs = [e for e in tu.ext if isinstance(e, c_ast.FuncDef)]
    lines = source.splitlines()
    with_scop = [f for f in funcs if _find_pragma(f.body, "scop")]
    chosen = with_scop or funcs
    if not chosen:
        raise UnsupportedConstructError(f"{filename} defines no C function to compile")
    out = []
    for f in chosen:
        k = CKernel(_FunctionReader(f, filename, lines).read())
        k.polyhedral_model()  # report model-level errors (out-of-bounds accesses) now
        out.append(k)
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
    body = _SYSTEM_INCLUDE.sub("", source)
    text = _PRELUDE + f'#line 1 "{_c_string(filename)}"\n' + body
    cmd = [cc, "-E", "-nostdinc", "-x", "c", "-std=gnu11"]
    for d in include_dirs:
        cmd += ["-I", d]
    r = subprocess.run(cmd + ["-"], input=text, capture_output=True, text=True)
    if r.returncode != 0:
        raise CParseError(f"the C preprocessor rejected {filename}:\n{r.stderr.strip()[-2000:]}")
    return r.stdout


def _c_string(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def _parse(source: str, filename: str, include_dirs):
    from pycparser import c_parser
    text = _preprocess(source, filename, include_dirs)
    try:
        return c_parser.CParser().parse(text, filename)
    except Exception as e:  # pycparser.c_parser.ParseError (and lexer errors)
        msg = str(e)
        loc = None
        m = re.match(r"^(.*?):(\d+):(?:\d+:)?\s*(.*)$", msg, re.S)
        if m:
            loc = _location(m.group(1), int(m.group(2)), source.splitlines(), filename)
            msg = m.group(3)
        raise CParseError(f"C syntax not understood ({msg}); polycomp reads C99 functions "
                          f"with affine loop nests", loc) from None


def _location(file, line, lines, filename) -> SourceLocation:
    text = ""
    if file == filename and 1 <= line <= len(lines):
        text = lines[line - 1]
    elif file and os.path.exists(file):
        text = linecache.getline(file, line)
    return SourceLocation(file or filename, line, text)


def _find_pragma(node, what) -> bool:
    from pycparser import c_ast
    found = []

    class V(c_ast.NodeVisitor):
        def visit_Pragma(self, n):
            if n.string.strip() == what:
                found.append(n)
    if node is not None:
        V().visit(node)
    return bool(found)


def _type_words(node) -> tuple:
    """The words of a pycparser type (``IdentifierType.names``), without qualifiers."""
    from pycparser import c_ast
    while isinstance(node, (c_ast.TypeDecl, c_ast.Typename)):
        node = node.type
    if isinstance(node, c_ast.IdentifierType):
        return tuple(node.names)
    return ()


# --------------------------------------------------------------------------- reading


@dataclass(eq=False)
class _Scope:
    """The loops and conditions enclosing the statement being read."""
    loops: list = field(default_factory=list)        # ir.Var, outermost first
    constraints: list = field(default_factory=list)  # isl texts


class _FunctionReader:
    """Turns one pycparser ``FuncDef`` into a :class:`CProgram`."""

    def __init__(self, func, filename, lines):
        self.func = func
        self.filename = filename
        self.lines = lines
        self.name = func.decl.name
        self.params: dict[str, ir.Var] = {}
        self.arrays: dict[str, CArray] = {}
        self.declared_iters: set = set()
        self.statements: list[CStmt] = []
        self.written: set = set()
        self.read_: set = set()
        self.ctx = None

    # ------------------------------------------------------------- helpers
    def loc(self, node) -> SourceLocation | None:
        c = getattr(node, "coord", None)
        if c is None or c.line is None:
            return None
        return _location(c.file, c.line, self.lines, self.filename)

    def unsupported(self, what, node, hint=""):
        raise UnsupportedConstructError(
            f"{what} is not supported in a SCoP of C function {self.name!r}"
            + (f"; {hint}" if hint else ""), self.loc(node))

    def names(self, scope) -> dict:
        out = {v: _isl_name(v.name) for v in self.params.values()}
        for v in scope.loops:
            out[v] = _isl_name(v.name)
        return out

    # ------------------------------------------------------------- signature
    def read(self) -> CProgram:
        from pycparser import c_ast
        from polycomp.islutil import context
        self.ctx = context()
        fdecl = self.func.decl.type
        ret = _type_words(fdecl.type)
        if ret != ("void",):
            self.unsupported(f"return type {' '.join(ret) or '?'} of {self.name!r}",
                             self.func.decl, "a kernel function returns void and writes "
                             "its results into array parameters")
        order = []
        for p in (fdecl.args.params if fdecl.args else []):
            if isinstance(p, c_ast.Typename) and _type_words(p) == ("void",):
                continue
            if isinstance(p, c_ast.EllipsisParam):
                self.unsupported("a variadic parameter list", p)
            order.append(self.parameter(p))
        items = self.scop_items()
        tree = self.block(items, _Scope())
        arrays = tuple(a for a in order if isinstance(a, CArray))
        params = tuple(a for a in order if isinstance(a, ir.Var))
        used = self.written | self.read_
        outputs = tuple(a for a in arrays if a.name in self.written)
        inputs = tuple(a for a in arrays if a.name not in self.written and a.name in used)
        if not self.statements:
            raise UnsupportedConstructError(f"the SCoP of {self.name!r} has no assignment "
                                            f"to compile", self.loc(self.func.decl))
        unused = [a.name for a in arrays if a.name not in used]
        if unused:
            raise UnsupportedConstructError(
                f"array parameter(s) {', '.join(unused)} of {self.name!r} are never used in "
                f"the SCoP; remove them", self.loc(self.func.decl))
        graph = CGraph(self.name, params, inputs, outputs, arrays, self.loc(self.func.decl))
        return CProgram(graph, list(self.statements), tree)

    def parameter(self, p):
        from pycparser import c_ast
        loc = self.loc(p)
        name = p.name
        if name is None:
            self.unsupported("an unnamed parameter", p)
        if name in self.params or name in self.arrays:
            raise UnsupportedConstructError(f"parameter {name!r} is declared twice", loc)
        t = p.type
        if isinstance(t, c_ast.PtrDecl):
            self.unsupported(f"pointer parameter {name!r}", p,
                             f"declare its shape as a C99 VLA parameter, e.g. "
                             f"`float {name}[restrict N][M]`")
        if isinstance(t, c_ast.ArrayDecl):
            dims = []
            while isinstance(t, c_ast.ArrayDecl):
                if t.dim is None:
                    raise ShapeMismatchError(
                        f"array parameter {name!r} has no extent in dimension {len(dims)}; "
                        f"declare every extent, e.g. `float {name}[restrict N][M]`", loc)
                dims.append(t.dim)
                t = t.type
            if isinstance(t, c_ast.PtrDecl):
                self.unsupported(f"array of pointers {name!r}", p)
            words = _type_words(t)
            dtype = _ELEMENT_TYPES.get(tuple(w for w in words if w != "const"))
            if dtype is None:
                raise DTypeError(f"element type `{' '.join(words)}` of array {name!r} is not "
                                 f"supported (use float, double, int, int64_t, int8_t, bool)",
                                 loc)
            shape = tuple(self.extent(d, name, k) for k, d in enumerate(dims))
            if name in _ISL_KEYWORDS:
                raise UnsupportedConstructError(f"array name {name!r} is reserved", loc)
            arr = CArray(ir.Buffer(name, dtype, shape), loc)
            self.arrays[name] = arr
            return arr
        words = _type_words(t)
        if words and all(w in _INT_WORDS for w in words):
            if name in _ISL_KEYWORDS or name in ("floord", "min", "max"):
                raise UnsupportedConstructError(f"parameter name {name!r} is reserved", loc)
            v = ir.Var(name, "int64", is_param=True)
            self.params[name] = v
            return v
        if words and words[-1] in ("float", "double"):
            self.unsupported(f"scalar floating-point parameter {name!r}", p,
                             "pass it as a one-element array or write the value as a "
                             "literal")
        self.unsupported(f"parameter {name!r} of type `{' '.join(words) or '?'}`", p)

    def extent(self, node, name, k) -> ir.Expr:
        e = self.expr(node, _Scope(), affine=True)
        e = ir.const(e) if not isinstance(e, ir.Expr) else e
        to_isl(e, self.names(_Scope()), f"extent {k} of array {name!r}", self.loc(node))
        if isinstance(e, ir.IntImm) and e.value < 1:
            raise ShapeMismatchError(f"extent {k} of array {name!r} is {e.value}", self.loc(node))
        return e

    # ------------------------------------------------------------- SCoP region
    def scop_items(self) -> list:
        from pycparser import c_ast
        items = list(self.func.body.block_items or []) if self.func.body else []
        marks = [k for k, it in enumerate(items) if isinstance(it, c_ast.Pragma)
                 and it.string.strip() in ("scop", "endscop")]
        kinds = [items[k].string.strip() for k in marks]
        if not marks:
            if _find_pragma(self.func.body, "scop") or _find_pragma(self.func.body, "endscop"):
                self.unsupported("#pragma scop inside a nested block", self.func.body,
                                 "put #pragma scop / #pragma endscop in the function's "
                                 "outermost block")
            inside = items
            outside = []
        else:
            if kinds != ["scop", "endscop"]:
                self.unsupported("this arrangement of #pragma scop / #pragma endscop",
                                 items[marks[0]], "use exactly one #pragma scop followed by "
                                 "one #pragma endscop")
            inside = items[marks[0] + 1:marks[1]]
            outside = items[:marks[0]] + items[marks[1] + 1:]
        for it in outside:
            if isinstance(it, c_ast.Decl):
                self.declaration(it)
            elif isinstance(it, (c_ast.Pragma, c_ast.EmptyStatement)) or \
                    (isinstance(it, c_ast.Return) and it.expr is None):
                continue
            else:
                self.unsupported(f"a {_kind(it)} outside #pragma scop ... #pragma endscop", it,
                                 "polycomp compiles only the SCoP; move it into the region or "
                                 "out of the kernel function")
        return inside

    # ------------------------------------------------------------- statements
    def block(self, items, scope) -> CSeq:
        out = []
        for it in items:
            n = self.statement(it, scope)
            if n is not None:
                out.append(n)
        return CSeq(out)

    def statement(self, node, scope):
        from pycparser import c_ast
        if isinstance(node, c_ast.Compound):
            return self.block(node.block_items or [], scope)
        if isinstance(node, c_ast.For):
            return self.for_loop(node, scope)
        if isinstance(node, c_ast.If):
            return self.if_(node, scope)
        if isinstance(node, c_ast.Assignment):
            return self.assignment(node, scope)
        if isinstance(node, c_ast.UnaryOp) and node.op in ("++", "--", "p++", "p--"):
            return self.increment(node, scope)
        if isinstance(node, (c_ast.EmptyStatement, c_ast.Pragma)):
            return None
        if isinstance(node, c_ast.Decl):
            self.declaration(node)
            return None
        if isinstance(node, c_ast.FuncCall):
            self.unsupported(f"call statement `{_c(node)}`", node,
                             "a call may have side effects; only assignments to array "
                             "elements are allowed")
        self.unsupported(f"{_kind(node)} `{_c(node)}`", node)

    def declaration(self, d):
        """``int i, j;`` (iterators assigned by later ``for`` loops) is the only
        declaration allowed; anything else is a scalar temporary or a local array."""
        from pycparser import c_ast
        words = _type_words(d.type)
        if isinstance(d.type, c_ast.TypeDecl) and d.init is None and words and \
                all(w in _INT_WORDS for w in words):
            self.declared_iters.add(d.name)
            return
        what = "local array" if isinstance(d.type, c_ast.ArrayDecl) else "local variable"
        self.unsupported(f"{what} {d.name!r}", d, "scalar temporaries and local arrays are "
                         "not supported; only `int i, j;` declarations of loop iterators "
                         "are (write the value into an array parameter instead)")

    def for_loop(self, node, scope):
        from pycparser import c_ast
        loc = self.loc(node)
        # -- the iterator and its initial value
        init = node.init
        if isinstance(init, c_ast.DeclList) and len(init.decls) == 1:
            d = init.decls[0]
            words = _type_words(d.type)
            if not (isinstance(d.type, c_ast.TypeDecl) and words and
                    all(w in _INT_WORDS for w in words) and d.init is not None):
                self.unsupported(f"loop initialisation `{_c(init)}`", node,
                                 "write `for (int i = lb; i < ub; i++)`")
            name, start_node = d.name, d.init
        elif isinstance(init, c_ast.Assignment) and init.op == "=" and \
                isinstance(init.lvalue, c_ast.ID):
            name, start_node = init.lvalue.name, init.rvalue
            if name not in self.declared_iters:
                if name in self.params:
                    self.unsupported(f"assigning to parameter {name!r} in a loop header",
                                     node)
                raise UnknownSymbolError(f"loop iterator {name!r} is not declared "
                                         f"(declare it as `int {name};` or in the loop)", loc)
        else:
            self.unsupported(f"loop initialisation `{_c(init) if init else ''}`", node,
                             "write `for (int i = lb; i < ub; i++)`")
        if name in self.params or name in self.arrays or \
                any(v.name == name for v in scope.loops):
            self.unsupported(f"loop iterator {name!r} shadowing a parameter, array or "
                             f"enclosing iterator", node, "rename the iterator")
        if name in _ISL_KEYWORDS:
            self.unsupported(f"loop iterator name {name!r}", node, "rename the iterator")
        start = self.affine(start_node, scope, f"lower bound of loop {name!r}")
        step = self.loop_step(node, name)
        if node.cond is None:
            self.unsupported(f"loop {name!r} without a condition", node)
        var = ir.Var(name)
        inner = _Scope(scope.loops + [var], list(scope.constraints))
        names = self.names(inner)
        it = names[var]
        start_pieces = _pieces(start, names, loc, f"lower bound of loop {name!r}")
        if abs(step) != 1 and len(start_pieces) != 1:
            self.unsupported(f"a min/max start value with stride {step} in loop {name!r}",
                             node)
        op = ">=" if step > 0 else "<="
        first = " or ".join(_guarded(g, f"{it} {op} {to_isl(e, names, 'loop bound', loc)}")
                            for g, e in start_pieces)
        inner.constraints.append(first)
        if abs(step) != 1:
            s0 = to_isl(start_pieces[0][1], names, "loop bound", loc)
            inner.constraints.append(f"exists (e_{it} : {it} = {s0} + {abs(step)}*e_{it})"
                                     if step > 0 else
                                     f"exists (e_{it} : {it} = {s0} - {abs(step)}*e_{it})")
        cond = self.condition(node.cond, inner, f"condition of loop {name!r}")
        self.check_monotone(cond, inner, var, step, node)
        inner.constraints.append(cond)
        body = self.statement(node.stmt, inner)
        return CLoop(var, len(scope.loops), step, body, loc)

    def loop_step(self, node, name) -> int:
        from pycparser import c_ast
        nx = node.next
        step = None
        if isinstance(nx, c_ast.UnaryOp) and isinstance(nx.expr, c_ast.ID) and \
                nx.expr.name == name:
            step = {"++": 1, "p++": 1, "--": -1, "p--": -1}.get(nx.op)
        elif isinstance(nx, c_ast.Assignment) and isinstance(nx.lvalue, c_ast.ID) and \
                nx.lvalue.name == name:
            if nx.op in ("+=", "-="):
                c = self.int_constant(nx.rvalue)
                if c is not None:
                    step = c if nx.op == "+=" else -c
            elif nx.op == "=" and isinstance(nx.rvalue, c_ast.BinaryOp) and \
                    nx.rvalue.op in ("+", "-"):
                a, b = nx.rvalue.left, nx.rvalue.right
                if isinstance(a, c_ast.ID) and a.name == name:
                    c = self.int_constant(b)
                    if c is not None:
                        step = c if nx.rvalue.op == "+" else -c
                elif isinstance(b, c_ast.ID) and b.name == name and nx.rvalue.op == "+":
                    step = self.int_constant(a)
        if not step:
            self.unsupported(f"loop increment `{_c(nx) if nx else ''}` of {name!r}", node,
                             f"the increment must be {name}++, {name}--, {name} += c or "
                             f"{name} -= c for a non-zero integer constant c")
        return step

    def int_constant(self, node):
        v = self.expr(node, _Scope(), affine=True)
        if isinstance(v, int):
            return v
        if isinstance(v, ir.IntImm):
            return v.value
        return None

    def check_monotone(self, cond, scope, var, step, node):
        """The loop runs while ``cond`` holds; it is a SCoP loop only when ``cond``
        stays false once it is false (an upper bound for an increasing loop, a lower
        bound for a decreasing one), so its iterations are exactly the points of the
        domain.  Checked with isl: if ``cond`` holds at ``i + step`` it holds at ``i``."""
        names = self.names(scope)
        dims = ", ".join(names[v] for v in scope.loops)
        prefix = _param_prefix(self.params.values())
        outer = " and ".join(f"({c})" for c in scope.constraints) or "1 = 1"
        try:
            here = isl.Set.read_from_str(self.ctx, f"{prefix}{{ [{dims}] : {cond} }}")
            around = isl.Set.read_from_str(self.ctx, f"{prefix}{{ [{dims}] : {outer} }}")
            shift = isl.MultiAff.read_from_str(
                self.ctx, f"{prefix}{{ [{dims}] -> [{_shifted(scope.loops, names, var, step)}] }}")
        except isl.Error as e:  # pragma: no cover - texts come from to_isl
            raise UnsupportedConstructError(f"isl rejected loop {var.name!r}: {e}",
                                            self.loc(node)) from None
        nxt = here.preimage_multi_aff(shift).intersect(around)
        if not nxt.is_subset(here):
            raise NonAffineIndexError(
                f"the condition `{_c(node.cond)}` of loop {var.name!r} is not a "
                f"{'upper' if step > 0 else 'lower'} bound of {var.name!r} (it can become "
                f"true again after being false), so the loop is not a SCoP loop; write "
                f"`{var.name} {'<' if step > 0 else '>'} bound`", self.loc(node))

    def if_(self, node, scope):
        cond = self.condition(node.cond, scope, "if condition")
        then_scope = _Scope(list(scope.loops), scope.constraints + [cond])
        then = self.statement(node.iftrue, then_scope)
        orelse = None
        if node.iffalse is not None:
            else_scope = _Scope(list(scope.loops), scope.constraints + [f"not ({cond})"])
            orelse = self.statement(node.iffalse, else_scope)
        return CIf(then, orelse)

    def assignment(self, node, scope):
        from pycparser import c_ast
        ops = {"=": None, "+=": "+", "-=": "-", "*=": "*", "/=": "/"}
        if node.op not in ops:
            self.unsupported(f"compound assignment {node.op!r}", node)
        if not isinstance(node.lvalue, c_ast.ArrayRef):
            lv = node.lvalue
            if isinstance(lv, c_ast.ID):
                self.unsupported(f"assignment to scalar {lv.name!r}", node,
                                 "scalar temporaries are not supported; write the value "
                                 "into an array parameter")
            self.unsupported(f"assignment to `{_c(lv)}`", node)
        lhs = self.array_ref(node.lvalue, scope)
        rhs = self.expr(node.rvalue, scope)
        op = ops[node.op]
        value = rhs if op is None else self.arith(op, lhs, rhs, node)
        return self.add_statement(node, scope, lhs, value)

    def increment(self, node, scope):
        from pycparser import c_ast
        if not isinstance(node.expr, c_ast.ArrayRef):
            self.unsupported(f"`{_c(node)}` on a scalar", node,
                             "scalar temporaries are not supported")
        lhs = self.array_ref(node.expr, scope)
        value = self.arith("+" if "+" in node.op else "-", lhs, 1, node)
        return self.add_statement(node, scope, lhs, value)

    def add_statement(self, node, scope, lhs: ir.Load, value) -> CStmt:
        buf = lhs.buffer
        if isinstance(value, ir.Expr) and value.dtype == buf.dtype:
            pass
        else:
            value = ir.cast(ir.const(value, buf.dtype) if not isinstance(value, ir.Expr)
                            else value, buf.dtype)
        taken = {*self.params, *self.arrays}
        k = len(self.statements)
        prefix = "S_"
        while any(n.startswith(prefix) for n in taken):
            prefix = "S" + prefix
        name = f"{prefix}{k}"
        self.written.add(buf.name)
        loc = self.loc(node)
        src = CStatementSource(name, loc, _c(node), tuple(scope.loops))
        st = CStmt(name, tuple(scope.loops), self.names(scope), tuple(scope.constraints),
                   buf, tuple(lhs.indices), value, src)
        self.statements.append(st)
        return st

    # ------------------------------------------------------------- expressions
    def affine(self, node, scope, what):
        e = self.expr(node, scope, affine=True)
        e = ir.const(e) if not isinstance(e, ir.Expr) else e
        if not dt.is_int(e.dtype):
            raise NonAffineIndexError(f"{what} `{_c(node)}` is not an integer expression",
                                      self.loc(node))
        for g, p in _pieces(e, self.names(scope), self.loc(node), f"{what} `{_c(node)}`"):
            to_isl(p, self.names(scope), what, self.loc(node))
        return e

    def condition(self, node, scope, what) -> str:
        """isl constraint text of an affine condition."""
        e = self.expr(node, scope, affine=True)
        e = _truth(e)
        return _cond_text(e, self.names(scope), self.loc(node), what, _c(node))

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
            self.unsupported(f"subscripted expression `{_c(node)}`", node,
                             "only array parameters may be subscripted")
        arr = self.arrays.get(base.name)
        if arr is None:
            if base.name in self.params or any(v.name == base.name for v in scope.loops):
                self.unsupported(f"subscripting the integer {base.name!r}", node)
            raise UnknownSymbolError(f"unknown array {base.name!r} in `{_c(node)}` (arrays "
                                     f"must be parameters of {self.name!r})", loc)
        buf = arr.buffer
        if len(subs) != len(buf.shape):
            raise ShapeMismatchError(
                f"array {buf.name!r} has {len(buf.shape)} dimension(s) but `{_c(node)}` "
                f"uses {len(subs)} subscript(s); polycomp needs a full element reference",
                loc)
        idx = []
        for k, s in enumerate(subs):
            e = self.affine(s, scope, f"subscript {k} of {buf.name!r}")
            idx.append(e)
        return ir.Load(buf, tuple(idx), buf.dtype)

    def arith(self, op, a, b, node):
        """``a op b`` with literals weakly typed (see the module docstring)."""
        if not isinstance(a, ir.Expr) and not isinstance(b, ir.Expr):
            if op in ("+", "-", "*"):
                return {"+": a + b, "-": a - b, "*": a * b}[op]
            if op == "/" and (isinstance(a, float) or isinstance(b, float)):
                if b == 0:
                    self.unsupported("division by the constant zero", node)
                return a / b
        da = a.dtype if isinstance(a, ir.Expr) else ("float32" if isinstance(a, float) else "int64")
        db = b.dtype if isinstance(b, ir.Expr) else ("float32" if isinstance(b, float) else "int64")
        if op in ("/", "%") and not dt.is_float(da) and not dt.is_float(db):
            self.unsupported(f"integer {'division' if op == '/' else 'remainder'} "
                             f"`{_c(node)}`", node,
                             "C truncates towards zero and polycomp's index arithmetic is "
                             "affine; use floating-point operands or rewrite the subscript")
        if op == "%":
            self.unsupported(f"floating-point remainder `{_c(node)}`", node)
        return ir.binary(op, a, b)

    def expr(self, node, scope, affine=False):
        """IR for a C expression; integer and float literals stay Python numbers until
        they meet a typed operand (weak typing)."""
        from pycparser import c_ast
        loc = self.loc(node)
        if isinstance(node, c_ast.Constant):
            return _literal(node, loc)
        if isinstance(node, c_ast.ID):
            for v in reversed(scope.loops):
                if v.name == node.name:
                    return v
            if node.name in self.params:
                return self.params[node.name]
            if node.name in self.arrays:
                self.unsupported(f"array {node.name!r} used without subscripts", node)
            raise UnknownSymbolError(f"unknown identifier {node.name!r} in `{_c(node)}` "
                                     f"(not a loop iterator or a parameter of "
                                     f"{self.name!r})", loc)
        if isinstance(node, c_ast.ArrayRef):
            ld = self.array_ref(node, scope)
            self.read_.add(ld.buffer.name)
            return ld
        if isinstance(node, c_ast.BinaryOp):
            op = node.op
            if op in ("&", "|", "^", "<<", ">>"):
                self.unsupported(f"bitwise operator {op!r} in `{_c(node)}`", node)
            a = self.expr(node.left, scope, affine)
            b = self.expr(node.right, scope, affine)
            if op in ("&&", "||"):
                return ir.Binary(op, _truth(a), _truth(b), "bool")
            if op in ("<", "<=", ">", ">=", "==", "!="):
                if not isinstance(a, ir.Expr) and not isinstance(b, ir.Expr):
                    a = ir.const(a)
                return ir.binary(op, a, b)
            if op in ("+", "-", "*", "/", "%"):
                return self.arith(op, a, b, node)
            self.unsupported(f"operator {op!r} in `{_c(node)}`", node)
        if isinstance(node, c_ast.UnaryOp):
            op = node.op
            if op in ("++", "--", "p++", "p--"):
                self.unsupported(f"`{_c(node)}` inside an expression", node,
                                 "side effects are only allowed as statements")
            if op in ("*", "&"):
                self.unsupported(f"pointer {'dereference' if op == '*' else 'address-of'} "
                                 f"`{_c(node)}`", node, "use array subscripts")
            if op == "sizeof":
                self.unsupported("sizeof", node)
            a = self.expr(node.expr, scope, affine)
            if op == "+":
                return a
            if op == "-":
                return -a if not isinstance(a, ir.Expr) else ir.Unary("neg", a, a.dtype)
            if op == "!":
                return ir.Unary("!", _truth(a), "bool")
            self.unsupported(f"operator {op!r} in `{_c(node)}`", node)
        if isinstance(node, c_ast.TernaryOp):
            c = _truth(self.expr(node.cond, scope, affine))
            t = self.expr(node.iftrue, scope, affine)
            f = self.expr(node.iffalse, scope, affine)
            if not isinstance(t, ir.Expr) and not isinstance(f, ir.Expr):
                t = ir.const(t)
            return ir.select(c, t, f)
        if isinstance(node, c_ast.Cast):
            words = tuple(w for w in _type_words(node.to_type) if w != "const")
            dtype = _ELEMENT_TYPES.get(words)
            if dtype is None and words and all(w in _INT_WORDS for w in words):
                dtype = "int64"
            if dtype is None:
                self.unsupported(f"cast to `{' '.join(words) or _c(node.to_type)}`", node)
            v = self.expr(node.expr, scope, affine)
            return ir.cast(ir.const(v, dtype) if not isinstance(v, ir.Expr) else v, dtype)
        if isinstance(node, c_ast.FuncCall):
            return self.call(node, scope, affine)
        if isinstance(node, c_ast.Assignment):
            self.unsupported(f"assignment inside an expression `{_c(node)}`", node)
        if isinstance(node, c_ast.ExprList):
            self.unsupported(f"comma operator `{_c(node)}`", node)
        self.unsupported(f"{_kind(node)} `{_c(node)}`", node)

    def call(self, node, scope, affine):
        from pycparser import c_ast
        if not isinstance(node.name, c_ast.ID):
            self.unsupported(f"call through `{_c(node.name)}`", node)
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
            out.append(v)
        if op == "abs" and not dt.is_float(out[0].dtype):
            return ir.Call("abs", (out[0],), out[0].dtype)
        if op == "pow":
            d = dt.promote(out[0].dtype, out[1].dtype)
            out = [ir.cast(v, d) for v in out]
        return ir.Call(op, tuple(out), out[0].dtype)


# --------------------------------------------------------------------------- helpers


def _isl_name(name: str) -> str:
    return name + "_" if name in _ISL_KEYWORDS else name


def _param_prefix(params) -> str:
    params = list(params)
    return "[" + ", ".join(_isl_name(p.name) for p in params) + "] -> " if params else ""


def _shifted(loops, names, var, step) -> str:
    return ", ".join(f"{names[v]} + {step}" if v is var else names[v] for v in loops)


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
    if node.type in ("float", "double", "long double") or re.fullmatch(r"[0-9.eE+\-pPxX]+[fFlL]?", v):
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


def _guarded(guard, text) -> str:
    return f"(({guard}) and {text})" if guard else f"({text})"


def _pieces(e: ir.Expr, names, loc, what="expression") -> list:
    """``e`` as a list of ``(guard, select-free expr)``: the guards (isl texts, None for
    true) partition the space; ternaries with affine conditions are case-split."""
    if isinstance(e, ir.Select):
        c = _cond_text(e.cond, names, loc, f"{what}: the condition of a ternary", None)
        out = []
        for g, x in _pieces(e.t, names, loc, what):
            out.append((_and(c, g), x))
        for g, x in _pieces(e.f, names, loc, what):
            out.append((_and(f"not ({c})", g), x))
        return out
    if isinstance(e, ir.Binary):
        return [(_and(ga, gb), ir.Binary(e.op, a, b, e.dtype))
                for ga, a in _pieces(e.a, names, loc, what)
                for gb, b in _pieces(e.b, names, loc, what)]
    if isinstance(e, ir.Unary):
        return [(g, ir.Unary(e.op, a, e.dtype)) for g, a in _pieces(e.a, names, loc, what)]
    if isinstance(e, ir.Cast):
        return [(g, ir.Cast(a, e.dtype)) for g, a in _pieces(e.value, names, loc, what)]
    return [(None, e)]


def _and(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return f"({a}) and ({b})"


def _cond_text(c: ir.Expr, names, loc, what, source) -> str:
    """isl text of an affine condition (comparisons of affine expressions, possibly
    with affine ternaries, combined with ``&&``, ``||``, ``!``)."""
    from polycomp.lowering.printer import expr_str
    if isinstance(c, ir.IntImm):
        return "1 = 1" if c.value else "1 = 0"
    if isinstance(c, ir.Binary) and c.op in ("&&", "||"):
        j = " and " if c.op == "&&" else " or "
        return (f"(({_cond_text(c.a, names, loc, what, source)}){j}"
                f"({_cond_text(c.b, names, loc, what, source)}))")
    if isinstance(c, ir.Unary) and c.op == "!":
        return f"not ({_cond_text(c.a, names, loc, what, source)})"
    if isinstance(c, ir.Binary) and c.op in ("<", "<=", ">", ">=", "==", "!="):
        shown = source or expr_str(c)
        alts = []
        for ga, a in _pieces(c.a, names, loc, what):
            for gb, b in _pieces(c.b, names, loc, what):
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
                alts.append(_guarded(_and(ga, gb), t))
        return "(" + " or ".join(alts) + ")"
    shown = source or expr_str(c)
    raise NonAffineIndexError(f"{what} `{shown}` is not an affine condition", loc)


def _kind(node) -> str:
    names = {"While": "while loop", "DoWhile": "do-while loop", "Goto": "goto",
             "Label": "label", "Switch": "switch", "Break": "break",
             "Continue": "continue", "Return": "return statement", "Case": "case",
             "Default": "default", "StructRef": "struct member access",
             "FuncCall": "function call", "Decl": "declaration",
             "ExprList": "comma expression", "Typedef": "typedef",
             "CompoundLiteral": "compound literal", "InitList": "initializer list"}
    return names.get(type(node).__name__, type(node).__name__)


def _c(node) -> str:
    """C source text of a pycparser node (for messages)."""
    from pycparser import c_generator
    try:
        return c_generator.CGenerator().visit(node).strip()
    except Exception:  # pragma: no cover - message only
        return type(node).__name__


__all__ += ["CArray", "CGraph", "CProgram", "CStmt", "CLoop", "CSeq", "CIf",
            "CStatementSource"]
