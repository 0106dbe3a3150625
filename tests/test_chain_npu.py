"""Chain fusion on the NPU targets (scheduler/chain/npu_*): the fused cube/vector
program against numpy through the NPU simulator (race-checked: every access of a buffer
by two pipes must be ordered by flags, else NpuRaceError), on hypothesis-drawn shapes
(extent 1, odd and prime extents, several m-, n- and l-blocks), causal and additive
masks (a row masked in full -> NaN, as numpy), NaN inputs; the unfused path with
``chain=False``; each placed flag pair needed; the emitted source; the tree pass's
goldens; the traffic against the unfused phases."""

import dataclasses

import chain_kernels as K
import islpy as isl
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polycomp.driver import compile_kernel
from polycomp.errors import NpuRaceError, OptionError, ResourceLimitError
from polycomp.hw.npu.backend import run_module, simulate, syntax_check
from polycomp.hw.npu.lower import LoweringModel
from polycomp.hw.npu.program import (
    CrossSet,
    CrossWait,
    DataCopyNd2Nz,
    DataCopyPadOut,
    FixpipeCall,
    Loop,
    MmadCall,
    VecCall,
    walk,
)
from polycomp.hw.npu.sync import place_barriers, place_flags, plan_flags, strip_flags
from polycomp.hw.target import get_target
from polycomp.scheduler.chain.npu_detect import NpuChain, detect_npu_chain
from polycomp.scheduler.chain.npu_pass import NpuChainFusePass, chain_plan_of
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.state import CompileState

NAMES = ("bmm_chain", "bmm_softmax_chain", "causal_attention", "masked_attention",
         "mm_relu_chain")
_CK: dict = {}


def _ck(name: str, **opts):
    key = (name, tuple(sorted(opts.items())))
    if key not in _CK:
        _CK[key] = compile_kernel(getattr(K, "npu_" + name + "_f16"), "npu-lite", opts)
    return _CK[key]


def _inputs(name, b, m, k, l, n, seed, nan=False, masked_row=None):  # noqa: E741
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, m, k)).astype(np.float16)
    y = rng.standard_normal((b, k, l)).astype(np.float16)
    z = rng.standard_normal((b, l, n)).astype(np.float16)
    if nan:
        x[0, m // 2, k // 2] = np.nan
    args = [x, y, z]
    if name == "mm_relu_chain":
        args = [x[0], y[0], z[0]]
    if name == "masked_attention":
        mask = np.where(rng.random((m, l)) < 0.3, -np.inf, 0.0).astype(np.float32)
        mask[:, 0] = 0.0
        if masked_row is not None:
            mask[masked_row % m, :] = -np.inf
        args.append(mask)
    return args


def _check(name, out, args):
    ref = K.reference_f16(name, *args)
    a = [v.astype(np.float32) for v in args]
    # fp16 rounding of P (relative 2^-11; the fused P is rounded before its rescaling)
    # and the cube's summation order: a bound per element of |P| . |Z|
    with np.errstate(invalid="ignore"):
        bound = np.nan_to_num(np.abs(ref) + np.abs(a[2]).max() * 1.0, nan=0.0)
    assert out.shape == ref.shape and out.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    ok = ~np.isnan(ref)
    tol = 3e-3 * bound + 1e-3 * np.sqrt(a[0].shape[-1])
    err = np.abs(out - ref)
    assert np.all(err[ok] <= tol[ok]), f"{name}: max error {err[ok].max()}"


def test_detected_and_fused():
    """One mixed kernel of one phase: both products on the cube core, S to the vector
    cores through the GM workspace wsS (Fixpipe), P back through wsP (DataCopyPad, then
    Nd2Nz into L1), P.Z through wsO when a softmax rescales it; each hand-over a cross-
    core flag one way and a "slot free" flag back."""
    for name in NAMES:
        ck = _ck(name)
        ch = detect_npu_chain(ck.state.model)
        assert isinstance(ch, NpuChain) and ch.dtype == "float16", (name, ch)
        k = ck.final_ir.program
        soft = "softmax" in name or "attention" in name
        assert k.kind == "mix" and len(k.phases) == 1
        assert [w.name for w in k.workspaces] == ["wsS", "wsP"] + (["wsO"] if soft else [])
        assert chain_plan_of(ck.schedule, ck.state) is not None
        aic, aiv = k.phases[0].aic, k.phases[0].aiv
        assert aic is not None and aiv is not None
        mm = [s for s in walk(aic.body) if isinstance(s, MmadCall)]
        assert {s.c.buf.name for s in mm} == {"l0S", "l0O"}
        assert not any(isinstance(s, (MmadCall, FixpipeCall)) for s in walk(aiv.body))
        assert {s.dst.tensor.name for s in walk(aic.body) if isinstance(s, FixpipeCall)} \
            == ({"wsS", "wsO"} if soft else {"wsS", "O"})
        assert any(isinstance(s, DataCopyNd2Nz) and s.src.tensor.name == "wsP"
                   for s in walk(aic.body))
        assert any(isinstance(s, DataCopyPadOut) and s.dst.tensor.name == "wsP"
                   for s in walk(aiv.body))
        for prog in (aic, aiv):                     # mode 2: within the AIC's group
            cross = [s for s in walk(prog.body) if isinstance(s, (CrossSet, CrossWait))]
            assert {type(s) for s in cross} == {CrossSet, CrossWait}
            assert {s.mode for s in cross} == {2}
        assert [t.name for t in k.outputs] == ["O"]


@settings(max_examples=10, deadline=None)
@given(name=st.sampled_from(NAMES), b=st.integers(1, 2), m=st.integers(1, 37),
       k=st.integers(1, 40), l=st.integers(1, 53), n=st.integers(1, 41),  # noqa: E741
       seed=st.integers(0, 99), small=st.booleans())
def test_fused_matches_numpy(name, b, m, k, l, n, seed, small):  # noqa: E741
    args = _inputs(name, b, m, k, l, n, seed)
    out, _ = simulate(_ck(name, **({"chain_tiles": (16, 16, 16)} if small else {})), *args)
    _check(name, out, args)


@pytest.mark.parametrize("name", ["bmm_softmax_chain", "causal_attention", "bmm_chain"])
def test_prime_extents_several_blocks(name):
    """Primes: 3 m-blocks, 4 l-blocks, 2 n-blocks of 16 x 16 (TN 32) tiles."""
    args = _inputs(name, 2, 37, 19, 53, 41, 1)
    ck = _ck(name, chain_tiles=(16, 16, 32))
    plan = chain_plan_of(ck.schedule, ck.state)
    assert plan is not None
    t = plan.tiles
    assert 37 > 2 * t.tm and 53 > 2 * t.tl and 41 > t.tn
    _check(name, simulate(ck, *args)[0], args)


def test_extent_one():
    for name in ("bmm_softmax_chain", "masked_attention", "mm_relu_chain"):
        args = _inputs(name, 1, 1, 1, 1, 1, 2)
        _check(name, simulate(_ck(name), *args)[0], args)


def test_fully_masked_row_is_nan_and_nan_input():
    args = _inputs("masked_attention", 2, 23, 9, 37, 17, 3, masked_row=5)
    out = simulate(_ck("masked_attention"), *args)[0]
    assert np.isnan(out[:, 5]).all() and not np.isnan(np.delete(out, 5, axis=1)).any()
    _check("masked_attention", out, args)
    for name in ("bmm_softmax_chain", "causal_attention", "bmm_chain"):
        args = _inputs(name, 1, 19, 7, 29, 5, 4, nan=True)
        out = simulate(_ck(name), *args)[0]
        assert np.isnan(out[0, 9]).all()
        _check(name, out, args)


@pytest.mark.parametrize("softmax", [True, False])
def test_constant_shapes_keep_x_in_l1(softmax):
    """Constant extents (M == L as in self-attention), K held by one L1 stage: X's row
    block is copied once per block of work (the cube core's loop ``i`` over its blocks),
    outside the l loop; 16 x 16 tiles give several blocks of each loop; the numbers are
    numpy's."""
    b, m, k, l, n = 2, 37, 20, 37, 19  # noqa: E741
    ck = compile_kernel(K.const_chain_f16(b, m, k, l, n, softmax, 0.25), "npu-lite",
                        {"chain_tiles": (16, 16, 16)})
    aic = ck.final_ir.program.phases[0].aic
    assert aic is not None
    blocks = next(s for s in aic.body if isinstance(s, Loop) and s.var == "i")
    assert [s.src.tensor.name for s in blocks.body if isinstance(s, DataCopyNd2Nz)] == ["X"]
    assert sum(isinstance(s, DataCopyNd2Nz) and s.src.tensor.name == "X"
               for s in walk(aic.body)) == 1
    rng = np.random.default_rng(9)
    args = [rng.standard_normal(sh).astype(np.float16)
            for sh in ((b, m, k), (b, k, l), (b, l, n))]
    a = [v.astype(np.float32) for v in args]
    t = (a[0] @ a[1]) * np.float32(0.25)
    ref = (K.np_softmax(t) if softmax else t).astype(np.float16).astype(np.float32) @ a[2]
    out = simulate(ck, *args)[0]
    np.testing.assert_allclose(out, ref, rtol=3e-3, atol=3e-3 * (np.abs(ref).max() + 1))


def test_inputs_between_the_products():
    """A batched additive mask (an ND tile per block), a bias along l (a ROW) and a
    scale per row m (a COL) between the products."""
    import polycomp as pc
    from polycomp.frontend import ops

    @pc.tensor_expr
    def masks(Q: pc.Tensor[(K.B, K.M, K.K), "float16"],
              KT: pc.Tensor[(K.B, K.K, K.L), "float16"],
              V: pc.Tensor[(K.B, K.L, K.N), "float16"],
              bm: pc.Tensor[(K.B, K.M, K.L), "float32"], bias: pc.Tensor[(K.L,), "float32"],
              rs: pc.Tensor[(K.M,), "float32"]):
        t = ops.batch_matmul(Q, KT, name="T")
        sc = pc.compute((K.B, K.M, K.L),
                        lambda b, i, j: (t[b, i, j] + bm[b, i, j] + bias[j]) * rs[i], name="Sc")
        s = ops.softmax(sc, axis=-1, name="S")
        p = pc.compute((K.B, K.M, K.L), lambda b, i, j: pc.cast(s[b, i, j], "float16"),
                       name="P")
        return ops.batch_matmul(p, V, name="O")
    ck = compile_kernel(masks, "npu-lite", {"chain_tiles": (16, 16, 16)})
    assert ck.final_ir.program.kind == "mix" and ck.final_ir.program.workspaces
    rng = np.random.default_rng(10)
    b, m, k, l, n = 2, 21, 9, 37, 17  # noqa: E741
    q, kt, v = (rng.standard_normal(sh).astype(np.float16)
                for sh in ((b, m, k), (b, k, l), (b, l, n)))
    bm = rng.standard_normal((b, m, l)).astype(np.float32)
    bias = rng.standard_normal(l).astype(np.float32)
    rs = (rng.random(m) + 0.5).astype(np.float32)
    out = simulate(ck, q, kt, v, bm, bias, rs)[0]
    t = (q.astype(np.float32) @ kt.astype(np.float32) + bm + bias) * rs[:, None]
    ref = K.np_softmax(t).astype(np.float16).astype(np.float32) @ v.astype(np.float32)
    np.testing.assert_allclose(out, ref, rtol=3e-3, atol=3e-3 * (np.abs(ref).max() + 1))


def test_unfused_with_chain_off():
    """chain=False: the phases (cube, vector, cube) with the intermediates in GM; same
    numbers.  Fused, the intermediates still cross GM on A2 (cube and vector cores share
    no buffer), but only through per-block workspaces that stay in L2: the bytes
    crossing HBM drop once the intermediate T outgrows them.  (The causal mask's
    iterator values have no unfused vector mapping: that kernel runs on the NPU only
    fused; the unfused bmm_chain's elementwise phase takes M x L values per row, so it
    gets a small shape on npu-lite.)"""
    for name, shape in (("bmm_softmax_chain", (2, 40, 16, 61, 16)),
                        ("masked_attention", (2, 40, 16, 61, 16)),
                        ("bmm_chain", (2, 13, 11, 29, 9))):
        args = _inputs(name, *shape, 5)
        off = _ck(name, chain=False)
        prog = off.final_ir.program
        assert len(prog.phases) >= 3 and prog.workspaces
        assert "no chain fused: option chain is off" in off.state.notes["npu-chain-fuse"]
        out_off, rep_off = simulate(off, *args)
        out_on, rep_on = simulate(_ck(name), *args)
        _check(name, out_off, args)
        _check(name, out_on, args)
        assert rep_on.hbm_bytes <= rep_off.hbm_bytes
        if name != "bmm_chain":
            assert rep_on.hbm_bytes < 0.95 * rep_off.hbm_bytes


def test_double_buffer_off_and_tile_option():
    args = _inputs("causal_attention", 1, 40, 20, 70, 24, 6)
    for opts in ({"double_buffer": False}, {"chain_tiles": (16, 16, 16)}):
        ck = _ck("causal_attention", **opts)
        _check("causal_attention", simulate(ck, *args)[0], args)
    ck = _ck("causal_attention", chain_tiles=(16, 16, 16))
    plan = chain_plan_of(ck.schedule, ck.state)
    assert plan is not None and (plan.tiles.tm, plan.tiles.tl, plan.tiles.tn) == (16, 16, 16)
    with pytest.raises(ResourceLimitError, match=r"chain_tiles \(64, 64\).*npu-lite"):
        _ck("causal_attention", chain_tiles=(64, 64))
    with pytest.raises(OptionError, match="multiples of 16"):
        _ck("causal_attention", chain_tiles=(24, 16))


@pytest.mark.parametrize("name", ["bmm_chain", "causal_attention"])
def test_each_placed_flag_is_needed(name):
    """Leaving out any one placed set/wait pair of the cube core's or the vector cores'
    program that orders a read after a write (M -> FIX, MTE2 -> MTE1, MTE1 -> M on the
    cube core; MTE2 -> V, V -> MTE3 on the vector cores) makes the simulator report a
    race.  A pair that orders a buffer's reuse two l blocks later (a write after a read,
    carried) may also be implied by the cross-core hand-overs between them (the cube
    core waits for the vector cores' "slot free" flags, and CrossCoreWaitFlag holds
    every pipe of the core on this generation; sync.py sees one program at a time):
    those are the only ones whose removal may go unseen."""
    ck = _ck(name, chain_tiles=(16, 16, 16))
    args = _inputs(name, 2, 40, 37, 40, 40, 7)      # 3 blocks of each loop, 3 k steps
    kernel = ck.final_ir.program
    simulate(ck, *args)
    raced, implied = set(), set()
    for prog in kernel.programs:
        for f in plan_flags(strip_flags(prog.body)):
            def drop(p, f=f, prog=prog):
                if p is not prog:
                    return p
                q = place_flags(p, frozenset({f}))
                return dataclasses.replace(q, body=place_barriers(q.body))
            key = (prog.core, f.src, f.dst, f.carried)
            try:
                run_module(ck.final_ir.with_program(kernel.map_programs(drop)), ck.target,
                           *args)
                implied.add(key)
            except NpuRaceError as e:
                assert f"{f.src}->{f.dst}" in str(e)
                raced.add(key)
    war = {("AIC", "FIX", "M"), ("AIC", "MTE1", "MTE2"), ("AIV", "V", "MTE2"),
           ("AIV", "MTE3", "V")}
    assert all(c and (core, s, d) in war for core, s, d, c in implied), implied
    assert {("AIC", "M", "FIX"), ("AIC", "MTE2", "MTE1"), ("AIC", "MTE1", "M"),
            ("AIV", "MTE2", "V"), ("AIV", "V", "MTE3")} <= \
        {(core, s, d) for core, s, d, c in raced if not c}
    assert ("AIC", "MTE1", "MTE2", True) in raced and ("AIC", "M", "MTE1", True) in raced


def test_each_cross_core_wait_is_needed():
    """Leaving out any one CrossCoreWaitFlag of the fused kernel makes the simulator
    report a race on a GM workspace (the hand-over it orders), a flag counter left set
    at the end, or a counter set past its limit -- never a silent run."""
    ck = _ck("causal_attention", chain_tiles=(16, 16, 16))
    args = _inputs("causal_attention", 2, 40, 37, 40, 40, 7)
    kernel = ck.final_ir.program
    n = 0
    for prog in kernel.programs:
        waits = [s for s in walk(prog.body) if isinstance(s, CrossWait)]
        for w in waits:
            def drop(p, w=w, prog=prog):
                return dataclasses.replace(p, body=_without(p.body, w)) if p is prog else p
            with pytest.raises(NpuRaceError, match="race on GM ws|never waited|saturates"):
                run_module(ck.final_ir.with_program(kernel.map_programs(drop)), ck.target,
                           *args)
            n += 1
    assert n >= 8


def _without(body: tuple, x) -> tuple:
    out = []
    for s in body:
        if s is x:
            continue
        out.append(dataclasses.replace(s, body=_without(s.body, x))
                   if isinstance(s, Loop) else s)
    return tuple(out)


def test_emitted_source(tmp_path):
    """The source is the printer's text of the kernel: one mixed (AIC + 2 AIV) kernel
    function of the arguments, the workspace and the tiling; both products on the cube
    core, the hand-overs through the workspaces with cross-core flags, the online
    softmax's instructions on the vector cores; g++ accepts it against the declarations
    of the Ascend C API the repository carries."""
    ck = _ck("causal_attention")
    src = ck.source
    from polycomp.hw.npu.printer import print_module
    assert src == print_module(ck.final_ir, ck.target)
    assert 'extern "C" __global__ __aicore__ void causal_attention_f16(GM_ADDR Q_, ' \
           "GM_ADDR KT_, GM_ADDR V_, GM_ADDR O_, GM_ADDR workspace, GM_ADDR tiling)" in src
    assert "KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);" in src
    assert src.count("Mmad(") == 2                  # S = X.Y and P.Z
    assert "if ASCEND_IS_AIC {" in src and "if ASCEND_IS_AIV {" in src
    for op in ("Fixpipe<float, float, CFG_ROW_MAJOR>(gwsS[", "DataCopyPad(ubS[",
               "DataCopyPad(gwsP[", "DataCopy(l1P[",
               "Nd2NzParams(", "CrossCoreSetFlag<2, PIPE_FIX>(", "CrossCoreWaitFlag(",
               "CrossCoreSetFlag<2, PIPE_MTE3>(", "ReduceRepeat<ReduceType::MAX>(",
               "ReduceRepeat<ReduceType::SUM>(", "Exp(", "Select(", "Cast(",
               "Brcb(", "SetFlag<HardEvent::MTE3_V>", "GetUserWorkspace(workspace)"):
        assert op in src, op
    vec = [s.api for s in walk(ck.final_ir.program.phases[0].aiv.body)
           if isinstance(s, VecCall)]
    assert vec.count("Exp") == 2                    # alpha and P
    p = tmp_path / "k.cpp"
    p.write_text(src)
    assert "OK" in syntax_check(str(p))


#: case -> (kernel, options, the plan's tiles (TM, TL, TN, k0, KL1))
GOLDEN = {"npu-lite_bmm_chain_f16": ("bmm_chain", {}, (16, 64, 64, 16, 128)),
          "npu-lite_causal_attention_f16": ("causal_attention", {}, (16, 16, 64, 16, 128)),
          "npu_bmm_softmax_chain_f16": ("bmm_softmax_chain", {"target": "npu"},
                                        (32, 256, 256, 16, 128))}


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_golden_tree(case, goldens):
    """npu-chain-fuse: program-order tree in, fused tree out (legal, an ``npu_chain:0``
    mark whose plan in the compile state holds the tiles)."""
    name, opts, tiles = GOLDEN[case]
    model = getattr(K, "npu_" + name + "_f16").polyhedral_model()
    state = CompileState(model, get_target(opts.get("target", "npu-lite")), {})

    def same_as(tree):
        again = isl.Schedule.read_from_str(model.ctx, tree.to_str())
        return lambda text: again.plain_is_equal(isl.Schedule.read_from_str(model.ctx, text))
    tree_in = model.initial_schedule
    stored_in = goldens.expected(f"{case}.npu-chain-fuse.in.isl", tree_in.to_str(),
                                 same_as(tree_in))
    sched = NpuChainFusePass(LoweringModel()).run(
        isl.Schedule.read_from_str(model.ctx, stored_in), state)
    expected = goldens.expected(f"{case}.npu-chain-fuse.out.isl", sched.to_str(),
                                same_as(sched))
    assert same_as(sched)(expected)
    assert violated_dependences(sched, model.dependences).is_empty()
    plan = chain_plan_of(sched, state)
    assert plan is not None and plan.chain.match.name == "T->O"
    t = plan.tiles
    assert (t.tm, t.tl, t.tn, t.k0, t.kl1) == tiles


def test_not_a_chain_keeps_the_phases():
    """A float16 chain without the cast of P (its second product mixes float32 and
    float16) is no NPU chain; the reason is noted."""
    import polycomp as pc
    from polycomp.frontend import ops

    @pc.tensor_expr
    def mixed(X: pc.Tensor[(K.B, K.M, K.K), "float16"], Y: pc.Tensor[(K.B, K.K, K.L), "float16"],
              Z: pc.Tensor[(K.B, K.L, K.N), "float16"]):
        return ops.batch_matmul(ops.batch_matmul(X, Y, name="T"), Z, name="O")
    why = detect_npu_chain(mixed.polyhedral_model())
    assert isinstance(why, str) and "float16" in why
    ck32 = compile_kernel(K.bmm_softmax_chain, "npu-lite")
    assert isinstance(detect_npu_chain(ck32.state.model), NpuChain)   # fp32 cube operands
    rng = np.random.default_rng(8)
    x, y, z = (rng.standard_normal(s).astype(np.float32) for s in
               ((2, 21, 13), (2, 13, 33), (2, 33, 9)))
    np.testing.assert_allclose(simulate(ck32, x, y, z)[0],
                               K.reference("bmm_softmax_chain", x, y, z), rtol=1e-4, atol=1e-4)


def test_cycle_model_declines_a_losing_fusion():
    """Chimera's G11 (batch 1, M=768, K=64, L=384, N=64: 6 blocks of work for 24 cube
    cores) with constant shapes: the A2 cycle model (hw/npu/chain_cost.py) predicts the
    fused program slower than the phased one (the simulator: 0.65x, docs/fusion.md), so
    the chain stays unfused and the note says why; option chain_cost=False fuses it;
    G4 (batch 12: 24 blocks) is fused, with the predicted cycles in its plan."""
    g11 = K.const_chain_f16(1, 768, 64, 384, 64, False)
    ck = compile_kernel(g11, "npu")
    assert chain_plan_of(ck.schedule, ck.state) is None
    assert "keep unfused: the A2 cycle model predicts" in \
        " ".join(ck.state.notes["npu-chain-fuse"])
    assert len(ck.final_ir.program.phases) == 3            # cube / vector / cube
    forced = compile_kernel(g11, "npu", {"chain_cost": False})
    assert chain_plan_of(forced.schedule, forced.state) is not None
    g4 = compile_kernel(K.const_chain_f16(12, 256, 64, 256, 64, True), "npu")
    plan = chain_plan_of(g4.schedule, g4.state)
    assert plan is not None and plan.cycles is not None and plan.cycles[0] < plan.cycles[1]
    # G1 (M == L constant): predicted to lose, but the phased program does not map
    # (two dimensions of T of the same extent), so it is fused rather than refused
    g1 = compile_kernel(K.const_chain_f16(8, 512, 64, 512, 64, False), "npu")
    plan = chain_plan_of(g1.schedule, g1.state)
    assert plan is not None and plan.cycles is not None and plan.cycles[0] > plan.cycles[1]


@pytest.mark.slow
def test_cycle_model_decision_matches_the_simulator():
    """The declined G11 (bmm, batch 1) runs faster phased than fused in the simulator,
    and the fused G4 with a softmax faster fused: the model's choice is the right one
    for both (about a minute)."""
    rng = np.random.default_rng(4)
    for (b, m, k, l, n, sm), fused_wins in (((1, 768, 64, 384, 64, False), False),  # noqa: E741
                                             ((12, 256, 64, 256, 64, True), True)):
        kern = K.const_chain_f16(b, m, k, l, n, sm)
        args = [rng.standard_normal(s).astype(np.float16)
                for s in ((b, m, k), (b, k, l), (b, l, n))]
        cyc = {}
        for cost in (False, True):
            ck = compile_kernel(kern, "npu", {"chain_cost": cost})
            cyc[cost] = simulate(ck, *args)[1].cycles
        fused = cyc[False]
        chosen = cyc[True]
        assert (chosen == fused) == fused_wins
        assert chosen <= fused
