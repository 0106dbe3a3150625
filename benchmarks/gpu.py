"""Real-GPU benchmark of the tensor-core path (``polycomp bench gpu``).

Where a CUDA GPU and pycuda or cupy are present: TFLOP/s of the fp16 GEMM polycomp generates
(mma.m16n8k16, 128x128x32 tiles, 3-stage cp.async pipeline, f32 accumulation) for
``M = N = K = 128 * i``, as a ratio to cuBLAS in the same run (through cupy, when it is
installed), and the fused ``relu(A @ B + bias)`` kernel against the unfused pair (GEMM,
then a bias+relu kernel).  Kernel time only: inputs stay on the device, each
configuration is timed with CUDA events over ``--repeat`` launches after a warm-up.

Without a GPU it says so and exits 0 (nothing is measured).  Options: ``--sizes 1,2,4,8``
(multiples of 128), ``--repeat N``, ``--json``.
"""
from __future__ import annotations

import argparse
import json

import numpy as np


def _device_runner(ck):
    """A callable launching ``ck``'s kernels on device arrays (kernel time only)."""
    from polycomp.hw.cuda.launcher import CudaFunction
    from polycomp.shapes import infer_params
    fn = CudaFunction(ck)

    def prepare(*host):
        f = fn.func
        arrays = [np.ascontiguousarray(a) for a in host]
        values = infer_params(f.params, f.inputs, arrays, {})
        dev, _outs = fn.device_arrays(arrays, values)
        launches = fn.launches(dev, values)

        def run():
            for h, args, grid, block, smem in launches:
                fn.api.launch(h, args, grid, block, smem)
        return run, (fn.api, dev)
    return prepare


def _time(run, repeat, api=None):
    """Seconds per call of ``run`` (CUDA events through cupy, or pycuda's)."""
    run()
    if api is None or api.name == "pycuda":
        import pycuda.driver as drv
        drv.Context.synchronize()
        start, end = drv.Event(), drv.Event()
        start.record()
        for _ in range(repeat):
            run()
        end.record()
        end.synchronize()
        return start.time_till(end) / 1e3 / repeat
    import cupy
    cupy.cuda.runtime.deviceSynchronize()
    s, e = cupy.cuda.Event(), cupy.cuda.Event()
    s.record()
    for _ in range(repeat):
        run()
    e.record()
    e.synchronize()
    return cupy.cuda.get_elapsed_time(s, e) / 1e3 / repeat


def _bias_relu_kernel():
    """The unfused epilogue: ``relu(C + bias)`` on the float32 GEMM result."""
    from polycomp.frontend import dsl, ops
    N, M = dsl.sym("N M")
    return ops._kernel("bias_relu", lambda C, bias: ops.relu(ops.bias_add(C, bias)),
                       C=ops._T((N, M), "float32"), bias=ops._T((M,), "float16"))


def run(sizes, repeat) -> dict:
    from polycomp.driver import compile_kernel
    from polycomp.frontend import ops
    rows = []
    gemm = compile_kernel(ops.matmul_kernel("float16"), "cuda")
    fused = compile_kernel(ops.matmul_bias_relu_kernel("float16"), "cuda")
    epi = compile_kernel(_bias_relu_kernel(), "cuda")
    try:
        import cupy
    except Exception:
        cupy = None
    rng = np.random.default_rng(0)
    for i in sizes:
        n = 128 * i
        a = rng.standard_normal((n, n)).astype(np.float16)
        b = rng.standard_normal((n, n)).astype(np.float16)
        bias = rng.standard_normal(n).astype(np.float16)
        flops = 2.0 * n ** 3
        run_g, (api, _dev) = _device_runner(gemm)(a, b)
        t_gemm = _time(run_g, repeat, api)
        row = {"n": n, "polycomp_tflops": flops / t_gemm / 1e12}
        if cupy is not None:
            ca, cb = cupy.asarray(a), cupy.asarray(b)

            def cublas(ca=ca, cb=cb):
                cupy.matmul(ca, cb)
            cublas()
            cupy.cuda.Device().synchronize()
            s, e = cupy.cuda.Event(), cupy.cuda.Event()
            s.record()
            for _ in range(repeat):
                cublas()
            e.record()
            e.synchronize()
            t_cublas = cupy.cuda.get_elapsed_time(s, e) / 1e3 / repeat
            row["cublas_tflops"] = flops / t_cublas / 1e12
            row["ratio_to_cublas"] = t_cublas / t_gemm
        run_f, _ = _device_runner(fused)(a, b, bias)
        t_fused = _time(run_f, repeat, api)
        c32 = np.zeros((n, n), np.float32)
        run_e, _ = _device_runner(epi)(c32, bias)
        t_unfused = t_gemm + _time(run_e, repeat, api)
        row.update(fused_ms=t_fused * 1e3, unfused_ms=t_unfused * 1e3,
                   fusion_speedup=t_unfused / t_fused)
        rows.append(row)
    return {"rows": rows, "cublas": cupy is not None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="polycomp bench gpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,2,4,8,16", help="multiples of 128 (comma-separated)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from polycomp.hw.cuda.launcher import gpu_available
    if not gpu_available():
        print("polycomp bench gpu: no CUDA GPU available here (an NVIDIA driver and pycuda "
              "or cupy are needed); nothing was measured")
        return 0
    res = run([int(x) for x in args.sizes.split(",") if x], args.repeat)
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    print(f"{'N=M=K':>7} {'polycomp TFLOP/s':>17} {'cuBLAS TFLOP/s':>15} {'ratio':>6} "
          f"{'fused ms':>9} {'unfused ms':>11} {'fusion x':>9}")
    for r in res["rows"]:
        cb = f"{r['cublas_tflops']:15.2f} {r['ratio_to_cublas']:6.2f}" if "cublas_tflops" in r \
            else f"{'-':>15} {'-':>6}"
        print(f"{r['n']:7d} {r['polycomp_tflops']:17.2f} {cb} {r['fused_ms']:9.3f} "
              f"{r['unfused_ms']:11.3f} {r['fusion_speedup']:9.2f}")
    if not res["cublas"]:
        print("(cupy is not installed: no cuBLAS comparison)")
    return 0
