"""Conv-chain detection (scheduler/chain/conv_detect.py) and its movement/time model
(scheduler/chain/conv_model.py): the closed-form volume against a walk of the block nest,
the planner against brute force over every integer tile on small spaces."""
import chain_kernels as ck
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polycomp as pc
from polycomp.frontend import ops
from polycomp.scheduler.chain.conv_detect import conv_why_not, detect_conv_chains
from polycomp.scheduler.chain.conv_model import (
    ConvChainDims,
    ConvTiles,
    MachineRates,
    best_fused_tiles,
    brute_force_tiles,
    decide,
    fused_flops,
    fused_usage,
    fused_volume,
    simulate_volume,
    unfused_flops,
)

Nb, C, H, W, F1, F2 = pc.sym("Nb C H W F1 F2")


@pytest.mark.parametrize("kernel,k1,p1,k2,p2,n_middle", [
    (ck.conv3_bias_relu_conv1, 3, 1, 1, 0, 2), (ck.conv1_relu_conv3, 1, 0, 3, 1, 1),
    (ck.conv3_conv3_valid, 3, 0, 3, 0, 0)])
def test_detects_conv_chains(kernel, k1, p1, k2, p2, n_middle):
    (m,) = detect_conv_chains(kernel.polyhedral_model())
    assert (m.first.kh, m.first.ph, m.second.kh, m.second.ph) == (k1, p1, k2, p2)
    assert len(m.middle) == n_middle and m.halo == (k2 - 1, k2 - 1)


@pc.tensor_expr
def strided_second(X: pc.Tensor[(Nb, C, H, W), "float32"],
                   W1: pc.Tensor[(F1, C, 1, 1), "float32"],
                   W2: pc.Tensor[(F2, F1, 3, 3), "float32"]):
    return ops.conv2d_nchw(ops.conv2d_nchw(X, W1, name="T"), W2, stride=2, name="O")


@pc.tensor_expr
def intermediate_is_output(X: pc.Tensor[(Nb, C, H, W), "float32"],
                           W1: pc.Tensor[(F1, C, 1, 1), "float32"],
                           W2: pc.Tensor[(F2, F1, 1, 1), "float32"]):
    t = ops.conv2d_nchw(X, W1, name="T")
    return t, ops.conv2d_nchw(t, W2, name="O")


@pc.tensor_expr
def single_conv(X: pc.Tensor[(Nb, C, H, W), "float32"],
                W1: pc.Tensor[(F1, C, 3, 3), "float32"]):
    return ops.conv2d_nchw(X, W1, padding=1, name="T")


@pc.tensor_expr
def dilated_first(X: pc.Tensor[(Nb, C, H, W), "float32"],
                  W1: pc.Tensor[(F1, C, 3, 3), "float32"],
                  W2: pc.Tensor[(F2, F1, 1, 1), "float32"]):
    return ops.conv2d_nchw(ops.conv2d_nchw(X, W1, dilation=2, name="T"), W2, name="O")


@pc.tensor_expr
def read_twice(X: pc.Tensor[(Nb, C, H, W), "float32"],
               W1: pc.Tensor[(F1, C, 1, 1), "float32"],
               W2: pc.Tensor[(F2, F1, 1, 1), "float32"]):
    t = ops.conv2d_nchw(X, W1, name="T")
    r = pc.compute((Nb, F1, H, W), lambda n, f, y, x: t[n, f, y, x] * t[n, f, y, x], name="R")
    u = pc.compute((Nb, F1, H, W), lambda n, f, y, x: r[n, f, y, x] + t[n, f, y, x], name="U")
    return ops.conv2d_nchw(u, W2, name="O")


@pytest.mark.parametrize("kernel,reason", [
    (strided_second, "stride 1"), (intermediate_is_output, "kernel output"),
    (single_conv, "no second convolution"), (dilated_first, "stride 1, dilation 1"),
    (read_twice, "read by 2 stages")])
def test_no_conv_chain_and_why(kernel, reason):
    model = kernel.polyhedral_model()
    assert detect_conv_chains(model) == []
    assert any(reason in r for r in conv_why_not(model)), conv_why_not(model)


def _dims(n, c, h, w, f1, f2, k1, k2, same):
    p1, p2 = ((k1 - 1) // 2, (k2 - 1) // 2) if same else (0, 0)
    h1, w1 = h + 2 * p1 - k1 + 1, w + 2 * p1 - k1 + 1
    return ConvChainDims(n, c, h, w, f1, h1, w1, f2, h1 + 2 * p2 - k2 + 1,
                         w1 + 2 * p2 - k2 + 1, k1, k1, k2, k2, p1, p1, p2, p2)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 2), c=st.integers(1, 5), h=st.integers(5, 13), w=st.integers(5, 13),
       f1=st.integers(1, 9), f2=st.integers(1, 4), ks=st.sampled_from([(3, 1), (1, 3), (3, 3)]),
       same=st.booleans(), th=st.integers(1, 6), tw=st.integers(1, 6), tf=st.integers(1, 9))
def test_volume_closed_form_matches_block_walk(n, c, h, w, f1, f2, ks, same, th, tw, tf):
    """The closed form (per-axis sums of clipped patches, weights once with one f-block)
    equals the count of tile changes along the block nest (n, ty, tx, f-block | c, g)."""
    d = _dims(n, c, h, w, f1, f2, *ks, same)
    t = ConvTiles(th, tw, tf)
    assert fused_volume(d, t) == simulate_volume(d, t)


def test_recomputation_flops():
    """1x1 -> 3x3 'same' recomputes the first convolution on (TH+2) x (TW+2) per tile;
    3x3 -> 1x1 recomputes nothing (vector width 1: no padding)."""
    d = _dims(1, 4, 12, 12, 6, 5, 1, 3, True)
    t = ConvTiles(4, 6, 6)
    first = 2 * 4 * 1 * 6 * 6 * (6 * 8)        # 3 x 2 tiles, each 6 x 8 pixels
    second = 2 * 6 * 9 * 5 * 144
    assert fused_flops(d, t) == first + second
    assert fused_flops(d, t) > unfused_flops(d)
    d2 = _dims(1, 4, 12, 12, 6, 5, 3, 1, True)
    assert fused_flops(d2, ConvTiles(4, 6, 6)) == unfused_flops(d2)


LEVELS = [("L1", 2 * 1024), ("L2", 24 * 1024), ("L3", 256 * 1024)]


@pytest.mark.parametrize("dims", [
    _dims(1, 4, 9, 10, 6, 5, 3, 1, True), _dims(2, 3, 11, 7, 8, 4, 1, 3, True),
    _dims(1, 5, 12, 12, 7, 6, 3, 3, False)])
def test_planner_matches_brute_force(dims):
    """The planner's candidates (TH <= 64, TW the row or a power of two, TF the whole or a
    multiple of the register rows) against every integer tile: the planner's predicted
    time is within 5% of the brute-force optimum; both blocks fit the home level (L2)."""
    from polycomp.hw.target import get_target
    rates = MachineRates.for_target(get_target("cpu-avx2"))
    plan = best_fused_tiles(dims, LEVELS, rates, 2, 8)
    best, cost = brute_force_tiles(dims, LEVELS, rates, 2, 8)
    cap = 24 * 1024 // 4
    assert fused_usage(dims, plan) <= cap and fused_usage(dims, best) <= cap
    mine = decide(dims, LEVELS, rates, 2, 8, plan).fused_time
    assert cost <= mine and mine[0] <= 1.05 * cost[0]


def test_cost_rule_counts_recomputation():
    """Same shapes, same traffic rules: a 1x1 -> 3x3 chain pays the halo in FLOPs; when the
    machine computes fast and moves slowly (memory bound), fusion wins anyway."""
    d = _dims(1, 8, 40, 40, 8, 8, 1, 3, True)
    slow_mem = MachineRates(flops=1e6, into=(("L2", 1.0), ("L3", 0.1)))
    fast_mem = MachineRates(flops=1.0, into=(("L2", 1e6), ("L3", 1e6)))
    lv = [("L2", 64 * 1024), ("L3", 1024)]    # an L3 too small for T: it moves unfused
    assert decide(d, lv, slow_mem, 2, 8).fuse
    assert not decide(d, lv, fast_mem, 2, 8).fuse
