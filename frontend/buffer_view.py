"""The read-only view of an :class:`~polycomp.ir.Buffer` that kernel arguments share:
the DSL's :class:`~polycomp.frontend.dsl.Tensor` and the C reader's
:class:`~polycomp.frontend.c_program.CArray` both hold a ``buffer`` and answer
``name``, ``shape`` and ``dtype`` from it."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from polycomp.ir import Buffer


class BufferView:
    """Mixin: ``name``, ``shape`` and ``dtype`` of ``self.buffer``."""

    __slots__ = ()
    if TYPE_CHECKING:  # provided by the class that mixes this in
        buffer: Buffer

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def shape(self) -> tuple:
        return self.buffer.shape

    @property
    def dtype(self) -> str:
        return self.buffer.dtype
