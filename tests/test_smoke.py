"""End-to-end smoke test of the spine on the README example."""
import importlib.util
import os
import subprocess

import numpy as np

from polycomp.driver import build, compile_kernel, interpret

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _example():
    spec = importlib.util.spec_from_file_location(
        "ex", os.path.join(ROOT, "examples", "matmul_relu.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.matmul_relu


def test_matmul_relu_interpreter_and_c():
    k = _example()
    rng = np.random.default_rng(0)
    A = rng.standard_normal((37, 19)).astype(np.float32)
    B = rng.standard_normal((19, 23)).astype(np.float32)
    ref = np.maximum(A @ B, 0)
    np.testing.assert_allclose(interpret(k, A, B), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(build(k, "c")(A, B), ref, rtol=1e-5, atol=1e-5)


def test_matmul_relu_cuda_simulated_order_and_nvcc(tmp_path):
    k = _example()
    ck = compile_kernel(k, "cuda")
    rng = np.random.default_rng(1)
    A = rng.standard_normal((17, 5)).astype(np.float32)
    B = rng.standard_normal((5, 33)).astype(np.float32)
    np.testing.assert_allclose(interpret(ck, A, B), np.maximum(A @ B, 0), rtol=1e-5, atol=1e-5)
    cu = tmp_path / "k.cu"
    cu.write_text(ck.source)
    r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "k.cubin"), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
