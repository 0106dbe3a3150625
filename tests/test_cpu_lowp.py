"""Low-precision GEMM (hw/cpu/lowp.py): bf16 through vdpbf16ps and int8 through
vpdpbusd (u8 x s8 with the +128 offset correction), executed through SIMDe on any
host (natively where /proc/cpuinfo lists the units), bit for bit against numpy
references with the same rounding, on hypothesis-drawn shapes (tails of the 16-lane
vectors and of the k groups, odd sizes, extent 1); the native build is checked by
disassembly for the instructions and for accumulators that stay in registers."""
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polycomp import dtypes as dt
from polycomp.errors import TargetError
from polycomp.hw.cpu import lowp
from polycomp.hw.cpu.simd_build import disassemble, simde_available
from polycomp.hw.target import get_target

BF16 = dt.to_numpy("bfloat16")
SHAPES = st.tuples(st.integers(1, 14), st.sampled_from([1, 15, 16, 17, 64, 65, 130]),
                   st.integers(1, 41))


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
    f = lowp.build(lowp.generate(kind, M, N, K), mode)
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


@pytest.mark.skipif(not simde_available(), reason="SIMDe headers (libsimde-dev) missing")
@pytest.mark.parametrize("kind", ["bf16", "int8"])
@settings(max_examples=5, deadline=None)
@given(shape=SHAPES, seed=st.integers(0, 2 ** 31))
def test_lowp_gemm_simde(kind, shape, seed):
    _check(kind, "simde", shape, seed)


@pytest.mark.parametrize("kind", ["bf16", "int8"])
def test_lowp_gemm_native(kind):
    if not lowp.host_has(kind):
        pytest.skip(f"hardware: this host has no {lowp.KINDS[kind][1]} (SIMDe test runs it)")
    for shape in ((1, 1, 1), (13, 130, 33), (6, 64, 64)):
        _check(kind, "native", shape, 0)


def _function(asm: str, name: str) -> str:
    """The disassembly of function ``name`` (or a clone ``name.constprop.0``; up to
    the next symbol)."""
    m = re.search(rf"<{re.escape(name)}(\.\w+\.\d+)?>:", asm)
    start = m.start()
    nxt = asm.find(">:\n", m.end())
    return asm[start:nxt if nxt > 0 else len(asm)]


def _loop_around(asm: str, insn: str) -> str:
    lines = [ln for ln in asm.splitlines() if re.match(r"\s+[0-9a-f]+:\t", ln)]
    addr = [int(ln.split(":")[0], 16) for ln in lines]
    first = next(i for i, ln in enumerate(lines) if insn in ln)
    for i in range(first, len(lines)):
        m = re.search(r"\tj\w+\s+([0-9a-f]+) <", lines[i])
        if m and int(m.group(1), 16) <= addr[first]:
            return "\n".join(lines[addr.index(int(m.group(1), 16)):i + 1])
    raise AssertionError(f"no loop around {insn}")


@pytest.mark.parametrize("kind,insn", [("bf16", "vdpbf16ps"), ("int8", "vpdpbusd")])
def test_native_build_uses_the_dot_instruction(kind, insn):
    g = lowp.for_target(kind, 96, 128, 64, get_target("cpu-avx512-bf16"))
    assert (g.MR, g.NV) == (6, 4)
    asm = _function(disassemble(g.source, lowp.NATIVE_FLAGS), f"{g.name}_mk{g.MR}")
    loop = _loop_around(asm, insn)
    assert loop.count(insn) == 24 and "zmm" in loop      # 6 x 4 accumulators
    spills = [ln for ln in loop.splitlines() if "mm" in ln and ("rsp" in ln or "rbp)" in ln)]
    assert not spills, loop


def test_targets_declare_the_units():
    t = get_target("cpu-avx512-bf16")
    names = [u.name for u in t.units]
    assert any("vdpbf16ps" in n for n in names) and any("vpdpbusd" in n for n in names)
    assert t.has("avx512_bf16") and t.has("avx512_vnni")
    assert not any("vdpbf16ps" in u.name for u in get_target("cpu-avx512").units)
    with pytest.raises(TargetError, match="avx512_bf16"):
        lowp.for_target("bf16", 4, 4, 4, get_target("cpu-avx2"))


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


def test_bad_requests_are_user_errors():
    with pytest.raises(TargetError, match="fp8"):
        lowp.generate("fp8", 1, 1, 1)
    f = lowp.build(lowp.generate("int8", 2, 3, 4), "simde")
    with pytest.raises(TargetError, match="int8"):
        f(np.zeros((2, 4), np.float32), np.zeros((4, 3), np.int8))
