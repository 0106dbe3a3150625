"""The GPU pipeline's typed compile state: facts about the CUDA kernels of a compile,
keyed by the kernel number of their ``kernel:<n>`` mark (or by fusion group for the
Tensor Core plans).  Schedule passes of ``scheduler/gpu`` and ``scheduler/tensorcore``
record them; the CUDA backend's IR passes and code generation read them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from polycomp.scheduler.gpu.baseline import BaselineMapping
    from polycomp.scheduler.gpu.map import KernelLaunch
    from polycomp.scheduler.gpu.tile import TileConfig
    from polycomp.scheduler.tensorcore.tile import TcPlan
    from polycomp.state import CompileState

__all__ = ["GpuKernels", "gpu_kernels"]


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


def gpu_kernels(state: CompileState) -> GpuKernels:
    """The GPU kernel facts of ``state``'s compile."""
    return state.slot(GpuKernels)
