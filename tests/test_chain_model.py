"""Chain detection (scheduler/chain/detect.py) and the data-movement model
(scheduler/chain/movement_model.py): the closed form against brute force."""
import math

import chain_kernels as ck
import pytest

import polycomp as pc
from polycomp.frontend import ops
from polycomp.scheduler.chain.detect import detect_chains, why_not
from polycomp.scheduler.chain.movement_model import (
    ChainDims,
    Tiles,
    analytic_tiles,
    brute_force,
    data_volume,
    fusible,
    memory_usage,
    movement,
    plan_levels,
)

B, M, N, K, L = pc.sym("B M N K L")


@pytest.mark.parametrize("kernel,softmax,n_elementwise,nb", [
    (ck.bmm_chain, False, 0, 1), (ck.bmm_softmax_chain, True, 0, 1),
    (ck.causal_attention, True, 1, 1), (ck.masked_attention, True, 1, 1),
    (ck.mm_relu_chain, False, 1, 0), (ck.attention_k_rows, True, 0, 1)])
def test_detects_chains(kernel, softmax, n_elementwise, nb):
    (m,) = detect_chains(kernel.polyhedral_model())
    assert m.has_softmax == softmax and len(m.elementwise) == n_elementwise
    assert m.batch_dims == nb and m.first.name == "T" and m.second.name == "O"


@pc.tensor_expr
def intermediate_is_output(X: pc.Tensor[(M, K), "float32"], Y: pc.Tensor[(K, L), "float32"],
                           Z: pc.Tensor[(L, N), "float32"]):
    t = ops.matmul(X, Y, name="T")
    return t, ops.matmul(t, Z, name="O")


@pc.tensor_expr
def transposed_second(X: pc.Tensor[(M, K), "float32"], Y: pc.Tensor[(K, L), "float32"],
                      Z: pc.Tensor[(N, L), "float32"]):
    t = ops.matmul(X, Y, name="T")
    lk = pc.reduce_axis(L, "l")
    return pc.compute((M, N), lambda i, j: pc.sum(t[i, lk] * Z[j, lk], axis=lk), name="O")


@pc.tensor_expr
def single_matmul(X: pc.Tensor[(M, K), "float32"], Y: pc.Tensor[(K, L), "float32"]):
    return ops.matmul(X, Y, name="T")


@pytest.mark.parametrize("kernel,reason", [
    (intermediate_is_output, "kernel output"),
    (transposed_second, "operands are not"),
    (single_matmul, "no second contraction")])
def test_no_chain_and_why(kernel, reason):
    model = kernel.polyhedral_model()
    assert detect_chains(model) == []
    assert any(reason in r for r in why_not(model)), why_not(model)


def test_volume_formula_of_the_fused_order():
    """Order (m, l, k | n): DV = (L/TL) M (K+N) + (M/TM) L (K+N) per batch (continuous
    trip counts; with ceil trip counts, whole tiles at the edges move a little more)."""
    d = ChainDims(m=50, n=12, k=9, l=70, batch=3)
    t = Tiles(m=16, n=4, k=4, l=32)
    dv = data_volume(d, ("m", "l", "k", "n"), t, continuous=True)
    expect = 3 * (70 / 32 * 50 * (9 + 12) + 50 / 16 * 70 * (9 + 12))
    assert sum(dv.values()) == pytest.approx(expect)
    assert sum(data_volume(d, ("m", "l", "k", "n"), t).values()) >= expect
    assert memory_usage(t) == max(16 * 4 + 4 * 32 + 16 * 32, 16 * 32 + 32 * 4 + 16 * 4)
    unfused = data_volume(d, ("m", "l", "k", "n"), t, fused=False)
    assert sum(unfused.values()) > sum(dv.values())       # T moves only when unfused


def test_fusible_orders():
    assert fusible(("m", "l", "k", "n")) and fusible(("l", "m", "n", "k"))
    assert not fusible(("m", "k", "l", "n")) and not fusible(("n", "m", "l", "k"))


@pytest.mark.parametrize("dims,cap,alpha", [
    (ChainDims(48, 16, 16, 48), 400, 4),
    (ChainDims(40, 8, 8, 40), 300, 4),
    (ChainDims(64, 16, 16, 64), 1200, 8),
    (ChainDims(30, 5, 7, 60), 500, 2)])
def test_closed_form_matches_brute_force(dims, cap, alpha):
    """Brute force over every fusible order, T_M, T_L in 1..extent and T_K, T_N in
    {alpha, 2 alpha} on the continuous volume: it picks T_K = T_N = alpha and a shared loop
    order, and the closed form T_M = T_L = -alpha + sqrt(alpha^2 + MC) is within 5% of it
    (the integer optimum is not exactly symmetric), both within capacity."""
    sizes = {"m": list(range(1, dims.m + 1)), "l": list(range(1, dims.l + 1)),
             "k": [alpha, 2 * alpha], "n": [alpha, 2 * alpha]}
    best = brute_force(dims, cap, alpha, sizes, continuous=True)
    an = analytic_tiles(dims, cap, alpha)
    star = -alpha + math.sqrt(alpha * alpha + cap)
    assert an.k == an.n == alpha and best.tiles.k == best.tiles.n == alpha
    assert set(best.order[:2]) == {"m", "l"}
    if star <= min(dims.m, dims.l):
        assert an.m == an.l == math.floor(star)
    mv = movement(dims, ("m", "l", "k", "n"), an, continuous=True)
    assert mv.usage <= cap and best.usage <= cap
    assert best.total <= mv.total <= 1.05 * best.total


def test_closed_form_clamps_to_small_extents():
    an = analytic_tiles(ChainDims(m=8, n=64, k=64, l=4096), 12288, 16)
    assert an.m == 8 and an.l > 100 and memory_usage(an) <= 12288


def test_plan_levels_predicts_less_traffic_fused():
    plans = plan_levels(ChainDims(512, 64, 64, 512, batch=8),
                        [("L1", 48 * 1024), ("L2", 1 << 20)], 16, softmax=True)
    assert [p.level for p in plans] == ["L1", "L2"]
    assert all(p.fused < p.unfused for p in plans)
