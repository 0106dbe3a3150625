"""The typed compile state of row-reduction kernels (:mod:`.rowreduce`): per kernel its
:class:`~polycomp.scheduler.gpu.rowplan.RowMapping`, the model's estimate and the
preconditions a symbolic row length must meet; the vector loops the ``row_vector:<n>``
marks index; the register row caches and their load statements; the online max-and-sum
pairs.  The mapping pass
records them; the CUDA backend's IR passes and lowering read them
(:mod:`polycomp.hw.cuda.rowreduce`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import islpy as isl

from polycomp import ir

if TYPE_CHECKING:  # pragma: no cover
    from polycomp.scheduler.gpu.rowplan import RowCost, RowMapping, RowShape
    from polycomp.state import CompileState

__all__ = ["RowKernel", "RowVector", "RowCache", "OnlinePair", "RowKernels", "row_kernels"]


@dataclass(frozen=True)
class RowVector:
    """A ``row_vector:<n>`` mark: the loop below it runs over ``width`` consecutive
    columns whose global accesses are ``width * itemsize``-byte aligned (the mapping
    pass chose ``width`` so; the simulator checks it)."""
    width: int
    kernel: int


@dataclass(eq=False)
class RowCache:
    """A row's input ``array`` kept in the registers ``local`` of each thread: the
    extension statement ``load`` (domain ``load[rows..., c]``) stores ``array[rows...,
    c]`` into ``local[index(c)]``, every read of ``array`` in the kernel reads the
    register instead (a :class:`~polycomp.scheduler.promotion.record.Promotion` records
    that redirection).  ``index`` is an isl Aff on the load statement's space."""
    array: ir.Buffer
    local: ir.Buffer
    kernel: int
    load: str
    index: isl.Aff
    rank: int                      # the number of row dimensions


@dataclass(frozen=True)
class OnlinePair:
    """A row maximum and a sum of ``exp(. - max)`` computed in one pass
    (:mod:`polycomp.scheduler.gpu.rowonline`): lowering rewrites ``sum_stmt``'s update
    to the online form reading ``max_local``, the running maximum."""
    kernel: int
    max_stmt: str
    sum_stmt: str
    max_local: ir.Buffer


@dataclass(eq=False)
class RowKernel:
    """One row-reduction kernel: its mapping, the shape the model saw and its estimate,
    and the conditions on the size parameters its code assumes (``width_param`` a
    multiple of ``vector`` and at most ``mapping.bound``) — checked at run time by the
    kernel (``__trap`` when they do not hold) since isl generated code under them."""
    mapping: RowMapping
    shape: RowShape
    cost: RowCost
    symbol: str | None = None          # the symbolic row length's parameter, if one
    width_param: str | None = None     # set when the code assumes something of it
    multiple_of: int = 1
    bound: int | None = None


@dataclass(eq=False)
class RowKernels:
    """Row-reduction facts of one compile, keyed by kernel number / mark index."""
    kernels: dict[int, RowKernel] = field(default_factory=dict)
    vectors: list[RowVector] = field(default_factory=list)
    caches: list[RowCache] = field(default_factory=list)
    online: list[OnlinePair] = field(default_factory=list)


def row_kernels(state: CompileState) -> RowKernels:
    """The row-reduction facts of ``state``'s compile."""
    return state.slot(RowKernels)
