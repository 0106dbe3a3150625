"""Run generated CUDA on a real GPU through pycuda (``pip install polycomp[gpu]``) or cupy.

The device API (pycuda first, else cupy: :func:`device_api`) is imported lazily, only
when a :class:`CudaFunction` is created, so polycomp
works (and its tests run) on machines without an NVIDIA driver.  The ``.cu`` that
codegen emits is compiled to a cubin with nvcc (``-arch=sm_<target.cuda.sm>``), its
``extern "C"`` kernels are loaded, and a call launches them in order with the grid
computed from the symbolic sizes — the same geometry the host launcher in the ``.cu``
uses and the simulator executes.  Kernels with TMA tensor maps (target ``cuda-sm90a``)
take ``__grid_constant__ CUtensorMap`` parameters that only the ``.cu``'s host code
encodes: their ``.cu`` is built as a shared library instead (``nvcc -shared``, for
``sm_<target.cuda.arch>``) and its host entry point is called through ctypes with the
device pointers.
"""
from __future__ import annotations

import numpy as np

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import BuildError, TargetError
from polycomp.shapes import eval_int, infer_params

from .codegen import host_program, launch_sequence, program_kernels


class _PyCuda:
    """pycuda as the device API of :class:`CudaFunction`."""
    name = "pycuda"

    def __init__(self):
        import pycuda.autoinit  # noqa: F401  (creates a context on device 0)
        import pycuda.driver as drv
        self.drv = drv

    def compute_capability(self) -> int:
        major, minor = self.drv.Context.get_device().compute_capability()
        return 10 * major + minor

    def load(self, cubin: bytes):
        return self.drv.module_from_buffer(cubin)

    def function(self, module, name: str, dynamic_shared: int):
        h = module.get_function(name)
        if dynamic_shared:                       # opt-in beyond 48 KiB of shared memory
            h.set_attribute(self.drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                            dynamic_shared)
        return h

    def to_device(self, host: np.ndarray):
        return self.drv.to_device(host)

    def swap_flag(self, module, name: str) -> int:
        """The module's ``__device__ int name``, set to 0."""
        ptr, _ = module.get_global(name)
        host = np.zeros(1, np.int32)
        self.drv.memcpy_dtoh(host, ptr)
        self.drv.memcpy_htod(ptr, np.zeros(1, np.int32))
        return int(host[0])

    def alloc(self, nbytes: int):
        return self.drv.mem_alloc(max(1, nbytes))

    def launch(self, fn, args: list, grid: tuple, block: tuple, shared: int) -> None:
        fn(*args, block=block, grid=grid, shared=shared)

    def synchronize(self) -> None:
        self.drv.Context.synchronize()

    def to_host(self, host: np.ndarray, dev) -> None:
        self.drv.memcpy_dtoh(host, dev)

    def pointer(self, dev) -> int:
        return int(dev)


class _CuPy:
    """cupy as the device API of :class:`CudaFunction` (images that ship cupy and no
    pycuda)."""
    name = "cupy"

    def __init__(self):
        import cupy
        cupy.cuda.runtime.getDeviceCount()      # raises without a driver or device
        self.cp = cupy

    def compute_capability(self) -> int:
        return int(self.cp.cuda.Device().compute_capability)

    def load(self, cubin: bytes):
        # cupy loads a module from a file, lazily: the file must outlive the first
        # get_function, so it lives in a directory owned by this object
        import os
        import tempfile
        if not hasattr(self, "_dir"):
            self._dir = tempfile.TemporaryDirectory(prefix="polycomp-cubin-")
        path = os.path.join(self._dir.name, f"m{len(os.listdir(self._dir.name))}.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        return self.cp.RawModule(path=path)

    def function(self, module, name: str, dynamic_shared: int):
        h = module.get_function(name)
        if dynamic_shared:
            h.max_dynamic_shared_size_bytes = dynamic_shared
        return h

    def swap_flag(self, module, name: str) -> int:
        """The module's ``__device__ int name``, set to 0."""
        mp = module.get_global(name)
        host = np.zeros(1, np.int32)
        mp.copy_to_host(host.ctypes.data, 4)
        zero = np.zeros(1, np.int32)
        mp.copy_from_host(zero.ctypes.data, 4)
        return int(host[0])

    def to_device(self, host: np.ndarray):
        # as raw bytes: cupy has no bfloat16, and a kernel sees only the pointer
        return self.cp.asarray(np.ascontiguousarray(host).reshape(-1).view(np.uint8))

    def alloc(self, nbytes: int):
        return self.cp.empty(max(1, nbytes), dtype=self.cp.uint8)

    def launch(self, fn, args: list, grid: tuple, block: tuple, shared: int) -> None:
        fn(grid, block, tuple(args), shared_mem=shared)

    def synchronize(self) -> None:
        self.cp.cuda.runtime.deviceSynchronize()

    def to_host(self, host: np.ndarray, dev) -> None:
        host[...] = self.cp.asnumpy(dev).view(host.dtype).reshape(host.shape)

    def pointer(self, dev) -> int:
        return int(dev.data.ptr)


def device_api():
    """The first of pycuda, cupy that imports and finds a CUDA device; TargetError if
    neither does (the message names both and the simulator)."""
    errors = []
    for api in (_PyCuda, _CuPy):
        try:
            return api()
        except Exception as e:  # ImportError, or no driver/device
            errors.append(f"{api.name}: {type(e).__name__}: {e}"[:200])
    raise TargetError("running CUDA needs an NVIDIA GPU and pycuda (polycomp[gpu]) or cupy ("
                      + "; ".join(errors) + "); use polycomp.hw.cuda.simulator.simulate() "
                      "without one")


def device_arch(target_sm: int, device_sm: int) -> int:
    """The architecture to build a cubin for: the target's (the code may use any feature
    up to it) on a device of the same major version, else the device's own when it is
    newer (a cubin runs only on its own major version; sm_80 code is valid sm_90 code).
    A device older than the target cannot run the code: TargetError."""
    if device_sm < target_sm:
        raise TargetError(f"the code is built for sm_{target_sm} and this GPU is "
                          f"sm_{device_sm}; compile for an older CUDA target")
    return target_sm if device_sm // 10 == target_sm // 10 else device_sm


def gpu_available() -> bool:
    """True if pycuda or cupy imports and a CUDA device can be initialised."""
    try:
        device_api()
        return True
    except TargetError:
        return False


def nvcc_flags(fmad: bool = True) -> list[str]:
    """nvcc's optimisation flags: ``-O3``, and ``-fmad=false`` (no ``a*b + c``
    contracted into an FMA) for a kernel compiled with ``fp_exact``."""
    return ["-O3"] + ([] if fmad else ["-fmad=false"])


def compile_cubin(source: str, sm: int, fmad: bool = True) -> bytes:
    """The cubin of ``source`` for ``sm_<sm>``, memoised in the kernel cache
    (:mod:`polycomp.cache`, keyed by source, architecture, flags and nvcc's version)."""
    from polycomp.cache import compiler_version, get_cache, make_key
    key = make_key("cubin", source, str(sm), " ".join(nvcc_flags(fmad)),
                   compiler_version("nvcc"))
    return get_cache().get_or_build_bytes(key, ".cubin",
                                          lambda: _nvcc_cubin(source, sm, fmad),
                                          kind="cubin")


def compile_shared(source: str, arch: str, fmad: bool = True) -> bytes:
    """The shared library (host entry points and kernels) of ``source`` for
    ``sm_<arch>`` (``"90a"``: ``-gencode=arch=compute_90a,code=sm_90a``), memoised in
    the kernel cache."""
    from polycomp.cache import compiler_version, get_cache, make_key
    key = make_key("cuda-so", source, arch, " ".join(nvcc_flags(fmad)),
                   compiler_version("nvcc"))
    return get_cache().get_or_build_bytes(key, ".so",
                                          lambda: _nvcc_shared(source, arch, fmad),
                                          kind="cuda-so")


def _nvcc_shared(source: str, arch: str, fmad: bool = True) -> bytes:
    import os
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        cu = os.path.join(tmp, "k.cu")
        out = os.path.join(tmp, "k.so")
        with open(cu, "w") as f:
            f.write(source)
        r = subprocess.run(["nvcc", f"-gencode=arch=compute_{arch},code=sm_{arch}",
                            *nvcc_flags(fmad), "-shared", "-Xcompiler", "-fPIC", "-o", out,
                            cu, "-lcudart"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"nvcc failed on generated CUDA:\n{r.stderr[-4000:]}")
        with open(out, "rb") as f:
            return f.read()


def _nvcc_cubin(source: str, sm: int, fmad: bool = True) -> bytes:
    import os
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        cu = os.path.join(tmp, "k.cu")
        out = os.path.join(tmp, "k.cubin")
        with open(cu, "w") as f:
            f.write(source)
        r = subprocess.run(["nvcc", f"-arch=sm_{sm}", "-cubin", *nvcc_flags(fmad), "-o", out,
                            cu],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"nvcc failed on generated CUDA:\n{r.stderr[-4000:]}")
        with open(out, "rb") as f:
            return f.read()


class CudaFunction:
    """A compiled CUDA kernel sequence callable with numpy arrays (returns numpy)."""

    def __init__(self, compiled):
        from .codegen import dynamic_shared
        self.api = device_api()
        self.ck = compiled
        self.func = compiled.final_ir
        self.temps, self.program = host_program(self.func)
        self.kernels = program_kernels(self.program)
        self.entry = None
        if any(k.tensor_maps for k in self.kernels):   # sm_90a TMA: the host entry point
            self.entry = self._host_entry(compiled)
            return
        cubin = compile_cubin(compiled.source,
                              device_arch(compiled.target.cuda.sm, self.api.compute_capability()),
                              fmad=not compiled.options.fp_exact)
        self.module = self.api.load(cubin)
        self.handles = [self.api.function(self.module, k.name,
                                          k.shared_bytes if dynamic_shared(k) else 0)
                        for k in self.kernels]

    def device_arrays(self, arrays: list, values: dict) -> tuple[dict, dict]:
        """Device copies of ``arrays`` (the inputs) and fresh device memory for the
        outputs and temporaries: ``(device buffers by name, host outputs by name)``."""
        f = self.func
        dev = {b.name: self.api.to_device(a) for b, a in zip(f.inputs, arrays)}
        outs = {}
        for b in list(f.outputs) + list(self.temps):
            shape = tuple(eval_int(d, values) for d in b.shape)
            host = np.empty(shape, dtype=dt.to_numpy(b.dtype))
            dev[b.name] = self.api.alloc(host.nbytes)
            if b in f.outputs:
                outs[b.name] = host
        return dev, outs

    def launches(self, dev: dict, values: dict) -> list:
        """``(function, args, grid, block, dynamic shared bytes)`` per non-empty kernel
        (not for kernels with TMA tensor maps: those run through the call, whose host
        entry point encodes the maps)."""
        from .codegen import dynamic_shared
        if self.entry is not None:
            raise TargetError(f"{self.func.name}: kernels with TMA tensor maps "
                              f"({self.ck.target.name}) launch through the host entry "
                              f"point; call the function instead")
        out = []
        handle = {info.name: fn for info, fn in zip(self.kernels, self.handles)}
        for info, env in launch_sequence(self.program, values):   # host loops iterated
            fn = handle[info.name]
            grid = tuple(int(eval_int(g, env)) for g in info.grid)
            if min(grid) <= 0:   # empty iteration domain: nothing to launch
                continue
            args = ([np.int64(env[p.name]) for p in info.params]
                    + [dev[b.name] for b in info.buffers])
            out.append((fn, args, grid, tuple(info.block),
                        info.shared_bytes if dynamic_shared(info) else 0))
        return out

    def _host_entry(self, compiled):
        """The ``.cu``'s host entry point, from a shared library (see the module
        docstring)."""
        import ctypes
        import os
        import tempfile
        cu = compiled.target.cuda
        if self.api.compute_capability() != cu.sm:
            raise TargetError(f"{compiled.target.name} code runs on sm_{cu.arch} GPUs only; "
                              f"this GPU is sm_{self.api.compute_capability()}")
        lib = compile_shared(compiled.source, cu.arch, fmad=not compiled.options.fp_exact)
        self._dir = tempfile.TemporaryDirectory(prefix="polycomp-so-")
        path = os.path.join(self._dir.name, "k.so")
        with open(path, "wb") as f:
            f.write(lib)
        fn = getattr(ctypes.CDLL(path), self.func.name)
        fn.restype = ctypes.c_int
        return fn

    def __call__(self, *inputs, **params):
        f = self.func
        arrays = [np.ascontiguousarray(np.asarray(a)) for a in inputs]
        for b, a in zip(f.inputs, arrays):
            if a.dtype != dt.to_numpy(b.dtype):
                raise TargetError(f"argument {b.name!r} must be {b.dtype}, got {a.dtype}")
        values = infer_params(f.params, f.inputs, arrays, params, outputs=f.outputs)
        dev, outs = self.device_arrays(arrays, values)
        if self.entry is not None:
            import ctypes
            rc = self.entry(*[ctypes.c_int64(values[p.name]) for p in f.params],
                            *[ctypes.c_void_p(self.api.pointer(dev[b.name])) for b in f.args])
            if rc != 0:
                raise TargetError(f"{f.name}: the host entry point returned CUDA error {rc}")
        else:
            gathers = "pc_gather_index(" in self.ck.source
            if gathers:
                self.api.swap_flag(self.module, "pc_index_error")
            for fn, args, grid, block, shared in self.launches(dev, values):
                self.api.launch(fn, args, grid, block, shared)
            if gathers and self.api.swap_flag(self.module, "pc_index_error"):
                from polycomp.errors import IndexOutOfRangeError
                raise IndexOutOfRangeError(
                    f"{f.name}: a gather index{ir.gathered_into(f)} is out of range of "
                    f"the dimension it indexes "
                    f"(sizes {', '.join(f'{k}={v}' for k, v in values.items())}); the kernel "
                    f"read element 0 instead and its outputs are not valid")
        self.api.synchronize()
        for name, host in outs.items():
            self.api.to_host(host, dev[name])
        res = tuple(outs[b.name] for b in f.outputs)
        return res[0] if len(res) == 1 else res
