"""UB bank conflicts in the NPU simulator and the bank placement pass (``npu-ub-banks``),
and the vector work of row reductions and layernorm (halving folds, one op per node,
hoisted row-vector casts, FusedMulAdd): docs/npu.md.

The conflict rule and the eight scenarios are the asc-devkit sample ``bank_conflict_ub``
(dav-2201, A2/A3): an ``Add`` of 4096 fp32 values, its three operands at the addresses
below; the sample classifies each placement as conflicting or not."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import compile_kernel
from polycomp.frontend.ops import binary_kernel, layernorm_kernel, reduce_kernel
from polycomp.hw.npu import isa
from polycomp.hw.npu.backend import simulate
from polycomp.hw.npu.program import Loop, VecCall, VecOp, walk
from polycomp.hw.npu.vector_ops import _idx_rep, bank_conflicts


def _fake_core():
    return SimpleNamespace(chip=SimpleNamespace(report=SimpleNamespace(
        bank_conflict_cycles={})))


# scenario: (src0, src1, dst, src0 (block stride, repeat stride), conflict kind or None)
SCENARIOS = {
    1: (0x0, 0x10100, 0x20000, (1, 8), None),
    2: (0x0, 0x4000, 0x10000, (1, 8), "read-read"),        # same bank
    3: (0x0, 0x10000, 0x14100, (1, 8), "read-read"),       # same bank group
    4: (0x0, 0x10100, 0x4000, (1, 8), None),               # the delayed write
    5: (0x0, 0x10100, 0x4020, (1, 8), "read-write"),
    6: (0x0, 0x10100, 0x10100, (1, 8), None),              # dst on src1
    7: (0x0, 0x10100, 0x10100, (0, 1), "read-read"),       # one block, stride 1
    8: (0x0, 0x10100, 0x10100, (0, 8), None),              # one block, stride 8
}


@pytest.mark.parametrize("n", sorted(SCENARIOS))
def test_bank_conflict_scenarios_of_the_sample(n):
    src0, src1, dst, (blk, rep), kind = SCENARIOS[n]
    core = _fake_core()
    full = _idx_rep(0, 1, 8, 64, 64, 8)                  # 64 repeats of 64 floats
    s0 = _idx_rep(0, blk, rep, 64, 64, 8)
    extra = bank_conflicts(core, [(dst, 4, full, False), (src0, 4, s0, rep == 0),
                                  (src1, 4, full, False)], 64)
    got = core.chip.report.bank_conflict_cycles
    if kind is None:
        assert extra == 0 and not got
    else:
        assert extra > 0 and got[kind] > 0
        assert all(v == 0 for k, v in got.items() if k != kind)
    if n == 7:                                           # every other repeat collides
        assert extra == 32


def test_count_form_with_the_same_block_twice_reads_once():
    core = _fake_core()
    i = np.arange(640)                                   # 10 repeats, first-n form
    # the same tile read by both sources: one read a block (an assumption, docs)
    assert bank_conflicts(core, [(0x20000, 4, i, False), (0, 4, i, False),
                                 (0, 4, i, False)], 64) == 0
    # sources 512 bytes apart: the same half of the groups on every repeat
    assert bank_conflicts(core, [(0x20000, 4, i, False), (0, 4, i, False),
                                 (512, 4, i, False)], 64) == 10


def _add(opts: dict, shape=(96, 1000)):
    ck = compile_kernel(binary_kernel("add", "none", "float32"), "npu", opts)
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    out, rep = simulate(ck, x, y)
    np.testing.assert_array_equal(out, x + y)
    return ck, rep


def test_placement_removes_the_read_read_conflicts_of_two_inputs():
    """Two fp32 input tiles of equal size with two copies each sit 2S apart, the same
    half of the bank groups: every repeat of the Add collides.  The placement puts them
    256 bytes apart modulo 512."""
    _, seq = _add({"ub_banks": False})
    ck, placed = _add({})
    assert seq.bank_conflict_cycles.get("read-read", 0) > 0
    assert placed.bank_conflict_cycles.get("read-read", 0) == 0
    assert placed.busy["V"] < seq.busy["V"]
    a = {k.split("@")[0]: v[1] for k, v in placed.addresses.items()}
    assert a["ub0"] % 512 != a["ub1"] % 512
    # the printed addresses follow the placement (the phase modulo 512)
    assert "(256 + 512 - PcAlignUp(" in ck.source


def test_placement_without_the_model_changes_nothing_but_addresses():
    ck, rep = _add({}, (7, 37))                          # odd shape, tails
    ck0, rep0 = _add({"ub_banks": False}, (7, 37))
    assert rep.instructions == rep0.instructions


def test_conflicts_cost_cycles_only_with_the_model(monkeypatch):
    from polycomp.hw.npu import target as npu_target
    ck = compile_kernel(binary_kernel("add", "none", "float32"), "npu", {"ub_banks": False})
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal((96, 1000)).astype(np.float32) for _ in range(2))
    _, on = simulate(ck, x, y)
    spec = npu_target.SPECS["npu"]
    monkeypatch.setitem(npu_target.SPECS, "npu", dataclasses.replace(
        spec, params=dataclasses.replace(spec.params, ub_bank_conflicts=False)))
    _, off = simulate(ck, x, y)
    assert off.bank_conflict_cycles == {} and on.busy["V"] > off.busy["V"]


# --------------------------------------------------------------- row reductions

WIDTHS = (63, 65, 129, 193, 320, 321, 577, 1089, 2113, 4160, 4161)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_halving_row_reductions_match_numpy(dtype, op, monkeypatch):
    """Every tile halves (the threshold at 0 rows), so each width's first fold, its
    later folds and the last folds from the row or the temporary all run."""
    monkeypatch.setattr(isa, "_HALVE_ROWS", 0)
    ck = compile_kernel(reduce_kernel(op, 1, dtype), "npu")
    rng = np.random.default_rng(3)
    for d in WIDTHS:
        x = rng.standard_normal((3, d)).astype(dtype)
        if op == "max":
            x[1, d // 2] = np.nan                        # a NaN row stays NaN
        out, _ = simulate(ck, x)
        ref = x.astype(np.float64).sum(1) if op == "sum" else x.max(1)
        tol = 1e-4 * np.sqrt(d) if dtype == "float32" else 2e-2 * np.sqrt(d)
        np.testing.assert_allclose(out.astype(np.float64), ref, atol=0 if op == "max"
                                   else tol, err_msg=f"{op} {dtype} width {d}")


def test_halving_chosen_for_long_or_few_rows():
    ck = compile_kernel(reduce_kernel("sum", 1, "float32"), "npu")
    calls = [s for s in walk(ck.final_ir.program.phases[0].aiv.body)
             if isinstance(s, VecCall)]
    assert any(c.api == "Add" and c.count is not None for c in calls)     # halving
    loops = [s.var for s in walk(ck.final_ir.program.phases[0].aiv.body)
             if isinstance(s, Loop)]
    assert "rh" in loops and "rs" in loops               # both forms, host's choice


def test_bank_pitch_pads_rows_to_an_odd_multiple_of_256_bytes():
    from polycomp.hw.npu.lower_vector import bank_pitch
    assert bank_pitch(1024, 4) == 1088 and bank_pitch(1008, 4) == 1088
    assert bank_pitch(512, 4) == 576 and bank_pitch(2048, 2) == 2176
    assert bank_pitch(1088, 4) == 1088                   # already odd
    assert bank_pitch(272, 4) == 272                     # 1 088 -> 1 280 B: over 1/8
    assert bank_pitch(48, 4) == 48                       # one repeat a row
    assert bank_pitch(4096, 4) == 4096                   # over 255 blocks: row by row
    assert bank_pitch(1024, 0) == 1024                   # no CP tile
    for cp in range(16, 2048, 16):
        for isz in (2, 4):
            p = bank_pitch(cp, isz)
            assert p >= cp and p % 16 == 0 and 8 * (p - cp) <= cp
            assert p == cp or (p * isz) % 512 == 256


@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_column_fold_of_two_accumulators_matches_numpy(op, dtype, monkeypatch):
    """The column fold (forced: the halving threshold raised past any tile): even
    chunks into one accumulator, odd ones into the other, added at the end; widths of
    1 to 18 chunks with tails, a NaN."""
    monkeypatch.setattr(isa, "_HALVE_ROWS", 10 ** 6)
    ck = compile_kernel(reduce_kernel(op, 1, dtype), "npu")
    rng = np.random.default_rng(5)
    for d in (1, 63, 64, 65, 128, 129, 192, 193, 257, 1000, 1089):
        x = rng.standard_normal((13, d)).astype(dtype)
        if op == "max":
            x[4, d // 2] = np.nan
        out, _ = simulate(ck, x)
        ref = x.astype(np.float64).sum(1) if op == "sum" else x.max(1)
        tol = 1e-4 * np.sqrt(d) if dtype == "float32" else 2e-2 * np.sqrt(d)
        np.testing.assert_allclose(out.astype(np.float64), ref, atol=0 if op == "max"
                                   else tol, err_msg=f"{op} {dtype} width {d}")


def test_column_fold_reads_no_half_twice():
    """Rows of 1 000 fp32 (padded to 1 088: 4 352 B, an odd multiple of 256), 10 rows a
    tile: with the placement neither accumulator shares a half of the bank groups with
    the chunk it adds (no read-read conflict); the final add of the two accumulators
    pays read-write ones (its delayed write meets the other accumulator's half)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((480, 1000)).astype(np.float32)
    reps = {}
    for name, opts in (("placed", {}), ("sequential", {"ub_banks": False})):
        ck = compile_kernel(reduce_kernel("sum", 1, "float32"), "npu", opts)
        out, reps[name] = simulate(ck, x)
        np.testing.assert_allclose(out, x.astype(np.float64).sum(1), atol=1e-3)
    placed, seq = reps["placed"], reps["sequential"]
    assert placed.bank_conflict_cycles.get("read-read", 0) == 0
    assert seq.bank_conflict_cycles.get("read-read", 0) > 0
    assert placed.busy["V"] < seq.busy["V"]


# --------------------------------------------------------------- layernorm

def _ln_ref(x, g, b):
    x = x.astype(np.float64)
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * g.astype(np.float64) + b.astype(np.float64)


@pytest.mark.parametrize("shape", [(7, 37), (3, 2049), (2, 4096), (1, 1)])
def test_layernorm_matches_numpy(shape):
    rng = np.random.default_rng(4)
    for dt, tol in (("float16", 1e-2), ("float32", 1e-5)):
        ck = compile_kernel(layernorm_kernel(dt), "npu")
        x = (rng.standard_normal(shape) + 3).astype(dt)
        g, b = (rng.standard_normal(shape[1]).astype(dt) for _ in range(2))
        out, _ = simulate(ck, x, g, b)
        np.testing.assert_allclose(out.astype(np.float64), _ln_ref(x, g, b), atol=tol,
                                   rtol=tol)


def test_layernorm_vector_ops():
    """x is cast to fp32 once, the casts of gamma and beta run before the tile loop,
    ``* gamma + beta`` is one FusedMulAdd."""
    ck = compile_kernel(layernorm_kernel("float16"), "npu")
    prog = ck.final_ir.program.phases[0].aiv
    whole = next(s for s in walk(prog.body) if isinstance(s, Loop) and s.var == "ls")
    tile_loop = next(s for s in walk(whole.body) if isinstance(s, Loop) and s.var == "i")
    in_tile = [s for s in walk(tile_loop.body) if isinstance(s, VecCall)]
    x_tile = next(s for s in in_tile if s.api == "Cast").srcs[0].buf.name
    assert sum(1 for s in in_tile if s.api == "Cast" and s.srcs[0].buf.name == x_tile) == 1
    assert any(s.api == "FusedMulAdd" for s in in_tile)
    before = [s for s in walk(whole.body) if isinstance(s, VecCall) and s.api == "Cast"
              and s.dst.buf.layout == "ROW"]
    assert len(before) == 2 and not any(s.api == "Cast" and s.dst.buf.layout == "ROW"
                                        for s in in_tile)
    assert not any(isinstance(s, VecOp) for s in walk(prog.body))


_N, _M = pc.sym("N M")


@pc.tensor_expr
def _fma(a: pc.Tensor[(_N, _M), "float32"], b: pc.Tensor[(_N, _M), "float32"],
         c: pc.Tensor[(_M,), "float32"]):
    return pc.compute((_N, _M), lambda i, j: (a[i, j] * 2.0) * b[i, j] + c[j],
                      name="fma_out")


def test_fused_mul_add_of_a_computed_factor_matches_numpy():
    """``(a * 2) * b + c``: the product of a computed tile and a loaded one, plus a row
    vector, is one FusedMulAdd (in place in the computed tile); odd shapes."""
    ck = compile_kernel(_fma, "npu")
    prog = ck.final_ir.program.phases[0].aiv
    whole = next(s for s in walk(prog.body) if isinstance(s, Loop) and s.var == "ls")
    calls = [s for s in walk(whole.body) if isinstance(s, VecCall)]
    assert any(s.api == "FusedMulAdd" for s in calls)      # the whole-row form
    assert not any(s.api == "Mul" and all(hasattr(x, "buf") for x in s.srcs)
                   for s in calls)
    rng = np.random.default_rng(5)
    for n, m in ((7, 37), (3, 4099), (1, 1)):
        a, b = (rng.standard_normal((n, m)).astype(np.float32) for _ in range(2))
        c = rng.standard_normal(m).astype(np.float32)
        out, _ = simulate(ck, a, b, c)
        np.testing.assert_allclose(out, (a * 2) * b + c, rtol=1e-6, atol=1e-6)
