"""Triangular and symmetric products on the CPU micro-kernel (scheduler/cpu/scop_gemm.py,
scheduler/cpu/scop_symm.py, hw/cpu/microkernel.py):

* a triangle of output points (syrk's ``j <= i``, its mirror ``j >= i``) is recognised
  from the row lengths (``_row_lengths``), a rectangle is not;
* with two threads the triangle's ``i`` tiles are dealt cyclically (the parallel band
  ``floor(i/MC) mod 2``), and the register tiles crossing the diagonal are micro-kernel
  tiles with per-row masks (not a generic nest; the mirror triangle ``j >= i`` is not on
  the micro-kernel): the built kernel equals numpy's product on the triangle and leaves
  the other triangle alone, at odd, prime and extent-1 sizes;
* symm with two threads: one parallel loop over column panels around its three phases
  (OpenMP's static schedule: contiguous ranges of whole panels; the body printed once),
  the built kernel equals numpy (three 120-row steps at 251 rows) and reads no element
  of ``A`` above the diagonal (NaN there); ``temp2`` is stored in one step's block per
  thread, unless ``POLYCOMP_SYMM_LOCAL=0`` or ``temp2`` is an output of the kernel.

Results are compared with numpy at 1e-12 relative (the micro-kernel contracts to FMA;
``fp_exact`` keeps the C order but not the contraction, docs/c_frontend.md).
"""
from __future__ import annotations

import dataclasses
import re

import islpy as isl
import numpy as np
import pytest

from polycomp.driver import compile_kernel
from polycomp.frontend.c_reader import read_c_kernel
from polycomp.hw.target import get_target
from polycomp.scheduler.cpu.scop_gemm import _row_lengths, cyclic_tiles
from polycomp.scheduler.cpu.scop_symm import _within_panels, column_panels, match_symm

_AVX512 = get_target("cpu-avx512").with_capacities(L1=32 * 1024, L2=1024 * 1024)
TARGET2 = dataclasses.replace(_AVX512, cpu=dataclasses.replace(_AVX512.cpu, threads=2))

SYRK = """
void syrk_{name}(int n, int m, double C[n][n], double A[n][m]) {{
  int i, j, k;
#pragma scop
  for (i = 0; i < n; i++) {{
    for (j = {lo}; j {cmp} {hi}; j++)
      C[i][j] *= 0.5;
    for (k = 0; k < m; k++)
      for (j = {lo}; j {cmp} {hi}; j++)
        C[i][j] += 1.5 * A[i][k] * A[j][k];
  }}
#pragma endscop
}}
"""
LOWER = SYRK.format(name="lower", lo="0", cmp="<=", hi="i")
UPPER = SYRK.format(name="upper", lo="i", cmp="<", hi="n")

SYMM = """
void symm_cols(int m, int n, double alpha, double beta, double C[m][n], double A[m][m],
               double B[m][n]) {
  int i, j, k;
  double temp2;
#pragma scop
  for (i = 0; i < m; i++)
    for (j = 0; j < n; j++) {
      temp2 = 0;
      for (k = 0; k < i; k++) {
        C[k][j] += alpha * B[i][j] * A[i][k];
        temp2 += B[k][j] * A[i][k];
      }
      C[i][j] = beta * C[i][j] + alpha * B[i][j] * A[i][i] + alpha * temp2;
    }
#pragma endscop
}
"""


def _call(k, f, arrays: dict, sizes: dict) -> dict:
    """Run the built kernel on ``arrays`` (by name); its outputs by name."""
    out = f(*[arrays[n] for n in list(k.inputs) + list(k.outputs)], **sizes)
    out = out if isinstance(out, tuple) else (out,)
    return dict(zip(k.outputs, out))


def _set(text: str) -> isl.Set:
    return isl.Set(text)


def test_row_lengths_tell_triangles_from_rectangles():
    lower = _set("[n, m] -> { S[i, j, k] : 0 <= j <= i < n and 0 <= k < m }")
    upper = _set("[n, m] -> { S[i, k, j] : 0 <= i <= j < n and 0 <= k < m }")
    rect = _set("[n, m] -> { S[i, j, k] : 0 <= i < n and 0 <= j < n and 0 <= k < m }")
    wide = _set("[n] -> { S[i, j, k] : 0 <= i < n and 0 <= j <= 2i and 0 <= k < 4 }")
    assert _row_lengths(lower, 0, 1) == 1
    assert _row_lengths(upper, 0, 2) == -1
    assert _row_lengths(rect, 0, 1) is None
    assert _row_lengths(wide, 0, 1) is None            # two more points per row
    assert cyclic_tiles(lower, 0, 1, 2) and not cyclic_tiles(lower, 0, 1, 1)
    assert not cyclic_tiles(rect, 0, 1, 2)


def _syrk_ref(C, A, lower: bool):
    full = 0.5 * C + 1.5 * (A @ A.T)
    mask = np.tril(np.ones(C.shape, bool)) if lower else np.triu(np.ones(C.shape, bool))
    return np.where(mask, full, C)


@pytest.mark.parametrize("lower", [True, pytest.param(False, marks=pytest.mark.slow)],
                         ids=["lower", "upper"])
def test_triangle_is_cyclic_and_its_diagonal_tiles_are_micro_kernels(lower):
    k = read_c_kernel(LOWER if lower else UPPER, "syrk_lower" if lower else "syrk_upper")
    ck = compile_kernel(k, TARGET2)
    notes = ck.notes["scop-gemm"]
    assert any("GEMM C += A * A" in x for x in notes), notes
    assert any("cyclically" in x for x in notes), notes
    # the full tiles' micro-kernel, the row-masked one of the diagonal tiles and (since
    # branch blas3: 4 before) the one of the last n mod MR rows, a row loop ending at
    # n % 6 (n = 7, 53, 97, 200 below run it); still vectorised nests: an i tile of
    # fewer than MR rows (n mod MC < MR), and the mirror triangle j >= i (its register
    # tiles start at a column that varies with the row)
    assert ck.final_ir.counts.microkernels >= (5 if lower else 0), ck.final_ir.counts
    f = ck.backend.load(ck)
    rng = np.random.default_rng(5)
    for n, m in ((1, 1), (7, 3), (53, 17), (97, 1), (200, 13)):
        A = rng.uniform(-1, 1, (n, m))
        C = rng.uniform(-1, 1, (n, n))
        want = _syrk_ref(C, A, lower)
        got = _call(k, f, dict(A=A, C=C.copy()), dict(n=n, m=m))["C"]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14, err_msg=f"{n}x{m}")


def test_symm_runs_one_parallel_loop_over_column_panels():
    k = read_c_kernel(SYMM, "symm_cols")
    model = k.polyhedral_model()
    m = match_symm(list(model.statements))
    assert not isinstance(m, str), m
    assert column_panels(list(model.statements), 32, 1) is None
    panels = column_panels(list(model.statements), 32, 2)
    assert panels is not None
    # every dependence stays in its panel; one across panels would not
    assert _within_panels(model.dependences, panels)
    z = next(s for s in model.statements if len(s.iters) == 2)     # temp2[i][j] = 0
    across = isl.UnionMap(f"{{ {z.name}[i, j] -> {z.name}[i + 1, j + 32] }}")
    assert not _within_panels(across, panels)
    ck = compile_kernel(k, TARGET2)
    assert any("split in three phases" in x and "parallel over 32-column panels" in x
               for x in ck.notes["scop-symm"]), ck.notes
    assert ck.source.count("#pragma omp parallel") == 1, "one parallel region"
    # the panel loop, statically scheduled (contiguous ranges of whole panels per
    # thread), and the body printed once: the micro-kernels of P's rectangle and its
    # diagonal block, M's diagonal block and rectangle
    assert ck.source.count("schedule(static)") == 1
    assert "(c2 + 2)" not in ck.source, "phase 2's prefetch is for AVX2 only"
    assert ck.final_ir.counts.microkernels == 4, ck.final_ir.counts
    # temp2 lives in a 120 x 32 block of the thread's workspace, not an m x n array
    assert any("temp2 in a per-thread block of one step" in x
               for x in ck.notes["scop-symm"]), ck.notes
    assert "(m * n)" not in ck.source and "(n * m)" not in ck.source
    assert "temp2 = (double*)(pc_ws ?" in ck.source
    f = ck.backend.load(ck)
    rng = np.random.default_rng(11)
    for mm, nn in ((1, 1), (7, 3), (61, 200), (130, 71), (251, 37)):
        A = rng.uniform(-1, 1, (mm, mm))
        B = rng.uniform(-1, 1, (mm, nn))
        C = rng.uniform(-1, 1, (mm, nn))
        al, be = np.array(1.5), np.array(1.2)
        S = np.tril(A) + np.tril(A, -1).T
        # symm reads A's lower triangle only: the diagonal blocks' register tiles
        # (and their clamped rows past m) never touch the NaNs above it
        A[np.triu_indices(mm, 1)] = np.nan
        want = 1.5 * (S @ B) + 1.2 * C
        got = _call(k, f, dict(alpha=al, beta=be, A=A, B=B, C=C.copy()),
                    dict(m=mm, n=nn))["C"]
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13, err_msg=f"{mm}x{nn}")


def test_symm_constant_sizes_split_whole_panels():
    """Constant sizes (131 columns: 4 whole panels and 3 columns): the same panel loop,
    the built kernel equals numpy."""
    src = SYMM.replace("symm_cols", "symm_const").replace("[m][n]", "[77][131]") \
        .replace("[m][m]", "[77][77]").replace("i < m", "i < 77").replace("j < n", "j < 131")
    k = read_c_kernel(src, "symm_const")
    assert column_panels(list(k.polyhedral_model().statements), 32, 2) is not None
    ck = compile_kernel(k, TARGET2)
    assert "for (int64_t c0 = 0; c0 < 5; ++c0)" in ck.source.replace("c0 <= 4", "c0 < 5")
    f = ck.backend.load(ck)
    rng = np.random.default_rng(2)
    A, B, C = rng.uniform(-1, 1, (77, 77)), rng.uniform(-1, 1, (77, 131)), \
        rng.uniform(-1, 1, (77, 131))
    S = np.tril(A) + np.tril(A, -1).T
    got = _call(k, f, dict(alpha=np.array(0.5), beta=np.array(2.0), A=A, B=B, C=C.copy()),
                dict(m=1, n=1))["C"]
    np.testing.assert_allclose(got, 0.5 * (S @ B) + 2.0 * C, rtol=1e-11, atol=1e-13)


def test_symm_accumulator_block_only_for_a_temporary(monkeypatch):
    """``_step_local``: the expanded ``temp2`` (a temporary) gets a step block; not with
    ``POLYCOMP_SYMM_LOCAL=0``, and not when the accumulator is an output of the kernel
    (its values are read after the call)."""
    from polycomp.scheduler.cpu.scop_symm import _step_local
    from polycomp.state import CompileState

    def acc_of(src, name):
        model = read_c_kernel(src, name).polyhedral_model()
        m = match_symm(list(model.statements))
        assert not isinstance(m, str), m
        return _step_local(m[0], CompileState(model, TARGET2, {}))

    monkeypatch.delenv("POLYCOMP_SYMM_LOCAL", raising=False)
    acc = acc_of(SYMM, "symm_cols")
    assert acc is not None and acc.name == "temp2"
    monkeypatch.setenv("POLYCOMP_SYMM_LOCAL", "0")
    assert acc_of(SYMM, "symm_cols") is None
    monkeypatch.delenv("POLYCOMP_SYMM_LOCAL")
    out = SYMM.replace("symm_cols", "symm_out").replace("double B[m][n])",
                                                        "double B[m][n], double T[m][n])") \
        .replace("  double temp2;\n", "").replace("temp2", "T[i][j]")
    acc = acc_of(out, "symm_out")
    assert acc is None


def test_symm_panels_on_avx2_are_four_register_panels(monkeypatch):
    """``panel_columns``: AVX2's ``6 x 8`` fp64 register block takes parallel panels of
    32 columns (four register panels; ``A`` streamed 4x less often than in 8-column
    panels), AVX-512's 32- and 64-column register panels are unchanged;
    ``POLYCOMP_SYMM_PANEL=0``: the register panel.  Phase 2 prefetches the ``C`` it
    stores two rows on (``prefetch_phase2``), the only change to the C;
    ``POLYCOMP_SYMM_PREFETCH=0`` off.  The AVX2 build with two threads
    equals numpy (``A``'s upper triangle NaN: never read) at sizes with a partial
    panel and three row steps."""
    from polycomp.hw.cpu.target import cpu_flags
    from polycomp.scheduler.cpu.scop_symm import panel_columns
    assert (panel_columns(8), panel_columns(16), panel_columns(32), panel_columns(64),
            panel_columns(12)) == (32, 32, 32, 64, 36)
    monkeypatch.setenv("POLYCOMP_SYMM_PANEL", "0")
    assert panel_columns(8) == 8
    monkeypatch.delenv("POLYCOMP_SYMM_PANEL")
    avx2 = get_target("cpu-avx2")
    target = dataclasses.replace(avx2, cpu=dataclasses.replace(avx2.cpu, threads=2))
    k = read_c_kernel(SYMM, "symm_cols")
    ck = compile_kernel(k, target)
    assert any("register block 6x8" in x and "parallel over 32-column panels" in x
               for x in ck.notes["scop-symm"]), ck.notes
    # phase 2 below cpu_prefetch_rows: its main vector loop prefetches (for writing) the
    # C element it stores two rows on, clamped to the step's last row; the only
    # difference from the POLYCOMP_SYMM_PREFETCH=0 build
    pre = [ln for ln in ck.source.splitlines()
           if re.search(r"__builtin_prefetch\(C \+ .*pc_min_i64\(\(c\d+ \+ 2\)", ln)]
    assert len(pre) == 1 and pre[0].rstrip().endswith(", 1, 3);"), pre
    monkeypatch.setenv("POLYCOMP_SYMM_PREFETCH", "0")
    off = compile_kernel(k, target).source
    monkeypatch.delenv("POLYCOMP_SYMM_PREFETCH")
    assert ck.source.replace(pre[0] + "\n", "") == off
    if not {"avx2", "fma"} <= cpu_flags():
        return
    f = ck.backend.load(ck)
    rng = np.random.default_rng(4)
    for mm, nn in ((7, 3), (251, 77)):
        A = rng.uniform(-1, 1, (mm, mm))
        B, C = rng.uniform(-1, 1, (mm, nn)), rng.uniform(-1, 1, (mm, nn))
        S = np.tril(A) + np.tril(A, -1).T
        A[np.triu_indices(mm, 1)] = np.nan
        got = _call(k, f, dict(alpha=np.array(1.5), beta=np.array(1.2), A=A, B=B,
                               C=C.copy()), dict(m=mm, n=nn))["C"]
        np.testing.assert_allclose(got, 1.5 * (S @ B) + 1.2 * C, rtol=1e-11, atol=1e-13)


def test_golden_prefetch_marked_rows(goldens):
    """IR pass ``prefetch-marked-rows`` (hw/cpu/prefetch.py) on ``symm_cols`` (AVX2, two
    threads): in and out against ``tests/golden/test_cpu_triangle/symm_cols.
    prefetch-marked-rows.{in,out}.ir`` (``--update-goldens`` rewrites them).  The pass
    drops the ``cpu_prefetch_rows`` mark and adds one write prefetch of ``C`` two rows
    on at the head of phase 2's vector loop; nothing else changes."""
    avx2 = get_target("cpu-avx2")
    target = dataclasses.replace(avx2, cpu=dataclasses.replace(avx2.cpu, threads=2))
    ck = compile_kernel(read_c_kernel(SYMM, "symm_cols"), target, dump=True)
    recs = ck.records
    k = next(i for i, r in enumerate(recs) if r.name == "prefetch-marked-rows")
    before, after = recs[k - 1].tree, recs[k].tree
    for part, text in (("in", before), ("out", after)):
        expected = goldens.expected(
            f"test_cpu_triangle/symm_cols.prefetch-marked-rows.{part}.ir", text)
        assert expected == text.strip(), f"{part}:\n{text}"
    added = [ln for ln in after.splitlines() if ln not in before.splitlines()]
    removed = [ln for ln in before.splitlines() if ln not in after.splitlines()]
    assert len(added) == 1 and "prefetch(C[" in added[0] and "min(" in added[0], added
    assert all("cpu_prefetch_rows" in ln or not ln.strip() for ln in removed), removed
