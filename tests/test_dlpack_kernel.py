"""Built CPU kernels take DLPack tensors (torch) through polycomp/dlpack.py, the base-layer
helper hw/cpu/build.py imports (the backend imports nothing from graph/: tests/test_layers.py)."""
import importlib.util
import os

import numpy as np
import pytest

from polycomp.driver import build

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _matmul_relu():
    spec = importlib.util.spec_from_file_location(
        "ex_dlpack", os.path.join(ROOT, "examples", "matmul_relu.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.matmul_relu


def test_torch_in_torch_out_and_out_in_place():
    fn = build(_matmul_relu(), "c")
    rng = np.random.default_rng(3)
    A = rng.standard_normal((13, 7)).astype(np.float32)
    B = rng.standard_normal((7, 11)).astype(np.float32)
    ref = np.maximum(A @ B, 0)
    got = fn(torch.from_numpy(A), torch.from_numpy(B))
    assert isinstance(got, torch.Tensor)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-5, atol=1e-5)
    out = torch.full((13, 11), float("nan"))
    assert fn(torch.from_numpy(A), torch.from_numpy(B), out=out) is out
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)


def test_numpy_in_numpy_out():
    fn = build(_matmul_relu(), "c")
    A = np.ones((2, 3), np.float32)
    B = np.full((3, 1), -1.0, np.float32)
    got = fn(A, B)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, np.zeros((2, 1), np.float32))

