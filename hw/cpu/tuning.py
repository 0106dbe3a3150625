"""Tuning on the C targets (``Backend.tuning_space`` / ``Backend.measure``,
docs/tuning.md): the configurations ``polycomp tune`` tries and how a trial is timed.

The space offers only knobs that change this kernel's code, found by compiling: the GEMM
blocking knobs (:func:`polycomp.scheduler.tuning.space.cpu_space`: packing, register
block, ``KC``/``NC``/``MC``) when two packed points with different blockings give
different sources (kernels with a contraction backbone), else ``parallel`` alone when
turning it over changes the source (kernels with parallel loops), else nothing.

A trial is the kernel built by gcc, run once to warm up, then timed ``repeat`` times
(the best counts), with the OpenMP thread count the tuning process runs kernels with
(``target.cpu.threads``): the loaded kernel's ``threads``
(:class:`polycomp.hw.cpu.build.CFunction`: ``omp_set_num_threads`` in the timing thread
before each call; Ray workers start with ``OMP_NUM_THREADS=1``), and the count it
actually ran with (``omp_get_max_threads``) goes into the record.
"""
from __future__ import annotations

import time
from collections.abc import Mapping

from polycomp.scheduler.tuning.space import Measurement, TuningSpace


def tuning_space(ck, shape: Mapping[str, int]) -> TuningSpace:
    from polycomp.driver import compile_kernel
    from polycomp.scheduler.tuning.cost_model import gemm_dims
    from polycomp.scheduler.tuning.space import OptionPoint, cpu_space
    t = ck.target
    threads = t.cpu.threads if t.cpu is not None else 1
    name = ck.kernel.name

    def source(options) -> str:
        return compile_kernel(ck.kernel, t, options).source
    points = cpu_space(t, gemm_dims(ck.final_ir, dict(shape))) if ck.final_ir.outputs else []
    packed = [p for p in points if p.packing and p.parallel == ck.options.parallel]
    if len(packed) >= 2 and source(packed[0].options()) != source(packed[-1].options()):
        return TuningSpace(tuple(points), threads=threads,
                           about="the CPU GEMM space: packing, parallel, register block, "
                                 "KC, NC, MC")
    if source({"parallel": not ck.options.parallel}) != ck.source:
        return TuningSpace((OptionPoint((("parallel", False),)),
                            OptionPoint((("parallel", True),))), threads=threads,
                           about=f"parallel only: the GEMM blocking knobs do not change "
                                 f"kernel {name}'s code (no contraction backbone)")
    return TuningSpace((), about=f"no knob changes kernel {name}'s code on {t.name}: the "
                                 f"GEMM blocking knobs apply to kernels with a contraction "
                                 f"backbone, parallel to kernels with parallel loops")


def measure(backend, ck, arrays: list, shape: Mapping[str, int], repeat: int,
            threads: int | None = None) -> Measurement:
    f = backend.load(ck)
    omp = f.openmp
    before = int(omp.get()) if omp is not None else None
    if threads:
        f.threads = int(threads)
    try:
        out = f(*arrays, **shape)
        ran = int(omp.get()) if omp is not None else threads
        best = float("inf")
        for _ in range(max(1, repeat)):
            t0 = time.perf_counter()
            f(*arrays, **shape)
            best = min(best, time.perf_counter() - t0)
    finally:
        if omp is not None and before is not None:
            omp.set(before)                 # this thread's setting as it was
    return Measurement(best, out if isinstance(out, tuple) else (out,), ran)
