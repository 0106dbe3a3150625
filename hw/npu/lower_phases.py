"""Lowering of a phases plan (attention: a transpose, a batch matmul, a scaled softmax,
a batch matmul) to the NPU IR.

The ``npu-map`` pass cut the stages into phases (:mod:`polycomp.scheduler.npu.phases`):
each plain (batch) matmul a cube phase with its tiles, each maximal run of other
stages a vector phase.  Each phase is built like a kernel of its own
(:mod:`.lower_cube` with the real tensor names, :mod:`.lower_vector`), its work split
over the cores of its kind; a tensor that one phase writes and a later one reads goes
through GM (a *workspace* the host allocates).  The kernel is mixed
(``KERNEL_TYPE_MIX_AIC_1_2``): in every phase the cube cores and the vector cores run
their part (possibly nothing), and each phase but the last ends with a barrier of
every core built from cross-core flags: the cube cores synchronise among themselves
(mode 0), then each tells its vector cores (mode 2); the vector cores do the same the
other way, so that every GM write of the phase is done before any core goes on.

Assumes: a :class:`~polycomp.scheduler.npu.plan.PhasesPlan` whose phases the cube or
vector mapping takes (``npu-map`` checked it).  Guarantees: the phases compute the
kernel's stages in program order; each phase's on-chip buffers are its own (the flag
placement then balances each phase's flags: it starts and ends with no flag pending).
"""
from __future__ import annotations

from polycomp.scheduler.npu.plan import CubePlan, PhasesPlan
from polycomp.scheduler.npu.view import dim_size, tensor_keys

from .lower_cube import CubeGemm, cube_program
from .lower_vector import vector_part
from .program import (
    CrossSet,
    CrossWait,
    GlobalTensor,
    Ix,
    Kernel,
    Phase,
    Program,
    Tiling,
    imax,
    ix,
)

#: cross-core flag ids of the barrier between phases (mode 0 among one kind, mode 2
#: between the cube core and the vector cores of a block)
ALL_FLAG, PAIR_FLAG = 8, 9
#: "as many blocks as the chip has"
ALL_BLOCKS = 1 << 30


def barrier(core: str) -> tuple:
    """The instructions of one core's part of the barrier between two phases."""
    pipe = "FIX" if core == "AIC" else "MTE3"
    return (CrossSet(0, pipe, ix(ALL_FLAG)), CrossWait(0, ix(ALL_FLAG)),
            CrossSet(2, pipe, ix(PAIR_FLAG)), CrossWait(2, ix(PAIR_FLAG)))


def _gm(t, is_output: bool = False) -> GlobalTensor:
    keys = tensor_keys(t)
    return GlobalTensor(t.name, t.dtype, tuple(1 if k is None else dim_size(k) for k in keys),
                        is_output)


def _cube_phase(plan: CubePlan) -> tuple[Program, tuple[GlobalTensor, ...], Ix]:
    sg, c = plan.graph, plan.contraction
    s = sg.stages[0]
    a = _gm(next(t for t in sg.inputs if t.name == c.a.load.buffer.name))
    b = _gm(next(t for t in sg.inputs if t.name == c.b.load.buffer.name))
    out = _gm(s.output, True)
    gemm = CubeGemm(a, b, out, ix(a.dims[-2]), ix(b.dims[-1]), ix(a.dims[-1]),
                    ix(a.dims[0]) if plan.batched else None, (a, b, out), {})
    k = cube_program(sg.name, a.dtype, out.dtype, plan.batched, plan.tiles, gemm=gemm)
    aic = k.phases[0].aic
    assert aic is not None
    return aic, k.tensors, k.blocks


def phased_program(plan: PhasesPlan) -> Kernel:
    """The phased kernel of ``plan`` (module docstring)."""
    parts: list[tuple[Program, tuple[GlobalTensor, ...], Ix]] = []
    for ph in plan.phases:
        if isinstance(ph.plan, CubePlan):
            parts.append(_cube_phase(ph.plan))
        else:
            v = vector_part(ph.graph, ph.plan.view)
            parts.append((v.program, v.tensors, v.tiles))
    graph = plan.graph
    args = tuple(_gm(t) for t in graph.inputs) + tuple(_gm(t, True) for t in graph.outputs)
    names = {t.name for t in args}
    work: list[GlobalTensor] = []
    phases: list[Phase] = []
    blocks: Ix = ix(1)
    for n, (prog, tensors, tiles) in enumerate(parts):
        for t in tensors:
            if t.is_output and t.name not in names:
                names.add(t.name)
                work.append(GlobalTensor(t.name, t.dtype, t.dims))
        last = n + 1 == len(parts)
        progs = {prog.core: prog}
        for core in ("AIC", "AIV"):
            p = progs.get(core) or Program(f"{graph.name}_{n}", core, (), ())
            if not last:
                p = Program(p.name, p.core, p.buffers, p.body + barrier(core), p.tiling)
            progs[core] = p
        phases.append(Phase(progs["AIC"], progs["AIV"]))
        if prog.core == "AIC":
            blocks = imax(blocks, tiles)
        else:          # a vector phase's tile count depends on its own UB tiling
            blocks = ix(ALL_BLOCKS)
    return Kernel(graph.name, "mix", args, tuple(phases), Tiling(), tuple(work), blocks)
