"""PolyBench-style affine C kernels (written for these tests) through the C front end.

Each kernel exercises the constructs PolyBench uses beyond plain array parameters:
scalar parameters passed by value (several types), scalar temporaries (reductions into
a scalar, values carried from one iteration to the next, initialised declarations),
local arrays (constant extents exceeded by a parameter, as durbin's ``z[N]``, and VLA
locals), ``typedef`` names, ``char`` with C's integer promotions and chained
assignments.  Every kernel is built for the ``c`` and ``cpu`` targets with
``fp_exact=True`` and compared bitwise with the same function compiled by
``gcc -O0 -ffp-contract=off`` on random data (the harness of ``polycomp bench
polybench`` does the calls), at two sizes, one of them with extents 1.
"""
import json
import os
import textwrap

import numpy as np
import pytest

from polycomp.benchmarks import polybench as pb
from polycomp.errors import (
    DTypeError,
    NonAffineIndexError,
    PolycompError,
    ShapeMismatchError,
    UnknownSymbolError,
    UnsupportedConstructError,
)
from polycomp.frontend.c_reader import read_c_kernel

KERNELS = {
    # scalar parameters of several types; a float typedef; a scalar accumulator
    "scaled_rowsum": ("""
typedef float real;
void kernel_scaled_rowsum(int n, int m, double alpha, real beta, long shift,
                          double A[n][m], real x[m], double y[n]) {
  int i, j;
  double acc;
#pragma scop
  for (i = 0; i < n; i++) {
    acc = 0.0;
    for (j = 0; j < m; j++)
      acc += A[i][j] * x[j];
    y[i] = alpha * acc + beta * y[i] + shift;
    x[0] = x[0] * beta;
  }
#pragma endscop
}
""", {"n": 5, "m": 7, "shift": 3}),
    # a value carried between iterations through scalars (deriche-like recurrence), an
    # initialised declaration ahead of the SCoP and a chained assignment
    "recurrence": ("""
void kernel_recurrence(int w, int h, float k, float img[w][h], float out[w][h]) {
  int i, j;
  float prev, prev2, in1;
  float c0 = 0.25f;
  float c1;
#pragma scop
  c1 = in1 = k * 2.0f;
  for (i = 0; i < w; i++) {
    prev = 0.0f;
    prev2 = 0.0f;
    in1 = 0.0f;
    for (j = 0; j < h; j++) {
      out[i][j] = c0 * img[i][j] + c1 * in1 + k * prev + 0.5f * prev2;
      in1 = img[i][j];
      prev2 = prev;
      prev = out[i][j];
    }
  }
#pragma endscop
}
""", {"w": 4, "h": 9}),
    # a local array with a constant extent the loops exceed for large n (durbin's z[N])
    # and a local VLA; scalar temporaries declared inside the loop body
    "local_arrays": ("""
void kernel_local_arrays(int n, double r[n], double y[n]) {
  double z[8];
  double t[n];
  int k, i;
#pragma scop
  for (i = 0; i < n; i++)
    t[i] = r[i] * 0.5;
  for (k = 1; k < n; k++) {
    double s = 0.0;
    for (i = 0; i < k; i++)
      s += t[k - i - 1] * y[i];
    for (i = 0; i < k; i++)
      z[i] = y[i] + s * y[k - i - 1];
    for (i = 0; i < k; i++)
      y[i] = z[i];
    y[k] = -(r[k] + s);
  }
#pragma endscop
}
""", {"n": 6}),
    # char through a typedef (nussinov-like), integer promotions, data-dependent max
    "char_table": ("""
typedef char nuc;
#define pair(a, b) (((a) + (b)) == 3 ? 1 : 0)
#define best(a, b) ((a) >= (b) ? (a) : (b))
void kernel_char_table(int n, nuc seq[n], int table[n][n], int wide[n]) {
  int i, j;
#pragma scop
  for (i = 0; i < n; i++)
    wide[i] = seq[i] * seq[i] + seq[i] * 120;
  for (i = n - 1; i >= 0; i--)
    for (j = i + 1; j < n; j++) {
      table[i][j] = best(table[i][j], table[i][j - 1]);
      if (i + 1 < n)
        table[i][j] = best(table[i][j], table[i + 1][j]);
      if (i + 1 < n && j - 1 >= i + 1)
        table[i][j] = best(table[i][j], table[i + 1][j - 1] + pair(seq[i], seq[j]));
    }
#pragma endscop
}
""", {"n": 7}),
    # a bool scalar parameter and an int temporary
    "flags": ("""
void kernel_flags(int n, _Bool on, double a, int v[n], double d[n]) {
  int i;
  int cnt = 0;
#pragma scop
  for (i = 0; i < n; i++) {
    cnt += v[i];
    d[i] = on ? d[i] * a + cnt : d[i] - cnt;
  }
#pragma endscop
}
""", {"n": 9}),
}


def _poly(name, sizes):
    src, _ = KERNELS[name]
    return pb.PolyKernel(name, f"kernel_{name}", textwrap.dedent(src), dict(sizes))


def _ones(sizes):
    return {k: 1 for k in sizes}


def _data(k, pk, seed):
    data = pb.make_data(k, pk, seed=seed)
    if pk.name == "char_table":  # values whose products leave the char range
        rng = np.random.default_rng(seed)
        data["seq"] = rng.integers(-100, 101, size=data["seq"].shape).astype(np.int8)
    return data


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_bitwise_equal_to_gcc_O0(name, tmp_path):
    for sizes in (KERNELS[name][1], _ones(KERNELS[name][1])):
        pk = _poly(name, sizes)
        k = read_c_kernel(pk.source, pk.func)
        data = _data(k, pk, seed=sum(sizes.values()))
        ref = pb.Reference(k, pk, "gcc", pb.EXACT_REF_FLAGS, str(tmp_path))
        want = pb.run_once(ref.fn, ref.args, data)
        for target in ("c", "cpu"):
            c = pb.Compiled(k, target, {"fp_exact": True})
            got = pb.run_once(c.f.cfunc, c.args, data)
            for out in k.outputs:
                assert pb.same_bits(got[out], want[out]), (name, target, sizes, out)


def test_scalar_parameters_are_zero_dimensional_inputs():
    k = read_c_kernel(_poly("scaled_rowsum", {}).source)
    assert k.params == ("n", "m", "shift")
    assert k.inputs == ("alpha", "beta", "A")
    assert k.outputs == ("x", "y")
    shapes = {a.name: (a.buffer.shape, a.buffer.dtype) for a in k.graph.arrays}
    assert shapes["alpha"] == ((), "float64") and shapes["beta"] == ((), "float32")
    assert k.graph.signature == ("n", "m", "alpha", "beta", "shift", "A", "x", "y")
    assert [t.name for t in k.graph.temporaries] == ["acc"]


def test_build_takes_numbers_for_scalar_parameters():
    from polycomp.driver import build
    src = """void f(int n, double a, float b, double x[n], double y[n]) {
      for (int i = 0; i < n; i++) y[i] = a * x[i] + b; }"""
    k = read_c_kernel(src)
    x = np.arange(5.0)
    y = build(k, "c")(2.5, np.float32(0.25), x, np.zeros(5))
    np.testing.assert_array_equal(y, 2.5 * x + 0.25)


def test_local_array_sized_by_its_accesses():
    k = read_c_kernel(_poly("local_arrays", {}).source)
    z = next(t for t in k.graph.temporaries if t.name == "z")
    # declared z[8]; the loops touch z[0 .. n-2], so it holds n elements for every n
    from polycomp.lowering.printer import expr_str
    assert "n" in expr_str(z.buffer.shape[0])


def test_scalar_temporary_dependences_are_real():
    """The scalar accumulator carries flow dependences between the statements that
    use it (the model keeps them; nothing is privatised silently)."""
    k = read_c_kernel(_poly("scaled_rowsum", {}).source)
    m = k.polyhedral_model()
    acc = [a for s in m.statements for a in s.accesses if a.buffer.name == "acc"]
    assert {a.kind for a in acc} == {"read", "write"}
    assert not m.dependences.is_empty()


@pytest.mark.parametrize("body, cls, match", [
    ("double a; a = 1; A[0] = a; A[0] = b[0];", ShapeMismatchError, "0 dimension"),
    ("b = 2.0;", UnsupportedConstructError, "assignment to the scalar parameter 'b'"),
    ("q = 2.0;", UnknownSymbolError, "undeclared variable 'q'"),
    ("double t; for (int i = 0; i < t; i++) A[i] = 1;", NonAffineIndexError, "'t'"),
    ("unsigned char u[4]; u[0] = 1; A[0] = u[0];", DTypeError, "unsigned"),
    ("double z[3] = {0}; A[0] = z[0];", UnsupportedConstructError, "initialiser"),
    ("static double s; s = 1; A[0] = s;", UnsupportedConstructError, "declaration"),
    ("double A; A = 1;", UnsupportedConstructError, "already declared"),
])
def test_errors_for_scalars_and_locals(body, cls, match):
    src = f"void f(int N, double b, double A[N]) {{\n{body}\n}}\n"
    with pytest.raises(cls, match=match) as e:
        read_c_kernel(src)
    assert isinstance(e.value, PolycompError)
    assert e.value.location is not None and e.value.location.lineno == 2, str(e.value)


def test_unsigned_element_type_is_a_clear_error():
    with pytest.raises(DTypeError, match="no unsigned types"):
        read_c_kernel("void f(int n, unsigned A[n]) { for (int i = 0; i < n; i++) A[i] = 1; }")


# --------------------------------------------------------------------------- harness


def _fake_polybench(root):
    """A PolyBench-layout folder holding two of the kernels above."""
    os.makedirs(root / "utilities")
    (root / "utilities" / "polybench.h").write_text(
        "#define POLYBENCH_ARRAY(x) x\n#ifdef MINI_DATASET\n#define N 6\n#else\n#define N 9\n"
        "#endif\n")
    for name in ("local_arrays", "flags"):
        d = root / "group" / name
        os.makedirs(d)
        src, _ = KERNELS[name]
        sig = {"local_arrays": "double r[N]; double y[N]; kernel_local_arrays(n, r, y);",
               "flags": "int v[N]; double d[N]; kernel_flags(n, 1, 0.5, v, d);"}[name]
        (d / f"{name}.c").write_text('#include "polybench.h"\n' + textwrap.dedent(src) +
                                     f"int main(void) {{\n  int n = N;\n  {sig}\n  return 0;\n}}\n")


def test_bench_polybench_on_a_fake_tree(tmp_path, capsys):
    _fake_polybench(tmp_path)
    omp_before = os.environ.get("OMP_NUM_THREADS")
    assert pb.main(["--polybench", str(tmp_path), "--dataset", "SMALL", "--rounds", "1",
                    "--threads", "1", "--json"]) == 0
    # the run's thread count does not leak into the caller (targets read it)
    assert os.environ.get("OMP_NUM_THREADS") == omp_before
    res = json.loads(capsys.readouterr().out)
    assert res["kernels"] == 2 and res["read"] == 2 and res["exact"] == 2
    for r in res["rows"]:
        assert r["exact"] == {"c": True, "cpu": True}, r
        assert r["speedup"] > 0 and r["rel_err"] < 1e-6 and r["compile_s"] > 0
    assert pb.extract(str(tmp_path / "group" / "flags" / "flags.c"), str(tmp_path),
                      "SMALL").sizes == {"n": 9}


def test_bench_polybench_without_the_sources(tmp_path, capsys):
    assert pb.main(["--polybench", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "no PolyBench folder" in err and "4.2.1" in err and "--polybench DIR" in err
    assert pb.main([]) == 2
    assert "--polybench DIR is required" in capsys.readouterr().err


# --------------------------------------------------------------------------- expansion


def _temps(src):
    from polycomp.lowering.printer import expr_str
    k = read_c_kernel(src)
    return {t.name: tuple(expr_str(d) for d in t.buffer.shape) for t in k.graph.temporaries}


def test_scalar_written_before_read_in_each_iteration_is_expanded():
    src = """void f(int n, int m, double A[n][m], double B[n][m]) {
      double t;
      for (int i = 0; i < n; i++)
        for (int j = 1; j < m; j++) {
          t = 0.0;
          for (int k = 0; k < j; k++) t += A[i][k];
          B[i][j] = t;
        }
    }"""
    assert _temps(src) == {"t": ("n", "m")}


def test_reused_scalar_is_split_into_webs():
    """One name, two independent uses (deriche's ym1): two scalars, each expanded."""
    src = """void f(int n, int m, float A[n][m], float B[n][m]) {
      float p;
      for (int i = 0; i < n; i++) {
        p = 0.0f;
        for (int j = 0; j < m; j++) { B[i][j] = A[i][j] + p; p = A[i][j]; }
      }
      for (int j = 0; j < m; j++) {
        p = 1.0f;
        for (int i = 0; i < n; i++) { A[i][j] = B[i][j] * p; p = B[i][j]; }
      }
    }"""
    assert _temps(src) == {"p": ("n",), "p_1": ("m",)}


@pytest.mark.parametrize("body", [
    # carried from one iteration to the next: a running sum
    "s = 0; for (int i = 0; i < n; i++) { s += A[i]; B[i] = s; }",
    # read before any write in the SCoP: the value comes from outside
    "for (int i = 0; i < n; i++) { B[i] = s; s = A[i]; }",
    # a loop with negative iterations
    "for (int i = -3; i < n; i++) { s = A[i + 3]; B[i + 3] = s; }",
])
def test_scalar_not_expanded_when_unsafe(body):
    src = f"void f(int n, double A[n + 3], double B[n + 3]) {{\n double s;\n {body}\n}}"
    assert _temps(src) == {"s": ()}


# --------------------------------------------------------------------------- fp_exact


def test_fp_exact_option():
    from polycomp.driver import compile_kernel
    from polycomp.errors import OptionError
    from polycomp.hw.options import CpuOptions
    o = CpuOptions.from_mapping({"fp_exact": True})
    assert (o.vectorize, o.microkernel, o.reciprocal) == (False, False, False)
    assert CpuOptions().fp_exact is False and CpuOptions().vectorize is True
    k = read_c_kernel(_poly("scaled_rowsum", {}).source)
    src = compile_kernel(k, "cpu", options={"fp_exact": "true"}).source
    assert src.startswith('#pragma GCC optimize ("fp-contract=off")')
    assert "fp-contract" not in compile_kernel(k, "cpu").source
    with pytest.raises(OptionError, match="fp_exact is not supported on npu"):
        compile_kernel(k, "npu", options={"fp_exact": True})
    cu = compile_kernel(k, "cuda", options={"fp_exact": True}).source
    assert cu.startswith("// fp_exact: build with nvcc -fmad=false")


def test_block_scoped_locals_are_separate_variables():
    """C block scope: a name declared again in a sibling or nested block is another
    variable (the outer `t` keeps its value)."""
    from polycomp.driver import build
    src = """void f(int N, double b, double A[N]) {
      double t = 1;
      for (int i = 0; i < N; i++) { double t = A[i]; A[i] = t * b; }
      for (int i = 0; i < N; i++) { double t = 3 * A[i]; A[i] = t; }
      A[0] = A[0] + t;
    }"""
    k = read_c_kernel(src)
    assert sorted(t.name for t in k.graph.temporaries) == ["t", "t_1", "t_2"]
    a = np.array([2.0, 5.0, 7.0])
    want = a * 0.5 * 3
    want[0] += 1
    np.testing.assert_array_equal(build(k, "c")(0.5, a), want)
    with pytest.raises(UnsupportedConstructError, match="already declared"):
        read_c_kernel("void f(int N, double A[N]) { double t; double t; t = 1; A[0] = t; }")


def test_bench_polybench_against_a_peer_build(tmp_path, capsys):
    """``--dump-c DIR`` writes each kernel's generated C; ``--peer-c DIR`` times that C
    beside this build in the same run (here the same build: a ratio near 1)."""
    _fake_polybench(tmp_path / "pb")
    peer = tmp_path / "peer"
    assert pb.main(["--polybench", str(tmp_path / "pb"), "--dataset", "SMALL",
                    "--kernels", "local_arrays", "--dump-c", str(peer)]) == 0
    assert "wrote 1 sources" in capsys.readouterr().out
    assert "void kernel_local_arrays(" in (peer / "local_arrays.c").read_text()
    assert pb.main(["--polybench", str(tmp_path / "pb"), "--dataset", "SMALL", "--rounds", "3",
                    "--threads", "1", "--kernels", "local_arrays", "--peer-c", str(peer),
                    "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    r, = res["rows"]
    assert res["peer"] == str(peer) and len(r["peer_s"]) == 2 and r["vs_peer"] > 0
    assert res["geomean_vs_peer"] == pytest.approx(r["vs_peer"])


def test_bench_polybench_target_cuda_without_a_gpu(tmp_path, capsys, monkeypatch):
    """``--target cuda``: per kernel the path choice, the launches of the host program
    and the threads of the least parallel one (computed without a GPU); with no GPU the
    command says so and exits with 2 after those columns."""
    import polycomp.hw.cuda.launcher as launcher
    monkeypatch.setattr(launcher, "gpu_available", lambda: False)
    _fake_polybench(tmp_path)
    assert pb.main(["--polybench", str(tmp_path), "--dataset", "SMALL", "--target", "cuda",
                    "--json"]) == 2
    out = capsys.readouterr()
    res = json.loads(out.out)
    assert res["kernels"] == 2 and res["read"] == 2 and res["gpu"] is False
    for r in res["rows"]:
        assert r["error"] == "no GPU" and r["launches"] >= 1 and r["min_threads"] >= 1
        assert r["paths"]
    assert "no GPU" in out.err and "c_cuda_measure.py --bundle" in out.err
