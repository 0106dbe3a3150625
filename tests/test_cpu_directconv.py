"""Direct convolutions on the CPU backend, channel form (scheduler/cpu/backbone_tile.py):
the schedule tree (golden) and its legality up to the reassociated sum, and constant-shape
convolutions against numpy (AVX2 natively, AVX-512 through SIMDe)."""
import dataclasses

import islpy as isl
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polycomp as pc
from polycomp.driver import compile_kernel
from polycomp.frontend import ops
from polycomp.frontend.dsl import Kernel
from polycomp.frontend.ops import _ref_conv2d
from polycomp.hw.cpu.build import CFunction, build_shared
from polycomp.hw.cpu.simd_build import build_simde
from polycomp.hw.cpu.target import cpu_flags
from polycomp.hw.target import get_target
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.scheduler.cpu.backbone_tile import CpuBackboneTilePass
from polycomp.scheduler.cpu.reduce_interchange import CpuReduceInterchangePass
from polycomp.scheduler.promotion.cpu_pack import CpuPackPass
from polycomp.state import CompileState

HAS_AVX2 = {"avx2", "fma"} <= cpu_flags()


def _conv(xs, ws, stride, pad, name="dconv"):
    def conv(x, w):
        return ops.conv2d_nchw(x, w, (stride, stride), (pad, pad))
    return Kernel(conv, name=name, inputs={"x": pc.Tensor[xs, "float32"],
                                           "w": pc.Tensor[ws, "float32"]})


def _conv_chwf(xs, ws, stride, pad, dil=1, name="dconvt"):
    """The convolution with its weights laid out (C, KH, KW, F) (``w_layout="chwf"``, as
    the graph layer hands constant weights to the CPU backend)."""
    def conv(x, w):
        return ops.conv2d_nchw(x, w, (stride, stride), (pad, pad), (dil, dil),
                               w_layout="chwf")
    return Kernel(conv, name=name, inputs={"x": pc.Tensor[xs, "float32"],
                                           "w": pc.Tensor[ws, "float32"]})


_AVX512 = get_target("cpu-avx512").with_capacities(L1=32 * 1024, L2=1024 * 1024)
TARGET = dataclasses.replace(_AVX512, cpu=dataclasses.replace(_AVX512.cpu, threads=2))


@pytest.mark.parametrize("acc_init", ["1", "0"])
def test_channel_form_golden(goldens, acc_init, monkeypatch):
    """A 3x3/2 padded convolution (16 -> 64 channels, 7x7 output): parallel over panels of
    32 output channels (AVX-512: 2 vectors; one 7 x 32 register tile per output row,
    ``row_register_block``), the weights packed per panel, window reduce loops outside
    the channel loop, full tiles isolated; the init on each register tile right before
    its micro-kernel (``accumulators_from_init``; ``POLYCOMP_ACC_INIT=0``: a separate
    init pass first)."""
    monkeypatch.setenv("POLYCOMP_ACC_INIT", acc_init)
    model = _conv((1, 16, 13, 13), (32 * 2, 16, 3, 3), 2, 1).polyhedral_model()
    ctx = CompileState(model, TARGET, {})
    sched = model.initial_schedule
    for p in (CpuBackboneTilePass, CpuPackPass):
        sched = p().run(sched, ctx)
    again = isl.Schedule.read_from_str(model.ctx, sched.to_str())

    def same(text):
        return again.plain_is_equal(isl.Schedule.read_from_str(model.ctx, text))
    name = "conv_channel.isl" if acc_init == "0" else "conv_channel_acc_init.isl"
    expected = goldens.expected(f"test_cpu_directconv/{name}", sched.to_str(), same)
    assert same(expected), sched.to_str()
    # legal but for the reassociated sum: the window loops run outside the channel loop,
    # so the only dependences whose order changes are between updates of one output
    # element (the accumulation), never the init's or another output's
    bad = violated_dependences(sched, model.dependences)
    same_point = isl.UnionMap.read_from_str(
        model.ctx, "{ conv2d_update[n, f, y, z, rc, rh, rw] -> "
        "conv2d_update[n, f, y, z, rc2, rh2, rw2] }")
    assert not bad.is_empty() and bad.is_subset(same_point)
    assert "channel form" in " ".join(ctx.notes["cpu-backbone-tile"])


_CONV = st.tuples(st.integers(1, 5), st.sampled_from([8, 9, 16, 17, 33]),
                  st.integers(1, 9), st.sampled_from([(1, 1, 0), (3, 1, 1), (3, 2, 1),
                                                       (1, 2, 0), (7, 2, 3)]))


def _check_conv(path, shape, seed):
    c, f, hw, (k, stride, pad) = shape
    hw = max(hw, k - 2 * pad)
    xs, ws = (1, c, hw, hw + 1), (f, c, k, k)
    kern = _conv(xs, ws, stride, pad, f"dconv_{c}_{f}_{hw}_{k}_{stride}_{pad}")
    ck = compile_kernel(kern, "cpu-avx2" if path == "avx2" else "cpu-avx512")
    notes = " ".join(ck.notes.get("cpu-backbone-tile", []))
    lanes = 8 if path == "avx2" else 16
    pointwise = k == 1 and stride == 1  # 1x1 stride 1: the width form (pointwise_unit_stride)
    assert ("channel form" in notes) == (f >= lanes and not pointwise and c > 4), notes
    if c * k * k > 1:         # (no reduce loop left otherwise: plain vector code)
        assert ck.final_ir.counts.microkernels >= 1
    lib = build_simde(ck.source) if path == "simde" else build_shared(ck.source)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    ref = _ref_conv2d((stride, stride), (pad, pad), (1, 1))(x, w)
    np.testing.assert_allclose(CFunction(ck.final_ir, lib)(x, w), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
@settings(max_examples=5, deadline=None)
@given(shape=_CONV, seed=st.integers(0, 2 ** 31))
def test_channel_form_avx2(shape, seed):
    """Constant-shape convolutions (7x7/2 stems, 3x3 with and without stride, 1x1/2;
    channel counts with vector tails, images down to one pixel wide) against numpy; up
    to 4 input channels (an RGB stem) keep the width form."""
    _check_conv("avx2", shape, seed)


@pytest.mark.slow
@settings(max_examples=2, deadline=None)
@given(shape=_CONV, seed=st.integers(0, 2 ** 31))
def test_channel_form_avx512_simde(shape, seed):
    _check_conv("simde", shape, seed)


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
def test_pointwise_stride1_keeps_the_width_form():
    """A 1x1 stride-1 convolution (MobileNet's expansions and projections) runs in the
    width form (rows of the input contiguous), a 1x1 stride-2 one in the channel form."""
    _check_conv("avx2", (5, 17, 6, (1, 1, 0)), 0)
    _check_conv("avx2", (5, 17, 6, (1, 2, 0)), 1)


@pytest.mark.parametrize("c,acc_init", [(16, "0"), (16, "1"), (600, "1")])
def test_channel_form_in_place_weights_golden(goldens, c, acc_init, monkeypatch):
    """Weights laid out (C, KH, KW, F): the channel form reads them in place (no pack
    request); with one panel of 32 output channels for two threads the output rows are
    the parallel band, outside the channel panels.  Legal up to the reassociated sum.
    600 input channels: a panel's weights exceed half of L2, the input channels run in
    two tiles outside the rows (``channel_tile``) and the init, on each register tile,
    only in the first (its channel tile member is 0)."""
    monkeypatch.setenv("POLYCOMP_ACC_INIT", acc_init)
    model = _conv_chwf((1, c, 13, 13), (c, 3, 3, 32), 2, 1).polyhedral_model()
    ctx = CompileState(model, TARGET, {})
    sched = model.initial_schedule
    for p in (CpuBackboneTilePass, CpuPackPass):
        sched = p().run(sched, ctx)
    again = isl.Schedule.read_from_str(model.ctx, sched.to_str())

    def same(text):
        return again.plain_is_equal(isl.Schedule.read_from_str(model.ctx, text))
    name = "conv_channel_in_place" + ("" if acc_init == "0" else "_acc_init") + \
        ("" if c == 16 else f"_c{c}")
    expected = goldens.expected(f"test_cpu_directconv/{name}.isl", sched.to_str(), same)
    assert same(expected), sched.to_str()
    assert "cpu_pack_request" not in sched.to_str()
    assert (c == 600) == ("input channels in tiles of" in " ".join(ctx.notes["cpu-backbone-tile"]))
    # the tiled subtree starts with a band (the channel tiles) like a program-order
    # stage; cpu-reduce-interchange (a later pass) leaves it alone
    assert CpuReduceInterchangePass().run(sched, ctx).plain_is_equal(sched)
    bad = violated_dependences(sched, model.dependences)
    same_point = isl.UnionMap.read_from_str(
        model.ctx, "{ conv2d_update[n, f, y, z, rc, rh, rw] -> "
        "conv2d_update[n, f, y, z, rc2, rh2, rw2] }")
    assert not bad.is_empty() and bad.is_subset(same_point)


@pytest.mark.parametrize("c,f", [(600, 64), (16, 32)])
def test_channel_form_prepacked_weights_golden(goldens, c, f):
    """Weights ``w[f, c, kh, kw]`` named in option ``prepack`` (constant weights of the
    graph layer): the tree of weights read in place (channel tiles for 600 input
    channels, the rows parallel for one 32-channel panel on two threads) under one
    pre-packed request at its top, recorded as the whole array in panels of ``NR``
    output channels, the other dimensions in the micro-kernel's order (window first:
    ``(F/NR, KH, KW, C, NR)``).  Legal up to the reassociated sum."""
    from polycomp.scheduler.promotion.record import prepacked_inputs
    model = _conv((1, c, 13, 13), (f, c, 3, 3), 2, 1).polyhedral_model()
    ctx = CompileState(model, TARGET, {"prepack": ("w",)})
    sched = model.initial_schedule
    for p in (CpuBackboneTilePass, CpuPackPass):
        sched = p().run(sched, ctx)
    again = isl.Schedule.read_from_str(model.ctx, sched.to_str())

    def same(text):
        return again.plain_is_equal(isl.Schedule.read_from_str(model.ctx, text))
    expected = goldens.expected(f"test_cpu_directconv/conv_channel_prepacked_c{c}.isl",
                                sched.to_str(), same)
    assert same(expected), sched.to_str()
    [rec] = prepacked_inputs(ctx)
    assert rec.layout.order == (2, 3, 1) and rec.packed_shape[1:] == (3, 3, c, 32)
    notes = " ".join(ctx.notes["cpu-backbone-tile"])
    assert "w read pre-packed (panels of 32)" in notes
    assert (c == 600) == ("input channels in tiles of" in notes)
    bad = violated_dependences(sched, model.dependences)
    same_point = isl.UnionMap.read_from_str(
        model.ctx, "{ conv2d_update[n, f, y, z, rc, rh, rw] -> "
        "conv2d_update[n, f, y, z, rc2, rh2, rw2] }")
    assert not bad.is_empty() and bad.is_subset(same_point)


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
@settings(max_examples=2, deadline=None)
@given(shape=_CONV, seed=st.integers(0, 2 ** 31))
def test_channel_form_prepacked_weights_avx2(shape, seed):
    """Weights read pre-packed (option ``prepack``, the caller packs with the
    :class:`PrepackedInput` the compile records) against numpy: prime channel counts,
    ``F`` not a multiple of the panel, stride 2, padding, batch 2, one or two threads."""
    from polycomp.scheduler.promotion.record import prepacked_inputs
    c, f, hw, (k, stride, pad) = shape
    hw = max(hw, k - 2 * pad)
    xs = (2, c, hw, hw + 1)
    kern = _conv(xs, (f, c, k, k), stride, pad, f"dconvp_{c}_{f}_{hw}_{k}_{stride}_{pad}")
    avx2 = get_target("cpu-avx2")
    tgt = dataclasses.replace(avx2, cpu=dataclasses.replace(avx2.cpu, threads=1 + seed % 2))
    ck = compile_kernel(kern, tgt, {"prepack": ("w",)})
    recs = prepacked_inputs(ck.state)
    notes = " ".join(ck.notes.get("cpu-backbone-tile", []))
    assert bool(recs) == ("channel form" in notes) == (f >= 8 and not (k == 1 and stride == 1)
                                                       and c > 4), notes
    lib = build_shared(ck.source)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((f, c, k, k)).astype(np.float32)
    ref = _ref_conv2d((stride, stride), (pad, pad), (1, 1))(x, w)
    got = CFunction(ck.final_ir, lib)(x, recs[0].pack(w) if recs else w)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not HAS_AVX2, reason="hardware: no AVX2")
@settings(max_examples=5, deadline=None)
@given(shape=_CONV, dil=st.sampled_from([1, 2]), seed=st.integers(0, 2 ** 31))
def test_channel_form_in_place_weights_avx2(shape, dil, seed):
    """(C, KH, KW, F) weights through the channel form (read in place, one or two
    threads) against numpy: prime channel counts, stride 2, padding, dilation,
    one-pixel-wide images."""
    c, f, hw, (k, stride, pad) = shape
    hw = max(hw, dil * (k - 1) + 1 - 2 * pad)
    xs = (1, c, hw, hw + 1)
    kern = _conv_chwf(xs, (c, k, k, f), stride, pad, dil,
                      f"dconvt_{c}_{f}_{hw}_{k}_{stride}_{pad}_{dil}")
    avx2 = get_target("cpu-avx2")
    tgt = dataclasses.replace(avx2, cpu=dataclasses.replace(avx2.cpu, threads=1 + seed % 2))
    ck = compile_kernel(kern, tgt)
    notes = " ".join(ck.notes.get("cpu-backbone-tile", []))
    assert ("channel form" in notes) == (f >= 8 and not (k == 1 and stride == 1)
                                         and c > 4), notes
    lib = build_shared(ck.source)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((f, c, k, k)).astype(np.float32)
    ref = _ref_conv2d((stride, stride), (pad, pad), (dil, dil))(x, w)
    got = CFunction(ck.final_ir, lib)(x, np.ascontiguousarray(w.transpose(1, 2, 3, 0)))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
