"""Low-precision products reached from the DSL through ``compile_kernel``: a bfloat16
matmul (fp32 accumulation) and an int8 one (int32, the +128 offset compensated by the
packed operand's column sums) compiled for ``cpu-avx512-bf16`` come out of the pipeline
as register tiles of ``vdpbf16ps`` / ``vpdpbusd`` intrinsic calls (one build serves
every shape: tails of the 16 lanes and of the k groups, odd sizes, extent 1), checked
bit for bit through SIMDe (natively where the host has the units) against numpy
references with the unit's rounding; every operator of the library with a bf16/int8
product is checked against its numpy reference on the same target; the native build's
disassembly shows the instructions; other CPU targets compile the same kernels through
the ordinary fp32 / int32 path."""
import functools
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polycomp import dtypes as dt
from polycomp.driver import compile_kernel
from polycomp.frontend import ops
from polycomp.frontend.ops import OPS
from polycomp.hw.cpu import lowp
from polycomp.hw.cpu.build import CFunction, build_shared
from polycomp.hw.cpu.simd_build import build_simde, disassemble

BF16 = dt.to_numpy("bfloat16")
KERNELS = {"bf16": lambda: ops.matmul_kernel("bfloat16"),
           "int8": lambda: ops.matmul_kernel("int8"),
           "bf16-cast": lambda: ops.matmul_same_dtype_kernel("bfloat16"),
           # the product as a temporary stage before an epilogue stage
           "bf16-mlp": lambda: ops.mlp_kernel("bfloat16"),
           "int8-bias-relu": lambda: ops.matmul_bias_relu_kernel("int8")}
EXTENT = st.one_of(st.just(1), st.integers(1, 40), st.sampled_from([15, 16, 17, 63, 65, 97]))


@functools.lru_cache(maxsize=None)
def _compiled(name: str, target: str = "cpu-avx512-bf16"):
    return compile_kernel(KERNELS[name](), target)


@functools.lru_cache(maxsize=None)
def _simde(name: str):
    ck = _compiled(name)
    return CFunction(ck.final_ir, build_simde(ck.source))


def _inputs(kind, M, N, K, seed):
    rng = np.random.default_rng(seed)
    if kind.startswith("bf16"):
        return (rng.standard_normal((M, K)).astype(BF16),
                rng.standard_normal((K, N)).astype(BF16))
    return (rng.integers(-128, 128, (M, K)).astype(np.int8),
            rng.integers(-128, 128, (K, N)).astype(np.int8))


def _reference(name, A, B, pair_order, bias=None):
    if name == "int8":
        return lowp.reference_int8(A, B)
    if name == "int8-bias-relu":
        return np.maximum(lowp.reference_int8(A, B) + bias.astype(np.int32), 0)
    C = lowp.reference_bf16(A, B, pair_order)
    return C.astype(BF16) if name == "bf16-cast" else C


def _same(C, ref):
    if C.dtype == BF16:
        C, ref = C.view(np.uint16), ref.view(np.uint16)
    np.testing.assert_array_equal(C, ref)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_dsl_matmul_uses_the_dot_unit(name):
    """The product is a register tile of the unit's intrinsic in the kernel itself (no
    helper kernel beside it): 6 rows x 4 vectors, one variant per row count."""
    ck = _compiled(name)
    kind = name[:4]
    helper = "pc512_dpbf16_ps" if kind == "bf16" else "pc512_dpbusd_epi32"
    assert ck.source.count(helper + "(") == 1 + 4 * (6 + 5 + 4 + 3 + 2 + 1)
    assert "pc_lowp" not in ck.source
    assert any("low-precision product" in r for r in ck.notes["cpu-backbone-tile"])
    assert "microkernels" not in ck.notes       # no tile left to the generic path
    assert ck.final_ir.counts.microkernels == 1


@pytest.mark.parametrize("name", ["bf16", "bf16-cast", "int8"])
@settings(max_examples=6, deadline=None)
@given(M=EXTENT, N=EXTENT, K=EXTENT, seed=st.integers(0, 2 ** 31))
def test_dsl_lowp_simde(name, M, N, K, seed):
    A, B = _inputs(name, M, N, K, seed)
    _same(_simde(name)(A, B), _reference(name, A, B, "pair-sum"))


@pytest.mark.parametrize("name", ["bf16", "bf16-cast", "int8"])
def test_dsl_lowp_native(name):
    kind = name[:4]
    if not lowp.host_has(kind):
        pytest.skip(f"hardware: this host has no {lowp.feature(kind)} (SIMDe test runs it)")
    ck = _compiled(name)
    f = CFunction(ck.final_ir, build_shared(ck.source, flags=lowp.NATIVE_FLAGS))
    for M, N, K in ((1, 1, 1), (13, 130, 33), (6, 64, 64), (1, 97, 515), (61, 1, 3)):
        A, B = _inputs(name, M, N, K, 0)
        _same(f(A, B), _reference(name, A, B, "odd-first"))


@settings(max_examples=4, deadline=None)
@given(M=EXTENT, N=EXTENT, K=EXTENT, seed=st.integers(0, 2 ** 31))
def test_dsl_lowp_before_an_epilogue_stage_simde(M, N, K, seed):
    """The product is a temporary read by the next stage (bias + relu; bias + gelu)."""
    A, B = _inputs("int8", M, N, K, seed)
    bias = np.random.default_rng(seed).integers(-128, 128, N).astype(np.int8)
    _same(_simde("int8-bias-relu")(A, B, bias),
          _reference("int8-bias-relu", A, B, "pair-sum", bias))
    X, W = _inputs("bf16", M, N, K, seed)
    b = np.random.default_rng(seed).standard_normal(N).astype(BF16)
    h = lowp.reference_bf16(X, W, "pair-sum").astype(np.float64) + \
        lowp._bf16_bits_to_f32(b).astype(np.float64)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(_simde("bf16-mlp")(X, W, b), 0.5 * h * (1 + erf(h / np.sqrt(2))),
                               rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name,insn", [("bf16", "vdpbf16ps"), ("int8", "vpdpbusd")])
def test_dsl_native_build_uses_the_dot_instruction(name, insn):
    """The k loop of the 6-row variant: 24 dot instructions on zmm registers, the
    accumulators in registers (symbolic shapes; test_cpu_lowp.py has constant ones)."""
    asm = disassemble(_compiled(name).source, lowp.NATIVE_FLAGS)
    loops = [lp for lp in _loops_with(asm, insn) if lp.count(insn) == 24]
    assert loops, "no k loop of 24 dot instructions"
    loop = min(loops, key=len)
    assert "zmm" in loop
    assert not [ln for ln in loop.splitlines() if "mm" in ln and ("rsp" in ln or "rbp)" in ln)]


def _loops_with(asm: str, insn: str) -> list[str]:
    """Every loop (from the target of a backward jump to the jump) holding ``insn``."""
    lines = [ln for ln in asm.splitlines() if re.match(r"\s+[0-9a-f]+:\t", ln)]
    addr = [int(ln.split(":")[0], 16) for ln in lines]
    out = []
    for i, ln in enumerate(lines):
        m = re.search(r"\tj\w+\s+([0-9a-f]+) <", ln)
        if m and int(m.group(1), 16) <= addr[i] and int(m.group(1), 16) in addr:
            body = lines[addr.index(int(m.group(1), 16)):i + 1]
            if any(insn in b for b in body):
                out.append("\n".join(body))
    return out


#: every operator of the library with a product of bf16/int8 arrays
DOT_OPS = [(n, d) for n, spec in OPS.items() for d in spec.dtypes
           if d in ("bfloat16", "int8") and spec.kind in ("matmul", "composite")]


@pytest.mark.parametrize("name,dtype", DOT_OPS, ids=[f"{n}-{d}" for n, d in DOT_OPS])
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_library_products_on_the_dot_units(name, dtype, data):
    """Each library operator whose product goes to a dot unit, against its numpy
    reference on drawn symbolic shapes (native where the host has both units, else
    SIMDe)."""
    from ops_helpers import check_close, extent
    ck = _compiled_op(name, dtype)
    if not any("low-precision product" in r for r in ck.notes.get("cpu-backbone-tile", ())):
        return          # no product of the unit's form in this operator
    assert "microkernels" not in ck.notes, ck.notes["microkernels"]
    spec = OPS[name]
    shapes = spec.shapes(lambda lo, hi: data.draw(extent(lo, hi)))
    seed = data.draw(st.integers(0, 2 ** 32 - 1), label="seed")
    xs = spec.inputs(np.random.default_rng(seed), shapes, dtype)
    check_close(_built_op(name, dtype)(*xs), spec.reference(*xs), spec, dtype, shapes,
                f"{name}[{dtype}] on the dot units")


@functools.lru_cache(maxsize=None)
def _compiled_op(name: str, dtype: str):
    return compile_kernel(OPS[name].kernel(dtype), "cpu-avx512-bf16")


@functools.lru_cache(maxsize=None)
def _built_op(name: str, dtype: str):
    ck = _compiled_op(name, dtype)
    if lowp.host_has("bf16") and lowp.host_has("int8"):
        return CFunction(ck.final_ir, build_shared(ck.source, flags=lowp.NATIVE_FLAGS))
    return CFunction(ck.final_ir, build_simde(ck.source))   # SIMDe: a test prerequisite


@pytest.mark.parametrize("target", ["cpu-avx512", "cpu-avx2"])
def test_other_targets_keep_the_ordinary_path(target):
    ck = _compiled("bf16", target)
    assert "pc_lowp" not in ck.source and "dpbf16" not in ck.source
    if target == "cpu-avx2":
        f = CFunction(ck.final_ir, build_shared(ck.source))
        A, B = _inputs("bf16", 7, 19, 5, 1)
        exact = lowp._bf16_bits_to_f32(A).astype(np.float64) @ lowp._bf16_bits_to_f32(B)
        np.testing.assert_allclose(f(A, B), exact, rtol=1e-5, atol=1e-5)
