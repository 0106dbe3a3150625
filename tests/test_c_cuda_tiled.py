"""CUDA from C: a SCoP's loop nests take the tiled GPU pipeline (multi-level tiling,
block/thread mapping, shared-memory and register promotion) when their outer loops are
coincident, GEMM-like nests the contraction tiling (K tile), and the other nests the
baseline mapping; every path is checked in the GPU-semantics simulator (strict: races
and out-of-bounds accesses raise) against the same C compiled by ``gcc -O0
-ffp-contract=off`` on random data with odd/prime sizes, and every emitted ``.cu`` is
compiled by ``nvcc -arch=sm_80 -cubin``.  The kernels are in tests/c_cuda_cases.py."""
import subprocess

import islpy as isl
import numpy as np
import pytest
from c_cuda_cases import (
    BICG,
    BTBV,
    CASES,
    GEMM,
    GEMM_KJ,
    SCAN3,
    STENCIL,
    SYRK,
    Case,
    arrays_for,
    gcc_reference,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from polycomp.driver import compile_kernel
from polycomp.frontend.c_reader import read_c_kernel
from polycomp.hw.cuda.simulator import simulate
from polycomp.hw.target import get_target
from polycomp.islutil import context
from polycomp.scheduler.gpu.scop_groups import ScopBaselinePass, ScopGroupingPass
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.promotion.record import promotion_state
from polycomp.state import CompileState

_COMPILED: dict = {}


def compiled(case: Case, options: tuple = ()):
    key = (case.name, options)
    if key not in _COMPILED:
        k = read_c_kernel(case.source)
        _COMPILED[key] = (k, compile_kernel(k, "cuda", dict(options)))
    return _COMPILED[key]


def paths_taken(ck) -> tuple[str, ...]:
    """``tiled:<class>`` or ``baseline`` per kernel, in kernel order."""
    notes = [n for n in ck.state.remarks.get("scop-gpu-groups", [])
             if "tiled GPU pipeline" in n or "baseline mapping" in n]
    out = []
    for k in range(len(notes)):
        if k in gpu_kernels(ck.state).baseline:
            out.append("baseline")
        else:
            assert k in gpu_kernels(ck.state).launches
            out.append("tiled:" + notes[k].split("(")[2].split(")")[0])
    return tuple(out)


def check_against_gcc(case: Case, ck, k, sizes: dict, seed: int):
    arrays = arrays_for(case, sizes, seed)
    want = gcc_reference(case, sizes, arrays)
    got, _ = simulate(ck, *[arrays[a] for a in k.inputs + k.outputs], **case.extra)
    got = got if isinstance(got, tuple) else (got,)
    for name, g in zip(k.outputs, got):
        # same operations in the same order per element, no FMA contraction: bitwise
        np.testing.assert_array_equal(g, want[name], err_msg=f"{case.name}: {name} at {sizes}")


def _sizes(case: Case, base: int) -> dict:
    params = [p for p in case.signature if p not in case.shapes and p not in case.extra]
    primes = (2, 3, 5, 7, 11, 13)
    sizes = {p: base + primes[i] - 2 for i, p in enumerate(params)}
    sizes.update(case.extra)
    return sizes


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_paths_and_results_match_gcc(case):
    k, ck = compiled(case)
    assert paths_taken(ck) == case.paths
    # extent 1, small odd sizes, and sizes over one block tile (64) with partial tiles
    bases = (1, 6) if case.name == "jacobi2d" else (1, 6, 67)
    for base in bases:
        check_against_gcc(case, ck, k, _sizes(case, base), base)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_passes_keep_dependences(case):
    # debug mode checks after every schedule pass that every dependence stays
    # satisfied (it cannot evaluate promotion's extension nodes: promotion off)
    compile_kernel(read_c_kernel(case.source), "cuda", {"promote": False}, debug=True)


@settings(max_examples=6, deadline=None)
@given(ni=st.sampled_from([1, 2, 3, 5, 17, 31, 65]), nj=st.sampled_from([1, 3, 7, 13, 66]),
       nk=st.sampled_from([1, 2, 11, 19, 33]), seed=st.integers(0, 2**16))
def test_gemm_any_sizes(ni, nj, nk, seed):
    k, ck = compiled(GEMM)
    check_against_gcc(GEMM, ck, k, {"NI": ni, "NJ": nj, "NK": nk}, seed)


@settings(max_examples=5, deadline=None)
@given(n=st.sampled_from([1, 2, 5, 17, 65, 70]), m=st.sampled_from([1, 3, 19]),
       seed=st.integers(0, 2**16))
def test_triangular_syrk_any_sizes(n, m, seed):
    k, ck = compiled(SYRK)
    check_against_gcc(SYRK, ck, k, {"N": n, "M": m}, seed)


def test_contraction_is_tiled_and_promoted():
    """gemm from C: 64x64 block tiles with a K tile of 16, A and B tiles in shared
    memory, C in per-thread registers (loaded first: C is in-out), as for a DSL matmul;
    the simulator sees far fewer global loads than the baseline's."""
    k, ck = compiled(GEMM)
    cfg = gpu_kernels(ck.state).tile_configs[0]
    assert (cfg.block, cfg.threads, cfg.k) == ((64, 64), (16, 16), 16)
    levels = {p.array.name: p.level for p in promotion_state(ck.state).promotions}
    # (the one-element alpha is reused by every instance: promoted too)
    assert levels == {"A": "shared", "B": "shared", "C": "registers", "alpha": "shared"}
    c_reg = next(p for p in promotion_state(ck.state).promotions if p.array.name == "C")
    assert any(c.kind == "copy_in" for c in c_reg.copies.values())
    _, base = compiled(GEMM, (("gpu", "baseline"),))
    assert not promotion_state(base.state).promotions and not gpu_kernels(base.state).launches
    sizes = {"NI": 37, "NJ": 41, "NK": 43}
    arrays = arrays_for(GEMM, sizes, 0)
    args = [arrays[a] for a in k.inputs + k.outputs]
    (t_out, t_rep), (b_out, b_rep) = simulate(ck, *args), simulate(base, *args)
    np.testing.assert_array_equal(t_out, b_out)
    assert t_rep.global_bytes_loaded * 4 < b_rep.global_bytes_loaded


def test_k_outside_j_gets_the_same_tiles_and_promotions():
    """gemm written with k outside j (vectorisable along j on a CPU): isl's schedule
    (i, j, k) with the k band sunk below the scaling statement, K-tiled; A and B in
    shared memory, C in registers although S_1's iterators are (i, k, j)."""
    _, ck = compiled(GEMM_KJ)
    assert ck.state.remarks["scop-gpu-groups"][1] == (
        "kernel 0 (loop nest 0): the band below the output band sunk into its statements")
    assert gpu_kernels(ck.state).tile_configs[0].k == 16
    levels = {p.array.name: p.level for p in promotion_state(ck.state).promotions}
    assert levels == {"A": "shared", "B": "shared", "C": "registers"}


def test_split_band_keeps_inner_dependence():
    """scan3: the k loop carries a dependence, so only (p, q) are tiled and mapped; k
    stays a sequential loop inside each thread."""
    k, ck = compiled(SCAN3)
    assert gpu_kernels(ck.state).tile_configs[0].block == (32, 32)
    check_against_gcc(SCAN3, ck, k, {"P": 3, "Q": 35, "R": 7}, 1)


def test_explain_notes_name_each_kernels_path():
    _, ck = compiled(BICG)
    assert ck.state.remarks["scop-gpu-groups"] == [
        "kernel 0 (loop nest 0): tiled GPU pipeline (elementwise): 1 coincident outer "
        "member(s)",
        "kernel 1 (loop nest 1): permutable band interchanged: coincident member(s) [1] "
        "moved outermost",
        "kernel 1 (loop nest 1): tiled GPU pipeline (contraction): 1 coincident outer "
        "member(s); a GEMM-like reduction X[o] += a * b below",
        "kernel 2 (loop nest 2): tiled GPU pipeline (contraction): 1 coincident outer "
        "member(s); a GEMM-like reduction X[o] += a * b below"]
    _, ck = compiled(STENCIL)
    notes = ck.state.remarks["scop-gpu-groups"]
    assert notes[1] == ("kernel 1 (loop nest 1): baseline mapping: its outer loop carries "
                        "a dependence (no coincident band member)")
    assert notes[2] == ("kernel 2 (loop nest 2): coincident band member(s) [0] of "
                        "decreasing loops reversed")
    assert ck.state.remarks["gpu-baseline-mapping"] == [
        "kernel 1: baseline, a single thread (no coincident outer loop)"]


def test_isl_schedule_distributes_a_nest_without_common_parallel_loop():
    _, ck = compiled(BTBV)
    assert ck.state.remarks["scop-gpu-groups"][0] == (
        "isl's scheduler (outer coincidence) chosen: 4 of 4 statements in tiled nests (4 "
        "in contractions), 1 (0) with the input schedule")
    assert not gpu_kernels(ck.state).baseline


@pytest.mark.parametrize("case", [GEMM, BICG, STENCIL], ids=["gemm", "bicg", "stencil"])
def test_isl_scheduler_option_takes_the_same_choice(case):
    """With isl's scheduler the per-nest choice runs on isl's tree (results checked)."""
    k, ck = compiled(case, (("isl_scheduler", True),))
    check_against_gcc(case, ck, k, _sizes(case, 6), 2)


@pytest.mark.nvcc
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_nvcc_compiles(case, tmp_path):
    _, ck = compiled(case)
    cu = tmp_path / "k.cu"
    cu.write_text(ck.source)
    r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "k.cubin"),
                        str(cu)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


# --------------------------------------------------------------------------- goldens

GOLDEN_CASES = [(c, p) for c in (GEMM, BICG, SCAN3, STENCIL, BTBV, GEMM_KJ)
                for p in ("scop-gpu-groups", "gpu-baseline-mapping")]


@pytest.mark.parametrize("case,step", GOLDEN_CASES,
                         ids=[f"{c.name}-{p}" for c, p in GOLDEN_CASES])
def test_pass_golden(case, step, goldens):
    """Tree in / tree out of the two passes that choose each nest's path
    (``tests/golden/c_<case>.<pass>.{in,out}.isl``)."""
    model = read_c_kernel(case.source).polyhedral_model()
    ctx = CompileState(model, get_target("cuda"), {})
    sched = model.initial_schedule
    if step == "gpu-baseline-mapping":
        sched = ScopGroupingPass().run(sched, ctx)
    p = ScopGroupingPass() if step == "scop-gpu-groups" else ScopBaselinePass()

    def same(a, text):
        read = lambda t: isl.Schedule.read_from_str(context(), t)  # noqa: E731
        return read(a.to_str()).plain_is_equal(read(text))
    stored_in = goldens.expected(f"c_{case.name}.{step}.in.isl", sched.to_str(),
                                 lambda s: same(sched, s))
    assert same(sched, stored_in)
    out = p.run(isl.Schedule.read_from_str(context(), stored_in), ctx)
    stored_out = goldens.expected(f"c_{case.name}.{step}.out.isl", out.to_str(),
                                  lambda s: same(out, s))
    assert same(out, stored_out)


@pytest.mark.parametrize("text, private", [
    ("[tx0] -> { [p] -> X[a] : a = tx0 + 16p and 0 <= tx0 < 16 and 0 <= p < 4 }", True),
    ("[tx0] -> { [p] -> X[a] : a = 0 and 0 <= tx0 < 16 and 0 <= p < 4 }", False),
    # the same element at two prefixes (two blocks or two steps of the site's loops)
    ("[tx0] -> { [p] -> X[a] : a = tx0 and 0 <= tx0 < 16 and 0 <= p < 4 }", False),
    ("[tx0, ty0] -> { [p] -> X[a, b] : a = ty0 + 8p and b = tx0 and 0 <= tx0 < 16 "
     "and 0 <= ty0 < 8 and 0 <= p < 4 }", True),
])
def test_private_per_thread(text, private):
    from polycomp.scheduler.promotion.registers import private_per_thread
    assert private_per_thread(isl.Map.read_from_str(context(), text), 0) is private
