"""Convolutional networks through the graph layer (issue 27 items 1 and 3): ``conv2d``
(bias, stride, padding, dilation, groups, depthwise), eval-mode ``batch_norm`` (folded
into the convolution's weights at compile time, or a per-channel affine), max / average /
adaptive-average pooling, hardtanh / relu6 / clamp and flatten -- through the builder
(against numpy), the torch.fx importer and ``torch.compile(backend="polycomp")`` (against
eager torch) on odd / prime channel counts and spatial sizes, stride 2, extent-1 batches
and dynamic sizes; training-mode batch norm is refused with its reason.  ResNet-18- and
MobileNet-V2-style networks (:mod:`polycomp.graph.convnets`) compile with every
convolution, batch norm and pooling compiled (reduced widths, marked slow; the full-size
networks are checked by ``polycomp bench convnets``)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from polycomp.graph import GraphBuilder, compile_graph
from polycomp.graph.convnets import mobilenet_v2, resnet18
from polycomp.graph.dynamo import polycomp_backend
from polycomp.graph.fx import import_module
from polycomp.graph.runtime import HeldBytes


def ref_conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """numpy: NCHW cross-correlation with zero padding, per group an einsum."""
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw), np.float64)
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, f, oh, ow), np.float64)
    fo = f // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * fo:(g + 1) * fo].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                           j * dw:j * dw + sw * (ow - 1) + 1:sw]
                out[:, g * fo:(g + 1) * fo] += np.einsum("nchw,fc->nfhw", patch, ws[:, :, i, j])
    if b is not None:
        out += b[None, :, None, None]
    return out


CONV_CASES = [  # (N, C, H, W), (F, KH, KW), stride, padding, dilation, groups
    ((1, 3, 7, 5), (5, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((2, 5, 11, 13), (7, 3, 3), (2, 2), (1, 1), (1, 1), 1),
    ((1, 3, 9, 8), (4, 2, 3), (2, 1), (0, 2), (2, 1), 1),
    ((2, 6, 9, 7), (9, 3, 3), (1, 2), (1, 1), (1, 1), 3),
    ((1, 7, 13, 11), (7, 3, 3), (2, 2), (1, 1), (1, 1), 7),     # depthwise
    ((1, 3, 5, 6), (6, 3, 3), (1, 1), (1, 1), (1, 1), 3),       # depthwise, multiplier 2
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0]}-{c[1]}-s{c[2]}-g{c[5]}")
def test_builder_conv2d_against_numpy(case):
    xs, (f, kh, kw), stride, pad, dil, groups = case
    rng = np.random.default_rng(1)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((f, xs[1] // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(f).astype(np.float32)
    g = GraphBuilder("conv")
    xv = g.input("x", ("N",) + xs[1:])
    y = g.conv2d(xv, g.constant("w", w), g.constant("b", b), stride=stride, padding=pad,
                 dilation=dil, groups=groups)
    cg = compile_graph(g.build(y), "c")
    got = cg(x)
    np.testing.assert_allclose(got, ref_conv2d(x, w, b, stride, pad, dil, groups),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case,conv_prepack", [(c, "1") for c in CONV_CASES if c[5] == 1] + [
    (((1, 13, 7, 7), (17, 3, 3), (1, 1), (1, 1), (1, 1), 1), "1"),
    (((1, 13, 7, 7), (17, 3, 3), (1, 1), (1, 1), (1, 1), 1), "0"),
    (((2, 5, 9, 9), (33, 3, 3), (2, 2), (1, 1), (2, 2), 1), "1"),
    (((1, 3, 1, 1), (20, 1, 1), (2, 2), (0, 0), (1, 1), 1), "1")],
    ids=lambda c: f"{c[0]}-{c[1]}-s{c[2]}-d{c[4]}" if isinstance(c, tuple) else f"pk{c}")
def test_cpu_conv_weights_laid_out_at_compile_time(case, conv_prepack, monkeypatch):
    """On the C/CPU family a constant groups-1 weight of more than ``FEW_CHANNELS``
    input channels is packed at compile time where the channel form takes the
    convolution (``Step.packed``: panels of ``NR`` output channels, the window then the
    input channels inside, ``(F/NR, KH, KW, C, NR)``, zeros past ``F``: checked against
    a reshape of the weight, not through ``Layout``); fewer input channels, or
    ``POLYCOMP_CONV_PREPACK=0``, hand it to the kernel as ``(C, KH, KW, F)``
    (fewer output channels than a vector: no channel form, the weight read as it is)
    (``graph/lower.py`` ``conv_weight_layouts``: read in place).  Either way no packing
    per call, the weight held once and restored, and the result the convolution's
    (prime channel counts, ``F`` not a multiple of the panel, stride 2, padding,
    dilation, a one-pixel image, batch 1, 2 and 8)."""
    monkeypatch.setenv("POLYCOMP_CONV_PREPACK", conv_prepack)
    xs, (f, kh, kw), stride, pad, dil, groups = case
    rng = np.random.default_rng(3)
    w = rng.standard_normal((f, xs[1], kh, kw)).astype(np.float32)
    b = rng.standard_normal(f).astype(np.float32)
    g = GraphBuilder("conv")
    xv = g.input("x", ("N",) + xs[1:])
    wv = g.constant("w", w)
    y = g.relu(g.conv2d(xv, wv, g.constant("b", b), stride=stride, padding=pad,
                        dilation=dil))
    graph = g.build(y)
    graph.owns_constants = True  # as the importers' graphs: the weight is held once
    cg = compile_graph(graph, "cpu")
    laid = [a for s in cg.steps for a in s.arg_arrays.values()]
    packed = [a for s in cg.steps for a in s.packed.values()]
    if xs[1] <= 4 or conv_prepack == "0":
        assert len(laid) == 1 and laid[0].shape == (xs[1], kh, kw, f) and not packed
        np.testing.assert_array_equal(laid[0], w.transpose(1, 2, 3, 0))
        assert wv.const is None and cg.held_bytes() == HeldBytes(b.nbytes, 0, w.nbytes)
    elif f < 8:     # narrower than a vector: no channel form, the weight read as it is
        assert not packed and not laid and wv.const is not None
    else:
        assert len(packed) == 1 and not laid
        p = packed[0]
        nr = p.shape[-1]
        assert p.shape == (-(-f // nr), kh, kw, xs[1], nr)
        full = np.zeros((p.shape[0] * nr,) + w.shape[1:], np.float32)
        full[:f] = w
        want = full.reshape(p.shape[0], nr, xs[1], kh, kw).transpose(0, 3, 4, 2, 1)
        np.testing.assert_array_equal(p, want)
        assert wv.const is None and cg.held_bytes() == HeldBytes(b.nbytes, p.nbytes, 0)
    for n in (xs[0], 8):         # one compilation, any batch
        x = rng.standard_normal((n,) + xs[1:]).astype(np.float32)
        ref = np.maximum(ref_conv2d(x, w, b, stride, pad, dil), 0)
        np.testing.assert_allclose(cg(x), ref, rtol=1e-4, atol=1e-4)
    graph.restore_constants()  # (what a later compilation of the graph does first)
    np.testing.assert_array_equal(wv.const, w)


def test_conv_weight_read_by_another_op_keeps_its_layout():
    """A constant weight another operator of the group also reads, and grouped /
    depthwise weights, keep the ``(F, C/g, KH, KW)`` layout (no laid-out copy)."""
    from polycomp.graph.lower import conv_weight_layouts
    from polycomp.graph.partition import partition
    rng = np.random.default_rng(4)
    w = rng.standard_normal((4, 4, 1, 1)).astype(np.float32)
    g = GraphBuilder("conv")
    xv = g.input("x", (1, 4, 4, 4))
    wv = g.constant("w", w)
    y = g.add(g.conv2d(xv, wv), g.reshape(wv, shape=(1, 1, 4, 4)))
    cg = compile_graph(g.build(y), "cpu")
    assert all(not s.arg_arrays for s in cg.steps)
    x = rng.standard_normal((1, 4, 4, 4)).astype(np.float32)
    ref = ref_conv2d(x, w) + w.reshape(1, 1, 4, 4)
    np.testing.assert_allclose(cg(x), ref, rtol=1e-4, atol=1e-4)
    g = GraphBuilder("dw")
    xv = g.input("x", (1, 4, 4, 4))
    part = partition(g.build(g.conv2d(xv, g.constant("wd", w[:, :1]), groups=4)))
    assert [conv_weight_layouts(grp, part.inputs_of(grp)) for grp in part.groups] == [{}]


@pytest.mark.parametrize("hw", [(7, 5), (1, 1)])
def test_pointwise_conv_over_flattened_pixels(hw):
    """A 1x1 stride-1 convolution with output rows narrower than 8 pixels (MobileNet's
    7x7 expansions / projections), its bias, ReLU6 and residual add run over flattened
    pixels (``graph/lower.py`` ``pixel_flat``: one GEMM over ``H*W``, zero-copy reshapes
    at run time); prime channel counts, batch 2, one-pixel images; a 9-wide output keeps
    the 4-d form."""
    from polycomp.graph.lower import pixel_flat
    h, w_ = hw
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 13, h, w_)).astype(np.float32)
    r = rng.standard_normal((2, 17, h, w_)).astype(np.float32)
    w = rng.standard_normal((17, 13, 1, 1)).astype(np.float32)
    b = rng.standard_normal(17).astype(np.float32)
    g = GraphBuilder("pw")
    xv, rv = g.input("x", (2, 13, h, w_)), g.input("r", (2, 17, h, w_))
    y = g.add(g.hardtanh(g.conv2d(xv, g.constant("w", w), g.constant("b", b)), lo=0.0,
                         hi=6.0), rv)
    cg = compile_graph(g.build(y), "cpu")
    assert [pixel_flat(grp) is not None for grp in cg.partition.groups] == [True]
    assert all(s.arg_shapes for s in cg.steps)
    ref = np.clip(ref_conv2d(x, w, b), 0, 6) + r
    np.testing.assert_allclose(cg(x, r), ref, rtol=1e-4, atol=1e-4)
    from polycomp.graph.partition import partition
    g = GraphBuilder("pw9")
    xv = g.input("x", (2, 13, h, 9))
    part = partition(g.build(g.relu(g.conv2d(xv, g.constant("w", w)))))
    assert [pixel_flat(grp) for grp in part.groups] == [None]



def _compile_with_notes(graph, monkeypatch):
    """``compile_graph`` on the cpu-avx512 target and the ``cpu-backbone-tile`` notes of its
    kernels."""
    import polycomp.graph.compile as gc
    kernels: list = []
    orig = gc.compile_kernel

    def keep(*a, **k):
        ck = orig(*a, **k)
        kernels.append(ck)
        return ck
    monkeypatch.setattr(gc, "compile_kernel", keep)
    # AVX-512 with the Zen 4 caches the expected blocks were chosen for, on any host (an
    # AVX-512 kernel runs through SIMDe where the host lacks it)
    import polycomp.hw.cpu.target as cpu_target
    monkeypatch.setattr(cpu_target, "cache_sizes", lambda *a: {
        "l1": 32 * 1024, "l2": 1024 * 1024, "l3": 32 * 1024 * 1024})
    cg = compile_graph(graph, "cpu-avx512")
    return cg, [n for ck in kernels for n in ck.notes.get("cpu-backbone-tile", [])] + \
        [ck.source for ck in kernels]


@pytest.mark.parametrize("case", [
    # (N, C, H, W), (F, K), stride, padding, expected in the note
    ((2, 307, 7, 7), (67, 3), 1, 1, ("register block 7x48", "input channels in tiles of")),
    ((1, 89, 13, 13), (37, 7), 1, 3, ("register block 14x32", "input channels in tiles of 48")),
    ((2, 911, 1, 1), (19, 3), 1, 1, ("input channels in tiles of",)),
    # one 16-channel panel, fewer than the threads: the rows are the parallel band and
    # the channel tiles lie outside it
    ((2, 911, 3, 5), (16, 3), 1, 1, ("input channels in tiles of 456",)),
    ((1, 229, 14, 14), (64, 3), 2, 1, ("register block 7x32",)),
], ids=lambda c: f"{c[0]}-{c[1]}-s{c[2]}" if isinstance(c, tuple) and len(c) == 5 else None)
def test_cpu_conv_channel_tiles_and_row_register_block(case, monkeypatch):
    """The channel form tiles the input channels when one panel's weights exceed half of
    L2 (``backbone_tile.channel_tile``: the tile loop outside the output rows, the
    accumulators loaded and stored once per tile) and takes one register tile per output
    row on rows of at most 16 pixels (``row_register_block``); against numpy on prime
    channel counts, odd widths, stride 2, padding, batch 2 and a one-pixel image (the
    last channel tile partial; a single channel panel, whose rows are the parallel
    band)."""
    xs, (f, k), st, pad, expect = case
    rng = np.random.default_rng(8)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((f, xs[1], k, k)).astype(np.float32)
    b = rng.standard_normal(f).astype(np.float32)
    g = GraphBuilder("ct")
    y = g.relu(g.conv2d(g.input("x", xs), g.constant("w", w), g.constant("b", b),
                        stride=st, padding=pad))
    cg, notes = _compile_with_notes(g.build(y), monkeypatch)
    assert any(all(e in n for e in expect) for n in notes), notes
    ref = np.maximum(ref_conv2d(x, w, b, (st, st), (pad, pad)), 0)
    np.testing.assert_allclose(cg(x), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", [((2, 3, 11, 11), (17, 7), 2, 3), ((1, 2, 1, 1), (16, 3), 1, 1),
                                  ((1, 3, 9, 8), (32, 3), 2, 1)],
                         ids=lambda c: f"{c[0]}-{c[1]}")
def test_cpu_rgb_stem_reads_a_padded_copy(case, monkeypatch):
    """A padded convolution of at most ``FEW_CHANNELS`` input channels (an RGB stem,
    width form) reads a zero-padded copy of its input (a ``_pad`` stage); with more
    channels the padding stays a ``select``; against numpy (stride 2, a one-pixel image,
    batch 2, an odd width)."""
    xs, (f, k), st, pad = case
    rng = np.random.default_rng(9)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((f, xs[1], k, k)).astype(np.float32)
    g = GraphBuilder("stem")
    y = g.relu(g.conv2d(g.input("x", xs), g.constant("w", w), stride=st, padding=pad))
    cg, texts = _compile_with_notes(g.build(y), monkeypatch)
    assert any("_pad" in t for t in texts)
    if xs[1] == 3 and k == 7:    # five channels: the padding stays a select
        g5 = GraphBuilder("five")
        w5 = rng.standard_normal((f, 5, k, k)).astype(np.float32)
        y5 = g5.relu(g5.conv2d(g5.input("x", (1, 5, 11, 11)), g5.constant("w", w5),
                               padding=pad))
        _, t5 = _compile_with_notes(g5.build(y5), monkeypatch)
        assert not any("_pad" in t for t in t5)
    ref = np.maximum(ref_conv2d(x, w, None, (st, st), (pad, pad)), 0)
    np.testing.assert_allclose(cg(x), ref, rtol=1e-4, atol=1e-4)


def test_flattened_pointwise_conv_keeps_the_global_pool_apart():
    """A 1x1 convolution on a 7-pixel-wide image followed by a global average pool: the
    pool is not merged into the convolution's group (which then runs over flattened
    pixels, ``partition._flat_pointwise_with_reduce``); a 9-wide image merges them as
    before; results against numpy (prime channels, batch 2)."""
    from polycomp.graph.lower import pixel_flat
    from polycomp.graph.partition import partition
    rng = np.random.default_rng(10)
    w = rng.standard_normal((19, 13, 1, 1)).astype(np.float32)

    def build(width):
        g = GraphBuilder("pwpool")
        y = g.adaptive_avg_pool2d(g.relu(g.conv2d(g.input("x", (2, 13, 5, width)),
                                                  g.constant("w", w))), out=(1, 1))
        return g.build(y)
    assert len(partition(build(9)).groups) == 1
    cg = compile_graph(build(7), "cpu")
    assert [pixel_flat(grp) is not None for grp in cg.partition.groups] == [True, False]
    x = rng.standard_normal((2, 13, 5, 7)).astype(np.float32)
    ref = np.maximum(ref_conv2d(x, w), 0).mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(cg(x), ref, rtol=1e-4, atol=1e-5)

WINDOW_CASES = [  # (N, C, H, W), multiplier, kernel, stride, padding, dilation
    ((1, 7, 13, 37), 1, 3, 2, 1, 1),
    ((2, 5, 7, 7), 1, 3, 1, 1, 1),
    ((1, 3, 9, 1), 2, 3, 1, 1, 1),
    ((1, 11, 16, 19), 1, 5, 2, 2, 1),
    ((1, 2, 12, 11), 1, 3, 1, 2, 2),
]


@pytest.mark.parametrize("case", WINDOW_CASES, ids=lambda c: f"{c[0]}-k{c[2]}-s{c[3]}-d{c[5]}")
def test_cpu_depthwise_and_pool_windows_against_numpy(case):
    """Depthwise convolutions and max / average pools with small windows are lowered as
    the window sum written out (an elementwise stage over a zero / -inf padded copy of
    the input, ``_conv_lower`` / ``_pool_lower``); on the cpu target (row vectors, stride-2
    masked tails) against numpy: prime channel counts, odd widths, a one-pixel-wide image,
    stride 2, dilation, a channel multiplier, NaN in the pooled input."""
    xs, mult, k, st, pad, dil = case
    rng = np.random.default_rng(5)
    x = rng.standard_normal(xs).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    c = xs[1]
    w = rng.standard_normal((c * mult, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c * mult).astype(np.float32)
    g = GraphBuilder("win")
    xv = g.input("x", xs)
    y = g.conv2d(xv, g.constant("w", w), g.constant("b", b), stride=st, padding=pad,
                 dilation=dil, groups=c)
    kw = dict(kernel=(k, k), stride=(st, st), padding=(pad // dil, pad // dil))
    mp, ap = g.max_pool2d(xv, **kw), g.avg_pool2d(xv, **kw, count_include_pad=False)
    got_c, got_m, got_a = compile_graph(g.build(y, mp, ap), "cpu")(x)
    np.testing.assert_allclose(got_c, ref_conv2d(x, w, b, (st, st), (pad, pad), (dil, dil), c),
                               rtol=1e-4, atol=1e-4)
    xt = torch.from_numpy(x)
    p_ = pad // dil
    np.testing.assert_allclose(got_m, F.max_pool2d(xt, k, st, p_).numpy(), rtol=1e-6)
    np.testing.assert_allclose(got_a, F.avg_pool2d(xt, k, st, p_, count_include_pad=False)
                               .numpy(), rtol=1e-5, atol=1e-6)


def test_builder_conv2d_symbolic_spatial_extents_one_compilation():
    """H and W symbolic: the output extents are floor expressions (kernel parameters)."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    g = GraphBuilder("convsym")
    xv = g.input("x", ("N", 3, "H", "W"))
    y = g.relu(g.conv2d(xv, g.constant("w", w), stride=(2, 2), padding=(1, 1)))
    graph = g.build(y)
    assert "floor" in str(y.shape[2])
    cg = compile_graph(graph, "c")
    for shape in ((1, 3, 7, 5), (2, 3, 12, 9), (1, 3, 1, 1)):
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(cg(x), np.maximum(ref_conv2d(x, w, None, (2, 2), (1, 1)), 0),
                                   rtol=1e-4, atol=1e-4)


def _symbolic_convs(rng):
    """Three convolutions of symbolic N, H, W chained: 3x3 stride 1 (16 -> 16 channels,
    bias, relu), 3x3 stride 2 (16 -> 24: a partial channel panel) and a depthwise 3x3."""
    w1 = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((24, 16, 3, 3)).astype(np.float32)
    w3 = rng.standard_normal((24, 1, 3, 3)).astype(np.float32)
    b1, b2 = (rng.standard_normal(n).astype(np.float32) for n in (16, 24))
    g = GraphBuilder("convsym")
    xv = g.input("x", ("N", 16, "H", "W"))
    y1 = g.relu(g.conv2d(xv, g.constant("w1", w1), g.constant("b1", b1), padding=(1, 1)))
    y2 = g.conv2d(y1, g.constant("w2", w2), g.constant("b2", b2), stride=(2, 2),
                  padding=(1, 1))
    y3 = g.conv2d(y2, g.constant("w3", w3), padding=(1, 1), groups=24)

    def ref(x):
        r1 = np.maximum(ref_conv2d(x, w1, b1, (1, 1), (1, 1)), 0).astype(np.float32)
        r2 = ref_conv2d(r1, w2, b2, (2, 2), (1, 1)).astype(np.float32)
        return ref_conv2d(r2, w3, None, (1, 1), (1, 1), groups=24)
    return g.build(y3), ref


def test_cpu_conv_symbolic_image_sizes_against_numpy():
    """N, H and W symbolic, constant channels (torch.compile dynamic=True on a convnet):
    the channel-form convolutions run every register tile in the vector micro-kernel
    (accumulators stored one output plane, a symbolic extent, apart; the last row tile
    of each output row with a run-time pixel count), one compilation against numpy at
    odd, prime, one-pixel and wide images."""
    rng = np.random.default_rng(5)
    graph, ref = _symbolic_convs(rng)
    cg = compile_graph(graph, "cpu")
    assert sum(s.fn.func.counts.microkernels for s in cg.steps if s.fn is not None) >= 3
    for shape in ((1, 16, 7, 5), (2, 16, 13, 11), (1, 16, 1, 1), (1, 16, 3, 29)):
        x = rng.standard_normal(shape).astype(np.float32)
        want = ref(x)
        np.testing.assert_allclose(cg(x), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_cpu_conv_symbolic_image_sizes_switch(monkeypatch):
    """``POLYCOMP_CONV_SYMBOLIC=0`` gives the older code of symbolic image sizes: no
    micro-kernel (the strided output plane of symbolic extent refused), the padding
    conditions in scalar nests, ``pc_floordiv`` of ``H - 1`` (compiled only)."""
    tiles, floordiv = {}, {}
    for on in ("1", "0"):
        monkeypatch.setenv("POLYCOMP_CONV_SYMBOLIC", on)
        graph, _ = _symbolic_convs(np.random.default_rng(5))
        cg = compile_graph(graph, "cpu", simulate=True)     # nothing built, nothing run
        cks = [s.fn.ck for s in cg.steps if s.fn is not None]
        tiles[on] = sum(ck.final_ir.counts.microkernels for ck in cks)
        floordiv[on] = sum(ck.source.count("pc_floordiv((H - 1), 2)") for ck in cks)
    assert tiles["1"] >= 3 and tiles["0"] == 0, tiles
    assert floordiv["1"] == 0 < floordiv["0"], floordiv


POOL_CASES = [
    ("max", dict(kernel_size=3, stride=2, padding=1), (2, 3, 11, 9)),
    ("max", dict(kernel_size=2, stride=1, padding=0, dilation=2), (1, 5, 7, 6)),
    ("avg", dict(kernel_size=3, stride=2, padding=1), (1, 3, 9, 7)),
    ("avg", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False), (2, 3, 9, 7)),
    ("avg", dict(kernel_size=2, stride=2, divisor_override=3), (1, 2, 5, 8)),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{c[0]}-{len(c[1])}-{c[2]}")
def test_pooling_against_torch(case):
    kind, kw, shape = case
    f = F.max_pool2d if kind == "max" else F.avg_pool2d
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    g = GraphBuilder("pool")
    xv = g.input("x", shape)
    attrs = dict(kernel=kw["kernel_size"], stride=(kw["stride"],) * 2,
                 padding=(kw.get("padding", 0),) * 2)
    if kind == "max":
        attrs["dilation"] = (kw.get("dilation", 1),) * 2
        y = g.max_pool2d(xv, **attrs)
    else:
        attrs["count_include_pad"] = kw.get("count_include_pad", True)
        if "divisor_override" in kw:
            attrs["divisor"] = kw["divisor_override"]
        y = g.avg_pool2d(xv, **attrs)
    got = compile_graph(g.build(y), "c")(x.numpy())
    np.testing.assert_allclose(got, f(x, **kw).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,out", [((2, 3, 7, 5), (3, 2)), ((1, 4, 8, 6), (2, 3)),
                                       ((1, 3, 5, 5), (1, 1)), ((1, 2, 3, 4), (5, 7))])
def test_adaptive_avg_pool_against_torch(shape, out):
    """Integer extents: any output size (bins not dividing evenly are masked windows)."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(4))
    g = GraphBuilder("apool")
    y = g.adaptive_avg_pool2d(g.input("x", shape), out=out)
    got = compile_graph(g.build(y), "c")(x.numpy())
    np.testing.assert_allclose(got, F.adaptive_avg_pool2d(x, out).numpy(), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------- torch.fx importer


def _randomised(model):
    g = torch.Generator().manual_seed(5)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm2d, nn.BatchNorm1d)):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.3)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model.eval()


def test_fx_conv_bn_folds_into_the_convolution():
    torch.manual_seed(0)
    m = _randomised(nn.Sequential(nn.Conv2d(3, 5, 3, 2, 1), nn.BatchNorm2d(5), nn.ReLU6(),
                                  nn.Conv2d(5, 5, 3, 1, 1, groups=5, bias=False),
                                  nn.BatchNorm2d(5), nn.Flatten()))
    graph = import_module(m, [("N", 3, 9, 7)])
    assert [n.op for n in graph.nodes] == ["conv2d", "hardtanh", "conv2d", "reshape"]
    assert all(len(n.inputs) == 3 for n in graph.nodes if n.op == "conv2d")  # folded bias
    cg = compile_graph(graph, "c")
    for n in (1, 3):
        x = torch.randn(n, 3, 9, 7)
        with torch.no_grad():
            np.testing.assert_allclose(cg(x.numpy()), m(x).numpy(), rtol=1e-4, atol=1e-5)


def test_fx_standalone_batch_norm_is_a_per_channel_affine():
    """Batch norm of an input or after an add (nothing to fold into), 2-d and 4-d."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm2d(3)
            self.bn1 = nn.BatchNorm1d(7)

        def forward(self, x, y, z):
            return self.bn(x + y), self.bn1(z)
    m = _randomised(M())
    graph = import_module(m, [(2, 3, 5, 4), (2, 3, 5, 4), ("B", 7)])
    assert "conv2d" not in [n.op for n in graph.nodes]
    cg = compile_graph(graph, "c")
    x, y, z = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4), torch.randn(1, 7)
    a, b = cg(x.numpy(), y.numpy(), z.numpy())
    with torch.no_grad():
        ra, rb = m(x, y, z)
    np.testing.assert_allclose(a, ra.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, rb.numpy(), rtol=1e-5, atol=1e-6)


def test_fx_hardtanh_relu6_clamp_keep_nan_and_edges():
    class M(nn.Module):
        def forward(self, x):
            return F.relu6(x), F.hardtanh(x, -0.5, 2.0), torch.clamp(x, min=0.25), \
                x.clamp(max=1.0)
    x = torch.tensor([[float("nan"), -7.0, -0.5, 0.0, 2.0, 6.0, 6.5, float("inf"),
                       -float("inf"), 0.3]])
    cg = compile_graph(import_module(M(), [(1, 10)]), "c")
    for got, ref in zip(cg(x.numpy()), M()(x)):
        np.testing.assert_array_equal(got, ref.numpy())


# --------------------------------------------------------------------- torch.compile


class Recorder:
    def __init__(self, target="c"):
        self.fns, self.target = [], target

    def __call__(self, gm, example_inputs):
        fn = polycomp_backend(gm, example_inputs, options={"target": self.target,
                                                           "strict": True})
        self.fns.append(fn)
        return fn

    @property
    def eager(self):
        return [line for f in self.fns for line in f.polycomp_report.eager]

    def compiled_ops(self) -> list[str]:
        """The ops of every compiled group (the partition the backend built)."""
        return [n.op for f in self.fns if f.compiled_graph is not None
                for g in f.compiled_graph.partition.groups for n in g.nodes]


def _compile_and_check(model, shapes, target="c", dynamic=None, rtol=1e-4):
    torch._dynamo.reset()
    rec = Recorder(target)
    cm = torch.compile(model, backend=rec, dynamic=dynamic)
    gen = torch.Generator().manual_seed(6)
    for s in shapes:
        x = torch.randn(s, generator=gen)
        with torch.no_grad():
            ref, got = model(x), cm(x)
        assert got.shape == ref.shape
        torch.testing.assert_close(got, ref, rtol=rtol, atol=rtol * max(1.0, ref.abs().max()))
    return rec


def _n_convs(model) -> int:
    return sum(isinstance(m, nn.Conv2d) for m in model.modules())


class SmallNet(nn.Module):
    """Stem conv + bn + relu6, max pool, depthwise and grouped convs, avg pool, adaptive
    average pool, flatten and linear: every op of this file's table."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 6, 3, 2, 1, bias=False), nn.BatchNorm2d(6),
                                  nn.ReLU6(inplace=True), nn.MaxPool2d(3, 2, 1))
        self.dw = nn.Sequential(nn.Conv2d(6, 6, 3, 1, 1, groups=6, bias=False),
                                nn.BatchNorm2d(6), nn.Hardtanh(0.0, 6.0))
        self.gc = nn.Conv2d(6, 9, 1, groups=3)
        self.pool = nn.AvgPool2d(2, 1)
        self.head = nn.Linear(9, 5)

    def forward(self, x):
        x = self.gc(self.dw(self.stem(x)) + x[:, :1, :1, :1])
        x = F.adaptive_avg_pool2d(self.pool(x), 1)
        return self.head(torch.flatten(x, 1))


def test_dynamo_conv_bn_relu6_one_kernel_statistics_captured():
    """The batch-norm statistics (module buffers) are constants folded into the
    convolution, not arguments of the compiled graph: one kernel, conv2d -> hardtanh."""
    m = _randomised(nn.Sequential(nn.Conv2d(3, 5, 3, 2, 1, bias=False), nn.BatchNorm2d(5),
                                  nn.ReLU6()))
    rec = _compile_and_check(m, [(1, 3, 11, 7)])
    assert not rec.eager, rec.eager
    assert rec.compiled_ops() == ["conv2d", "hardtanh"]
    assert len(rec.fns[0].compiled_graph.graph.inputs) == 1  # x only


@pytest.mark.slow
def test_dynamo_small_convnet_fully_compiled_static_and_dynamic():
    m = _randomised(SmallNet())
    rec = _compile_and_check(m, [(1, 3, 17, 13), (2, 3, 23, 19)])  # 2nd: automatic dynamic
    assert not rec.eager, rec.eager
    assert all(f.polycomp_report.compiled == f.polycomp_report.pieces for f in rec.fns)
    ops = rec.compiled_ops()
    assert "batch_norm" not in ops and ops.count("conv2d") >= _n_convs(m)
    for op in ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "hardtanh"):
        assert op in ops
    # the batch-norm statistics are constants, not arguments of the compiled graph
    cg = rec.fns[-1].compiled_graph
    assert [v.name for v in cg.graph.inputs] == ["l_x_"]


def test_dynamo_batch_norm_buffers_updated_recompile():
    torch._dynamo.reset()
    m = _randomised(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)))
    rec = Recorder()
    cm = torch.compile(m, backend=rec)
    x = torch.randn(1, 3, 6, 5)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x))
        m[1].running_mean.add_(1.0)  # an in-place update of a folded statistic
        torch.testing.assert_close(cm(x), m(x))
    assert any("changed" in line for line in rec.eager)


def test_dynamo_training_batch_norm_runs_eagerly_with_reason():
    torch._dynamo.reset()
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    ref = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    ref.load_state_dict(m.state_dict())
    rec = Recorder()
    x = torch.randn(2, 3, 6, 5)
    with torch.no_grad():
        got = torch.compile(m, backend=rec)(x)
        want = ref(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(m[1].running_mean, ref[1].running_mean)  # stats updated
    assert any("batch_norm in training mode" in line for line in rec.eager), rec.eager


def test_dynamo_adaptive_pool_of_symbolic_extent_is_refused_with_reason():
    torch._dynamo.reset()

    class M(nn.Module):
        def forward(self, x):
            return F.adaptive_avg_pool2d(torch.relu(x), (2, 2))
    rec = Recorder()
    cm = torch.compile(M(), backend=rec, dynamic=True)
    x = torch.randn(1, 2, 7, 6)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), M()(x))
    assert any("adaptive_avg_pool2d to 2 of the symbolic extent" in line
               for line in rec.eager), rec.eager


def test_dynamo_max_pool_ceil_mode_that_changes_the_extent_runs_eagerly():
    torch._dynamo.reset()
    rec = Recorder()
    m = nn.MaxPool2d(2, 2, ceil_mode=True)
    x = torch.randn(1, 2, 7, 6)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(m, backend=rec)(x), m(x))
    assert any("ceil_mode=True" in line for line in rec.eager), rec.eager


# --------------------------------------------------------------------- the two networks


def _check_network(model, shapes, target):
    rec = _compile_and_check(model, shapes, target)
    assert not rec.eager, rec.eager
    assert all(f.polycomp_report.compiled == f.polycomp_report.pieces for f in rec.fns)
    ops = rec.compiled_ops()
    # every convolution is compiled (batch norm folded in: there is none left), and the
    # pools and activations too
    assert ops.count("conv2d") == _n_convs(model) * len(rec.fns), ops
    assert "batch_norm" not in ops
    return ops


# The two networks' inputs: a static batch-1 compilation, then (automatic dynamic) one with
# a symbolic batch that serves batches 2 and 3.  The spatial sizes stay 32 x 32: a second
# image size makes Dynamo's recompilation symbolic in H and W too, a compilation of
# ~13 s of gcc for ResNet (29 s before the channel form took symbolic image sizes,
# docs/graph.md "Compile time"), more than the suite's budget allows.  Their
# convolutions are checked by test_cpu_conv_symbolic_image_sizes_against_numpy, and
# symbolic image sizes through every layer kind (stride-2 stem, max pool,
# depthwise and grouped convolutions, average and adaptive pools) are checked by
# test_dynamo_small_convnet_fully_compiled_static_and_dynamic.
NETWORK_SHAPES = [(1, 3, 32, 32), (2, 3, 32, 32), (3, 3, 32, 32)]


TINY_MOBILENET = dict(width_mult=0.5, settings=((1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 1, 2)),
                      last_channel=32, num_classes=10)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu"])
def test_resnet18_style_reduced_matches_eager(target):
    m = resnet18(width=8, blocks=(1, 1, 1, 1), num_classes=10)
    ops = _check_network(m, NETWORK_SHAPES, target)
    assert "max_pool2d" in ops and "adaptive_avg_pool2d" in ops


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu"])
def test_mobilenet_v2_style_reduced_matches_eager(target):
    m = mobilenet_v2(**TINY_MOBILENET)
    ops = _check_network(m, NETWORK_SHAPES, target)
    assert "hardtanh" in ops and "adaptive_avg_pool2d" in ops


# The full-size models (224 x 224) are checked by `polycomp bench convnets` (max relative
# error against eager beside the timings): their compilation alone takes 45-115 s each,
# more than the suite's budget allows; the reduced models above use every layer kind.


# --------------------------------------------------------------------- ONNX


def _onnx_graph(model, shape, dynamic_axes=None, train_bn=False):
    import io
    import warnings

    import onnx

    from polycomp.graph.onnx_import import import_onnx
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(shape),), f, dynamo=False, input_names=["x"],
                          output_names=["y"], opset_version=17,
                          dynamic_axes=dynamic_axes or {},
                          do_constant_folding=False)
    return onnx.load_from_string(f.getvalue()), import_onnx


class OnnxNet(nn.Module):
    """Conv + BatchNormalization (not folded by the exporter), Clip, MaxPool, AveragePool
    (count_include_pad=False), depthwise Conv, GlobalAveragePool, Flatten, Gemm."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 5, 3, 2, 1, bias=False)
        self.bn = nn.BatchNorm2d(5)
        self.dw = nn.Conv2d(5, 5, 3, 1, 1, groups=5)
        self.bn2 = nn.BatchNorm2d(5)
        self.fc = nn.Linear(5, 7)

    def forward(self, x):
        x = F.max_pool2d(F.relu6(self.bn(self.c1(x))), 3, 2, 1)
        x = F.avg_pool2d(self.bn2(self.dw(x)), 3, 1, 1, count_include_pad=False)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def test_onnx_convnet_imports_and_matches_eager():
    m = _randomised(OnnxNet())
    proto, import_onnx = _onnx_graph(m, (2, 3, 15, 13), {"x": {0: "N"}, "y": {0: "N"}})
    ops = {n.op_type for n in proto.graph.node}
    assert {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "Gemm",
            "Clip"} <= ops, ops
    graph = import_onnx(proto, "onnxnet")
    assert "batch_norm" not in [n.op for n in graph.nodes]
    cg = compile_graph(graph, "c")
    for n in (1, 3):
        x = torch.randn(n, 3, 15, 13)
        with torch.no_grad():
            torch.testing.assert_close(torch.as_tensor(cg(x.numpy())), m(x), rtol=1e-4,
                                       atol=1e-5)


def test_onnx_batch_normalization_standalone():
    m = _randomised(nn.Sequential(nn.BatchNorm2d(3)))
    proto, import_onnx = _onnx_graph(m, (1, 3, 4, 5))
    assert "BatchNormalization" in {n.op_type for n in proto.graph.node}
    cg = compile_graph(import_onnx(proto), "c")
    x = torch.randn(1, 3, 4, 5)
    with torch.no_grad():
        np.testing.assert_allclose(cg(x.numpy()), m(x).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_builder_conv_pool_other_float_dtypes(dtype):
    """float64 computes in float64; float16 accumulates in float32 and rounds once."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 4, 7, 6)).astype(dtype)
    w = rng.standard_normal((6, 2, 3, 3)).astype(dtype)
    g = GraphBuilder("convdt")
    xv = g.input("x", (1, 4, 7, 6), dtype)
    c = g.conv2d(xv, g.constant("w", w), stride=(2, 1), padding=(1, 1), groups=2)
    y = g.avg_pool2d(c, kernel=(2, 2), stride=(1, 1), padding=(0, 0), count_include_pad=True)
    got = compile_graph(g.build(y), "c")(x)
    assert got.dtype == np.dtype(dtype)
    ref = ref_conv2d(x.astype(np.float64), w.astype(np.float64), None, (2, 1), (1, 1),
                     groups=2).astype(dtype).astype(np.float64)
    ref = (ref[:, :, :-1, :-1] + ref[:, :, 1:, :-1] + ref[:, :, :-1, 1:] + ref[:, :, 1:, 1:]) / 4
    tol = 1e-12 if dtype == "float64" else 3e-3
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=tol, atol=tol)


@pytest.mark.slow
def test_onnx_resnet18_style_reduced_matches_eager():
    m = resnet18(width=8, blocks=(1, 1, 1, 1), num_classes=10)
    proto, import_onnx = _onnx_graph(m, (1, 3, 32, 32), {"x": {0: "N"}, "y": {0: "N"}})
    graph = import_onnx(proto, "resnet")
    assert [n.op for n in graph.nodes].count("conv2d") == _n_convs(m)
    assert "batch_norm" not in [n.op for n in graph.nodes]
    cg = compile_graph(graph, "c")
    for n in (1, 2):
        x = torch.randn(n, 3, 32, 32)
        with torch.no_grad():
            torch.testing.assert_close(torch.as_tensor(cg(x.numpy())), m(x), rtol=1e-4,
                                       atol=1e-5)
