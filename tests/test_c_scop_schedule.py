"""C SCoPs through the CPU scheduling passes ``scop-gemm``, ``scop-tile`` and
``scop-parallel`` (scheduler/cpu/scop_*.py), checked against the same C compiled by
``gcc -O0 -ffp-contract=off``:

* the interpreted IR of the scheduled kernel (the schedule's order of every operation,
  before vectorisation) equals gcc -O0 within 1e-12 relative (the interpreter sums an
  innermost reduction loop with ``np.sum``, which reassociates; elsewhere it is
  bitwise);
* the built kernel (micro-kernel with FMA, vectorised loops, OpenMP) within 1e-6
  relative;
* golden trees per pass (``tests/golden/test_c_scop_schedule/<case>.<pass>.{in,out}.isl``,
  ``--update-goldens`` rewrites them) on a fixed target, each output checked for
  legality against the model's dependences;
* ``explain`` notes say which passes applied (GEMM or not, tile sizes, parallel loops).

Targets: the notes, sources and golden trees are those of ``TARGET`` (``cpu-avx512`` on
every host: the decisions must not depend on the machine).  Tests whose point is the
schedule (an order, a blocking, a tiling) *build* for ``NATIVE``, the host's widest
native ISA with ``TARGET``'s caches and threads (AVX2 on a host without AVX-512: a
``cpu-avx512`` build there runs through SIMDe, several times slower to compile).  The
SIMDe runs kept here are the AVX-512 builds of the scop-factor and scop-trmm
nests at their default blocks (``test_blocked_factorisation_matches_gcc_o0[lu_like]``,
``test_trmm_blocked_kernel_matches_gcc_o0``); symm's (the same nest as ``symm_like``)
and the triangle's masked 512-bit micro-kernels run in ``tests/test_cpu_triangle.py``.

The kernels are in ``tests/c_scop_kernels/`` (our own, PolyBench-shaped).
"""
from __future__ import annotations

import ctypes
import dataclasses
import re
import subprocess
from pathlib import Path

import islpy as isl
import numpy as np
import pytest

from polycomp.compiled import CompiledKernel
from polycomp.driver import build, compile_kernel, interpret
from polycomp.frontend.c_reader import load_c_kernels
from polycomp.hw.cpu.codegen import PRELUDE_END
from polycomp.hw.target import get_target
from polycomp.lowering.interpreter import statement_instances
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.scheduler.cpu import scop_factor, scop_symm, scop_trmm
from polycomp.scheduler.cpu.scop_factor import ScopFactorPass
from polycomp.scheduler.cpu.scop_gemm import ScopGemmPass, match_scop_gemm
from polycomp.scheduler.cpu.scop_parallel import ScopParallelPass
from polycomp.scheduler.cpu.scop_stencil import ScopStencilPass
from polycomp.scheduler.cpu.scop_symm import ScopSymmPass, match_symm
from polycomp.scheduler.cpu.scop_tile import ScopTilePass
from polycomp.scheduler.cpu.scop_trmm import ScopTrmmPass, match_trmm
from polycomp.state import CompileState

KERNELS = Path(__file__).parent / "c_scop_kernels"

_AVX512 = get_target("cpu-avx512").with_capacities(L1=32 * 1024, L2=1024 * 1024)
TARGET = dataclasses.replace(_AVX512, cpu=dataclasses.replace(_AVX512.cpu, threads=2))
_HOST = get_target("cpu").with_capacities(L1=32 * 1024, L2=1024 * 1024)
#: the host's own vector ISA (AVX2 or AVX-512), otherwise ``TARGET``'s parameters: what
#: the schedule tests build and run (module docstring)
NATIVE = dataclasses.replace(_HOST, cpu=dataclasses.replace(_HOST.cpu, threads=2))

# kernel -> sizes (odd and prime, with full and partial register tiles; one all-ones)
SIZES = {
    "gemm_ikj": [dict(ni=13, nj=67, nk=11), dict(ni=1, nj=1, nk=1),
                 # four row ranges at 2 threads (scop-gemm: MC = 510 fp64 rows,
                 # range_blocking), two a thread: built only
                 dict(ni=1031, nj=35, nk=80)],
    "mm2_f32": [dict(ni=7, nj=37, nk=5, nl=41)],
    "batch_gemm": [dict(nb=3, ni=7, nj=33, nk=5)],
    "gemm_bt": [dict(ni=5, nj=9, nk=7), dict(ni=29, nj=71, nk=13),
                # four row ranges, A read in place (scop_gemm.range_x_in_place): built only
                dict(ni=1031, nj=35, nk=31)],
    "syrk_ab": [dict(n=53, m=17), dict(n=7, m=3), dict(n=1, m=1)],
    "syrk_aa": [dict(n=53, m=17), dict(n=211, m=7), dict(n=41, m=9), dict(n=1, m=1)],
    "gemm_ktri": [dict(ni=23, nj=41)],
    "syr2k_like": [dict(n=59, m=13), dict(n=37, m=5), dict(n=2, m=1)],
    "mvt_t": [dict(n=37), dict(n=1)],
    "lu_like": [dict(n=19)],
    "cholesky_like": [dict(n=19), dict(n=1)],
    "ludcmp_like": [dict(n=17)],
    "lu_nofactor": [dict(n=7)],
    "jacobi2d_like": [dict(tsteps=3, n=17), dict(tsteps=1, n=3)],
    "rowmix": [dict(nr=5, np=43)],
    "seidel_like": [dict(tsteps=5, n=23), dict(tsteps=2, n=3)],
    "trmm_like": [dict(m=13, n=29)],
    "symm_like": [dict(m=11, n=37)],
    "jacobi1d_like": [dict(tsteps=4, n=29), dict(tsteps=1, n=5)],
    "heat3d_like": [dict(tsteps=3, n=11), dict(tsteps=1, n=3)],
    "fdtd2d_like": [dict(tmax=3, nx=13, ny=17), dict(tmax=1, nx=1, ny=1)],
}

#: the most statement instances a size of ``SIZES`` is interpreted at (above: the built
#: kernel only; the interpreter takes ~0.1-0.3 ms an instance, so each kernel whose
#: largest size is above has a size of several register / cache tiles below it)
INTERPRET_MAX = 30_000

#: the time-tiled stencils with their default tiles (sized from the cache:
#: ``scop_stencil.tile_sizes``) at odd and prime extents, and one time step (the small
#: tiles of ``SMALL_TILES`` span many tiles at small sizes)
STENCIL_SIZES = {
    "jacobi1d_like": [dict(tsteps=131, n=1031), dict(tsteps=1, n=3)],
    "jacobi2d_like": [dict(tsteps=19, n=71), dict(tsteps=1, n=3)],
    "seidel_like": [dict(tsteps=17, n=67), dict(tsteps=2, n=3)],
    "heat3d_like": [dict(tsteps=9, n=23), dict(tsteps=1, n=3)],
    "fdtd2d_like": [dict(tmax=13, nx=37, ny=71), dict(tmax=1, nx=1, ny=1),
                    dict(tmax=9, nx=2, ny=41)],
}


def kernel(name: str):
    k, = load_c_kernels(str(KERNELS / f"{name}.c"))
    return k


_LIBS: dict[str, ctypes.CDLL] = {}


def gcc_o0(name: str, tmp_path_factory) -> ctypes.CDLL:
    """The kernel's C file built by ``gcc -O0 -ffp-contract=off``."""
    if name not in _LIBS:
        d = tmp_path_factory.mktemp("gcc")
        so = d / f"{name}.so"
        subprocess.run(["gcc", "-O0", "-ffp-contract=off", "-fPIC", "-shared", "-o", str(so),
                        str(KERNELS / f"{name}.c")], check=True)
        _LIBS[name] = ctypes.CDLL(str(so))
    return _LIBS[name]


def c_params(name: str) -> list[tuple[str, bool]]:
    """``(parameter name, is array)`` in the C signature's order."""
    text = (KERNELS / f"{name}.c").read_text()
    sig = re.search(rf"void\s+{name}\s*\((.*?)\)\s*{{", text, re.S).group(1)
    out = []
    for p in sig.split(","):
        m = re.match(r"\s*(?:const\s+)?\w+\s+(\w+)\s*(\[)?", p)
        out.append((m.group(1), m.group(2) is not None))
    return out


def random_arrays(k, sizes: dict, seed: int) -> dict[str, np.ndarray]:
    from polycomp import dtypes as dt
    from polycomp.shapes import eval_int
    rng = np.random.default_rng(seed)
    f = compile_kernel(k, "c", {"parallel": False}).final_ir
    out = {}
    for name, b in zip(list(k.inputs) + list(k.outputs), list(f.inputs) + list(f.outputs)):
        shape = tuple(eval_int(d, sizes) for d in b.shape)
        a = rng.uniform(0.5, 1.5, size=shape).astype(dt.to_numpy(b.dtype))
        if name == "A" and k.name in ("lu_like", "ludcmp_like", "lu_nofactor"):
            a += np.eye(shape[0], dtype=a.dtype) * shape[0]   # diagonally dominant
        if name == "A" and k.name == "cholesky_like":          # symmetric positive definite
            a = (a @ a.T / shape[0] + np.eye(shape[0])).astype(a.dtype)
        out[name] = a
    return out


def run_gcc(name, lib, sizes, arrays) -> dict[str, np.ndarray]:
    data = {n: a.copy() for n, a in arrays.items()}
    args = [ctypes.c_void_p(data[n].ctypes.data) if arr else ctypes.c_int(sizes[n])
            for n, arr in c_params(name)]
    getattr(lib, name)(*args)
    return data


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_scheduled_kernel_matches_gcc_o0(name, tmp_path_factory, host_compiles):
    k = kernel(name)
    ck = host_compiles.get(name)                 # legality check after every pass
    fn = ck.backend.load(ck)                     # the same code as build(k, "cpu")
    for sizes in SIZES[name]:                    # the sizes are parameters: one compile
        arrays = random_arrays(k, sizes, seed=len(name))
        ref = run_gcc(name, gcc_o0(name, tmp_path_factory), sizes, arrays)
        args = [arrays[n] for n in list(k.inputs) + list(k.outputs)]
        extra = {p: sizes[p] for p in k.params}
        # the schedule's order of operations, interpreted (at the sizes that are cheap
        # to interpret)
        if statement_instances(ck.model, sizes) <= INTERPRET_MAX:
            got = as_tuple(interpret(ck, *args, **extra))
            for n, g in zip(k.outputs, got):
                np.testing.assert_allclose(g, ref[n], rtol=1e-12, atol=0,
                                           err_msg=f"{name} {sizes} {n} (interpreted)")
        # the built kernel (FMA contraction, vector accumulators): 1e-6 relative
        got = as_tuple(fn(*args, **extra))
        for n, g in zip(k.outputs, got):
            np.testing.assert_allclose(g, ref[n], rtol=1e-6, atol=0,
                                       err_msg=f"{name} {sizes} {n}")


@pytest.mark.parametrize("name,sizes", [(n, s) for n, ss in STENCIL_SIZES.items() for s in ss],
                         ids=lambda v: v if isinstance(v, str) else
                         "-".join(f"{a}{b}" for a, b in v.items()))
@pytest.mark.parametrize("target", ["cpu", "c"])
def test_time_tiled_stencil_is_bitwise_gcc_o0(name, sizes, target, tmp_path_factory):
    """``fp_exact``: the time-tiled, parallel wavefront build computes every element with
    the C nest's operations in the C nest's order, so it is bitwise gcc -O0's result
    (NaN edge values included: a NaN spreads through the same elements)."""
    k = kernel(name)
    arrays = random_arrays(k, sizes, seed=7)
    for a in arrays.values():                    # a NaN and a huge value where present
        if a.size > 4:
            a.flat[a.size // 3] = np.nan
            a.flat[a.size // 2] = 1e300
    ref = run_gcc(name, gcc_o0(name, tmp_path_factory), sizes, arrays)
    ck = compile_kernel(k, target, {"fp_exact": True})
    # 1-D on AVX-512: the lifted layout instead of time tiles (lowering/lift.py)
    assert any("time-tiled" in x or "lifted layout" in x
               for x in ck.notes.get("scop-stencil", [])), ck.notes
    args = [arrays[n].copy() for n in list(k.inputs) + list(k.outputs)]
    got = as_tuple(ck.backend.load(ck)(*args, **{p: sizes[p] for p in k.params}))
    for n, g in zip(k.outputs, got):
        w = ref[n]
        assert g.shape == w.shape and np.array_equal(np.isnan(g), np.isnan(w)), n
        ok = ~np.isnan(w)
        assert np.array_equal(g[ok].view(np.uint64), w[ok].view(np.uint64)), \
            f"{name} {sizes} {n}: {int((g[ok] != w[ok]).sum())} elements differ"


# ----------------------------------------------------------------------------- goldens

# case -> (kernel, pass classes run before, the pass under test)
GOLDEN = {
    "gemm_ikj": ("gemm_ikj", [], ScopGemmPass),
    "mm2_f32": ("mm2_f32", [], ScopGemmPass),
    "gemm_bt": ("gemm_bt", [], ScopGemmPass),
    "syrk_aa": ("syrk_aa", [], ScopGemmPass),
    "syr2k_like": ("syr2k_like", [], ScopGemmPass),
    "mvt_t": ("mvt_t", [ScopGemmPass], ScopTilePass),
    "lu_like_factor": ("lu_like", [], ScopFactorPass),
    "cholesky_like_factor": ("cholesky_like", [], ScopFactorPass),
    "ludcmp_like_factor": ("ludcmp_like", [], ScopFactorPass),
    "trmm_like_trmm": ("trmm_like", [], ScopTrmmPass),
    "symm_like_symm": ("symm_like", [], ScopSymmPass),
    "lu_like_tile": ("lu_like", [ScopGemmPass], ScopTilePass),
    "rowmix": ("rowmix", [ScopGemmPass], ScopTilePass),
    "symm_like": ("symm_like", [ScopGemmPass], ScopTilePass),
    "lu_like_parallel": ("lu_like", [ScopGemmPass, ScopTilePass], ScopParallelPass),
    "jacobi2d_like": ("jacobi2d_like", [ScopGemmPass, ScopTilePass], ScopParallelPass),
    "jacobi2d_like_stencil": ("jacobi2d_like", [ScopGemmPass], ScopStencilPass),
    "seidel_like": ("seidel_like", [ScopGemmPass], ScopStencilPass),
    "jacobi1d_like_stencil": ("jacobi1d_like", [ScopGemmPass], ScopStencilPass),
    "heat3d_like_stencil": ("heat3d_like", [ScopGemmPass], ScopStencilPass),
    "fdtd2d_like_stencil": ("fdtd2d_like", [ScopGemmPass], ScopStencilPass),
}


def check_golden_pass(name, before, under_test, tag, goldens):
    """Tree in, tree out of ``under_test`` on kernel ``name`` after the passes
    ``before``: both equal their goldens ``{tag}.{in,out}.isl``, the pass changed the
    tree, and the result violates no dependence; returns (tree in, tree out)."""
    model = kernel(name).polyhedral_model()
    # vector_lift off: on AVX-512 it leaves 1-D stencils untiled (lowering/lift.py)
    ctx = CompileState(model, TARGET, {"vector_lift": False})
    sched = model.initial_schedule
    for p in before:
        sched = p().run(sched, ctx)
    out = under_test().run(sched, ctx)
    tag = f"{tag}.{under_test.name}"
    for suffix, tree in (("in", sched), ("out", out)):
        again = isl.Schedule.read_from_str(model.ctx, tree.to_str())

        def same(text, again=again):
            return again.plain_is_equal(isl.Schedule.read_from_str(model.ctx, text))
        expected = goldens.expected(f"{tag}.{suffix}.isl", tree.to_str(), same)
        assert same(expected), f"{tag} ({suffix}):\n{tree.to_str()}"
    assert not out.plain_is_equal(sched), f"{under_test.name} left {name} unchanged"
    assert violated_dependences(out, model.dependences).is_empty()
    return sched, out


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_golden_tree(case, goldens):
    name, before, under_test = GOLDEN[case]
    check_golden_pass(name, before, under_test, f"test_c_scop_schedule/{case}", goldens)


# ----------------------------------------------------------------------------- decisions


def notes(name: str, options: dict | None = None) -> dict[str, list[str]]:
    """A fresh compile's notes (for tests that monkeypatch a pass first)."""
    return compile_kernel(kernel(name), TARGET, options).notes


class TargetCompiles:
    """The kernels compiled for ``TARGET``, one compile per (kernel, options) shared by
    the tests of this module that only read the result (notes, source, IR counts) or
    build it: a compile is deterministic (``tests/test_determinism.py``), and several
    tests look at the same kernels (syrk, gemm, trmm, ...; 1-12 s of isl each).  Tests
    that monkeypatch a pass compile for themselves (:func:`notes`)."""

    def __init__(self, target=TARGET, debug: bool = False) -> None:
        self._compiled: dict[tuple[str, tuple], CompiledKernel] = {}
        self._target, self._debug = target, debug

    def get(self, name: str, options: dict | None = None) -> CompiledKernel:
        key = (name, tuple(sorted((options or {}).items())))
        ck = self._compiled.get(key)
        if ck is None:
            ck = self._compiled[key] = compile_kernel(kernel(name), self._target, options,
                                                      debug=self._debug)
        return ck

    def notes(self, name: str, options: dict | None = None) -> dict[str, list[str]]:
        return self.get(name, options).notes


@pytest.fixture(scope="module")
def compiles() -> TargetCompiles:
    return TargetCompiles()


@pytest.fixture(scope="module")
def host_compiles() -> TargetCompiles:
    """The kernels compiled for ``cpu`` (this host's ISA) with the legality check after
    every pass, shared by the tests that build them (syrk and syr2k: 5-10 s of isl)."""
    return TargetCompiles("cpu", debug=True)


def test_gemm_detected_in_any_loop_order(compiles):
    n = compiles.notes("gemm_ikj")
    # symbolic rows, 2 threads: row ranges cut at run time (scop_gemm.row_ranges)
    assert any("parallel over row ranges" in x for x in n["scop-gemm"]), n
    assert any("GEMM C += A * B" in x and "register block" in x and "MC=" in x
               for x in n["scop-gemm"]), n
    # row ranges: X read in place when the product is a bare X * Y (range_x_in_place);
    # gemm_ikj's X carries alpha, packed with it
    assert any("packed A (L1)" in x for x in n["scop-gemm"]), n
    m = compiles.notes("mm2_f32")["scop-gemm"]
    assert any("GEMM tmp += A * B" in x and "A read in place, B packed" in x for x in m), m
    assert any("GEMM D += tmp * C" in x and "tmp read in place" in x for x in m), m


def test_gemm_with_batch_dimension(compiles):
    assert any("GEMM C += A * B" in x for x in compiles.notes("batch_gemm")["scop-gemm"])


def test_transposed_operand_is_a_gemm(compiles):
    """``B[j][k]`` (j not the last subscript) is packed in panels along its dimension 0."""
    n = compiles.notes("gemm_bt")
    assert any("GEMM C += A * B" in x for x in n["scop-gemm"]), n
    assert any("A read in place" in x for x in n["scop-gemm"]), n     # range_x_in_place
    assert any("B packed into L2" in x and "along dimension 0" in x for x in n["cpu-pack"]), n
    m = match_scop_gemm([s for s in kernel("gemm_bt").polyhedral_model().statements])
    assert not isinstance(m, str) and m.y.buffer.name == "B"


def test_syrk_triangle_and_one_array_for_both_operands(compiles):
    """syrk: the triangle ``j <= i`` (init and update) is matched; ``A[i][k]`` and
    ``A[j][k]`` are packed each on its own (one reference per packing), and the built
    kernel's micro-kernel reads both packed buffers; syr2k's sum of two products: four
    references, four packings."""
    for name, n_packs in (("syrk_aa", 2), ("syrk_ab", 2), ("syr2k_like", 4)):
        ck = compiles.get(name)
        n = ck.notes
        assert any("(init S_0): GEMM C += " in x for x in n["scop-gemm"]), n
        packs = [x for x in n["cpu-pack"] if "packed into" in x]
        assert len(packs) == n_packs, n
        micro = [ln for ln in ck.source.splitlines() if "mk1_y0 =" in ln or "mk1_x0 =" in ln
                 or "acc1_v0 = _mm512_add_pd(acc1_v0" in ln]
        assert micro and all("_pk" in ln for ln in micro), micro


def test_masked_tile_bounds_are_bound_once(compiles):
    """IR pass ``index-cse`` (lowering/index_cse.py) on syr2k's masked diagonal tiles:
    every lane range reads a bound index variable (``ix<n>``, or one plus or minus a
    constant) instead of the nest of ``max``/``min``/``?:`` over the tile's bounds it
    had once per accumulator vector, and the AVX-512 C stays under 250 KB (366 KB
    without the pass; the AVX2 C 251 -> 154 KB, its gcc -O3 build 24 -> ~9 s of CPU,
    docs/cpu_backend.md)."""
    src = compiles.get("syr2k_like").source
    body = src[src.index("end of the polycomp prelude"):]
    bounds = re.findall(r"_lane_range_p[sd]\(0, ([^;]*?)\);", body)
    assert len(bounds) > 100, len(bounds)
    assert all(re.fullmatch(r"\(?ix\d+( [-+] \d+)?\)?", b) for b in bounds), \
        [b for b in bounds if not re.fullmatch(r"\(?ix\d+( [-+] \d+)?\)?", b)][:3]
    assert len(src) < 250_000, len(src)


def test_reduction_range_varying_with_the_output_is_not_a_gemm():
    """``k <= i``: the reduction range depends on the output row, no micro-kernel."""
    m = match_scop_gemm([s for s in kernel("gemm_ktri").polyhedral_model().statements])
    assert m == "the reduction range depends on the output point", m


def test_tile_and_parallel_notes(compiles):
    n = compiles.notes("mvt_t")
    assert any("tiled 256x32" in x and "innermost" in x for x in n["scop-tile"]), n
    assert any("parallel" in x for x in n["scop-parallel"]), n
    r = compiles.notes("rowmix")["scop-tile"]
    assert any("distributed" in x for x in r) and any("tiled" in x for x in r), r
    lu = compiles.notes("lu_like")["scop-tile"]        # distributing the pivot loop is illegal
    assert any("would violate a dependence, kept" in x for x in lu), lu
    assert any("S_2: band of 2 tiled" in x for x in lu), lu
    # scop-factor's blocked tree carries its own cpu_parallel marks (the trailing
    # update's register tiles): scop-parallel adds none below the pivot loop
    assert not compiles.notes("lu_like").get("scop-parallel"), compiles.notes("lu_like")


def test_partial_distribution_of_a_multi_statement_band(monkeypatch):
    """symm (scop-symm's split turned off): distributing the whole ``[i, j]`` band is
    illegal (the final update of row ``i`` feeds the column sweep of row ``i + 1``);
    keeping ``i`` and distributing ``j`` is legal, and the merged ``[j, k]`` band over
    two statements gets ``j`` innermost."""
    monkeypatch.setattr(scop_symm, "match_symm", lambda statements: "turned off")
    n = notes("symm_like")["scop-tile"]
    assert any("would violate a dependence, kept" in x for x in n), n
    assert any("(outer 1 member(s) kept)" in x for x in n), n
    assert any("S_1+S_2: band of 2 tiled 256x32, member 0" in x for x in n), n


def test_parallel_second_member_of_a_band():
    """trmm without ``scop-trmm`` (distributed and tiled by scop-tile first): the
    update's tile band [i, j, k] is split before j, which is marked; the scaling's own
    loop nest is parallel at its first loop."""
    model = kernel("trmm_like").polyhedral_model()
    ctx = CompileState(model, TARGET, {})
    sched = model.initial_schedule
    for p in (ScopGemmPass, ScopTilePass, ScopParallelPass):
        sched = p().run(sched, ctx)
    n = ctx.notes["scop-parallel"]
    assert sorted(n) == ["parallel (OpenMP): loop at depth 0 of S_1",
                         "parallel (OpenMP): loop at depth 1 of S_0"], n


def test_stencils_are_time_tiled(compiles):
    """The skew of each stencil is read off its dependence cone (the rows in the note),
    the band tiled over time and space, the wavefront's tiles parallel; diamonds with
    concurrent start where the cone has a mirror row ``h-``, parallelograms for
    seidel's in-place update."""
    want = {"jacobi1d_like": ("time-tiled 64x512 parallelograms", "y1 = z1 + 2t (S_1 + 1)",
                              "sized for 16 KiB of cache"),
            "jacobi2d_like": ("time-tiled 56x56 diamonds",
                              "y1 = z1 + 2t (S_1 + 1), y2 = z2 + 2t (S_1 + 1)",
                              "h- = 2t - z1 (S_1 + 1), concurrent start"),
            "seidel_like": ("time-tiled 8x112 parallelograms", "y1 = z1 + t, y2 = z2 + t",
                            "no diamond"),   # 5 points
            "heat3d_like": ("time-tiled 12x12x12 diamonds", "y3 = z3 + 2t (S_1 + 1)",
                            "h- = 2t - z1 (S_1 + 1), concurrent start"),
            "fdtd2d_like": ("time-tiled 40x40 diamonds",
                            "y1 = z1 + t (S_3 + 1), y2 = z2 + t (S_3 + 1)",
                            "h- = t - z1, concurrent start")}
    for name, (tiles, rows, shape) in want.items():
        # jacobi-1d: time-tiled without the lifted layout (AVX-512's default, below)
        n = compiles.notes(name, {"vector_lift": False} if name == "jacobi1d_like" else None)
        how = "tiles in sequence" if name == "jacobi1d_like" else "wavefront of tiles in parallel"
        inner = ("innermost loop per statement" if name in ("jacobi1d_like", "seidel_like")
                 else "one innermost loop shared by the statements")
        assert any(tiles in x and rows in x and how in x and shape in x and inner in x
                   for x in n["scop-stencil"]), n
        assert "scop-parallel" not in n        # the wavefront's mark is the parallel loop
    assert any("left in time-step order up to 2048 elements (its arrays in L1) for the "
               "lifted layout" in x and "time-tiled beyond" in x
               for x in compiles.notes("jacobi1d_like")["scop-stencil"])


def _first_wavefront_tiles(name: str, options: dict, params: dict) -> int:
    """How many tiles the first wavefront of the stencil's tiled band holds at the
    parameter values ``params`` (isl: the schedule's first two band members, the
    wavefront and the tile, on the domain with the parameters fixed)."""
    model = kernel(name).polyhedral_model()
    ctx = CompileState(model, TARGET, options)
    sched = ScopStencilPass().run(ScopGemmPass().run(model.initial_schedule, ctx), ctx)
    node = sched.get_root()
    while node.get_type() != isl.schedule_node_type.band:
        node = node.child(0)
    mupa = node.band_get_partial_schedule()
    dom = sched.get_domain()
    fixed = isl.Set.universe(dom.get_space())      # the model's own parameter ids
    for p, v in params.items():
        fixed = fixed.fix_val(isl.dim_type.param,
                              fixed.find_dim_by_name(isl.dim_type.param, p),
                              isl.Val.int_from_si(fixed.get_ctx(), v))
    dom = dom.intersect_params(fixed)
    wave, tile = (isl.UnionMap.from_union_pw_aff(mupa.get_at(k)) for k in (0, 1))
    tiles = isl.Set.from_union_set(wave.flat_range_product(tile).intersect_domain(dom)
                                   .range())
    tiles = tiles.project_out(isl.dim_type.param, 0, tiles.dim(isl.dim_type.param))
    w0 = tiles.lexmin().plain_get_val_if_fixed(isl.dim_type.set, 0)
    same = tiles.fix_val(isl.dim_type.set, 0, w0)
    return same.count_val().to_python()


@pytest.mark.parametrize("name,params", [
    ("jacobi2d_like", dict(tsteps=40, n=200)),
    ("heat3d_like", dict(tsteps=20, n=60)),
    ("fdtd2d_like", dict(tmax=40, nx=200, ny=50)),
])
def test_diamonds_start_concurrently(name, params):
    """Concurrent start: the first wavefront of diamond tiles holds a row of tiles
    side by side along ``z1`` (about ``n / s`` of them), where the parallelogram
    tiles' first wavefront is one tile (a pipelined start)."""
    assert _first_wavefront_tiles(name, {}, params) >= 4
    assert _first_wavefront_tiles(name, {"stencil_shape": "parallelogram"}, params) == 1


#: diamonds and parallelograms with small tiles (option ``stencil_tiles``) so that odd,
#: prime extents span many tiles in time and space: (kernel, sizes, shape, tiles)
SMALL_TILES = [
    ("jacobi1d_like", dict(tsteps=23, n=97), "parallelogram", (5, 7)),
    ("jacobi2d_like", dict(tsteps=13, n=29), "diamond", (6,)),
    ("jacobi2d_like", dict(tsteps=13, n=29), "parallelogram", (3, 5)),
    ("heat3d_like", dict(tsteps=7, n=13), "diamond", (6, 5)),
    ("heat3d_like", dict(tsteps=7, n=13), "parallelogram", (2, 3, 5)),
    ("fdtd2d_like", dict(tmax=11, nx=23, ny=19), "diamond", (5,)),
    ("fdtd2d_like", dict(tmax=11, nx=23, ny=19), "parallelogram", (3, 5)),
    ("fdtd2d_like", dict(tmax=5, nx=2, ny=7), "diamond", (3,)),
    ("seidel_like", dict(tsteps=7, n=19), "diamond", (2, 3)),   # parallelograms
]


@pytest.mark.parametrize("name,sizes,shape,tiles", SMALL_TILES,
                         ids=[f"{n}-{sh}-{'x'.join(map(str, t))}"
                              for n, _, sh, t in SMALL_TILES])
def test_small_tiles_are_bitwise_gcc_o0(name, sizes, shape, tiles, tmp_path_factory):
    """Many small tiles of either shape (each element keeps its operations in the C
    nest's order): bitwise gcc -O0's result, with a NaN spreading alike."""
    opts = {"fp_exact": True, "stencil_shape": shape, "stencil_tiles": tiles}
    ck = compile_kernel(kernel(name), "cpu", opts)
    word = "diamonds" if shape == "diamond" and name != "seidel_like" else "parallelograms"
    shown = (tiles[0],) + tiles if word == "diamonds" else tiles
    want = f"time-tiled {'x'.join(map(str, shown))} {word}"
    assert any(word in x and want in x and "option stencil_tiles" in x
               for x in ck.notes["scop-stencil"]), ck.notes
    k = kernel(name)
    arrays = random_arrays(k, sizes, seed=11)
    for a in arrays.values():
        if a.size > 4:
            a.flat[a.size // 3] = np.nan
    ref = run_gcc(name, gcc_o0(name, tmp_path_factory), sizes, arrays)
    args = [arrays[n].copy() for n in list(k.inputs) + list(k.outputs)]
    got = as_tuple(ck.backend.load(ck)(*args, **{p: sizes[p] for p in k.params}))
    for n, g in zip(k.outputs, got):
        w = ref[n]
        assert np.array_equal(np.isnan(g), np.isnan(w)), n
        ok = ~np.isnan(w)
        assert np.array_equal(g[ok].view(np.uint64), w[ok].view(np.uint64)), \
            f"{name} {sizes} {n}: {int((g[ok] != w[ok]).sum())} elements differ"


def test_wavefront_tiles_are_the_openmp_loop():
    """The loop of the wavefront's tiles is the one ``#pragma omp parallel for`` (inside
    the sequential wavefront loop) in 2-D and 3-D; a 1-D stencil's tiles run in
    sequence (no parallel region)."""
    for name in ("jacobi2d_like", "heat3d_like"):
        src = compile_kernel(kernel(name), "c").source
        assert src.count("#pragma omp parallel for") == 1, name
        body = src.split(PRELUDE_END, 1)[1]            # the kernel, not the prelude's C
        before = body[:body.index("#pragma omp parallel for")]
        assert before.count("for (") == 1, name       # only the wavefront loop outside
    assert "#pragma omp" not in compile_kernel(kernel("jacobi1d_like"), "c").source


def test_stencil_schedule_is_fast():
    """The band comes from the dependence cone, not isl's scheduler (about 10 s on
    heat-3d's four loops): the pass takes well under a second on each stencil."""
    import time
    for name in ("heat3d_like", "fdtd2d_like", "seidel_like"):
        model = kernel(name).polyhedral_model()
        ctx = CompileState(model, TARGET, {})
        sched = ScopGemmPass().run(model.initial_schedule, ctx)
        t0 = time.perf_counter()
        out = ScopStencilPass().run(sched, ctx)
        took = time.perf_counter() - t0
        assert not out.plain_is_equal(sched), name
        assert took < 1.0, f"{name}: scop-stencil took {took:.2f} s"


ADI_LIKE = """
void adi_like(int tsteps, int n, double u[n][n], double v[n][n], double p[n][n]) {
  for (int t = 1; t <= tsteps; t++) {
    for (int i = 1; i < n - 1; i++)
      for (int j = 1; j < n - 1; j++) {
        p[i][j] = 0.5 * p[i][j-1] + u[j][i];
        v[j][i] = p[i][j] + 1.0;
      }
    for (int i = 1; i < n - 1; i++)
      for (int j = 1; j < n - 1; j++)
        u[i][j] = 0.25 * u[i][j-1] + v[i][j];
  }
}
"""


def test_adi_sweeps_are_not_time_tiled():
    """adi's column sweep writes ``v[j][i]`` (column ``i``) and its row sweep reads
    ``v[i][j]``: a dependence spans the whole extent along a space dimension, so no
    skew bounds it and no time tile is legal; the pass says so and keeps the time
    steps in order (the sweeps' own rows run in parallel)."""
    from polycomp.frontend.c_reader import read_c_kernel
    n = compile_kernel(read_c_kernel(ADI_LIKE), "cpu").notes
    assert any("not time-tiled: the dependence cone gives no skew" in x
               for x in n["scop-stencil"]), n
    assert not any("time-tiled " in x for x in n["scop-stencil"])
    assert len(n["scop-parallel"]) == 2, n


def _braced(text: str) -> str:
    """The text from the first ``{`` of ``text`` to its matching ``}`` (a loop's body in
    generated C)."""
    start = text.index("{")
    depth = 0
    for k in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[k], 0)
        if depth == 0:
            return text[start:k + 1]
    return text[start:]


def test_tile_rows_are_vectorised():
    """Inside a tile the last space loop, shared by the statements, runs at unit
    stride: the ``cpu-avx512`` target's C stores whole AVX-512 vectors there (named, not
    ``cpu``: this must hold on hosts without AVX-512 too), inside the
    wavefront's parallel loop (the diamonds of jacobi-2d, heat-3d and fdtd-2d); fdtd-2d's
    three statements store in one vector loop, the values they share kept in registers
    (``forward-loads``: ``hz[i][j]`` loaded once, ``ey[i][j]`` taken from its store; the
    carried windows' rows rotate through registers as well)."""
    for name in ("jacobi2d_like", "heat3d_like", "fdtd2d_like"):
        src = compile_kernel(kernel(name), "cpu-avx512").source
        body = src[src.index("#pragma omp parallel for"):]
        assert "_mm512_storeu_pd(" in body, name
        if name == "fdtd2d_like":
            loops = [_braced(x) for x in body.split("for (int64_t c4_v")[1:]]
            fused = [x for x in loops if all(f"_mm512_storeu_pd(({a} +" in x
                                              for a in ("ey", "ex", "hz"))]
            assert fused and all("pc_fw" in x for x in fused), body


def test_stencil_not_tiled_when_time_indexes_the_write(compiles):
    """A loop whose iterator subscripts the written element is no time loop (LU's
    pivot row): the stencil pass leaves it alone."""
    assert "scop-stencil" not in compiles.notes("lu_like")


def test_scalar_c_target_keeps_loops_but_parallelises():
    """``c`` has no vectors: no GEMM tree, no unit-stride tiles; stencils are still
    time-tiled and parallel loops marked."""
    n = compile_kernel(kernel("jacobi2d_like"), "c").notes
    assert "scop-gemm" not in n and "scop-tile" not in n
    assert any("time-tiled" in x for x in n["scop-stencil"])
    n = compile_kernel(kernel("lu_like"), "c").notes
    assert "scop-tile" not in n and len(n["scop-parallel"]) == 1


def test_explain_prints_the_choices(capsys):
    from polycomp.cli import main
    main(["explain", "-t", "cpu", str(KERNELS / "gemm_ikj.c")])
    out = capsys.readouterr().out
    assert "note [scop-gemm]" in out and "GEMM C += A * B" in out


@pytest.mark.parametrize("name", ["syrk_aa", "syr2k_like"])
def test_packed_triangle_propagates_nan_like_gcc(name, tmp_path_factory, host_compiles):
    """A NaN and a huge value in an operand of the per-reference packed triangle reach
    exactly the elements gcc -O0's loop nest gives them (full and diagonal tiles)."""
    k = kernel(name)
    sizes = dict(n=47, m=11)
    arrays = random_arrays(k, sizes, seed=3)
    arrays["A"][29, 4] = np.nan        # row 29: C[29][:30] and C[29:][29]
    arrays["A"][3, 7] = 1e300
    ref = run_gcc(name, gcc_o0(name, tmp_path_factory), sizes, arrays)
    args = [arrays[n].copy() for n in list(k.inputs) + list(k.outputs)]
    ck = host_compiles.get(name)                 # the same code as build(k, "cpu")
    got, = as_tuple(ck.backend.load(ck)(*args, **{p: sizes[p] for p in k.params}))
    want = ref["C"]
    assert np.isnan(want).any() and np.array_equal(np.isnan(got), np.isnan(want))
    ok = np.isfinite(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-6, atol=0)
    assert np.array_equal(np.isinf(got), np.isinf(want))


# ----------------------------------------------------------------------------- factorisations

FACTOR_SIZES = {"lu_like": (1, 2, 64, 65, 131, 200), "cholesky_like": (1, 3, 65, 197),
                "ludcmp_like": (1, 66, 150)}


def test_factorisations_are_blocked_right_looking(compiles):
    """lu, Cholesky and ludcmp's factorisation (its accumulator ``w`` expanded): one step
    band of 64 pivots, the trailing update of each update statement on the micro-kernel
    (FMA tiles in the built kernel); the update over the whole ``k`` range (rows read
    before they are updated) keeps the C order.  lu and Cholesky write the ``A`` they
    read: packed operands, the threads split each block's register tiles.  ludcmp's
    update writes ``w``: ``A`` read in place and the threads take whole row blocks, one
    OpenMP region per step and update (the rows beyond the block, ``S_1``'s and
    ``S_4``'s trailing updates: 3 in the source; the register-tile split with shared
    packs, 16 regions, ran ludcmp at LARGE 1.6-1.9x slower, docs/c_frontend.md)."""
    for name, updates in (("lu_like", "S_0, S_2"), ("cholesky_like", "S_0"),
                          ("ludcmp_like", "S_1, S_4")):
        ck = compiles.get(name)
        n = ck.notes["scop-factor"]
        assert any("blocked right-looking, 64 pivots a step" in x and
                   f"trailing update of {updates} on the micro-kernel" in x for x in n), n
        assert ck.final_ir.counts.microkernels >= 1, (name, ck.final_ir.counts)
        packed = any("A packed into L1" in x for x in ck.notes.get("cpu-pack", []))
        assert packed == (name != "ludcmp_like"), (name, ck.notes)
        if name == "ludcmp_like":
            assert ck.source.count("#pragma omp parallel") == 3, ck.source
    n = compiles.notes("lu_nofactor")["scop-factor"]
    assert any("would violate a dependence; program order kept" in x for x in n), n


@pytest.mark.parametrize("name", sorted(FACTOR_SIZES))
def test_blocked_order_is_the_c_order_per_element(name, monkeypatch, tmp_path_factory):
    """With 8 pivots a step, 19 rows span three steps: the interpreted schedule (the
    blocked order, every update of an element in increasing ``k``) is bitwise gcc
    -O0's result."""
    monkeypatch.setattr(scop_factor, "BLOCK", 8)
    k = kernel(name)
    sizes = dict(n=19)
    arrays = random_arrays(k, sizes, seed=3)
    ref = run_gcc(name, gcc_o0(name, tmp_path_factory), sizes, arrays)
    ck = compile_kernel(k, TARGET, debug=True)
    assert any("8 pivots a step" in x for x in ck.notes["scop-factor"]), ck.notes
    got = as_tuple(interpret(ck, *[arrays[n] for n in list(k.inputs) + list(k.outputs)],
                             n=19))
    for n, g in zip(k.outputs, got):
        assert np.array_equal(g, ref[n]), f"{name} {n}"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FACTOR_SIZES))
def test_blocked_factorisation_matches_gcc_o0(name, tmp_path_factory, compiles):
    """The built kernel at sizes of one, several and partial steps (FMA contraction in
    the micro-kernel: 1e-12 relative to the largest element).  lu is built for
    ``TARGET`` (shared with the notes' compile): the SIMDe run of scop-factor's blocked
    nests on AVX-512's register tiles; Cholesky (lu's packed path) and ludcmp (``A``
    read in place, row blocks) for ``NATIVE``: the point is the blocked schedule."""
    k = kernel(name)
    ck = compiles.get(name) if name == "lu_like" else compile_kernel(k, NATIVE)
    fn = ck.backend.load(ck)
    for n in FACTOR_SIZES[name]:
        arrays = random_arrays(k, dict(n=n), seed=n)
        ref = run_gcc(name, gcc_o0(name, tmp_path_factory), dict(n=n), arrays)
        got = as_tuple(fn(*[arrays[x].copy() for x in list(k.inputs) + list(k.outputs)],
                          n=n))
        for out, g in zip(k.outputs, got):
            w = ref[out]
            assert np.abs(g - w).max() <= 1e-12 * max(1.0, np.abs(w).max()), (name, n, out)


# ----------------------------------------------------------------------------- trmm

TRMM_SIZES = [dict(m=1, n=1), dict(m=13, n=29), dict(m=61, n=37), dict(m=131, n=71),
              dict(m=200, n=5)]


def test_trmm_rows_below_reach_the_micro_kernel(compiles):
    """trmm's ``B[i][j] += A[k][i] * B[k][j]`` (``k > i``): row blocks of 60 (a multiple
    of MR = 6), the products with the rows below the block on the micro-kernel, ``A``
    and the ``B[k][j]`` reference packed (``B[i][j]``, accumulated, is not)."""
    ck = compiles.get("trmm_like")
    n = ck.notes["scop-trmm"]
    assert any("row-blocked, 60 rows a step" in x and "B += A * B" in x for x in n), n
    assert ck.final_ir.counts.microkernels >= 1, ck.final_ir.counts
    pack = ck.notes["cpu-pack"]
    assert any("A packed into L1" in x for x in pack) and \
        any("B packed into L2" in x for x in pack), pack
    # not a trmm: lu's two updates; a GEMM whose reduction range does not depend on the
    # row stays scop-gemm's (gemm, syrk's triangle of outputs)
    assert isinstance(match_trmm(list(kernel("lu_nofactor").polyhedral_model()
                                      .statements)), str)
    for name in ("gemm_ikj", "syrk_aa", "gemm_bt"):
        m = match_trmm(list(kernel(name).polyhedral_model().statements))
        assert m == "the reduction range does not depend on the row (scop-gemm's GEMM)", m
        assert any("GEMM" in x for x in compiles.notes(name)["scop-gemm"]), name


def test_trmm_not_blocked_when_the_rows_below_are_written_first():
    """The same nest with the rows walked upwards (``i`` from ``m - 1`` down): row ``i``
    reads rows below that are already updated, so the packed copy would hold the C
    order's values only if blocks ran bottom-up; the isl check keeps the program order."""
    src = KERNELS / "trmm_like.c"
    text = src.read_text().replace("for (i = 0; i < m; i++)",
                                   "for (i = m - 1; i >= 0; i--)")
    assert text != src.read_text()
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "trmm_like.c"
        p.write_text(text)
        k, = load_c_kernels(str(p))
        n = compile_kernel(k, TARGET).notes.get("scop-trmm", [])
    assert any("program order kept" in x for x in n), n


def test_trmm_blocked_order_is_the_c_order(monkeypatch, tmp_path_factory):
    """With blocks of 12 rows, 31 rows span three steps (the last partial), and one
    row: the interpreted blocked schedule keeps every element's sum in the C order (the
    in-block ``k`` first, then the rows below in increasing ``k``), bitwise gcc -O0; the
    built kernel (FMA in the micro-kernel; ``NATIVE``: the point is the order) within
    1e-13 of the largest element.  One compile for both sizes (they are parameters)."""
    monkeypatch.setattr(scop_trmm, "BLOCK", 12)
    name = "trmm_like"
    k = kernel(name)
    ck = compile_kernel(k, NATIVE, debug=True)
    assert any("12 rows a step" in x for x in ck.notes["scop-trmm"]), ck.notes
    fn = ck.backend.load(ck)                                   # = build(k, NATIVE)
    for sizes in (dict(m=1, n=1), dict(m=31, n=13)):
        arrays = random_arrays(k, sizes, seed=sizes["m"])
        ref = run_gcc(name, gcc_o0(name, tmp_path_factory), sizes, arrays)

        def args(arrays=arrays):
            return [arrays[x].copy() for x in list(k.inputs) + list(k.outputs)]
        got = as_tuple(interpret(ck, *args(), **sizes))
        assert np.array_equal(got[0], ref["B"]), sizes
        got = as_tuple(fn(*args(), **sizes))
        w = ref["B"]
        assert np.abs(got[0] - w).max() <= 1e-13 * max(1.0, np.abs(w).max()), sizes


@pytest.mark.slow
def test_trmm_blocked_kernel_matches_gcc_o0(tmp_path_factory, compiles):
    """The built kernel (60 rows a step) at one row, one partial block and several
    blocks with a partial last one: 1e-13 relative to the largest element (the sums
    keep the C order; FMA contraction in the micro-kernel)."""
    name = "trmm_like"
    k = kernel(name)
    ck = compiles.get(name)
    fn = ck.backend.load(ck)
    for sizes in TRMM_SIZES:
        arrays = random_arrays(k, sizes, seed=sizes["m"])
        ref = run_gcc(name, gcc_o0(name, tmp_path_factory), sizes, arrays)
        got = as_tuple(fn(*[arrays[x].copy() for x in list(k.inputs) + list(k.outputs)],
                          **sizes))
        w = ref["B"]
        assert np.abs(got[0] - w).max() <= 1e-13 * max(1.0, np.abs(w).max()), sizes


# ----------------------------------------------------------------------------- symm


def test_symm_split_reaches_the_micro_kernel(compiles):
    """symm: phase 1 ``acc[i][j] += A[i][k] * B[k][j]`` (``k < i``: the rectangle left
    of the block on the micro-kernel), phase 2 the ``C[i][j]`` statement (in phase 1's
    row steps), phase 3 the mirror ``C[k][j] += A[i][k] * B[i][j]`` (``i > k``: the
    rows below on the micro-kernel; the diagonal blocks' register tiles too): four
    micro-kernel nests below one parallel loop over 32-column panels (the body written
    once; with a thread band whose ranges were piecewise in ``n`` isl wrote it once per
    thread), only the mirror's ``alpha * B`` packed, scop-trmm and scop-gemm leave it
    alone."""
    ck = compiles.get("symm_like")
    n = ck.notes["scop-symm"]
    assert any("split in three phases, 120 rows a step" in x and "acc += A * B" in x
               and "C += A * B" in x and "6x6 triangles" in x for x in n), n
    assert ck.final_ir.counts.microkernels == 4, ck.final_ir.counts
    assert any("parallel over 32-column panels" in x for x in n), n
    # the operands are read in place but for the mirror's alpha * B (a 120 x 32 block
    # per row step and k tile, scaled once while copied: the same products, no multiply
    # in the micro-kernel); A is never packed
    assert "A_pk" not in ck.source and "B_pk1" in ck.source and "B_pk2" not in ck.source
    assert "scop-trmm" not in ck.notes, ck.notes
    assert match_trmm(list(kernel("symm_like").polyhedral_model().statements)) == \
        "not one update W[i][j] += X * Y"
    # not a symm: trmm's one update; GEMMs whose reduction range does not depend on the row
    assert match_symm(list(kernel("trmm_like").polyhedral_model().statements)) == \
        "not two updates W[i][j] += X * Y"
    for name in ("gemm_ikj", "syrk_aa", "gemm_bt", "syr2k_like", "trmm_like"):
        assert isinstance(match_symm(list(kernel(name).polyhedral_model().statements)),
                          str), name
        assert "scop-symm" not in compiles.notes(name), name


def _symm_check(sizes, tmp_path_factory, fn, ck=None):
    """The built kernel ``fn`` within 1e-13 of gcc -O0 at ``sizes``; with ``ck``, its
    interpreted schedule bitwise gcc -O0 too."""
    name = "symm_like"
    k = kernel(name)
    arrays = random_arrays(k, sizes, seed=sizes["m"] + 7)
    ref = run_gcc(name, gcc_o0(name, tmp_path_factory), sizes, arrays)

    def args():
        return [arrays[x].copy() for x in list(k.inputs) + list(k.outputs)]
    if ck is not None:
        got = as_tuple(interpret(ck, *args(), **sizes))
        assert np.array_equal(got[0], ref["C"]), sizes
    got = as_tuple(fn(*args(), **sizes))
    w = ref["C"]
    assert np.abs(got[0] - w).max() <= 1e-13 * max(1.0, np.abs(w).max()), sizes


def test_symm_split_order_is_the_c_order(monkeypatch, tmp_path_factory):
    """With blocks of 12 rows, 31 rows span three steps (the last partial), and one
    row: the interpreted schedule keeps every element's sums in the C order (per step,
    the rectangle then the block, ``k`` increasing, for ``temp2``; the mirror's block,
    then at each later step the step's rank-12 update of the rows above, so ``i``
    increasing, for ``C``), bitwise gcc -O0; the built kernel (FMA in the
    micro-kernel; ``NATIVE``: the point is the order) within 1e-13 of the largest
    element, also with the mirror's rows above a step in ``i`` tiles of 12 rows (each
    refilling the packed ``alpha * B``).  One compile serves both sizes."""
    monkeypatch.setattr(scop_symm, "BLOCK", 12)
    k = kernel("symm_like")
    ck = compile_kernel(k, NATIVE, debug=True)
    assert any("12 rows a step" in x for x in ck.notes["scop-symm"]), ck.notes
    fn = ck.backend.load(ck)                     # the same code as build(k, NATIVE)
    for sizes in (dict(m=1, n=1), dict(m=31, n=13)):
        _symm_check(sizes, tmp_path_factory, fn, ck)
    # the mirror's rows above a step in i tiles of 12 rows
    monkeypatch.setattr(scop_symm, "MIRROR_MC", 12)
    _symm_check(dict(m=31, n=13), tmp_path_factory, build(k, NATIVE))


def test_symm_phase1_b_packed_on_avx2(monkeypatch, tmp_path_factory):
    """``pack_phase1_b``: on AVX2 in float64 ``P1`` reads a packed copy of ``B`` (a
    second ``B`` pack besides the mirror's ``alpha * B``), not on AVX-512 nor in
    float32; ``POLYCOMP_SYMM_PACK_B=0``: ``B`` in place; the copy prefetches ``B``'s
    rows ``PACK_PREFETCH_ROWS`` on (``POLYCOMP_SYMM_PACK_PREFETCH=0``: not).  With
    blocks of 12 rows, 31 x 13 (three steps, the last partial; a partial panel) the
    interpreted AVX2 schedule is bitwise gcc -O0 (the copy changes no sum), and on an
    AVX2 host the built kernel is bitwise the one built with the switch off."""
    from types import SimpleNamespace

    from polycomp.hw.cpu.target import cpu_flags
    monkeypatch.setattr(scop_symm, "BLOCK", 12)
    avx2 = get_target("cpu-avx2")
    target = dataclasses.replace(avx2, cpu=dataclasses.replace(avx2.cpu, threads=2))
    ctx = SimpleNamespace(target=target)
    assert scop_symm.pack_phase1_b(ctx, "float64")             # type: ignore[arg-type]
    assert not scop_symm.pack_phase1_b(ctx, "float32")         # type: ignore[arg-type]
    assert not scop_symm.pack_phase1_b(SimpleNamespace(target=TARGET),  # type: ignore[arg-type]
                                       "float64")
    k = kernel("symm_like")
    on = compile_kernel(k, target, debug=True)
    assert any("B packed for P1" in x for x in on.notes["scop-symm"]), on.notes
    assert "B_pk1" in on.source and "B_pk2" in on.source
    # the copy prefetches B's row PACK_PREFETCH_ROWS on, at its first panel: the lines of
    # the 32-column box (columns 0, 8, 16, 24 and 31, clamped to the last row and column)
    # (the index expressions spelled out: index-cse off)
    plain = compile_kernel(k, target, {"index_cse": False}).source
    pf = [ln.strip() for ln in plain.splitlines() if "__builtin_prefetch(B +" in ln]
    assert len(pf) == 5 and all(f"+ {scop_symm.PACK_PREFETCH_ROWS}), (m - 1))" in x
                                and x.endswith(", 0, 3);") for x in pf), pf
    monkeypatch.setenv("POLYCOMP_SYMM_PACK_PREFETCH", "0")
    nopf = compile_kernel(k, target).source
    monkeypatch.delenv("POLYCOMP_SYMM_PACK_PREFETCH")
    assert "__builtin_prefetch(B +" not in nopf and "B_pk2" in nopf
    sizes = dict(m=31, n=13)
    arrays = random_arrays(k, sizes, seed=5)
    ref = run_gcc("symm_like", gcc_o0("symm_like", tmp_path_factory), sizes, arrays)

    def args():
        return [arrays[x].copy() for x in list(k.inputs) + list(k.outputs)]
    assert np.array_equal(as_tuple(interpret(on, *args(), **sizes))[0], ref["C"])
    monkeypatch.setenv("POLYCOMP_SYMM_PACK_B", "0")
    off = compile_kernel(k, target)
    assert "B_pk2" not in off.source and not any("packed for P1" in x
                                                 for x in off.notes["scop-symm"])
    if not {"avx2", "fma"} <= cpu_flags():
        return
    got_on = as_tuple(on.backend.load(on)(*args(), **sizes))[0]
    got_off = as_tuple(off.backend.load(off)(*args(), **sizes))[0]
    assert np.array_equal(got_on, got_off)
    assert np.abs(got_on - ref["C"]).max() <= 1e-13 * max(1.0, np.abs(ref["C"]).max())


@pytest.mark.slow
def test_symm_split_kernel_matches_gcc_o0(tmp_path_factory):
    """The built kernel (60 rows a step) at one row, one partial block, a prime number
    of rows over several blocks, and a thin matrix: 1e-13 relative to the largest
    element.  Built for ``NATIVE``; the same nest's AVX-512 build (two threads, three
    row steps, SIMDe here) runs in
    ``tests/test_cpu_triangle.py::test_symm_runs_one_parallel_loop_over_column_panels``."""
    ck = compile_kernel(kernel("symm_like"), NATIVE)
    fn = ck.backend.load(ck)                     # one compile for the five sizes
    for sizes in (dict(m=1, n=1), dict(m=13, n=29), dict(m=61, n=37),
                  dict(m=131, n=71), dict(m=200, n=5)):
        _symm_check(sizes, tmp_path_factory, fn)
