"""NPU: Fixpipe's parameters (``FixpipeParamsV220``, L0C -> GM with NZ2ND) on column
tails.  ``nSize`` is a tile's valid columns -- any value in [0, 4095] with NZ2ND, a
multiple of 16 only for an NZ result (docs/npu.md, "Fixpipe's nSize", cites the
sources) -- and the simulator refuses what the docs' table does not allow (ranges,
overlapping rows, an NZ nSize not a multiple of 16).  Matmuls whose N is 1, 17, 33,
100 (tails of every width against 32-column tiles) bit-exact against numpy: integer
operands, so the float32 sums are exact in any order."""

import dataclasses

import numpy as np
import pytest

from polycomp.driver import compile_kernel
from polycomp.errors import NpuCapacityError
from polycomp.frontend.ops import matmul_kernel
from polycomp.hw.npu.backend import run_module, simulate
from polycomp.hw.npu.program import FixpipeCall, Loop, ix, walk
from polycomp.hw.npu.sim_exec import fixpipe_params_error

TILE = {"cube_tile": (32, 32, 32, 64)}       # column tails of every width below 32


def _fixpipes(ck):
    k = ck.final_ir.program
    return [s for p in k.programs for s in walk(p.body) if isinstance(s, FixpipeCall)]


def test_fixpipe_params_rules():
    """The table's ranges, the no-overlap rule, the NZ multiple of 16."""
    assert fixpipe_params_error(17, 5, 16, 17) is None            # a tail, NZ2ND
    assert fixpipe_params_error(1, 1, 16, 1) is None
    assert fixpipe_params_error(4095, 8192, 8192, 4095) is None
    assert fixpipe_params_error(0, 5, 0, 0) is None               # nSize 0: a NOP
    assert "multiple of 16" in fixpipe_params_error(17, 5, 16, 17, nz2nd=False)
    assert fixpipe_params_error(32, 5, 16, 32, nz2nd=False) is None
    assert "overlap" in fixpipe_params_error(17, 5, 16, 16)
    assert "nSize = 4096" in fixpipe_params_error(4096, 1, 16, 4096)
    assert "mSize = 8193" in fixpipe_params_error(16, 8193, 8208, 16)
    assert fixpipe_params_error(16, 8193, 8208, 16, nz2nd=False) is None
    assert "srcStride = 16" in fixpipe_params_error(16, 17, 16, 16)
    assert "dstStride = 0" in fixpipe_params_error(16, 1, 16, 0)


@pytest.mark.parametrize("out", ["float16", "float32"])
def test_column_tails_bit_exact(out):
    """N = 1, 17, 33, 100 with 32-column tiles (and M, K odd): every Fixpipe's nSize is
    its tile's valid columns, the GM rows are not overrun (the simulator checks every
    write against the tensor and the parameters against the docs' table), the result
    is numpy's bit for bit."""
    ck = compile_kernel(matmul_kernel("float16", out), "npu-lite", TILE)
    fx = _fixpipes(ck)
    assert fx and {s.quant for s in fx} == {"F322F16" if out == "float16" else "NoQuant"}
    rng = np.random.default_rng(11)
    for n in (1, 17, 33, 100):
        m, kk = 37, 45
        a = rng.integers(-8, 9, (m, kk)).astype(np.float16)
        b = rng.integers(-8, 9, (kk, n)).astype(np.float16)
        got, _ = simulate(ck, a, b)
        ref = a.astype(np.float32) @ b.astype(np.float32)
        np.testing.assert_array_equal(got, ref.astype(out))


def _narrow_rows(body: tuple) -> tuple:
    """``body`` with every Fixpipe's dstStride one element short of its nSize (the
    injected bug: GM rows that overlap)."""
    out: list = []
    for s in body:
        if isinstance(s, Loop):
            s = dataclasses.replace(s, body=_narrow_rows(s.body))
        elif isinstance(s, FixpipeCall):
            s = dataclasses.replace(s, dst_stride=s.n_size - ix(1))
        out.append(s)
    return tuple(out)


def test_simulator_refuses_illegal_fixpipe_params():
    ck = compile_kernel(matmul_kernel("float16"), "npu-lite", TILE)
    k = ck.final_ir.program.map_programs(
        lambda p: dataclasses.replace(p, body=_narrow_rows(p.body)))
    a, b = np.ones((20, 8), np.float16), np.ones((8, 17), np.float16)
    with pytest.raises(NpuCapacityError, match=r"Fixpipe l0C -> C: FixpipeParamsV220 "
                       r"dstStride = 16 < nSize = 17: the rows overlap in GM"):
        run_module(ck.final_ir.with_program(k), ck.target, a, b)
