"""Fused conv chains (scheduler/chain/conv_*.py, docs/fusion.md "Conv chains") against
numpy: hypothesis-drawn shapes (odd and prime extents, extent 1, one and several tiles
and channel blocks, 'same' and 'valid' padding) through ``c``, AVX2 natively and AVX-512
(natively where the host has it, else SIMDe); the fused tree interpreted; the option off;
golden trees of ``conv-chain-fuse``."""
import dataclasses
import functools
import os
from unittest import mock

import chain_kernels as ck
import islpy as isl
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polycomp.driver import compile_kernel, interpret
from polycomp.hw.cpu.build import DEFAULT_FLAGS, CFunction, build_shared
from polycomp.hw.cpu.simd_build import AVX512_FLAGS, build_simde, has_native_avx512, simde_available
from polycomp.hw.cpu.target import cpu_flags
from polycomp.hw.target import get_target
from polycomp.scheduler.chain.conv_plan import FORCE_ENV, TILES_ENV
from polycomp.scheduler.chain.conv_tree import ConvChainFusePass, conv_plan_for
from polycomp.scheduler.chain.plan import chain_plans
from polycomp.scheduler.common.tree import tree_str, violated_dependences
from polycomp.state import CompileState

HAS_AVX2 = {"avx2", "fma"} <= cpu_flags()
AVX512 = "native512" if has_native_avx512() else "simde" if simde_available() else None
KERNELS = {"conv3_bias_relu_conv1": ck.conv3_bias_relu_conv1,
           "conv1_relu_conv3": ck.conv1_relu_conv3,
           "conv3_conv3_valid": ck.conv3_conv3_valid}
SMALL = "3x5x6"        # several tiles (partial ones at the edges) and channel blocks
CASES = [(k, "c", SMALL) for k in KERNELS]
CASES += [(k, "avx2", t) for k, t in (("conv1_relu_conv3", ""),
                                      ("conv3_bias_relu_conv1", SMALL)) if HAS_AVX2]
CASES += [(k, AVX512, t) for k, t in (("conv1_relu_conv3", SMALL), ("conv3_conv3_valid", ""))
          if AVX512 is not None]


@functools.lru_cache(maxsize=None)
def fused(name: str, path: str, tiles: str):
    target = {"c": "c", "avx2": "cpu-avx2"}.get(path, "cpu-avx512")
    env = {FORCE_ENV: "force", **({TILES_ENV: tiles} if tiles else {})}
    with mock.patch.dict(os.environ, env):
        c = compile_kernel(KERNELS[name], target)
    assert chain_plans(c.state).programs, c.state.remarks
    if path == "simde":
        lib = build_simde(c.source)
    else:
        lib = build_shared(c.source, flags=AVX512_FLAGS if path == "native512" else
                           DEFAULT_FLAGS)
    return CFunction(c.final_ir, lib)


def _inputs(name, n, c, h, w, f1, f2, rng):
    k1 = 1 if name == "conv1_relu_conv3" else 3
    k2 = 1 if name == "conv3_bias_relu_conv1" else 3
    f = np.float32
    xs = [rng.standard_normal((n, c, h, w)).astype(f),
          rng.standard_normal((f1, c, k1, k1)).astype(f)]
    if name == "conv3_bias_relu_conv1":
        xs.append(rng.standard_normal(f1).astype(f))
    xs.append(rng.standard_normal((f2, f1, k2, k2)).astype(f))
    return xs


def _check(out, ref):
    assert out.shape == ref.shape
    assert np.array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_allclose(out, ref, rtol=1e-4,
                               atol=1e-4 * max(1.0, float(np.nanmax(np.abs(ref), initial=0.0))))


spatial = st.one_of(st.sampled_from([1, 2, 5, 7, 13]), st.integers(1, 23))
channels = st.sampled_from([1, 2, 3, 5, 7, 13, 16, 17])


@pytest.mark.parametrize("name,path,tiles", CASES)
@settings(max_examples=5, deadline=None)
@given(n=st.integers(1, 2), c=channels, h=spatial, w=spatial, f1=channels, f2=channels,
       seed=st.integers(0, 2**16))
def test_fused_matches_numpy(name, path, tiles, n, c, h, w, f1, f2, seed):
    if name == "conv3_conv3_valid":          # two 'valid' 3x3 windows need 5 x 5
        h, w = h + 4, w + 4
    xs = _inputs(name, n, c, h, w, f1, f2, np.random.default_rng(seed))
    _check(fused(name, path, tiles)(*xs), ck.conv_reference(name, *xs))


@pytest.mark.parametrize("name,path", [("conv1_relu_conv3", "c"),
                                       ("conv3_bias_relu_conv1", AVX512 or "c")])
def test_nan_inputs_propagate_as_numpy(name, path):
    """A NaN input pixel makes every output whose windows reach it NaN (relu keeps NaN,
    as numpy's maximum); the zero padding of the intermediate stays zero."""
    rng = np.random.default_rng(7)
    xs = _inputs(name, 2, 3, 11, 9, 7, 5, rng)
    xs[0][0, 1, 4, 3] = np.nan
    xs[0][1, 0, 0, 8] = np.nan                     # at a corner: padded windows
    with np.errstate(invalid="ignore"):
        ref = ck.conv_reference(name, *xs)
    assert np.isnan(ref).any() and not np.isnan(ref).all()
    _check(fused(name, path, SMALL)(*xs), ref)


def test_fused_tree_interprets_to_numpy():
    """The fused program's IR (recomputed halos, im2col copies, tile-local buffers)
    computes the chain in the interpreter."""
    rng = np.random.default_rng(3)
    for name in ("conv1_relu_conv3", "conv3_bias_relu_conv1"):
        with mock.patch.dict(os.environ, {FORCE_ENV: "force", TILES_ENV: "2x3x4"}):
            c = compile_kernel(KERNELS[name], "c")
        assert any("tiles: output 2 x 3" in t for t in c.state.remarks["conv-chain-fuse"])
        xs = _inputs(name, 2, 3, 7, 8, 5, 4, rng)
        _check(interpret(c, *xs), ck.conv_reference(name, *xs))


def test_option_off_and_model_off_keep_separate_kernels():
    rng = np.random.default_rng(4)
    xs = _inputs("conv1_relu_conv3", 1, 3, 6, 5, 4, 2, rng)
    with mock.patch.dict(os.environ, {FORCE_ENV: "force"}):
        c = compile_kernel(ck.conv1_relu_conv3, "cpu-avx2", {"chain": False})
    assert not chain_plans(c.state).programs
    with mock.patch.dict(os.environ, {FORCE_ENV: "off"}):
        c2 = compile_kernel(ck.conv1_relu_conv3, "cpu-avx2")
    assert not chain_plans(c2.state).programs
    assert any("keep unfused" in t for t in c2.state.remarks["conv-chain-fuse"])
    for comp in (c, c2):
        f = CFunction(comp.final_ir, build_shared(comp.source))
        _check(f(*xs), ck.conv_reference("conv1_relu_conv3", *xs))


_T = get_target("cpu-avx512").with_capacities(L1=48 * 1024, L2=1024 * 1024,
                                              L3=32 * 1024 * 1024)
TARGET = dataclasses.replace(_T, cpu=dataclasses.replace(_T.cpu, threads=2))


@pytest.mark.parametrize("case", list(KERNELS))
def test_golden_tree(case, goldens):
    """conv-chain-fuse: the program-order tree in, the fused program's tree out (output
    tiles, the im2col copies, register-tiled products with micro-kernel marks, the
    recomputed intermediate in a tile-local buffer), legal for the program's
    dependences (which join the model's)."""
    model = KERNELS[case].polyhedral_model()
    ctx = CompileState(model, TARGET, {})

    def same_as(tree):
        again = isl.Schedule.read_from_str(model.ctx, tree.to_str())
        return lambda text: again.plain_is_equal(isl.Schedule.read_from_str(model.ctx, text))
    tree_in = model.initial_schedule
    stored_in = goldens.expected(f"test_conv_chain_golden/{case}.conv-chain-fuse.in.isl",
                                 tree_str(tree_in), same_as(tree_in))
    with mock.patch.dict(os.environ, {FORCE_ENV: "force"}):
        sched = ConvChainFusePass().run(isl.Schedule.read_from_str(model.ctx, stored_in), ctx)
    expected = goldens.expected(f"test_conv_chain_golden/{case}.conv-chain-fuse.out.isl",
                                tree_str(sched), same_as(sched))
    assert same_as(sched)(expected), tree_str(sched)
    assert violated_dependences(sched, model.dependences).is_empty()
    assert "conv_chain_fused:0" in sched.to_str() and "cpu_microkernel" in sched.to_str()


def test_model_decides_on_constant_shapes():
    """ResNet-like 56x56x64: 3x3 -> 1x1 (no recomputation, less traffic at equal FLOPs)
    is fused; 1x1 -> 3x3 at 64 channels (halo recomputed, compute bound) is not; the
    explain notes give the figures and the verdict."""
    import polycomp as pc
    from polycomp.frontend import ops

    def chain(k1, p1, k2, p2, f2):
        @pc.tensor_expr
        def kern(X: pc.Tensor[(1, 64, 56, 56), "float32"],
                 W1: pc.Tensor[(64, 64, k1, k1), "float32"],
                 W2: pc.Tensor[(f2, 64, k2, k2), "float32"]):
            t = ops.conv2d_nchw(X, W1, padding=p1, name="T")
            return ops.conv2d_nchw(ops.relu(t, name="R"), W2, padding=p2, name="O")
        return kern
    with mock.patch.dict(os.environ, {FORCE_ENV: ""}):
        a, _ = conv_plan_for(CompileState(chain(3, 1, 1, 0, 256).polyhedral_model(), TARGET, {}))
        b, _ = conv_plan_for(CompileState(chain(1, 0, 3, 1, 64).polyhedral_model(), TARGET, {}))
    assert a is not None and b is not None
    assert a.fuse and a.decision.fused_flops == a.decision.unfused_flops
    assert not b.fuse and b.decision.fused_flops > b.decision.unfused_flops
    assert a.describe()[-1] == "decision: fuse"
    assert b.describe()[-1] == "decision: keep unfused"


def test_benchmark_conv_kernel_is_a_chain_and_its_numpy_peer_agrees():
    """benchmarks/chains.py's conv group: its kernel is a conv chain, and its numpy peer
    (im2col + einsum) and the fused kernel give numpy's reference."""
    from polycomp.benchmarks import chains
    from polycomp.driver import build
    from polycomp.scheduler.chain.conv_detect import detect_conv_chains
    shape = (2, 3, 9, 5, 1, 4, 3)                      # n, C, H=W, F1, k1, F2, k2
    k = chains._kernel("conv", shape)
    (m,) = detect_conv_chains(k.polyhedral_model())
    assert (m.first.kh, m.second.kh, m.second.ph) == (1, 3, 1)
    xs = _inputs("conv1_relu_conv3", 2, 3, 9, 9, 5, 4, np.random.default_rng(5))
    ref = ck.conv_reference("conv1_relu_conv3", *xs)
    peer = chains._np_conv(np.maximum(chains._np_conv(xs[0], xs[1], 0), 0), xs[2], 1)
    _check(peer.astype(np.float32), ref)
    with mock.patch.dict(os.environ, {FORCE_ENV: "force"}):
        _check(build(k, "c")(*xs), ref)
