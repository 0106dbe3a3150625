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
