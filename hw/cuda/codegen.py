"""CUDA code generation: one ``__global__`` kernel per ``kernel`` mark, plus host code.

The emitted ``.cu`` is self-contained:

* ``extern "C" __global__ void <name>_k<i>(params..., buffers...)`` per kernel.  A
  ``gpu_block`` loop prints as ``v = min + blockIdx.<axis>`` (the grid has exactly
  ``extent`` blocks on that axis), a ``gpu_thread`` loop as ``v = min + threadIdx.<axis>``
  guarded by ``threadIdx.<axis> < extent``;
* ``extern "C" void <name>_launch_config(params..., long long* cfg)`` writes
  ``grid.x, grid.y, grid.z, block.x, block.y, block.z`` for each kernel, computed from the
  symbolic sizes (-1 for an extent that varies with a host loop variable);
* ``extern "C" int <name>(params..., device pointers...)`` allocates the global
  temporaries, launches the kernels in order on the default stream and returns the
  first CUDA error (0 on success).  Sequential loops outside the kernels (a stencil's
  time loop, a pivot loop: :class:`HostLoop`) are host loops around the launches; their
  variables are extra ``int64_t`` parameters of the kernels below them and may appear
  in those kernels' grids.
"""
from __future__ import annotations

from collections.abc import Sequence
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
""" + C_PRELUDE + r"""/* set when a gather index is outside its dimension (the load reads element 0
   instead); the launcher clears it before and checks it after the kernels
   (IndexOutOfRangeError) */
__device__ int pc_index_error = 0;
static __device__ __forceinline__ int64_t pc_gather_index(int64_t v, int64_t n) {
  if ((unsigned long long)v < (unsigned long long)n) return v;
  pc_index_error = 1;
  return 0;
}
"""


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
    # sm_90a: the kernel's TMA tensor maps (``__grid_constant__ CUtensorMap`` parameters
    # after the buffers, :func:`~.ptx_hopper.tensor_maps`) and the alignment of its
    # shared buffers (1024: the 128-byte swizzle pattern); 0 for other kernels
    tensor_maps: tuple = ()
    smem_align: int = 0


_AXIS = {"x": 0, "y": 1, "z": 2}


class CudaPrinter(CLikePrinter):
    types = dt.CUDA_TYPES
    # the shared-memory swizzle ``pc_xor`` of index values is an index (hw/cuda/ptx.py)
    index_calls = frozenset({"pc_xor"})

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

    tensor_maps: dict = {}    # set per sm_90a kernel: TMA key -> CUtensorMap parameter

    def intrinsic(self, e):
        if e.name == ir.GATHER_INDEX:  # checked: see CUDA_HEADER's pc_gather_index
            return f"pc_gather_index({self.expr(e.args[0])}, {self.expr(e.args[1])})"
        from .ptx import print_intrinsic  # Tensor Core / cp.async PTX (inline asm)
        text = print_intrinsic(self, e)
        if text is None and e.name.startswith(("ptx_", "pc_wgmma")):
            from .ptx_hopper import print_intrinsic as print_hopper  # sm_90a
            text = print_hopper(self, e)
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
        if s.kind == "vectorized" and s.annotation("vector") is not None:
            from .rowreduce import print_vector_loop  # aligned 16-byte row accesses
            print_vector_loop(self, s)
            return
        super().for_(s)

    dynamic_smem = False      # set per kernel: shared arrays carved from extern memory
    smem_offset = 0
    smem_align = 0            # sm_90a TMA kernels: shared arrays aligned to this (1024)

    def allocate(self, s):
        b = s.buffer
        ty = self.storage_type(b.dtype)
        size = self.expr(ir.shape_product(b.shape))
        if b.scope == "shared" and self.dynamic_smem and self.smem_align:
            self.emit(f"{ty}* {b.name} = reinterpret_cast<{ty}*>(pc_smem_base + "
                      f"{self.smem_offset});")
            self.smem_offset += _round(_const_bytes(b), self.smem_align)
        elif b.scope == "shared" and self.dynamic_smem:
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


@dataclass
class HostLoop:
    """A sequential loop of the host code (``for var in [min, min + extent)``) around
    kernel launches: a stencil's time loop, a factorisation's pivot loop.  Its variable
    is an extra scalar parameter of every kernel below (:attr:`KernelInfo.params`)."""
    var: ir.Var
    min: ir.Expr
    extent: ir.Expr
    body: list


@dataclass
class HostIf:
    """A host-side condition (on sizes and host loop variables) around launches."""
    cond: ir.Expr
    then: list
    orelse: list


def _has_kernel(s) -> bool:
    found: list = []
    ir.walk(s, lambda n: found.append(1) if isinstance(n, ir.AttrStmt)
            and n.key == marks.KERNEL else None)
    return bool(found)


def host_program(func: ir.LoweredFunc) -> tuple[list, list]:
    """The global temporaries and the host program of ``func``: a list of steps, each a
    :class:`KernelInfo` (one launch), a :class:`HostLoop` or a :class:`HostIf` (with
    steps inside), in execution order.

    Outside kernels only Blocks, Allocates, marks, and serial loops and conditions that
    hold kernel marks may appear (host code computes loop bounds and conditions only); a
    statement outside any kernel mark that holds none becomes a kernel of its own.  A
    kernel's parameters are the function's sizes, then the variables of the host loops
    around it (outermost first).
    """
    temps: list = []
    kernels: list = []
    used: list = []     # per kernel: the names of the buffers it accesses

    def kernel(body, host_vars) -> KernelInfo:
        info = KernelInfo(f"{func.name}_k{len(kernels)}", body)
        info.params = tuple(func.params) + tuple(host_vars)
        used.append(_geometry(info))
        kernels.append(info)
        return info

    def collect(s, host_vars, out):
        if isinstance(s, ir.Allocate) and not host_vars:
            temps.append(s.buffer)
            collect(s.body, host_vars, out)
        elif isinstance(s, ir.Block):
            for x in s.stmts:
                collect(x, host_vars, out)
        elif isinstance(s, ir.AttrStmt) and s.key == marks.KERNEL:
            out.append(kernel(s.body, host_vars))
        elif isinstance(s, ir.AttrStmt):
            collect(s.body, host_vars, out)
        elif isinstance(s, ir.For) and s.kind == "serial" and _has_kernel(s.body):
            loop = HostLoop(s.var, s.min, s.extent, [])
            collect(s.body, host_vars + [s.var], loop.body)
            out.append(loop)
        elif isinstance(s, ir.IfThenElse) and _has_kernel(s):
            cond = HostIf(s.cond, [], [])
            collect(s.then, host_vars, cond.then)
            if s.orelse is not None:
                collect(s.orelse, host_vars, cond.orelse)
            out.append(cond)
        else:
            out.append(kernel(s, host_vars))
    program: list = []
    collect(func.body, [], program)
    for info, names in zip(kernels, used):
        info.buffers = tuple(b for b in func.args + tuple(temps) if b.name in names)
    return temps, program


def depends_on_host_loop(info: KernelInfo, e: ir.Expr) -> bool:
    """Does ``e`` (a grid extent of ``info``) depend on a host loop variable (a pivot
    loop's triangular nest: ``<name>_launch_config`` writes -1 for it)?"""
    return any(not v.is_param for v in ir.free_vars(e))


def program_kernels(program: list) -> list:
    """The kernels of a host program, each once, in program order."""
    out: list = []
    for step in program:
        if isinstance(step, HostLoop):
            out += program_kernels(step.body)
        elif isinstance(step, HostIf):
            out += program_kernels(step.then) + program_kernels(step.orelse)
        else:
            out.append(step)
    return out


def has_host_control(program: list) -> bool:
    """Does the host program hold loops or conditions (not only a list of launches)?"""
    return any(not isinstance(step, KernelInfo) for step in program)


def host_condition(e: ir.Expr, values: dict) -> bool:
    """The value of a host condition (comparisons of integer expressions of the sizes
    and host loop variables, joined by ``&&``/``||``/``!``)."""
    from polycomp.shapes import eval_int
    if isinstance(e, ir.Binary) and e.op in ir.LOGIC_OPS:
        first = host_condition(e.a, values)
        return (first and host_condition(e.b, values)) if e.op == "&&" else \
            (first or host_condition(e.b, values))
    if isinstance(e, ir.Binary) and e.op in ir.CMP_OPS:
        a, b = int(eval_int(e.a, values)), int(eval_int(e.b, values))
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b,
                "!=": a != b}[e.op]
    if isinstance(e, ir.Unary) and e.op == "!":
        return not host_condition(e.a, values)
    if isinstance(e, ir.IntImm):
        return bool(e.value)
    raise TargetError(f"host condition {e} is not a comparison of sizes")


def launch_sequence(program: list, values: dict):
    """Yield ``(kernel, values)`` for every launch the host program makes, in order:
    host loops iterated and conditions evaluated with the sizes ``values`` (the loop
    variables added to each launch's values)."""
    from polycomp.shapes import eval_int
    for step in program:
        if isinstance(step, HostLoop):
            lo = int(eval_int(step.min, values))
            for v in range(lo, lo + int(eval_int(step.extent, values))):
                yield from launch_sequence(step.body, {**values, step.var.name: v})
        elif isinstance(step, HostIf):
            taken = step.then if host_condition(step.cond, values) else step.orelse
            yield from launch_sequence(taken, values)
        else:
            yield step, values


def split_kernels(func: ir.LoweredFunc) -> tuple[list, list[KernelInfo]]:
    """Peel the global Allocates and collect the kernels (``kernel`` marks), in order,
    each once (host loops around them: :func:`host_program`)."""
    temps, program = host_program(func)
    return temps, program_kernels(program)


def _geometry(info: KernelInfo) -> set:
    """Fill ``info``'s grid, block, shared bytes and tensor maps; return the names of
    the buffers its body loads, stores or allocates.  One walk of the body collects
    what each of these needs (the GPU loops in pre-order, the shared allocations, the
    names of the calls, the buffers): a kernel's body is large once its point loops
    are unrolled, and one walk per question cost a CUDA fuzzer kernel's emit 1 s."""
    gpu_loops: list = []
    shared: list = []
    calls: set = set()
    used: set = set()

    def fn(n):
        if isinstance(n, ir.For):
            if n.kind in ("gpu_block", "gpu_thread"):
                gpu_loops.append(n)
        elif isinstance(n, (ir.Load, ir.Store)):
            used.add(n.buffer.name)
        elif isinstance(n, ir.Allocate):
            used.add(n.buffer.name)
            if n.buffer.scope == "shared":
                shared.append(n.buffer)
        elif isinstance(n, ir.Call):
            calls.add(n.name)
    ir.walk(info.body, fn)
    for n in gpu_loops:
        if n.kind == "gpu_block":
            ax = _AXIS[n.annotation("axis")]
            for v in ir.free_vars(n.extent):
                if not v.is_param and v not in info.params:   # sizes, host loop variables
                    raise TargetError(f"kernel {info.name}: the number of blocks on axis "
                                      f"{n.annotation('axis')} depends on {v.name}")
            info.grid[ax] = n.extent
        else:
            info.block[_AXIS[n.annotation("axis")]] = int(n.annotation("threads"))
    threads = info.block[0] * info.block[1] * info.block[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise TargetError(f"kernel {info.name} uses {threads} threads per block "
                          f"(> {MAX_THREADS_PER_BLOCK})")
    from .ptx_hopper import tensor_maps
    # (tensor maps come from ptx_tma_load calls only: without one, none)
    info.tensor_maps = tuple(tensor_maps(info.body)) if "ptx_tma_load" in calls else ()
    if info.tensor_maps or "pc_wgmma_desc" in calls:
        # sm_90a: buffers aligned to the 128-byte swizzle pattern (1024 B), carved from
        # dynamic shared memory whose base the kernel aligns (up to 1024 B skipped)
        info.smem_align = SWIZZLE_PATTERN_ALIGN
        info.shared_bytes = sum(_round(_const_bytes(b), SWIZZLE_PATTERN_ALIGN)
                                for b in shared) + SWIZZLE_PATTERN_ALIGN
    else:
        info.shared_bytes = sum(_round128(_const_bytes(b)) for b in shared)
    return used


#: the alignment of sm_90a shared buffers that TMA writes and wgmma reads swizzled
SWIZZLE_PATTERN_ALIGN = 1024


def dynamic_shared(info: "KernelInfo") -> bool:
    """Static ``__shared__`` arrays may total the shared level's capacity (48 KiB per
    block, :mod:`.target`); beyond that (up to the architecture's opt-in limit) a kernel
    takes dynamic shared memory, carved into its shared arrays, and the host raises the
    kernel's limit with cudaFuncSetAttribute.  sm_90a kernels whose buffers need the
    1024-byte alignment of the swizzle pattern always take dynamic shared memory."""
    return info.shared_bytes > STATIC_SHARED or bool(info.smem_align)


def _const_bytes(b) -> int:
    n = 1
    for d in b.shape:
        if not isinstance(d, ir.IntImm):
            return 0
        n *= d.value
    return n * dt.itemsize(b.dtype)


def _round128(n: int) -> int:
    return -(-n // 128) * 128


def _round(n: int, a: int) -> int:
    return -(-n // a) * a


def _kernel_signature(info: KernelInfo, p: CudaPrinter, writes: set) -> str:
    parts = [f"int64_t {v.name}" for v in info.params]
    for b in info.buffers:
        const = "const " if b.name not in writes else ""
        parts.append(f"{const}{p.storage_type(b.dtype)}* __restrict__ {b.name}")
    for i in range(len(info.tensor_maps)):
        parts.append(f"const __grid_constant__ CUtensorMap pc_tmap{i}")
    return ", ".join(parts)


def _written(stmt) -> set:
    out = set()
    ir.walk(stmt, lambda n: out.add(n.buffer.name) if isinstance(n, ir.Store) else None)
    return out


def emit_cuda(func: ir.LoweredFunc) -> str:
    """The ``.cu`` source of a GPU-mapped, flattened function (buffers and variables whose
    names CUDA C++ cannot use are renamed; arguments keep their order)."""
    # the host program of the function whose names are checked: the one printed when
    # the names need no change (the usual case: final IR is legalized already)
    checked: list = []

    def taken(f):
        hp = host_program(f)
        checked.append((f, hp))
        return _function_names(f, program_kernels(hp[1]))
    func = legalize_names(func, taken=taken)
    out = [f"// generated by polycomp: kernel {func.name}", CUDA_HEADER]
    from .ptx import PTX_PRELUDE, uses_ptx
    from .ptx_hopper import prelude, uses_hopper
    hopper = uses_hopper(func.body)
    if uses_ptx(func.body) or hopper:
        out.append(PTX_PRELUDE)
    if hopper:     # sm_90a: mbarrier, TMA, wgmma, setmaxnreg; host tensor-map encoding
        out.append(prelude(func.body))
    out.extend(function_sources(func, checked[0][1] if checked and checked[0][0] is func
                                else None))
    return "\n".join(out)


def function_sources(func: ir.LoweredFunc, hosted: tuple[list, list] | None = None
                     ) -> list[str]:
    """The ``__global__`` kernels and the host code (launch configuration, kernel count,
    launcher) of a legalized ``func``, in the order :func:`emit_cuda` prints them after
    the header (multi-version modules print several functions this way,
    :mod:`.multiversion`).  ``hosted``: ``host_program(func)`` when the caller has it."""
    temps, program = hosted if hosted is not None else host_program(func)
    kernels = program_kernels(program)
    out = []
    for info in kernels:
        p = CudaPrinter()
        p.dynamic_smem = dynamic_shared(info)
        p.smem_align = info.smem_align
        from .ptx_hopper import uses_call
        p.tensor_maps = {m.key: f"pc_tmap{i}" for i, m in enumerate(info.tensor_maps)}
        p.stmt(info.body)
        threads = info.block[0] * info.block[1] * info.block[2]
        sig = _kernel_signature(info, p, _written(info.body))
        # setmaxnreg takes effect only under a register cap at entry: one block per SM
        bounds = f"{threads}, 1" if uses_call(info.body, "ptx_setmaxnreg") else f"{threads}"
        out.append(f'extern "C" __global__ void __launch_bounds__({bounds}) {info.name}({sig}) {{')
        if p.dynamic_smem:
            out.append("  extern __shared__ __align__(128) unsigned char pc_dyn_smem[];")
        if p.dynamic_smem and p.smem_align:
            a = p.smem_align
            out.append(f"  unsigned char* pc_smem_base = pc_dyn_smem + (({a}u - (pc_smem("
                       f"pc_dyn_smem) & {a - 1}u)) & {a - 1}u);")
        out.extend(p.lines)
        out.append("}\n")
    out.append(_host_code(func, temps, program))
    return out


def kernel_function_names(func) -> tuple:
    """Names of the functions the ``.cu`` defines (no buffer or variable may take them)."""
    return _function_names(func, split_kernels(func)[1])


def _function_names(func, kernels: list) -> tuple:
    """:func:`kernel_function_names` of ``func`` given its kernels."""
    n = len(kernels)
    names = (func.name, f"{func.name}_launch_config", f"{func.name}_num_kernels") + \
        tuple(f"{func.name}_k{i}" for i in range(n))
    if any(k.tensor_maps for k in kernels):     # sm_90a: the tensor-map helpers
        names += (f"{func.name}_tensormaps", f"{func.name}_num_tensormaps",
                  f"{func.name}_encode_maps", "pc_maps", "pc_smem_base")
    return names


def host_args(func: ir.LoweredFunc, p: CudaPrinter) -> list[str]:
    """The parameter declarations of a host entry point with ``func``'s signature:
    ``int64_t`` sizes, then device pointers (inputs ``const``)."""
    return [f"int64_t {v.name}" for v in func.params] + [
        f"{'const ' if b in func.inputs else ''}{p.storage_type(b.dtype)}* {b.name}"
        for b in func.args]


def _host_code(func, temps, program) -> str:
    kernels = program_kernels(program)
    p = CudaPrinter()
    params = [f"int64_t {v.name}" for v in func.params]
    lines = []
    cfg_sig = ", ".join(params + ["long long* cfg"])
    lines.append(f'extern "C" void {func.name}_launch_config({cfg_sig}) {{')
    for k, info in enumerate(kernels):
        for a in range(3):
            if depends_on_host_loop(info, info.grid[a]):
                lines.append(f"  cfg[{6 * k + a}] = -1;  /* varies with a host loop */")
                continue
            lines.append(f"  cfg[{6 * k + a}] = (long long)({p.expr(info.grid[a])});")
        for a in range(3):
            lines.append(f"  cfg[{6 * k + 3 + a}] = {info.block[a]};")
    lines.append("}\n")
    lines.append(f'extern "C" int {func.name}_num_kernels(void) {{ return {len(kernels)}; }}\n')
    args = host_args(func, p)
    maps = [m for info in kernels for m in info.tensor_maps]
    names = ", ".join([v.name for v in func.params] + [b.name for b in func.args])
    if maps:      # sm_90a: the TMA tensor maps, encoded from the arguments
        from .ptx_hopper import encode_maps_source
        lines.append(encode_maps_source(f"{func.name}_encode_maps", ", ".join(args), maps, p))
        lines.append(f'extern "C" int {func.name}_num_tensormaps(void) {{ return {len(maps)}; }}\n')
        lines.append(f'extern "C" int {func.name}_tensormaps({", ".join(args + ["void* out"])}) '
                     f'{{ return {func.name}_encode_maps({names}{", " if names else ""}'
                     f'(CUtensorMap*)out); }}\n')
    lines.append(f'extern "C" int {func.name}({", ".join(args) or "void"}) {{')
    lines.append("  cudaError_t err = cudaSuccess;")
    if maps:
        lines.append(f"  CUtensorMap pc_maps[{len(maps)}];")
        lines.append(f"  err = (cudaError_t){func.name}_encode_maps({names}{', ' if names else ''}"
                     f"pc_maps);")
        lines.append("  if (err != cudaSuccess) return (int)err;")
    for b in temps:
        size = p.expr(ir.shape_product(b.shape))
        ty = p.storage_type(b.dtype)
        lines.append(f"  {ty}* {b.name} = 0;")
        lines.append(f"  err = cudaMalloc((void**)&{b.name}, sizeof({ty}) * (size_t)({size}));")
        lines.append("  if (err != cudaSuccess) return (int)err;")
    first_map = {}
    for info in kernels:
        first_map[info.name] = sum(len(k.tensor_maps) for k in kernels[:kernels.index(info)])
    _host_steps(func, program, p, first_map, lines, 1)
    for b in temps:
        lines.append(f"  cudaFree({b.name});")
    lines.append("  return (int)cudaDeviceSynchronize();")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _host_steps(func, steps, p: CudaPrinter, first_map: dict, lines: list, level: int) -> None:
    """Print the launches of the host program ``steps`` (loops and conditions around
    them) into ``lines`` at indentation ``level``."""
    pad = "  " * level
    for step in steps:
        if isinstance(step, HostLoop):
            v, lo = step.var.name, p.expr(step.min)
            lines.append(f"{pad}for (int64_t {v} = {lo}; {v} < {lo} + ({p.expr(step.extent)}); "
                         f"{v}++) {{")
            _host_steps(func, step.body, p, first_map, lines, level + 1)
            lines.append(f"{pad}}}")
            continue
        if isinstance(step, HostIf):
            lines.append(f"{pad}if ({p.expr(step.cond)}) {{")
            _host_steps(func, step.then, p, first_map, lines, level + 1)
            if step.orelse:
                lines.append(f"{pad}}} else {{")
                _host_steps(func, step.orelse, p, first_map, lines, level + 1)
            lines.append(f"{pad}}}")
            continue
        info = step
        g = ", ".join(f"(unsigned)({p.expr(x)})" for x in info.grid)
        b = ", ".join(str(x) for x in info.block)
        call_args = [v.name for v in info.params] + [
            f"({p.storage_type(x.dtype)}*){x.name}" if x in func.inputs else x.name
            for x in info.buffers]
        call_args += [f"pc_maps[{first_map[info.name] + i}]"
                      for i in range(len(info.tensor_maps))]
        grid_vals = [p.expr(x) for x in info.grid]
        nonempty = " && ".join(f"({x}) > 0" for x in grid_vals if x != "1") or "1"
        smem = ""
        if dynamic_shared(info):
            smem = f", {info.shared_bytes}"
            lines.append(f"{pad}err = cudaFuncSetAttribute({info.name}, "
                         f"cudaFuncAttributeMaxDynamicSharedMemorySize, {info.shared_bytes});")
            lines.append(f"{pad}if (err != cudaSuccess) return (int)err;")
        lines.append(f"{pad}if ({nonempty})  /* an empty iteration domain launches nothing */")
        lines.append(f"{pad}  {info.name}<<<dim3({g}), dim3({b}){smem}>>>({', '.join(call_args)});")
        lines.append(f"{pad}err = cudaGetLastError();")
        lines.append(f"{pad}if (err != cudaSuccess) return (int)err;")


# ------------------------------------------------------------ multi-version modules


def _result_type(p: CudaPrinter, dtype: str) -> str:
    if dtype == "void":
        return "void"
    return "int64_t" if dtype == "int64" else p.storage_type(dtype)


def host_function(mf: ir.ModuleFunction) -> list[str]:
    """An ``extern "C"`` host function of the module (selector, dispatcher)."""
    p = CudaPrinter()
    p.stmt(mf.func.body)
    args = ", ".join(host_args(mf.func, p)) or "void"
    head = f'extern "C" {_result_type(p, mf.result)} {mf.func.name}({args}) {{'
    return [head, *p.lines, "}\n"]


def emit_module(module: ir.LoweredModule, versions: Sequence) -> str:
    from .ptx import PTX_PRELUDE, uses_ptx
    n = len(module.of_role(ir.VERSION))
    out = [f"// generated by polycomp: kernel {module.name}, {n} versions, their selector "
           f"and dispatchers (one module)", CUDA_HEADER]
    from .ptx_hopper import prelude, uses_hopper
    bodies = [mf.func.body for mf in module.of_role(ir.VERSION)]
    hopper = any(uses_hopper(b) for b in bodies)
    if hopper or any(uses_ptx(b) for b in bodies):
        out.append(PTX_PRELUDE)
    if hopper:     # sm_90a versions: the device helpers every version's forms need
        out.append(prelude(ir.Block(tuple(bodies))))
    for mf in module.functions:
        if mf.comment:
            out.append(f"// {mf.comment}")
        if mf.role == ir.VERSION:
            out.extend(function_sources(legalize_names(mf.func, taken=kernel_function_names)))
        else:
            out.extend(host_function(mf))
    return "\n".join(out)
