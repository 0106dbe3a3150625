"""``polycomp bench polybench --target cuda``: the PolyBench/C kernels through the CUDA
target (the C front end's host loops of kernel launches), on a GPU.

Per kernel (read as :mod:`benchmarks.polybench` reads it, at ``--dataset``):

* **paths**: the per-nest choice of ``scop-gpu-groups`` (``T:cont``, ``T:elem``, ``B``);
* **min threads**: the threads of the least parallel launch of the host program at the
  dataset's sizes (1: a single-thread kernel), computed without a GPU;
* on a GPU (pycuda or cupy and a CUDA device; otherwise the rows say ``no GPU`` and the
  command exits with status 2 after the static columns): **rel err** of the CUDA
  result against the ``cpu`` target's on the same random data; **gpu s**: the host
  entry point (every launch of the host program, host loops included) timed around
  the call with a device synchronisation, the arrays already on the device, best and
  median of ``--rounds`` (the in-out arrays are not reset between rounds); **gcc s**:
  the same function built by ``gcc -O3 -march=native`` on the host CPU (one thread);
  **speedup** = gcc time / GPU time.

Without a GPU, ``python scripts/c_cuda_measure.py --polybench DIR --quick --bundle B``
checks every kernel on the simulator and packs a GPU check bundle for
``scripts/gpu_bundle_run.py``.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from benchmarks.polybench import (
    REF_FLAGS,
    Compiled,
    Reference,
    extract,
    fresh,
    make_data,
    rel_err,
    run_once,
    select_kernels,
    timed,
)


@dataclass
class CudaRow:
    name: str
    read: bool = False
    paths: str = ""
    min_threads: int | None = None
    launches: int | None = None
    compile_s: float | None = None
    rel_err: float | None = None
    gpu_s: tuple | None = None
    gcc_s: tuple | None = None
    speedup: float | None = None
    error: str = ""
    notes: list = field(default_factory=list)


def static_facts(ck, sizes: dict) -> tuple[str, int | None, int]:
    """(paths, threads of the least parallel launch, launches) of a compiled kernel at
    ``sizes``, from its host program (no GPU needed)."""
    from polycomp.hw.cuda.codegen import host_program, launch_sequence
    from polycomp.shapes import eval_int
    notes = [n for n in ck.notes.get("scop-gpu-groups", [])
             if "tiled GPU pipeline" in n or "baseline mapping" in n]
    paths = " ".join("B" if "baseline" in n else "T:" + n.split("(")[2].split(")")[0][:4]
                     for n in notes)
    _temps, program = host_program(ck.final_ir)
    least, n = None, 0
    for info, env in launch_sequence(program, dict(sizes)):
        n += 1
        grid = [int(eval_int(g, env)) for g in info.grid]
        threads = int(np.prod(grid)) * int(np.prod(info.block))
        if threads > 0:
            least = threads if least is None else min(least, threads)
    return paths, least, n


def _device_time(fn, k, data: dict, rounds: int) -> tuple:
    """Best and median seconds of the host entry point on device-resident arrays."""
    import ctypes

    from polycomp.shapes import infer_params
    f = fn.func
    # the caller's arrays (inputs, then the in-out outputs), as CudaFunction takes them
    arrays = [np.ascontiguousarray(data[n]) for n in k.inputs + k.outputs]
    values = infer_params(f.params, f.inputs, arrays,
                          {p: data[p] for p in k.params}, outputs=f.outputs)
    dev, _outs = fn.device_arrays(arrays, values)
    args = [ctypes.c_int64(values[p.name]) for p in f.params] + \
        [ctypes.c_void_p(fn.api.pointer(dev[b.name])) for b in f.args]
    times = []
    for _ in range(rounds):
        fn.api.synchronize()
        t0 = time.perf_counter()
        fn.entry(*args)
        fn.api.synchronize()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def bench_kernel_cuda(name: str, path: str, pb: str, dataset: str, rounds: int,
                      workdir: str, gpu: bool) -> CudaRow:
    from polycomp.driver import compile_kernel
    from polycomp.frontend.c_reader import read_c_kernel
    row = CudaRow(name)
    try:
        pk = extract(path, pb, dataset)
        k = read_c_kernel(pk.source, pk.func)
        row.read = True
        t0 = time.perf_counter()
        ck = compile_kernel(k, "cuda")
        row.compile_s = time.perf_counter() - t0
        sizes = {p: pk.sizes[p] for p in k.params}
        row.paths, row.min_threads, row.launches = static_facts(ck, sizes)
    except Exception as e:  # noqa: BLE001 - reported in the table
        row.error = f"{type(e).__name__}: {str(e)[:300]}"
        return row
    if not gpu:
        row.error = "no GPU"
        return row
    try:
        from polycomp.hw.registry import backend_for
        fn = backend_for(ck.target).load(ck)
        data = make_data(k, pk)
        cpu = Compiled(k, "cpu", None)
        want = run_once(cpu.f.cfunc, cpu.args, data)
        work = fresh(data)
        got = fn(*[work[n] for n in k.inputs + k.outputs],
                 **{p: work[p] for p in k.params})
        got = got if isinstance(got, tuple) else (got,)
        row.rel_err = max((rel_err(g, want[n]) for n, g in zip(k.outputs, got)), default=0.0)
        gcc = Reference(k, pk, "gcc", REF_FLAGS, workdir)
        row.gcc_s = timed(gcc.fn, gcc.args, data, rounds)
        row.gpu_s = _device_time(fn, k, fresh(data), rounds) if fn.entry is not None else None
        if row.gpu_s:
            row.speedup = row.gcc_s[0] / row.gpu_s[0]
    except Exception as e:  # noqa: BLE001
        row.error = f"{type(e).__name__}: {str(e)[:300]}"
    return row


def run_cuda(pb: str, dataset: str, rounds: int, kernels=None, progress=None) -> dict:
    from polycomp.hw.cuda.launcher import gpu_available
    found = select_kernels(pb, kernels)
    gpu = gpu_available()
    rows = []
    with tempfile.TemporaryDirectory(prefix="polycomp-polybench-cuda-") as workdir:
        for name, path in found:
            row = bench_kernel_cuda(name, path, pb, dataset, rounds, workdir, gpu)
            rows.append(row)
            if progress is not None:
                progress(row)
    return {"dataset": dataset, "rounds": rounds, "gpu": gpu,
            "rows": [r.__dict__ for r in rows], "kernels": len(rows),
            "read": sum(r.read for r in rows),
            "single_thread": sorted(r.name for r in rows if r.min_threads == 1)}


def table_cuda(res: dict) -> str:
    def f(x, spec=".2f"):
        return "-" if x is None else format(x, spec)
    lines = ["| kernel | paths | launches | min threads | rel err vs cpu | gpu s (best / "
             "median) | gcc -O3 s | speedup |", "|---|---|---:|---:|---|---|---|---|"]
    for r in res["rows"]:
        gpu = f"{f(r['gpu_s'][0], '.4g')} / {f(r['gpu_s'][1], '.4g')}" if r["gpu_s"] else \
            (r["error"] or "-")
        lines.append(f"| {r['name']} | {r['paths'] or '-'} | {r['launches'] or '-'} | "
                     f"{r['min_threads'] or '-'} | {f(r['rel_err'], '.1e')} | {gpu} | "
                     f"{f(r['gcc_s'][0], '.4g') if r['gcc_s'] else '-'} | "
                     f"{f(r['speedup'])} |")
    lines.append(f"\nread {res['read']}/{res['kernels']}; single-thread launches in: "
                 f"{', '.join(res['single_thread']) or 'none'}"
                 + ("" if res["gpu"] else "; no GPU here (static columns only)"))
    return "\n".join(lines)
