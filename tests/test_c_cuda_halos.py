"""Shared-memory tiles for stencil halos on CUDA from C (issue #28 item 1).

A stencil's time loop is a host loop of launches of baseline-mapped kernels
(``gpu-baseline-mapping``); ``promote-shared`` promotes a read-only array of such a
kernel when the block's footprint (block band prefix, threads' point loops below) is a
constant-size box and an element is read by several instances of the block (PPCG's
rule): jacobi-2d's 16x16 block reads ``A`` on an 18x18 box (one-wide halo), heat-3d's
4x8x8 block on 6x10x10.  The copy is tiled by the block and its points dealt to the
threads (``gpu_threads`` mark of the copy band), then ``__syncthreads()``, then the
reads from shared memory.

* golden trees of ``promote-shared`` for jacobi2d_like (tree in, tree out);
* the simulator, bitwise ``gcc -O0 -ffp-contract=off``, with shared stores and barriers
  counted, at shapes with partial blocks, one block, and an empty interior;
* ``nvcc -arch=sm_80`` compiles the kernels (``nvcc`` mark).
"""
from __future__ import annotations

import re
import subprocess

import islpy as isl
import numpy as np
import pytest
from test_c_scop_schedule import as_tuple, gcc_o0, kernel, random_arrays, run_gcc

from polycomp.driver import compile_kernel
from polycomp.hw.cuda.simulator import simulate
from polycomp.hw.target import get_target
from polycomp.islutil import context
from polycomp.scheduler.common import marks
from polycomp.scheduler.gpu.scop_groups import ScopBaselinePass, ScopGroupingPass
from polycomp.scheduler.promotion.record import promotion_state
from polycomp.scheduler.promotion.shared import SharedPromotionPass
from polycomp.scheduler.promotion.sites import paths
from polycomp.state import CompileState

#: (kernel, the promotions' notes)
PROMOTED = {
    "jacobi2d_like": ["kernel 0: A promoted to shared memory [18, 18] (2592 bytes; reuse)",
                      "kernel 1: B promoted to shared memory [18, 18] (2592 bytes; reuse)"],
    "heat3d_like": ["kernel 0: A promoted to shared memory [6, 10, 10] (4800 bytes; reuse)",
                    "kernel 1: B promoted to shared memory [6, 10, 10] (4800 bytes; reuse)"],
    "fdtd2d_like": ["kernel 1: hz promoted to shared memory [17, 16] (2176 bytes; reuse)",
                    "kernel 2: hz promoted to shared memory [16, 17] (2176 bytes; reuse)",
                    "kernel 3: ex promoted to shared memory [16, 17] (2176 bytes; reuse)",
                    "kernel 3: ey promoted to shared memory [17, 16] (2176 bytes; reuse)"],
}
SIZES = {
    "jacobi2d_like": [dict(tsteps=2, n=37), dict(tsteps=2, n=18), dict(tsteps=1, n=2)],
    "heat3d_like": [dict(tsteps=2, n=13), dict(tsteps=1, n=6)],
    "fdtd2d_like": [dict(tmax=2, nx=19, ny=35), dict(tmax=2, nx=2, ny=17)],
}
_CK: dict = {}


def compiled(name: str):
    if name not in _CK:
        _CK[name] = compile_kernel(kernel(name), "cuda")
    return _CK[name]


@pytest.mark.parametrize("name", sorted(PROMOTED))
def test_halo_promoted(name):
    notes = compiled(name).notes["promote-shared"]
    for line in PROMOTED[name]:
        assert line in notes
    src = compiled(name).source
    for line in PROMOTED[name]:    # the kernel holds the buffer, its copy and a barrier
        k, array = int(line.split()[1].rstrip(":")), line.split()[2]
        body = src.split(f"{name}_k{k}(")[1].split("\nextern")[0]
        assert f"__shared__ __align__(128) double {array}_shared" in body
        assert f"// copy: copy_{array}_" in body
        assert body.index("// copy: copy_") < body.index("__syncthreads();")
        after = body[body.index("__syncthreads();"):]
        assert f"{array}_shared" in after and not re.search(rf"\b{array}\[", after)


@pytest.mark.parametrize("name,sizes", [(n, s) for n in sorted(SIZES) for s in SIZES[n]],
                         ids=lambda v: v if isinstance(v, str) else
                         "-".join(f"{a}{b}" for a, b in v.items()))
def test_halo_kernels_bitwise_gcc_o0(name, sizes, tmp_path_factory):
    """Bitwise ``gcc -O0`` on the simulator (its race checks on: a copy read before the
    barrier would be reported); the promoted kernels store to and read from shared
    memory and pass a barrier whenever their grid is not empty."""
    k = kernel(name)
    arrays = random_arrays(k, sizes, seed=sum(sizes.values()))
    ref = run_gcc(name, gcc_o0(name, tmp_path_factory), sizes, arrays)
    args = [arrays[n] for n in list(k.inputs) + list(k.outputs)]
    got, report = simulate(compiled(name), *args, **sizes)
    for n, g in zip(k.outputs, as_tuple(got)):
        np.testing.assert_array_equal(g, ref[n], err_msg=f"{name} {n}")
    promoted = {int(line.split()[1].rstrip(":")) for line in PROMOTED[name]}
    ran = [r for r in report.kernels if int(r.name.rsplit("_k", 1)[1]) in promoted
           and min(r.grid) > 0]
    assert ran or min(v for v in sizes.values()) <= 2
    for r in ran:
        assert r.shared_store.requests > 0 and r.barriers > 0, r.name


def test_jacobi2d_promotion_golden(goldens):
    """Tree in (``gpu-baseline-mapping``'s host loop and kernels) / tree out of
    ``promote-shared`` (``tests/golden/c_halo_jacobi2d_like.promote-shared.{in,out}.isl``):
    in each kernel an extension before the threads' ``gpu_threads`` mark copies the
    18x18 box ``16 b - 1 <= a < 16 b + 17`` (clipped to the array) in tiles of 16x16 whose
    points are below a ``gpu_threads`` mark of the kernel, followed by one ``sync``."""
    model = kernel("jacobi2d_like").polyhedral_model()
    ctx = CompileState(model, get_target("cuda"), {})
    sched = ScopBaselinePass().run(ScopGroupingPass().run(model.initial_schedule, ctx), ctx)

    def read(t):
        return isl.Schedule.read_from_str(context(), t)

    def same(a, text):
        return read(a.to_str()).plain_is_equal(read(text))
    stored_in = goldens.expected("c_halo_jacobi2d_like.promote-shared.in.isl", sched.to_str(),
                                 lambda s: same(sched, s))
    assert same(sched, stored_in)
    out = SharedPromotionPass().run(read(stored_in), ctx)
    stored_out = goldens.expected("c_halo_jacobi2d_like.promote-shared.out.isl", out.to_str(),
                                  lambda s: same(out, s))
    assert same(out, stored_out)
    promos = promotion_state(ctx).promotions
    assert sorted((p.array.name, p.kernel, p.box.sizes) for p in promos) == [
        ("A", 0, [18, 18]), ("B", 1, [18, 18])]
    root = out.get_root()
    thread_marks = paths(root, lambda n: marks.is_kind(n, marks.GPU_THREADS))
    assert len(thread_marks) == 4          # per kernel: the copy's and the statement's
    exts = paths(root, lambda n: n.get_type() == isl.schedule_node_type.extension)
    names = sorted(m.get_tuple_name(isl.dim_type.out)
                   for p in exts
                   for m in _maps(_node(out, p).extension_get_extension()))
    assert names == ["copy_A_2", "copy_B_0", "sync1_in", "sync3_in"]


def _node(schedule, path):
    n = schedule.get_root()
    for k in path:
        n = n.child(k)
    return n


def _maps(um):
    out = []
    um.foreach_map(out.append)
    return out


def test_no_rank_for_the_copy_is_refused():
    """A 1-D array read in a 2-D baseline kernel (each row reads ``x[j]``) cannot be dealt
    to the 16x16 threads dimension by dimension: refused, with the reason noted; the
    kernel still computes gcc's result."""
    src = r"""
void rowscale(int T, int N, double A[N][N], double B[N][N], double x[N]) {
  for (int t = 0; t < T; t++) {
    for (int i = 1; i < N - 1; i++)
      for (int j = 1; j < N - 1; j++)
        B[i][j] = A[i][j] * x[j] + A[i-1][j];
    for (int i = 1; i < N - 1; i++)
      for (int j = 1; j < N - 1; j++)
        A[i][j] = B[i][j];
  }
}
"""
    from polycomp.frontend.c_reader import read_c_kernel
    ck = compile_kernel(read_c_kernel(src), "cuda")
    notes = " ".join(ck.notes["promote-shared"])
    assert "kernel 0: x not promoted: fewer array dimensions than thread dimensions" in notes
    assert "kernel 0: A promoted to shared memory [17, 16]" in notes
    n = 21
    rng = np.random.default_rng(3)
    a, b, x = rng.uniform(-1, 1, (n, n)), np.zeros((n, n)), rng.uniform(-1, 1, n)
    ra, rb = a.copy(), b.copy()
    for _ in range(2):
        rb[1:-1, 1:-1] = ra[1:-1, 1:-1] * x[1:-1] + ra[:-2, 1:-1]
        ra[1:-1, 1:-1] = rb[1:-1, 1:-1]
    k = read_c_kernel(src)
    named = {"A": a, "B": b, "x": x}
    got = as_tuple(simulate(ck, *[named[v] for v in list(k.inputs) + list(k.outputs)],
                            T=2, N=n)[0])
    for name, g in zip(k.outputs, got):
        np.testing.assert_array_equal(g, {"A": ra, "B": rb}[name], err_msg=name)


@pytest.mark.nvcc
@pytest.mark.parametrize("name", sorted(PROMOTED))
def test_nvcc_compiles_halo_kernels(name, tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text(compiled(name).source)
    r = subprocess.run(["nvcc", "-arch=sm_80", "-c", "-o", str(tmp_path / "k.o"), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
