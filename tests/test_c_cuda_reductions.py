"""CUDA from C without single-thread kernels (issue #28, "no kernel of the 30 runs a
single-thread grid"): the three rewrites of one-instance statements and reductions into
one element.

* ``scop-gpu-singles``: a one-instance scalar definition (adi's ``DX = 1.0 / n``,
  deriche's ``k = ...``) is recomputed where it is read; a one-instance statement
  (correlation's ``corr[m-1][m-1] = 1.0``, durbin's ``y[k] = alpha``) moves into the
  outer band of an adjacent parallel nest.  Both keep the C order of every operation:
  the simulator is bitwise ``gcc -O0 -ffp-contract=off``.
* block reductions (:mod:`polycomp.scheduler.gpu.scop_reduce`): a reduction into one
  element below a host loop (trisolv, durbin, gramschmidt, ludcmp, cholesky) runs on a
  256-thread block with a shuffle/shared-memory tree; the terms are reassociated, so the
  floating-point results are compared with a tolerance (integers bitwise), and
  ``block_reduce=False`` (one thread, C order) bitwise.
* golden trees of both passes, and ``nvcc -arch=sm_80`` of the printed ``.cu``.
"""
from __future__ import annotations

import ctypes
import re
import subprocess

import islpy as isl
import numpy as np
import pytest
from test_c_scop_schedule import as_tuple, gcc_o0, kernel, random_arrays, run_gcc

from polycomp.driver import compile_kernel
from polycomp.frontend.c_reader import read_c_kernel
from polycomp.hw.cuda.simulator import simulate
from polycomp.hw.target import get_target
from polycomp.islutil import context
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.scheduler.gpu.scop_groups import ScopBaselinePass, ScopGroupingPass
from polycomp.scheduler.gpu.scop_singles import ScopSinglesPass
from polycomp.state import CompileState

SCALARS = """
void scalars(int n, float alpha, float u[n], float v[n]) {
  float dx, a, b, c;
#pragma scop
  dx = 1.0f / (float)n;
  a = -dx / 2.0f;
  b = 1.0f + a * alpha;
  c = b;
  for (int i = 0; i < n; i++)
    v[i] = a * u[i] + c * alpha;
#pragma endscop
}
"""

CORNER = """
void corner(int m, double a[m][m], double c[m][m]) {
#pragma scop
  for (int i = 0; i < m - 1; i++) {
    c[i][i] = 1.0;
    for (int j = i + 1; j < m; j++) {
      c[i][j] = a[i][j] * 0.5 + a[j][i];
      c[j][i] = c[i][j];
    }
  }
  c[m - 1][m - 1] = 1.0;
#pragma endscop
}
"""

TRISOLV = """
void trisolv(int n, double L[n][n], double b[n], double x[n]) {
#pragma scop
  for (int i = 0; i < n; i++) {
    x[i] = b[i];
    for (int j = 0; j < i; j++)
      x[i] -= L[i][j] * x[j];
    x[i] = x[i] / L[i][i];
  }
#pragma endscop
}
"""

DURBIN = """
void durbin(int n, double r[n], double y[n]) {
  double z[n];
  double alpha, beta, sum;
#pragma scop
  y[0] = -r[0];
  beta = 1.0;
  alpha = -r[0];
  for (int k = 1; k < n; k++) {
    beta = (1 - alpha * alpha) * beta;
    sum = 0.0;
    for (int i = 0; i < k; i++)
      sum += r[k - i - 1] * y[i];
    alpha = -(r[k] + sum) / beta;
    for (int i = 0; i < k; i++)
      z[i] = y[i] + alpha * y[k - i - 1];
    for (int i = 0; i < k; i++)
      y[i] = z[i];
    y[k] = alpha;
  }
#pragma endscop
}
"""

GRAMSCHMIDT = """
#include <math.h>
void gramschmidt(int m, int n, double A[m][n], double R[n][n], double Q[m][n]) {
  double nrm;
#pragma scop
  for (int k = 0; k < n; k++) {
    nrm = 0.0;
    for (int i = 0; i < m; i++)
      nrm += A[i][k] * A[i][k];
    R[k][k] = sqrt(nrm);
    for (int i = 0; i < m; i++)
      Q[i][k] = A[i][k] / R[k][k];
    for (int j = k + 1; j < n; j++) {
      R[k][j] = 0.0;
      for (int i = 0; i < m; i++)
        R[k][j] += Q[i][k] * A[i][j];
      for (int i = 0; i < m; i++)
        A[i][j] = A[i][j] - Q[i][k] * R[k][j];
    }
  }
#pragma endscop
}
"""

PREFIX_SUM = """
void prefix_sum(int n, int a[n][n], int s[n]) {
#pragma scop
  for (int i = 1; i < n; i++) {
    s[i] = s[i - 1];
    for (int j = 0; j < n; j++)
      s[i] += a[i][j] * (j + 1);
  }
#pragma endscop
}
"""

DOT = """
void dot(int n, double a[n], double b[n], double s[1], double t[n]) {
#pragma scop
  s[0] = 1.0;
  for (int i = 0; i < n; i++)
    s[0] += a[i] * b[i];
  s[0] = s[0] * 2.0;
  for (int i = 0; i < n; i++)
    t[i] = a[i] * s[0];
#pragma endscop
}
"""

SOURCES = {"dot": DOT, "scalars": SCALARS, "corner": CORNER, "trisolv": TRISOLV, "durbin": DURBIN,
           "gramschmidt": GRAMSCHMIDT, "prefix_sum": PREFIX_SUM}

_CK: dict = {}
_LIBS: dict = {}


def compiled(name: str, **opts):
    key = (name, tuple(sorted(opts.items())))
    if key not in _CK:
        _CK[key] = compile_kernel(read_c_kernel(SOURCES[name]), "cuda", opts)
    return _CK[key]


def gcc(name: str, tmp_path_factory):
    if name not in _LIBS:
        d = tmp_path_factory.mktemp("gcc")
        (d / "k.c").write_text(SOURCES[name])
        subprocess.run(["gcc", "-O0", "-ffp-contract=off", "-fPIC", "-shared", "-o",
                        str(d / "k.so"), str(d / "k.c"), "-lm"], check=True)
        _LIBS[name] = ctypes.CDLL(str(d / "k.so"))
    return _LIBS[name]


def c_order(name: str) -> list[tuple[str, str]]:
    """``(parameter, kind)`` in the C signature's order: ``int``, ``float``/``double``
    scalar or ``array``."""
    sig = re.search(rf"void\s+{name}\s*\((.*?)\)", SOURCES[name], re.S).group(1)
    out = []
    for p in sig.split(","):
        m = re.match(r"\s*(\w+)\s+(\w+)\s*(\[)?", p)
        out.append((m.group(2), "array" if m.group(3) else m.group(1)))
    return out


def arrays_for(name: str, sizes: dict, seed: int) -> dict[str, np.ndarray]:
    k = read_c_kernel(SOURCES[name])
    rng = np.random.default_rng(seed)
    f = compile_kernel(k, "c", {"parallel": False}).final_ir
    from polycomp import dtypes as dt
    from polycomp.shapes import eval_int
    out = {}
    for nm, b in zip(list(k.inputs) + list(k.outputs), list(f.inputs) + list(f.outputs)):
        shape = tuple(eval_int(d, sizes) for d in b.shape)
        if b.dtype.startswith("int"):
            a = rng.integers(-50, 50, size=shape).astype(dt.to_numpy(b.dtype))
        else:
            a = rng.uniform(0.5, 1.5, size=shape).astype(dt.to_numpy(b.dtype))
        if name == "trisolv" and nm == "L":
            a += np.eye(shape[0], dtype=a.dtype) * shape[0]
        if name == "durbin" and nm == "r":
            a *= 0.5 / max(shape[0], 1)          # a well-conditioned Toeplitz system
        out[nm] = a
    return out


def reference(name: str, lib, sizes: dict, arrays: dict) -> dict:
    data = {n: a.copy() for n, a in arrays.items()}
    args = []
    for p, kind in c_order(name):
        if kind == "array":
            args.append(ctypes.c_void_p(data[p].ctypes.data))
        elif kind == "int":
            args.append(ctypes.c_int(sizes[p]))
        else:
            args.append((ctypes.c_float if kind == "float" else ctypes.c_double)(
                float(data[p])))
    getattr(lib, name)(*args)
    return data


def run(name: str, sizes: dict, tmp_path_factory, seed: int = 3, **opts):
    """(simulator outputs, gcc -O0 outputs, simulator report)."""
    k = read_c_kernel(SOURCES[name])
    arrays = arrays_for(name, sizes, seed)
    ref = reference(name, gcc(name, tmp_path_factory), sizes, arrays)
    args = [arrays[n].copy() for n in list(k.inputs) + list(k.outputs)]
    got, rep = simulate(compiled(name, **opts), *args, **{p: sizes[p] for p in k.params})
    return dict(zip(k.outputs, as_tuple(got))), {n: ref[n] for n in k.outputs}, rep


def min_threads(rep) -> int:
    return min(int(np.prod(ks.grid)) * int(np.prod(ks.block)) for ks in rep.kernels)


# --------------------------------------------------------------------- one-instance statements

@pytest.mark.parametrize("n", [1, 2, 17, 300])
def test_scalar_definitions_recomputed_bitwise(n, tmp_path_factory):
    """adi/deriche-shaped: the four scalar definitions leave the tree (no single-thread
    kernel), every read evaluates the definition's expression in the C type: bitwise
    gcc -O0."""
    got, ref, rep = run("scalars", {"n": n}, tmp_path_factory)
    np.testing.assert_array_equal(got["v"], ref["v"])
    assert min_threads(rep) > 1
    notes = " ".join(compiled("scalars").notes["scop-gpu-singles"])
    assert "4 one-instance scalar definition(s) recomputed" in notes
    assert "single thread" not in " ".join(compiled("scalars").notes.get(
        "gpu-baseline-mapping", []))


@pytest.mark.parametrize("m", [1, 2, 3, 40, 300])
def test_corner_statement_joins_the_parallel_nest(m, tmp_path_factory):
    """correlation-shaped: ``c[m-1][m-1] = 1.0`` runs in the tiled kernel of the nest
    before it (at its band's first point, thread 0); m = 1 leaves the nest empty and the
    statement alone in the grid; bitwise gcc -O0."""
    got, ref, rep = run("corner", {"m": m}, tmp_path_factory)
    np.testing.assert_array_equal(got["c"], ref["c"])
    assert len(rep.kernels) == 1 and min_threads(rep) > 1
    assert "moved into the outer parallel band" in " ".join(
        compiled("corner").notes["scop-gpu-singles"])


def test_singles_golden(goldens):
    """Tree in / tree out of ``scop-gpu-singles`` on ``corner``
    (``tests/golden/c_singles_corner.scop-gpu-singles.{in,out}.isl``): one top-level
    nest left, the statement at the band's point 0 after the old subtree; every
    dependence respected."""
    model = read_c_kernel(CORNER).polyhedral_model()
    ctx = CompileState(model, get_target("cuda"), {})

    def same(a, text):
        read = lambda t: isl.Schedule.read_from_str(context(), t)  # noqa: E731
        return read(a.to_str()).plain_is_equal(read(text))
    sched = model.initial_schedule
    stored_in = goldens.expected("c_singles_corner.scop-gpu-singles.in.isl", sched.to_str(),
                                 lambda s: same(sched, s))
    assert same(sched, stored_in)
    out = ScopSinglesPass().run(isl.Schedule.read_from_str(context(), stored_in), ctx)
    stored_out = goldens.expected("c_singles_corner.scop-gpu-singles.out.isl", out.to_str(),
                                  lambda s: same(out, s))
    assert same(out, stored_out)
    assert out.get_root().child(0).get_type() == isl.schedule_node_type.band
    assert violated_dependences(out, model.dependences).is_empty()


# --------------------------------------------------------------------- block reductions

TOL = 1e-12


@pytest.mark.parametrize("n", [1, 2, 33, pytest.param(300, marks=pytest.mark.slow)])
def test_trisolv_block_reduction(n, tmp_path_factory):
    """``x[i] -= L[i][j] * x[j]``: a host loop over ``i`` of one 256-thread kernel each
    (``x[i] = b[i]`` and the division by thread 0 of the same block); reassociated sums:
    relative 1e-12 of gcc -O0; the C order (``block_reduce=False``) bitwise."""
    got, ref, rep = run("trisolv", {"n": n}, tmp_path_factory)
    np.testing.assert_allclose(got["x"], ref["x"], rtol=TOL, atol=0)
    assert min_threads(rep) == 256
    assert len(rep.kernels) == n       # one launch per pivot, nothing else
    got0, ref0, rep0 = run("trisolv", {"n": n}, tmp_path_factory, block_reduce=False)
    np.testing.assert_array_equal(got0["x"], ref0["x"])


def test_trisolv_cuda_source():
    """The kernel: thread 0 starts from ``x[i]``, the others from 0, the threads take
    ``j = tx + 256 c``, a shuffle butterfly and the warps through shared memory, then
    thread 0 stores and divides."""
    src = compiled("trisolv").source
    assert "__shfl_xor_sync" in src and "__syncthreads()" in src
    assert "__shared__" in src and "dim3(256, 1, 1)" in src
    assert "dim3(1, 1, 1)>>>" not in src.replace("dim3((unsigned)(1), (unsigned)(1), "
                                                 "(unsigned)(1)), dim3(256", "")
    notes = " ".join(compiled("trisolv").notes["gpu-baseline-mapping"])
    assert "block reduction of S_1 into one element of x" in notes


@pytest.mark.parametrize("n", [2, 3, 40, pytest.param(270, marks=pytest.mark.slow)])
def test_durbin_without_single_thread_kernel(n, tmp_path_factory):
    """durbin: the three statements before the step loop join its first iteration, the
    ``sum`` reduction is a block reduction with ``beta``, ``sum = 0`` and ``alpha`` on
    its thread 0, ``y[k] = alpha`` joins the parallel copy; relative 1e-12."""
    got, ref, rep = run("durbin", {"n": n}, tmp_path_factory)
    np.testing.assert_allclose(got["y"], ref["y"], rtol=TOL, atol=1e-300)
    assert min_threads(rep) >= 256


@pytest.mark.parametrize("m,n", [(1, 1), (5, 3), (40, 7),
                                 pytest.param(300, 4, marks=pytest.mark.slow)])
def test_gramschmidt_block_reduction(m, n, tmp_path_factory):
    """``nrm += A[i][k] * A[i][k]`` as a block reduction with ``nrm = 0`` before and
    ``R[k][k] = sqrt(nrm)`` after it on thread 0 (m >= n: full rank, so the
    comparison is well conditioned); relative 1e-11."""
    got, ref, rep = run("gramschmidt", {"m": m, "n": n}, tmp_path_factory)
    for o in ("A", "R", "Q"):
        np.testing.assert_allclose(got[o], ref[o], rtol=1e-11, atol=1e-13, err_msg=o)
    assert min_threads(rep) >= 256


@pytest.mark.parametrize("n", [1, 7, 300, 1000])
def test_top_level_block_reduction(n, tmp_path_factory):
    """A reduction outside every loop with a statement before and after it: one
    block-reduction kernel (the two on its thread 0), then the parallel nest; relative
    1e-12."""
    got, ref, rep = run("dot", {"n": n}, tmp_path_factory)
    for o in ("s", "t"):
        np.testing.assert_allclose(got[o], ref[o], rtol=TOL, atol=0, err_msg=o)
    assert len(rep.kernels) == 2 and min_threads(rep) == 256


@pytest.mark.parametrize("n", [2, 5, 300])
def test_integer_block_reduction_is_exact(n, tmp_path_factory):
    """An integer reduction reassociates exactly: bitwise gcc -O0."""
    got, ref, rep = run("prefix_sum", {"n": n}, tmp_path_factory)
    np.testing.assert_array_equal(got["s"], ref["s"])
    assert min_threads(rep) == 256


@pytest.mark.parametrize("name,n", [
    ("ludcmp_like", 3), ("ludcmp_like", 13), ("cholesky_like", 2), ("cholesky_like", 19),
    pytest.param("ludcmp_like", 45, marks=pytest.mark.slow),
    pytest.param("cholesky_like", 37, marks=pytest.mark.slow)])
def test_factorisations_without_single_thread_kernel(name, n, tmp_path_factory):
    """tests/c_scop_kernels' ludcmp and Cholesky (PolyBench's): every launch has 256
    threads or more, the row solve is a loop inside one block-reduction kernel per row
    (a barrier per iteration), so the launches grow with ``n``, not ``n^2``; relative
    1e-12 of gcc -O0 (the reassociated reductions)."""
    k = kernel(name)
    sizes = {"n": n}
    arrays = random_arrays(k, sizes, seed=5)
    ref = run_gcc(name, gcc_o0(name, tmp_path_factory), sizes, arrays)
    ck = compile_kernel(k, "cuda")
    got, rep = simulate(ck, *[arrays[x].copy() for x in list(k.inputs) + list(k.outputs)],
                        n=n)
    for o, g in zip(k.outputs, as_tuple(got)):
        np.testing.assert_allclose(g, ref[o], rtol=TOL, atol=1e-14, err_msg=o)
    assert min_threads(rep) >= 256
    notes = " ".join(ck.notes["gpu-baseline-mapping"])
    assert "block reduction" in notes
    # the row solve ``j < i`` runs inside one kernel per ``i`` (a loop of the block)
    assert "per iteration of a loop the block runs" in notes
    assert len(rep.kernels) <= (2 if name == "cholesky_like" else 4) * n


def test_block_reduction_golden(goldens):
    """Tree in (after ``scop-gpu-groups``) / tree out of ``gpu-baseline-mapping`` on
    trisolv (``tests/golden/c_reduce_trisolv.gpu-baseline-mapping.{in,out}.isl``): the
    host loop over ``i``, below it one kernel mark over a sequence: ``x[i] = b[i]`` on
    thread 0, a barrier, the accumulator's start, the ``j`` instances dealt to the
    threads (``j mod 256 = tx``, loop ``floor(j / 256)``), the combine, thread 0's
    store, the division on thread 0."""
    model = read_c_kernel(TRISOLV).polyhedral_model()
    ctx = CompileState(model, get_target("cuda"), {})
    sched = ScopGroupingPass().run(model.initial_schedule, ctx)

    def same(a, text):
        read = lambda t: isl.Schedule.read_from_str(context(), t)  # noqa: E731
        return read(a.to_str()).plain_is_equal(read(text))
    stored_in = goldens.expected("c_reduce_trisolv.gpu-baseline-mapping.in.isl",
                                 sched.to_str(), lambda s: same(sched, s))
    assert same(sched, stored_in)
    out = ScopBaselinePass().run(isl.Schedule.read_from_str(context(), stored_in), ctx)
    stored_out = goldens.expected("c_reduce_trisolv.gpu-baseline-mapping.out.isl",
                                  out.to_str(), lambda s: same(out, s))
    assert same(out, stored_out)
    host = out.get_root().child(0)
    assert host.get_type() == isl.schedule_node_type.band
    assert not host.band_member_get_coincident(0)


@pytest.mark.nvcc
@pytest.mark.parametrize("name", ["scalars", "corner", "trisolv", "prefix_sum",
                                  *(pytest.param(n, marks=pytest.mark.slow)
                                    for n in ("dot", "durbin", "gramschmidt"))])
def test_nvcc_compiles(name, tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text(compiled(name).source)
    r = subprocess.run(["nvcc", "-arch=sm_80", "-c", "-o", str(tmp_path / "k.o"), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
