"""The NPU schedule passes' typed compile state: the plans their marks index.

Each NPU mark of the schedule tree (declared in :mod:`polycomp.scheduler.common.marks`)
is ``<kind>:<n>``; ``n`` indexes the list of its kind in :class:`NpuPlans`, the state
slot of the NPU passes (``npu_plans(state)``):

| mark | list | payload |
|------|------|---------|
| ``npu_cube:<n>`` | ``cubes`` | :class:`CubePlan`: a (batch) matmul stage, tiles, epilogue |
| ``npu_pingpong:<n>`` | ``pingpongs`` | :class:`PingPong`: the level the loop rotates |
| ``npu_conv:<n>`` | ``convs`` | :class:`ConvPlan`: a convolution as implicit GEMM |
| ``npu_vector:<n>`` | ``vectors`` | :class:`VectorPlan`: stages on the vector unit, roles |
| ``npu_phases:<n>`` | ``phases`` | :class:`PhasesPlan`: phases, each a cube or vector plan |
| ``npu_chain:<n>`` | ``chains`` | ``NpuChainPlan`` (:mod:`..chain.npu_plan`): a fused chain |

The schedule passes record them; the NPU lowering (``npu-lower``,
:mod:`polycomp.hw.npu.lower`) finds the marks in the lowered function and builds the
NPU IR from these payloads.  Nothing here is parsed from a mark's name.

Some decisions need an answer only the lowering can give (how many UB bytes the vector
epilogue of a tile needs; whether the vector mapping takes a group of stages; which
buffers a fused chain's program allocates).  The passes ask it through
:class:`NpuLoweringModel`, which the NPU backend hands to the passes it makes, so that
``scheduler/`` never imports the backend package.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .cube import CubeTiles
from .phases import SubGraph
from .view import VectorView

if TYPE_CHECKING:  # pragma: no cover
    from polycomp.hw.target import Target
    from polycomp.scheduler.chain.npu_detect import NpuChain
    from polycomp.scheduler.chain.npu_plan import NpuChainPlan, NpuChainTiles
    from polycomp.scheduler.common.contraction import Contraction
    from polycomp.state import CompileState

    from .conv import ConvMatch

T = TypeVar("T")

__all__ = ["CubePlan", "ConvPlan", "VectorPlan", "PhasePlan", "PhasesPlan", "PingPong",
           "NpuPlans", "npu_plans", "NpuLoweringModel"]


@dataclass(frozen=True)
class PingPong:
    """The loop below the mark runs over ``copies`` rotating copies of the cube's
    ``level`` buffers (``L1``: the A/B tiles, ``L0``: the L0A/L0B tiles)."""
    level: str
    copies: int


@dataclass(frozen=True, eq=False)
class CubePlan:
    """A (batch) matmul stage ``C[b?, i, j] = sum_k A[b?, i, k] * B[b?, k, j]`` on the
    cube: the stage, its contraction, whether it is batched, the operand and output
    dtypes, the tiles, and the elementwise stages after it that run as a vector
    epilogue on each output tile (empty: the tile goes to GM with the output cast).
    ``graph``: the kernel or phase it belongs to (tensor names and stages)."""
    stage: str
    contraction: Contraction
    batched: bool
    in_dtype: str
    out_dtype: str
    tiles: CubeTiles
    graph: Any
    epilogue: tuple[str, ...] = ()
    #: int8 operands: the constant per-tensor scale of the one epilogue stage
    #: ``cast(cast(C, float32) * scale, float16)``, applied by Fixpipe (``DEQF16``)
    #: instead of a vector epilogue
    deq_scale: float | None = None
    #: int8 operands: the 1-d float32 input ``scale`` of the one epilogue stage
    #: ``cast(cast(C[i, j], float32) * scale[j], float16)``, applied by Fixpipe per
    #: column (``VDEQF16``, option ``fixpipe_quant``) instead of a vector epilogue
    deq_tensor: str | None = None
    #: the type Fixpipe writes with ``deq_scale`` / ``deq_tensor``: float16 (``DEQF16``
    #: / ``VDEQF16``) or int8, the requantisation ``cast(min(max(cast(C, float32) * s,
    #: -128.0), 127.0), int8)`` (``REQ8`` / ``VREQ8``)
    deq_out: str = "float16"
    #: without an epilogue: the most ``k`` parts a tile of the last, partial round of
    #: output tiles is cut into (:func:`~.cube.tail_split`; 1: none)
    k_split: int = 1


@dataclass(frozen=True, eq=False)
class ConvPlan:
    """A conv2d NCHW stage as implicit GEMM on the cube (the stage, its match, the
    tiles) and the elementwise stages after it (bias, relu) as its vector epilogue."""
    stage: str
    conv: ConvMatch
    out_dtype: str
    tiles: CubeTiles
    graph: Any
    epilogue: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class VectorPlan:
    """Stages mapped to the vector unit: the kernel or phase (``graph``: a kernel graph
    or a :class:`~.phases.SubGraph`) and its dimension roles (:mod:`.view`)."""
    graph: Any
    view: VectorView

    @property
    def stages(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.graph.stages)


@dataclass(frozen=True, eq=False)
class PhasePlan:
    """One phase: its plan (a cube or a vector program; ``npu-map`` also records it in
    ``NpuPlans.cubes`` / ``vectors`` and marks its stages with that index) and its
    stages as a kernel."""
    plan: CubePlan | VectorPlan
    graph: SubGraph

    @property
    def kind(self) -> str:
        return "cube" if isinstance(self.plan, CubePlan) else "vector"


@dataclass(frozen=True, eq=False)
class PhasesPlan:
    """A kernel cut into phases run one after the other, joined by GM workspaces."""
    graph: Any
    phases: tuple[PhasePlan, ...]


@dataclass(eq=False)
class NpuPlans:
    """The NPU plans of one compile; each list is indexed by its marks' ``<n>``."""
    cubes: list[CubePlan] = field(default_factory=list)
    pingpongs: list[PingPong] = field(default_factory=list)
    convs: list[ConvPlan] = field(default_factory=list)
    vectors: list[VectorPlan] = field(default_factory=list)
    phases: list[PhasesPlan] = field(default_factory=list)
    chains: list[NpuChainPlan] = field(default_factory=list)

    @staticmethod
    def push(lst: list[T], plan: T) -> int:
        """Append ``plan`` to ``lst`` (one of the lists above); its index, the ``<n>``
        of the mark that refers to it."""
        lst.append(plan)
        return len(lst) - 1


def npu_plans(state: CompileState) -> NpuPlans:
    """The NPU plans of ``state``'s compile."""
    return state.slot(NpuPlans)


class NpuLoweringModel(Protocol):
    """What the NPU schedule passes ask the NPU lowering before they decide (the NPU
    backend implements it: :class:`polycomp.hw.npu.lower.LoweringModel`)."""

    def epilogue_ub(self, graph: Any, stage: Any, conv: ConvMatch | None,
                    copies: int) -> Callable[[int, int], int]:
        """``(m0, n0) -> UB bytes`` of the vector epilogue of ``stage`` (the stages of
        ``graph`` after it) on an ``m0 x n0`` output tile, its rotating buffers with
        ``copies`` copies; a :class:`~polycomp.errors.TargetError` when the vector
        mapping does not take those stages."""
        ...

    def check_vector(self, graph: Any) -> None:
        """A :class:`~polycomp.errors.TargetError` naming the stage when the vector
        mapping does not take ``graph`` (a kernel or a phase)."""
        ...

    def chain_cycles(self, chain: NpuChain, dims: Any, tiles: NpuChainTiles,
                     target: Target) -> tuple[int, int]:
        """Predicted cycles ``(fused, unfused)`` of the chain with extents ``dims``
        (a :class:`~polycomp.scheduler.chain.movement_model.ChainDims`) on ``target``."""
        ...

    def chain_usage(self, graph: Any, chain: NpuChain, tiles: NpuChainTiles,
                    double_buffer: bool,
                    target: Target) -> tuple[tuple[str, int, int], ...] | None:
        """``(level, bytes used, capacity)`` per level of the fused chain program's
        buffers with these tiles, or None when they do not fit ``target``."""
        ...
