"""IR pass ``index-cse`` (lowering/index_cse.py): each index expression the printed C
would repeat is bound once, in a ``let`` at the innermost statement holding all its
uses.

* golden IR in / out of the pass on a small masked tile written by hand (the shape of a
  triangle's diagonal tile: a lane count ``min(7, n - 8i - 1) + 1`` masking every
  vector of a ``k`` loop, a ``vector_mask`` store after it, two sibling loops over one
  ``Var`` object, a ``dot_groups`` loop whose extent ``a // c`` the printer matches);
* the C of both forms built by gcc computes bit-identical results at every size
  (native AVX2);
* the pass leaves a function without repeated index expressions alone, and
  ``enabled=False`` (``POLYCOMP_INDEX_CSE=0``) returns the function unchanged.

The real kernels (syr2k, syrk, symm, the triangles) run through the pass in
``tests/test_c_scop_schedule.py`` and ``tests/test_cpu_triangle.py`` (against gcc -O0 and
numpy); ``test_c_scop_schedule.py::test_masked_tile_bounds_are_bound_once`` pins the
size of syr2k's C.
"""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from polycomp import ir
from polycomp.hw.cpu.build import build_shared
from polycomp.hw.cpu.codegen import emit_c
from polycomp.hw.cpu.target import cpu_flags
from polycomp.hw.cpu.vector_prelude import prelude
from polycomp.hw.cpu.vector_printer import printer_for
from polycomp.lowering.index_cse import index_cse
from polycomp.lowering.printer import func_str
from polycomp.lowering.vectorize import lane_range
from polycomp.scheduler.common import marks

D, L = "float64", 4


def masked_tile() -> ir.LoweredFunc:
    """``C[8i + u*4 ..] += A[k n + 8i + u*4 ..]`` for the ``min(8, n - 8i)`` columns of
    block ``i`` (two masked vectors per ``k``), then ``C *= 2`` through a
    ``vector_mask`` of the same count, then two sibling loops over one ``j``."""
    n = ir.Var("n", is_param=True)
    i, k, j, g = ir.Var("i"), ir.Var("k"), ir.Var("j"), ir.Var("g")
    A = ir.Buffer("A", D, (4 * n,), flat=True)
    C = ir.Buffer("C", D, (n + 8,), flat=True)
    base = i * 8
    last = ir.min_(ir.IntImm(7), n - i * 8 - 1)          # the block's last column

    def vec(buf, at):
        return ir.Load(buf, (ir.Ramp(at, ir.IntImm(1), L),), D, L)

    updates = []
    for u in range(2):
        count = last + 1 if u == 0 else last + 1 - u * L
        at = base if u == 0 else base + u * L
        upd = ir.Binary("+", vec(C, at), vec(A, k * n + at), D)
        updates.append(ir.Store(C, (ir.Ramp(at, ir.IntImm(1), L),),
                                ir.Select(lane_range(ir.IntImm(0), count, L), upd,
                                          vec(C, at), D), L))
    kloop = ir.For(k, ir.IntImm(0), ir.IntImm(4), "serial", ir.seq(*updates))
    twice = ir.AttrStmt(marks.VECTOR_MASK, (last + 1, L), ir.Store(
        C, (ir.Ramp(base, ir.IntImm(1), L),),
        ir.Binary("*", vec(C, base), ir.Broadcast(ir.FloatImm(2.0, D), L, D), D), L))

    def sibling(add: float):
        at = base + j * 0 + ir.max_(ir.IntImm(0), last - 3)    # C[8i + max(0, last-3)]
        one = ir.Store(C, (at,), ir.Binary("+", ir.Load(C, (at,), D),
                                            ir.FloatImm(add, D), D))
        return ir.For(j, ir.IntImm(0), ir.IntImm(1), "serial",
                      ir.seq(one, ir.Store(C, (at,), ir.Binary(
                          "*", ir.Load(C, (at,), D), ir.FloatImm(0.5, D), D))))
    # a dot_groups loop: its extent ``a // 2`` stays whole (the printer matches it)
    groups = ir.For(g, ir.IntImm(0), ir.Binary("//", last + 1, ir.IntImm(2), "int64"),
                    "serial", ir.Store(C, (base + g * 2,), ir.Binary(
                        "+", ir.Load(C, (base + g * 2,), D), ir.FloatImm(1.0, D), D)),
                    (("dot_groups", True),))
    body = ir.For(i, ir.IntImm(0), (n + 7) // 8, "serial",
                  ir.seq(kloop, twice, sibling(1.0), sibling(3.0), groups))
    return ir.LoweredFunc("masked_tile", (n,), (A,), (C,), body, inout=("C",))


def test_golden_index_cse(goldens):
    f = masked_tile()
    out = index_cse(f)
    for part, fn in (("in", f), ("out", out)):
        text = func_str(fn)
        assert goldens.expected(f"test_index_cse/masked_tile.index-cse.{part}.ir",
                                text) == text.strip(), f"{part}:\n{text}"
    text = func_str(out)
    lets = re.findall(r"let (ix\d+) = (.*)", text)
    # the block's last column once, its lane count once, each at the i loop's body
    assert [v for v, e in lets if e == "min(7, n - i * 8 - 1)"] and \
        [v for v, e in lets if e.endswith("+ 1")], lets
    # every vlane_range reads a bound variable or a variable minus a constant
    for m in re.findall(r"vlane_range\(0, ([^,]+), 4\)", text):
        assert re.fullmatch(r"ix\d+( - \d+)?", m), m
    # the sibling loops bind their own j-dependent index, one let each
    assert len(re.findall(r"let ix\d+ = i \* 8 \+ j \* 0", text)) == 2, text
    # the dot_groups extent stays a division
    assert re.search(r"for g in range\(\(?ix\d+\)? // 2\)", text), text


def _run(func: ir.LoweredFunc, n: int, A: np.ndarray, C: np.ndarray) -> np.ndarray:
    src = emit_c(func, printer_for("avx2"), prelude("avx2"))
    lib = ctypes.CDLL(build_shared(src))
    fn = getattr(lib, func.name)
    fn.restype = None
    fn.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
    out = C.copy()
    fn(n, A.ctypes.data, out.ctypes.data)
    return out


@pytest.mark.skipif("avx2" not in cpu_flags(), reason="hardware: no AVX2")
def test_index_cse_is_bitwise_in_built_c():
    f = masked_tile()
    out = index_cse(f)
    assert "const int64_t ix" in emit_c(out, printer_for("avx2"), prelude("avx2"))
    rng = np.random.default_rng(5)
    for n in (1, 3, 8, 13, 29):
        A = rng.uniform(-1, 1, 4 * n)
        C = rng.uniform(-1, 1, n + 8)
        C[-8:] = np.nan                        # past the last block: never touched
        want, got = _run(f, n, A, C), _run(out, n, A, C)
        assert np.array_equal(want.view(np.uint64), got.view(np.uint64)), n


def test_index_cse_leaves_other_functions_alone():
    n, i = ir.Var("n", is_param=True), ir.Var("i")
    C = ir.Buffer("C", D, (n,), flat=True)
    f = ir.LoweredFunc("plain", (n,), (), (C,), ir.For(
        i, ir.IntImm(0), n, "serial", ir.Store(C, (i * 2 + 1,), ir.FloatImm(0.0, D))))
    assert index_cse(f) is f
    tile = masked_tile()
    assert index_cse(tile, enabled=False) is tile
