"""Schedule time of the stencil pass: ``polycomp bench stencil_schedule --polybench DIR
[--dataset LARGE] [--repeat 3] [--kernels a,b]``.

For each PolyBench/C stencil (jacobi-1d, jacobi-2d, heat-3d, seidel-2d, fdtd-2d, adi)
the ``kernel_*`` function is read as :mod:`polycomp.benchmarks.polybench` reads it, the
passes before ``scop-stencil`` of the ``cpu`` target (``scop-gemm``) run once, and
``scop-stencil`` (:mod:`polycomp.scheduler.cpu.scop_stencil`: the skew and the diamond
row read off the dependence cone, tiling and isl's legality checks) is timed alone, a
fresh compile state each time; one line per kernel with the best and the median of
``--repeat`` runs and the pass's note (the tile shape and sizes it chose, or why it
left the nest).  Nothing here is a test: it prints what it measured.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

STENCILS = ("jacobi-1d", "jacobi-2d", "heat-3d", "seidel-2d", "fdtd-2d", "adi")


def time_pass(k, repeat: int) -> tuple[float, float, list[str]]:
    """(best s, median s, notes) of ``scop-stencil`` on kernel ``k``'s model."""
    from polycomp.hw.options import CpuOptions
    from polycomp.hw.target import get_target
    from polycomp.scheduler.cpu.scop_gemm import ScopGemmPass
    from polycomp.scheduler.cpu.scop_stencil import ScopStencilPass
    from polycomp.state import CompileState
    model = k.polyhedral_model()
    target = get_target("cpu")
    times: list[float] = []
    notes: list[str] = []
    for _ in range(repeat):
        ctx = CompileState(model, target, CpuOptions.from_mapping({}, target.name))
        sched = ScopGemmPass().run(model.initial_schedule, ctx)
        t0 = time.perf_counter()
        ScopStencilPass().run(sched, ctx)
        times.append(time.perf_counter() - t0)
        notes = list(ctx.notes.get("scop-stencil", []))
    return min(times), statistics.median(times), notes


def main(argv=None) -> int:
    from polycomp.benchmarks import polybench as pbm
    from polycomp.frontend.c_reader import read_c_kernel
    ap = argparse.ArgumentParser(prog="polycomp bench stencil_schedule",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--polybench", metavar="DIR", default=os.environ.get("POLYBENCH_DIR"),
                    help="an unpacked PolyBench/C 4.2.1 folder (or $POLYBENCH_DIR)")
    ap.add_argument("--dataset", default="LARGE", choices=pbm.DATASETS)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kernels", default=",".join(STENCILS))
    a = ap.parse_args(argv)
    if not a.polybench:
        print(pbm.HOW_TO_GET, file=sys.stderr)
        return 2
    wanted = [x for x in a.kernels.split(",") if x]
    for name, path in pbm.select_kernels(a.polybench, wanted):
        pk = pbm.extract(path, a.polybench, a.dataset)
        k = read_c_kernel(pk.source, pk.func)
        best, med, notes = time_pass(k, a.repeat)
        print(f"{name}: scop-stencil {best * 1e3:.1f} ms best / {med * 1e3:.1f} ms median "
              f"of {a.repeat}; {' | '.join(notes) or 'no note'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
