"""Fused chains (scheduler/chain, docs/fusion.md) against numpy's unfused result:
hypothesis-drawn symbolic shapes (odd, prime, extent 1, more than one ``l`` tile),
through ``c`` and AVX2 natively and AVX-512 (natively where the host has it, else
through SIMDe); causal and additive masks, rows masked in full (NaN, as numpy), NaN
inputs; the fused tree's IR in the interpreter; golden trees of ``chain-fuse``."""
import dataclasses
import functools

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
from polycomp.scheduler.chain.plan import chain_plans
from polycomp.scheduler.chain.tree import ChainFusePass
from polycomp.scheduler.common.tree import tree_str, violated_dependences
from polycomp.state import CompileState

HAS_AVX2 = {"avx2", "fma"} <= cpu_flags()
AVX512 = "native512" if has_native_avx512() else "simde" if simde_available() else None
PATHS = ["c"] + ["avx2"] * HAS_AVX2 + [AVX512] * (AVX512 is not None)
KERNELS = {"bmm_chain": (ck.bmm_chain, 3), "bmm_softmax_chain": (ck.bmm_softmax_chain, 3),
           "causal_attention": (ck.causal_attention, 3),
           "masked_attention": (ck.masked_attention, 3), "mm_relu_chain": (ck.mm_relu_chain, 3),
           "attention_k_rows": (ck.attention_k_rows, 3)}
# each kernel through at least one path; c and the vector paths share the elementwise and
# softmax code, so the vector paths take the kernels whose vector code differs most
CASES = [(k, "c") for k in ("bmm_chain", "bmm_softmax_chain", "masked_attention",
                            "mm_relu_chain")]
CASES += [(k, "avx2") for k in ("bmm_chain", "causal_attention") if HAS_AVX2]
CASES += [(k, AVX512) for k in ("causal_attention", "masked_attention", "attention_k_rows")
          if AVX512 is not None]


@functools.lru_cache(maxsize=None)
def fused(name: str, path: str):
    target = {"c": "c", "avx2": "cpu-avx2"}.get(path, "cpu-avx512")
    ck_ = compile_kernel(KERNELS[name][0], target)
    assert chain_plans(ck_.state).programs, ck_.state.remarks
    if path == "simde":
        lib = build_simde(ck_.source)
    else:
        lib = build_shared(ck_.source, flags=AVX512_FLAGS if path == "native512" else
                           DEFAULT_FLAGS)
    return CFunction(ck_.final_ir, lib)


def _inputs(name, b, m, k, l, n, rng):
    f = np.float32
    if name == "mm_relu_chain":
        xs = [rng.standard_normal(s).astype(f) for s in ((m, k), (k, l), (l, n))]
    elif name == "attention_k_rows":
        xs = [rng.standard_normal(s).astype(f) for s in ((b, m, k), (b, l, k), (b, l, n))]
    else:
        xs = [rng.standard_normal(s).astype(f) for s in ((b, m, k), (b, k, l), (b, l, n))]
    if name == "masked_attention":
        mask = np.where(rng.random((m, l)) < 0.3, -np.inf, 0).astype(f)
        mask[m // 2, :] = -np.inf                      # a row masked in full
        xs.append(mask)
    return xs


def _check(out, ref):
    assert out.shape == ref.shape
    assert np.array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-4 * max(1.0, np.nanmax(np.abs(ref),
                                                                     initial=0.0)))


extent = st.one_of(st.sampled_from([1, 2, 3, 5, 7, 13, 17, 31]), st.integers(1, 230))


@pytest.mark.parametrize("name,path", CASES)
@settings(max_examples=5, deadline=None)
@given(b=st.integers(1, 3), m=extent, k=st.sampled_from([1, 3, 16, 17, 64]), l=extent,
       n=st.sampled_from([1, 5, 16, 33, 64]), seed=st.integers(0, 2**16))
def test_fused_matches_numpy(name, path, b, m, k, l, n, seed):  # noqa: E741
    xs = _inputs(name, b, m, k, l, n, np.random.default_rng(seed))
    _check(fused(name, path)(*xs), ck.reference(name, *xs))


@pytest.mark.parametrize("path", PATHS)
def test_masked_rows(path):
    """Row 0 masked in full -> NaN (numpy: exp(-inf - -inf)); row 1 masked on its first
    150 columns (whole l tiles of -inf, then finite scores) -> finite and equal; row 2 with
    a NaN score -> NaN; row 3 with a +inf score -> NaN (inf - inf)."""
    rng = np.random.default_rng(1)
    b, m, k, l, n = 2, 9, 16, 301, 20
    q, kt, v = (rng.standard_normal(s).astype(np.float32)
                for s in ((b, m, k), (b, k, l), (b, l, n)))
    mask = np.zeros((m, l), np.float32)
    mask[0, :] = -np.inf
    mask[1, :150] = -np.inf
    mask[2, 7] = np.nan
    mask[3, 200] = np.inf
    ref = ck.reference("masked_attention", q, kt, v, mask)
    out = fused("masked_attention", path)(q, kt, v, mask)
    assert np.isnan(ref[:, 0]).all() and np.isfinite(ref[:, 1]).all()
    assert np.isnan(ref[:, 2]).all() and np.isnan(ref[:, 3]).all()
    _check(out, ref)


def test_fused_tree_interprets_to_numpy():
    """The fused program's IR (after the IR passes: tile-local buffers with one slot per
    concurrent iteration) computes the chain in the interpreter."""
    rng = np.random.default_rng(2)
    for kern, name in ((ck.bmm_chain, "bmm_chain"), (ck.causal_attention, "causal_attention")):
        c = compile_kernel(kern, "c")
        assert c.state is not None and any("block order" in t
                                           for t in c.state.remarks.get("chain-fuse", []))
        xs = _inputs(name, 2, 11, 5, 101, 7, rng)
        _check(interpret(c, *xs), ck.reference(name, *xs))


def test_option_off_keeps_separate_kernels():
    c = compile_kernel(ck.bmm_chain, "cpu-avx2", {"chain": False})
    assert not chain_plans(c.state).programs


_T = get_target("cpu-avx512").with_capacities(L1=32 * 1024, L2=1024 * 1024)
TARGET = dataclasses.replace(_T, cpu=dataclasses.replace(_T.cpu, threads=2))


@pytest.mark.parametrize("case", ["bmm_chain", "causal_attention", "mm_relu_chain",
                                  "attention_k_rows"])
def test_golden_tree(case, goldens):
    """chain-fuse: the program-order tree in, the fused program's tree out (row blocks,
    l tiles, register tiles with micro-kernel marks, tile-local buffers; with a softmax
    the online program's statements), legal for the model's dependences and the online
    program's (which join them)."""
    model = KERNELS[case][0].polyhedral_model()
    ctx = CompileState(model, TARGET, {})

    def same_as(tree):
        again = isl.Schedule.read_from_str(model.ctx, tree.to_str())
        return lambda text: again.plain_is_equal(isl.Schedule.read_from_str(model.ctx, text))
    tree_in = model.initial_schedule
    stored_in = goldens.expected(f"test_chain_golden/{case}.chain-fuse.in.isl",
                                 tree_str(tree_in), same_as(tree_in))
    sched = ChainFusePass().run(isl.Schedule.read_from_str(model.ctx, stored_in), ctx)
    expected = goldens.expected(f"test_chain_golden/{case}.chain-fuse.out.isl",
                                tree_str(sched), same_as(sched))
    assert same_as(sched)(expected), tree_str(sched)
    assert violated_dependences(sched, model.dependences).is_empty()
    assert "chain_fused:0" in sched.to_str() and "cpu_microkernel" in sched.to_str()


@pytest.mark.parametrize("path", PATHS)
def test_relu_between_products_keeps_nan(path):
    """``max(NaN, 0)`` is NaN in numpy: a NaN in X makes its row of the intermediate NaN,
    the relu between the products must keep it, and O's row is NaN (issue #14; the
    scalar C printer once wrote ``a > b ? a : b``, which gives 0)."""
    rng = np.random.default_rng(5)
    xs = _inputs("mm_relu_chain", 1, 9, 5, 21, 7, rng)
    xs[0][3, 2] = np.nan
    out = fused("mm_relu_chain", path)(*xs)
    ref = ck.reference("mm_relu_chain", *xs)
    assert np.isnan(ref[3]).all() and np.isnan(out[3]).all()
    _check(out, ref)
