"""Run generated CUDA on a real GPU through pycuda (optional: ``pip install polycomp[gpu]``).

pycuda is imported lazily, only when a :class:`CudaFunction` is created, so polycomp
works (and its tests run) on machines without an NVIDIA driver.  The ``.cu`` that
codegen emits is compiled to a cubin with nvcc (``-arch=sm_<target.cuda.sm>``), its
``extern "C"`` kernels are loaded, and a call launches them in order with the grid
computed from the symbolic sizes — the same geometry the host launcher in the ``.cu``
uses and the simulator executes.
"""
from __future__ import annotations

import numpy as np

from polycomp import dtypes as dt
from polycomp.errors import BuildError, TargetError
from polycomp.shapes import eval_int, infer_params

from .codegen import split_kernels


def gpu_available() -> bool:
    """True if pycuda imports and a CUDA device can be initialised."""
    try:
        import pycuda.driver as drv
        drv.init()
        return drv.Device.count() > 0
    except Exception:
        return False


def compile_cubin(source: str, sm: int) -> bytes:
    """The cubin of ``source`` for ``sm_<sm>``, memoised in the kernel cache
    (:mod:`polycomp.cache`, keyed by source, architecture and nvcc's version)."""
    from polycomp.cache import compiler_version, get_cache, make_key
    key = make_key("cubin", source, str(sm), compiler_version("nvcc"))
    return get_cache().get_or_build_bytes(key, ".cubin", lambda: _nvcc_cubin(source, sm),
                                          kind="cubin")


def _nvcc_cubin(source: str, sm: int) -> bytes:
    import os
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        cu = os.path.join(tmp, "k.cu")
        out = os.path.join(tmp, "k.cubin")
        with open(cu, "w") as f:
            f.write(source)
        r = subprocess.run(["nvcc", f"-arch=sm_{sm}", "-cubin", "-O3", "-o", out, cu],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"nvcc failed on generated CUDA:\n{r.stderr[-4000:]}")
        with open(out, "rb") as f:
            return f.read()


class CudaFunction:
    """A compiled CUDA kernel sequence callable with numpy arrays (returns numpy)."""

    def __init__(self, compiled):
        try:
            import pycuda.autoinit  # noqa: F401  (creates a context on device 0)
            import pycuda.driver as drv
        except Exception as e:  # ImportError, or no driver/device
            raise TargetError(f"running CUDA needs pycuda and an NVIDIA GPU ({e}); "
                              f"use polycomp.hw.cuda.simulator.simulate() without one") from None
        self.drv = drv
        self.ck = compiled
        self.func = compiled.final_ir
        self.temps, self.kernels = split_kernels(self.func)
        cubin = compile_cubin(compiled.source, compiled.target.cuda.sm)
        self.module = drv.module_from_buffer(cubin)
        self.handles = [self.module.get_function(k.name) for k in self.kernels]
        from .codegen import dynamic_shared
        for k, h in zip(self.kernels, self.handles):   # opt-in beyond 48 KiB of shared memory
            if dynamic_shared(k):
                h.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                k.shared_bytes)

    def __call__(self, *inputs, **params):
        from .codegen import dynamic_shared
        drv, f = self.drv, self.func
        arrays = [np.ascontiguousarray(np.asarray(a)) for a in inputs]
        for b, a in zip(f.inputs, arrays):
            if a.dtype != dt.to_numpy(b.dtype):
                raise TargetError(f"argument {b.name!r} must be {b.dtype}, got {a.dtype}")
        values = infer_params(f.params, f.inputs, arrays, params, outputs=f.outputs)
        dev = {}
        for b, a in zip(f.inputs, arrays):
            dev[b.name] = drv.to_device(a)
        outs = {}
        for b in list(f.outputs) + list(self.temps):
            shape = tuple(eval_int(d, values) for d in b.shape)
            host = np.empty(shape, dtype=dt.to_numpy(b.dtype))
            dev[b.name] = drv.mem_alloc(max(1, host.nbytes))
            if b in f.outputs:
                outs[b.name] = host
        for info, fn in zip(self.kernels, self.handles):
            grid = tuple(int(eval_int(g, values)) for g in info.grid)
            if min(grid) <= 0:   # empty iteration domain: nothing to launch
                continue
            args = ([np.int64(values[p.name]) for p in info.params]
                    + [dev[b.name] for b in info.buffers])
            fn(*args, block=tuple(info.block), grid=grid, shared=info.shared_bytes
               if dynamic_shared(info) else 0)
        drv.Context.synchronize()
        for name, host in outs.items():
            drv.memcpy_dtoh(host, dev[name])
        res = tuple(outs[b.name] for b in f.outputs)
        return res[0] if len(res) == 1 else res
