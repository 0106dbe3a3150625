"""Golden schedule-tree tests of the CPU schedule passes: a program-order tree in, the
expected tree out (isl text), compared with ``isl.Schedule.plain_is_equal`` after a text
round trip; every output is also checked for legality against the model's dependences.
The expected trees are in ``tests/golden/test_cpu_schedule_golden/<case>.isl``
(``--update-goldens`` rewrites those that changed).

The target is fixed (cpu-avx512 with 32 KiB L1, 1 MiB L2, 2 threads) so tile sizes do not
depend on the machine running the tests.
"""
import dataclasses

import islpy as isl
import pytest

import polycomp as pc
from polycomp.hw.target import get_target
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.scheduler.cpu.backbone_tile import CpuBackboneTilePass
from polycomp.scheduler.cpu.fuse import CpuFusePass
from polycomp.scheduler.cpu.parallel import CpuParallelPass
from polycomp.scheduler.cpu.reduce_interchange import CpuReduceInterchangePass
from polycomp.scheduler.promotion.cpu_pack import CpuPackPass
from polycomp.scheduler.promotion.record import promotion_state
from polycomp.state import CompileState

N, M, K = pc.sym("N M K")

@pc.tensor_expr
def softmax(x: pc.Tensor[(N, M), "float32"]):
    r = pc.reduce_axis(M, "r")
    mx = pc.compute((N,), lambda i: pc.max(x[i, r], axis=r), name="mx")
    e = pc.compute((N, M), lambda i, j: pc.exp(x[i, j] - mx[i]), name="e")
    q = pc.reduce_axis(M, "q")
    s = pc.compute((N,), lambda i: pc.sum(e[i, q], axis=q), name="s")
    return pc.compute((N, M), lambda i, j: e[i, j] / s[i], name="y")

@pc.tensor_expr
def bias_gelu(x: pc.Tensor[(N, M), "float32"], b: pc.Tensor[(M,), "float32"]):
    t = pc.compute((N, M), lambda i, j: x[i, j] + b[j], name="t")
    return pc.compute((N, M), lambda i, j:
                      0.5 * t[i, j] * (1.0 + pc.erf(t[i, j] * 0.7071067811865476)), name="y")

@pc.tensor_expr
def colmax_then_scale(x: pc.Tensor[(N, M), "float32"]):
    r = pc.reduce_axis(N, "r")
    mx = pc.compute((M,), lambda j: pc.max(x[r, j], axis=r), name="mx")
    return pc.compute((N, M), lambda i, j: x[i, j] / mx[j], name="y")

@pc.tensor_expr
def matmul(A: pc.Tensor[(N, K), "float32"], B: pc.Tensor[(K, M), "float32"]):
    k = pc.reduce_axis(K, "k")
    return pc.compute((N, M), lambda i, j: pc.sum(A[i, k] * B[k, j], axis=k), name="C")


@pc.tensor_expr
def matmul_bias_relu(A: pc.Tensor[(N, K), "float32"], B: pc.Tensor[(K, M), "float32"],
                     b: pc.Tensor[(M,), "float32"]):
    """The product C, then the epilogue D = relu(C + b) (runs on each register tile)."""
    k = pc.reduce_axis(K, "k")
    c = pc.compute((N, M), lambda i, j: pc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return pc.compute((N, M), lambda i, j: pc.max(c[i, j] + b[j], 0.0), name="D")


@pc.tensor_expr
def matmul_bf16(A: pc.Tensor[(N, K), "bfloat16"], B: pc.Tensor[(K, M), "bfloat16"]):
    """A product on the AVX512_BF16 unit (pairs of k per fp32 lane)."""
    k = pc.reduce_axis(K, "k")
    return pc.compute((N, M), lambda i, j: pc.sum(pc.cast(A[i, k], "float32")
                                                  * pc.cast(B[k, j], "float32"), axis=k),
                      name="C")


@pc.tensor_expr
def matmul_int8(A: pc.Tensor[(N, K), "int8"], B: pc.Tensor[(K, M), "int8"]):
    """A product on the AVX512_VNNI unit (quads of k per int32 lane, u8 x s8)."""
    k = pc.reduce_axis(K, "k")
    return pc.compute((N, M), lambda i, j: pc.sum(pc.cast(A[i, k], "int32")
                                                  * pc.cast(B[k, j], "int32"), axis=k),
                      name="C")


@pc.tensor_expr
def matmul_const(A: pc.Tensor[(100, 72), "float32"], B: pc.Tensor[(72, 80), "float32"]):
    """Constant sizes, 100 rows > MC = 54 at 2 threads: the shared packed Y block."""
    k = pc.reduce_axis(72, "k")
    return pc.compute((100, 80), lambda i, j: pc.sum(A[i, k] * B[k, j], axis=k), name="C")


@pc.tensor_expr
def colsum(x: pc.Tensor[(N, M), "float32"]):
    r = pc.reduce_axis(N, "r")
    return pc.compute((M,), lambda j: pc.sum(x[r, j], axis=r), name="cs")


@pc.tensor_expr
def depthwise(x: pc.Tensor[(N, 8, 12, 11), "float32"], w: pc.Tensor[(8, 3, 3), "float32"]):
    """A depthwise 3x3 convolution (stride 1 along rows, 2 along columns): a sliding
    window along the output row, exchanged so that the row is the innermost loop, the
    init and the updates of each output row together under the parallel (n, c, y) band
    (``window_rows``)."""
    rh, rw = pc.reduce_axis(3, "rh"), pc.reduce_axis(3, "rw")
    return pc.compute((N, 8, 10, 5), lambda n, c, y, z: pc.sum(
        x[n, c, y + rh, 2 * z + rw] * w[c, rh, rw], axis=[rh, rw]), name="dw")


@pc.tensor_expr
def matmul_heads(A: pc.Tensor[(2, 20, 24), "float32"], W: pc.Tensor[(24, 3, 16), "float32"],
                 b: pc.Tensor[(3, 1, 16), "float32"]):
    """A projection writing attention heads ``(B, H, S, D)`` (graph/lower.py
    ``head_split``), the bias its epilogue: ``h`` is a column batch dimension, run with
    the column tiles below the packing of ``A`` (packed once for all heads)."""
    k = pc.reduce_axis(24, "k")
    c = pc.compute((2, 3, 20, 16), lambda n, h, s, d: pc.sum(A[n, s, k] * W[k, h, d], axis=k),
                   name="C")
    return pc.compute((2, 3, 20, 16), lambda n, h, s, d: c[n, h, s, d] + b[h, 0, d], name="D")


@pc.tensor_expr
def matmul_heads_stacked(A: pc.Tensor[(2, 20, 24), "float32"],
                         W: pc.Tensor[(24, 6, 16), "float32"],
                         b: pc.Tensor[(2, 1, 3, 1, 16), "float32"]):
    """Two projections of the same rows stacked (graph/rewrite.py
    ``stack_projections``): ``(T, B, H, S, D)``, the weight ``(K, T*H, D)`` read at
    ``t*H + h``; ``t`` and ``h`` both column batch dimensions (one pack of ``A`` for
    both parts and all heads)."""
    k = pc.reduce_axis(24, "k")
    c = pc.compute((2, 2, 3, 20, 16), lambda t, n, h, s, d: pc.sum(
        A[n, s, k] * W[k, t * 3 + h, d], axis=k), name="C")
    return pc.compute((2, 2, 3, 20, 16), lambda t, n, h, s, d: c[t, n, h, s, d] +
                      b[t, 0, h, 0, d], name="D")


@pc.tensor_expr
def matmul_heads_rows(A: pc.Tensor[(20, 24), "float32"], W: pc.Tensor[(24, 3, 16), "float32"],
                      b: pc.Tensor[(3, 1, 16), "float32"]):
    """The batch-1 projection writing heads ``(1, H, S, D)`` with its rows passed as the
    plain 2-d ``(S, K)`` reshape (graph/lower.py ``_head_split_kernel``): ``X`` read where
    it lies (``in_place_operands``, its only other batch dimension has extent 1), no pack
    mark for it."""
    k = pc.reduce_axis(24, "k")
    c = pc.compute((1, 3, 20, 16), lambda n, h, s, d: pc.sum(A[s, k] * W[k, h, d], axis=k),
                   name="C")
    return pc.compute((1, 3, 20, 16), lambda n, h, s, d: c[n, h, s, d] + b[h, 0, d], name="D")


@pc.tensor_expr
def matmul_few_rows(A: pc.Tensor[(8, 1024), "float32"], B: pc.Tensor[(1024, 2048), "float32"]):
    """8 rows at 2 threads: the few-row split over 4 j tiles of 512 (2 per thread),
    ``X``'s rows 4 KiB apart (packed), 4 k tiles: each thread's chunk of j tiles, its k
    tiles, then its j tiles (``thread_k_outer``)."""
    k = pc.reduce_axis(1024, "k")
    return pc.compute((8, 2048), lambda i, j: pc.sum(A[i, k] * B[k, j], axis=k), name="C")


_AVX512 = get_target("cpu-avx512").with_capacities(L1=32 * 1024, L2=1024 * 1024)
TARGET = dataclasses.replace(_AVX512, cpu=dataclasses.replace(_AVX512.cpu, threads=2))
_DOT = get_target("cpu-avx512-bf16").with_capacities(L1=32 * 1024, L2=1024 * 1024)
#: the same with the dot-product units (the low-precision cases)
TARGET_DOT = dataclasses.replace(_DOT, cpu=dataclasses.replace(_DOT.cpu, threads=2))

# case -> (kernel, passes); the expected tree is tests/golden/test_cpu_schedule_golden/<case>.isl
CASES = {
    "softmax_fuse": (softmax, [CpuFusePass]),
    "bias_gelu_fuse": (bias_gelu, [CpuFusePass]),
    "colmax_fuse": (colmax_then_scale, [CpuFusePass]),
    "softmax_parallel": (softmax, [CpuFusePass, CpuParallelPass]),
    "colsum_interchange": (colsum, [CpuReduceInterchangePass, CpuParallelPass]),
    "depthwise_interchange": (depthwise, [CpuReduceInterchangePass, CpuParallelPass]),
    "matmul_backbone": (matmul, [CpuBackboneTilePass]),
    "matmul_pack": (matmul, [CpuBackboneTilePass, CpuPackPass]),
    "matmul_epilogue": (matmul_bias_relu, [CpuBackboneTilePass]),
    # jt -> kt -> pack Y (once, all threads) -> parallel i tiles -> pack X
    # (POLYCOMP_GEMM_SHARED=1, see ENV)
    "matmul_shared_pack": (matmul_const, [CpuBackboneTilePass, CpuPackPass]),
    # the same, its i tiles (24 rows) handed out one at a time: cpu_parallel:0
    "matmul_shared_pack_dynamic": (matmul_const, [CpuBackboneTilePass, CpuPackPass]),
    # default: the per-thread form (one parallel region per call)
    "matmul_const_per_thread": (matmul_const, [CpuBackboneTilePass, CpuPackPass]),
    # heads with the column tiles: batch -> i tiles -> k tiles -> pack X -> [h, j tiles]
    # -> pack Y -> register tiles (the bias epilogue on each)
    "matmul_heads": (matmul_heads, [CpuBackboneTilePass, CpuPackPass]),
    # batch 1, rows 2-d: X read where it lies (no pack mark for it), Y packed
    "matmul_heads_rows": (matmul_heads_rows, [CpuBackboneTilePass, CpuPackPass]),
    # stacked q/k/v: [t, h, j tiles] with the column tiles, below the one pack of X
    "matmul_heads_stacked": (matmul_heads_stacked, [CpuBackboneTilePass, CpuPackPass]),
    # the default for it: X and Y read where they lie (in_place_operands), no pack marks
    "matmul_const_in_place": (matmul_const, [CpuBackboneTilePass, CpuPackPass]),
    # few rows, 2 j tiles per thread: parallel j chunk -> k tiles -> pack X -> j tiles
    # -> pack Y -> register tiles
    "matmul_few_rows_k_outer": (matmul_few_rows, [CpuBackboneTilePass, CpuPackPass]),
    # the same with POLYCOMP_GEMM_THREAD_ORDER=jk: parallel [j tiles, k tiles]
    "matmul_few_rows_jk": (matmul_few_rows, [CpuBackboneTilePass, CpuPackPass]),
    # dot-product tiles: no isolation, cpu_microkernel:<n>, grouped pack requests
    "matmul_bf16_dot": (matmul_bf16, [CpuBackboneTilePass, CpuPackPass], TARGET_DOT),
    "matmul_int8_dot": (matmul_int8, [CpuBackboneTilePass, CpuPackPass], TARGET_DOT),
}


#: environment variables a case compiles with (opt-in GEMM forms)
ENV = {"matmul_shared_pack": {"POLYCOMP_GEMM_SHARED": "1"},
       "matmul_const_per_thread": {"POLYCOMP_GEMM_IN_PLACE": "0"},
       "matmul_few_rows_jk": {"POLYCOMP_GEMM_THREAD_ORDER": "jk"},
       "matmul_shared_pack_dynamic": {"POLYCOMP_GEMM_SHARED": "1", "POLYCOMP_GEMM_DYNAMIC": "1"}}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_tree(case, goldens, monkeypatch):
    kernel, passes, *target = CASES[case]
    for name in ("POLYCOMP_GEMM_SHARED", "POLYCOMP_GEMM_DYNAMIC", "POLYCOMP_GEMM_IN_PLACE",
                 "POLYCOMP_GEMM_THREAD_ORDER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in ENV.get(case, {}).items():
        monkeypatch.setenv(name, value)
    model = kernel.polyhedral_model()
    ctx = CompileState(model, target[0] if target else TARGET, {})
    sched = model.initial_schedule
    for p in passes:
        sched = p().run(sched, ctx)
    again = isl.Schedule.read_from_str(model.ctx, sched.to_str())

    def same(text):
        return again.plain_is_equal(isl.Schedule.read_from_str(model.ctx, text))
    expected = goldens.expected(f"test_cpu_schedule_golden/{case}.isl", sched.to_str(), same)
    assert same(expected), f"{case}:\n{sched.to_str()}"
    assert violated_dependences(sched, model.dependences).is_empty()


def test_dot_tiles_record_their_payloads():
    """The dot-product cases mark their micro-kernels ``cpu_microkernel:<n>`` with the
    tile's payload in typed state, and request grouped (and, for int8, offset and
    compensated) packings."""
    from polycomp.scheduler.common import marks
    from polycomp.scheduler.cpu.state import cpu_microkernels
    for kernel, inputs, acc, group, offset in ((matmul_bf16, "bfloat16", "float32", 2, 0),
                                               (matmul_int8, "int8", "int32", 4, 128)):
        model = kernel.polyhedral_model()
        ctx = CompileState(model, TARGET_DOT, {})
        sched = CpuBackboneTilePass().run(model.initial_schedule, ctx)
        (tile,) = cpu_microkernels(ctx).dots
        assert _mark_names(sched, marks.CPU_MICROKERNEL) == [f"{marks.CPU_MICROKERNEL}:0"]
        assert (tile.inputs, tile.accumulator, tile.group, tile.offset, tile.lanes) == \
            (inputs, acc, group, offset, 16)
        assert (tile.mr, tile.nr, tile.x_array, tile.y_array) == (6, 64, "A", "B")
        y, x = promotion_state(ctx).pack_requests
        assert (y.array.name, y.dim, y.width, y.group_dim, y.group, y.compensate) == \
            ("B", 1, 64, 0, group, offset)
        assert (x.array.name, x.dim, x.width, x.group_dim, x.group, x.offset) == \
            ("A", 0, 6, 1, group, offset)
        assert any("low-precision product" in r for r in ctx.notes["cpu-backbone-tile"])


def _mark_names(sched, kind: str) -> list:
    from polycomp.scheduler.common import marks
    names: list = []

    def visit(node):
        name = marks.name_of(node)
        if marks.is_kind(name, kind):
            names.append(name)
        return node
    sched.get_root().map_descendant_bottom_up(visit)
    return names


def test_dot_products_need_the_unit():
    """Without the unit (cpu-avx512) a bf16 product keeps its program-order subtree."""
    model = matmul_bf16.polyhedral_model()
    ctx = CompileState(model, TARGET, {})
    assert CpuBackboneTilePass().run(model.initial_schedule, ctx).plain_is_equal(
        model.initial_schedule)


def test_fuse_keeps_unfusable_stages_apart():
    """A column reduction feeding a row-wise stage cannot share the outer loop."""
    model = colmax_then_scale.polyhedral_model()
    ctx = CompileState(model, TARGET, {})
    out = CpuFusePass().run(model.initial_schedule, ctx)
    assert out.plain_is_equal(model.initial_schedule)
    assert "cpu-fuse" not in ctx.notes


def test_backbone_register_block_fits_the_register_file():
    from polycomp.scheduler.cpu.backbone_tile import register_block
    for regs in (16, 32):
        mr, ni = register_block(regs)
        assert mr * ni + ni + 1 <= regs
    assert register_block(32) == (6, 4)      # 6 x 64 floats on AVX-512
    assert register_block(16) == (6, 2)      # 6 x 16 floats on AVX2


def test_backbone_needs_vectors():
    """The scalar C target keeps the program-order tree."""
    model = matmul.polyhedral_model()
    ctx = CompileState(model, get_target("c"), {})
    assert CpuBackboneTilePass().run(model.initial_schedule, ctx).plain_is_equal(
        model.initial_schedule)
