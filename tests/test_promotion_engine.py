"""Unit tests of the promotion engine's objects (scheduler/promotion/): reference groups,
boxes and scoped footprints, layouts, decisions and their remarks, copy rules, and the
typed CPU pack records that replace the old mark strings."""
import dataclasses
import itertools
import re

import islpy as isl
import pytest

import polycomp as pc
from polycomp import ir
from polycomp.driver import compile_kernel
from polycomp.errors import PolycompInternalError, ResourceLimitError
from polycomp.frontend import ops
from polycomp.hw.cuda.tensorize import _Kernel
from polycomp.hw.target import get_target
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.classify import fusion_groups
from polycomp.scheduler.common.pattern_schedule import PatternSchedulePass
from polycomp.scheduler.common.program_order import ProgramOrderPass
from polycomp.scheduler.cpu.backbone_tile import CpuBackboneTilePass
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.promotion.copies import (
    NameAllocator,
    copy_subtree,
    needs_sync,
    sync_subtree,
)
from polycomp.scheduler.promotion.cpu_pack import CpuPackPass
from polycomp.scheduler.promotion.decision import PromotionDecision, Refusal
from polycomp.scheduler.promotion.footprint import (
    Layout,
    ScopedFootprint,
    box_of,
    footprint,
    has_reuse,
    strided_box_of,
)
from polycomp.scheduler.promotion.record import PackedOperand, PackRequest, promotion_state
from polycomp.scheduler.promotion.reference import (
    array_references,
    make_group,
    read_only_groups,
    thread_private_refusal,
    written_arrays,
)
from polycomp.scheduler.tensorcore.staging import shared_limit, stage_operands
from polycomp.scheduler.tensorcore.tile import (
    TcConfig,
    TcPlan,
    TensorCoreTilingPass,
    gemm_view,
)
from polycomp.state import CompileState

N, M, K = pc.sym("N M K")


@pc.tensor_expr
def matmul(A: pc.Tensor[(N, K), "float32"], B: pc.Tensor[(K, M), "float32"]):
    k = pc.reduce_axis(K, "k")
    return pc.compute((N, M), lambda i, j: pc.sum(A[i, k] * B[k, j], axis=k), name="C")


@pc.tensor_expr
def transpose(x: pc.Tensor[(N, M), "float32"]):
    return pc.compute((M, N), lambda i, j: x[j, i], name="t")


def _domain(model) -> isl.UnionSet:
    out = None
    for s in model.statements:
        u = isl.UnionSet.from_set(s.domain)
        out = u if out is None else out.union(u)
    return out


def _tile_prefix(model, ti, tj, tk) -> isl.UnionMap:
    """{ C_update[i, j, k] -> [i/ti, j/tj, k/tk] }: the prefix schedule at the point
    band of a tiled matmul (one tile of i, j and k per prefix point)."""
    return isl.UnionMap.read_from_str(
        model.ctx, f"[N, K, M] -> {{ C_update[i, j, k] -> [floor(i/{ti}), floor(j/{tj}), "
                   f"floor(k/{tk})] }}")


# --------------------------------------------------------------------------- references

def test_read_only_groups_of_matmul():
    model = matmul.polyhedral_model()
    stmts = model.statements
    groups = read_only_groups(stmts, _domain(model), {"C"})
    assert [g.name for g in groups] == ["A", "B"]
    for g in groups:
        assert g.read_only and g.reads and not g.writes
        assert [s.name for s in g.statements()] == ["C_update"]
        assert [m.get_tuple_name(isl.dim_type.out) for m in _maps(g.access)] == [g.name]
    assert [b.name for b in written_arrays(stmts)] == ["C"]


def test_written_group_is_bijective_per_thread():
    """All references to C index it with the output iterators (i, j): private to the
    thread owning (i, j), with reuse (init, read and write of the update)."""
    model = matmul.polyhedral_model()
    refs = array_references(model.statements, "C")
    assert len(refs) >= 3 and any(r.is_write for r in refs) and any(r.is_read for r in refs)
    assert thread_private_refusal(refs, 2) is None
    g = make_group(refs[0].access.buffer, refs, _domain(model))
    assert g.writes and g.reads and not g.read_only


def test_transposed_reference_is_shared_between_threads():
    model = transpose.polyhedral_model()
    refs = array_references(model.statements, "t") + array_references(model.statements, "x")
    assert thread_private_refusal(refs, 2) is Refusal.SHARED_BETWEEN_THREADS
    # a single reference has no reuse
    assert thread_private_refusal(array_references(model.statements, "t"), 2) is Refusal.NO_REUSE


# --------------------------------------------------------------------------- footprints

def test_box_of_a_tiled_matmul():
    """Per (64 x 32 x 16) tile: A's box is 64 x 16 at (64 p0, 16 p2), B's 16 x 32 at
    (16 p2, 32 p1); both are reused within the tile."""
    model = matmul.polyhedral_model()
    prefix = _tile_prefix(model, 64, 32, 16).intersect_domain(_domain(model))
    groups = {g.name: g for g in read_only_groups(model.statements, _domain(model), {"C"})}
    want = {"A": ([64, 16], [(64, 0), (16, 2)]), "B": ([16, 32], [(16, 2), (32, 1)])}
    for name, (sizes, offs) in want.items():
        f = footprint(prefix, groups[name].access)
        box = box_of(f)
        assert box.sizes == sizes and box.strides == [1, 1]
        for aff, (coef, dim) in zip(box.offsets, offs):
            for d in range(3):
                c = aff.get_coefficient_val(isl.dim_type.in_, d).to_python()
                assert c == (coef if d == dim else 0)
            assert aff.get_constant_val().to_python() == 0
        sf = ScopedFootprint(groups[name], f, box)
        assert sf.shape == tuple(sizes)
        assert sf.elements() == sizes[0] * sizes[1]
        assert sf.bytes() == 4 * sf.elements()
        assert has_reuse(prefix, groups[name].access)


def test_strided_box_of_a_cyclic_thread_footprint():
    """Thread t of 8 owns the rows i = t + 8r of a 32-row tile: stride 8, 4 rows."""
    ctx = isl.Context()
    f = isl.Map.read_from_str(ctx, "[t] -> { [p] -> C[i, j] : 0 <= t < 8 and 32p <= i < 32p + 32 "
                                   "and i = t + 8*floor(i/8) and 0 <= j < 4 }")
    box = strided_box_of(f)
    assert box.sizes == [4, 4] and box.strides == [8, 1]


def test_unbounded_footprint_has_no_box():
    ctx = isl.Context()
    f = isl.Map.read_from_str(ctx, "[N] -> { [p] -> A[a] : 0 <= a < N }")
    assert box_of(f) is None


# --------------------------------------------------------------------------- layouts

@pytest.mark.parametrize("sizes,dim,width", [((10, 3), 0, 4), ((5, 7), 1, 3), ((2, 3, 8), 2, 8)])
def test_panel_layout_maps_the_box_one_to_one_into_its_shape(sizes, dim, width):
    lay = Layout.packed_panel(dim, width)
    shape = lay.shape(sizes)
    panels = -(-sizes[dim] // width)
    assert shape == (panels,) + tuple(s for d, s in enumerate(sizes) if d != dim) + (width,)
    seen = set()
    for x in itertools.product(*(range(s) for s in sizes)):
        idx = lay.index(x)
        assert all(0 <= i < n for i, n in zip(idx, shape)), (x, idx)
        assert idx[0] == x[dim] // width and idx[-1] == x[dim] % width
        seen.add(idx)
    assert len(seen) == len(list(itertools.product(*(range(s) for s in sizes))))


def test_row_major_layout_is_the_identity_and_declared_kinds_are_not_built():
    assert Layout.row_major().shape([3, 4]) == (3, 4)
    assert Layout.row_major().index((2, 1)) == (2, 1)
    with pytest.raises(PolycompInternalError):
        Layout("fractal").shape([8, 8])
    with pytest.raises(PolycompInternalError):      # a swizzled layout without its rows
        Layout("swizzled").shape([8, 8])
    with pytest.raises(PolycompInternalError):      # rows of 32 do not hold a 64-wide box
        Layout.swizzled(32, 8, 2).shape([16, 64])


def _xor_key(row: int, chunks: int) -> int:
    """The swizzle of docs/tensor_cores.md, written out independently of the layout."""
    if chunks >= 8:
        return row % 8
    return {4: (row // 2) % 4, 2: (row // 4) % 2}.get(chunks, 0)


@pytest.mark.parametrize("rows,width,stages,xor", [(64, 32, 3, True), (32, 128, 2, True),
                                                   (16, 64, 1, True), (32, 16, 4, True),
                                                   (64, 32, 3, False)])
def test_swizzled_layout_maps_a_stage_bijectively(rows, width, stages, xor):
    lay = Layout.swizzled(width, 8, stages, xor)
    assert lay.shape([rows, width]) == (stages, rows * width)
    seen = set()
    for r, c in itertools.product(range(rows), range(width)):
        idx = lay.index((r, c))
        key = _xor_key(r, width // 8) if xor else 0
        assert idx == (0, r * width + ((c // 8) ^ key) * 8 + c % 8), (r, c, idx)
        assert 0 <= idx[1] < rows * width
        seen.add(idx)
    assert len(seen) == rows * width      # one stage's elements, each once


def _eval_index(e, env) -> int:
    """An integer IR expression of the tensorizer (with ``pc_xor``) at ``env``."""
    if isinstance(e, int):
        return e
    if isinstance(e, ir.IntImm):
        return e.value
    if isinstance(e, ir.Var):
        return env[e.name]
    if isinstance(e, ir.Call) and e.name == "pc_xor":
        return _eval_index(e.args[0], env) ^ _eval_index(e.args[1], env)
    if isinstance(e, ir.Binary):
        a, b = _eval_index(e.a, env), _eval_index(e.b, env)
        ops_ = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__,
                "//": int.__floordiv__, "%": int.__mod__}
        return ops_[e.op](a, b)
    raise AssertionError(f"unexpected index expression {e!r}")


def _tc_compile(**tile):
    cfg = {"block": (64, 64), "warp": (32, 32), "k": 32, "stages": 3, **tile}
    return compile_kernel(ops.matmul_kernel("float16"), "cuda", {"tc_tile": cfg})


def test_swizzled_layout_index_is_the_tensorize_swizzle():
    """For every element of the 64 x 32 A tile (and the 32 x 64 B tile) of a Tensor
    Core kernel, the staging layout's index() is the offset the tensorizer's swizzle
    builds as an IR expression (``_Kernel.swizzle`` with ``pc_xor``)."""
    ck = _tc_compile()
    plan = gpu_kernels(ck.state).tc_plans[0]
    kern = _Kernel(plan, ck.state.model)
    row, chunk, elem = ir.Var("row"), ir.Var("chunk"), ir.Var("elem")
    for buf, d, (rows, width) in ((kern.As, plan.staging.a, (64, 32)),
                                  (kern.Bs, plan.staging.b, (32, 64))):
        lay = d.footprint.layout
        assert lay.kind == "swizzled" and d.footprint.box.sizes == [rows, width]
        assert tuple(x.value for x in buf.shape) == (3, rows * width)
        expr = kern.swizzle(row, chunk, elem, buf)
        for r, c in itertools.product(range(rows), range(width)):
            env = {"row": r, "chunk": c // 8, "elem": c % 8}
            assert lay.index((r, c)) == (0, _eval_index(expr, env)), (buf.name, r, c)


def test_tensor_core_plan_carries_shared_staging_decisions():
    """A and B are staged in shared memory by decisions of the engine: the factor's
    read group, a BM x KT / KT x BN box, a swizzled 3-stage layout, the async copy rule
    (cp.async); the records of As/Bs come from them, the fragments are registers."""
    ck = _tc_compile()
    state = ck.state
    plan = gpu_kernels(state).tc_plans[0]
    rule = state.target.memory.copy_rule("global", "shared", "async")
    assert rule.variant == "async" and "cp.async" in rule.mechanism
    for d, name, sizes in ((plan.staging.a, "A", [64, 32]), (plan.staging.b, "B", [32, 64])):
        assert d.promoted and d.level == "shared" and d.copy is rule
        assert d.group.name == name and d.group.read_only
        assert [s.name for s in d.group.statements()] == [plan.view.update.name]
        fp = d.footprint
        assert fp.box.sizes == sizes and fp.layout.stages == 3 and fp.bytes() == 3 * 64 * 32 * 2
        assert fp.relation.get_tuple_name(isl.dim_type.out) == name
        assert d.remark() in ck.notes["tc-tiling"]
    assert sum(d.footprint.bytes() for d in plan.staging.decisions) == \
        plan.config.shared_bytes(2)
    levels = {p.local.name: p.level for p in promotion_state(state).promotions
              if p.kernel == plan.kernel}
    assert levels[f"As{plan.kernel}"] == levels[f"Bs{plan.kernel}"] == "shared"
    assert levels[f"acc{plan.kernel}"] == levels[f"afrag{plan.kernel}"] == "registers"


def test_over_budget_tensor_core_staging_is_refused_with_its_numbers():
    """256x128 / KT 64 / 4 stages: A alone (128 KiB) fits the sm_80 opt-in limit, A + B
    (192 KiB) does not; B's decision is refused over budget with the numbers, the
    remark is noted and the pass raises ResourceLimitError."""
    model = ops.matmul_kernel("float16").polyhedral_model()
    big = {"block": (256, 128), "warp": (64, 64), "k": 64, "stages": 4}
    ctx = CompileState(model, get_target("cuda"), {"tc_tile": big})
    sched = PatternSchedulePass().run(ProgramOrderPass().run(model.initial_schedule, ctx), ctx)
    with pytest.raises(ResourceLimitError, match="stage"):
        TensorCoreTilingPass().run(sched, ctx)
    limit = shared_limit(ctx.target)
    assert limit == ctx.target.cuda.shared_memory_optin > ctx.target.capacity("shared")
    remark = (f"kernel 1: B not promoted: over budget ({4 * (256 * 64 + 64 * 128) * 2} > "
              f"{limit} bytes of shared memory)")
    assert ctx.remarks["tc-tiling"] == [remark]
    # the decisions themselves, on the tiled tree
    view = gemm_view(fusion_groups(model.graph)[0], model)
    cfg = TcConfig(**big).check()
    plan = TcPlan(view, cfg, 1, 0)
    tiled = TensorCoreTilingPass()._tile(sched, 0, plan, ctx)
    staging = stage_operands(tiled, plan, ctx.target)
    assert staging.a.promoted and staging.a.footprint.bytes() == 4 * 256 * 64 * 2
    b = staging.b
    assert not b.promoted and b.reason is Refusal.OVER_BUDGET
    assert (b.need, b.budget) == (4 * (256 * 64 + 64 * 128) * 2, limit)
    assert staging.refused == [b] and b.remark() == remark


# --------------------------------------------------------------------------- decisions

def _group(name="A"):
    model = matmul.polyhedral_model()
    return {g.name: g for g in read_only_groups(model.statements, _domain(model), {"C"})}[name]


def test_refused_decision_carries_its_reason_and_numbers():
    d = PromotionDecision(_group(), "shared", "kernel 3").refuse(Refusal.OVER_BUDGET, 53248, 49152)
    assert not d.promoted and d.reason is Refusal.OVER_BUDGET
    assert (d.need, d.budget) == (53248, 49152)
    assert d.remark() == ("kernel 3: A not promoted: over budget (53248 > 49152 bytes of "
                          "shared memory)")
    r = PromotionDecision(_group(), "registers", "kernel 0").refuse(Refusal.OVER_BUDGET, 96)
    assert r.remark() == "kernel 0: A not promoted to registers: over register budget (96 elements)"
    u = PromotionDecision(_group("B"), "shared", "kernel 1").refuse(Refusal.UNBOUNDED)
    assert u.remark() == "kernel 1: B not promoted: unbounded footprint"


def test_refusals_are_noted_by_the_gpu_passes():
    from polycomp.driver import compile_kernel
    ck = compile_kernel(transpose, "cuda")
    assert ck.notes["promote-registers"] == [
        "kernel 0: t not promoted to registers: shared between threads (an access is not at "
        "the thread's own output point)"]
    assert any("x promoted to shared memory" in n and "uncoalesced" in n
               for n in ck.notes["promote-shared"])


def test_promotion_records_carry_their_memory_level():
    """Each engine pass records the level of the target's hierarchy holding the local
    buffer (the scope of that level's buffers); the point loops of the kernel with a
    register tile are unrolled because of the ``registers`` record."""
    from polycomp.driver import compile_kernel
    ck = compile_kernel(matmul, "cuda")
    memory = ck.state.target.memory
    levels = {p.array.name: p.level for p in promotion_state(ck.state).promotions}
    assert levels == {"A": "shared", "B": "shared", "C": "registers"}
    for p in promotion_state(ck.state).promotions:
        assert memory.level(p.level).scope == p.local.scope and p.warp is None
    # unrolled point loops: the register tile is indexed by constants only
    indices = re.findall(r"C_reg2\[([^\]]*)\]", ck.source)
    assert indices and all(re.fullmatch(r"[0-9 ()*+]+", i) for i in indices), indices


# --------------------------------------------------------------------------- copies

def test_copy_rules_decide_the_barriers():
    cuda, cpu = get_target("cuda").memory, get_target("cpu-avx512").memory
    assert needs_sync(cuda, "global", "shared")
    assert not needs_sync(cuda, "global", "registers")
    assert not needs_sync(cpu, "memory", "L2")


def test_copy_and_sync_subtrees_are_extensions_over_the_prefix_points():
    ctx = isl.Context()
    prefix = isl.Set.read_from_str(ctx, "{ [p] : 0 <= p < 4 }")
    rel = isl.Map.read_from_str(ctx, "{ [p] -> [a] : 8p <= a < 8p + 8 and 0 <= p < 4 }")
    tree = copy_subtree(prefix, rel, "copy_A_0", mark=True)
    assert tree.get_type() == isl.schedule_node_type.extension
    ext = tree.extension_get_extension()
    assert isl.Set.from_union_set(ext.range()).count_val().to_python() == 32
    assert marks.name_of(tree.child(0)) == "copy:copy_A_0"
    band = tree.child(0).child(0)
    assert band.band_member_get_ast_loop_type(0) == isl.ast_loop_type.unroll
    sync = sync_subtree(prefix, "sync0_in")
    sync_points = isl.Set.from_union_set(sync.extension_get_extension().range())
    assert sync_points.count_val().to_python() == 1


def test_name_allocator_numbers_in_order():
    a = NameAllocator(3)
    assert [a.take(), a.take(), a.take()] == [3, 4, 5]


# --------------------------------------------------------------------------- CPU packing

def _cpu_target():
    t = get_target("cpu-avx512").with_capacities(L1=32 * 1024, L2=1024 * 1024)
    return dataclasses.replace(t, cpu=dataclasses.replace(t.cpu, threads=2))


def test_cpu_pack_records_round_trip_without_strings(monkeypatch):
    monkeypatch.setenv("POLYCOMP_GEMM_ORDER", "jk")   # the (j tile, k tile) order of the tree
    model = matmul.polyhedral_model()
    state = CompileState(model, _cpu_target(), {})
    sched = CpuBackboneTilePass().run(model.initial_schedule, state)
    reqs = promotion_state(state).pack_requests
    assert [(r.array.name, r.dim, r.width, r.level) for r in reqs] == [("B", 1, 64, "L2"),
                                                                       ("A", 0, 6, "L1")]
    assert "cpu_pack_request:0" in sched.to_str() and "cpu_pack_request:1" in sched.to_str()
    sched = CpuPackPass().run(sched, state)
    text = sched.to_str()
    assert "cpu_pack:0" in text and "cpu_pack:1" in text and "|" not in text
    assert all(isinstance(p, PackedOperand) for p in promotion_state(state).packs)
    b, a = promotion_state(state).packs
    assert (b.array, b.level, a.array, a.level) == ("B", "L2", "A", "L1")
    assert b.footprint.box.sizes == [256, 512] and a.footprint.box.sizes == [192, 256]
    assert b.footprint.layout == Layout.packed_panel(1, 64)
    assert b.footprint.shape == (8, 256, 64) and a.footprint.shape == (32, 256, 6)
    # the origin at the tile (i0, i1, i2) = (1, 2, 3) is (256 i2, 512 i1) for B
    pt = isl.Set.read_from_str(model.ctx, "[N, K, M] -> { [1, 2, 3] : N = 1000 and K = 1000 "
                                          "and M = 2000 }")
    origin = b.footprint.origin()
    for d, want in enumerate((768, 1024)):
        v = origin.get_pw_aff(d).intersect_domain(pt).max_val().to_python()
        assert v == want
    assert state.notes["cpu-pack"][0] == ("below 3 outer loops: B packed into L2: box "
                                          "[256, 512], panels of 64 along dimension 1 "
                                          "(524288 bytes)")


def test_a_request_without_reads_is_refused_and_noted(monkeypatch):
    monkeypatch.setenv("POLYCOMP_GEMM_ORDER", "jk")   # the (j tile, k tile) order of the tree
    from polycomp import ir
    model = matmul.polyhedral_model()
    state = CompileState(model, _cpu_target(), {})
    sched = CpuBackboneTilePass().run(model.initial_schedule, state)
    z = ir.Buffer("Z", "float32", (ir.IntImm(4), ir.IntImm(4)))   # read by no statement
    promotion_state(state).pack_requests[0] = PackRequest(z, 1, 64, "L2")
    out = CpuPackPass().run(sched, state)
    assert [p.array for p in promotion_state(state).packs] == ["A"]
    assert "cpu_pack:0" in out.to_str() and "cpu_pack_request" not in out.to_str()
    assert state.notes["cpu-pack"][0] == \
        "below 3 outer loops: Z not promoted to L2: empty footprint"


def _maps(um):
    from polycomp.islutil import maps
    return maps(um)
