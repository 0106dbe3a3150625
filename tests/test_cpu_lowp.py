"""Low-precision GEMMs with constant shapes through the pipeline: bf16 through
vdpbf16ps and int8 through vpdpbusd (u8 x s8, the +128 offset compensated by the
packed operand's column sums), compiled by ``compile_kernel`` for ``cpu-avx512-bf16``
and executed through SIMDe on any host (natively where /proc/cpuinfo lists the units),
bit for bit against numpy references with the units' rounding, on hypothesis-drawn
shapes (tails of the 16-lane vectors and of the k groups, odd and prime sizes, extent
1) and int8 edge values; the native build is checked by disassembly for the
instructions and for accumulators that stay in registers."""
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polycomp as pc
from polycomp import dtypes as dt
from polycomp.driver import compile_kernel
from polycomp.errors import PolycompError
from polycomp.frontend import ops
from polycomp.frontend.dsl import Kernel
from polycomp.hw.cpu import lowp
from polycomp.hw.cpu.simd_build import disassemble, simde_available
from polycomp.hw.target import get_target

BF16 = dt.to_numpy("bfloat16")
SHAPES = st.tuples(st.integers(1, 14), st.sampled_from([1, 15, 16, 17, 64, 65, 130]),
                   st.sampled_from([1, 2, 3, 4, 5, 7, 31, 41, 257]))
TARGET = "cpu-avx512-bf16"


def _kernel(kind: str, M: int, N: int, K: int) -> Kernel:
    src = lowp.input_dtype(kind)
    return Kernel(lambda A, B: ops.matmul(A, B), name=f"{kind}_gemm_{M}_{N}_{K}",
                  inputs={"A": pc.Tensor[(M, K), src], "B": pc.Tensor[(K, N), src]})


def _inputs(kind, M, N, K, seed):
    rng = np.random.default_rng(seed)
    if kind == "bf16":
        return (rng.standard_normal((M, K)).astype(BF16),
                rng.standard_normal((K, N)).astype(BF16))
    return (rng.integers(-128, 128, (M, K)).astype(np.int8),
            rng.integers(-128, 128, (K, N)).astype(np.int8))


def _check(kind, mode, shape, seed):
    M, N, K = shape
    A, B = _inputs(kind, M, N, K, seed)
    ck = compile_kernel(_kernel(kind, M, N, K), TARGET)
    assert ck.final_ir.counts.microkernels and "microkernels" not in ck.notes, ck.notes
    f = lowp.build_lowp(_kernel(kind, M, N, K), TARGET, mode)
    C = f(A, B)
    if kind == "bf16":
        ref = lowp.reference_bf16(A, B, "pair-sum" if mode == "simde" else "odd-first")
        assert C.dtype == np.float32
        np.testing.assert_array_equal(C, ref)
        # and the product itself, to fp32 accumulation accuracy
        exact = lowp._bf16_bits_to_f32(A).astype(np.float64) @ lowp._bf16_bits_to_f32(B)
        np.testing.assert_allclose(C, exact, rtol=1e-5 * K, atol=1e-5 * K)
    else:
        assert C.dtype == np.int32
        np.testing.assert_array_equal(C, lowp.reference_int8(A, B))


@pytest.mark.parametrize("kind", ["bf16", "int8"])
@settings(max_examples=4, deadline=None)
@given(shape=SHAPES, seed=st.integers(0, 2 ** 31))
def test_lowp_gemm_simde(kind, shape, seed):
    _check(kind, "simde", shape, seed)


@pytest.mark.parametrize("kind", ["bf16", "int8"])
@pytest.mark.parametrize("tiles", [(12, 64, 20), (6, 128, 7)])
def test_small_cache_tiles(kind, tiles):
    """Many k tiles (KC 20, or 7 rounded up to a whole group), several j and i tiles:
    the partial sums go through C in order, bit for bit the reference's."""
    M, N, K = 13, 150, 97
    # without the ISA the SIMDe build runs it (README names libsimde-dev as a test
    # prerequisite: no skip, a missing header is a BuildError)
    mode = "native" if lowp.host_has(kind) else "simde"
    A, B = _inputs(kind, M, N, K, 4)
    C = lowp.build_lowp(_kernel(kind, M, N, K), TARGET, mode, {"gemm_tiles": tiles})(A, B)
    if kind == "bf16":
        ref = lowp.reference_bf16(A, B, "odd-first" if mode == "native" else "pair-sum")
        np.testing.assert_array_equal(C, ref)
    else:
        np.testing.assert_array_equal(C, lowp.reference_int8(A, B))


@pytest.mark.parametrize("kind", ["bf16", "int8"])
def test_lowp_gemm_native(kind):
    if not lowp.host_has(kind):
        pytest.skip(f"hardware: this host has no {lowp.feature(kind)} (SIMDe test runs it)")
    for shape in ((1, 1, 1), (13, 130, 33), (6, 64, 64), (7, 97, 300)):
        _check(kind, "native", shape, 0)


@pytest.mark.parametrize("mode", ["native", "simde"])
def test_int8_edge_values(mode):
    """-128 and 127 everywhere (the offset's extremes: ``x + 128`` is 0 and 255), over
    more than one k tile; int32 accumulation is exact."""
    if mode == "native" and not lowp.host_has("int8"):
        pytest.skip("hardware: this host has no avx512_vnni (SIMDe case runs it)")
    M, N, K = 7, 33, 300
    # k tiles of 20: the offset's compensation is per packed block
    f = lowp.build_lowp(_kernel("int8", M, N, K), TARGET, mode, {"gemm_tiles": (12, 64, 20)})
    rng = np.random.default_rng(3)
    for a, b in ((-128, -128), (-128, 127), (127, 127), (127, -128)):
        A = np.full((M, K), a, np.int8)
        B = np.full((K, N), b, np.int8)
        np.testing.assert_array_equal(f(A, B), np.full((M, N), a * b * K, np.int32))
    A = rng.choice(np.array([-128, 127, 0, -1, 1], np.int8), (M, K))
    B = rng.choice(np.array([-128, 127, 0, -1, 1], np.int8), (K, N))
    np.testing.assert_array_equal(f(A, B), lowp.reference_int8(A, B))


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


@pytest.mark.parametrize("kind,insn", [("bf16", "vdpbf16ps"), ("int8", "vpdpbusd")])
def test_native_build_uses_the_dot_instruction(kind, insn):
    """The 6 x 64 register tile (a function of its own): a k loop of 24 dot
    instructions on zmm registers, its accumulators in registers (no stack access in the
    loop)."""
    ck = compile_kernel(_kernel(kind, 96, 128, 64), TARGET)
    assert any("low-precision product" in r for r in ck.notes["cpu-backbone-tile"])
    asm = disassemble(ck.source, lowp.NATIVE_FLAGS)
    assert re.search(r"<pc_dot_tile6_\d+>:", asm), "the 6-row tile is a function"
    inner = [lp for lp in _loops_with(asm, insn) if lp.count(insn) == 24]
    assert inner, "no k loop of 24 dot instructions"
    loop = min(inner, key=len)
    assert "zmm" in loop
    spills = [ln for ln in loop.splitlines() if "mm" in ln and ("rsp" in ln or "rbp)" in ln)]
    assert not spills, loop


def test_targets_declare_the_units():
    t = get_target("cpu-avx512-bf16")
    dots = [u for u in t.units if u.is_dot]
    assert [(u.operands, u.accumulator, u.shape) for u in dots] == [
        (("bfloat16", "bfloat16"), "float32", (16, 2)), (("uint8", "int8"), "int32", (16, 4))]
    assert any("vdpbf16ps" in u.name for u in dots) and any("vpdpbusd" in u.name for u in dots)
    assert t.has("avx512_bf16") and t.has("avx512_vnni")
    assert not any(u.is_dot for u in get_target("cpu-avx512").units)


def _pair_case(e_a: float):
    """``[1, 0, e_a, 2^-12] @ [1, 0, 2^-12, 2^-12]^T``: the accumulator is 1 after the
    first pair; the second pair adds ``e = e_a 2^-12`` (even) and ``o = 2^-24`` (odd)."""
    t = 2.0 ** -12
    A = np.array([[1.0, 0.0, e_a, t]], np.float32).astype(BF16)
    B = np.array([[1.0], [0.0], [t], [t]], np.float32).astype(BF16)
    return A, B


@pytest.mark.parametrize("e_a,expected", [
    # e = o = 2^-24 (half an ulp of 1): one at a time each rounds away (ties to even),
    # summed first they make one ulp
    (2.0 ** -12, {"odd-first": 1.0, "even-first": 1.0, "pair-sum": 1 + 2.0 ** -23}),
    # e = 1.5 2^-24: after it, o is a tie that rounds to the even 1 + 2^-22
    (1.5 * 2.0 ** -12, {"odd-first": 1 + 2.0 ** -23, "even-first": 1 + 2.0 ** -22,
                        "pair-sum": 1 + 2.0 ** -23})])
def test_references_round_like_the_unit(e_a, expected):
    A, B = _pair_case(e_a)
    for order, value in expected.items():
        assert lowp.reference_bf16(A, B, order)[0, 0] == np.float32(value), order


def test_native_pair_rounding_matches_the_instruction():
    """The kernel on the case where the three orders differ: odd-first natively."""
    if not lowp.host_has("bf16"):
        pytest.skip("hardware: this host has no avx512_bf16")
    f = lowp.build_lowp(_kernel("bf16", 1, 1, 4), TARGET, "native")
    A, B = _pair_case(1.5 * 2.0 ** -12)
    assert f(A, B)[0, 0] == np.float32(1 + 2.0 ** -23)


def test_bad_arguments_are_user_errors():
    f = lowp.build_lowp(_kernel("int8", 2, 3, 4), TARGET, "simde" if simde_available()
                        else "native")
    with pytest.raises(PolycompError):
        f(np.zeros((2, 5), np.int8), np.zeros((4, 3), np.int8))
