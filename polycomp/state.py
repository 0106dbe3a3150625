"""The typed state of one compile, shared by its schedule passes, lowering and IR passes.

A :class:`CompileState` is made by the driver for one (kernel, target, options) and
handed to every step.  Passes read the model, the target and the typed options, and
record what later steps need in typed fields — never in a free dict:

* slots: the typed state of one area of the pipeline, made on first use and found by
  its class (``state.slot(GpuKernels)``): a target family or a feature declares its own
  state class in its own package (the GPU pipeline's per-kernel facts:
  :class:`polycomp.scheduler.gpu.state.GpuKernels`; chain fusion's plans:
  :class:`polycomp.scheduler.chain.plan.ChainPlans`, with the fused CPU programs; the
  tile-local buffers of those programs: :class:`polycomp.scheduler.chain.local.LocalTiles`;
  the promotion engine's applied
  promotions and CPU packing requests / packed operands:
  :class:`polycomp.scheduler.promotion.record.PromotionState`), so this module imports
  nothing above it (no scheduler, no backend) and needs no edit for a new area;
* ``inlined``: arrays recomputed where they are read instead of being stored;
* ``ast_context``: parameter constraints for AST generation (block/thread id ranges),
  and ``ast_context_parts``, the sets it intersects (one per GPU kernel);
* ``remarks``: the decisions passes explain (``polycomp explain`` prints them);
* ``model``: a schedule pass may replace it by an equivalent model whose statements
  the rest of the pipeline lowers (``scop-tensor-cores`` rewrites a C GEMM nest into
  init / update / epilogue statements); the compiled kernel keeps the front end's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import islpy as isl

from polycomp.islutil import intersect_all_params

if TYPE_CHECKING:  # pragma: no cover
    from polycomp.hw.options import CpuOptions, CudaOptions, NpuOptions
    from polycomp.hw.target import Target
    from polycomp.model import PolyModel
    from polycomp.options import Options

S = TypeVar("S")


@dataclass(eq=False)
class CompileState:
    """See the module docstring.  ``options`` may be given as a mapping: it is
    validated by the target's options class."""
    model: PolyModel
    target: Target
    options: Options = None  # type: ignore[assignment]
    remarks: dict[str, list[str]] = field(default_factory=dict)
    inlined: dict[str, Any] = field(default_factory=dict)   # array name -> Stage
    # parameter constraint sets for AST generation, in the order given; ``ast_context``
    # is their intersection (lowering projects them part by part: see
    # :func:`polycomp.lowering.ast_to_ir.build_ast_parts`)
    ast_context_parts: list[isl.Set] = field(default_factory=list)
    slots: dict[type, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from polycomp.hw.registry import backend_for
        from polycomp.options import Options
        if not isinstance(self.options, Options) or \
                not isinstance(self.options, backend_for(self.target).options_class):
            cls = backend_for(self.target).options_class
            self.options = cls.from_mapping(self.options, self.target.name)

    def slot(self, cls: type[S]) -> S:
        """The state of type ``cls`` of this compile, made (``cls()``) on first use."""
        value = self.slots.get(cls)
        if value is None:
            value = self.slots[cls] = cls()
        return value

    @property
    def cpu_options(self) -> CpuOptions:
        """``options`` of a CPU target, typed (CPU passes read their fields here)."""
        from polycomp.hw.options import CpuOptions
        assert isinstance(self.options, CpuOptions), type(self.options).__name__
        return self.options

    @property
    def cuda_options(self) -> CudaOptions:
        """``options`` of a CUDA target, typed (CUDA passes read their fields here)."""
        from polycomp.hw.options import CudaOptions
        assert isinstance(self.options, CudaOptions), type(self.options).__name__
        return self.options

    @property
    def npu_options(self) -> NpuOptions:
        """``options`` of an NPU target, typed (NPU passes read their fields here)."""
        from polycomp.hw.options import NpuOptions
        assert isinstance(self.options, NpuOptions), type(self.options).__name__
        return self.options

    def note(self, pass_name: str, text: str) -> None:
        """Record a decision of ``pass_name`` for ``polycomp explain``."""
        self.remarks.setdefault(pass_name, []).append(text)

    @property
    def notes(self) -> dict[str, list[str]]:
        return self.remarks

    def restrict_ast_context(self, constraints: isl.Set) -> None:
        """Intersect the AST context with parameter ``constraints`` (one more part of
        ``ast_context_parts``; nothing is intersected here: one GPU kernel after the
        other, the intersection grew with every kernel and cost time in its size)."""
        self.ast_context_parts.append(constraints)

    @property
    def ast_context(self) -> isl.Set | None:
        """The intersection of ``ast_context_parts`` (None when there are none)."""
        return intersect_all_params(self.ast_context_parts)
