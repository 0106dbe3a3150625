"""The typed state of one compile, shared by its schedule passes, lowering and IR passes.

A :class:`CompileState` is made by the driver for one (kernel, target, options) and
handed to every step.  Passes read the model, the target and the typed options, and
record what later steps need in typed fields — never in a free dict:

* ``gpu``: per-kernel facts of the GPU pipeline (launch geometry, tile configurations,
  Tensor Core plans) keyed by the kernel number of its ``kernel:<n>`` mark;
* ``promotions``: the promotion engine's decisions that were applied (buffers, box
  offsets, copy statements), which lowering turns into accesses and copies;
* ``pack_requests`` / ``packs``: CPU packing — the requests the backbone tiling placed
  (mark ``cpu_pack_request:<n>``) and the packed operands the pack pass decided (mark
  ``cpu_pack:<n>``), which the IR packing pass realises;
* ``inlined``: arrays recomputed where they are read instead of being stored;
* ``ast_context``: parameter constraints for AST generation (block/thread id ranges);
* ``remarks``: the decisions passes explain (``polycomp explain`` prints them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import islpy as isl

from polycomp.islutil import intersect_params

if TYPE_CHECKING:  # pragma: no cover
    from polycomp.hw.cpu.options import CpuOptions
    from polycomp.hw.cuda.options import CudaOptions
    from polycomp.hw.target import Target
    from polycomp.model import PolyModel
    from polycomp.options import Options
    from polycomp.scheduler.gpu.baseline import BaselineMapping
    from polycomp.scheduler.gpu.map import KernelLaunch
    from polycomp.scheduler.gpu.tile import TileConfig
    from polycomp.scheduler.promotion.record import PackedOperand, PackRequest, Promotion
    from polycomp.scheduler.tensorcore.tile import TcPlan


@dataclass(eq=False)
class GpuKernels:
    """Facts about the GPU kernels of a compile, keyed by kernel number."""
    launches: dict[int, KernelLaunch] = field(default_factory=dict)
    tile_configs: dict[int, TileConfig] = field(default_factory=dict)
    # the last index of every output dimension of a kernel (full-tile isolation)
    output_last: dict[int, list[Any]] = field(default_factory=dict)
    # Tensor Core plans, keyed by fusion group index
    tc_plans: dict[int, TcPlan] = field(default_factory=dict)
    # the untiled baseline mapping of each kernel (gpu='baseline', C loop nests)
    baseline: dict[int, BaselineMapping] = field(default_factory=dict)


@dataclass(eq=False)
class CompileState:
    """See the module docstring.  ``options`` may be given as a mapping: it is
    validated by the target's options class."""
    model: PolyModel
    target: Target
    options: Options = None  # type: ignore[assignment]
    remarks: dict[str, list[str]] = field(default_factory=dict)
    gpu: GpuKernels = field(default_factory=GpuKernels)
    promotions: list[Promotion] = field(default_factory=list)
    pack_requests: list[PackRequest] = field(default_factory=list)
    packs: list[PackedOperand] = field(default_factory=list)
    inlined: dict[str, Any] = field(default_factory=dict)   # array name -> Stage
    ast_context: isl.Set | None = None
    npu_schedule: isl.Schedule | None = None   # after the NPU passes (the builder reads it)

    def __post_init__(self) -> None:
        from polycomp.hw.registry import backend_for
        from polycomp.options import Options
        if not isinstance(self.options, Options) or \
                not isinstance(self.options, backend_for(self.target).options_class):
            cls = backend_for(self.target).options_class
            self.options = cls.from_mapping(self.options, self.target.name)

    @property
    def cpu_options(self) -> CpuOptions:
        """``options`` of a CPU target, typed (CPU passes read their fields here)."""
        from polycomp.hw.cpu.options import CpuOptions
        assert isinstance(self.options, CpuOptions), type(self.options).__name__
        return self.options

    @property
    def cuda_options(self) -> CudaOptions:
        """``options`` of a CUDA target, typed (CUDA passes read their fields here)."""
        from polycomp.hw.cuda.options import CudaOptions
        assert isinstance(self.options, CudaOptions), type(self.options).__name__
        return self.options

    def note(self, pass_name: str, text: str) -> None:
        """Record a decision of ``pass_name`` for ``polycomp explain``."""
        self.remarks.setdefault(pass_name, []).append(text)

    @property
    def notes(self) -> dict[str, list[str]]:
        return self.remarks

    def restrict_ast_context(self, constraints: isl.Set) -> None:
        """Intersect the AST context with parameter ``constraints``."""
        self.ast_context = constraints if self.ast_context is None \
            else intersect_params(self.ast_context, constraints)
