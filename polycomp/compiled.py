"""The result of one compile: :class:`CompiledKernel`.

It sits below the driver (which makes it) so that the target registry's backend
interface (:mod:`polycomp.hw.registry`: ``load(ck)``, ``runner(ck)``, ``execute(ck, ...)``)
can name it without importing the driver.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import islpy as isl

from polycomp.ir import LoweredFunc
from polycomp.model import FrontEndKernel, PolyModel
from polycomp.pass_manager import PassRecord
from polycomp.state import CompileState

if TYPE_CHECKING:  # pragma: no cover
    from polycomp.hw.registry import Backend
    from polycomp.hw.target import Target
    from polycomp.options import Options

__all__ = ["CompiledKernel"]


@dataclass(eq=False)
class CompiledKernel:
    """Every product of one compile: the front end's kernel (a ``@tensor_expr``
    :class:`~polycomp.frontend.dsl.Kernel` or a C :class:`~polycomp.frontend.c_reader.CKernel`),
    the target, the model, the final schedule tree, the IR after the target's IR passes
    (``ir``, what the interpreter or simulator runs) and after code generation
    (``final_ir``, what the source is printed from), the source, the step records and
    the typed compile state."""
    kernel: FrontEndKernel
    target: Target
    model: PolyModel
    schedule: isl.Schedule
    ir: LoweredFunc             # after the target's IR passes (interpretable)
    # as printed: the flattened LoweredFunc (C, CUDA), or the backend's own target IR
    # after its target passes (the NPU's NpuModule, polycomp.hw.npu.program); either
    # has the kernel's name, params, inputs, outputs and inout
    final_ir: LoweredFunc | Any
    source: str
    records: list[PassRecord] = field(default_factory=list)
    state: CompileState | None = None

    @property
    def name(self) -> str:
        return self.final_ir.name

    @property
    def backend(self) -> Backend:
        from polycomp.hw.registry import backend_for
        return backend_for(self.target)

    @property
    def options(self) -> Options:
        assert self.state is not None
        return self.state.options

    @property
    def notes(self) -> dict[str, list[str]]:
        return self.state.remarks if self.state is not None else {}

    def suffix(self) -> str:
        return self.backend.suffix
