"""Aligned rows of the CPU vectoriser (``lowering/vectorize.py``, ``_aligned_rows``;
option ``vector_window``, AVX-512): a stencil row loop whose statements share it (the
C-SCoP stencil path's time tiles: fdtd-2d's ``ey``, ``ex``, ``hz``, jacobi-2d's ``B`` and
``A``) starts at the store of its busiest array aligned at run time (a masked head of
``0 <= p < L`` lanes), runs the plain vector body, and ends with a masked tail.  Only
where the vectors are cut changes, so the result is bitwise the plain form's for every
alignment of the arrays and every row length (shorter than a vector, a head only, a
head and a tail).  ``fp_exact`` builds have no vector code, so the PolyBench bitwise
checks do not reach this form: these tests compare vector builds at many alignments."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from avx512_runs import AVX512_RUNS, load_avx512, view_past_line

from polycomp.driver import compile_kernel
from polycomp.frontend.c_reader import load_c_kernels
from polycomp.hw.target import get_target

#: AVX-512 with the Zen 4 caches the tile sizes below were chosen for (any host)
_AVX512 = get_target("cpu-avx512").with_capacities(L1=32 * 1024, L2=1024 * 1024)

KERNELS = Path(__file__).parent / "c_scop_kernels"


def _body(src: str, name: str) -> str:
    return src[src.index(f"void {name}("):]


def _reference(ex, ey, hz, fict):
    """fdtd2d_like in the C nest's order (numpy, IEEE; no statement reads what it
    writes, so whole-array updates are the loops)."""
    ex, ey, hz = ex.copy(), ey.copy(), hz.copy()
    for f in fict:
        ey[0, :] = f
        ey[1:, :] = ey[1:, :] - 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] = ex[:, 1:] - 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] = hz[:-1, :-1] - 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1]
                                             - ey[:-1, :-1])
    return ex, ey, hz


def test_fdtd2d_shared_row_is_aligned_to_its_busiest_store(goldens):
    """fdtd-2d's shared row loop (three stores) starts at ``hz``'s store aligned (the
    array it touches most: five loads and the store); with ``vector_window`` off it
    keeps the plain form.  Golden: the ``vectorize`` pass on fdtd2d_like's time tiles,
    IR in and out (the aligned head, the plain body, the tail), one step per row pass
    (``stencil_jam`` off; the jammed rows: tests/test_cpu_stencil_jam.py)."""
    k, = load_c_kernels(str(KERNELS / "fdtd2d_like.c"))
    ck = compile_kernel(k, _AVX512, {"stencil_jam": False}, dump=True)
    q = next(i for i, r in enumerate(ck.records) if r.name == "vectorize")
    jam = next(r.tree for r in ck.records if r.name == "stencil-jam")
    assert jam is not None and "cpu_stencil_points" not in jam and "c2_u" not in jam
    for part, text in (("in", ck.records[q - 1].tree), ("out", ck.records[q].tree)):
        assert text is not None
        expected = goldens.expected(f"test_cpu_aligned_rows/fdtd2d.vectorize.{part}.ir", text)
        assert expected == text.strip(), f"{part}:\n{text}"
    on = _body(ck.source, "fdtd2d_like")
    assert "(uintptr_t)(hz +" in on and "c4_pl" in on, on
    off = compile_kernel(k, _AVX512, {"vector_window": False}).source
    assert "_pl" not in _body(off, "fdtd2d_like")


@AVX512_RUNS
def test_fdtd2d_aligned_rows_are_bitwise_at_any_alignment():
    """The three arrays at the same and at different alignments (so the head is 0 to 7
    lanes), row lengths 2 to 21 and small tiles (rows of every start): bitwise the same
    result each time, a NaN spreading alike, and within rounding of the C order (the
    build contracts ``hz``'s product into an FMA)."""
    k, = load_c_kernels(str(KERNELS / "fdtd2d_like.c"))
    ck = compile_kernel(k, _AVX512, {"stencil_tiles": (4,)})
    assert "c4_pl" in ck.source
    fn = load_avx512(ck)
    rng = np.random.default_rng(3)
    for tmax, nx, ny in ((3, 5, 2), (4, 6, 9), (5, 7, 13), (6, 9, 21)):
        fict = rng.uniform(-1, 1, tmax)
        fields = [rng.uniform(-1, 1, (nx, ny)) for _ in range(3)]
        fields[2][nx // 2, ny // 2] = np.nan
        outs = []
        for shifts in ((0, 0, 0), (0, 2, 5), (7, 1, 3), (4, 4, 4)):
            ex, ey, hz = (view_past_line(a, s) for a, s in zip(fields, shifts))
            fn(fict, ex, ey, hz, tmax=tmax, nx=nx, ny=ny, out=(ex, ey, hz))
            outs.append((ex, ey, hz))
        for got in outs[1:]:
            for g, w in zip(got, outs[0]):
                assert np.array_equal(np.isnan(g), np.isnan(w)), (tmax, nx, ny)
                ok = ~np.isnan(w)
                assert np.array_equal(g[ok].view(np.uint64), w[ok].view(np.uint64)), \
                    (tmax, nx, ny)
        for g, w in zip(outs[0], _reference(fields[0], fields[1], fields[2], fict)):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, equal_nan=True)
