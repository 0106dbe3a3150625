"""polycomp's Halide-like IR: small immutable expression and statement nodes.

The same expression nodes serve the DSL (index lambdas build them through operator
overloading), the polyhedral model (index expressions are converted to isl affine
expressions) and the lowered loop IR that hardware passes rewrite and printers emit.

Expressions carry a ``dtype`` (see :mod:`polycomp.dtypes`).  Iterators and symbolic
dimensions are ``int64`` :class:`Var` nodes.  ``Load``/``Store`` take one index per
dimension of their :class:`Buffer` until :mod:`polycomp.lowering.flatten` rewrites them
to a single linear index (``Buffer.flat``).

Nodes compare by identity (``==`` is *not* overloaded; use :func:`structural_equal`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, TypeGuard

from . import dtypes as dt
from .errors import DTypeError, UnsupportedConstructError, user_location

# --------------------------------------------------------------------------- exprs


class Expr:
    """Base class of expressions.  Subclasses are frozen dataclasses with ``dtype``."""

    dtype: str

    # arithmetic builds IR (Python scalars are converted with the other side's dtype)
    def __add__(self, o): return binary("+", self, o)
    def __radd__(self, o): return binary("+", o, self)
    def __sub__(self, o): return binary("-", self, o)
    def __rsub__(self, o): return binary("-", o, self)
    def __mul__(self, o): return binary("*", self, o)
    def __rmul__(self, o): return binary("*", o, self)
    def __truediv__(self, o): return binary("/", self, o)
    def __rtruediv__(self, o): return binary("/", o, self)
    def __floordiv__(self, o): return binary("//", self, o)
    def __rfloordiv__(self, o): return binary("//", o, self)
    def __mod__(self, o): return binary("%", self, o)
    def __rmod__(self, o): return binary("%", o, self)
    def __neg__(self): return Unary("neg", self, self.dtype)
    def __lt__(self, o): return binary("<", self, o)
    def __le__(self, o): return binary("<=", self, o)
    def __gt__(self, o): return binary(">", self, o)
    def __ge__(self, o): return binary(">=", self, o)
    # & | ^ are logical on conditions and bitwise on integers (numpy's semantics)
    def __and__(self, o): return bitwise("&", self, o)
    def __rand__(self, o): return bitwise("&", o, self)
    def __or__(self, o): return bitwise("|", self, o)
    def __ror__(self, o): return bitwise("|", o, self)
    def __xor__(self, o): return bitwise("^", self, o)
    def __rxor__(self, o): return bitwise("^", o, self)
    def __invert__(self): return invert(self)
    def __pow__(self, o): return power(self, o)
    def __abs__(self): return call("abs", self)
    def __lshift__(self, o): return bitwise("<<", self, o)
    def __rshift__(self, o): return bitwise(">>", self, o)
    def __rlshift__(self, o): return bitwise("<<", o, self)
    def __rrshift__(self, o): return bitwise(">>", o, self)
    def __matmul__(self, o): return _unsupported("@", "matrix product of two scalar "
                                                 "expressions (use pc.sum over a reduce_axis, "
                                                 "or polycomp.frontend.ops.matmul)")
    def __rmatmul__(self, o): return self.__matmul__(o)
    def __round__(self, ndigits=None): return _unsupported("round()", "rounding")
    __hash__ = object.__hash__

    def __bool__(self):
        raise UnsupportedConstructError(
            "a polycomp expression has no truth value (Python if/and/or/not, chained "
            "comparisons); use select()/where() for conditions and &, |, ~ to combine them",
            user_location())

    def __iter__(self):
        raise UnsupportedConstructError("polycomp expressions are not iterable",
                                        user_location())

    def _not_a_number(self, *_):
        raise UnsupportedConstructError(
            "a polycomp expression is symbolic, not a Python number (math.*, int(), float(), "
            "range() need numbers); use the polycomp functions (polycomp.exp, ...) and "
            "compute()/reduce_axis() for loops", user_location())

    __float__ = __int__ = __index__ = __complex__ = _not_a_number

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # numpy scalars meeting an expression (np.float32(2) * x) build IR; other numpy
        # functions applied to expressions are an error naming the polycomp equivalent
        op = _NUMPY_BINARY.get(ufunc.__name__)
        if op is not None and method == "__call__" and not kwargs and len(inputs) == 2:
            return binary(op, *inputs)
        raise UnsupportedConstructError(
            f"numpy function np.{ufunc.__name__} cannot be applied to a polycomp expression; "
            f"use the polycomp function (polycomp.exp, polycomp.max, ...)", user_location())


@dataclass(frozen=True, eq=False)
class IntImm(Expr):
    value: int
    dtype: str = "int64"


@dataclass(frozen=True, eq=False)
class FloatImm(Expr):
    value: float
    dtype: str = "float32"


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """An iterator, a symbolic dimension (``is_param``) or a let-bound value."""
    name: str
    dtype: str = "int64"
    is_param: bool = False

    def __repr__(self):
        return self.name


ARITH_OPS = ("+", "-", "*", "/", "//", "%", "min", "max")
CMP_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGIC_OPS = ("&&", "||")
# integer-only operators with numpy's semantics: two's complement bitwise and/or/xor;
# a shift by a count outside [0, bits of the dtype) gives 0 (<<) or the sign (>>)
BITWISE_OPS = ("&", "|", "^", "<<", ">>")
_NUMPY_BINARY = {"add": "+", "subtract": "-", "multiply": "*", "true_divide": "/",
                 "floor_divide": "//", "remainder": "%", "maximum": "max", "minimum": "min",
                 "less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">="}


@dataclass(frozen=True, eq=False)
class Binary(Expr):
    """``a op b``.  ``//`` and ``%`` are floor division / floor modulo (Python's)."""
    op: str
    a: Expr
    b: Expr
    dtype: str


@dataclass(frozen=True, eq=False)
class Unary(Expr):
    """``neg`` or ``!``."""
    op: str
    a: Expr
    dtype: str


@dataclass(frozen=True, eq=False)
class Select(Expr):
    """``cond ? t : f``; only the chosen side is evaluated (so it may guard a load)."""
    cond: Expr
    t: Expr
    f: Expr
    dtype: str


@dataclass(frozen=True, eq=False)
class Cast(Expr):
    value: Expr
    dtype: str


@dataclass(frozen=True, eq=False)
class Call(Expr):
    """A pure math function (``exp``, ``log``, ...) or a target intrinsic."""
    name: str
    args: tuple
    dtype: str
    pure: bool = True


@dataclass(frozen=True, eq=False)
class FuncCall(Expr):
    """A call of another function of the same :class:`LoweredModule` (a dispatcher
    calling a version or the selector).  ``args`` are expressions (size parameters) and
    :class:`Buffer` s (passed by address), in the callee's parameter order; ``dtype`` is
    the callee's result type (``"void"``: none, the call is a statement)."""
    func: str
    args: tuple
    dtype: str = "void"


@dataclass(frozen=True, eq=False)
class Load(Expr):
    buffer: "Buffer"
    indices: tuple
    dtype: str
    lanes: int = 1


@dataclass(frozen=True, eq=False)
class Ramp(Expr):
    """The vector ``base, base+stride, ..., base+(lanes-1)*stride``."""
    base: Expr
    stride: Expr
    lanes: int
    dtype: str = "int64"


@dataclass(frozen=True, eq=False)
class Broadcast(Expr):
    value: Expr
    lanes: int
    dtype: str


MATH_FUNCS = ("exp", "log", "sqrt", "rsqrt", "tanh", "erf", "abs", "pow", "floor",
              "ceil", "sigmoid")


# --------------------------------------------------------------------------- buffers


@dataclass(frozen=True, eq=False)
class Buffer:
    """A named multi-dimensional array: a kernel argument, a temporary or a local tile.

    ``scope`` is ``global`` (kernel arguments, temporaries), ``shared``, ``local``
    (registers) or a target-specific level.  ``flat`` marks a buffer that has been
    linearised (one index) by the flatten pass; ``shape`` keeps the logical extents.
    """
    name: str
    dtype: str
    shape: tuple
    scope: str = "global"
    flat: bool = False

    def __repr__(self):
        return f"Buffer({self.name})"

    def __getitem__(self, idx):
        idx = idx if isinstance(idx, tuple) else (idx,)
        return Load(self, tuple(const(i) for i in idx), self.dtype)


# --------------------------------------------------------------------------- stmts


class Stmt:
    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False)
class Store(Stmt):
    buffer: Buffer
    indices: tuple
    value: Expr
    lanes: int = 1


FOR_KINDS = ("serial", "parallel", "vectorized", "unrolled", "gpu_block", "gpu_thread",
             "gpu_warp")


@dataclass(frozen=True, eq=False)
class For(Stmt):
    """``for var in [min, min + extent)``, unit stride.

    ``kind`` is one of :data:`FOR_KINDS`; ``annotations`` carries mark information
    (e.g. ``{"axis": "x"}`` for a GPU-mapped loop, ``{"unroll": 4}``).
    """
    var: Var
    min: Expr
    extent: Expr
    kind: str
    body: Stmt
    annotations: tuple = ()

    def annotation(self, key, default=None):
        for k, v in self.annotations:
            if k == key:
                return v
        return default


@dataclass(frozen=True, eq=False)
class IfThenElse(Stmt):
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(frozen=True, eq=False)
class Block(Stmt):
    stmts: tuple


@dataclass(frozen=True, eq=False)
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True, eq=False)
class Allocate(Stmt):
    """Storage for ``buffer`` (in its scope) live within ``body``."""
    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False)
class Evaluate(Stmt):
    value: Expr


@dataclass(frozen=True, eq=False)
class AttrStmt(Stmt):
    """A mark carried from the schedule tree (``key``), with a value, around ``body``."""
    key: str
    value: Any
    body: Stmt


@dataclass(frozen=True, eq=False)
class Return(Stmt):
    """Leave the function (of a :class:`LoweredModule`), giving ``value`` (None: a
    function without a result)."""
    value: Expr | None = None


# --------------------------------------------------------------------------- builders


def const(v, dtype: str | None = None) -> Expr:
    """Wrap a Python number (or pass an Expr through)."""
    if isinstance(v, Expr):
        return v
    if isinstance(v, bool):
        return IntImm(int(v), "bool")
    if isinstance(v, int):
        _check_int_fits(v, dtype or "int64")
        return IntImm(v, dtype or "int64")
    if isinstance(v, float):
        return FloatImm(v, dtype if dtype and dt.is_float(dtype) else "float32")
    try:
        import numpy as np
        if isinstance(v, np.integer):
            return IntImm(int(v), dtype or "int64")
        if isinstance(v, np.floating):
            return FloatImm(float(v), dtype or dt.canonical(v.dtype))
    except ImportError:  # pragma: no cover
        pass
    raise DTypeError(f"cannot use {v!r} of type {type(v).__name__} in a polycomp "
                     f"expression", user_location())


def _check_int_fits(v: int, dtype: str) -> None:
    """An integer constant must be representable in the dtype it takes (numpy 2 raises
    OverflowError for ``np.int8(1) + 1000``)."""
    import numpy as np
    if dtype not in dt.INTS:
        return
    info = np.iinfo(dt.to_numpy(dtype))
    if not info.min <= v <= info.max:
        raise DTypeError(f"the constant {v} does not fit {dtype} "
                         f"([{info.min}, {info.max}])", user_location())


def _weak_const(v, other: Expr) -> Expr:
    """A Python scalar takes the dtype of the expression it meets (numpy's weak scalars)."""
    if isinstance(v, Expr):
        return v
    od = other.dtype
    if isinstance(v, bool):
        return IntImm(int(v), "bool")
    if isinstance(v, int):
        if dt.is_float(od):
            return FloatImm(float(v), od)
        d = od if od != "bool" else "int64"
        _check_int_fits(v, d)
        return IntImm(v, d)
    if isinstance(v, float):
        return FloatImm(v, od if dt.is_float(od) else "float32")
    return const(v)


def binary(op: str, a, b) -> Expr:
    """Build ``a op b`` with dtype promotion; Python scalars are weakly typed."""
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        a = const(a)
    if not isinstance(a, Expr):
        a = _weak_const(a, b)
    if not isinstance(b, Expr):
        b = _weak_const(b, a)
    if op in CMP_OPS:
        return Binary(op, a, b, "bool")
    if op in LOGIC_OPS:
        if a.dtype != "bool" or b.dtype != "bool":
            raise DTypeError(f"operands of {op!r} must be conditions (bool), got "
                             f"{a.dtype} and {b.dtype}", user_location())
        return Binary(op, a, b, "bool")
    if op not in ARITH_OPS:
        raise DTypeError(f"unknown operator {op!r}", user_location())
    d = dt.promote(a.dtype, b.dtype)
    if d == "bool":
        d = "int64" if op not in ("min", "max") else "bool"
    if op == "/" and not dt.is_float(d):
        raise DTypeError("'/' is true division and needs a float operand; use '//' for "
                         "floor division of integers", user_location())
    return Binary(op, a, b, d)


def _unsupported(op: str, what: str):
    raise UnsupportedConstructError(f"{op} ({what}) is not supported in a polycomp "
                                    f"expression", user_location())


def invert(x: Expr) -> Expr:
    """``~x``: logical not of a condition, bitwise not (``-1 - x``, as numpy: it never
    overflows) of an integer; an error for floats."""
    if x.dtype == "bool":
        return Unary("!", x, "bool")
    if dt.is_float(x.dtype):
        raise DTypeError(f"~ needs a condition or an integer, got {x.dtype}", user_location())
    return binary("-", -1, x)


_LOGICAL = {"&": "&&", "|": "||", "^": "!="}


def bitwise(op: str, a, b) -> Expr:
    """``a op b`` for ``op`` in :data:`BITWISE_OPS`, as numpy computes it: on two
    conditions ``& | ^`` are logical (and, or, xor); otherwise both operands are
    integers (a bool one counts as 0/1), promoted to a common dtype that the result
    has, and ``& | ^`` are bitwise on their two's complement; ``a << k`` and ``a >> k``
    shift left (wrapping) and arithmetically right, and a count ``k`` outside
    ``[0, bits)`` gives 0, or for ``>>`` of a negative ``a`` gives -1 (numpy's
    ``left_shift``/``right_shift``).  A float operand is a :class:`DTypeError`."""
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        a = const(a)
    if not isinstance(a, Expr):
        a = _weak_const(a, b)
    if not isinstance(b, Expr):
        b = _weak_const(b, a)
    for x in (a, b):
        if dt.is_float(x.dtype):
            raise DTypeError(f"{op} needs integer or bool operands (it is bitwise on "
                             f"integers, logical on conditions), got {a.dtype} and "
                             f"{b.dtype}", user_location())
    if a.dtype == "bool" and b.dtype == "bool":
        if op in _LOGICAL:
            return Binary(_LOGICAL[op], a, b, "bool")
        d = "int64"  # numpy shifts bools as integers
    else:
        d = dt.promote(a.dtype, b.dtype)
        if d == "bool":
            d = "int64"
    return Binary(op, a, b, d)


def power(base, exponent) -> Expr:
    """``base ** c`` for a constant ``c`` (small integer powers become products)."""
    base = const(base)
    if isinstance(exponent, Expr):
        if isinstance(exponent, (IntImm, FloatImm)):
            exponent = exponent.value
        else:
            raise DTypeError("pow needs a constant exponent", user_location())
    if float(exponent).is_integer() and 1 <= exponent <= 4:
        r = base
        for _ in range(int(exponent) - 1):
            r = r * base
        return r
    if exponent in (0.5, -0.5) and not dt.is_float(base.dtype):
        raise DTypeError(f"** {exponent} needs a float base, got {base.dtype}; cast() it "
                         f"first", user_location())
    if exponent == 0.5:
        return Call("sqrt", (base,), base.dtype)
    if exponent == -0.5:
        return Call("rsqrt", (base,), base.dtype)
    if not dt.is_float(base.dtype):
        raise DTypeError("pow with a non-integer or large exponent needs a float base",
                         user_location())
    return Call("pow", (base, FloatImm(float(exponent), base.dtype)), base.dtype)


def min_(a, b) -> Expr:
    return binary("min", a, b)


def max_(a, b) -> Expr:
    return binary("max", a, b)


def select(cond, t, f) -> Expr:
    cond = const(cond)
    if cond.dtype != "bool":
        raise DTypeError(f"select() needs a bool condition, got {cond.dtype}", user_location())
    if not isinstance(t, Expr) and not isinstance(f, Expr):
        t, f = const(t), const(f)
    t = _weak_const(t, f) if not isinstance(t, Expr) else t
    f = _weak_const(f, t) if not isinstance(f, Expr) else f
    d = dt.promote(t.dtype, f.dtype)
    if t.dtype != d:
        t = Cast(t, d)
    if f.dtype != d:
        f = Cast(f, d)
    return Select(cond, t, f, d)


def cast(value, dtype) -> Expr:
    dtype = dt.canonical(dtype)
    value = const(value)
    if value.dtype == dtype:
        return value
    return Cast(value, dtype)


def call(name: str, *args, dtype: str | None = None) -> Expr:
    args = tuple(const(a) for a in args)
    d = dtype or args[0].dtype
    if name in ("exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid") and not dt.is_float(d):
        raise DTypeError(f"{name}() needs a float argument, got {d}", user_location())
    return Call(name, args, d)


BARRIER = "__syncthreads"


def barrier() -> Stmt:
    """A block-wide barrier (``__syncthreads()``)."""
    return Evaluate(Call(BARRIER, (), "int32", pure=False))


def is_barrier(s) -> bool:
    return isinstance(s, Evaluate) and isinstance(s.value, Call) and s.value.name == BARRIER


def is_const(e, value=None) -> TypeGuard[IntImm | FloatImm]:
    if isinstance(e, (IntImm, FloatImm)):
        return value is None or e.value == value
    return False


# --------------------------------------------------------------------------- traversal


def children(node) -> tuple:
    """The direct sub-nodes (Expr/Stmt) of ``node`` in a fixed order."""
    get = _CHILDREN.get(type(node))
    if get is not None:
        return get(node)
    return _children_of_subclass(node)


def _if_children(node) -> tuple:
    return (node.cond, node.then) + ((node.orelse,) if node.orelse is not None else ())


# the children of the node classes themselves (a dispatch on the exact class; nodes of
# other classes, such as subclasses, go through the isinstance tests below)
_CHILDREN: dict[type, Callable[[Any], tuple]] = {
    Binary: lambda n: (n.a, n.b),
    Unary: lambda n: (n.a,),
    Select: lambda n: (n.cond, n.t, n.f),
    Cast: lambda n: (n.value,),
    Call: lambda n: n.args,
    Load: lambda n: n.indices,
    Ramp: lambda n: (n.base, n.stride),
    Broadcast: lambda n: (n.value,),
    Store: lambda n: n.indices + (n.value,),
    For: lambda n: (n.min, n.extent, n.body),
    IfThenElse: _if_children,
    Block: lambda n: n.stmts,
    LetStmt: lambda n: (n.value, n.body),
    Allocate: lambda n: (n.body,),
    Evaluate: lambda n: (n.value,),
    AttrStmt: lambda n: (n.body,),
    FuncCall: lambda n: tuple(a for a in n.args if isinstance(a, Expr)),
    Return: lambda n: (n.value,) if n.value is not None else (),
    IntImm: lambda n: (),
    FloatImm: lambda n: (),
    Var: lambda n: (),
}


def _children_of_subclass(node) -> tuple:
    if isinstance(node, Binary):
        return (node.a, node.b)
    if isinstance(node, Unary):
        return (node.a,)
    if isinstance(node, Select):
        return (node.cond, node.t, node.f)
    if isinstance(node, Cast):
        return (node.value,)
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Load):
        return node.indices
    if isinstance(node, Ramp):
        return (node.base, node.stride)
    if isinstance(node, Broadcast):
        return (node.value,)
    if isinstance(node, Store):
        return node.indices + (node.value,)
    if isinstance(node, For):
        return (node.min, node.extent, node.body)
    if isinstance(node, IfThenElse):
        return (node.cond, node.then) + ((node.orelse,) if node.orelse is not None else ())
    if isinstance(node, Block):
        return node.stmts
    if isinstance(node, LetStmt):
        return (node.value, node.body)
    if isinstance(node, Allocate):
        return (node.body,)
    if isinstance(node, Evaluate):
        return (node.value,)
    if isinstance(node, AttrStmt):
        return (node.body,)
    if isinstance(node, FuncCall):
        return tuple(a for a in node.args if isinstance(a, Expr))
    if isinstance(node, Return):
        return (node.value,) if node.value is not None else ()
    return ()


def walk(node, fn: Callable[[Any], None]) -> None:
    """Call ``fn`` on ``node`` and every descendant, pre-order."""
    stack = [node]
    pop, extend, get = stack.pop, stack.extend, _CHILDREN.get
    while stack:
        n = pop()
        fn(n)
        g = get(type(n))      # children(n), inlined: this loop visits every node
        ch = g(n) if g is not None else _children_of_subclass(n)
        if ch:
            extend(reversed(ch))


_UNKNOWN = object()
# (Mutator subclass, node class) -> name of the visit method (None: generic); the
# visit methods are class attributes, so the lookup along the node's MRO is done once
_VISIT_METHOD: dict[tuple[type, type], Any] = {}


class Mutator:
    """Rebuilds a tree bottom-up; override ``visit_<Class>`` to rewrite a node kind.

    The default for every node mutates its children and rebuilds the node only if a
    child changed (so unchanged subtrees keep their identity).
    """

    def visit(self, node):
        if node is None:
            return None
        key = (type(self), type(node))
        name = _VISIT_METHOD.get(key, _UNKNOWN)
        if name is _UNKNOWN:
            name = _VISIT_METHOD[key] = self._visit_method(type(node))
        if name is None:
            return self.generic(node)
        return getattr(self, name)(node)

    @classmethod
    def _visit_method(cls, node_type: type) -> str | None:
        """The name of the ``visit_<Class>`` method of ``cls`` for nodes of
        ``node_type`` (the first of its classes, up to Expr/Stmt), or None."""
        for c in node_type.__mro__:
            name = "visit_" + c.__name__
            if getattr(cls, name, None) is not None:
                return name
            if c is Expr or c is Stmt:
                break
        return None

    def generic(self, node):
        """Mutate ``node``'s children; rebuild it only if one changed.  (A dispatch on
        the exact class, :data:`_GENERIC`: this runs for almost every node of every IR
        pass, and a chain of ``isinstance`` tests cost a leaf ~20 calls.)"""
        f = _GENERIC.get(type(node))
        if f is None:
            f = _GENERIC[type(node)] = _generic_for(type(node))
        return f(self, node)


def _gen_binary(self, node):
    a, b = self.visit(node.a), self.visit(node.b)
    if a is node.a and b is node.b:
        return node
    return rebuild_binary(node.op, a, b, node.dtype)


def _gen_unary(self, node):
    a = self.visit(node.a)
    return node if a is node.a else Unary(node.op, a, node.dtype)


def _gen_select(self, node):
    c, t, f = self.visit(node.cond), self.visit(node.t), self.visit(node.f)
    if c is node.cond and t is node.t and f is node.f:
        return node
    return Select(c, t, f, node.dtype)


def _gen_cast(self, node):
    v = self.visit(node.value)
    return node if v is node.value else Cast(v, node.dtype)


def _gen_call(self, node):
    args = tuple(self.visit(a) for a in node.args)
    if all(x is y for x, y in zip(args, node.args)):
        return node
    return replace(node, args=args)


def _gen_load(self, node):
    idx = tuple(self.visit(i) for i in node.indices)
    if all(x is y for x, y in zip(idx, node.indices)):
        return node
    return replace(node, indices=idx)


def _gen_ramp(self, node):
    b, s = self.visit(node.base), self.visit(node.stride)
    if b is node.base and s is node.stride:
        return node
    return replace(node, base=b, stride=s)


def _gen_broadcast(self, node):
    v = self.visit(node.value)
    return node if v is node.value else replace(node, value=v)


def _gen_store(self, node):
    idx = tuple(self.visit(i) for i in node.indices)
    v = self.visit(node.value)
    same = v is node.value and all(x is y for x, y in zip(idx, node.indices))
    return node if same else replace(node, indices=idx, value=v)


def _gen_for(self, node):
    mn, ext, body = self.visit(node.min), self.visit(node.extent), self.visit(node.body)
    same = mn is node.min and ext is node.extent and body is node.body
    return node if same else replace(node, min=mn, extent=ext, body=body)


def _gen_if(self, node):
    c, t = self.visit(node.cond), self.visit(node.then)
    e = self.visit(node.orelse)
    same = c is node.cond and t is node.then and e is node.orelse
    return node if same else IfThenElse(c, t, e)


def _gen_block(self, node):
    stmts = tuple(self.visit(s) for s in node.stmts)
    return node if all(x is y for x, y in zip(stmts, node.stmts)) else Block(stmts)


def _gen_let(self, node):
    v, b = self.visit(node.value), self.visit(node.body)
    return node if (v is node.value and b is node.body) else LetStmt(node.var, v, b)


def _gen_allocate(self, node):
    b = self.visit(node.body)
    return node if b is node.body else Allocate(node.buffer, b)


def _gen_evaluate(self, node):
    v = self.visit(node.value)
    return node if v is node.value else Evaluate(v)


def _gen_attr(self, node):
    b = self.visit(node.body)
    return node if b is node.body else AttrStmt(node.key, node.value, b)


def _gen_funccall(self, node):
    args = tuple(self.visit(a) if isinstance(a, Expr) else a for a in node.args)
    if all(x is y for x, y in zip(args, node.args)):
        return node
    return replace(node, args=args)


def _gen_return(self, node):
    v = self.visit(node.value)
    return node if v is node.value else Return(v)


def _gen_leaf(self, node):
    return node


#: :meth:`Mutator.generic` of each node class, in the order a node is matched: a
#: subclass takes the first class of this list it derives from (see _generic_for)
_GENERIC_ORDER: tuple[tuple[type, Callable[[Any, Any], Any]], ...] = (
    (Binary, _gen_binary), (Unary, _gen_unary), (Select, _gen_select), (Cast, _gen_cast),
    (Call, _gen_call), (Load, _gen_load), (Ramp, _gen_ramp), (Broadcast, _gen_broadcast),
    (Store, _gen_store), (For, _gen_for), (IfThenElse, _gen_if), (Block, _gen_block),
    (LetStmt, _gen_let), (Allocate, _gen_allocate), (Evaluate, _gen_evaluate),
    (AttrStmt, _gen_attr), (FuncCall, _gen_funccall), (Return, _gen_return),
)


def _generic_for(cls: type) -> Callable[[Any, Any], Any]:
    for base, f in _GENERIC_ORDER:
        if issubclass(cls, base):
            return f
    return _gen_leaf


# node class -> its generic mutation (a dispatch table filled per class on first use,
# like _VISIT_METHOD; it depends only on the class hierarchy)
_GENERIC: dict[type, Callable[[Any, Any], Any]] = {}


def rebuild_binary(op, a, b, dtype):
    return Binary(op, a, b, dtype)


class _Substituter(Mutator):
    def __init__(self, mapping):
        self.mapping = mapping

    def visit_Var(self, v):
        return self.mapping.get(v, v)


def substitute(node, mapping: dict) -> Any:
    """Replace Vars (by identity) according to ``mapping``."""
    if not mapping:
        return node
    return _Substituter(mapping).visit(node)


def free_vars(node) -> list:
    """Vars read by ``node`` (in first-use order), excluding loop/let-bound ones."""
    seen: dict = {}
    bound: set = set()

    def visit(n):
        if isinstance(n, Var):
            if n not in bound:
                seen.setdefault(n, None)
        elif isinstance(n, For):
            visit(n.min); visit(n.extent)
            bound.add(n.var); visit(n.body)
        elif isinstance(n, LetStmt):
            visit(n.value); bound.add(n.var); visit(n.body)
        else:
            for c in children(n):
                visit(c)
    visit(node)
    return list(seen)


#: The intrinsic that carries a data-dependent (gather) index: ``gather_index(v, n)`` is
#: ``v`` when ``0 <= v < n``; otherwise the access is out of range, which the interpreter
#: and the simulators raise as :class:`~polycomp.errors.IndexOutOfRangeError` and the
#: generated code records in a flag that the runtime raises after the call (the load
#: itself reads element 0 of that dimension, never outside the array).
GATHER_INDEX = "gather_index"


def gather_index(value: Expr, extent: Expr) -> Expr:
    """The checked int64 index ``gather_index(int64(value), extent)`` (see
    :data:`GATHER_INDEX`)."""
    return Call(GATHER_INDEX, (cast(value, "int64"), cast(extent, "int64")), "int64")


def is_gather_index(e) -> bool:
    """``e`` is a :func:`gather_index` call."""
    return isinstance(e, Call) and e.name == GATHER_INDEX


def gathered_buffers(node) -> list[str]:
    """Names of the buffers ``node`` loads with a :func:`gather_index` in an index (for
    the run-time error message), in first-use order."""
    seen: dict[str, None] = {}

    def fn(n):
        if isinstance(n, Load):
            found: list = []
            for i in n.indices:
                walk(i, lambda m: found.append(m) if is_gather_index(m) else None)
            if found:
                seen.setdefault(n.buffer.name, None)
    walk(node, fn)
    return list(seen)


def gathered_into(func) -> str:
    """`` into A, B`` naming the arrays ``func`` (a LoweredFunc) gathers from, or ``""``
    (a dispatcher that only calls its versions): for the run-time error message."""
    names = gathered_buffers(func.body)
    return f" into {', '.join(names)}" if names else ""


def reads_data(node) -> bool:
    """``node`` loads a tensor element somewhere (a data-dependent expression)."""
    found = []

    def fn(n):
        if isinstance(n, Load):
            found.append(n)
    walk(node, fn)
    return bool(found)


def buffers_of(node) -> list:
    """Buffers loaded or stored in ``node`` (first-use order)."""
    seen: dict = {}

    def fn(n):
        if isinstance(n, (Load, Store)):
            seen.setdefault(n.buffer, None)
        elif isinstance(n, Allocate):
            seen.setdefault(n.buffer, None)
    walk(node, fn)
    return list(seen)


def seq(*stmts) -> Stmt:
    """A Block of the non-None statements, flattening nested Blocks."""
    out: list = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Block):
            out.extend(s.stmts)
        else:
            out.append(s)
    if len(out) == 1:
        return out[0]
    return Block(tuple(out))


def structural_equal(a, b) -> bool:
    """Structural equality of two IR trees (Vars and Buffers compare by identity)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (IntImm, FloatImm)):
        return a.value == b.value and a.dtype == b.dtype
    if isinstance(a, (Var, Buffer)):
        return False
    for f in getattr(a, "__dataclass_fields__", {}):
        x, y = getattr(a, f), getattr(b, f)
        if isinstance(x, (Expr, Stmt)) or isinstance(y, (Expr, Stmt)):
            if not structural_equal(x, y):
                return False
        elif isinstance(x, tuple) and isinstance(y, tuple):
            if len(x) != len(y) or not all(
                    structural_equal(p, q) if isinstance(p, (Expr, Stmt)) else p == q
                    for p, q in zip(x, y)):
                return False
        elif isinstance(x, Buffer) or isinstance(y, Buffer):
            if x is not y:
                return False
        elif x != y:
            return False
    return True


def shape_product(shape: Iterable) -> Expr:
    r: Expr = IntImm(1)
    for s in shape:
        r = const(s) if is_const(r, 1) else r * const(s)
    return r


@dataclass(frozen=True)
class CodegenCounts:
    """What the CPU code-generation passes did to a function (tests and benchmarks read
    these): vector loops made, micro-kernel tiles placed, loops given prefetches
    (None: the pass did not run)."""
    vectorized_loops: int | None = None
    microkernels: int | None = None
    prefetched_loops: int | None = None
    #: packings filled by their first row tile's pass (no copy, hw/cpu/pack.py ``fill``)
    filled_packs: int | None = None
    #: micro-kernel tiles that fill a packed panel in their ``k`` loop
    filling_tiles: int | None = None


@dataclass(eq=False)
class LoweredFunc:
    """A lowered kernel: symbolic-size parameters, argument buffers and a body.

    ``inputs`` are read-only, ``outputs`` are written; temporaries are ``Allocate``d in
    ``body``.  ``inout`` names the outputs whose initial contents the caller gives (C
    loop nests that update an array); ``counts`` records what code generation did.
    """
    name: str
    params: tuple
    inputs: tuple
    outputs: tuple
    body: Stmt
    inout: tuple[str, ...] = ()
    counts: CodegenCounts = field(default_factory=CodegenCounts)

    @property
    def args(self) -> tuple:
        return self.inputs + self.outputs

    def with_body(self, body: Stmt) -> "LoweredFunc":
        return replace(self, body=body)

    def counted(self, **counts: int) -> "LoweredFunc":
        """A copy whose :class:`CodegenCounts` has these fields set."""
        return replace(self, counts=replace(self.counts, **counts))


# --------------------------------------------------------------------------- modules

#: roles of a :class:`ModuleFunction`
VERSION = "version"        # a compiled kernel (one configuration), printed as the backend
#                            prints a kernel (C: a function; CUDA: its kernels and launcher)
SELECTOR = "selector"      # host code: returns the index of the version to run
DISPATCH = "dispatch"      # host code with a kernel entry point's signature: calls the
#                            selected version
MODULE_ROLES = (VERSION, SELECTOR, DISPATCH)


@dataclass(frozen=True, eq=False)
class ModuleFunction:
    """One function of a :class:`LoweredModule`: ``func`` in a ``role`` (one of
    :data:`MODULE_ROLES`).  ``result`` is the dtype its ``Return`` gives (``"void"``:
    none); ``exported``: visible outside the module (C: not ``static``); ``version``:
    for a ``version``, its index in the list of compiled kernels the module was built
    from; ``comment``: one line the printer puts above it."""
    func: LoweredFunc
    role: str
    result: str = "void"
    exported: bool = True
    version: int = -1
    comment: str = ""

    def __post_init__(self):
        if self.role not in MODULE_ROLES:
            raise ValueError(f"module function {self.func.name}: role {self.role!r} is not "
                             f"one of {MODULE_ROLES}")


@dataclass(frozen=True, eq=False)
class LoweredModule:
    """Several functions printed as ONE translation unit by a backend's printer: the
    versions of a multi-version kernel, its selector and its dispatchers
    (``Backend.multiversion_module``).  Functions call each other with
    :class:`FuncCall`; ``name`` is the kernel's entry point."""
    name: str
    functions: tuple[ModuleFunction, ...]
    comment: str = ""

    def of_role(self, role: str) -> tuple[ModuleFunction, ...]:
        return tuple(f for f in self.functions if f.role == role)

    def function(self, name: str) -> ModuleFunction:
        for f in self.functions:
            if f.func.name == name:
                return f
        raise KeyError(f"module {self.name} has no function {name}")

    @property
    def selector(self) -> LoweredFunc:
        (sel,) = self.of_role(SELECTOR)
        return sel.func
