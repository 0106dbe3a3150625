"""Array privatisation of C SCoPs (issue #28 item 1; ``frontend/c_expand.expand_arrays``).

An array written before it is read in each iteration of some outer loops (doitgen's
``sum[p]`` under ``for r: for q:``) is expanded over those loops, so no flow dependence
through it is carried by them; an array parameter gets its final contents back by a
copy-out of the last iteration. Checked: the dependences of the expanded model (isl),
golden trees of ``scop-gpu-groups`` on it, the CUDA simulator and the ``cpu`` target
bitwise against ``gcc -O0 -ffp-contract=off``, and the cases left alone.
"""
from __future__ import annotations

import ctypes
import subprocess

import islpy as isl
import numpy as np
import pytest

from polycomp.driver import build, compile_kernel
from polycomp.frontend.c_reader import read_c_kernel
from polycomp.hw.cuda.codegen import host_program, program_kernels
from polycomp.hw.cuda.simulator import simulate
from polycomp.hw.target import get_target
from polycomp.islutil import context, maps
from polycomp.scheduler.common.tree import band_coincidence, violated_dependences
from polycomp.scheduler.gpu.scop_groups import ScopGroupingPass
from polycomp.state import CompileState

DOITGEN = r"""
void doitgen(int nr, int nq, int np, double A[nr][nq][np], double C4[np][np], double sum[np]) {
  for (int r = 0; r < nr; r++)
    for (int q = 0; q < nq; q++) {
      for (int p = 0; p < np; p++) {
        sum[p] = 0.0;
        for (int s = 0; s < np; s++)
          sum[p] += A[r][q][s] * C4[s][p];
      }
      for (int p = 0; p < np; p++)
        A[r][q][p] = sum[p];
    }
}
"""

#: a local array (no copy-out) written before read in each row
ROWTMP = r"""
void rowtmp(int n, int m, float A[n][m], float B[n][m]) {
  float t[m];
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < m; j++)
      t[j] = A[i][j] * 2.0f;
    for (int j = 1; j < m; j++)
      B[i][j] = t[j] - t[j - 1] + B[i][j];
  }
}
"""

#: ``x`` carries a value from one ``i`` to the next: not privatised
CARRIED = r"""
void carried(int n, double x[n], double y[n]) {
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < n; j++)
      x[j] = x[j] + y[i];
  }
}
"""

#: ``z`` is private per ``k`` but ``y`` carries the ``k`` loop anyway (durbin): the
#: expansion would free nothing, so it is not done
DURBIN_LIKE = r"""
void durb(int n, double y[n], double r[n]) {
  double z[n];
  for (int k = 1; k < n; k++) {
    for (int i = 0; i < k; i++)
      z[i] = r[i] + y[k - i - 1];
    for (int i = 0; i < k; i++)
      y[i] = z[i] * 0.5;
  }
}
"""


def _so(src: str, name: str, tmp_path) -> ctypes.CDLL:
    c = tmp_path / f"{name}.c"
    c.write_text(src)
    so = tmp_path / f"{name}.so"
    subprocess.run(["gcc", "-O0", "-ffp-contract=off", "-fPIC", "-shared", "-o", str(so),
                    str(c)], check=True)
    return ctypes.CDLL(str(so))


def _doitgen_data(nr, nq, np_, seed=0):
    rng = np.random.default_rng(seed)
    return {"A": rng.uniform(-1, 1, (nr, nq, np_)), "C4": rng.uniform(-1, 1, (np_, np_)),
            "sum": rng.uniform(-1, 1, (np_,))}


def _doitgen_ref(nr, nq, np_, data, tmp_path):
    ref = {n: a.copy() for n, a in data.items()}
    _so(DOITGEN, "doitgen", tmp_path).doitgen(
        ctypes.c_int(nr), ctypes.c_int(nq), ctypes.c_int(np_),
        *[ctypes.c_void_p(ref[n].ctypes.data) for n in ("A", "C4", "sum")])
    return ref


def test_doitgen_sum_is_privatised_and_copied_out():
    k = read_c_kernel(DOITGEN)
    temps = {t.name: t.buffer for t in k.graph.temporaries}
    assert list(temps) == ["sum_priv"] and len(temps["sum_priv"].shape) == 3
    assert k.outputs == ("A", "sum")                       # the signature is unchanged
    writes = [(cs.name, cs.write.name) for cs in k.statements]
    assert writes == [("S_0", "sum_priv"), ("S_1", "sum_priv"), ("S_2", "A"), ("S_3", "sum")]
    model = k.polyhedral_model()
    # no dependence of the (r, q) nest relates two different (r, q) iterations
    for m in maps(model.dependences):
        if m.get_tuple_name(isl.dim_type.in_) == "S_3" or \
                m.get_tuple_name(isl.dim_type.out) == "S_3":
            continue
        same = m.equate(isl.dim_type.in_, 0, isl.dim_type.out, 0) \
            .equate(isl.dim_type.in_, 1, isl.dim_type.out, 1)
        assert m.is_subset(same), m
    # the copy-out, inside the (r, q) loops, runs in their last iteration only
    assert "copy-out" in k.statements[3].source.text
    s3 = next(s for s in model.statements if s.name == "S_3")
    last = isl.Set.read_from_str(s3.domain.get_ctx(), "[nr, nq, np] -> { S_3[r, q, c] : "
                                 "r = nr - 1 and q = nq - 1 and 0 <= c < np and nr > 0 "
                                 "and nq > 0 }")
    assert s3.domain.is_equal(last.align_params(s3.domain.get_space()))


def test_doitgen_gpu_groups_golden(goldens):
    """Tree in (the program order of the privatised model) / tree out of
    ``scop-gpu-groups``: the ``(r, q)`` band is coincident and marked as the tiled
    nest's backbone; the copy-out sits in its last iteration (inside the band); every
    dependence is respected."""
    model = read_c_kernel(DOITGEN).polyhedral_model()
    ctx = CompileState(model, get_target("cuda"), {})

    def same(a, text):
        read = lambda t: isl.Schedule.read_from_str(context(), t)  # noqa: E731
        return read(a.to_str()).plain_is_equal(read(text))
    sched = model.initial_schedule
    stored_in = goldens.expected("c_priv_doitgen.scop-gpu-groups.in.isl", sched.to_str(),
                                 lambda s: same(sched, s))
    assert same(sched, stored_in)
    out = ScopGroupingPass().run(isl.Schedule.read_from_str(context(), stored_in), ctx)
    stored_out = goldens.expected("c_priv_doitgen.scop-gpu-groups.out.isl", out.to_str(),
                                  lambda s: same(out, s))
    assert same(out, stored_out)
    band = out.get_root().child(0)
    while band.get_type() != isl.schedule_node_type.band:
        band = band.child(0)
    assert band.band_n_member() == 2
    assert band.parent().get_type() == isl.schedule_node_type.mark   # backbone:<n>
    assert band_coincidence(band, model.dependences)[:2] == [True, True]
    assert violated_dependences(out, model.dependences).is_empty()


@pytest.mark.parametrize("nr,nq,np_", [(1, 1, 1), (5, 3, 7), (33, 2, 3)])
def test_doitgen_cuda_simulator_bitwise(nr, nq, np_, tmp_path):
    ck = compile_kernel(read_c_kernel(DOITGEN), "cuda")
    temps, program = host_program(ck.final_ir)
    for info in program_kernels(program):
        assert info.block[0] * info.block[1] * info.block[2] > 1
    data = _doitgen_data(nr, nq, np_, seed=np_)
    ref = _doitgen_ref(nr, nq, np_, data, tmp_path)
    got, _ = simulate(ck, data["C4"], data["A"].copy(), data["sum"].copy(),
                      nr=nr, nq=nq, np=np_)
    np.testing.assert_array_equal(got[0], ref["A"])
    np.testing.assert_array_equal(got[1], ref["sum"])


@pytest.mark.parametrize("nr,nq,np_", [(1, 1, 1), (4, 3, 9)])
def test_doitgen_cpu_bitwise(nr, nq, np_, tmp_path):
    k = read_c_kernel(DOITGEN)
    data = _doitgen_data(nr, nq, np_, seed=3)
    ref = _doitgen_ref(nr, nq, np_, data, tmp_path)
    got = build(k, "cpu", {"fp_exact": True})(data["C4"], data["A"], data["sum"])
    np.testing.assert_array_equal(got[0], ref["A"])
    np.testing.assert_array_equal(got[1], ref["sum"])


@pytest.mark.parametrize("n,m", [(1, 1), (3, 5), (40, 17)])
def test_local_array_privatised_no_copy_out(n, m, tmp_path):
    k = read_c_kernel(ROWTMP)
    temps = {t.name: t.buffer for t in k.graph.temporaries}
    assert list(temps) == ["t_priv"] and len(temps["t_priv"].shape) == 2
    assert len(k.statements) == 2                        # no copy-out of a local
    rng = np.random.default_rng(n)
    a = rng.uniform(-1, 1, (n, m)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, m)).astype(np.float32)
    ref = b.copy()
    _so(ROWTMP, "rowtmp", tmp_path).rowtmp(ctypes.c_int(n), ctypes.c_int(m),
                                           ctypes.c_void_p(a.ctypes.data),
                                           ctypes.c_void_p(ref.ctypes.data))
    ck = compile_kernel(k, "cuda")
    assert "scop-gpu-groups" in ck.notes and \
        "tiled GPU pipeline" in " ".join(ck.notes["scop-gpu-groups"])
    got, _ = simulate(ck, a, b.copy(), n=n, m=m)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(build(k, "cpu", {"fp_exact": True})(a, b), ref)


@pytest.mark.parametrize("src", [CARRIED, DURBIN_LIKE])
def test_not_privatised(src):
    """A value carried across the outer loop, or a private array under a loop that
    other arrays serialise anyway: left as written."""
    k = read_c_kernel(src)
    assert not any(t.name.endswith("_priv") for t in k.graph.temporaries)


# --------------------------------------------------------------------------- scalar params

GEMM_AB = r"""
void gemm_ab(int ni, int nj, int nk, double alpha, double beta, double C[ni][nj],
             double A[ni][nk], double B[nk][nj]) {
  for (int i = 0; i < ni; i++) {
    for (int j = 0; j < nj; j++)
      C[i][j] *= beta;
    for (int k = 0; k < nk; k++)
      for (int j = 0; j < nj; j++)
        C[i][j] += alpha * A[i][k] * B[k][j];
  }
}
"""


@pytest.mark.parametrize("ni,nj,nk", [(1, 1, 1), (7, 5, 3), (67, 3, 17)])
def test_scalar_parameters_on_cuda(ni, nj, nk, tmp_path):
    """PolyBench's ``alpha``/``beta`` (zero-dimensional inputs) in a tiled contraction:
    ``promote-shared`` refuses them (one value) instead of failing on an empty box;
    bitwise gcc -O0 on the simulator (the CUDA path of 11 PolyBench kernels)."""
    ck = compile_kernel(read_c_kernel(GEMM_AB), "cuda")
    assert "a zero-dimensional array" in " ".join(ck.notes["promote-shared"])
    rng = np.random.default_rng(ni)
    A, B = rng.uniform(-1, 1, (ni, nk)), rng.uniform(-1, 1, (nk, nj))
    C = rng.uniform(-1, 1, (ni, nj))
    ref = C.copy()
    _so(GEMM_AB, "gemm_ab", tmp_path).gemm_ab(
        ctypes.c_int(ni), ctypes.c_int(nj), ctypes.c_int(nk), ctypes.c_double(1.5),
        ctypes.c_double(-0.75), ctypes.c_void_p(ref.ctypes.data),
        ctypes.c_void_p(A.ctypes.data), ctypes.c_void_p(B.ctypes.data))
    k = read_c_kernel(GEMM_AB)
    named = {"alpha": np.array(1.5), "beta": np.array(-0.75), "A": A, "B": B, "C": C.copy()}
    got, _ = simulate(ck, *[named[n] for n in list(k.inputs) + list(k.outputs)],
                      ni=ni, nj=nj, nk=nk)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.parametrize("src", [DOITGEN, ROWTMP, GEMM_AB])
def test_nvcc_compiles(src, tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text(compile_kernel(read_c_kernel(src), "cuda").source)
    # one nvcc run for both architectures: the host code (most of a ``-c`` build's time)
    # is compiled once
    r = subprocess.run(["nvcc", "-gencode", "arch=compute_80,code=sm_80",
                        "-gencode", "arch=compute_90a,code=sm_90a", "-c",
                        "-o", str(tmp_path / "k.o"), str(cu)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
