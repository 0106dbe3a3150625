"""CUDA from C with host loops (issue #28 item 1): a nest whose outer loop carries a
dependence (a stencil's time loop) becomes a host loop of kernel launches, each parallel
nest below it with its own grid and block.

* every stencil of tests/c_scop_kernels through the CUDA simulator (the launches the
  host program makes, host loops iterated) against ``gcc -O0 -ffp-contract=off``,
  bitwise (the simulator evaluates each IEEE operation of the C statement in its order);
* no kernel of the parallel stencils runs on a 1x1 grid of one thread;
* golden trees of ``gpu-baseline-mapping`` (tree in, tree out) for the host loops;
* the printed ``.cu`` (host loop in the host entry point) compiles with nvcc.
"""
from __future__ import annotations

import subprocess

import islpy as isl
import numpy as np
import pytest
from test_c_scop_schedule import SIZES, as_tuple, gcc_o0, kernel, random_arrays, run_gcc

from polycomp.driver import compile_kernel
from polycomp.frontend.c_reader import read_c_kernel
from polycomp.hw.cuda.codegen import (
    HostLoop,
    depends_on_host_loop,
    host_program,
    launch_sequence,
    program_kernels,
)
from polycomp.hw.cuda.simulator import simulate
from polycomp.hw.target import get_target
from polycomp.islutil import context
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.scheduler.gpu.scop_groups import ScopBaselinePass, ScopGroupingPass
from polycomp.state import CompileState

STENCILS = ("jacobi1d_like", "jacobi2d_like", "heat3d_like", "fdtd2d_like", "seidel_like")
#: stencils whose host loop is the time loop (seidel's in-place sweep has no parallel
#: loop below it: its host loop is a wavefront)
TIME_LOOP = ("jacobi1d_like", "jacobi2d_like", "heat3d_like", "fdtd2d_like")

_CK: dict = {}


def compiled(name: str):
    if name not in _CK:
        _CK[name] = compile_kernel(kernel(name), "cuda")
    return _CK[name]


@pytest.mark.parametrize("name,sizes", [(n, s) for n in STENCILS for s in SIZES[n]],
                         ids=lambda v: v if isinstance(v, str) else
                         "-".join(f"{a}{b}" for a, b in v.items()))
def test_stencil_on_the_simulator_is_bitwise_gcc_o0(name, sizes, tmp_path_factory):
    k = kernel(name)
    arrays = random_arrays(k, sizes, seed=len(name) + 7)
    ref = run_gcc(name, gcc_o0(name, tmp_path_factory), sizes, arrays)
    args = [arrays[n] for n in list(k.inputs) + list(k.outputs)]
    got, report = simulate(compiled(name), *args, **{p: sizes[p] for p in k.params})
    for n, g in zip(k.outputs, as_tuple(got)):
        np.testing.assert_array_equal(g, ref[n], err_msg=f"{name} {n}")
    if name in TIME_LOOP:   # one launch per nest below the time loop and time step
        steps = sizes.get("tsteps", sizes.get("tmax"))
        program = host_program(compiled(name).final_ir)[1]
        nests = len(program_kernels(program))
        # (isl may hoist a nest's emptiness, e.g. fdtd-2d's ``nx >= 2``, above its launch)
        made = list(launch_sequence(program, dict(sizes)))
        assert len(report.kernels) == len(made) <= steps * nests
        if min(v for k, v in sizes.items() if k not in ("tsteps", "tmax")) >= 3:
            assert len(made) == steps * nests


def _unguarded(program):
    """The host program below the size conditions isl hoisted above everything (``if (n
    >= 3)``: with a shared-memory copy in the kernels isl may hoist the emptiness of
    the iteration domain above the host loop)."""
    from polycomp.hw.cuda.codegen import HostIf
    while len(program) == 1 and isinstance(program[0], HostIf) and not program[0].orelse:
        program = program[0].then
    return program


@pytest.mark.parametrize("name", STENCILS)
def test_no_single_thread_kernel(name):
    """The time loop (seidel: the wavefront) is a host loop; every kernel below it has a
    grid of blocks of several threads (PPCG's mapping), none a 1x1 grid of one thread."""
    ck = compiled(name)
    temps, program = host_program(ck.final_ir)
    program = _unguarded(program)
    assert len(program) == 1 and isinstance(program[0], HostLoop)
    kernels = program_kernels(program)
    assert len(kernels) >= (1 if name == "seidel_like" else 2)
    for info in kernels:
        assert info.block[0] * info.block[1] * info.block[2] > 1, info.name
        assert program[0].var in info.params          # the time step is a parameter
    sizes = SIZES[name][0]
    for info, env in launch_sequence(program, dict(sizes)):
        from polycomp.shapes import eval_int
        grid = [int(eval_int(g, env)) for g in info.grid]
        assert grid[0] * grid[1] * grid[2] * info.block[0] * info.block[1] * info.block[2] > 1
    assert "host loop" in " ".join(ck.notes["gpu-baseline-mapping"])
    assert "single thread" not in " ".join(ck.notes["gpu-baseline-mapping"])


@pytest.mark.parametrize("sizes", [dict(tsteps=5, n=23), dict(tsteps=2, n=3),
                                   dict(tsteps=3, n=300)])
def test_seidel_runs_as_a_wavefront(sizes, tmp_path_factory):
    """seidel's in-place sweep carries a dependence on each of its loops: the band
    becomes ``(w, i, t)`` with ``w = 2t + i + j`` (every dependence increases ``w``), ``w``
    a host loop, ``i`` on threads (a second block at n = 300), ``t`` a loop per thread;
    one launch per wavefront; bitwise gcc -O0 on the simulator."""
    from polycomp.shapes import eval_int
    ck = compiled("seidel_like")
    notes = " ".join(ck.notes["gpu-baseline-mapping"])
    assert "wavefront w = 2*m0 + m1 + m2 of S_0" in notes
    temps, program = host_program(ck.final_ir)
    loop = program[0]
    assert isinstance(loop, HostLoop)
    k = kernel("seidel_like")
    arrays = random_arrays(k, sizes, seed=11)
    ref = run_gcc("seidel_like", gcc_o0("seidel_like", tmp_path_factory), sizes, arrays)
    got, report = simulate(ck, arrays["A"], **sizes)
    np.testing.assert_array_equal(got, ref["A"])
    assert len(report.kernels) == int(eval_int(loop.extent, sizes))
    if sizes["n"] == 300:
        assert max(r.grid[0] for r in report.kernels) == 2


def test_host_entry_point_loops_over_time():
    src = compiled("jacobi1d_like").source
    host = src[src.index('extern "C" int jacobi1d_like('):]
    assert "for (int64_t c0 = 0; c0 < 0 + (tsteps); c0++) {" in host
    assert host.count("<<<") == 2 and "jacobi1d_like_k1<<<" in host
    assert ", c0, A, B);" in host


@pytest.mark.parametrize("name", ["jacobi1d_like", "fdtd2d_like", "heat3d_like", "seidel_like"])
def test_host_loop_golden(name, goldens):
    """Tree in / tree out of ``gpu-baseline-mapping`` with host loops
    (``tests/golden/c_host_<name>.gpu-baseline-mapping.{in,out}.isl``): the time band
    (seidel: the wavefront ``2t + i + j``) is outside every ``kernel`` mark, each nest
    below it has its own kernel mark with ``gpu_blocks``/``gpu_threads`` marks; the
    output respects every dependence."""
    model = kernel(name).polyhedral_model()
    ctx = CompileState(model, get_target("cuda"), {})
    sched = ScopGroupingPass().run(model.initial_schedule, ctx)

    def same(a, text):
        read = lambda t: isl.Schedule.read_from_str(context(), t)  # noqa: E731
        return read(a.to_str()).plain_is_equal(read(text))
    stored_in = goldens.expected(f"c_host_{name}.gpu-baseline-mapping.in.isl", sched.to_str(),
                                 lambda s: same(sched, s))
    assert same(sched, stored_in)
    out = ScopBaselinePass().run(isl.Schedule.read_from_str(context(), stored_in), ctx)
    stored_out = goldens.expected(f"c_host_{name}.gpu-baseline-mapping.out.isl", out.to_str(),
                                  lambda s: same(out, s))
    assert same(out, stored_out)
    host = out.get_root().child(0)
    assert host.get_type() == isl.schedule_node_type.band    # the time band, on the host
    assert host.band_n_member() == 1 and not host.band_member_get_coincident(0)
    assert violated_dependences(out, model.dependences).is_empty()


@pytest.mark.nvcc
@pytest.mark.parametrize("name", STENCILS)
def test_nvcc_compiles_host_loops(name, tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text(compiled(name).source)
    r = subprocess.run(["nvcc", "-arch=sm_80", "-c", "-o", str(tmp_path / "k.o"), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


# --------------------------------------------------------------------------- pivot loops

LU_RIGHT = r"""
void lu_right(int n, double A[n][n]) {
  for (int k = 0; k < n; k++) {
    for (int j = k + 1; j < n; j++)
      A[k][j] = A[k][j] / A[k][k];
    for (int i = k + 1; i < n; i++)
      for (int j = k + 1; j < n; j++)
        A[i][j] = A[i][j] - A[i][k] * A[k][j];
  }
}
"""


def _lu_right():
    if "lu_right" not in _CK:
        _CK["lu_right"] = compile_kernel(read_c_kernel(LU_RIGHT), "cuda")
    return _CK["lu_right"]


@pytest.mark.parametrize("n", [1, 2, 3, 37])
def test_pivot_loop_is_a_host_loop_with_shrinking_grids(n, tmp_path):
    """A right-looking LU: the pivot loop ``k`` is a host loop; the row scaling and the
    trailing update are kernels whose grids shrink with ``k`` (computed in the host
    loop); bitwise gcc -O0's result on the simulator."""
    import ctypes
    ck = _lu_right()
    temps, program = host_program(ck.final_ir)
    assert len(program) == 1 and isinstance(program[0], HostLoop)
    k0, k1 = program_kernels(program)
    assert k0.block == [256, 1, 1] and k1.block == [16, 16, 1]
    assert depends_on_host_loop(k1, k1.grid[0]) and depends_on_host_loop(k1, k1.grid[1])
    assert "cfg[6] = -1;  /* varies with a host loop */" in ck.source
    src = tmp_path / "lu.c"
    src.write_text(LU_RIGHT)
    so = tmp_path / "lu.so"
    subprocess.run(["gcc", "-O0", "-ffp-contract=off", "-fPIC", "-shared", "-o", str(so),
                    str(src)], check=True)
    rng = np.random.default_rng(n)
    a = rng.uniform(0.5, 1.5, (n, n)) + n * np.eye(n)
    ref = a.copy()
    ctypes.CDLL(str(so)).lu_right(ctypes.c_int(n), ctypes.c_void_p(ref.ctypes.data))
    got, report = simulate(ck, a.copy(), n=n)
    np.testing.assert_array_equal(got, ref)
    launched = [r for r in report.kernels if min(r.grid) > 0]
    assert all(r.grid[0] * r.block[0] * r.block[1] > 1 for r in launched)


@pytest.mark.nvcc
def test_nvcc_compiles_pivot_loop(tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text(_lu_right().source)
    r = subprocess.run(["nvcc", "-arch=sm_80", "-c", "-o", str(tmp_path / "k.o"), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


MIXED = r"""
void mixed(int T, int N, float A[N][N], float B[N][N], float C[N][N], float x[N]) {
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++)
      for (int k = 0; k < N; k++)
        C[i][j] += A[i][k] * B[k][j];
  for (int t = 0; t < T; t++) {
    for (int i = 1; i < N - 1; i++)
      x[i] = 0.5f * (x[i - 1] + x[i + 1]) + C[i][i];
    for (int i = 1; i < N - 1; i++)
      for (int j = 0; j < N; j++)
        A[i][j] = A[i][j] + x[i] * 0.25f;
  }
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++)
      B[i][j] = A[i][j] * 2.0f;
}
"""


@pytest.mark.parametrize("t,n", [(3, 37), (1, 1), (2, 3)])
def test_host_loop_between_tiled_nests(t, n, tmp_path):
    """A host loop between two tiled nests: kernel numbers stay distinct (the tiled
    nests take the free numbers in tree order), the launches run in program order.  The
    program order would run the recurrence on ``x`` in a one-thread kernel per step, so
    isl's scheduler (outer coincidence) is asked and its skewed ``(t, i)`` nest taken: a
    host loop over wavefronts with one parallel kernel for both statements; bitwise
    gcc -O0 on the simulator."""
    import ctypes
    ck = compile_kernel(read_c_kernel(MIXED), "cuda")
    temps, program = host_program(ck.final_ir)
    assert [type(s).__name__ for s in program] == ["KernelInfo", "HostLoop", "KernelInfo"]
    names = [k.name for k in program_kernels(program)]
    assert len(set(names)) == len(names) == 3
    assert "isl's scheduler (outer coincidence) chosen: 0 statement(s) on a single thread" \
        in " ".join(ck.notes["scop-gpu-groups"])
    src = tmp_path / "m.c"
    src.write_text(MIXED)
    so = tmp_path / "m.so"
    subprocess.run(["gcc", "-O0", "-ffp-contract=off", "-fPIC", "-shared", "-o", str(so),
                    str(src)], check=True)
    rng = np.random.default_rng(n)
    arrs = [rng.uniform(0.5, 1.5, s).astype(np.float32) for s in [(n, n)] * 3 + [(n,)]]
    ref = [a.copy() for a in arrs]
    ctypes.CDLL(str(so)).mixed(ctypes.c_int(t), ctypes.c_int(n),
                               *[ctypes.c_void_p(a.ctypes.data) for a in ref])
    k = read_c_kernel(MIXED)
    named = dict(zip("ABCx", arrs))
    got = as_tuple(simulate(ck, *[named[a] for a in list(k.inputs) + list(k.outputs)],
                            T=t, N=n)[0])
    want = dict(zip("ABCx", ref))
    for name, g in zip(k.outputs, got):
        np.testing.assert_array_equal(g, want[name], err_msg=name)


DOITGEN = r"""
void doitgen(int nr, int nq, int np, double A[nr][nq][np], double C4[np][np], double sum[np]) {
  for (int r = 0; r < nr; r++)
    for (int q = 0; q < nq; q++) {
      for (int p = 0; p < np; p++) {
        sum[p] = 0.0;
        for (int s = 0; s < np; s++)
          sum[p] += A[r][q][s] * C4[s][p];
      }
      for (int p = 0; p < np; p++)
        A[r][q][p] = sum[p];
    }
}
"""


@pytest.mark.parametrize("nr,nq,np_", [(3, 5, 7), (1, 1, 1), (2, 3, 29), (37, 33, 5)])
def test_privatised_doitgen(nr, nq, np_, tmp_path):
    """doitgen's ``sum[p]`` is written before it is read in each ``(r, q)`` iteration:
    the front end privatises it (``sum_priv[r][q][p]``, a local array) and copies the
    last iteration's values back to the parameter ``sum`` (in that iteration); ``r``
    and ``q`` are then coincident and map onto a 2-D grid of blocks of 32x8 threads
    (one kernel, no host loop, no single-thread kernel); bitwise gcc -O0 on the
    simulator, ``sum`` included."""
    import ctypes
    ck = compile_kernel(read_c_kernel(DOITGEN), "cuda")
    temps, program = host_program(ck.final_ir)
    assert [t.name for t in temps] == ["sum_priv"]
    assert not any(isinstance(s, HostLoop) for s in program)
    k0, = program_kernels(program)
    assert len(k0.grid) == 3 and k0.block[0] * k0.block[1] > 1
    assert "2 coincident outer member(s)" in " ".join(ck.notes["scop-gpu-groups"])
    src = tmp_path / "d.c"
    src.write_text(DOITGEN)
    so = tmp_path / "d.so"
    subprocess.run(["gcc", "-O0", "-ffp-contract=off", "-fPIC", "-shared", "-o", str(so),
                    str(src)], check=True)
    rng = np.random.default_rng(np_)
    arrs = {"A": rng.uniform(0.5, 1.5, (nr, nq, np_)), "C4": rng.uniform(0.5, 1.5, (np_, np_)),
            "sum": rng.uniform(0.5, 1.5, (np_,))}
    ref = {n: a.copy() for n, a in arrs.items()}
    ctypes.CDLL(str(so)).doitgen(ctypes.c_int(nr), ctypes.c_int(nq), ctypes.c_int(np_),
                                 *[ctypes.c_void_p(ref[n].ctypes.data) for n in ("A", "C4", "sum")])
    k = read_c_kernel(DOITGEN)
    got = as_tuple(simulate(ck, *[arrs[a].copy() for a in list(k.inputs) + list(k.outputs)],
                            nr=nr, nq=nq, np=np_)[0])
    for name, g in zip(k.outputs, got):
        np.testing.assert_array_equal(g, ref[name], err_msg=name)


def test_launcher_iterates_the_host_loop():
    """``CudaFunction.launches`` (the pycuda path) makes the host program's launches:
    per time step both kernels, the step passed as the scalar after the sizes."""
    from polycomp.hw.cuda.launcher import CudaFunction
    ck = compiled("jacobi1d_like")
    fn = CudaFunction.__new__(CudaFunction)      # no device: the handles are stand-ins
    fn.ck, fn.func, fn.entry = ck, ck.final_ir, None
    fn.temps, fn.program = host_program(fn.func)
    fn.kernels = program_kernels(fn.program)
    fn.handles = ["k0", "k1"]
    out = fn.launches({"A": "dA", "B": "dB"}, {"tsteps": 3, "n": 600})
    assert [(h, [int(a) for a in args[:3]]) for h, args, *_ in out] == [
        (k, [3, 600, t]) for t in range(3) for k in ("k0", "k1")]
    assert all(grid == (3, 1, 1) and block == (256, 1, 1) for _, _, grid, block, _ in out)


def test_host_condition_around_launches():
    """A condition on the sizes outside every kernel (as isl may hoist one) is a
    :class:`HostIf` of the host program: printed around the host loop in the ``.cu``,
    evaluated by the simulator's launch sequence (no launch when it is false)."""
    from polycomp import ir
    from polycomp.hw.cuda.codegen import HostIf, emit_cuda
    f = compiled("jacobi1d_like").final_ir
    n = next(p for p in f.params if p.name == "n")
    g = f.with_body(ir.IfThenElse(n >= ir.IntImm(5), f.body))
    temps, program = host_program(g)
    assert len(program) == 1 and isinstance(program[0], HostIf)
    assert isinstance(_unguarded(program[0].then)[0], HostLoop)
    assert len(list(launch_sequence(program, {"tsteps": 3, "n": 4}))) == 0
    assert len(list(launch_sequence(program, {"tsteps": 3, "n": 6}))) == 6
    text = emit_cuda(g)
    assert "  if ((n >= 5)) {\n    " in text and "for (int64_t c0" in text.split("n >= 5")[1]
    a = np.linspace(0.5, 1.5, 6)
    b = np.zeros(6)
    got_a, got_b = simulate(g, a.copy(), b.copy(), tsteps=2, n=6)[0]
    ref_a, ref_b = simulate(f, a.copy(), b.copy(), tsteps=2, n=6)[0]
    np.testing.assert_array_equal(got_a, ref_a)
    got_a, _ = simulate(g, a[:4].copy(), b[:4].copy(), tsteps=2, n=4)[0]
    np.testing.assert_array_equal(got_a, a[:4])     # condition false: nothing ran


# --------------------------------------------------------------------------- lu_like


@pytest.mark.parametrize("n", [1, 2, 5, 37])
def test_lu_like_has_no_single_thread_kernel(n, tmp_path_factory):
    """PolyBench's lu (``tests/c_scop_kernels/lu_like.c``, the row-by-row form): in
    program order the row recurrence ``j < i`` would run on one thread per ``i``;
    ``scop-gpu-groups`` asks isl's scheduler (outer coincidence) and takes its tree,
    whose outer loop is a host loop with a parallel kernel below (256 threads a
    block); bitwise gcc -O0 on the simulator."""
    ck = compiled("lu_like")
    notes = " ".join(ck.notes["scop-gpu-groups"])
    assert "isl's scheduler (outer coincidence) chosen: 0 statement(s) on a single" in notes
    assert "single thread" not in " ".join(ck.notes["gpu-baseline-mapping"])
    temps, program = host_program(ck.final_ir)
    assert len(program) == 1 and isinstance(program[0], HostLoop)
    assert all(k.block[0] * k.block[1] * k.block[2] > 1 for k in program_kernels(program))
    sizes = {"n": n}
    k = kernel("lu_like")
    rng = np.random.default_rng(n)
    a = rng.uniform(0.5, 1.5, (n, n)) + n * np.eye(n)
    ref = run_gcc("lu_like", gcc_o0("lu_like", tmp_path_factory), sizes, {"A": a.copy()})
    got, report = simulate(ck, a.copy(), n=n)
    np.testing.assert_array_equal(got, ref["A"])
    assert k.outputs == ("A",)


def test_lu_like_groups_golden(goldens):
    """Tree in (program order) / tree out of ``scop-gpu-groups`` for lu_like
    (``tests/golden/c_host_lu_like.scop-gpu-groups.{in,out}.isl``): isl's tree, whose
    outer band member carries the dependences and whose inner loops are parallel; it
    respects every dependence."""
    model = kernel("lu_like").polyhedral_model()
    ctx = CompileState(model, get_target("cuda"), {})

    def same(a, text):
        read = lambda t: isl.Schedule.read_from_str(context(), t)  # noqa: E731
        return read(a.to_str()).plain_is_equal(read(text))
    sched = model.initial_schedule
    stored_in = goldens.expected("c_host_lu_like.scop-gpu-groups.in.isl", sched.to_str(),
                                 lambda s: same(sched, s))
    assert same(sched, stored_in)
    out = ScopGroupingPass().run(isl.Schedule.read_from_str(context(), stored_in), ctx)
    stored_out = goldens.expected("c_host_lu_like.scop-gpu-groups.out.isl", out.to_str(),
                                  lambda s: same(out, s))
    assert same(out, stored_out)
    assert violated_dependences(out, model.dependences).is_empty()
    from polycomp.scheduler.gpu.scop_groups import serial_statements
    assert serial_statements(model.initial_schedule, model) == 2
    assert serial_statements(out, model) == 0
