"""sm_90a intrinsics (``wgmma``, TMA, ``mbarrier``, ``setmaxnreg``): IR builders, CUDA
printing and the host-side tensor maps.

Like :mod:`.ptx`, every intrinsic is an ``ir.Call`` evaluated for its effect
(``ir.Evaluate``, ``pure=False``) whose address operands are ``ir.Load`` nodes used as
lvalues (printed ``&buf[index]``).  An ``mbarrier`` is one element of a ``shared``
``int64`` buffer; the simulator keeps its state beside the buffer
(:mod:`.sim_hopper`).

==============================  ===========================================================
call                            PTX
==============================  ===========================================================
``ptx_mbarrier_init(b, n)``     ``mbarrier.init.shared::cta.b64 [b], n``
``ptx_fence_mbarrier_init()``   ``fence.mbarrier_init.release.cluster``
``ptx_mbarrier_arrive(b)``      ``mbarrier.arrive.shared::cta.b64 _, [b]``
``ptx_mbarrier_arrive_tx(b,t)`` ``mbarrier.arrive.expect_tx.shared::cta.b64 _, [b], t``
``ptx_mbarrier_wait(b, p)``     a ``mbarrier.try_wait.parity.shared::cta.b64`` loop until the
                                phase of parity ``p`` has completed
``ptx_tma_load(d, b, s, w, r, ..)`` ``cp.async.bulk.tensor.<r>d.shared::cluster.global.mbarrier::
                                complete_tx::bytes [d], [map, {c..}], [b]``: a box of the
                                tensor ``s`` (a ``Load`` of its first element: it names the
                                tensor), swizzle span ``w`` bytes (0, 32, 64, 128), rank
                                ``r``, then the ``r`` box sizes and the ``r`` coordinates of
                                the box's first element, per dimension of the tensor
                                (outermost first; coordinates stay expressions when the
                                IR is flattened)
``ptx_fence_proxy_async()``     ``fence.proxy.async.shared::cta`` (generic-proxy shared
                                stores become visible to the async proxy: TMA, wgmma)
``pc_wgmma_desc(p, l, s, m)``   the 64-bit shared-memory matrix descriptor of the operand
                                starting at ``p`` (pure): start address, leading byte
                                offset ``l``, stride byte offset ``s``, swizzle mode ``m``
                                (0 none, 1 128 B, 2 64 B, 3 32 B)
``ptx_wgmma_{f16,bf16}(d, a, b, n, ta, tb, sc)``
                                ``wgmma.mma_async.sync.aligned.m64n<n>k16.f32.<t>.<t>``:
                                accumulators ``d`` (``n/2`` floats per thread), descriptors
                                ``a``, ``b``, transpose immediates ``ta``, ``tb``
                                (0: K-major), ``sc`` 0 to overwrite, 1 to accumulate
``ptx_wgmma_fence()``           ``wgmma.fence.sync.aligned``
``ptx_wgmma_commit()``          ``wgmma.commit_group.sync.aligned``
``ptx_wgmma_wait(n)``           ``wgmma.wait_group.sync.aligned n``
``ptx_wgmma_fence_operand(d, n)`` an empty ``asm volatile`` on each of the ``n`` registers
                                from ``d`` (keeps the compiler from moving their uses
                                across the asynchronous ``wgmma``; no effect on the data)
``ptx_setmaxnreg(inc, n)``      ``setmaxnreg.{inc,dec}.sync.aligned.u32 n``
==============================  ===========================================================

The tensor map of a TMA copy is a kernel parameter ``const __grid_constant__ CUtensorMap``
built by the host code with ``cuTensorMapEncodeTiled`` (fetched through
``cudaGetDriverEntryPointByVersion``: no ``-lcuda``): one map per distinct (tensor,
box, swizzle) of a kernel (:func:`tensor_maps`), dimensions and byte strides from the
tensor's shape, out-of-bounds elements zero-filled.  TMA needs every stride a multiple
of 16 bytes (:func:`strides_aligned`, an IR condition the kernels test too) and a
16-byte-aligned base; where the strides are not aligned the host leaves the map zero
and the kernel copies the tiles with ordinary loads and stores instead.
"""
from __future__ import annotations

from dataclasses import dataclass

from polycomp import dtypes as dt
from polycomp import ir

from . import sim_hopper  # noqa: F401  (registers the simulator handlers)
from .ptx import calls_any

NAMES = ("ptx_mbarrier_init", "ptx_fence_mbarrier_init", "ptx_mbarrier_arrive",
         "ptx_mbarrier_arrive_tx", "ptx_mbarrier_wait", "ptx_tma_load",
         "ptx_fence_proxy_async", "pc_wgmma_desc", "ptx_wgmma_f16", "ptx_wgmma_bf16",
         "ptx_wgmma_fence", "ptx_wgmma_commit", "ptx_wgmma_wait", "ptx_wgmma_fence_operand",
         "ptx_setmaxnreg")

#: swizzle span (bytes) -> the descriptor's swizzle mode
SWIZZLE_MODE = {0: 0, 128: 1, 64: 2, 32: 3}
#: swizzle span (bytes) -> CUtensorMapSwizzle
TMAP_SWIZZLE = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B",
                64: "CU_TENSOR_MAP_SWIZZLE_64B", 128: "CU_TENSOR_MAP_SWIZZLE_128B"}
TMAP_DTYPE = {"float16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
              "bfloat16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
              "float32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"}


# --------------------------------------------------------------------------- builders


def _effect(name, *args) -> ir.Stmt:
    return ir.Evaluate(ir.Call(name, tuple(ir.const(a) for a in args), "int32", pure=False))


def _i32(v) -> ir.Expr:
    return ir.IntImm(int(v), "int32") if isinstance(v, int) else v


def mbarrier_init(bar: ir.Load, count: int) -> ir.Stmt:
    return _effect("ptx_mbarrier_init", bar, _i32(count))


def fence_mbarrier_init() -> ir.Stmt:
    return _effect("ptx_fence_mbarrier_init")


def mbarrier_arrive(bar: ir.Load) -> ir.Stmt:
    return _effect("ptx_mbarrier_arrive", bar)


def mbarrier_arrive_tx(bar: ir.Load, nbytes: int) -> ir.Stmt:
    return _effect("ptx_mbarrier_arrive_tx", bar, _i32(nbytes))


def mbarrier_wait(bar: ir.Load, parity: ir.Expr) -> ir.Stmt:
    return _effect("ptx_mbarrier_wait", bar, parity)


def tma_load(dst: ir.Load, bar: ir.Load, tensor: ir.Buffer, coords, box: tuple[int, ...],
             swizzle: int) -> ir.Stmt:
    """A TMA box copy of ``tensor`` (box ``box`` at ``coords``, outermost first)."""
    first = ir.Load(tensor, tuple(ir.IntImm(0) for _ in tensor.shape), tensor.dtype)
    return _effect("ptx_tma_load", dst, bar, first, _i32(swizzle), _i32(len(box)),
                   *(_i32(b) for b in box), *coords)


def tma_parts(call: ir.Call) -> tuple[ir.Buffer, tuple[int, ...], int, tuple]:
    """(tensor, box, swizzle span, coordinates) of a ``ptx_tma_load`` call."""
    rank = int(call.args[4].value)
    box = tuple(int(a.value) for a in call.args[5:5 + rank])
    return call.args[2].buffer, box, int(call.args[3].value), tuple(call.args[5 + rank:])


def fence_proxy_async() -> ir.Stmt:
    return _effect("ptx_fence_proxy_async")


def wgmma_desc(addr: ir.Load, lbo: int, sbo: int, swizzle: int) -> ir.Expr:
    return ir.Call("pc_wgmma_desc", (addr, ir.IntImm(lbo), ir.IntImm(sbo),
                                     ir.IntImm(SWIZZLE_MODE[swizzle])), "int64", pure=True)


def wgmma(acc: ir.Load, desc_a: ir.Expr, desc_b: ir.Expr, n: int, dtype: str, trans_a: int,
          trans_b: int, scale_d: ir.Expr) -> ir.Stmt:
    tag = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    return _effect(f"ptx_wgmma_{tag}", acc, desc_a, desc_b, _i32(n), _i32(trans_a),
                   _i32(trans_b), scale_d)


def wgmma_fence() -> ir.Stmt:
    return _effect("ptx_wgmma_fence")


def wgmma_commit() -> ir.Stmt:
    return _effect("ptx_wgmma_commit")


def wgmma_wait(n: int) -> ir.Stmt:
    return _effect("ptx_wgmma_wait", _i32(n))


def wgmma_fence_operand(acc: ir.Load, count: int) -> ir.Stmt:
    return _effect("ptx_wgmma_fence_operand", acc, _i32(count))


def setmaxnreg(increase: bool, count: int) -> ir.Stmt:
    return _effect("ptx_setmaxnreg", _i32(int(increase)), _i32(count))


def uses_hopper(node) -> bool:
    return calls_any(node, NAMES)


def uses_call(node, name: str) -> bool:
    return calls_any(node, (name,))


# --------------------------------------------------------------------------- tensor maps


@dataclass(frozen=True)
class TensorMap:
    """One ``CUtensorMap`` of a kernel: the global tensor ``buffer`` (a function
    argument), the box (elements per dimension, outermost first) and the swizzle span."""
    buffer: ir.Buffer
    box: tuple[int, ...]
    swizzle: int

    @property
    def key(self) -> tuple:
        return (self.buffer.name, self.box, self.swizzle)

    @property
    def box_bytes(self) -> int:
        n = dt.itemsize(self.buffer.dtype)
        for b in self.box:
            n *= b
        return n


def tma_key(call: ir.Call) -> tuple:
    """The (buffer name, box, swizzle) of a ``ptx_tma_load`` call."""
    buf, box, span, _ = tma_parts(call)
    return (buf.name, box, span)


def tensor_maps(body) -> list[TensorMap]:
    """The distinct tensor maps the ``ptx_tma_load`` calls of ``body`` use, in order."""
    out: dict = {}

    def fn(n):
        if isinstance(n, ir.Call) and n.name == "ptx_tma_load":
            k = tma_key(n)
            if k not in out:
                out[k] = TensorMap(tma_parts(n)[0], k[1], k[2])
    ir.walk(body, fn)
    return list(out.values())


def strides_aligned(buffer: ir.Buffer) -> ir.Expr:
    """IR condition: every byte stride of row-major ``buffer`` is a multiple of 16 (so a
    tensor map can describe it)."""
    from polycomp.lowering.simplify import simplify
    item = dt.itemsize(buffer.dtype)
    cond: ir.Expr = ir.IntImm(1, "bool")
    shape = list(buffer.shape)
    for d in range(1, len(shape)):
        stride = ir.shape_product(tuple(shape[d:])) * item
        c = ir.Binary("==", ir.Binary("%", stride, ir.IntImm(16), "int64"), ir.IntImm(0), "bool")
        cond = c if isinstance(cond, ir.IntImm) else ir.Binary("&&", cond, c, "bool")
    return simplify(cond)


# --------------------------------------------------------------------------- printing

HOPPER_PRELUDE = r"""
#include <cuda.h>
#include <cudaTypedefs.h>
#include <string.h>
static __device__ __forceinline__ void pc_mbar_init(void* b, int n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(pc_smem(b)), "r"(n) : "memory"); }
static __device__ __forceinline__ void pc_fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
static __device__ __forceinline__ void pc_mbar_arrive(void* b) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(pc_smem(b)) : "memory"); }
static __device__ __forceinline__ void pc_mbar_arrive_tx(void* b, int bytes) { asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(pc_smem(b)), "r"(bytes) : "memory"); }
static __device__ __forceinline__ void pc_mbar_wait(void* b, int parity) { asm volatile("{\n .reg .pred P1;\n PC_WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n @!P1 bra PC_WAIT;\n}\n" :: "r"(pc_smem(b)), "r"(parity) : "memory"); }
static __device__ __forceinline__ void pc_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
static __device__ __forceinline__ void pc_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void pc_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void pc_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
template <int N> static __device__ __forceinline__ void pc_wgmma_fence_operand(float* d) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}
template <int N> static __device__ __forceinline__ void pc_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N)); }
template <int N> static __device__ __forceinline__ void pc_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N)); }
static __device__ __forceinline__ uint64_t pc_wgmma_desc(const void* p, unsigned lbo, unsigned sbo, unsigned mode) {
  return (uint64_t)((pc_smem(p) & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16) | ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32) | ((uint64_t)mode << 62);
}
static int pc_encode_tmap(CUtensorMap* map, CUtensorMapDataType ty, unsigned rank, const void* ptr, const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box, CUtensorMapSwizzle sw) {
  static PFN_cuTensorMapEncodeTiled_v12000 enc = 0;
  if (!enc) {
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void**)&enc, 12000, cudaEnableDefault, &q) != cudaSuccess || q != cudaDriverEntryPointSuccess || !enc) { enc = 0; return (int)cudaErrorNotSupported; }
  }
  const cuuint32_t es[5] = {1, 1, 1, 1, 1};
  CUresult r = enc(map, ty, rank, (void*)ptr, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? 0 : (int)cudaErrorInvalidValue;
}
"""


def _tma_function(rank: int) -> str:
    cs = ", ".join(f"int c{i}" for i in range(rank))
    regs = ", ".join(f"%{2 + i}" for i in range(rank))
    ins = ", ".join(f'"r"(c{i})' for i in range(rank))
    return (f"static __device__ __forceinline__ void pc_tma_load_{rank}d(void* dst, const "
            f"CUtensorMap* map, void* bar, {cs}) {{ asm volatile(\"cp.async.bulk.tensor."
            f"{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {{{regs}}}]"
            f", [%{2 + rank}];\\n\" :: \"r\"(pc_smem(dst)), \"l\"((uint64_t)map), {ins}, "
            f"\"r\"(pc_smem(bar)) : \"memory\"); }}")


def _wgmma_function(name: str, n: int, tag: str, ta: int, tb: int) -> str:
    regs = n // 2
    d = ", ".join(f"%{i}" for i in range(regs))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return (f"static __device__ __forceinline__ void {name}(float* d, uint64_t da, uint64_t db, "
            f"int scale_d) {{ asm volatile(\"{{\\n .reg .pred p;\\n setp.ne.b32 p, %{regs + 2}, 0;"
            f"\\n wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{tag}.{tag} {{{d}}}, %{regs}, "
            f"%{regs + 1}, p, 1, 1, {ta}, {tb};\\n}}\\n\" : {outs} : \"l\"(da), \"l\"(db), "
            f"\"r\"(scale_d)); }}")


def _wgmma_name(call: ir.Call) -> str:
    tag = call.name.split("_")[-1]
    n, ta, tb = (int(call.args[k].value) for k in (3, 4, 5))
    return f"pc_wgmma_m64n{n}k16_{tag}_{ta}{tb}"


def prelude(body) -> str:
    """The device functions ``body``'s sm_90a intrinsics need: :data:`HOPPER_PRELUDE`
    plus one TMA wrapper per tensor rank and one ``wgmma`` wrapper per instruction form
    (N, type, transposes) used."""
    ranks: set = set()
    forms: dict = {}

    def fn(n):
        if isinstance(n, ir.Call) and n.name == "ptx_tma_load":
            ranks.add(int(n.args[4].value))
        elif isinstance(n, ir.Call) and n.name in ("ptx_wgmma_f16", "ptx_wgmma_bf16"):
            forms[_wgmma_name(n)] = n
    ir.walk(body, fn)
    out = [HOPPER_PRELUDE]
    out += [_tma_function(r) for r in sorted(ranks)]
    for name, c in sorted(forms.items()):
        out.append(_wgmma_function(name, int(c.args[3].value), c.name.split("_")[-1],
                                   int(c.args[4].value), int(c.args[5].value)))
    return "\n".join(out) + "\n"


def _addr(printer, e) -> str:
    if not isinstance(e, ir.Load):
        raise NotImplementedError(f"an address operand must be a buffer element, got {e!r}")
    return f"&{e.buffer.name}[{printer.expr(e.indices[0])}]"


def print_intrinsic(printer, e: ir.Call) -> str | None:
    """The CUDA text of sm_90a intrinsic ``e`` (flattened IR), or None if it is not one.
    ``printer.tensor_maps`` maps a TMA copy's :func:`tma_key` to its kernel parameter."""
    a = e.args
    name = e.name
    if name == "ptx_mbarrier_init":
        return f"pc_mbar_init({_addr(printer, a[0])}, (int)({printer.expr(a[1])}))"
    if name == "ptx_fence_mbarrier_init":
        return "pc_fence_mbar_init()"
    if name == "ptx_mbarrier_arrive":
        return f"pc_mbar_arrive({_addr(printer, a[0])})"
    if name == "ptx_mbarrier_arrive_tx":
        return f"pc_mbar_arrive_tx({_addr(printer, a[0])}, (int)({printer.expr(a[1])}))"
    if name == "ptx_mbarrier_wait":
        return f"pc_mbar_wait({_addr(printer, a[0])}, (int)({printer.expr(a[1])}))"
    if name == "ptx_tma_load":
        _, box, _, coords = tma_parts(e)
        tmap = printer.tensor_maps[tma_key(e)]
        cs = ", ".join(f"(int)({printer.expr(i)})" for i in reversed(coords))
        return (f"pc_tma_load_{len(box)}d({_addr(printer, a[0])}, &{tmap}, "
                f"{_addr(printer, a[1])}, {cs})")
    if name == "ptx_fence_proxy_async":
        return "pc_fence_proxy_async()"
    if name == "pc_wgmma_desc":
        return (f"pc_wgmma_desc({_addr(printer, a[0])}, {a[1].value}u, {a[2].value}u, "
                f"{a[3].value}u)")
    if name in ("ptx_wgmma_f16", "ptx_wgmma_bf16"):
        return (f"{_wgmma_name(e)}({_addr(printer, a[0])}, (uint64_t)({printer.expr(a[1])}), "
                f"(uint64_t)({printer.expr(a[2])}), (int)({printer.expr(a[6])}))")
    if name == "ptx_wgmma_fence":
        return "pc_wgmma_fence()"
    if name == "ptx_wgmma_commit":
        return "pc_wgmma_commit()"
    if name == "ptx_wgmma_wait":
        return f"pc_wgmma_wait<{a[0].value}>()"
    if name == "ptx_wgmma_fence_operand":
        return f"pc_wgmma_fence_operand<{a[1].value}>({_addr(printer, a[0])})"
    if name == "ptx_setmaxnreg":
        return f"pc_setmaxnreg_{'inc' if a[0].value else 'dec'}<{a[1].value}>()"
    return None


# --------------------------------------------------------------------------- host code


def _c_dims(printer, m: TensorMap) -> tuple[list[str], list[str]]:
    """(dimensions innermost first, byte strides of dimensions 1..) as C expressions."""
    shape = list(m.buffer.shape)
    item = dt.itemsize(m.buffer.dtype)
    dims = [f"(cuuint64_t)({printer.expr(d)})" for d in reversed(shape)]
    strides = []
    for d in range(len(shape) - 1, 0, -1):
        stride = ir.shape_product(tuple(shape[d:]))
        strides.append(f"(cuuint64_t)({printer.expr(stride)}) * {item}")
    return dims, strides


def encode_maps_source(fname: str, sig: str, maps: list[TensorMap], printer) -> str:
    """``static int <fname>(<sig>, CUtensorMap* maps)``: encodes ``maps`` into
    ``maps[0..]`` (a map whose tensor's strides are not 16-byte multiples is left zero:
    the kernels copy those tiles without TMA)."""
    lines = [f"static int {fname}({sig}{', ' if sig else ''}CUtensorMap* maps) {{",
             "  int err = 0;"]
    for i, m in enumerate(maps):
        dims, strides = _c_dims(printer, m)
        rank = len(dims)
        box = ", ".join(str(b) for b in reversed(m.box))
        cond = printer.expr(strides_aligned(m.buffer))
        lines.append(f"  memset(&maps[{i}], 0, sizeof(CUtensorMap));")
        lines.append(f"  if ({cond}) {{  /* {m.buffer.name}: box {list(m.box)}, "
                     f"swizzle {m.swizzle} B */")
        lines.append(f"    if (((uintptr_t){m.buffer.name}) % 16 != 0) "
                     f"return (int)cudaErrorMisalignedAddress;")
        lines.append(f"    const cuuint64_t dims[{rank}] = {{{', '.join(dims)}}};")
        lines.append(f"    const cuuint64_t strides[{max(1, rank - 1)}] = "
                     f"{{{', '.join(strides) or '0'}}};")
        lines.append(f"    const cuuint32_t box[{rank}] = {{{box}}};")
        lines.append(f"    err = pc_encode_tmap(&maps[{i}], {TMAP_DTYPE[m.buffer.dtype]}, {rank}, "
                     f"(const void*){m.buffer.name}, dims, strides, box, "
                     f"{TMAP_SWIZZLE[m.swizzle]});")
        lines.append("    if (err != 0) return err;")
        lines.append("  }")
    lines.append("  return 0;")
    lines.append("}\n")
    return "\n".join(lines)
