"""The NPU IR passes: rewrites of an :class:`~.program.NpuModule` that the pass manager
runs after the lowering stage ``npu-lower`` (:mod:`.lower`), timed and dumped like
every other step (``polycomp explain -t npu`` shows the NPU IR after each).

* ``npu-isa``: every logical instruction becomes the Ascend C API calls that implement
  it (:mod:`.isa`, whose docstring states what it assumes and guarantees).
* ``npu-ub-reuse``: UB tiles of the vector pipe whose live ranges do not overlap share
  storage (:mod:`.ub_reuse`, whose docstring states what it assumes and guarantees).
* ``npu-double-buffer`` (option ``double_buffer``): every buffer the lowering marked
  ``pingpong`` — its slots indexed by a rotation counter (an L1 stage ``ko``, an L0
  step ``ki``, an output tile, a vector tile or load) — gets two copies, slot ``counter
  % 2``, so that the pipe filling one copy overlaps the pipe working on the other.
  Assumes: one slot index per buffer (its counter), a new value of the counter per
  iteration of the loop that fills the buffer.  Guarantees: the same instructions on
  the same data; only buffer copies and slot indices change (the tile sizes the
  schedule passes fitted already count both copies).  The fused chain program double
  buffers by construction (two buffer sets and a skewed loop, :mod:`.lower_chain`) and
  has no ``pingpong`` buffers.
* ``npu-ub-banks`` (option ``ub_banks``): UB buffers that vector calls read together
  placed in different halves of the 16 bank groups (:mod:`.ub_banks`, whose docstring
  states what it assumes and guarantees).
* ``npu-sync``: the ``SetFlag``/``WaitFlag`` pairs between pipes, placed by dependence
  analysis on the buffers' slots (:mod:`.sync`, whose docstring states what it assumes
  and guarantees); the simulator's race check proves them on every run.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from polycomp.pass_manager import TargetPass
from polycomp.state import CompileState

from .isa import NpuIsaPass
from .program import Kernel, LocalBuf, NpuModule, Program, Slot, map_slots
from .sync import place_kernel_flags
from .ub_banks import place_kernel
from .ub_reuse import reuse_kernel


class NpuPass(TargetPass):
    """A rewrite of the NPU IR: ``run_kernel`` on the module's kernel."""

    def run(self, mod: Any, state: CompileState) -> NpuModule:
        assert isinstance(mod, NpuModule), type(mod).__name__
        return mod.with_program(self.run_kernel(mod.program, state))

    def run_kernel(self, k: Kernel, state: CompileState) -> Kernel:
        raise NotImplementedError


def double_buffer_kernel(k: Kernel, copies: int = 2) -> Kernel:
    return k.map_programs(lambda p: double_buffer(p, copies))


def double_buffer(prog: Program, copies: int = 2) -> Program:
    """``prog`` with every ``pingpong`` buffer in ``copies`` copies (module docstring)."""
    new: dict[str, LocalBuf] = {b.name: dataclasses.replace(b, copies=copies)
                                for b in prog.buffers if b.pingpong and b.copies == 1}
    if not new:
        return prog

    def slot(s: Slot) -> Slot:
        b = new.get(s.buf.name)
        return s if b is None else dataclasses.replace(s, buf=b, index=s.index % copies)
    return dataclasses.replace(prog, buffers=tuple(new.get(b.name, b) for b in prog.buffers),
                               body=map_slots(prog.body, slot))


class NpuUbReusePass(NpuPass):
    """See :mod:`.ub_reuse`."""
    name = "npu-ub-reuse"

    def run_kernel(self, k: Kernel, state: CompileState) -> Kernel:
        return reuse_kernel(k)


class NpuDoubleBufferPass(NpuPass):
    """See the module docstring."""
    name = "npu-double-buffer"

    def run_kernel(self, k: Kernel, state: CompileState) -> Kernel:
        return double_buffer_kernel(k) if state.npu_options.double_buffer else k


class NpuUbBanksPass(NpuPass):
    """See :mod:`.ub_banks`."""
    name = "npu-ub-banks"

    def run_kernel(self, k: Kernel, state: CompileState) -> Kernel:
        if not state.npu_options.ub_banks:
            return k
        return place_kernel(k, state.target.capacity("UB"))


class NpuSyncPass(NpuPass):
    """See the module docstring."""
    name = "npu-sync"

    def run_kernel(self, k: Kernel, state: CompileState) -> Kernel:
        return place_kernel_flags(k)


def npu_passes() -> list[TargetPass]:
    """The NPU IR passes, in order (the API calls first; flags after double buffering:
    they follow slots)."""
    return [NpuIsaPass(), NpuUbReusePass(), NpuDoubleBufferPass(), NpuUbBanksPass(),
            NpuSyncPass()]
