"""The C printer for vector IR: AVX2 (``__m256``/``__m256d``) and AVX-512
(``__m512``/``__m512d`` with ``__mmask16``/``__mmask8`` masks) intrinsics.

Prints what :mod:`polycomp.lowering.vectorize` and the micro-kernel pass produce (see
the vector IR conventions there) on top of :class:`~polycomp.hw.cpu.codegen.CPrinter`:

* a vector load/store ``buf[Ramp(b, 1, L)]`` is ``_mm<W>_loadu_<s>(buf + b)`` /
  ``_mm<W>_storeu_<s>``; inside ``AttrStmt("vector_mask", (count, L))`` and in the
  branches of a ``select`` on a vector condition they are masked (AVX-512
  ``maskz_loadu``/``mask_storeu``, AVX2 ``maskload``/``maskstore``): inactive lanes are
  neither read nor written;
* ``a*b + c`` is one ``fmadd`` when the target has FMA;
* comparisons give masks (``__mmask16`` on AVX-512, all-ones lanes on AVX2), ``select``
  blends, ``vlane_range`` builds a lane-range mask, ``vreduce_*`` reduce horizontally;
* ``valign(hi, lo, r)`` is ``valignq``/``valignd`` (the sliding windows of
  :func:`polycomp.lowering.vectorize.window_loads`, AVX-512 only; on AVX2
  ``vperm2i128`` + ``vpalignr``, the lifted layout's seams) and ``valign_peel``
  the number of elements from an address to the next vector-aligned one;
* math calls go to the helpers of :mod:`polycomp.hw.cpu.vector_prelude`;
* a ``register``-scope buffer whose accesses all use constant indices becomes one C
  variable per vector (``<buf>_v<k>``) or per scalar element (``<buf>_s<k>``), so the
  compiler keeps it in registers;
* a ``parallel`` loop whose body starts with ``Allocate`` nodes of loop-invariant size
  becomes ``#pragma omp parallel`` around per-thread allocations and ``#pragma omp for
  schedule(static)`` (one allocation per thread, not per iteration);
* the dot-product tiles of :mod:`polycomp.hw.cpu.microkernel`: *group vectors*
  (``lanes * group`` bfloat16/int8 elements, a ``__m512i``: loads, ``broadcast_group``),
  the ``dot_bf16`` / ``dot_u8s8`` calls (:data:`DOT_HELPERS`, defined by the prelude
  only in kernels that call them, :func:`dot_calls`), int32 vectors (``__m512i``,
  ``epi32`` operations and masked loads/stores); an ``outline`` attribute becomes a
  ``static noinline`` function printed before the kernel (:meth:`VectorPrinter.outline`)
  and a loop annotated ``dot_groups`` counts its groups with C's ``/``;
* stores of 16-bit floats under a ``raw_copy`` attribute (packing copies) copy the
  stored bits instead of widening to float and rounding back.
"""
from __future__ import annotations

import math

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import PolycompInternalError
from polycomp.lowering.vectorize import ALIGN_PEEL, VALIGN
from polycomp.scheduler.common import marks

from .codegen import ALLOC_FAILED_SET, CPrinter
from .microkernel import BROADCAST_GROUP, DOT_CALLS, DOT_GROUPS, OUTLINE, PIN_REGISTER
from .pack import RAW_COPY
from .parallel_marks import omp_schedule

_CMP_PRED = {"<": "_CMP_LT_OQ", "<=": "_CMP_LE_OQ", ">": "_CMP_GT_OQ", ">=": "_CMP_GE_OQ",
             "==": "_CMP_EQ_OQ", "!=": "_CMP_NEQ_UQ"}


class VectorPrinter(CPrinter):
    """Set ``isa`` (``avx2``/``avx512``) and ``fma`` on a subclass or instance."""

    isa = "avx512"
    fma = True

    def __init__(self):
        super().__init__()
        self.vector_vars: dict = {}      # Var -> lanes
        # id(expression) -> (expression, lanes_of it); cleared whenever vector_vars
        # changes (the only state lanes_of reads)
        self._lanes: dict[int, tuple[object, int]] = {}
        self.registers: dict = {}        # Buffer -> True (printed as variables)
        self.masks: list = []            # C expressions of the active lane masks
        self.counter = 0
        self.group_vars: set = set()     # let-bound group vectors (dot tiles)
        self.functions: list[str] = []   # outlined functions, printed before the kernel
        # the outlined functions' name prefix (a multi-version module gives each version
        # its own, hw/cpu/multiversion.py)
        self.outline_prefix = "pc"
        self.raw_copy = 0                # inside raw_copy attributes (16-bit bit copies)

    # ------------------------------------------------------------ vector types
    def width(self, dtype: str, lanes: int) -> int:
        return lanes * (64 if dt.compute_dtype(dtype) == "float64" else 32)

    def sfx(self, dtype: str) -> str:
        if dtype == "int32":
            return "epi32"
        return "pd" if dt.compute_dtype(dtype) == "float64" else "ps"

    def mm(self, dtype: str, lanes: int) -> str:
        return f"_mm{self.width(dtype, lanes)}"

    def pc(self, dtype: str, lanes: int) -> str:
        return f"pc{self.width(dtype, lanes)}"

    def vtype(self, dtype: str, lanes: int) -> str:
        w = self.width(dtype, lanes)
        if w not in (256, 512):
            raise PolycompInternalError(f"no {w}-bit vectors of {dtype}")
        if dtype == "int32":
            return f"__m{w}i"
        return f"__m{w}" + ("d" if self.sfx(dtype) == "pd" else "")

    def mask_type(self, dtype: str, lanes: int) -> str:
        if self.width(dtype, lanes) == 512:
            return "pc_mask16" if self.sfx(dtype) in ("ps", "epi32") else "pc_mask8"
        return self.vtype(dtype, lanes)

    # ------------------------------------------------------------ dot-product units
    # (hw/cpu/microkernel.py's dot tiles): a *group vector* holds ``lanes * group``
    # bfloat16/int8 elements in one 512-bit register (``__m512i``); the dot calls
    # accumulate into float32/int32 vectors
    def is_group_vector(self, e) -> bool:
        if isinstance(e, ir.Call) and e.name == BROADCAST_GROUP:
            return True
        if isinstance(e, ir.Var):
            return e in self.group_vars
        return isinstance(e, ir.Load) and e.lanes > 1 and e.dtype in GROUP_DTYPES

    def gexpr(self, e) -> str:
        """A group vector (``__m512i``)."""
        if isinstance(e, ir.Var):
            return e.name
        if isinstance(e, ir.Call) and e.name == BROADCAST_GROUP:
            ld = e.args[0]
            return f"pc512_broadcast_group((const void*){self.pointer(ld.buffer, ld.indices[0])})"
        if isinstance(e, ir.Load):
            return f"_mm512_loadu_si512((const void*){self.pointer(e.buffer, e.indices[0])})"
        raise PolycompInternalError(f"no group vector {type(e).__name__}")

    def dot(self, e: ir.Call, L: int) -> str:
        acc, x, y = e.args
        return (f"{DOT_HELPERS[e.name]}({self.vexpr(acc, L, e.dtype)}, {self.gexpr(x)}, "
                f"{self.gexpr(y)})")

    # ------------------------------------------------------------ lanes
    def lanes_of(self, e) -> int:
        if isinstance(e, (ir.Load, ir.Ramp, ir.Broadcast)):
            return e.lanes
        if isinstance(e, ir.Var):
            return self.vector_vars.get(e, 1)
        if isinstance(e, ir.Call) and e.name == "vlane_range":
            return e.args[2].value
        if isinstance(e, ir.Call) and e.name.startswith("vreduce_"):
            return 1
        if isinstance(e, ir.Call) and e.name in DOT_HELPERS:
            return self.lanes_of(e.args[0])
        if isinstance(e, ir.Call) and e.name == BROADCAST_GROUP:
            return 512 // dt.bits(e.dtype)
        hit = self._lanes.get(id(e))
        if hit is not None:
            return hit[1]
        best = 1
        for c in ir.children(e):
            best = max(best, self.lanes_of(c))
        self._lanes[id(e)] = (e, best)  # keeps e alive: its id is not reused
        return best

    def data_dtype(self, e) -> str:
        """The float dtype of the lanes of a vector expression (masks: of their operands)."""
        if e.dtype != "bool":
            return e.dtype
        found: list = []

        def fn(n):
            if not found and isinstance(n, ir.Expr) and n.dtype in ("float32", "float64") \
                    and self.lanes_of(n) > 1:
                found.append(n.dtype)
        ir.walk(e, fn)
        return found[0] if found else self.mask_dtype

    mask_dtype = "float32"

    # ------------------------------------------------------------ expressions
    def expr(self, e) -> str:
        if isinstance(e, ir.Call) and e.name == ALIGN_PEEL:
            ld, lanes = e.args
            size = dt.bits(ld.dtype) // 8
            # elements from the address to the next multiple of L elements
            return (f"((int64_t)(((0 - (uintptr_t){self.pointer(ld.buffer, ld.indices[0])}) "
                    f"& {lanes.value * size - 1}) / {size}))")
        if isinstance(e, ir.Load) and e.buffer in self.registers:
            return self.register_ref(e.buffer, e.indices[0], e.lanes)
        if isinstance(e, ir.Call) and e.name.startswith("vreduce_"):
            v = e.args[0]
            L = self.lanes_of(v)
            return (f"{self.pc(v.dtype, L)}_reduce_{e.name[8:]}_{self.sfx(v.dtype)}"
                    f"({self.vexpr(v, L, v.dtype)})")
        if self.lanes_of(e) > 1:
            L = self.lanes_of(e)
            return self.vexpr(e, L, self.data_dtype(e))
        return super().expr(e)

    def vexpr(self, e, L: int, D: str) -> str:
        """A vector (or mask, for bool ``e``) of ``L`` lanes of dtype ``D``."""
        if self.lanes_of(e) == 1:
            s = super().expr(e) if not (isinstance(e, ir.Load) and e.buffer in self.registers) \
                else self.expr(e)
            if e.dtype == "bool":
                return f"{self.pc(D, L)}_mask_const_{self.sfx(D)}({s})"
            return f"{self.mm(D, L)}_set1_{self.sfx(D)}({s})"
        mm, pc, s = self.mm(D, L), self.pc(D, L), self.sfx(D)
        if isinstance(e, ir.Broadcast):
            return self.vexpr(e.value, L, D)
        if isinstance(e, ir.Var):
            return e.name
        if isinstance(e, ir.Load):
            if e.buffer in self.registers:
                return self.register_ref(e.buffer, e.indices[0], e.lanes)
            ptr = self.pointer(e.buffer, e.indices[0])
            ramp = e.indices[0]
            if isinstance(ramp, ir.Ramp) and not ir.is_const(ramp.stride, 1):
                st = self.expr(ramp.stride)
                if self.masks:
                    return f"{pc}_maskz_load_strided_{s}({self.masks[-1]}, {ptr}, {st})"
                return f"{pc}_load_strided_{s}({ptr}, {st})"
            if self.masks:
                return f"{pc}_maskz_loadu_{s}({self.masks[-1]}, {ptr})"
            return f"{mm}_loadu_{s}({ptr})"
        if isinstance(e, ir.Call):
            if e.name in DOT_HELPERS:
                return self.dot(e, L)
            if e.name == "vlane_range":
                return f"{pc}_lane_range_{s}({self.expr(e.args[0])}, {self.expr(e.args[1])})"
            if e.name == VALIGN:
                return self.valign(e, L, D)
            if e.name == PIN_REGISTER:      # held in a register: no folded reloads
                t = self.vtype(D, L)
                return (f"({{ {t} pc_pin = {self.vexpr(e.args[0], L, D)}; "
                        f"__asm__(\"\" : \"+x\"(pc_pin)); pc_pin; }})")
            return self.vmath(e, L, D)
        if isinstance(e, ir.Unary):
            if e.op == "neg":
                return f"{pc}_neg_{s}({self.vexpr(e.a, L, D)})"
            return f"{pc}_mask_not_{s}({self.vexpr(e.a, L, D)})"
        if isinstance(e, ir.Select):
            return self.vselect(e, L, D)
        if isinstance(e, ir.Cast):
            return self.vexpr(e.value, L, D)
        if isinstance(e, ir.Binary):
            return self.vbinary(e, L, D)
        raise PolycompInternalError(f"cannot print vector {type(e).__name__}")

    def is_index(self, e) -> bool:
        """A ``valign_peel`` count (in ``[0, L)``) is index arithmetic too."""
        if not _has_peel(e):
            return super().is_index(e)
        return super().is_index(_PeelAsZero().visit(e))

    def valign(self, e: ir.Call, L: int, D: str) -> str:
        """``valign(hi, lo, r)`` (:data:`~polycomp.lowering.vectorize.VALIGN`): the
        prelude's ``pc512_valign_*`` (one ``valignq``/``valignd``) or, on AVX2,
        ``pc256_valign_*`` (``vperm2i128`` + ``vpalignr``; AVX2 kernels' prelude only)."""
        hi, lo, r = e.args
        return (f"{self.pc(D, L)}_valign_{self.sfx(D)}({self.vexpr(hi, L, D)}, "
                f"{self.vexpr(lo, L, D)}, {r.value})")

    def vbinary(self, e: ir.Binary, L: int, D: str) -> str:
        mm, s = self.mm(D, L), self.sfx(D)
        op = e.op
        if op in ("&&", "||"):
            a, b = self.vexpr(e.a, L, D), self.vexpr(e.b, L, D)
            if self.width(D, L) == 512:
                return f"(({self.mask_type(D, L)})(({a}) {'&' if op == '&&' else '|'} ({b})))"
            return f"{mm}_{'and' if op == '&&' else 'or'}_{s}({a}, {b})"
        if op in _CMP_PRED:
            a, b = self.vexpr(e.a, L, D), self.vexpr(e.b, L, D)
            if self.width(D, L) == 512:
                return f"{mm}_cmp_{s}_mask({a}, {b}, {_CMP_PRED[op]})"
            return f"{mm}_cmp_{s}({a}, {b}, {_CMP_PRED[op]})"
        if self.fma and op in ("+", "-") and dt.is_float(D):
            for x, y, sign in ((e.a, e.b, 1), (e.b, e.a, -1)):
                if isinstance(x, ir.Binary) and x.op == "*":
                    p, q = self.vexpr(x.a, L, D), self.vexpr(x.b, L, D)
                    c = self.vexpr(y, L, D)
                    if op == "+":
                        return f"{mm}_fmadd_{s}({p}, {q}, {c})"
                    if sign == 1:   # x*y - c
                        return f"{mm}_fmsub_{s}({p}, {q}, {c})"
                    return f"{mm}_fnmadd_{s}({p}, {q}, {c})"  # c - x*y
        name = {"+": "add", "-": "sub", "*": "mul", "/": "div", "min": "min", "max": "max"}.get(op)
        if name is None:
            raise PolycompInternalError(f"vector operator {op}")
        if op in ("min", "max"):    # numpy's NaN semantics (see the prelude's helpers)
            return f"{self.pc(D, L)}_{name}_{s}({self.vexpr(e.a, L, D)}, {self.vexpr(e.b, L, D)})"
        return f"{mm}_{name}_{s}({self.vexpr(e.a, L, D)}, {self.vexpr(e.b, L, D)})"

    def vselect(self, e: ir.Select, L: int, D: str) -> str:
        mm, pc, s = self.mm(D, L), self.pc(D, L), self.sfx(D)
        if self.lanes_of(e.cond) == 1:
            return (f"(({self.expr(e.cond)}) ? ({self.vexpr(e.t, L, D)}) : "
                    f"({self.vexpr(e.f, L, D)}))")
        # the mask is computed once (a GNU statement expression); loads in a branch touch
        # only the lanes that take it
        self.counter += 1
        m = f"pc_s{self.counter}"
        c = self.vexpr(e.cond, L, D)
        t = self.with_mask(self.and_mask(m, L, D), lambda: self.vexpr(e.t, L, D)) \
            if _has_vector_load(e.t) else self.vexpr(e.t, L, D)
        nm = f"{pc}_mask_not_{s}({m})"
        f = self.with_mask(self.and_mask(nm, L, D), lambda: self.vexpr(e.f, L, D)) \
            if _has_vector_load(e.f) else self.vexpr(e.f, L, D)
        if self.width(D, L) == 512:
            blend = f"{mm}_mask_blend_{s}({m}, {f}, {t})"
        else:
            blend = f"{mm}_blendv_{s}({f}, {t}, {m})"
        return f"({{ const {self.mask_type(D, L)} {m} = {c}; {blend}; }})"

    def and_mask(self, m: str, L: int, D: str) -> str:
        if not self.masks:
            return m
        if self.width(D, L) == 512:
            return f"(({self.mask_type(D, L)})(({self.masks[-1]}) & ({m})))"
        return f"{self.mm(D, L)}_and_{self.sfx(D)}({self.masks[-1]}, {m})"

    def with_mask(self, m: str, fn):
        self.masks.append(m)
        try:
            return fn()
        finally:
            self.masks.pop()

    def vmath(self, e: ir.Call, L: int, D: str) -> str:
        mm, pc, s = self.mm(D, L), self.pc(D, L), self.sfx(D)
        x = self.vexpr(e.args[0], L, D)
        n = e.name
        if n == "sqrt":
            return f"{mm}_sqrt_{s}({x})"
        if n == "rsqrt":
            return f"{mm}_div_{s}({mm}_set1_{s}(1.0), {mm}_sqrt_{s}({x}))"
        if n == "abs":
            return f"{pc}_abs_{s}({x})"
        if n in ("floor", "ceil"):
            if self.width(D, L) == 512:
                mode = "_MM_FROUND_TO_NEG_INF" if n == "floor" else "_MM_FROUND_TO_POS_INF"
                return f"{mm}_roundscale_{s}({x}, {mode})"
            return f"{mm}_{n}_{s}({x})"
        if n in ("exp", "log", "tanh", "erf", "sigmoid"):
            return f"{pc}_{n}_{s}({x})"
        raise PolycompInternalError(f"no vector {n}")

    def pointer(self, buf: ir.Buffer, index) -> str:
        idx = self.expr(index.base if isinstance(index, ir.Ramp) else index)
        return f"({buf.name} + {idx})"

    # ------------------------------------------------------------ registers
    def register_ref(self, buf: ir.Buffer, index, lanes: int) -> str:
        base = index.base if isinstance(index, ir.Ramp) else index
        if not isinstance(base, ir.IntImm):
            raise PolycompInternalError(f"register buffer {buf.name} indexed by a variable")
        if lanes > 1:
            if base.value % lanes:
                raise PolycompInternalError(f"unaligned vector access to register {buf.name}")
            return f"{buf.name}_v{base.value // lanes}"
        return f"{buf.name}_s{base.value}"

    def register_decls(self, s: ir.Allocate) -> list[str]:
        buf = s.buffer
        slots: dict = {}

        def fn(n):
            if isinstance(n, (ir.Load, ir.Store)) and n.buffer is buf:
                idx = n.indices[0]
                base = idx.base if isinstance(idx, ir.Ramp) else idx
                if not isinstance(base, ir.IntImm):
                    raise PolycompInternalError(f"register buffer {buf.name} indexed by a "
                                                f"variable")
                slots[self.register_ref(buf, idx, n.lanes)] = n.lanes
        ir.walk(s.body, fn)
        out = []
        for name, lanes in slots.items():
            ty = self.vtype(buf.dtype, lanes) if lanes > 1 else self.value_type(buf.dtype)
            out.append(f"{ty} {name};")
        return out

    # ------------------------------------------------------------ statements
    def raw_bits(self, e) -> str | None:
        """Under a ``raw_copy`` attribute: the stored bits of a 16-bit float value that
        is a load of the same dtype, +0.0 or a ``select`` of such (None otherwise)."""
        if isinstance(e, ir.Load) and e.lanes == 1 and e.dtype in ("float16", "bfloat16"):
            return f"{e.buffer.name}[{self.expr(e.indices[0])}]"
        if isinstance(e, ir.FloatImm) and e.value == 0.0 and math.copysign(1.0, e.value) > 0:
            return "0"
        if isinstance(e, ir.Select):
            t, f = self.raw_bits(e.t), self.raw_bits(e.f)
            if t is not None and f is not None:
                return f"(({self.expr(e.cond)}) ? {t} : {f})"
        return None

    def stmt(self, s) -> None:
        if self.raw_copy and isinstance(s, ir.Store) and s.lanes == 1 and \
                s.buffer.dtype in ("float16", "bfloat16") and s.value.dtype == s.buffer.dtype:
            raw = self.raw_bits(s.value)
            if raw is not None:
                self.emit(f"{s.buffer.name}[{self.expr(s.indices[0])}] = {raw};")
                return
        if isinstance(s, ir.Store) and (s.lanes > 1 or s.buffer in self.registers):
            self.vstore(s)
        elif isinstance(s, ir.LetStmt) and self.is_group_vector(s.value):
            self.emit("{")
            self.level += 1
            self.group_vars.add(s.var)
            self.emit(f"const __m512i {s.var.name} = {self.gexpr(s.value)};")
            self.stmt(s.body)
            self.level -= 1
            self.emit("}")
        elif isinstance(s, ir.LetStmt) and self.lanes_of(s.value) > 1:
            L = self.lanes_of(s.value)
            D = self.data_dtype(s.value)
            self.emit("{")
            self.level += 1
            self.vector_vars[s.var] = L
            self._lanes.clear()
            ty = self.vtype(D, L) if s.value.dtype != "bool" else self.mask_type(D, L)
            self.emit(f"const {ty} {s.var.name} = {self.vexpr(s.value, L, D)};")
            self.stmt(s.body)
            self.level -= 1
            self.emit("}")
        else:
            super().stmt(s)

    def plain_let(self, s: ir.LetStmt) -> bool:
        return not self.is_group_vector(s.value) and self.lanes_of(s.value) == 1

    def vstore(self, s: ir.Store) -> None:
        L = s.lanes
        D = s.buffer.dtype
        if s.buffer in self.registers:
            ref = self.register_ref(s.buffer, s.indices[0], L)
            val = self.vexpr(s.value, L, D) if L > 1 else self.expr(s.value)
            self.emit(f"{ref} = {val};")
            return
        ptr = self.pointer(s.buffer, s.indices[0])
        val = self.vexpr(s.value, L, D)
        if self.masks:
            self.emit(f"{self.pc(D, L)}_mask_storeu_{self.sfx(D)}({ptr}, {self.masks[-1]}, {val});")
        else:
            self.emit(f"{self.mm(D, L)}_storeu_{self.sfx(D)}({ptr}, {val});")

    def attr(self, s: ir.AttrStmt) -> None:
        if s.key == OUTLINE:
            return self.outline(s)
        if s.key == RAW_COPY:
            self.raw_copy += 1
            try:
                return self.stmt(s.body)
            finally:
                self.raw_copy -= 1
        if s.key != marks.VECTOR_MASK:
            return super().attr(s)
        count, L = s.value
        D = _first_vector_dtype(s.body) or "float32"
        self.counter += 1
        name = f"pc_m{self.counter}"
        self.emit("{")
        self.level += 1
        self.emit(f"const {self.mask_type(D, L)} {name} = "
                  f"{self.pc(D, L)}_lane_range_{self.sfx(D)}(0, {self.expr(count)});")
        self.masks.append(name)
        self.stmt(s.body)
        self.masks.pop()
        self.level -= 1
        self.emit("}")

    def outline(self, s: ir.AttrStmt) -> None:
        """The body of an :data:`~polycomp.hw.cpu.microkernel.OUTLINE` attribute (a
        dot-product register tile) as a ``static noinline`` function of its free
        variables and of the buffers it touches, printed before the kernel
        (:attr:`functions`, which :func:`~polycomp.hw.cpu.codegen.emit_c` prints), and
        its call here: the C compiler allocates the tile's 29 vector registers in a
        small function (inside a large OpenMP region gcc 12 kept some accumulators on
        the stack, depending on the shape), as hand-written GEMM kernels do."""
        body = s.body
        inner: set = set()
        ir.walk(body, lambda n: inner.add(n.buffer) if isinstance(n, ir.Allocate) else None)
        bufs: dict = {}
        stored: set = set()

        def visit(n):
            if isinstance(n, (ir.Load, ir.Store)) and n.buffer not in inner:
                bufs.setdefault(n.buffer.name, n.buffer)
                if isinstance(n, ir.Store):
                    stored.add(n.buffer.name)
        ir.walk(body, visit)
        scalars = [v for v in ir.free_vars(body) if v.dtype != "handle"]
        self.counter += 1
        name = f"{self.outline_prefix}_{s.value or 'tile'}_{len(self.functions) + 1}"
        p = type(self)()
        p.outline_prefix = self.outline_prefix
        p.nonneg = {v for v in scalars if v in self.nonneg}
        p.counter = self.counter * 1000
        p.stmt(body)
        params = [f"{p.value_type(v.dtype)} {v.name}" for v in scalars]
        params += [f"{'' if n in stored else 'const '}{p.storage_type(b.dtype)}* restrict {n}"
                   for n, b in bufs.items()]
        self.functions.extend(p.functions)
        self.functions.append(f"static __attribute__((noinline)) void {name}("
                              f"{', '.join(params)}) {{\n" + "\n".join(p.lines) + "\n}\n")
        self.emit(f"{name}({', '.join([v.name for v in scalars] + list(bufs))});")

    def allocate(self, s: ir.Allocate) -> None:
        if s.buffer.scope == "register":
            self.registers[s.buffer] = True
            self.emit("{")
            self.level += 1
            for d in self.register_decls(s):
                self.emit(d)
            self.stmt(s.body)
            self.level -= 1
            self.emit("}")
            return
        super().allocate(s)

    def for_loop(self, s: ir.For, body: ir.Stmt) -> None:
        e = s.extent
        if s.annotation(DOT_GROUPS, False) and ir.is_const(s.min, 0) and \
                isinstance(e, ir.Binary) and e.op == "//" and isinstance(e.b, ir.IntImm) \
                and e.b.value > 0:
            # a trip count a // c: C's a / c agrees where it is positive and no iteration
            # runs otherwise (the plain division lets gcc keep the tile in registers)
            v = s.var.name
            self.nonneg.add(s.var)
            self.emit(f"for (int64_t {v} = 0; {v} < ({self.expr(e.a)}) / {e.b.value}; ++{v}) {{")
            self.block(body)
            self.emit("}")
            return
        super().for_loop(s, body)

    def for_(self, s: ir.For) -> None:
        if s.kind == "parallel":
            allocs, body = _leading_allocations(s)
            if allocs:
                self.emit("#pragma omp parallel")
                self.emit("{")
                self.level += 1
                self.open_workspace([a.buffer for a in allocs])
                # every thread takes the same branch (the flag is read after a barrier):
                # a failed allocation in any thread skips the loop in all of them
                self.emit("#pragma omp barrier")
                self.emit("if (!__atomic_load_n(&pc_alloc_failed, __ATOMIC_RELAXED)) {")
                self.level += 1
                self.emit(f"#pragma omp for {omp_schedule(s)}")
                self.for_loop(s, body)
                self.level -= 1
                self.emit("}")
                self.emit("pc_ws_give(pc_ws, pc_ws_kept);")
                self.level -= 1
                self.emit("}")
                return
        super().for_(s)

    def open_workspace(self, bufs: list[ir.Buffer]) -> None:
        """Each thread's buffers of a parallel region, carved from one block of its
        workspace (``pc_ws_take`` of the C header: kept between calls up to
        ``PC_WS_KEEP`` bytes, else allocated; 64-byte aligned each); the region's end
        gives the block back (``pc_ws_give``).  One region per function level: no
        nested parallel regions."""
        sizes = []
        for b in bufs:
            ty = self.storage_type(b.dtype)
            size = self.expr(ir.shape_product(b.shape))
            sizes.append(f"((sizeof({ty}) * (size_t)({size}) + 63) / 64) * 64")
        self.emit("int pc_ws_kept;")
        self.emit(f"char* pc_ws = (char*)pc_ws_take({' + '.join(sizes)}, &pc_ws_kept);")
        self.emit(f"if (pc_ws == NULL) {ALLOC_FAILED_SET}")
        offset: list[str] = []
        for b, size in zip(bufs, sizes):
            ty = self.storage_type(b.dtype)
            at = " + ".join(offset) if offset else "0"
            self.emit(f"{ty}* restrict {b.name} = ({ty}*)(pc_ws ? pc_ws + {at} : NULL);")
            offset.append(size)


def _has_peel(e) -> bool:
    found: list = []
    ir.walk(e, lambda n: found.append(n) if isinstance(n, ir.Call) and n.name == ALIGN_PEEL
            else None)
    return bool(found)


class _PeelAsZero(ir.Mutator):
    """``valign_peel`` calls as the index constant 0 (for :meth:`VectorPrinter.is_index`)."""

    def visit_Call(self, e):
        return ir.IntImm(0) if e.name == ALIGN_PEEL else self.generic(e)


def _leading_allocations(loop: ir.For):
    """The Allocates at the top of a parallel loop's body whose sizes do not depend on
    the loop variable (hoisted to one per thread), and the body below them."""
    from polycomp.lowering.vectorize import uses
    allocs = []
    body = loop.body
    while isinstance(body, ir.Allocate) and body.buffer.scope not in ("register", "local") \
            and not any(uses(d, loop.var) for d in body.buffer.shape):
        allocs.append(body)
        body = body.body
    return allocs, body


def _has_vector_load(e) -> bool:
    found = []
    ir.walk(e, lambda n: found.append(1) if isinstance(n, ir.Load) and n.lanes > 1 else None)
    return bool(found)


def _first_vector_dtype(s) -> str | None:
    found: list = []

    def fn(n):
        if not found and isinstance(n, (ir.Load, ir.Store)) and n.lanes > 1:
            found.append(n.buffer.dtype)
    ir.walk(s, fn)
    return found[0] if found else None


#: the dot-product intrinsics of hw/cpu/microkernel.py -> their helpers in the prelude
#: (hw/cpu/vector_prelude.py, :func:`~polycomp.hw.cpu.vector_prelude.dot_prelude`)
DOT_HELPERS = {"dot_bf16": "pc512_dpbf16_ps", "dot_u8s8": "pc512_dpbusd_epi32"}
assert set(DOT_HELPERS) == set(DOT_CALLS.values())
GROUP_DTYPES = ("bfloat16", "int8")


def dot_calls(func) -> tuple[str, ...]:
    """The dot-product intrinsics ``func`` calls, in a fixed order (what the prelude of
    its source must define, see :func:`polycomp.hw.cpu.vector_prelude.prelude`)."""
    found: set = set()
    ir.walk(func.body, lambda n: found.add(n.name)
            if isinstance(n, ir.Call) and n.name in DOT_HELPERS else None)
    return tuple(n for n in DOT_HELPERS if n in found)


def printer_for(isa: str, fma: bool = True):
    """A :class:`VectorPrinter` subclass for ``isa`` (what ``emit_c`` instantiates)."""
    return type(f"VectorPrinter_{isa}", (VectorPrinter,), {"isa": isa, "fma": fma})
