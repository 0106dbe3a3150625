"""Golden schedule-tree tests of the CPU schedule passes: a program-order tree in, the
expected tree out (isl text), compared with ``isl.Schedule.plain_is_equal`` after a text
round trip; every output is also checked for legality against the model's dependences.

The target is fixed (cpu-avx512 with 32 KiB L1, 1 MiB L2, 2 threads) so tile sizes do not
depend on the machine running the tests.
"""
import dataclasses

import islpy as isl
import pytest

import polycomp as pc
from polycomp.hw.target import get_target
from polycomp.scheduler.cpu.backbone_tile import CpuBackboneTilePass
from polycomp.scheduler.cpu.fuse import CpuFusePass
from polycomp.scheduler.promotion.cpu_pack import CpuPackPass
from polycomp.scheduler.cpu.parallel import CpuParallelPass
from polycomp.scheduler.cpu.reduce_interchange import CpuReduceInterchangePass
from polycomp.state import CompileState
from polycomp.scheduler.common.tree import violated_dependences

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
    return pc.compute((N, M), lambda i, j: 0.5 * t[i, j] * (1.0 + pc.erf(t[i, j] * 0.7071067811865476)), name="y")

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
def colsum(x: pc.Tensor[(N, M), "float32"]):
    r = pc.reduce_axis(N, "r")
    return pc.compute((M,), lambda j: pc.sum(x[r, j], axis=r), name="cs")


_AVX512 = get_target("cpu-avx512").with_capacities(L1=32 * 1024, L2=1024 * 1024)
TARGET = dataclasses.replace(_AVX512, cpu=dataclasses.replace(_AVX512.cpu, threads=2))

SOFTMAX_FUSE = '{ domain: "[N, M] -> { s_init[i] : N > 0 and M > 0 and 0 <= i < N; mx_update[i, r] : N > 0 and M > 0 and 0 <= i < N and 0 <= r < M; mx_init[i] : N > 0 and M > 0 and 0 <= i < N; e[i, j] : N > 0 and M > 0 and 0 <= i < N and 0 <= j < M; y[i, j] : N > 0 and M > 0 and 0 <= i < N and 0 <= j < M; s_update[i, q] : N > 0 and M > 0 and 0 <= i < N and 0 <= q < M }", child: { schedule: "[N, M] -> [{ mx_update[i, r] -> [(i)]; s_init[i] -> [(i)]; y[i, j] -> [(i)]; e[i, j] -> [(i)]; s_update[i, q] -> [(i)]; mx_init[i] -> [(i)] }]", permutable: 1, coincident: [ 1 ], child: { sequence: [ { filter: "[N, M] -> { mx_init[i] }" }, { filter: "[N, M] -> { mx_update[i, r] }", child: { schedule: "[N, M] -> [{ mx_update[i, r] -> [(r)] }]" } }, { filter: "[N, M] -> { s_init[i] }" }, { filter: "[N, M] -> { e[i, j]; s_update[i, q] }", child: { schedule: "[N, M] -> [{ s_update[i, q] -> [(q)]; e[i, j] -> [(j)] }]", child: { sequence: [ { filter: "[N, M] -> { e[i, j] }" }, { filter: "[N, M] -> { s_update[i, q] }" } ] } } }, { filter: "[N, M] -> { y[i, j] }", child: { schedule: "[N, M] -> [{ y[i, j] -> [(j)] }]", permutable: 1 } } ] } } }'

BIAS_GELU_FUSE = '{ domain: "[N, M] -> { t[i, j] : N > 0 and M > 0 and 0 <= i < N and 0 <= j < M; y[i, j] : N > 0 and M > 0 and 0 <= i < N and 0 <= j < M }", child: { schedule: "[N, M] -> [{ y[i, j] -> [(i)]; t[i, j] -> [(i)] }]", permutable: 1, coincident: [ 1 ], child: { schedule: "[N, M] -> [{ y[i, j] -> [(j)]; t[i, j] -> [(j)] }]", permutable: 1, coincident: [ 1 ], child: { sequence: [ { filter: "[N, M] -> { t[i, j] }" }, { filter: "[N, M] -> { y[i, j] }" } ] } } } }'

COLMAX_FUSE = '{ domain: "[N, M] -> { mx_update[j, r] : N > 0 and M > 0 and 0 <= j < M and 0 <= r < N; mx_init[j] : N > 0 and M > 0 and 0 <= j < M; y[i, j] : N > 0 and M > 0 and 0 <= i < N and 0 <= j < M }", child: { sequence: [ { filter: "[N, M] -> { mx_update[j, r]; mx_init[j] }", child: { schedule: "[N, M] -> [{ mx_update[j, r] -> [(j)]; mx_init[j] -> [(j)] }]", permutable: 1, child: { sequence: [ { filter: "[N, M] -> { mx_init[j] }" }, { filter: "[N, M] -> { mx_update[j, r] }", child: { schedule: "[N, M] -> [{ mx_update[j, r] -> [(r)] }]" } } ] } } }, { filter: "[N, M] -> { y[i, j] }", child: { schedule: "[N, M] -> [{ y[i, j] -> [(i)] }, { y[i, j] -> [(j)] }]", permutable: 1 } } ] } }'

SOFTMAX_PARALLEL = '{ domain: "[N, M] -> { s_init[i] : N > 0 and M > 0 and 0 <= i < N; mx_update[i, r] : N > 0 and M > 0 and 0 <= i < N and 0 <= r < M; mx_init[i] : N > 0 and M > 0 and 0 <= i < N; e[i, j] : N > 0 and M > 0 and 0 <= i < N and 0 <= j < M; y[i, j] : N > 0 and M > 0 and 0 <= i < N and 0 <= j < M; s_update[i, q] : N > 0 and M > 0 and 0 <= i < N and 0 <= q < M }", child: { mark: "cpu_parallel", child: { schedule: "[N, M] -> [{ mx_update[i, r] -> [(i)]; s_init[i] -> [(i)]; y[i, j] -> [(i)]; e[i, j] -> [(i)]; s_update[i, q] -> [(i)]; mx_init[i] -> [(i)] }]", permutable: 1, coincident: [ 1 ], child: { sequence: [ { filter: "[N, M] -> { mx_init[i] }" }, { filter: "[N, M] -> { mx_update[i, r] }", child: { schedule: "[N, M] -> [{ mx_update[i, r] -> [(r)] }]" } }, { filter: "[N, M] -> { s_init[i] }" }, { filter: "[N, M] -> { e[i, j]; s_update[i, q] }", child: { schedule: "[N, M] -> [{ s_update[i, q] -> [(q)]; e[i, j] -> [(j)] }]", child: { sequence: [ { filter: "[N, M] -> { e[i, j] }" }, { filter: "[N, M] -> { s_update[i, q] }" } ] } } }, { filter: "[N, M] -> { y[i, j] }", child: { schedule: "[N, M] -> [{ y[i, j] -> [(j)] }]", permutable: 1 } } ] } } } }'

MATMUL_BACKBONE = '{ domain: "[N, K, M] -> { C_init[i, j] : N > 0 and K > 0 and M > 0 and 0 <= i < N and 0 <= j < M; C_update[i, j, k] : N > 0 and K > 0 and M > 0 and 0 <= i < N and 0 <= j < M and 0 <= k < K }", child: { mark: "cpu_parallel", child: { schedule: "[N, K, M] -> [{ C_init[i, j] -> [(floor((i)/192))]; C_update[i, j, k] -> [(floor((i)/192))] }]", permutable: 1, coincident: [ 1 ], child: { schedule: "[N, K, M] -> [{ C_init[i, j] -> [(floor((j)/512))]; C_update[i, j, k] -> [(floor((j)/512))] }, { C_init[i, j] -> [(0)]; C_update[i, j, k] -> [(floor((k)/256))] }]", permutable: 1, coincident: [ 1, 0 ], child: { mark: "cpu_pack_request:0", child: { mark: "cpu_pack_request:1", child: { schedule: "[N, K, M] -> [{ C_init[i, j] -> [(floor((i)/6) - 32*floor((i)/192))]; C_update[i, j, k] -> [(floor((i)/6) - 32*floor((i)/192))] }, { C_init[i, j] -> [(floor((j)/64) - 8*floor((j)/512))]; C_update[i, j, k] -> [(floor((j)/64) - 8*floor((j)/512))] }]", permutable: 1, coincident: [ 1, 1 ], options: "[N, K, M] -> { isolate[[i0, i1, i2] -> [i3, i4]] : i0 >= 0 and i1 >= 0 and i2 >= 0 and 256i2 < K and 0 <= i3 <= 31 and 6i3 <= -6 + N - 192i0 and 0 <= i4 <= 7 and 64i4 <= -64 + M - 512i1 }", child: { sequence: [ { filter: "[N, K, M] -> { C_init[i, j] }", child: { schedule: "[N, K, M] -> [{ C_init[i, j] -> [((i) mod 6)] }, { C_init[i, j] -> [((j) mod 64)] }]", permutable: 1, coincident: [ 1, 1 ] } }, { filter: "[N, K, M] -> { C_update[i, j, k] }", child: { mark: "cpu_microkernel", child: { schedule: "[N, K, M] -> [{ C_update[i, j, k] -> [((k) mod 256)] }]", permutable: 1, child: { schedule: "[N, K, M] -> [{ C_update[i, j, k] -> [((i) mod 6)] }, { C_update[i, j, k] -> [((j) mod 64)] }]", permutable: 1, coincident: [ 1, 1 ] } } } } ] } } } } } } } }'

MATMUL_PACK = '{ domain: "[N, K, M] -> { C_init[i, j] : N > 0 and K > 0 and M > 0 and 0 <= i < N and 0 <= j < M; C_update[i, j, k] : N > 0 and K > 0 and M > 0 and 0 <= i < N and 0 <= j < M and 0 <= k < K }", child: { mark: "cpu_parallel", child: { schedule: "[N, K, M] -> [{ C_init[i, j] -> [(floor((i)/192))]; C_update[i, j, k] -> [(floor((i)/192))] }]", permutable: 1, coincident: [ 1 ], child: { schedule: "[N, K, M] -> [{ C_init[i, j] -> [(floor((j)/512))]; C_update[i, j, k] -> [(floor((j)/512))] }, { C_init[i, j] -> [(0)]; C_update[i, j, k] -> [(floor((k)/256))] }]", permutable: 1, coincident: [ 1, 0 ], child: { mark: "cpu_pack:0", child: { mark: "cpu_pack:1", child: { schedule: "[N, K, M] -> [{ C_init[i, j] -> [(floor((i)/6) - 32*floor((i)/192))]; C_update[i, j, k] -> [(floor((i)/6) - 32*floor((i)/192))] }, { C_init[i, j] -> [(floor((j)/64) - 8*floor((j)/512))]; C_update[i, j, k] -> [(floor((j)/64) - 8*floor((j)/512))] }]", permutable: 1, coincident: [ 1, 1 ], options: "[N, K, M] -> { isolate[[i0, i1, i2] -> [i3, i4]] : i0 >= 0 and i1 >= 0 and i2 >= 0 and 256i2 < K and 0 <= i3 <= 31 and 6i3 <= -6 + N - 192i0 and 0 <= i4 <= 7 and 64i4 <= -64 + M - 512i1 }", child: { sequence: [ { filter: "[N, K, M] -> { C_init[i, j] }", child: { schedule: "[N, K, M] -> [{ C_init[i, j] -> [((i) mod 6)] }, { C_init[i, j] -> [((j) mod 64)] }]", permutable: 1, coincident: [ 1, 1 ] } }, { filter: "[N, K, M] -> { C_update[i, j, k] }", child: { mark: "cpu_microkernel", child: { schedule: "[N, K, M] -> [{ C_update[i, j, k] -> [((k) mod 256)] }]", permutable: 1, child: { schedule: "[N, K, M] -> [{ C_update[i, j, k] -> [((i) mod 6)] }, { C_update[i, j, k] -> [((j) mod 64)] }]", permutable: 1, coincident: [ 1, 1 ] } } } } ] } } } } } } } }'

MATMUL_EPILOGUE = '{ domain: "[N, K, M] -> { C_init[i, j] : K > 0 and 0 <= i < N and 0 <= j < M; D[i, j] : N > 0 and K > 0 and M > 0 and 0 <= i < N and 0 <= j < M; C_update[i, j, k] : N > 0 and K > 0 and M > 0 and 0 <= i < N and 0 <= j < M and 0 <= k < K }", child: { sequence: [ { filter: "[N, K, M] -> { C_init[i, j]; D[i, j]; C_update[i, j, k] }", child: { mark: "cpu_parallel", child: { schedule: "[N, K, M] -> [{ C_init[i, j] -> [(floor((i)/192))]; D[i, j] -> [(floor((i)/192))]; C_update[i, j, k] -> [(floor((i)/192))] }]", permutable: 1, coincident: [ 1 ], child: { schedule: "[N, K, M] -> [{ C_init[i, j] -> [(floor((j)/512))]; D[i, j] -> [(floor((j)/512))]; C_update[i, j, k] -> [(floor((j)/512))] }, { C_init[i, j] -> [(0)]; D[i, j] -> [(floor((-1 + K)/256))] : N > 0 and K > 0 and M > 0; C_update[i, j, k] -> [(floor((k)/256))] }]", permutable: 1, coincident: [ 1, 0 ], child: { mark: "cpu_pack_request:0", child: { mark: "cpu_pack_request:1", child: { schedule: "[N, K, M] -> [{ C_init[i, j] -> [(floor((i)/6) - 32*floor((i)/192))]; D[i, j] -> [(floor((i)/6) - 32*floor((i)/192))]; C_update[i, j, k] -> [(floor((i)/6) - 32*floor((i)/192))] }, { C_init[i, j] -> [(floor((j)/64) - 8*floor((j)/512))]; D[i, j] -> [(floor((j)/64) - 8*floor((j)/512))]; C_update[i, j, k] -> [(floor((j)/64) - 8*floor((j)/512))] }]", permutable: 1, coincident: [ 1, 1 ], options: "[N, K, M] -> { isolate[[i0, i1, i2] -> [i3, i4]] : i0 >= 0 and i1 >= 0 and i2 >= 0 and 256i2 < K and 0 <= i3 <= 31 and 6i3 <= -6 + N - 192i0 and 0 <= i4 <= 7 and 64i4 <= -64 + M - 512i1 }", child: { sequence: [ { filter: "[N, K, M] -> { C_init[i, j] }", child: { schedule: "[N, K, M] -> [{ C_init[i, j] -> [((i) mod 6)] }, { C_init[i, j] -> [((j) mod 64)] }]", permutable: 1, coincident: [ 1, 1 ] } }, { filter: "[N, K, M] -> { C_update[i, j, k] }", child: { mark: "cpu_microkernel", child: { schedule: "[N, K, M] -> [{ C_update[i, j, k] -> [((k) mod 256)] }]", permutable: 1, child: { schedule: "[N, K, M] -> [{ C_update[i, j, k] -> [((i) mod 6)] }, { C_update[i, j, k] -> [((j) mod 64)] }]", permutable: 1, coincident: [ 1, 1 ] } } } }, { filter: "[N, K, M] -> { D[i, j] }", child: { schedule: "[N, K, M] -> [{ D[i, j] -> [((i) mod 6)] }, { D[i, j] -> [((j) mod 64)] }]", permutable: 1, coincident: [ 1, 1 ] } } ] } } } } } } } } ] } }'

COLSUM_INTERCHANGE = '{ domain: "[N, M] -> { cs_init[j] : N > 0 and M > 0 and 0 <= j < M; cs_update[j, r] : N > 0 and M > 0 and 0 <= j < M and 0 <= r < N }", child: { sequence: [ { filter: "[N, M] -> { cs_init[j] }", child: { mark: "cpu_parallel", child: { schedule: "[N, M] -> [{ cs_init[j] -> [(j)] }]", permutable: 1, coincident: [ 1 ] } } }, { filter: "[N, M] -> { cs_update[j, r] }", child: { mark: "cpu_parallel", child: { schedule: "[N, M] -> [{ cs_update[j, r] -> [(floor((j)/256))] }]", permutable: 1, coincident: [ 1 ], child: { schedule: "[N, M] -> [{ cs_update[j, r] -> [(r)] }]", permutable: 1, child: { schedule: "[N, M] -> [{ cs_update[j, r] -> [((j) mod 256)] }]", permutable: 1, coincident: [ 1 ] } } } } } ] } }'

CASES = {
    "softmax_fuse": (softmax, [CpuFusePass], SOFTMAX_FUSE),
    "bias_gelu_fuse": (bias_gelu, [CpuFusePass], BIAS_GELU_FUSE),
    "colmax_fuse": (colmax_then_scale, [CpuFusePass], COLMAX_FUSE),
    "softmax_parallel": (softmax, [CpuFusePass, CpuParallelPass], SOFTMAX_PARALLEL),
    "colsum_interchange": (colsum, [CpuReduceInterchangePass, CpuParallelPass],
                           COLSUM_INTERCHANGE),
    "matmul_backbone": (matmul, [CpuBackboneTilePass], MATMUL_BACKBONE),
    "matmul_pack": (matmul, [CpuBackboneTilePass, CpuPackPass], MATMUL_PACK),
    "matmul_epilogue": (matmul_bias_relu, [CpuBackboneTilePass], MATMUL_EPILOGUE),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_tree(case):
    kernel, passes, expected = CASES[case]
    model = kernel.polyhedral_model()
    ctx = CompileState(model, TARGET, {})
    sched = model.initial_schedule
    for p in passes:
        sched = p().run(sched, ctx)
    again = isl.Schedule.read_from_str(model.ctx, sched.to_str())
    want = isl.Schedule.read_from_str(model.ctx, expected)
    assert again.plain_is_equal(want), f"{case}:\n{sched.to_str()}"
    assert violated_dependences(sched, model.dependences).is_empty()


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
