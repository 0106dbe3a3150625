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
from polycomp.hw.npu.sync import place_flags, plan_flags

#: (op, dtype, target, input shapes): cube, cube + epilogue, vector (plain, transposed
#: boxes, carried reduction), implicit-GEMM conv with an epilogue, phases
CASES = {
    "matmul": ("matmul", "float16", "npu-lite", [(40, 150), (150, 70)]),
    "matmul_bias_relu": ("matmul_bias_relu", "float16", "npu-lite",
                         [(40, 150), (150, 70), (70,)]),
    "softmax": ("softmax", "float16", "npu-lite", [(40, 70)]),
    "softmax_3d_1": ("softmax_3d_1", "float32", "npu-lite", [(3, 20, 21)]),
    "reduce_sum_3d_02_keep": ("reduce_sum_3d_02_keep", "float32", "npu-lite",
                              [(3, 600, 21)]),
    "conv2d_bias_relu": ("conv2d_bias_relu", "float16", "npu-lite",
                         [(2, 3, 13, 13), (5, 3, 3, 3), (5,)]),
    "attention": ("attention", "float32", "npu-lite", [(3, 9, 5), (3, 11, 5), (3, 11, 5)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_placed_flag_is_needed(case):
    op, dtype, target, shapes = CASES[case]
    ck = compile_kernel(OPS[op].kernel(dtype), target)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    prog = ck.final_ir.program
    simulate(ck, *arrays)                                # as placed: no race
    phases = prog.phases or (prog,)
    n = 0
    for k, ph in enumerate(phases):
        for f in plan_flags(ph.body):
            bad_phase = place_flags(ph, frozenset({f}))
            bad = bad_phase if not prog.phases else dataclasses.replace(prog, phases=tuple(
                bad_phase if j == k else p for j, p in enumerate(phases)))
            with pytest.raises(NpuRaceError, match=f"race on .*{f.src}->{f.dst}"):
                run_module(ck.final_ir.with_program(bad), ck.target, *arrays)
            n += 1
    assert n >= 4
