"""Golden IR tests of the passes a product on a dot-product unit goes through after the
schedule (tree goldens: tests/test_cpu_schedule_golden.py ``matmul_*_dot``): the IR
packing pass (grouped panels; int8: the offset encoding of ``X``, ``Y``'s column sums
and the compensated product), the micro-kernel pass (the register tile of
``dot_bf16`` / ``dot_u8s8`` calls, a variant per row count, masked columns) and the
vector printer (the tile as intrinsics).  Each case is one compile with constant shapes
(edge tiles in both dimensions) on a fixed target (cpu-avx512-bf16, 32 KiB L1, 1 MiB L2,
2 threads); the pass's input (the previous step's output) and output are compared with
``tests/golden/test_cpu_microkernel_golden/<case>.<pass>.{in,out}.ir``
(``--update-goldens`` rewrites them), and the output is checked to compute the
product: by the IR interpreter (packing) and, built natively or through SIMDe, against
numpy (micro-kernel)."""
import dataclasses

import numpy as np
import pytest

import polycomp as pc
from polycomp import dtypes as dt
from polycomp.driver import compile_kernel, interpret
from polycomp.frontend import ops
from polycomp.frontend.dsl import Kernel
from polycomp.hw.cpu import lowp
from polycomp.hw.target import get_target

_DOT = get_target("cpu-avx512-bf16").with_capacities(L1=32 * 1024, L2=1024 * 1024)
TARGET = dataclasses.replace(_DOT, cpu=dataclasses.replace(_DOT.cpu, threads=2))
SHAPE = (5, 70, 9)          # M, N, K: one tile of 5 rows; 64 + 6 columns (masked)
BF16 = dt.to_numpy("bfloat16")


def _kernel(src: str, shape=SHAPE) -> Kernel:
    M, N, K = shape
    return Kernel(lambda A, B: ops.matmul(A, B), name=f"mm_{src}",
                  inputs={"A": pc.Tensor[(M, K), src], "B": pc.Tensor[(K, N), src]})


_COMPILED: dict = {}


def _compiled(src: str):
    if src not in _COMPILED:
        _COMPILED[src] = compile_kernel(_kernel(src), TARGET, dump=True)
    return _COMPILED[src]


def _in_out(ck, name: str, stage: str) -> tuple[str, str]:
    recs = ck.records
    k = next(i for i, r in enumerate(recs) if r.name == name and r.stage == stage)
    return recs[k - 1].tree, recs[k].tree


def _inputs(src: str, seed: int = 0):
    M, N, K = SHAPE
    rng = np.random.default_rng(seed)
    if src == "int8":
        return (rng.integers(-128, 128, (M, K)).astype(np.int8),
                rng.integers(-128, 128, (K, N)).astype(np.int8))
    return (rng.standard_normal((M, K)).astype(BF16), rng.standard_normal((K, N)).astype(BF16))


@pytest.mark.parametrize("src", ["bfloat16", "int8"])
@pytest.mark.parametrize("name,stage", [("pack", "ir"), ("microkernels", "codegen")])
def test_golden_ir(src, name, stage, goldens):
    ck = _compiled(src)
    before, after = _in_out(ck, name, stage)
    for part, text in (("in", before), ("out", after)):
        expected = goldens.expected(f"test_cpu_microkernel_golden/{src}.{name}.{part}.ir", text)
        assert expected == text.strip(), f"{src} {name} {part}:\n{text}"


@pytest.mark.parametrize("src", ["bfloat16", "int8"])
def test_packed_ir_computes_the_product(src):
    """The IR after packing (grouped panels, zero padding, int8 offset and
    compensation) run by the interpreter: exactly the product (bf16 in fp32 sums)."""
    A, B = _inputs(src)
    C = interpret(_compiled(src), A, B)
    if src == "int8":
        np.testing.assert_array_equal(C, lowp.reference_int8(A, B))
    else:
        exact = lowp._bf16_bits_to_f32(A).astype(np.float64) @ lowp._bf16_bits_to_f32(B)
        np.testing.assert_allclose(C, exact, rtol=1e-5, atol=1e-5)


def test_micro_kernel_tiles():
    """Every tile is a dot tile: with 5 rows one variant of 5 rows; with 7 one variant
    per row count (the row tile's extent depends on the parallel loop: 6 rows, then 1);
    4 vectors masked beyond the 70 columns of the second column tile."""
    from polycomp.lowering.printer import func_str
    for src, call in (("bfloat16", "dot_bf16("), ("int8", "dot_u8s8(")):
        for ck, rows in ((_compiled(src), 5),
                         (compile_kernel(_kernel(src, (7, 70, 9)), TARGET), 21)):
            text = func_str(ck.final_ir)
            assert ck.final_ir.counts.microkernels == 1 and "microkernels" not in ck.notes
            assert text.count(call) == 4 * rows and "vector_mask" in text
            assert text.count("broadcast_group(") == rows


@pytest.mark.parametrize("src", ["bfloat16", "int8"])
def test_golden_printed_tile(src, goldens):
    """The vector printer's output for the kernel: the register tile as a function of
    its own, then the kernel calling it (the prelude left out: it is the printer's
    fixed table)."""
    source = _compiled(src).source
    body = source[source.index("\nstatic __attribute__((noinline)) void pc_dot_tile"):].strip()
    assert f"\nvoid mm_{src}(" in body
    expected = goldens.expected(f"test_cpu_microkernel_golden/{src}.kernel.c", body)
    assert expected == body
    helper = "pc512_dpbf16_ps" if src == "bfloat16" else "pc512_dpbusd_epi32"
    assert f"PC_VINLINE __m{512}{'' if src == 'bfloat16' else 'i'} {helper}(" in source


@pytest.mark.parametrize("src", ["bfloat16", "int8"])
def test_printed_tile_runs(src):
    A, B = _inputs(src, 1)
    mode = "native" if lowp.host_has("bf16") and lowp.host_has("int8") else "simde"
    # without the units the SIMDe build runs it (libsimde-dev is a test prerequisite)
    C = lowp.build_lowp(_kernel(src), TARGET, mode)(A, B)
    if src == "int8":
        np.testing.assert_array_equal(C, lowp.reference_int8(A, B))
    else:
        ref = lowp.reference_bf16(A, B, "odd-first" if mode == "native" else "pair-sum")
        np.testing.assert_array_equal(C, ref)


FILL_SHAPE = (7, 1024, 3)   # fp32, Y's rows 4 KiB apart: packed, filled by the first row tile


def _fill_compiled():
    if "fill" not in _COMPILED:
        _COMPILED["fill"] = compile_kernel(_kernel("float32", FILL_SHAPE), TARGET, dump=True)
    return _COMPILED["fill"]


@pytest.mark.parametrize("name,stage", [("pack", "ir"), ("microkernels", "codegen")])
def test_golden_ir_fill(name, stage, goldens):
    """A few-row fp32 product whose ``Y`` is packed without a copy pass
    (``fill_y_in_first_row``): the packing pass gives the first row tile's micro-kernel
    mark a fill nest (``if (first) for k: for jj: P[..] = B[..]``; here one full row
    tile, no row loop, so no condition) and no copy loop; the micro-kernel pass loads
    each ``Y`` vector from ``B`` and stores it to the packed panel in its ``k`` loop."""
    ck = _fill_compiled()
    assert ck.final_ir.counts.filled_packs == 1 and ck.final_ir.counts.filling_tiles == 1
    before, after = _in_out(ck, name, stage)
    for part, text in (("in", before), ("out", after)):
        expected = goldens.expected(f"test_cpu_microkernel_golden/float32_fill.{name}.{part}.ir",
                                    text)
        assert expected == text.strip(), f"fill {name} {part}:\n{text}"


@pytest.mark.parametrize("form", ["fill", "stream"])
def test_filled_and_streamed_ir_compute_the_product(form):
    """The IR after the fill packing (and with the next block streamed: prefetches change
    no value), run by the interpreter: the product (fp32 sums in the compiled order;
    numpy within rounding)."""
    (M, N, K), compiled, seed = ((FILL_SHAPE, _fill_compiled, 3) if form == "fill"
                                 else (STREAM_SHAPE, _stream_compiled, 4))
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    C = interpret(compiled(), A, B)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-5, atol=1e-5)


STREAM_SHAPE = (13, 1024, 3)    # two full row tiles (a row loop) and a 1-row tail


def _stream_compiled():
    if "stream" not in _COMPILED:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("POLYCOMP_GEMM_STREAM", "1")
            _COMPILED["stream"] = compile_kernel(_kernel("float32", STREAM_SHAPE), TARGET,
                                                 dump=True)
    return _COMPILED["stream"]


@pytest.mark.parametrize("name,stage", [("pack", "ir"), ("microkernels", "codegen")])
def test_golden_ir_stream(name, stage, goldens):
    """A filled ``Y`` that streams (``stream_y_fill``, forced here): besides the first
    row tile's fill nest, each micro-kernel mark of the row loop gets ``for k:
    prefetch(B[next])``, the element of the next block (``select`` on the wrap, clamped
    into ``B``) at line ``r mod lines`` of the tile's row segment; the micro-kernel pass
    moves that prefetch into both tiles' ``k`` loops."""
    ck = _stream_compiled()
    assert ck.final_ir.counts.filled_packs == 1 and ck.final_ir.counts.filling_tiles
    before, after = _in_out(ck, name, stage)
    assert "prefetch(B[" in (after if name == "pack" else before)
    for part, text in (("in", before), ("out", after)):
        expected = goldens.expected(
            f"test_cpu_microkernel_golden/float32_stream.{name}.{part}.ir", text)
        assert expected == text.strip(), f"stream {name} {part}:\n{text}"


