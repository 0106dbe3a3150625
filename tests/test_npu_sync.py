"""Pipe flags placed by dependence analysis (the ``npu-sync`` pass, ``hw/npu/sync.py``):
the programs as placed run race-free in the simulator, and leaving out any one placed set/wait pair
makes the simulator report a race (or, for a pair that orders a slot's reuse, a race
on that slot) — so no flag is missing and none is redundant."""
import dataclasses

import numpy as np
import pytest

from polycomp.driver import compile_kernel
from polycomp.errors import NpuRaceError
from polycomp.frontend.ops import OPS
from polycomp.hw.npu.backend import run_module, simulate
from polycomp.hw.npu.sync import place_barriers, place_flags, plan_flags, strip_flags

#: (op, dtype, target, input shapes): cube, cube + epilogue, vector (plain, transposed
#: boxes, carried reduction), implicit-GEMM conv with an epilogue, phases; each large
#: enough that every core of ``npu-lite`` runs three tiles or more of each loop (a flag
#: carried from one tile to the one two later only matters from the third on)
CASES = {
    "matmul": ("matmul", "float16", "npu-lite", [(40, 150), (150, 200)]),
    "matmul_bias_relu": ("matmul_bias_relu", "float16", "npu-lite",
                         [(40, 150), (150, 200), (200,)]),
    "softmax": ("softmax", "float16", "npu-lite", [(300, 70)]),
    "softmax_3d_1": ("softmax_3d_1", "float32", "npu-lite", [(3, 7, 400)]),
    "reduce_sum_3d_02_keep": ("reduce_sum_3d_02_keep", "float32", "npu-lite",
                              [(3, 600, 21)]),
    "conv2d_bias_relu": ("conv2d_bias_relu", "float16", "npu-lite",
                         [(2, 3, 23, 23), (37, 3, 3, 3), (37,)]),
    "attention": ("attention", "float32", "npu-lite",
                  [(16, 40, 5), (16, 50, 5), (16, 50, 5)]),
    # rows longer than UB: the chunked form (two passes; three with gamma/beta chunks)
    "softmax_long": ("softmax", "float16", "npu-lite", [(12, 1100)]),
    "layernorm_long": ("layernorm", "float16", "npu-lite", [(12, 700), (700,), (700,)]),
}


def _not_taken(prog, ck, arrays) -> set[int]:
    """The top-level guard loop (``ls`` / ``ll``) of a vector program with the long-row
    form that this call does not run (its flags cannot be shown needed by it)."""
    from polycomp.hw.npu.backend import _bind, host_tiling
    from polycomp.hw.npu.program import Loop
    body = strip_flags(prog.body)
    if not prog.tiling.long:
        return set()
    sizes, _ = _bind(ck.final_ir, arrays)
    lr = host_tiling(ck.final_ir.program, ck.target, sizes).programs[id(prog)]["LR"]
    return {k for k, s in enumerate(body)
            if isinstance(s, Loop) and s.var == ("ll" if lr == 0 else "ls")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_placed_flag_is_needed(case):
    """Every program of the kernel (each phase's AIC and AIV programs), one flag at a
    time left out: the simulator reports a race between exactly that pipe pair."""
    op, dtype, target, shapes = CASES[case]
    ck = compile_kernel(OPS[op].kernel(dtype), target)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    kernel = ck.final_ir.program
    simulate(ck, *arrays)                                # as placed: no race
    n = 0
    for prog in kernel.programs:
        skip = _not_taken(prog, ck, arrays)
        for f in plan_flags(strip_flags(prog.body)):
            if f.path and f.path[0] in skip:
                continue
            def drop(p, f=f, prog=prog):
                if p is not prog:
                    return p
                q = place_flags(p, frozenset({f}))
                return dataclasses.replace(q, body=place_barriers(q.body))
            bad = kernel.map_programs(drop)
            with pytest.raises(NpuRaceError, match=f"race on .*{f.src}->{f.dst}"):
                run_module(ck.final_ir.with_program(bad), ck.target, *arrays)
            n += 1
    assert n >= 4
