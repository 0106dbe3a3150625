"""The ``@tensor_expr`` DSL: symbolic dimensions, tensors, ``compute`` stages, reductions.

A kernel is a Python function whose parameters are annotated with
``Tensor[(dims...), dtype]``.  Tracing calls it with placeholder tensors; every
``compute(shape, lambda i, j: ...)`` inside records a :class:`Stage` whose body is an
IR expression (:mod:`polycomp.ir`) over fresh iterator Vars.  Reductions
(``sum``/``max``/``min`` over :func:`reduce_axis` axes) must be the whole body of a
``compute`` (as in TVM); a stage that needs a reduction inside a larger expression is
written as two stages.  Stages may read earlier stages.  The result of tracing is a
:class:`KernelGraph`: parameters (symbolic dims), inputs, stages, outputs.
"""
from __future__ import annotations

import builtins
import inspect
import itertools
import re
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import (
    DSLError,
    DTypeError,
    NonAffineIndexError,
    PolycompError,
    ReduceAxisError,
    ShapeMismatchError,
    SourceLocation,
    UnknownSymbolError,
    UnsupportedConstructError,
    UserCodeError,
    deep_recursion,
    location_of_exception,
    user_location,
)

from .buffer_view import BufferView

if TYPE_CHECKING:  # pragma: no cover
    from .dsl_model import DslModel

__all__ = ["sym", "Tensor", "tensor_expr", "compute", "reduce_axis", "sum", "max", "min",
           "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "abs", "sigmoid", "select",
           "where", "eq", "ne", "cast", "Kernel", "KernelGraph", "Stage", "ReduceAxis", "Reduce",
           "placeholder"]

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED = {"int", "float", "double", "char", "void", "for", "if", "else", "while",
             "return", "const", "restrict", "long", "short", "unsigned", "signed",
             "min", "max", "floord", "sizeof", "static", "inline", "half", "bool",
             "blockIdx", "threadIdx", "blockDim", "gridDim",
             # C keywords the list above misses
             "do", "switch", "case", "default", "break", "continue", "goto", "struct",
             "union", "enum", "typedef", "extern", "register", "volatile", "auto",
             # words of isl's set/map syntax (symbols and statement names are parsed by isl)
             "and", "or", "not", "xor", "implies", "mod", "floor", "ceil", "exists",
             "infty", "rat", "true", "false", "div", "ceild",
             # isl reads these as values: NaN / infinity
             "NaN", "nan", "NAN", "inf", "Inf", "INF", "infinity", "Infinity", "INFINITY"}


def _check_name(name: str, what: str) -> str:
    if not _NAME_RE.match(name) or name in _RESERVED:
        raise DSLError(f"{what} name {name!r} is not a valid identifier for generated code",
                       user_location())
    return name


# --------------------------------------------------------------------------- symbols


def sym(names: str) -> ir.Var | tuple:
    """Declare symbolic dimensions: ``N, M, K = sym("N M K")`` (isl parameters, >= 1)."""
    if not isinstance(names, str):
        raise DSLError(f"sym() takes a string of names, e.g. sym(\"N M\"), got "
                       f"{type(names).__name__} {names!r}", user_location())
    parts = names.replace(",", " ").split()
    if not parts:
        raise DSLError("sym() needs at least one name", user_location())
    out = tuple(ir.Var(_check_name(p, "symbol"), "int64", is_param=True) for p in parts)
    return out[0] if len(out) == 1 else out


def _dim(d, what="dimension") -> ir.Expr:
    if isinstance(d, bool) or not isinstance(d, (int, ir.Expr)):
        try:
            import numpy as np
            if isinstance(d, np.integer):
                d = int(d)
        except ImportError:  # pragma: no cover
            pass
    if isinstance(d, str):
        raise UnknownSymbolError(
            f"{what} {d!r} is a string; declare symbolic dimensions with polycomp.sym, e.g. "
            f"{d} = polycomp.sym({d!r})", user_location())
    if isinstance(d, Tensor):
        raise ShapeMismatchError(f"{what} must be an int or a symbolic expression, got the "
                                 f"tensor {d.name!r} (did a kernel parameter shadow a symbol?)",
                                 user_location())
    if isinstance(d, bool):
        raise ShapeMismatchError(f"{what} must be an int or a symbolic expression, got {d!r}",
                                 user_location())
    if isinstance(d, int):
        if d < 1:
            raise ShapeMismatchError(f"{what} must be >= 1, got {d}", user_location())
        return ir.IntImm(d)
    if isinstance(d, ir.Expr):
        if d.dtype not in dt.INTS:
            raise ShapeMismatchError(f"{what} must be an integer expression, got {d.dtype}",
                                     user_location())
        for v in ir.free_vars(d):
            if not v.is_param:
                raise UnknownSymbolError(
                    f"{what} uses {v.name!r}, which is not a symbolic dimension (declare it "
                    f"with polycomp.sym)", user_location())
        return d
    raise ShapeMismatchError(f"{what} must be an int or a symbolic expression, got {d!r}",
                             user_location())


# --------------------------------------------------------------------------- tensors


class Tensor(BufferView):
    """A tensor in a kernel: a placeholder (kernel input) or the result of a stage.

    As a type annotation, ``Tensor[(N, K), "float16"]`` declares an input's shape and
    dtype (dtype defaults to float32).
    """

    def __init__(self, buffer: ir.Buffer, stage: "Stage | None" = None,
                 location: SourceLocation | None = None):
        self.buffer = buffer
        self.stage = stage
        self.location = location

    @property
    def ndim(self) -> int:
        return len(self.buffer.shape)

    def __class_getitem__(cls, spec):
        if not isinstance(spec, tuple) or not spec:
            spec = (spec,)
        if len(spec) == 2 and isinstance(spec[0], (tuple, list)) and \
                not isinstance(spec[1], (int, ir.Expr, tuple, list)):
            shape, dtype = spec  # dtype: a name, a numpy dtype or type
        elif isinstance(spec[0], (tuple, list)) and len(spec) == 1:
            shape, dtype = spec[0], "float32"
        else:  # Tensor[N, K] or Tensor[N, K, "f16"]
            if isinstance(spec[-1], str):
                shape, dtype = spec[:-1], spec[-1]
            else:
                shape, dtype = spec, "float32"
        return TensorType(tuple(_dim(d) for d in shape), dt.canonical(dtype))

    def __getitem__(self, idx) -> ir.Load:
        loc = user_location()
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != self.ndim:
            raise ShapeMismatchError(
                f"tensor {self.name!r} has {self.ndim} dimension(s) but is indexed with "
                f"{len(idx)} index(es)", loc)
        out = []
        for k, i in enumerate(idx):
            if isinstance(i, slice) or i is Ellipsis or i is None:
                raise UnsupportedConstructError(
                    f"{'slices' if isinstance(i, slice) else repr(i)} in an index of "
                    f"{self.name!r} are not supported; index every dimension with an "
                    f"iterator expression (one compute() per output element)", loc)
            if isinstance(i, Tensor):
                raise NonAffineIndexError(
                    f"index {k} of {self.name!r} is the tensor {i.name!r}; index with "
                    f"iterators, not tensors", loc)
            if isinstance(i, float) or (isinstance(i, ir.Expr) and i.dtype not in dt.INTS):
                raise NonAffineIndexError(
                    f"index {k} of {self.name!r} is not an integer expression", loc)
            i = ir.const(i)
            if ir.reads_data(i):        # a gather: the index is read from a tensor
                i = ir.gather_index(i, self.buffer.shape[k])
            else:
                _check_affine(i, f"index {k} of {self.name}", loc)
            out.append(i)
        load = ir.Load(self.buffer, tuple(out), self.dtype)
        if loc is not None:
            _LOAD_LOCATIONS[load] = loc
        return load

    def __setitem__(self, idx, value):
        raise UnsupportedConstructError(
            f"assignment to an element of {self.name!r}: tensors are immutable in the DSL; "
            f"define a new tensor with compute()", user_location())

    def __iter__(self):
        raise UnsupportedConstructError(
            f"iterating over tensor {self.name!r} is not supported; use compute() with "
            f"index functions (and reduce_axis for reductions)", user_location())

    def __len__(self):
        raise UnsupportedConstructError(
            f"len() of tensor {self.name!r}: extents may be symbolic; use .shape",
            user_location())

    def __repr__(self):
        shp = ", ".join(_fmt(s) for s in self.shape)
        return f"Tensor({self.name}, ({shp}), {self.dtype})"


_LOAD_LOCATIONS: "weakref.WeakKeyDictionary[ir.Load, SourceLocation]" = \
    weakref.WeakKeyDictionary()


def load_location(load: ir.Load) -> SourceLocation | None:
    """Where in user code the tensor element ``load`` was indexed (None if unknown)."""
    try:
        return _LOAD_LOCATIONS.get(load)
    except TypeError:  # pragma: no cover - not weak-referenceable
        return None


def _check_affine(e: ir.Expr, what: str, loc) -> None:
    """Raise NonAffineIndexError at the indexing line when ``e`` is not quasi-affine.

    Every free variable counts as an iterator or symbol here; whether each is in scope is
    checked when the compute stage is built.
    """
    from polycomp.affine import to_isl
    to_isl(e, {v: v.name for v in ir.free_vars(e)}, what, loc)


def _fmt(e) -> str:
    from polycomp.lowering.printer import expr_str
    return expr_str(e)


@dataclass(frozen=True)
class TensorType:
    shape: tuple
    dtype: str


def placeholder(shape, dtype="float32", name="input") -> Tensor:
    """A kernel input outside ``@tensor_expr`` tracing (for building graphs by hand)."""
    buf = ir.Buffer(_check_name(name, "tensor"), dt.canonical(dtype),
                    tuple(_dim(d) for d in shape))
    return Tensor(buf, None, user_location())


# --------------------------------------------------------------------------- reductions


@dataclass(frozen=True, eq=False, repr=False)
class ReduceAxis(ir.Var):
    """An iterator ranging over ``[lo, lo + extent)`` that a reduction sums away.

    It is an ordinary int64 :class:`~polycomp.ir.Var` in index expressions.
    """
    lo: ir.Expr = None  # type: ignore[assignment]
    extent: ir.Expr = None  # type: ignore[assignment]
    location: SourceLocation | None = None

    @property
    def var(self) -> ir.Var:
        return self


_axis_counter = itertools.count()
_AUTO_AXIS = re.compile(r"^r[0-9]+$")


def _axis_desc(a: "ReduceAxis") -> str:
    """``'k'``, or for an unnamed axis ``'r3' (reduce_axis at file:line)``."""
    if _AUTO_AXIS.match(a.name) and a.location is not None:
        return f"{a.name!r} (reduce_axis at {a.location.filename}:{a.location.lineno})"
    return repr(a.name)


def reduce_axis(extent, name: str | None = None) -> ReduceAxis:
    """A reduce axis over ``[0, extent)`` or, given ``(lo, hi)``, over ``[lo, hi)``."""
    loc = user_location()
    if isinstance(extent, tuple):
        if len(extent) != 2:
            raise ReduceAxisError("reduce_axis((lo, hi)) takes a pair", loc)
        lo, hi = ir.const(extent[0]), ir.const(extent[1])
        ext = _dim(ir.binary("-", hi, lo) if not (ir.is_const(hi) and ir.is_const(lo))
                   else hi.value - lo.value, "reduce axis extent")
    else:
        lo, ext = ir.IntImm(0), _dim(extent, "reduce axis extent")
    name = _check_name(name or f"r{next(_axis_counter)}", "reduce axis")
    return ReduceAxis(name, "int64", False, lo, ext, loc)


REDUCE_OPS = ("sum", "max", "min")


@dataclass(frozen=True, eq=False)
class Reduce(ir.Expr):
    """``op`` over ``axes`` of ``body`` (only valid as the whole body of a compute)."""
    op: str
    body: ir.Expr
    axes: tuple
    dtype: str
    location: SourceLocation | None = None


def identity(op: str, dtype: str) -> ir.Expr:
    """The identity element of reduction ``op`` on ``dtype`` (+-inf for float max/min)."""
    import numpy as np
    if op == "sum":
        return ir.const(0.0, dtype) if dt.is_float(dtype) else ir.IntImm(0, dtype)
    if dt.is_float(dtype):
        return ir.FloatImm(float("-inf") if op == "max" else float("inf"), dtype)
    if dtype == "bool":
        return ir.IntImm(0 if op == "max" else 1, "bool")
    info = np.iinfo(dtype)
    return ir.IntImm(int(info.min if op == "max" else info.max), dtype)


def _axes(axis, loc) -> tuple:
    if axis is None:
        raise ReduceAxisError("a reduction needs axis=<reduce_axis> (or a list of them)", loc)
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    for a in axes:
        if not isinstance(a, ReduceAxis):
            raise ReduceAxisError(f"axis must be created with reduce_axis(), got {a!r}", loc)
    if len(set(id(a) for a in axes)) != len(axes):
        dup = next(a for a in axes if builtins.sum(b is a for b in axes) > 1)
        raise ReduceAxisError(f"reduce axis {_axis_desc(dup)} is listed twice in one "
                              f"reduction", loc)
    return axes


def _reduce(op, body, axis, loc) -> Reduce:
    if isinstance(body, Tensor):
        raise ReduceAxisError(f"{op}() of the whole tensor {body.name!r}: reduce an element "
                              f"expression such as {body.name}[i, k] over reduce axes", loc)
    body = ir.const(body)
    axes = _axes(axis, loc)
    _check_no_nested_reduce(body, loc, axes)
    return Reduce(op, body, axes, body.dtype, loc)


def _check_no_nested_reduce(e, loc, axes=()):
    def fn(n):
        if isinstance(n, Reduce):
            twice = [a for a in n.axes if any(a is b for b in axes)]
            if twice:
                raise ReduceAxisError(f"reduce axis {_axis_desc(twice[0])} is reduced twice (a "
                                      f"reduction over it inside another one)", loc)
            raise ReduceAxisError("a reduction inside another reduction; split it into two "
                                  "compute stages", loc)
    ir.walk(e, fn)


def _elementwise2(name, a, b):
    return ir.binary(name, a, b)


def sum(expr, axis=None):  # noqa: A001 - DSL name
    """Sum reduction over ``axis`` (identity 0)."""
    return _reduce("sum", expr, axis, user_location())


def max(*args, axis=None):  # noqa: A001
    """``max(x, axis=k)`` reduces (identity -inf); ``max(a, b)`` is elementwise."""
    if axis is not None or len(args) == 1:
        if len(args) != 1:
            raise ReduceAxisError("max(x, axis=k) takes one expression", user_location())
        return _reduce("max", args[0], axis, user_location())
    if len(args) != 2:
        raise DSLError("max(a, b) takes two expressions", user_location())
    return _elementwise2("max", *args)


def min(*args, axis=None):  # noqa: A001
    """``min(x, axis=k)`` reduces (identity +inf); ``min(a, b)`` is elementwise."""
    if axis is not None or len(args) == 1:
        if len(args) != 1:
            raise ReduceAxisError("min(x, axis=k) takes one expression", user_location())
        return _reduce("min", args[0], axis, user_location())
    if len(args) != 2:
        raise DSLError("min(a, b) takes two expressions", user_location())
    return _elementwise2("min", *args)


# --------------------------------------------------------------------------- math


def _float_arg(x, fname):
    x = ir.const(x)
    if not dt.is_float(x.dtype):
        raise DTypeError(f"{fname}() needs a float argument, got {x.dtype}; cast() it first",
                         user_location())
    return x


def exp(x): return ir.call("exp", _float_arg(x, "exp"))
def log(x): return ir.call("log", _float_arg(x, "log"))
def sqrt(x): return ir.call("sqrt", _float_arg(x, "sqrt"))
def rsqrt(x): return ir.call("rsqrt", _float_arg(x, "rsqrt"))
def tanh(x): return ir.call("tanh", _float_arg(x, "tanh"))
def erf(x): return ir.call("erf", _float_arg(x, "erf"))
def sigmoid(x): return ir.call("sigmoid", _float_arg(x, "sigmoid"))


def abs(x):  # noqa: A001
    return ir.call("abs", x)


def select(cond, t, f):
    """``cond ? t : f``; a load in the unchosen side is never performed (padding)."""
    if isinstance(cond, bool) or type(cond).__name__ == "bool_":
        raise UnsupportedConstructError(
            f"the condition of select() is the Python bool {bool(cond)}, not an expression; "
            f"== and != on polycomp expressions compare identity in Python: write "
            f"polycomp.eq(a, b) / polycomp.ne(a, b)", user_location())
    return ir.select(cond, t, f)


def eq(a, b):
    """The condition ``a == b`` (Python's ``==`` on expressions compares identity)."""
    return ir.binary("==", a, b)


def ne(a, b):
    """The condition ``a != b``."""
    return ir.binary("!=", a, b)


where = select


def cast(x, dtype):
    return ir.cast(x, dtype)


# --------------------------------------------------------------------------- stages


@dataclass(eq=False)
class Stage:
    """One ``compute``: ``output[iters] = body`` (or a reduction of body over axes)."""
    name: str
    iters: tuple          # ir.Var per output dimension
    body: ir.Expr         # element expression (for reductions: the reduced expression)
    output: Tensor = None  # type: ignore[assignment]  # set once the Tensor exists
    reduce_op: str | None = None
    reduce_axes: tuple = ()
    location: SourceLocation | None = None

    @property
    def is_reduction(self) -> bool:
        return self.reduce_op is not None


class _Trace:
    """Collects the stages created while one kernel function runs."""
    active: list = []

    def __init__(self):
        self.stages: list[Stage] = []
        self.names: set = set()

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name


def _current_trace(loc) -> _Trace:
    if not _Trace.active:
        raise DSLError("compute() is only valid inside a @tensor_expr function", loc)
    return _Trace.active[-1]


def compute(shape, fn, name: str | None = None, dtype=None) -> Tensor:
    """A new tensor of ``shape`` whose element ``[i, j, ...]`` is ``fn(i, j, ...)``."""
    loc = user_location()
    trace = _current_trace(loc)
    if not isinstance(shape, (tuple, list)):
        shape = (shape,)
    dims = tuple(_dim(d, "compute extent") for d in shape)
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        raise DSLError("compute() needs a function of the output indices", loc) from None
    kinds = [p.kind for p in inspect.signature(fn).parameters.values()]
    if any(k not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
           for k in kinds):
        raise DSLError("the function of compute() must take one plain positional index "
                       "argument per dimension (no *args, **kwargs or keyword-only ones)", loc)
    if len(params) != len(dims):
        raise ShapeMismatchError(
            f"compute() has a {len(dims)}-d shape but its function takes {len(params)} "
            f"index argument(s)", loc)
    sname = trace.fresh(_check_name(name, "stage") if name else f"T{len(trace.stages)}")
    iters = tuple(ir.Var(p) for p in params)
    body = fn(*iters)
    if isinstance(body, (int, float, bool)):
        body = ir.const(body)
    if not isinstance(body, ir.Expr):
        raise DSLError(f"the function of compute {sname!r} returned {type(body).__name__}, "
                       f"not an expression", loc)
    reduce_op, axes = None, ()
    if isinstance(body, Reduce):
        reduce_op, axes, rloc, body = body.op, body.axes, body.location, body.body
        _check_no_nested_reduce(body, rloc)
    else:
        _check_no_nested_reduce_in(body, sname, loc)
    out_dtype = dt.canonical(dtype) if dtype is not None else body.dtype
    if out_dtype == "bool" and reduce_op == "sum":
        raise DTypeError(f"sum of bool values in {sname!r}; cast() to an integer dtype", loc)
    if reduce_op is None and body.dtype != out_dtype:
        body = ir.cast(body, out_dtype)
    if reduce_op is not None and body.dtype != out_dtype:
        body = ir.cast(body, out_dtype)
    _check_vars(body, iters, axes, sname, loc)
    buf = ir.Buffer(sname, out_dtype, dims)
    stage = Stage(sname, iters, body, None, reduce_op, axes, loc)  # type: ignore[arg-type]
    out = Tensor(buf, stage, loc)
    stage.output = out
    trace.stages.append(stage)
    return out


def _check_no_nested_reduce_in(body, sname, loc):
    def fn(n):
        if isinstance(n, Reduce):
            raise ReduceAxisError(
                f"a reduction must be the whole body of compute {sname!r} (found it inside "
                f"a larger expression); compute the reduction as its own stage", n.location or loc)
    ir.walk(body, fn)


def _check_vars(body, iters, axes, sname, loc):
    axis_vars = {a.var for a in axes}
    allowed = set(iters) | axis_vars
    used = set()
    for v in ir.free_vars(body):
        if v.is_param:
            continue
        if v not in allowed:
            if isinstance(v, ReduceAxis):
                raise ReduceAxisError(
                    f"reduce axis {_axis_desc(v)} is used in compute {sname!r} outside a reduction "
                    f"over it", loc)
            raise UnknownSymbolError(f"compute {sname!r} uses {v.name!r}, which is neither "
                                     f"one of its indices nor a reduce axis of it", loc)
        used.add(v)
    for a in axes:
        if a.var in set(iters):
            raise ReduceAxisError(f"{a.var.name!r} is both an index and a reduce axis", loc)
        for e in (a.lo, a.extent):
            for v in ir.free_vars(e):
                if not v.is_param:
                    raise NonAffineIndexError(
                        f"the bounds of reduce axis {a.var.name!r} use {v.name!r}; bounds "
                        f"may only use symbolic dimensions", a.location or loc)


# --------------------------------------------------------------------------- kernels


@dataclass(eq=False)
class KernelGraph:
    """The traced form of a kernel."""
    name: str
    params: tuple           # ir.Var (is_param), in first-appearance order
    inputs: tuple           # Tensor placeholders, argument order
    stages: tuple           # Stage, program order
    outputs: tuple          # Tensor, return order
    location: SourceLocation | None = None

    @property
    def temporaries(self) -> tuple:
        outs = {id(t) for t in self.outputs}
        return tuple(s.output for s in self.stages if id(s.output) not in outs)

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)


class Kernel:
    """A ``@tensor_expr`` function; traced lazily into a :class:`KernelGraph`."""

    def __init__(self, fn, name: str | None = None, inputs: dict | None = None):
        self.fn = fn
        self.name = _check_name(name or fn.__name__, "kernel")
        self._input_types = inputs
        self._graph: KernelGraph | None = None
        # numpy semantics of the kernel, when known (op-library kernels): ``polycomp run``
        # checks against it instead of interpreting the IR
        self.numpy_reference: Any = None
        self.location: SourceLocation | None
        try:
            self.location = SourceLocation(inspect.getsourcefile(fn) or "?",
                                           inspect.getsourcelines(fn)[1])
        except (OSError, TypeError):
            self.location = None
        self.__doc__ = fn.__doc__
        self.__name__ = self.name

    def __repr__(self):
        return f"<polycomp kernel {self.name}>"

    def polyhedral_model(self) -> DslModel:
        """The :class:`~polycomp.frontend.dsl_model.DslModel` the driver compiles (front
        ends other than the DSL, e.g. the C SCoP reader, provide the same method)."""
        from .dsl_model import build_model
        return build_model(self.graph)

    @property
    def graph(self) -> KernelGraph:
        if self._graph is None:
            self._graph = self._trace()
        return self._graph

    def _trace(self) -> KernelGraph:
        sig = inspect.signature(self.fn)
        types = dict(self._input_types or {})
        try:
            hints = inspect.get_annotations(self.fn, eval_str=True)
        except Exception:
            hints = getattr(self.fn, "__annotations__", {})
        inputs = []
        names = set()
        for p in sig.parameters.values():
            t = types.get(p.name, hints.get(p.name))
            if not isinstance(t, TensorType):
                raise DSLError(f"parameter {p.name!r} of kernel {self.name!r} needs a "
                               f"Tensor[(dims...), dtype] annotation", self.location)
            buf = ir.Buffer(_check_name(p.name, "tensor"), t.dtype, t.shape)
            names.add(p.name)
            inputs.append(Tensor(buf, None, self.location))
        trace = _Trace()
        trace.names |= names
        _Trace.active.append(trace)
        try:
            with deep_recursion():
                result = self.fn(*inputs)
        except PolycompError:
            raise
        except RecursionError:
            raise DSLError(f"kernel {self.name!r}: an expression nested more than "
                           f"{deep_recursion.LIMIT // 10} levels deep", self.location) from None
        except Exception as e:   # the user's own Python error (a typo, a bad call)
            raise UserCodeError(f"{type(e).__name__} in kernel {self.name!r}: {e}",
                                location_of_exception(e) or self.location) from e
        finally:
            _Trace.active.pop()
        outs = result if isinstance(result, (tuple, list)) else (result,)
        if not outs or not all(isinstance(o, Tensor) for o in outs):
            raise DSLError(f"kernel {self.name!r} must return the tensor(s) it computes",
                           self.location)
        for o in outs:
            if o.stage is None:
                raise DSLError(f"kernel {self.name!r} returns its input {o.name!r}; outputs "
                               f"must be computed", self.location)
        if len(set(id(o) for o in outs)) != len(outs):
            raise DSLError(f"kernel {self.name!r} returns the same tensor twice", self.location)
        stages = tuple(trace.stages)
        _check_reads(stages, inputs)
        params = _collect_params(inputs, stages, self.location)
        return KernelGraph(self.name, params, tuple(inputs), stages, tuple(outs), self.location)


def _check_reads(stages, inputs):
    known = {t.buffer for t in inputs}
    for s in stages:
        def fn(n, s=s):
            if isinstance(n, ir.Load) and n.buffer not in known:
                raise DSLError(f"compute {s.name!r} reads {n.buffer.name!r}, which is neither "
                               f"a kernel input nor an earlier stage of this kernel", s.location)
        ir.walk(s.body, fn)
        known.add(s.output.buffer)


def _collect_params(inputs, stages, location=None) -> tuple:
    seen: dict = {}

    def add(e):
        for v in ir.free_vars(e):
            if v.is_param:
                seen.setdefault(v, None)
    for t in inputs:
        for d in t.shape:
            add(d)
    for s in stages:
        for d in s.output.shape:
            add(d)
        for a in s.reduce_axes:
            add(a.lo)
            add(a.extent)
        add(s.body)
    by_name: dict = {}
    for v in seen:
        if v.name in by_name and by_name[v.name] is not v:
            raise UnknownSymbolError(f"two different symbols are both named {v.name!r} "
                                     f"(declare each symbol once with polycomp.sym)", location)
        by_name[v.name] = v
    return tuple(seen)


def tensor_expr(fn=None, *, name: str | None = None):
    """Decorator turning a DSL function into a :class:`Kernel`."""
    if fn is None:
        return lambda f: Kernel(f, name)
    return Kernel(fn, name)
