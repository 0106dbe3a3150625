"""Shared printer for C-family targets (C99 and CUDA C++).

Prints flattened IR (see :mod:`polycomp.lowering.flatten`).  Values of dtype
float16/bfloat16 are computed as ``float`` and converted on load and store (the
dtypes module's semantics); int8/int32 arithmetic is carried out in ``int64_t`` and
wrapped to its dtype after every operation (numpy's and the interpreter's semantics,
without C's undefined signed overflow); int64 data ``+ - *`` and negation are computed
on ``unsigned long long`` and converted back (two's complement wrap-around, the same
bits with and without ``-fwrapv``: nvcc has no such flag); integer index arithmetic
(:func:`polycomp.lowering.simplify.is_index`, which never overflows) is plain ``int64_t``; ``//`` and ``%``
print as the floor-division helpers from :data:`C_PRELUDE` unless both operands are
provably non-negative constants or the divisor is a positive constant and the
dividend is known non-negative.
"""
from __future__ import annotations

import os
import re
from dataclasses import replace

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.lowering.printer import attr_words

from .c_reserved import RESERVED_GLOBALS, RESERVED_MACROS

C_PRELUDE = r"""
/* numpy's integer semantics: x // 0 == x % 0 == 0, INT64_MIN // -1 wraps (C: undefined, a trap) */
PC_INLINE int64_t pc_floordiv(int64_t a, int64_t b) { if (b == 0) return 0; if (b == -1) return (int64_t)(0ull - (uint64_t)a); int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
PC_INLINE int64_t pc_floormod(int64_t a, int64_t b) { if (b == 0 || b == -1) return 0; int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
PC_INLINE int64_t pc_abs_i64(int64_t a) { return a < 0 ? (int64_t)(0ull - (uint64_t)a) : a; }
PC_INLINE int64_t pc_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
PC_INLINE int64_t pc_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
PC_INLINE float pc_min_f32(float a, float b) { return (a < b || a != a) ? a : b; }
PC_INLINE float pc_max_f32(float a, float b) { return (a > b || a != a) ? a : b; }
PC_INLINE double pc_min_f64(double a, double b) { return (a < b || a != a) ? a : b; }
PC_INLINE double pc_max_f64(double a, double b) { return (a > b || a != a) ? a : b; }
"""

_MATH_F32 = {"exp": "expf", "log": "logf", "sqrt": "sqrtf", "tanh": "tanhf", "erf": "erff",
             "abs": "fabsf", "pow": "powf", "floor": "floorf", "ceil": "ceilf"}
_MATH_F64 = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf",
             "abs": "fabs", "pow": "pow", "floor": "floor", "ceil": "ceil"}


_NARROW_INTS = ("int8", "int32")
#: the binary operators of index arithmetic (polycomp.lowering.simplify.is_index)
_INDEX_BINARY_OPS = frozenset(("+", "-", "*", "//", "%", "min", "max"))
# the unsigned type of each integer dtype's width (names that C and CUDA both have)
_UNSIGNED = {"int8": "unsigned char", "int32": "unsigned int", "int64": "unsigned long long"}


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
        # ``P - c`` of a symbol ``P >= 1`` known non-negative where ``c <= 1`` (see
        # :func:`nonnegative`; ``POLYCOMP_CONV_SYMBOLIC=0``: not, the older C)
        self.minus_bounds = conv_symbolic_enabled()
        # int64 lets bound to data: their arithmetic wraps (printed unsigned)
        self.data_vars: set = set()
        # id -> node: operands of index arithmetic being printed (see index_operand)
        self._index_operands: dict[int, ir.Expr] = {}

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

    def to_compute(self, dtype: str, v: str) -> str:
        """Stored ``dtype`` value ``v`` as its compute type (16-bit floats widen to float);
        targets spell the 16-bit conversions their own way."""
        if dtype == "float16":
            return f"((float){v})"
        if dtype == "bfloat16":
            return f"pc_bf16_to_f32({v})"
        return v

    def to_storage(self, dtype: str, v: str) -> str:
        """Compute-type value ``v`` narrowed to storage type ``dtype`` (16-bit floats round
        from float; other types are stored as computed)."""
        if dtype == "float16":
            return f"({self.storage_type('float16')})({v})"
        if dtype == "bfloat16":
            return f"pc_f32_to_bf16({v})"
        return v

    def load_value(self, buf: ir.Buffer, index: str) -> str:
        """A load of one element, converted to its compute type."""
        return self.to_compute(buf.dtype, f"{buf.name}[{index}]")

    def store_value(self, buf: ir.Buffer, value: str, vdtype: str) -> str:
        return self.to_storage(buf.dtype, value)

    def cast(self, e: ir.Cast) -> str:
        v = self.expr(e.value)
        if e.dtype in ("float16", "bfloat16"):   # round to the 16-bit type, compute in float
            return self.to_compute(e.dtype, self.to_storage(e.dtype, v))
        if e.dtype == "bool":
            return f"(({v}) != 0)"
        if e.dtype in ("int8", "int32"):
            return f"((int64_t)({self.types[e.dtype]})({v}))"
        return f"(({self.value_type(e.dtype)})({v}))"

    def math_call(self, name: str, args: list[str], dtype: str) -> str:
        d = dt.compute_dtype(dtype)
        if not dt.is_float(d):
            if name == "abs":   # numpy: abs(INT_MIN) == INT_MIN (llabs: undefined)
                if dtype in _NARROW_INTS:
                    return f"(({self.types[dtype]})pc_abs_i64({args[0]}))"
                return f"pc_abs_i64({args[0]})"
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
    def int_literal(self, e: ir.IntImm) -> str:
        if e.dtype == "bool":
            return "true" if e.value else "false"
        v = e.value
        if v == -2 ** 63:   # the literal 9223372036854775808 has no signed type
            return "(-INT64_C(9223372036854775807) - 1)"
        if abs(v) >= 2 ** 31:
            return f"INT64_C({v})"
        return str(v) if v >= 0 else f"({v})"

    def unary(self, e: ir.Unary) -> str:
        a = self.expr(e.a)
        if e.op != "neg":
            return f"(!{a})"
        if e.dtype in _NARROW_INTS:
            return f"(({self.types[e.dtype]})(-(int64_t)({a})))"
        if e.dtype == "int64" and not self._index_arith(e):   # -INT64_MIN wraps (numpy)
            return f"(({self.types['int64']})(0ull - ({_UNSIGNED['int64']})({a})))"
        return f"(-{a})"

    def expr(self, e) -> str:
        if isinstance(e, ir.IntImm):
            return self.int_literal(e)
        if isinstance(e, ir.FloatImm):
            return self.float_literal(e.value, e.dtype)
        if isinstance(e, ir.Var):
            return e.name
        if isinstance(e, ir.Binary):
            return self.binary(e)
        if isinstance(e, ir.Unary):
            return self.unary(e)
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
        if isinstance(e, ir.FuncCall):    # a function of the same module (dispatchers)
            args = ", ".join(a.name if isinstance(a, ir.Buffer) else self.expr(a)
                             for a in e.args)
            return f"{e.func}({args})"
        raise NotImplementedError(f"{type(self).__name__} cannot print {type(e).__name__}")

    def binary(self, e: ir.Binary) -> str:
        if e.op in _INDEX_BINARY_OPS and self._index_operands.get(id(e)) is e:
            self._index_arith(e)          # its operands are index arithmetic too
        if e.op in ir.BITWISE_OPS:
            return self.bitwise(e)
        if e.dtype in _NARROW_INTS and e.op in ("+", "-", "*", "//", "%"):
            return self.narrow_int_binary(e)
        if e.dtype == "int64" and e.op in ("+", "-", "*") and not self._index_arith(e):
            u = _UNSIGNED["int64"]
            return (f"(({self.types['int64']})(({u})({self.expr(e.a)}) {e.op} "
                    f"({u})({self.expr(e.b)})))")
        a, b = self.expr(e.a), self.expr(e.b)
        if e.op in ("min", "max"):
            return f"pc_{e.op}_{_suffix(e.dtype)}({a}, {b})"
        if e.op == "//":
            if isinstance(e.b, ir.IntImm) and e.b.value > 0 and \
                    nonnegative(e.a, self.nonneg, self.minus_bounds):
                return f"({a} / {b})"
            return f"pc_floordiv({a}, {b})"
        if e.op == "%":
            if isinstance(e.b, ir.IntImm) and e.b.value > 0 and \
                    nonnegative(e.a, self.nonneg, self.minus_bounds):
                return f"({a} % {b})"
            return f"pc_floormod({a}, {b})"
        return f"({a} {e.op} {b})"

    def bitwise(self, e: ir.Binary) -> str:
        """``& | ^ << >>`` on integers with numpy's semantics (:func:`polycomp.ir.bitwise`):
        operands converted to the result type first; a left shift computed unsigned (no
        C overflow UB) and wrapped; ``>>`` arithmetic (gcc's and nvcc's ``>>`` of a
        negative value); a count outside ``[0, bits)`` (C's UB) gives 0 or the sign."""
        t, op = self.types[e.dtype], e.op
        a, b = self.expr(e.a), self.expr(e.b)
        if op in ("&", "|", "^"):
            return f"(({t})((({t})({a})) {op} (({t})({b}))))"
        bits = 8 * dt.itemsize(e.dtype)
        if op == "<<":
            shifted = f"({t})(({_UNSIGNED[e.dtype]})({t})({a}) << ({b}))"
            if isinstance(e.b, ir.IntImm) and 0 <= e.b.value < bits:
                return f"({shifted})"
            return f"((({b}) >= 0 && ({b}) < {bits}) ? {shifted} : ({t})0)"
        shifted = f"({t})((({t})({a})) >> ({b}))"
        if isinstance(e.b, ir.IntImm) and 0 <= e.b.value < bits:
            return f"({shifted})"
        return f"((({b}) >= 0 && ({b}) < {bits}) ? {shifted} : ({t})((({a}) < 0) ? -1 : 0))"

    #: pure calls that are index arithmetic when their arguments are (see is_index)
    index_calls: frozenset = frozenset()

    def is_index(self, e) -> bool:
        """Index arithmetic (never overflows, printed plainly) rather than data (wraps)."""
        from polycomp.lowering.simplify import is_index
        return is_index(e, self.data_vars, self.index_calls, selects=True)

    def _index_arith(self, e: ir.Binary | ir.Unary) -> bool:
        """``is_index(e)`` of an ``int64`` binary or negation being printed, remembering
        that its operands are index arithmetic too when it is: :meth:`is_index` of a
        ``+ - * // % min max`` or ``neg`` holds exactly when it holds for its operands
        (:func:`polycomp.lowering.simplify.is_index`; a printer's override keeps that),
        so printing a sum of depth ``d`` walks it once instead of once per level
        (quadratic).  The memo holds the operands (ids stay theirs) and is emptied
        whenever :attr:`data_vars` grows (the answers depend on it)."""
        known = self._index_operands.get(id(e)) is e
        if not known and not self.is_index(e):
            return False
        if isinstance(e, ir.Binary):
            if e.op in _INDEX_BINARY_OPS:
                self._index_operands[id(e.a)] = e.a
                self._index_operands[id(e.b)] = e.b
        elif e.op == "neg":
            self._index_operands[id(e.a)] = e.a
        return True

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
            self.bind_scalar(s)
            self.stmt(s.body)
            self.level -= 1
            self.emit("}")
        elif isinstance(s, ir.Allocate):
            self.allocate(s)
        elif isinstance(s, ir.Evaluate):
            self.emit(f"{self.expr(s.value)};")
        elif isinstance(s, ir.AttrStmt):
            self.attr(s)
        elif isinstance(s, ir.Return):
            self.emit("return;" if s.value is None else f"return {self.expr(s.value)};")
        else:
            raise NotImplementedError(f"{type(self).__name__} cannot print {type(s).__name__}")

    def bind_scalar(self, s: ir.LetStmt) -> None:
        """The ``const`` local of a scalar ``let`` (its body printed by the caller)."""
        if nonnegative(s.value, self.nonneg, self.minus_bounds):
            self.nonneg.add(s.var)
        if s.var.dtype == "int64" and not self.is_index(s.value):
            self.data_vars.add(s.var)
            self._index_operands.clear()
        self.emit(f"const {self.value_type(s.var.dtype)} {s.var.name} = {self.expr(s.value)};")

    def block(self, s) -> None:
        self.level += 1
        self.stmt(s)
        self.level -= 1

    def for_(self, s: ir.For) -> None:
        self.for_loop(s, s.body)

    def for_loop(self, s: ir.For, body: ir.Stmt) -> None:
        """The C ``for`` of ``s`` (no pragma) around ``body``."""
        v = s.var.name
        if nonnegative(s.min, self.nonneg, self.minus_bounds):
            self.nonneg.add(s.var)
        lo, ext = self.expr(s.min), self.expr(s.extent)
        hi = ext if ir.is_const(s.min, 0) else f"{lo} + {ext}"
        self.emit(f"for (int64_t {v} = {lo}; {v} < {hi}; ++{v}) {{")
        self.block(body)
        self.emit("}")

    def attr(self, s: ir.AttrStmt) -> None:
        head, rest = attr_words(s)
        self.emit(f"// {head}{': ' + rest if rest else ''}")
        self.stmt(s.body)

    def allocate(self, s: ir.Allocate) -> None:
        raise NotImplementedError


def conv_symbolic_enabled() -> bool:
    """Whether convolutions of symbolic image sizes get the code of the thirteenth
    session (``POLYCOMP_CONV_SYMBOLIC=0``: the older code, for comparisons): the
    micro-kernel takes register tiles whose ``C`` is strided by a symbolic extent and
    their partial row tiles (:mod:`polycomp.hw.cpu.microkernel`), and the printers
    divide ``H - 1`` with C's ``/`` (:func:`nonnegative`)."""
    return os.environ.get("POLYCOMP_CONV_SYMBOLIC", "1") != "0"


def nonnegative(e, known: set, minus: bool = True) -> bool:
    """A cheap syntactic test: built from non-negative constants, symbols (``>= 1``, the
    model's context), variables in ``known`` (loops starting at a non-negative value),
    ``+ * // % min max``, and ``a - c`` with a constant ``c`` at most ``a``'s lower bound
    (:func:`lower_bound`: ``H - 1``, the extent ``(H - 1) // 2 + 1`` of a strided
    convolution's output, printed with C's ``/`` instead of ``pc_floordiv``, whose sign
    tests inside the loops gcc unswitched the loop nests on)."""
    lb = lower_bound(e, known, minus)
    return lb is not None and lb >= 0


def lower_bound(e, known: set, minus: bool = True) -> int | None:
    """A constant lower bound of the integer expression ``e`` (None: none found), with
    symbols ``>= 1`` and the variables in ``known`` ``>= 0`` (``minus`` False: none for
    a difference, and 0 for a symbol, as before)."""
    if isinstance(e, ir.IntImm):
        return e.value
    if isinstance(e, ir.Var):
        return (1 if minus else 0) if e.is_param else 0 if e in known else None
    if not isinstance(e, ir.Binary):
        return None
    if e.op == "-" and minus:
        a = lower_bound(e.a, known, minus)
        return a - e.b.value if a is not None and isinstance(e.b, ir.IntImm) else None
    if e.op not in ("+", "*", "//", "%", "min", "max"):
        return None
    a, b = lower_bound(e.a, known, minus), lower_bound(e.b, known, minus)
    if a is None or b is None or (e.op != "+" and (a < 0 or b < 0)):
        return None
    if e.op == "+":
        return a + b
    if e.op == "*":
        return a * b
    if e.op == "//":
        return a // b if isinstance(e.b, ir.IntImm) and b > 0 else 0
    if e.op == "%":
        return 0
    return min(a, b) if e.op == "min" else max(a, b)


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
memcpy memset main isinf isnan llabs
blockIdx threadIdx blockDim gridDim warpSize dim3 __syncthreads __half __nv_bfloat16
__half2float __float2half __bfloat162float __float2bfloat16 cudaError_t cudaSuccess
cudaMalloc cudaFree cudaGetLastError cudaDeviceSynchronize err cfg
asm class delete new namespace template this typename virtual operator private public
protected friend using try catch throw nullptr constexpr
""".split())

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


#: Prefixes of names that belong to the compiler, the C library, OpenMP, CUDA or the
#: intrinsics headers (``_mm256_*``, ``__m256`` start with ``_``; polycomp's own helpers
#: with ``pc_``, ``pc256_``, ``pcv``, ``PC``): a user's name with one of them is renamed.
_RESERVED_PREFIXES = ("_", "pc_", "pc2", "pc5", "pcv", "pcW", "PC", "omp_", "kmp_", "simde",
                      "cuda", "CUDA", "cu", "nv", "NV")
#: ALL_CAPS words joined by underscores look like the macros that headers define
#: (``HUGE_VAL``, ``INT8_MAX``, ``M_PI``, ``MB_CUR_MAX``; not ``T1_1``): renamed even
#: when the headers in use do not define them, so that output does not depend on the C
#: library version.
_MACRO_LIKE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]*[A-Z][A-Z0-9]*)+_?$")
#: Global names of the CUDA runtime that nvcc includes implicitly: the vector types
#: (``float4``, ``uchar2``, ``dim3``) and the families ``make_*``, ``atomic*``, ``tex*``,
#: ``surf*`` (CUDA's math functions are C's and are in :data:`RESERVED_BY_HEADERS`).
_CUDA_GLOBAL = re.compile(r"^((u?(char|short|int|long|longlong)|float|double)[1-4]|dim3|"
                          r"make_\w+|atomic\w+|tex\w*|surf\w*)$")


def _is_safe(name: str, reserved) -> bool:
    """Whether a user's ``name`` can appear verbatim in generated C/CUDA as a buffer or
    variable: an ASCII C identifier that is no macro of the headers
    (:data:`RESERVED_MACROS`), not one the printers use (``reserved``: keywords and the
    functions the generated code calls), not in a reserved prefix, not macro-like.  A
    file-scope name of the headers (``gamma``, ``index``) is fine there: the parameter
    or local shadows it and the generated code does not use it."""
    return (bool(_IDENT.match(name)) and name not in reserved
            and name not in RESERVED_MACROS and not name.startswith(_RESERVED_PREFIXES)
            and not _MACRO_LIKE.match(name) and not _CUDA_GLOBAL.match(name))


#: Prefix of a kernel's C entry point when its own name cannot be used.
ENTRY_PREFIX = "pck_"


def entry_name(kernel_name: str) -> str:
    """The exported C/CUDA symbol of kernel ``kernel_name``: the name itself when it is
    safe (see :func:`_is_safe`) and no file-scope name of the headers
    (:data:`RESERVED_GLOBALS`: ``free``, ``system``, ``expf``), otherwise ``pck_`` + the name with every character
    that is not ``[A-Za-z0-9_]`` replaced by ``_`` (``free`` -> ``pck_free``,
    ``omp_get_thread_num`` -> ``pck_omp_get_thread_num``)."""
    if _is_safe(kernel_name, C_RESERVED) and kernel_name not in RESERVED_GLOBALS:
        return kernel_name
    return ENTRY_PREFIX + (re.sub(r"[^A-Za-z0-9_]", "_", kernel_name) or "kernel")


class _Rename(ir.Mutator):
    """Scope-aware renaming; see :func:`legalize_names`."""

    def __init__(self, bufs: dict, free: dict, fixed: set, is_ok, fresh):
        self.bufs = bufs          # buffer name -> new name
        self.free = free          # name of a free variable (a parameter) -> new name
        self.fixed = fixed        # names visible everywhere (buffers, parameters, taken)
        self.is_ok, self.fresh = is_ok, fresh
        self.scope: dict = {}     # bound Var (identity) -> renamed Var
        self.bound: dict = {}     # name -> number of enclosing binders using it
        self.buf_cache: dict = {}
        self.free_cache: dict = {}

    def visit_Var(self, v):
        nv = self.scope.get(v)
        if nv is not None:
            return nv
        new = self.free.get(v.name, v.name)
        if new == v.name:
            return v
        nv = self.free_cache.get(v)
        if nv is None:
            nv = self.free_cache[v] = replace(v, name=new)
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

    # (a node whose parts all come back unchanged is returned as it is: most names are
    # legal already, and rebuilding every node of the body cost more than the renaming)
    def visit_Load(self, e):
        b, idx = self.buf(e.buffer), tuple(self.visit(i) for i in e.indices)
        if b is e.buffer and all(x is y for x, y in zip(idx, e.indices)):
            return e
        return ir.Load(b, idx, e.dtype, e.lanes)

    def visit_Store(self, s):
        b, idx = self.buf(s.buffer), tuple(self.visit(i) for i in s.indices)
        v = self.visit(s.value)
        if b is s.buffer and v is s.value and all(x is y for x, y in zip(idx, s.indices)):
            return s
        return ir.Store(b, idx, v, s.lanes)

    def visit_Allocate(self, s):
        b, body = self.buf(s.buffer), self.visit(s.body)
        return s if b is s.buffer and body is s.body else ir.Allocate(b, body)

    def visit_AttrStmt(self, s):
        """Expressions in a mark's value are renamed too (the vectorizer's tail mask
        ``vector_mask`` carries its lane count there)."""
        value = s.value
        if isinstance(value, ir.Expr):
            value = self.visit(value)
        elif isinstance(value, tuple):
            value = tuple(self.visit(v) if isinstance(v, ir.Expr) else v for v in value)
        body = self.visit(s.body)
        if body is s.body and (value is s.value or (
                isinstance(value, tuple) and all(x is y for x, y in zip(value, s.value)))):
            return s
        return ir.AttrStmt(s.key, value, body)

    def _bind(self, v, body):
        """Rename binder ``v`` unless its name is usable here, then visit ``body``."""
        prev = self.scope.get(v)
        if prev is not None:  # the same variable bound again inside itself
            nv = prev
        elif self.is_ok(v.name) and v.name not in self.fixed and not self.bound.get(v.name):
            nv = v
        else:
            nv = replace(v, name=self.fresh(v.name))
        self.scope[v] = nv
        self.bound[nv.name] = self.bound.get(nv.name, 0) + 1
        try:
            return nv, self.visit(body)
        finally:
            self.bound[nv.name] -= 1
            if prev is None:
                del self.scope[v]
            else:
                self.scope[v] = prev

    def visit_For(self, s):
        mn, ext = self.visit(s.min), self.visit(s.extent)
        nv, body = self._bind(s.var, s.body)
        if nv is s.var and mn is s.min and ext is s.extent and body is s.body:
            return s
        return ir.For(nv, mn, ext, s.kind, body, s.annotations)

    def visit_LetStmt(self, s):
        value = self.visit(s.value)
        nv, body = self._bind(s.var, s.body)
        if nv is s.var and value is s.value and body is s.body:
            return s
        return ir.LetStmt(nv, value, body)


def legalize_names(func: ir.LoweredFunc, reserved=C_RESERVED, taken=()) -> ir.LoweredFunc:
    """Rename the function, buffers and variables whose names the generated C/CUDA
    cannot use.

    The function gets its :func:`entry_name`; ``taken`` (names, or a callable of the
    renamed function giving them, e.g. the CUDA kernels' names) are kept free too.

    Assumes: ``func`` is about to be printed by a :class:`CLikePrinter`; buffers are
    identified by name; variables are identified by identity (as the interpreter does):
    a ``For``/``LetStmt`` binds its Var object, and a Var that no enclosing binder binds
    is a parameter, identified by name.
    Guarantees: every buffer and variable name is a C identifier outside ``reserved``
    and ``taken`` (e.g. the names of the emitted functions), not starting with ``pc_``
    or ``__``; buffers and parameters have distinct names; a binder never shadows a
    buffer, a parameter or an enclosing binder of another variable (so C scoping gives
    every reference the variable it has in the IR); names that already satisfy this
    are kept.  The argument order is unchanged (callers pass arguments by position), so
    the result is interchangeable with ``func``.
    """
    if entry_name(func.name) != func.name:
        func = replace(func, name=entry_name(func.name))
    taken = set(taken(func) if callable(taken) else taken) | {func.name}
    buf_names: dict = {}
    existing: set = set()
    for b in func.args:
        buf_names.setdefault(b.name, None)

    def collect(n):
        if isinstance(n, (ir.Load, ir.Store, ir.Allocate)):
            buf_names.setdefault(n.buffer.name, None)
        elif isinstance(n, ir.Var):
            existing.add(n.name)
        if isinstance(n, (ir.For, ir.LetStmt)):
            existing.add(n.var.name)
    ir.walk(func.body, collect)
    existing |= set(buf_names) | {p.name for p in func.params}
    used = set(taken) | existing

    def is_ok(name):
        return _is_safe(name, reserved) and name not in taken

    def fresh(name):
        base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"
        if not _is_safe(f"{base}_1", reserved):   # a reserved prefix, macro-like, a digit
            base = "v_" + base.lstrip("_")
        k = 1
        while f"{base}_{k}" in used or not _is_safe(f"{base}_{k}", reserved):
            k += 1
        used.add(f"{base}_{k}")
        return f"{base}_{k}"

    bufs = {}
    for name in buf_names:
        bufs[name] = name if is_ok(name) else fresh(name)
    fixed = set(bufs.values()) | taken
    free = {}
    for p in func.params:
        new = p.name if is_ok(p.name) and p.name not in fixed else fresh(p.name)
        free[p.name] = new
        fixed.add(new)
    r = _Rename({k: v for k, v in bufs.items() if k != v},
                {k: v for k, v in free.items() if k != v}, fixed, is_ok, fresh)
    body = r.visit(func.body)
    if body is func.body and all(k == v for k, v in bufs.items()) \
            and all(k == v for k, v in free.items()):
        return func
    return ir.LoweredFunc(func.name, tuple(r.visit_Var(p) for p in func.params),
                          tuple(r.buf(b) for b in func.inputs),
                          tuple(r.buf(b) for b in func.outputs), body,
                          tuple(bufs.get(n, n) for n in func.inout), func.counts)
