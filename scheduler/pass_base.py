"""The interface every schedule-tree pass implements."""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl


@dataclass(eq=False)
class ScheduleContext:
    """What a pass may read besides the schedule: the model, the target and options.

    ``notes`` collects decisions passes want ``polycomp explain`` to show (e.g. why a
    promotion was refused), keyed by pass name.  ``attrs`` carries facts later stages
    need (tile configurations, GPU launch geometry, promoted buffers); the driver copies
    it into ``LoweredFunc.attrs``.
    """
    model: object                    # polycomp.model.PolyModel
    target: object                   # polycomp.hw.target.Target
    options: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)

    def note(self, pass_name: str, text: str) -> None:
        self.notes.setdefault(pass_name, []).append(text)


class Pass:
    """A schedule-tree rewrite: ``run(schedule, ctx) -> schedule``.

    Subclasses set ``name`` and document, in their docstring, what they assume of the
    input tree and what they guarantee of the output tree in isl terms.
    """
    name: str = "pass"

    def run(self, schedule: isl.Schedule, ctx: ScheduleContext) -> isl.Schedule:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<pass {self.name}>"
