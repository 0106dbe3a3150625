"""CUDA code generation: one ``__global__`` kernel per ``kernel`` mark, plus host code.

The emitted ``.cu`` is self-contained:

* ``extern "C" __global__ void <name>_k<i>(params..., buffers...)`` per kernel.  A
  ``gpu_block`` loop prints as ``v = min + blockIdx.<axis>`` (the grid has exactly
  ``extent`` blocks on that axis), a ``gpu_thread`` loop as ``v = min + threadIdx.<axis>``
  guarded by ``threadIdx.<axis> < extent``;
* ``extern "C" void <name>_launch_config(params..., long long* cfg)`` writes
  ``grid.x, grid.y, grid.z, block.x, block.y, block.z`` for each kernel, computed from the
  symbolic sizes;
* ``extern "C" int <name>(params..., device pointers...)`` allocates the global
  temporaries, launches the kernels in order on the default stream and returns the
  first CUDA error (0 on success).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import TargetError
from polycomp.hw.clike import C_PRELUDE, CLikePrinter, legalize_names
from polycomp.hw.cuda.target import MAX_THREADS_PER_BLOCK, STATIC_SHARED
from polycomp.scheduler.common import marks

CUDA_HEADER = r"""#pragma nv_diag_suppress 177
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>
#define PC_INLINE static __host__ __device__ __forceinline__
""" + C_PRELUDE


@dataclass
class KernelInfo:
    """One ``__global__`` function: its body and launch geometry (IR expressions)."""
    name: str
    body: ir.Stmt
    grid: list = field(default_factory=lambda: [ir.IntImm(1)] * 3)
    block: list = field(default_factory=lambda: [1, 1, 1])
    params: tuple = ()
    buffers: tuple = ()
    shared_bytes: int = 0


_AXIS = {"x": 0, "y": 1, "z": 2}


class CudaPrinter(CLikePrinter):
    types = dt.CUDA_TYPES

    def value_type(self, dtype):
        if dtype in ("int8", "int32", "int64"):
            return "int64_t"
        if dtype == "bool":
            return "bool"
        return self.types[dt.compute_dtype(dtype)]

    def storage_type(self, dtype):
        return self.types[dtype]

    _TO_COMPUTE = {"float16": "__half2float", "bfloat16": "__bfloat162float"}
    _TO_STORAGE = {"float16": "__float2half", "bfloat16": "__float2bfloat16"}

    def to_compute(self, dtype, v):
        return f"{self._TO_COMPUTE[dtype]}({v})" if dtype in self._TO_COMPUTE else v

    def to_storage(self, dtype, v):
        return f"{self._TO_STORAGE[dtype]}({v})" if dtype in self._TO_STORAGE else v

    def intrinsic(self, e):
        from .ptx import print_intrinsic  # Tensor Core / cp.async PTX (inline asm)
        text = print_intrinsic(self, e)
        return text if text is not None else super().intrinsic(e)

    def math_call(self, name, args, dtype):
        if name == "rsqrt" and dt.compute_dtype(dtype) == "float32":
            return f"rsqrtf({args[0]})"
        return super().math_call(name, args, dtype)

    def for_(self, s):
        if s.kind == "gpu_block":
            axis = s.annotation("axis")
            self.emit("{")
            self.level += 1
            self.emit(f"const int64_t {s.var.name} = {self.expr(s.min)} + "
                      f"(int64_t)blockIdx.{axis};")
            self.nonneg.add(s.var) if _min_nonneg(s, self) else None
            self.stmt(s.body)
            self.level -= 1
            self.emit("}")
            return
        if s.kind == "gpu_thread":
            axis = s.annotation("axis")
            self.emit(f"if ((int64_t)threadIdx.{axis} < {self.expr(s.extent)}) {{")
            self.level += 1
            self.emit(f"const int64_t {s.var.name} = {self.expr(s.min)} + "
                      f"(int64_t)threadIdx.{axis};")
            self.nonneg.add(s.var) if _min_nonneg(s, self) else None
            self.stmt(s.body)
            self.level -= 1
            self.emit("}")
            return
        if s.kind == "unrolled":
            self.emit("#pragma unroll")
        super().for_(s)

    dynamic_smem = False      # set per kernel: shared arrays carved from extern memory
    smem_offset = 0

    def allocate(self, s):
        b = s.buffer
        ty = self.storage_type(b.dtype)
        size = self.expr(ir.shape_product(b.shape))
        if b.scope == "shared" and self.dynamic_smem:
            self.emit(f"{ty}* {b.name} = reinterpret_cast<{ty}*>(pc_dyn_smem + "
                      f"{self.smem_offset});")
            self.smem_offset += _round128(_const_bytes(b))
        elif b.scope == "shared":
            self.emit(f"__shared__ __align__(128) {ty} {b.name}[{size}];")
        elif b.scope == "local":
            self.emit(f"{ty} {b.name}[{size}];")
        else:
            raise TargetError(f"global allocation of {b.name} inside a CUDA kernel")
        self.stmt(s.body)


def _min_nonneg(s, printer):
    from polycomp.hw.clike import nonnegative
    return nonnegative(s.min, printer.nonneg)


# --------------------------------------------------------------------------- kernels


def split_kernels(func: ir.LoweredFunc) -> tuple[list, list[KernelInfo]]:
    """Peel the global Allocates and collect the kernels (``kernel`` marks), in order.

    Outside kernels only Blocks, Allocates and marks may appear (host code does not
    compute); a statement outside any kernel mark becomes a kernel of its own.
    """
    temps: list = []
    bodies: list = []

    def collect(s):
        if isinstance(s, ir.Allocate):
            temps.append(s.buffer)
            collect(s.body)
        elif isinstance(s, ir.Block):
            for x in s.stmts:
                collect(x)
        elif isinstance(s, ir.AttrStmt) and s.key == marks.KERNEL:
            bodies.append(s.body)
        elif isinstance(s, ir.AttrStmt):
            collect(s.body)
        else:
            bodies.append(s)
    collect(func.body)
    kernels: list = []
    for body in bodies:
        info = KernelInfo(f"{func.name}_k{len(kernels)}", body)
        _geometry(info)
        kernels.append(info)
    for info in kernels:
        info.params = tuple(v for v in func.params)
        used = {b.name for b in ir.buffers_of(info.body)}
        info.buffers = tuple(b for b in func.args + tuple(temps) if b.name in used)
    return temps, kernels


def _geometry(info: KernelInfo) -> None:
    def fn(n):
        if isinstance(n, ir.For) and n.kind == "gpu_block":
            ax = _AXIS[n.annotation("axis")]
            for v in ir.free_vars(n.extent):
                if not v.is_param:
                    raise TargetError(f"kernel {info.name}: the number of blocks on axis "
                                      f"{n.annotation('axis')} depends on {v.name}")
            info.grid[ax] = n.extent
        elif isinstance(n, ir.For) and n.kind == "gpu_thread":
            info.block[_AXIS[n.annotation("axis")]] = int(n.annotation("threads"))
    ir.walk(info.body, fn)
    threads = info.block[0] * info.block[1] * info.block[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise TargetError(f"kernel {info.name} uses {threads} threads per block "
                          f"(> {MAX_THREADS_PER_BLOCK})")
    shared = []
    ir.walk(info.body, lambda n: shared.append(n.buffer) if isinstance(n, ir.Allocate)
            and n.buffer.scope == "shared" else None)
    info.shared_bytes = sum(_round128(_const_bytes(b)) for b in shared)


def dynamic_shared(info: "KernelInfo") -> bool:
    """Static ``__shared__`` arrays may total the shared level's capacity (48 KiB per
    block, :mod:`.target`); beyond that (up to the architecture's opt-in limit) a kernel
    takes dynamic shared memory, carved into its shared arrays, and the host raises the
    kernel's limit with cudaFuncSetAttribute."""
    return info.shared_bytes > STATIC_SHARED


def _const_bytes(b) -> int:
    n = 1
    for d in b.shape:
        if not isinstance(d, ir.IntImm):
            return 0
        n *= d.value
    return n * dt.itemsize(b.dtype)


def _round128(n: int) -> int:
    return -(-n // 128) * 128


def _kernel_signature(info: KernelInfo, p: CudaPrinter, writes: set) -> str:
    parts = [f"int64_t {v.name}" for v in info.params]
    for b in info.buffers:
        const = "const " if b.name not in writes else ""
        parts.append(f"{const}{p.storage_type(b.dtype)}* __restrict__ {b.name}")
    return ", ".join(parts)


def _written(stmt) -> set:
    out = set()
    ir.walk(stmt, lambda n: out.add(n.buffer.name) if isinstance(n, ir.Store) else None)
    return out


def emit_cuda(func: ir.LoweredFunc) -> str:
    """The ``.cu`` source of a GPU-mapped, flattened function (buffers and variables whose
    names CUDA C++ cannot use are renamed; arguments keep their order)."""
    func = legalize_names(func, taken=kernel_function_names)
    out = [f"// generated by polycomp: kernel {func.name}", CUDA_HEADER]
    from .ptx import PTX_PRELUDE, uses_ptx
    if uses_ptx(func.body):
        out.append(PTX_PRELUDE)
    out.extend(function_sources(func))
    return "\n".join(out)


def function_sources(func: ir.LoweredFunc) -> list[str]:
    """The ``__global__`` kernels and the host code (launch configuration, kernel count,
    launcher) of a legalized ``func``, in the order :func:`emit_cuda` prints them after
    the header (multi-version modules print several functions this way,
    :mod:`.multiversion`)."""
    temps, kernels = split_kernels(func)
    out = []
    for info in kernels:
        p = CudaPrinter()
        p.dynamic_smem = dynamic_shared(info)
        p.stmt(info.body)
        threads = info.block[0] * info.block[1] * info.block[2]
        sig = _kernel_signature(info, p, _written(info.body))
        out.append(f'extern "C" __global__ void __launch_bounds__({threads}) {info.name}({sig}) {{')
        if p.dynamic_smem:
            out.append("  extern __shared__ __align__(128) unsigned char pc_dyn_smem[];")
        out.extend(p.lines)
        out.append("}\n")
    out.append(_host_code(func, temps, kernels))
    return out


def kernel_function_names(func) -> tuple:
    """Names of the functions the ``.cu`` defines (no buffer or variable may take them)."""
    n = len(split_kernels(func)[1])
    return (func.name, f"{func.name}_launch_config", f"{func.name}_num_kernels") + \
        tuple(f"{func.name}_k{i}" for i in range(n))


def host_args(func: ir.LoweredFunc, p: CudaPrinter) -> list[str]:
    """The parameter declarations of a host entry point with ``func``'s signature:
    ``int64_t`` sizes, then device pointers (inputs ``const``)."""
    return [f"int64_t {v.name}" for v in func.params] + [
        f"{'const ' if b in func.inputs else ''}{p.storage_type(b.dtype)}* {b.name}"
        for b in func.args]


def _host_code(func, temps, kernels) -> str:
    p = CudaPrinter()
    params = [f"int64_t {v.name}" for v in func.params]
    lines = []
    cfg_sig = ", ".join(params + ["long long* cfg"])
    lines.append(f'extern "C" void {func.name}_launch_config({cfg_sig}) {{')
    for k, info in enumerate(kernels):
        for a in range(3):
            lines.append(f"  cfg[{6 * k + a}] = (long long)({p.expr(info.grid[a])});")
        for a in range(3):
            lines.append(f"  cfg[{6 * k + 3 + a}] = {info.block[a]};")
    lines.append("}\n")
    lines.append(f'extern "C" int {func.name}_num_kernels(void) {{ return {len(kernels)}; }}\n')
    args = host_args(func, p)
    lines.append(f'extern "C" int {func.name}({", ".join(args) or "void"}) {{')
    lines.append("  cudaError_t err = cudaSuccess;")
    for b in temps:
        size = p.expr(ir.shape_product(b.shape))
        ty = p.storage_type(b.dtype)
        lines.append(f"  {ty}* {b.name} = 0;")
        lines.append(f"  err = cudaMalloc((void**)&{b.name}, sizeof({ty}) * (size_t)({size}));")
        lines.append("  if (err != cudaSuccess) return (int)err;")
    for info in kernels:
        g = ", ".join(f"(unsigned)({p.expr(x)})" for x in info.grid)
        b = ", ".join(str(x) for x in info.block)
        call_args = [v.name for v in info.params] + [
            f"({p.storage_type(x.dtype)}*){x.name}" if x in func.inputs else x.name
            for x in info.buffers]
        grid_vals = [p.expr(x) for x in info.grid]
        nonempty = " && ".join(f"({x}) > 0" for x in grid_vals if x != "1") or "1"
        smem = ""
        if dynamic_shared(info):
            smem = f", {info.shared_bytes}"
            lines.append(f"  err = cudaFuncSetAttribute({info.name}, "
                         f"cudaFuncAttributeMaxDynamicSharedMemorySize, {info.shared_bytes});")
            lines.append("  if (err != cudaSuccess) return (int)err;")
        lines.append(f"  if ({nonempty})  /* an empty iteration domain launches nothing */")
        lines.append(f"    {info.name}<<<dim3({g}), dim3({b}){smem}>>>({', '.join(call_args)});")
        lines.append("  err = cudaGetLastError();")
        lines.append("  if (err != cudaSuccess) return (int)err;")
    for b in temps:
        lines.append(f"  cudaFree({b.name});")
    lines.append("  return (int)cudaDeviceSynchronize();")
    lines.append("}")
    return "\n".join(lines) + "\n"
