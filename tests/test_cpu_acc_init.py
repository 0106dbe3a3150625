"""Accumulators started from the init in registers (``hw/cpu/microkernel.py`` *fused
init*, ``scheduler/cpu/backbone_tile.py`` ``accumulators_from_init``): a channel-form
convolution runs its init on each register tile right before the micro-kernel (in the
first input-channel tile only), and the micro-kernel pass turns the init nest and the
tile into one tile whose accumulators start at the init's value -- no zeroing pass over
the output, no strided load of the accumulators in the first channel tile; a GEMM's
zeroing at ``k`` tile 0 likewise.  The IR pass golden (in, out), and the outputs
against ``POLYCOMP_ACC_INIT=0`` (bit for bit: the same sums in the same order) and
numpy on prime channel counts, a one-pixel image, two channel tiles and NaN inputs."""
import dataclasses

import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import compile_kernel
from polycomp.frontend import ops
from polycomp.frontend.dsl import Kernel
from polycomp.frontend.ops import _ref_conv2d
from polycomp.hw.cpu.build import CFunction, build_shared
from polycomp.hw.cpu.target import cpu_flags
from polycomp.hw.target import get_target
from polycomp.scheduler.cpu.state import cpu_microkernels

HAS_AVX2 = {"avx2", "fma"} <= cpu_flags()
# small caches: 120 input channels of a 3x3 (8-channel panels) make two channel tiles
_AVX2 = get_target("cpu-avx2").with_capacities(L1=32 * 1024, L2=64 * 1024)
TARGET = dataclasses.replace(_AVX2, cpu=dataclasses.replace(_AVX2.cpu, threads=1))


def _conv(xs, f, k, stride, pad, name):
    def conv(x, w):
        return ops.conv2d_nchw(x, w, (stride, stride), (pad, pad), w_layout="chwf")
    return Kernel(conv, name=name, inputs={"x": pc.Tensor[xs, "float32"],
                                           "w": pc.Tensor[(xs[1], k, k, f), "float32"]})


def _records(ck, name: str, stage: str) -> tuple[str, str]:
    recs = ck.records
    q = next(i for i, r in enumerate(recs) if r.name == name and r.stage == stage)
    return recs[q - 1].tree, recs[q].tree


def test_fused_init_ir_golden(goldens, monkeypatch):
    """The micro-kernel pass on a convolution with two input-channel tiles (120
    channels, 3x3, 11 output channels: a full 8-channel panel and a masked one): in, the
    init nest ``if (c_tile == 0) C[..] = 0`` right before each tile's mark; out, one
    tile whose accumulators are ``0`` in the first channel tile and loaded from ``C``
    in the other, and no init nest left."""
    monkeypatch.setenv("POLYCOMP_ACC_INIT", "1")
    ck = compile_kernel(_conv((1, 120, 3, 4), 11, 3, 1, 1, "accinit"), TARGET, dump=True)
    assert "input channels in tiles of 64" in " ".join(ck.notes["cpu-backbone-tile"])
    before, after = _records(ck, "microkernels", "codegen")
    for part, text in (("in", before), ("out", after)):
        expected = goldens.expected(f"test_cpu_acc_init/conv.microkernels.{part}.ir", text)
        assert expected == text.strip(), f"{part}:\n{text}"
    assert ck.final_ir.counts.microkernels == 2
    assert "conv2d[" in before and "= 0.0f" in before


def _run(kern, target, x, w):
    ck = compile_kernel(kern, target)
    return ck, CFunction(ck.final_ir, build_shared(ck.source))(x, w)


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
@pytest.mark.parametrize("xs,f,k,stride,pad,nan", [
    ((1, 120, 3, 4), 11, 3, 1, 1, True),    # two channel tiles, NaN input
    pytest.param((2, 13, 5, 6), 17, 3, 1, 1, False,     # primes, batch 2, a masked panel
                 marks=pytest.mark.slow),
    pytest.param((1, 7, 1, 1), 8, 3, 2, 1, True,        # a one-pixel image, stride 2
                 marks=pytest.mark.slow),
])
def test_conv_fused_init_matches_numpy(xs, f, k, stride, pad, nan, request, monkeypatch):
    """Against numpy (NaN where the input's NaN reaches); in the slow lane also
    against ``POLYCOMP_ACC_INIT=0`` bit for bit (the same sums in the same order)."""
    rng = np.random.default_rng(sum(xs) + f)
    x = rng.standard_normal(xs).astype(np.float32)
    if nan:
        x[0, xs[1] // 2, xs[2] // 2, 0] = np.nan
    w = rng.standard_normal((xs[1], k, k, f)).astype(np.float32)
    outs = []
    both = xs[1] != 120
    for v in ("0", "1") if both else ("1",):
        monkeypatch.setenv("POLYCOMP_ACC_INIT", v)
        ck, got = _run(_conv(xs, f, k, stride, pad, f"ai{v}_{xs[1]}_{f}_{xs[2]}"), TARGET,
                       x, w)
        assert "channel form" in " ".join(ck.notes["cpu-backbone-tile"])
        outs.append(got)
    if both:
        np.testing.assert_array_equal(outs[1], outs[0])
    ref = _ref_conv2d((stride, stride), (pad, pad), (1, 1))(
        x, np.ascontiguousarray(w.transpose(3, 0, 1, 2)))
    assert np.array_equal(np.isnan(outs[-1]), np.isnan(ref)) and (np.isnan(ref).any() == nan)
    np.testing.assert_allclose(outs[-1], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
def test_gemm_fused_init_at_k_tile_0(monkeypatch):
    """A GEMM whose ``k`` runs in three tiles (KC = 64 on this target): the zeroing at
    ``k`` tile 0 becomes the accumulators' start (``if (k tile == 0)``: no store of
    zeros, no ``C +`` at the store), later tiles add ``C``; against numpy (NaN
    propagated along its row)."""
    M, N, K = 13, 19, 150
    rng = np.random.default_rng(5)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    a[3, 7] = np.nan
    outs = []
    for v in ("1",):
        monkeypatch.setenv("POLYCOMP_ACC_INIT", v)
        kern = Kernel(lambda A, B: ops.matmul(A, B), name=f"mmai{v}",
                      inputs={"A": pc.Tensor[(M, K), "float32"],
                              "B": pc.Tensor[(K, N), "float32"]})
        ck = compile_kernel(kern, TARGET, options={"gemm_tiles": (16, 16, 64)}, dump=True)
        assert ck.final_ir.counts.microkernels >= 1
        before, after = _records(ck, "microkernels", "codegen")
        assert "= 0.0f" in before and "= 0.0f" not in after.split("microkernel")[0]
        outs.append(CFunction(ck.final_ir, build_shared(ck.source))(a, b))
    ref = a.astype(np.float64) @ b
    assert np.array_equal(np.isnan(outs[-1]), np.isnan(ref))
    np.testing.assert_allclose(outs[-1], ref, rtol=1e-4, atol=1e-4)


def _chain_kernel(m, k, n, seed):
    """``gelu(x @ w + b) + r`` lowered as one stage per operator (the epilogue chain
    of ``tests/test_cpu_epilogue_chain.py``), its group kernel and arrays."""
    from polycomp.graph import GraphBuilder
    from polycomp.graph.lower import group_kernel
    from polycomp.graph.partition import partition
    rng = np.random.default_rng(seed)
    w, b = rng.standard_normal((k, n)).astype(np.float32), \
        rng.standard_normal(n).astype(np.float32)
    g = GraphBuilder(f"ch{m}_{k}_{n}")
    y = g.add(g.gelu(g.add(g.matmul(g.input("x", (m, k)), g.constant("w", w)),
                           g.constant("b", b))), g.input("r", (m, n)))
    part = partition(g.build(y))
    (grp,) = [p for p in part.groups if p.kind != "view"]
    return group_kernel(part, grp), w, b


def test_fused_epilogue_ir_golden(goldens, monkeypatch):
    """The micro-kernel pass on ``gelu(x @ w + b) + r`` (8 x 24 x 16, a 2 x 8 register
    block on AVX2, k in one tile): in, the three epilogue nests in one ``if`` after the
    mark; out, per accumulator vector ``let c = acc; let e0 = c + b; let e1 =
    gelu(e0); let e2 = e1 + r`` and one store of ``e2``: the chain temporaries
    ``s_add``, ``s_gelu`` are read by nobody else, so their stores are dropped
    (``gemm_dead_chain``; ``POLYCOMP_GEMM_DEAD_CHAIN=0`` keeps them); no epilogue loop
    left."""
    monkeypatch.setenv("POLYCOMP_ACC_EPILOGUE", "1")
    monkeypatch.setenv("POLYCOMP_GEMM_IN_PLACE", "0")   # x, w packed, as the golden has them
    monkeypatch.setenv("POLYCOMP_GEMM_FILL", "0")       # ... by copies (not the fill)
    gk, _, _ = _chain_kernel(8, 24, 16, 0)
    ck = compile_kernel(gk.kernel, TARGET, options={"gemm_register": (2, 1)}, dump=True)
    assert "epilogue s_add, s_gelu, s_add_1" in ck.notes["cpu-backbone-tile"][0]
    before, after = _records(ck, "microkernels", "codegen")
    for part, text in (("in", before), ("out", after)):
        expected = goldens.expected(f"test_cpu_acc_init/chain.microkernels.{part}.ir", text)
        assert expected == text.strip(), f"{part}:\n{text}"
    assert "let ep_c0_0 = acc" in after and "erf(ep0_0_0" in after
    assert "erf(s_add[" not in after        # no epilogue loop of the full tiles left
    assert "s_gelu[ramp" not in after and "s_add[ramp" not in after   # dead stores dropped
    monkeypatch.setenv("POLYCOMP_GEMM_DEAD_CHAIN", "0")
    ck = compile_kernel(gk.kernel, TARGET, options={"gemm_register": (2, 1)}, dump=True)
    kept = _records(ck, "microkernels", "codegen")[1]
    assert "s_gelu[ramp" in kept and "s_add[ramp" in kept


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
@pytest.mark.parametrize("m,k,n", [(13, 150, 19), pytest.param(1, 7, 8, marks=pytest.mark.slow)])
def test_fused_epilogue_matches_numpy(m, k, n, monkeypatch):
    """The chain on the accumulators against numpy: prime sizes with three ``k`` tiles
    (the chain at the last only; edge tiles keep the loops), NaN in ``x`` and ``r``
    propagated; one row (slow lane: the epilogue reads the product at row 0 of a
    one-row output, its own point since the head-split branch, so it joins the register
    tile there too)."""
    import math
    monkeypatch.setenv("POLYCOMP_ACC_EPILOGUE", "1")
    gk, w, b = _chain_kernel(m, k, n, 1)
    ck = compile_kernel(gk.kernel, TARGET, options={"gemm_tiles": (16, 16, 64)}, dump=True)
    _, after = _records(ck, "microkernels", "codegen")
    assert "let ep_c0_0 = acc" in after
    rng = np.random.default_rng(2)
    x = rng.standard_normal((m, k)).astype(np.float32)
    r = rng.standard_normal((m, n)).astype(np.float32)
    x[0, k // 2] = np.nan
    r[m - 1, n - 1] = np.nan
    got = CFunction(ck.final_ir, build_shared(ck.source))(x, w, b, r)
    z = x.astype(np.float64) @ w + b
    want = 0.5 * z * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0))) + r
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _conv_chain(xs, f, k, pad, residual, seed, chwf=False):
    """``relu(conv(x, w) + b) [+ r]`` through the graph layer (a channel-form
    convolution with its bias / ReLU / residual chain), its group kernel and arrays."""
    from polycomp.graph import GraphBuilder
    from polycomp.graph.lower import group_kernel
    from polycomp.graph.partition import partition
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((f, xs[1], k, k)).astype(np.float32)
    b = rng.standard_normal(f).astype(np.float32)
    g = GraphBuilder(f"cc{xs[1]}_{f}_{xs[2]}_{int(residual)}")
    y = g.relu(g.conv2d(g.input("x", xs), g.constant("w", w), g.constant("b", b),
                        padding=pad))
    if residual:
        y = g.add(y, g.input("r", (xs[0], f, xs[2], xs[3])))
    part = partition(g.build(y))
    (grp,) = [p for p in part.groups if p.kind != "view"]
    return group_kernel(part, grp, conv_layout=chwf), w, b


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
@pytest.mark.parametrize("xs,f,residual", [
    ((2, 120, 3, 4), 11, True),     # two channel tiles: the chain at the last one
    pytest.param((2, 13, 5, 6), 17, False, marks=pytest.mark.slow),
])
def test_conv_chain_on_the_accumulators_matches_numpy(xs, f, residual, monkeypatch):
    """A convolution's bias / ReLU (/ residual) chain on its register tiles
    (``conv_epilogue``; ``match_epilogue`` accepts the channel form): the chain fused
    on the accumulators, the temporaries it reads (the convolution's output, the
    biased sum) not stored in the full tiles; against numpy with a NaN input and a NaN
    residual (ReLU keeps NaN)."""
    monkeypatch.setenv("POLYCOMP_ACC_INIT", "1")
    monkeypatch.setenv("POLYCOMP_CONV_EPILOGUE", "1")
    gk, w, b = _conv_chain(xs, f, 3, 1, residual, 3, chwf=True)
    ck = compile_kernel(gk.kernel, TARGET, dump=True)
    assert ("input channels in tiles of" in ck.notes["cpu-backbone-tile"][0]) == \
        (xs[1] == 120)
    note = ck.notes["cpu-backbone-tile"][0]
    assert "channel form" in note and "epilogue" in note, note
    _, after = _records(ck, "microkernels", "codegen")
    assert "let ep_c0_0 = acc" in after
    mk = cpu_microkernels(ck.state)
    (conv_out, chain), = mk.chains.items()
    assert len(chain) == 2 + residual and conv_out in mk.chain_temporaries
    rng = np.random.default_rng(4)
    x = rng.standard_normal(xs).astype(np.float32)
    x[0, 1, xs[2] // 2, 1] = np.nan
    args = [x, *gk.arg_arrays.values(), b] if gk.arg_arrays else [x, w, b]
    want = np.maximum(_ref_conv2d((1, 1), (1, 1), (1, 1))(x, w) + b[None, :, None, None], 0.0)
    if residual:
        r = rng.standard_normal((xs[0], f, xs[2], xs[3])).astype(np.float32)
        r[0, f - 1, 0, 0] = np.nan
        args.append(r)
        want = want + r
    got = CFunction(ck.final_ir, build_shared(ck.source))(*args)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(want).any()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_conv_chain_tree_golden(goldens, monkeypatch):
    """``cpu-backbone-tile`` on ``relu(conv + b) + r`` (weights read as ``(F, C, KH,
    KW)``: packed per panel, no channel tiles): the init and the three chain
    statements join every band with the output point's functions, in the
    sequence ``[init, micro-kernel, chain..]`` under the register tile band.  Legal
    up to the reassociated sum (the only violated dependences are between updates of
    one output element)."""
    import islpy as isl

    from polycomp.scheduler.common.tree import violated_dependences
    from polycomp.scheduler.cpu.backbone_tile import CpuBackboneTilePass
    from polycomp.state import CompileState
    monkeypatch.setenv("POLYCOMP_ACC_INIT", "1")
    monkeypatch.setenv("POLYCOMP_CONV_EPILOGUE", "1")
    gk, _, _ = _conv_chain((2, 120, 3, 4), 11, 3, 1, True, 3)
    model = gk.kernel.polyhedral_model()
    ctx = CompileState(model, TARGET, {})
    sched = CpuBackboneTilePass().run(model.initial_schedule, ctx)
    again = isl.Schedule.read_from_str(model.ctx, sched.to_str())

    def same(text):
        return again.plain_is_equal(isl.Schedule.read_from_str(model.ctx, text))
    expected = goldens.expected("test_cpu_acc_init/conv_chain.isl", sched.to_str(), same)
    assert same(expected), sched.to_str()
    assert "epilogue" in ctx.notes["cpu-backbone-tile"][0]
    bad = violated_dependences(sched, model.dependences)
    same_point = isl.UnionMap.read_from_str(
        model.ctx, "{ s_conv2d_conv_update[n, f, y, z, rc, rh, rw] -> "
        "s_conv2d_conv_update[n, f, y, z, rc2, rh2, rw2] }")
    assert not bad.is_empty() and bad.is_subset(same_point)


MM_SPLIT = """
void mm_split(int ni, int nj, int nk, double E[ni][nj], double A[ni][nk], double B[nk][nj]) {
  int i, j, k;
#pragma scop
  for (i = 0; i < ni; i++)
    for (j = 0; j < nj; j++) {
      E[i][j] = 0.0;
      for (k = 0; k < nk; ++k)
        E[i][j] += A[i][k] * B[k][j];
    }
#pragma endscop
}
"""


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
def test_split_init_of_a_symbolic_fp64_product(monkeypatch):
    """*Split init* (AVX2, float64, symbolic sizes: 3mm's products): the zeroing nest
    at ``k`` tile 0 before an unisolated register tile starts the full variant's
    accumulators (no vector store of zeros there; the partial variant keeps the nest),
    and the outputs equal ``POLYCOMP_ACC_INIT_SPLIT=0``'s bit for bit (0 + s is s) and
    numpy's, at sizes with partial tiles in both directions and two ``k`` tiles; the
    ``cpu-avx512`` C keeps its zeroing nest (the split is an AVX2 choice)."""
    from polycomp.frontend.c_reader import read_c_kernel
    target = dataclasses.replace(_AVX2, cpu=dataclasses.replace(_AVX2.cpu, threads=2))
    zero_store = "_mm256_storeu_pd((E + "
    built = {}
    for v in ("1", "0"):
        monkeypatch.setenv("POLYCOMP_ACC_INIT_SPLIT", v)
        k = read_c_kernel(MM_SPLIT, "mm_split")
        ck = compile_kernel(k, target)
        built[v] = (k, ck)
    k512 = compile_kernel(read_c_kernel(MM_SPLIT, "mm_split"), "cpu-avx512").source
    assert k512.index("if ((c0 == 0))") < k512.index("acc1_v0;"), "AVX-512: no split"
    on, off = built["1"][1].source, built["0"][1].source
    # the zeroing's full-vector stores: before every tile without the split, only in the
    # partial tiles' branch with it
    zeros = "_mm256_set1_pd(0.0));"
    assert sum(zero_store in ln and zeros in ln for ln in off.splitlines()) == 1
    assert sum(zero_store in ln and zeros in ln for ln in on.splitlines()) == 1
    assert on.index("if ((c0 == 0))") > on.index("acc1_v0;"), "init inside the full tile"
    assert off.index("if ((c0 == 0))") < off.index("acc1_v0;")
    rng = np.random.default_rng(3)
    for ni, nj, nk in ((1, 1, 1), (13, 19, 170), (61, 37, 333)):
        A, B = rng.uniform(-1, 1, (ni, nk)), rng.uniform(-1, 1, (nk, nj))
        outs = []
        for v in ("1", "0"):
            k, ck = built[v]
            f = ck.backend.load(ck)
            arrays = dict(A=A, B=B, E=np.full((ni, nj), np.nan))
            out = f(*[arrays[n] for n in list(k.inputs) + list(k.outputs)],
                    ni=ni, nj=nj, nk=nk)
            outs.append(out[0] if isinstance(out, tuple) else out)
        assert np.array_equal(outs[0], outs[1]), (ni, nj, nk)
        np.testing.assert_allclose(outs[0], A @ B, rtol=1e-12, atol=1e-13)


GEMM_BETA = """
void gemm_beta(int ni, int nj, int nk, double alpha, double beta, double C[ni][nj],
               double A[ni][nk], double B[nk][nj]) {
  int i, j, k;
#pragma scop
  for (i = 0; i < ni; i++)
    for (j = 0; j < nj; j++) {
      C[i][j] *= beta;
      for (k = 0; k < nk; ++k)
        C[i][j] += alpha * A[i][k] * B[k][j];
    }
#pragma endscop
}
"""


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
def test_split_init_reading_c_at_its_own_point(monkeypatch):
    """*Split init* of gemm's ``C *= beta`` (an init reading ``C`` at its own point): the
    full tile's accumulators start at zero and its stores at ``k`` tile 0 write
    ``beta * C + acc`` (one FMA) instead of a scaling pass before the tile; against
    numpy and ``POLYCOMP_ACC_INIT_SPLIT=0`` (1e-13: the contraction), partial tiles
    in both directions and two ``k`` tiles."""
    from polycomp.frontend.c_reader import read_c_kernel
    target = dataclasses.replace(_AVX2, cpu=dataclasses.replace(_AVX2.cpu, threads=2))
    built = {}
    for v in ("1", "0"):
        monkeypatch.setenv("POLYCOMP_ACC_INIT_SPLIT", v)
        k = read_c_kernel(GEMM_BETA, "gemm_beta")
        built[v] = (k, compile_kernel(k, target))
    on, off = built["1"][1].source, built["0"][1].source
    assert on.index("if ((c0 == 0))") > on.index("acc1_v0;"), "init inside the full tile"
    assert off.index("if ((c0 == 0))") < off.index("acc1_v0;")
    rng = np.random.default_rng(7)
    for ni, nj, nk in ((1, 1, 1), (13, 19, 170), (61, 37, 333)):
        A, B = rng.uniform(-1, 1, (ni, nk)), rng.uniform(-1, 1, (nk, nj))
        C = rng.uniform(-1, 1, (ni, nj))
        outs = []
        for v in ("1", "0"):
            k, ck = built[v]
            f = ck.backend.load(ck)
            arrays = dict(alpha=np.array(1.5), beta=np.array(1.2), A=A, B=B, C=C.copy())
            out = f(*[arrays[n] for n in list(k.inputs) + list(k.outputs)],
                    ni=ni, nj=nj, nk=nk)
            outs.append(out[0] if isinstance(out, tuple) else out)
        np.testing.assert_allclose(outs[0], outs[1], rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(outs[0], 1.5 * (A @ B) + 1.2 * C, rtol=1e-12, atol=1e-13)
