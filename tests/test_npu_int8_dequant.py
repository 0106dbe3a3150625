"""NPU: dequantised int8 GEMMs from the DSL -- int8 x int8 accumulated in int32, then
``cast(cast(C, float32) * scale, float16)``: a constant per-tensor scale by Fixpipe's
``DEQF16`` (cube cores only) when Fixpipe reads it exactly, a per-channel
(``scale[j]``) scale by Fixpipe's ``VDEQF16`` with option ``fixpipe_quant`` (the
hardware reads each scale with 10 mantissa bits), otherwise (and for a per-row
``scale[i]``) a vector epilogue on the int32 tile -- against numpy in the simulator
(bit-exact, or with the scales truncated as the asc-devkit docs state), and the emitted
sources through the API check.  int8 results (``cast(clamp(x, -128, 127), int8)``,
the DSL's cast truncating) by the vector epilogue's Cast float -> half -> int8_t, both
``CAST_TRUNC``; by Fixpipe's ``REQ8`` for an integer constant scale, and with option
``fixpipe_quant`` by ``REQ8`` / ``VREQ8`` (rounded to nearest even, as the hardware
does: checked against numpy with that arithmetic)."""

import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import compile_kernel
from polycomp.errors import BuildError, TargetError
from polycomp.hw.npu.backend import simulate, syntax_check
from polycomp.hw.npu.program import FixpipeCall, walk
from polycomp.hw.npu.sim_exec import _fb_chunks, fixpipe_scale
from polycomp.hw.npu.vector_ops import trunc_half
from polycomp.scheduler.npu.classify import fixpipe_exact

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
    return pc.compute((N, M), lambda i, j: pc.cast(pc.cast(c[i, j], "float32") * 0.01171875,
                                                   "float16"), name="D")


@pc.tensor_expr
def deq_inexact(A: pc.Tensor[(N, K), "int8"], B: pc.Tensor[(K, M), "int8"]):
    c = _mm(A, B)      # 0.0125: 23 mantissa bits; Fixpipe would read 10 of them
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


@pc.tensor_expr
def requant(A: pc.Tensor[(N, K), "int8"], B: pc.Tensor[(K, M), "int8"],
            scale: pc.Tensor[(M,), "float32"]):
    c = _mm(A, B)
    return pc.compute((N, M), lambda i, j: pc.cast(pc.min(pc.max(
        pc.cast(c[i, j], "float32") * scale[j], -128.0), 127.0), "int8"), name="Q")


@pc.tensor_expr
def requant_pow2(A: pc.Tensor[(N, K), "int8"], B: pc.Tensor[(K, M), "int8"]):
    c = _mm(A, B)      # an integer scale: rounding and truncation agree
    return pc.compute((N, M), lambda i, j: pc.cast(pc.max(pc.min(
        2.0 * pc.cast(c[i, j], "float32"), 127.0), -128.0), "int8"), name="Q")


@pc.tensor_expr
def requant_const(A: pc.Tensor[(N, K), "int8"], B: pc.Tensor[(K, M), "int8"]):
    c = _mm(A, B)
    return pc.compute((N, M), lambda i, j: pc.cast(pc.min(pc.max(
        pc.cast(c[i, j], "float32") * 0.0125, -128.0), 127.0), "int8"), name="Q")


def _int8(rng, shape):
    a = rng.integers(-128, 128, shape).astype(np.int8)
    a.flat[0] = -128
    return a


def _acc(a, b):
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32)


def _trunc10(s):
    """A float32 scale as Fixpipe reads it: the lower 13 mantissa bits dropped."""
    bits = np.asarray(s, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return bits.view(np.float32)


def _req8(acc, s):
    """Fixpipe's REQ8 as the docs' golden script computes it: times the scale read with
    10 mantissa bits, clamped to [-256, 255], rounded to nearest even, saturated."""
    x = np.asarray(acc, np.float32) * _trunc10(s)
    return np.clip(np.round(np.clip(x, -256, 255)), -128, 127).astype(np.int8)


def _fixpipes(ck):
    k = ck.final_ir.program
    return [s for p in k.programs for s in walk(p.body) if isinstance(s, FixpipeCall)]


FQ = {"fixpipe_quant": True}


@pytest.mark.parametrize("target", ["npu-lite", "npu"])
def test_per_tensor_scale_by_fixpipe(target):
    ck = compile_kernel(deq_tensor, target)
    assert ck.final_ir.program.kind == "aic"                 # no vector cores
    fx = _fixpipes(ck)
    assert fx and all(s.quant == "DEQF16" and s.deq == 0.01171875 for s in fx)
    rng = np.random.default_rng(1)
    for n, kk, m in SHAPES:
        a, b = _int8(rng, (n, kk)), _int8(rng, (kk, m))
        out, _ = simulate(ck, a, b)
        ref = (_acc(a, b) * np.float32(0.01171875)).astype(np.float16)
        np.testing.assert_array_equal(out, ref)


def test_fixpipe_reads_scales_with_ten_mantissa_bits():
    """The docs' QUANT_PRE table: bits [31:13] of the float (1, 8, 10)."""
    assert fixpipe_exact(0.01171875) and fixpipe_exact(-3.0) and fixpipe_exact(2.0 ** -100)
    assert not fixpipe_exact(0.0125) and not fixpipe_exact(float("inf"))
    assert not fixpipe_exact(1e-45)                          # subnormal
    assert not fixpipe_exact(0.0)                            # exponent 0
    q = np.array([0.0125, 1.0 + 2.0 ** -10, 1.0 + 2.0 ** -11, -0.1], np.float32)
    got = fixpipe_scale(q.view(np.uint32).astype(np.uint64) | np.uint64(1 << 46))
    np.testing.assert_array_equal(got, _trunc10(q))
    assert got[1] == 1.0 + 2.0 ** -10 and got[2] == 1.0       # truncated, not rounded
    # the Fixpipe buffer's 256 parameters; more columns go in chunks of 128
    assert _fb_chunks(256) == [256] and _fb_chunks(300) == [128, 128, 44]
    assert _fb_chunks(384) == [128, 128, 128]


def test_inexact_constant_scale_falls_back_to_the_vector_epilogue():
    """0.0125 is not what Fixpipe would multiply by: by default the vector epilogue
    computes it in float32 (bit-exact); with fixpipe_quant Fixpipe's DEQF16 does, with
    the scale truncated to 10 mantissa bits (the documented rule)."""
    rng = np.random.default_rng(5)
    exact = compile_kernel(deq_inexact, "npu-lite")
    hw = compile_kernel(deq_inexact, "npu-lite", FQ)
    assert exact.final_ir.program.kind == "mix"
    assert {s.quant for s in _fixpipes(exact)} == {"NoQuant"}     # int32 to the AIVs
    assert hw.final_ir.program.kind == "aic"
    assert {s.quant for s in _fixpipes(hw)} == {"DEQF16"}
    n, kk, m = SHAPES[0]
    a, b = _int8(rng, (n, kk)), _int8(rng, (kk, m))
    np.testing.assert_array_equal(simulate(exact, a, b)[0],
                                  (_acc(a, b) * np.float32(0.0125)).astype(np.float16))
    got = simulate(hw, a, b)[0]
    np.testing.assert_array_equal(got, (_acc(a, b) * _trunc10(0.0125)).astype(np.float16))
    assert (got != (_acc(a, b) * np.float32(0.0125)).astype(np.float16)).any()


def test_per_channel_scale_by_fixpipe_vdeqf16():
    """scale[j] through Fixpipe (VDEQF16): the host packs the float32 scales into uint64
    quantisation parameters, each tile copies its columns' to L1 (C1) and Fixpipe
    reads them; odd shapes, one channel, int8 extremes, negative scales."""
    ck = compile_kernel(deq_channel, "npu-lite", FQ)
    k = ck.final_ir.program
    assert k.kind == "aic" and k.quant_args and k.quant_args[0].name == "scale"
    fx = _fixpipes(ck)
    assert fx and all(s.quant == "VDEQF16" and s.cbuf is not None for s in fx)
    rng = np.random.default_rng(3)
    for n, kk, m in SHAPES:
        a, b = _int8(rng, (n, kk)), _int8(rng, (kk, m))
        # scales of <= 10 mantissa bits: the DSL's float32 answer, bit for bit
        s = (rng.integers(1, 1024, m) * 2.0 ** -16 * rng.choice([-1, 1], m)).astype(np.float32)
        out, rep = simulate(ck, a, b, s)
        np.testing.assert_array_equal(out, (_acc(a, b) * s).astype(np.float16))
        # any float32 scales: what the hardware computes (lower 13 bits dropped)
        s = (rng.random(m) * 0.01).astype(np.float32)
        out, rep = simulate(ck, a, b, s)
        np.testing.assert_array_equal(out, (_acc(a, b) * _trunc10(s)).astype(np.float16))
    assert rep.bytes["L1->FB"] > 0
    # -128 x -128 over K = 300: 4 915 200 in int32, times 2**-10, and fp16 overflow
    a, b = np.full((3, 300), -128, np.int8), np.full((300, 5), -128, np.int8)
    s = np.array([2.0 ** -10, -2.0 ** -10, 2.0 ** -4, 1.0, 0.0], np.float32)
    out, _ = simulate(ck, a, b, s)
    with np.errstate(over="ignore"):
        ref = (np.full((3, 5), 4915200.0, np.float32) * s).astype(np.float16)
    np.testing.assert_array_equal(out, ref)
    assert out[0, 0] == 4800 and out[0, 1] == -4800 and np.isinf(out[0, 2])


def test_per_channel_scale_refuses_what_fixpipe_cannot_read():
    ck = compile_kernel(deq_channel, "npu-lite", FQ)
    a, b = np.ones((2, 3), np.int8), np.ones((3, 4), np.int8)
    for bad in (np.inf, np.nan, 1e-40):
        s = np.array([1.0, bad, 1.0, 1.0], np.float32)
        with pytest.raises(TargetError, match=r"argument scale: scale .* at \[1\]: Fixpipe"):
            simulate(ck, a, b, s)


def test_per_channel_fixpipe_costs_the_scale_traffic():
    """The same GEMM with a constant scale (DEQF16) and per-channel scales (VDEQF16):
    the latter copies the scales GM -> L1 and L1 -> FB, and its FIX pipe is busier."""
    rng = np.random.default_rng(4)
    n, kk, m = 64, 32, 96
    a, b = _int8(rng, (n, kk)), _int8(rng, (kk, m))
    _, r1 = simulate(compile_kernel(deq_tensor, "npu-lite"), a, b)
    _, r2 = simulate(compile_kernel(deq_channel, "npu-lite", FQ), a, b,
                     np.full(m, 0.01171875, np.float32))
    assert r2.bytes["GM->L1"] - r1.bytes["GM->L1"] >= m * 8
    assert r2.bytes["L1->FB"] >= m * 8 and "L1->FB" not in r1.bytes
    assert r2.busy["FIX"] > r1.busy["FIX"]


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


def test_trunc_half_cuts_the_mantissa_toward_zero():
    x = np.array([2049.0, 2051.0, 127.99, -127.99, -128.99, 1.0 + 3 * 2.0 ** -11,
                  70000.0, -70000.0], np.float32)
    np.testing.assert_array_equal(trunc_half(x), np.array(
        [2048.0, 2050.0, 127.9375, -127.9375, -128.875, 1.0 + 2.0 ** -10, 65504.0,
         -65504.0], np.float32))
    assert np.float16(x[5]) == 1.0 + 2.0 ** -9                  # not what RINT gives


def test_int8_results_by_the_vector_cast():
    """``cast(clamp(C * scale[j], -128, 127), int8)``: every value in range, both
    saturation edges, values just inside them (127.9, -128.9), halves (trunc, not
    round), negatives; odd shapes and one column."""
    ck = compile_kernel(requant, "npu-lite")
    k = ck.final_ir.program
    assert k.kind == "mix" and k.outputs[0].dtype == "int8"
    casts = [s for p in k.programs for s in walk(p.body)
             if getattr(s, "api", None) == "Cast" and s.attr == "CAST_TRUNC"]
    assert [c.dst.buf.dtype for c in casts] == ["float16", "int8"]
    rng = np.random.default_rng(6)
    for n, kk, m in SHAPES:
        a, b = _int8(rng, (n, kk)), _int8(rng, (kk, m))
        acc = _acc(a, b)
        # scales that put the products across the int8 range and past it
        s = (rng.choice([-1, 1], m) * rng.random(m) * 300.0 /
             np.maximum(np.abs(acc).max(axis=0), 1)).astype(np.float32)
        out, _ = simulate(ck, a, b, s)
        ref = np.clip(acc * s, -128, 127).astype(np.int8)
        np.testing.assert_array_equal(out, ref)
        assert out.dtype == np.int8
    # the edges exactly: C = 1 everywhere (K = 1, ones), the scales the values
    edge = np.array([127.9, 127.0, 126.5, -0.5, -127.5, -128.0, -128.9, 1000.0, -1000.0,
                     0.0, 2.5, -2.5, 64.75], np.float32)
    out, _ = simulate(ck, np.ones((3, 1), np.int8), np.ones((1, edge.size), np.int8), edge)
    np.testing.assert_array_equal(out[0], [127, 127, 126, 0, -127, -128, -128, 127, -128,
                                           0, 2, -2, 64])


def test_requant_per_channel_by_fixpipe_vreq8():
    """With fixpipe_quant, ``cast(clamp(C * scale[j], -128, 127), int8)`` is Fixpipe's
    VREQ8 (cube cores only): the scales with the signed-result bit, rounded to nearest
    even where the DSL truncates -- numpy with the hardware's arithmetic, odd shapes,
    both saturation edges, halves, negative scales."""
    ck = compile_kernel(requant, "npu-lite", FQ)
    k = ck.final_ir.program
    assert k.kind == "aic" and k.outputs[0].dtype == "int8"
    assert k.quant_args and k.quant_args[0].signed
    fx = _fixpipes(ck)
    assert fx and all(s.quant == "VREQ8" and s.cbuf is not None for s in fx)
    rng = np.random.default_rng(7)
    differs = False
    for n, kk, m in SHAPES:
        a, b = _int8(rng, (n, kk)), _int8(rng, (kk, m))
        acc = _acc(a, b)
        s = (rng.choice([-1, 1], m) * rng.random(m) * 300.0 /
             np.maximum(np.abs(acc).max(axis=0), 1)).astype(np.float32)
        out, rep = simulate(ck, a, b, s)
        np.testing.assert_array_equal(out, _req8(acc, s))
        dsl = np.clip(acc * s, -128, 127).astype(np.int8)
        assert np.abs(out.astype(int) - dsl).max() <= 1
        differs |= bool((out != dsl).any())
    assert differs and rep.bytes["L1->FB"] > 0
    edge = np.array([127.9, 127.0, 126.5, 2.5, 1.5, -0.5, -2.5, -127.5, -128.9, 1000.0,
                     -1000.0, 0.0125, 64.75], np.float32)
    out, _ = simulate(ck, np.ones((3, 1), np.int8), np.ones((1, edge.size), np.int8), edge)
    np.testing.assert_array_equal(out[0], [127, 127, 126, 2, 2, 0, -2, -128, -128, 127,
                                           -128, 0, 65])


def test_requant_constant_scale():
    """A constant scale: REQ8 without the option when rounding cannot differ from the
    DSL's truncation (an integer scale Fixpipe reads exactly), bit-exact; otherwise the
    vector epilogue, or REQ8 with fixpipe_quant (the hardware's rounding)."""
    from polycomp.hw.npu.program import REQ8_SIGNED
    from polycomp.scheduler.npu.classify import requant_exact
    assert requant_exact(2.0) and requant_exact(-3.0) and not requant_exact(0.5)
    assert not requant_exact(0.0125) and not requant_exact(2049.0 * 2 ** 20)
    rng = np.random.default_rng(9)
    ck = compile_kernel(requant_pow2, "npu-lite")
    assert ck.final_ir.program.kind == "aic"
    fx = _fixpipes(ck)
    assert fx and all(s.quant == "REQ8" and s.deq_scalar == 0x40000000 | REQ8_SIGNED
                      for s in fx)
    for n, kk, m in SHAPES:
        a, b = _int8(rng, (n, kk)), _int8(rng, (kk, m))
        out, _ = simulate(ck, a, b)
        np.testing.assert_array_equal(out, np.clip(_acc(a, b) * 2, -128, 127).astype(np.int8))
    exact = compile_kernel(requant_const, "npu-lite")
    assert exact.final_ir.program.kind == "mix"
    hw = compile_kernel(requant_const, "npu-lite", FQ)
    assert {s.quant for s in _fixpipes(hw)} == {"REQ8"}
    n, kk, m = 37, 45, 70
    a, b = _int8(rng, (n, kk)), _int8(rng, (kk, m))
    acc = _acc(a, b)
    np.testing.assert_array_equal(simulate(exact, a, b)[0],
                                  np.clip(acc * np.float32(0.0125), -128, 127).astype(np.int8))
    np.testing.assert_array_equal(simulate(hw, a, b)[0], _req8(acc, np.float32(0.0125)))


def test_req8_semantics():
    """The simulator's REQ8: bit 46 must mark the signed result; the shift and offset
    fields are refused (not modelled); a negative scale's word is zero-extended."""
    from polycomp.errors import NpuCapacityError
    from polycomp.hw.npu.sim_exec import requant_int8
    acc = np.array([5, -5, 3, 1000, -1000, 2 ** 31 - 1, -2 ** 31], np.int32)
    w = np.uint64(np.float32(0.5).view(np.uint32)) | np.uint64(1 << 46)
    np.testing.assert_array_equal(requant_int8(acc, w), [2, -2, 2, 127, -128, 127, -128])
    neg = np.uint64(np.float32(-0.5).view(np.uint32)) | np.uint64(1 << 46)
    np.testing.assert_array_equal(requant_int8(acc, neg), [-2, 2, -2, -128, 127, -128, 127])
    with pytest.raises(NpuCapacityError, match="signed-result flag"):
        requant_int8(acc, np.uint64(np.float32(0.5).view(np.uint32)))
    with pytest.raises(NpuCapacityError, match="shift / offset"):
        requant_int8(acc, w | np.uint64(1 << 36))


def test_int8_results_outside_an_int8_matmul_are_refused():
    X = pc.sym("X")

    @pc.tensor_expr
    def q(A: pc.Tensor[(N, X), "float32"]):
        return pc.compute((N, X), lambda i, j: pc.cast(pc.min(pc.max(A[i, j], -128.0), 127.0),
                                                       "int8"), name="Q")
    with pytest.raises(TargetError, match="output Q is int8"):
        compile_kernel(q, "npu-lite")


def test_the_api_header_has_no_float_to_int8_cast(tmp_path):
    """The A2 Cast table has no float -> int8_t pair: the header refuses it."""
    p = tmp_path / "cast.cpp"
    p.write_text('#include "kernel_operator.h"\nusing namespace AscendC;\n#ifdef __NPU_ARCH__\n'
                 "void f(LocalTensor<int8_t>& d, LocalTensor<float>& s) "
                 "{ Cast(d, s, RoundMode::CAST_TRUNC, 32u); }\n#endif\n")
    with pytest.raises(BuildError, match="device side"):
        syntax_check(str(p))


def test_dequant_sources_pass_the_api_check(tmp_path):
    """One g++ run (host and device side) over every form: DEQF16, VDEQF16 with its
    host conversion, the vector epilogues, the int8 result."""
    paths = []
    # (deq_channel without the option is the vector epilogue deq_row_bias has too)
    for k, opts in ((deq_tensor, None), (deq_channel, FQ), (deq_row_bias, None),
                    (requant, None), (requant, FQ), (requant_pow2, None)):
        ck = compile_kernel(k, "npu", opts)
        p = tmp_path / f"{k.name}{'_fq' if opts else ''}.cpp"
        p.write_text(ck.source)
        paths.append(str(p))
    assert "QuantMode_t::DEQF16" in (tmp_path / "deq_tensor.cpp").read_text()
    fq = (tmp_path / "deq_channel_fq.cpp").read_text()
    assert "QuantMode_t::VDEQF16" in fq and "TPosition::C1" in fq
    assert "deq_channel_QuantParams_scale(" in fq
    rq = (tmp_path / "requant_pow2.cpp").read_text()
    assert "QuantMode_t::REQ8, 0x400040000000ULL" in rq
    vq = (tmp_path / "requant_fq.cpp").read_text()       # the host sets the signed bit
    assert "QuantMode_t::VREQ8" in vq and "static_cast<uint64_t>(bits) | (1ull << 46)" in vq
    assert "OK" in syntax_check(*paths)


@pytest.mark.parametrize("target", ["npu-lite", "npu"])
def test_the_scale_parameters_are_counted_in_the_l1_fit(target):
    """The tile fit leaves L1 room for the two copies of a tile's uint64 parameters;
    the kernel's L1 buffers (operands and parameters) fit as the simulator places them."""
    from polycomp.hw.npu.sim import allocate
    from polycomp.hw.target import get_target
    from polycomp.scheduler.npu.cube import fit_cube_tiles
    tg = get_target(target)
    t = fit_cube_tiles(tg, 1, 2, None, 8)
    assert ((t.m0 + t.n0) * t.kl1 + t.n0 * 8) * 2 <= tg.capacity("L1")
    ck = compile_kernel(deq_channel, target, FQ)
    prog = ck.final_ir.program.programs[0]
    assert any(b.name == "l1Quant" for b in prog.buffers)
    assert allocate(prog, ck.target, {})["l1Quant"][0] == "L1"


def test_printed_quant_params_match_the_simulators(tmp_path):
    """The printed host conversion (compiled with g++ and run) packs the scales as
    ``backend.quant_params`` does, pads to the tiling's NQ, refuses a subnormal."""
    import subprocess

    from polycomp.hw.npu.api_header import HEADER
    from polycomp.hw.npu.backend import quant_params
    ck = compile_kernel(deq_channel, "npu-lite", FQ)
    (tmp_path / "kernel_operator.h").write_text(HEADER)
    (tmp_path / "k.cpp").write_text(ck.source)
    s = np.array([0.0125, -3.5, 1e-30, 0.0, 65504.0, 2.0 ** -10, 7.0], np.float32)
    vals = ", ".join(f"{float(v)!r}f" for v in s)
    main = ['#include "k.cpp"', "#include <cstdio>", "int main() {",
            "    deq_channel_TilingData t; uint64_t ws;",
            f"    int64_t sz[3] = {{2, 3, {s.size}}};",   # the kernel's M, K, N
            "    deq_channel_Tiling(sz, 2, 4, &t, &ws);",
            f"    const float s[{s.size}] = {{{vals}}};",
            "    uint64_t q[64];",
            f"    bool ok = deq_channel_QuantParams_scale(s, {s.size}, t.NQ, q);",
            '    printf("%d %lld", ok ? 1 : 0, (long long)t.NQ);',
            '    for (int64_t j = 0; j < t.NQ; ++j) { printf(" %llu", (unsigned long long)q[j]); }',
            "    const float bad[1] = {1e-40f};",
            '    printf(" %d\\n", deq_channel_QuantParams_scale(bad, 1, 4, q) ? 1 : 0);',
            "    return 0;", "}"]
    (tmp_path / "main.cpp").write_text("\n".join(main) + "\n")
    exe = tmp_path / "main"
    subprocess.run(["g++", "-std=c++17", "-I", str(tmp_path), "-o", str(exe),
                    str(tmp_path / "main.cpp")], check=True, capture_output=True)
    got = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    want = quant_params("scale", s)
    nq = -(-s.size // 4) * 4
    assert got[:2] == ["1", str(nq)]
    assert [int(v) for v in got[2:2 + nq]] == [*want.tolist(), *[0] * (nq - s.size)]
    assert got[-1] == "0"                                   # the subnormal refused


def test_operands_declared_in_another_order_bind_to_their_arrays():
    """A matmul declared ``(Y, X)`` computing ``X @ Y`` (square: the shapes cannot
    tell) and a dequantised one declared ``(scale, B, A)``: the kernel takes its
    arrays in the declared order (it used to take them in the builder's A, B order and
    compute Y @ X)."""
    S = pc.sym("S")

    @pc.tensor_expr
    def mm_rev(Y: pc.Tensor[(S, S), "float16"], X: pc.Tensor[(S, S), "float16"]):
        k = pc.reduce_axis(S, "k")
        return pc.compute((S, S), lambda i, j: pc.sum(pc.cast(X[i, k], "float32")
                                                      * pc.cast(Y[k, j], "float32"),
                                                      axis=k), name="C", dtype="float32")

    @pc.tensor_expr
    def deq_rev(scale: pc.Tensor[(M,), "float32"], B: pc.Tensor[(K, M), "int8"],
                A: pc.Tensor[(N, K), "int8"]):
        c = _mm(A, B)
        return pc.compute((N, M), lambda i, j: pc.cast(scale[j] * pc.cast(c[i, j], "float32"),
                                                       "float16"), name="D")
    rng = np.random.default_rng(8)
    y, x = (rng.standard_normal((16, 16)).astype(np.float16) for _ in range(2))
    ck = compile_kernel(mm_rev, "npu-lite")
    assert [t.name for t in ck.final_ir.program.inputs] == ["B", "A"]   # Y is the right
    out, _ = simulate(ck, y, x)
    np.testing.assert_allclose(out, x.astype(np.float32) @ y.astype(np.float32), rtol=1e-5,
                               atol=1e-4)
    a, b = _int8(rng, (5, 7)), _int8(rng, (7, 9))
    s = (rng.integers(1, 1024, 9) * 2.0 ** -14).astype(np.float32)
    for opts in (None, FQ):
        out, _ = simulate(compile_kernel(deq_rev, "npu-lite", opts), s, b, a)
        np.testing.assert_array_equal(out, (_acc(a, b) * s).astype(np.float16))
