"""The NPU backend (targets ``npu`` and ``npu-lite``): registration, the pipeline, the
Ascend C-style printer, the simulator as executor and ``g++ -fsyntax-only`` as checker.

The pipeline: program order, the NPU schedule passes (``npu-chain-fuse``, ``npu-map``,
``npu-cube-tile``: marks and typed plans, :mod:`polycomp.scheduler.npu.plan`), lowering
(isl AST -> IR) and simplification, then the NPU's own IR — the lowering stage
``npu-lower`` (:mod:`.lower`) and the NPU IR passes ``npu-double-buffer`` and
``npu-sync`` (:mod:`.passes`), all run, timed and dumped by the pass manager.  Their
result, an :class:`~.program.NpuModule`, is ``CompiledKernel.final_ir``: ``emit``
prints it (:mod:`.printer`) and ``execute`` runs it in the simulator (:mod:`.sim`)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from polycomp import ir
from polycomp.errors import BuildError, TargetError
from polycomp.hw.options import NpuOptions
from polycomp.hw.registry import Backend, Runner, register
from polycomp.hw.target import Target
from polycomp.lowering.ir_pass import IRPass, body_pass
from polycomp.lowering.simplify import simplify
from polycomp.pass_manager import TargetPass
from polycomp.state import CompileState

from .program import REQ8_SIGNED, Kernel, NpuModule
from .target import npu_params, npu_target


def _bind(mod: NpuModule, arrays) -> tuple[dict, dict]:
    """The sizes read from the arguments' shapes (checked against each other and the
    kernel's constant extents) and the GM arrays in the program's types."""
    prog = mod.program
    ins = prog.inputs
    sizes: dict[str, int] = {}
    gm = {}
    for t, k, a in zip(ins, mod.inputs, arrays):
        a = np.asarray(a)
        for e, n in zip(k.shape, a.shape):
            if isinstance(e, ir.IntImm) and e.value != n:
                raise TargetError(f"argument {t.name} of {mod.name}: shape {a.shape} does "
                                  f"not match its declared constant extent {e.value}")
        shape = t.view or t.dims
        if a.ndim != len(shape):
            raise TargetError(f"argument {t.name} of {mod.name}: {len(shape)}-d expected, "
                              f"got shape {a.shape}")
        for d, n in zip(shape, a.shape):
            if isinstance(d, int):
                if n != d:
                    raise TargetError(f"argument {t.name} of {mod.name}: a dimension of "
                                      f"size {d} expected, got shape {a.shape}")
            elif sizes.setdefault(d, n) != n:
                raise TargetError(f"argument {t.name} of {mod.name}: size {d} is "
                                  f"{sizes[d]} elsewhere, {n} here")
        q = next((x for x in prog.quant_args if x.name == t.name), None)
        gm[t.name] = quant_params(t.name, a, q.signed) if q is not None else \
            np.ascontiguousarray(a, dtype=np.dtype(t.dtype))
    return sizes, gm


def quant_params(name: str, scale, signed: bool = False) -> np.ndarray:
    """The host's conversion of float32 scales to Fixpipe's uint64 quantisation
    parameters (what the printed ``*_QuantParams`` function does): the float's bits in
    bits [31:0], bit 46 when ``signed`` (a signed int8 result of VREQ8), the rest 0 (no
    shift, no offset; asc-devkit docs, "随路量化", the QUANT_PRE table of
    __NPU_ARCH__ 2201).  Inf, NaN and subnormal scales are refused (the docs do not
    allow them)."""
    f = np.ascontiguousarray(scale, dtype=np.float32)
    bad = ~np.isfinite(f) | ((f != 0) & (np.abs(f) < np.finfo(np.float32).tiny))
    if bad.any():
        i = int(np.flatnonzero(bad.ravel())[0])
        raise TargetError(f"argument {name}: scale {f.ravel()[i]!r} at [{i}]: Fixpipe's "
                          f"quantisation parameters cannot be inf, NaN or subnormal")
    q = f.view(np.uint32).astype(np.uint64)
    return q | np.uint64(REQ8_SIGNED) if signed else q


def simulate(ck, *arrays):
    """Run ``ck``'s NPU IR (``ck.final_ir``, what its source is printed from) on numpy
    ``arrays`` (the kernel's inputs in order): ``(outputs, SimReport)``."""
    return run_module(ck.final_ir, ck.target, *arrays)


@dataclass(frozen=True)
class HostTiling:
    """What the host tiling computes for one call: the sizes (the arguments' and the
    derived ones), each vector program's UB tiling, the number of blocks and the
    workspaces' shapes."""
    sizes: dict
    programs: dict                  # id(program) -> its tiling values (TR, CP, TRP)
    blocks: int
    workspaces: dict                # name -> shape


def host_tiling(kernel: Kernel, target: Target, sizes: dict) -> HostTiling:
    """The host side of a call of ``kernel`` with the argument sizes ``sizes`` (what the
    printed tiling function computes)."""
    from .lower_vector import vector_tiling
    p = npu_params(target)
    sizes = dict(sizes)
    for name, e in kernel.derived.items():
        sizes[name] = e.eval(sizes)
    progs = {}
    for prog in kernel.programs:
        if prog.core == "AIV" and prog.tiling.rows is not None:
            # a vector-only kernel's tiles are its blocks: balance them over the cores
            aiv = kernel.kind == "aiv"
            progs[id(prog)] = vector_tiling(prog, sizes, target.capacity("UB"),
                                            p.aiv_cores if aiv else 0,
                                            kernel.blocks if aiv else None)
    env = dict(sizes)
    if kernel.kind == "aiv" and progs:
        env.update(next(iter(progs.values())))
    cores = p.aiv_cores if kernel.kind == "aiv" else p.aic_cores
    blocks = max(1, min(cores, kernel.blocks.eval(env)))
    env["NB"] = blocks
    ws = {t.name: tuple(d if isinstance(d, int) else env[d] for d in t.dims)
          for t in kernel.workspaces}
    return HostTiling(sizes, progs, blocks, ws)


def run_module(mod: NpuModule, target: Target, *arrays):
    """Run the NPU IR ``mod`` on ``target``'s simulator: ``(outputs, SimReport)``."""
    from .program import API, LOGICAL, walk
    from .sim import Chip
    if not isinstance(mod, NpuModule):
        raise TargetError(f"the NPU simulator runs NPU IR, got {type(mod).__name__}")
    k = mod.program
    ins = k.inputs
    if len(arrays) != len(ins):
        raise TargetError(f"kernel {mod.name} takes {len(ins)} arrays, got {len(arrays)}")
    sizes, gm = _bind(mod, arrays)
    host = host_tiling(k, target, sizes)
    sizes = host.sizes

    def dims(ds) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else sizes[d] for d in ds)
    quant = {q.name: q for q in k.quant_args}
    for t in ins:
        if t.name in quant:      # padded to whole 32-byte blocks (zeros)
            a = gm[t.name]
            gm[t.name] = np.concatenate([a, np.zeros(dims(t.dims)[0] - a.size, a.dtype)])
        elif t.view is not None:
            gm[t.name] = gm[t.name].reshape(dims(t.dims))
    for t in k.outputs:
        gm[t.name] = np.zeros(dims(t.dims), np.dtype(t.dtype))
    for t in k.workspaces:
        dt = np.dtype(t.dtype)        # NaN (or the lowest integer): unwritten shows
        gm[t.name] = np.full(host.workspaces[t.name],
                             np.nan if dt.kind == "f" else np.iinfo(dt).min, dt)
    for prog in k.programs:
        if any(isinstance(s, LOGICAL) and not isinstance(s, API) for s in walk(prog.body)):
            raise TargetError(f"kernel {mod.name}: program {prog.name} holds logical "
                              f"instructions; the simulator runs API calls (npu-isa)")
    chip = Chip(k, target, gm, sizes, host.blocks, tilings=host.programs)
    report = chip.run()
    outs = tuple(gm[t.name].reshape(dims(t.view or t.dims)) for t in k.outputs)
    return (outs[0] if len(outs) == 1 else outs), report


class NpuBackend(Backend):
    family = "npu"
    names = ("npu", "npu-lite")
    options_class = NpuOptions
    suffix = ".cpp"
    descriptions = MappingProxyType({
        "npu": "Atlas A2 (Ascend 910B, __NPU_ARCH__ 2201): Ascend C source, chip simulator",
        "npu-lite": "the A2 structure with tiny buffers and 2 AI cores (tests)",
    })

    def make_target(self, name: str) -> Target:
        return npu_target(name)

    def schedule_passes(self, state: CompileState) -> list:
        from polycomp.scheduler.chain.npu_pass import NpuChainFusePass
        from polycomp.scheduler.npu.map import NpuMapPass
        from polycomp.scheduler.npu.tile import NpuCubeTilePass

        from .lower import LoweringModel
        _refuse_gathers(state)
        model = LoweringModel()
        return [NpuChainFusePass(model), NpuMapPass(model), NpuCubeTilePass()]

    def ir_passes(self, state: CompileState) -> list[IRPass]:
        return [body_pass("simplify", simplify)]

    def target_passes(self, state: CompileState) -> list[TargetPass]:
        from .lower import NpuLowerPass
        from .passes import npu_passes
        return [NpuLowerPass(), *npu_passes()]

    def emit(self, func: Any, state: CompileState) -> str:
        from .printer import print_module
        if not isinstance(func, NpuModule):
            raise TargetError(f"the NPU printer prints NPU IR, got {type(func).__name__}")
        return print_module(func, state.target)

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
    """``g++ -fsyntax-only`` of emitted files against the declarations of the A2 API
    (``kernel_operator.h``, :mod:`.api_header`): once as the host compiles them (the
    tiling function) and once as the device does (``__NPU_ARCH__`` 2201: the kernel)."""
    from .api_header import HEADER
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "kernel_operator.h"), "w") as f:
            f.write(HEADER)
        for flags in ([], ["-D__NPU_ARCH__=2201"]):
            inc = _precompiled_api_header(HEADER, ["-std=c++17", *flags]) or d
            r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", *flags, "-I", inc,
                                *paths], capture_output=True, text=True)
            if r.returncode:
                side = "device" if flags else "host"
                raise BuildError(f"g++ -fsyntax-only ({side} side) rejected "
                                 f"{', '.join(paths)}:\n{r.stderr[-3000:]}")
    return ("g++ -fsyntax-only against the A2 (__NPU_ARCH__ 2201) API declarations, host "
            "and device: OK")


def _precompiled_api_header(text: str, flags: list[str]) -> str | None:
    """A directory holding ``kernel_operator.h`` (``text``) beside its C++ precompiled
    form for ``flags``, made once per g++, flags and text in the kernel cache's
    directory; None when g++ cannot make one.  g++ reads the ``.gch`` in place of the
    header when a compile's flags match the ones it was made with (it parses the text
    otherwise), so a check gives the same verdict either way; each check skipped
    parsing the header's standard headers (``<algorithm>``, ``<type_traits>``) once per
    checked file and side."""
    import hashlib

    from polycomp.cache import compiler_version, default_dir, precompiled_header_in
    key = hashlib.sha256("\0".join(["g++", compiler_version("g++"), *flags, text]).encode()
                         ).hexdigest()[:24]
    d = os.path.join(default_dir(), "npu-api-pch", key)
    made = precompiled_header_in(d, "kernel_operator.h", text,
                                 ["g++", *flags, "-x", "c++-header"])
    return None if made is None else d


register(NpuBackend())


def _refuse_gathers(state: CompileState) -> None:
    """The NPU target has no indirect load: a gather (an access with data-dependent
    indices, ``Access.indirect``) is a TargetError naming the stage and its line."""
    for st in state.model.statements:
        for a in st.accesses:
            if a.indirect:
                raise TargetError(
                    f"npu: {st.name} gathers from {a.buffer.name} (an index read from a "
                    f"tensor); the NPU target has no indirect load: compile it for a CPU or "
                    f"CUDA target", a.location or getattr(st.stage, "location", None))
