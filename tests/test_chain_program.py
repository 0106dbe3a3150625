"""The fused chain programs of the CPU targets (scheduler/chain/program.py, online.py,
conv_program.py, local.py; hw/cpu/local_tile.py): what the trees carry (tile-local
records, micro-kernel marks), that isl's legality check of the online program is
meaningful, and that code generation realises the marks (per-thread tile buffers,
micro-kernels) — the kernels' numbers are checked in test_chain_fused.py and
test_conv_chain.py."""
import dataclasses
import os
from unittest import mock

import chain_kernels as ck
import islpy as isl
import pytest

from polycomp import ir
from polycomp.driver import compile_kernel
from polycomp.hw.target import get_target
from polycomp.islutil import maps
from polycomp.scheduler.chain.conv_plan import FORCE_ENV, TILES_ENV
from polycomp.scheduler.chain.local import local_tiles
from polycomp.scheduler.chain.online import online_softmax
from polycomp.scheduler.chain.plan import chain_plans
from polycomp.scheduler.chain.tree import ChainFusePass, plan_for
from polycomp.scheduler.common.tree import is_legal
from polycomp.scheduler.cpu import tree as T
from polycomp.state import CompileState

_T = get_target("cpu-avx512").with_capacities(L1=32 * 1024, L2=1024 * 1024)
TARGET = dataclasses.replace(_T, cpu=dataclasses.replace(_T.cpu, threads=2))


def _const(e) -> int | None:
    return int(e.value) if isinstance(e, ir.IntImm) else None


def test_bmm_program_tile_is_one_local_buffer():
    """Without a softmax: the model's statements; T's tile is one TM x TL record (the
    batch dimension of the box is 1) below the l tiles; both products carry
    micro-kernel marks; the tiles are whole register tiles (TL a multiple of NR)."""
    model = ck.bmm_chain.polyhedral_model()
    state = CompileState(model, TARGET, {})
    sched = ChainFusePass().run(model.initial_schedule, state)
    (prog,) = chain_plans(state).programs
    plan, _ = plan_for(state)
    assert prog.model is None and not prog.new
    assert {s.name for s in prog.statements} == {s.name for s in model.statements}
    (tile,) = [t for rec in local_tiles(state).records for t in rec]
    assert [a.name for a in tile.arrays] == ["T"]
    assert [_const(x) for x in tile.sizes] == [1, plan.tm, plan.tl]
    assert plan.tl % plan.nr == 0 and plan.tm % plan.mr == 0
    assert sched.to_str().count("cpu_microkernel") == 2


def test_online_program_statements_and_a_wrong_order_is_caught():
    """With a softmax: the online program drops the softmax's exponential, quotient and
    the second update for its own statements; isl derives its dependences from the
    reference order, the fused tree satisfies them, and a tree that runs the saved max
    after the max updates of the tile (a wrong rescaling) violates them."""
    model = ck.causal_attention.polyhedral_model()
    state = CompileState(model, TARGET, {})
    plan, _ = plan_for(state)
    prog = online_softmax(plan.match, model, plan.tl)
    kept = {s.name for s in prog.kept}
    assert "S_exp" not in kept and "S" not in kept and "O_update" not in kept
    assert {"S_max_update", "S_sum_update", "T_update", "Sc"} <= kept
    assert set(prog.new) == {"S_max_save", "S_max_rescale", "S_sum_rescale", "S_exp_online",
                             "O_rescale", "O_update_online", "O_normalise"}
    deps = prog.model.dependences
    assert is_legal(prog.reference, deps)
    ChainFusePass().run(model.initial_schedule, state)
    assert is_legal(chain_plans(state).programs[0].schedule, deps)
    # swap save and the max update in the reference order: illegal
    domain, tree = T.from_schedule(prog.reference)
    seq = tree.child.children[2].child.child          # the tile's sequence
    names = [T.statements_of(f.filter) for f in seq.children]
    i, j = names.index(["S_max_save"]), names.index(["S_max_update"])
    seq.children[i], seq.children[j] = seq.children[j], seq.children[i]
    assert not is_legal(T.to_schedule(domain, tree), deps)


def test_online_dependences_join_the_model():
    """The online program's statements' dependences join the model's (lowering's loop
    coincidence reads them): O_update_online carries its reduction over l."""
    model = ck.bmm_softmax_chain.polyhedral_model()
    state = CompileState(model, TARGET, {})
    ChainFusePass().run(model.initial_schedule, state)
    names = {m.get_tuple_name(isl.dim_type.in_) for m in maps(model.flow)}
    assert {"O_update_online", "S_max_save", "S_exp_online"} <= names


@pytest.mark.parametrize("target", ["cpu-avx2", "cpu-avx512"])
def test_codegen_realises_the_marks(target):
    """The compiled chain: T's tile is a per-thread buffer of TM x TL floats (the slot
    dimensions contracted), the row statistics are stack arrays, both products run the
    register-tile micro-kernel, no global temporary of the chain's extents is left."""
    c = compile_kernel(ck.causal_attention, target)
    plan, _ = plan_for(c.state)
    assert c.final_ir.counts.microkernels >= 2
    allocs = {}
    ir.walk(c.final_ir.body, lambda n: allocs.setdefault(n.buffer.name, n.buffer)
            if isinstance(n, ir.Allocate) else None)
    tile = next(b for n, b in allocs.items() if n.startswith("T_tile"))
    assert [_const(x) for x in tile.shape] == [1, plan.tm, plan.tl]
    rows = [b for n, b in allocs.items() if n.endswith("_row")]
    assert len(rows) == 4 and all(b.scope == "local" for b in rows)
    assert not {"T", "Sc", "S", "S_exp", "S_max", "S_sum"} & set(allocs)


def test_conv_program_tiles_and_symbolic_sizes():
    """The conv program: its statements replace the model's; the input patch's im2col
    buffer has one dimension over all input channels C (a symbolic size), the
    accumulator one over F2; T's tile and the stages' arrays share one buffer."""
    model = ck.conv3_bias_relu_conv1.polyhedral_model()
    state = CompileState(model, TARGET, {})
    from polycomp.scheduler.chain.conv_tree import ConvChainFusePass
    with mock.patch.dict(os.environ, {FORCE_ENV: "force", TILES_ENV: "4x8x6"}):
        ConvChainFusePass().run(model.initial_schedule, state)
    (prog,) = chain_plans(state).programs
    assert not {s.name for s in model.statements} & set(prog.new)
    recs = {t.name: t for rec in local_tiles(state).records for t in rec}
    xcol, acc, tile = recs["X_col"], recs["O_acc"], recs["T_tile"]
    assert [a.name for a in tile.arrays] == ["T_tile", "Bi_tile", "R_tile"]
    assert [_const(x) for x in tile.sizes] == [1, 1, 1, 6, (4 + 0) * 8]
    sym = [x for x in xcol.sizes if _const(x) is None]
    assert len(sym) == 1 and {v.name for v in ir.free_vars(sym[0])} == {"C"}
    assert [_const(x) for x in xcol.sizes[4:]] == [3, 3, 32]
    assert {v.name for x in acc.sizes for v in ir.free_vars(x)} == {"F2"}


def test_conv_codegen_realises_the_marks():
    c = None
    with mock.patch.dict(os.environ, {FORCE_ENV: "force"}):
        c = compile_kernel(ck.conv1_relu_conv3, "cpu-avx512")
    assert chain_plans(c.state).programs and c.final_ir.counts.microkernels >= 2


@pytest.mark.parametrize("group,shape", [("attention", (2, 70, 16)),
                                         ("bmm", (1, 37, 21, 16, 70))])
def test_constant_shapes_with_a_column_tail(group, shape):
    """Constant extents whose L is no multiple of the register block's columns (70 = 64 +
    6 on AVX-512, 4 x 16 + 6 on AVX2): the last 6 columns of T are register tiles of
    their own, in the micro-kernel too; the kernel still matches numpy."""
    import math

    import numpy as np

    from polycomp.benchmarks import chains
    from polycomp.hw.cpu.build import CFunction, build_shared
    from polycomp.hw.cpu.simd_build import AVX512_FLAGS, build_simde, has_native_avx512
    k = chains._kernel(group, shape)
    c = compile_kernel(k, "cpu-avx512")
    assert chain_plans(c.state).programs and c.final_ir.counts.microkernels >= 3
    lib = build_shared(c.source, flags=AVX512_FLAGS) if has_native_avx512() \
        else build_simde(c.source)
    rng = np.random.default_rng(0)
    if group == "attention":
        b, s, d = shape
        xs = [rng.standard_normal(x).astype(np.float32) for x in ((b, s, d), (b, d, s),
                                                                  (b, s, d))]
        ref = chains._np_softmax((xs[0] @ xs[1]) * np.float32(1 / math.sqrt(d))) @ xs[2]
    else:
        b, m, n, kk, ll = shape
        xs = [rng.standard_normal(x).astype(np.float32)
              for x in ((b, m, kk), (b, kk, ll), (b, ll, n))]
        ref = (xs[0] @ xs[1]) @ xs[2]
    np.testing.assert_allclose(CFunction(c.final_ir, lib)(*xs), ref, rtol=2e-4, atol=2e-4)
