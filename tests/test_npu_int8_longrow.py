"""NPU: int8 / bfloat16 cube matmuls, rows longer than a vector repeat stride spans
(255 data blocks), and UB tile reuse (``npu-ub-reuse``) -- each against numpy in the
simulator, and the emitted source through the API check."""

import shutil

import numpy as np
import pytest

from polycomp import dtypes
from polycomp.driver import compile_kernel
from polycomp.errors import ResourceLimitError, TargetError
from polycomp.frontend.ops import (
    OPS,
    batch_matmul_kernel,
    layernorm_kernel,
    matmul_kernel,
    softmax_kernel,
)
from polycomp.hw.npu.backend import simulate, syntax_check
from polycomp.hw.npu.program import Loop, walk

BF16 = dtypes.to_numpy("bfloat16")
SHAPES = [(37, 70, 45), (1, 1, 1), (17, 131, 3), (1, 97, 64), (64, 96, 1), (5, 33, 67)]


def _int8(rng, shape):
    a = rng.integers(-128, 128, shape).astype(np.int8)
    a.flat[0] = -128                                  # the edge value
    return a


# --------------------------------------------------------------------------- int8 / bf16


@pytest.mark.parametrize("target", ["npu-lite", "npu"])
def test_int8_matmul_is_exact_in_int32(target):
    ck = compile_kernel(matmul_kernel("int8"), target)
    rng = np.random.default_rng(1)
    for n, k, m in SHAPES:
        a, b = _int8(rng, (n, k)), _int8(rng, (k, m))
        out, rep = simulate(ck, a, b)
        assert out.dtype == np.int32
        np.testing.assert_array_equal(out, (a.astype(np.int64) @ b.astype(np.int64)))
        assert rep.busy["M"] > 0


def test_int8_batch_matmul_and_extreme_values():
    ck = compile_kernel(batch_matmul_kernel("int8"), "npu-lite")
    a = np.full((3, 19, 300), -128, np.int8)          # |sum| = 300 * 2^14: no overflow
    b = np.full((3, 300, 41), -128, np.int8)
    b[1] = 127
    out, _ = simulate(ck, a, b)
    np.testing.assert_array_equal(out, np.einsum("bik,bkj->bij", a.astype(np.int64),
                                                 b.astype(np.int64)))


@pytest.mark.parametrize("out_dtype", [None, "bfloat16"])
def test_bf16_matmul_accumulates_in_fp32(out_dtype):
    ck = compile_kernel(matmul_kernel("bfloat16", out_dtype), "npu-lite")
    rng = np.random.default_rng(2)
    for n, k, m in SHAPES:
        a = rng.standard_normal((n, k)).astype(BF16)
        b = rng.standard_normal((k, m)).astype(BF16)
        a.flat[0] = np.inf if (n, k, m) == (5, 33, 67) else a.flat[0]
        out, _ = simulate(ck, a, b)
        assert out.dtype == (BF16 if out_dtype else np.float32)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        with np.errstate(invalid="ignore"):
            np.testing.assert_allclose(out.astype(np.float64), ref, rtol=2e-2,
                                       atol=2e-2 * np.sqrt(k))


def test_int8_limits_are_named():
    with pytest.raises(TargetError, match=r"writes float16 from int8 operands; the cube "
                                          r"path writes int32"):
        compile_kernel(matmul_kernel("int8", "float16"), "npu")
    # an int8 epilogue runs on the int32 tile (test_npu_int8_dequant.py); an integer
    # bias vector is not mapped
    with pytest.raises(TargetError, match="epilogue input bias: only float vectors"):
        compile_kernel(OPS["matmul_bias_relu"].kernel("int8"), "npu")
    with pytest.raises(ResourceLimitError, match="8-bit operands n0, k0 and kL1 must be "
                                                 "multiples of 32"):
        compile_kernel(matmul_kernel("int8"), "npu", {"cube_tile": (16, 16, 16, 16)})


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this host")
def test_int8_bf16_sources_pass_the_api_check(tmp_path):
    paths = []
    for i, k in enumerate((matmul_kernel("int8"), batch_matmul_kernel("int8"),
                           matmul_kernel("bfloat16"), matmul_kernel("bfloat16", "bfloat16"))):
        p = tmp_path / f"k{i}.cpp"
        p.write_text(compile_kernel(k, "npu").source)
        paths.append(str(p))
    assert "OK" in syntax_check(*paths)
    src = compile_kernel(matmul_kernel("int8"), "npu").source
    assert "Fixpipe<int32_t, int32_t, CFG_ROW_MAJOR>" in src
    assert "LoadDataWithTranspose" in src


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this host")
def test_api_check_rejects_type_combinations_the_cube_lacks(tmp_path):
    """Mmad int8 x int8 -> float and Fixpipe int32 -> float do not exist on 2201."""
    def kernel(line: str) -> str:
        return ('#include "kernel_operator.h"\nusing namespace AscendC;\n#ifdef __NPU_ARCH__\n'
                'extern "C" __global__ __aicore__ void k(GM_ADDR x) {\n'
                '    LocalTensor<int8_t> a(TPosition::A2, 0, 512);\n'
                '    LocalTensor<int8_t> b(TPosition::B2, 0, 512);\n'
                '    LocalTensor<int32_t> ci(TPosition::CO1, 0, 256);\n'
                '    LocalTensor<float> cf(TPosition::CO1, 1024, 256);\n'
                '    GlobalTensor<int32_t> gi;\n    gi.SetGlobalBuffer((__gm__ int32_t*)x, 256);\n'
                '    GlobalTensor<float> gf;\n    gf.SetGlobalBuffer((__gm__ float*)x, 256);\n'
                f'    {line}\n}}\n#endif\n')
    good = tmp_path / "good.cpp"
    good.write_text(kernel("Mmad(ci, a, b, MmadParams(16, 16, 32, 0, false, true)); "
                           "Fixpipe<int32_t, int32_t, CFG_ROW_MAJOR>(gi, ci, "
                           "FixpipeParamsV220(16, 16, 16, 16, false));"))
    assert "OK" in syntax_check(str(good))
    for bad_line in ("Mmad(cf, a, b, MmadParams(16, 16, 32, 0, false, true));",
                     "Fixpipe<float, int32_t, CFG_ROW_MAJOR>(gf, ci, "
                     "FixpipeParamsV220(16, 16, 16, 16, false));"):
        bad = tmp_path / "bad.cpp"
        bad.write_text(kernel(bad_line))
        with pytest.raises(Exception, match="rejected"):
            syntax_check(str(bad))


# --------------------------------------------------------------------------- long rows


def _softmax_ref(x):
    xf = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(xf - xf.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_softmax_rows_longer_than_a_repeat_stride(dtype):
    """Rows of 2041..4099 elements (fp32 temporaries: more than 255 blocks a row) run in
    the row-by-row form; NaN and inf rows give NaN rows as numpy does."""
    ck = compile_kernel(softmax_kernel(dtype=dtype), "npu")
    rng = np.random.default_rng(3)
    for n, m in [(3, 2041), (1, 4099), (4, 3001), (2, 2039)]:
        x = (rng.standard_normal((n, m)) * 3).astype(dtype)
        if n > 2:
            x[1, 7] = np.nan
            x[2, m - 1] = np.inf
        y, _ = simulate(ck, x)
        np.testing.assert_allclose(y.astype(np.float64), _softmax_ref(x), atol=2e-3)


def test_layernorm_rows_of_4096_fit_and_match():
    """(before ``npu-ub-reuse`` one row of 4096 fp16 values needed 198 656 B of UB)"""
    ck = compile_kernel(layernorm_kernel(dtype="float16"), "npu")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 4096)).astype(np.float16)
    x[1, 5] = np.inf
    g = rng.standard_normal(4096).astype(np.float16)
    b = rng.standard_normal(4096).astype(np.float16)
    y, _ = simulate(ck, x, g, b)
    xf = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        mu = xf.mean(1, keepdims=True)
        ref = (xf - mu) / np.sqrt(((xf - mu) ** 2).mean(1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(y.astype(np.float64), ref, atol=3e-2)
    assert np.isnan(y[1]).all()


@pytest.mark.parametrize("op", ["reduce_sum_1", "reduce_max_1"])
def test_row_reductions_over_long_rows(op):
    ck = compile_kernel(OPS[op].kernel("float32"), "npu")
    rng = np.random.default_rng(5)
    for shape in [(2, 4097), (1, 1), (7, 2053)]:
        x = rng.standard_normal(shape).astype(np.float32)
        if shape[0] > 2:
            x[3, 100] = np.nan
            x[4, 2000] = -np.inf
        y, _ = simulate(ck, x)
        ref = x.astype(np.float64).sum(1) if op == "reduce_sum_1" else x.max(1)
        np.testing.assert_allclose(y.astype(np.float64).reshape(ref.shape), ref, rtol=1e-4,
                                   atol=1e-3)


def _guards(ck) -> set[str]:
    return {s.var for s in walk(ck.final_ir.program.phases[0].aiv.body)
            if isinstance(s, Loop) and s.var in ("rs", "rl")}


def test_the_form_is_chosen_by_the_row_pitch():
    import polycomp as pc
    from polycomp.frontend import ops

    sym = compile_kernel(softmax_kernel(dtype="float32"), "npu")
    assert _guards(sym) == {"rs", "rl"}                 # both forms, chosen at run time
    # a constant-width tile (a cube epilogue's n0 columns) gets one form, no guards
    epi = compile_kernel(OPS["matmul_bias_relu"].kernel("float16"), "npu")
    assert not {s.var for p in epi.final_ir.program.phases for q in p.programs
                for s in walk(q.body) if isinstance(s, Loop)} & {"rs", "rl"}

    @pc.tensor_expr
    def sm_long(x: pc.Tensor[(3, 2100), "float32"]):
        return ops.softmax(x, axis=1)

    @pc.tensor_expr
    def sm_short(x: pc.Tensor[(3, 2000), "float32"]):
        return ops.softmax(x, axis=1)
    for k, n in ((sm_long, 2100), (sm_short, 2000)):
        ck = compile_kernel(k, "npu")        # the tile width is the host's CP still
        assert _guards(ck) == {"rs", "rl"}
        x = np.random.default_rng(6).standard_normal((3, n)).astype(np.float32)
        y, _ = simulate(ck, x)
        np.testing.assert_allclose(y.astype(np.float64), _softmax_ref(x), atol=1e-5)


def test_ub_reuse_shares_only_dead_tiles():
    ck = compile_kernel(layernorm_kernel(dtype="float16"), "npu", dump=True)
    trees = {r.name: r.tree for r in ck.records if r.stage == "target"}
    before = trees["npu-isa"].count(": UB ")
    after = trees["npu-ub-reuse"].count(": UB ")
    assert 0 < after < before          # 21 buffers before, 11 after
