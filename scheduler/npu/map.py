"""Pass ``npu-map``: which NPU program each stage becomes, as marks on the schedule tree.

Assumes: the program-order tree (``domain -> sequence -> filter per stage -> the
stage's subtree``, or ``domain -> subtree`` for one stage), after ``npu-chain-fuse``:
a tree that already holds an ``npu_chain`` mark (a fused chain) is returned unchanged.

Decides, as the NPU lowering will build it (first match):

1. the kernel is one plain (batch) matmul (with its output cast): a cube program —
   ``npu_cube:<n>`` above the matmul stage's subtree (:class:`~.plan.CubePlan`, tiles
   fitted to L0A/L0B/L0C/L1, or option ``cube_tile``); ``npu-cube-tile`` tiles it;
2. its first stage is a convolution (:mod:`.conv`): implicit GEMM on the cube, the
   stages after it as a vector epilogue — ``npu_conv:<n>`` above the stage
   (:class:`~.plan.ConvPlan`; the im2col tiling is not affine in the iteration space,
   so the tree is not tiled);
3. its first stage is a 2-d matmul and the others are elementwise: the cube with a
   vector epilogue on each output tile — ``npu_cube:<n>`` as in 1, tiles fitted with
   the epilogue's UB buffers;
4. otherwise the vector unit — ``npu_vector:<n>`` above everything
   (:class:`~.plan.VectorPlan`: the dimension roles of :mod:`.view`);
5. when none of these takes the kernel and it holds a matmul: phases
   (:mod:`.phases`) — ``npu_phases:<n>`` above the stage sequence
   (:class:`~.plan.PhasesPlan`), each cube phase's stage ``npu_cube:<k>``, each vector
   phase's stages ``npu_vector:<k>``.

Otherwise a :class:`~polycomp.errors.TargetError` names the stage (and, when phases
were tried, why they failed too).  What only the lowering knows (an epilogue's UB
bytes, whether the vector mapping takes some stages) is asked of the
:class:`~.plan.NpuLoweringModel` the backend gives the pass.

Guarantees: the output tree is the input with mark nodes inserted (the same
statement instances in the same order: every dependence still holds); each mark's
``<n>`` indexes its plan in ``npu_plans(state)``.
"""
from __future__ import annotations

from collections.abc import Iterator

import islpy as isl

from polycomp.errors import PolycompInternalError, TargetError
from polycomp.hw.target import Target
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.contraction import Contraction, match_contraction
from polycomp.scheduler.common.pass_base import Pass
from polycomp.state import CompileState

from .classify import (
    Dequant,
    dequant,
    epilogue_matmul,
    fixpipe_exact,
    is_matmul,
    plain_matmul,
    requant_exact,
)
from .conv import ConvMatch, check_extents, match_conv
from .cube import cube_tiles, tail_split
from .phases import SubGraph, split_phases
from .plan import (
    ConvPlan,
    CubePlan,
    NpuLoweringModel,
    NpuPlans,
    PhasePlan,
    PhasesPlan,
    VectorPlan,
    npu_plans,
)
from .view import choose_view, dim_size, tensor_keys

#: what ``Fixpipe`` writes from L0C on the A2 generation, per cube operand type (its
#: ``quantPre``: ``F322F16``, ``F322BF16``, ``NoQuant``; the int8 outputs ``REQ8`` /
#: ``DEQF16`` with a scale are not built)
_CUBE_OUT = {"float16": ("float16", "float32"), "float32": ("float16", "float32"),
             "bfloat16": ("bfloat16", "float32"), "int8": ("int32",)}

Plan = CubePlan | ConvPlan | VectorPlan


def _itemsize(dtype: str) -> int:
    return {"float16": 2, "bfloat16": 2, "int8": 1}.get(dtype, 4)


def _copies(options) -> int:
    return 2 if options.double_buffer else 1


def _out_dtype_ok(stage, dtype: str, in_dtype: str = "float16") -> None:
    outs = _CUBE_OUT.get(in_dtype, ())
    if dtype not in outs:
        raise TargetError(f"npu: {stage.name} writes {dtype} from {in_dtype} operands; the "
                          f"cube path writes {' or '.join(outs)} from {in_dtype} (Fixpipe "
                          f"quantPre on the A2 generation)")


def _float_cube(stage, in_dtype: str, what: str) -> None:
    """int8 operands take the plain (batch) matmul only (no epilogue, convolution or
    phases: their workspaces and vector stages are float)."""
    if in_dtype == "int8":
        raise TargetError(f"npu: {stage.name}: int8 operands {what}; the int8 cube path "
                          f"is a plain (batch) matmul with an int32 result")


def _by_fixpipe(dq: Dequant, options) -> bool:
    """Whether Fixpipe applies the dequantisation: a constant scale when Fixpipe reads it
    exactly (at most 10 mantissa bits) or with option ``fixpipe_quant``; a per-column
    scale tensor (``VDEQF16``) only with option ``fixpipe_quant``, since the hardware
    drops each scale's lower 13 mantissa bits (values unknown here).  Otherwise the
    vector epilogue computes it in float32 (exact).  An int8 requantisation (``REQ8`` /
    ``VREQ8``) rounds to nearest even where the DSL's cast truncates: a constant scale
    only when that cannot differ (:func:`requant_exact`), otherwise only with option
    ``fixpipe_quant``."""
    if dq.value is not None:
        exact = requant_exact if dq.out_dtype == "int8" else fixpipe_exact
        return exact(dq.value) or options.fixpipe_quant
    return options.fixpipe_quant


def _single(graph, target: Target, options, lm: NpuLoweringModel) -> Plan:
    stages = list(graph.stages)
    c = plain_matmul(stages)
    if c is not None:
        in_dt, out_dt = c.a.load.dtype, stages[-1].output.dtype
        tiles = cube_tiles(target, options, _itemsize(in_dt))
        _out_dtype_ok(stages[0], out_dt, in_dt)
        return CubePlan(stages[0].name, c, len(c.out_dims) == 3, in_dt, out_dt, tiles, graph,
                        k_split=tail_split(target, out_dt))
    if stages and stages[0].is_reduction:
        conv = match_conv(stages[0], graph.inputs)
        if conv is not None:
            return _conv(graph, conv, target, options, lm)
    c = epilogue_matmul(stages)
    dq = dequant(stages) if c is not None and c.a.load.dtype == "int8" else None
    if c is not None and dq is not None and _by_fixpipe(dq, options):
        # Fixpipe dequantises: cube only
        # a per-column scale: its uint64 parameters share L1 with the operands
        tiles = cube_tiles(target, options, _itemsize("int8"),
                           l1_col_bytes=8 if dq.tensor is not None else 0)
        return CubePlan(stages[0].name, c, False, "int8", dq.out_dtype, tiles, graph,
                        (stages[1].name,), deq_scale=dq.value, deq_tensor=dq.tensor,
                        deq_out=dq.out_dtype)
    if c is not None:
        if c.a.load.dtype == "int8" and stages[0].output.dtype != "int32":
            raise TargetError(f"npu: {stages[0].name}: int8 operands accumulate in int32; "
                              f"{stages[0].name} is {stages[0].output.dtype}")
        if c.a.load.dtype == "bfloat16":
            raise TargetError(f"npu: {stages[0].name}: bfloat16 operands with a vector "
                              f"epilogue; the epilogue's vector mapping takes float16/float32")
        need = lm.epilogue_ub(graph, stages[0], None, _copies(options))  # or TargetError
        tiles = cube_tiles(target, options, _itemsize(c.a.load.dtype), need)
        return CubePlan(stages[0].name, c, False, c.a.load.dtype, graph.outputs[0].dtype,
                        tiles, graph, tuple(s.name for s in stages[1:]))
    lm.check_vector(graph)
    return VectorPlan(graph, choose_view(graph))


def _conv(graph, conv: ConvMatch, target: Target, options, lm: NpuLoweringModel) -> ConvPlan:
    stage = graph.stages[0]
    out_dt = stage.output.dtype if len(graph.stages) == 1 else "float32"
    _out_dtype_ok(stage, out_dt)
    check_extents(conv)
    need = None
    if len(graph.stages) > 1:
        if None in tensor_keys(stage.output):
            raise TargetError(f"npu: conv {stage.name} with a unit dimension has no vector "
                              f"epilogue")
        need = lm.epilogue_ub(graph, stage, conv, _copies(options))
        out_dt = graph.outputs[0].dtype
    tiles = cube_tiles(target, options, _itemsize(conv.dtype), need)
    return ConvPlan(stage.name, conv, out_dt, tiles, graph,
                    tuple(s.name for s in graph.stages[1:]))


def _cube_phase(sg: SubGraph, c: Contraction, target: Target, options) -> CubePlan:
    s = sg.stages[0]
    a, b = (next(t for t in sg.inputs if t.name == x.load.buffer.name) for x in (c.a, c.b))
    for t in (a, b, s.output):       # their sizes are tiling data (or TargetError)
        for k in tensor_keys(t):
            if k is not None:
                dim_size(k)
    _float_cube(s, a.dtype, "in a kernel of several phases")
    _out_dtype_ok(s, s.output.dtype, a.dtype)
    tiles = cube_tiles(target, options, _itemsize(a.dtype))
    return CubePlan(s.name, c, len(a.shape) == 3, a.dtype, s.output.dtype, tiles, sg)


def _phases(graph, target: Target, options, lm: NpuLoweringModel) -> PhasesPlan:
    """The phases of ``graph``; raises the first phase's refusal."""
    phases: list[PhasePlan] = []
    for sg in split_phases(graph, is_matmul):
        c = match_contraction(sg.stages[0]) if sg.stages[0].is_reduction else None
        if isinstance(c, Contraction) and is_matmul(c) and len(sg.stages) == 1:
            phases.append(PhasePlan(_cube_phase(sg, c, target, options), sg))
        else:
            lm.check_vector(sg)
            phases.append(PhasePlan(VectorPlan(sg, choose_view(sg)), sg))
    return PhasesPlan(graph, tuple(phases))


def _has_matmul(stages) -> bool:
    return any(s.is_reduction and isinstance(c := match_contraction(s), Contraction)
               and is_matmul(c) for s in stages)


def plan_kernel(graph, target: Target, options, lm: NpuLoweringModel) -> Plan | PhasesPlan:
    """The mapping of ``graph`` (module docstring)."""
    try:
        return _single(graph, target, options, lm)
    except TargetError as first:
        if len(graph.stages) < 2 or not _has_matmul(graph.stages):
            raise
        try:
            return _phases(graph, target, options, lm)
        except TargetError as e:
            raise TargetError(f"{first}; as phases: {e}") from e


# --------------------------------------------------------------------------- the tree

def iter_marks(schedule: isl.Schedule, kind: str) -> Iterator[int]:
    """The ``<n>`` of every ``<kind>:<n>`` mark of ``schedule``, top down."""
    found: list[int] = []

    def visit(node: isl.ScheduleNode) -> bool:
        if marks.is_kind(node, kind):
            found.append(marks.index_of(node, kind))
        return True
    schedule.get_root().foreach_descendant_top_down(visit)
    return iter(found)


def find_mark(schedule: isl.Schedule, kind: str, n: int) -> isl.ScheduleNode | None:
    """The first (top-down) node of mark ``<kind>:<n>``."""
    found: list[isl.ScheduleNode] = []
    want = marks.make(kind, n).get_name()

    def visit(node: isl.ScheduleNode) -> bool:
        if not found and marks.name_of(node) == want:
            found.append(node.copy())      # isl frees the callback's node
        return not found
    schedule.get_root().foreach_descendant_top_down(visit)
    return found[0] if found else None


def _statements(model, stage) -> set[str]:
    return {st.name for st in model.statements if st.stage is stage}


def stage_node(schedule: isl.Schedule, model, stage) -> isl.ScheduleNode | None:
    """The root of ``stage``'s subtree: below its filter of the top sequence, or the
    domain's child for a one-stage kernel; None when the tree does not keep the stage
    apart (option ``isl_scheduler`` may fuse stages)."""
    names = _statements(model, stage)
    node = schedule.get_root().child(0)
    while node.get_type() == isl.schedule_node_type.mark:
        node = node.child(0)
    if node.get_type() == isl.schedule_node_type.sequence:
        for k in range(node.n_children()):
            f = node.child(k)
            sets = f.filter_get_filter().get_set_list()
            if {sets.get_at(i).get_tuple_name() for i in range(sets.n_set())} == names:
                return f.child(0)
    else:
        sets = node.get_domain().get_set_list()
        if {sets.get_at(i).get_tuple_name() for i in range(sets.n_set())} == names:
            return node
    return None


def _mark_stage(schedule: isl.Schedule, model, stage, kind: str, n: int,
                required: bool = True) -> isl.Schedule:
    """``schedule`` with mark ``<kind>:<n>`` above ``stage``'s subtree; when the tree
    does not keep the stage apart, a :class:`TargetError` (``required``: the mark is
    the kernel's mapping) or the tree unchanged (the stages of a phase: the
    ``npu_phases`` mark above them maps them; a cube phase is then not tiled in the
    tree, its program has the plan's tiles all the same)."""
    node = stage_node(schedule, model, stage)
    if node is None:
        if not required:
            return schedule
        raise TargetError(f"npu: stage {stage.name} is not a subtree of its own in the "
                          f"schedule tree (option isl_scheduler fused it with other stages); "
                          f"the NPU mapping takes the program-order tree")
    return node.insert_mark(marks.make(kind, n)).get_schedule()


def _mark_top(schedule: isl.Schedule, kind: str, n: int) -> isl.Schedule:
    return schedule.get_root().child(0).insert_mark(marks.make(kind, n)).get_schedule()


def _stage(graph, name: str):
    return next(s for s in graph.stages if s.name == name)


def place(schedule: isl.Schedule, model, plan: Plan | PhasesPlan,
          plans: NpuPlans) -> isl.Schedule:
    """``schedule`` with the marks of ``plan`` (recorded in ``plans``)."""
    if isinstance(plan, CubePlan):
        return _mark_stage(schedule, model, _stage(plan.graph, plan.stage), marks.NPU_CUBE,
                           NpuPlans.push(plans.cubes, plan))
    if isinstance(plan, ConvPlan):
        return _mark_stage(schedule, model, _stage(plan.graph, plan.stage), marks.NPU_CONV,
                           NpuPlans.push(plans.convs, plan))
    if isinstance(plan, VectorPlan):
        return _mark_top(schedule, marks.NPU_VECTOR, NpuPlans.push(plans.vectors, plan))
    for ph in plan.phases:
        if isinstance(ph.plan, CubePlan):
            schedule = _mark_stage(schedule, model, _stage(ph.graph, ph.plan.stage),
                                   marks.NPU_CUBE, NpuPlans.push(plans.cubes, ph.plan), False)
        else:
            n = NpuPlans.push(plans.vectors, ph.plan)
            for s in ph.graph.stages:
                schedule = _mark_stage(schedule, model, s, marks.NPU_VECTOR, n, False)
    if not plan.phases:
        raise PolycompInternalError("npu-map: a kernel of no phases")
    return _mark_top(schedule, marks.NPU_PHASES, NpuPlans.push(plans.phases, plan))


def _describe(plan: Plan | PhasesPlan) -> str:
    if isinstance(plan, CubePlan):
        t = plan.tiles
        epi = f" with a vector epilogue ({', '.join(plan.epilogue)})" if plan.epilogue else ""
        how = "requantised to int8" if plan.deq_out == "int8" else "dequantised"
        mode = "REQ8" if plan.deq_out == "int8" else "DEQF16"
        if plan.deq_scale is not None:
            epi = f" {how} by Fixpipe ({mode}, scale {plan.deq_scale:g})"
        elif plan.deq_tensor is not None:
            epi = f" {how} by Fixpipe (V{mode}, scale {plan.deq_tensor}[j])"
        return (f"{plan.stage}: cube{epi}; output tiles {t.m0}x{t.n0} (L0C), k steps of "
                f"{t.k0} (L0A/L0B), L1 stages of {t.kl1}")
    if isinstance(plan, ConvPlan):
        t = plan.tiles
        epi = f" with a vector epilogue ({', '.join(plan.epilogue)})" if plan.epilogue else ""
        return (f"{plan.stage}: convolution as implicit GEMM on the cube{epi}; tiles "
                f"{t.m0}x{t.n0}, k0={t.k0}, kL1={t.kl1}")
    if isinstance(plan, VectorPlan):
        v = plan.view
        return (f"{', '.join(plan.stages)}: vector unit; row {v.row}, columns "
                f"{', '.join(v.cols)}" + (f", batch {', '.join(v.batch)}" if v.batch else "")
                + (f", carried {', '.join(v.carried)}" if v.carried else ""))
    return "phases: " + "; ".join(f"{k}: {_describe(ph.plan)}"
                                  for k, ph in enumerate(plan.phases))


class NpuMapPass(Pass):
    """See the module docstring."""
    name = "npu-map"

    def __init__(self, lowering: NpuLoweringModel):
        self.lowering = lowering

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        if next(iter_marks(schedule, marks.NPU_CHAIN), None) is not None:
            ctx.note(self.name, "a fused chain: one program (npu_chain)")
            return schedule
        plan = plan_kernel(ctx.model.graph, ctx.target, ctx.npu_options, self.lowering)
        ctx.note(self.name, _describe(plan))
        return place(schedule, ctx.model, plan, npu_plans(ctx))
