"""NPU: rows longer than UB (the long-row form of :mod:`polycomp.hw.npu.lower_longrow`):
softmax / log_softmax in two passes over GM with the online max/sum, layernorm in three,
a long-row sum and an elementwise kernel in chunks -- against numpy in the simulator on
``npu-lite`` (UB 16 KiB) at odd row lengths, with NaN / inf rows, and the emitted
source through the API check."""

import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import compile_kernel
from polycomp.errors import NpuCapacityError
from polycomp.frontend.ops import layernorm_kernel, reduce_kernel, relu_kernel, softmax_kernel
from polycomp.hw.npu.backend import host_tiling, simulate, syntax_check
from polycomp.hw.npu.program import CopyIn, DataCopyPadIn, Loop, walk

_CK: dict = {}


def _ck(key, make):
    if key not in _CK:
        _CK[key] = compile_kernel(make(), "npu-lite")
    return _CK[key]


def _long(ck, **sizes) -> dict:
    """The host tiling of ``ck``'s vector program for ``sizes``."""
    ht = host_tiling(ck.final_ir.program, ck.target, sizes)
    return next(iter(ht.programs.values()))


def _softmax_ref(x):
    x = x.astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)


def _log_softmax():
    N, M = pc.sym("N M")

    @pc.tensor_expr
    def log_softmax(x: pc.Tensor[(N, M), "float16"]):
        k = pc.reduce_axis(M, "k")
        mx = pc.compute((N,), lambda i: pc.max(pc.cast(x[i, k], "float32"), axis=k),
                        name="lsm_max")
        s = pc.compute((N,), lambda i: pc.sum(pc.exp(pc.cast(x[i, k], "float32") - mx[i]),
                                              axis=k), name="lsm_sum")
        return pc.compute((N, M), lambda i, j: pc.cast(pc.cast(x[i, j], "float32") - mx[i]
                                                       - pc.log(s[i]), "float16"),
                          name="lsm")
    return log_softmax


def _passes(ck) -> int:
    """The chunk loops of the long-row form that load from GM."""
    return sum(1 for s in walk(ck.final_ir.program.programs[0].body)
               if isinstance(s, Loop) and s.var.startswith("c")
               and any(isinstance(x, (CopyIn, DataCopyPadIn)) for x in walk(s.body)))


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("n, m", [(3, 3001), (5, 257), (1, 4099), (2, 1)])
def test_softmax_rows_longer_than_ub(dtype, n, m):
    ck = _ck(("sm", dtype), lambda: softmax_kernel(dtype=dtype))
    rng = np.random.default_rng(n * m)
    x = (rng.standard_normal((n, m)) * 4).astype(dtype)
    out, rep = simulate(ck, x)
    t = _long(ck, N=n, M=m)
    # npu-lite's UB is 16 KiB: one fp32 row of 257 needs 16 640 B with the column
    # fold's two accumulators (each padded for its bank phase), so it goes in chunks
    assert t["LR"] == (1 if m > 1000 or (m, dtype) == (257, "float32") else 0), t
    np.testing.assert_allclose(out.astype(np.float32), _softmax_ref(x),
                               rtol=3e-3 if dtype == "float16" else 1e-5, atol=1e-6)
    assert rep.cycles > 0


def test_softmax_long_rows_take_two_passes_with_the_online_max_sum():
    ck = _ck(("sm", "float16"), lambda: softmax_kernel(dtype="float16"))
    assert _passes(ck) == 2     # the max and the sum in one pass, the quotient in another
    ck = _ck(("ln", "float16"), lambda: layernorm_kernel("float16"))
    assert _passes(ck) == 3     # the mean, the variance, the normalised values


def test_softmax_long_rows_nan_and_inf_rows():
    ck = _ck(("sm", "float32"), lambda: softmax_kernel(dtype="float32"))
    m = 2999
    rng = np.random.default_rng(5)
    x = rng.standard_normal((7, m)).astype(np.float32)
    x[0, 1500] = np.nan                     # NaN: the whole row NaN
    x[1, :] = -np.inf                       # all -inf: NaN (-inf - -inf)
    x[2, :2000] = -np.inf                   # a -inf prefix longer than a chunk, then finite
    x[3, 2100] = np.inf                     # +inf: NaN (inf - inf), as numpy
    x[4, :] = 60000.0                       # large equal values
    x[5, 10] = 1e30                         # one dominant value
    out, _ = simulate(ck, x)
    assert _long(ck, N=7, M=m)["LR"] == 1
    np.testing.assert_allclose(out, _softmax_ref(x), rtol=1e-5, atol=1e-7)


def test_log_softmax_long_rows():
    ck = _ck("lsm", _log_softmax)
    assert _passes(ck) == 2
    rng = np.random.default_rng(3)
    for n, m in [(3, 5003), (4, 97)]:
        x = (rng.standard_normal((n, m)) * 3).astype(np.float16)
        x[0, 7] = -np.inf
        out, _ = simulate(ck, x)
        xf = x.astype(np.float32)
        mx = xf.max(1, keepdims=True)
        ref = xf - mx - np.log(np.exp(xf - mx).sum(1, keepdims=True))
        np.testing.assert_allclose(out.astype(np.float32), ref, rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("n, d", [(3, 2501), (2, 4096)])
def test_layernorm_rows_longer_than_ub(n, d):
    ck = _ck(("ln", "float16"), lambda: layernorm_kernel("float16"))
    rng = np.random.default_rng(d)
    x = (rng.standard_normal((n, d)) * 2 + 1).astype(np.float16)
    g = rng.standard_normal(d).astype(np.float16)
    b = rng.standard_normal(d).astype(np.float16)
    out, _ = simulate(ck, x, g, b)
    assert _long(ck, N=n, D=d)["LR"] == 1
    xf = x.astype(np.float32)
    mu = xf.mean(1, keepdims=True)
    ref = (xf - mu) / np.sqrt(((xf - mu) ** 2).mean(1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=1e-2, atol=2e-2)


def test_long_row_sum_and_elementwise_in_chunks():
    ck = _ck("rsum", lambda: reduce_kernel("sum", 1, "float32"))
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 6007)).astype(np.float32)
    out, _ = simulate(ck, x)
    assert _long(ck, N=3, M=6007)["LR"] == 1
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-4, atol=1e-3)
    ck = _ck("relu", lambda: relu_kernel("float32"))
    x = rng.standard_normal((2, 9001)).astype(np.float32)
    out, _ = simulate(ck, x)
    assert _long(ck, N=2, M=9001)["LR"] == 1
    np.testing.assert_array_equal(out, np.maximum(x, 0))


def test_long_rows_refused_where_no_chunked_form():
    """A transposed box (softmax over axis 0) has no chunked form: a column group
    longer than UB still raises NpuCapacityError naming the kernel."""
    ck = _ck(("sm0", "float32"), lambda: softmax_kernel(0, "float32"))
    with pytest.raises(NpuCapacityError, match="softmax_0_float32.*split into chunks only"):
        simulate(ck, np.zeros((3000, 3), np.float32))


def test_long_row_sources_pass_the_api_check(tmp_path):
    paths = []
    for key, make in ((("sm", "float16"), lambda: softmax_kernel(dtype="float16")),
                      (("ln", "float16"), lambda: layernorm_kernel("float16")),
                      ("lsm", _log_softmax)):
        ck = _ck(key, make)
        assert "CW" in ck.source and "LR" in ck.source
        p = tmp_path / f"{ck.final_ir.name}.cpp"
        p.write_text(ck.source)
        paths.append(str(p))
    assert "OK" in syntax_check(*paths)


def test_printed_host_tiling_matches_the_simulators(tmp_path):
    """The emitted host tiling function (C, compiled with g++ and run) fills the same
    TR / CP / LR / CW and numBlocks as the simulator's host tiling, for rows that fit
    and rows that take chunks, on both targets."""
    import subprocess

    from polycomp.hw.npu.api_header import HEADER
    from polycomp.hw.npu.target import npu_params
    cases = [("npu-lite", (3, 3001)), ("npu-lite", (300, 70)), ("npu", (4096, 32000)),
             ("npu", (4096, 1024)), ("npu", (7, 100000)),
             ("npu", (300, 1000)), ("npu", (300, 257))]
    for target in ("npu-lite", "npu"):
        ck = compile_kernel(softmax_kernel(dtype="float16"), target)
        name = ck.final_ir.name
        (tmp_path / "kernel_operator.h").write_text(HEADER)
        (tmp_path / "k.cpp").write_text(ck.source)
        shapes = [s for t, s in cases if t == target]
        p = ck.final_ir.program
        cores = npu_params(ck.target)
        main = ['#include "k.cpp"', "#include <cstdio>", "int main() {",
                f"    {name}_TilingData t; uint64_t ws;"]
        for n, m in shapes:
            main += [f"    {{ int64_t s[2] = {{{n}, {m}}};",
                     f"      uint32_t nb = {name}_Tiling(s, {cores.aic_cores}, "
                     f"{cores.aiv_cores}, &t, &ws);",
                     '      printf("%u %lld %lld %lld %lld\\n", nb, (long long)t.TR_0, '
                     '(long long)t.CP_0, (long long)t.LR_0, (long long)t.CW_0); }']
        main += ["    return 0;", "}"]
        (tmp_path / "main.cpp").write_text("\n".join(main) + "\n")
        exe = tmp_path / "main"
        subprocess.run(["g++", "-std=c++17", "-I", str(tmp_path), "-o", str(exe),
                        str(tmp_path / "main.cpp")], check=True, capture_output=True)
        got = subprocess.run([str(exe)], check=True, capture_output=True,
                             text=True).stdout.split("\n")
        for (n, m), line in zip(shapes, got):
            ht = host_tiling(p, ck.target, {"N": n, "M": m})
            t = next(iter(ht.programs.values()))
            assert line.split() == [str(v) for v in (ht.blocks, t["TR"], t["CP"], t["LR"],
                                                     t["CW"])], (target, n, m, line)
