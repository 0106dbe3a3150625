"""GEMM forms of the CPU backend (see docs/cpu_backend.md): the micro-kernel keeps its
accumulators in registers across the k loop (no stack traffic in the loop, AVX2 and
AVX-512), and products with few rows split their j tiles over the threads; results
against numpy on hypothesis-drawn constant shapes (tails, odd sizes, extent 1), AVX2
natively and AVX-512 through SIMDe."""
import dataclasses
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polycomp as pc
from polycomp.driver import compile_kernel
from polycomp.frontend import ops
from polycomp.frontend.dsl import Kernel
from polycomp.hw.cpu.build import DEFAULT_FLAGS, CFunction, build_shared
from polycomp.hw.cpu.simd_build import (
    AVX512_FLAGS,
    build_simde,
    disassemble,
    has_native_avx512,
    simde_available,
)
from polycomp.hw.cpu.target import cpu_flags
from polycomp.hw.target import get_target

HAS_AVX2 = {"avx2", "fma"} <= cpu_flags()
PATHS = ["avx2"] * HAS_AVX2 + ["simde"] * simde_available() + ["native512"] * has_native_avx512()


def _target(path: str, threads: int):
    t = get_target("cpu-avx2" if path == "avx2" else "cpu-avx512")
    return dataclasses.replace(t, cpu=dataclasses.replace(t.cpu, threads=threads))


def _matmul(m, n, k, name):
    return Kernel(lambda A, B: ops.matmul(A, B), name=name,
                  inputs={"A": pc.Tensor[(m, k), "float32"], "B": pc.Tensor[(k, n), "float32"]})


def _run(ck, path, *xs):
    if path == "simde":
        lib = build_simde(ck.source)
    else:
        lib = build_shared(ck.source, flags=AVX512_FLAGS if path == "native512" else
                           DEFAULT_FLAGS)
    return CFunction(ck.final_ir, lib)(*xs)


def _k_loop(asm: str) -> str:
    """The instructions of the innermost loop around the first vfmadd231ps: from the
    target of the first backward jump after it to that jump."""
    lines = [ln for ln in asm.splitlines() if re.match(r"\s+[0-9a-f]+:\t", ln)]
    addr = [int(ln.split(":")[0], 16) for ln in lines]
    first = next(i for i, ln in enumerate(lines) if "vfmadd231ps" in ln)
    for i in range(first, len(lines)):
        m = re.search(r"\tj\w+\s+([0-9a-f]+) <", lines[i])
        if m and int(m.group(1), 16) <= addr[first]:
            start = addr.index(int(m.group(1), 16))
            return "\n".join(lines[start:i + 1])
    raise AssertionError("no loop around the FMAs")


@pytest.mark.parametrize("target,flags", [
    ("cpu-avx2", ("-O3", "-march=x86-64-v3", "-fopenmp", "-ffp-contract=fast")),
    ("cpu-avx512", AVX512_FLAGS)])
def test_microkernel_accumulators_stay_in_registers(target, flags):
    ck = compile_kernel(_matmul(96, 256, 256, "mk_regs"), target)
    loop = _k_loop(disassemble(ck.source, flags))
    reg = "ymm" if target == "cpu-avx2" else "zmm"
    n_fma = loop.count("vfmadd231ps")
    assert n_fma == (12 if target == "cpu-avx2" else 24) and reg in loop
    assert "rsp" not in loop and "rbp)" not in loop, loop


def _check_small_m(path, m, n, k, seed):
    tgt = _target(path, 2)
    ck = compile_kernel(_matmul(m, n, k, f"smallm_{m}_{n}_{k}"), tgt)
    notes = " ".join(" ".join(v) for v in ck.notes.values())
    nr = int(re.search(r"register block \d+x(\d+)", notes).group(1))
    assert ("parallel over j tiles" in notes) == (n >= 2 * nr), notes
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    out = _run(ck, path, A, B)
    np.testing.assert_allclose(out, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
@settings(max_examples=8, deadline=None)
@given(m=st.integers(1, 23), n=st.sampled_from([8, 17, 32, 40, 71]),
       k=st.integers(1, 37), seed=st.integers(0, 2 ** 31))
def test_few_rows_split_j_tiles_avx2(m, n, k, seed):
    """Fewer than SMALL_M_PANELS register rows per thread: the threads share the j
    tiles (the note says so) and the product is right, tails and extent 1 included."""
    _check_small_m("avx2", m, n, k, seed)


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in PATHS if p != "avx2"])
@settings(max_examples=1, deadline=None)
@given(m=st.integers(1, 13), n=st.sampled_from([129, 140]), k=st.integers(1, 9),
       seed=st.integers(0, 2 ** 31))
def test_few_rows_split_j_tiles_avx512(path, m, n, k, seed):
    _check_small_m(path, m, n, k, seed)


def test_many_rows_keep_the_i_split():
    ck = compile_kernel(_matmul(512, 64, 64, "bigm"), _target("avx2", 2))
    notes = " ".join(" ".join(v) for v in ck.notes.values())
    assert "parallel over i tiles" in notes


def _check_shared(path, m, n, k, seed, tiles):
    """A product whose rows span several ``MC`` blocks at 2 planned threads: each
    ``KC x NC`` block of ``B`` is packed once for both threads (the note says so), the
    row tiles split over the threads inside it; right at 1 and 2 threads."""
    ck = compile_kernel(_matmul(m, n, k, f"shared_{m}_{n}_{k}"), _target(path, 2),
                        {"gemm_tiles": tiles})
    notes = " ".join(" ".join(v) for v in ck.notes.values())
    assert "shared packed Y block" in notes, notes
    # the row tiles and (blocks of 4 rows of B: several when k >= 8) the copy
    assert ck.source.count("#pragma omp parallel for") >= (2 if k >= 8 else 1)
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    lib = build_shared(ck.source, flags=AVX512_FLAGS if path == "native512" else
                       DEFAULT_FLAGS) if path != "simde" else build_simde(ck.source)
    for threads in (1, 2):
        f = CFunction(ck.final_ir, lib)
        f.threads = threads
        np.testing.assert_allclose(f(A, B), A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
@settings(max_examples=6, deadline=None)
@given(m=st.sampled_from([13, 25, 37, 61]), n=st.sampled_from([1, 16, 17, 47, 64]),
       k=st.sampled_from([1, 3, 31, 67]), seed=st.integers(0, 2 ** 31))
def test_shared_packed_y_block_avx2(m, n, k, seed):
    """Several row blocks (``MC`` = 12 < m), several j and k blocks, tails, extent 1
    (the shared form on request: ``POLYCOMP_GEMM_SHARED=1``)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("POLYCOMP_GEMM_SHARED", "1")
        _check_shared("avx2", m, n, k, seed, (12, 32, 16))


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
def test_dynamic_row_tiles_exact_at_one_and_two_threads(monkeypatch):
    """Constant odd/prime sizes at 2 planned threads, default blocking, the shared-panel
    form and dynamic row tiles asked for: its row tiles (61 rows: 24 + 24 + 13, a
    partial register tile) are handed out one at a time (``schedule(dynamic)``); 1 and
    2 threads give the same bits (each element's sum runs in the same order whichever
    thread takes its tile), within float32 rounding of numpy."""
    monkeypatch.setenv("POLYCOMP_GEMM_SHARED", "1")
    monkeypatch.setenv("POLYCOMP_GEMM_DYNAMIC", "1")
    m, n, k = 61, 47, 67
    ck = compile_kernel(_matmul(m, n, k, "dyn_rows"), _target("avx2", 2))
    notes = " ".join(" ".join(v) for v in ck.notes.values())
    assert "shared packed Y block (handed out one at a time)" in notes, notes
    assert "MC=24 " in notes and "schedule(dynamic)" in ck.source, notes
    rng = np.random.default_rng(5)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    f = CFunction(ck.final_ir, build_shared(ck.source, flags=DEFAULT_FLAGS))
    got = {}
    for threads in (1, 2, 2):
        f.threads = threads
        got.setdefault(threads, []).append(f(A, B))
    np.testing.assert_allclose(got[1][0], A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
    for out in got[2]:
        np.testing.assert_array_equal(out, got[1][0])


def test_shared_form_only_with_several_row_blocks(monkeypatch):
    """Asked for, the shared form still needs ``M > MC``: ``M <= MC`` keeps the
    per-thread form; so does a 1-thread plan; and without asking every size does."""
    ck = compile_kernel(_matmul(512, 64, 64, "per_thread_default"), _target("avx2", 2),
                        {"gemm_tiles": (12, 32, 16)})
    assert "shared packed" not in " ".join(" ".join(v) for v in ck.notes.values())
    monkeypatch.setenv("POLYCOMP_GEMM_SHARED", "1")
    ck = compile_kernel(_matmul(12, 64, 64, "one_block"), _target("avx2", 2),
                        {"gemm_tiles": (12, 32, 16)})
    notes = " ".join(" ".join(v) for v in ck.notes.values())
    assert "shared packed" not in notes and "parallel over i tiles" in notes
    ck = compile_kernel(_matmul(512, 64, 64, "one_thread"), _target("avx2", 1),
                        {"gemm_tiles": (12, 32, 16)})
    assert "shared packed" not in " ".join(" ".join(v) for v in ck.notes.values())


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in PATHS if p != "avx2"])
@settings(max_examples=2, deadline=None)
@given(m=st.sampled_from([13, 37]), n=st.sampled_from([1, 71, 130]),
       k=st.sampled_from([1, 67]), seed=st.integers(0, 2 ** 31))
def test_shared_packed_y_block_avx512(path, m, n, k, seed):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("POLYCOMP_GEMM_SHARED", "1")
        _check_shared(path, m, n, k, seed, (12, 64, 16))


FILL_CASES = [     # fills: "" the copy, "f" filled, "fs" filled and streamed when forced
    ("avx2", 13, 1024, 7, 1, "fs"),     # 6x16 tiles: two full row tiles, then a 1-row tail
    ("avx2", 7, 2048, 3, 2, "f"),       # one full row tile (no row loop: no stream), tail
    ("avx2", 7, 1024, 1, 1, ""),        # k extent 1 (no k loop in the tile): the copy
    ("avx2", 13, 1024, 301, 2, "fs"),   # k tiles, the last partial (next block clamped)
] + [("native512", 37, 1024, 11, 2, "fs"),  # 6x64, j split
     ("native512", 29, 1024, 301, 1, "fs")] * has_native_avx512()   # k and j tiles


@pytest.mark.parametrize("path,m,n,k,threads,fills", FILL_CASES)
def test_y_filled_by_first_row_tile_bit_exact(path, m, n, k, threads, fills, monkeypatch):
    """Few rows, ``Y`` packed (rows 4 KiB apart): the first register row tile fills the
    packed block in its ``k`` loop instead of a copy pass (``fill_y_in_first_row``,
    ``hw/cpu/pack.py`` ``fill_first_row``); prime / odd sizes, a partial row tile,
    ``k`` extent 1, one and two threads: bit-identical to the copy, within float32
    rounding of numpy.  Streamed (``stream_y_fill``, forced: each row tile prefetches
    the next ``k`` / ``j`` block, clamped into ``B`` at a partial last block): the same
    bits."""
    rng = np.random.default_rng(m + n)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    got = {}
    for mode in ("1s", "1", "0") if fills else ("1", "0"):
        monkeypatch.setenv("POLYCOMP_GEMM_FILL", mode[0])
        monkeypatch.setenv("POLYCOMP_GEMM_STREAM", "1" if mode == "1s" else "0")
        ck = compile_kernel(_matmul(m, n, k, f"fill{mode}_{m}_{n}_{k}"), _target(path, threads))
        counts = ck.final_ir.counts
        if mode != "0" and fills:
            assert counts.filled_packs == 1 and counts.filling_tiles
            assert "B_pk1_xb" not in ck.source and "pk1_xb" not in ck.source
        else:
            assert not counts.filled_packs and not counts.filling_tiles
        assert ("__builtin_prefetch(B +" in ck.source) == (mode == "1s" and fills == "fs")
        f = CFunction(ck.final_ir, build_shared(
            ck.source, flags=AVX512_FLAGS if path == "native512" else DEFAULT_FLAGS))
        f.threads = threads
        got[mode] = f(A, B)
    np.testing.assert_array_equal(got["1"], got["0"])
    np.testing.assert_array_equal(got.get("1s", got["0"]), got["0"])
    np.testing.assert_allclose(got["1"], A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
@pytest.mark.parametrize("m,n,k,threads", [
    (7, 2048, 1, 2),        # k extent 1, j split over two threads
    (37, 1024, 301, 2),     # 6 full 6-row tiles and a 1-row tail, k tiles (last partial)
])
def test_avx2_copies_narrow_panels(m, n, k, threads, monkeypatch):
    """AVX2's 16-float panels read one cache line of ``Y`` per ``k`` step: with
    ``POLYCOMP_GEMM_FILL`` at ``auto`` the few-row product copies ``Y``
    (``fill_lines_ok``), ``POLYCOMP_GEMM_FILL_MIN_LINES=0`` fills it as before; both
    bit-identical, within float32 rounding of numpy.  AVX-512's 64-float panels (4
    lines) still fill (compiled only)."""
    rng = np.random.default_rng(m * k)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    got = {}
    for bound in ("1", "0"):
        monkeypatch.setenv("POLYCOMP_GEMM_FILL_MIN_LINES", bound)
        ck = compile_kernel(_matmul(m, n, k, f"narrow{bound}_{m}_{n}_{k}"),
                            _target("avx2", threads))
        filled = ck.final_ir.counts.filled_packs or 0
        assert filled == (0 if bound == "1" or k == 1 else 1), (bound, filled)
        f = CFunction(ck.final_ir, build_shared(ck.source, flags=DEFAULT_FLAGS))
        f.threads = threads
        got[bound] = f(A, B)
    np.testing.assert_array_equal(got["1"], got["0"])
    np.testing.assert_allclose(got["1"], A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
    monkeypatch.delenv("POLYCOMP_GEMM_FILL_MIN_LINES")
    wide = compile_kernel(_matmul(m, n, k, f"wide_{m}_{n}_{k}"), _target("avx512", threads))
    assert (wide.final_ir.counts.filled_packs or 0) == (0 if k == 1 else 1)


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
@pytest.mark.parametrize("m,n,k,stream,threads", [
    (7, 4096, 1024, "auto", 2),     # whole tiles: Y filled (and streamed where it is large)
    (13, 4096, 2048, "1", 3),       # a partial row tile, 8 k tiles, the stream forced,
])                                  # 3 threads: 6 j tiles of 688, the last one partial
def test_thread_k_outer_bit_exact(m, n, k, stream, threads, monkeypatch):
    """Few rows at two threads with several ``j`` tiles per thread and ``X`` packed (its
    rows 4 KiB apart): each thread runs its ``k`` tiles outside its own chunk of ``j``
    tiles (``thread_k_outer``, the note says so; the parallel loop has at most one
    iteration per thread); bit-identical to the former order
    (``POLYCOMP_GEMM_THREAD_ORDER=jk``) at the planned threads, two and one (a thread then
    runs several chunks); within float32 rounding of numpy.  A
    streamed ``Y``'s prefetch wraps at the thread's chunk (``c + 1 >= lo + extent``)."""
    rng = np.random.default_rng(m)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    monkeypatch.setenv("POLYCOMP_GEMM_STREAM", stream)
    if stream == "1":       # AVX2's 16-float panels copy Y unless told (fill_lines_ok)
        monkeypatch.setenv("POLYCOMP_GEMM_FILL", "1")
    got = {}
    # the prefetch's clamp is read from the C text: the index expressions spelled out
    # (the IR pass index-cse off; the other tests here build with it)
    monkeypatch.setenv("POLYCOMP_INDEX_CSE", "0")
    for order in ("kj", "jk"):
        monkeypatch.setenv("POLYCOMP_GEMM_THREAD_ORDER", order)
        ck = compile_kernel(_matmul(m, n, k, f"tko{order}_{m}_{n}_{k}"),
                            _target("avx2", threads))
        notes = " ".join(" ".join(v) for v in ck.notes.values())
        assert "parallel over j tiles" in notes, notes
        assert ("j tiles inside its k tiles" in notes) == (order == "kj"), notes
        if order == "kj":
            head = ck.source[ck.source.index("#pragma omp for"):]
            chunks = re.search(r"for \(int64_t c\d+ = 0; c\d+ < (\d+); ", head.split("\n")[1])
            assert chunks and 1 < int(chunks.group(1)) <= threads
            if stream == "1":
                assert re.search(r"__builtin_prefetch\(B \+ .*\+ 1\) >= ", ck.source)
        f = CFunction(ck.final_ir, build_shared(ck.source, flags=DEFAULT_FLAGS))
        for run in sorted({threads, 2, 1}):
            f.threads = run
            got[order, run] = f(A, B)
    for key, v in got.items():
        np.testing.assert_array_equal(v, got["jk", 1], err_msg=str(key))
    np.testing.assert_allclose(got["kj", 1], A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
@pytest.mark.parametrize("m,n,k,threads,packs", [
    (61, 47, 67, 1, ""),          # both read in place, partial tiles both ways
    (97, 131, 101, 2, ""),        # two row tiles, one per thread
    (263, 17, 5, 1, "B_pk"),      # more than Y_IN_PLACE_ROWS rows per thread: Y packed
])
def test_operands_in_place_bit_exact(m, n, k, threads, packs, monkeypatch):
    """Prime / odd sizes: with ``X`` (and ``Y`` for at most 256 rows per thread) read
    where they lie (``in_place_operands``) the product is bit-identical to the packed
    one (each element's sum runs in the same order), within float32 rounding of numpy."""
    rng = np.random.default_rng(m)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    got = {}
    for mode in ("auto", "0"):
        monkeypatch.setenv("POLYCOMP_GEMM_IN_PLACE", mode)
        ck = compile_kernel(_matmul(m, n, k, f"inplace_{mode}_{m}"), _target("avx2", threads))
        source = ck.source
        if mode == "auto":
            assert "A_pk" not in source and (packs in source if packs else "_pk" not in source)
        else:
            assert "A_pk" in source and "B_pk" in source
        f = CFunction(ck.final_ir, build_shared(ck.source, flags=DEFAULT_FLAGS))
        f.threads = threads
        got[mode] = f(A, B)
    np.testing.assert_array_equal(got["auto"], got["0"])
    np.testing.assert_allclose(got["auto"], A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


def _zen3(path: str, threads: int, ways: int = 8):
    """``_target`` on an L1 of ``ways`` ways of 4 KiB (the Zen 3 host's: 8, 32 KiB;
    Zen 4's: 12, 48 KiB)."""
    t = _target(path, threads).with_capacities(L1=ways * 4096, L2=512 * 1024)
    return dataclasses.replace(t, cpu=dataclasses.replace(t.cpu, l1_ways=ways))


def test_x_panel_aliases_counts_the_l1_ways():
    """``x_panel_aliases``: AVX2's ``6 x 16`` tile at ``KC`` = 256 (a 16 KiB ``Y`` panel,
    4 lines per set of a 4 KiB way) beside ``MR`` = 6 aliased ``X`` lines: 10 > 8 ways
    packs, 12 ways do not; AVX-512's 64 KiB ``Y`` panel fits no L1 (unchanged); fewer
    than ``X_ALIAS_PACK_ROWS`` rows or the switch off: unchanged; a pre-packed ``Y``
    packs too (``x_alias_prepacked``)."""
    from polycomp.scheduler.cpu.backbone_tile import (
        X_ALIAS_PACK_ROWS,
        Blocking,
        x_panel_aliases,
    )
    b = Blocking(6, 2, 8, 1024, 256, 256, False)
    assert x_panel_aliases(b, 4, _zen3("avx2", 1), 1024)
    assert not x_panel_aliases(b, 4, _zen3("avx2", 1, ways=12), 1024)
    assert not x_panel_aliases(b, 4, _zen3("avx2", 1), X_ALIAS_PACK_ROWS - 1)
    assert not x_panel_aliases(b, 4, None, 1024)
    wide = Blocking(6, 4, 16, 1024, 256, 256, False)
    assert not x_panel_aliases(wide, 4, _zen3("avx512", 1), 1024)
    pre = Blocking(6, 2, 8, 1024, 256, 256, False, prepacked_y=True)
    assert x_panel_aliases(pre, 4, _zen3("avx2", 1), 1024)     # since x_alias_prepacked
    assert not x_panel_aliases(pre, 4, _zen3("avx2", 1), X_ALIAS_PACK_ROWS - 1)


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
@pytest.mark.parametrize("m,n,k,threads", [
    (263, 37, 1024, 1),           # 4 KiB rows of X, 263 rows: X packed on an 8-way L1
    (517, 19, 1024, 2),           # two row tiles of 259 and 258 rows
])
def test_aliased_x_packed_bit_exact(m, n, k, threads, monkeypatch):
    """Rows of ``X`` 4 KiB apart on an 8-way 32 KiB L1 (``x_panel_aliases``): ``X`` is
    packed, bit-identical to reading it in place (``POLYCOMP_GEMM_X_ALIAS=0``: the same
    values summed in the same order), within float32 rounding of numpy; on 12 ways it
    stays in place."""
    rng = np.random.default_rng(m)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    got = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("POLYCOMP_GEMM_X_ALIAS", mode)
        ck = compile_kernel(_matmul(m, n, k, f"xalias_{mode}_{m}"), _zen3("avx2", threads))
        assert ("A_pk" in ck.source) == (mode == "1")
        f = CFunction(ck.final_ir, build_shared(ck.source, flags=DEFAULT_FLAGS))
        f.threads = threads
        got[mode] = f(A, B)
    np.testing.assert_array_equal(got["1"], got["0"])
    np.testing.assert_allclose(got["1"], A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
    monkeypatch.setenv("POLYCOMP_GEMM_X_ALIAS", "1")
    ck = compile_kernel(_matmul(m, n, k, f"xalias_12_{m}"), _zen3("avx2", threads, ways=12))
    assert "A_pk" not in ck.source


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
def test_aliased_x_packed_with_a_prepacked_weight_bit_exact(monkeypatch):
    """A graph's weight GEMM (``Y`` pre-packed, the 4 x 3 weight block) whose ``X`` rows
    are 4 KiB apart, 517 rows (row tiles of 260) on an 8-way L1 at two threads (BERT
    b8-384's FFN down projection in small): ``X`` is packed (``x_alias_prepacked``),
    bit-identical to reading it in place (``POLYCOMP_GEMM_X_ALIAS_PREPACKED=0``), within
    float32 rounding of numpy."""
    from polycomp.graph.compile import CPU_WEIGHT_GEMM_OPTIONS
    from polycomp.scheduler.promotion.record import prepacked_inputs
    m, n, k = 517, 29, 1024
    rng = np.random.default_rng(3)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    got = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("POLYCOMP_GEMM_X_ALIAS_PREPACKED", mode)
        ck = compile_kernel(_matmul(m, n, k, f"xalias_pp_{mode}"), _zen3("avx2", 2),
                            {**CPU_WEIGHT_GEMM_OPTIONS, "prepack": ("B",)})
        (rec,) = prepacked_inputs(ck.state)
        assert ("A_pk" in ck.source) == (mode == "1") and "B_pk" not in ck.source
        f = CFunction(ck.final_ir, build_shared(ck.source, flags=DEFAULT_FLAGS))
        f.threads = 2
        got[mode] = f(A, rec.pack(B))
    np.testing.assert_array_equal(got["1"], got["0"])
    np.testing.assert_allclose(got["1"], A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


def test_next_block_wraps_at_the_threads_chunk():
    """``NextBlock`` of ``Y``'s ``KC x NC`` blocks (here 256 x 512 of a 1024 x 4096
    array) stepped by a thread's chunk loop ``c3`` in ``[4 c1, 4 c1 + 4)`` inside the
    ``k`` tile loop ``c2`` (``thread_k_outer``): the next block is the chunk's next ``j``
    tile, and after its last one the chunk's first ``j`` tile of the next ``k`` tile,
    not the other thread's tile; a loop from 0 keeps the wrap at the array's end."""
    from polycomp import ir
    from polycomp.hw.cpu.pack import _next_block
    from polycomp.lowering.simplify import simplify
    c1, c2, c3 = (ir.Var(n) for n in ("c1", "c2", "c3"))
    arr = ir.Buffer("B", "float32", (ir.IntImm(1024), ir.IntImm(4096)))
    body = ir.Evaluate(ir.IntImm(0))
    chunk = ir.For(c3, c1 * 4, ir.IntImm(4), "serial", body)
    whole = ir.For(c3, ir.IntImm(0), ir.IntImm(8), "serial", body)
    kloop = ir.For(c2, ir.IntImm(0), ir.IntImm(4), "serial", body)
    origin = (c2 * 256, c3 * 512)

    def at(nb, kt, jt, th, e=(5, 7)):
        env = {c1: ir.IntImm(th), c2: ir.IntImm(kt), c3: ir.IntImm(jt)}
        elem = (c2 * 256 + e[0], c3 * 512 + e[1])
        return tuple(simplify(ir.substitute(x, env)).value for x in nb.index(elem))
    nb = _next_block(origin, (256, 512), arr, [kloop, chunk])
    assert nb is not None and nb.dim == 1
    assert at(nb, 0, 5, 1) == (5, 6 * 512 + 7)             # thread 1: j tile 5 -> 6
    assert at(nb, 0, 7, 1) == (256 + 5, 4 * 512 + 7)       # its last -> k tile 1, j tile 4
    assert at(nb, 2, 3, 0) == (3 * 256 + 5, 7)             # thread 0: j tile 3 -> 0, next k
    assert at(nb, 3, 3, 0) == (1023, 7)                     # the last block: clamped
    old = _next_block(origin, (256, 512), arr, [kloop, whole])
    assert old is not None and old.last is None and old.first is None
    assert at(old, 0, 3, 0) == (5, 4 * 512 + 7)             # the array's next j tile
    assert at(old, 0, 7, 0) == (256 + 5, 7)                 # wraps at the array's end


def test_next_block_aim_moves_the_column_inside_the_array():
    """``NextBlock.aim`` (``stream_aim``: a line's last element, 15 for ``float32``) moves each
    prefetch's column that far past the element of the next block, still clamped into
    the array at its last column; 0 (``POLYCOMP_GEMM_STREAM_AIM=0``) is the element
    itself."""
    from polycomp import ir
    from polycomp.hw.cpu.pack import _next_block
    from polycomp.lowering.simplify import simplify
    c2, c3 = ir.Var("c2"), ir.Var("c3")
    arr = ir.Buffer("B", "float32", (ir.IntImm(1024), ir.IntImm(4096)))
    body = ir.Evaluate(ir.IntImm(0))
    loops = [ir.For(c2, ir.IntImm(0), ir.IntImm(4), "serial", body),
             ir.For(c3, ir.IntImm(0), ir.IntImm(8), "serial", body)]
    origin = (c2 * 256, c3 * 512)

    def at(nb, kt, jt, e):
        env = {c2: ir.IntImm(kt), c3: ir.IntImm(jt)}
        col = ir.Var("col")
        got = nb.index((c2 * 256 + e[0], c3 * 512 + col))
        col_at = e[1] + nb.aim     # as _Fill.prefetches adds the aim to the column
        return tuple(simplify(ir.substitute(x, {**env, col: ir.IntImm(col_at)})).value
                     for x in got)
    plain = _next_block(origin, (256, 512), arr, loops)
    aimed = _next_block(origin, (256, 512), arr, loops, 15)
    assert plain is not None and aimed is not None and (plain.aim, aimed.aim) == (0, 15)
    assert at(plain, 0, 2, (5, 48)) == (5, 3 * 512 + 48)
    assert at(aimed, 0, 2, (5, 48)) == (5, 3 * 512 + 63)      # the line's last element
    assert at(aimed, 0, 7, (5, 500)) == (256 + 5, 515)         # wrapped to the next k tile
    assert at(aimed, 3, 6, (255, 500)) == (1023, 4095)         # the last block: clamped


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
def test_stream_aim_bit_exact_on_misaligned_views(monkeypatch):
    """A streamed few-row ``Y`` (``stream_y_fill`` forced, 2 threads, ``k`` and ``j``
    tiles) on numpy views 1-15 floats past a 64-byte boundary, as numpy places large
    arrays 16 bytes off (``A``, ``B`` and the output each misaligned): the prefetches
    aimed at each line's last element (``stream_aim``) give the same bits as the former aim
    (``POLYCOMP_GEMM_STREAM_AIM=0``) and as aligned arrays; within float32 rounding of
    numpy.  Only the prefetch address differs in the C."""
    m, n, k = 13, 1024, 301
    monkeypatch.setenv("POLYCOMP_GEMM_STREAM", "1")
    monkeypatch.setenv("POLYCOMP_GEMM_FILL", "1")      # AVX2: fill_lines_ok would copy
    fs = {}
    # the sources differ in the prefetch lines only: compared with the index expressions
    # spelled out (the IR pass index-cse off, which would bind the aims' parts apart)
    monkeypatch.setenv("POLYCOMP_INDEX_CSE", "0")
    for aim in ("1", "0"):
        monkeypatch.setenv("POLYCOMP_GEMM_STREAM_AIM", aim)
        ck = compile_kernel(_matmul(m, n, k, f"aim{aim}_{m}_{n}_{k}"), _target("avx2", 2))
        fs[aim] = (ck.source, CFunction(ck.final_ir, build_shared(ck.source,
                                                                   flags=DEFAULT_FLAGS)))
    lines = {aim: src.replace(f"aim{aim}_", "aim_").splitlines() for aim, (src, _) in fs.items()}
    diff = [(a, b) for a, b in zip(lines["1"], lines["0"]) if a != b]
    assert diff and all("__builtin_prefetch(B" in a for a, _ in diff), diff[:2]
    rng = np.random.default_rng(27)
    A0 = rng.standard_normal((m, k)).astype(np.float32)
    B0 = rng.standard_normal((k, n)).astype(np.float32)

    def placed(x, off):     # a view ``off`` floats past a 64-byte boundary
        buf = np.empty(x.size + 32, np.float32)
        s = (-(buf.ctypes.data % 64) // 4 + off) % 16
        v = buf[s:s + x.size].reshape(x.shape)
        v[...] = x
        return v
    ref = None
    for off in (0, 1, 4, 15):
        A, B = placed(A0, off), placed(B0, (off * 3) % 16)
        out = {aim: placed(np.zeros((m, n), np.float32), off) for aim in fs}
        for aim, (_, f) in fs.items():
            f.threads = 2
            f(A, B, out=[out[aim]])
        ref = out["0"].copy() if ref is None else ref
        np.testing.assert_array_equal(out["1"], out["0"], err_msg=str(off))
        np.testing.assert_array_equal(out["1"], ref, err_msg=str(off))
    np.testing.assert_allclose(ref, A0.astype(np.float64) @ B0, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
@pytest.mark.parametrize("m,n,k,block,tiles", [
    (13, 53, 67, (4, 3), True),   # 4-row tiles, a 1-row tail, 24-column tiles, a partial one
    (7, 29, 1, (4, 2), False),    # k extent 1: no k loop, no micro-kernel (nothing pinned)
])
def test_pinned_y_vectors_bit_exact(m, n, k, block, tiles, monkeypatch):
    """AVX2 micro-kernels bind each ``Y`` vector through ``pin_register`` (``asm`` with a
    ``"+x"`` operand: gcc keeps it in a register instead of reloading it into every FMA,
    ``pin_y_vectors``); ``POLYCOMP_MK_PIN_Y=0`` prints the plain load.  Bit-identical
    (the same FMAs in the same order), within float32 rounding of numpy, and the IR
    interpreter reads the pin as its value.  AVX-512's 512-bit vectors are not pinned."""
    from polycomp.driver import interpret
    rng = np.random.default_rng(m * n + k)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    got = {}
    for pin in ("1", "0"):
        monkeypatch.setenv("POLYCOMP_MK_PIN_Y", pin)
        ck = compile_kernel(_matmul(m, n, k, f"pin{pin}_{m}_{n}_{k}"), _target("avx2", 1),
                            {"gemm_register": block})
        assert ("__asm__(\"\" : \"+x\"(pc_pin))" in ck.source) == (pin == "1" and tiles)
        got[pin] = CFunction(ck.final_ir, build_shared(ck.source, flags=DEFAULT_FLAGS))(A, B)
        if pin == "1":
            np.testing.assert_allclose(interpret(ck, A, B), A.astype(np.float64) @ B,
                                       rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got["1"], got["0"])
    np.testing.assert_allclose(got["1"], A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
    monkeypatch.delenv("POLYCOMP_MK_PIN_Y")
    wide = compile_kernel(_matmul(m, n, k, f"pinw_{m}_{n}_{k}"), _target("avx512", 1))
    assert "pc_pin" not in wide.source
