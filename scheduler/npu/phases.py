"""Kernels of several cube and vector phases (attention: a transpose, a batch matmul,
a scaled softmax, a batch matmul): the cut into phases.

The stages are cut into phases: each plain (batch) matmul contraction is a cube phase
of its own, each maximal run of other stages a vector phase.  A tensor that one phase
writes and a later one reads goes through GM (a *workspace* the host allocates).  The
``npu-map`` pass records the phases (a :class:`~.plan.PhasesPlan`); the NPU lowering
(:mod:`polycomp.hw.npu.lower_phases`) builds each phase like a kernel of its own and
runs them one after the other, separated by a barrier of every pipe.

Assumes: a kernel graph (stages in program order).  Guarantees: the phases hold every
stage once, in program order; a phase's inputs are the tensors it reads and no earlier
stage of it makes; its outputs those a later phase reads or the kernel returns.
"""
from __future__ import annotations

from dataclasses import dataclass

from polycomp import ir
from polycomp.scheduler.common.contraction import Contraction, match_contraction


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
