"""Tensor-core contractions whose K fits in one K tile (constant K <= KT) and whose other
reduce axes have constant extent 1: the isl AST has no loop for such a degenerate band
member (it substitutes the single value), so the tensorizer takes K tile 0 / reduce
coordinate 0 there instead of a loop variable.

Checked: f16/bf16 matmul for K in {1, 8, 16, 24, 32, 40, 48} (one and two K tiles) with
constant and symbolic M, N, odd extents and partial block tiles, in the CUDA simulator
against numpy; batch_matmul and attention with head dimension 32 (DETR); implicit-GEMM
convolutions with constant channels and 1-wide filter windows; nvcc ``-arch=sm_80
-cubin`` of the emitted sources (DETR attention at [8, 1050, 32] included).
"""
import subprocess

import numpy as np
import pytest

import polycomp as pc
from polycomp import dtypes as dt
from polycomp.driver import compile_kernel
from polycomp.frontend import ops
from polycomp.frontend.ops import _T, _kernel
from polycomp.hw.cuda.simulator import simulate

SMALL = {"block": (64, 64), "warp": (32, 32), "k": 32}


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dt.to_numpy(dtype))


def check(out, ref, k, absprod):
    """f32 accumulation of exact f16/bf16 products: error <= K * 2^-23 * sum |a b|."""
    tol = (k + 2) * 2.0 ** -22 * absprod + 1e-6
    assert out.shape == ref.shape
    assert np.all(np.abs(out.astype(np.float64) - ref) <= tol), \
        float(np.max(np.abs(out.astype(np.float64) - ref) - tol))


def tc_compile(kernel, stages=3):
    ck = compile_kernel(kernel, "cuda", {"tc_tile": dict(SMALL, stages=stages)})
    assert any("tensor cores" in n and "mma" in n for n in ck.notes["tc-tiling"]), ck.notes
    assert "ptx_mma" in ck.source or "mma.sync" in ck.source
    return ck


def matmul(k, dtype, n=None, m=None):
    """``C = A @ B`` with a constant K; N and M constant when given, else symbols."""
    if n is None:
        n, m = pc.sym("N M")
    return _kernel(f"mm_k{k}", lambda A, B: ops.matmul(A, B), A=_T((n, k), dtype),
                   B=_T((k, m), dtype))


def nvcc_cubin(source, tmp_path, sm=80):
    cu = tmp_path / "k.cu"
    cu.write_text(source)
    r = subprocess.run(["nvcc", f"-arch=sm_{sm}", "-cubin", "-o", str(tmp_path / "k.cubin"),
                        str(cu)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


KS = [1, 8, 16, 24, 32, 40, 48]
DTYPES = ["float16", "bfloat16"]


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_symbolic_mn(k, dtype):
    ck = tc_compile(matmul(k, dtype), stages=1 + k % 3)
    rng = np.random.default_rng(k)
    for n, m in [(37, 21), (64, 72), (1, 1)]:     # partial, one full + partial, tiny tiles
        a, b = rand(rng, (n, k), dtype), rand(rng, (k, m), dtype)
        c, rep = simulate(ck, a, b)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        check(c, a64 @ b64, k, np.abs(a64) @ np.abs(b64))
        assert rep.ok


@pytest.mark.parametrize("k", KS)
def test_matmul_constant_mn(k):
    dtype = DTYPES[k % 2]
    n, m = 67, 9                                    # odd extents, partial block tiles
    ck = tc_compile(matmul(k, dtype, n, m))
    rng = np.random.default_rng(100 + k)
    a, b = rand(rng, (n, k), dtype), rand(rng, (k, m), dtype)
    c, rep = simulate(ck, a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    check(c, a64 @ b64, k, np.abs(a64) @ np.abs(b64))
    assert rep.ok


@pytest.mark.parametrize("k", [8, 32])
def test_batch_matmul_constant_k(k):
    bt, n, m = 2, 19, 70
    kern = _kernel(f"bmm_k{k}", lambda A, B: ops.batch_matmul(A, B),
                   A=_T((bt, n, k), "bfloat16"), B=_T((bt, k, m), "bfloat16"))
    ck = tc_compile(kern, stages=2)
    rng = np.random.default_rng(k)
    a, b = rand(rng, (bt, n, k), "bfloat16"), rand(rng, (bt, k, m), "bfloat16")
    c, rep = simulate(ck, a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    check(c, a64 @ b64, k, np.abs(a64) @ np.abs(b64))
    assert rep.ok


def attention(shape, dtype="float16"):
    return _kernel("attention_hd", ops.attention_kernel(dtype).fn,
                   Q=_T(shape, dtype), K=_T(shape, dtype), V=_T(shape, dtype))


def test_attention_head_dim_32_simulated():
    shape = (2, 21, 32)
    ck = tc_compile(attention(shape))
    rng = np.random.default_rng(7)
    q, kk, v = (rand(rng, shape, "float16") for _ in range(3))
    out, rep = simulate(ck, q, kk, v)
    ref = ops.OPS["attention"].reference(q, kk, v)
    assert rep.ok
    # f16 inputs, f32 scores / softmax / second product: a relative tolerance of f32
    # rounding over the 32 + 21 terms of the two reductions
    assert np.allclose(out, ref, rtol=1e-4, atol=1e-5), float(np.max(np.abs(out - ref)))


def test_attention_detr_shape_cubin(tmp_path):
    """DETR attention, [8, 1050, 32]: the default configuration (128x128 block tiles,
    3 stages) builds for sm_80."""
    ck = compile_kernel(attention((8, 1050, 32)), "cuda")
    assert any("group" in n and "tensor cores float16" in n for n in ck.notes["tc-tiling"])
    nvcc_cubin(ck.source, tmp_path)


@pytest.mark.parametrize("k,dtype", [(8, "float16"), (16, "bfloat16"), (32, "float16"),
                                     (24, "bfloat16")])
def test_cubin_sm80(k, dtype, tmp_path):
    nvcc_cubin(compile_kernel(matmul(k, dtype), "cuda").source, tmp_path)


def conv(c, kh, kw, dtype="float16"):
    n, h, w, f = pc.sym("N H W F")
    return _kernel(f"conv_c{c}_{kh}x{kw}", lambda X, Wt: ops.conv2d_nchw(X, Wt),
                   X=_T((n, c, h, w), dtype), Wt=_T((f, c, kh, kw), dtype))


def conv_ref(x, w):
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    _, _, kh, kw = w.shape
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = 0
    for i in range(kh):
        for j in range(kw):
            out = out + np.einsum("nchw,fc->nfhw", x64[:, :, i:i + oh, j:j + ow], w64[:, :, i, j])
    ab = 0
    for i in range(kh):
        for j in range(kw):
            ab = ab + np.einsum("nchw,fc->nfhw", np.abs(x64[:, :, i:i + oh, j:j + ow]),
                                np.abs(w64[:, :, i, j]))
    return out, ab


@pytest.mark.parametrize("c,kh,kw", [(16, 1, 1), (40, 1, 1), (40, 3, 1), (8, 1, 3),
                                     (24, 2, 2)])
def test_conv_constant_channels_and_unit_windows(c, kh, kw):
    """Constant channels (one or two K tiles) and filter-window axes of constant extent
    1 (no loop in the AST: their coordinate is 0)."""
    ck = tc_compile(conv(c, kh, kw))
    rng = np.random.default_rng(c * 10 + kh)
    x, w = rand(rng, (2, c, 5, 6), "float16"), rand(rng, (3, c, kh, kw), "float16")
    out, rep = simulate(ck, x, w)
    ref, ab = conv_ref(x, w)
    check(out, ref, c * kh * kw, ab)
    assert rep.ok
