"""Kernels of several cube and vector phases (attention: a transpose, a batch matmul,
a scaled softmax, a batch matmul).

The stages are cut into phases: each plain (batch) matmul contraction is a cube phase
of its own, each maximal run of other stages a vector phase.  A tensor that one phase
writes and a later one reads goes through GM (a *workspace* the host allocates); each
phase is built like a kernel of its own (:mod:`.cube` with the real tensor names,
:mod:`.vector`) and they run one after the other, separated by a barrier of every
pipe (``PipeBarrier<PIPE_ALL>``: a phase's GM writes are complete before the next one
reads).

Assumes: every phase is a kernel the cube or vector mapping takes.  Guarantees: the
phases compute the kernel's stages in program order; each phase's flags are balanced
(it starts and ends with no flag pending) and its on-chip buffers are its own.
"""
from __future__ import annotations

from dataclasses import dataclass

from polycomp import ir
from polycomp.errors import TargetError
from polycomp.hw.npu.program import GlobalTensor, Program, ix
from polycomp.hw.target import Target
from polycomp.scheduler.common.contraction import Contraction, match_contraction

from .cube import CubeGemm, CubeTiles, check_tiles, cube_program, fit_cube_tiles
from .view import dim_size, tensor_keys


@dataclass(frozen=True)
class SubGraph:
    """A run of stages seen as a kernel: the tensors it reads and those it leaves."""
    name: str
    inputs: tuple
    stages: tuple
    outputs: tuple


def _reads(stage) -> list[str]:
    out: list[str] = []

    def visit(e) -> None:
        if isinstance(e, ir.Load) and e.buffer.name not in out:
            out.append(e.buffer.name)
    ir.walk(stage.body, visit)
    return out


def _gm(t, is_output: bool = False) -> GlobalTensor:
    keys = tensor_keys(t)
    return GlobalTensor(t.name, t.dtype, tuple(1 if k is None else dim_size(k) for k in keys),
                        is_output)


def split_phases(graph, is_matmul) -> list[SubGraph]:
    """The phases of ``graph`` (module docstring)."""
    runs: list[tuple[bool, list]] = []
    for s in graph.stages:
        c = match_contraction(s) if s.is_reduction else None
        cube = isinstance(c, Contraction) and is_matmul(c)
        if cube or not runs or runs[-1][0]:
            runs.append((cube, [s]))
        else:
            runs[-1][1].append(s)
    tensors = {t.name: t for t in graph.inputs}
    tensors.update({s.output.name: s.output for s in graph.stages})
    finals = {t.name for t in graph.outputs}
    phases = []
    for k, (_, run) in enumerate(runs):
        made = {s.output.name for s in run}
        later = {n for _, r in runs[k + 1:] for s in r for n in _reads(s)}
        ins: list = []
        for s in run:
            ins += [tensors[n] for n in _reads(s) if n not in made and
                    all(t.name != n for t in ins)]
        outs = tuple(s.output for s in run if s.output.name in later | finals)
        phases.append(SubGraph(f"{graph.name}_phase{k}", tuple(ins), tuple(run), outs))
    return phases


def _cube_phase(sg: SubGraph, c: Contraction, target: Target, options) -> Program:
    s = sg.stages[0]
    a = _gm(next(t for t in sg.inputs if t.name == c.a.load.buffer.name))
    b = _gm(next(t for t in sg.inputs if t.name == c.b.load.buffer.name))
    out = _gm(s.output, True)
    if out.dtype not in ("float16", "float32"):
        raise TargetError(f"npu: {s.name} writes {out.dtype}; the cube path writes float16 "
                          f"or float32")
    batched = len(a.dims) == 3
    gemm = CubeGemm(a, b, out, ix(a.dims[-2]), ix(b.dims[-1]), ix(a.dims[-1]),
                    ix(a.dims[0]) if batched else None, (a, b, out), {})
    copies = 2 if options.double_buffer else 1
    tiles = check_tiles(CubeTiles(*options.cube_tile)) if options.cube_tile else \
        fit_cube_tiles(target, 2 if a.dtype == "float16" else 4, copies)
    return cube_program(sg.name, a.dtype, out.dtype, batched, tiles, options.double_buffer,
                        gemm=gemm)


def phased_program(graph, target: Target, options, is_matmul) -> Program:
    """The phased program of ``graph``; raises the first phase's refusal."""
    from .vector import vector_program
    progs = []
    for sg in split_phases(graph, is_matmul):
        c = match_contraction(sg.stages[0]) if sg.stages[0].is_reduction else None
        if isinstance(c, Contraction) and is_matmul(c) and len(sg.stages) == 1:
            progs.append(_cube_phase(sg, c, target, options))
        else:
            progs.append(vector_program(sg, options.double_buffer))
    args = tuple(_gm(t) for t in graph.inputs) + tuple(_gm(t, True) for t in graph.outputs)
    names = {t.name for t in args}
    work: list[GlobalTensor] = []
    for p in progs:
        for t in p.outputs:
            if t.name not in names:
                names.add(t.name)
                work.append(GlobalTensor(t.name, t.dtype, t.dims))
    return Program(graph.name, "phased", args, (), (), {}, tuple(progs), tuple(work))
