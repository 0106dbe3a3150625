"""NPU: dequantised int8 GEMMs from the DSL -- int8 x int8 accumulated in int32, then
``cast(cast(C, float32) * scale, float16)``: a constant per-tensor scale by Fixpipe's
``DEQF16`` (cube cores only), a per-channel (``scale[j]``) or per-row (``scale[i]``)
scale as a vector epilogue on the int32 tile -- bit-exact against numpy in the
simulator, and the emitted source through the API check."""

import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import compile_kernel
from polycomp.errors import TargetError
from polycomp.hw.npu.backend import simulate, syntax_check
from polycomp.hw.npu.program import FixpipeCall, walk

N, M, K = pc.sym("N M K")
SHAPES = [(37, 70, 45), (1, 1, 1), (17, 131, 3), (5, 33, 67), (64, 96, 1)]


def _mm(A, B):
    k = pc.reduce_axis(K, "k")
    return pc.compute((N, M), lambda i, j: pc.sum(pc.cast(A[i, k], "int32")
                                                  * pc.cast(B[k, j], "int32"), axis=k),
                      name="C")


@pc.tensor_expr
def deq_tensor(A: pc.Tensor[(N, K), "int8"], B: pc.Tensor[(K, M), "int8"]):
    c = _mm(A, B)
    return pc.compute((N, M), lambda i, j: pc.cast(pc.cast(c[i, j], "float32") * 0.0125,
                                                   "float16"), name="D")


@pc.tensor_expr
def deq_channel(A: pc.Tensor[(N, K), "int8"], B: pc.Tensor[(K, M), "int8"],
                scale: pc.Tensor[(M,), "float32"]):
    c = _mm(A, B)
    return pc.compute((N, M), lambda i, j: pc.cast(pc.cast(c[i, j], "float32") * scale[j],
                                                   "float16"), name="D")


@pc.tensor_expr
def deq_row_bias(A: pc.Tensor[(N, K), "int8"], B: pc.Tensor[(K, M), "int8"],
                 scale: pc.Tensor[(N,), "float32"], bias: pc.Tensor[(M,), "float32"]):
    c = _mm(A, B)
    return pc.compute((N, M), lambda i, j: pc.cast(pc.cast(c[i, j], "float32") * scale[i]
                                                   + bias[j], "float32"), name="D")


def _int8(rng, shape):
    a = rng.integers(-128, 128, shape).astype(np.int8)
    a.flat[0] = -128
    return a


def _acc(a, b):
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32)


@pytest.mark.parametrize("target", ["npu-lite", "npu"])
def test_per_tensor_scale_by_fixpipe(target):
    ck = compile_kernel(deq_tensor, target)
    k = ck.final_ir.program
    assert k.kind == "aic"                                  # no vector cores
    fx = [s for p in k.programs for s in walk(p.body) if isinstance(s, FixpipeCall)]
    assert fx and all(s.quant == "DEQF16" and s.deq == 0.0125 for s in fx)
    rng = np.random.default_rng(1)
    for n, kk, m in SHAPES:
        a, b = _int8(rng, (n, kk)), _int8(rng, (kk, m))
        out, _ = simulate(ck, a, b)
        ref = (_acc(a, b) * np.float32(0.0125)).astype(np.float16)
        np.testing.assert_array_equal(out, ref)


def test_per_channel_and_per_row_scales_by_a_vector_epilogue():
    rng = np.random.default_rng(2)
    ck = compile_kernel(deq_channel, "npu-lite")
    assert ck.final_ir.program.kind == "mix"
    assert ck.final_ir.program.workspaces[0].dtype == "int32"
    for n, kk, m in SHAPES:
        a, b = _int8(rng, (n, kk)), _int8(rng, (kk, m))
        s = (rng.random(m) * 0.01).astype(np.float32)
        out, _ = simulate(ck, a, b, s)
        np.testing.assert_array_equal(out, (_acc(a, b) * s).astype(np.float16))
    ck = compile_kernel(deq_row_bias, "npu-lite")
    for n, kk, m in SHAPES[:3]:
        a, b = _int8(rng, (n, kk)), _int8(rng, (kk, m))
        s = (rng.random(n) * 0.01).astype(np.float32)
        bias = rng.standard_normal(m).astype(np.float32)
        out, _ = simulate(ck, a, b, s, bias)
        np.testing.assert_allclose(out, _acc(a, b) * s[:, None] + bias, rtol=1e-6, atol=1e-5)


def test_int8_products_overflow_int32_only_past_its_range():
    """K = 300 of -128 x -128: 4 915 200, exact in int32 and in the fp32 it is cast to."""
    ck = compile_kernel(deq_channel, "npu-lite")
    a = np.full((3, 300), -128, np.int8)
    b = np.full((300, 5), -128, np.int8)
    s = np.full(5, 2.0 ** -10, np.float32)
    out, _ = simulate(ck, a, b, s)
    np.testing.assert_array_equal(out, np.full((3, 5), 4800.0, np.float16))


def test_int8_result_other_than_int32_is_refused():
    @pc.tensor_expr
    def wrong(A: pc.Tensor[(N, K), "int8"], B: pc.Tensor[(K, M), "int8"]):
        k = pc.reduce_axis(K, "k")
        c = pc.compute((N, M), lambda i, j: pc.sum(pc.cast(A[i, k], "float32")
                                                   * pc.cast(B[k, j], "float32"), axis=k),
                       name="C")
        return pc.compute((N, M), lambda i, j: c[i, j] * 2.0, name="D")
    with pytest.raises(TargetError, match="int8 operands accumulate in int32"):
        compile_kernel(wrong, "npu")


def test_dequant_sources_pass_the_api_check(tmp_path):
    paths = []
    for k in (deq_tensor, deq_channel, deq_row_bias):
        ck = compile_kernel(k, "npu")
        p = tmp_path / f"{k.name}.cpp"
        p.write_text(ck.source)
        paths.append(str(p))
    assert "QuantMode_t::DEQF16" in (tmp_path / "deq_tensor.cpp").read_text()
    assert "OK" in syntax_check(*paths)
