"""Weights packed once: option ``prepack`` (a GEMM's weight operand read in the
micro-kernel's panel layout, handed in pre-packed, :class:`PrepackedInput`) and the graph
compiler packing its linear weights at compile time (``graph/compile.py``).  Checked
against numpy and bit for bit against the per-call packing on odd / prime / extent-1 /
symbolic shapes."""
import dataclasses
import math

import numpy as np
import pytest

import polycomp as pc
from polycomp import ir
from polycomp.driver import compile_kernel
from polycomp.errors import OptionError
from polycomp.frontend import ops
from polycomp.frontend.dsl import Kernel
from polycomp.graph import GraphBuilder, compile_graph
from polycomp.graph.compile import CPU_WEIGHT_GEMM_OPTIONS, CPU_WEIGHT_GEMM_OPTIONS_32
from polycomp.graph.runtime import HeldBytes
from polycomp.hw.target import get_target
from polycomp.scheduler.promotion.footprint import Layout
from polycomp.scheduler.promotion.record import prepacked_inputs

RNG = np.random.default_rng(11)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("shape,dim,width,tiles", [
    ((7, 13), 1, 4, None), ((5, 16), 1, 16, None), ((3, 1), 1, 8, None),
    ((6, 5, 3), 0, 4, None), ((7, 13), 1, 4, (3, 8)), ((11, 5), 0, 2, (4, 6)),
    ((17, 5, 3, 2), 0, 8, (2, 3, 1)), ((3, 7, 1, 2), 1, 4, (3, 0, 2))])
def test_layout_pack_places_each_element_at_its_index(shape, dim, width, tiles):
    """``Layout.pack`` (the caller's packing) puts ``a[x]`` where ``Layout.index`` (the
    kernel's reads) looks for it, and zeros in the lanes beyond the array;
    ``Layout.unpack`` gives ``a`` back (a graph constant dropped once packed).  A
    3-tuple ``tiles`` here is a panel ``order`` instead (a convolution's weights
    ``(F/NR, KH, KW, C, NR)``)."""
    lay = (Layout.packed_panel(dim, width) if tiles is None
           else Layout.packed_panel(dim, width, order=tiles) if len(tiles) == 3
           else Layout.packed_tiles(dim, width, *tiles))
    a = RNG.integers(1, 100, shape).astype(np.float32)
    p = lay.pack(a)
    assert p.shape == lay.shape(shape) and p.flags.c_contiguous
    seen = np.zeros(p.shape, bool)
    for x in np.ndindex(*shape):
        assert p[lay.index(x)] == a[x]
        seen[lay.index(x)] = True
    assert (p[~seen] == 0).all()
    back = lay.unpack(p, shape)
    assert back.flags.c_contiguous
    np.testing.assert_array_equal(back, a)


def _matmul_kernel(m, k, n, name):
    return Kernel(lambda A, B: ops.matmul(A, B), name=name,
                  inputs={"A": pc.Tensor[(m, k), "float32"], "B": pc.Tensor[(k, n), "float32"]})


@pytest.mark.parametrize("m,k,n", [(61, 83, 131), (1, 7, 5), (13, 1, 17), (37, 97, 1),
                                   (130, 64, 96)])
def test_prepacked_gemm_matches_numpy_and_per_call_packing(m, k, n, monkeypatch):
    """The kernel reads ``B`` pre-packed (no copy of ``B`` in its source) and gives the
    per-call packing's result bit for bit (each output element sums ``k`` in the same
    order), within float32 rounding of numpy's float64 product."""
    monkeypatch.setenv("POLYCOMP_GEMM_IN_PLACE", "0")   # the plain kernel packs B
    kern = _matmul_kernel(m, k, n, f"pp_{m}_{k}_{n}")
    ck = compile_kernel(kern, "cpu", {"prepack": ("B",)})
    recs = prepacked_inputs(ck.state)
    assert [r.name for r in recs] == ["B"] and recs[0].shape == (k, n)
    assert "B_pk" not in ck.source and "read pre-packed" in ck.notes["cpu-backbone-tile"][0]
    assert tuple(d.value for d in ck.ir.inputs[1].shape) == recs[0].packed_shape
    plain = compile_kernel(kern, "cpu")
    assert prepacked_inputs(plain.state) == [] and "B_pk" in plain.source
    A, B = _f32(m, k), _f32(k, n)
    got = ck.backend.load(ck)(A, recs[0].pack(B))
    ref = plain.backend.load(plain)(A, B)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_allclose(got, A.astype(np.float64) @ B, rtol=1e-5, atol=1e-5 * k)


def _threads(name: str, threads: int):
    t = get_target(name)
    if t.isa == "avx512":
        # the blockings below were chosen for the Zen 4 caches: the same on every host
        t = t.with_capacities(L1=32 * 1024, L2=1024 * 1024)
    return dataclasses.replace(t, cpu=dataclasses.replace(t.cpu, threads=threads))


def _weight_gemm(target, threads: int, **opts) -> tuple:
    """``target`` at ``threads`` threads and the graph's weight-GEMM options for it
    (register block 8 x 3 vectors with 32 registers, as ``compile_graph`` compiles
    ``x @ W``), the weight ``B`` pre-packed."""
    tgt = _threads(target, threads)
    wide = tgt.cpu.vector_registers >= 32
    return tgt, {**(CPU_WEIGHT_GEMM_OPTIONS_32 if wide else CPU_WEIGHT_GEMM_OPTIONS), **opts}


def _weight_loads(ck, name: str) -> list:
    loads: list = []
    ir.walk(ck.final_ir.body, lambda n: loads.append(n.lanes) if isinstance(n, ir.Load)
            and n.buffer.name == name else None)
    return loads


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_few_row_split_full_tiles_read_the_prepacked_weight_in_vectors(threads):
    """16 x 256 x 256 on AVX-512 (register tile 8 x 48): at 2 threads the threads split
    the ``j`` tiles (``NC`` = 144, the second thread's full-tile loop ``c4 < 3 - c1``);
    every read of the pre-packed ``B`` is a vector load of a micro-kernel, none a
    scalar loop with div/mod indexing into the panels (the 2.07 ms kernel of
    docs/cpu_backend.md, 51 us at one thread).  Compile only: no build."""
    ck = compile_kernel(_matmul_kernel(16, 256, 256, f"pp_few_{threads}"),
                        *_weight_gemm("cpu-avx512", threads, prepack=("B",)))
    notes = ck.notes["cpu-backbone-tile"][0]
    assert ("parallel over j tiles" in notes) == (threads > 1), notes
    lanes = _weight_loads(ck, "B")
    # the full tile's micro-kernel loads its 48 columns as 3 vectors per k step
    assert len(lanes) >= 3 and set(lanes) == {16}, sorted(set(lanes))


@pytest.mark.parametrize("m,k,n,balanced", [(13, 37, 250, False), (5, 83, 301, False),
                                            (29, 11, 3001, False), (13, 601, 317, True),
                                            (1, 1031, 97, True)])
def test_prepacked_few_row_split_matches_numpy_at_two_threads(m, k, n, balanced):
    """Odd sizes whose ``j`` tiles split unevenly over 2 threads, the weight pre-packed
    (3001 columns: two tiles per thread, a partial last tile and panel): no scalar
    read of the weight, within float32 rounding of numpy.  ``balanced``: the register
    block the graph picks (``few_row_register_block``) and ``k`` tiles of 512 with a
    ``k`` tail (601 = 512 + 89, prime 1031 = 2 x 512 + 7; one row)."""
    from polycomp.scheduler.cpu.backbone_tile import few_row_register_block
    tgt, opts = _weight_gemm("cpu-avx512", 2)
    if balanced:
        opts = {**opts, "gemm_register": few_row_register_block(
            m, n, tgt.vector_lanes("float32"), 2, opts["gemm_register"])}
    kern = _matmul_kernel(m, k, n, f"pp_few2_{m}_{k}_{n}")
    ck = compile_kernel(kern, tgt, {**opts, "prepack": ("B",)})
    notes = ck.notes["cpu-backbone-tile"][0]
    assert "parallel over j tiles" in notes
    assert "KC=512" in notes or not balanced, notes
    assert 1 not in _weight_loads(ck, "B")
    (rec,) = prepacked_inputs(ck.state)
    A, B = _f32(m, k), _f32(k, n)
    fn = ck.backend.load(ck)
    fn.threads = 2
    got = fn(A, rec.pack(B))
    np.testing.assert_allclose(got, A.astype(np.float64) @ B, rtol=1e-5, atol=1e-5 * k)


def test_few_row_nc_gives_each_thread_equal_whole_tiles():
    """The few-row split's ``NC``: thread 0 (``schedule(static)``) runs the fewest
    panels the ``NR`` grid allows, in whole tiles within the cache bound (BERT's 1024
    and 4096 columns at ``NR`` = 48: 2 x 528 and 8 x 528, not 3 x 384 and 9 x 480)."""
    from polycomp.scheduler.cpu.backbone_tile import few_row_nc
    assert few_row_nc(1024, 720, 48, 2) == 528 and few_row_nc(4096, 720, 48, 2) == 528
    for n, cap, nr, t in [(1024, 720, 48, 2), (4096, 720, 48, 2), (3072, 480, 48, 4),
                          (1501, 480, 16, 2), (97, 720, 48, 2), (256, 144, 48, 2)]:
        nc = few_row_nc(n, cap, nr, t)
        panels, tiles = -(-n // nr), -(-n // nc)
        per = -(-tiles // t)                            # tiles of thread 0
        assert nc % nr == 0 and nc <= max(cap, nr), (n, nc)
        # the work of thread 0 at most one panel per tile above its fair share
        assert per * nc // nr <= -(-panels // t) + per - 1, (n, nc)
        assert tiles <= per * t


def test_few_row_register_block_and_kc_split_the_columns_evenly(monkeypatch):
    """The few-row split's register block and ``KC`` (a graph's weight GEMM): BERT-large's
    1024 and 4096 columns in panels of 32 (thread 0: 512 / 2048 columns, 528 / 2064 with
    panels of 48), BERT-base's 768 and 3072 keep 48 (even either way), one thread or 128
    rows keep the planned block, so does AVX2's 4 x 3 (4 x 2: 8 accumulators); ``KC``
    512 only when thread 0 keeps its columns (not with 48-column panels at 1024 columns:
    576); ``POLYCOMP_FEW_ROW_BLOCK=0`` keeps both.
    The graph picks the block for a group's weight matmul (``weight_register_block``)."""
    from polycomp.graph.compile import weight_register_block
    from polycomp.graph.partition import partition
    from polycomp.scheduler.cpu.backbone_tile import (
        few_row_kc,
        few_row_nc,
        few_row_register_block,
        few_row_thread_columns,
    )
    blk = few_row_register_block
    assert blk(32, 1024, 16, 2, (8, 3)) == blk(32, 4096, 16, 2, (8, 3)) == (8, 2)
    assert blk(32, 768, 16, 2, (8, 3)) == blk(32, 3072, 16, 2, (8, 3)) == (8, 3)
    assert blk(32, 1024, 16, 1, (8, 3)) == blk(128, 1024, 16, 2, (8, 3)) == (8, 3)
    assert blk(16, 1024, 8, 2, (4, 3)) == (4, 3)      # AVX2: 4 x 2 has too few accumulators
    assert blk(16, 1024, 8, 2, (8, 3)) == (8, 2)
    for n in (97, 317, 1000, 1024, 1536, 2047, 4096, 5000):
        for lanes, b in ((16, (8, 3)), (8, (4, 3))):
            mr, ni = blk(8, n, lanes, 2, b)
            assert mr == b[0] and 2 <= ni <= b[1]
            share = [math.ceil(math.ceil(n / (v * lanes)) / 2) * v * lanes for v in (ni, b[1])]
            assert share[0] <= share[1], (n, lanes, ni)
    l1, l2 = 32768, 1 << 20
    assert few_row_kc(1024, 256, 8, 32, 4, 2, l1, l2) == 512
    assert few_row_kc(4096, 256, 8, 32, 4, 2, l1, l2) == 512
    assert few_row_kc(1024, 256, 8, 48, 4, 2, l1, l2) == 256
    assert few_row_thread_columns(1024, few_row_nc(1024, 288, 48, 2), 48, 2) == 576
    g = GraphBuilder("wrb")
    x = g.input("x", (4, 8, 1024))
    w = g.constant("w", np.zeros((1024, 1024), np.float32))
    (grp,) = partition(g.build(g.matmul(x, w))).groups
    assert weight_register_block(grp, _threads("cpu-avx512", 2), (8, 3)) == (8, 2)
    assert weight_register_block(grp, _threads("cpu-avx512", 1), (8, 3)) == (8, 3)
    monkeypatch.setenv("POLYCOMP_FEW_ROW_BLOCK", "0")
    assert blk(32, 1024, 16, 2, (8, 3)) == (8, 3)
    assert few_row_kc(1024, 256, 8, 32, 4, 2, l1, l2) == 256


@pytest.mark.parametrize("rows", ["M", 128])
def test_weight_gemm_blocks_balanced_and_symbolic_rows_in_small_row_tiles(rows):
    """A 768-wide pre-packed weight in column blocks of 384 (two, the width covered
    exactly: no padding to 960 as with the nominal 480); with symbolic rows at 2 threads
    the row tiles are ``SMALL_M_PANELS`` register rows (32), so a call of 64 .. 256 rows
    has a row tile per thread (``MC`` = 256 ran 128 rows on one thread); 128 constant
    rows take one tile of 64 rows per thread, in the per-thread order (one parallel
    region: no shared-panel order for a weight that is not copied).  Compile only."""
    m = pc.sym("M") if rows == "M" else rows
    ck = compile_kernel(_matmul_kernel(m, 768, 768, f"pp_bal_{rows}"),
                        *_weight_gemm("cpu-avx512", 2, prepack=("B",)))
    notes = ck.notes["cpu-backbone-tile"][0]
    (rec,) = prepacked_inputs(ck.state)
    blocks, _, panels, _, nr = rec.packed_shape
    assert "NC=384" in notes and blocks * panels * nr == 768, (notes, rec.packed_shape)
    assert ("MC=32 " in notes) == (rows == "M") and "parallel over i tiles" in notes, notes
    assert "shared" not in notes and "one at a time" not in notes, notes


def test_prepacked_dynamic_row_tiles_exact_at_one_and_two_threads(monkeypatch):
    """Constant prime rows, the weight pre-packed, 2 planned threads, dynamic row tiles
    asked for (``POLYCOMP_GEMM_DYNAMIC=1``): the per-thread order (one parallel region,
    no shared-panel order) with row tiles of 4 register rows handed out one at a time
    (97 rows: 32 + 32 + 32 + 1); 1 and 2 threads give the same bits, within float32
    rounding of numpy."""
    monkeypatch.delenv("POLYCOMP_GEMM_SHARED", raising=False)
    monkeypatch.setenv("POLYCOMP_GEMM_DYNAMIC", "1")
    tgt, opts = _weight_gemm("cpu", 2)
    m, k, n = 97, 37, 101
    ck = compile_kernel(_matmul_kernel(m, k, n, "pp_dyn_rows"), tgt, {**opts, "prepack": ("B",)})
    notes = ck.notes["cpu-backbone-tile"][0]
    assert "i tiles (handed out one at a time)" in notes and "shared" not in notes, notes
    assert "schedule(dynamic)" in ck.source and ck.source.count("#pragma omp parallel") == 1
    (rec,) = prepacked_inputs(ck.state)
    A, B = _f32(m, k), _f32(k, n)
    Bp = rec.pack(B)
    fn = ck.backend.load(ck)
    fn.threads = 1
    one = fn(A, Bp)
    np.testing.assert_allclose(one, A.astype(np.float64) @ B, rtol=1e-5, atol=1e-4)
    fn.threads = 2
    for _ in range(2):
        np.testing.assert_array_equal(fn(A, Bp), one)


def test_prepacked_symbolic_rows_small_row_tiles_match_numpy_at_two_threads():
    """Symbolic rows, the row tiles of ``SMALL_M_PANELS`` register rows over 2 threads:
    right for 1, a prime and several tiles' worth of rows."""
    tgt, opts = _weight_gemm("cpu", 2)
    M = pc.sym("M")
    ck = compile_kernel(_matmul_kernel(M, 53, 101, "pp_sym_small_tiles"), tgt,
                        {**opts, "prepack": ("B",)})
    assert "parallel over i tiles" in ck.notes["cpu-backbone-tile"][0]
    (rec,) = prepacked_inputs(ck.state)
    fn = ck.backend.load(ck)
    fn.threads = 2
    B = _f32(53, 101)
    Bp = rec.pack(B)
    for m in (1, 37, 131):
        A = _f32(m, 53)
        np.testing.assert_allclose(fn(A, Bp), A.astype(np.float64) @ B, rtol=1e-5, atol=1e-4)


def test_prepacked_gemm_symbolic_rows_and_wrong_layout_refused():
    """Symbolic ``M`` (partial register tiles): matches numpy for several row counts;
    the unpacked ``B`` is refused by the argument check (its shape is not the packed
    one), never read in the wrong layout."""
    M = pc.sym("M")
    kern = _matmul_kernel(M, 29, 53, "pp_sym")
    ck = compile_kernel(kern, "cpu", {"prepack": ("B",)})
    (rec,) = prepacked_inputs(ck.state)
    fn = ck.backend.load(ck)
    B = _f32(29, 53)
    Bp = rec.pack(B)
    for m in (1, 5, 67):
        A = _f32(m, 29)
        np.testing.assert_allclose(fn(A, Bp), A.astype(np.float64) @ B, rtol=1e-5, atol=1e-4)
    with pytest.raises(pc.PolycompError):
        fn(_f32(5, 29), B)


def test_prepack_only_where_the_gemm_reads_it_alone():
    """A weight also read by another statement (here added to the product) is not
    pre-packed: no record, the kernel takes it as it is; unknown names are ignored and a
    bad option value is one clear error."""
    k = Kernel(lambda A, B: ops.add(ops.matmul(A, B), B), name="pp_twice",
               inputs={"A": pc.Tensor[(16, 16), "float32"], "B": pc.Tensor[(16, 16), "float32"]})
    ck = compile_kernel(k, "cpu", {"prepack": ("B", "nothing")})
    assert prepacked_inputs(ck.state) == []
    A, B = _f32(16, 16), _f32(16, 16)
    np.testing.assert_allclose(ck.backend.load(ck)(A, B), A @ B + B, rtol=1e-5, atol=1e-5)
    with pytest.raises(OptionError, match="prepack"):
        compile_kernel(k, "cpu", {"prepack": (3,)})


def _linear_graph(lead, k, n, w, b, name, gelu=False, return_w=False):
    g = GraphBuilder(name)
    x = g.input("x", (*lead, k))
    wv = g.constant("w", w)
    y = g.add(g.matmul(x, wv), g.constant("b", b))
    return g.build(g.gelu(y) if gelu else y, *([wv] if return_w else []))


def _gelu(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


@pytest.mark.parametrize("lead,k,n,binds", [
    (("B", "S"), 13, 7, [(1, 1), (3, 5)]),       # symbolic rows, prime sizes
    pytest.param((61,), 83, 131, [()], marks=pytest.mark.slow),       # odd 2-d, gelu
    pytest.param((1, 1), 5, 1, [()], marks=pytest.mark.slow),         # extent 1
])
def test_graph_weights_packed_at_compile_time(lead, k, n, binds, monkeypatch):
    """The linear layer's weight is packed once, when the graph is compiled (the step
    carries the packed constant); results equal those of the per-call packing
    (``POLYCOMP_PREPACK=0``) bit for bit and numpy's within rounding."""
    w, b = _f32(k, n), _f32(n)
    tag = f"{len(lead)}_{k}_{n}"
    gelu = k == 83
    graph = _linear_graph(lead, k, n, w, b, f"ppg_on_{tag}", gelu)
    graph.owns_constants = True   # as the importers' graphs: the weight is then held once
    cg = compile_graph(graph, "cpu")
    packed = [a for s in cg.steps for a in s.packed.values()]
    assert len(packed) == 1 and sorted(packed[0][packed[0] != 0]) == sorted(w[w != 0])
    wv, bv = graph.constants
    assert wv.const is None and wv.held is not None and bv.const is not None
    assert cg.held_bytes() == HeldBytes(b.nbytes, packed[0].nbytes, 0)
    if lead == ("B", "S"):  # compiling the graph again rebuilds the dropped array first
        cg2 = compile_graph(graph, "cpu")
        again = [a for s in cg2.steps for a in s.packed.values()]
        np.testing.assert_array_equal(again[0], packed[0])
        assert again[0] is not packed[0] and wv.const is None
        graph.restore_constants()
        np.testing.assert_array_equal(wv.const, w)
        # a packed weight that is also a graph output is still handed over as itself
        # (the caller gets a copy): a graph owning its constants keeps that array too
        graph = _linear_graph(lead, k, n, w, b, f"ppg_on_{tag}", return_w=True)
        graph.owns_constants = True
        cg3 = compile_graph(graph, "cpu")   # (the same kernel)
        wv = graph.constants[0]
        assert any(s.packed for s in cg3.steps) and wv in cg3.constants_read()
        assert wv.const is not None and wv.held is None
        assert cg3.held_bytes().constants == w.nbytes + b.nbytes
        x = _f32(2, 3, k)
        y, wo = cg3(x)
        np.testing.assert_allclose(y, x @ w + b, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(wo, w)
    monkeypatch.setenv("POLYCOMP_PREPACK", "0")
    cg_off = compile_graph(_linear_graph(lead, k, n, w, b, f"ppg_off_{tag}", gelu), "cpu")
    assert all(not s.packed for s in cg_off.steps)
    syms = [d for d in lead if isinstance(d, str)]
    for bd in binds:
        env = dict(zip(syms, bd))
        x = _f32(*[env.get(d, d) for d in lead], k)
        got = cg(x)
        np.testing.assert_array_equal(got, cg_off(x))
        ref = x.astype(np.float64) @ w.astype(np.float64) + b
        ref = _gelu(ref) if gelu else ref
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_dynamo_linear_weights_prepacked_and_repacked_on_update():
    """Through ``torch.compile``: the linear's weight is a packed constant of the
    compiled graph, and an in-place update of it recompiles (packs it again): no call
    computes with the stale packed weight."""
    import torch

    from polycomp.graph.dynamo import polycomp_backend
    torch.manual_seed(0)
    lin = torch.nn.Linear(19, 23).eval()
    graphs = []

    def backend(gm, ex):
        fn = polycomp_backend(gm, ex)
        graphs.append(fn)
        return fn
    torch._dynamo.reset()
    cf = torch.compile(lambda x: lin(x), backend=backend, dynamic=False)
    x = torch.randn(7, 19)
    with torch.no_grad():
        torch.testing.assert_close(cf(x), lin(x))
        cg = graphs[0].compiled_graph
        assert cg is not None and any(s.packed for s in cg.steps)
        # the graph's copy of the weight is dropped: held once, packed (the bias as is)
        assert cg.graph.owns_constants
        held = cg.held_bytes()
        assert held.constants == lin.bias.nbytes and 0 < held.packed
        assert sorted((v.const is None, len(v.shape)) for v in cg.graph.constants) == [
            (False, 1), (True, 2)]
        lin.weight.mul_(-3)
        torch.testing.assert_close(cf(x), lin(x))


@pytest.mark.slow
def test_identical_groups_share_a_kernel_and_pack_their_own_weights():
    """Two linear layers of the same shapes (one kernel built for both) each pass their
    own packed weight; float64 weights pack and compute as float64."""
    for dtype, tol in (("float32", 1e-5), ("float64", 1e-12)):
        w1, w2 = (RNG.standard_normal((24, 40)).astype(dtype) for _ in range(2))
        g = GraphBuilder(f"pp_two_{dtype}")
        x = g.input("x", (9, 24), dtype)
        graph = g.build(g.matmul(x, g.constant("w1", w1)), g.matmul(x, g.constant("w2", w2)))
        cg = compile_graph(graph, "cpu")
        assert cg.kernel_count == 1
        packed = [a for s in cg.steps for a in s.packed.values()]
        assert len(packed) == 2 and packed[0].dtype == dtype
        xa = RNG.standard_normal((9, 24)).astype(dtype)
        o1, o2 = cg(xa)
        np.testing.assert_allclose(o1, xa @ w1, rtol=tol, atol=tol * 10)
        np.testing.assert_allclose(o2, xa @ w2, rtol=tol, atol=tol * 10)
