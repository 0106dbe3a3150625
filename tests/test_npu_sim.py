"""The NPU target (Atlas A2, __NPU_ARCH__ 2201): cube matmul / batch_matmul, vector
programs, cube + vector epilogue, convolutions and attention in the chip simulator
against numpy (shapes with tails, fp16 and fp32), the simulator's race and capacity
errors, each placed flag pair needed, the emitted source's syntax check, the printed
programs' goldens and the CLI."""
import dataclasses
import shutil
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polycomp as pc
from polycomp.driver import compile_kernel, interpret
from polycomp.errors import BuildError, NpuCapacityError, NpuRaceError, TargetError
from polycomp.frontend.ops import OPS, batch_matmul_kernel, matmul_kernel
from polycomp.hw.npu.backend import run_module, simulate, syntax_check
from polycomp.hw.npu.program import Loop, SetFlag, WaitFlag, walk

_CK: dict = {}


def _ck(kind: str, dtype: str, target: str = "npu-lite", **opts):
    key = (kind, dtype, target, tuple(sorted(opts.items())))
    if key not in _CK:
        k = matmul_kernel(dtype) if kind == "matmul" else batch_matmul_kernel(dtype)
        _CK[key] = compile_kernel(k, target, opts)
    return _CK[key]


def _ref(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 80), n=st.integers(1, 80), k=st.integers(1, 150),
       dtype=st.sampled_from(["float16", "float32"]), db=st.booleans())
def test_matmul_tails_match_numpy(m, n, k, dtype, db):
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    out = interpret(_ck("matmul", dtype, double_buffer=db), a, b)
    assert out.dtype == np.float32 and out.shape == (m, n)
    np.testing.assert_allclose(out, _ref(a, b), rtol=1e-4, atol=1e-4 * np.sqrt(k))


@settings(max_examples=5, deadline=None)
@given(bs=st.integers(1, 3), m=st.integers(1, 40), n=st.integers(1, 70), k=st.integers(1, 70))
def test_batch_matmul_matches_numpy(bs, m, n, k):
    rng = np.random.default_rng(bs + m + n + k)
    a = rng.standard_normal((bs, m, k)).astype("float16")
    b = rng.standard_normal((bs, k, n)).astype("float16")
    out = interpret(_ck("batch_matmul", "float16"), a, b)
    np.testing.assert_allclose(out, _ref(a, b), rtol=1e-4, atol=1e-4 * np.sqrt(k))


def _drop_waits(body: tuple, src: str, dst: str) -> tuple:
    """``body`` without its WaitFlag<src->dst> instructions (the injected bug)."""
    out: list = []
    for s in body:
        if isinstance(s, Loop):
            s = dataclasses.replace(s, body=_drop_waits(s.body, src, dst))
        elif isinstance(s, WaitFlag) and (s.src_pipe, s.dst_pipe) == (src, dst):
            continue
        out.append(s)
    return tuple(out)


def _rewrite(ck, fn):
    """``ck``'s NPU IR with ``fn`` applied to the body of every program."""
    k = ck.final_ir.program.map_programs(lambda p: dataclasses.replace(p, body=fn(p.body)))
    return ck.final_ir.with_program(k)


def test_missing_wait_is_a_race():
    ck = _ck("matmul", "float16")
    bad = _rewrite(ck, lambda body: _drop_waits(body, "MTE2", "MTE1"))
    a = np.ones((40, 70), np.float16)
    b = np.ones((70, 50), np.float16)
    with pytest.raises(NpuRaceError, match=r"race on L1 buffer l1A\[0\] \(read after "
                       r"write\).*WaitFlag<MTE2->MTE1> is missing"):
        run_module(bad, ck.target, a, b)


def test_over_capacity_buffer_is_reported():
    with pytest.raises(NpuCapacityError,
                       match=r"buffer l0B \(2 x 8192 B\) does not fit L0B of target npu-lite"):
        ck = compile_kernel(matmul_kernel("float16"), "npu-lite",
                            {"cube_tile": (64, 128, 32, 64)})
        simulate(ck, np.ones((70, 70), np.float16), np.ones((70, 70), np.float16))


def test_unsupported_kernel_says_so():
    N, M = pc.sym("N M")

    @pc.tensor_expr
    def reverse(x: pc.Tensor[(N, M)]):
        return pc.compute((N, M), lambda i, j: x[i, M - 1 - j], name="rev")
    with pytest.raises(TargetError, match=r"stage rev reads x\[.*accesses by the stage's "
                                          r"iterators only"):
        compile_kernel(reverse, "npu")

    @pc.tensor_expr
    def square(x: pc.Tensor[(N, N)]):
        return pc.compute((N, N), lambda i, j: x[j, i] + x[i, j], name="sym")
    with pytest.raises(TargetError, match="has two dimensions of the same extent"):
        compile_kernel(square, "npu")


#: the op-library kernels the vector mapping runs (docs/npu.md lists those it does not)
VECTOR_OPS = ("add", "add_row", "add_col", "add_outer", "add_scalar_rhs", "sub", "mul",
              "mul_col", "div", "div_row", "maximum", "maximum_scalar_rhs", "minimum", "relu",
              "leaky_relu", "gelu", "row_stats", "reduce_sum_1", "reduce_max_1",
              "reduce_min_1", "softmax", "layernorm")


def _vector_ck(name: str, dtype: str, target: str = "npu-lite"):
    key = (name, dtype, target)
    if key not in _CK:
        _CK[key] = compile_kernel(OPS[name].kernel(dtype), target)
    return _CK[key]


#: matmuls with a vector epilogue (L0C -> GM workspace -> UB -> vector unit -> GM)
EPILOGUE_OPS = ("matmul_bias_relu", "mlp_gelu")


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(VECTOR_OPS + EPILOGUE_OPS),
       dtype=st.sampled_from(["float16", "float32"]),
       sizes=st.tuples(st.integers(1, 70), st.integers(1, 150), st.integers(1, 90)))
def test_vector_ops_match_numpy(name, dtype, sizes):
    from polycomp.cli import random_inputs
    ck = _vector_ck(name, dtype)
    f = ck.final_ir
    dims = [p.name for p in f.params]
    params = dict(zip(dims, sizes))
    rows, cols = sizes[:2]
    arrays = random_inputs(f, params, rows * 131 + cols)[:len(f.inputs)]
    ref = interpret(OPS[name].kernel(dtype), *arrays, **params)
    out = interpret(ck, *arrays)
    outs, refs = (out, ref) if isinstance(ref, tuple) else ((out,), (ref,))
    tol = 2e-3 if dtype == "float16" else 1e-5
    for o, r in zip(outs, refs):
        assert o.dtype == r.dtype and o.shape == r.shape
        np.testing.assert_allclose(o.astype(np.float64), r.astype(np.float64), rtol=tol,
                                   atol=tol * max(1.0, float(np.max(np.abs(r)))))


#: N-d kernels, axis-0 / all-axes reductions and transposes: dimension roles (batch
#: loops, carried reductions) and transposed boxes through UB staging tiles
#: (2-d kernels on npu-lite, whose small UB makes tiles with tails; 3-d/4-d ones on npu,
#: where a transposed column group of A x B elements fits UB)
ND_OPS = ("bias_add", "transpose_021", "transpose_201", "reduce_sum_0", "reduce_sum_all",
          "reduce_max_0", "softmax_axis0", "reduce_sum_3d_02_keep", "reduce_max_3d_1",
          "softmax_3d_1", "layernorm_3d")
ND_TARGET = {"reduce_sum_0": "npu-lite", "reduce_sum_all": "npu-lite",
             "reduce_max_0": "npu-lite"}


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(ND_OPS), dtype=st.sampled_from(["float16", "float32"]),
       sizes=st.tuples(st.integers(1, 41), st.integers(1, 29), st.integers(1, 17),
                       st.integers(1, 9)))
def test_nd_ops_match_numpy(name, dtype, sizes):
    from polycomp.cli import random_inputs
    if dtype not in OPS[name].dtypes:
        dtype = "float32"
    ck = _vector_ck(name, dtype, ND_TARGET.get(name, "npu"))
    f = ck.final_ir
    params = dict(zip((p.name for p in f.params), sizes))
    arrays = random_inputs(f, params, sum(sizes))[:len(f.inputs)]
    ref = interpret(OPS[name].kernel(dtype), *arrays, **params)
    try:
        out = interpret(ck, *arrays)
    except NpuCapacityError as e:
        # a transposed box stages a column group of A x B elements in 16 rows of UB,
        # input and output, double-buffered: more than UB holds past ~736 fp32 values
        staged = 16 * -(-sizes[0] * sizes[1] // 16) * 16 * np.dtype(dtype).itemsize * 4
        assert name.startswith("transpose") and "one row of" in str(e), e
        assert staged > ck.target.capacity("UB"), (staged, e)
        return
    tol = 2e-3 if dtype == "float16" else 1e-5
    assert out.dtype == ref.dtype and out.shape == ref.shape
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=tol,
                               atol=tol * max(1.0, float(np.max(np.abs(ref)))))


def test_transposed_tiles_with_tails():
    """softmax over axis 0 on npu: 600 rows in tiles of at most 255 rows (the repeat
    limit; here UB holds fewer), each tile through a staging tile and TransDataTo5HD both ways."""
    ck = _vector_ck("softmax_axis0", "float16", "npu")
    x = np.random.default_rng(3).standard_normal((37, 600)).astype(np.float16)
    out, rep = simulate(ck, x)
    ref = interpret(OPS["softmax_axis0"].kernel("float16"), x)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), atol=2e-3)
    assert rep.aiv >= 3                               # one row tile per vector core


CONV_OPS = ("conv2d", "conv2d_s2_p1", "conv2d_s21_p12_d2", "conv2d_bias_relu")


def test_conv_tile_wholly_in_the_padding():
    """A tile of output positions whose windows all lie in the padding (stride 2 and
    padding 1 over 3 rows: the last output row reads row 3) has an empty image band;
    it loads one row and puts every window in the top padding, so it comes out as 0
    (LoadData3DV2 with l1H = 0 left L0B as it was: NaN, found by hypothesis)."""
    rng = np.random.default_rng(994)
    x = rng.standard_normal((2, 2, 3, 10)).astype(np.float16)
    w = rng.standard_normal((1, 2, 1, 3)).astype(np.float16)
    ck = _vector_ck("conv2d_s21_p12_d2", "float16", "npu-lite")
    ref = interpret(OPS["conv2d_s21_p12_d2"].kernel("float16"), x, w)
    out = interpret(ck, x, w)
    assert not np.isnan(out).any() and np.all(out[:, :, 2] == 0)
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(CONV_OPS), dtype=st.sampled_from(["float16", "float32"]),
       target=st.sampled_from(["npu-lite", "npu"]), seed=st.integers(0, 2**16))
def test_conv_implicit_gemm_matches_numpy(name, dtype, target, seed):
    """conv2d as implicit GEMM on the cube: the im2col gather in the GM -> L1 copy."""
    spec = OPS[name]
    rng = np.random.default_rng(seed)
    shapes = spec.shapes(lambda lo, hi: int(rng.integers(lo, hi + 1)))
    arrays = spec.inputs(rng, shapes, dtype)
    ck = _vector_ck(name, dtype, target)
    k = ck.final_ir.program
    # the vector cores convert X and W to NC1HWC0, then the cube runs LoadData3DV2
    assert k.kind == "mix" and [t.name for t in k.workspaces][:2] == [
        f"{k.tensors[0].name}_5hd", f"{k.tensors[1].name}_5hd"]
    assert any(type(s).__name__ == "LoadData3D" for s in walk(k.phases[1].aic.body))
    ref = interpret(spec.kernel(dtype), *arrays)
    out = interpret(ck, *arrays)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(ref).max()))


@settings(max_examples=6, deadline=None)
@given(target=st.sampled_from(["npu-lite", "npu"]), seed=st.integers(0, 2**16))
def test_attention_phases_match_numpy(target, seed):
    """attention as four phases (transpose, batch matmul, scaled softmax, batch matmul)
    through GM workspaces."""
    spec = OPS["attention"]
    rng = np.random.default_rng(seed)
    shapes = spec.shapes(lambda lo, hi: int(rng.integers(lo, min(hi, 40) + 1)))
    arrays = spec.inputs(rng, shapes, "float32")
    ck = _vector_ck("attention", "float32", target)
    prog = ck.final_ir.program
    busy = [next(p.core for p in ph.programs if any(
        not type(s).__name__.startswith("Cross") for s in p.body)) for ph in prog.phases]
    assert busy == ["AIV", "AIC", "AIV", "AIC"] and prog.kind == "mix"
    assert [t.name for t in prog.workspaces] == ["transpose", "scores", "softmax"]
    out = interpret(ck, *arrays)
    ref = interpret(spec.kernel("float32"), *arrays)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(ref).max()))


def test_every_op_library_kernel_compiles_for_npu():
    """The whole op library (its float16 / float32 variants) compiles for the NPU."""
    for spec in OPS.values():
        for dtype in ("float16", "float32"):
            if dtype in spec.dtypes:
                assert compile_kernel(spec.kernel(dtype), "npu-lite").source


def test_matmul_with_unmappable_epilogue_is_refused_clearly():
    """A matmul whose next stage reads it shifted: neither an epilogue nor a vector
    phase; a TargetError naming the stage, not an internal error (fuzzer finding)."""
    N, M, K = pc.sym("N M K")

    @pc.tensor_expr
    def shifted(A: pc.Tensor[(N, K), "float16"], B: pc.Tensor[(K, M), "float16"]):
        k = pc.reduce_axis(K, "k")
        c = pc.compute((N, M), lambda i, j: pc.sum(pc.cast(A[i, k], "float32") *
                                                    pc.cast(B[k, j], "float32"), axis=k),
                       name="C")
        return pc.compute((N, M), lambda i, j: pc.select(i >= 1, c[i - 1, j], 0.0) + c[i, j],
                          name="D")
    with pytest.raises(TargetError, match=r"stage D .*as phases: .*stage D"):
        compile_kernel(shifted, "npu")


def test_constant_shapes():
    from polycomp.frontend import ops

    @pc.tensor_expr
    def sm(x: pc.Tensor[(37, 50), "float16"]):
        return ops.softmax(x, axis=0)
    ck = compile_kernel(sm, "npu")
    x = np.random.default_rng(1).standard_normal((37, 50)).astype(np.float16)
    np.testing.assert_allclose(interpret(ck, x).astype(np.float64),
                               interpret(sm, x).astype(np.float64), atol=2e-3)
    with pytest.raises(TargetError, match="does not match its declared constant extent 37"):
        interpret(ck, x[:5])


def test_row_too_long_for_ub_is_reported():
    """A row longer than UB runs in chunks (tests/test_npu_longrow_chunks.py) where the
    plan has a chunked form; a transposed box (a column group of a leading axis) has
    none, and says so."""
    from polycomp.frontend.ops import softmax3d_kernel
    ck = compile_kernel(softmax3d_kernel(1, "float32"), "npu-lite")
    x = np.zeros((2, 1500, 3), np.float32)
    with pytest.raises(NpuCapacityError, match=r"one row of 1500 elements needs \d+ B of UB"):
        interpret(ck, x)
    x = np.random.default_rng(2).standard_normal((4, 1500)).astype(np.float32)
    y = interpret(_vector_ck("softmax", "float32"), x)
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_double_buffering_overlaps_pipes():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((768, 1024)).astype(np.float16)
    b = rng.standard_normal((1024, 512)).astype(np.float16)
    opts = {"cube_tile": (128, 128, 64, 256)}         # 24 tiles: one per cube core
    _, on = simulate(_ck("matmul", "float16", "npu", **opts), a, b)
    _, off = simulate(_ck("matmul", "float16", "npu", double_buffer=False, **opts), a, b)
    assert on.bytes == off.bytes                      # same work, same traffic
    assert on.busy["M"] == off.busy["M"] and on.aic == off.aic == 24
    assert on.cycles < 0.75 * off.cycles
    # (one 128 x 128 tile per core, K = 1024: MTE2 at 128 B/cycle bounds the cube here)
    assert on.core_utilisation > 0.6 > 0.4 > off.core_utilisation


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this host")
def test_emitted_source_passes_syntax_check(tmp_path):
    paths = []
    for kind, dtype in (("matmul", "float16"), ("batch_matmul", "float32")):
        p = tmp_path / f"{kind}.cpp"
        p.write_text(_ck(kind, dtype).source)
        paths.append(str(p))
    for name in VECTOR_OPS + EPILOGUE_OPS + ND_OPS + CONV_OPS + ("attention",):
        dtype = "float16" if "float16" in OPS[name].dtypes else "float32"
        p = tmp_path / f"{name}.cpp"
        p.write_text(_vector_ck(name, dtype).source)
        paths.append(str(p))
    assert "OK" in syntax_check(*paths)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this host")
def test_every_kernel_and_example_passes_the_api_check(tmp_path):
    """The stand-in for the vendor compiler: every op-library kernel (each dtype it
    takes) and every kernel of examples/, compiled for ``npu``, passes ``g++
    -fsyntax-only`` on the host side (tiling function) and the device side
    (``__NPU_ARCH__`` 2201) against the A2 API declarations."""
    from pathlib import Path

    from polycomp.kernel_files import find_kernels, load_module
    kernels = [(f"{name}_{dt}", spec.kernel(dt)) for name, spec in OPS.items()
               for dt in ("float16", "float32") if dt in spec.dtypes]
    for ex in sorted(Path(__file__).parent.parent.glob("examples/*.py")):
        kernels += [(f"ex_{ex.stem}_{k.name}", k) for k in find_kernels(load_module(str(ex)))]
    paths = []
    for name, k in kernels:
        p = tmp_path / f"{name}.cpp"
        p.write_text(compile_kernel(k, "npu").source)
        paths.append(str(p))
    assert len(paths) > 60
    assert "host and device: OK" in syntax_check(*paths)


#: calls of the old dialect (and typical slips) that the real API does not have: the
#: declarations must reject each
NOT_ASCEND_C = {
    "invented allocator": "auto t = AllocLocal<half>(TPosition::A1, 0, 256);",
    "5-field Nd2NzParams": "Nd2NzParams p(1, 16, 16, 0, 16);",
    "4-field MmadParams": "MmadParams p(16, 16, 16, true);",
    "Mmad with loose sizes": "Mmad(c, u, u, 16, 16, 16, true);",
    "tensor-scalar Add": "Add(u, u, static_cast<half>(1.0f), 128);",
    "Cast without RoundMode": "Cast(f, u, 128);",
    "FIX_V event (not on A2)": "SetFlag<HardEvent::FIX_V>(0);",
    "3-argument ReduceMax": "ReduceMax(u, u, 128);",
}


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this host")
@pytest.mark.parametrize("what", sorted(NOT_ASCEND_C))
def test_api_declarations_reject_what_ascend_c_lacks(tmp_path, what):
    """The check is not vacuous: a kernel body that uses a call the real API lacks (or
    with the wrong parameter struct) fails it, the same body with a real call passes."""
    def kernel(line: str) -> str:
        return ('#include "kernel_operator.h"\nusing namespace AscendC;\n#ifdef __NPU_ARCH__\n'
                'extern "C" __global__ __aicore__ void k(GM_ADDR x) {\n'
                '    LocalTensor<half> u(TPosition::VECCALC, 0, 256);\n'
                '    LocalTensor<float> f(TPosition::VECCALC, 512, 256);\n'
                '    LocalTensor<float> c(TPosition::CO1, 0, 256);\n'
                '    GlobalTensor<half> g;\n    g.SetGlobalBuffer((__gm__ half*)x, 256);\n'
                f'    {line}\n}}\n#endif\n')
    good = tmp_path / "good.cpp"
    good.write_text(kernel("Adds(u, u, static_cast<half>(1.0f), 128); "
                           "Cast(f, u, RoundMode::CAST_NONE, 128);"))
    assert "OK" in syntax_check(str(good))
    bad = tmp_path / "bad.cpp"
    bad.write_text(kernel(NOT_ASCEND_C[what]))
    with pytest.raises(BuildError, match="rejected"):
        syntax_check(str(bad))


def test_printed_program_golden(goldens):
    src = _ck("matmul", "float16").source
    assert src.strip() == goldens.expected("npu.cube-program.matmul_float16.cpp", src)
    src = _vector_ck("softmax", "float16").source
    assert src.strip() == goldens.expected("npu.vector-program.softmax_float16.cpp", src)
    src = _vector_ck("matmul_bias_relu", "float16").source
    assert src.strip() == goldens.expected("npu.cube-epilogue.matmul_bias_relu_float16.cpp",
                                           src)
    src = _vector_ck("conv2d_s2_p1", "float16").source           # implicit GEMM
    assert src.strip() == goldens.expected("npu.cube-im2col.conv2d_s2_p1_float16.cpp", src)
    src = _vector_ck("attention", "float32").source               # phases
    assert src.strip() == goldens.expected("npu.phased.attention_float32.cpp", src)
    src = _vector_ck("softmax_3d_1", "float32", "npu").source      # batch loop, transposes
    assert src.strip() == goldens.expected("npu.vector-program.softmax_3d_1_float32.cpp", src)
    src = _vector_ck("reduce_sum_3d_02_keep", "float32", "npu").source   # carried loop
    assert src.strip() == goldens.expected("npu.vector-program.reduce_sum_3d_02_keep_float32"
                                           ".cpp", src)


def test_cli_targets_and_compile(tmp_path):
    k = tmp_path / "k.py"
    k.write_text("from polycomp.frontend.ops import matmul_kernel\nmm = matmul_kernel('float16')\n")
    cli = [sys.executable, "-m", "polycomp.cli"]
    t = subprocess.run(cli + ["targets", "npu"], capture_output=True, text=True, check=True)
    assert "L0A" in t.stdout and "unit cube (matrix 16x16x16)" in t.stdout
    out = tmp_path / "k.cpp"
    subprocess.run(cli + ["compile", str(k), "--target", "npu", "-o", str(out)],
                   capture_output=True, text=True, check=True)
    assert "Mmad(" in out.read_text()
    r = subprocess.run(cli + ["run", str(k), "--target", "npu", "--shape", "N=33",
                              "--shape", "K=47", "--shape", "M=20"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cube utilisation" in r.stdout and "GM->L1" in r.stdout


def _without_pair(body: tuple, src: str, dst: str) -> tuple:
    """``body`` without any SetFlag/WaitFlag of the pipe pair ``src -> dst``."""
    out: list = []
    for s in body:
        if isinstance(s, Loop):
            s = dataclasses.replace(s, body=_without_pair(s.body, src, dst))
        elif isinstance(s, (SetFlag, WaitFlag)) and (s.src_pipe, s.dst_pipe) == (src, dst):
            continue
        out.append(s)
    return tuple(out)


def _pairs(body: tuple) -> set:
    return {(s.src_pipe, s.dst_pipe) for s in walk(body) if isinstance(s, SetFlag)}


#: op -> (dtype, target, input shapes): the pairs of every program of the kernel
#: (enough tiles per core that every ping-pong slot is reused)
FLAG_CASES = {
    "matmul": ("float16", "npu-lite", [(200, 150), (150, 70)]),
    "matmul_bias_relu": ("float16", "npu-lite", [(200, 150), (150, 70), (70,)]),
    "softmax": ("float16", "npu-lite", [(400, 70)]),
    "softmax_3d_1": ("float32", "npu", [(250, 40, 21)]),
    "reduce_sum_3d_02_keep": ("float32", "npu-lite", [(3, 600, 21)]),
}


@pytest.mark.parametrize("which", sorted(FLAG_CASES))
def test_every_flag_pair_is_needed(which):
    """No flag more than needed: dropping every set/wait of any one pipe pair of any
    program makes the simulator report a race (the program stays balanced, so it is
    the missing ordering that is caught)."""
    dtype, target, shapes = FLAG_CASES[which]
    ck = _vector_ck(which, dtype, target) if which != "matmul" else _ck("matmul", dtype)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(sh).astype(dtype) for sh in shapes]
    simulate(ck, *arrays)                                 # the programs as built are clean
    k = ck.final_ir.program
    n = 0
    for prog in k.programs:
        for src, dst in sorted(_pairs(prog.body)):
            bad = k.map_programs(lambda p, q=prog, a=src, b=dst: dataclasses.replace(
                p, body=_without_pair(p.body, a, b)) if p is q else p)
            with pytest.raises(NpuRaceError, match=f"race on .* a WaitFlag<{src}->{dst}> is "
                                                   f"missing"):
                run_module(ck.final_ir.with_program(bad), ck.target, *arrays)
            n += 1
    assert n >= 4


def test_npu_benchmarks_run():
    """The benchmarks' pieces run on the multi-core model (they broke unseen when the
    simulator's report changed): a matmul and a row-wise kernel of `bench npu`, one
    case of `bench chains_npu`."""
    from polycomp.benchmarks import chains_npu, npu
    m = npu._matmul(256, True)
    # 4 output tiles, each cut into 4 k parts (split-K of the last round): 16 cores
    assert m["cores"] == 16 and m["max_abs_error"] < 0.05
    assert m["bound"] in ("cube", "MTE2", "MTE1", "FIX", "HBM", "L2") and \
        0 < m["bound_busy"] <= 1
    i8 = npu._matmul(128, True, "int8")
    assert i8["max_abs_error"] == 0 and i8["cube_utilisation"] > 0
    dq = npu._dequant(128, True)                      # Fixpipe VDEQF16
    assert dq["bit_exact"] and dq["bytes"]["L1->FB"] > 0
    r = npu._rowwise("softmax", 512, 256)
    assert r["vector_cores"] > 1 and r["vs_roofline"] >= 1.0
    c = chains_npu.case("ViT-B", "attention", "npu")
    assert c["max_abs_diff"] < 0.05 and c["fused_cycles"] > 0 and c["buffers"] > 0
