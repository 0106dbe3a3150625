"""The lowering stage ``npu-lower``: the lowered function and the NPU schedule passes'
plans -> the NPU IR (an :class:`~.program.NpuModule`), as a dialect conversion.

Assumes: ``func`` is the kernel's lowered function (isl AST -> IR) of a tree the NPU
schedule passes marked: its NPU marks became ``AttrStmt(<kind>, "<n>")`` nodes
(:func:`polycomp.scheduler.common.marks.attr_index`), and ``npu_plans(state)``
(:mod:`polycomp.scheduler.npu.plan`) holds their payloads.  Each marked region is
converted to NPU instructions by the builder of its kind, from its typed plan:

| mark | plan (:mod:`polycomp.scheduler.npu.plan`) | builder |
|------|------|---------|
| ``npu_chain:<n>`` | ``NpuChainPlan`` | :mod:`.lower_chain`, :mod:`.lower_chain_vector` |
| ``npu_phases:<n>`` | ``PhasesPlan`` | :mod:`.lower_phases` |
| ``npu_conv:<n>`` | ``ConvPlan`` | :mod:`.lower_conv`, :mod:`.lower_cube`, :mod:`.lower_epilogue` |
| ``npu_cube:<n>`` | ``CubePlan`` | :mod:`.lower_cube`, :mod:`.lower_epilogue` |
| ``npu_vector:<n>`` | ``VectorPlan`` | :mod:`.lower_vector` |

The instruction loops are the tiled tree's (``mo / no`` output tiles, ``ko`` L1 stages,
``ki`` L0 steps for the cube; the row tiles of the vector unit, whose size ``TR`` the
host picks at run time); each marked region of the AST becomes one program.

Guarantees: an :class:`~.program.NpuModule` with the lowered function's signature and
one program (a phased program for ``npu_phases``); every statement of ``func`` lies in
a region a plan covers (else :class:`~polycomp.errors.PolycompInternalError`).  The
program has one copy of each buffer (those another pipe fills or drains are marked
``pingpong``) and no flags: the NPU IR passes (:mod:`.passes`) double-buffer it and
place the flags.

:class:`LoweringModel` answers the schedule passes' questions about candidate mappings
(:class:`~polycomp.scheduler.npu.plan.NpuLoweringModel`) with the same builders.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from polycomp import ir
from polycomp.errors import NpuCapacityError, PolycompInternalError, TargetError
from polycomp.hw.target import Target
from polycomp.pass_manager import TargetPass
from polycomp.scheduler.chain.npu_detect import NpuChain
from polycomp.scheduler.chain.npu_plan import LEVELS, NpuChainTiles
from polycomp.scheduler.common import marks
from polycomp.scheduler.npu.conv import ConvMatch
from polycomp.scheduler.npu.plan import ConvPlan, CubePlan, NpuPlans, npu_plans
from polycomp.scheduler.npu.view import VectorView, tensor_keys
from polycomp.state import CompileState

from .lower_conv import ConvTensors, prep_program
from .lower_cube import CubeGemm, cube_program
from .lower_epilogue import Frame, build_epilogue, ub_bytes
from .lower_phases import barrier, phased_program
from .lower_vector import vector_program
from .program import Kernel, NpuModule, Phase, Program, imax, ix

#: the mark kinds that map a region of the lowered function to a program, the
#: outermost mapping first
MAPPING_MARKS = (marks.NPU_CHAIN, marks.NPU_PHASES, marks.NPU_CONV, marks.NPU_CUBE,
                 marks.NPU_VECTOR)


def npu_marks(func: ir.LoweredFunc) -> dict[str, list[int]]:
    """``{kind: [n, ...]}`` of the NPU mapping marks in ``func`` (first occurrence
    order)."""
    found: dict[str, list[int]] = {}

    def visit(node) -> None:
        if isinstance(node, ir.AttrStmt):
            for kind in MAPPING_MARKS:
                n = marks.attr_index(node, kind)
                if n is not None and n not in found.setdefault(kind, []):
                    found[kind].append(n)
    ir.walk(func.body, visit)
    return found


def _stored(func: ir.LoweredFunc) -> set[str]:
    """The arrays the statements of ``func`` write."""
    out: set[str] = set()

    def visit(node) -> None:
        if isinstance(node, ir.Store):
            out.add(node.buffer.name)
    ir.walk(func.body, visit)
    return out


def _epilogue_frame(graph, stage, conv: ConvMatch) -> tuple[Frame, list]:
    """The frame of a convolution's vector epilogue: the output's ``(N, F, OH, OW)``
    seen as the GEMM's ``(F, P)`` rows and columns, per image; and its other inputs."""
    nk, fk, ohk, owk = (str(k) for k in tensor_keys(stage.output))
    ct = ConvTensors(conv, stage.output.name, "float32", 16, 16)
    N, F = ct.sizes[0], ct.sizes[4]
    frame = Frame(VectorView(fk, (ohk, owk), (nk,), ()), None, (F,),
                  (N, F, "P"), (N, F, "OH", "OW"))
    extra = [t for t in graph.inputs if t.name not in (conv.w.name, conv.x.name)]
    return frame, extra


def _cube(name: str, plan: CubePlan) -> Kernel:
    """A (batch) matmul, with its output cast or its vector epilogue (each vector core
    takes half the rows of an output tile); its arguments in the kernel's order."""
    c = plan.contraction
    return in_user_order(_cube_kernel(name, plan), plan.graph,
                         {"A": c.a.load.buffer.name, "B": c.b.load.buffer.name})


def in_user_order(k: Kernel, graph: Any, names: dict[str, str]) -> Kernel:
    """``k`` with its input tensors in the order of ``graph``'s inputs (what the
    simulator binds the arrays to, and the printed kernel's parameters); ``names``: the
    graph input each differently named kernel tensor (the GEMM's ``A``, ``B``) stands
    for.  Without this a matmul declared ``(Y, X)`` computing ``X @ Y`` took its arrays
    in the builder's order."""
    ins = {names.get(t.name, t.name): t for t in k.inputs}
    want = [t.name for t in graph.inputs]
    if sorted(ins) != sorted(want):      # an unused input: the binding says so
        return k
    return dataclasses.replace(k, tensors=(*(ins[n] for n in want), *k.outputs))


def _cube_kernel(name: str, plan: CubePlan) -> Kernel:
    if plan.deq_scale is not None or plan.deq_tensor is not None:
        # int32 -> fp16 (or int8) with the scale (per tensor or per column), by Fixpipe
        return cube_program(name, plan.in_dtype, plan.deq_out, False, plan.tiles,
                            deq=plan.deq_scale, deq_tensor=plan.deq_tensor)
    if not plan.epilogue:
        return cube_program(name, plan.in_dtype, plan.out_dtype, plan.batched, plan.tiles,
                            k_split=plan.k_split)
    graph, c = plan.graph, plan.contraction
    mm = graph.stages[0]
    operands = {c.a.load.buffer.name, c.b.load.buffer.name}
    extra = [t for t in graph.inputs if t.name not in operands]
    e = build_epilogue(graph, mm, extra, plan.tiles.m0 // 2, plan.tiles.n0)
    return cube_program(name, plan.in_dtype, e.out_tensor.dtype, False, plan.tiles, e)


def _conv(name: str, plan: ConvPlan, target: Target) -> Kernel:
    """A convolution as implicit GEMM on the cube (:mod:`.lower_conv`): the vector cores
    convert X and W to NC1HWC0 workspaces, then the cube cores run the GEMM through
    LoadData3DV2, with the elementwise stages after it (bias, relu) as a vector
    epilogue."""
    graph, conv = plan.graph, plan.conv
    stage = graph.stages[0]
    t = plan.tiles
    out_dt = stage.output.dtype if not plan.epilogue else "float32"
    ct = ConvTensors(conv, stage.output.name, out_dt, t.kl1, t.n0, t.m0,
                     target.capacity("L1"))
    N, F = ct.sizes[0], ct.sizes[4]
    gemm = CubeGemm(ct.wh, ct.xh, ct.out, ix(F), ix("P"), ix("KDP"), ix(N),
                    (ct.x, ct.w, ct.out), ct.derived, shared_a=True, conv=ct)
    epi = None
    if plan.epilogue:
        frame, extra = _epilogue_frame(graph, stage, conv)
        epi = build_epilogue(graph, stage, extra, t.m0 // 2, t.n0, frame)
    main = cube_program(name, conv.dtype, epi.out_tensor.dtype if epi else out_dt, True, t,
                        epi, gemm=gemm)
    prep, units = prep_program(name, ct, target.capacity("UB"))
    ph = main.phases[0]
    aic0 = Program(f"{name}_5hd", "AIC", (), barrier("AIC"))
    prep = Program(prep.name, prep.core, prep.buffers, prep.body + barrier("AIV"))
    aic = ph.aic
    aiv = ph.aiv or Program(name, "AIV", (), ())
    tensors = (ct.x, ct.w, *main.tensors[2:])
    return Kernel(name, "mix", tensors, (Phase(aic0, prep), Phase(aic, aiv)), main.tiling,
                  (ct.xh, ct.wh, *main.workspaces), imax(main.blocks, (units + 1) // 2))


def _outputs(stages) -> set[str]:
    return {s.output.name for s in stages}


def lower_plans(func: ir.LoweredFunc, plans: NpuPlans, graph: Any, target: Target) -> Kernel:
    """The program of the NPU marks of ``func`` (module docstring); ``graph``: the
    kernel's graph."""
    name = graph.name if hasattr(graph, "name") else "kernel"
    found = npu_marks(func)
    if found.get(marks.NPU_CHAIN):
        p = plans.chains[found[marks.NPU_CHAIN][0]]
        from .lower_chain import chain_program
        prog = chain_program(name, graph, p.chain, p.tiles, p.double_buffer)
        covered = _outputs(p.chain.match.stages)
    elif found.get(marks.NPU_PHASES):
        ph = plans.phases[found[marks.NPU_PHASES][0]]
        prog, covered = phased_program(ph), _outputs(ph.graph.stages)
    elif found.get(marks.NPU_CONV):
        cv = plans.convs[found[marks.NPU_CONV][0]]
        prog = in_user_order(_conv(name, cv, target), cv.graph, {})
        covered = _outputs(cv.graph.stages)
    elif found.get(marks.NPU_CUBE):
        cb = plans.cubes[found[marks.NPU_CUBE][0]]
        prog, covered = _cube(name, cb), _outputs(cb.graph.stages)
    elif found.get(marks.NPU_VECTOR):
        vp = plans.vectors[found[marks.NPU_VECTOR][0]]
        prog, covered = vector_program(vp.graph, vp.view), _outputs(vp.graph.stages)
    else:
        raise PolycompInternalError(f"npu-lower: {func.name} has no NPU mapping mark "
                                    f"(the NPU schedule passes did not run)")
    left = _stored(func) - covered
    if left:
        raise PolycompInternalError(f"npu-lower: {func.name} writes {', '.join(sorted(left))} "
                                    f"outside every NPU plan")
    return prog


class NpuLowerPass(TargetPass):
    """See the module docstring."""
    name = "npu-lower"

    def run(self, func: Any, state: CompileState) -> NpuModule:
        assert isinstance(func, ir.LoweredFunc), type(func).__name__
        prog = lower_plans(func, npu_plans(state), state.model.graph, state.target)
        return NpuModule(func.name, func.params, func.inputs, func.outputs, func.inout, prog)


class LoweringModel:
    """The NPU lowering's answers to the schedule passes
    (:class:`~polycomp.scheduler.npu.plan.NpuLoweringModel`), from the builders
    themselves: what they would build is what is measured."""

    def chain_cycles(self, chain: NpuChain, dims: Any, tiles: NpuChainTiles,
                     target: Target) -> tuple[int, int]:
        """Predicted cycles ``(fused, unfused)`` of a chain on ``target``'s chip
        (:mod:`.chain_cost`)."""
        from .chain_cost import fused_cycles, unfused_cycles
        from .target import npu_params
        p = npu_params(target)
        return fused_cycles(chain, dims, tiles, p), unfused_cycles(chain, dims, p)

    def epilogue_ub(self, graph: Any, stage: Any, conv: ConvMatch | None,
                    copies: int) -> Callable[[int, int], int]:
        if conv is None:
            c_names = _operands(stage)
            extra = [t for t in graph.inputs if t.name not in c_names]
            return ub_bytes(graph, stage, extra, copies)
        frame, extra = _epilogue_frame(graph, stage, conv)
        return ub_bytes(graph, stage, extra, copies, frame)

    def check_vector(self, graph: Any) -> None:
        vector_program(graph)

    def chain_usage(self, graph: Any, chain: NpuChain, tiles: NpuChainTiles,
                    double_buffer: bool,
                    target: Target) -> tuple[tuple[str, int, int], ...] | None:
        """Per level, the bytes the fused kernel's buffers use on their core (the cube
        core's L1/L0A/L0B/L0C, a vector core's UB) with the temporaries ``npu-isa``
        adds and the copies double buffering gives them; None when they do not fit."""
        from .isa import expand_program
        from .lower_chain import chain_core_programs
        from .sim import allocate

        def placed(p: Program, temps: bool) -> Program:
            # the copies double buffering gives; the vector temporaries npu-isa adds
            # (the cube core's program gets none)
            if temps and p.core == "AIV":
                p = expand_program(p)
            return dataclasses.replace(p, buffers=tuple(
                dataclasses.replace(b, copies=2) if double_buffer and b.pingpong else b
                for b in p.buffers))
        ends: dict[str, int] = {}
        try:
            for prog in chain_core_programs("fit", graph, chain, tiles):
                allocate(placed(prog, False), target)    # without the temporaries: cheap
                prog = placed(prog, True)
                addrs = allocate(prog, target)
                for b in prog.buffers:
                    lv, a = addrs[b.name]
                    ends[lv] = max(ends.get(lv, 0), a + b.size() * b.copies)
        except (TargetError, NpuCapacityError):
            return None
        return tuple((lv, ends.get(lv, 0), target.capacity(lv)) for lv in LEVELS)


def _operands(stage) -> set[str]:
    from polycomp.scheduler.common.contraction import Contraction, match_contraction
    c = match_contraction(stage)
    if not isinstance(c, Contraction):
        raise TargetError(f"npu: {stage.name} is no contraction")
    return {c.a.load.buffer.name, c.b.load.buffer.name}


__all__ = ["NpuLowerPass", "LoweringModel", "lower_plans", "npu_marks"]
