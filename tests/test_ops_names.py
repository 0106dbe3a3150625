"""User names that collide with identifiers of the generated C/CUDA still compile and run.

Tensor, stage and symbol names are the user's; the printers rename the ones C or CUDA
cannot use (math functions, runtime functions, locals of the host code, isl's loop
iterators ``c0, c1, ...``) without changing the argument order.
"""
import subprocess

import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import build, compile_kernel, interpret

N, c1 = pc.sym("N c1")


@pc.tensor_expr
def clashing(expf: pc.Tensor[(N, c1), "float64"], err: pc.Tensor[(c1,), "float64"]):
    a = pc.compute((N, c1), lambda i, j: pc.exp(expf[i, j]), name="exp")
    b = pc.compute((N, c1), lambda i, j: a[i, j] * err[j], name="c0")
    return pc.compute((N, c1), lambda i, j: b[i, j] + 1.0, name="free")


def _ref(x, y):
    return np.exp(x) * y + 1.0


def test_clashing_names_c_backend():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((3, 5)), rng.standard_normal(5)
    np.testing.assert_allclose(build(clashing, "c")(x, y), _ref(x, y), rtol=1e-12)
    np.testing.assert_allclose(interpret(clashing, x, y), _ref(x, y), rtol=1e-12)


@pytest.mark.nvcc
def test_clashing_names_cuda_source_compiles(tmp_path):
    ck = compile_kernel(clashing, "cuda")
    x, y = np.ones((2, 3)), np.arange(3.0)
    np.testing.assert_allclose(interpret(ck, x, y), _ref(x, y), rtol=1e-12)
    cu = tmp_path / "k.cu"
    cu.write_text(ck.source)
    r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "k.cubin"), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_binder_shadowing_another_variable_of_the_same_name_is_renamed():
    """Two distinct IR variables named ``t`` (a loop and a let inside it whose body uses
    both) and a let named ``exp`` in code that calls exp(): C shadowing must not change
    which variable a reference means."""
    from polycomp import ir
    from polycomp.hw.cpu.build import CFunction, build_shared
    from polycomp.hw.cpu.codegen import emit_c
    from polycomp.lowering.flatten import flatten

    n = ir.Var("N", "int64", is_param=True)
    x = ir.Buffer("x", "float64", (n,))
    y = ir.Buffer("y", "float64", (n,))
    i, t, e = ir.Var("t"), ir.Var("t", "float64"), ir.Var("exp", "float64")
    body = ir.For(i, ir.IntImm(0), n, "serial",
                  ir.LetStmt(t, x[i] * 2.0,
                             ir.LetStmt(e, ir.call("exp", t),
                                        ir.Store(y, (i,), e + ir.cast(i, "float64")))))
    func = flatten(ir.LoweredFunc("shadow", (n,), (x,), (y,), body))
    f = CFunction(func, build_shared(emit_c(func)))
    xs = np.linspace(-1, 1, 7)
    np.testing.assert_allclose(f(xs), np.exp(2 * xs) + np.arange(7), rtol=1e-12)
    np.testing.assert_allclose(interpret_func(func, xs), np.exp(2 * xs) + np.arange(7), rtol=1e-12)


def interpret_func(func, *arrays):
    from polycomp.lowering.interpreter import run_func
    from polycomp.shapes import infer_params
    values = infer_params(func.params, func.inputs, list(arrays), {})
    return run_func(func, {b.name: a for b, a in zip(func.inputs, arrays)}, values)["y"]
