"""Shared printer for C-family targets (C99 and CUDA C++).

Prints flattened IR (see :mod:`polycomp.lowering.flatten`).  Values of dtype
float16/bfloat16 are computed as ``float`` and converted on load and store (the
dtypes module's semantics); int8/int32 arithmetic is carried out in ``int64_t`` and
wrapped to its dtype after every operation (numpy's and the interpreter's semantics,
without C's undefined signed overflow); integer index arithmetic is ``int64_t``; ``//`` and ``%``
print as the floor-division helpers from :data:`C_PRELUDE` unless both operands are
provably non-negative constants or the divisor is a positive constant and the
dividend is known non-negative.
"""
from __future__ import annotations

import re
from dataclasses import replace

from polycomp import dtypes as dt
from polycomp import ir

C_PRELUDE = r"""
PC_INLINE int64_t pc_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
PC_INLINE int64_t pc_floormod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
PC_INLINE int64_t pc_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
PC_INLINE int64_t pc_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
PC_INLINE float pc_min_f32(float a, float b) { return a < b ? a : b; }
PC_INLINE float pc_max_f32(float a, float b) { return a > b ? a : b; }
PC_INLINE double pc_min_f64(double a, double b) { return a < b ? a : b; }
PC_INLINE double pc_max_f64(double a, double b) { return a > b ? a : b; }
"""

_MATH_F32 = {"exp": "expf", "log": "logf", "sqrt": "sqrtf", "tanh": "tanhf", "erf": "erff",
             "abs": "fabsf", "pow": "powf", "floor": "floorf", "ceil": "ceilf"}
_MATH_F64 = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf",
             "abs": "fabs", "pow": "pow", "floor": "floor", "ceil": "ceil"}


_NARROW_INTS = ("int8", "int32")


def _suffix(dtype: str) -> str:
    d = dt.compute_dtype(dtype)
    if d == "float64":
        return "f64"
    if dt.is_float(d):
        return "f32"
    return "i64"


class CLikePrinter:
    """Prints IR as C; subclasses override the ``*_type``/``for_``/``allocate`` hooks."""

    indent_unit = "  "
    types = dt.C_TYPES

    def __init__(self):
        self.lines: list[str] = []
        self.level = 1
        self.nonneg: set = set()

    # --------------------------------------------------------------- types
    def value_type(self, dtype: str) -> str:
        """The C type arithmetic on ``dtype`` values uses."""
        return self.types[dt.compute_dtype(dtype)] if dtype not in ("int8", "int32", "bool") \
            else self.types["int64"] if dtype != "bool" else "bool"

    def storage_type(self, dtype: str) -> str:
        return self.types[dtype]

    def float_literal(self, v: float, dtype: str) -> str:
        import math
        if math.isinf(v):
            inf = "INFINITY" if dt.compute_dtype(dtype) != "float64" else "((double)INFINITY)"
            return inf if v > 0 else f"(-{inf})"
        if math.isnan(v):
            return "NAN"
        s = repr(float(v))
        if "e" not in s and "." not in s:
            s += ".0"
        return s if dt.compute_dtype(dtype) == "float64" else s + "f"

    def load_value(self, buf: ir.Buffer, index: str) -> str:
        """A load of one element, converted to its compute type."""
        ref = f"{buf.name}[{index}]"
        if buf.dtype == "float16":
            return f"((float){ref})"
        if buf.dtype == "bfloat16":
            return f"pc_bf16_to_f32({ref})"
        return ref

    def store_value(self, buf: ir.Buffer, value: str, vdtype: str) -> str:
        if buf.dtype == "float16":
            return f"({self.storage_type('float16')})({value})"
        if buf.dtype == "bfloat16":
            return f"pc_f32_to_bf16({value})"
        return value

    def cast(self, e: ir.Cast) -> str:
        v = self.expr(e.value)
        if e.dtype == "float16":
            return f"((float)({self.storage_type('float16')})({v}))"
        if e.dtype == "bfloat16":
            return f"pc_bf16_to_f32(pc_f32_to_bf16({v}))"
        if e.dtype == "bool":
            return f"(({v}) != 0)"
        if e.dtype in ("int8", "int32") and dt.is_float(e.value.dtype):
            return f"((int64_t)({self.types[e.dtype]})({v}))"
        if e.dtype in ("int8", "int32"):
            return f"((int64_t)({self.types[e.dtype]})({v}))"
        return f"(({self.value_type(e.dtype)})({v}))"

    def math_call(self, name: str, args: list[str], dtype: str) -> str:
        d = dt.compute_dtype(dtype)
        if not dt.is_float(d):
            if name == "abs":
                return f"llabs({args[0]})"
            raise NotImplementedError(f"integer {name}")
        table = _MATH_F64 if d == "float64" else _MATH_F32
        one = "1.0" if d == "float64" else "1.0f"
        if name == "rsqrt":
            return f"({one} / {table['sqrt']}({args[0]}))"
        if name == "sigmoid":
            return f"({one} / ({one} + {table['exp']}(-({args[0]}))))"
        return f"{table[name]}({', '.join(args)})"

    def intrinsic(self, e: ir.Call) -> str:
        """Target intrinsics (non-math calls); subclasses extend."""
        args = ", ".join(self.expr(a) for a in e.args)
        return f"{e.name}({args})"

    # --------------------------------------------------------------- exprs
    def expr(self, e) -> str:
        if isinstance(e, ir.IntImm):
            if e.dtype == "bool":
                return "true" if e.value else "false"
            v = e.value
            if abs(v) >= 2 ** 31:
                return f"INT64_C({v})"
            return str(v) if v >= 0 else f"({v})"
        if isinstance(e, ir.FloatImm):
            return self.float_literal(e.value, e.dtype)
        if isinstance(e, ir.Var):
            return e.name
        if isinstance(e, ir.Binary):
            return self.binary(e)
        if isinstance(e, ir.Unary):
            if e.op == "neg" and e.dtype in _NARROW_INTS:
                return f"(({self.types[e.dtype]})(-(int64_t)({self.expr(e.a)})))"
            return f"(-{self.expr(e.a)})" if e.op == "neg" else f"(!{self.expr(e.a)})"
        if isinstance(e, ir.Select):
            return f"(({self.expr(e.cond)}) ? ({self.expr(e.t)}) : ({self.expr(e.f)}))"
        if isinstance(e, ir.Cast):
            return self.cast(e)
        if isinstance(e, ir.Call):
            if e.name in ir.MATH_FUNCS or e.name == "rsqrt":
                return self.math_call(e.name, [self.expr(a) for a in e.args], e.dtype)
            return self.intrinsic(e)
        if isinstance(e, ir.Load):
            return self.load_value(e.buffer, self.expr(e.indices[0]))
        raise NotImplementedError(f"{type(self).__name__} cannot print {type(e).__name__}")

    def binary(self, e: ir.Binary) -> str:
        if e.dtype in _NARROW_INTS and e.op in ("+", "-", "*", "//", "%"):
            return self.narrow_int_binary(e)
        a, b = self.expr(e.a), self.expr(e.b)
        if e.op in ("min", "max"):
            return f"pc_{e.op}_{_suffix(e.dtype)}({a}, {b})"
        if e.op == "//":
            if isinstance(e.b, ir.IntImm) and e.b.value > 0 and _nonneg(e.a, self.nonneg):
                return f"({a} / {b})"
            return f"pc_floordiv({a}, {b})"
        if e.op == "%":
            if isinstance(e.b, ir.IntImm) and e.b.value > 0 and _nonneg(e.a, self.nonneg):
                return f"({a} % {b})"
            return f"pc_floormod({a}, {b})"
        return f"({a} {e.op} {b})"

    def narrow_int_binary(self, e: ir.Binary) -> str:
        """int8/int32 ``+ - * // %``: computed in int64 (no C overflow UB, no int
        promotion surprises) and wrapped to the dtype, as numpy and the interpreter do."""
        a, b = self.expr(e.a), self.expr(e.b)
        if e.op in ("//", "%"):
            inner = self.binary(ir.Binary(e.op, e.a, e.b, "int64"))
        else:
            inner = f"(int64_t)({a}) {e.op} (int64_t)({b})"
        return f"(({self.types[e.dtype]})({inner}))"

    # --------------------------------------------------------------- stmts
    def emit(self, line: str) -> None:
        self.lines.append(self.indent_unit * self.level + line)

    def stmt(self, s) -> None:
        if s is None:
            return
        if isinstance(s, ir.Block):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, ir.Store):
            v = self.store_value(s.buffer, self.expr(s.value), s.value.dtype)
            self.emit(f"{s.buffer.name}[{self.expr(s.indices[0])}] = {v};")
        elif isinstance(s, ir.For):
            self.for_(s)
        elif isinstance(s, ir.IfThenElse):
            self.emit(f"if ({self.expr(s.cond)}) {{")
            self.block(s.then)
            if s.orelse is not None:
                self.emit("} else {")
                self.block(s.orelse)
            self.emit("}")
        elif isinstance(s, ir.LetStmt):
            self.emit("{")
            self.level += 1
            if _nonneg(s.value, self.nonneg):
                self.nonneg.add(s.var)
            self.emit(f"const {self.value_type(s.var.dtype)} {s.var.name} = {self.expr(s.value)};")
            self.stmt(s.body)
            self.level -= 1
            self.emit("}")
        elif isinstance(s, ir.Allocate):
            self.allocate(s)
        elif isinstance(s, ir.Evaluate):
            self.emit(f"{self.expr(s.value)};")
        elif isinstance(s, ir.AttrStmt):
            self.attr(s)
        else:
            raise NotImplementedError(f"{type(self).__name__} cannot print {type(s).__name__}")

    def block(self, s) -> None:
        self.level += 1
        self.stmt(s)
        self.level -= 1

    def for_(self, s: ir.For) -> None:
        v = s.var.name
        if _nonneg(s.min, self.nonneg):
            self.nonneg.add(s.var)
        lo, ext = self.expr(s.min), self.expr(s.extent)
        hi = ext if ir.is_const(s.min, 0) else f"{lo} + {ext}"
        self.emit(f"for (int64_t {v} = {lo}; {v} < {hi}; ++{v}) {{")
        self.block(s.body)
        self.emit("}")

    def attr(self, s: ir.AttrStmt) -> None:
        self.emit(f"// {s.key}{': ' + str(s.value) if s.value else ''}")
        self.stmt(s.body)

    def allocate(self, s: ir.Allocate) -> None:
        raise NotImplementedError


def _nonneg(e, known: set) -> bool:
    """A cheap syntactic test: built from non-negative constants, symbols, variables in
    ``known`` (loops starting at a non-negative value) and ``+ * // % min max``."""
    if isinstance(e, ir.IntImm):
        return e.value >= 0
    if isinstance(e, ir.Var):
        return e.is_param or e in known
    if isinstance(e, ir.Binary) and e.op in ("+", "*", "//", "%", "min", "max"):
        return _nonneg(e.a, known) and _nonneg(e.b, known)
    return False


# --------------------------------------------------------------------------- identifiers

#: Identifiers the generated C/CUDA uses itself (keywords, types, the math and runtime
#: functions the printers call, CUDA built-ins, locals of the generated host code).
C_RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef
union unsigned void volatile while bool true false _Bool _Float16 half size_t int8_t int16_t
int32_t int64_t uint8_t uint16_t uint32_t uint64_t INT64_C INFINITY NAN NULL
exp expf log logf sqrt sqrtf rsqrt rsqrtf tanh tanhf erf erff fabs fabsf abs llabs pow powf
floor floorf ceil ceilf min max fmin fmax fminf fmaxf malloc free aligned_alloc calloc
memcpy memset main
blockIdx threadIdx blockDim gridDim warpSize dim3 __syncthreads __half __nv_bfloat16
__half2float __float2half __bfloat162float __float2bfloat16 cudaError_t cudaSuccess
cudaMalloc cudaFree cudaGetLastError cudaDeviceSynchronize err cfg
asm class delete new namespace template this typename virtual operator private public
protected friend using try catch throw nullptr constexpr
""".split())

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _is_safe(name: str, reserved) -> bool:
    return (bool(_IDENT.match(name)) and name not in reserved and not name.startswith("pc_")
            and not name.startswith("__") and not name.startswith("_Z"))


class _Rename(ir.Mutator):
    def __init__(self, bufs: dict, vars_: dict):
        self.bufs, self.vars = bufs, vars_
        self.buf_cache: dict = {}
        self.var_cache: dict = {}

    def var(self, v: ir.Var) -> ir.Var:
        new = self.vars.get(v.name, v.name)
        if new == v.name:
            return v
        nv = self.var_cache.get(v)
        if nv is None:
            nv = self.var_cache[v] = replace(v, name=new)
        return nv

    def buf(self, b: ir.Buffer) -> ir.Buffer:
        nb = self.buf_cache.get(b)
        if nb is None:
            shape = tuple(self.visit(d) for d in b.shape)
            nb = replace(b, name=self.bufs.get(b.name, b.name), shape=shape)
            if nb.name == b.name and all(x is y for x, y in zip(shape, b.shape)):
                nb = b
            self.buf_cache[b] = nb
        return nb

    def visit_Var(self, v):
        return self.var(v)

    def visit_Load(self, e):
        return ir.Load(self.buf(e.buffer), tuple(self.visit(i) for i in e.indices), e.dtype,
                       e.lanes)

    def visit_Store(self, s):
        return ir.Store(self.buf(s.buffer), tuple(self.visit(i) for i in s.indices),
                        self.visit(s.value), s.lanes)

    def visit_Allocate(self, s):
        return ir.Allocate(self.buf(s.buffer), self.visit(s.body))

    def visit_For(self, s):
        return ir.For(self.var(s.var), self.visit(s.min), self.visit(s.extent), s.kind,
                      self.visit(s.body), s.annotations)

    def visit_LetStmt(self, s):
        return ir.LetStmt(self.var(s.var), self.visit(s.value), self.visit(s.body))


def legalize_names(func: ir.LoweredFunc, reserved=C_RESERVED, taken=()) -> ir.LoweredFunc:
    """Rename buffers and variables whose names the generated C/CUDA cannot use.

    Assumes: ``func`` is about to be printed by a :class:`CLikePrinter`; buffers are
    identified by name, variables of the same name are either the same variable or
    live in nested scopes (C shadowing then gives them the meaning they have in the IR).
    Guarantees: every buffer and variable name is a C identifier outside ``reserved``
    and ``taken`` (e.g. the names of the emitted functions), not starting with ``pc_``
    or ``__``, and no buffer shares its name with a variable or another buffer; names
    that already satisfy this are kept.  The argument order is unchanged (callers pass
    arguments by position), so the result is interchangeable with ``func``.
    """
    bufs: dict = {}
    var_names: dict = {}
    for b in func.args:
        bufs.setdefault(b.name, None)

    def collect(n):
        if isinstance(n, (ir.Load, ir.Store, ir.Allocate)):
            bufs.setdefault(n.buffer.name, None)
        if isinstance(n, ir.Var):
            var_names.setdefault(n.name, None)
        if isinstance(n, (ir.For, ir.LetStmt)):
            var_names.setdefault(n.var.name, None)
    for p in func.params:
        var_names.setdefault(p.name, None)
    ir.walk(func.body, collect)
    used = set(taken)
    mapping_b, mapping_v = {}, {}

    def pick(name):
        new, k = name, 0
        while not _is_safe(new, reserved) or new in used or new in taken:
            k += 1
            base = name if _IDENT.match(name) else re.sub(r"[^A-Za-z0-9_]", "_", name)
            base = base if not base.startswith(("__", "pc_", "_Z")) else "v" + base
            new = f"{base}_{k}"
        used.add(new)
        return new
    all_names = set(bufs) | set(var_names)
    for name in bufs:   # keep safe names first so a renamed one cannot take them
        if _is_safe(name, reserved) and name not in taken and name not in used:
            mapping_b[name] = name
            used.add(name)
    for name in var_names:
        if _is_safe(name, reserved) and name not in taken and name not in used:
            mapping_v[name] = name
            used.add(name)
    used |= all_names  # a fresh name never reuses an existing one
    for name in bufs:
        if name not in mapping_b:
            mapping_b[name] = pick(name)
    for name in var_names:
        if name not in mapping_v:
            mapping_v[name] = pick(name)
    if all(k == v for k, v in mapping_b.items()) and all(k == v for k, v in mapping_v.items()):
        return func
    r = _Rename({k: v for k, v in mapping_b.items() if k != v},
                {k: v for k, v in mapping_v.items() if k != v})
    body = r.visit(func.body)
    return ir.LoweredFunc(func.name, tuple(r.var(p) for p in func.params),
                          tuple(r.buf(b) for b in func.inputs),
                          tuple(r.buf(b) for b in func.outputs), body, dict(func.attrs))
