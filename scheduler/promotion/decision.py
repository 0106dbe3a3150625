"""Promotion decisions: promote a reference group to a memory level under a scope, or
say why not.

A :class:`PromotionDecision` is made for one (reference group, level, scope).  The
level is a name of the target's memory hierarchy (``state.target.memory``: "shared",
"registers", "L1", "L2", ...); the scope is where the local copy lives (a promotion
site: "kernel 0" for a GPU kernel's tile, the band above a CPU pack mark).  A refused
decision carries a :class:`Refusal` and the numbers behind it; :meth:`remark` is the
text ``state.note`` records and ``polycomp explain`` prints — derived from the
structured fields, never parsed back.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polycomp import dtypes as dt
from polycomp.errors import PolycompInternalError

if TYPE_CHECKING:  # pragma: no cover
    from polycomp.hw.memory import CopyRule
    from polycomp.scheduler.promotion.footprint import ScopedFootprint
    from polycomp.scheduler.promotion.reference import ReferenceGroup


class Refusal(enum.Enum):
    """Why a group is not promoted."""
    UNBOUNDED = "unbounded footprint"
    NO_REUSE_COALESCED = "no reuse, coalesced"
    OVER_BUDGET = "over budget"
    SHARED_BETWEEN_THREADS = "shared between threads"
    NO_REUSE = "no reuse"
    NO_STRIDED_BOX = "no strided box"
    EMPTY = "empty footprint"
    SCALAR = "a zero-dimensional array (one value, read through the cache)"
    COPY_RANK = ("fewer array dimensions than thread dimensions (a baseline kernel's copy "
                 "is dealt to its threads dimension by dimension)")


# how remarks name a level
_LEVEL_TEXT = {"shared": "shared memory", "registers": "registers"}


@dataclass(eq=False)
class PromotionDecision:
    """``group`` promoted to ``level`` under ``scope`` (``reason is None``), or not.

    ``need`` and ``budget`` are the numbers of an over-budget refusal (bytes, or
    register elements); ``motive`` why a promotion pays ("reuse", "uncoalesced");
    ``loads``/``stores``: the copy-in / copy-out statements the promotion needs (the
    copy is then made as the target's copy rule says); ``copy``: that rule when the
    use chose a variant (Tensor Core staging: global -> shared ``async``, cp.async),
    None for the level pair's default rule."""
    group: ReferenceGroup
    level: str
    scope: str
    footprint: ScopedFootprint | None = None
    reason: Refusal | None = None
    need: int = 0
    budget: int = 0
    motive: str = ""
    loads: bool = True
    stores: bool = False
    copy: CopyRule | None = None

    @property
    def promoted(self) -> bool:
        return self.reason is None

    def refuse(self, reason: Refusal, need: int = 0, budget: int = 0) -> PromotionDecision:
        self.reason, self.need, self.budget = reason, need, budget
        return self

    # ----------------------------------------------------------------- remarks
    def remark(self) -> str:
        where = f"{self.scope}: {self.group.name}"
        if self.promoted:
            return f"{where} {self._promoted_text()}"
        if self.level == "shared":
            return f"{where} not promoted: {self._refusal_text()}"
        return f"{where} not promoted to {self._level_text()}: {self._refusal_text()}"

    def _level_text(self) -> str:
        return _LEVEL_TEXT.get(self.level, self.level)

    def _promoted_text(self) -> str:
        fp = self.footprint
        if fp is None:
            raise PolycompInternalError(f"{self.group.name}: promoted without a footprint")
        box = fp.box
        if self.level == "registers":
            return (f"promoted to registers {list(box.sizes)} per thread (stride "
                    f"{list(box.strides)})" + ("; loaded first" if self.loads else "")
                    + ("; stored back" if self.stores else "; never written to global memory"))
        if fp.layout.kind == "swizzled":
            via = f", {self.copy.mechanism}" if self.copy is not None else ""
            return (f"staged in {self._level_text()}: box {list(box.sizes)} x "
                    f"{fp.layout.stages} stage(s), swizzled ({fp.bytes()} bytes; "
                    f"{self.motive}{via})")
        if fp.layout.kind == "tma-swizzled":
            lay = fp.layout
            span = lay.width * dt.itemsize(self.group.array.dtype)
            return (f"staged in {self._level_text()}: box {list(box.sizes)} x {lay.stages} "
                    f"stage(s), {box.sizes[lay.dim] // lay.width} panel(s) of {lay.rows} x "
                    f"{lay.width} along dimension {lay.dim}, {span}-byte swizzle "
                    f"({fp.bytes()} bytes; {self.motive}, TMA)")
        if fp.layout.kind == "packed-panel":
            grouped = (f", groups of {fp.layout.group} along dimension {fp.layout.group_dim}"
                       if fp.layout.group > 1 else "")
            return (f"packed into {self._level_text()}: box {list(box.sizes)}, panels of "
                    f"{fp.layout.width} along dimension {fp.layout.dim}{grouped} "
                    f"({fp.bytes()} bytes)")
        return (f"promoted to {self._level_text()} {list(box.sizes)} ({fp.bytes()} bytes; "
                f"{self.motive})")

    def _refusal_text(self) -> str:
        r = self.reason
        if r is None:
            raise PolycompInternalError(f"{self.group.name}: a promotion has no refusal")
        if r is Refusal.NO_REUSE_COALESCED:
            return "no reuse within a tile and accesses already coalesced"
        if r is Refusal.OVER_BUDGET:
            if self.level == "registers":
                return f"over register budget ({self.need} elements)"
            return f"over budget ({self.need} > {self.budget} bytes of {self._level_text()})"
        if r is Refusal.SHARED_BETWEEN_THREADS:
            return "shared between threads (an access is not at the thread's own output point)"
        if r is Refusal.NO_STRIDED_BOX:
            return "no strided box for the per-thread footprint"
        return r.value
