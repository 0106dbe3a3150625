"""The interface every schedule-tree pass implements."""
from __future__ import annotations

import islpy as isl

from polycomp.state import CompileState


class Pass:
    """A schedule-tree rewrite: ``run(schedule, state) -> schedule``.

    Subclasses set ``name`` and document, in their docstring, what they assume of the
    input tree and what they guarantee of the output tree in isl terms.  What later
    steps need goes into the typed fields of the :class:`~polycomp.state.CompileState`.
    """
    name: str = "pass"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<pass {self.name}>"
