"""Lowering of a phases plan (attention: a transpose, a batch matmul, a scaled softmax,
a batch matmul) to the NPU IR.

The ``npu-map`` pass cut the stages into phases (:mod:`polycomp.scheduler.npu.phases`):
each plain (batch) matmul a cube phase with its tiles, each maximal run of other
stages a vector phase.  Each phase is built like a kernel of its own
(:mod:`.lower_cube` with the real tensor names, :mod:`.lower_vector`); a tensor that
one phase writes and a later one reads goes through GM (a *workspace* the host
allocates, an extra kernel argument); the phases run one after the other, separated
by a barrier of every pipe (``PipeBarrier<PIPE_ALL>``: a phase's GM writes are
complete before the next one reads).

Assumes: a :class:`~polycomp.scheduler.npu.plan.PhasesPlan` whose phases the cube or
vector mapping takes (``npu-map`` checked it).  Guarantees: the phases compute the
kernel's stages in program order; each phase's on-chip buffers are its own (the flag
placement then balances each phase's flags: it starts and ends with no flag pending).
"""
from __future__ import annotations

from polycomp.scheduler.npu.plan import CubePlan, PhasesPlan
from polycomp.scheduler.npu.view import dim_size, tensor_keys

from .lower_cube import CubeGemm, cube_program
from .lower_vector import vector_program
from .program import GlobalTensor, Program, ix


def _gm(t, is_output: bool = False) -> GlobalTensor:
    keys = tensor_keys(t)
    return GlobalTensor(t.name, t.dtype, tuple(1 if k is None else dim_size(k) for k in keys),
                        is_output)


def _cube_phase(plan: CubePlan) -> Program:
    sg, c = plan.graph, plan.contraction
    s = sg.stages[0]
    a = _gm(next(t for t in sg.inputs if t.name == c.a.load.buffer.name))
    b = _gm(next(t for t in sg.inputs if t.name == c.b.load.buffer.name))
    out = _gm(s.output, True)
    gemm = CubeGemm(a, b, out, ix(a.dims[-2]), ix(b.dims[-1]), ix(a.dims[-1]),
                    ix(a.dims[0]) if plan.batched else None, (a, b, out), {})
    return cube_program(sg.name, a.dtype, out.dtype, plan.batched, plan.tiles, gemm=gemm)


def phased_program(plan: PhasesPlan) -> Program:
    """The phased program of ``plan`` (module docstring)."""
    progs = []
    for ph in plan.phases:
        if isinstance(ph.plan, CubePlan):
            progs.append(_cube_phase(ph.plan))
        else:
            progs.append(vector_program(ph.graph, ph.plan.view))
    graph = plan.graph
    args = tuple(_gm(t) for t in graph.inputs) + tuple(_gm(t, True) for t in graph.outputs)
    names = {t.name for t in args}
    work: list[GlobalTensor] = []
    for p in progs:
        for t in p.outputs:
            if t.name not in names:
                names.add(t.name)
                work.append(GlobalTensor(t.name, t.dtype, t.dims))
    return Program(graph.name, "phased", args, (), (), phases=tuple(progs),
                   workspaces=tuple(work))
