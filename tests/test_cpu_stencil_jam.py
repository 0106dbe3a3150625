"""Two time steps per row pass (IR pass ``stencil-jam``, ``hw/cpu/jam.py``; option
``stencil_jam``) and the vectoriser's stored-row windows (``lowering/vectorize.py``
``_stored_windows``).  Inside a time tile of fdtd-2d, steps ``t`` and ``t + 1`` run
together: one ``j`` pass updates row ``i`` at step ``t`` and row ``i - 1`` at step
``t + 1``; the second step's ``hz[i-1][j-1]`` is read from the first step's stored
vectors.  The element operations and their order are unchanged, so the results are
bitwise those of the unjammed build (``tests/test_cpu_carried_windows.py``: the fdtd-2d
build there is the jammed one, compared with the build without windows, which has one
step per pass) and, under ``fp_exact``, of gcc -O0 (``tests/test_c_scop_schedule.py``'s
time-tiled stencil checks build the jammed loops too)."""
from __future__ import annotations

from pathlib import Path

import pytest

from polycomp import ir
from polycomp.driver import compile_kernel
from polycomp.frontend.c_reader import load_c_kernels
from polycomp.hw.cpu.jam import jam_nest
from polycomp.hw.target import get_target
from polycomp.lowering.vectorize import vectorize_loop
from polycomp.scheduler.common import marks

#: AVX-512 with the Zen 4 caches the tile sizes below were chosen for (any host)
_AVX512 = get_target("cpu-avx512").with_capacities(L1=32 * 1024, L2=1024 * 1024)

KERNELS = Path(__file__).parent / "c_scop_kernels"
F64 = "float64"


def _fdtd():
    k, = load_c_kernels(str(KERNELS / "fdtd2d_like.c"))
    return k


def test_fdtd2d_tile_steps_run_two_per_row_pass(goldens):
    """Golden: the ``stencil-jam`` pass on fdtd2d_like's time tiles, IR in and out (the
    ``t`` loop stepped by two, the fused row where both steps run a full row, each
    step's own body elsewhere).  The vectorised fused row reads the stored ``hz`` row
    through the registers (``valign`` of this and the previous iteration's stored
    vectors).  ``stencil_jam=False``: tests/test_cpu_aligned_rows.py's golden (one step
    per pass, no mark left); bitwise against the unjammed build:
    tests/test_cpu_carried_windows.py (its windowed build is the jammed one)."""
    ck = compile_kernel(_fdtd(), _AVX512, dump=True)
    q = next(i for i, r in enumerate(ck.records) if r.name == "stencil-jam")
    for part, text in (("in", ck.records[q - 1].tree), ("out", ck.records[q].tree)):
        assert text is not None
        expected = goldens.expected(f"test_cpu_stencil_jam/fdtd2d.stencil-jam.{part}.ir", text)
        assert expected == text.strip(), f"{part}:\n{text}"
    vec = ck.records[q + 1 + [r.name for r in ck.records[q + 1:]].index("vectorize")].tree
    assert vec is not None
    assert "vector_carried" in vec
    # the fused row's second step: hz[i-1][j-1] from two register slots, no load of it
    assert "valign(vwin1[ramp(48, 1, 8)]<x8>, vwin1[ramp(56, 1, 8)]<x8>, 7)" in vec
    # step t's ex[i-1][j], ex[i-1][j+1] carried, though step t + 1 stores ex[i-1][j]
    assert "vwin1[ramp(24, 1, 8)]<x8> = ex[ramp((c3 - c2 - 1) * ny + c4_pl + c4_v * 8 + 9" \
        in vec


def _tile(read_offset: int):
    """A marked tile ``for t: for y: for j in [1, ny - 1): X[(y - t)*ny + j] = 2 *
    X[(y - t - 1)*ny + j + read_offset]`` (flat float64)."""
    t, y, j, ny = (ir.Var(n, "int64") for n in ("t", "y", "j", "ny"))
    X = ir.Buffer("X", F64, (ir.IntImm(1 << 16),), flat=True)
    row = (y - t) * ny + j
    body = ir.Store(X, (row,), ir.FloatImm(2.0, F64) * ir.Load(
        X, ((y - t - 1) * ny + j + read_offset,), F64))
    jl = ir.For(j, ir.IntImm(1), ny - 2, "serial", body, (("coincident", True),))
    yl = ir.For(y, t, ir.IntImm(8), "serial", jl)
    return ir.AttrStmt(marks.CPU_STENCIL_POINTS, "", ir.For(t, ir.IntImm(0), ir.IntImm(6),
                                                           "serial", yl))


@pytest.mark.parametrize("read_offset, fused", [
    (1, True),      # step t reads X[r-1][j+1], written by step t + 1 only at j + 1 (later)
    (0, True),      # the same element, in the same iteration (step t first)
    (-1, False),    # X[r-1][j-1]: step t + 1 writes it at j - 1, before step t reads it
])
def test_fused_row_needs_a_proof_that_no_reordered_pair_meets(read_offset, fused):
    notes: list = []
    out = jam_nest(_tile(read_offset), notes.append)
    text = str(out)
    assert marks.CPU_STENCIL_POINTS not in text
    assert ("t_u" in text) == fused, text
    assert bool(notes) != fused, notes


def _stored_row_loop(other_row):
    """``for j in [1, ny - 1): X[r*ny + j] = 2 * X[r*ny + j]; Y[r*ny + j] = X[r*ny + j -
    1] - X[r*ny + j]; X[other_row(r)*ny + j] = Y[r*ny + j]`` (flat float64)."""
    r, ny, j = (ir.Var(n, "int64") for n in ("r", "ny", "j"))
    X, Y = (ir.Buffer(n, F64, (ir.IntImm(1 << 20),), flat=True) for n in "XY")
    row = r * ny + j
    ld = lambda b, i: ir.Load(b, (i,), F64)           # noqa: E731
    body = ir.seq(ir.Store(X, (row,), ir.FloatImm(2.0, F64) * ld(X, row)),
                  ir.Store(Y, (row,), ld(X, row - 1) - ld(X, row)),
                  ir.Store(X, (other_row(r) * ny + j,), ld(Y, row)))
    return ir.For(j, ir.IntImm(1), ny - 2, "serial", body, (("coincident", True),))


@pytest.mark.parametrize("other_row, windowed", [
    (lambda r: r - 2, True),     # the loop's other store of X two rows away
    (lambda r: r + 1, True),     # the next row
    (lambda r: r * 2, False),    # not a constant number of rows off
])
def test_stored_window_needs_the_other_stores_a_loop_span_away(other_row, windowed):
    out = vectorize_loop(_stored_row_loop(other_row), lambda d: 8, window=True)
    assert out is not None
    text = str(out)
    assert ("vector_carried" in text) == windowed, text



def _read_then_store_loop(store_first: bool):
    """``for j in [1, ny - 1): Y[(r+1)*ny + j] = X[r*ny + j + 1] - X[r*ny + j]`` and
    ``X[r*ny + j] = 2 * X[r*ny + j]``, the store of ``X`` after the reads or before
    them."""
    r, ny, j = (ir.Var(n, "int64") for n in ("r", "ny", "j"))
    X, Y = (ir.Buffer(n, F64, (ir.IntImm(1 << 20),), flat=True) for n in "XY")
    row = r * ny + j
    ld = lambda b, i: ir.Load(b, (i,), F64)           # noqa: E731
    read = ir.Store(Y, ((r + 1) * ny + j,), ld(X, row + 1) - ld(X, row))
    write = ir.Store(X, (row,), ir.FloatImm(2.0, F64) * ld(X, row))
    body = ir.seq(write, read) if store_first else ir.seq(read, write)
    return ir.For(j, ir.IntImm(1), ny - 2, "serial", body, (("coincident", True),))


@pytest.mark.parametrize("store_first, carried", [(False, True), (True, False)])
def test_a_row_the_loop_stores_is_carried_only_when_read_before_the_store(store_first,
                                                                          carried):
    out = vectorize_loop(_read_then_store_loop(store_first), lambda d: 8, window=True)
    assert out is not None
    assert ("vector_carried" in str(out)) == carried, str(out)
