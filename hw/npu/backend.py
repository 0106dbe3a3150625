"""The NPU backend (targets ``npu`` and ``npu-lite``): registration, the NPU program,
the Ascend C-style printer, the simulator as executor and ``g++ -fsyntax-only`` as
checker.

The schedule and IR pipeline is the common one (program order, lowering,
simplification); the backend then builds the NPU program from the kernel's model
(:func:`polycomp.scheduler.npu.build.npu_program`), prints it (``emit``) and runs the
same object in the simulator (``execute``)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import weakref
from types import MappingProxyType

import numpy as np

from polycomp import ir
from polycomp.errors import BuildError, TargetError
from polycomp.hw.options import NpuOptions
from polycomp.hw.registry import Backend, Runner, register
from polycomp.hw.target import Target
from polycomp.lowering.ir_pass import IRPass, body_pass
from polycomp.lowering.simplify import simplify
from polycomp.state import CompileState

from .program import Program
from .target import npu_target

_PROGRAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def program_of(state: CompileState) -> Program:
    """The NPU program of a compile (built once per compile state)."""
    if state not in _PROGRAMS:
        from polycomp.scheduler.npu.build import npu_program
        _PROGRAMS[state] = npu_program(state.model, state.target, state.options,
                                       state.npu_schedule)
    return _PROGRAMS[state]


def _bind(ck, prog: Program, arrays) -> tuple[dict, dict]:
    """The sizes read from the arguments' shapes (checked against each other and the
    kernel's constant extents) and the GM arrays in the program's types."""
    ins = prog.inputs
    sizes: dict[str, int] = {}
    gm = {}
    for t, k, a in zip(ins, ck.state.model.graph.inputs, arrays):
        a = np.asarray(a)
        for e, n in zip(k.shape, a.shape):
            if isinstance(e, ir.IntImm) and e.value != n:
                raise TargetError(f"argument {t.name} of {ck.name}: shape {a.shape} does "
                                  f"not match its declared constant extent {e.value}")
        shape = t.view or t.dims
        if a.ndim != len(shape):
            raise TargetError(f"argument {t.name} of {ck.name}: {len(shape)}-d expected, "
                              f"got shape {a.shape}")
        for d, n in zip(shape, a.shape):
            if isinstance(d, int):
                if n != d:
                    raise TargetError(f"argument {t.name} of {ck.name}: a dimension of "
                                      f"size {d} expected, got shape {a.shape}")
            elif sizes.setdefault(d, n) != n:
                raise TargetError(f"argument {t.name} of {ck.name}: size {d} is "
                                  f"{sizes[d]} elsewhere, {n} here")
        gm[t.name] = a.astype(np.dtype(t.dtype), copy=False)
    return sizes, gm


def simulate(ck, *arrays):
    """Run ``ck``'s NPU program on numpy ``arrays`` (the kernel's inputs in order):
    ``(outputs, SimReport)``."""
    from .sim import SimReport, Simulator
    prog = program_of(ck.state)
    ins = prog.inputs
    if len(arrays) != len(ins):
        raise TargetError(f"kernel {ck.name} takes {len(ins)} arrays, got {len(arrays)}")
    sizes, gm = _bind(ck, prog, arrays)
    for name, e in prog.derived.items():
        sizes[name] = e.eval(sizes)

    def dims(ds) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else sizes[d] for d in ds)
    for t in ins:
        if t.view is not None:
            gm[t.name] = gm[t.name].reshape(dims(t.dims))
    for t in (*prog.outputs, *prog.workspaces):
        gm[t.name] = np.zeros(dims(t.dims), np.dtype(t.dtype))
    report = SimReport()
    for phase in prog.phases or (prog,):
        env = dict(sizes)
        if phase.kind == "vector":
            from polycomp.scheduler.npu.vector import vector_tiling
            env.update(vector_tiling(phase, env, ck.target.capacity("UB")))
        sim = Simulator(phase, ck.target)
        sim.time = {p: report.cycles for p in sim.time}     # a barrier of every pipe
        report = report.then(sim.run(gm, env))
    outs = tuple(gm[t.name].reshape(dims(t.view or t.dims)) for t in prog.outputs)
    return (outs[0] if len(outs) == 1 else outs), report


class NpuBackend(Backend):
    family = "npu"
    names = ("npu", "npu-lite")
    options_class = NpuOptions
    suffix = ".cpp"
    descriptions = MappingProxyType({
        "npu": "Ascend 910-class AI core: Ascend C-style source, cycle-level simulator",
        "npu-lite": "the npu core with small buffers (tests: tiling, tails, capacity)",
    })

    def make_target(self, name: str) -> Target:
        return npu_target(name)

    def schedule_passes(self, state: CompileState) -> list:
        from polycomp.scheduler.chain.npu_pass import NpuChainFusePass
        from polycomp.scheduler.npu.tile import NpuCubeTilePass
        return [NpuChainFusePass(), NpuCubeTilePass()]

    def ir_passes(self, state: CompileState) -> list[IRPass]:
        return [body_pass("simplify", simplify)]

    def emit(self, func: ir.LoweredFunc, state: CompileState) -> str:
        from .printer import print_program
        return print_program(program_of(state), state.target)

    def execute(self, ck, inputs: tuple, params: dict):
        return simulate(ck, *inputs)[0]

    def runner(self, ck) -> Runner:
        def run(*arrays, **params):
            out, report = simulate(ck, *arrays)
            sys.stdout.write("  simulator: " + report.text().replace("\n", "\n  ") + "\n")
            return out
        return Runner(run, f"{ck.target.name} cycle-level simulator (no NPU here)",
                      native=False)

    def check(self, path: str, ck) -> str:
        return syntax_check(path)


def syntax_check(*paths: str) -> str:
    """``g++ -fsyntax-only`` of emitted files against ``polycomp_npu.h`` (one run)."""
    from .api_header import HEADER
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "polycomp_npu.h"), "w") as f:
            f.write(HEADER)
        r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-I", d, *paths],
                           capture_output=True, text=True)
    if r.returncode:
        raise BuildError(f"g++ -fsyntax-only rejected {', '.join(paths)}:\n"
                         f"{r.stderr[-3000:]}")
    return "g++ -fsyntax-only against polycomp_npu.h: OK"


register(NpuBackend())
