"""PTX intrinsics of the Tensor Core path: IR builders, CUDA printing, simulator semantics.

Every intrinsic is an ``ir.Call`` with ``pure=False`` evaluated for its effect
(``ir.Evaluate``).  Address operands are ``ir.Load`` nodes used as lvalues: the call
reads or writes the element the Load names (and the consecutive elements the
instruction covers); the printer emits ``&buf[index]``.  Fragment registers are
``local`` buffers of dtype ``int32`` (each element one 32-bit register holding two
16-bit values, the first in the low half), accumulators ``local`` ``float32`` buffers.

========================  ==============================================================
call                      PTX
========================  ==============================================================
``ptx_ldmatrix``          ``ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16``
``ptx_mma_m16n8k16_f16``  ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32``
``ptx_mma_m16n8k16_bf16`` ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32``
``ptx_cp_async``          ``cp.async.cg.shared.global [dst], [src], 16, src_bytes``
``ptx_cp_async_commit``   ``cp.async.commit_group``
``ptx_cp_async_wait``     ``cp.async.wait_group n``
``pc_xor``                ``a ^ b`` (integer; pure)
``pc_st4``                one 16-byte (float32) / 8-byte (f16, bf16) store of 4 values
``pc_pack_{f16,bf16}x2``  two floats rounded to f16/bf16 in one 32-bit register (pure;
                          the first in the low half: an ``mma`` A/B fragment register)
========================  ==============================================================

The printed ``.cu`` defines one ``static __device__ __forceinline__`` wrapper per
instruction (:data:`PTX_PRELUDE`, inline ``asm volatile``); the simulator's semantics of
each are in :mod:`polycomp.hw.cuda.sim_tensorcore` (imported here, so that any IR built
with these helpers can be simulated).
"""
from __future__ import annotations

from polycomp import ir

from . import sim_tensorcore  # noqa: F401  (registers the simulator handlers)

NAMES = ("ptx_ldmatrix", "ptx_mma_m16n8k16_f16", "ptx_mma_m16n8k16_bf16", "ptx_cp_async",
         "ptx_cp_async_commit", "ptx_cp_async_wait", "pc_xor", "pc_st4", "pc_pack_f16x2",
         "pc_pack_bf16x2")


# --------------------------------------------------------------------------- builders


def _effect(name, *args) -> ir.Stmt:
    return ir.Evaluate(ir.Call(name, tuple(ir.const(a) for a in args), "int32", pure=False))


def ldmatrix(dst: ir.Load, src: ir.Load, num: int, trans: bool) -> ir.Stmt:
    return _effect("ptx_ldmatrix", dst, src, ir.IntImm(num, "int32"), ir.IntImm(int(trans), "int32"))


def mma(acc: ir.Load, a: ir.Load, b: ir.Load, dtype: str) -> ir.Stmt:
    tag = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    return _effect(f"ptx_mma_m16n8k16_{tag}", acc, a, b)


def cp_async(dst: ir.Load, src: ir.Load, src_bytes: ir.Expr) -> ir.Stmt:
    return _effect("ptx_cp_async", dst, src, src_bytes)


def cp_async_commit() -> ir.Stmt:
    return _effect("ptx_cp_async_commit")


def cp_async_wait(n: int) -> ir.Stmt:
    return _effect("ptx_cp_async_wait", ir.IntImm(n, "int32"))


def store4(dst: ir.Load, values) -> ir.Stmt:
    """A 4-element vector store (16 bytes of float32, 8 of float16/bfloat16) of float
    values at ``dst`` (aligned to the vector size)."""
    return _effect("pc_st4", dst, *values)


def shfl_xor(value: ir.Expr, mask: int) -> ir.Expr:
    return ir.Call("__shfl_xor_sync", (ir.IntImm(0xFFFFFFFF), value, ir.IntImm(mask)),
                   value.dtype, pure=False)


def xor(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return ir.Call("pc_xor", (ir.const(a), ir.const(b)), "int64", pure=True)


def pack_half2(lo: ir.Expr, hi: ir.Expr, dtype: str) -> ir.Expr:
    """``lo``, ``hi`` (float) rounded to ``dtype`` (float16/bfloat16, to nearest even) and
    packed into one int32 register, ``lo`` in the low half (``__floats2half2_rn``)."""
    tag = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    return ir.Call(f"pc_pack_{tag}x2", (lo, hi), "int32", pure=True)


def is_call(stmt, name: str) -> bool:
    return isinstance(stmt, ir.Evaluate) and isinstance(stmt.value, ir.Call) and \
        stmt.value.name == name


def calls_any(node, names) -> bool:
    """Whether IR ``node`` calls a function named in ``names``."""
    found = []
    ir.walk(node, lambda n: found.append(1) if isinstance(n, ir.Call) and n.name in names
            else None)
    return bool(found)


def uses_ptx(node) -> bool:
    return calls_any(node, NAMES)


# --------------------------------------------------------------------------- printing

PTX_PRELUDE = r"""
static __device__ __forceinline__ unsigned pc_smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void pc_ldmatrix_x1(int* d, const void* s) { asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(d[0]) : "r"(pc_smem(s))); }
static __device__ __forceinline__ void pc_ldmatrix_x2(int* d, const void* s) { asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(d[0]), "=r"(d[1]) : "r"(pc_smem(s))); }
static __device__ __forceinline__ void pc_ldmatrix_x4(int* d, const void* s) { asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(pc_smem(s))); }
static __device__ __forceinline__ void pc_ldmatrix_x1_trans(int* d, const void* s) { asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(d[0]) : "r"(pc_smem(s))); }
static __device__ __forceinline__ void pc_ldmatrix_x2_trans(int* d, const void* s) { asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(d[0]), "=r"(d[1]) : "r"(pc_smem(s))); }
static __device__ __forceinline__ void pc_ldmatrix_x4_trans(int* d, const void* s) { asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(pc_smem(s))); }
static __device__ __forceinline__ void pc_mma_m16n8k16_f16(float* d, const int* a, const int* b) { asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); }
static __device__ __forceinline__ void pc_mma_m16n8k16_bf16(float* d, const int* a, const int* b) { asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); }
static __device__ __forceinline__ void pc_cp_async16(void* s, const void* g, int src_bytes) { asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(pc_smem(s)), "l"(__cvta_generic_to_global(g)), "r"(src_bytes) : "memory"); }
static __device__ __forceinline__ void pc_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void pc_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }
static __device__ __forceinline__ void pc_st4(float* p, float a, float b, float c, float d) { asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};\n" :: "l"(__cvta_generic_to_global(p)), "f"(a), "f"(b), "f"(c), "f"(d) : "memory"); }
static __device__ __forceinline__ int pc_pack_f16x2(float lo, float hi) { __half2 v = __floats2half2_rn(lo, hi); return *reinterpret_cast<int*>(&v); }
static __device__ __forceinline__ int pc_pack_bf16x2(float lo, float hi) { __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); return *reinterpret_cast<int*>(&v); }
static __device__ __forceinline__ void pc_st4_b32x2(void* p, unsigned x, unsigned y) { asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" :: "l"(__cvta_generic_to_global(p)), "r"(x), "r"(y) : "memory"); }
static __device__ __forceinline__ void pc_st4(__half* p, float a, float b, float c, float d) { __half2 x = __floats2half2_rn(a, b), y = __floats2half2_rn(c, d); pc_st4_b32x2(p, *reinterpret_cast<unsigned*>(&x), *reinterpret_cast<unsigned*>(&y)); }
static __device__ __forceinline__ void pc_st4(__nv_bfloat16* p, float a, float b, float c, float d) { __nv_bfloat162 x = __floats2bfloat162_rn(a, b), y = __floats2bfloat162_rn(c, d); pc_st4_b32x2(p, *reinterpret_cast<unsigned*>(&x), *reinterpret_cast<unsigned*>(&y)); }
"""


def _addr(printer, e) -> str:
    if not isinstance(e, ir.Load):
        raise NotImplementedError(f"an address operand must be a buffer element, got {e!r}")
    return f"&{e.buffer.name}[{printer.expr(e.indices[0])}]"


def print_intrinsic(printer, e: ir.Call) -> str | None:
    """The CUDA text of intrinsic call ``e`` (flattened IR), or None if it is not one."""
    a = e.args
    if e.name == "ptx_ldmatrix":
        suffix = f"x{a[2].value}" + ("_trans" if a[3].value else "")
        return f"pc_ldmatrix_{suffix}({_addr(printer, a[0])}, {_addr(printer, a[1])})"
    if e.name.startswith("ptx_mma_m16n8k16_"):
        return f"pc_{e.name[4:]}({_addr(printer, a[0])}, {_addr(printer, a[1])}, " \
               f"{_addr(printer, a[2])})"
    if e.name == "ptx_cp_async":
        return f"pc_cp_async16({_addr(printer, a[0])}, {_addr(printer, a[1])}, " \
               f"(int)({printer.expr(a[2])}))"
    if e.name == "ptx_cp_async_commit":
        return "pc_cp_async_commit()"
    if e.name == "ptx_cp_async_wait":
        return f"pc_cp_async_wait<{a[0].value}>()"
    if e.name == "pc_st4":
        vals = ", ".join(f"(float)({printer.expr(x)})" for x in a[1:])
        return f"pc_st4({_addr(printer, a[0])}, {vals})"
    if e.name in ("pc_pack_f16x2", "pc_pack_bf16x2"):
        return f"{e.name}((float)({printer.expr(a[0])}), (float)({printer.expr(a[1])}))"
    if e.name == "pc_xor":
        return f"(({printer.expr(a[0])}) ^ ({printer.expr(a[1])}))"
    return None
