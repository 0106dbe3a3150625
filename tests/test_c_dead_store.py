"""``dead-store-contract`` (scheduler/cpu/scop_dead_store.py): an array that the
statements below one loop iteration write, read back in it and that a later statement
overwrites lives in a per-thread buffer there, its stores removed.

adi's column sweep (``tests/c_scop_kernels/adi_like.c``) is the case: its ``p`` / ``q``
go to buffers, checked bitwise against ``gcc -O0 -ffp-contract=off`` of the same C
under ``fp_exact`` at PolyBench's MINI and SMALL sizes and odd ones (partial strips),
with a golden tree.  Negative cases: the row sweep alone (its ``p`` / ``q`` are
live-out), the column sweep alone (likewise), a read of the column sweep's ``p``
between the sweeps (``p`` is read outside its iteration: only ``q`` is contracted,
bitwise checked), a row sweep that leaves ``p[i][n-2]``, ``q[i][n-2]`` as the column
sweep wrote them (not every value is overwritten); the option and the environment
switch turn it off.
"""
from __future__ import annotations

import ctypes
import re
import subprocess

import numpy as np
import pytest
from test_c_scop_schedule import TARGET, check_golden_pass, gcc_o0, kernel, run_gcc

from polycomp import ir
from polycomp.driver import compile_kernel
from polycomp.frontend.c_reader import read_c_kernel
from polycomp.hw.registry import backend_for
from polycomp.scheduler.chain.local import local_tiles
from polycomp.scheduler.cpu.scop_dead_store import ScopDeadStorePass
from polycomp.scheduler.cpu.scop_interleave import ScopInterleavePass
from polycomp.state import CompileState

NOTE = "dead-store-contract"


def _arrays(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {x: rng.uniform(-1, 1, size=(n, n)) for x in "uvpq"}


def _same_bits(got, want) -> bool:
    return np.array_equal(got.view(np.uint64), want.view(np.uint64))


@pytest.fixture(scope="module")
def exact():
    """adi_like compiled once under fp_exact (the sizes are parameters): (kernel, the
    compiled kernel, its function)."""
    k = kernel("adi_like")
    ck = compile_kernel(k, TARGET, {"fp_exact": True})
    return k, ck, ck.backend.load(ck)


def test_adi_like_bitwise_under_fp_exact(exact, tmp_path_factory):
    """MINI (n 20, tsteps 20), SMALL (200, 50), a partial strip (37), one row (3) and
    none (1): every array bitwise gcc -O0's."""
    k, _, fn = exact
    for n, tsteps in [(20, 20), (200, 50), (37, 3), (3, 2), (1, 1)]:
        arrays = _arrays(n, seed=n)
        ref = run_gcc("adi_like", gcc_o0("adi_like", tmp_path_factory),
                      {"n": n, "tsteps": tsteps}, arrays)
        got = fn(*[arrays[x].copy() for x in "uvpq"], n=n, tsteps=tsteps)
        for g, x in zip(got, "uvpq"):
            assert _same_bits(g, ref[x]), (n, x)


def test_adi_like_column_sweep_contracted(exact):
    """The column sweep's ``p`` and ``q`` (its forward recurrences and the back-
    substitution), never the row sweep's; the buffers are the generated C's and the
    column sweep neither stores nor loads ``p`` / ``q``."""
    _, ck, _ = exact
    assert ck.notes[NOTE] == [
        "p (S_1+S_3+S_4+S_6), q (S_2+S_4+S_6) below the loop at depth 1: a per-thread "
        "buffer, the stores removed"], ck.notes[NOTE]
    src = ck.source
    i = src.index("#pragma omp parallel")              # the column sweep
    j = src.index("#pragma omp parallel", i + 1)        # the row sweep
    col, row = src[i:j], src[j:]
    for x in "pq":
        assert f"{x}_live[" in col and not re.search(rf"\b{x}\[", col), x
        assert re.search(rf"\b{x}\[", row) and f"{x}_live" not in row, x


def test_adi_like_default_options(tmp_path_factory):
    """The vector build (default options) matches gcc -O0 to rounding."""
    n, tsteps = 70, 4
    k = kernel("adi_like")
    arrays = _arrays(n, seed=5)
    ref = run_gcc("adi_like", gcc_o0("adi_like", tmp_path_factory),
                  {"n": n, "tsteps": tsteps}, arrays)
    on = compile_kernel(k, TARGET)
    assert NOTE in on.notes and "p_live" in on.source
    got = on.backend.load(on)(*[arrays[x].copy() for x in "uvpq"], n=n, tsteps=tsteps)
    for g, x in zip(got, "uvpq"):
        np.testing.assert_allclose(g, ref[x], rtol=1e-13, atol=1e-15, err_msg=x)


def test_option_removes_the_pass(adi_interleaved):
    """``dead_store_contract=False``: the cpu pipeline has no dead-store-contract."""
    model, _ = adi_interleaved
    for options, want in (({}, True), ({"dead_store_contract": False}, False)):
        state = CompileState(model, TARGET, options)
        names = [p.name for p in backend_for(TARGET).schedule_passes(state)]
        assert (NOTE in names) == want, names


def _interleaved(k):
    model = k.polyhedral_model()
    ctx = CompileState(model, TARGET, {})
    return ctx, ScopInterleavePass().run(model.initial_schedule, ctx)


@pytest.fixture(scope="module")
def adi_interleaved():
    """adi_like's model and its tree after scop-interleave (computed once)."""
    model = kernel("adi_like").polyhedral_model()
    return model, ScopInterleavePass().run(model.initial_schedule,
                                           CompileState(model, TARGET, {}))


def test_environment_switch(monkeypatch, adi_interleaved):
    model, sched = adi_interleaved
    ctx = CompileState(model, TARGET, {})
    monkeypatch.setenv("POLYCOMP_DEAD_STORE_CONTRACT", "0")
    assert ScopDeadStorePass().run(sched, ctx).plain_is_equal(sched)
    assert not local_tiles(ctx).records and NOTE not in ctx.notes


def test_golden_tree(goldens):
    sched, out = check_golden_pass("adi_like", [ScopInterleavePass], ScopDeadStorePass,
                                   "test_c_dead_store/adi_like", goldens)
    assert out.get_map().is_equal(sched.get_map())     # marks only


def test_records_statements_and_layout(adi_interleaved):
    """Each record names the statements whose accesses use the buffer and puts the
    strip's row innermost (``P[j][i - i0]``: 32 rows, the ``j`` extent ``n - 1``)."""
    model, sched = adi_interleaved
    ctx = CompileState(model, TARGET, {})
    ScopDeadStorePass().run(sched, ctx)
    (p, q), = local_tiles(ctx).records
    assert p.statements == frozenset({"S_1", "S_3", "S_4", "S_6"})
    assert q.statements == frozenset({"S_2", "S_4", "S_6"})
    assert p.layout == q.layout == (1, 0)
    assert isinstance(p.sizes[0], ir.IntImm) and p.sizes[0].value == 32


COLUMN = """
    for (i = 1; i < n - 1; i++) {
      v[0][i] = 1.0;
      p[i][0] = 0.0;
      q[i][0] = v[0][i];
      for (j = 1; j < n - 1; j++) {
        p[i][j] = 0.25 / (0.5 * p[i][j - 1] + 1.5);
        q[i][j] = (0.3 * u[j][i - 1] + 0.4 * u[j][i] + 0.5 * q[i][j - 1])
                  / (0.5 * p[i][j - 1] + 1.5);
      }
      v[n - 1][i] = 1.0;
      for (j = n - 2; j >= 1; j--)
        v[j][i] = p[i][j] * v[j + 1][i] + q[i][j];
    }
"""
ROW = """
    for (i = 1; i < n - 1; i++) {
      u[i][0] = 1.0;
      p[i][0] = 0.0;
      q[i][0] = u[i][0];
      for (j = 1; j < LAST; j++) {
        p[i][j] = 0.2 / (0.6 * p[i][j - 1] + 1.25);
        q[i][j] = (0.2 * v[i - 1][j] + 0.5 * v[i][j] + 0.6 * q[i][j - 1])
                  / (0.6 * p[i][j - 1] + 1.25);
      }
      u[i][n - 1] = 1.0;
      for (j = n - 2; j >= 1; j--)
        u[i][j] = p[i][j] * u[i][j + 1] + q[i][j];
    }
"""
BETWEEN = """
    for (i = 1; i < n - 1; i++)
      r[i] = r[i] + p[i][n - 3];
"""


def _source(body: str) -> str:
    return ("void k(int tsteps, int n, double u[n][n], double v[n][n], double p[n][n], "
            "double q[n][n], double r[n]) {\n  int t, i, j;\n#pragma scop\n"
            "  for (t = 1; t <= tsteps; t++) {\n" + body + "  }\n#pragma endscop\n}\n")


VARIANTS = {
    "row_only": (_source(ROW.replace("LAST", "n - 1")), []),
    "column_only": (_source(COLUMN), []),
    "p_read_between": (_source(COLUMN + BETWEEN + ROW.replace("LAST", "n - 1")), ["q"]),
    "not_all_overwritten": (_source(COLUMN + ROW.replace("LAST", "n - 2")), []),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_live_values_are_not_contracted(name):
    """Only an array whose every value the column sweep writes is read in its own strip
    and overwritten later is contracted."""
    src, contracted = VARIANTS[name]
    ctx, sched = _interleaved(read_c_kernel(src, "k"))
    ScopDeadStorePass().run(sched, ctx)
    got = [t.arrays[0].name for rec in local_tiles(ctx).records for t in rec]
    assert got == contracted, ctx.notes


def test_partial_contraction_bitwise(tmp_path):
    """``p`` read between the sweeps stays in memory, ``q`` goes to the buffer: every
    output bitwise gcc -O0's.  The kernel's own array ``q_live`` (``r`` renamed) keeps
    its name; the buffer takes another."""
    src = VARIANTS["p_read_between"][0].replace("r[", "q_live[")
    k = read_c_kernel(src, "k")
    c = tmp_path / "k.c"
    c.write_text(src)
    so = tmp_path / "k.so"
    subprocess.run(["gcc", "-O0", "-ffp-contract=off", "-fPIC", "-shared", "-o", str(so),
                    str(c)], check=True)
    n, tsteps = 37, 3
    rng = np.random.default_rng(7)
    arrays = {x: rng.uniform(-1, 1, size=(n, n)) for x in "uvpq"}
    arrays["q_live"] = rng.uniform(-1, 1, size=n)
    want = {x: a.copy() for x, a in arrays.items()}
    ctypes.CDLL(str(so)).k(ctypes.c_int(tsteps), ctypes.c_int(n),
                           *[ctypes.c_void_p(want[x].ctypes.data)
                             for x in ("u", "v", "p", "q", "q_live")])
    ck = compile_kernel(k, TARGET, {"fp_exact": True})
    assert ck.notes[NOTE] == ["q (S_2+S_4+S_6) below the loop at depth 1: a per-thread "
                              "buffer, the stores removed"], ck.notes[NOTE]
    assert "q_live_2[" in ck.source and "p_live" not in ck.source
    got = ck.backend.load(ck)(*[arrays[x].copy() for x in list(k.inputs) + list(k.outputs)],
                              n=n, tsteps=tsteps)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(k.outputs) > 0
    for x, g in zip(k.outputs, got):
        assert _same_bits(g, want[x]), x
